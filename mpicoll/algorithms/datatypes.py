"""Derived MPI datatypes in the schedule language: one element is one instance of the type.

A buffer of a derived datatype (``MPI.DOUBLE.Create_vector(...)``, ``Create_resized``, a
struct, ...) has the same internal form as a predefined one: a 1-D numpy view of ``count``
elements.  Its numpy dtype is ``np.dtype((np.void, extent))`` and element 0 starts at the
buffer's origin (the address MPI is handed), so a slice ``buf[i:j]`` is the address arithmetic
MPI itself does (element i starts ``i * extent`` bytes from the origin; the lower bound is
inside the typemap, and MPI applies it).  numpy never reads or writes those bytes: messages
carry the MPI datatype (``[view, count, datatype]``), local copies go through
``datatype.Pack``/``Unpack`` (the holes of the typemap stay untouched), reductions through
``op.Reduce_local`` on the datatype, and bytes on the wire are ``count * datatype.Get_size()``.

A view may run past the end of the memory it was made from (a resized type whose extent is
larger than its true extent ends inside the last element's extent); only the bytes of the
typemap are ever touched, and :func:`check_span` is what keeps those inside the buffer.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI

__all__ = [
    "Extents", "PerPeer", "TypedView", "check_span", "datatype_of_view", "extents", "is_derived",
    "same_layout", "signature_unit", "type_signature", "typed_copy", "typed_scratch",
    "typed_view",
]


def is_derived(datatype: MPI.Datatype) -> bool:
    """True for a derived (user-built) datatype, False for a predefined one or a duplicate of
    one (``MPI_Type_dup``, which is what :func:`mpi4py.util.dtlib.from_numpy_dtype` returns):
    a duplicate has its original's typemap, so it takes the predefined path (numpy views of
    the matching dtype)."""
    while not datatype.is_predefined:
        if datatype.combiner != MPI.COMBINER_DUP:
            return True
        base = datatype.Get_contents()[-1][0]
        if not base.is_predefined:
            base.Free()  # MPI_Type_get_contents returns a new handle of a derived type
            return True
        datatype = base
    return False


class Extents(NamedTuple):
    """The byte geometry of a datatype: ``size`` (bytes of data, what a message carries),
    ``lb``/``extent`` (the stride between consecutive elements) and ``true_lb``/``true_extent``
    (the bytes the typemap actually touches, relative to an element's origin)."""

    size: int
    lb: int
    extent: int
    true_lb: int
    true_extent: int

    def span(self, count: int) -> tuple[int, int]:
        """Bytes ``[lo, hi)`` from element 0's origin that ``count`` elements touch ((0, 0)
        for none)."""
        if count <= 0 or self.size == 0:
            return (0, 0)
        lo = self.true_lb
        return (lo, (count - 1) * self.extent + lo + self.true_extent)


def extents(datatype: MPI.Datatype) -> Extents:
    """:class:`Extents` of ``datatype``."""
    lb, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    return Extents(datatype.Get_size(), lb, extent, true_lb, true_extent)


def check_span(datatype: MPI.Datatype, origin: int, count: int, nbytes: int, what: str,
               detail: str = "") -> None:
    """Raise ValueError unless ``count`` elements of ``datatype`` from byte ``origin`` of a
    buffer of ``nbytes`` bytes stay inside it (mpi4py does not check this for a derived
    datatype with an explicit count: MPI would read or write out of bounds)."""
    lo, hi = extents(datatype).span(count)
    if hi > lo and (origin + lo < 0 or origin + hi > nbytes):
        raise ValueError(
            f"{what}: {count} elements of datatype {datatype.Get_name() or 'derived'}"
            f"{detail} touch bytes [{origin + lo}, {origin + hi}) of the buffer, which has "
            f"{nbytes} bytes"
        )


def same_layout(a: MPI.Datatype, b: MPI.Datatype) -> bool:
    """True if two datatypes touch the same bytes in the same order (same extents and the
    same byte offsets in pack order), e.g. two separately built vectors of the same shape:
    then either moves the other's data exactly.  Found by packing, with each, a buffer whose
    bytes spell their own offsets (one pass per offset byte)."""
    if a == b:
        return True
    ea, eb = extents(a), extents(b)
    if ea != eb:
        return False
    lo, hi = ea.span(1)
    offsets = np.arange(hi - lo, dtype=np.int64)
    shift = 0
    while True:
        raw = ((offsets >> shift) & 0xFF).astype(np.uint8)
        one = typed_view(raw, -lo, 1, max(ea.extent, 1))
        packed = [np.empty(t.Pack_size(1, MPI.COMM_SELF), np.uint8) for t in (a, b)]
        ends = [t.Pack(one, out, 0, MPI.COMM_SELF) for t, out in zip((a, b), packed, strict=True)]
        if ends[0] != ends[1] or not np.array_equal(packed[0][: ends[0]], packed[1][: ends[1]]):
            return False
        shift += 8
        if (hi - lo) >> shift == 0:
            return True


class _Interface:
    """Holds an ``__array_interface__`` (and keeps the memory it points into alive)."""

    def __init__(self, interface: dict[str, Any], base: Any) -> None:
        self.__array_interface__ = interface
        self.base = base


def typed_view(raw: np.ndarray, origin: int, count: int, extent: int) -> np.ndarray:
    """``count`` elements of ``extent`` bytes (dtype ``np.dtype((np.void, extent))``) whose
    element 0 starts at byte ``origin`` of the 1-D uint8 array ``raw``.

    The view may end past ``raw``'s end (see the module docstring); it is writable if ``raw``
    is."""
    dt = np.dtype((np.void, extent))
    if origin >= 0 and origin + count * extent <= raw.size:
        return raw[origin : origin + count * extent].view(dt)
    interface = {
        "version": 3, "shape": (count,), "typestr": dt.str, "strides": None,
        "data": (raw.ctypes.data + origin, not raw.flags.writeable),
    }
    return np.asarray(_Interface(interface, raw))


def typed_scratch(count: int, datatype: MPI.Datatype) -> np.ndarray:
    """A new, uninitialised buffer of ``count`` elements of a derived ``datatype``: an
    allocation of the true extent of ``count`` elements, with element 0's origin placed so
    that the typemap lands inside it (a negative true lower bound included)."""
    ext = extents(datatype)
    lo, hi = ext.span(count)
    offset = max(0, -lo)
    raw = np.empty(offset + max(hi, count * ext.extent, 0), np.uint8)
    return typed_view(raw, offset, count, ext.extent)


class TypedView(np.ndarray):
    """A view that carries its own MPI datatype (``.datatype``), kept by slicing: the blocks
    of ``Alltoallw``, where every peer's block has a datatype of its own.  Messages of it carry
    that datatype and :meth:`~mpicoll.algorithms.schedule.Context.copy` packs and unpacks it
    with its own (so a copy between two blocks of different datatypes with the same type
    signature is right)."""

    datatype: MPI.Datatype

    @classmethod
    def of(cls, view: np.ndarray, datatype: MPI.Datatype) -> TypedView:
        out = view.view(cls)
        out.datatype = datatype
        return out

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None:
            self.datatype = getattr(obj, "datatype", None)  # type: ignore[assignment]


def datatype_of_view(buf: Any, default: MPI.Datatype) -> MPI.Datatype:
    """The datatype of a :class:`TypedView`, else ``default`` (the call's)."""
    dt = getattr(buf, "datatype", None)
    return default if dt is None else dt


class PerPeer(tuple):
    """One block per peer rank (:class:`TypedView` each), standing for a buffer whose blocks
    cannot be slices of one view (``Alltoallw``: a datatype and a byte displacement per peer).
    The all-to-all schedules take block ``i`` of it as ``buf[i]`` (see
    :func:`mpicoll.algorithms.schedule.block`)."""

    __slots__ = ()


def typed_copy(src: np.ndarray, dst: np.ndarray, datatype: MPI.Datatype) -> None:
    """``dst[:] = src`` by type signature: ``src``'s elements are packed with its datatype
    (``datatype.Pack`` into a byte buffer) and unpacked into ``dst`` with its own, so the
    holes of ``dst`` stay untouched, overlapping ``src``/``dst`` are safe, and the two may be
    different datatypes of the same signature (a :class:`TypedView` carries its own; a plain
    view is of ``datatype``, the call's).

    What does not fit is dropped, as MPICH's local copy of a collective drops it (a root's
    own block of a Scatter whose recvcount is smaller than its sendcount): ``dst`` gets the
    elements of its type that the packed bytes fill, in pack order, the last one partly
    where the bytes end inside it, as MPI fills a receive of a shorter message (a datatype
    of size 0 moves nothing); the rest of ``dst`` stays as it was."""
    n = int(src.size)
    if not n or not dst.size:
        return
    stype, rtype = datatype_of_view(src, datatype), datatype_of_view(dst, datatype)
    packed = np.empty(stype.Pack_size(n, MPI.COMM_SELF), np.uint8)
    # mpi4py's Pack/Unpack take len(buffer) // extent elements: exactly n (m) of these views
    end = stype.Pack(np.asarray(src), packed, 0, MPI.COMM_SELF)
    size = int(rtype.Get_size())
    m = n if rtype is stype and dst.size == n else (
        min(int(dst.size), end // size) if size else 0)
    out = np.asarray(dst)
    if m:
        rtype.Unpack(packed[: m * size], 0, out[:m], MPI.COMM_SELF)
    part = end - m * size
    if 0 < part < size and m < dst.size:  # a partial element: its first bytes, as MPI
        mine = np.empty(rtype.Pack_size(1, MPI.COMM_SELF), np.uint8)
        k = rtype.Pack(out[m : m + 1], mine, 0, MPI.COMM_SELF)
        mine[:part] = packed[end - part : end]
        rtype.Unpack(mine[:k], 0, out[m : m + 1], MPI.COMM_SELF)


def type_signature(datatype: MPI.Datatype) -> list[tuple[str, int]]:
    """The type signature of one element of ``datatype``: its basic types in order, as
    (name, repeat) runs (displacements, holes and resizing do not count: MPI matches
    signatures, not layouts).  ``DARRAY`` types count as their bytes."""
    out: list[tuple[str, int]] = []

    def add(name: str, n: int) -> None:
        if n <= 0:
            return
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + n)
        else:
            out.append((name, n))

    def walk(dt: MPI.Datatype, reps: int) -> None:
        if dt.is_predefined:
            add(dt.Get_name() or str(dt.Get_size()), reps)
            return
        base, combiner, params = dt.decode()
        try:
            if combiner == "STRUCT":
                one = _sub(params["datatypes"], params["blocklengths"])
                for _ in range(min(reps, 64)):  # repeated structs: a bounded prefix
                    for name, k in one:
                        add(name, k)
                if reps > 64:
                    add("x", reps)
                return
            n: int | None = {"DUP": 1, "RESIZED": 1,
                             "CONTIGUOUS": params.get("count", 1)}.get(combiner)
            if n is None and combiner in ("VECTOR", "HVECTOR"):
                n = params["count"] * params["blocklength"]
            elif n is None and combiner in ("INDEXED", "HINDEXED"):
                n = sum(params["blocklengths"])
            elif n is None and combiner in ("INDEXED_BLOCK", "HINDEXED_BLOCK"):
                n = params["blocklength"] * len(params["displacements"])
            elif n is None and combiner == "SUBARRAY":
                n = int(np.prod(params["subsizes"]))
            if n is None:
                add(f"{dt.Get_size()} bytes", reps)
            else:
                walk(base, reps * int(n))
        finally:
            for b in ([base] if isinstance(base, MPI.Datatype) else list(base)):
                if not b.is_predefined:
                    b.Free()

    def _sub(types: Sequence[MPI.Datatype], counts: Sequence[int]) -> list[tuple[str, int]]:
        saved = list(out)
        out.clear()
        for t, c in zip(types, counts, strict=True):
            walk(t, int(c))
        one = list(out)
        out[:] = saved
        return one

    walk(datatype, 1)
    return out


def signature_unit(datatype: MPI.Datatype) -> tuple[int, int]:
    """``(code, k)``: one element of ``datatype`` is ``k`` copies of the signature named by
    ``code`` (a CRC of it), its shortest repeating unit: ``k`` basic elements of one basic type
    for a homogeneous signature (a vector of 2 int64 is ``(INT64_T, 2)``), else the whole
    element's signature and ``k = 1``.  ``count`` elements of two datatypes have the same type
    signature when their codes agree and ``count * k`` does (what MPI matches: checked mode
    compares these).  Remembered by handle for predefined datatypes."""
    if datatype.is_predefined:
        found = _PREDEFINED_UNITS.get(datatype.handle)
        if found is None:
            found = _PREDEFINED_UNITS[datatype.handle] = _unit(type_signature(datatype))
        return found
    return _unit(type_signature(datatype))


#: predefined datatype handle -> :func:`signature_unit`
_PREDEFINED_UNITS: dict[int, tuple[int, int]] = {}


def _unit(runs: Sequence[tuple[str, int]]) -> tuple[int, int]:
    if len(runs) == 1:
        return zlib.crc32(runs[0][0].encode()), int(runs[0][1])
    if not runs:
        return 0, 0
    return zlib.crc32(repr(list(runs)).encode()), 1
