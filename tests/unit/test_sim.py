"""The simulator engine: every algorithm, with data, at rank counts MPI runs here cannot reach,
against the tests' NumPy oracle (tests/oracle.py); exact traffic figures; the registry's cost
formulas against the critical path it measures."""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.algorithms.collectives import RECORDS
from mpicoll.algorithms.schedule import DEFAULT_SEGMENT_BYTES, Context, Schedule
from mpicoll.engines.sim import DeadlockError, Simulator, TwoLevel
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import make_args, simulate

ROOTED = {c.name for c in RECORDS if c.rooted}
REDUCING = {"reduce", "allreduce", "reduce_scatter_block", "reduce_scatter", "scan", "exscan"}
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 24, 32, 100]


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a op b = decimal concatenation of a and b: associative, not commutative."""
    return a * 10.0 ** (np.floor(np.log10(b)) + 1) + b


CONCAT = oracle.user_op(_concat, np.float64, commute=False)


def _snapshot(args: tuple) -> tuple:
    """A copy of one rank's arguments, every array (in a list spec too) copied."""
    def one(x: object) -> object:
        if isinstance(x, np.ndarray):
            return x.copy()
        if isinstance(x, list):
            return [one(y) for y in x]
        return x
    return tuple(one(x) for x in args)


def _compare(what: str, outs: list, want: list) -> None:
    """Each rank's output equals the oracle's (where MPI defines it)."""
    for r, (got, w) in enumerate(zip(outs, want, strict=True)):
        if w is None:
            continue
        assert got is not None, f"{what} rank {r}: no output"
        diff = oracle.difference(got, w)
        assert diff is None, f"{what} rank {r}: {diff}"


def _check(coll: str, alg: registry.Algorithm, p: int, count: int, root: int,
           op: MPI.Op) -> None:
    dtype = np.dtype(np.float64)
    run_args, outs = [], []
    for r in range(p):
        a, o = make_args(coll, p, r, count, dtype, op=op, root=root)
        run_args.append(a)
        outs.append(o)
    want = oracle.expected(coll, [_snapshot(a) for a in run_args])
    simulate(coll, p, count, algorithm=alg.name, op=op, root=root, data=True, args=run_args)
    _compare(f"{coll}/{alg.name} p={p} count={count} root={root}", outs, want)


@pytest.mark.parametrize("coll", [c for c in registry.COLLECTIVES if c != "barrier"])
def test_every_algorithm_with_data(coll: str) -> None:
    """Every algorithm at p in {1..9, 13, 16, 24, 32, 100} and counts {0, 1, 64, 1000}."""
    checked = set()
    for alg in registry.variants(coll):
        for p in SIZES:
            if alg.why_not(p) is not None:
                continue
            counts = (0, 1, 64, 1000) if p <= 32 else (0, 1, 64)
            for count in counts:
                root = (p // 2) if coll in ROOTED else 0
                _check(coll, alg, p, count, root, MPI.SUM)
                checked.add(alg.name)
    assert checked == {a.name for a in registry.variants(coll)}, "an algorithm ran at no p"


@pytest.mark.parametrize("coll", sorted(REDUCING))
def test_non_commutative_ops_keep_rank_order(coll: str) -> None:
    checked = 0
    for alg in registry.variants(coll):
        for p in (2, 3, 5, 7, 8, 13):
            if alg.why_not(p, commutative=False) is not None:
                continue
            for root in {0, p - 1, p // 2} if coll == "reduce" else {0}:
                _check(coll, alg, p, 5, root, CONCAT)
                checked += 1
    assert checked, f"no {coll} algorithm takes a non-commutative op"


def test_barrier_dissemination_messages() -> None:
    for p in range(1, 18):
        r = simulate("barrier", p, 0, algorithm="dissemination", model=Model(1, 0, 0))
        lgp = (p - 1).bit_length()
        assert (r.messages_sent == lgp).all()
        assert (r.messages_recv == lgp).all()
        assert r.time == lgp


@pytest.mark.parametrize("engine", ["rank", "auto"])
@pytest.mark.parametrize("p", range(2, 18))
def test_bandwidth_optimal_traffic_is_exact(p: int, engine: str) -> None:
    """The seed article's volume table, per rank: allreduce 2 n (p-1)/p each way;
    reduce-scatter and allgather n (p-1)/p.  Both engines (``auto`` runs these rings on the
    vector engine)."""
    m = 16  # elements per block
    n = m * p * 8  # bytes per rank (allreduce vector, reduce-scatter input, allgather total)
    ar = simulate("allreduce", p, m * p, algorithm="ring", engine=engine)
    assert (ar.bytes_sent == 2 * n * (p - 1) // p).all()
    assert (ar.bytes_recv == 2 * n * (p - 1) // p).all()
    assert (ar.messages_sent == 2 * (p - 1)).all()
    for alg in ("ring", "pairwise"):
        rs = simulate("reduce_scatter_block", p, m, algorithm=alg, engine=engine)
        assert (rs.bytes_sent == n * (p - 1) // p).all()
        assert (rs.bytes_recv == rs.bytes_sent).all()
    ag = simulate("allgather", p, m, algorithm="ring", engine=engine)
    assert (ag.bytes_sent == n * (p - 1) // p).all()
    assert (ag.bytes_recv == ag.bytes_sent).all()


@pytest.mark.parametrize("p", range(2, 18))
def test_message_counts(p: int) -> None:
    lgp = (p - 1).bit_length()
    for root in (0, p - 1):
        b = simulate("bcast", p, 10, algorithm="binomial", root=root)
        assert b.messages_sent[root] == lgp
        assert b.messages_recv.sum() == p - 1
        assert b.messages_recv[root] == 0
    if p & (p - 1) == 0:
        ag = simulate("allgather", p, 3, algorithm="recursive_doubling")
        assert (ag.messages_sent == lgp).all()
        assert (ag.messages_recv == lgp).all()
    br = simulate("allgather", p, 3, algorithm="bruck")
    assert (br.messages_sent == lgp).all()


def test_cost_only_mode_scales(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cost-only: no data is touched, one allocation stands for every rank's buffer; the
    vector engine at 4096 ranks (rabenseifner's halving picks its half by arithmetic on the
    rank bit, so every rank runs one program), in one segment (a 64 MiB segment size:
    segments multiply the rounds, see test_overlap.py)."""
    p, n = 4096, 64 << 20
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", str(n))
    r = simulate("allreduce", p, n // 8, algorithm="rabenseifner")  # 64 MiB per rank
    assert r.engine == "vector"
    assert r.nbytes == n
    assert (r.messages_sent == 2 * 12).all()  # 2 lg p
    assert (r.bytes_sent == 2 * n * (p - 1) // p).all()
    monkeypatch.delenv("MPICOLL_SEGMENT_SIZE")
    ring = simulate("allreduce", 128, 8 << 20, algorithm="ring", engine="rank")
    assert (ring.bytes_sent == 2 * (64 << 20) * 127 // 128).all()
    segs = -(-(64 << 20) // 128 // DEFAULT_SEGMENT_BYTES)  # per block, in the reduce-scatter
    assert (ring.messages_sent == 127 * segs + 127).all()


def test_a_broken_schedule_is_a_deadlock_not_a_hang() -> None:
    def lonely(ctx: Context) -> Schedule:
        if ctx.rank == 0:
            yield (ctx.recv(ctx.scratch(1), 1),)

    sim = Simulator(2, data=True)
    gens = [lonely(sim.context(r, MPI.DOUBLE, np.dtype(np.float64))) for r in range(2)]
    with pytest.raises(DeadlockError):
        sim.run(gens)


def test_simulate_rejects_what_mpi_rejects() -> None:
    with pytest.raises(registry.RestrictionError):
        simulate("allreduce", 4, 8, algorithm="ring", op=CONCAT)
    with pytest.raises(registry.RestrictionError):
        simulate("allgather", 3, 8, algorithm="recursive_doubling")
    with pytest.raises(ValueError):
        simulate("bcast", 4, 8, root=4)


# --- node-aware algorithms and the two-level model ------------------------------------------

TWO = TwoLevel


def _two_level(k: int) -> object:
    return TWO(k, Model(1e-7, 1e-10, 2.5e-10), Model(2e-6, 1e-9, 2.5e-10))


@pytest.mark.parametrize("coll", ["allreduce", "bcast", "reduce", "allgather", "barrier", "scan"])
def test_smp_algorithms_match_reference(coll: str) -> None:
    """k = 3 ranks per node at p = 6 (the issue's case), and ragged last nodes."""
    alg = registry.get(coll, "smp")
    for p, k in ((6, 3), (4, 2), (7, 3), (5, 5), (5, 1)):
        for count in (0, 1, 10):
            for root in ({0, p - 1, p // 2} if coll in ROOTED else {0}):
                dtype = np.dtype(np.float64)
                run_args, outs = [], []
                for r in range(p):
                    a, o = make_args(coll, p, r, count, dtype, root=root)
                    run_args.append(a)
                    outs.append(o)
                want = (None if coll == "barrier"
                        else oracle.expected(coll, [_snapshot(a) for a in run_args]))
                res = simulate(coll, p, count, algorithm="smp", root=root, data=True,
                               args=run_args, model=_two_level(k))  # type: ignore[arg-type]
                assert res.algorithm == alg.name
                if want is not None:
                    _compare(f"{coll}/smp p={p} k={k} count={count} root={root}", outs, want)


def test_smp_scan_keeps_rank_order() -> None:
    """A non-commutative op through the hierarchical scan on nodes of 1..4 consecutive ranks
    (ragged last nodes), and on nodes that are not consecutive (the flat scan runs)."""
    layouts = [[r // k for r in range(p)] for p in (2, 5, 7, 9) for k in (1, 2, 3, 4)]
    layouts += [[r % 2 for r in range(6)], [0, 1, 1, 0, 2], [2, 2, 0, 1, 1, 0]]
    for nodes in layouts:
        p = len(nodes)
        run_args, outs = [], []
        for r in range(p):
            a, o = make_args("scan", p, r, 5, np.dtype(np.float64), op=CONCAT)
            run_args.append(a)
            outs.append(o)
        want = oracle.expected("scan", [_snapshot(a) for a in run_args])
        simulate("scan", p, 5, algorithm="smp", op=CONCAT, data=True, args=run_args,
                 nodes=nodes)
        _compare(f"scan/smp nodes={nodes}", outs, want)


def test_hierarchical_allreduce_sends_one_node_share_across_nodes() -> None:
    """N nodes of k ranks: smp allreduce puts exactly 2 n (N-1)/N bytes per node on the
    network (the leaders' bandwidth-optimal allreduce), the flat ring 2 n (p-1)/p per node
    (each node's boundary rank carries every rank's block), and only leaders send across."""
    nodes, k = 4, 4
    p = nodes * k
    count = 1024 * p
    n = count * 8
    smp = simulate("allreduce", p, count, algorithm="smp", model=_two_level(k))  # type: ignore[arg-type]
    flat = simulate("allreduce", p, count, algorithm="ring", model=_two_level(k))  # type: ignore[arg-type]
    per_node = smp.inter_bytes_sent.reshape(nodes, k).sum(axis=1)
    assert (per_node == 2 * n * (nodes - 1) // nodes).all()
    assert (smp.inter_bytes_sent.reshape(nodes, k)[:, 1:] == 0).all()
    flat_node = flat.inter_bytes_sent.reshape(nodes, k).sum(axis=1)
    assert (flat_node == 2 * n * (p - 1) // p).all()
    rd = simulate("allreduce", p, count, algorithm="recursive_doubling",
                  model=_two_level(k))  # type: ignore[arg-type]
    assert rd.inter_bytes_sent.sum() > smp.inter_bytes_sent.sum()
    assert smp.time < rd.time
