"""The worked examples of the seed articles, by name, at 4 ranks, on every implementation.

``shared/seeds/000_1e2e076c4465b8f9.txt`` ("From Scatter to All-Reduce") walks each collective
through a concrete 4-rank example; ``shared/seeds/004_273860100a7f030a.txt`` adds all-to-all
("rank i receives the i-th piece from every rank").  Each example is a test here, run on the
native backend, on p2p with ``algorithm="auto"`` and on p2p forced to every registered algorithm
of the collective (a forced algorithm whose restrictions forbid the example must raise
``RestrictionError``).

Run: ``mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_seed_examples.py``; at any other
size these tests skip.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll import registry as _registry
from mpicoll.algorithms.registry import RestrictionError

WORLD = MPI.COMM_WORLD
pytestmark = pytest.mark.mpi(min_size=4)

#: the article's Reduce / All-reduce inputs (rank 0..3) and their sum
REDUCE_IN = [[10, 20, 5], [2, 4, 6], [1, 1, 1], [5, 10, 15]]
REDUCE_OUT = [18, 35, 27]
#: the article's Reduce-scatter inputs and per-rank outputs
RS_IN = [[10, 20, 5, 1], [2, 4, 6, 2], [1, 1, 1, 3], [5, 10, 15, 4]]
RS_OUT = [18, 35, 27, 10]


def _impls(coll: str) -> list[tuple[str, str | None, Any]]:
    """(backend, algorithm, registry entry) for native, p2p auto and every p2p algorithm."""
    algorithms = _registry.algorithms(coll)
    assert algorithms, f"the registry lists no algorithm of {coll}"
    return [("native", None, None), ("p2p", "auto", None),
            *(("p2p", a.name, a) for a in algorithms)]


def _params(*colls: str) -> list[Any]:
    return [pytest.param(c, b, a, e, id=f"{c}-{b}" + (f"/{a}" if a else ""))
            for c in colls for (b, a, e) in _impls(c)]


_BACKENDS: dict[str, Any] = {}


def _backend(kind: str) -> Any:
    if kind not in _BACKENDS:
        _BACKENDS[kind] = getattr(mpicoll, kind)(WORLD)
    return _BACKENDS[kind]


@pytest.fixture(autouse=True)
def _four_ranks() -> None:
    if WORLD.size != 4:
        pytest.skip("the seed article's examples are for exactly 4 ranks")


def _call(coll: str, backend: str, alg: str | None, entry: Any, restriction_kw: dict[str, Any],
          *args: Any, **kw: Any) -> bool:
    """Call the collective; if the forced algorithm's restrictions forbid the example, assert
    that it raises RestrictionError and return False."""
    fn = getattr(_backend(backend), coll[0].upper() + coll[1:])
    if entry is not None:
        kw["algorithm"] = alg
        why = entry.why_not(WORLD.size, **restriction_kw)
        if why is not None:
            with pytest.raises(RestrictionError):
                fn(*args, **kw)
            return False
    fn(*args, **kw)
    return True


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("bcast"))
def test_broadcast_42_from_rank_2(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Rank 2 has 42, the others have no data; after Bcast(root=2) every rank has 42."""
    buf = np.array([42 if WORLD.rank == 2 else -1], dtype=np.int64)
    if _call(coll, backend, alg, entry, {"count": 1}, buf, root=2):
        assert buf.tolist() == [42], f"rank {WORLD.rank} has {buf.tolist()}, expected [42]"


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("scatter"))
def test_scatter_10_20_30_40(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Rank 2 holds [10, 20, 30, 40]; after Scatter(root=2) rank Y has 10 * (Y + 1)."""
    rank = WORLD.rank
    send = np.array([10, 20, 30, 40], dtype=np.int64) if rank == 2 else None
    out = np.full(1, -1, dtype=np.int64)
    if _call(coll, backend, alg, entry, {"count": 1}, send, out, root=2):
        assert out.tolist() == [10 * (rank + 1)], f"rank {rank} has {out.tolist()}"
    if rank == 2:
        assert send is not None
        assert send.tolist() == [10, 20, 30, 40], "root's data changed"


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("gather"))
def test_gather_A_B_C_D(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Ranks 0..3 hold A, B, C, D; after Gather(root=2) rank 2 has [A, B, C, D]."""
    rank = WORLD.rank
    mine = np.array([ord("ABCD"[rank])], dtype=np.int32)
    out = np.zeros(4, dtype=np.int32) if rank == 2 else None
    ran = _call(coll, backend, alg, entry, {"count": 1}, mine, out, root=2)
    if ran and rank == 2:
        assert out is not None
        assert "".join(map(chr, out)) == "ABCD", f"root has {out.tolist()}"
    assert chr(mine[0]) == "ABCD"[rank], f"rank {rank} lost its own data"


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("reduce"))
def test_reduce_to_18_35_27(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Inputs [10,20,5], [2,4,6], [1,1,1], [5,10,15]; Reduce(SUM, root=2) gives rank 2
    [18, 35, 27]; the input buffers are unchanged."""
    rank = WORLD.rank
    send = np.array(REDUCE_IN[rank], dtype=np.int64)
    out = np.zeros(3, dtype=np.int64) if rank == 2 else None
    ran = _call(coll, backend, alg, entry, {"count": 3, "commutative": True},
                send, out, op=MPI.SUM, root=2)
    if ran and rank == 2:
        assert out is not None
        assert out.tolist() == REDUCE_OUT, f"root has {out}"
    assert send.tolist() == REDUCE_IN[rank], f"rank {rank}'s input changed: {send.tolist()}"


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("allreduce"))
def test_allreduce_18_35_27(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Same inputs; after Allreduce(SUM) every rank has [18, 35, 27]."""
    rank = WORLD.rank
    send = np.array(REDUCE_IN[rank], dtype=np.int64)
    out = np.zeros(3, dtype=np.int64)
    if _call(coll, backend, alg, entry, {"count": 3, "commutative": True}, send, out, op=MPI.SUM):
        assert out.tolist() == REDUCE_OUT, f"rank {rank} has {out.tolist()}"
    assert send.tolist() == REDUCE_IN[rank]


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"),
                         _params("reduce_scatter_block", "reduce_scatter"))
def test_reduce_scatter_18_35_27_10(coll: str, backend: str, alg: str | None,
                                    entry: Any) -> None:
    """Inputs [10,20,5,1], [2,4,6,2], [1,1,1,3], [5,10,15,4]; after a SUM reduce-scatter with
    one element per rank: rank 0 [18], rank 1 [35], rank 2 [27], rank 3 [10]."""
    rank = WORLD.rank
    send = np.array(RS_IN[rank], dtype=np.int64)
    out = np.zeros(1, dtype=np.int64)
    args: tuple[Any, ...] = (send, out) if coll == "reduce_scatter_block" else (send, out,
                                                                                  [1, 1, 1, 1])
    if _call(coll, backend, alg, entry, {"count": 1, "commutative": True}, *args, op=MPI.SUM):
        assert out.tolist() == [RS_OUT[rank]], f"rank {rank} has {out.tolist()}"
    assert send.tolist() == RS_IN[rank]


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("allgather"))
def test_allgather_10_11_to_40_41(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Ranks hold [10, 11], [20, 21], [30, 31], [40, 41]; after Allgather every rank has
    [10, 11, 20, 21, 30, 31, 40, 41]."""
    rank = WORLD.rank
    send = np.array([10 * (rank + 1), 10 * (rank + 1) + 1], dtype=np.int64)
    out = np.zeros(8, dtype=np.int64)
    if _call(coll, backend, alg, entry, {"count": 2}, send, out):
        assert out.tolist() == [10, 11, 20, 21, 30, 31, 40, 41], f"rank {rank}: {out.tolist()}"


@pytest.mark.parametrize(("coll", "backend", "alg", "entry"), _params("alltoall"))
def test_alltoall(coll: str, backend: str, alg: str | None, entry: Any) -> None:
    """Rank r holds pieces [x0, x1, x2, x3] (x = a, b, c, d for r = 0..3); after Alltoall
    rank i holds [a_i, b_i, c_i, d_i]: the i-th piece from every rank (seed 004)."""
    rank = WORLD.rank
    names = [f"{'abcd'[r]}{j}" for r in range(4) for j in range(4)]   # code = 4 * r + j
    send = np.arange(4 * rank, 4 * rank + 4, dtype=np.int32)
    out = np.full(4, -1, dtype=np.int32)
    if _call(coll, backend, alg, entry, {"count": 1}, send, out):
        got = [names[k] if 0 <= k < 16 else "?" for k in out]
        assert got == [f"{x}{rank}" for x in "abcd"], f"rank {rank} has {got}"
    assert send.tolist() == list(range(4 * rank, 4 * rank + 4))


def _rsag_params() -> list[Any]:
    rs = [a.name for a in _registry.algorithms("reduce_scatter_block")]
    ag = [a.name for a in _registry.algorithms("allgather")]
    assert rs, "the registry lists no reduce_scatter_block algorithm"
    assert ag, "the registry lists no allgather algorithm"
    return [pytest.param("native", None, None, id="native"),
            pytest.param("p2p", "auto", "auto", id="p2p/auto"),
            *(pytest.param("p2p", r, a, id=f"p2p/{r}+{a}") for r in rs for a in ag)]


@pytest.mark.parametrize(("backend", "rs_alg", "ag_alg"), _rsag_params())
def test_reduce_scatter_plus_allgather_equals_allreduce(backend: str, rs_alg: str | None,
                                                        ag_alg: str | None) -> None:
    """Reduce-scatter (SUM, 1 element per rank) then all-gather gives every rank
    [18, 35, 27, 10]: exactly what one all-reduce of the same inputs gives."""
    rank = WORLD.rank
    b = _backend(backend)
    kw_rs: dict[str, Any] = {} if rs_alg is None else {"algorithm": rs_alg}
    kw_ag: dict[str, Any] = {} if ag_alg is None else {"algorithm": ag_alg}
    send = np.array(RS_IN[rank], dtype=np.int64)
    piece = np.zeros(1, dtype=np.int64)
    for coll, name, kw in (("reduce_scatter_block", rs_alg, {"commutative": True}),
                           ("allgather", ag_alg, {})):
        if name not in (None, "auto"):
            why = _registry.get(coll, name).why_not(4, count=1, **kw)
            if why is not None:  # the forced pair cannot run: it must say so
                if coll == "allgather":
                    with pytest.raises(RestrictionError):
                        b.Allgather(piece, np.zeros(4, dtype=np.int64), **kw_ag)
                else:
                    with pytest.raises(RestrictionError):
                        b.Reduce_scatter_block(send, piece, op=MPI.SUM, **kw_rs)
                return
    b.Reduce_scatter_block(send, piece, op=MPI.SUM, **kw_rs)
    assert piece.tolist() == [RS_OUT[rank]], f"after reduce-scatter rank {rank} has {piece}"
    whole = np.zeros(4, dtype=np.int64)
    b.Allgather(piece, whole, **kw_ag)
    reduced = np.zeros(4, dtype=np.int64)
    b.Allreduce(send, reduced, op=MPI.SUM)
    assert whole.tolist() == RS_OUT, f"rank {rank}: reduce-scatter + all-gather = {whole}"
    assert reduced.tolist() == RS_OUT, f"rank {rank}: all-reduce = {reduced}"
    assert whole.tolist() == reduced.tolist()
