"""Shared runners of the MPI collective tests (test_collectives.py, test_nonblocking.py).

One implementation (``Impl``: native, p2p auto, p2p forced to a registered algorithm), one call
(``Case``), and a :class:`Run` that makes every rank's arguments of the case (they are functions
of rank and index, see ``tests/oracle.py``), asks the oracle what every buffer must hold, calls
the collective and records every mismatch; the failures are reported together at the end (on
every rank, so no rank is left waiting in a collective when another one's check fails).

A forced algorithm whose restrictions forbid a case must raise
:class:`mpicoll.RestrictionError` on every rank, with every buffer untouched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import oracle
from mpi4py import MPI

import mpicoll
from mpicoll import registry
from mpicoll.algorithms.collectives import BY_NAME, NAMES, RECORDS
from mpicoll.algorithms.registry import RestrictionError

WORLD = MPI.COMM_WORLD

COLLECTIVES = NAMES
ROOTED = {c.name for c in RECORDS if c.rooted}
REDUCTIONS = {c.name for c in RECORDS if c.reduction}
VECTOR = {c.name for c in RECORDS if c.vector}


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


#: Open MPI 5.0.11's own MPI_Alltoallw writes outside the blocks of these cases (the send
#: buffer changed, the heap corrupted: seen with plain mpi4py too), so native Alltoallw is
#: compared only under MPICH; the p2p Alltoallw is checked against the oracle on both
_NATIVE_BROKEN = {"alltoallw"} if "Open MPI" in MPI.Get_library_version() else set()


#: MPICOLL_TEST_FULL=1 (make test-full): the parameterised algorithms at every example value
#: of their parameters too (registry.variants); by default at their defaults, the examples
#: being swept by the simulator's tests (tests/unit) and by test_traffic here
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")


def implementations(coll: str) -> list[Impl]:
    """native, p2p auto and every registered p2p algorithm of ``coll`` (with their parameter
    examples under MPICOLL_TEST_FULL=1)."""
    algorithms = registry.variants(coll) if FULL else registry.algorithms(coll)
    assert algorithms, f"the registry lists no algorithm of {coll}"
    native = [] if coll in _NATIVE_BROKEN else [Impl("native")]
    return [*native, Impl("p2p", "auto"), *(Impl("p2p", a.name, a) for a in algorithms)]


_BACKENDS: dict[str, Any] = {}


def backend(kind: str) -> Any:
    """The backend object over COMM_WORLD, made once per process (p2p creation is collective)."""
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
# cases and calls


@dataclass(frozen=True)
class Case:
    """One call: what every rank passes (the same Case on every rank)."""

    dtype: str = "float64"
    op: str | None = None          # reductions only
    count: int = 7                 # elements per rank block (non-v collectives)
    root: int = 0
    in_place: bool = False
    form: str = "plain"            # plain arr | typed [arr, type] | counted [arr, n, type] | 2d
    layout: int = 0                # v-variants: counts layout (see oracle.vcounts)
    order: str = "reverse"         # v-variants: block order in the buffer (see oracle.vdispls)
    nonroot_none: bool = True      # pass None for arguments MPI ignores at non-roots

    def __str__(self) -> str:
        return (f"dtype={self.dtype} op={self.op} count={self.count} root={self.root} "
                f"in_place={self.in_place} form={self.form} layout={self.layout} "
                f"order={self.order} nonroot_none={self.nonroot_none}")


@dataclass
class Call:
    """What one rank passes: mpi4py-style positional arguments and keywords, and what the
    algorithms' restrictions see of the call (see :meth:`Run.restriction_kw`)."""

    args: tuple[Any, ...]
    kw: dict[str, Any]
    count: int | None
    uniform: bool = True


def _fresh(spec: Any) -> Any:
    """A copy of an argument: every array in it copied (a call writes into its buffers)."""
    if isinstance(spec, np.ndarray):
        return spec.copy()
    if isinstance(spec, list):
        return [_fresh(x) for x in spec]
    return spec


#: this rank's arguments and the oracle's verdict per (collective, case, P): the same for every
#: implementation of a collective, so made once (only the current collective's are kept)
_PREPARED: dict[tuple[str, Case, int], tuple[Call, oracle.Expected | None]] = {}


def _array_of(spec: Any) -> np.ndarray | None:
    if isinstance(spec, np.ndarray):
        return spec
    if isinstance(spec, list) and spec and isinstance(spec[0], np.ndarray):
        return spec[0]
    return None


# ------------------------------------------------------------------------------------------
# the run of one (collective, implementation): checks recorded, reported at the end


class Run:
    """Runs the cases of one collective on one implementation and records every mismatch."""

    def __init__(self, coll: str, impl: Impl, mode: str = "blocking") -> None:
        self.coll, self.impl = coll, impl
        #: "blocking", the I-form completed by "wait" or a "test" loop, "persistent:N" (the
        #: *_init form started N times), "repeated:N" / "irepeated:N" (the blocking call / the
        #: I-form made N times on the same buffers); see :meth:`persistent`
        self.mode = mode
        self.buffers: list[np.ndarray] = []
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

    def expect(self, what: str, got: np.ndarray, want: np.ndarray | oracle.Expected) -> None:
        """Record a failure unless ``got`` equals ``want`` exactly (where MPI defines it)."""
        self.checks += 1
        if isinstance(want, oracle.Expected):
            diff = oracle.difference(got, want)
        else:
            diff = oracle.describe_difference(np.asarray(got), np.asarray(want))
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

    # -- one case
    def run_case(self, case: Case) -> None:
        """Every rank's arguments of ``case``, the oracle's verdict, the call, the checks: the
        output buffer holds exactly what the oracle says (blocks, gaps and the elements past
        the count), every other buffer of the call is unchanged."""
        self.case = case
        key = (self.coll, case, self.p)
        if key not in _PREPARED:
            if any(k[0] != self.coll for k in _PREPARED):
                _PREPARED.clear()
            make = MAKERS[self.coll]
            calls = [make(self, q) for q in range(self.p)]
            want = oracle.expected(self.coll, [c.args for c in calls], [c.kw for c in calls])
            _PREPARED[key] = (calls[self.rank], want[self.rank])
        prepared, wanted = _PREPARED[key]
        mine = Call(tuple(_fresh(a) for a in prepared.args), prepared.kw, prepared.count,
                    prepared.uniform)
        names = oracle.SIGNATURES[self.coll]
        arrays = [(names[i], a) for i, s in enumerate(mine.args)
                  if (a := _array_of(s)) is not None]
        before = [a.copy() for _, a in arrays]
        self.buffers = [a for _, a in arrays]
        if not self.call([a for _, a in arrays], *mine.args, count=mine.count,
                         uniform=mine.uniform, **mine.kw):
            return
        for (name, a), b in zip(arrays, before, strict=True):
            if wanted is not None and name == wanted.arg:
                self.expect(f"{name} (blocks, gaps, past the count)", a, wanted)
            else:
                self.expect(f"{name} unchanged", a, b)

    def invoke(self, *args: Any, **kw: Any) -> None:
        """The blocking call, or the I-form completed with Wait() or a Test() loop."""
        try:
            if self.mode == "blocking":
                invoke(self.impl, self.coll, *args, **kw)
                return
            if self.mode.startswith(("persistent:", "repeated:", "irepeated:")):
                self.persistent(int(self.mode.split(":")[1]), *args, **kw)
                return
            req = invoke(self.impl, "I" + self.coll, *args, **kw)
        except Exception as exc:  # name the case in the report (conftest aborts the job)
            exc.add_note(self.where("raised"))
            raise
        if self.mode == "wait":
            req.Wait()
            return
        deadline = time.monotonic() + 120.0
        while not req.Test():
            if time.monotonic() > deadline:
                raise AssertionError(self.where("Test() never returned True in 120 s"))

    def persistent(self, starts: int, *args: Any, **kw: Any) -> None:
        """The *_init form, started ``starts`` times (mode "persistent:N"), or the blocking
        call or the I-form made ``starts`` times on the same buffers (mode "repeated:N" /
        "irepeated:N", the I-form completed by Wait and Test loops in turn: the front door's
        cached parse, and from the second call p2p's compiled plan): before every run but
        the last, every buffer of the call holds other values (its rows reversed), so the
        last run, on the case's own buffers, shows that each run reads the buffers as they
        are then."""
        nonblocking = self.mode.startswith("irepeated:")
        repeated = nonblocking or self.mode.startswith("repeated:")
        record = BY_NAME[self.coll]
        fn = getattr(backend(self.impl.backend),
                     record.method_for(nonblocking) if repeated else record.persistent)
        if self.impl.entry is not None:
            kw["algorithm"] = self.impl.algorithm
        req = None if repeated else fn(*args, **kw)
        originals = [a.copy() for a in self.buffers]
        for k in range(starts):
            last = k == starts - 1
            for a, o in zip(self.buffers, originals, strict=True):
                np.copyto(a, o if last else o[::-1])
            if req is None:
                try:
                    out = fn(*args, **kw)
                except Exception:  # refused before any message: the buffers as they were
                    for a, o in zip(self.buffers, originals, strict=True):
                        np.copyto(a, o)
                    raise
                if nonblocking and k % 2:  # the I-form: a Test loop, or Wait
                    while not out.Test():
                        pass
                elif nonblocking:
                    out.Wait()
                continue
            req.Start()
            req.Wait()
        if req is not None:
            assert req.Test(), "an inactive persistent request tests complete"
            req.Free()

    # -- restrictions
    def restriction_kw(self, rank: int, *, count: int | None,
                       uniform: bool = True) -> dict[str, Any]:
        """What ``rank`` knows of the call, as keywords of ``Algorithm.why_not``.

        ``count``: the element count of the call as the restrictions see it: the vector for
        bcast/reduce/allreduce/scan/exscan, one rank's block for scatter/gather/allgather/
        alltoall/reduce_scatter_block, the smallest block for allgatherv/reduce_scatter, none
        for scatterv/gatherv/alltoallv/alltoallw (a rank does not know the other ranks' counts
        there, so they are never "uniform" either).  ``in_place`` is the rank's own flag (only
        the root passes MPI.IN_PLACE in rooted collectives).
        """
        c = self.case
        if self.coll in ("scatterv", "gatherv", "alltoallv", "alltoallw"):
            count, uniform = None, False
        in_place = c.in_place and (self.coll not in ROOTED or rank == c.root)
        kw: dict[str, Any] = {"count": count, "in_place": in_place, "uniform": uniform}
        if self.coll in REDUCTIONS:
            kw["commutative"] = oracle.is_commutative(c.op or "SUM")
        return kw

    def call(self, buffers: list[np.ndarray], *args: Any, count: int | None,
             uniform: bool = True, **kw: Any) -> bool:
        """Run the collective; True if it ran and its results are to be checked.

        A forced algorithm whose restrictions forbid the case must raise RestrictionError and
        leave ``buffers`` untouched.
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
                before = [o.copy() for o in buffers]
                self.checks += 1
                try:
                    self.invoke(*args, **kw)
                except RestrictionError:
                    for k, (o, b) in enumerate(zip(buffers, before, strict=True)):
                        self.expect(f"buffer {k} untouched after RestrictionError", o, b)
                else:
                    self.fail("restriction", f"no RestrictionError although {verdicts[0]!r}")
                return False
        self.invoke(*args, **kw)
        return True


# ------------------------------------------------------------------------------------------
# buffers


def buf(n: int, dtype: str, form: str, fill: np.ndarray | None = None, tail: int = 3,
        blocks: int = 1) -> tuple[Any, np.ndarray]:
    """A buffer of ``n`` elements (``blocks`` blocks of n/blocks) as (spec, whole array).

    ``form`` "counted" gives ``[arr, n/blocks, type]`` (mpi4py: the count of ONE block) over an
    array with ``tail`` extra elements that must never be touched; "typed" ``[arr, type]``;
    "2d" the array reshaped to (blocks, n/blocks); "plain" the array itself.
    """
    extra = tail if form == "counted" else 0
    whole = oracle.garbage(n + extra, dtype)
    if fill is not None:
        whole[:n] = fill
    if form == "counted":
        return [whole, n // blocks, oracle.mpi_type(dtype)], whole
    if form == "typed" or oracle.is_pair(dtype):
        return [whole, oracle.mpi_type(dtype)], whole
    if form == "2d" and n:  # a 2-D array (one row per block), a view of the same memory
        return whole.reshape(blocks, n // blocks), whole
    return whole, whole


def _send(run: Run, arr: np.ndarray) -> Any:
    """A send buffer spec: the bare array for the "plain" form, else ``[arr, type]``."""
    if run.case.form == "plain" and not oracle.is_pair(run.case.dtype):
        return arr
    return [arr, oracle.mpi_type(run.case.dtype)]


def _nonroot(run: Run, make: Callable[[], Any]) -> Any:
    """An argument MPI ignores at non-roots: None or (case.nonroot_none False) a real buffer."""
    return None if run.case.nonroot_none else make()


def _op(case: Case) -> MPI.Op:
    return oracle.mpi_op(case.op or "SUM")


def _vlayout(run: Run) -> tuple[list[int], list[int], int]:
    counts = oracle.vcounts(run.p, run.case.layout)
    order = run.case.order if run.case.form != "nodispl" else "rank"
    gap = 2 if run.case.form != "nodispl" else 0
    displs, length = oracle.vdispls(counts, order, gap=gap)
    return counts, displs, length


def _vspec(run: Run, arr: np.ndarray, counts: list[int], displs: list[int]) -> list[Any]:
    if run.case.form == "nodispl":
        return [arr, counts, oracle.mpi_type(run.case.dtype)]
    return [arr, (counts, displs), oracle.mpi_type(run.case.dtype)]


# ------------------------------------------------------------------------------------------
# one maker per collective: what rank q passes in the run's case


def make_bcast(run: Run, q: int) -> Call:
    c = run.case
    data = oracle.inputs(c.root, c.count, c.dtype)
    spec, _ = buf(c.count, c.dtype, c.form, fill=data if q == c.root else None)
    return Call((spec,), {"root": c.root}, c.count)


def make_scatter(run: Run, q: int) -> Call:
    c, p = run.case, run.p
    n = c.count
    is_root = q == c.root
    sendarg = _send(run, oracle.inputs(c.root, p * n, c.dtype)) if is_root else _nonroot(
        run, lambda: [oracle.garbage(p * n, c.dtype), oracle.mpi_type(c.dtype)])
    recvarg = MPI.IN_PLACE if (is_root and c.in_place) else buf(n, c.dtype, c.form)[0]
    return Call((sendarg, recvarg), {"root": c.root}, n)


def make_gather(run: Run, q: int) -> Call:
    c, p = run.case, run.p
    n = c.count
    is_root = q == c.root
    send = oracle.inputs(q, n, c.dtype)
    if is_root:
        recvarg, whole = buf(p * n, c.dtype, c.form, blocks=p)
        if c.in_place:
            whole[q * n:(q + 1) * n] = send
    else:
        recvarg = _nonroot(run, lambda: buf(p * n, c.dtype, "typed", blocks=p)[0])
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, send)
    return Call((sendarg, recvarg), {"root": c.root}, n)


def make_scatterv(run: Run, q: int) -> Call:
    c = run.case
    counts, displs, length = _vlayout(run)
    is_root = q == c.root
    sendarg = (_vspec(run, oracle.inputs(c.root, length, c.dtype), counts, displs) if is_root
               else _nonroot(run, lambda: _vspec(run, oracle.garbage(length, c.dtype), counts,
                                                 displs)))
    recvarg = (MPI.IN_PLACE if (is_root and c.in_place)
               else [oracle.garbage(counts[q], c.dtype), oracle.mpi_type(c.dtype)])
    return Call((sendarg, recvarg), {"root": c.root}, counts[q], len(set(counts)) == 1)


def make_gatherv(run: Run, q: int) -> Call:
    c = run.case
    counts, displs, length = _vlayout(run)
    is_root = q == c.root
    send = oracle.inputs(q, counts[q], c.dtype)
    if is_root:
        recv = oracle.garbage(length, c.dtype)
        if c.in_place:
            recv[displs[q]:displs[q] + counts[q]] = send
        recvarg = _vspec(run, recv, counts, displs)
    else:
        recvarg = _nonroot(run, lambda: _vspec(run, oracle.garbage(length, c.dtype), counts,
                                               displs))
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, send)
    return Call((sendarg, recvarg), {"root": c.root}, counts[q], len(set(counts)) == 1)


def make_allgather(run: Run, q: int) -> Call:
    c, p = run.case, run.p
    n = c.count
    send = oracle.inputs(q, n, c.dtype)
    spec, whole = buf(p * n, c.dtype, c.form, blocks=p)
    if c.in_place:
        whole[q * n:(q + 1) * n] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    return Call((sendarg, spec), {}, n)


def make_allgatherv(run: Run, q: int) -> Call:
    c = run.case
    counts, displs, length = _vlayout(run)
    send = oracle.inputs(q, counts[q], c.dtype)
    recv = oracle.garbage(length, c.dtype)
    if c.in_place:
        recv[displs[q]:displs[q] + counts[q]] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    return Call((sendarg, _vspec(run, recv, counts, displs)), {}, min(counts),
                len(set(counts)) == 1)


def make_alltoall(run: Run, q: int) -> Call:
    c, p = run.case, run.p
    n = c.count
    send = oracle.inputs(q, p * n, c.dtype)
    spec, whole = buf(p * n, c.dtype, c.form, blocks=p)
    if c.in_place:
        whole[:p * n] = send
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, send)
    return Call((sendarg, spec), {}, n)


def make_alltoallv(run: Run, q: int) -> Call:
    c = run.case
    mat = oracle.alltoallv_matrix(run.p, c.layout)
    mt = oracle.mpi_type(c.dtype)
    rc = [int(x) for x in mat[:, q]]
    rd, rlen = oracle.vdispls(rc, c.order, gap=2)
    uniform = len(set(rc)) == 1 and len({int(x) for x in mat[q, :]}) == 1
    if c.in_place:  # symmetric counts: the send data lies in recvbuf, at the receive layout
        recv = oracle.inputs(q, rlen, c.dtype)
        return Call((MPI.IN_PLACE, [recv, (rc, rd), mt]), {}, rc[q], uniform)
    sc = [int(x) for x in mat[q, :]]
    sd, slen = oracle.vdispls(sc, "shuffle" if c.order != "rank" else "rank", gap=1)
    send = oracle.inputs(q, slen, c.dtype)
    recv = oracle.garbage(rlen, c.dtype)
    return Call(([send, (sc, sd), mt], [recv, (rc, rd), mt]), {}, rc[q], uniform)


def make_alltoallw(run: Run, q: int) -> Call:
    """Alltoallv's case with a datatype per peer and byte displacements: ``[buf, (counts,
    displs), types]``, or ``[buf, counts, displs, types]`` (mpi4py's other BufSpecW form) for
    the ``nodispl`` form."""
    v = make_alltoallv(run, q)
    p = run.p

    def w(spec: Any) -> Any:
        if spec is MPI.IN_PLACE:
            return spec
        arr, (counts, displs), mt = spec
        item = mt.Get_extent()[1]
        byte_displs = [d * item for d in displs]
        if run.case.form == "nodispl":
            return [arr, counts, byte_displs, [mt] * p]
        return [arr, (counts, byte_displs), [mt] * p]

    return Call(tuple(w(a) for a in v.args), v.kw, v.count, v.uniform)


def make_reduce(run: Run, q: int) -> Call:
    c = run.case
    n = c.count
    is_root = q == c.root
    mine = oracle.inputs(q, n, c.dtype, c.op)
    if is_root:
        recvarg = buf(n, c.dtype, c.form, fill=mine if c.in_place else None)[0]
    else:
        recvarg = _nonroot(run, lambda: buf(n, c.dtype, "typed")[0])
    sendarg = MPI.IN_PLACE if (is_root and c.in_place) else _send(run, mine)
    return Call((sendarg, recvarg), {"op": _op(c), "root": c.root}, n)


def make_allreduce(run: Run, q: int) -> Call:
    """Also Scan and Exscan: the same arguments."""
    c = run.case
    n = c.count
    mine = oracle.inputs(q, n, c.dtype, c.op)
    spec, _ = buf(n, c.dtype, c.form, fill=mine if c.in_place else None)
    sendarg = MPI.IN_PLACE if c.in_place else _send(run, mine)
    return Call((sendarg, spec), {"op": _op(c)}, n)


def make_reduce_scatter_block(run: Run, q: int) -> Call:
    c, p = run.case, run.p
    n = c.count
    send = oracle.inputs(q, p * n, c.dtype, c.op)
    mt = oracle.mpi_type(c.dtype)
    if c.in_place:
        return Call((MPI.IN_PLACE, [send, mt]), {"op": _op(c)}, n)
    return Call(([send, mt], buf(n, c.dtype, c.form)[0]), {"op": _op(c)}, n)


def make_reduce_scatter(run: Run, q: int) -> Call:
    c = run.case
    counts = oracle.vcounts(run.p, c.layout)
    uniform = len(set(counts)) == 1
    send = oracle.inputs(q, sum(counts), c.dtype, c.op)
    mt = oracle.mpi_type(c.dtype)
    if c.in_place:
        return Call((MPI.IN_PLACE, [send, mt], counts), {"op": _op(c)}, min(counts), uniform)
    rcounts = None if c.form == "nodispl" else counts   # None: mpi4py-style inference
    recv = oracle.garbage(counts[q] + 2, c.dtype)       # 2 elements past recvcount
    return Call(([send, mt], [recv, counts[q], mt], rcounts), {"op": _op(c)}, min(counts),
                uniform)


MAKERS: dict[str, Callable[[Run, int], Call]] = {
    "bcast": make_bcast, "scatter": make_scatter, "scatterv": make_scatterv,
    "gather": make_gather, "gatherv": make_gatherv, "reduce": make_reduce,
    "allreduce": make_allreduce, "reduce_scatter_block": make_reduce_scatter_block,
    "reduce_scatter": make_reduce_scatter, "allgather": make_allgather,
    "allgatherv": make_allgatherv, "alltoall": make_alltoall, "alltoallv": make_alltoallv,
    "scan": make_allreduce, "exscan": make_allreduce, "alltoallw": make_alltoallw,
}
