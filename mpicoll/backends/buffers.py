"""Turn mpi4py buffer specs into numpy views, once, before any message is sent.

Accepted specs are mpi4py's (see ``mpi4py.MPI.Comm`` docs):

* ``arr``: any contiguous object exposing the buffer protocol (numpy array, bytearray, ...);
  the MPI datatype is inferred from its format, as mpi4py does;
* ``[arr, datatype]``, ``[arr, count]``, ``[arr, count, datatype]``,
  ``[arr, (count, displ), datatype]``;
* vector specs (the ``v`` collectives): ``[arr, counts]``, ``[arr, counts, datatype]``,
  ``[arr, (counts, displs)]``, ``[arr, (counts, displs), datatype]``,
  ``[arr, counts, displs, datatype]``; displacements default to the running sum of counts;
* ``MPI.IN_PLACE`` where the collective allows it.

Datatypes are predefined MPI types, including the pair types of MAXLOC/MINLOC; the numpy
dtype of each comes from :func:`mpi4py.util.dtlib.to_numpy_dtype`, and the MPI type of a plain
array from its typecode through ``MPI.Datatype.fromcode``, as dtlib maps predefined types
(``dtlib.from_numpy_dtype`` itself returns a new duplicate type to be freed).  A derived
datatype (positive extent) gives a view of ``count`` elements of ``np.dtype((np.void,
extent))`` from the buffer's origin plus ``displacement * extent`` bytes (see
:mod:`mpicoll.algorithms.datatypes`); the bytes its typemap touches must lie inside the buffer
(ValueError), which mpi4py itself does not check.  Non-contiguous arrays raise ``ValueError``
(decision: no silent copy, because a copy of a receive buffer would silently drop the result);
read-only arrays raise ``ValueError`` where the buffer is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from ..algorithms.datatypes import (
    PerPeer,
    TypedView,
    check_span,
    extents,
    is_derived,
    same_layout,
    typed_view,
)

__all__ = [
    "Buf", "VBuf", "WBuf", "check_counts", "datatype_of", "int_list", "is_in_place", "nbytes",
    "parse", "parse_v", "parse_w", "same_type",
]


def is_in_place(spec: Any) -> bool:
    """True if ``spec`` is ``MPI.IN_PLACE``."""
    return spec is MPI.IN_PLACE or isinstance(spec, MPI.InPlaceType)


@dataclass
class Buf:
    """A parsed buffer: ``array`` is a 1-D numpy view of exactly ``count`` elements."""

    array: np.ndarray
    datatype: MPI.Datatype

    @property
    def count(self) -> int:
        return int(self.array.size)


@dataclass
class VBuf:
    """A parsed vector buffer: the whole 1-D view plus one (count, displacement) per rank."""

    array: np.ndarray
    datatype: MPI.Datatype
    counts: list[int]
    displs: list[int]

    def block(self, i: int) -> np.ndarray:
        """Rank ``i``'s block, a view of ``counts[i]`` elements at ``displs[i]``."""
        return self.array[self.displs[i] : self.displs[i] + self.counts[i]]


def datatype_of(dtype: np.dtype, what: str = "") -> MPI.Datatype:
    """The predefined MPI datatype mpi4py itself uses for a numpy dtype (TypeError if none).

    datetime64 and timedelta64 arrays are refused (TypeError) on both backends: numpy exports
    no buffer for them, so mpi4py (the native backend) cannot send them; pass
    ``[arr, MPI.INT64_T]`` or ``arr.view(np.int64)`` to move their 64-bit values.
    ``what``: the argument's name, for the message."""
    where = f"{what}: " if what else ""
    if dtype.kind in "mM":
        raise TypeError(
            f"{where}numpy {dtype} arrays are not supported (mpi4py cannot take a buffer of them); "
            f"pass [array, MPI.INT64_T] or array.view(np.int64)"
        )
    dt = None
    if not dtype.fields:
        try:  # the predefined type of a typecode, as mpi4py.util.dtlib maps it
            dt = MPI.Datatype.fromcode(dtype.char)
        except ValueError:
            dt = None
    if dt is None:
        raise TypeError(
            f"{where}no predefined MPI datatype for numpy dtype {dtype}; pass [array, datatype]"
        )
    return dt


def _np_dtype(datatype: MPI.Datatype) -> np.dtype:
    if not isinstance(datatype, MPI.Datatype) or datatype == MPI.DATATYPE_NULL:
        raise TypeError(f"expected an mpi4py MPI.Datatype, got {datatype!r}")
    try:
        return np.dtype(dtlib.to_numpy_dtype(datatype))
    except Exception as exc:  # dtlib raises ValueError/TypeError for types it cannot map
        raise TypeError(f"MPI datatype {datatype.Get_name() or datatype!r} has no numpy "
                        f"equivalent: {exc}") from exc


def _not_special(spec: Any, what: str) -> None:
    """Refuse ``MPI.IN_PLACE`` / ``MPI.BOTTOM`` where a real buffer is needed (mpi4py exposes
    both as zero-length buffers, which would otherwise pass as an empty array)."""
    if is_in_place(spec):
        raise ValueError(f"{what}: MPI.IN_PLACE is not allowed here (MPI allows it only as "
                         "the sendbuf of reductions, Allgather(v), Alltoall(v) and the root's "
                         "Gather(v), or the root's recvbuf of Scatter(v))")
    if spec is MPI.BOTTOM or isinstance(spec, MPI.BottomType):
        raise TypeError(f"{what}: MPI.BOTTOM (absolute addresses) is not supported; "
                        "pass an array")


def _as_array(obj: Any, what: str, writable: bool) -> np.ndarray:
    _not_special(obj, what)
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except TypeError:
            raise TypeError(
                f"{what}: expected a buffer (numpy array, bytearray, ...), got {type(obj).__name__}"
            ) from None
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise ValueError(
            f"{what}: array is not contiguous; MPI needs a contiguous buffer "
            "(pass np.ascontiguousarray(a) for input, or a contiguous output array)"
        )
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what}: array is read-only but this buffer is written")
    return arr


def _flat(arr: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """1-D view of ``arr``'s memory as ``dtype`` elements (no copy)."""
    if arr.dtype == dtype:
        return arr.reshape(-1, order="A")
    raw = arr.reshape(-1, order="A").view(np.uint8)
    if dtype.itemsize == 0 or raw.size % dtype.itemsize:
        raise ValueError(
            f"{what}: {raw.size} bytes is not a whole number of {dtype} elements "
            f"({dtype.itemsize} bytes each)"
        )
    return raw.view(dtype)


def _split_spec(spec: Any) -> tuple[Any, list[Any]]:
    if isinstance(spec, (list, tuple)) and spec and not isinstance(spec[0], (int, np.integer)):
        return spec[0], list(spec[1:])
    return spec, []


def _count(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what}: count must be an int, got {x!r}")
    if x < 0:
        raise ValueError(f"{what}: count must be >= 0, got {x}")
    return int(x)


def parse(spec: Any, what: str, *, writable: bool = False, blocks: int = 1) -> Buf:
    """Parse a single-block spec into a :class:`Buf`.

    Args:
        spec: the mpi4py buffer spec (not ``MPI.IN_PLACE``: callers handle that).
        what: the argument's name, for error messages (``"sendbuf"``, ``"recvbuf"``).
        writable: the buffer is written by the call.
        blocks: the buffer holds one block per rank (Scatter's send buffer, Gather's,
            Allgather's and Alltoall's receive buffers, ...): an explicit ``count`` in the spec
            is then one block's, as in mpi4py, and the view holds ``blocks * count`` elements.

    Raises:
        TypeError: not a buffer, an unknown datatype, a count that is not an int.
        ValueError: non-contiguous, read-only where written, a count beyond the buffer.
    """
    if spec is None:
        raise TypeError(f"{what}: a buffer is required here, got None")
    obj, rest = _split_spec(spec)
    arr = _as_array(obj, what, writable)
    datatype: MPI.Datatype | None = None
    count: int | None = None
    displ = 0
    if rest and isinstance(rest[-1], MPI.Datatype):
        datatype = rest.pop()
    if len(rest) > 1:
        raise TypeError(f"{what}: unrecognised buffer spec {spec!r}")
    if rest:
        c = rest[0]
        if isinstance(c, (list, tuple)):
            if len(c) != 2:
                raise TypeError(f"{what}: expected (count, displacement), got {c!r}")
            count, displ = _count(c[0], what), _count(c[1], what)
        elif c is not None:
            count = _count(c, what)
    if datatype is not None and is_derived(datatype):
        return _parse_derived(arr, datatype, count, displ, blocks, what)
    if datatype is None:
        datatype = datatype_of(arr.dtype, what)
        dtype = arr.dtype
    else:
        dtype = _np_dtype(datatype)
    flat = _flat(arr, dtype, what)
    per_block = ""
    if count is None:
        count = flat.size - displ
    elif blocks != 1:
        per_block = f" per block x {blocks} blocks (an explicit count is one rank's block)"
        count *= blocks
    if displ + count > flat.size:
        shown = count // blocks if per_block else count
        raise ValueError(
            f"{what}: count {shown}{per_block} at displacement {displ} needs "
            f"{displ + count} elements, buffer has {flat.size}"
        )
    return Buf(flat[displ : displ + count], datatype)


def _raw(arr: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array, as a 1-D uint8 view (no copy)."""
    return arr.reshape(-1, order="A").view(np.uint8)


def _derived_extent(datatype: MPI.Datatype, what: str) -> int:
    """The extent of a derived datatype, refused (TypeError) where the internal form cannot
    hold it: a null or non-positive extent (elements would not be in increasing address
    order)."""
    if datatype == MPI.DATATYPE_NULL:
        raise TypeError(f"{what}: MPI.DATATYPE_NULL is not a datatype")
    extent = datatype.Get_extent()[1]
    if extent <= 0:
        raise TypeError(
            f"{what}: derived datatype {datatype.Get_name() or ''} has extent {extent}; mpicoll "
            "needs a positive extent (Create_resized it)"
        )
    return int(extent)


def _parse_derived(arr: np.ndarray, datatype: MPI.Datatype, count: int | None, displ: int,
                   blocks: int, what: str) -> Buf:
    """:func:`parse` of a spec whose datatype is derived: ``count`` elements of dtype
    ``np.dtype((np.void, extent))`` whose element 0 starts ``displ * extent`` bytes into the
    buffer (see :mod:`mpicoll.algorithms.datatypes`).  Without a count, as mpi4py: the buffer's
    bytes over the extent (ValueError unless whole)."""
    extent = _derived_extent(datatype, what)
    raw = _raw(arr)
    per_block = ""
    if count is None:
        if raw.size % extent:
            raise ValueError(
                f"{what}: buffer length {raw.size} is not a multiple of the datatype's extent "
                f"{extent}; pass [buffer, count, datatype]"
            )
        count = max(0, raw.size // extent - displ)
    elif blocks != 1:
        per_block = f" ({count} per block x {blocks} blocks)"
        count *= blocks
    check_span(datatype, displ * extent, count, raw.size, what,
               f" (extent {extent}) at displacement {displ}{per_block}")
    return Buf(typed_view(raw, displ * extent, count, extent), datatype)


def int_list(x: Any, what: str, name: str, size: int) -> list[int]:
    try:
        vals = list(x)
    except TypeError:
        raise TypeError(f"{what}: {name} must be a sequence of {size} ints, got {x!r}") from None
    if len(vals) != size:
        raise ValueError(f"{what}: {name} has {len(vals)} entries, expected one per rank ({size})")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what}: {name} must hold ints, got {v!r}")
        if v < 0:
            raise ValueError(f"{what}: {name} must be >= 0, got {list(vals)}")
        out.append(int(v))
    return out


def parse_v(spec: Any, what: str, size: int, *, writable: bool = False) -> VBuf:
    """Parse a vector spec (``[arr, (counts, displs), datatype]`` and its short forms).

    Args:
        spec: the mpi4py vector buffer spec.
        what: the argument's name, for error messages.
        size: the number of ranks (length of counts and displacements).
        writable: the buffer is written by the call.

    Raises:
        TypeError / ValueError: as :func:`parse`, and counts or displacements whose length is not
        ``size``, negative, or pointing outside the buffer.
    """
    if spec is None:
        raise TypeError(f"{what}: a buffer is required here, got None")
    obj, rest = _split_spec(spec)
    arr = _as_array(obj, what, writable)
    datatype: MPI.Datatype | None = None
    if rest and isinstance(rest[-1], MPI.Datatype):
        datatype = rest.pop()
    counts_spec: Any = None
    displs_spec: Any = None
    if len(rest) == 1:
        c = rest[0]
        if isinstance(c, tuple) and len(c) == 2 and not isinstance(c[0], (int, np.integer)):
            counts_spec, displs_spec = c
        else:
            counts_spec = c
    elif len(rest) == 2:
        counts_spec, displs_spec = rest
    elif rest:
        raise TypeError(f"{what}: unrecognised vector buffer spec")
    derived = datatype is not None and is_derived(datatype)
    if derived:
        assert datatype is not None
        extent = _derived_extent(datatype, what)
        raw = _raw(arr)
        flat = typed_view(raw, 0, raw.size // extent, extent)
    else:
        dtype = arr.dtype if datatype is None else _np_dtype(datatype)
        if datatype is None:
            datatype = datatype_of(arr.dtype, what)
        flat = _flat(arr, dtype, what)
    if counts_spec is None:
        if derived and raw.size % extent:
            raise ValueError(
                f"{what}: buffer length {raw.size} is not a multiple of the datatype's extent "
                f"{extent}; pass the counts"
            )
        if flat.size % size:
            raise ValueError(
                f"{what}: no counts given and {flat.size} elements do not split evenly over "
                f"{size} ranks"
            )
        counts = [flat.size // size] * size
    elif isinstance(counts_spec, (int, np.integer)) and not isinstance(counts_spec, bool):
        counts = [_count(counts_spec, what)] * size
    else:
        counts = int_list(counts_spec, what, "counts", size)
    if displs_spec is None:
        displs = np.concatenate(([0], np.cumsum(counts[:-1], dtype=np.int64))).tolist()
        displs = [int(d) for d in displs[:size]]
    else:
        displs = int_list(displs_spec, what, "displacements", size)
    if derived:  # blocks are checked against the typemap's bytes; the view spans them all
        assert datatype is not None
        for i, (c, d) in enumerate(zip(counts, displs, strict=True)):
            check_span(datatype, d * extent, c, raw.size, what,
                       f" (extent {extent}) of block {i} at displacement {d}")
        end = max((d + c for c, d in zip(counts, displs, strict=True) if c), default=0)
        if end > flat.size:
            flat = typed_view(raw, 0, end, extent)
    for i, (c, d) in enumerate(zip(counts, displs, strict=True)):
        if d + c > flat.size:
            raise ValueError(
                f"{what}: block {i} (count {c} at displacement {d}) ends past the buffer's "
                f"{flat.size} elements"
            )
    if writable:  # MPI: no location of a receive buffer may be written twice
        blocks = enumerate(zip(counts, displs, strict=True))
        spans = sorted((d, d + c, i) for i, (c, d) in blocks if c)
        for (_, end, i), (start, _, j) in pairwise(spans):
            if start < end:
                raise ValueError(
                    f"{what}: blocks {i} and {j} overlap (block {j} starts at displacement "
                    f"{start}, inside block {i}, which ends at {end}); MPI forbids receiving "
                    "into one location twice"
                )
    return VBuf(flat, datatype, counts, displs)


@dataclass
class WBuf:
    """A parsed ``Alltoallw`` buffer: one block per rank, each ``counts[i]`` elements of its own
    ``datatypes[i]`` at byte ``displs[i]`` (a :class:`~mpicoll.algorithms.datatypes.TypedView`
    each, in ``blocks``)."""

    array: np.ndarray  # the whole buffer's bytes
    counts: list[int]
    displs: list[int]
    datatypes: list[MPI.Datatype]
    blocks: PerPeer

    def nbytes(self, i: int) -> int:
        """Bytes of data in block ``i`` (``counts[i] * datatypes[i].Get_size()``)."""
        return self.counts[i] * int(self.datatypes[i].Get_size())


def parse_w(spec: Any, what: str, size: int, *, writable: bool = False) -> WBuf:
    """Parse an ``Alltoallw`` spec, mpi4py's two forms: ``[buf, (counts, displs), datatypes]``
    and ``[buf, counts, displs, datatypes]`` (displacements in bytes, one datatype per rank:
    predefined or derived, committed).

    Raises:
        TypeError: not a buffer, not one of the two forms, a datatype that is not an
            ``MPI.Datatype`` (a single datatype for all is refused, as mpi4py refuses it).
        ValueError: counts, displacements or datatypes not one per rank, negative counts, a
            block whose typemap leaves the buffer.
    """
    if spec is None:
        raise TypeError(f"{what}: a buffer is required here, got None")
    obj, rest = _split_spec(spec)
    if len(rest) == 2 and isinstance(rest[0], (list, tuple)) and len(rest[0]) == 2:
        (counts_spec, displs_spec), types = rest
    elif len(rest) == 3:
        counts_spec, displs_spec, types = rest
    else:
        raise TypeError(f"{what}: expected [buffer, (counts, displacements), datatypes] or "
                        "[buffer, counts, displacements, datatypes] (Alltoallw)")
    arr = _as_array(obj, what, writable)
    raw = _raw(arr)
    counts = int_list(counts_spec, what, "counts", size)
    if displs_spec is None:
        raise TypeError(f"{what}: Alltoallw needs the displacements (in bytes)")
    try:
        displs = [int(d) for d in displs_spec]
    except TypeError:
        raise TypeError(f"{what}: displacements must be a sequence of ints") from None
    if len(displs) != size:
        raise ValueError(f"{what}: displacements has {len(displs)} entries, expected {size}")
    if isinstance(types, MPI.Datatype) or not isinstance(types, (list, tuple)):
        raise TypeError(f"{what}: Alltoallw needs a sequence of {size} datatypes, one per rank")
    if len(types) != size:
        raise ValueError(f"{what}: datatypes has {len(types)} entries, expected {size}")
    blocks = []
    for i, (c, d, t) in enumerate(zip(counts, displs, types, strict=True)):
        if not isinstance(t, MPI.Datatype) or t == MPI.DATATYPE_NULL:
            raise TypeError(f"{what}: datatypes[{i}] is not an MPI.Datatype: {t!r}")
        extent = _derived_extent(t, f"{what}: datatypes[{i}]") if c else max(1, t.extent)
        check_span(t, d, c, raw.size, what, f" (block {i} at byte {d})")
        blocks.append(TypedView.of(typed_view(raw, d, c, extent), t))
    # (blocks of a receive buffer may interleave, e.g. the columns of a transpose: whether
    # two of them write one byte twice is the user's to keep, as in MPI; not checked)
    return WBuf(raw, counts, displs, list(types), PerPeer(blocks))


def same_type(a: Buf | VBuf, b: Buf | VBuf, what: str) -> None:
    """Raise TypeError when send and receive element types differ (MPI needs them to match).

    With a derived datatype both sides must pass a derived datatype: the same, or one with
    the same layout (:func:`~mpicoll.algorithms.datatypes.same_layout`: two vectors built
    alike): the p2p schedules move whole elements between the two buffers with one datatype.
    (MPI also allows two layouts with the same type signature; mpicoll does not yet.)"""
    if is_derived(a.datatype) or is_derived(b.datatype):
        both = is_derived(a.datatype) and is_derived(b.datatype)
        if not (both and same_layout(a.datatype, b.datatype)):
            raise TypeError(
                f"{what}: send datatype {_type_name(a.datatype)} and receive datatype "
                f"{_type_name(b.datatype)} differ; with a derived datatype both sides must pass "
                "the same datatype (or one with the same layout)"
            )
        return
    if a.array.dtype != b.array.dtype:
        raise TypeError(
            f"{what}: send datatype {a.datatype.Get_name()} ({a.array.dtype}) and receive "
            f"datatype {b.datatype.Get_name()} ({b.array.dtype}) differ"
        )


def _type_name(datatype: MPI.Datatype) -> str:
    if not is_derived(datatype):
        return datatype.Get_name()
    ext = extents(datatype)
    return (datatype.Get_name() or "derived") + f" (size {ext.size}, extent {ext.extent})"


def nbytes(buf: Buf | VBuf, count: int | None = None) -> int:
    """Bytes of data in ``count`` elements of ``buf`` (default all of them): what messages
    carry, ``count * datatype.Get_size()`` (a derived type's holes are not sent)."""
    n = int(buf.array.size) if count is None else count
    if is_derived(buf.datatype):
        return n * int(buf.datatype.Get_size())
    return n * buf.array.dtype.itemsize


def check_counts(name: str, got: int, want: int, what: str) -> None:
    """Raise ValueError when a buffer holds a different number of elements than the call needs."""
    if got != want:
        raise ValueError(f"{name}: has {got} elements, {what} needs {want}")
