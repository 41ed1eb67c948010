"""The simulator's vector engine (one generator for all ranks) against the per-rank engine:
identical clocks and counts, bit for bit, for every algorithm it runs; ring allreduce at
4096 ranks and 64 MiB; and the cases it must hand back to the per-rank engine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.engines.sim import NotVectorizableError, TwoLevel
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import SYMMETRIC, simulate

FIELDS = ("clocks", "messages_sent", "bytes_sent", "messages_recv", "bytes_recv",
          "inter_bytes_sent")
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 24, 32]
COUNTS = [0, 1, 5, 64, 1000]
#: algorithms whose control flow does not depend on the rank: the vector engine must run
#: them at every p (a change that silently sends them back to the per-rank engine fails here)
BRANCH_FREE = {
    ("allreduce", "ring"), ("allreduce", "segmented_ring"), ("allreduce", "allgather_reduce"),
    ("allgather", "ring"), ("allgather", "bruck"),
    ("allgatherv", "ring"), ("allgatherv", "bruck"),
    ("reduce_scatter_block", "ring"), ("reduce_scatter_block", "pairwise"),
    ("reduce_scatter", "ring"), ("reduce_scatter", "pairwise"),
    ("reduce_scatter_block", "circulant"), ("reduce_scatter", "circulant"),
    ("allreduce", "circulant"),
    ("alltoall", "pairwise"), ("barrier", "dissemination"),
}
# A model whose three terms differ in magnitude, so a swapped term changes the clocks.
MODEL = Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10)
# ... and with LogP's software overhead (o_call per call, o_msg per message posted) and a
# copy term (delta per byte copied: each rank's own block copied in, uneven in the v-forms)
MODEL_O = Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10, o_call=1.1e-5, o_msg=4.7e-7,
                delta=2.9e-11)
MODELS = pytest.mark.parametrize("model", [MODEL, MODEL_O], ids=["abg", "abg+o"])


def _same(a: object, b: object, what: tuple) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert np.array_equal(x, y), (what, f, x[:8], y[:8])
    assert a.time == b.time, what  # type: ignore[attr-defined]


def _both(coll: str, p: int, count: int, **kw: object) -> str | None:
    """Simulate with the per-rank engine and with ``auto``; assert identical results when
    ``auto`` ran the vector engine.  The engine ``auto`` ran, or None where a restriction
    forbids the call."""
    try:
        ref = simulate(coll, p, count, engine="rank", **kw)  # type: ignore[arg-type]
    except registry.RestrictionError:
        return None
    got = simulate(coll, p, count, **kw)  # type: ignore[arg-type]
    if got.engine == "vector":
        _same(ref, got, (coll, p, count, kw))
    return got.engine


def test_branch_free_set_is_registered() -> None:
    for coll, name in BRANCH_FREE:
        assert coll in SYMMETRIC
        registry.get(coll, name)


@MODELS
@pytest.mark.parametrize("coll", sorted(SYMMETRIC))
def test_vector_engine_equals_per_rank_engine(coll: str, model: Model) -> None:
    used = set()
    for alg in registry.variants(coll):
        for p in SIZES:
            if alg.why_not(p) is not None:
                continue
            for count in COUNTS if coll != "barrier" else [0]:
                for in_place in (False, True) if coll != "barrier" else (False,):
                    engine = _both(coll, p, count, algorithm=alg.name, model=model,
                                   in_place=in_place)
                    if engine == "vector":
                        used.add((alg.name, p))
                    elif engine == "rank" and (coll, alg.base) in BRANCH_FREE:
                        pytest.fail(f"{coll}/{alg.name} p={p} count={count} ran per rank")
    assert used, f"the vector engine ran no {coll} algorithm"


@MODELS
def test_node_counts_match(model: Model) -> None:
    """Inter-node bytes are counted the same way (nodes of 3 ranks, flat model)."""
    for p in (4, 7, 12):
        nodes = [r // 3 for r in range(p)]
        for coll, name in sorted(BRANCH_FREE):
            ref = simulate(coll, p, 10, algorithm=name, nodes=nodes, engine="rank", model=model)
            got = simulate(coll, p, 10, algorithm=name, nodes=nodes, engine="vector",
                           model=model)
            _same(ref, got, (coll, name, p))
            if coll != "barrier":
                assert got.inter_bytes_sent.sum() > 0


TWO = [TwoLevel(k, intra, Model(alpha=9e-6, beta=2e-9, gamma=MODEL.gamma))
       for k in (2, 3, 4) for intra in (MODEL, MODEL_O)]


@pytest.mark.parametrize("two", TWO,
                         ids=lambda m: f"k{m.ranks_per_node}{'+o' if m.intra.o_msg else ''}")
def test_two_level_model(two: TwoLevel) -> None:
    """Two-level model: where each node's port has one user (rings over consecutive ranks) the
    vector engine runs and equals the per-rank engine; elsewhere it hands over."""
    used = 0
    for coll in sorted(SYMMETRIC):
        for alg in registry.variants(coll):
            for p in (2, 3, 5, 8, 12, 13):
                if alg.why_not(p) is not None:
                    continue
                for count in (0, 7, 100):
                    used += _both(coll, p, count, algorithm=alg.name, model=two) == "vector"
    ring = simulate("allreduce", 12, 100, algorithm="ring", model=two)
    assert ring.engine == "vector"
    assert ring.inter_bytes_sent.sum() > 0
    assert used > 50


def test_ring_allreduce_at_4096_ranks_64_mib() -> None:
    """Issue 5's scale: 4096 ranks, 64 MiB per rank, 8190 rounds, 33.5 M messages, cost-only.
    Exact traffic (2 n (p-1)/p each way, 2 (p-1) messages) and the registry's formula."""
    p, n = 4096, 64 << 20
    r = simulate("allreduce", p, n // 8, algorithm="ring", model=MODEL)
    assert r.engine == "vector"
    assert (r.messages_sent == 2 * (p - 1)).all()
    assert (r.messages_recv == 2 * (p - 1)).all()
    assert (r.bytes_sent == 2 * n * (p - 1) // p).all()
    assert (r.bytes_recv == r.bytes_sent).all()
    want = registry.get("allreduce", "ring").cost(p, float(n), MODEL.alpha, MODEL.beta,
                                                 MODEL.gamma)
    assert r.time == pytest.approx(want, rel=1e-12)
    assert np.ptp(r.clocks) == 0  # a symmetric schedule: every rank finishes together
    # with overhead: o_call once, 2 o_msg per round (one send, one receive), identical clocks
    o_only = dataclasses.replace(MODEL_O, delta=0.0)  # (ring allreduce copies nothing else)
    o = simulate("allreduce", p, n // 8, algorithm="ring", model=o_only)
    assert o.engine == "vector"
    assert o.time == pytest.approx(want + o_only.o_call + 2 * (p - 1) * 2 * o_only.o_msg,
                                   rel=1e-12)


@MODELS
def test_uneven_blocks_skew_the_clocks_identically(model: Model) -> None:
    """n not divisible by p: blocks differ by one element, ranks finish at different times;
    the vector engine reproduces each rank's clock."""
    ref = simulate("allreduce", 13, 1000 * 13 + 7, algorithm="ring", model=model, engine="rank")
    got = simulate("allreduce", 13, 1000 * 13 + 7, algorithm="ring", model=model)
    assert got.engine == "vector"
    assert np.ptp(ref.clocks) > 0
    _same(ref, got, "uneven")


def test_what_runs_per_rank() -> None:
    # rank-dependent control flow (recursive doubling folds ranks beyond 2^k): the batch
    # engine (tests/unit/test_sim_batch.py) runs it
    with pytest.raises(NotVectorizableError, match="different ways"):
        simulate("allreduce", 6, 100, algorithm="recursive_doubling", engine="vector")
    assert simulate("allreduce", 6, 100, algorithm="recursive_doubling").engine == "batch"
    # rooted collectives, data mode, two-level model (shared NICs are served in order)
    with pytest.raises(NotVectorizableError):
        simulate("bcast", 8, 100, algorithm="binomial", engine="vector")
    with pytest.raises(NotVectorizableError):
        simulate("allreduce", 8, 100, algorithm="ring", data=True, engine="vector")
    # two-level model: a node's shared port used by several of its ranks
    two = TwoLevel(4, Model(), Model(alpha=1e-5))
    with pytest.raises(NotVectorizableError, match="two ranks of a node"):
        simulate("alltoall", 8, 100, algorithm="pairwise", model=two, engine="vector")
    with pytest.raises(ValueError, match="engine"):
        simulate("allreduce", 8, 100, engine="gpu")


def test_one_extra_byte_is_counted_by_both_engines() -> None:
    """A ring step that sends one element too many: the vector engine counts it exactly as
    the per-rank engine does, so the traffic tests fail on either."""
    from mpicoll.algorithms.schedule import Context, Schedule
    from mpicoll.engines.sim import Simulator
    from mpicoll.engines.vector import run_vector

    def extra(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
        p, r = ctx.size, ctx.rank
        yield ctx.sendrecv(ctx.scratch(buf.size + 1), (r + 1) % p,
                           ctx.scratch(buf.size + 1), (r - 1) % p)

    buf = np.zeros(10)
    dt = np.dtype(np.float64)
    vec = run_vector(Simulator(5, data=False), extra, MPI.DOUBLE, dt,
                     lambda ctx: (buf, MPI.SUM))
    sim = Simulator(5, data=False)
    per_rank = sim.run([extra(sim.context(r, MPI.DOUBLE, dt), buf, MPI.SUM) for r in range(5)])
    for f in FIELDS:
        assert np.array_equal(vec[f], per_rank[f]), f
    assert (vec["bytes_sent"] == 88).all()
    assert (vec["messages_sent"] == 1).all()


#: butterflies over a power of two whose rank-dependent choices are arithmetic, not branches
#: (fold.halving_reduce_scatter, allgather.bine_peer): the vector engine runs them where p is
#: a power of two
POF2_BRANCH_FREE = (("allreduce", "rabenseifner"), ("allreduce", "swing_latency"),
                    ("allreduce", "swing_bandwidth"), ("allreduce", "k_reduce_scatter_allgather"))


@MODELS
@pytest.mark.parametrize(("coll", "name"), POF2_BRANCH_FREE)
def test_halving_butterfly_runs_vectorised(coll: str, name: str, model: Model,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rabenseifner and Swing on a power of two run on the vector engine (Rabenseifner's
    4096-rank, 64 MiB run was 1000 rounds per rank walked rank by rank) and equal the
    per-rank engine bit for bit:
    uneven blocks (count not divisible by p, count < p), and halves of several segments
    (a 64-byte segment: the pipelined halving step, each segment reduced during the next);
    where the ranks' halves need different numbers of segments it hands the call over."""
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", "64")  # 8 float64 elements a segment
    for p in (2, 4, 8, 16, 32):
        for count in (0, 1, 5, 64, 1000, 1003, 64 * p, 64 * p + 3):
            engine = _both(coll, p, count, algorithm=name, model=model)  # equal if vector
            # one segment per step, or every block alike: every rank takes as many segments
            if count <= 8 or count % p == 0:
                assert engine == "vector", (p, count)
            else:  # halves whose segments differ by rank: the batch engine runs those
                assert engine in ("vector", "batch"), (p, count)
    # not a power of two: the fold branches on the rank, the batch engine runs it
    assert _both(coll, 12, 100, algorithm=name, model=model) == "batch"


@pytest.mark.parametrize("spec", ["torus:4x4", "fattree:4:2"])
def test_halving_butterfly_on_a_network(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectorised halving butterfly under a topology (routes, contention, gap): the same
    clocks, counts and link bytes as the per-rank engine."""
    from mpicoll.engines.network import Network

    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", "64")
    for gap in (None, 2e-6):
        net = Network(spec, "block", 1, True, gap, 1e-7)
        for count in (7, 1024):  # one segment a step; 64 a rank, 8 a segment
            ref = simulate("allreduce", 16, count, algorithm="rabenseifner", model=MODEL,
                           network=net, engine="rank")
            got = simulate("allreduce", 16, count, algorithm="rabenseifner", model=MODEL,
                           network=net)
            assert got.engine == "vector"
            _same(ref, got, (spec, gap, count))
            assert ref.link_bytes is not None
            assert got.link_bytes is not None
            assert np.array_equal(ref.link_bytes, got.link_bytes)


#: a model of measured curves (message, reduction and copy times at sizes, interpolated): the
#: vector engine's one-number rounds take the curve at an int, its per-rank rounds at a vector
CURVES = Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10,
               message_curve=((8, 2.1e-6), (1024, 3.3e-6), (65536, 9.7e-6)),
               reduce_curve=((8, 1e-8), (65536, 3e-5)), copy_curve=((8, 1e-8), (65536, 2e-5)))


@pytest.mark.parametrize("model", [MODEL, MODEL_O, CURVES], ids=["abg", "abg+o", "curves"])
def test_rounds_alike_on_every_rank_are_timed_once(model: Model) -> None:
    """Every rank's clock alike and a round of messages of one size (blocks of n/p, count 0):
    the vector engine times the round once, on one number; its clocks equal the per-rank
    engine's bit for bit, where the ranks stay alike (count a multiple of p) and where they
    part (uneven blocks after alike rounds), on powers of two and not."""
    for name in ("ring", "segmented_ring", "circulant", "rabenseifner", "swing_bandwidth",
                 "k_reduce_scatter_allgather", "allgather_reduce"):
        for p in (3, 5, 8, 12, 16):
            for count in (0, 1, 7 * p, 64 * p, 64 * p + 5):
                engine = _both("allreduce", p, count, algorithm=name, model=model)
                if (("allreduce", name) in BRANCH_FREE
                        or (p & (p - 1) == 0 and ("allreduce", name) in POF2_BRANCH_FREE)):
                    assert engine == "vector", (name, p, count)
    alike = simulate("allreduce", 16, 64 * 16, algorithm="ring", model=model)
    assert np.ptp(alike.clocks) == 0
    assert (alike.bytes_sent == 2 * 15 * 64 * 8).all()


def test_rank_arithmetic_of_the_vector_engine() -> None:
    """The rank vector's remainder (a ring's peer and block: no integer division) equals
    numpy's, negative values included; a Table whose entries are all alike gives that int
    for a vector of indices (every rank's value), and refuses an index out of range."""
    from mpicoll.algorithms.schedule import Table
    from mpicoll.engines.vector import _Lanes

    rng = np.random.default_rng(7)
    for p in (1, 2, 3, 5, 8, 13, 4095, 4096):
        for lo, hi in ((0, p), (-p, p), (-p, 2 * p), (-3 * p, 3 * p)):
            a = rng.integers(lo, hi, 500).astype(np.int64)
            got = a.view(_Lanes) % p
            assert type(got) is _Lanes
            assert np.array_equal(got.view(np.ndarray), a % p), (p, lo, hi)
    idx = np.arange(4).view(_Lanes)
    assert Table((3, 3, 3, 3))[idx] == 3
    assert np.array_equal(Table((1, 2, 3, 4))[idx], [1, 2, 3, 4])
    with pytest.raises(IndexError):
        Table((3, 3, 3))[idx]


def test_allreduce_at_4096_ranks_runs_vectorised() -> None:
    """Issue 22's scale: circulant (any p) and the radix-2 reduce-scatter + allgather run on
    the vector engine at 4096 ranks, with exact bandwidth-optimal traffic."""
    p, n = 4096, 64 << 20
    for name in ("circulant", "k_reduce_scatter_allgather"):
        r = simulate("allreduce", p, n // 8, algorithm=name, model=MODEL)
        assert r.engine == "vector", name
        assert (r.bytes_sent == 2 * n * (p - 1) // p).all(), name
        assert np.ptp(r.clocks) == 0
