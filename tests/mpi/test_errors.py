"""Bad input is refused before any message by p2p, and native follows plain mpi4py (run under
mpiexec).

Native outside checked mode hands every call to mpi4py unchanged: for each bad input below it
must do what plain mpi4py does with the same inputs on every rank that makes the call (the same
exception type, for an ``MPI.Exception`` the same error class, or completion with the same
bytes; :func:`check_native_as_mpi4py`).  Inputs on which plain mpi4py under MPICH aborts the
job, writes or reads outside a buffer, or leaves ranks inside the collective
(:data:`_MPI4PY_UNSAFE`; under Open MPI, where that survey was not made, every bad input) run
on native in checked mode instead, where every rank makes the call.  ``algorithm=`` is
mpicoll's own on both backends.

For every kind of bad input of the issue, on ``p2p`` (and native in checked mode):

* the call raises the expected exception type (``TypeError``/``ValueError``, or
  :class:`mpicoll.RestrictionError` for a forced algorithm), and its message names the
  argument and what was expected;
* no buffer of the call changed (every send and receive buffer is compared with a copy taken
  before the call): nothing is half-written;
* afterwards a ``Barrier`` and a correct ``Allreduce``/``Bcast`` on the same backend still give
  the right answer, and no stray message waits on the user's communicator or on the p2p
  backend's private one: no message was sent and no tag was used by the refused call.

Bad input is given on every rank that looks at the bad argument.  When only some ranks can see
it (the root's receive buffer of ``Gather``, a non-root's ``MPI.IN_PLACE``), only those ranks
make the call and the others sit it out: the error is raised before any message, so the others
are not involved, and the recovery collective proves it.

Also: explicit counts on the block side of Scatter/Gather/Allgather/Alltoall/Reduce_scatter_block
are per block, as in mpi4py (a total-count spec is refused before MPI could write past the
buffer); overlapping receive blocks of the v-collectives are refused;
``Reduce_scatter(recvcounts=None)`` with a recvbuf refused on one rank must not
strand the others.

Checked mode (``mpicoll.p2p(comm, check=True)``, ``MPICOLL_CHECK=1``): ranks that disagree on
(collective, root, count, dtype, op) all raise :class:`mpicoll.MismatchError`, instead of
truncating or hanging.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_errors.py`` (P = 1..5; some cases
need P >= 2, or a P that is not a power of two).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi4py.util import dtlib

import mpicoll
from mpicoll.algorithms.registry import RestrictionError

WORLD = MPI.COMM_WORLD
KINDS = ("native", "p2p")
MismatchError = mpicoll.MismatchError

_BACKENDS: dict[str, Any] = {}


def backend(kind: str) -> Any:
    """One backend object per kind for this module (making a p2p backend is collective)."""
    if kind not in _BACKENDS:
        if kind == "p2p-check":
            _BACKENDS[kind] = mpicoll.p2p(WORLD, check=True)
        elif kind == "native-check":
            _BACKENDS[kind] = mpicoll.native(WORLD, check=True)
        else:
            _BACKENDS[kind] = getattr(mpicoll, kind)(WORLD)
    return _BACKENDS[kind]


# --------------------------------------------------------------------------------------------
# the cases: one function per bad input, returning what this rank calls


@dataclass
class Attempt:
    """What one rank calls: ``call(backend)``, and the buffers that must not change."""

    call: Callable[[Any], Any]
    watch: list[np.ndarray] = field(default_factory=list)
    #: a valid call of a rank that takes part while others refuse theirs (p2p only: its eager
    #: sends complete, and later calls must still be right; native sits it out, since MPI's own
    #: state after a collective entered on some ranks only is MPI's)
    ok: bool = False


@dataclass(frozen=True)
class Bad:
    """One bad input.

    Attributes:
        group: the kind of bad input (one test function per group).
        name: the case, in the test id.
        exc: the exception every calling rank must raise.
        words: substrings the message must contain (the argument's name, what was expected).
        make: ``make(rank, size) -> Attempt`` for a rank that makes the call, None for a rank
            that sits it out.
        applies: ``applies(size)``: whether the case exists at this number of ranks.
        kinds: the backends it is run on.
    """

    group: str
    name: str
    exc: type[BaseException]
    words: tuple[str, ...]
    make: Callable[[int, int], Attempt | None]
    applies: Callable[[int], bool]
    kinds: tuple[str, ...]


CASES: list[Bad] = []


def bad(group: str, name: str, exc: type[BaseException], *words: str, min_p: int = 1,
        when: Callable[[int], bool] | None = None, kinds: tuple[str, ...] = KINDS,
        ) -> Callable[[Callable[[int, int], Attempt | None]], Callable[[int, int], Any]]:
    """Register a case (decorator on its ``make(rank, size)``)."""

    def deco(make: Callable[[int, int], Attempt | None]) -> Callable[[int, int], Any]:
        def applies(p: int) -> bool:
            return p >= min_p and (when is None or when(p))

        CASES.append(Bad(group, name, exc, words, make, applies, kinds))
        return make

    return deco


def fill(n: int, value: float, dtype: Any = np.float64) -> np.ndarray:
    return np.full(n, value, dtype=dtype)


def readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def not_pof2(p: int) -> bool:
    return p & (p - 1) != 0


def _noncommutative(a: Any, b: Any, datatype: MPI.Datatype) -> None:
    """b = a - b elementwise (user op declared non-commutative; never called here)."""
    x = np.frombuffer(a, dtype=np.float64)
    y = np.frombuffer(b, dtype=np.float64)
    y[:] = x - y


_USER_OPS: dict[str, MPI.Op] = {}


def noncommutative_op() -> MPI.Op:
    if "nc" not in _USER_OPS:
        _USER_OPS["nc"] = MPI.Op.Create(_noncommutative, commute=False)
    return _USER_OPS["nc"]


#: cases p2p no longer refuses (a spec past its buffer, overlapping receive blocks: one rank's
#: own values, so the call goes, as MPI's does): p2p's behaviour on them is in
#: tests/mpi/test_bounds.py; native (plain mpi4py, or checked mode's refusal on every rank)
#: stays here
NATIVE_ONLY = ("native",)


# ---- receive buffer too small for count x P ------------------------------------------------


@bad("recv_too_small", "allgather", ValueError, "recvbuf", "needs",
     when=lambda p: (3 * p - 1) % p != 0)  # else it splits: MPI_ERR_TRUNCATE (signatures)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r, np.int32), fill(3 * p - 1, -7, np.int32)
    return Attempt(lambda b: b.Allgather(s, rb), [s, rb])


@bad("recv_too_small", "iallgather", ValueError, "recvbuf", "needs",
     when=lambda p: (3 * p - 2) % p != 0)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3 * p - 2, -7)
    return Attempt(lambda b: b.Iallgather(s, rb), [s, rb])


@bad("recv_too_small", "gather_root", ValueError, "recvbuf",
     when=lambda p: (2 * p - 1) % p != 0)  # P = 1: it splits, and MPI cuts the own block
def _(r: int, p: int) -> Attempt | None:
    if r != p - 1:  # only the root has a receive buffer; the others send and return
        s = fill(2, r)
        return Attempt(lambda b: b.Gather(s, None, root=p - 1), ok=True)
    s, rb = fill(2, r), fill(2 * p - 1, -7)
    return Attempt(lambda b: b.Gather(s, rb, root=p - 1), [s, rb])


@bad("recv_too_small", "allreduce", ValueError, "recvbuf")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])


@bad("recv_too_small", "reduce_scatter", ValueError, "recvbuf")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p, r), fill(1, -7)
    return Attempt(lambda b: b.Reduce_scatter(s, rb, [2] * p), [s, rb])


@bad("recv_too_small", "scan_typed_count", ValueError, "recvbuf")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(5, r), fill(5, -7)
    return Attempt(lambda b: b.Scan([s, 5, MPI.DOUBLE], [rb, 4, MPI.DOUBLE]), [s, rb])


# mpi4py: an explicit count on the block side of Scatter/Gather/Allgather/Alltoall (and the
# input of Reduce_scatter_block) is the count of ONE block.  A spec whose count is the total
# asks MPI for P times too much (P >= 2): refused before MPI can write past the buffer.
# The arrays are
# views into larger ones, so that a missed check cannot corrupt memory here.


@bad("recv_too_small", "allgather_count_is_per_block", ValueError, "recvbuf", "needs",
     min_p=2,
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    whole, s = fill(2 * p * p + 4, -7), fill(2, r)
    return Attempt(lambda b: b.Allgather(s, [whole[: 2 * p], 2 * p, MPI.DOUBLE]), [s, whole])


@bad("recv_too_small", "alltoall_count_is_per_block", ValueError, "buf", "needs",
     min_p=2,
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    swhole, rwhole = fill(2 * p * p + 4, r), fill(2 * p * p + 4, -7)
    return Attempt(lambda b: b.Alltoall([swhole[: 2 * p], 2 * p, MPI.DOUBLE],
                                        [rwhole[: 2 * p], 2 * p, MPI.DOUBLE]), [swhole, rwhole])


@bad("recv_too_small", "reduce_scatter_block_count_is_per_block", ValueError, "sendbuf",
     "needs", min_p=2)
def _(r: int, p: int) -> Attempt:
    swhole, rb = fill(2 * p * p + 4, 1.0), fill(2, -7)
    return Attempt(lambda b: b.Reduce_scatter_block([swhole[: 2 * p], 2 * p, MPI.DOUBLE],
                                                    [rb, 2, MPI.DOUBLE]), [swhole, rb])


@bad("recv_too_small", "bcast_count_past_buffer", ValueError, "buf", "count",
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    a = fill(4, r)
    return Attempt(lambda b: b.Bcast([a, 5, MPI.DOUBLE], root=0), [a])


# ---- send and receive datatypes that differ ------------------------------------------------
# (the reductions only: mpi4py itself refuses two datatypes there.  Elsewhere MPI matches type
# signatures across ranks, not datatypes, and the call goes: tests/mpi/test_signatures.py
# compares such calls, and mismatched signatures, with plain mpi4py)


@bad("dtype_mismatch", "allreduce_f64_i64", ValueError, "datatype", "float64", "int64")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7, np.int64)
    return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])


@bad("dtype_mismatch", "scan_c128_c64", ValueError, "datatype")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r, np.complex128), fill(3, -7, np.complex64)
    return Attempt(lambda b: b.Scan(s, rb), [s, rb])


@bad("dtype_mismatch", "reduce_root_pair_types", ValueError, "datatype")
def _(r: int, p: int) -> Attempt | None:
    s = np.zeros(2, dtlib.to_numpy_dtype(MPI.DOUBLE_INT))
    if r != 0:
        return Attempt(lambda b: b.Reduce([s, MPI.DOUBLE_INT], None, op=MPI.MAXLOC, root=0),
                       ok=True)
    rb = np.zeros(2, dtlib.to_numpy_dtype(MPI.FLOAT_INT))
    return Attempt(lambda b: b.Reduce([s, MPI.DOUBLE_INT], [rb, MPI.FLOAT_INT], op=MPI.MAXLOC,
                                      root=0), [s, rb])


# ---- root outside [0, P) ---------------------------------------------------------------------


@bad("root", "bcast_p", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Bcast(a, root=p), [a])


@bad("root", "bcast_minus_1", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Bcast(a, root=-1), [a])


@bad("root", "ibcast_p_plus_3", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Ibcast(a, root=p + 3), [a])


@bad("root", "reduce_p", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Reduce(s, rb, op=MPI.SUM, root=p), [s, rb])


@bad("root", "gather_minus_1", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2, r), fill(2 * p, -7)
    return Attempt(lambda b: b.Gather(s, rb, root=-1), [s, rb])


@bad("root", "scatter_p", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p, r), fill(2, -7)
    return Attempt(lambda b: b.Scatter(s, rb, root=p), [s, rb])


@bad("root", "scatterv_p", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r), fill(1, -7)
    return Attempt(lambda b: b.Scatterv([s, [1] * p, MPI.DOUBLE], rb, root=p), [s, rb])


@bad("root", "gatherv_minus_2", ValueError, "root", "outside")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(p, -7)
    return Attempt(lambda b: b.Gatherv(s, [rb, [1] * p, MPI.DOUBLE], root=-2), [s, rb])


@bad("root", "bcast_str", TypeError, "root", "int")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Bcast(a, root="0"), [a])  # root=0.0 is accepted, as mpi4py


@bad("root", "bcast_none", TypeError, "root")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Bcast(a, root=None), [a])


# ---- counts / displacements ---------------------------------------------------------------


@bad("counts", "allgatherv_counts_len", ValueError, "recvbuf", "counts", "expected")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(p + 1, -7)
    return Attempt(lambda b: b.Allgatherv(s, [rb, [1] * (p + 1), MPI.DOUBLE]), [s, rb])


@bad("counts", "allgatherv_counts_negative", ValueError, "recvbuf", "counts", ">= 0")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(2 * p, -7)
    counts = [1] * p
    counts[-1] = -1
    return Attempt(lambda b: b.Allgatherv(s, [rb, counts, MPI.DOUBLE]), [s, rb])


@bad("counts", "allgatherv_displs_len", ValueError, "recvbuf", "displacements")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(p + 1, -7)
    return Attempt(lambda b: b.Allgatherv(s, [rb, ([1] * p, list(range(p + 1))), MPI.DOUBLE]),
                   [s, rb])


@bad("counts", "allgatherv_displ_past_end", ValueError, "recvbuf", "displacement",
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(p, -7)
    displs = list(range(p))
    displs[-1] = p  # block p-1 would end at p+1 > p
    return Attempt(lambda b: b.Allgatherv(s, [rb, ([1] * p, displs), MPI.DOUBLE]), [s, rb])


@bad("counts", "alltoallv_sendcounts_negative", ValueError, "sendbuf", "counts")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r), fill(p, -7)
    return Attempt(lambda b: b.Alltoallv([s, [-1] * p, MPI.DOUBLE], [rb, [1] * p, MPI.DOUBLE]),
                   [s, rb])


@bad("counts", "alltoallv_recvdispls_negative", ValueError, "recvbuf", "displacements",
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r), fill(p, -7)
    displs = [-1, *list(range(1, p))]
    return Attempt(lambda b: b.Ialltoallv([s, [1] * p, MPI.DOUBLE],
                                          [rb, ([1] * p, displs), MPI.DOUBLE]), [s, rb])


@bad("counts", "alltoallv_senddispls_past_end", ValueError, "sendbuf", "displacement",
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r), fill(p, -7)
    displs = list(range(p))
    displs[0] = p
    return Attempt(lambda b: b.Alltoallv([s, ([1] * p, displs), MPI.DOUBLE],
                                         [rb, [1] * p, MPI.DOUBLE]), [s, rb])


@bad("counts", "reduce_scatter_recvcounts_len", ValueError, "recvcounts", "expected")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p + 1, r), fill(1, -7)
    return Attempt(lambda b: b.Reduce_scatter(s, rb, [1] * (p + 1)), [s, rb])


@bad("counts", "reduce_scatter_recvcounts_negative", ValueError, "recvcounts", ">= 0")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p, r), fill(2, -7)
    counts = [2] * p
    counts[0] = -2
    return Attempt(lambda b: b.Reduce_scatter(s, rb, counts), [s, rb])


@bad("counts", "reduce_scatter_recvcounts_sum", ValueError, "sendbuf")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p + 1, r), fill(2, -7)
    return Attempt(lambda b: b.Reduce_scatter(s, rb, [2] * p), [s, rb])


@bad("counts", "counts_not_ints", TypeError, "counts")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(1, r), fill(p, -7)
    return Attempt(lambda b: b.Allgatherv(s, [rb, [1.0] * p, MPI.DOUBLE]), [s, rb])


# the other ranks would wait inside the collective for the refusing root (see the README):
# native only, whose refusal the others sit out
@bad("counts", "scatterv_root_past_end", ValueError, "sendbuf", "displacement",
     kinds=("native",))
def _(r: int, p: int) -> Attempt | None:
    if r != 0:
        return None  # counts and displacements are the root's
    s, rb = fill(p, r), fill(2, -7)
    return Attempt(lambda b: b.Scatterv([s, [2] * p, MPI.DOUBLE], rb, root=0), [s, rb])


@bad("counts", "gatherv_root_counts_len", ValueError, "recvbuf", "counts")
def _(r: int, p: int) -> Attempt | None:
    if r != p - 1:
        s = fill(1, r)
        return Attempt(lambda b: b.Gatherv(s, None, root=p - 1), ok=True)
    s, rb = fill(1, r), fill(p + 2, -7)
    return Attempt(lambda b: b.Gatherv(s, [rb, [1] * (p + 2), MPI.DOUBLE], root=p - 1), [s, rb])


@bad("counts", "allgatherv_recv_blocks_overlap", ValueError, "recvbuf", "overlap", min_p=2,
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2, r), fill(2 * p, -7)
    displs = [2 * k for k in range(p)]
    displs[-1] -= 1  # the last block starts inside the one before it
    return Attempt(lambda b: b.Allgatherv(s, [rb, ([2] * p, displs), MPI.DOUBLE]), [s, rb])


@bad("counts", "gatherv_root_recv_blocks_overlap", ValueError, "recvbuf", "overlap", min_p=2,
     kinds=NATIVE_ONLY)
def _(r: int, p: int) -> Attempt | None:
    if r != 0:
        s = fill(1, r)
        return Attempt(lambda b: b.Gatherv(s, None, root=0), ok=True)
    s, rb = fill(1, r), fill(p, -7)
    return Attempt(lambda b: b.Gatherv(s, [rb, ([1] * p, [0] * p), MPI.DOUBLE], root=0),
                   [s, rb])


@bad("counts", "negative_count_in_spec", ValueError, "sendbuf", "count", ">= 0")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce([s, -1, MPI.DOUBLE], rb), [s, rb])


@bad("counts", "bytes_not_whole_elements", ValueError, "sendbuf", "bytes")
def _(r: int, p: int) -> Attempt:
    s, rb = np.full(7, r, np.uint8), fill(1, -7)
    return Attempt(lambda b: b.Allreduce([s, MPI.DOUBLE], rb), [s, rb])


# ---- op not defined for the datatype -------------------------------------------------------


@bad("op", "allreduce_land_float64", TypeError, "op", "MPI.LAND")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, op=MPI.LAND), [s, rb])


@bad("op", "reduce_bor_float32", TypeError, "op", "MPI.BOR")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r, np.float32), fill(3, -7, np.float32)
    return Attempt(lambda b: b.Reduce(s, rb, op=MPI.BOR, root=p - 1), [s, rb])


@bad("op", "allreduce_sum_double_int", TypeError, "op", "MPI.SUM")
def _(r: int, p: int) -> Attempt:
    dt = dtlib.to_numpy_dtype(MPI.DOUBLE_INT)
    s, rb = np.zeros(2, dt), np.zeros(2, dt)
    s["f0"], s["f1"], rb["f0"] = r, r, -7
    return Attempt(lambda b: b.Allreduce([s, MPI.DOUBLE_INT], [rb, MPI.DOUBLE_INT], op=MPI.SUM),
                   [s, rb])


@bad("op", "iallreduce_min_2int", TypeError, "op", "MPI.MIN")
def _(r: int, p: int) -> Attempt:
    dt = dtlib.to_numpy_dtype(MPI.TWOINT)
    s, rb = np.zeros(2, dt), np.zeros(2, dt)
    return Attempt(lambda b: b.Iallreduce([s, MPI.TWOINT], [rb, MPI.TWOINT], op=MPI.MIN),
                   [s, rb])


@bad("op", "scan_maxloc_float64", TypeError, "op", "MPI.MAXLOC")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2, r), fill(2, -7)
    return Attempt(lambda b: b.Scan(s, rb, op=MPI.MAXLOC), [s, rb])


@bad("op", "reduce_scatter_block_lxor_complex", TypeError, "op", "MPI.LXOR")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r, np.complex128), fill(1, -7, np.complex128)
    return Attempt(lambda b: b.Reduce_scatter_block(s, rb, op=MPI.LXOR), [s, rb])


@bad("op", "exscan_band_float64_in_place", TypeError, "op", "MPI.BAND")
def _(r: int, p: int) -> Attempt:
    rb = fill(3, r)
    return Attempt(lambda b: b.Exscan(MPI.IN_PLACE, rb, op=MPI.BAND), [rb])


@bad("op", "not_an_op", TypeError, "op", "MPI.Op")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, op="sum"), [s, rb])


@bad("op", "replace", TypeError, "op", "MPI.REPLACE")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, op=MPI.REPLACE), [s, rb])


@bad("op", "op_null", TypeError, "op")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), fill(3, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, op=MPI.OP_NULL), [s, rb])


# ---- MPI.IN_PLACE where MPI forbids it ----------------------------------------------------


@bad("in_place", "bcast", ValueError, "buf", "IN_PLACE")
def _(r: int, p: int) -> Attempt:
    return Attempt(lambda b: b.Bcast(MPI.IN_PLACE, root=0))


@bad("in_place", "gather_nonroot_sendbuf", ValueError, "sendbuf", "IN_PLACE", min_p=2,
     kinds=("native",))  # the root would wait for the refusing ranks
def _(r: int, p: int) -> Attempt | None:
    if r == 0:
        return None  # the root may pass MPI.IN_PLACE; the non-roots may not
    rb = fill(2 * p, -7)
    return Attempt(lambda b: b.Gather(MPI.IN_PLACE, rb, root=0), [rb])


@bad("in_place", "gatherv_nonroot_sendbuf", ValueError, "sendbuf", "IN_PLACE", min_p=2,
     kinds=("native",))  # the root would wait for the refusing ranks
def _(r: int, p: int) -> Attempt | None:
    if r == p - 1:
        return None
    return Attempt(lambda b: b.Igatherv(MPI.IN_PLACE, None, root=p - 1))


@bad("in_place", "scatter_nonroot_recvbuf", ValueError, "recvbuf", "IN_PLACE", min_p=2)
def _(r: int, p: int) -> Attempt | None:
    s = fill(2 * p, r)
    if r == 0:  # the root's call is valid: it sends and returns
        return Attempt(lambda b: b.Scatter(s, MPI.IN_PLACE, root=0), ok=True)
    return Attempt(lambda b: b.Scatter(s, MPI.IN_PLACE, root=0), [s])


@bad("in_place", "scatterv_nonroot_recvbuf", ValueError, "recvbuf", "IN_PLACE", min_p=2)
def _(r: int, p: int) -> Attempt | None:
    if r == 0:
        s = fill(p, 0)
        return Attempt(lambda b: b.Scatterv([s, [1] * p], MPI.IN_PLACE, root=0), ok=True)
    return Attempt(lambda b: b.Scatterv(None, MPI.IN_PLACE, root=0))


@bad("in_place", "reduce_nonroot_sendbuf", ValueError, "sendbuf", "IN_PLACE", min_p=2,
     kinds=("native",))  # the root would wait for the refusing ranks
def _(r: int, p: int) -> Attempt | None:
    if r == 0:
        return None
    rb = fill(3, -7)
    return Attempt(lambda b: b.Reduce(MPI.IN_PLACE, rb, root=0), [rb])


@bad("in_place", "allreduce_recvbuf", ValueError, "recvbuf", "IN_PLACE")
def _(r: int, p: int) -> Attempt:
    s = fill(3, r)
    return Attempt(lambda b: b.Allreduce(s, MPI.IN_PLACE), [s])


@bad("in_place", "allgather_both", ValueError, "recvbuf", "IN_PLACE")
def _(r: int, p: int) -> Attempt:
    return Attempt(lambda b: b.Allgather(MPI.IN_PLACE, MPI.IN_PLACE))


@bad("in_place", "alltoall_both", ValueError, "recvbuf", "IN_PLACE")
def _(r: int, p: int) -> Attempt:
    return Attempt(lambda b: b.Alltoall(MPI.IN_PLACE, MPI.IN_PLACE))


@bad("in_place", "gather_root_recvbuf", ValueError, "recvbuf", "IN_PLACE")
def _(r: int, p: int) -> Attempt | None:
    s = fill(2, r)
    if r != 0:
        return Attempt(lambda b: b.Gather(s, None, root=0), ok=True)
    return Attempt(lambda b: b.Gather(s, MPI.IN_PLACE, root=0), [s])


@bad("in_place", "scatter_root_sendbuf", ValueError, "sendbuf", "IN_PLACE",
     kinds=("native",))  # the other ranks would wait for the refusing root
def _(r: int, p: int) -> Attempt | None:
    if r != 0:
        return None
    rb = fill(2, -7)
    return Attempt(lambda b: b.Scatter(MPI.IN_PLACE, rb, root=0), [rb])


# ---- non-contiguous buffers (decision: ValueError, no copy) -------------------------------


@bad("noncontiguous", "allreduce_sendbuf_strided", BufferError, "sendbuf", "contiguous")
def _(r: int, p: int) -> Attempt:
    whole, rb = fill(8, r), fill(4, -7)
    return Attempt(lambda b: b.Allreduce(whole[::2], rb), [whole, rb])


@bad("noncontiguous", "allreduce_recvbuf_strided", BufferError, "recvbuf", "contiguous")
def _(r: int, p: int) -> Attempt:
    s, whole = fill(4, r), fill(8, -7)
    return Attempt(lambda b: b.Allreduce(s, whole[::2]), [s, whole])


@bad("noncontiguous", "bcast_column", BufferError, "buf", "contiguous")
def _(r: int, p: int) -> Attempt:
    m = np.full((4, 3), float(r))
    return Attempt(lambda b: b.Bcast(m[:, 1], root=0), [m])


@bad("noncontiguous", "allgather_recvbuf_2d_slice", BufferError, "recvbuf", "contiguous")
def _(r: int, p: int) -> Attempt:
    s, m = fill(2, r), np.full((2, 2 * p), -7.0)
    return Attempt(lambda b: b.Iallgather(s, m[:, :p]), [s, m])  # rows 2p apart: strided


@bad("noncontiguous", "alltoallv_sendbuf_reversed", BufferError, "sendbuf", "contiguous",
     min_p=2)
def _(r: int, p: int) -> Attempt:
    s, rb = fill(p, r), fill(p, -7)
    s[:] = np.arange(p)
    return Attempt(lambda b: b.Alltoallv([s[::-1], [1] * p, MPI.DOUBLE], rb), [s, rb])


# ---- read-only buffers where a writable one is needed -------------------------------------


@bad("read_only", "allreduce_recvbuf", BufferError, "recvbuf", "read-only")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(3, r), readonly(fill(3, -7))
    return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])


@bad("read_only", "allgather_recvbuf_bytes", BufferError, "recvbuf", "read-only")
def _(r: int, p: int) -> Attempt:
    s = np.full(2, r, np.uint8)
    rb = bytes(2 * p)
    return Attempt(lambda b: b.Allgather(s, rb), [s])


@bad("read_only", "scan_in_place", BufferError, "recvbuf", "read-only")
def _(r: int, p: int) -> Attempt:
    rb = readonly(fill(3, r))
    return Attempt(lambda b: b.Scan(MPI.IN_PLACE, rb), [rb])


@bad("read_only", "bcast_nonroot", BufferError, "buf", "read-only", min_p=2)
def _(r: int, p: int) -> Attempt | None:
    if r == 0:  # the root only reads its buffer (a read-only one is fine there)
        a0 = readonly(fill(3, 1))
        return Attempt(lambda b: b.Bcast(a0, root=0), ok=True)
    a = readonly(fill(3, -7))
    return Attempt(lambda b: b.Bcast(a, root=0), [a])


@bad("read_only", "reduce_root_recvbuf", BufferError, "recvbuf", "read-only")
def _(r: int, p: int) -> Attempt | None:
    if r != p - 1:
        s = fill(3, r)
        return Attempt(lambda b: b.Reduce(s, None, root=p - 1), ok=True)
    s, rb = fill(3, r), readonly(fill(3, -7))
    return Attempt(lambda b: b.Reduce(s, rb, root=p - 1), [s, rb])


# ---- aliased send and receive buffers -----------------------------------------------------


@bad("aliased", "allreduce_same_array", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    a = fill(3, r)
    return Attempt(lambda b: b.Allreduce(a, a), [a])


@bad("aliased", "allgather_own_block", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    rb = fill(2 * p, -7)
    return Attempt(lambda b: b.Allgather(rb[2 * r : 2 * r + 2], rb), [rb])


@bad("aliased", "alltoall_same_array", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    a = fill(p, r)
    return Attempt(lambda b: b.Ialltoall(a, a), [a])


@bad("aliased", "scan_shifted_views", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    a = fill(5, r)
    return Attempt(lambda b: b.Scan(a[1:], a[:-1]), [a])


@bad("aliased", "reduce_scatter_block_prefix", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    a = fill(2 * p, r)
    return Attempt(lambda b: b.Reduce_scatter_block(a, a[:2]), [a])


@bad("aliased", "allgatherv_overlap", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt:
    rb = fill(p, -7)
    return Attempt(lambda b: b.Allgatherv(rb[r : r + 1], [rb, [1] * p, MPI.DOUBLE]), [rb])


@bad("aliased", "reduce_root", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt | None:
    a = fill(3, r)
    if r != 0:  # only the root has a receive buffer
        return Attempt(lambda b: b.Reduce(a, None, root=0), ok=True)
    return Attempt(lambda b: b.Reduce(a, a, root=0), [a])


@bad("aliased", "gather_root", ValueError, "sendbuf", "recvbuf", "overlap")
def _(r: int, p: int) -> Attempt | None:
    rb = fill(2 * p, -7)
    if r != p - 1:
        return Attempt(lambda b: b.Gather(rb[:2], None, root=p - 1), ok=True)
    return Attempt(lambda b: b.Gather(rb[:2], rb, root=p - 1), [rb])


# ---- a forced algorithm whose restriction the call breaks (p2p only) ----------------------


@bad("restriction", "allreduce_ring_noncommutative", RestrictionError, "ring", "commutative",
     kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(4, -7)
    op = noncommutative_op()
    return Attempt(lambda b: b.Allreduce(s, rb, op=op, algorithm="ring"), [s, rb])


@bad("restriction", "iallreduce_rabenseifner_noncommutative", RestrictionError,
     "rabenseifner", "commutative", kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    rb = fill(4, r)
    op = noncommutative_op()
    return Attempt(lambda b: b.Iallreduce(MPI.IN_PLACE, rb, op=op, algorithm="rabenseifner"),
                   [rb])


@bad("restriction", "reduce_rabenseifner_noncommutative", RestrictionError, "rabenseifner",
     kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(4, -7)
    op = noncommutative_op()
    return Attempt(lambda b: b.Reduce(s, rb, op=op, root=0, algorithm="rabenseifner"), [s, rb])


@bad("restriction", "reduce_scatter_block_recursive_halving_noncommutative",
     RestrictionError, "recursive_halving", "commutative", kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p, r), fill(2, -7)
    op = noncommutative_op()
    return Attempt(lambda b: b.Reduce_scatter_block(s, rb, op=op,
                                                    algorithm="recursive_halving"), [s, rb])


@bad("restriction", "allgather_recursive_doubling_not_pof2", RestrictionError,
     "recursive_doubling", "power-of-two", when=not_pof2, kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2, r), fill(2 * p, -7)
    return Attempt(lambda b: b.Allgather(s, rb, algorithm="recursive_doubling"), [s, rb])


@bad("restriction", "iallgather_recursive_doubling_not_pof2", RestrictionError,
     "recursive_doubling", "power-of-two", when=not_pof2, kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    rb = fill(2 * p, -7)
    return Attempt(lambda b: b.Iallgather(MPI.IN_PLACE, rb, algorithm="recursive_doubling"),
                   [rb])


@bad("restriction", "bcast_scatter_allgather_not_pof2", RestrictionError,
     "scatter_allgather", "power-of-two", when=not_pof2, kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    a = fill(10, r)
    return Attempt(lambda b: b.Bcast(a, root=0, algorithm="scatter_allgather"), [a])


@bad("restriction", "unknown_algorithm", ValueError, "nope", "expected", kinds=("p2p",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(4, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, algorithm="nope"), [s, rb])


@bad("restriction", "native_refuses_algorithm", ValueError, "algorithm", kinds=("native",))
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(4, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, algorithm="ring"), [s, rb])


@bad("restriction", "algorithm_not_a_str", TypeError, "algorithm", "int", "3")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(4, r), fill(4, -7)
    return Attempt(lambda b: b.Allreduce(s, rb, algorithm=3), [s, rb])


@bad("restriction", "reduce_scatter_gathered_algorithm_not_a_str", TypeError, "algorithm")
def _(r: int, p: int) -> Attempt:
    s, rb = fill(2 * p, r), fill(2, -7)
    return Attempt(lambda b: b.Reduce_scatter(s, rb, algorithm=b"ring"), [s, rb])


# ---- datetime64 / timedelta64: refused by both backends (mpi4py takes no buffer of them) ---


@bad("datetime", "allreduce_datetime64", BufferError, "datetime64", "INT64_T")
def _(r: int, p: int) -> Attempt:
    s = (np.arange(3) + r).astype("datetime64[s]")
    rb = np.zeros(3, "datetime64[s]")
    return Attempt(lambda b: b.Allreduce(s, rb, op=MPI.MAX), [s, rb])


@bad("datetime", "bcast_timedelta64", BufferError, "timedelta64", "INT64_T")
def _(r: int, p: int) -> Attempt:
    a = (np.arange(4) * (r + 1)).astype("timedelta64[ns]")
    return Attempt(lambda b: b.Bcast(a, root=0), [a])


@bad("datetime", "allgather_timedelta64_recvbuf", BufferError, "recvbuf", "timedelta64")
def _(r: int, p: int) -> Attempt:
    s, rb = np.full(2, r, np.int64), np.zeros(2 * p, "timedelta64[ms]")
    return Attempt(lambda b: b.Allgather(s, rb), [s, rb])


@bad("datetime", "gatherv_datetime64_sendbuf", BufferError, "sendbuf", "datetime64")
def _(r: int, p: int) -> Attempt:
    s = np.full(1, r).astype("datetime64[D]")
    rb = np.zeros(p, np.int64)
    return Attempt(lambda b: b.Gatherv(s, [rb, [1] * p, MPI.INT64_T], root=0), [s, rb])


# --------------------------------------------------------------------------------------------
# the check


def _snapshot(arrays: list[np.ndarray]) -> list[bytes]:
    return [a.tobytes() for a in arrays]  # bytes: NaN-safe, structured-safe


def _recover(b: Any) -> list[str]:
    """Barrier + a correct Allreduce and Bcast on ``b``; then no stray message anywhere."""
    problems = []
    p, r = WORLD.size, WORLD.rank
    WORLD.Barrier()
    x = np.array([r + 1.0, 2.0 * r])
    y = np.full(2, -1.0)
    b.Allreduce(x, y)
    want = np.array([p * (p + 1) / 2, p * (p - 1)])
    if not np.array_equal(y, want):
        problems.append(f"Allreduce after the error gave {y}, expected {want}")
    z = np.arange(5, dtype=np.int64) if r == p - 1 else np.full(5, -1, np.int64)
    b.Bcast(z, root=p - 1)
    if not np.array_equal(z, np.arange(5)):
        problems.append(f"Bcast after the error gave {z}")
    b.Barrier()
    WORLD.Barrier()
    private = getattr(b, "_comm", None)  # the p2p backend's duplicate communicator
    for name, c in (("the user's communicator", WORLD), ("the p2p private communicator", private)):
        if isinstance(c, MPI.Comm) and c != MPI.COMM_NULL:
            st = MPI.Status()
            if c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
                problems.append(f"a stray message waits on {name} (source {st.source}, "
                                f"tag {st.tag}, {st.Get_count(MPI.BYTE)} bytes)")
    return problems


def _agree(problems: list[str], what: str) -> None:
    """Fail on every rank if any rank found a problem (each rank reports all of them)."""
    everyone = WORLD.allgather(problems)
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{what}:\n" + "\n".join(lines)


#: cases on which plain mpi4py does not return on every rank under MPICH 5.0.2 (MPI aborts the
#: job, or a rank that makes the call waits forever for ranks that sit it out): (group, name)
#: -> (the rank counts, what plain mpi4py does).  Native hands the call to mpi4py and would do
#: the same, so these run on native in checked mode only (the front door refuses them on every
#: rank before any message), where every rank makes the call; see docs/errors.md
#: Open MPI: the survey is MPICH's; there every bad input runs on native in checked mode
OPEN_MPI = "Open MPI" in MPI.Get_library_version()
_MPI4PY_UNSAFE: dict[tuple[str, str], tuple[Callable[[int], bool], str]] = {
    ("dtype_mismatch", "alltoall_i32_i64"): (
        lambda p: True, "aborts the job (MPICH asserts in its unpack: int32 into int64)"),
    ("counts", "alltoallv_recvdispls_negative"): (
        lambda p: True, "writes before the receive buffer (MPI is given displacement -1)"),
    ("counts", "allgatherv_displ_past_end"): (
        lambda p: True, "writes past the receive buffer (MPI is given a block past its end)"),
    ("counts", "alltoallv_senddispls_past_end"): (
        lambda p: True, "reads past the send buffer (MPI is given a displacement past it)"),
    ("counts", "scatterv_root_past_end"): (
        lambda p: True, "reads past the root's send buffer (MPI is given blocks past it)"),
    **{key: (lambda p: p > 1, "leaves a rank inside the collective, or messages unmatched "
             "in MPI, while the other ranks sit the call out")
       for key in (("dtype_mismatch", "gather_root"),
                   ("counts", "gatherv_root_recv_blocks_overlap"),
                   ("aliased", "gather_root"), ("in_place", "gather_nonroot_sendbuf"),
                   ("in_place", "gatherv_nonroot_sendbuf"), ("in_place", "scatter_nonroot_recvbuf"),
                   ("in_place", "scatterv_nonroot_recvbuf"), ("in_place", "reduce_nonroot_sendbuf"),
                   ("in_place", "gather_root_recvbuf"), ("in_place", "scatter_root_sendbuf"))},
    ("aliased", "scan_shifted_views"): (
        lambda p: True, "aborts the job (MPICH asserts: memcpy ranges overlap)"),
}


def _same_kind(mine: BaseException | None, theirs: BaseException) -> bool:
    """Native's exception stands for plain mpi4py's: an instance of its type, and for an
    ``MPI.Exception`` the same error class."""
    if not isinstance(mine, type(theirs)):
        return False
    if isinstance(theirs, MPI.Exception):
        return bool(mine.Get_error_class() == theirs.Get_error_class())  # type: ignore[union-attr]
    return True


def _raised(call: Callable[[], Any]) -> BaseException | None:
    """The exception ``call()`` raises (a returned request completed or freed), or None."""
    try:
        out = call()
        if isinstance(out, MPI.Prequest):
            out.Free()
        elif isinstance(out, MPI.Request):
            out.Wait()
    except Exception as exc:
        return exc
    return None


def check_native_as_mpi4py(case: Bad) -> None:
    """Native outside checked mode: on every rank that makes the call, what plain mpi4py does
    with the same inputs (made afresh): the same exception type (for an ``MPI.Exception`` the
    same error class; mpicoll's message where its parser refuses the call with that kind), or
    completion with the same bytes in every buffer.  The ranks that sit the call out, and those
    whose call is valid while others refuse theirs, sit it out here too."""
    p, r = WORLD.size, WORLD.rank
    unsafe = _MPI4PY_UNSAFE.get((case.group, case.name))
    if OPEN_MPI:  # not surveyed: plain mpi4py hangs or corrupts memory on some of these
        unsafe = (lambda p: True, "is not surveyed on Open MPI (some of these hang it)")
    if unsafe is not None and unsafe[0](p):
        mine = case.make(r, p)
        if not all(WORLD.allgather(mine is not None and not mine.ok)):
            pytest.skip(f"plain mpi4py {unsafe[1]} at P={p}; native follows it (checked "
                        "mode would wait for the ranks that sit the call out)")
        check_bad(case, "native-check")
        return
    b = backend("native")
    problems: list[str] = []
    theirs, mine = case.make(r, p), case.make(r, p)
    if theirs is not None and mine is not None and not theirs.ok:
        before = _snapshot(mine.watch)
        plain = _raised(lambda: theirs.call(WORLD))
        got = _raised(lambda: mine.call(b))
        if plain is None and got is not None:
            problems.append(f"native raised {got!r}; plain mpi4py completed")
        elif plain is not None and not _same_kind(got, plain):
            problems.append(f"native raised {got!r}; plain mpi4py {plain!r}")
        if plain is None and _snapshot(theirs.watch) != _snapshot(mine.watch):
            problems.append("native and plain mpi4py left different bytes in the buffers")
        if plain is not None and _snapshot(theirs.watch) == before != _snapshot(mine.watch):
            problems.append("native changed a buffer that plain mpi4py left untouched")
    problems += _recover(b)
    _agree(problems, f"native (as mpi4py): {case.group}/{case.name}")


def check_bad(case: Bad, kind: str) -> None:
    p, r = WORLD.size, WORLD.rank
    if kind not in case.kinds and not (kind == "native-check" and "native" in case.kinds):
        pytest.skip(f"{case.name} is for {'/'.join(case.kinds)} only")
    if not case.applies(p):
        pytest.skip(f"{case.name} does not apply at P={p}")
    if kind == "native" and case.group != "restriction":  # algorithm= is mpicoll's own
        check_native_as_mpi4py(case)
        return
    b = backend(kind)
    problems: list[str] = []
    attempt = case.make(r, p)
    if attempt is not None and attempt.ok:
        if kind == "p2p":
            try:
                attempt.call(b)
            except Exception as exc:
                problems.append(f"the valid call of a rank that takes part raised {exc!r}")
    elif attempt is not None:
        before = _snapshot(attempt.watch)
        try:
            attempt.call(b)
        except case.exc as exc:
            msg = str(exc)
            missing = [w for w in case.words if w not in msg]
            if missing:
                problems.append(f"message {msg!r} does not name {missing}")
            if isinstance(exc, RestrictionError) != issubclass(case.exc, RestrictionError):
                problems.append(f"raised {type(exc).__name__}, expected {case.exc.__name__}")
        except Exception as exc:
            problems.append(f"raised {type(exc).__name__}: {exc}; expected {case.exc.__name__}")
        else:
            problems.append(f"no exception; expected {case.exc.__name__}")
        after = _snapshot(attempt.watch)
        for i, (x, y) in enumerate(zip(before, after, strict=True)):
            if x != y:
                problems.append(f"buffer #{i} of the call was changed by the refused call")
    problems += _recover(b)
    _agree(problems, f"{kind}: {case.group}/{case.name}")


def _params(group: str) -> list[Any]:
    out = [pytest.param(c, k, id=f"{c.name}-{k}") for c in CASES if c.group == group
           for k in KINDS]
    assert out, group
    return out


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("recv_too_small"))
def test_recv_buffer_too_small(case: Bad, kind: str) -> None:
    """A receive buffer smaller than count x P (or than the send count): ValueError naming
    recvbuf."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("dtype_mismatch"))
def test_send_recv_dtypes_differ(case: Bad, kind: str) -> None:
    """A reduction's send and receive datatypes that differ: ValueError naming both, as
    mpi4py raises it (the other collectives match type signatures: test_signatures.py)."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("root"))
def test_root_outside_communicator(case: Bad, kind: str) -> None:
    """A root outside [0, P) (ValueError) or not an int (TypeError), naming root."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("counts"))
def test_bad_counts_and_displacements(case: Bad, kind: str) -> None:
    """Counts or displacements whose length is not P, negative, or pointing outside the
    buffer; a count in a buffer spec past the buffer."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("op"))
def test_op_not_defined_for_dtype(case: Bad, kind: str) -> None:
    """An op MPI does not define for the datatype (logical/bitwise on floats, SUM/MIN on pair
    types, MAXLOC on a plain type), or not a collective op at all: TypeError naming op."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("in_place"))
def test_in_place_where_forbidden(case: Bad, kind: str) -> None:
    """MPI.IN_PLACE where MPI forbids it: ValueError naming the argument and IN_PLACE."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("noncontiguous"))
def test_noncontiguous_buffer(case: Bad, kind: str) -> None:
    """Non-contiguous arrays: ValueError (no silent copy)."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("read_only"))
def test_read_only_buffer_written(case: Bad, kind: str) -> None:
    """A read-only array (or bytes) where the call writes: ValueError naming the argument."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("aliased"))
def test_aliased_send_and_recv(case: Bad, kind: str) -> None:
    """Overlapping send and receive buffers: ValueError naming both."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("restriction"))
def test_forced_algorithm_restriction(case: Bad, kind: str) -> None:
    """A forced p2p algorithm the call cannot run: RestrictionError naming the algorithm and
    the restriction; unknown names and algorithm= on native: ValueError; an algorithm that is
    not a str: TypeError."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "kind"), _params("datetime"))
def test_datetime_arrays_refused_by_both(case: Bad, kind: str) -> None:
    """datetime64 / timedelta64 arrays: TypeError on both backends, naming the dtype and the
    way out ([arr, MPI.INT64_T]), before any message."""
    check_bad(case, kind)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_datetime_arrays_as_int64_accepted_by_both(kind: str) -> None:
    """``[arr, MPI.INT64_T]`` moves datetime64 / timedelta64 values on both backends, as
    mpi4py itself does."""
    b = backend(kind)
    p, r = WORLD.size, WORLD.rank
    want = np.arange(5).astype("datetime64[s]") + np.timedelta64(1000, "s")
    a = want.copy() if r == p - 1 else np.zeros(5, "datetime64[s]")
    b.Bcast([a, MPI.INT64_T], root=p - 1)
    x = np.full(3, r).astype("timedelta64[ms]")
    y = np.zeros(3, "timedelta64[ms]")
    b.Allreduce([x, MPI.INT64_T], [y, MPI.INT64_T], op=MPI.MAX)
    problems = []
    if not np.array_equal(a, want):
        problems.append(f"Bcast gave {a}")
    if not np.array_equal(y, np.full(3, p - 1).astype("timedelta64[ms]")):
        problems.append(f"Allreduce gave {y}")
    _agree(problems, f"{kind}: datetime64 as MPI.INT64_T")


# --------------------------------------------------------------------------------------------
# the environment: MPICOLL_SEGMENT_SIZE and MPICOLL_<COLLECTIVE>_ALGORITHM (p2p only)


def _expect(problems: list[str], what: str, call: Callable[[], Any], exc: type[BaseException],
            *words: str) -> None:
    try:
        call()
    except exc as e:
        missing = [w for w in words if w not in str(e)]
        if missing:
            problems.append(f"{what}: message {str(e)!r} does not name {missing}")
    except Exception as e:
        problems.append(f"{what}: raised {type(e).__name__}: {e}; expected {exc.__name__}")
    else:
        problems.append(f"{what}: no exception; expected {exc.__name__}")


@pytest.mark.mpi
@pytest.mark.parametrize("value", ["0", "-64", "abc", "1.5", "64k"])
def test_bad_segment_size_refused_before_any_message(monkeypatch: pytest.MonkeyPatch,
                                                     value: str) -> None:
    """``MPICOLL_SEGMENT_SIZE`` that is not a positive integer: ValueError naming the variable
    and the value when a backend is made, before the ``Dup``, on every rank; the variable is
    read once, so a backend made before it was set still works (no call re-reads it)."""
    b = backend("p2p")
    r = WORLD.rank
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", value)
    problems: list[str] = []
    words = ("MPICOLL_SEGMENT_SIZE", repr(value))
    _expect(problems, "mpicoll.p2p()", lambda: mpicoll.p2p(WORLD).Free(), ValueError, *words)
    a = fill(1000, r)
    b.Bcast(a, root=0, algorithm="pipeline")  # made before: its segment size stays
    if not np.array_equal(a, fill(1000, 0)):
        problems.append(f"Bcast pipeline after the variable was set gave {a[:4]}...")
    monkeypatch.delenv("MPICOLL_SEGMENT_SIZE")
    problems += _recover(b)
    _agree(problems, f"MPICOLL_SEGMENT_SIZE={value!r}")


@pytest.mark.mpi
def test_bad_env_algorithm_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown ``MPICOLL_<COLLECTIVE>_ALGORITHM``: ValueError naming the variable, the value
    and the valid names, when the backend is made; one whose restriction a call breaks:
    RestrictionError naming the variable at that call, before any message; ``algorithm=`` on
    the call still wins over the variable."""
    p, r = WORLD.size, WORLD.rank
    problems: list[str] = []
    monkeypatch.setenv("MPICOLL_ALLREDUCE_ALGORITHM", "nope")
    _expect(problems, "mpicoll.p2p()", lambda: mpicoll.p2p(WORLD).Free(), ValueError,
            "MPICOLL_ALLREDUCE_ALGORITHM", "'nope'", "ring")
    monkeypatch.setenv("MPICOLL_ALLREDUCE_ALGORITHM", "ring")
    with mpicoll.p2p(WORLD) as c:
        s, y = fill(3, r + 1.0), fill(3, -7)
        c.Allreduce(s, y)
        if not np.array_equal(y, fill(3, p * (p + 1) / 2)):
            problems.append(f"Allreduce under MPICOLL_ALLREDUCE_ALGORITHM=ring gave {y}")
        if c.traffic.messages_sent != (2 * (p - 1) if p > 1 else 0):
            problems.append(f"not the ring: {c.traffic.messages_sent} messages sent")
    monkeypatch.delenv("MPICOLL_ALLREDUCE_ALGORITHM")
    if not_pof2(p):
        monkeypatch.setenv("MPICOLL_ALLGATHER_ALGORITHM", "recursive_doubling")
        with mpicoll.p2p(WORLD) as c:
            g = fill(2 * p, -7)
            _expect(problems, "Allgather", lambda: c.Allgather(fill(2, r), g), RestrictionError,
                    "MPICOLL_ALLGATHER_ALGORITHM", "power-of-two")
            if not np.array_equal(g, fill(2 * p, -7)):
                problems.append("recvbuf changed by a refused call")
            c.Allgather(fill(2, r), g, algorithm="ring")
            if not np.array_equal(g, np.repeat(np.arange(p), 2).astype(g.dtype)):
                problems.append(f"Allgather(algorithm='ring') under the variable gave {g}")
            problems += _recover(c)
        monkeypatch.delenv("MPICOLL_ALLGATHER_ALGORITHM")
    _agree(problems, "bad MPICOLL_<COLLECTIVE>_ALGORITHM")


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize(("var", "last", "others"), [
    ("MPICOLL_ALLREDUCE_ALGORITHM", "ring", "recursive_doubling"),
    ("MPICOLL_BCAST_ALGORITHM", "binomial", None),
    ("MPICOLL_SEGMENT_SIZE", "128", "4096"),
    ("MPICOLL_RANKS_PER_NODE", "1", None),
])
def test_construction_env_differs_on_one_rank(monkeypatch: pytest.MonkeyPatch, check: bool,
                                              var: str, last: str, others: str | None) -> None:
    """A variable that changes what goes on the wire, different on the last rank (Open MPI's
    mpiexec passes a variable only with -x): every rank raises MismatchError when the backend
    is made, naming the variable and both values (before: wrong sums on some ranks, a hang on
    the others); the ranks are still in step afterwards."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs 2 ranks")
    value = last if r == p - 1 else others
    if value is None:
        monkeypatch.delenv(var, raising=False)
    else:
        monkeypatch.setenv(var, value)
    problems: list[str] = []
    try:
        mpicoll.p2p(WORLD, check=check).Free()
    except MismatchError as exc:
        unset = "'auto'" if var.endswith("_ALGORITHM") else "unset"
        if var == "MPICOLL_SEGMENT_SIZE" and others is None:
            unset = "65536"
        shown = ([repr(v) if var.endswith("_ALGORITHM") else v for v in (last, others)]
                 if others is not None else
                 [repr(last) if var.endswith("_ALGORITHM") else last, unset])
        words = [var, f"{shown[0]} on rank(s) [{p - 1}]",
                 f"{shown[1]} on rank(s) [{', '.join(map(str, range(p - 1)))}]"]
        missing = [w for w in words if w not in str(exc)]
        if missing:
            problems.append(f"message {str(exc)!r} does not name {missing}")
    except Exception as exc:
        problems.append(f"raised {type(exc).__name__}: {exc}; expected MismatchError")
    else:
        problems.append("no exception")
    monkeypatch.delenv(var, raising=False)
    with mpicoll.p2p(WORLD) as c:  # the ranks are still in step
        problems += _recover(c)
    _agree(problems, f"{var} different on rank {p - 1}")


# --------------------------------------------------------------------------------------------
# accepted: the checks must not refuse what MPI allows


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_allowed_inputs_are_accepted(kind: str) -> None:
    """Read-only send buffers, a read-only Bcast buffer at the root, F-ordered arrays,
    non-root arguments MPI ignores (None or garbage), and MPI.IN_PLACE where MPI allows it."""
    b = backend(kind)
    p, r = WORLD.size, WORLD.rank
    problems: list[str] = []
    s = readonly(fill(3, r + 1.0))
    y = fill(3, -7)
    b.Allreduce(s, y)
    if not np.array_equal(y, fill(3, p * (p + 1) / 2)):
        problems.append(f"Allreduce from a read-only sendbuf gave {y}")
    a = readonly(fill(4, 5.0)) if r == 0 else fill(4, -1)
    b.Bcast(a, root=0)
    if not np.array_equal(a, fill(4, 5.0)):
        problems.append(f"Bcast with a read-only buffer at the root gave {a}")
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3) + r)
    g = np.asfortranarray(np.zeros((2, 3)))
    b.Allreduce(f, g)
    if not np.array_equal(g, p * np.arange(6.0).reshape(2, 3) + p * (p - 1) / 2):
        problems.append(f"Allreduce of F-ordered arrays gave {g}")
    rb = fill(2 * p, -7) if r == 0 else None
    b.Gather(fill(2, r), rb, root=0)  # non-roots: recvbuf None
    if r == 0 and not np.array_equal(rb, np.repeat(np.arange(p, dtype=float), 2)):
        problems.append(f"Gather with recvbuf None at non-roots gave {rb}")
    out = fill(2, -7)
    b.Scatter(np.repeat(np.arange(p, dtype=float), 2) if r == 0 else None, out, root=0)
    if not np.array_equal(out, fill(2, r)):
        problems.append(f"Scatter with sendbuf None at non-roots gave {out}")
    whole = fill(2 * p, -7)
    whole[2 * r : 2 * r + 2] = r
    b.Allgather(MPI.IN_PLACE, whole)
    if not np.array_equal(whole, np.repeat(np.arange(p, dtype=float), 2)):
        problems.append(f"Allgather in place gave {whole}")
    red = fill(3, r + 1.0)
    b.Reduce(MPI.IN_PLACE if r == 0 else red, red if r == 0 else None, root=0)
    if r == 0 and not np.array_equal(red, fill(3, p * (p + 1) / 2)):
        problems.append(f"Reduce in place at the root gave {red}")
    problems += _recover(b)
    _agree(problems, f"{kind}: accepted inputs")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_block_counts_are_per_block_as_in_mpi4py(kind: str) -> None:
    """``[arr, count, datatype]`` on the block side means ``count`` per block, as in mpi4py:
    the same calls straight through mpi4py on the same communicator give the reference."""
    b = backend(kind)
    p, r = WORLD.size, WORLD.rank
    T = MPI.DOUBLE
    calls: list[tuple[str, Callable[[Any], np.ndarray]]] = []

    def allgather(c: Any) -> np.ndarray:
        y = fill(2 * p + 3, -7)
        c.Allgather(fill(2, r), [y, 2, T])
        return y

    def allgather_in_place(c: Any) -> np.ndarray:
        y = fill(2 * p + 3, -7)
        y[2 * r : 2 * r + 2] = r
        c.Allgather(MPI.IN_PLACE, [y, 2, T])
        return y

    def alltoall(c: Any) -> np.ndarray:
        y = fill(2 * p + 3, -7)
        c.Alltoall([np.arange(2 * p + 3) + 100.0 * r, 2, T], [y, 2, T])
        return y

    def alltoall_in_place(c: Any) -> np.ndarray:
        y = np.arange(2 * p + 3) + 100.0 * r
        c.Alltoall(MPI.IN_PLACE, [y, 2, T])
        return y

    def reduce_scatter_block(c: Any) -> np.ndarray:
        y = fill(3, -7)
        c.Reduce_scatter_block([np.arange(2 * p + 3) + r, 2, T], [y, 2, T])
        return y

    def reduce_scatter_block_in_place(c: Any) -> np.ndarray:
        y = np.arange(2 * p + 3) + r  # the input: 2 per block, then a tail MPI leaves alone
        c.Reduce_scatter_block(MPI.IN_PLACE, [y, 2, T])
        return y[:2]  # the rest of the input buffer is undefined after an in-place call

    calls = [("Allgather", allgather), ("Allgather in place", allgather_in_place),
             ("Alltoall", alltoall), ("Alltoall in place", alltoall_in_place),
             ("Reduce_scatter_block", reduce_scatter_block),
             ("Reduce_scatter_block in place", reduce_scatter_block_in_place)]
    problems: list[str] = []
    for name, run in calls:
        want = run(WORLD)  # mpi4py itself
        try:
            got = run(b)
        except Exception as exc:  # symmetric: every rank parses the same spec
            problems.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if not np.array_equal(got, want):
            problems.append(f"{name}: got {got}, mpi4py gives {want}")
    problems += _recover(b)
    _agree(problems, f"{kind}: explicit counts per block")


# --------------------------------------------------------------------------------------------
# checked mode: ranks that disagree all raise MismatchError


CHECKED = ("p2p-check", "native-check", "p2p-env")


@pytest.fixture
def checked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A backend in checked mode: ``check=True`` (p2p, native), or ``MPICOLL_CHECK=1``."""
    how = request.param
    if how == "p2p-env":
        monkeypatch.setenv("MPICOLL_CHECK", "1")
        b = mpicoll.p2p(WORLD)
        yield b
        b.Free()
    else:
        yield backend(how)


@dataclass(frozen=True)
class Mismatch:
    """Ranks that disagree on one field of the signature."""

    name: str
    words: tuple[str, ...]
    make: Callable[[int, int], Attempt]


def _mismatch_cases() -> list[Mismatch]:
    def roots(r: int, p: int) -> Attempt:
        a = fill(3, r)
        return Attempt(lambda b: b.Bcast(a, root=0 if r == 0 else 1), [a])

    def reduce_roots(r: int, p: int) -> Attempt:
        s, rb = fill(3, r), fill(3, -7)
        return Attempt(lambda b: b.Reduce(s, rb, root=r), [s, rb])

    def counts(r: int, p: int) -> Attempt:
        n = 3 if r == 0 else 4
        s, rb = fill(n, r), fill(n, -7)
        return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])

    def bcast_counts(r: int, p: int) -> Attempt:
        a = fill(5 if r == 0 else 4, r)
        return Attempt(lambda b: b.Bcast(a, root=0), [a])

    def dtypes(r: int, p: int) -> Attempt:
        dt = np.float64 if r == 0 else np.int64  # same size: only the type differs
        s, rb = fill(3, r, dt), fill(3, -7, dt)
        return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])

    def ops(r: int, p: int) -> Attempt:
        s, rb = fill(3, r), fill(3, -7)
        return Attempt(lambda b: b.Allreduce(s, rb, op=MPI.SUM if r == 0 else MPI.MAX), [s, rb])

    def collectives(r: int, p: int) -> Attempt:
        s, rb = fill(3, r), fill(3, -7)
        if r == 0:
            return Attempt(lambda b: b.Bcast(rb, root=0), [s, rb])
        return Attempt(lambda b: b.Allreduce(s, rb), [s, rb])

    def nonblocking_counts(r: int, p: int) -> Attempt:
        n = 2 if r == p - 1 else 3
        s, rb = fill(n, r), fill(n * p, -7)
        return Attempt(lambda b: b.Iallgather(s, rb), [s, rb])

    return [
        Mismatch("bcast_roots", ("root",), roots),
        Mismatch("reduce_roots", ("root",), reduce_roots),
        Mismatch("allreduce_counts", ("count",), counts),
        Mismatch("bcast_counts", ("count",), bcast_counts),
        Mismatch("allreduce_dtypes", ("type",), dtypes),
        Mismatch("allreduce_ops", ("op",), ops),
        Mismatch("different_collectives", ("collective",), collectives),
        Mismatch("iallgather_counts", ("count",), nonblocking_counts),
        *_v_count_mismatch_cases(),
    ]


def _v_count_mismatch_cases() -> list[Mismatch]:
    """The counts of the v-collectives (and Reduce_scatter's), which every rank checks only
    against its own buffers: checked mode must compare them across ranks."""

    # the smallest count (what the count field holds) is the same on every rank: only the
    # lists differ
    def allgatherv(r: int, p: int) -> Attempt:
        counts = [2] * p
        if r == p - 1:
            counts[0] = 3  # this rank alone thinks rank 0 sends 3 elements
        s, rb = fill(2, r), fill(sum(counts), -7)
        return Attempt(lambda b: b.Allgatherv(s, [rb, counts, MPI.DOUBLE]), [s, rb])

    def iallgatherv(r: int, p: int) -> Attempt:
        counts = [2] * p  # every rank's list differs; each matches its own sendbuf only
        counts[(r + 1) % p] = 3
        s, rb = fill(2, r), fill(sum(counts), -7)
        return Attempt(lambda b: b.Iallgatherv(s, [rb, counts, MPI.DOUBLE]).Wait(), [s, rb])

    def gatherv(r: int, p: int) -> Attempt:
        s = fill(3 if r == p - 1 else 2, r)  # the root expects 2 from every rank
        rb = fill(2 * p, -7) if r == 0 else None
        watch = [s] if rb is None else [s, rb]
        return Attempt(lambda b: b.Gatherv(s, [rb, [2] * p, MPI.DOUBLE] if r == 0 else None,
                                           root=0), watch)

    def gatherv_root_in_place(r: int, p: int) -> Attempt:
        root = p - 1
        counts = [1] * p
        s = fill(2 if r == 0 else 1, r)  # rank 0 sends 2, the root expects 1
        rb = fill(p, -7) if r == root else None
        watch = [s] if rb is None else [s, rb]
        return Attempt(lambda b: b.Gatherv(MPI.IN_PLACE if r == root else s,
                                           [rb, counts, MPI.DOUBLE] if r == root else None,
                                           root=root), watch)

    def scatterv(r: int, p: int) -> Attempt:
        send = fill(2 * p, 1.0) if r == 0 else None
        rb = fill(1 if r == p - 1 else 2, -7)  # the root sends 2 to every rank
        watch = [rb] if send is None else [send, rb]
        return Attempt(lambda b: b.Scatterv([send, [2] * p, MPI.DOUBLE] if r == 0 else None,
                                            rb, root=0), watch)

    def alltoallv(r: int, p: int) -> Attempt:
        sc, rc = [1] * p, [1] * p
        if r == 0:
            sc[p - 1] = 2  # rank 0 sends 2 to rank p-1, which expects 1
        s, rb = fill(sum(sc), r), fill(sum(rc), -7)
        return Attempt(lambda b: b.Alltoallv([s, sc, MPI.DOUBLE], [rb, rc, MPI.DOUBLE]), [s, rb])

    def alltoallv_swapped(r: int, p: int) -> Attempt:
        # 2 expected everywhere; rank 0 sends 3 to rank 1 and rank 1 sends 1 to rank 0: the
        # totals over all ranks still agree, only the pairing is wrong
        sc = [2] * p
        if r == 0:
            sc[1] = 3
        if r == 1:
            sc[0] = 1
        rc = [2] * p
        s, rb = fill(sum(sc), r), fill(sum(rc), -7)
        return Attempt(lambda b: b.Ialltoallv([s, sc, MPI.DOUBLE], [rb, rc, MPI.DOUBLE]).Wait(),
                       [s, rb])

    def reduce_scatter(r: int, p: int) -> Attempt:
        counts = [2] * p
        if r == 0:
            counts[p - 1] = 3
        s, rb = fill(sum(counts), r), fill(counts[r], -7)
        return Attempt(lambda b: b.Reduce_scatter(s, rb, counts), [s, rb])

    def reduce_scatter_gathered_vs_allreduce(r: int, p: int) -> Attempt:
        s, rb = fill(2 * p, r), fill(2, -7)
        if r == 0:
            return Attempt(lambda b: b.Allreduce(s[:2], rb), [s, rb])
        return Attempt(lambda b: b.Reduce_scatter(s, rb), [s, rb])  # counts by allgather

    def reduce_scatter_gathered_vs_given(r: int, p: int) -> Attempt:
        s, rb = fill(2 * p, r), fill(2, -7)
        counts = [2] * p if r == 0 else None
        return Attempt(lambda b: b.Reduce_scatter(s, rb, counts), [s, rb])

    return [
        Mismatch("allgatherv_recvcounts", ("count", "recvcounts"), allgatherv),
        Mismatch("iallgatherv_recvcounts", ("count", "recvcounts"), iallgatherv),
        Mismatch("gatherv_sendcount", ("count", "recvcounts", "root"), gatherv),
        Mismatch("gatherv_root_in_place_sendcount", ("count",), gatherv_root_in_place),
        Mismatch("scatterv_recvcount", ("count", "sendcounts", "root"), scatterv),
        Mismatch("alltoallv_pairing", ("count",), alltoallv),
        Mismatch("alltoallv_pairing_same_totals", ("count",), alltoallv_swapped),
        Mismatch("reduce_scatter_recvcounts", ("count", "recvcounts"), reduce_scatter),
        Mismatch("reduce_scatter_gathered_vs_allreduce", ("collective",),
                 reduce_scatter_gathered_vs_allreduce),
        Mismatch("reduce_scatter_gathered_vs_given", ("recvcounts",),
                 reduce_scatter_gathered_vs_given),
    ]


@pytest.mark.mpi
@pytest.mark.parametrize("checked", CHECKED, indirect=True)
@pytest.mark.parametrize("case", _mismatch_cases(), ids=lambda c: c.name)
def test_checked_mode_mismatch(checked: Any, case: Mismatch) -> None:
    """Every rank raises MismatchError (a ValueError) naming the field; no buffer changed; the
    backend still works afterwards."""
    assert MismatchError is not None
    assert issubclass(MismatchError, ValueError)
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("a mismatch needs two ranks")
    problems: list[str] = []
    attempt = case.make(r, p)
    before = _snapshot(attempt.watch)
    try:
        attempt.call(checked)
    except MismatchError as exc:
        missing = [w for w in case.words if w not in str(exc).lower()]
        if missing:
            problems.append(f"message {str(exc)!r} does not name {missing}")
    except Exception as exc:
        problems.append(f"raised {type(exc).__name__}: {exc}; expected MismatchError")
    else:
        problems.append("no exception; expected MismatchError")
    if _snapshot(attempt.watch) != before:
        problems.append("a buffer was changed by the refused call")
    problems += _recover(checked)
    _agree(problems, f"checked mode: {case.name}")


@pytest.mark.mpi
@pytest.mark.parametrize("checked", CHECKED, indirect=True)
def test_checked_mode_local_error_on_one_rank(checked: Any) -> None:
    """Bad input seen by one rank only (the root's too-small receive buffer): that rank raises
    its own ValueError, every other rank a MismatchError, so no rank is stranded."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs two ranks")
    problems: list[str] = []
    s = fill(2, r)
    rb = fill(2 * p - 1, -7) if r == 0 else None
    try:
        checked.Gather(s, rb, root=0)
    except Exception as exc:
        if r == 0:
            if isinstance(exc, MismatchError) or not isinstance(exc, ValueError):
                problems.append(f"root raised {type(exc).__name__}: {exc}; expected its own "
                                "ValueError")
            elif "recvbuf" not in str(exc):
                problems.append(f"root's message {str(exc)!r} does not name recvbuf")
        elif not isinstance(exc, MismatchError):
            problems.append(f"raised {type(exc).__name__}: {exc}; expected MismatchError")
    else:
        problems.append("no exception")
    if r == 0 and not np.array_equal(rb, fill(2 * p - 1, -7)):
        problems.append("the root's recvbuf was changed")
    problems += _recover(checked)
    _agree(problems, "checked mode: one rank's local error")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native-check", "p2p"])
def test_reduce_scatter_gathered_counts_local_error_on_one_rank(kind: str) -> None:
    """Reduce_scatter with recvcounts=None gathers every rank's receive count first: a recvbuf
    refused on one rank only must make every rank raise (that rank its own ValueError, the
    others a ValueError naming it), not leave the others waiting in that gather.  Native
    outside checked mode follows plain mpi4py, which raises on that rank only and leaves the
    others in the gather: there, checked mode is what keeps them out."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs two ranks")
    b = backend(kind)
    problems: list[str] = []
    rb = readonly(fill(2, -7)) if r == 0 else fill(2, -7)
    s = fill(2 * p, r)
    try:
        b.Reduce_scatter(s, rb)
    except (ValueError, BufferError) as exc:  # rank 0: BufferError (read-only), as mpi4py
        if r == 0 and "recvbuf" not in str(exc):
            problems.append(f"rank 0's message {str(exc)!r} does not name recvbuf")
        if r != 0 and "0" not in str(exc):
            problems.append(f"message {str(exc)!r} does not name rank 0")
    except Exception as exc:
        problems.append(f"raised {type(exc).__name__}: {exc}; expected ValueError")
    else:
        problems.append("no exception")
    if not np.array_equal(rb, fill(2, -7)):
        problems.append("recvbuf changed")
    problems += _recover(b)
    _agree(problems, f"{kind}: Reduce_scatter(recvcounts=None), recvbuf refused on rank 0")


@pytest.mark.mpi
@pytest.mark.parametrize("checked", CHECKED, indirect=True)
def test_checked_mode_accepts_agreeing_calls(checked: Any) -> None:
    """No false alarms: calls whose ranks legitimately differ (v-collective counts, arguments
    ignored at non-roots, MPI.IN_PLACE at the root) pass and give the right results."""
    p, r = WORLD.size, WORLD.rank
    problems: list[str] = []
    counts = [k + 1 for k in range(p)]
    total = sum(counts)
    mine = np.full(counts[r], float(r))
    want = np.repeat(np.arange(p, dtype=float), counts)
    rv = fill(total, -7) if r == 0 else None
    checked.Gatherv(mine, [rv, counts, MPI.DOUBLE] if r == 0 else None, root=0)
    if r == 0 and not np.array_equal(rv, want):
        problems.append(f"Gatherv gave {rv}")
    out = fill(counts[r], -7)
    checked.Scatterv([want, counts, MPI.DOUBLE] if r == 0 else None, out, root=0)
    if not np.array_equal(out, mine):
        problems.append(f"Scatterv gave {out}")
    allv = fill(total, -7)
    checked.Allgatherv(mine, [allv, counts, MPI.DOUBLE])
    if not np.array_equal(allv, want):
        problems.append(f"Allgatherv gave {allv}")
    sc = [(r + q) % 3 for q in range(p)]          # rank r sends (r+q)%3 items to q
    rc = [(q + r) % 3 for q in range(p)]          # and receives (q+r)%3 from q
    sbuf = np.full(sum(sc), float(r))
    rbuf = fill(sum(rc), -7)
    checked.Alltoallv([sbuf, sc, MPI.DOUBLE], [rbuf, rc, MPI.DOUBLE])
    if not np.array_equal(rbuf, np.repeat(np.arange(p, dtype=float), rc)):
        problems.append(f"Alltoallv gave {rbuf}")
    red = fill(3, r + 1.0)
    checked.Reduce(MPI.IN_PLACE if r == p - 1 else red, red if r == p - 1 else None, root=p - 1)
    if r == p - 1 and not np.array_equal(red, fill(3, p * (p + 1) / 2)):
        problems.append(f"Reduce in place gave {red}")
    ex = fill(2, -7)
    checked.Exscan(fill(2, r + 1.0), ex)
    if r > 0 and not np.array_equal(ex, fill(2, r * (r + 1) / 2)):
        problems.append(f"Exscan gave {ex}")
    rs = fill(2, -7)
    checked.Reduce_scatter(fill(2 * p, 1.0), rs, [2] * p)
    if not np.array_equal(rs, fill(2, float(p))):
        problems.append(f"Reduce_scatter gave {rs}")
    problems += _recover(checked)
    _agree(problems, "checked mode: agreeing calls")


@pytest.mark.mpi
@pytest.mark.parametrize(("var", "value"), [("MPICOLL_SEGMENT_SIZE", "0"),
                                            ("MPICOLL_ALLREDUCE_ALGORITHM", "nope")])
def test_checked_mode_bad_env_on_one_rank(monkeypatch: pytest.MonkeyPatch, var: str,
                                          value: str) -> None:
    """A bad environment variable on one rank only (checked p2p): when the backend is made,
    that rank raises its own ValueError naming the variable, every other rank a ValueError
    naming that rank; nothing is sent, and the ranks are still in step."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs two ranks")
    if r == p - 1:
        monkeypatch.setenv(var, value)
    problems: list[str] = []
    try:
        mpicoll.p2p(WORLD, check=True).Free()
    except Exception as exc:
        if r == p - 1:
            if isinstance(exc, MismatchError) or not isinstance(exc, ValueError):
                problems.append(f"raised {type(exc).__name__}: {exc}; expected its own "
                                "ValueError")
            elif var not in str(exc):
                problems.append(f"message {str(exc)!r} does not name {var}")
        elif not (isinstance(exc, ValueError) and f"refused on rank(s) [{p - 1}]" in str(exc)):
            problems.append(f"raised {type(exc).__name__}: {exc}; expected a ValueError "
                            f"naming rank {p - 1}")
    else:
        problems.append("no exception")
    monkeypatch.delenv(var, raising=False)
    problems += _recover(backend("p2p-check"))
    _agree(problems, f"checked mode: {var}={value!r} on rank {p - 1} only")


@pytest.mark.mpi
@pytest.mark.parametrize("checked", CHECKED, indirect=True)
def test_checked_mode_reduce_scatter_gathered_counts(checked: Any) -> None:
    """Checked Reduce_scatter(recvcounts=None): uneven receive counts are gathered in the
    agreement and give the right result; a recvbuf refused on rank 0 makes rank 0 raise its
    own ValueError and every other rank a MismatchError naming rank 0."""
    p, r = WORLD.size, WORLD.rank
    problems: list[str] = []
    counts = [k + 1 for k in range(p)]
    y = fill(counts[r], -7)
    checked.Reduce_scatter(fill(sum(counts), r + 1.0), y)
    if not np.array_equal(y, fill(counts[r], p * (p + 1) / 2)):
        problems.append(f"Reduce_scatter gave {y}")
    if p > 1:
        rb = readonly(fill(2, -7)) if r == 0 else fill(2, -7)
        try:
            checked.Reduce_scatter(fill(2 * p, r), rb)
        except Exception as exc:
            if r == 0 and (isinstance(exc, MismatchError) or "recvbuf" not in str(exc)):
                problems.append(f"rank 0 raised {type(exc).__name__}: {exc}")
            if r != 0 and not (isinstance(exc, MismatchError) and "[0]" in str(exc)):
                problems.append(f"raised {type(exc).__name__}: {exc}; expected MismatchError")
        else:
            problems.append("no exception")
        if not np.array_equal(rb, fill(2, -7)):
            problems.append("recvbuf changed")
    problems += _recover(checked)
    _agree(problems, "checked mode: Reduce_scatter(recvcounts=None)")


# ---- checked mode: blocking vs non-blocking, forced algorithm, construction, after Free ------


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_checked_mode_blocking_vs_nonblocking(kind: str) -> None:
    """The last rank calls Iallreduce, the others Allreduce: MPI never matches them (native
    hangs); checked mode raises MismatchError on every rank instead."""
    if WORLD.size < 2:
        pytest.skip("needs 2 ranks")
    mk = mpicoll.native if kind == "native" else mpicoll.p2p
    c = mk(WORLD, check=True)
    x, y = np.ones(4), np.zeros(4)
    last = WORLD.rank == WORLD.size - 1
    run = (lambda: c.Iallreduce(x, y).Wait()) if last else (lambda: c.Allreduce(x, y))
    with pytest.raises(mpicoll.MismatchError, match=r"non-blocking form \(Iallreduce\)"):
        run()
    c.Free()


@pytest.mark.mpi
@pytest.mark.timeout(30)
def test_checked_mode_forced_algorithm_message_is_readable() -> None:
    if WORLD.size < 2:
        pytest.skip("needs 2 ranks")
    with mpicoll.p2p(WORLD, check=True) as c:
        alg = "ring" if WORLD.rank == 0 else None
        with pytest.raises(mpicoll.MismatchError) as info:
            c.Allreduce(np.ones(4), np.zeros(4), algorithm=alg)
        msg = str(info.value)
        others = "[" + ", ".join(str(r) for r in range(1, WORLD.size)) + "]"
        if WORLD.rank == 0:
            assert "this rank (0) forces 'ring'" in msg
            assert f"ranks {others} force other algorithms" in msg
        else:
            assert "forces no algorithm ('auto')" in msg
            assert "ranks [0] force other algorithms" in msg


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_construction_check_flag_on_one_rank(monkeypatch: pytest.MonkeyPatch,
                                             kind: str) -> None:
    """$MPICOLL_CHECK on rank 1 only: every rank raises MismatchError at construction
    (before: the checked rank's agreement hung against the others' plain call)."""
    if WORLD.size < 2:
        pytest.skip("needs 2 ranks")
    monkeypatch.delenv("MPICOLL_CHECK", raising=False)
    if WORLD.rank == 1:
        monkeypatch.setenv("MPICOLL_CHECK", "1")
    mk = mpicoll.native if kind == "native" else mpicoll.p2p
    with pytest.raises(mpicoll.MismatchError, match=r"on for rank\(s\) \[1\]"):
        mk(WORLD)


@pytest.mark.mpi
@pytest.mark.timeout(30)
def test_construction_bad_segment_size_on_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad $MPICOLL_SEGMENT_SIZE on rank 1 only: every rank raises ValueError from p2p()
    (before: rank 1 raised, the others hung in the Dup)."""
    if WORLD.size < 2:
        pytest.skip("needs 2 ranks")
    if WORLD.rank == 1:
        monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", "0")
        with pytest.raises(ValueError, match="MPICOLL_SEGMENT_SIZE"):
            mpicoll.p2p(WORLD)
    else:
        monkeypatch.delenv("MPICOLL_SEGMENT_SIZE", raising=False)
        with pytest.raises(ValueError, match=r"refused on rank\(s\) \[1\]"):
            mpicoll.p2p(WORLD)
    monkeypatch.delenv("MPICOLL_SEGMENT_SIZE", raising=False)
    with mpicoll.p2p(WORLD) as c:  # the ranks are still in step
        c.Barrier()


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("check", [False, True])
def test_use_after_free_raises_freed(check: bool) -> None:
    c = mpicoll.p2p(WORLD, check=check)
    c.Free()
    with pytest.raises(RuntimeError, match="freed"):
        c.Allreduce(np.ones(2), np.zeros(2))
    with pytest.raises(RuntimeError, match="freed"):
        c.Reduce_scatter(np.ones(2 * WORLD.size), np.zeros(2))
