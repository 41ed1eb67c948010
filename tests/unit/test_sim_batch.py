"""The simulator's batch engine (every rank's schedule walked first, then all ranks timed
together a ready-queue generation at a time) against the per-rank engine: identical clocks
and counts, bit for bit, for every algorithm of every collective, rooted and segmented ones
included, through both of its paths (small generations one by one, large ones with numpy);
and the cases it hands back to the per-rank engine, whose errors the user then sees."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.algorithms.collectives import RECORDS
from mpicoll.algorithms.schedule import Context, Schedule
from mpicoll.engines import batch as _sim
from mpicoll.engines.batch import run_batch
from mpicoll.engines.sim import DeadlockError, NotVectorizableError, Simulator, TwoLevel
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import simulate

FIELDS = ("clocks", "messages_sent", "bytes_sent", "messages_recv", "bytes_recv",
          "inter_bytes_sent")
SIZES = [1, 2, 3, 5, 8, 13]
COUNTS = [0, 1, 7, 1000]
MODEL = Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10)
# with LogP's overheads and a copy term: every charge the engines add, in its order
MODEL_O = Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10, o_call=1.1e-5, o_msg=4.7e-7,
                delta=2.9e-11)


def _same(a: object, b: object, what: object) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert np.array_equal(x, y), (what, f, x[:8], y[:8])
    assert a.time == b.time, what  # type: ignore[attr-defined]


def _compare(coll: str, p: int, count: int, **kw: object) -> bool:
    """Per-rank engine vs batch engine; False where a restriction forbids the call."""
    try:
        ref = simulate(coll, p, count, engine="rank", **kw)  # type: ignore[arg-type]
    except registry.RestrictionError:
        return False
    got = simulate(coll, p, count, engine="batch", **kw)  # type: ignore[arg-type]
    assert got.engine == "batch"
    _same(ref, got, (coll, p, count, kw))
    return True


@pytest.mark.parametrize("small", [_sim.SMALL_GENERATION, 0], ids=["mixed", "numpy"])
@pytest.mark.parametrize("coll", [c.name for c in RECORDS])
def test_batch_engine_equals_per_rank_engine(coll: str, small: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every algorithm (and its parameter examples: segment sizes, radices) at several p and
    counts (0, 1, not divisible by p), both models; ``small = 0`` times every generation
    with numpy, the default serves the small ones one by one."""
    monkeypatch.setattr(_sim, "SMALL_GENERATION", small)
    model = MODEL if small else MODEL_O
    ran = 0
    for alg in registry.variants(coll):
        for p in SIZES:
            if alg.why_not(p) is not None:
                continue
            for count in COUNTS if coll != "barrier" else [0]:
                ran += _compare(coll, p, count, algorithm=alg.name, model=model)
    assert ran


def test_rooted_at_other_roots_and_in_place() -> None:
    for coll in ("bcast", "reduce", "gather", "scatter"):
        for alg in registry.variants(coll):
            for p, root in ((5, 3), (8, 7)):
                if alg.why_not(p) is None:
                    _compare(coll, p, 100, algorithm=alg.name, root=root, model=MODEL_O)
    for alg in registry.variants("allreduce"):
        if alg.why_not(6) is None:
            _compare("allreduce", 6, 100, algorithm=alg.name, in_place=True, model=MODEL_O)


def test_node_counts_match() -> None:
    """Inter-node bytes (a node map, flat model) are counted as the per-rank engine counts
    them."""
    nodes = [r // 3 for r in range(7)]
    for coll in ("bcast", "allreduce", "alltoall"):
        for alg in registry.variants(coll):
            if alg.why_not(7) is None:
                _compare(coll, 7, 50, algorithm=alg.name, nodes=nodes, model=MODEL)
    r = simulate("bcast", 7, 50, algorithm="binomial", nodes=nodes, engine="batch")
    assert r.inter_bytes_sent.sum() > 0


def test_long_pipeline_many_segments() -> None:
    """A segmented chain deeper than a generation's small limit, many segments in flight at
    once: both of the batch engine's paths in one run, against the per-rank engine."""
    for alg in ("pipeline:1024", "chain:4:1024", "pipelined_tree:2:1024", "circ_graph:1024"):
        _compare("bcast", 64, 4096, algorithm=alg, model=MODEL_O)
    _compare("reduce", 40, 3000, algorithm="pipeline", model=MODEL_O)


def test_auto_picks_the_batch_engine() -> None:
    """``auto``: the vector engine where it applies, else the batch engine (cost-only, flat
    model, no network), else per rank."""
    assert simulate("allreduce", 8, 100, algorithm="ring").engine == "vector"
    assert simulate("bcast", 8, 100, algorithm="binomial").engine == "batch"
    assert simulate("allreduce", 6, 100, algorithm="recursive_doubling").engine == "batch"
    assert simulate("bcast", 8, 100, algorithm="binomial", data=True).engine == "rank"
    two = TwoLevel(2, MODEL, Model(alpha=1e-5))
    assert simulate("bcast", 8, 100, algorithm="binomial", model=two).engine == "rank"
    with pytest.raises(NotVectorizableError, match="two-level"):
        simulate("bcast", 8, 100, algorithm="binomial", model=two, engine="batch")


def _runs(schedule: object, p: int) -> tuple[Simulator, list[Schedule]]:
    s = Simulator(p, data=False)
    dt = np.dtype(np.float64)
    buf = np.zeros(10)
    return s, [schedule(s.context(r, MPI.DOUBLE, dt), buf) for r in range(p)]  # type: ignore


def test_deadlock_and_truncation_go_to_the_per_rank_engine() -> None:
    """A schedule the per-rank engine reports (a receive nobody sends, a circular wait, a
    message too long for its receive buffer): the batch engine refuses it, and the per-rank
    engine raises its own error on a new simulator."""

    def orphan(ctx: Context, buf: np.ndarray) -> Schedule:
        if ctx.rank == 1:
            yield (ctx.recv(buf, 0),)

    def circular(ctx: Context, buf: np.ndarray) -> Schedule:  # both receive first
        other = 1 - ctx.rank
        yield (ctx.recv(buf, other),)
        yield (ctx.send(buf, other),)

    def long(ctx: Context, buf: np.ndarray) -> Schedule:
        if ctx.rank == 0:
            yield (ctx.send(buf, 1),)
        else:
            yield (ctx.recv(buf[:5], 0),)

    for schedule, error in ((orphan, DeadlockError), (circular, DeadlockError),
                            (long, RuntimeError)):
        s, gens = _runs(schedule, 2)
        with pytest.raises(NotVectorizableError):
            run_batch(s, gens)
        s, gens = _runs(schedule, 2)
        with pytest.raises(error):
            s.run(gens)


def test_port_order_of_a_round_of_several_sends() -> None:
    """The root's sends of one round go in the order the per-rank engine matches them (its
    ready queue's), not in the order they were yielded: the batch engine keeps that order."""

    def fan(ctx: Context, buf: np.ndarray) -> Schedule:
        p = ctx.size
        if ctx.rank == 0:
            yield tuple(ctx.send(buf[: 1 + d], d) for d in range(p - 1, 0, -1))
        else:
            yield (ctx.recv(buf, 0),)

    for small in (_sim.SMALL_GENERATION, 0):
        s, gens = _runs(fan, 6)
        ref = s.run(gens)
        s, gens = _runs(fan, 6)
        old = _sim.SMALL_GENERATION
        _sim.SMALL_GENERATION = small
        try:
            got = run_batch(s, gens)
        finally:
            _sim.SMALL_GENERATION = old
        for f in FIELDS:
            assert np.array_equal(ref[f], got[f]), f
        assert len(set(got["clocks"][1:])) == 5  # one port: each receiver waits its turn


def test_vector_engine_follows_a_branch_every_rank_takes() -> None:
    """Recursive doubling folds no rank on a power of two (a branch on the rank that every
    rank takes the same way): the vector engine runs it there and equals the per-rank
    engine; on 6 ranks the ranks part ways and it hands over."""
    for coll in ("allgather", "barrier"):
        for p in (2, 4, 8, 16):
            for model in (MODEL, MODEL_O):
                ref = simulate(coll, p, 100, algorithm="recursive_doubling", engine="rank",
                               model=model)
                got = simulate(coll, p, 100, algorithm="recursive_doubling", model=model)
                assert got.engine == "vector"
                _same(ref, got, (coll, p))
    with pytest.raises(NotVectorizableError, match="different ways"):
        simulate("allreduce", 6, 100, algorithm="recursive_doubling", engine="vector")


#: the symmetric algorithms the class walk hands to the per-rank walk: messages packed from
#: several pieces of a buffer (``ctx.pack``), which a class's lanes do not stand for
NOT_CLASS_WALKED = {("allgather", "bine"), ("allgatherv", "bine"), ("alltoall", "bruck"),
                    ("alltoall", "k_brucks")}


def _class_walk(coll: str, p: int, count: int, alg: registry.Algorithm) -> bool:
    """:func:`walk_classes` of ``alg`` against :func:`_walk` of every rank's schedule: the
    same arrays and prepared clocks; False where the class walk hands the call back."""
    from mpicoll.tools.simulate import PARSERS, make_args

    sims, walks = [], []
    for by_class in (False, True):
        s = Simulator(p, MODEL_O, data=False)
        shared: dict = {}
        calls = [PARSERS[coll](p, r, *make_args(coll, p, r, count, np.dtype(np.float64),
                                                 uniform=True, shared=shared)[0])
                 for r in (range(1) if by_class else range(p))]
        if by_class:
            try:
                w = _sim.walk_classes(s, alg.schedule, calls[0].datatype, calls[0].dtype,
                                      calls[0].prepare)
            except NotVectorizableError:
                return False
        else:
            w = _sim._walk(s, [c.schedule(s.context(r, c.datatype, c.dtype), alg)
                               for r, c in enumerate(calls)])
        sims.append(s)
        walks.append(w)
    for f in walks[0]._fields:
        x, y = getattr(walks[0], f), getattr(walks[1], f)
        assert np.array_equal(x, y), (coll, alg.name, p, count, f)  # (shapes too)
    assert sims[0].clock == sims[1].clock, (coll, alg.name, p, count)
    return True


@pytest.mark.parametrize("coll", sorted(c.name for c in RECORDS if c.symmetric))
def test_class_walk_equals_the_per_rank_walk(coll: str) -> None:
    """The walk by classes of ranks (one run of the schedule for every rank that takes its
    control path, ``ctx.rank`` their vector) records what the per-rank walk records, for
    every algorithm of every symmetric collective that it takes, at p = 1 .. 33, counts 0, 1,
    not divisible by p; it takes every one but those of :data:`NOT_CLASS_WALKED`."""
    taken = 0
    for alg in registry.variants(coll):
        for p in (1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 24, 33):
            if alg.why_not(p) is not None:
                continue
            for count in (0, 1, 7, 1000) if coll != "barrier" else (0,):
                ran = _class_walk(coll, p, count, alg)
                taken += ran
                handed = (coll, alg.name.split(":")[0]) in NOT_CLASS_WALKED
                assert ran or handed, (alg.name, p, count)
                if handed and p == 13 and count == 1000:  # the list is still true
                    assert not ran, alg.name
    assert taken
