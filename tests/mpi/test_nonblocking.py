"""The non-blocking forms (Ibarrier ... Iexscan) of both backends (run under mpiexec).

* every I-form gives what its blocking form gives (the NumPy oracle), completed by ``Wait()``
  and by a ``Test()`` loop, on native, p2p auto and every p2p algorithm;
* many requests of mixed kinds outstanding at once, completed in reverse order with single
  ``Wait()`` calls, with ``mpicoll.Waitall``, with a ``Test()`` polling loop, in a different order
  on different ranks, and in one ``Waitall`` mixing native and p2p requests;
* a user's wildcard ``Irecv(ANY_SOURCE, ANY_TAG)`` on the user's communicator, posted before p2p
  collectives, never receives collective traffic: it is matched by the user's own later send.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_nonblocking.py`` (P = 1..5).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import _runners as runners
import numpy as np
import oracle
import pytest
from _runners import backend
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
DEADLINE_S = 120.0


# ------------------------------------------------------------------------------------------
# 1. every I-form = its blocking form, on every implementation


def _iform_cases(coll: str, p: int) -> list[runners.Case]:
    """A few cases per collective: a non-commutative op / odd counts / in-place / zeros."""
    if coll in runners.VECTOR:
        layouts = [0, 2] if coll in ("alltoallv", "alltoallw") else [0, 1]
        op = "AFFINE" if coll == "reduce_scatter" else None
        dtype = "int64" if op else "float64"
        return [runners.Case(dtype, op, 0, root=(k + 1) % p, in_place=k == 1, layout=lay,
                        form="typed") for k, lay in enumerate(layouts)]
    if coll in runners.REDUCTIONS:
        return [runners.Case("int64", "AFFINE", p + 1, root=p - 1),
                runners.Case("float64", "SUM", 7, root=0, in_place=True),
                runners.Case("double_int", "MAXLOC", 1, root=p // 2, form="typed")]
    return [runners.Case("int32", None, p + 1, root=p - 1),
            runners.Case("float64", None, 7, root=0, in_place=True),
            runners.Case("complex128", None, 0, root=p // 2)]


_IFORM_PARAMS = [pytest.param(coll, impl, mode, id=f"{coll}-{impl.label}-{mode}")
                 for coll in runners.COLLECTIVES if coll != "barrier"
                 for impl in runners.implementations(coll)
                 for mode in ("wait", "test")]


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl", "mode"), _IFORM_PARAMS)
def test_iform_matches_blocking(coll: str, impl: runners.Impl, mode: str) -> None:
    """The I-form, completed by ``mode`` ("wait": Wait(), "test": a Test() loop), gives the
    blocking form's result (both are checked against the oracle, exactly)."""
    for m in ("blocking", mode):
        run = runners.Run(coll, impl, mode=m)
        for case in _iform_cases(coll, run.p):
            run.run_case(case)
        run.finish()


@pytest.mark.mpi
@pytest.mark.parametrize("impl", runners.implementations("barrier"), ids=lambda i: i.label)
def test_ibarrier(impl: runners.Impl) -> None:
    """Ibarrier: no rank's request completes before the last rank started its Ibarrier."""
    hosts = WORLD.allgather(MPI.Get_processor_name())
    if len(set(hosts)) > 1:
        pytest.skip("causality check needs one host (a shared monotonic clock)")
    if impl.entry is not None and impl.entry.why_not(WORLD.size) is not None:  # two_proc, P > 2
        with pytest.raises(mpicoll.RestrictionError):
            runners.invoke(impl, "Ibarrier")
        return
    late = WORLD.size - 1
    if WORLD.rank == late:
        time.sleep(0.05)
    started = time.monotonic()
    req = runners.invoke(impl, "Ibarrier")
    req.Wait()
    done = time.monotonic()
    late_started = WORLD.bcast(started, root=late)
    assert done >= late_started, (
        f"Ibarrier impl={impl.label}: rank {WORLD.rank} completed at {done:.6f} before rank "
        f"{late} started at {late_started:.6f}")


# ------------------------------------------------------------------------------------------
# 2. many outstanding requests


class Pending:
    """One started non-blocking collective: its request, how to check its result, and its
    buffers (kept alive until completion: mpi4py's collective requests do not hold them)."""

    def __init__(self, name: str, req: Any, check: Callable[[], str | None],
                 buffers: tuple[Any, ...]) -> None:
        self.name, self.req, self.check, self.buffers = name, req, check, buffers


def _algo(coll: str, pick: str, p: int, **kw: Any) -> dict[str, Any]:
    """``algorithm=`` keyword for p2p: "auto", or the first/last registered algorithm of
    ``coll`` whose restrictions allow this call."""
    if pick == "auto":
        return {"algorithm": "auto"}
    ok = [a.name for a in mpicoll.registry.algorithms(coll) if a.why_not(p, **kw) is None]
    return {"algorithm": ok[0] if pick == "first" else ok[-1]}


def start_mixed(kinds: list[str], pick: str = "auto", salt: int = 0) -> list[Pending]:
    """Start 10 non-blocking collectives of mixed kinds (``kinds[k]``: "native" or "p2p" for
    the k-th) with exact expected results; return them in the order they were started."""
    p, r = WORLD.size, WORLD.rank
    out: list[Pending] = []

    def start(k: int, coll: str, args: tuple[Any, ...], kw: dict[str, Any],
              check: Callable[[], str | None], why: dict[str, Any] | None = None) -> None:
        kind = kinds[k % len(kinds)]
        if kind == "p2p":
            kw = {**kw, **_algo(coll, pick, p, **(why or {}))}
        req = getattr(backend(kind), "I" + coll)(*args, **kw)
        alg = f"/{kw['algorithm']}" if "algorithm" in kw else ""
        out.append(Pending(f"#{k} I{coll} ({kind}{alg})", req, check, args))

    n = p + 2 + salt
    # 0: Iallreduce SUM
    a0 = oracle.inputs(r, n, "float64", "SUM", salt)
    o0 = np.zeros(n)
    w0 = oracle.reference_reduce("SUM", [oracle.inputs(q, n, "float64", "SUM", salt)
                                         for q in range(p)])
    start(0, "allreduce", (a0, o0), {"op": MPI.SUM},
          lambda: oracle.describe_difference(o0, w0), {"count": n, "commutative": True})
    # 1: Ibcast from the last rank
    root = p - 1
    o1 = oracle.values(root, 5, "int64") if r == root else oracle.garbage(5, "int64")
    w1 = oracle.values(root, 5, "int64")
    start(1, "bcast", (o1,), {"root": root}, lambda: oracle.describe_difference(o1, w1),
          {"count": 5})
    # 2: Iallgather
    a2 = oracle.values(r, 3, "int32")
    o2 = oracle.garbage(3 * p, "int32")
    w2 = np.concatenate([oracle.values(q, 3, "int32") for q in range(p)])
    start(2, "allgather", (a2, o2), {}, lambda: oracle.describe_difference(o2, w2), {"count": 3})
    # 3: Ialltoall
    a3 = oracle.values(r, 2 * p, "float32")
    o3 = oracle.garbage(2 * p, "float32")
    w3 = np.concatenate([oracle.values(q, 2 * p, "float32")[2 * r:2 * r + 2] for q in range(p)])
    start(3, "alltoall", (a3, o3), {}, lambda: oracle.describe_difference(o3, w3), {"count": 2})
    # 4: Ireduce, non-commutative, root 0
    a4 = oracle.inputs(r, 4, "int64", "AFFINE", salt)
    o4 = oracle.garbage(4, "int64") if r == 0 else None
    w4 = oracle.reference_reduce("AFFINE", [oracle.inputs(q, 4, "int64", "AFFINE", salt)
                                         for q in range(p)])
    start(4, "reduce", (a4, o4), {"op": oracle.mpi_op("AFFINE"), "root": 0},
          lambda: None if o4 is None else oracle.describe_difference(o4, w4),
          {"count": 4, "commutative": False})
    # 5: Iscan MAX
    a5 = oracle.inputs(r, 6, "int32", "MAX", salt)
    o5 = oracle.garbage(6, "int32")
    w5 = oracle.reference_scan("MAX", [oracle.inputs(q, 6, "int32", "MAX", salt)
                                       for q in range(p)])[r]
    start(5, "scan", (a5, o5), {"op": MPI.MAX}, lambda: oracle.describe_difference(o5, w5),
          {"count": 6, "commutative": True})
    # 6: Igatherv to root p//2, counts with zeros, blocks in reverse order
    root6 = p // 2
    counts = oracle.vcounts(p, 0)
    displs, length = oracle.vdispls(counts, "reverse")
    a6 = oracle.values(r, counts[r], "int64")
    o6 = oracle.garbage(length, "int64")
    w6 = o6.copy()
    for q in range(p):
        w6[displs[q]:displs[q] + counts[q]] = oracle.values(q, counts[q], "int64")
    rv6 = [o6, (counts, displs), MPI.INT64_T] if r == root6 else None
    start(6, "gatherv", (a6, rv6), {"root": root6},
          lambda: None if r != root6 else oracle.describe_difference(o6, w6), {})
    # 7: Ibarrier
    start(7, "barrier", (), {}, lambda: None, {})
    # 8: Ireduce_scatter_block BOR, in place
    o8 = oracle.inputs(r, 3 * p, "int64", "BOR", salt)
    w8 = oracle.reference_reduce("BOR", [oracle.inputs(q, 3 * p, "int64", "BOR", salt)
                                      for q in range(p)])[3 * r:3 * r + 3]
    start(8, "reduce_scatter_block", (MPI.IN_PLACE, o8), {"op": MPI.BOR},
          lambda: oracle.describe_difference(o8[:3], w8),
          {"count": 3, "commutative": True, "in_place": True})
    # 9: Iexscan SUM (rank 0's result is undefined)
    a9 = oracle.inputs(r, 5, "int64", "SUM", salt)
    o9 = oracle.garbage(5, "int64")
    w9 = oracle.reference_exscan("SUM", [oracle.inputs(q, 5, "int64", "SUM", salt)
                                         for q in range(p)])[r]
    start(9, "exscan", (a9, o9), {"op": MPI.SUM},
          lambda: None if w9 is None else oracle.describe_difference(o9, w9),
          {"count": 5, "commutative": True})
    return out


def _verify(pending: list[Pending], how: str) -> None:
    bad = [f"{q.name}: {d}" for q in pending if (d := q.check()) is not None]
    nbad = WORLD.allreduce(len(bad))
    where = f"{how} P={WORLD.size} rank={WORLD.rank}"
    assert not bad, f"{where}: " + "; ".join(bad)
    assert nbad == 0, f"{how} P={WORLD.size}: failed on another rank"


def _poll_all(reqs: list[Any], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        done = [q.Test() for q in reqs]          # call Test() on every request every pass
        if all(done):
            return
        assert time.monotonic() < deadline, (
            f"{what}: requests {[k for k, d in enumerate(done) if not d]} never completed")


KIND_SETS = {
    "native": ["native"],
    "p2p-auto": ["p2p"],
    "p2p-first": ["p2p"],
    "p2p-last": ["p2p"],
    "mixed": ["p2p", "native"],
}


def _pick(label: str) -> str:
    return label.split("-", 1)[1] if label.startswith("p2p-") else "auto"


@pytest.mark.mpi
@pytest.mark.parametrize("label", list(KIND_SETS))
def test_outstanding_reverse_wait(label: str) -> None:
    """10 requests outstanding, completed in reverse order with single Wait() calls."""
    pending = start_mixed(KIND_SETS[label], _pick(label), salt=1)
    for q in reversed(pending):
        q.req.Wait()
    _verify(pending, f"reverse Wait ({label})")


@pytest.mark.mpi
@pytest.mark.parametrize("label", list(KIND_SETS))
def test_outstanding_waitall(label: str) -> None:
    """10 requests outstanding, completed by one mpicoll.Waitall (native and p2p mixed)."""
    pending = start_mixed(KIND_SETS[label], _pick(label), salt=2)
    mpicoll.Waitall([q.req for q in reversed(pending)])
    _verify(pending, f"Waitall ({label})")


@pytest.mark.mpi
@pytest.mark.parametrize("label", list(KIND_SETS))
def test_outstanding_test_polling(label: str) -> None:
    """10 requests outstanding, completed by polling Test() on each until all are done."""
    pending = start_mixed(KIND_SETS[label], _pick(label), salt=3)
    _poll_all([q.req for q in pending], f"Test() polling ({label})")
    _verify(pending, f"Test() polling ({label})")


@pytest.mark.mpi
@pytest.mark.parametrize("label", list(KIND_SETS))
def test_outstanding_testall(label: str) -> None:
    """10 requests outstanding, completed by looping on mpicoll.Testall."""
    pending = start_mixed(KIND_SETS[label], _pick(label), salt=4)
    reqs = [q.req for q in pending]
    deadline = time.monotonic() + DEADLINE_S
    while not mpicoll.Testall(reqs):
        assert time.monotonic() < deadline, f"Testall ({label}) never returned True"
    _verify(pending, f"Testall ({label})")


@pytest.mark.mpi
@pytest.mark.parametrize("label", list(KIND_SETS))
def test_outstanding_rank_dependent_order(label: str) -> None:
    """Each rank completes the requests in its own order (even ranks reverse, odd ranks a
    rotation starting at its rank): legal in MPI, so it must neither hang nor mix results."""
    pending = start_mixed(KIND_SETS[label], _pick(label), salt=5)
    k = len(pending)
    r = WORLD.rank
    order = list(range(k))[::-1] if r % 2 == 0 else [(r + i) % k for i in range(k)]
    for i in order:
        pending[i].req.Wait()
    _verify(pending, f"rank-dependent Wait order ({label})")


@pytest.mark.mpi
def test_blocking_collective_while_requests_outstanding() -> None:
    """A blocking p2p collective issued while p2p requests are outstanding completes and gives
    the right answer, and so do the outstanding ones afterwards."""
    pending = start_mixed(["p2p"], "auto", salt=6)
    p, r = WORLD.size, WORLD.rank
    x = oracle.inputs(r, 9, "int64", "SUM")
    y = np.zeros(9, dtype=np.int64)
    backend("p2p").Allreduce(x, y, op=MPI.SUM)
    want = oracle.reference_reduce("SUM", [oracle.inputs(q, 9, "int64", "SUM") for q in range(p)])
    assert oracle.describe_difference(y, want) is None, f"rank {r}: blocking Allreduce wrong"
    mpicoll.Waitall([q.req for q in pending])
    _verify(pending, "blocking collective in between")


# ------------------------------------------------------------------------------------------
# 3. isolation from the user's point-to-point traffic


def _isolation_traffic(kind: str) -> None:
    """Many p2p collectives of every kind (blocking and non-blocking, several algorithms)."""
    p, r = WORLD.size, WORLD.rank
    b = backend(kind)
    algs: dict[str, list[str]] = {}
    if kind == "p2p":
        for coll in ("allreduce", "bcast", "alltoall", "allgather", "reduce", "barrier"):
            algs[coll] = [a.name for a in mpicoll.registry.algorithms(coll)
                          if a.why_not(p, count=8, commutative=True) is None]

    def kwset(coll: str) -> list[dict[str, Any]]:
        return [{"algorithm": a} for a in algs.get(coll, [])] or [{}]

    for kw in kwset("allreduce"):
        x = np.arange(8.0) + r
        y = np.zeros(8)
        b.Allreduce(x, y, op=MPI.SUM, **kw)
        assert y.tolist() == (np.arange(8.0) * p + p * (p - 1) / 2).tolist()
    for kw in kwset("bcast"):
        z = np.arange(8, dtype=np.int64) * (r == 0)
        b.Bcast(z, root=0, **kw)
        assert z.tolist() == list(range(8))
    for kw in kwset("alltoall"):
        s = np.full(8 * p, r, dtype=np.int64)
        t = np.zeros(8 * p, dtype=np.int64)
        b.Alltoall(s, t, **kw)
        assert t.tolist() == np.repeat(np.arange(p), 8).tolist()
    for kw in kwset("allgather"):
        t = np.zeros(8 * p, dtype=np.int64)
        b.Allgather(np.full(8, r, dtype=np.int64), t, **kw)
        assert t.tolist() == np.repeat(np.arange(p), 8).tolist()
    for kw in kwset("reduce"):
        t8 = np.zeros(8, dtype=np.int64)
        b.Reduce(np.ones(8, dtype=np.int64), t8 if r == p - 1 else None, op=MPI.SUM,
                 root=p - 1, **kw)
        if r == p - 1:
            assert t8.tolist() == [p] * 8
    for kw in kwset("barrier"):
        b.Barrier(**kw)
    bufs = [np.ones(8), np.zeros(8), np.ones(2), np.zeros(2 * p)]   # alive until completion
    reqs = [b.Iallreduce(bufs[0], bufs[1]), b.Ibarrier(), b.Iallgather(bufs[2], bufs[3])]
    mpicoll.Waitall(reqs)
    assert bufs[1].tolist() == [p] * 8
    assert bufs[3].tolist() == [1.0] * (2 * p)


@pytest.mark.mpi
def test_user_wildcard_irecv_never_gets_collective_traffic() -> None:
    """A user Irecv(ANY_SOURCE, ANY_TAG) on the user's communicator, pending during many p2p
    collectives, stays pending, then receives exactly the user's own message.

    (p2p only: that is mpicoll's isolation.  MPI's own collectives are MPI's business, and
    MPICH 5.0.2 fails it at P=1: its Alltoall/Alltoallv/Ialltoall on a 1-rank communicator
    hang while a wildcard Irecv is pending on that communicator.)
    """
    kind = "p2p"
    p, r = WORLD.size, WORLD.rank
    backend(kind)                      # creating p2p (a collective Dup) happens before the Irecv
    WORLD.Barrier()
    box = np.full(64, -1, dtype=np.int64)
    status = MPI.Status()
    irecv = WORLD.Irecv([box, MPI.INT64_T], source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    # non-blocking first, polled with a deadline: if the user's Irecv swallows a message of
    # the collective, the collective never completes; say so instead of hanging
    b = backend(kind)
    x = np.arange(8, dtype=np.int64)
    bufs = [np.zeros(8, dtype=np.int64), np.zeros(2 * p, dtype=np.int64),
            np.zeros(2 * p, dtype=np.int64), np.zeros(3, dtype=np.int64)]  # alive until done
    reqs = [b.Iallreduce(x, bufs[0]), b.Ibarrier(), b.Ialltoall(bufs[1], bufs[2]),
            b.Ibcast(bufs[3], root=p - 1)]
    deadline = time.monotonic() + 30.0
    while not all([q.Test() for q in reqs]):  # noqa: C419  (Test() each request each pass)
        if time.monotonic() > deadline:
            swallowed = irecv.Test(status)
            raise AssertionError(
                f"rank {r}: p2p collectives did not complete in 30 s with a user wildcard Irecv "
                f"pending; the Irecv {'matched' if swallowed else 'did not match'} a message"
                + (f" (source {status.Get_source()}, tag {status.Get_tag()})" if swallowed
                   else ""))
    _isolation_traffic(kind)
    WORLD.Barrier()                    # every rank's collectives are over
    matched_early = irecv.Test(status)
    nearly = WORLD.allreduce(int(matched_early))
    assert not matched_early, (
        f"rank {r}: the user's wildcard Irecv was matched by collective traffic "
        f"(source {status.Get_source()}, tag {status.Get_tag()}, data {box[:8].tolist()})")
    assert nearly == 0, "the user's wildcard Irecv was matched by collective traffic elsewhere"
    WORLD.Barrier()
    payload = np.array([4242, r, 7, 7], dtype=np.int64)
    sreq = WORLD.Isend([payload, MPI.INT64_T], dest=(r + 1) % p, tag=77)
    irecv.Wait(status)
    sreq.Wait()
    left = (r - 1) % p
    assert (status.Get_source(), status.Get_tag()) == (left, 77), (
        f"rank {r}: wildcard Irecv matched source {status.Get_source()} tag "
        f"{status.Get_tag()}, expected the user's message from {left} with tag 77")
    assert status.Get_count(MPI.INT64_T) == 4
    assert box[:4].tolist() == [4242, left, 7, 7], f"rank {r}: got {box[:4].tolist()}"
    assert (box[4:] == -1).all(), f"rank {r}: bytes past the user's message were written"
