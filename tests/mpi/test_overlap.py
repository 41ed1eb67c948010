"""Overlapped (segmented) schedules under real MPI (issue 14, item 3): bitwise what they give in
one segment, and what native gives where MPI's result is exact (integer sums).

Two p2p backends are built with ``MPICOLL_SEGMENT_SIZE`` set (the size is read once, at
construction): 64 bytes, so every count below but 0 and 1 travels as several segments, and
1 GiB, so every message is one segment (the unsegmented schedule).  For each algorithm that
segments, at counts 0, 1, not divisible by P and several segments per block, in place and
not, blocking and non-blocking: float64 sums from standard-normal inputs (their bits depend on
the order of the operands) must be bitwise equal between the two; int64 sums must equal
native's; the bytes each rank moves must be equal.  The pipelined broadcast is checked the
same way (it already segmented).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_overlap.py`` (P = 1..5).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from segmented import SEGMENTED as REDUCTIONS

import mpicoll
from mpicoll.algorithms import registry

COMM = MPI.COMM_WORLD
VAR = "MPICOLL_SEGMENT_SIZE"
SMALL, WHOLE = 64, 1 << 30

#: the segmented reductions, and the pipelined bcast
SEGMENTED = [*REDUCTIONS, ("bcast", "pipeline")]


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[Any, Any, Any]]:
    """(p2p in 64-byte segments, p2p in one segment, native)."""
    old = os.environ.get(VAR)
    try:
        os.environ[VAR] = str(SMALL)
        seg = mpicoll.p2p(COMM)
        os.environ[VAR] = str(WHOLE)
        one = mpicoll.p2p(COMM)
    finally:
        if old is None:
            os.environ.pop(VAR, None)
        else:
            os.environ[VAR] = old
    yield seg, one, mpicoll.native(COMM)
    seg.Free()
    one.Free()


def _counts(p: int) -> tuple[int, ...]:
    """0, 1, not divisible by P (for P > 1), and several 64-byte segments per block."""
    return (0, 1, 2 * p + 1, 40 * p + 3)


def _rs_counts(coll: str, p: int, count: int) -> list[int]:
    """reduce_scatter_block: count per block; reduce_scatter: uneven counts (zeros too)."""
    if coll == "reduce_scatter_block":
        return [count] * p
    return [max(0, count + (i % 3) - 1) for i in range(p)]


def _input(n: int, dtype: str, salt: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * COMM.rank + salt)
    if dtype == "float64":
        return rng.standard_normal(n)
    return rng.integers(-1000, 1000, n).astype(np.int64)


def _call(b: Any, coll: str, alg: str | None, count: int, dtype: str, *, in_place: bool,
          nonblocking: bool, root: int, salt: int) -> tuple[np.ndarray | None, int]:
    """This rank's result of one call on backend ``b`` (None where it has none), and the bytes
    it sent (-1 on native).  Inputs depend only on (rank, count, dtype, salt)."""
    p, rank = COMM.size, COMM.rank
    kw: dict[str, Any] = {} if alg is None else {"algorithm": alg}
    traffic = getattr(b, "traffic", None)
    if traffic is not None:
        traffic.reset()
    name = {"allreduce": "Allreduce", "reduce": "Reduce", "bcast": "Bcast",
            "reduce_scatter_block": "Reduce_scatter_block",
            "reduce_scatter": "Reduce_scatter"}[coll]
    fn = getattr(b, "I" + name.lower() if nonblocking else name)
    out: np.ndarray | None
    if coll == "bcast":
        out = _input(count, dtype, salt) if rank == root else np.zeros(count, dtype)
        args: tuple[Any, ...] = (out, root)
    elif coll == "allreduce":
        x = _input(count, dtype, salt)
        out = x if in_place else np.zeros(count, dtype)
        args = (MPI.IN_PLACE if in_place else x, out, MPI.SUM)
    elif coll == "reduce":
        x = _input(count, dtype, salt)
        if rank == root:
            out = x if in_place else np.zeros(count, dtype)
            args = (MPI.IN_PLACE if in_place else x, out, MPI.SUM, root)
        else:
            out = None
            args = (x, None, MPI.SUM, root)
    else:
        counts = _rs_counts(coll, p, count)
        x = _input(sum(counts), dtype, salt)
        whole = x if in_place else np.zeros(counts[rank], dtype)
        out = whole[: counts[rank]]
        extra = () if coll == "reduce_scatter_block" else (counts,)
        args = (MPI.IN_PLACE if in_place else x, whole, *extra, MPI.SUM)
    result = fn(*args, **kw)
    if nonblocking:
        result.Wait()
    sent = traffic.bytes_sent if traffic is not None else -1
    return (None if out is None else out.copy()), sent


def _cases(coll: str) -> Iterator[tuple[int, bool, bool, int]]:
    p = COMM.size
    for count in _counts(p):
        for in_place in (False, True):
            for nonblocking in (False, True):
                for root in ({0, p - 1} if coll in ("reduce", "bcast") else {0}):
                    if coll == "bcast" and in_place:
                        continue  # no in-place form
                    yield count, in_place, nonblocking, root


def _bits(a: np.ndarray | None) -> bytes | None:
    return None if a is None else a.tobytes()


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "alg"), SEGMENTED, ids=[f"{c}-{a}" for c, a in SEGMENTED])
def test_segmented_equals_unsegmented_and_native(backends: tuple[Any, Any, Any], coll: str,
                                                 alg: str) -> None:
    seg, one, native = backends
    p = COMM.size
    assert registry.get(coll, alg).why_not(p) is None  # all run at any P with MPI.SUM
    n = 0
    for count, in_place, nonblocking, root in _cases(coll):
        where = (coll, alg, p, COMM.rank, count, in_place, nonblocking, root)
        kw = dict(in_place=in_place, nonblocking=nonblocking, root=root)
        a, sa = _call(seg, coll, alg, count, "float64", salt=1, **kw)  # type: ignore[arg-type]
        b, sb = _call(one, coll, alg, count, "float64", salt=1, **kw)  # type: ignore[arg-type]
        assert _bits(a) == _bits(b), where
        assert sa == sb, where
        c, _ = _call(seg, coll, alg, count, "int64", salt=2, **kw)  # type: ignore[arg-type]
        d, _ = _call(native, coll, None, count, "int64", salt=2, **kw)  # type: ignore[arg-type]
        assert _bits(c) == _bits(d), where
        n += 1
    assert n >= len(_counts(p)) * 2


@pytest.mark.mpi
def test_segments_multiply_the_messages(backends: tuple[Any, Any, Any]) -> None:
    """Ring reduce-scatter: (P-1) ceil(block / segment) messages a rank, the same bytes."""
    seg, one, _ = backends
    p = COMM.size
    count = 40  # 320 bytes a block: five 64-byte segments
    x = np.ones(count * p)
    y = np.empty(count)
    for b, per_step in ((seg, -(-count * 8 // SMALL)), (one, 1)):
        b.traffic.reset()
        b.Reduce_scatter_block(x, y, algorithm="ring")
        assert b.traffic.messages_sent == (p - 1) * per_step
        assert b.traffic.bytes_sent == (p - 1) * count * 8
        assert np.array_equal(y, np.full(count, float(p)))


@pytest.mark.mpi
def test_segmented_requests_outstanding_together(backends: tuple[Any, Any, Any]) -> None:
    """Several segmented non-blocking collectives in flight at once, completed together by
    ``mpicoll.Waitall`` in reverse order: each one's local work runs from whichever progress
    call posts its next round, and each result is the one-segment blocking result."""
    seg, one, _ = backends
    p, rank = COMM.size, COMM.rank
    count = 40 * p + 3
    calls = [("allreduce", "ring"), ("reduce_scatter_block", "pairwise"),
             ("reduce", "binomial"), ("allreduce", "rabenseifner")]
    xs = [_input(count * (p if c == "reduce_scatter_block" else 1), "float64", 10 + i)
          for i, (c, _) in enumerate(calls)]
    outs = [np.zeros(count) for _ in calls]
    reqs = [seg.Iallreduce(xs[0], outs[0], MPI.SUM, algorithm="ring"),
            seg.Ireduce_scatter_block(xs[1], outs[1], MPI.SUM, algorithm="pairwise"),
            seg.Ireduce(xs[2], outs[2] if rank == 0 else None, MPI.SUM, 0, algorithm="binomial"),
            seg.Iallreduce(xs[3], outs[3], MPI.SUM, algorithm="rabenseifner")]
    mpicoll.Waitall(reqs[::-1])
    for i, (coll, alg) in enumerate(calls):
        want, _ = _call(one, coll, alg, count, "float64", in_place=False, nonblocking=False,
                        root=0, salt=10 + i)
        if want is not None:
            assert outs[i].tobytes() == want.tobytes(), (coll, alg, rank)
