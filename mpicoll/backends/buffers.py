"""Turn mpi4py buffer specs into numpy views, once, before any message is sent.

The grammar is mpi4py's (``mpi4py.typing``: ``BufSpec``, ``BufSpecB``, ``BufSpecV``; the rules
of mpi4py 4.1's ``msgbuffer.pxi``), read the way mpi4py reads it:

* a message is a buffer (any object exposing the buffer protocol: numpy array, ``bytearray``,
  ``array.array``, ``memoryview``, ``bytes`` where only read) or a list/tuple of 2 to 4 items
  (``ValueError`` otherwise; anything else is a ``TypeError``);
* ``[buf, datatype]``, ``[buf, count]``, ``[buf, (count, displ)]``, ``[buf, count, datatype]``,
  ``[buf, (count, displ), datatype]``, ``[buf, count, displ, datatype]``; ``displ`` counts
  elements from the buffer's start, ``count`` and ``displ`` may be None (inferred: the rest of
  the buffer, split over the blocks of a block collective, whose explicit count is one block's);
* vector specs (the v-collectives): ``[buf, counts]``, ``[buf, counts, datatype]``,
  ``[buf, (counts, displs)]``, ``[buf, (counts, displs), datatype]`` (a tuple only: a list
  there is the counts), ``[buf, counts, displs, datatype]``; ``counts`` a sequence (a numpy
  array too), one int for every rank, or None (the buffer split over the ranks, the first
  ``n % p`` ranks one element more); ``displs`` a sequence, one int (a stride: rank i at
  ``i * stride``) or None (contiguous);
* a datatype is an ``MPI.Datatype`` or a typecode string (``'i'``, ``'d'``, ``'c'``, ``'b'``,
  ...; an unknown one is a ``KeyError``, as in mpi4py); without one it is inferred from the
  buffer's format (numpy dtype, ``array.array`` typecode, ``memoryview.format``) as mpi4py
  infers it;
* ``None`` (or ``MPI.BOTTOM``) as the buffer of a list spec is the null buffer: ``[None,
  MPI.INT]``, ``[None, (0, None), MPI.INT]`` are zero-length messages (a count above 0 there is
  a ``ValueError``); ``[MPI.BOTTOM, count, datatype]`` (and its vector forms) with a count
  above 0 takes a derived datatype of absolute addresses (``MPI.Get_address``), as MPI does:
  see :func:`_bottom` (a predefined datatype there, a buffer at address 0, is an
  :class:`MPIValueError`);
* ``None`` or ``MPI.IN_PLACE`` as a whole send argument is in place wherever mpi4py reads it so
  (see :func:`is_in_place`); where an argument is not significant (the non-root's sendbuf of
  Scatter, recvbuf of Gather and Reduce) the callers do not read it at all.

Errors are mpi4py's types: ``TypeError`` (not a buffer or list, a count that is not an int),
``ValueError`` (wrong number of items, negative count or displacement, a count that cannot be
inferred), ``KeyError`` (unknown typecode), ``BufferError`` (non-contiguous, read-only where
written, no buffer for the dtype).  :class:`MPIValueError`/:class:`MPITypeError` are both the
Python type and the ``MPI.Exception`` MPI raises through mpi4py for the same input (a root
outside [0, p), a negative count, an op MPI does not define for the datatype).

Check kinds (the legend is in :mod:`mpicoll.backends.args`; ``docs/errors.md`` lists them):
every error of the grammar above, negative counts (``MPI_ERR_COUNT``), ``MPI.DATATYPE_NULL``
(:func:`_null_type`), read-only or non-contiguous buffers, a displacement past a predefined
buffer, ``MPI.BOTTOM`` with a predefined datatype (``MPI_ERR_BUFFER``) are **(M)**: what plain
mpi4py (or MPI's argument check) raises on the same rank.  A count, a block or a derived
datatype's typemap that reaches outside the buffer (:func:`parse`, :func:`parse_v`,
:func:`parse_w`, :func:`widen`) is no refusal: one rank's own values, so the call goes on a
scratch of the declared size (:func:`_spill`: a receive keeps what fits and raises
``MPI_ERR_TRUNCATE`` at the end of the call; a send reads the memory MPI reads where the
array it slices holds it, else sends zeros and raises ``MPI_ERR_BUFFER`` at the end);
overlapping receive blocks of a v-spec go on a scratch too (:func:`_repack`), and
``MPI.BOTTOM`` with negative displacements is addressed as MPI addresses it; checked mode
refuses the spills on every rank (``Call.bounds``).  A derived datatype of extent <= 0 (it
was check **(L)**, a limit of the internal form on one rank's value) goes too: one block as
one element of a twin type (:func:`_parse_twin`, ``Alltoallw``'s :func:`_one_block`), a side
of p blocks (or a v-spec, or ``MPI.BOTTOM``) packed into a scratch of a positive-extent twin
(:func:`_parse_packed`, :func:`_parse_v_packed`, :func:`_packed`); checked mode refuses
receive blocks that share a location.  Nothing here compares a send side with a receive
side (:func:`same_type` only for reductions, as mpi4py).

The internal form: :class:`Buf` (a 1-D numpy view of exactly the message's elements and its MPI
datatype) and :class:`VBuf` (the whole view plus one count and displacement per rank).  Numpy
dtypes of MPI datatypes come from :func:`mpi4py.util.dtlib.to_numpy_dtype`.
"""

from __future__ import annotations

import weakref
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
    typed_scratch,
    typed_view,
)

__all__ = [
    "ARG_ERRORS", "Buf", "MPITypeError", "MPIValueError", "VBuf", "check_counts", "datatype_of",
    "int_list", "is_in_place", "is_in_place_constant", "nbytes", "parse", "parse_v",
    "parse_w", "same_type", "sent_view", "Spill", "WBuf", "widen",
]


#: the exception types a refused argument raises (mpi4py's, for the same spec)
ARG_ERRORS = (TypeError, ValueError, KeyError, BufferError, OverflowError)


class MPIValueError(ValueError, MPI.Exception):
    """A ``ValueError`` that is also the ``MPI.Exception`` (error class ``error_class``, e.g.
    ``MPI.ERR_ROOT``) plain mpi4py raises for the same call: ``except ValueError`` and
    ``except MPI.Exception`` both catch it."""

    def __init__(self, error_class: int, message: str) -> None:
        MPI.Exception.__init__(self, error_class)
        self.message = message

    def __str__(self) -> str:
        return self.message


class MPITypeError(TypeError, MPI.Exception):
    """A ``TypeError`` that is also the ``MPI.Exception`` plain mpi4py raises (see
    :class:`MPIValueError`)."""

    def __init__(self, error_class: int, message: str) -> None:
        MPI.Exception.__init__(self, error_class)
        self.message = message

    def __str__(self) -> str:
        return self.message


def is_in_place(spec: Any) -> bool:
    """True if ``spec`` means in place: ``MPI.IN_PLACE`` or ``None`` (mpi4py reads ``None`` as
    in place wherever it accepts ``MPI.IN_PLACE``: the sendbuf of the reductions, Allgather(v),
    Alltoall(v), the root's Gather(v) and the root's recvbuf of Scatter(v))."""
    return spec is None or spec is MPI.IN_PLACE or isinstance(spec, MPI.InPlaceType)


def is_in_place_constant(spec: Any) -> bool:
    """True if ``spec`` is ``MPI.IN_PLACE`` itself (not ``None``)."""
    return spec is MPI.IN_PLACE or isinstance(spec, MPI.InPlaceType)


def _is_bottom_constant(spec: Any) -> bool:
    """True if ``spec`` is ``MPI.BOTTOM`` itself (not ``None``)."""
    return spec is MPI.BOTTOM or isinstance(spec, MPI.BottomType)


def _is_bottom(spec: Any) -> bool:
    return spec is None or spec is MPI.BOTTOM or isinstance(spec, MPI.BottomType)


@dataclass
class Spill:
    """How a buffer whose spec reaches outside its memory (or, for a v-spec receive, whose
    blocks overlap) is run: the call works on a scratch (``Buf.array`` is a view of it) of the
    declared size, so the schedule has the shape the peers expect; ``copy_in`` (before the
    schedule: the user's bytes into the scratch) and ``copy_out`` (after it: the scratch's
    bytes that have a place in the user's memory back there) are ``(src, dst)`` pairs for
    ``ctx.copy`` (:class:`~mpicoll.algorithms.datatypes.TypedView` of bytes, or of the
    buffer's datatype: by type signature, holes untouched).  ``error_class`` (or None) is what
    the rank raises at the end of the call, with ``detail`` (see :func:`_spill`);
    ``user``: the user's own memory (for the aliasing check).  Not a check: the call goes."""

    copy_in: tuple[tuple[np.ndarray, np.ndarray], ...]
    copy_out: tuple[tuple[np.ndarray, np.ndarray], ...]
    error_class: int | None
    detail: str
    user: np.ndarray
    #: the check's own sentence (what checked mode refuses the call with)
    problem: str = ""

    def then(self, other: Spill | None) -> Spill:
        """This spill and ``other`` made on its scratch: copies in this one's first, copies
        out ``other``'s first; the first error."""
        if other is None:
            return self
        first = self if self.error_class is not None else other
        return Spill(self.copy_in + other.copy_in, other.copy_out + self.copy_out,
                     first.error_class, first.detail, self.user,
                     self.problem or other.problem)


@dataclass
class Buf:
    """A parsed buffer: ``array`` is a 1-D numpy view of exactly ``count`` elements.

    ``bottom``: for ``[MPI.BOTTOM, count, datatype]`` (absolute addresses) the user's
    datatype; ``datatype`` is then its shifted twin (see :func:`_bottom`).  ``spill``: see
    :class:`Spill` (``array`` is then a view of a scratch, or of memory past the buffer)."""

    array: np.ndarray
    datatype: MPI.Datatype
    bottom: MPI.Datatype | None = None
    spill: Spill | None = None
    #: the user's datatype of extent <= 0 whose ``count`` elements are this one element of
    #: ``datatype`` (its twin: see :func:`_parse_derived`), or None
    twin_of: MPI.Datatype | None = None

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
    bottom: MPI.Datatype | None = None
    spill: Spill | None = None

    def block(self, i: int) -> np.ndarray:
        """Rank ``i``'s block, a view of ``counts[i]`` elements at ``displs[i]``."""
        return self.array[self.displs[i] : self.displs[i] + self.counts[i]]


def datatype_of(dtype: np.dtype, what: str = "") -> MPI.Datatype:
    """The predefined MPI datatype mpi4py itself uses for a numpy dtype (its typecode through
    mpi4py's type table, as mpi4py maps a buffer's format).

    Raises:
        BufferError: datetime64/timedelta64 or structured dtypes (mpi4py takes no buffer of
            them, nor maps them); pass ``[arr, MPI.INT64_T]`` or ``arr.view(np.int64)``; a
            non-native byte order (``'>i4'`` here), which mpi4py refuses too.
    ``what``: the argument's name, for the message."""
    if dtype.isnative:
        dt = _BY_CHAR.get(dtype.char)
        if dt is not None:
            return dt
    where = f"{what}: " if what else ""
    if not dtype.isnative:  # as mpi4py's buffer request refuses it
        raise BufferError(f"{where}format string {dtype.str!r} with non-native byte order "
                          "(mpi4py takes no such buffer: pass arr.astype(arr.dtype."
                          "newbyteorder('='))")
    dt = None
    if dtype.kind not in "mMV" and not dtype.fields:
        try:  # the predefined type of a typecode, as mpi4py maps it
            dt = MPI.Datatype.fromcode(dtype.char)
        except ValueError:
            dt = None
    if dt is None:
        raise BufferError(
            f"{where}no predefined MPI datatype for numpy dtype {dtype} (mpi4py infers none "
            "for it); pass [array, datatype] (e.g. [array, MPI.INT64_T] for datetime64)"
        )
    _BY_CHAR[dtype.char] = dt
    return dt


#: :func:`datatype_of`'s answers, by the typecode of a native numpy dtype of neither kind
#: ``m``/``M``/``V`` nor fields (for those the typecode alone decides it; ``'l'`` and ``'q'``
#: stay apart, as mpi4py keeps them); predefined datatypes are never freed
_BY_CHAR: dict[str, MPI.Datatype] = {}
#: :func:`_np_dtype`'s answers for predefined datatypes, by handle (never freed, so a handle
#: never names another datatype; a derived datatype is mapped at every call)
_NP_OF_PREDEFINED: dict[int, np.dtype] = {}


def _datatype(spec: Any, what: str) -> MPI.Datatype:
    """An ``MPI.Datatype``, or the predefined one of a typecode string (``KeyError`` if none,
    as mpi4py)."""
    if isinstance(spec, MPI.Datatype):
        return spec
    try:
        return MPI.Datatype.fromcode(spec)
    except (ValueError, TypeError):
        raise KeyError(f"{what}: cannot map {spec!r} to MPI datatype") from None


def _null_type(dt: Any, what: str, inferred: bool) -> None:
    """``MPI.DATATYPE_NULL`` as a message's datatype: with the count to infer from a buffer,
    mpi4py's ``ValueError`` (``message: cannot infer count, datatype is null``); with a count
    (or a null buffer, whose count is 0), what MPI
    raises for it (``MPI_ERR_TYPE``, an :class:`MPITypeError`).  Check kind: mpi4py's and
    MPI's own local refusal, on the rank that passes it, before any message."""
    if isinstance(dt, MPI.Datatype) and dt == MPI.DATATYPE_NULL:
        if inferred:
            raise ValueError(f"{what}: message: cannot infer count, datatype is null "
                             "(MPI.DATATYPE_NULL)")
        raise MPITypeError(MPI.ERR_TYPE, f"{what}: invalid datatype: MPI.DATATYPE_NULL is "
                           "a null datatype (MPI refuses it)")


def _is_datatype(x: Any) -> bool:
    return isinstance(x, (MPI.Datatype, str))


def _np_dtype(datatype: MPI.Datatype) -> np.dtype:
    if not isinstance(datatype, MPI.Datatype):
        raise TypeError(f"expected an mpi4py MPI.Datatype, got {datatype!r}")
    predefined = datatype.is_predefined
    if predefined:
        out = _NP_OF_PREDEFINED.get(datatype.handle)
        if out is not None:
            return out
    _null_type(datatype, "datatype", False)
    try:
        out = np.dtype(dtlib.to_numpy_dtype(datatype))
    except Exception as exc:  # dtlib raises ValueError/TypeError for types it cannot map
        raise TypeError(f"MPI datatype {datatype.Get_name() or datatype!r} has no numpy "
                        f"equivalent: {exc}") from exc
    if predefined:
        _NP_OF_PREDEFINED[datatype.handle] = out
    return out


def _foreign_array(obj: Any, what: str) -> np.ndarray:
    """A buffer without the buffer protocol, as mpi4py 4 takes it after that protocol (the
    order of ``msgbuffer.pxi``'s ``asbuffer``): a DLPack producer (``__dlpack__``, e.g. a
    PyTorch CPU tensor or a JAX CPU array) in host memory becomes a numpy view of the same
    memory (``numpy.from_dlpack``: no copy; read-only if its producer says so).  A device
    buffer (DLPack on a GPU, or ``__cuda_array_interface__``) is a ``TypeError`` here,
    where mpi4py hands its address to a GPU-aware MPI: the p2p backend copies and reduces on
    the host, which cannot read device memory; the native backend passes it to MPI as
    mpi4py does.  Anything else is mpi4py's ``TypeError``."""
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TypeError(
                f"{what}: a DLPack buffer numpy cannot view in host memory ({exc}); the p2p "
                "backend does its local copies and reductions on the host: pass a host "
                "array, or use the native backend with a GPU-aware MPI") from None
    if hasattr(obj, "__cuda_array_interface__"):
        raise TypeError(
            f"{what}: a device buffer (__cuda_array_interface__, {type(obj).__name__}); the "
            "p2p backend does its local copies and reductions on the host: pass a host "
            "array, or use the native backend with a GPU-aware MPI")
    raise TypeError(
        f"{what}: message: expecting buffer or list/tuple (numpy array, bytearray, "
        f"array.array, memoryview, ...), got {type(obj).__name__}")


def _as_array(obj: Any, what: str, writable: bool) -> np.ndarray:
    if is_in_place_constant(obj):
        raise ValueError(f"{what}: MPI.IN_PLACE is not allowed here (MPI allows it only as "
                         "the sendbuf of reductions, Allgather(v), Alltoall(v) and the root's "
                         "Gather(v), or the root's recvbuf of Scatter(v))")
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except (TypeError, ValueError):
            arr = _foreign_array(obj, what)
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise BufferError(
            f"{what}: array is not contiguous; MPI needs a contiguous buffer "
            "(pass np.ascontiguousarray(a) for input, or a contiguous output array)"
        )
    if writable and not arr.flags.writeable:
        raise BufferError(f"{what}: array is read-only but this buffer is written")
    return arr


def _flat(arr: np.ndarray, dtype: np.dtype, what: str, exact: bool = True) -> np.ndarray:
    """1-D view of ``arr``'s memory as ``dtype`` elements (no copy).  ``exact=False`` (the
    call gives the count): trailing bytes short of one element are left out, as MPI, which
    reads only the count's elements, never sees them."""
    if arr.dtype == dtype:
        return arr.reshape(-1, order="A")
    raw = arr.reshape(-1, order="A").view(np.uint8)
    if not exact and dtype.itemsize:
        raw = raw[: raw.size - raw.size % dtype.itemsize]
    if dtype.itemsize == 0 or raw.size % dtype.itemsize:
        raise ValueError(
            f"{what}: message: cannot infer count, buffer length {raw.size} bytes is not a "
            f"multiple of datatype extent {dtype.itemsize} ({dtype})"
        )
    return raw.view(dtype)


def _index(x: Any, what: str, name: str = "count") -> int:
    """An int as mpi4py reads one (``operator.index``: numpy ints yes, floats no)."""
    if isinstance(x, bool):
        return int(x)
    try:
        return int(np.asarray(x).item()) if isinstance(x, np.ndarray) and x.ndim == 0 \
            else int(x.__index__())
    except (AttributeError, TypeError):
        raise TypeError(f"{what}: {name}: {type(x).__name__!r} object cannot be interpreted "
                        "as an integer") from None


def _unpack(spec: Any, what: str, vector: bool) -> tuple[Any, Any, Any, Any, bool]:
    """(buffer, count(s), displ(s), datatype, is_list) of a message, as mpi4py unpacks it."""
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        cnt = dsp = dt = None
        if n == 2:
            obj, cnt = spec
            if _is_datatype(cnt):
                cnt, dt = None, cnt
            elif isinstance(cnt, tuple) or (not vector and isinstance(cnt, list)):
                cnt, dsp = _pair(cnt, what)
        elif n == 3:
            obj, cnt, dt = spec
            if isinstance(cnt, tuple) or (not vector and isinstance(cnt, list)):
                cnt, dsp = _pair(cnt, what)
        elif n == 4:
            obj, cnt, dsp, dt = spec
        else:
            raise ValueError(f"{what}: message: expecting 2 to 4 items, got {n}")
        return obj, cnt, dsp, dt, True
    return spec, None, None, None, False


def _pair(x: Any, what: str) -> tuple[Any, Any]:
    if len(x) != 2:
        raise ValueError(f"{what}: expected (count, displacement), got {x!r} "
                         f"(too many values to unpack (expected 2))")
    return x[0], x[1]


def _base(obj: Any, dt: Any, is_list: bool, what: str, writable: bool, exact: bool = True
          ) -> tuple[np.ndarray, MPI.Datatype, bool]:
    """(1-D view of the buffer's elements, datatype, null buffer?) of message_basic;
    ``exact``: the count is inferred from the length (see :func:`_flat`)."""
    if (is_list or obj is not None) and _is_bottom(obj):  # the null buffer: needs a datatype
        if dt is None:
            raise KeyError(f"{what}: cannot map None to MPI datatype (a null buffer needs one)")
        datatype = _datatype(dt, what)
        return np.empty(0, _np_dtype(datatype)), datatype, True
    if obj is None or _is_bottom(obj):
        raise TypeError(f"{what}: message: expecting buffer or list/tuple, got "
                        f"{'None' if obj is None else 'MPI.BOTTOM'}")
    arr = _as_array(obj, what, writable)
    if dt is None:
        datatype = datatype_of(arr.dtype, what)
        dtype = arr.dtype
    else:
        datatype = _datatype(dt, what)
        dtype = _np_dtype(datatype)
    return _flat(arr, dtype, what, exact), datatype, False


#: a typemap starting below this byte from ``MPI.BOTTOM`` cannot be absolute addresses (the
#: first page is never mapped: MPI would dereference a null pointer)
_LOWEST_ADDRESS = 4096


class _Shifted:
    """The ``__array_interface__`` of a view at an absolute address; frees the shifted
    datatype when the last view of it goes."""

    def __init__(self, interface: dict[str, Any], datatype: MPI.Datatype) -> None:
        self.__array_interface__ = interface
        weakref.finalize(self, _free_type, datatype).atexit = False


def _free_type(datatype: MPI.Datatype) -> None:
    if not MPI.Is_finalized():
        datatype.Free()


def _bottom(datatype: Any, count: int, displ: int, what: str, byte_offset: int = 0
            ) -> tuple[np.ndarray, MPI.Datatype]:
    """``count`` elements of ``[MPI.BOTTOM, count, datatype]`` from element ``displ``, in the
    internal form: (a view, a datatype).  The datatype's typemap holds absolute addresses
    (``MPI.Get_address``); the view starts at the lowest of them (element ``displ``'s origin
    plus the true lower bound) and the datatype returned is the user's shifted by that true
    lower bound (``Create_struct([1], [-true_lb], [datatype])`` resized to the same lower
    bound and extent), so ``[view, count, shifted]`` is the same memory, the same type
    signature and the same extent as ``[MPI.BOTTOM, count, datatype]`` while scratch buffers
    and copies work as for any derived datatype.  The shifted type is freed with the view.
    ``byte_offset``: bytes from ``MPI.BOTTOM`` to element 0 (``Alltoallw``'s displacements).

    Raises:
        MPIValueError (``MPI.ERR_BUFFER``): a predefined datatype with ``count > 0`` (a buffer
            at address 0: MPICH raises ``MPI_ERR_BUFFER``, Open MPI crashes), or a derived one
            whose typemap is not absolute addresses (starts within 4 KiB of address 0)."""
    datatype = _datatype(datatype, what)
    if not is_derived(datatype) and count:
        raise MPIValueError(
            MPI.ERR_BUFFER,
            f"{what}: MPI.BOTTOM with {count} element(s) of predefined {datatype.Get_name()} "
            "is a buffer at address 0; MPI.BOTTOM needs a derived datatype of absolute "
            "addresses (built with MPI.Get_address)")
    if not count:
        extent = max(1, int(datatype.Get_extent()[1])) if is_derived(datatype) else 1
        dtype = np.dtype((np.void, extent)) if is_derived(datatype) else _np_dtype(datatype)
        return np.empty(0, dtype), datatype
    if datatype.Get_extent()[1] <= 0:  # one element of a twin (as _twin_block): the same
        # typemap; the caller packs it (_parse_packed)
        twin, _ = _twin_type(datatype, count)
        try:  # (the shifted type keeps what it needs of the twin)
            return _bottom(twin, 1, 0, what, byte_offset + displ * int(datatype.Get_extent()[1]))
        finally:
            twin.Free()
    extent = _derived_extent(datatype, what)
    true_lb = int(datatype.Get_true_extent()[0])
    start = byte_offset + displ * extent + true_lb
    if start < _LOWEST_ADDRESS:
        raise MPIValueError(
            MPI.ERR_BUFFER,
            f"{what}: MPI.BOTTOM with datatype {datatype.Get_name() or 'derived'} whose "
            f"typemap starts at byte {start} from address 0: not absolute addresses (build "
            "the datatype with MPI.Get_address, or pass the buffer itself)")
    one = MPI.Datatype.Create_struct([1], [-true_lb], [datatype])
    try:
        shifted = one.Create_resized(int(datatype.Get_extent()[0]) - true_lb, extent).Commit()
    finally:
        one.Free()
    interface = {"version": 3, "shape": (count,), "typestr": np.dtype((np.void, extent)).str,
                 "strides": None, "data": (start, False)}
    return np.asarray(_Shifted(interface, shifted)), shifted


def parse(spec: Any, what: str, *, writable: bool = False, blocks: int = 1) -> Buf:
    """Parse a single-block spec (mpi4py's ``BufSpec``/``BufSpecB``) into a :class:`Buf`.

    Args:
        spec: the mpi4py buffer spec (not in place: callers handle that).
        what: the argument's name, for error messages (``"sendbuf"``, ``"recvbuf"``).
        writable: the buffer is written by the call.
        blocks: the buffer holds one block per rank (Scatter's send buffer, Gather's,
            Allgather's and Alltoall's receive buffers, ...): an explicit ``count`` in the spec
            is then one block's, as in mpi4py, and the view holds ``blocks * count`` elements.

    Raises:
        TypeError, ValueError, KeyError, BufferError: as mpi4py (see the module docstring).
        A count at a displacement that ends past the buffer is no error here: see
        :func:`_spill` (``Buf.spill``).
    """
    if type(spec) is np.ndarray:  # the common spec, a bare array: the rules below, inline
        flags = spec.flags
        dtype = spec.dtype
        if ((flags.c_contiguous or flags.f_contiguous) and (flags.writeable or not writable)
                and dtype.isnative and (blocks == 1 or not spec.size % blocks)):
            datatype = _BY_CHAR.get(dtype.char)
            if datatype is not None:
                return Buf(spec[:] if spec.ndim == 1 else spec.reshape(-1, order="A"),
                           datatype)
    obj, cnt, dsp, dt, is_list = _unpack(spec, what, vector=False)
    _null_type(dt, what, cnt is None and not (is_list and _is_bottom(obj)))
    if is_list and _is_bottom_constant(obj) and dt is not None:  # absolute addresses
        n = 0 if cnt is None else _index(cnt, what)
        at = 0 if dsp is None else _index(dsp, what, "displacement")
        if n < 0 or at < 0:
            raise ValueError(f"{what}: message: negative count or displacement")
        view, datatype = _bottom(dt, n * blocks, at, what)
        given = _datatype(dt, what)
        if is_derived(given) and given.Get_extent()[1] <= 0:  # packed, as _parse_packed
            return _parse_packed(np.empty(0, np.uint8), given, n * blocks, 0, blocks, what,
                                 writable, TypedView.of(view, datatype) if n else None)
        return Buf(view, datatype, bottom=given if view.size else None)
    if isinstance(dt, MPI.Datatype) and is_derived(dt) and obj is not None and not _is_bottom(obj):
        count = None if cnt is None else _index(cnt, what)
        displ = 0 if dsp is None else _index(dsp, what, "displacement")
        if (count is not None and count < 0) or displ < 0:
            raise ValueError(f"{what}: message: negative count or displacement")
        return _parse_derived(_as_array(obj, what, writable), dt, count, displ, blocks, what,
                              writable)
    flat, datatype, null = _base(obj, dt, is_list, what, writable, cnt is None)
    displ = 0
    if dsp is not None:
        displ = _index(dsp, what, "displacement")
        if displ < 0:
            raise ValueError(f"{what}: message: negative displacement {displ}")
        if displ > flat.size:
            raise ValueError(f"{what}: message: displacement {displ} out of bounds, number of "
                             f"datatype entries {flat.size}")
    per_block = ""
    if cnt is not None:
        count = _index(cnt, what)
        if count < 0:
            raise ValueError(f"{what}: message: negative count {count} (a count must be >= 0)")
        if count > 0 and null:
            raise ValueError(f"{what}: message: buffer is None but count is {count}")
        if blocks > 1:
            per_block = f" per block x {blocks} blocks (an explicit count is one rank's block)"
            count *= blocks
    else:
        count = flat.size - displ
        if blocks > 1 and count % blocks:
            raise ValueError(
                f"{what}: message: cannot infer count, number of entries {count} is not a "
                f"multiple of required number of blocks {blocks} (the call needs one equal "
                "block per rank)")
    if displ + count > flat.size:  # (B), on one rank's values: the call goes (see _spill)
        shown = count // blocks if per_block else count
        isz = flat.dtype.itemsize
        lo, hi = displ * isz, (displ + count) * isz
        mem, shift, spill = _spill(
            flat.view(np.uint8), lo, hi, writable,
            f"{what}: count {shown}{per_block} at displacement {displ} needs "
            f"{displ + count} elements, buffer has {flat.size} (MPI would go out of bounds)")
        view = mem[lo + shift : hi + shift].view(flat.dtype)
        return Buf(view if spill is not None else TypedView.of(view, datatype), datatype,
                   spill=spill)
    return Buf(flat[displ : displ + count], datatype)


def _raw(arr: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array, as a 1-D uint8 view (no copy)."""
    return arr.reshape(-1, order="A").view(np.uint8)


def _beyond(raw: np.ndarray, lo: int, hi: int) -> np.ndarray | None:
    """Bytes ``[lo, hi)`` (from ``raw``'s first byte) of the numpy array ``raw`` is a view of,
    if that array holds them all (``raw`` a slice of a larger array): the memory MPI reads
    there; else None."""
    top = raw
    while isinstance(top.base, np.ndarray):
        top = top.base
    if top is raw or not (top.flags.c_contiguous or top.flags.f_contiguous):
        return None
    whole = top.reshape(-1, order="A").view(np.uint8)
    if not whole.size:
        return None
    at = raw.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
    if at + lo < 0 or at + hi > whole.size:
        return None
    return np.asarray(whole[at + lo : at + hi])


def _spill(raw: np.ndarray, lo: int, hi: int, writable: bool, detail: str
           ) -> tuple[np.ndarray, int, Spill | None]:
    """A spec that reaches bytes ``[lo, hi)`` of a buffer whose bytes are ``raw`` (1-D
    uint8), outside them (check kind (B): one rank's own values, so no refusal; the call
    goes, with the shape the peers expect): ``(mem, shift, spill)``, where byte ``b`` of the
    buffer is ``mem[b + shift]`` for every ``b`` in ``[lo, hi)`` and in the buffer.

    * A receive (``writable``): ``mem`` is a scratch of the declared size; the call copies
      the buffer's bytes in before its schedule (what it does not write stays), receives into
      the scratch, copies back the bytes that have a place in the buffer, and this rank
      raises ``MPI_ERR_TRUNCATE`` (an ``MPI.Exception``) at the end of the call: MPI's error
      for data that does not fit a receive, on the rank where it does not fit, after every
      round (the peers complete).  Plain MPI (MPICH, mpi4py 4) writes past the buffer there,
      silently; p2p keeps what fits and says so.
    * A send: if ``raw`` is a slice of a larger numpy array that holds the bytes, ``mem`` is
      that memory (MPI reads it there: the call sends it, as plain MPI does; no error, spill
      None).  Else ``mem`` is a scratch of zeros with the buffer's bytes copied in before the
      schedule: the call sends what the buffer holds and zeros in place of the memory past
      it, and this rank raises ``MPI_ERR_BUFFER`` at the end of the call (MPI would read
      memory that is not the buffer's: undefined); the peers are not left waiting."""
    n = raw.size
    inside = max(0, min(hi, n) - max(lo, 0))
    if not writable:
        there = _beyond(raw, lo, hi)
        if there is not None:
            return there, -lo, None
    shift = max(0, -lo)
    mem = np.zeros(shift + max(hi, n), np.uint8)
    user, mine = TypedView.of(raw, MPI.BYTE), TypedView.of(mem[shift : shift + n], MPI.BYTE)
    if writable:
        return mem, shift, Spill(
            ((user, mine),), ((mine, user),), MPI.ERR_TRUNCATE,
            f"{detail}: message truncated: the call received into a scratch of the "
            f"declared size ({hi - lo} bytes) and kept the {inside} that fit in the buffer",
            raw, detail)
    return mem, shift, Spill(
        ((user, mine),), (), MPI.ERR_BUFFER,
        f"{detail}: MPI would read outside the buffer; the call sent the {inside} bytes the "
        f"buffer holds and zeros in place of the other {hi - lo - inside}", raw, detail)


def widen(buf: Buf, count: int, problem: str, writes: int) -> Buf:
    """``buf`` (a receive buffer the call also reads: an in-place input) as ``count``
    elements, more than it holds (check kind (B), one rank's own values: the call goes).
    Where ``buf`` is a slice of a larger numpy array that holds them and the call writes
    only its first ``writes`` elements, within ``buf``, that memory (what MPI reads there; no
    error).  Else a scratch with the buffer's elements copied in
    before the schedule and back after it, zeros past them; the rank raises
    ``MPI_ERR_BUFFER`` at the end of the call (MPI would read and write past the buffer)."""
    n = buf.count
    if not is_derived(buf.datatype) and buf.spill is None and writes <= n:  # MPI reads it
        isz = buf.array.dtype.itemsize
        there = _beyond(np.asarray(buf.array).view(np.uint8), 0, count * isz)
        if there is not None:
            return Buf(TypedView.of(there.view(buf.array.dtype), buf.datatype), buf.datatype)
    if is_derived(buf.datatype):  # as typed_scratch, of zeros
        ext = extents(buf.datatype)
        lo, hi = ext.span(count)
        wide = typed_view(np.zeros(max(0, -lo) + max(hi, count * ext.extent, 0), np.uint8),
                          max(0, -lo), count, ext.extent)
    else:
        wide = np.zeros(count, buf.array.dtype)
    user = TypedView.of(buf.array, buf.datatype)
    mine = TypedView.of(wide[:n], buf.datatype)
    spill = Spill(((user, mine),), ((mine, user),), MPI.ERR_BUFFER,
                  f"{problem}: MPI would read and write past the buffer; the call used its "
                  f"{n} elements and zeros in place of the other {count - n}, and wrote back "
                  "what fits", np.asarray(buf.array), problem)
    return Buf(wide, buf.datatype, buf.bottom,
               spill if buf.spill is None else buf.spill.then(spill))


def _derived_extent(datatype: MPI.Datatype, what: str) -> int:
    """The extent of a derived datatype, called only where it is positive (every path for an
    extent <= 0 comes before: :func:`_parse_twin`, :func:`_parse_packed`,
    :func:`_parse_v_packed`, :func:`_one_block`, :func:`_bottom`), so it refuses nothing a
    program passes; ``MPI.DATATYPE_NULL`` (refused earlier by :func:`_null_type`, check (M))
    raises TypeError."""
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
                   blocks: int, what: str, writable: bool = False) -> Buf:
    """:func:`parse` of a spec whose datatype is derived: ``count`` elements of dtype
    ``np.dtype((np.void, extent))`` whose element 0 starts ``displ * extent`` bytes into the
    buffer (see :mod:`mpicoll.algorithms.datatypes`).  Without a count, as mpi4py: the buffer's
    bytes over the extent (ValueError unless whole).

    A datatype of extent <= 0 with a count, one block (Bcast's buffer, Scatter's receive,
    Gather's and Allgather's send, a reduction's buffers): the ``count`` elements as one
    element of a twin type (:func:`_one_block`: the same bytes, the same type signature),
    ``Buf.twin_of`` the user's datatype; the call goes, as MPI's.  With p blocks (or a count
    of 0): packed into a scratch of a positive-extent twin (:func:`_parse_packed`); with no
    count to infer from, mpi4py's own ValueError (check (M))."""
    raw = _raw(arr)
    lb, ext = datatype.Get_extent()
    if count is None and ext <= 0:  # check (M): mpi4py's own
        raise ValueError(f"{what}: message: cannot infer count, datatype extent {ext} "
                         f"(lb:{lb}, ub:{lb + ext})")
    if count and blocks == 1 and ext <= 0:
        return _parse_twin(raw, datatype, count, displ, what, writable)
    if ext <= 0:  # p blocks (or none): packed into a scratch of a positive extent
        return _parse_packed(raw, datatype, (count or 0) * blocks, displ, blocks, what, writable)
    extent = _derived_extent(datatype, what)
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
    origin = displ * extent
    try:
        check_span(datatype, origin, count, raw.size, what,
                   f" (extent {extent}) at displacement {displ}{per_block}")
    except ValueError as exc:  # (B), on one rank's values: the call goes (see _spill)
        lo, hi = extents(datatype).span(count)
        mem, shift, spill = _spill(raw, origin + lo, origin + hi, writable, str(exc))
        view = typed_view(mem, origin + shift, count, extent)
        return Buf(view if spill is not None else TypedView.of(view, datatype), datatype,
                   spill=spill)
    return Buf(typed_view(raw, origin, count, extent), datatype)


def _twin_type(datatype: MPI.Datatype, count: int) -> tuple[MPI.Datatype, int]:
    """``(twin, true extent)``: ``count`` elements of ``datatype`` as one committed element
    whose extent is their true extent (at least 1), from their true lower bound; the caller
    frees the twin."""
    one = datatype.Create_contiguous(count)
    try:
        lb, true_extent = one.Get_true_extent()
        return one.Create_resized(int(lb), max(1, int(true_extent))).Commit(), int(true_extent)
    finally:
        one.Free()


def _twin_block(raw: np.ndarray, origin: int, count: int, datatype: MPI.Datatype
                ) -> TypedView:
    """As :func:`_one_block`, the twin's extent its true extent (at least 1), so that the
    schedules' scratch buffers of several twins (a tree's relays) do not overlap."""
    twin, true_extent = _twin_type(datatype, count)
    view = TypedView.of(typed_view(raw, origin, 1, max(1, int(true_extent))), twin)
    weakref.finalize(view, _free_type, twin).atexit = False
    return view


def _parse_twin(raw: np.ndarray, datatype: MPI.Datatype, count: int, displ: int, what: str,
                writable: bool) -> Buf:
    """``count`` elements of a datatype of extent <= 0 from element ``displ`` (byte
    ``displ * extent``) of ``raw``: one element of its twin (see :func:`_parse_derived`); a
    twin reaching outside the buffer goes as any other spec (:func:`_spill`)."""
    origin = int(displ * datatype.Get_extent()[1])
    view = _twin_block(raw, origin, count, datatype)
    twin = view.datatype
    try:
        check_span(twin, origin, 1, raw.size, what, f" ({count} of a datatype of extent "
                   f"{datatype.Get_extent()[1]}) at displacement {displ}")
    except ValueError as exc:  # (B), on one rank's values: the call goes (see _spill)
        lo, hi = extents(twin).span(1)
        mem, shift, spill = _spill(raw, origin + lo, origin + hi, writable, str(exc))
        view = _twin_block(mem, origin + shift, count, datatype)
        twin = view.datatype
        return Buf(view, twin, spill=spill, twin_of=datatype)
    return Buf(view, twin, twin_of=datatype)


def _unit_twin(datatype: MPI.Datatype) -> MPI.Datatype:
    """``datatype`` (extent <= 0) shifted to start at byte 0 (its true lower bound may be an
    absolute address) and resized to its true extent (at least 1): one element's type
    signature, whose elements lie at increasing addresses and do not overlap, so a view of
    elements holds them.  The caller frees it (:func:`_free_with`)."""
    lb, true_extent = datatype.Get_true_extent()
    one = MPI.Datatype.Create_struct([1], [-int(lb)], [datatype])
    try:
        return one.Create_resized(0, max(1, int(true_extent))).Commit()
    finally:
        one.Free()


def _free_with(view: np.ndarray, datatype: MPI.Datatype) -> None:
    """Free ``datatype`` when the memory ``view`` is a view of goes (the array that owns it:
    every slice of ``view`` keeps it alive)."""
    owner = view
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    weakref.finalize(owner, _free_type, datatype).atexit = False


def _packed(pairs: list[tuple[TypedView, int, int]], total: int, datatype: MPI.Datatype,
            writable: bool, user: np.ndarray, problem: str
            ) -> tuple[np.ndarray, MPI.Datatype, Spill | None]:
    """Blocks of a datatype of extent <= 0 (``pairs``: each block as one element of its twin
    (:func:`_twin_block`), its count, its first element in the scratch) made to go on a side
    of p blocks (it was check (L): the internal form is one view whose blocks lie at
    increasing offsets, and p blocks of such a type start at one address or go down):
    ``(scratch, unit, spill)``, the scratch ``total`` elements of ``unit`` (the type's
    signature at a positive extent, :func:`_unit_twin`), the blocks back to back.  The
    spill packs the user's blocks into it before the schedule (by type signature: the same
    bytes MPI sends from them) and, for a receive, unpacks it into them after, in block
    order (where blocks share memory the higher block's bytes stay, as :func:`_repack`); no
    error.  ``problem`` (a receive whose blocks write one location twice, or ""): what
    checked mode refuses the call with.  Not a check: the call goes."""
    unit = _unit_twin(datatype)
    scratch = typed_scratch(total, unit)
    _free_with(scratch, unit)
    if not any(c for _, c, _ in pairs):
        return scratch, unit, None
    copies = tuple((view, TypedView.of(scratch[q : q + c], unit)) for view, c, q in pairs if c)
    return scratch, unit, Spill(copies, tuple((b, a) for a, b in copies) if writable else (),
                                None, "", user, problem)


def _parse_packed(raw: np.ndarray, datatype: MPI.Datatype, count: int, displ: int,
                  blocks: int, what: str, writable: bool, bottom: TypedView | None = None
                  ) -> Buf:
    """:func:`_parse_derived` of ``count`` elements (``blocks`` blocks, or none) of a datatype
    of extent <= 0 from element ``displ``: a :class:`Buf` of a scratch of ``count`` elements
    of its unit twin (see :func:`_packed`; ``Buf.twin_of`` the user's datatype, so a
    reduction on it raises on every rank, check (A)).  The user's elements are one element
    of a twin (:func:`_parse_twin`: one reaching outside the buffer goes as any other spec,
    :func:`_spill`), or ``bottom``: that element at absolute addresses (:func:`_bottom`)."""
    if not count:
        scratch, unit, _ = _packed([], 0, datatype, writable, raw, "")
        return Buf(scratch, unit, twin_of=datatype)
    user = Buf(bottom, bottom.datatype) if bottom is not None else \
        _parse_twin(raw, datatype, count, displ, what, writable)
    problem = ""
    if writable and blocks > 1 and datatype.Get_size() and datatype.Get_extent()[1] == 0:
        problem = (f"{what}: the {blocks} blocks of datatype {_type_name(datatype)} all start "
                   "at one address (extent 0); MPI forbids receiving into one location twice")
    mem = np.asarray(user.array) if bottom is not None else _memory_of(user, raw)
    scratch, unit, spill = _packed([(TypedView.of(user.array, user.datatype), count, 0)],
                                   count, datatype, writable, mem, problem)
    if user.spill is not None:
        spill = user.spill.then(spill)
    return Buf(scratch, unit, spill=spill, twin_of=datatype)


def _memory_of(buf: Buf, raw: np.ndarray) -> np.ndarray:
    return raw if buf.spill is None else buf.spill.user


def int_list(x: Any, what: str, name: str, size: int) -> list[int]:
    """``size`` ints from a sequence (a numpy array too), as mpi4py reads counts.

    Raises:
        TypeError: not a sequence, or an item that is not an int (a float included).
        ValueError: not ``size`` items.
        MPIValueError: a negative item (``MPI.ERR_COUNT``, what MPI raises for it)."""
    try:
        vals = list(x)
    except TypeError:
        raise TypeError(f"{what}: {name} must be a sequence of {size} ints, got {x!r}") from None
    out = [_index(v, what, name) for v in vals]  # the items first, as mpi4py
    if len(vals) != size:
        raise ValueError(f"{what}: {name}: expecting {size} items, got {len(vals)} "
                         "(expected one per rank)")
    if any(v < 0 for v in out):
        raise MPIValueError(MPI.ERR_COUNT, f"{what}: {name} must be >= 0, got {out}")
    return out


def _scalar(x: Any) -> Any:
    """A 0-d numpy array as the one int it holds (mpi4py takes ``np.array(3)`` as a count or
    a displacement stride, as it takes ``3``)."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item() if x.dtype.kind in "iub" else x
    return x


def parse_v(spec: Any, what: str, size: int, *, writable: bool = False) -> VBuf:
    """Parse a vector spec (mpi4py's ``BufSpecV``) into a :class:`VBuf`.

    Args:
        spec: the mpi4py vector buffer spec.
        what: the argument's name, for error messages.
        size: the number of ranks (length of counts and displacements).
        writable: the buffer is written by the call.

    Raises:
        TypeError / ValueError / KeyError / BufferError: as :func:`parse`, and counts or
        displacements whose length is not ``size`` (ValueError), negative counts
        (:class:`MPIValueError`).  Blocks outside the buffer and overlapping blocks of a
        receive buffer are no error here: see :func:`_spill` and :func:`_repack`
        (``VBuf.spill``).
    """
    obj, counts_spec, displs_spec, dt, is_list = _unpack(spec, what, vector=True)
    counts_spec, displs_spec = _scalar(counts_spec), _scalar(displs_spec)
    _null_type(dt, what, counts_spec is None and not (is_list and _is_bottom(obj)))
    bottom = is_list and _is_bottom_constant(obj) and dt is not None  # absolute addresses
    derived = isinstance(dt, MPI.Datatype) and is_derived(dt) and obj is not None \
        and not _is_bottom(obj)
    if bottom:  # the buffer has no length: counts default to 0, as in mpi4py
        datatype, null = _datatype(dt, what), False
        flat = np.empty(0, np.uint8)
    elif derived and dt.Get_extent()[1] <= 0:  # the blocks go packed (_parse_v_packed)
        datatype, null = dt, False
        raw = _raw(_as_array(obj, what, writable))
        if counts_spec is None:  # check (M): mpi4py's own
            raise ValueError(f"{what}: message: cannot infer count, datatype extent "
                             f"{dt.Get_extent()[1]}")
        flat = raw
    elif derived:
        datatype, null = dt, False
        extent = _derived_extent(datatype, what)
        raw = _raw(_as_array(obj, what, writable))
        flat = typed_view(raw, 0, raw.size // extent, extent)
        if counts_spec is None and raw.size % extent:
            raise ValueError(
                f"{what}: buffer length {raw.size} is not a multiple of the datatype's extent "
                f"{extent}; pass the counts"
            )
    else:
        flat, datatype, null = _base(obj, dt, is_list, what, writable, counts_spec is None)
    if counts_spec is None:
        q, r = divmod(flat.size, size)
        counts = [q + (i < r) for i in range(size)]
    elif not isinstance(counts_spec, (list, tuple, np.ndarray)) and \
            hasattr(counts_spec, "__index__"):
        c = _index(counts_spec, what, "counts")
        if c < 0:
            raise MPIValueError(MPI.ERR_COUNT, f"{what}: count must be >= 0, got {c}")
        counts = [c] * size
    else:
        counts = int_list(counts_spec, what, "counts", size)
    if null and any(counts):
        raise ValueError(f"{what}: message: buffer is None but counts are {counts}")
    if displs_spec is None:
        displs = np.concatenate(([0], np.cumsum(counts[:-1], dtype=np.int64))).tolist()
        displs = [int(d) for d in displs[:size]]
    elif not isinstance(displs_spec, (list, tuple, np.ndarray)) and \
            hasattr(displs_spec, "__index__"):
        stride = _index(displs_spec, what, "displacement")
        displs = [stride * i for i in range(size)]
    else:
        try:
            vals = list(displs_spec)
        except TypeError:
            raise TypeError(f"{what}: displacements must be a sequence of {size} ints, "
                            f"got {displs_spec!r}") from None
        if len(vals) != size:
            raise ValueError(f"{what}: displacements: expecting {size} items, got {len(vals)} "
                             "(expected one per rank)")
        displs = [_index(v, what, "displacements") for v in vals]
    if (derived or bottom) and is_derived(datatype) and datatype.Get_extent()[1] <= 0:
        return _parse_v_packed(None if bottom else raw, datatype, counts, displs, what,
                               writable)
    given = None
    spill: Spill | None = None
    live = [(i, c, d) for i, (c, d) in enumerate(zip(counts, displs, strict=True)) if c]
    if bottom:  # one view from MPI.BOTTOM's element min(0, displs) that spans every block
        low = min((d for _, _, d in live), default=0)
        low = min(low, 0)  # a negative displacement: an absolute address too (see _bottom)
        end = max((d + c for _, c, d in live), default=0)
        flat, datatype = _bottom(datatype, end - low, low, what)
        displs = [d - low for d in displs]
        given = _datatype(dt, what) if end - low else None
        derived = True
    elif live:
        if derived:
            ext = extents(datatype)
            unit, spans, problem = extent, [], ""
            for i, c, d in live:
                a, b = ext.span(c)
                spans.append((d * extent + a, d * extent + b))
                try:
                    check_span(datatype, d * extent, c, raw.size, what,
                               f" (extent {extent}) of block {i} at displacement {d}")
                except ValueError as exc:
                    problem = problem or str(exc)
        else:
            raw, unit = flat.view(np.uint8), flat.dtype.itemsize
            spans = [(d * unit, (d + c) * unit) for _, c, d in live]
            problem = next((
                f"{what}: block {i} (count {c} at displacement {d}) lies outside the buffer's "
                f"{flat.size} elements (MPI would go out of bounds; check the counts and "
                "displacements)" for i, c, d in live if d < 0 or d + c > flat.size), "")
        low = min(d for _, _, d in live)
        end = max(d + c for _, c, d in live)
        if problem:  # (B), on one rank's values: the call goes (see _spill)
            mem, shift, spill = _spill(raw, min(a for a, _ in spans),
                                       max(b for _, b in spans), writable, problem)
            origin = low * unit + shift
            if derived:
                flat = typed_view(mem, origin, end - low, extent)
            else:
                flat = mem[origin : origin + (end - low) * unit].view(flat.dtype)
            if spill is None:  # memory past the buffer that MPI reads: the call sends it
                flat = TypedView.of(flat, datatype)
            displs = [d - low for d in displs]
        elif derived and end > flat.size:  # the view spans every block
            flat = typed_view(raw, 0, end, extent)
    problem = _overlap(counts, displs, what) if writable else ""
    if problem:  # (L) made to go: see _repack
        flat, displs, over = _repack(flat, datatype, counts, displs, derived, problem)
        spill = over if spill is None else spill.then(over)
    return VBuf(flat, datatype, counts, displs, bottom=given, spill=spill)


def _parse_v_packed(raw: np.ndarray | None, datatype: MPI.Datatype, counts: list[int],
                    displs: list[int], what: str, writable: bool) -> VBuf:
    """:func:`parse_v` of blocks of a datatype of extent <= 0 (block ``i``: ``counts[i]``
    elements from byte ``displs[i] * extent`` of ``raw``, or of ``MPI.BOTTOM`` where ``raw``
    is None; one element of a twin each, :func:`_twin_block`, :func:`_bottom`): a
    :class:`VBuf` of a scratch with the blocks back to back in the type's unit twin (see
    :func:`_packed`).  Blocks reaching outside the buffer go as any other spec
    (:func:`_spill`); a receive whose blocks share bytes goes too (the higher block's stay;
    checked mode refuses it, as :func:`_overlap`)."""
    ext = int(datatype.Get_extent()[1])
    packed = [int(x) for x in np.cumsum([0, *counts[:-1]], dtype=np.int64)]
    live = [(i, c, d * ext) for i, (c, d) in enumerate(zip(counts, displs, strict=True)) if c]
    if raw is None:  # absolute addresses
        views = [TypedView.of(*_bottom(datatype, c, d, f"{what}: block {i}"))
                 for i, c, d in ((i, c, displs[i]) for i, c, _ in live)]
        origins = [int(v.__array_interface__["data"][0]) - extents(v.datatype).true_lb
                   for v in views]
        user = np.empty(0, np.uint8)
    else:
        views = [_twin_block(raw, o, c, datatype) for _, c, o in live]
        origins = [o for _, _, o in live]
        user = raw
    spans = [(o + a, o + b, i) for (i, _, _), o, v in zip(live, origins, views, strict=True)
             for a, b in [extents(v.datatype).span(1)] if b > a]  # the blocks that touch bytes
    spill: Spill | None = None
    bad = [] if raw is None else [(a, b) for a, b, _ in spans if a < 0 or b > raw.size]
    if raw is not None and bad:  # (B), on one rank's values: the call goes (see _spill)
        problem = (f"{what}: blocks of datatype {_type_name(datatype)} touch bytes "
                   f"[{min(a for a, _ in bad)}, {max(b for _, b in bad)}) of the buffer, "
                   f"which has {raw.size} bytes (MPI would go out of bounds)")
        mem, shift, spill = _spill(raw, min(a for a, _, _ in spans),
                                   max(b for _, b, _ in spans), writable, problem)
        views = [_twin_block(mem, o + shift, c, datatype) for _, c, o in live]
    problem = ""
    if writable:
        order = sorted(spans)
        for (_, end, i), (start, _, j) in pairwise(order):
            if start < end:
                problem = (f"{what}: blocks {i} and {j} of datatype {_type_name(datatype)} "
                           "share bytes; MPI forbids receiving into one location twice")
                break
    scratch, unit, packs = _packed(
        [(v, c, packed[i]) for v, (i, c, _) in zip(views, live, strict=True)], sum(counts),
        datatype, writable, user if spill is None else spill.user, problem)
    if spill is not None:
        packs = spill.then(packs)
    return VBuf(scratch, unit, counts, packed, spill=packs)


def _overlap(counts: list[int], displs: list[int], what: str) -> str:
    """Why two blocks of a receive v-spec share an element, or "" (MPI calls receiving into
    one location twice erroneous; MPICH writes both, in the order the messages arrive)."""
    spans = sorted((d, d + c, i) for i, (c, d) in enumerate(zip(counts, displs, strict=True))
                   if c)
    for (_, end, i), (start, _, j) in pairwise(spans):
        if start < end:
            return (f"{what}: blocks {i} and {j} overlap (block {j} starts at displacement "
                    f"{start}, inside block {i}, which ends at {end}); MPI forbids receiving "
                    "into one location twice")
    return ""


def _repack(flat: np.ndarray, datatype: MPI.Datatype, counts: list[int], displs: list[int],
            derived: bool, problem: str) -> tuple[np.ndarray, list[int], Spill]:
    """A receive v-spec whose blocks overlap, made to go (it was check (L): the forwarding
    schedules read blocks back from the receive buffer, so a block written over before it
    is forwarded would forward wrong data): the call works on a scratch with the blocks
    back to back (each block's own elements: copied in from the buffer before the schedule,
    for the in-place forms), and copies the blocks back into the buffer after it in rank
    order, so where blocks overlap the higher rank's block is what stays (MPICH leaves
    whichever message arrived last; MPI calls the program erroneous).  No error (checked
    mode refuses it on every rank, with ``problem``)."""
    packed = [int(x) for x in np.cumsum([0, *counts[:-1]], dtype=np.int64)]
    total = sum(counts)
    scratch = typed_scratch(total, datatype) if derived else np.empty(total, flat.dtype)
    pairs = tuple((TypedView.of(flat[d : d + c], datatype),
                   TypedView.of(scratch[q : q + c], datatype))
                  for c, d, q in zip(counts, displs, packed, strict=True) if c)
    return scratch, packed, Spill(pairs, tuple((b, a) for a, b in pairs), None, "",
                                  np.asarray(flat), problem)


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
    spill: Spill | None = None

    def nbytes(self, i: int) -> int:
        """Bytes of data in block ``i`` (``counts[i] * datatypes[i].Get_size()``)."""
        return self.counts[i] * int(self.datatypes[i].Get_size())


def _one_block(raw: np.ndarray, origin: int, count: int, datatype: MPI.Datatype
               ) -> TypedView:
    """``count`` elements of a datatype whose extent is 0 (or negative) from byte ``origin``
    of ``raw``, as one element of a twin type (``Create_contiguous(count)`` of it, resized to
    extent 1: the same type signature and the same bytes from the same origin, which a view
    of elements cannot hold).  The twin is freed with the view."""
    one = datatype.Create_contiguous(count)
    try:
        twin = one.Create_resized(int(one.Get_extent()[0]), 1).Commit()
    finally:
        one.Free()
    view = TypedView.of(typed_view(raw, origin, 1, 1), twin)
    weakref.finalize(view, _free_type, twin).atexit = False
    return view


def parse_w(spec: Any, what: str, size: int, *, writable: bool = False) -> WBuf:
    """Parse an ``Alltoallw`` spec, mpi4py's two forms: ``[buf, (counts, displs), datatypes]``
    and ``[buf, counts, displs, datatypes]`` (displacements in bytes, one datatype per rank:
    predefined or derived, committed).

    Raises:
        TypeError: not a buffer, not one of the two forms, a datatype that is not an
            ``MPI.Datatype`` (a single datatype for all is refused, as mpi4py refuses it).
        ValueError: counts, displacements or datatypes not one per rank, negative counts (a
            block whose typemap leaves the buffer is no error here: see :func:`_spill`).
    """
    if spec is None:
        raise TypeError(f"{what}: a buffer is required here, got None")
    if not isinstance(spec, (list, tuple)) or not spec:
        raise TypeError(f"{what}: expected [buffer, (counts, displacements), datatypes] or "
                        "[buffer, counts, displacements, datatypes] (Alltoallw)")
    obj, rest = spec[0], list(spec[1:])
    if len(rest) == 2 and isinstance(rest[0], (list, tuple)) and len(rest[0]) == 2:
        (counts_spec, displs_spec), types = rest
    elif len(rest) == 3:
        counts_spec, displs_spec, types = rest
    else:
        raise TypeError(f"{what}: expected [buffer, (counts, displacements), datatypes] or "
                        "[buffer, counts, displacements, datatypes] (Alltoallw)")
    bottom = _is_bottom_constant(obj)
    raw = np.empty(0, np.uint8) if bottom else _raw(_as_array(obj, what, writable))
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
    for i, t in enumerate(types):
        if not isinstance(t, MPI.Datatype):
            raise TypeError(f"{what}: datatypes[{i}] is not an MPI.Datatype: {t!r}")
        _null_type(t, f"{what}: datatypes[{i}]", False)
    mem, shift, spill = raw, 0, None
    if not bottom:  # blocks whose typemap leaves the buffer: (B), the call goes (_spill)
        spans, problem = [], ""
        for i, (c, d, t) in enumerate(zip(counts, displs, types, strict=True)):
            a, b = extents(t).span(c)
            if b > a:
                spans.append((d + a, d + b))
                try:
                    check_span(t, d, c, raw.size, what, f" (block {i} at byte {d})")
                except ValueError as exc:
                    problem = problem or str(exc)
        if problem:
            mem, shift, spill = _spill(raw, min(a for a, _ in spans),
                                       max(b for _, b in spans), writable, problem)
    blocks = []
    used = list(types)
    for i, (c, d, t) in enumerate(zip(counts, displs, types, strict=True)):
        if bottom:  # absolute addresses: block i at byte d from MPI.BOTTOM (see _bottom; a
            # negative d is an address too, checked there as every other)
            view, twin = _bottom(t, c, 0, f"{what}: block {i}", byte_offset=d)
            if c:
                used[i] = twin
            blocks.append(TypedView.of(view, twin))
            continue
        if c and t.Get_extent()[1] <= 0:  # extent 0 (or negative): one element of c of them
            blocks.append(_one_block(mem, d + shift, c, t))
            continue
        extent = _derived_extent(t, f"{what}: datatypes[{i}]") if c else max(1, t.extent)
        blocks.append(TypedView.of(typed_view(mem, d + shift, c, extent), t))
    # (blocks of a receive buffer may interleave, e.g. the columns of a transpose: whether
    # two of them write one byte twice is the user's to keep, as in MPI; not checked)
    return WBuf(raw, counts, displs, used, PerPeer(blocks), spill=spill)


def same_type(a: Buf | VBuf, b: Buf | VBuf, what: str, *, reduction: bool = False) -> None:
    """A reduction's send and receive MPI datatypes must be the same handle, as mpi4py
    requires them (it raises ``ValueError: mismatch in send and receive MPI datatypes`` on
    that rank, before MPI sees the call; mpicoll raises it there too, so a program behaves
    as under plain mpi4py).  ``[MPI.BOTTOM, count, datatype]`` compares the user's datatype.

    Check kind: mpi4py's own local check (the rank that passes two datatypes raises, as
    plain mpi4py raises there), not an agreement across ranks.

    ``reduction=False`` (the collectives with a send and a receive side): nothing is
    checked.  MPI requires the two sides' type *signatures* to agree, not their datatypes,
    and only across ranks (a strided derived send type against a predefined receive type is
    a valid call); p2p moves the data by signature (:func:`sent_view`), MPI raises
    ``MPI_ERR_TRUNCATE`` where a receive is too small."""
    if not reduction:
        return
    given_a = getattr(a, "twin_of", None) or (a.datatype if a.bottom is None else a.bottom)
    given_b = getattr(b, "twin_of", None) or (b.datatype if b.bottom is None else b.bottom)
    if given_a != given_b:
        raise ValueError(
            f"{what}: mismatch in send and receive MPI datatypes: send "
            f"{_type_name(given_a)} ({a.array.dtype}), receive {_type_name(given_b)} "
            f"({b.array.dtype}) (mpi4py needs the same datatype on both sides of a reduction)"
        )


def sent_view(s: Buf | VBuf, datatype: MPI.Datatype, per_block: int | None = None,
              want: int | None = None) -> np.ndarray:
    """The send side of a collective as the schedules see it: ``s.array`` itself where it is
    in the call's unit (``datatype``, the receive side's, and ``per_block == want``), else a
    :class:`~mpicoll.algorithms.datatypes.TypedView` carrying ``s``'s own datatype, so every
    message of it is posted with that datatype and every local copy between it and a
    receive-side buffer goes by type signature (pack, then unpack: never numpy assignment
    across two typemaps).

    Args:
        s: the parsed send buffer.
        datatype: the datatype the call's schedules work in (this rank's receive side's).
        per_block / want: the send side's count per block and the receive side's, each in
            its own datatype; when they differ the view is typed too (its copies then drop
            what does not fit, as MPI's local copy does)."""
    other = s.datatype
    same = other == datatype or (not is_derived(other) and not is_derived(datatype)
                                 and s.array.dtype == _np_dtype_or_none(datatype))
    if not same and is_derived(other) and is_derived(datatype):
        same = same_layout(other, datatype)
    if same and per_block == want:
        return s.array
    return TypedView.of(s.array, other)


def _np_dtype_or_none(datatype: MPI.Datatype) -> np.dtype | None:
    try:
        return _np_dtype(datatype)
    except TypeError:
        return None


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
    """Raise ValueError when a buffer holds a different number of elements than the call needs.
    Used only for a reduction's send and receive counts (check (M): mpi4py's own)."""
    if got != want:
        raise ValueError(f"{name}: has {got} elements, {what} needs {want}")
