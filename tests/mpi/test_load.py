"""Load: many collectives in a row, many outstanding at once, long messages (under mpiexec).

* thousands of tiny p2p collectives (mixed Allreduce/Bcast/Barrier of one element, random
  algorithms and roots) on a backend whose tag window is 100 (``mpicoll.p2p(comm, tag_ub=100)``),
  so tags wrap many times; every result checked.  1,000 calls (10 wraps) by default, 20,000
  under ``MPICOLL_TEST_FULL=1`` (5,000 above 4 ranks);
* 64 outstanding non-blocking p2p collectives of mixed kinds and algorithms (Iallreduce,
  Iallgather, Ibcast, Ialltoall, Ireduce_scatter_block, Iscan, Ibarrier), completed in a random
  order (the same on every rank) by a mix of ``mpicoll.Waitall``, ``mpicoll.Testall`` polling
  loops and single ``Wait()`` calls; every result checked;
* more outstanding collectives than the tag window holds (tag_ub=8, 40 requests, completed in a
  different order on every rank): still correct (a tag is never reused while in flight);
* the segmented ``pipeline`` broadcast with ``MPICOLL_SEGMENT_SIZE=64`` bytes (and 60 and 1) on
  ~100k elements of odd counts (and smaller ones for wide types): exact result, and exactly
  one message per segment (1,563 to 12,502 segments);
* ``large`` (``MPICOLL_TEST_LARGE=1``): Bcast and Allreduce of a buffer above 2**31 bytes on both
  backends (needs about 5 GiB of memory per rank).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_load.py`` (P = 1..5).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll import registry

WORLD = MPI.COMM_WORLD
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")
# The 20,000 at P <= 4 (its acceptance ranks); fewer above, where 6-8 ranks share two
# cores and 20,000 rounds outlast the per-test timeout without testing anything more.
TINY_CALLS = (20_000 if MPI.COMM_WORLD.Get_size() <= 4 else 5_000) if FULL else 1_000
TAG_UB = 100
DEADLINE_S = 60.0  # polling loops give up (and fail) after this, rather than hang
WINDOW_DEADLINE_S = 20.0  # the same for the tag-window test (a correct run takes ~1 s)

_BACKENDS: dict[str, Any] = {}


def backend(kind: str) -> Any:
    """Backends shared by this module's tests (making a p2p backend is collective)."""
    if kind not in _BACKENDS:
        if kind == "p2p-window":
            _BACKENDS[kind] = mpicoll.p2p(WORLD, tag_ub=TAG_UB)
        else:
            _BACKENDS[kind] = getattr(mpicoll, kind)(WORLD)
    return _BACKENDS[kind]


def usable(coll: str, p: int, count: int | None = None, commutative: bool = True) -> list[str]:
    """Names of the registered algorithms of ``coll`` that can run this call."""
    return [a.name for a in registry.algorithms(coll)
            if a.why_not(p, commutative=commutative, count=count) is None]


def agree(problems: list[str], what: str) -> None:
    """Fail on every rank if any rank found a problem (all ranks' problems in the message)."""
    everyone = WORLD.allgather(problems[:20])
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{what}:\n" + "\n".join(lines)


# --------------------------------------------------------------------------------------------
# thousands of tiny collectives, tags wrapping


@pytest.mark.mpi
def test_tiny_collectives_wrap_tags() -> None:
    """TINY_CALLS one-element collectives on a tag window of 100: >= 10 wraps, all exact."""
    p, r = WORLD.size, WORLD.rank
    b = backend("p2p-window")
    assert TINY_CALLS // TAG_UB >= 5
    rng = np.random.default_rng(20_000)  # the same stream on every rank
    kinds = rng.integers(0, 3, TINY_CALLS)
    roots = rng.integers(0, p, TINY_CALLS)
    ar_algs = usable("allreduce", p, count=1)
    bc_algs = usable("bcast", p, count=1)
    alg_pick = rng.integers(0, 1 << 30, TINY_CALLS)
    x = np.zeros(1, np.int64)
    y = np.zeros(1, np.int64)
    problems: list[str] = []
    for i in range(TINY_CALLS):
        k = int(kinds[i])
        if k == 0:
            x[0] = 3 * i + r
            y[0] = -1
            alg = ar_algs[alg_pick[i] % len(ar_algs)]
            b.Allreduce(x, y, algorithm=alg)
            want = 3 * i * p + p * (p - 1) // 2
            if y[0] != want:
                problems.append(f"call {i}: Allreduce/{alg} gave {y[0]}, expected {want}")
        elif k == 1:
            root = int(roots[i])
            y[0] = 7 * i + 1 if r == root else -1
            alg = bc_algs[alg_pick[i] % len(bc_algs)]
            b.Bcast(y, root=root, algorithm=alg)
            if y[0] != 7 * i + 1:
                problems.append(f"call {i}: Bcast/{alg} from {root} gave {y[0]}")
        else:
            b.Barrier()
        if len(problems) > 20:
            break
    agree(problems, f"{TINY_CALLS} tiny collectives, tag window {TAG_UB}")


# --------------------------------------------------------------------------------------------
# 64 outstanding non-blocking collectives of mixed kinds


@dataclass
class Pending:
    """One outstanding collective: its request and how to check it once complete."""

    label: str
    request: Any
    check: Callable[[], str | None]
    keep: tuple[np.ndarray, ...] = ()  # send buffers: alive until the request completes


def _start(b: Any, i: int, rng: np.random.Generator, p: int, r: int) -> Pending:
    """Start collective number ``i`` (kind, algorithm, count and root drawn from ``rng``,
    identically on every rank)."""
    kind = ["allreduce", "allgather", "bcast", "alltoall", "reduce_scatter_block", "scan",
            "barrier"][int(rng.integers(0, 7))]
    n = int(rng.integers(0, 10))
    names = usable(kind, p, count=n)
    alg = names[int(rng.integers(0, len(names)))]
    label = f"#{i} I{kind}/{alg} n={n}"
    if kind == "allreduce":
        x = np.arange(n, dtype=np.int64) + 10 * r + 1000 * i
        y = np.full(n, -1, np.int64)
        want = p * np.arange(n) + 10 * p * (p - 1) // 2 + 1000 * i * p
        req = b.Iallreduce(x, y, algorithm=alg)
        return Pending(label, req, lambda: _diff(y, want), (x,))
    if kind == "allgather":
        x = np.full(n, 100 * r + i, np.int64)
        y = np.full(n * p, -1, np.int64)
        want = np.repeat(100 * np.arange(p) + i, n)
        req = b.Iallgather(x, y, algorithm=alg)
        return Pending(label, req, lambda: _diff(y, want), (x,))
    if kind == "bcast":
        root = int(rng.integers(0, p))
        want = np.arange(n, dtype=np.int64) + 7 * i
        y = want.copy() if r == root else np.full(n, -1, np.int64)
        req = b.Ibcast(y, root=root, algorithm=alg)
        return Pending(f"{label} root={root}", req, lambda: _diff(y, want))
    if kind == "alltoall":
        x = np.repeat(1000 * r + 10 * np.arange(p) + i, n).astype(np.int64)
        y = np.full(n * p, -1, np.int64)
        want = np.repeat(1000 * np.arange(p) + 10 * r + i, n)
        req = b.Ialltoall(x, y, algorithm=alg)
        return Pending(label, req, lambda: _diff(y, want), (x,))
    if kind == "reduce_scatter_block":
        x = np.arange(n * p, dtype=np.int64) + r + i
        y = np.full(n, -1, np.int64)
        want = p * np.arange(r * n, (r + 1) * n) + p * (p - 1) // 2 + p * i
        req = b.Ireduce_scatter_block(x, y, algorithm=alg)
        return Pending(label, req, lambda: _diff(y, want), (x,))
    if kind == "scan":
        x = np.full(n, r + 1 + i, np.int64)
        y = np.full(n, -1, np.int64)
        want = np.full(n, (r + 1) * (r + 2) // 2 + (r + 1) * i)
        req = b.Iscan(x, y, algorithm=alg)
        return Pending(label, req, lambda: _diff(y, want), (x,))
    req = b.Ibarrier(algorithm=alg)
    return Pending(label, req, lambda: None)


def _diff(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    return f"got {got}, expected {want}"


def _testall_loop(reqs: list[Any]) -> bool:
    """Poll ``mpicoll.Testall`` until done; False if the deadline passed."""
    deadline = time.monotonic() + DEADLINE_S
    while not mpicoll.Testall(reqs):
        if time.monotonic() > deadline:
            return False
    return True


def complete(pending: list[Pending], order: list[int], rng: np.random.Generator) -> list[str]:
    """Complete the requests in ``order``, in chunks of 1..8 finished by Waitall, a Testall
    polling loop, or single Wait() calls (chosen by ``rng``); returns the problems found."""
    problems: list[str] = []
    pos = 0
    while pos < len(order):
        size = int(rng.integers(1, 9))
        chunk = [pending[j] for j in order[pos : pos + size]]
        pos += size
        how = ["waitall", "testall", "wait"][int(rng.integers(0, 3))]
        reqs = [c.request for c in chunk]
        if how == "waitall":
            mpicoll.Waitall(reqs)
        elif how == "testall":
            if not _testall_loop(reqs):
                problems.append(f"Testall loop passed {DEADLINE_S:g} s on "
                                f"{[c.label for c in chunk]}")
                return problems
        else:
            for q in reqs:
                q.Wait()
        for c in chunk:
            bad = c.check()
            if bad:
                problems.append(f"{c.label} (completed by {how}): {bad}")
    return problems


@pytest.mark.mpi
@pytest.mark.parametrize("tag_ub", [None, TAG_UB], ids=["default-tags", "tag_ub-100"])
def test_64_outstanding_mixed_nonblocking(tag_ub: int | None) -> None:
    """64 outstanding p2p collectives of mixed kinds and algorithms, completed in a random
    order (the same on every rank) by Waitall / Testall loops / single Waits; all exact."""
    p, r = WORLD.size, WORLD.rank
    b = backend("p2p") if tag_ub is None else backend("p2p-window")
    rng = np.random.default_rng(64)  # same stream on every rank: same calls, same order
    pending = [_start(b, i, rng, p, r) for i in range(64)]
    order = [int(j) for j in rng.permutation(64)]
    problems = complete(pending, order, rng)
    agree(problems, "64 outstanding non-blocking collectives")


@pytest.mark.mpi
def test_more_outstanding_than_tag_window() -> None:
    """40 outstanding Iallreduce on a tag window of 8 (each tag reused 5 times while the
    older call may still be in flight), completed in a different order on every rank.

    Must stay exact: the backend may wait for an older call before reusing its tag, but two
    calls in flight must never share a tag on one communicator (their messages would
    cross-match: truncation errors, wrong sums or a hang).  Completion polls ``Testall`` with a
    deadline so that a failure is reported instead of hanging.
    """
    p, r = WORLD.size, WORLD.rank
    b = mpicoll.p2p(WORLD, tag_ub=8)
    algs = usable("allreduce", p, count=37)
    problems: list[str] = []
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    wants: list[np.ndarray] = []
    reqs: list[Any] = []
    try:
        for i in range(40):
            n = 37 + 11 * (i % 4)
            xs.append(np.full(n, r + 1 + 100 * i, np.int64))
            ys.append(np.full(n, -1, np.int64))
            wants.append(np.full(n, p * (p + 1) // 2 + 100 * i * p))
            reqs.append(b.Iallreduce(xs[-1], ys[-1], algorithm=algs[i % len(algs)]))
        order = np.random.default_rng(1000 + r).permutation(40)  # rank-dependent order
        deadline = time.monotonic() + WINDOW_DEADLINE_S
        for j in order:
            while not reqs[j].Test():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"request {j} not complete after "
                                       f"{WINDOW_DEADLINE_S:g} s")
        for i, (y, want) in enumerate(zip(ys, wants, strict=True)):
            if not np.array_equal(y, want):
                problems.append(f"Iallreduce #{i}: got {y[:4]}..., expected {want[:4]}...")
    except (MPI.Exception, TimeoutError, RuntimeError) as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    if WORLD.allreduce(len(problems)) == 0:
        b.Free()  # only when clean: a broken backend may have requests that never complete
    agree(problems, "more outstanding collectives than tags")


# --------------------------------------------------------------------------------------------
# long messages


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("seg_bytes", "dtype", "count"),
    [(64, "uint8", 100_003), (64, "int32", 100_001), (64, "float64", 99_999),
     (64, "complex128", 6_247), (60, "float64", 10_001), (1, "int16", 3_001)],
    ids=lambda v: str(v),
)
def test_pipeline_bcast_tiny_segments(monkeypatch: pytest.MonkeyPatch, seg_bytes: int,
                                      dtype: str, count: int) -> None:
    """``MPICOLL_SEGMENT_SIZE`` forced tiny: the pipeline broadcast of ~100k elements (odd
    counts; a segment size that is not a multiple of the item size; one byte per segment)
    from two roots is exact, and every non-root receives exactly one message per segment of
    ``MPICOLL_SEGMENT_SIZE`` bytes."""
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", str(seg_bytes))
    with mpicoll.p2p(WORLD) as b:  # the segment size is read once, when the backend is made
        _pipeline_bcast_tiny_segments(b, seg_bytes, dtype, count)


def _pipeline_bcast_tiny_segments(b: mpicoll.P2P, seg_bytes: int, dtype: str, count: int) -> None:
    p, r = WORLD.size, WORLD.rank
    dt = np.dtype(dtype)
    want = (np.arange(count) % 251 + 1).astype(dt)
    if dt.kind == "c":
        want = want + 1j * want[::-1]
    # a Bcast moves bytes on every rank (ranks may pass different datatypes of one type
    # signature), so a segment is seg_bytes bytes, even where that splits an element
    seg = max(1, seg_bytes)
    nseg = max(1, -(-count * dt.itemsize // seg))
    problems: list[str] = []
    for root in sorted({0, p - 1}):
        buf = want.copy() if r == root else np.zeros(count, dt)
        b.traffic.reset()
        b.Bcast(buf, root=root, algorithm="pipeline")
        if not np.array_equal(buf, want):
            bad = np.flatnonzero(buf != want)
            problems.append(f"root {root}: {bad.size} elements wrong, first at {bad[0]}")
        t = b.traffic
        if p > 1 and r != root and t.messages_recv != nseg:
            problems.append(f"root {root}: received {t.messages_recv} messages, expected "
                            f"{nseg} segments of {seg} bytes")
        if p > 1 and t.bytes_recv != (0 if r == root else count * dt.itemsize):
            problems.append(f"root {root}: received {t.bytes_recv} bytes")
    if dt.itemsize == 1:  # once: a non-blocking pipeline broadcast overlapping an Iallreduce
        buf = want.copy() if r == p - 1 else np.zeros(count, dt)
        s, y = np.full(5, r + 1.0), np.zeros(5)
        reqs = [b.Ibcast(buf, root=p - 1, algorithm="pipeline"), b.Iallreduce(s, y)]
        mpicoll.Waitall(reqs[::-1])
        if not np.array_equal(buf, want) or not np.array_equal(y, np.full(5, p * (p + 1) / 2)):
            problems.append("Ibcast pipeline overlapping an Iallreduce gave a wrong result")
    agree(problems, f"pipeline bcast, {seg_bytes}-byte segments, {count} x {dtype}")


BIG_BYTES = 2**31 + 64  # just past what a C int counts in bytes
PERIOD = 251 * 7  # the test patterns repeat every PERIOD elements
CHUNK = PERIOD * 38_000  # ~67M elements: patterns are built and checked chunk by chunk


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]


def _u8_pattern() -> np.ndarray:
    """One chunk of the Bcast pattern: element i holds i % 251 (every chunk is the same)."""
    return (np.arange(CHUNK, dtype=np.int64) % 251).astype(np.uint8)


@pytest.mark.mpi
@pytest.mark.large
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_bcast_above_2gib(kind: str) -> None:
    """Bcast of 2**31 + 64 bytes (uint8: the count itself is above INT_MAX)."""
    p, r = WORLD.size, WORLD.rank
    b = backend(kind)
    pattern = _u8_pattern()
    buf = np.zeros(BIG_BYTES, np.uint8)
    root = p - 1
    if r == root:
        for lo, hi in _chunks(BIG_BYTES):
            buf[lo:hi] = pattern[: hi - lo]
    b.Bcast(buf, root=root)
    ok = all(np.array_equal(buf[lo:hi], pattern[: hi - lo]) for lo, hi in _chunks(BIG_BYTES))
    del buf
    agree([] if ok else ["wrong data"], f"{kind} Bcast of {BIG_BYTES} bytes")


@pytest.mark.mpi
@pytest.mark.large
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_allreduce_above_2gib(kind: str) -> None:
    """Allreduce (SUM) of 2**31 + 64 bytes of float32 (exact small integers)."""
    p, r = WORLD.size, WORLD.rank
    b = backend(kind)
    n = BIG_BYTES // 4
    mine = (np.arange(CHUNK) % 7 + r).astype(np.float32)
    want = (p * (np.arange(CHUNK) % 7) + p * (p - 1) // 2).astype(np.float32)
    x = np.empty(n, np.float32)
    for lo, hi in _chunks(n):
        x[lo:hi] = mine[: hi - lo]
    y = np.zeros(n, np.float32)
    b.Allreduce(x, y)
    del x
    ok = all(np.array_equal(y[lo:hi], want[: hi - lo]) for lo, hi in _chunks(n))
    del y
    agree([] if ok else ["wrong sum"], f"{kind} Allreduce of {BIG_BYTES} bytes")
