"""How ``mpicoll bench`` passes its buffers: the kinds real mpi4py programs pass (``--pattern``).

The front door of mpicoll caches a call by its arguments; how cheap that is depends on what the
arguments are.  A pattern is one way a real program passes the same buffer at every call, and
bench times every implementation (native, plain mpi4py, each p2p algorithm, the ``:init`` forms)
with the same pattern, so the table shows what the front door costs for it.

==========  =================================================================================
pattern     what each call passes (``arr`` a NumPy array of the case, ``T`` its MPI datatype)
==========  =================================================================================
numpy       ``arr``, the same array object at every call (the default)
view        ``arr[:n]``: a new view of the same memory made at every call (``grad[:n]``)
list        ``[arr, T]``: a spec list built at every call (mpi4py's documentation's way)
bytearray   a ``bytearray`` passed bare: bytes (``MPI.BYTE``), count in bytes
array       an ``array.array`` of the case's typecode passed bare (``'d'`` for float64)
mmap        ``[mm, count, MPI.BYTE]`` on an anonymous ``mmap``, the list built once per size
            (as mpi4py's own OSU demo programs pass it); count per block where mpi4py reads so
scalar      ``[x, T]`` with ``x`` a 0-d array (mpi4py's compute-pi demo), built at every call:
            one element, bcast / reduce / allreduce / scan / exscan only
==========  =================================================================================

Where a pattern cannot express the run as asked, :func:`adapt` says what it runs instead (the
header prints it) or why it does not run (the table is replaced by that reason): the byte
patterns (``bytearray``, ``mmap``) move ``uint8`` values as ``MPI.BYTE``, and their reductions
use a bitwise op (``--op`` if it is one of band / bor / bxor, else bor), the only ops MPI
defines on ``MPI_BYTE``; ``array`` needs a dtype ``array.array`` has a typecode for; every
pattern but ``numpy`` needs a predefined, non-pair dtype; barrier passes no buffer, so only
``numpy`` times it.  The check before timing runs through the same pattern as the timing.
"""

from __future__ import annotations

import array
import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from .cases import Case
from .dtypes import DTYPES, PAIR_DTYPES, numpy_dtype

__all__ = ["PATTERNS", "Adapted", "adapt", "allocator", "arguments", "describe", "parse_patterns"]

#: Every pattern, in the order ``--pattern all`` runs them.
PATTERNS: tuple[str, ...] = ("numpy", "view", "list", "bytearray", "array", "mmap", "scalar")

_TEXT = {
    "numpy": "the same NumPy array at every call",
    "view": "a view arr[:n] made at every call",
    "list": "a spec list [arr, T] built at every call",
    "bytearray": "a bytearray passed bare (MPI.BYTE)",
    "array": "an array.array passed bare",
    "mmap": "[mmap, count, MPI.BYTE] built once per size (mpi4py's OSU demos)",
    "scalar": "[x, T] with x a 0-d array, built at every call (one element)",
}
_BYTES = ("bytearray", "mmap")
_BITWISE = ("band", "bor", "bxor")
_SCALAR_COLLECTIVES = ("bcast", "reduce", "allreduce", "scan", "exscan")


def describe(pattern: str) -> str:
    """What a call of ``pattern`` passes, in words (the tables' headings)."""
    return _TEXT[pattern]


def parse_patterns(words: list[str]) -> list[str]:
    """``--pattern`` words (names, ``all``, comma-separated lists) -> pattern names, in order.

    Raises:
        ValueError: an unknown name.
    """
    out: list[str] = []
    for word in words:
        for name in filter(None, word.split(",")):
            names = list(PATTERNS) if name == "all" else [name]
            for n in names:
                if n not in PATTERNS:
                    raise ValueError(f"unknown pattern {n!r} (choose from "
                                     f"{', '.join(PATTERNS)}, or all)")
                if n not in out:
                    out.append(n)
    return out


@dataclass(frozen=True)
class Adapted:
    """What a pattern runs for a collective: the dtype and op of its case (possibly not the
    ones asked for), a note saying why they changed (None: unchanged), or ``skip``: why the
    pattern cannot run the collective at all."""

    dtype: str
    op: str
    note: str | None = None
    skip: str | None = None


def adapt(pattern: str, collective: str, dtype: str, op: str, reduction: bool) -> Adapted:
    """The case ``pattern`` runs for ``collective`` asked with ``dtype`` and ``op`` (the same
    answer on every rank: it reads only the command line)."""
    if pattern == "numpy":
        return Adapted(dtype, op)
    if collective == "barrier":
        return Adapted(dtype, op, skip=f"pattern {pattern}: barrier passes no buffer (timed "
                                       "under --pattern numpy)")
    if dtype not in DTYPES or dtype in PAIR_DTYPES:
        return Adapted(dtype, op, skip=f"pattern {pattern} needs a predefined, non-pair "
                                       f"--dtype (got {dtype})")
    if pattern == "scalar" and collective not in _SCALAR_COLLECTIVES:
        return Adapted(dtype, op, skip="pattern scalar: a 0-d buffer holds one element, which "
                                       f"only {', '.join(_SCALAR_COLLECTIVES)} take")
    if pattern == "array" and numpy_dtype(dtype).char not in array.typecodes:
        return Adapted(dtype, op, skip=f"pattern array: array.array has no typecode for {dtype}")
    if pattern in _BYTES:
        if not reduction:
            note = None if dtype == "uint8" else f"bytes: uint8 values as MPI.BYTE, not {dtype}"
            return Adapted("uint8", op, note)
        new_op = op if op in _BITWISE else "bor"
        if (dtype, op) == ("uint8", new_op):
            return Adapted("uint8", op)
        return Adapted("uint8", new_op, f"bytes: op {new_op} on uint8 values as MPI.BYTE "
                                        f"(MPI defines only {'/'.join(_BITWISE)} on MPI_BYTE), "
                                        f"not {op} on {dtype}")
    return Adapted(dtype, op)


def allocator(pattern: str) -> tuple[Callable[[int, np.dtype[Any]], np.ndarray[Any, Any]],
                                     dict[int, Any]] | None:
    """For the patterns whose memory is not NumPy's (bytearray, array, mmap): ``(alloc,
    owners)``, where ``alloc(n, dtype)`` returns an array of ``n`` elements viewing a new
    object of that kind and ``owners`` maps ``id(array)`` to the object; None otherwise."""
    if pattern not in ("bytearray", "array", "mmap"):
        return None
    owners: dict[int, Any] = {}

    def alloc(n: int, dt: np.dtype[Any]) -> np.ndarray[Any, Any]:
        nbytes = n * dt.itemsize
        obj: Any
        if pattern == "bytearray":
            obj = bytearray(nbytes)
        elif pattern == "array":
            obj = array.array(dt.char, bytes(nbytes))
        else:  # an anonymous mapping cannot be empty: one byte more, never passed
            obj = mmap.mmap(-1, max(nbytes, 1))
        arr = np.frombuffer(obj, dtype=dt, count=n)
        owners[id(arr)] = obj
        return arr

    return alloc, owners


def arguments(pattern: str, case: Case, owners: dict[int, Any] | None
              ) -> tuple[Callable[[], tuple[Any, ...]], dict[str, Any]]:
    """``(make, kw)``: ``make()`` returns the positional arguments of ``case``'s call on this
    rank as ``pattern`` passes them (a new view or list at every call where the pattern says
    so), ``kw`` the keyword arguments.  ``owners``: :func:`allocator`'s map (its patterns)."""
    args, kw = case.arguments()
    # the named predefined datatype, as programs write it (MPI.DOUBLE): the case's own may be
    # a duplicate of it (mpi4py.util.dtlib's), on which MPI defines no predefined op
    own = case.mpi_type
    T = MPI.BYTE if pattern in _BYTES else MPI.Datatype.fromcode(case.np_dtype.char)

    def typed(item: Any) -> Any:  # a datatype (or Alltoallw's list of them) of a spec list
        if item is own:
            return T
        if isinstance(item, list) and item and all(t is own for t in item):
            return [T] * len(item)
        return item

    def one(arg: Any) -> Callable[[], Any]:
        if isinstance(arg, np.ndarray):
            a, n = arg, arg.shape[0]
            if pattern == "view":
                return lambda: a[:n]
            if pattern == "list":
                return lambda: [a, T]
            if pattern == "scalar":
                x = a.reshape(())
                return lambda: [x, T]
            if pattern == "mmap":
                spec = case.counted_spec(a, owners[id(a)] if owners else a, T)
                return lambda: spec
            if owners is not None:
                obj = owners[id(a)]
                return lambda: obj
            return lambda: a
        if isinstance(arg, list) and arg and isinstance(arg[0], np.ndarray):
            a, rest = arg[0], [typed(item) for item in arg[1:]]
            n = a.shape[0]
            if pattern == "view":
                return lambda: [a[:n], *rest]
            if pattern in ("list", "scalar"):
                return lambda: [a, *rest]
            spec = [owners[id(a)] if owners is not None else a, *rest]
            return lambda: spec
        return lambda: arg

    makers = [one(arg) for arg in args]
    if pattern in ("numpy", "bytearray", "array", "mmap"):  # the same objects at every call
        fixed = tuple(m() for m in makers)
        return (lambda: fixed), kw
    if len(makers) == 1:
        (m0,) = makers
        return (lambda: (m0(),)), kw
    if len(makers) == 2:
        m0, m1 = makers
        return (lambda: (m0(), m1())), kw
    return (lambda: tuple(m() for m in makers)), kw
