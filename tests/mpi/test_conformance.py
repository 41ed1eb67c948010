"""Conformance with plain mpi4py: every message-spec form, on both backends (run under mpiexec).

Each case builds one call (method, arguments) from fresh buffers, identically three times: once
for plain ``mpi4py.MPI.Comm``, once for ``mpicoll.native`` and once for ``mpicoll.p2p`` on the
same communicator.  Where mpi4py succeeds, both backends must succeed and leave every buffer
byte-identical to mpi4py's (the data are small integers, so every reduction order is exact);
where mpi4py raises, both must raise an instance of the same exception type, before any message
(no stray message waits afterwards on the communicator or on p2p's private one) and with every
buffer untouched.  Every case runs on ``COMM_WORLD``, ``COMM_SELF``, ``COMM_WORLD`` with its
ranks reversed (``Split`` with reversed keys) and the two halves of a ``Split``.

The forms (mpi4py 4.1's ``BufSpec``/``BufSpecB``/``BufSpecV``, read as its ``msgbuffer.pxi``
reads them): ``None`` as the in-place send buffer (blocking and ``I``-forms), v-specs with one
count for every rank and a stride or None displacement, ``[buf, count]`` for a v-collective,
the 4-item form, counts as numpy arrays, typecode strings, the null specs ``[None, MPI.INT]``
and ``[None, (0, None), MPI.INT]`` in every block, vector and reduction collective,
``array.array`` of every typecode, ``bytearray``, ``memoryview``, a float root; and malformed
specs (wrong number of items, not a buffer, unknown typecode, negative or float count, a count
with a null buffer, non-contiguous and read-only buffers, differing reduction datatypes, counts
of the wrong length, a string or out-of-range root, an op of the wrong type or undefined for the
datatype, Reduce_scatter in place without counts).

Where mpicoll deliberately differs (not tested here): it refuses send and receive element types
that differ in the non-reduction collectives, counts that do not fill the receive blocks, and
specs pointing past a buffer, all of which plain mpi4py hands to MPI unchecked (MPI then
truncates, errs or goes out of bounds); ``MPI.BOTTOM`` with absolute addresses is covered by
``tests/mpi/test_bottom.py``.
MPICH and Open MPI (checked at P = 3) agree on every case here but one: the MPI-level refusals
(root, op; negative counts on MPICH) are ``MPI.Exception``, which mpicoll's ``MPIValueError`` /
``MPITypeError`` are too; Open MPI does not check negative v-counts (plain mpi4py then writes
outside the buffer), so there the case expects mpicoll's ``ValueError`` and skips plain mpi4py
(``Case.unchecked``).

``MPICOLL_TEST_FULL=1`` adds the non-blocking form of every valid case.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_conformance.py`` (P = 1..5).
"""

from __future__ import annotations

import array
import os
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
D, I32 = MPI.DOUBLE, MPI.INT
OPEN_MPI = "Open MPI" in MPI.Get_library_version()

# ---- communicators and backends ----------------------------------------------------------------

_COMMS: dict[str, MPI.Comm] = {}
_BACKENDS: dict[tuple[str, str], Any] = {}


def comms() -> dict[str, MPI.Comm]:
    if not _COMMS:
        p, r = WORLD.size, WORLD.rank
        _COMMS["world"] = WORLD
        _COMMS["self"] = MPI.COMM_SELF
        _COMMS["reversed"] = WORLD.Split(0, p - 1 - r)
        _COMMS["half"] = WORLD.Split(int(r >= (p + 1) // 2), r)
    return _COMMS


def backend(kind: str, name: str) -> Any:
    """``kind``: ``native``, ``p2p``, or ``native-check`` (native in checked mode)."""
    if (kind, name) not in _BACKENDS:
        make, _, check = kind.partition("-")
        _BACKENDS[kind, name] = getattr(mpicoll, make)(comms()[name], check=bool(check))
    return _BACKENDS[kind, name]


@pytest.fixture(scope="module", autouse=True)
def _free() -> Any:
    yield
    for b in _BACKENDS.values():
        b.Free()
    for name in ("reversed", "half"):
        if name in _COMMS:
            _COMMS[name].Free()
    _BACKENDS.clear()
    _COMMS.clear()


# ---- the cases -----------------------------------------------------------------------------


@dataclass
class Built:
    """One rank's call: ``method(*args, **kw)`` and the buffers compared afterwards."""

    method: str
    args: tuple[Any, ...]
    kw: dict[str, Any]
    bufs: list[Any]


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[int, int], Built]
    nonblocking: bool = True  # an I-form exists (and is run under MPICOLL_TEST_FULL=1)
    always_i: bool = False  # run the I-form in the plain suite too
    #: where the MPI library does not check the input (plain mpi4py then corrupts memory),
    #: the exception mpicoll raises instead; plain mpi4py is not run there
    unchecked: type[BaseException] | None = None


CASES: list[Case] = []


def case(name: str, *, nonblocking: bool = True, always_i: bool = False,
         unchecked: type[BaseException] | None = None,
         ) -> Callable[[Callable[[int, int], Built]], Callable[[int, int], Built]]:
    def deco(make: Callable[[int, int], Built]) -> Callable[[int, int], Built]:
        CASES.append(Case(name, make, nonblocking, always_i, unchecked))
        return make

    return deco


def call(method: str, *args: Any, bufs: list[Any], **kw: Any) -> Built:
    return Built(method, args, kw, bufs)


def x(n: int, r: int, dtype: Any = np.float64) -> np.ndarray:
    """Exact data: small integers, distinct per rank."""
    return (np.arange(n) % 7 + 3 * r + 1).astype(dtype)


def z(n: int, dtype: Any = np.float64) -> np.ndarray:
    return np.full(n, -5, dtype=dtype)


def vcounts(n: int) -> list[int]:
    return [(i + 1) % 3 for i in range(n)]  # 1, 2, 0, 1, 2: a zero count from 3 ranks on


def displs_of(counts: list[int], gap: int = 0) -> list[int]:
    out, d = [], 0
    for c in counts:
        out.append(d)
        d += c + gap
    return out


# None (and MPI.IN_PLACE) as the in-place send buffer -------------------------------------------

K = 3  # elements per block


@case("allgather_none_in_place", always_i=True)
def _(r: int, n: int) -> Built:
    rb = z(K * n)
    rb[r * K : (r + 1) * K] = x(K, r)
    return call("Allgather", None, rb, bufs=[rb])


@case("gather_none_at_root", always_i=True)
def _(r: int, n: int) -> Built:
    root = n - 1
    if r == root:
        rb = z(K * n)
        rb[r * K : (r + 1) * K] = x(K, r)
        return call("Gather", None, rb, root, bufs=[rb])
    s = x(K, r)
    return call("Gather", s, None, root, bufs=[s])


@case("scatter_none_at_root", always_i=True)
def _(r: int, n: int) -> Built:
    if r == 0:
        s = x(K * n, 9)
        return call("Scatter", s, None, 0, bufs=[s])
    rb = z(K)
    return call("Scatter", None, rb, 0, bufs=[rb])


@case("gatherv_none_at_root")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    if r == 0:
        rb = z(sum(c))
        rb[: c[0]] = x(c[0], 0)
        return call("Gatherv", None, [rb, c], 0, bufs=[rb])
    s = x(c[r], r)
    return call("Gatherv", s, None, 0, bufs=[s])


@case("scatterv_none_at_root")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    if r == 0:
        s = x(sum(c), 4)
        return call("Scatterv", [s, c], None, 0, bufs=[s])
    rb = z(c[r])
    return call("Scatterv", None, rb, 0, bufs=[rb])


@case("alltoall_none_in_place", always_i=True)
def _(r: int, n: int) -> Built:
    rb = x(K * n, r)
    return call("Alltoall", None, rb, bufs=[rb])


@case("allgatherv_none_in_place")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    d = displs_of(c)
    rb = z(sum(c))
    rb[d[r] : d[r] + c[r]] = x(c[r], r)
    return call("Allgatherv", None, [rb, (c, d), D], bufs=[rb])


for _coll in ("Allreduce", "Scan", "Exscan"):
    def _mk(coll: str) -> Callable[[int, int], Built]:
        def make(r: int, n: int) -> Built:
            rb = x(5, r)
            return call(coll, None, rb, bufs=[rb])
        return make

    case(f"{_coll.lower()}_none_in_place", always_i=True)(_mk(_coll))


@case("reduce_none_at_root", always_i=True)
def _(r: int, n: int) -> Built:
    if r == 0:
        rb = x(4, r)
        return call("Reduce", None, rb, MPI.SUM, 0, bufs=[rb])
    s = x(4, r)
    return call("Reduce", s, None, MPI.SUM, 0, bufs=[s])


@case("reduce_scatter_block_none_in_place", always_i=True)
def _(r: int, n: int) -> Built:
    rb = x(K * n, r)
    return call("Reduce_scatter_block", None, rb, bufs=[rb])


@case("reduce_scatter_none_in_place", always_i=True)
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    rb = x(sum(c), r)
    return call("Reduce_scatter", None, rb, c, bufs=[rb])


@case("allreduce_in_place_constant")
def _(r: int, n: int) -> Built:
    rb = x(5, r)
    return call("Allreduce", MPI.IN_PLACE, rb, bufs=[rb])


# v-specs: one count for every rank, a stride or None displacement, [buf, count] ------------------


@case("allgatherv_count_none")
def _(r: int, n: int) -> Built:
    s, rb = x(2, r), z(2 * n)
    return call("Allgatherv", s, [rb, (2, None), D], bufs=[s, rb])


@case("allgatherv_count_stride")
def _(r: int, n: int) -> Built:
    s, rb = x(2, r), z(3 * n)
    return call("Allgatherv", s, [rb, (2, 3), D], bufs=[s, rb])


@case("allgatherv_buf_count")
def _(r: int, n: int) -> Built:
    s, rb = x(2, r), z(2 * n)
    return call("Allgatherv", s, [rb, 2], bufs=[s, rb])


@case("gatherv_count_stride")
def _(r: int, n: int) -> Built:
    s = x(2, r)
    if r == 0:
        rb = z(4 * n)
        return call("Gatherv", s, [rb, (2, 4), D], 0, bufs=[s, rb])
    return call("Gatherv", s, None, 0, bufs=[s])


@case("scatterv_count_stride")
def _(r: int, n: int) -> Built:
    rb = z(2)
    if r == 0:
        s = x(3 * n, 2)
        return call("Scatterv", [s, (2, 3), D], rb, 0, bufs=[s, rb])
    return call("Scatterv", None, rb, 0, bufs=[rb])


@case("alltoallv_count_none")
def _(r: int, n: int) -> Built:
    s, rb = x(2 * n, r), z(2 * n)
    return call("Alltoallv", [s, (2, None), D], [rb, (2, None), D], bufs=[s, rb])


@case("alltoallv_count_stride")
def _(r: int, n: int) -> Built:
    s, rb = x(3 * n, r), z(4 * n)
    return call("Alltoallv", [s, (2, 3), D], [rb, (2, 4), D], bufs=[s, rb])


@case("allgatherv_inferred_uneven")
def _(r: int, n: int) -> Built:  # counts None: the buffer split, the first ranks one more
    tot = 2 * n + 1
    q, m = divmod(tot, n)
    s, rb = x(q + (r < m), r), z(tot)
    return call("Allgatherv", s, rb, bufs=[s, rb])


# the 4-item form, counts as numpy arrays ---------------------------------------------------------


@case("allgatherv_four_items")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    d = displs_of(c, gap=1)
    s, rb = x(c[r], r), z(sum(c) + n)
    return call("Allgatherv", s, [rb, c, d, D], bufs=[s, rb])


@case("gatherv_four_items_numpy_counts")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    s = x(c[r], r)
    if r == n - 1:
        rb = z(sum(c) + n)
        return call("Gatherv", s, [rb, np.array(c), np.array(displs_of(c, 1)), D], n - 1,
                    bufs=[s, rb])
    return call("Gatherv", s, None, n - 1, bufs=[s])


@case("scatterv_four_items")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    rb = z(c[r])
    if r == 0:
        s = x(sum(c) + 2 * n, 1)
        return call("Scatterv", [s, c, displs_of(c, 2), D], rb, 0, bufs=[s, rb])
    return call("Scatterv", None, rb, 0, bufs=[rb])


@case("alltoallv_numpy_counts")
def _(r: int, n: int) -> Built:
    sc = np.array([(r + j) % 3 for j in range(n)], dtype=np.int32)
    rc = np.array([(j + r) % 3 for j in range(n)], dtype=np.int64)
    s, rb = x(int(sc.sum()), r), z(int(rc.sum()))
    return call("Alltoallv", [s, sc], [rb, rc], bufs=[s, rb])


@case("reduce_scatter_numpy_recvcounts")
def _(r: int, n: int) -> Built:
    c = np.array(vcounts(n))
    s, rb = x(int(c.sum()), r), z(int(c[r]))
    return call("Reduce_scatter", s, rb, c, bufs=[s, rb])


@case("reduce_scatter_counts_gathered")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    s, rb = x(sum(c), r), z(c[r])
    return call("Reduce_scatter", s, rb, bufs=[s, rb])


# typecode strings -----------------------------------------------------------------------------


@case("bcast_typecode_i")
def _(r: int, n: int) -> Built:
    b = x(5, r, np.int32) if r == 0 else z(5, np.int32)
    return call("Bcast", [b, "i"], bufs=[b])


@case("allreduce_count_typecode_d")
def _(r: int, n: int) -> Built:
    s, rb = x(6, r), z(6)
    return call("Allreduce", [s, 4, "d"], [rb, 4, "d"], bufs=[s, rb])


@case("allgather_typecode_b")
def _(r: int, n: int) -> Built:
    s, rb = x(2, r, np.int8), z(2 * n, np.int8)
    return call("Allgather", [s, "b"], [rb, "b"], bufs=[s, rb])


@case("bcast_typecode_c_bytearray")
def _(r: int, n: int) -> Built:
    b = bytearray(b"hello") if r == 0 else bytearray(5)
    return call("Bcast", [b, "c"], bufs=[b])


@case("gather_count_displ_typecode")
def _(r: int, n: int) -> Built:
    s = x(4, r, np.int32)
    if r == 0:
        rb = z(2 * n, np.int32)
        return call("Gather", [s, (2, 1), "i"], [rb, 2, "i"], 0, bufs=[s, rb])
    return call("Gather", [s, (2, 1), "i"], None, 0, bufs=[s])


@case("alltoall_count_is_per_block")
def _(r: int, n: int) -> Built:
    s, rb = x(2 * n + 1, r), z(2 * n + 3)
    return call("Alltoall", [s, 2, D], [rb, 2, D], bufs=[s, rb])


# null specs in every block, vector and reduction collective (default root and op) -------------

_NULLS = {"null": lambda: [None, I32], "null0": lambda: [None, (0, None), I32]}
_NULL_CALLS: dict[str, Callable[[Callable[[], Any]], tuple[Any, ...]]] = {
    "Bcast": lambda m: (m(),),
    "Gather": lambda m: (m(), m()), "Scatter": lambda m: (m(), m()),
    "Allgather": lambda m: (m(), m()), "Alltoall": lambda m: (m(), m()),
    "Gatherv": lambda m: (m(), m()), "Scatterv": lambda m: (m(), m()),
    "Allgatherv": lambda m: (m(), m()), "Alltoallv": lambda m: (m(), m()),
    "Reduce": lambda m: (m(), m()), "Allreduce": lambda m: (m(), m()),
    "Reduce_scatter_block": lambda m: (m(), m()), "Reduce_scatter": lambda m: (m(), m()),
    "Scan": lambda m: (m(), m()), "Exscan": lambda m: (m(), m()),
}
for _meth, _argf in _NULL_CALLS.items():
    for _form, _spec in _NULLS.items():
        def _mkn(meth: str, argf: Callable[..., tuple[Any, ...]], spec: Callable[[], Any]
                 ) -> Callable[[int, int], Built]:
            return lambda r, n: call(meth, *argf(spec), bufs=[])
        case(f"{_meth.lower()}_{_form}")(_mkn(_meth, _argf, _spec))


# array.array of every typecode, bytearray, memoryview -------------------------------------------

for _code in "bBhHiIlLqQfd":
    def _mka(code: str) -> Callable[[int, int], Built]:
        def make(r: int, n: int) -> Built:
            s = array.array(code, [(i % 5) + r for i in range(4)])
            rb = array.array(code, [0] * 4)
            return call("Allreduce", s, rb, MPI.MAX, bufs=[s, rb])
        return make

    case(f"allreduce_array_{_code}", nonblocking=False)(_mka(_code))


@case("allgather_array_i")
def _(r: int, n: int) -> Built:
    s, rb = array.array("i", [r, r + 1]), array.array("i", [0] * (2 * n))
    return call("Allgather", s, rb, bufs=[s, rb])


@case("bcast_bytearray")
def _(r: int, n: int) -> Built:
    b = bytearray(range(7)) if r == 0 else bytearray(7)
    return call("Bcast", b, bufs=[b])


@case("allgather_bytearray")
def _(r: int, n: int) -> Built:
    s, rb = bytearray([r] * 3), bytearray(3 * n)
    return call("Allgather", s, rb, bufs=[s, rb])


@case("allreduce_memoryview_cast")
def _(r: int, n: int) -> Built:
    s, rb = bytearray(np.arange(4, dtype=np.int32).tobytes()), bytearray(16)
    return call("Allreduce", memoryview(s).cast("i"), memoryview(rb).cast("i"), bufs=[s, rb])


# a buffer whose length is not a whole number of elements: with the count given, MPI reads only
# the count's elements (the tail is never seen); without it, mpi4py cannot infer the count

def _ints(vals: Any, tail: int = 2) -> bytearray:
    return bytearray(np.asarray(vals, dtype=np.int32).tobytes() + b"\x07" * tail)


@case("bcast_trailing_bytes_count")
def _(r: int, n: int) -> Built:
    b = _ints(x(3, 0)) if r == 0 else _ints(z(3))
    return call("Bcast", [b, 3, MPI.INT], bufs=[b])


@case("allreduce_trailing_bytes_count")
def _(r: int, n: int) -> Built:
    s, rb = _ints(x(4, r), 3), _ints(z(4), 1)
    return call("Allreduce", [s, 4, MPI.INT], [rb, 4, MPI.INT], bufs=[s, rb])


@case("allgather_trailing_bytes_count")
def _(r: int, n: int) -> Built:
    s, rb = _ints(x(2, r)), _ints(z(2 * n))
    return call("Allgather", [s, 2, MPI.INT], [rb, 2, MPI.INT], bufs=[s, rb])


@case("allgatherv_trailing_bytes_counts")
def _(r: int, n: int) -> Built:
    c = vcounts(n)
    s, rb = _ints(x(c[r], r)), _ints(z(sum(c)), 3)
    return call("Allgatherv", [s, c[r], MPI.INT], [rb, (c, None), MPI.INT], bufs=[s, rb])


@case("bcast_trailing_bytes_no_count")
def _(r: int, n: int) -> Built:
    b = _ints(x(3, 0)) if r == 0 else _ints(z(3))
    return call("Bcast", [b, MPI.INT], bufs=[b])


@case("bcast_memoryview_of_numpy")
def _(r: int, n: int) -> Built:
    b = x(4, r) if r == 0 else z(4)
    return call("Bcast", memoryview(b), bufs=[b])


@case("bcast_readonly_root")
def _(r: int, n: int) -> Built:
    b = x(9, 0) if r == 0 else z(9)
    if r == 0:
        b.flags.writeable = False
    return call("Bcast", b, bufs=[b])


@case("bcast_float_root")
def _(r: int, n: int) -> Built:
    b = x(3, r)
    return call("Bcast", b, root=float(n - 1), bufs=[b])


@case("reduce_float_root_numpy_int")
def _(r: int, n: int) -> Built:
    s, rb = x(3, r), z(3)
    return call("Reduce", s, rb, MPI.SUM, np.int32(n - 1), bufs=[s, rb])


# malformed: mpi4py's exception types --------------------------------------------------------------


def _bcast(spec: Callable[[int], Any], bufs: Callable[[Any], list[Any]] | None = None
           ) -> Callable[[int, int], Built]:
    def make(r: int, n: int) -> Built:
        s = spec(r)
        return call("Bcast", s, bufs=bufs(s) if bufs else [])
    return make


_ro = z(4)
_ro.flags.writeable = False
for _name, _mk2 in {
    "five_items": _bcast(lambda r: [z(4), 1, 0, D, 7]),
    "not_a_buffer": _bcast(lambda r: 5),
    "none_message": _bcast(lambda r: None),
    "unknown_typecode": _bcast(lambda r: [z(4), "zz"]),
    "datatype_not_a_type": _bcast(lambda r: [z(4), 1, 5]),
    "negative_count": _bcast(lambda r: [z(4), -1]),
    "float_count": _bcast(lambda r: [z(4), 1.5]),
    "count_with_null_buffer": _bcast(lambda r: [None, 1, I32]),
    "negative_displacement": _bcast(lambda r: [z(4), (1, -1), D]),
    "noncontiguous": _bcast(lambda r: z(8)[::2]),
    "datetime_inferred": _bcast(lambda r: np.zeros(2, "datetime64[s]")),
}.items():
    case(f"bcast_bad_{_name}", nonblocking=False)(_mk2)


@case("allreduce_readonly_recvbuf_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    b = z(4)
    b.flags.writeable = False
    return call("Allreduce", x(4, r), b, bufs=[b])


@case("bcast_root_string_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    b = z(3)
    return call("Bcast", b, "0", bufs=[b])


@case("bcast_root_out_of_range_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    b = z(3)
    return call("Bcast", b, n, bufs=[b])


@case("gather_root_negative_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(2, r), z(2 * n)
    return call("Gather", s, rb, -1, bufs=[s, rb])


@case("allreduce_datatypes_differ_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(3, r), z(3, np.int64)
    return call("Allreduce", s, rb, bufs=[s, rb])


@case("allreduce_long_vs_int64_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(3, r, np.int64), z(3, np.int64)
    return call("Allreduce", [s, MPI.LONG], [rb, MPI.INT64_T], bufs=[s, rb])


@case("allreduce_counts_differ_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(4, r), z(3)
    return call("Allreduce", s, rb, bufs=[s, rb])


@case("allreduce_op_not_an_op_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(3, r), z(3)
    return call("Allreduce", s, rb, 5, bufs=[s, rb])


@case("allreduce_op_undefined_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(3, r), z(3)
    return call("Allreduce", s, rb, MPI.BAND, bufs=[s, rb])


@case("allgatherv_counts_length_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(1, r), z(n + 1)
    return call("Allgatherv", s, [rb, [1] * (n + 1)], bufs=[s, rb])


@case("allgatherv_float_counts_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    s, rb = x(1, r), z(n)
    return call("Allgatherv", s, [rb, np.ones(n)], bufs=[s, rb])


# Open MPI does not check negative counts: plain mpi4py there writes outside the buffer (seen:
# the numpy array's own header overwritten); MPICH raises MPI.Exception (ERR_COUNT)
@case("allgatherv_negative_counts_bad", nonblocking=False, unchecked=ValueError)
def _(r: int, n: int) -> Built:
    s, rb = x(1, r), z(n)
    return call("Allgatherv", s, [rb, [-1] * n, [0] * n, D], bufs=[s, rb])


@case("allgatherv_list_is_counts_bad", nonblocking=False)
def _(r: int, n: int) -> Built:  # a list (not a tuple) in 2nd place is the counts: n + 1 items
    s, rb = x(1, r), z(n)
    return call("Allgatherv", s, [rb, [[1] * n, [0] * n] + [0] * (n - 1)], bufs=[s, rb])


@case("reduce_scatter_in_place_no_counts_bad", nonblocking=False)
def _(r: int, n: int) -> Built:
    rb = x(n, r)
    return call("Reduce_scatter", None, rb, bufs=[rb])


# ---- the check --------------------------------------------------------------------------------


def _bytes(b: Any) -> bytes:
    return bytes(memoryview(b).cast("B")) if not isinstance(b, np.ndarray) else b.tobytes()


def _run(target: Any, built: Built, nonblocking: bool) -> tuple[type[BaseException] | None, str]:
    method = ("I" + built.method) if nonblocking else built.method
    try:
        req = getattr(target, method)(*built.args, **built.kw)
        if nonblocking:
            req.Wait()
    except Exception as exc:
        return type(exc), f"{type(exc).__name__}: {exc}"
    return None, ""


def _stray(c: MPI.Comm, name: str) -> list[str]:
    st = MPI.Status()
    if c != MPI.COMM_NULL and c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
        return [f"a stray message waits on {name} (source {st.source}, tag {st.tag})"]
    return []


def check(c: Case, nonblocking: bool) -> None:
    problems: list[str] = []
    for cname, comm in comms().items():
        r, n = comm.Get_rank(), comm.Get_size()
        ref = c.make(r, n)
        if c.unchecked is not None and OPEN_MPI:
            want_exc, want_msg, want = c.unchecked, c.unchecked.__name__, []
        else:
            want_exc, want_msg = _run(comm, ref, nonblocking)
            want = [_bytes(b) for b in ref.bufs]
        for kind in ("native", "p2p"):
            # native hands the call to MPI as plain mpi4py does; where plain mpi4py is not run
            # (Open MPI corrupts memory on these erroneous calls), native runs checked
            b = backend("native-check" if kind == "native" and c.unchecked is not None
                        and OPEN_MPI else kind, cname)
            built = c.make(r, n)
            before = [_bytes(q) for q in built.bufs]
            got_exc, got_msg = _run(b, built, nonblocking)
            where = f"{kind} on {cname} (rank {r} of {n})"
            if want_exc is None:
                if got_exc is not None:
                    problems.append(f"{where}: raised {got_msg}; mpi4py accepts the call")
                elif [_bytes(q) for q in built.bufs] != want:
                    problems.append(f"{where}: buffers differ from mpi4py's")
            else:
                if got_exc is None:
                    problems.append(f"{where}: no exception; mpi4py raises {want_msg}")
                elif not issubclass(got_exc, want_exc):
                    problems.append(f"{where}: raised {got_msg}; mpi4py raises {want_msg}")
                if [_bytes(q) for q in built.bufs] != before:
                    problems.append(f"{where}: a refused call changed a buffer")
            comm.Barrier()
            problems += _stray(comm, f"{cname}")
            if kind == "p2p":
                problems += _stray(b._comm, f"p2p's private communicator on {cname}")
    everyone = WORLD.allgather(problems[:10])
    lines = [f"rank {q}: {m}" for q, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{c.name}{' (I-form)' if nonblocking else ''}:\n" + "\n".join(lines)


def _params() -> list[Any]:
    out = []
    for c in CASES:
        out.append(pytest.param(c, False, id=c.name))
        if c.nonblocking and (c.always_i or FULL):
            out.append(pytest.param(c, True, id=f"{c.name}-I"))
    return out


@pytest.mark.mpi
@pytest.mark.parametrize(("c", "nonblocking"), _params())
def test_conformance(c: Case, nonblocking: bool) -> None:
    """Same results and same exception types as plain mpi4py, on four communicators."""
    check(c, nonblocking)


# ---- a call refused on some ranks only never corrupts a later one -------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("tag_ub", [None, 16])
@pytest.mark.parametrize("alg", ["binomial", "scatter_ring_allgather", "pipeline"])
def test_refused_on_some_ranks_then_right(alg: str, tag_ub: int | None) -> None:
    """Every rank but the root refuses its Bcast arguments while the root's (eager, binomial)
    sends complete; later Bcasts on the same p2p backend are right (each call takes its tag
    before checking its arguments, so the ranks' tag counters stay equal), and the refused
    call's messages are drained: none stays queued.  ``tag_ub=16``: the later calls wrap the
    tags, so the refused calls' tags come round again."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs two ranks")
    b = backend("p2p", "world") if tag_ub is None else mpicoll.p2p(WORLD, tag_ub=tag_ub)
    problems = []
    for k in range(3):
        try:
            b.Bcast(np.arange(6, dtype=np.int32) + k if r == 0 else "refused",
                    algorithm="binomial")
        except TypeError:
            if r == 0:
                problems.append("the root's valid call raised")
        else:
            if r != 0:
                problems.append("the invalid buffer was accepted")
    WORLD.Barrier()
    for k in range(3 if tag_ub is None else 2 * tag_ub):
        y = np.arange(6, dtype=np.int32) * (k + 1) if r == 0 else np.full(6, -1, np.int32)
        b.Bcast(y, algorithm=alg)
        if not np.array_equal(y, np.arange(6) * (k + 1)):
            problems.append(f"later Bcast {k} gave {y}")
        if tag_ub is not None:  # no rank runs half a tag window ahead (see Engine._drain)
            WORLD.Barrier()
    WORLD.Barrier()
    b.Barrier()
    problems += _stray(b._comm, "p2p's private communicator")
    if tag_ub is not None:
        b.Free()
    everyone = WORLD.allgather(problems)
    lines = [f"rank {q}: {m}" for q, ps in enumerate(everyone) for m in ps]
    assert not lines, "\n".join(lines)


@pytest.mark.mpi
@pytest.mark.parametrize("alg", ["binomial", "scatter_allgather", "scatter_ring_allgather",
                                 "pipeline"])
def test_bcast_never_writes_the_root_buffer(alg: str) -> None:
    """A read-only root buffer (mpi4py accepts it) through every p2p bcast algorithm, at
    counts 0, 1, not divisible by P and beyond one segment; the root's bytes never change."""
    p, r = WORLD.size, WORLD.rank
    b = backend("p2p", "world")
    problems = []
    for count in (0, 1, 2 * p + 1, 70000):
        if registry.get("bcast", alg).why_not(p, count=count) is not None:
            continue
        want = np.arange(count, dtype=np.float64)
        buf = want.copy() if r == 0 else np.full(count, -1.0)
        if r == 0:
            buf.flags.writeable = False
        b.Bcast(buf, algorithm=alg)
        if not np.array_equal(buf, want):
            problems.append(f"count {count}: got {buf[:8]}")
    everyone = WORLD.allgather(problems)
    lines = [f"rank {q}: {m}" for q, ps in enumerate(everyone) for m in ps]
    assert not lines, "\n".join(lines)


# ---- errors that point somewhere ------------------------------------------------------------


def _mismatch(call: Callable[[Any], Any], b: Any) -> str:
    try:
        call(b)
    except mpicoll.MismatchError as exc:
        return str(exc)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no exception"


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_mismatch_names_values_and_reasons(kind: str) -> None:
    """Checked mode names values, not codes (``float64 on rank 0, float32 on ranks 1-2``,
    ``MPI.MAX vs MPI.SUM``), compares the datatypes' signatures (MPI.LONG vs MPI.INT64_T, both
    int64 in numpy), and the ranks told that rank 0 refused its arguments get its reason."""
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("needs two ranks")
    b = getattr(mpicoll, kind)(WORLD, check=True)
    problems = []
    rest = "rank 1" if p == 2 else f"ranks 1-{p - 1}"
    dt = np.float64 if r == 0 else np.float32
    msg = _mismatch(lambda c: c.Allreduce(np.ones(3, dt), np.zeros(3, dt)), b)
    if f"float64 on rank 0, float32 on {rest}" not in msg:
        problems.append(f"dtype: {msg}")
    op = MPI.MAX if r == 0 else MPI.SUM
    msg = _mismatch(lambda c: c.Allreduce(np.ones(3), np.zeros(3), op), b)
    if "MPI.MAX on rank 0" not in msg or "MPI.MAX vs MPI.SUM" not in msg:
        problems.append(f"op: {msg}")
    t = MPI.LONG if r == 0 else MPI.INT64_T
    a = np.ones(3, np.int64)
    msg = _mismatch(lambda c: c.Bcast([a, t]), b)
    if "signature" not in msg:
        problems.append(f"signature: {msg}")
    ro = np.zeros(3)
    ro.flags.writeable = r != 0
    msg = _mismatch(lambda c: c.Allreduce(np.ones(3), ro), b)
    if r != 0 and ("refused on rank(s) [0]" not in msg or "read-only" not in msg):
        problems.append(f"reason: {msg}")
    b.Free()
    everyone = WORLD.allgather(problems)
    lines = [f"rank {q}: {m}" for q, ps in enumerate(everyone) for m in ps]
    assert not lines, "\n".join(lines)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_not_provided_says_what_to_call(kind: str) -> None:
    """A method of mpi4py's communicators that mpicoll lacks raises NotImplementedError naming
    ``comm.<method>`` on the mpi4py communicator; hasattr stays False; typos stay
    AttributeError."""
    b = backend(kind, "world")
    for name in ("Neighbor_allgather", "Send", "Neighbor_alltoall"):
        assert not hasattr(b, name)
        with pytest.raises(NotImplementedError, match=f"comm.{name} on the mpi4py"):
            getattr(b, name)
    with pytest.raises(AttributeError) as info:
        b.Allreduse  # noqa: B018
    assert not isinstance(info.value, NotImplementedError)
