"""Element types and reduction ops by name: what ``--dtype`` and ``--op`` of bench, verify and
simulate mean in MPI.

The names of :data:`DTYPES` (NumPy names of predefined MPI types, then the pair types of
MAXLOC / MINLOC), the derived-type grammar :data:`DERIVED_GRAMMAR`, the ops of :data:`OPS`
(MPI's predefined ones, a commutative user sum and a non-commutative user op), their MPI and
NumPy objects, and which op MPI defines on which type (:func:`dtype_op_problem`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

__all__ = [
    "DERIVED_GRAMMAR",
    "DTYPES",
    "NONCOMM_MAX_P",
    "OPS",
    "PAIR_DTYPES",
    "concat_digits",
    "derived_base",
    "derived_datatype",
    "dtype_name",
    "dtype_op_problem",
    "known_dtype",
    "mpi_datatype",
    "mpi_op",
    "numpy_dtype",
    "per_element",
]

#: Predefined pair types (value, int) for MAXLOC / MINLOC, by the name the CLI accepts.
PAIR_DTYPES: dict[str, Any] = {
    "double_int": MPI.DOUBLE_INT,
    "float_int": MPI.FLOAT_INT,
    "long_int": MPI.LONG_INT,
    "2int": MPI.INT_INT,
}
#: Every dtype name the cases accept: NumPy names of predefined MPI types, then pair types.
DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128", *PAIR_DTYPES,
)

#: Op names the cases accept.  ``user`` is a commutative user-defined sum
#: (``MPI.Op.Create(..., commute=True)``); ``noncomm`` is a non-commutative user op
#: (decimal-digit concatenation, left operand = lower rank), exact for P <= 15.
OPS: tuple[str, ...] = (
    "sum", "prod", "max", "min", "land", "lor", "lxor", "band", "bor", "bxor",
    "maxloc", "minloc", "user", "noncomm",
)

_PREDEFINED_OPS: dict[str, Any] = {
    "sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN,
    "land": MPI.LAND, "lor": MPI.LOR, "lxor": MPI.LXOR,
    "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR,
    "maxloc": MPI.MAXLOC, "minloc": MPI.MINLOC,
}
_USER_OPS: dict[str, Any] = {}

#: Largest P for which the ``noncomm`` op (digit concatenation) stays exact, per dtype.
NONCOMM_MAX_P: dict[str, int] = {"int64": 18, "float64": 15}

#: Largest P for which the ``noncomm`` op (digit concatenation) stays exact, per dtype.

#: The derived dtype names (``--dtype`` of verify and bench), T a name of :data:`DTYPES` or
#: another derived name: ``contiguous:N:T``; ``vector:COUNT:STRIDE:T`` (blocks of one) and
#: ``vector:COUNT:BLOCKLENGTH:STRIDE:T`` (``MPI_Type_vector``, stride in elements of T);
#: ``resized:LB:EXTENT:T`` (bytes).  Examples: ``vector:2:3:float64``, ``contiguous:2:int64``,
#: ``resized:-8:16:vector:2:3:float64`` (interleaved elements).  A case of one is a case of its
#: predefined base type with every count times the base elements per element (the packed
#: view), the buffers MPI sees hold those values at the typemap's positions.
DERIVED_GRAMMAR = ("contiguous:N:T | vector:COUNT:STRIDE:T | vector:COUNT:BLOCKLENGTH:STRIDE:T "
                   "| resized:LB:EXTENT:T")
_DERIVED: dict[str, tuple[Any, str]] = {}


def derived_datatype(name: str) -> tuple[Any, str] | None:
    """(committed MPI datatype, predefined base name) of a derived dtype name (see
    :data:`DERIVED_GRAMMAR`), None for a name of :data:`DTYPES`.

    Raises:
        ValueError: a malformed name or an unknown base.
    """
    if name in DTYPES:
        return None
    if name in _DERIVED:
        return _DERIVED[name]
    kind, _, rest = name.partition(":")
    fields = rest.split(":")
    try:
        if kind == "contiguous":
            inner, nums = ":".join(fields[1:]), [int(fields[0])]
        elif kind == "vector":
            k = 3 if len(fields) > 3 and fields[2].lstrip("-").isdigit() else 2
            inner, nums = ":".join(fields[k:]), [int(f) for f in fields[:k]]
        elif kind == "resized":
            inner, nums = ":".join(fields[2:]), [int(fields[0]), int(fields[1])]
        else:
            raise ValueError(kind)
        found = (mpi_datatype(inner), inner) if inner in DTYPES else derived_datatype(inner)
        if found is None:
            raise ValueError(inner)
        base_type, base = found
    except (ValueError, IndexError):
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)} or a "
                         f"derived type {DERIVED_GRAMMAR}") from None
    if base in PAIR_DTYPES:
        raise ValueError(f"dtype {name!r}: derived types of pair types are not supported")
    if kind == "contiguous":
        t = base_type.Create_contiguous(nums[0])
    elif kind == "vector":
        count, block, stride = (nums[0], 1, nums[1]) if len(nums) == 2 else nums
        t = base_type.Create_vector(count, block, stride)
    else:
        t = base_type.Create_resized(nums[0], nums[1])
    if t.Get_size() == 0 or t.Get_extent()[1] <= 0:
        raise ValueError(f"dtype {name!r}: needs a positive size and extent")
    _DERIVED[name] = (t.Commit(), base)
    return _DERIVED[name]


def per_element(name: str) -> int:
    """Values of the predefined base per element of a dtype name (1 unless derived)."""
    d = derived_datatype(name) if name not in DTYPES else None
    return 1 if d is None else int(d[0].Get_size()) // numpy_dtype(d[1]).itemsize


def known_dtype(name: str) -> bool:
    """Whether ``name`` is a name of :data:`DTYPES` or a well-formed derived name."""
    try:
        derived_datatype(name)
    except ValueError:
        return False
    return True


@functools.cache
def numpy_dtype(name: str) -> np.dtype[Any]:
    """NumPy dtype of a dtype name of :data:`DTYPES` (pair types: the aligned structured dtype;
    a derived name: its predefined base's)."""
    d = derived_datatype(name) if name not in DTYPES else None
    if d is not None:
        return numpy_dtype(d[1])
    if name in PAIR_DTYPES:
        return np.dtype(dtlib.to_numpy_dtype(PAIR_DTYPES[name]))
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return np.dtype(name)


def dtype_name(dt: Any) -> str:
    """The :data:`DTYPES` name of a NumPy dtype (a pair type's aligned structured dtype too).

    Raises:
        ValueError: no name of :data:`DTYPES` has this dtype.
    """
    return _dtype_name(np.dtype(dt))


@functools.cache
def _dtype_name(dt: np.dtype[Any]) -> str:
    for name in PAIR_DTYPES:
        if numpy_dtype(name) == dt:
            return name
    if dt.name in DTYPES:
        return dt.name
    raise ValueError(f"unsupported dtype {dt}; expected one of {', '.join(DTYPES)}")


def mpi_datatype(name: str) -> Any:
    """The predefined MPI datatype of a dtype name of :data:`DTYPES` (a derived name: its
    committed derived datatype)."""
    if name in PAIR_DTYPES:
        return PAIR_DTYPES[name]
    if name not in DTYPES:
        d = derived_datatype(name)
        if d is not None:
            return d[0]
    return dtlib.from_numpy_dtype(numpy_dtype(name))


def _np_view(buf: Any, datatype: Any) -> np.ndarray[Any, Any]:
    return np.frombuffer(buf, dtype=dtlib.to_numpy_dtype(datatype))


def derived_base(datatype: Any) -> Any:
    """The predefined type a derived dtype name's datatype is made of (None: predefined)."""
    for t, base in _DERIVED.values():
        if t == datatype:
            return mpi_datatype(base)
    return None


def _user_op(fn: Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], Any]
             ) -> Callable[[Any, Any, Any], None]:
    """A user op from ``fn(a, b)`` (writes ``b``) on numpy views; on a derived datatype of
    the cases it works on the packed values (typemap order) and unpacks them back."""

    def op(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
        base = derived_base(datatype)
        if base is None:
            fn(_np_view(inbuf, datatype), _np_view(inoutbuf, datatype))
            return
        dt = np.dtype(dtlib.to_numpy_dtype(base))
        n = len(memoryview(inbuf).cast("B")) // datatype.Get_extent()[1]
        a, b = np.empty(n * datatype.Get_size() // dt.itemsize, dt), None
        datatype.Pack(inbuf, a, 0, MPI.COMM_SELF)
        b = np.empty_like(a)
        datatype.Pack(inoutbuf, b, 0, MPI.COMM_SELF)
        fn(a, b)
        datatype.Unpack(b, 0, inoutbuf, MPI.COMM_SELF)

    return op


def _user_sum_fn(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    np.add(a, b, out=b)


_user_sum = _user_op(_user_sum_fn)


_POW10 = 10.0 ** np.arange(19)


def _ndigits(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.searchsorted(_POW10, x.astype(np.float64), side="right")


def concat_digits(left: np.ndarray[Any, Any], right: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Decimal concatenation ``left || right`` (digits 1..9): associative, not commutative."""
    shift = _ndigits(right)
    if left.dtype.kind == "i":
        return left * (10 ** shift.astype(np.int64)) + right
    return left * _POW10[shift] + right


def _user_concat_fn(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    b[...] = concat_digits(a, b)


_user_concat = _user_op(_user_concat_fn)


def mpi_op(name: str) -> Any:
    """The MPI op of an op name of :data:`OPS` (user ops are created once, on first use)."""
    if name in _PREDEFINED_OPS:
        return _PREDEFINED_OPS[name]
    if name not in OPS:
        raise ValueError(f"unknown op {name!r}; expected one of {', '.join(OPS)}")
    if name not in _USER_OPS:
        fn, commute = (_user_sum, True) if name == "user" else (_user_concat, False)
        _USER_OPS[name] = MPI.Op.Create(fn, commute=commute)
    return _USER_OPS[name]


def dtype_op_problem(dtype: str, op: str, size: int = 1) -> str | None:
    """Why MPI (or this module's exactness) rules out ``op`` on ``dtype``, or None if allowed.

    Follows the MPI standard's table of op / type classes: arithmetic ops on integer, float and
    complex (MAX/MIN not on complex), logical ops on integer and bool, bitwise ops on integer,
    MAXLOC/MINLOC on pair types only, ``noncomm`` on int64/float64 for P up to 18/15.
    """
    derived = dtype not in DTYPES and derived_datatype(dtype) is not None
    if derived:  # MPICH 5 and Open MPI 5 refuse every predefined op on a derived datatype
        if op not in ("user", "noncomm"):
            return f"op {op} is not defined on the derived datatype {dtype} (only user ops are)"
        dtype = derived_datatype(dtype)[1]  # type: ignore[index]
    pair = dtype in PAIR_DTYPES
    kind = "" if pair else numpy_dtype(dtype).kind  # b i u f c
    if op in ("maxloc", "minloc"):
        return None if pair else f"op {op} needs a pair type ({', '.join(PAIR_DTYPES)})"
    if pair:
        return f"pair type {dtype} only goes with maxloc/minloc"
    if op in ("sum", "prod", "user") and kind == "b":
        return f"op {op} is not defined on bool"
    if op in ("max", "min") and kind in "bc":
        return f"op {op} is not defined on {dtype}"
    if op in ("land", "lor", "lxor") and kind in "fc":
        return f"op {op} is not defined on {dtype}"
    if op in ("band", "bor", "bxor") and kind not in "iu":
        return f"op {op} is only defined on integer types"
    if op == "noncomm":
        limit = NONCOMM_MAX_P.get(dtype)
        if limit is None:
            return "op noncomm needs int64 or float64"
        if size > limit:
            return f"op noncomm on {dtype} is exact only for P <= {limit}"
    return None
