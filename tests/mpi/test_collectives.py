"""Every collective, every implementation, against the NumPy reference (run under mpiexec).

One pytest item per (collective, implementation); the cases (dtype x op x count x root x in-place
x buffer spec x v-layout) are looped inside it, every failing case recorded with everything needed
to reproduce it, and reported together at the end of the item (on every rank, so no rank is left
waiting in a collective when another one's check fails).

Implementations: ``native``, ``p2p`` with ``algorithm="auto"`` (the default), and ``p2p`` forced to
every algorithm the registry lists for the collective.  A forced algorithm whose restrictions
forbid a case must raise :class:`mpicoll.RestrictionError` on every rank, with the output
buffers untouched.

Every rank computes every other rank's input (they are functions of rank and index, see
``_reference.py``) and so the exact expected result, with no MPI involved.

``MPICOLL_TEST_FULL=1`` widens the sweep to every dtype x op x count x root x in-place.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_collectives.py`` (P = 1..5).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _reference as ref

import mpicoll
from mpicoll.algorithms.collectives import BY_NAME, RECORDS

try:
    from mpicoll import registry as _registry
    from mpicoll.algorithms.registry import RestrictionError
except ImportError:  # pragma: no cover - package not there yet
    _registry = None  # type: ignore[assignment]

    class RestrictionError(ValueError):  # type: ignore[no-redef]
        """Placeholder: the registry is not importable."""


WORLD = MPI.COMM_WORLD
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")
BIG = 131075  # elements: about 1 MiB of float64 per rank, not a multiple of 2**k

COLLECTIVES = (
    "barrier", "bcast", "scatter", "scatterv", "gather", "gatherv", "reduce", "allreduce",
    "reduce_scatter_block", "reduce_scatter", "allgather", "allgatherv", "alltoall",
    "alltoallv", "scan", "exscan",
)
ROOTED = {c.name for c in RECORDS if c.rooted}
REDUCTIONS = {c.name for c in RECORDS if c.reduction}
VECTOR = {"scatterv", "gatherv", "allgatherv", "alltoallv", "reduce_scatter"}


# ------------------------------------------------------------------------------------------
# implementations


@dataclass(frozen=True)
class Impl:
    """One implementation of a collective: a backend and (p2p only) an algorithm."""

    backend: str                   # "native" | "p2p"
    algorithm: str | None = None   # None (native), "auto", or a registry name
    entry: Any = None              # the registry's Algorithm (forced p2p algorithms only)

    @property
    def label(self) -> str:
        return self.backend if self.algorithm is None else f"{self.backend}/{self.algorithm}"


def implementations(coll: str) -> list[Impl]:
    """native, p2p auto and every registered p2p algorithm of ``coll`` (import time)."""
    impls = [Impl("native")]
    if hasattr(mpicoll, "p2p"):
        impls.append(Impl("p2p", "auto"))
        with contextlib.suppress(Exception):  # no registry yet: native + auto only
            impls += [Impl("p2p", a.name, a) for a in _registry.algorithms(coll)]
    return impls


_BACKENDS: dict[str, Any] = {}


def backend(kind: str) -> Any:
    """The backend object over COMM_WORLD, made once per module (p2p creation is collective)."""
    if kind not in _BACKENDS:
        _BACKENDS[kind] = getattr(mpicoll, kind)(WORLD)
    return _BACKENDS[kind]


def method_name(coll: str) -> str:
    """"reduce_scatter_block" -> "Reduce_scatter_block"; "Iallreduce" -> "Iallreduce"."""
    if coll.startswith("I") and coll[1:] in BY_NAME:
        return BY_NAME[coll[1:]].nonblocking
    return BY_NAME[coll].method


def invoke(impl: Impl, coll: str, *args: Any, **kw: Any) -> Any:
    """Call the collective ``coll`` of ``impl`` (forcing the algorithm for forced p2p)."""
    fn = getattr(backend(impl.backend), method_name(coll))
    if impl.entry is not None:
        kw["algorithm"] = impl.algorithm
    return fn(*args, **kw)


# ------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Case:
    """One call: what every rank passes (the same Case on every rank)."""

    dtype: str = "float64"
    op: str | None = None          # reductions only
    count: int = 7                 # elements per rank block (non-v collectives)
    root: int = 0
    in_place: bool = False
    form: str = "plain"            # plain arr | typed [arr, type] | counted [arr, n, type] | 2d
    layout: int = 0                # v-variants: counts layout (see ref.vcounts)
    order: str = "reverse"         # v-variants: block order in the buffer (see ref.vdispls)
    nonroot_none: bool = True      # pass None for arguments MPI ignores at non-roots

    def __str__(self) -> str:
        return (f"dtype={self.dtype} op={self.op} count={self.count} root={self.root} "
                f"in_place={self.in_place} form={self.form} layout={self.layout} "
                f"order={self.order} nonroot_none={self.nonroot_none}")


def _counts(p: int) -> list[int]:
    return sorted({0, 1, p - 1, p + 1, 7})


#: (dtype, op) pairs of the default reduction sweep: every dtype and op at least once.
REDUCTION_COMBOS = [
    ("int32", "SUM"), ("int32", "PROD"), ("int32", "MAX"), ("int32", "LAND"),
    ("int32", "BOR"), ("int64", "MIN"), ("int64", "BXOR"), ("int64", "AFFINE"),
    ("int64", "LOR"), ("int64", "BAND"), ("float32", "SUM"), ("float32", "MAX"),
    ("float64", "SUM"), ("float64", "PROD"), ("float64", "MIN"), ("complex128", "SUM"),
    ("complex128", "PROD"), ("bool", "LAND"), ("bool", "LOR"), ("bool", "LXOR"),
    ("double_int", "MAXLOC"), ("2int", "MAXLOC"), ("double_int", "MINLOC"),
]
#: Everything MPI defines for these dtypes (the full sweep).
FULL_OPS: dict[str, list[str]] = {
    "int32": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"],
    "int64": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
              "AFFINE"],
    "float32": ["SUM", "PROD", "MAX", "MIN"],
    "float64": ["SUM", "PROD", "MAX", "MIN"],
    "complex128": ["SUM", "PROD"],
    "bool": ["LAND", "LOR", "LXOR"],
    "double_int": ["MAXLOC", "MINLOC"],
    "2int": ["MAXLOC", "MINLOC"],
}
DATA_DTYPES = ["int32", "int64", "float32", "float64", "complex128", "bool", "double_int"]
FORMS = ["plain", "typed", "counted", "2d"]


def _form(i: int, dtype: str) -> str:
    f = FORMS[i % len(FORMS)]
    return "typed" if f in ("plain", "2d") and ref.is_pair(dtype) else f


def cases(coll: str, p: int) -> Iterator[Case]:
    """The sweep for ``coll`` at ``p`` ranks (widened by MPICOLL_TEST_FULL=1)."""
    rooted = coll in ROOTED
    if coll in VECTOR:
        yield from _vector_cases(coll, p)
        return
    if coll in REDUCTIONS:
        combos: list[tuple[str, str | None]] = list(REDUCTION_COMBOS)
        sweep: list[tuple[str, str | None]] = [
            ("int32", "SUM"), ("int64", "AFFINE"), ("double_int", "MAXLOC")]
        big: list[tuple[str, str | None]] = [("float64", "SUM")]
        if FULL:
            combos = [(d, o) for d, ops in FULL_OPS.items() for o in ops]
            sweep = combos
    else:
        combos = [(d, None) for d in DATA_DTYPES]
        sweep = [("float64", None), ("int32", None)]
        big = [("float64", None)]
        if FULL:
            sweep = combos
    counts = _counts(p)
    roots = range(p) if rooted else [0]
    i = 0
    # every dtype/op, at a count divisible and one not divisible by p
    for dtype, op in combos:
        for count in ([7, p + 1] if FULL else [(7, p + 1)[i % 2]]):
            i += 1
            yield Case(dtype, op, count, root=i % p, in_place=i % 3 == 1, form=_form(i, dtype),
                       nonroot_none=i % 4 != 3)
    # every count, in-place or not
    for dtype, op in sweep:
        for count in counts:
            for in_place in (False, True):
                for root in (roots if FULL else [(count + in_place) % p]):
                    i += 1
                    yield Case(dtype, op, count, root=root, in_place=in_place,
                               form=_form(i, dtype), nonroot_none=i % 4 != 3)
    # every root, in-place or not
    if rooted and not FULL:
        dtype, op = ("float64", "SUM") if coll in REDUCTIONS else ("int64", None)
        for root in roots:
            for in_place in (False, True):
                i += 1
                yield Case(dtype, op, 3, root=root, in_place=in_place, form=_form(i, dtype),
                           nonroot_none=bool(root % 2))
    # about 1 MiB per rank
    for dtype, op in big:
        yield Case(dtype, op, BIG, root=p - 1, in_place=False)


def _vector_cases(coll: str, p: int) -> Iterator[Case]:
    layouts = [0, 1, 2, 3, 4, 5] if coll != "alltoallv" else [0, 1, 2]
    if coll == "reduce_scatter":
        combos: list[tuple[str, str | None]] = list(REDUCTION_COMBOS)
    else:
        combos = [(d, None) for d in DATA_DTYPES]
    orders = ["reverse", "rank", "shuffle"]
    i = 0
    for layout in layouts:
        for in_place in (False, True):
            if coll == "alltoallv" and in_place and layout != 2:
                continue  # in-place alltoallv needs symmetric counts
            n_combos = len(combos) if FULL else 2
            for k in range(n_combos):
                dtype, op = combos[(i + k * 5) % len(combos)]
                i += 1
                yield Case(dtype, op, 0, root=i % p, in_place=in_place, layout=layout,
                           order=orders[i % 3], form="nodispl" if i % 7 == 3 else "typed",
                           nonroot_none=i % 4 != 2)
    if coll in ("scatterv", "gatherv"):
        for root in range(p):
            i += 1
            yield Case("int64", None, 0, root=root, in_place=bool(root % 2), layout=0,
                       order=orders[i % 3], nonroot_none=bool(i % 2))


# ------------------------------------------------------------------------------------------
# the run of one (collective, implementation): checks recorded, reported at the end


class Run:
    """Runs the cases of one collective on one implementation and records every mismatch."""

    def __init__(self, coll: str, impl: Impl, mode: str = "blocking") -> None:
        self.coll, self.impl = coll, impl
        self.mode = mode   # "blocking", or the I-form completed by "wait" or a "test" loop
        self.p, self.rank = WORLD.size, WORLD.rank
        self.failures: list[str] = []
        self.checks = 0
        self.case = Case()

    # -- recording
    def where(self, what: str) -> str:
        return (f"{self.coll} ({self.mode}) impl={self.impl.label} P={self.p} rank={self.rank} "
                f"[{self.case}] {what}")

    def fail(self, what: str, msg: str) -> None:
        self.failures.append(f"{self.where(what)}: {msg}")

    def expect(self, what: str, got: np.ndarray, want: np.ndarray) -> None:
        """Record a failure unless ``got`` equals ``want`` exactly."""
        self.checks += 1
        diff = ref.describe_difference(np.asarray(got), np.asarray(want))
        if diff is not None:
            self.fail(what, diff)

    def finish(self) -> None:
        """Raise on every rank if any rank recorded a failure; assert something was checked."""
        total = WORLD.allreduce(len(self.failures))
        checked = WORLD.allreduce(self.checks)
        if self.failures:
            shown = "\n".join(self.failures[:8])
            more = len(self.failures) - 8
            raise AssertionError(f"{len(self.failures)} failure(s) on rank {self.rank}:\n{shown}"
                                 + (f"\n... and {more} more" if more > 0 else ""))
        assert total == 0, f"{total} failure(s) on other ranks (see their reports)"
        assert checked > 0, "nothing was checked"

    def invoke(self, *args: Any, **kw: Any) -> None:
        """The blocking call, or the I-form completed with Wait() or a Test() loop."""
        try:
            if self.mode == "blocking":
                invoke(self.impl, self.coll, *args, **kw)
                return
            req = invoke(self.impl, "I" + self.coll, *args, **kw)
        except Exception as exc:  # name the case in the report (conftest aborts the job)
            if hasattr(exc, "add_note"):
                exc.add_note(self.where("raised"))
            raise
        if self.mode == "wait":
            req.Wait()
            return
        deadline = time.monotonic() + 120.0
        while not req.Test():
            if time.monotonic() > deadline:
                raise AssertionError(self.where("Test() never returned True in 120 s"))

    # -- restrictions
    def restriction_kw(self, rank: int, *, count: int | None,
                       uniform: bool = True) -> dict[str, Any]:
        """What ``rank`` knows of the call, as keywords of ``Algorithm.why_not``.

        ``count``: the element count of the call as the restrictions see it: the vector for
        bcast/reduce/allreduce/scan/exscan, one rank's block for scatter/gather/allgather/
        alltoall/reduce_scatter_block, the smallest block for allgatherv/reduce_scatter, none
        for scatterv/gatherv/alltoallv (a rank does not know the other ranks' counts there, so
        they are never "uniform" either).  ``in_place`` is the rank's own flag (only the root
        passes MPI.IN_PLACE in rooted collectives).
        """
        c = self.case
        if self.coll in ("scatterv", "gatherv", "alltoallv"):
            count, uniform = None, False
        in_place = c.in_place and (self.coll not in ROOTED or rank == c.root)
        kw: dict[str, Any] = {"count": count, "in_place": in_place, "uniform": uniform}
        if self.coll in REDUCTIONS:
            kw["commutative"] = ref.is_commutative(c.op or "SUM")
        return kw

    def call(self, outputs: list[np.ndarray], *args: Any, count: int, uniform: bool = True,
             **kw: Any) -> bool:
        """Run the collective; True if it ran and its results are to be checked.

        A forced algorithm whose restrictions forbid the case must raise RestrictionError and
        leave ``outputs`` untouched.
        """
        entry = self.impl.entry
        if entry is not None:
            verdicts = [entry.why_not(self.p, **self.restriction_kw(r, count=count,
                                                                      uniform=uniform))
                        for r in range(self.p)]
            forbidden = [v is not None for v in verdicts]
            if any(forbidden) and not all(forbidden):
                self.checks += 1
                self.fail("restriction", "the algorithm's restrictions forbid the case at some "
                          f"ranks only ({verdicts}); the others cannot know, the call would hang")
                return False
            if all(forbidden):
                before = [o.copy() for o in outputs]
                self.checks += 1
                try:
                    self.invoke(*args, **kw)
                except RestrictionError:
                    for k, (o, b) in enumerate(zip(outputs, before, strict=True)):
                        self.expect(f"output {k} untouched after RestrictionError", o, b)
                else:
                    self.fail("restriction", f"no RestrictionError although {verdicts[0]!r}")
                return False
        self.invoke(*args, **kw)
        return True


# ------------------------------------------------------------------------------------------
# buffers


def buf(n: int, dtype: str, form: str, fill: np.ndarray | None = None, tail: int = 3,
        blocks: int = 1) -> tuple[Any, np.ndarray, np.ndarray]:
    """A buffer of ``n`` elements (``blocks`` blocks of n/blocks) as (spec, view, whole array).

    ``form`` "counted" gives ``[arr, n/blocks, type]`` (mpi4py: the count of ONE block) over an
    array with ``tail`` extra elements that must never be touched; "typed" ``[arr, type]``;
    "2d" the array reshaped to (blocks, n/blocks); "plain" the array itself.
    """
    extra = tail if form == "counted" else 0
    whole = ref.garbage(n + extra, dtype)
    if fill is not None:
        whole[:n] = fill
    view = whole[:n]
    if form == "counted":
        return [whole, n // blocks, ref.mpi_type(dtype)], view, whole
    if form == "typed" or ref.is_pair(dtype):
        return [whole, ref.mpi_type(dtype)], view, whole
    if form == "2d" and n:  # a 2-D array (one row per block), a view of the same memory
        return whole.reshape(blocks, n // blocks), view, whole
    return whole, view, whole


def _send(run: Run, arr: np.ndarray) -> Any:
    """A send buffer spec: the bare array for the "plain" form, else ``[arr, type]``."""
    if run.case.form == "plain" and not ref.is_pair(run.case.dtype):
        return arr
    return [arr, ref.mpi_type(run.case.dtype)]


def _nonroot(run: Run, make: Callable[[], Any]) -> Any:
    """An argument MPI ignores at non-roots: None or (case.nonroot_none False) a real buffer."""
    return None if run.case.nonroot_none else make()


def _tail_untouched(run: Run, whole: np.ndarray, n: int, what: str = "recvbuf") -> None:
    if whole.size > n:
        run.expect(f"{what} past count untouched", whole[n:],
                   ref.garbage(whole.size, run.case.dtype)[n:])


def _op(case: Case) -> MPI.Op:
    return ref.mpi_op(case.op or "SUM")


# ------------------------------------------------------------------------------------------
# one runner per collective: set up, call, compare with the reference


def run_bcast(run: Run) -> None:
    c, r = run.case, run.rank
    want = ref.inputs(c.root, c.count, c.dtype)
    spec, view, whole = buf(c.count, c.dtype, c.form, fill=want if r == c.root else None)
    if run.call([view], spec, root=c.root, count=c.count):
        run.expect("buf", view, want)
        _tail_untouched(run, whole, c.count, "buf")


def run_scatter(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    n = c.count
    send = ref.inputs(c.root, p * n, c.dtype)
    keep = send.copy()
    is_root = r == c.root
    spec, view, whole = buf(n, c.dtype, c.form)
    sendarg = _send(run, send) if is_root else _nonroot(
        run, lambda: [ref.garbage(p * n, c.dtype), ref.mpi_type(c.dtype)])
    recvarg = MPI.IN_PLACE if (is_root and c.in_place) else spec
    ran = run.call([view], sendarg, recvarg, root=c.root, count=n)
    if ran and not (is_root and c.in_place):
        run.expect("recvbuf", view, keep[r * n:(r + 1) * n])
        _tail_untouched(run, whole, n)
    if is_root:
        run.expect("sendbuf unchanged", send, keep)


def run_gather(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    n = c.count
    is_root = r == c.root
    send = ref.inputs(r, n, c.dtype)
    keep = send.copy()
    want = np.concatenate([ref.inputs(q, n, c.dtype) for q in range(p)])
    spec, view, whole = buf(p * n, c.dtype, c.form, blocks=p)
    if is_root and c.in_place:
        view[r * n:(r + 1) * n] = send
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, send)
    recvarg = spec if is_root else _nonroot(run, lambda: buf(p * n, c.dtype, "typed", blocks=p)[0])
    ran = run.call([view], sendarg, recvarg, root=c.root, count=n)
    if ran and is_root:
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, p * n)
    run.expect("sendbuf unchanged", send, keep)


def _vlayout(run: Run) -> tuple[list[int], list[int], int]:
    counts = ref.vcounts(run.p, run.case.layout)
    order = run.case.order if run.case.form != "nodispl" else "rank"
    gap = 2 if run.case.form != "nodispl" else 0
    displs, length = ref.vdispls(counts, order, gap=gap)
    return counts, displs, length


def _vspec(run: Run, arr: np.ndarray, counts: list[int], displs: list[int]) -> list[Any]:
    if run.case.form == "nodispl":
        return [arr, counts, ref.mpi_type(run.case.dtype)]
    return [arr, (counts, displs), ref.mpi_type(run.case.dtype)]


def run_scatterv(run: Run) -> None:
    c, r = run.case, run.rank
    counts, displs, length = _vlayout(run)
    uniform = len(set(counts)) == 1
    is_root = r == c.root
    send = ref.inputs(c.root, length, c.dtype)
    keep = send.copy()
    recv = ref.garbage(counts[r], c.dtype)
    sendarg = _vspec(run, send, counts, displs) if is_root else _nonroot(
        run, lambda: _vspec(run, ref.garbage(length, c.dtype), counts, displs))
    recvarg = MPI.IN_PLACE if (is_root and c.in_place) else [recv, ref.mpi_type(c.dtype)]
    ran = run.call([recv], sendarg, recvarg, root=c.root, count=counts[r], uniform=uniform)
    if ran and not (is_root and c.in_place):
        run.expect("recvbuf", recv, keep[displs[r]:displs[r] + counts[r]])
    if is_root:
        run.expect("sendbuf unchanged", send, keep)


def run_gatherv(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    counts, displs, length = _vlayout(run)
    uniform = len(set(counts)) == 1
    is_root = r == c.root
    send = ref.inputs(r, counts[r], c.dtype)
    keep = send.copy()
    recv = ref.garbage(length, c.dtype)
    want = recv.copy()
    for q in range(p):
        want[displs[q]:displs[q] + counts[q]] = ref.inputs(q, counts[q], c.dtype)
    if is_root and c.in_place:
        recv[displs[r]:displs[r] + counts[r]] = send
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, send)
    recvarg = _vspec(run, recv, counts, displs) if is_root else _nonroot(
        run, lambda: _vspec(run, ref.garbage(length, c.dtype), counts, displs))
    ran = run.call([recv], sendarg, recvarg, root=c.root, count=counts[r], uniform=uniform)
    if ran and is_root:
        run.expect("recvbuf (blocks and gaps)", recv, want)
    run.expect("sendbuf unchanged", send, keep)


def run_allgather(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    n = c.count
    send = ref.inputs(r, n, c.dtype)
    keep = send.copy()
    want = np.concatenate([ref.inputs(q, n, c.dtype) for q in range(p)])
    spec, view, whole = buf(p * n, c.dtype, c.form, blocks=p)
    if c.in_place:
        view[r * n:(r + 1) * n] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    if run.call([view], sendarg, spec, count=n):
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, p * n)
    run.expect("sendbuf unchanged", send, keep)


def run_allgatherv(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    counts, displs, length = _vlayout(run)
    uniform = len(set(counts)) == 1
    send = ref.inputs(r, counts[r], c.dtype)
    keep = send.copy()
    recv = ref.garbage(length, c.dtype)
    want = recv.copy()
    for q in range(p):
        want[displs[q]:displs[q] + counts[q]] = ref.inputs(q, counts[q], c.dtype)
    if c.in_place:
        recv[displs[r]:displs[r] + counts[r]] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    if run.call([recv], sendarg, _vspec(run, recv, counts, displs), count=min(counts),
                uniform=uniform):
        run.expect("recvbuf (blocks and gaps)", recv, want)
    run.expect("sendbuf unchanged", send, keep)


def run_alltoall(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    n = c.count
    send = ref.inputs(r, p * n, c.dtype)
    keep = send.copy()
    want = np.concatenate([ref.inputs(q, p * n, c.dtype)[r * n:(r + 1) * n] for q in range(p)])
    spec, view, whole = buf(p * n, c.dtype, c.form, blocks=p)
    if c.in_place:
        view[...] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    if run.call([view], sendarg, spec, count=n):
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, p * n)
    run.expect("sendbuf unchanged", send, keep)


def run_alltoallv(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    mat = ref.alltoallv_matrix(p, c.layout)

    def send_layout(q: int) -> tuple[list[int], list[int], int]:
        sc = [int(x) for x in mat[q, :]]
        sd, slen = ref.vdispls(sc, "shuffle" if c.order != "rank" else "rank", gap=1)
        return sc, sd, slen

    def recv_layout(q: int) -> tuple[list[int], list[int], int]:
        rc = [int(x) for x in mat[:, q]]
        rd, rlen = ref.vdispls(rc, c.order, gap=2)
        return rc, rd, rlen

    mt = ref.mpi_type(c.dtype)
    rc, rd, rlen = recv_layout(r)
    uniform = len(set(rc)) == 1 and len({int(x) for x in mat[r, :]}) == 1
    if c.in_place:  # symmetric counts: the send data lies in recvbuf, at the receive layout
        recv = ref.inputs(r, rlen, c.dtype)
        want = recv.copy()
        for q in range(p):
            qc, qd, qlen = recv_layout(q)
            want[rd[q]:rd[q] + rc[q]] = ref.inputs(q, qlen, c.dtype)[qd[r]:qd[r] + qc[r]]
        if run.call([recv], MPI.IN_PLACE, [recv, (rc, rd), mt], count=rc[r], uniform=uniform):
            run.expect("recvbuf (in place; blocks and gaps)", recv, want)
        return
    sc, sd, slen = send_layout(r)
    send = ref.inputs(r, slen, c.dtype)
    keep = send.copy()
    recv = ref.garbage(rlen, c.dtype)
    want = recv.copy()
    for q in range(p):
        qc, qd, qlen = send_layout(q)
        want[rd[q]:rd[q] + rc[q]] = ref.inputs(q, qlen, c.dtype)[qd[r]:qd[r] + qc[r]]
    if run.call([recv], [send, (sc, sd), mt], [recv, (rc, rd), mt], count=rc[r],
                uniform=uniform):
        run.expect("recvbuf (blocks and gaps)", recv, want)
    run.expect("sendbuf unchanged", send, keep)


def _reduction_inputs(run: Run, n: int) -> list[np.ndarray]:
    c = run.case
    return [ref.inputs(q, n, c.dtype, c.op) for q in range(run.p)]


def run_reduce(run: Run) -> None:
    c, r = run.case, run.rank
    n = c.count
    is_root = r == c.root
    ins = _reduction_inputs(run, n)
    want = ref.reference_reduce(c.op or "SUM", ins)
    send = ins[r].copy()
    spec, view, whole = buf(n, c.dtype, c.form, fill=send if (is_root and c.in_place) else None)
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, send)
    recvarg = spec if is_root else _nonroot(run, lambda: buf(n, c.dtype, "typed")[0])
    ran = run.call([view], sendarg, recvarg, op=_op(c), root=c.root, count=n)
    if ran and is_root:
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, n)
    run.expect("sendbuf unchanged", send, ins[r])


def run_allreduce(run: Run) -> None:
    c, r = run.case, run.rank
    n = c.count
    ins = _reduction_inputs(run, n)
    want = ref.reference_reduce(c.op or "SUM", ins)
    send = ins[r].copy()
    spec, view, whole = buf(n, c.dtype, c.form, fill=send if c.in_place else None)
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    if run.call([view], sendarg, spec, op=_op(c), count=n):
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, n)
    run.expect("sendbuf unchanged", send, ins[r])


def run_scan(run: Run, exclusive: bool = False) -> None:
    c, r = run.case, run.rank
    n = c.count
    ins = _reduction_inputs(run, n)
    wants = (ref.reference_exscan if exclusive else ref.reference_scan)(c.op or "SUM", ins)
    send = ins[r].copy()
    spec, view, whole = buf(n, c.dtype, c.form, fill=send if c.in_place else None)
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    if run.call([view], sendarg, spec, op=_op(c), count=n):
        want = wants[r]
        if want is not None:   # Exscan's result at rank 0 is undefined
            run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, n)
    run.expect("sendbuf unchanged", send, ins[r])


def run_exscan(run: Run) -> None:
    run_scan(run, exclusive=True)


def run_reduce_scatter_block(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    n = c.count
    ins = _reduction_inputs(run, p * n)
    want = ref.reference_reduce(c.op or "SUM", ins)[r * n:(r + 1) * n]
    send = ins[r].copy()
    mt = ref.mpi_type(c.dtype)
    if c.in_place:
        recv = send.copy()
        if run.call([recv], MPI.IN_PLACE, [recv, mt], op=_op(c), count=n):
            run.expect("recvbuf[:count] (in place)", recv[:n], want)
        return
    spec, view, whole = buf(n, c.dtype, c.form)
    if run.call([view], [send, mt], spec, op=_op(c), count=n):
        run.expect("recvbuf", view, want)
        _tail_untouched(run, whole, n)
    run.expect("sendbuf unchanged", send, ins[r])


def run_reduce_scatter(run: Run) -> None:
    c, p, r = run.case, run.p, run.rank
    counts = ref.vcounts(p, c.layout)
    uniform = len(set(counts)) == 1
    total = sum(counts)
    off = sum(counts[:r])
    ins = _reduction_inputs(run, total)
    want = ref.reference_reduce(c.op or "SUM", ins)[off:off + counts[r]]
    send = ins[r].copy()
    mt = ref.mpi_type(c.dtype)
    rcounts = None if c.form == "nodispl" else counts   # None: mpi4py-style inference
    if c.in_place:
        recv = send.copy()
        if run.call([recv], MPI.IN_PLACE, [recv, mt], counts, op=_op(c), count=min(counts),
                    uniform=uniform):
            run.expect("recvbuf[:recvcount] (in place)", recv[:counts[r]], want)
        return
    recv = ref.garbage(counts[r] + 2, c.dtype)
    keep_tail = recv[counts[r]:].copy()
    if run.call([recv], [send, mt], [recv, counts[r], mt], rcounts, op=_op(c),
                count=min(counts), uniform=uniform):
        run.expect("recvbuf", recv[:counts[r]], want)
        run.expect("recvbuf past recvcount untouched", recv[counts[r]:], keep_tail)
    run.expect("sendbuf unchanged", send, ins[r])


RUNNERS: dict[str, Callable[[Run], None]] = {
    "bcast": run_bcast, "scatter": run_scatter, "scatterv": run_scatterv,
    "gather": run_gather, "gatherv": run_gatherv, "reduce": run_reduce,
    "allreduce": run_allreduce, "reduce_scatter_block": run_reduce_scatter_block,
    "reduce_scatter": run_reduce_scatter, "allgather": run_allgather,
    "allgatherv": run_allgatherv, "alltoall": run_alltoall, "alltoallv": run_alltoallv,
    "scan": run_scan, "exscan": run_exscan,
}

PARAMS = [pytest.param(coll, impl, id=f"{coll}-{impl.label}")
          for coll in COLLECTIVES if coll != "barrier" for impl in implementations(coll)]


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl"), PARAMS)
def test_collective(coll: str, impl: Impl) -> None:
    """``coll`` on ``impl`` matches the NumPy reference on every case of the sweep."""
    run = Run(coll, impl)
    for case in cases(coll, run.p):
        run.case = case
        RUNNERS[coll](run)
    run.finish()


# ------------------------------------------------------------------------------------------
# barrier: nobody leaves before everybody entered


@pytest.mark.mpi
@pytest.mark.parametrize("impl", implementations("barrier"), ids=lambda i: i.label)
def test_barrier(impl: Impl) -> None:
    """No rank leaves Barrier before the last rank entered it (one host: a shared clock).

    The late rank sleeps before entering; every rank's exit time (CLOCK_MONOTONIC, shared by
    the processes of one host) must be after the late rank's entry time.
    """
    hosts = WORLD.allgather(MPI.Get_processor_name())
    if len(set(hosts)) > 1:
        pytest.skip("causality check needs one host (a shared monotonic clock)")
    p, r = WORLD.size, WORLD.rank
    bad = []
    for late in sorted({p - 1, 0, p // 2}):
        if r == late:
            time.sleep(0.05)
        entered = time.monotonic()
        invoke(impl, "barrier")
        left = time.monotonic()
        late_entered = WORLD.bcast(entered, root=late)
        if left < late_entered:
            bad.append(f"late rank {late}: rank {r} left at {left:.6f} before rank {late} "
                       f"entered at {late_entered:.6f}")
    nbad = WORLD.allreduce(len(bad))
    assert not bad, f"barrier impl={impl.label} P={p}: " + "; ".join(bad)
    assert nbad == 0, f"barrier impl={impl.label} P={p}: failed on another rank"


# ------------------------------------------------------------------------------------------
# floating-point results that are not exact: every rank must get the same bits


def _allreduce_impls() -> list[Impl]:
    return implementations("allreduce")


@pytest.mark.mpi
@pytest.mark.parametrize("impl", _allreduce_impls(), ids=lambda i: i.label)
def test_allreduce_bitwise_identical_on_all_ranks(impl: Impl) -> None:
    """Allreduce of random (inexact) floats gives bitwise identical results on every rank."""
    p, r = WORLD.size, WORLD.rank
    rng = np.random.default_rng(1234 + r)
    bad = []
    for dtype, n, op, in_place in [("float64", 1000, MPI.SUM, False),
                                   ("float32", 2 * p + 1, MPI.SUM, True),
                                   ("float64", 7, MPI.PROD, False),
                                   ("complex128", p + 1, MPI.SUM, True)]:
        x = rng.uniform(0.5, 1.5, size=n) * 10.0 ** rng.integers(-3, 4, size=n)
        if dtype == "complex128":
            x = x + 1j * rng.uniform(-1, 1, size=n)
        x = x.astype(dtype)
        y = x.copy() if in_place else np.zeros_like(x)
        sendarg = MPI.IN_PLACE if in_place else x
        entry = impl.entry
        kw = dict(count=n, in_place=in_place, commutative=True, uniform=True)
        if entry is not None and entry.why_not(p, **kw) is not None:
            with pytest.raises(RestrictionError):
                invoke(impl, "allreduce", sendarg, y, op=op)
            continue
        invoke(impl, "allreduce", sendarg, y, op=op)
        everyone = WORLD.allgather(y.tobytes())
        differ = [q for q in range(p) if everyone[q] != everyone[0]]
        if differ:
            k = int(np.flatnonzero(np.frombuffer(everyone[differ[0]], dtype=dtype)
                                   != np.frombuffer(everyone[0], dtype=dtype))[0])
            bad.append(f"{dtype} n={n} op={op} in_place={in_place}: ranks {differ} differ "
                       f"from rank 0 (first at index {k})")
        # and the result is close to the true sum/product (catches a bitwise-equal garbage)
        xs = WORLD.allgather(x)
        want = ref.reference_reduce("SUM" if op == MPI.SUM else "PROD",
                                    [np.asarray(v, dtype=np.complex128 if dtype.startswith("c")
                                                else np.float64) for v in xs])
        if not np.allclose(y, want, rtol=1e-4):
            bad.append(f"{dtype} n={n} op={op} in_place={in_place}: not close to the sum")
    nbad = WORLD.allreduce(len(bad))
    assert not bad, f"allreduce impl={impl.label} P={p} rank={r}: " + "; ".join(bad)
    assert nbad == 0, f"allreduce impl={impl.label} P={p}: failed on another rank"
