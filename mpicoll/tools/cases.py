"""Test and benchmark cases: deterministic inputs, a call on a backend, an exact comparison.

One :class:`Case` is one collective call as every rank makes it: the collective, the element
``count``, the dtype, the op, the root, in-place or not, and the number of ranks ``P``.  It
allocates its buffers once (:meth:`Case.build`), fills them with deterministic integer-valued
inputs (:meth:`Case.reset`), returns a callable that runs it on a backend with a chosen algorithm
(:meth:`Case.call`), hands back this rank's output (:meth:`Case.result`) and computes, with NumPy
from the same inputs of every rank, the exact output this rank must see
(:meth:`Case.expected`).  ``mpicoll bench`` and ``mpicoll verify`` are both built on it.

Inputs are small integers (stored in the case's dtype, floats included), so every reduction is
exact whatever order an algorithm adds in: outputs are compared for equality, never with a
tolerance.

``count`` is the collective's own count argument, as MPI names it:

==========================  ===================================================================
collective                  ``count`` is
==========================  ===================================================================
bcast                       elements of the buffer
reduce, allreduce, scan,    elements of the vector each rank contributes
exscan
scatter, gather,            elements of one block (one rank's share): sendcount = recvcount
allgather, alltoall,
reduce_scatter_block
scatterv, gatherv,          base count of one block; with ``uniform=False`` block ``i`` holds
allgatherv, alltoallv,      ``max(0, count + i % 3 - 1)`` elements (alltoallv: ``(i + j) % 3``),
reduce_scatter, alltoallw   with a one-element gap between blocks (not reduce_scatter, whose
                            blocks are contiguous by definition); alltoallw is alltoallv with
                            a datatype per peer (the case's) and displacements in bytes
barrier                     unused (0)
==========================  ===================================================================
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from ..algorithms.collectives import BY_NAME, RECORDS

__all__ = [
    "BLOCK_COLLECTIVES",
    "DTYPES",
    "IN_PLACE_COLLECTIVES",
    "Mismatch",
    "OPS",
    "PAIR_DTYPES",
    "REDUCTIONS",
    "ROOTED",
    "V_COLLECTIVES",
    "Case",
    "compare",
    "count_for",
    "dtype_name",
    "dtype_op_problem",
    "method_name",
    "mpi_datatype",
    "mpi_op",
    "numpy_dtype",
    "per_element",
]

# Views of the records of :mod:`mpicoll.algorithms.collectives` (the facts live there).
#: Collectives whose ``count`` is one block of ``P`` (sizes in bytes are per block x P).
BLOCK_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.blocks)
#: Collectives with a root.
ROOTED: frozenset[str] = frozenset(c.name for c in RECORDS if c.rooted)
#: Collectives that reduce with an op.
REDUCTIONS: frozenset[str] = frozenset(c.name for c in RECORDS if c.reduction)
#: Collectives that accept ``MPI.IN_PLACE`` (bcast is in place by nature: the flag is moot).
IN_PLACE_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.in_place)
#: Collectives whose counts may differ per rank (``uniform`` applies).
V_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.vector)

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
#: Sentinel written where a call must not write (gaps of v-variants, receive buffers).
_SENTINEL = 77


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


def _base_of(datatype: Any) -> Any:
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
        base = _base_of(datatype)
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


def _concat(left: np.ndarray[Any, Any], right: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Decimal concatenation ``left || right`` (digits 1..9): associative, not commutative."""
    shift = _ndigits(right)
    if left.dtype.kind == "i":
        return left * (10 ** shift.astype(np.int64)) + right
    return left * _POW10[shift] + right


def _user_concat_fn(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    b[...] = _concat(a, b)


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


def method_name(collective: str, nonblocking: bool = False) -> str:
    """Backend method of a collective: ``reduce_scatter_block`` -> ``Reduce_scatter_block``."""
    return BY_NAME[collective].method_for(nonblocking)


def count_for(coll: str, size: int, p: int, itemsize: int) -> int:
    """The count argument for message size S = ``size`` bytes (S as :meth:`Case.nbytes`).

    One element of ``itemsize`` bytes per ``itemsize`` bytes of S; block collectives
    (:data:`mpicoll.BLOCK_COLLECTIVES`) split S into P blocks.  Rounded down to whole
    elements, at least one (a block); barrier: 0.
    """
    if coll == "barrier":
        return 0
    blocks = p if coll in BLOCK_COLLECTIVES else 1
    return max(1, size // (blocks * itemsize))


# --------------------------------------------------------------------------------------------
# deterministic inputs


def _data_pattern(rank: int, n: int, dt: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Non-reduction input of ``rank``: element i depends on (rank, i)."""
    i = np.arange(n, dtype=np.int64)
    raw = rank * 37 + i * 11 + 1
    out = np.empty(n, dtype=dt)
    if dt.names:  # pair type
        out[dt.names[0]] = raw % 1000
        out[dt.names[1]] = (rank * 7 + i) % 1000
        return out
    kind = dt.kind
    if kind == "b":
        out[...] = (raw % 3) == 0
    elif kind in "iu":
        modulus = min(127 if dt.itemsize == 1 else 30011, int(np.iinfo(dt).max))
        out[...] = raw % modulus
    elif kind == "f":
        out[...] = raw % (1 << 20 if dt.itemsize == 4 else 1 << 30)
    else:  # complex
        out.real = raw % (1 << 20)
        out.imag = (rank * 5 + i * 3) % 1001
    return out


def _reduce_pattern(
    op: str, rank: int, n: int, dt: np.dtype[Any], size: int
) -> np.ndarray[Any, Any]:
    """Reduction input of ``rank`` for ``op``: small integers whose reduction is exact."""
    i = np.arange(n, dtype=np.int64)
    out = np.empty(n, dtype=dt)
    if dt.names:  # maxloc / minloc: value, index = rank (ties are frequent: lowest index wins)
        out[dt.names[0]] = (i * 5 + rank * 3) % 7
        out[dt.names[1]] = rank
        return out
    kind = dt.kind
    signed = kind in "ifc"
    if op in ("sum", "user"):
        v = (i * 7 + rank * 3) % 7 - 3 if signed else (i * 7 + rank * 3) % 4
        out[...] = v
        if kind == "c":
            out.imag = (i + rank) % 3
    elif op == "prod":
        out[...] = np.where(i % max(size, 1) == rank, i % 3 + 1, 1)
        if kind == "c":
            out.imag = 0
    elif op in ("max", "min"):
        out[...] = (i * 5 + rank * 3) % 11 - (5 if signed else 0)
    elif op in ("land", "lor", "lxor"):
        # 0/1 only: MPI leaves a single contribution as it is (P=1, scan at rank 0), so
        # values other than 0/1 would make the expected output implementation-defined.
        out[...] = (i * 3 + rank) % 4 != 0
    elif op in ("band", "bor", "bxor"):
        out[...] = (i * 13 + rank * 29 + 5) % 128
    elif op == "noncomm":
        out[...] = (i + 2 * rank) % 9 + 1
    else:
        raise ValueError(f"unknown op {op!r}")
    return out


def _reduce_stack(op: str, stack: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Reduce ``stack`` (ranks x n, rank 0 first) along ranks exactly as MPI defines ``op``."""
    dt = stack.dtype
    if stack.shape[0] == 0:
        raise ValueError("nothing to reduce")
    if op in ("maxloc", "minloc"):
        names = dt.names
        assert names is not None
        val, idx = stack[names[0]], stack[names[1]]
        best = val.max(axis=0) if op == "maxloc" else val.min(axis=0)
        big = np.iinfo(idx.dtype).max
        loc = np.where(val == best, idx, big).min(axis=0)
        out = np.empty(stack.shape[1], dtype=dt)
        out[names[0]] = best
        out[names[1]] = loc
        return out
    if op in ("sum", "user"):
        return np.asarray(np.sum(stack, axis=0, dtype=dt))
    if op == "prod":
        return np.asarray(np.prod(stack, axis=0, dtype=dt))
    if op == "max":
        return np.asarray(stack.max(axis=0))
    if op == "min":
        return np.asarray(stack.min(axis=0))
    if op in ("land", "lor", "lxor"):
        ufunc: Any = {"land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor}[op]
        return np.asarray(ufunc.reduce(stack != 0, axis=0).astype(dt))
    if op in ("band", "bor", "bxor"):
        bitwise: Any = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        return np.asarray(bitwise.reduce(stack, axis=0))
    if op == "noncomm":
        acc = stack[0].copy()
        for row in stack[1:]:
            acc = _concat(acc, row).astype(dt)
        return acc
    raise ValueError(f"unknown op {op!r}")


# --------------------------------------------------------------------------------------------
# comparison


@dataclass(frozen=True)
class Mismatch:
    """First difference between an output and its reference.

    Attributes:
        index: first differing element index (-1: the lengths differ, or the call raised).
        got: repr of this rank's element (or the error).
        want: repr of the reference element.
    """

    index: int
    got: str
    want: str

    def __str__(self) -> str:
        if self.index < 0:
            return f"{self.got} (expected {self.want})"
        return f"first differs at index {self.index}: got {self.got}, expected {self.want}"


def _item(a: np.ndarray[Any, Any], k: int) -> str:
    v = a[k]
    return repr(v.item()) if hasattr(v, "item") else repr(v)


def compare(got: np.ndarray[Any, Any] | None, want: np.ndarray[Any, Any] | None) -> Mismatch | None:
    """Exact comparison of an output with its reference; None when equal (or both absent).

    Args:
        got: output of the implementation under test (1-D array) or None where nothing counts.
        want: reference output (native result or NumPy expectation) or None.

    Returns:
        None if equal, else a :class:`Mismatch` naming the first differing index.
    """
    if got is None or want is None:
        if got is None and want is None:
            return None
        return Mismatch(-1, "no output" if got is None else "an output",
                        "none" if want is None else "an output")
    if got.shape != want.shape:
        return Mismatch(-1, f"{got.size} elements", f"{want.size}")
    if got.dtype != want.dtype:
        return Mismatch(-1, f"dtype {got.dtype}", f"dtype {want.dtype}")
    if got.dtype.names:
        ne = np.zeros(got.shape, dtype=bool)
        for name in got.dtype.names:
            ne |= got[name] != want[name]
    else:
        ne = got != want
    bad = np.flatnonzero(ne)
    if bad.size == 0:
        return None
    k = int(bad[0])
    return Mismatch(k, _item(got, k), _item(want, k))


# --------------------------------------------------------------------------------------------
# the case


@dataclass
class Case:
    """One collective call as every rank makes it, with its buffers on this rank.

    Attributes:
        collective: registry collective name (see :data:`mpicoll.registry.COLLECTIVES`).
        count: the collective's count argument (module docstring gives its meaning).
        dtype: a name of :data:`DTYPES`.
        op: a name of :data:`OPS` (reductions only; ignored otherwise).
        root: root rank (rooted collectives only).
        in_place: use ``MPI.IN_PLACE`` where the collective accepts it.
        size: number of ranks P.
        rank: this rank.
        uniform: v-variants: equal counts on every rank (False: counts differ per rank).
        gaps: see the attribute's comment.
        op_object: see the attribute's comment.
    """

    collective: str
    count: int
    dtype: str = "float64"
    op: str = "sum"
    root: int = 0
    in_place: bool = False
    size: int = 1
    rank: int = 0
    uniform: bool = True
    #: varying counts of a v-variant: a one-element gap between blocks, so a write outside a
    #: block is caught (False: packed blocks passed as ``[buf, counts]``, the simulator's form)
    gaps: bool = True
    #: an ``MPI.Op`` to pass instead of the named ``op``'s (a caller's own op); the inputs stay
    #: those made for ``op`` (:meth:`expected` still reduces with the named one)
    op_object: Any = None
    _b: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    #: derived dtypes: the buffers MPI sees (the values of ``_b`` at the typemap's positions)
    _host: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def per_element(self) -> int:
        """Base values per element of the datatype (1 for a predefined one): for a derived
        dtype name every count of the case (``count`` included) is in base values, a multiple
        of this; the call passes counts in elements of the datatype."""
        return per_element(self.dtype)

    # ---- shape of the call -------------------------------------------------------------

    @property
    def np_dtype(self) -> np.dtype[Any]:
        """NumPy dtype of the elements."""
        return numpy_dtype(self.dtype)

    @property
    def mpi_type(self) -> Any:
        """Predefined MPI datatype of the elements."""
        return mpi_datatype(self.dtype)

    @property
    def mpi_op(self) -> Any:
        """The ``MPI.Op`` the call passes (:attr:`op_object`, else the named op's)."""
        return self.op_object if self.op_object is not None else mpi_op(self.op)

    @property
    def is_reduction(self) -> bool:
        """Whether the collective reduces with an op."""
        return self.collective in REDUCTIONS

    @property
    def uses_in_place(self) -> bool:
        """Whether this call passes ``MPI.IN_PLACE`` on this rank."""
        if not self.in_place or self.collective not in IN_PLACE_COLLECTIVES:
            return False
        if BY_NAME[self.collective].in_place_at == "root":
            return self.rank == self.root
        return True

    def counts(self) -> list[int]:
        """Per-rank block counts (v-variants; equal to ``count`` when ``uniform``)."""
        p, c, k = self.size, self.count, self.per_element
        if self.uniform:
            return [c] * p
        return [k * max(0, c // k + i % 3 - 1) for i in range(p)]

    def pair_count(self, src: int, dst: int) -> int:
        """Alltoallv: elements ``src`` sends to ``dst`` (symmetric, so in-place is legal)."""
        if self.uniform:
            return self.count
        k = self.per_element
        return k * max(0, self.count // k + (src + dst) % 3 - 1)

    def _layout(self, counts: Sequence[int]) -> tuple[list[int], list[int], int]:
        """(counts, displacements, extent); v-variants with varying counts leave a one-element
        gap between blocks (reduce_scatter excepted: its blocks are contiguous)."""
        gap = 0 if self.uniform or not self.gaps or self.collective == "reduce_scatter" \
            else self.per_element
        displs, pos = [], 0
        for c in counts:
            displs.append(pos)
            pos += c + gap
        return list(counts), displs, pos

    def nbytes(self) -> int:
        """Message size S in bytes as nccl-tests defines it (the size busbw factors apply to).

        bcast/reduce/allreduce/scan/exscan: the vector on each rank; allgather(v): the gathered
        output on each rank; reduce_scatter(_block): the input vector on each rank; alltoall(v):
        what a rank sends in all; gather(v): the root's output; scatter(v): the root's input.
        """
        if self.collective == "barrier":
            return 0
        item = self.np_dtype.itemsize
        if self.collective in BLOCK_COLLECTIVES:
            if self.collective in ("alltoallv", "alltoallw"):
                return item * sum(self.pair_count(self.rank, j) for j in range(self.size))
            return item * sum(self.counts())
        return item * self.count

    def restriction_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`mpicoll.registry.Algorithm.why_not` (besides ``p``).

        The same on every rank (unlike the backend's own per-rank view, where in-place holds
        only at the root of rooted collectives), so an n/a verdict never splits the ranks.
        ``count`` is the collective's count argument (the smallest block for the v-variants
        with counts; None for scatterv/gatherv/alltoallv, whose counts only the root or each
        pair knows); ``uniform`` is whether every block count is equal.
        """
        coll = self.collective
        commutative = True
        if self.is_reduction:
            commutative = bool(self.mpi_op.Is_commutative())
        count: int | None = self.count
        uniform = True
        if coll in ("scatterv", "gatherv", "alltoallv", "alltoallw"):
            count, uniform = None, False
        elif coll in ("allgatherv", "reduce_scatter"):
            counts = self.counts()
            count = min(counts) if counts else 0
            uniform = len(set(counts)) <= 1
        return {
            "commutative": commutative,
            "count": count,
            "in_place": bool(self.in_place and coll in IN_PLACE_COLLECTIVES),
            "uniform": uniform,
        }

    def problem(self) -> str | None:
        """Why MPI itself rules this call out (bad root, op/dtype), or None if it is legal."""
        if self.collective in ROOTED and not 0 <= self.root < self.size:
            return f"root {self.root} is not a rank of {self.size}"
        if self.count < 0:
            return "count must be >= 0"
        if self.is_reduction:
            return dtype_op_problem(self.dtype, self.op, self.size)
        return None

    # ---- buffers -----------------------------------------------------------------------

    def _input(self, rank: int, n: int) -> np.ndarray[Any, Any]:
        if self.is_reduction:
            return _reduce_pattern(self.op, rank, n, self.np_dtype, self.size)
        return _data_pattern(rank, n, self.np_dtype)

    def _sentinel(self, n: int) -> np.ndarray[Any, Any]:
        dt = self.np_dtype
        out = np.zeros(n, dtype=dt)
        if dt.names:
            out[dt.names[0]] = _SENTINEL
            out[dt.names[1]] = -1
        elif dt.kind != "b":
            out[...] = _SENTINEL
        return out

    def _send_len(self) -> int:
        """Elements of this rank's input vector (before any in-place placement)."""
        coll, p, c, r = self.collective, self.size, self.count, self.rank
        if coll in ("bcast", "reduce", "allreduce", "scan", "exscan"):
            return c
        if coll in ("scatter", "alltoall", "reduce_scatter_block"):
            return p * c
        if coll in ("gather", "allgather"):
            return c
        if coll in ("gatherv", "allgatherv"):
            return self.counts()[r]
        if coll in ("scatterv", "reduce_scatter"):
            return self._layout(self.counts())[2]
        if coll in ("alltoallv", "alltoallw"):
            return self._layout([self.pair_count(r, j) for j in range(p)])[2]
        return 0

    def build(self, shared: dict[tuple[str, int, str], np.ndarray[Any, Any]] | None = None) -> Case:
        """Allocate this rank's buffers (once) and fill them (:meth:`reset`); returns self.

        ``shared``: cost-only mode (the simulator's): the buffers come from this pool, one
        per (role, length, dtype) for every rank that uses it, and are never filled, so no page
        of them is ever touched (P ranks of 64 MiB each cost nothing)."""
        coll, p, r = self.collective, self.size, self.rank
        c = self.count
        dt = self.np_dtype
        b: dict[str, Any] = {}
        if coll == "barrier":
            self._b = b
            return self

        def empty(role: str, n: int) -> np.ndarray[Any, Any]:
            if shared is None:
                return np.empty(n, dtype=dt)
            key = (role, n, dt.str)
            if key not in shared:
                shared[key] = np.empty(n, dtype=dt)
            return shared[key]

        b["send"] = empty("send", self._send_len())
        if coll == "bcast":
            pass
        elif coll in ("reduce", "allreduce", "scan", "exscan", "scatter"):
            b["recv"] = empty("recv", c)
        elif coll == "scatterv":
            b["recv"] = empty("recv", self.counts()[r])
        elif coll in ("gather", "allgather"):
            b["recv"] = empty("recv", p * c)
        elif coll in ("gatherv", "allgatherv"):
            b["recv"] = empty("recv", self._layout(self.counts())[2])
        elif coll == "alltoall":
            b["recv"] = empty("recv", p * c)
        elif coll in ("alltoallv", "alltoallw"):
            b["recv"] = empty("recv", self._layout([self.pair_count(j, r) for j in range(p)])[2])
        elif coll == "reduce_scatter_block":
            b["recv"] = empty("recv", p * c if self.uses_in_place else c)
        elif coll == "reduce_scatter":
            n = self._send_len() if self.uses_in_place else self.counts()[r]
            b["recv"] = empty("recv", n)
        else:
            raise ValueError(f"unknown collective {coll!r}")
        self._b = b
        if shared is None:
            self.reset()
        return self

    def reset(self) -> None:
        """Refill inputs and sentinels (outside any timed region)."""
        self._fill()
        self._to_host()

    def _fill(self) -> None:
        coll, p, r, c = self.collective, self.size, self.rank, self.count
        b = self._b
        if coll == "barrier":
            return
        send = b["send"]
        if coll == "bcast":
            send[...] = (
                self._input(self.root, send.size) if r == self.root else self._sentinel(send.size)
            )
            return
        send[...] = self._input(r, send.size)
        recv = b["recv"]
        recv[...] = self._sentinel(recv.size)
        if not self.uses_in_place:
            return
        # MPI.IN_PLACE: the input lives in the receive buffer (or stays in the send buffer).
        if coll in ("alltoallv", "alltoallw"):  # blocks only: the gaps keep their sentinel
            counts, displs, _ = self._layout([self.pair_count(r, j) for j in range(p)])
            for d, n in zip(displs, counts, strict=True):
                recv[d : d + n] = send[d : d + n]
        elif coll in ("reduce", "allreduce", "scan", "exscan", "alltoall",
                      "reduce_scatter_block", "reduce_scatter"):
            recv[: send.size] = send
        elif coll == "gather" or coll == "allgather":
            recv[r * c : (r + 1) * c] = send
        elif coll in ("gatherv", "allgatherv"):
            counts, displs, _ = self._layout(self.counts())
            recv[displs[r] : displs[r] + counts[r]] = send
        # scatter(v) at root: recvbuf = IN_PLACE, the root's block stays in sendbuf.

    def _to_host(self) -> None:
        """Derived dtypes: write the values of every buffer at the typemap's positions of its
        host buffer (the holes hold the sentinel byte)."""
        if self.per_element == 1:
            return
        t, k = self.mpi_type, self.per_element
        ext = t.Get_extent()[1]
        for key, arr in self._b.items():
            n = arr.size // k
            lo, hi = t.Get_true_extent()[0], 0
            hi = max(n * ext, (n - 1) * ext + lo + t.Get_true_extent()[1]) if n else 0
            host = self._host.get(key)
            if host is None or host.size != hi:
                host = self._host[key] = np.empty(hi, np.uint8)
            host[...] = _SENTINEL
            if n:
                t.Unpack(arr.view(np.uint8), 0, host[: n * ext], MPI.COMM_SELF)

    def _from_host(self) -> None:
        """Derived dtypes: read every buffer's values back from the typemap's positions."""
        if self.per_element == 1:
            return
        t, k = self.mpi_type, self.per_element
        ext = t.Get_extent()[1]
        for key, arr in self._b.items():
            n = arr.size // k
            if n:
                t.Pack(self._host[key][: n * ext], arr.view(np.uint8), 0, MPI.COMM_SELF)

    def _host_spec(self, arr: np.ndarray[Any, Any]) -> list[Any]:
        """``[host, count, datatype]`` of a buffer of a derived dtype; the count is one block's
        where mpi4py reads it so (the block buffers of Scatter, Gather, Allgather, Alltoall and
        Reduce_scatter_block's input)."""
        key = next(k for k, v in self._b.items() if v is arr)
        per_block = {"scatter": "send", "gather": "recv", "allgather": "recv",
                     "alltoall": "send recv", "reduce_scatter_block": "send"}
        blocks = self.size if key in per_block.get(self.collective, "").split() else 1
        if self.collective == "reduce_scatter_block" and key == "recv" and self.uses_in_place:
            blocks = self.size  # mpicoll reads this count per block (mpi4py: the whole)
        return [self._host[key], arr.size // self.per_element // blocks, self.mpi_type]

    # ---- the call ----------------------------------------------------------------------

    def _vspec(self, arr: np.ndarray[Any, Any], counts: Sequence[int]) -> list[Any]:
        if not self.gaps and self.dtype not in PAIR_DTYPES and self.per_element == 1:
            return [arr, list(counts)]
        cs, ds, _ = self._layout(counts)
        k = self.per_element
        if k > 1:
            return [self._host_spec(arr)[0], ([c // k for c in cs], [d // k for d in ds]),
                    self.mpi_type]
        return [arr, (cs, ds), self.mpi_type]

    def _wspec(self, arr: np.ndarray[Any, Any], counts: Sequence[int]) -> list[Any]:
        """Alltoallw's ``[buf, (counts, byte displacements), datatypes]``: the v layout, every
        block of the case's datatype."""
        cs, ds, _ = self._layout(counts)
        k, t = self.per_element, self.mpi_type
        buf = self._host_spec(arr)[0] if k > 1 else arr
        ext = t.Get_extent()[1]
        return [buf, ([c // k for c in cs], [d // k * ext for d in ds]), [t] * self.size]

    def _spec(self, arr: np.ndarray[Any, Any]) -> Any:
        if self.per_element > 1:
            return self._host_spec(arr)
        if self.dtype in PAIR_DTYPES:
            return [arr, self.mpi_type]
        return arr

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments of the backend method on this rank."""
        coll, p, r, root = self.collective, self.size, self.rank, self.root
        b, ip = self._b, self.uses_in_place
        if coll == "barrier":
            return (), {}
        IN_PLACE = MPI.IN_PLACE
        send: Any = b["send"]
        recv: Any = b.get("recv")
        sp = self._spec
        kw: dict[str, Any] = {}
        if self.is_reduction:
            kw["op"] = self.mpi_op
        if coll in ROOTED:
            kw["root"] = root
        if coll == "bcast":
            return (sp(send),), kw
        if coll in ("allreduce", "scan", "exscan", "reduce_scatter_block", "alltoall"):
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "reduce":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "reduce_scatter":
            kw["recvcounts"] = [c // self.per_element for c in self.counts()]
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "scatter":
            if r != root:
                return (None, sp(recv)), kw
            return (sp(send), IN_PLACE if ip else sp(recv)), kw
        if coll == "gather":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "allgather":
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        counts = self.counts()
        if coll == "scatterv":
            if r != root:
                return (None, sp(recv)), kw
            return (self._vspec(send, counts), IN_PLACE if ip else sp(recv)), kw
        if coll == "gatherv":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), self._vspec(recv, counts)), kw
        if coll == "allgatherv":
            return (IN_PLACE if ip else sp(send), self._vspec(recv, counts)), kw
        if coll in ("alltoallv", "alltoallw"):
            scounts = [self.pair_count(r, j) for j in range(p)]
            rcounts = [self.pair_count(j, r) for j in range(p)]
            vs = self._vspec if coll == "alltoallv" else self._wspec
            if ip:
                return (IN_PLACE, vs(recv, rcounts)), kw
            return (vs(send, scounts), vs(recv, rcounts)), kw
        raise ValueError(f"unknown collective {coll!r}")

    def positional(self) -> tuple[Any, ...]:
        """:meth:`arguments` as one positional tuple, in the order of mpi4py's signatures
        (the buffers, then ``recvcounts``, ``op``, ``root``)."""
        args, kw = self.arguments()
        return (*args, *(kw[k] for k in ("recvcounts", "op", "root") if k in kw))

    def output(self) -> np.ndarray[Any, Any] | None:
        """This rank's output buffer itself (not a copy, unlike :meth:`result`: a call writes
        into it); None where the call gives this rank no output."""
        coll, r = self.collective, self.rank
        b = self._b
        if coll == "barrier" or (coll in ("reduce", "gather", "gatherv") and r != self.root):
            return None
        if coll == "bcast":
            return b["send"]
        if coll in ("scatter", "scatterv") and r == self.root and self.uses_in_place:
            counts, displs, _ = self._layout(self.counts())
            return b["send"][displs[r] : displs[r] + counts[r]]
        return b["recv"]

    def call(
        self, backend: Any, algorithm: str | None = None, nonblocking: bool = False
    ) -> Callable[[], Any]:
        """A no-argument callable running this call on ``backend``.

        Args:
            backend: ``mpicoll.native(comm)``, ``mpicoll.p2p(comm)`` or anything with the
                ``mpi4py.MPI.Comm`` collective methods.
            algorithm: p2p algorithm name (``"auto"`` or a registry name); None for native.
            nonblocking: call the ``I...`` form; the callable then returns the request.

        Returns:
            ``fn()`` that makes the call with this case's (already built) buffers.
        """
        if not self._b and self.collective != "barrier":
            self.build()
        method = getattr(backend, method_name(self.collective, nonblocking))
        args, kw = self.arguments()
        if algorithm is not None:
            kw["algorithm"] = algorithm

        def fn() -> Any:
            return method(*args, **kw)

        return fn

    def result(self) -> np.ndarray[Any, Any] | None:
        """Copy of this rank's output after a call; None where the call defines no output."""
        coll, r, p, c = self.collective, self.rank, self.size, self.count
        b = self._b
        if coll == "barrier":
            return None
        self._from_host()
        if coll == "bcast":
            return np.array(b["send"])
        if coll == "exscan" and r == 0:
            return None
        recv = b["recv"]
        if coll in ("reduce", "gather", "gatherv") and r != self.root:
            return None
        if coll in ("scatter", "scatterv") and r == self.root and self.uses_in_place:
            if coll == "scatterv":
                counts, displs, _ = self._layout(self.counts())
            else:
                counts, displs = [c] * p, [i * c for i in range(p)]
            return np.array(b["send"][displs[r] : displs[r] + counts[r]])
        if coll == "reduce_scatter_block":
            return np.array(recv[:c])
        if coll == "reduce_scatter":
            return np.array(recv[: self.counts()[r]])
        return np.array(recv)

    def expected(self) -> np.ndarray[Any, Any] | None:
        """Exact output this rank must see, from every rank's inputs (NumPy; O(P x n) work)."""
        coll, r, p, c, root = self.collective, self.rank, self.size, self.count, self.root
        if coll == "barrier":
            return None
        if coll == "exscan" and r == 0:
            return None
        if coll in ("reduce", "gather", "gatherv") and r != root:
            return None
        dt = self.np_dtype
        if coll == "bcast":
            return self._input(root, c)
        if self.is_reduction:
            if coll in ("reduce", "allreduce", "scan", "exscan"):
                n, ranks = c, range(p)
                if coll == "scan":
                    ranks = range(r + 1)
                elif coll == "exscan":
                    ranks = range(r)
                stack = (
                    np.stack([self._input(k, n) for k in ranks])
                    if n else np.empty((len(ranks), 0), dt)
                )
                return _reduce_stack(self.op, stack)
            if coll == "reduce_scatter_block":
                stack = np.stack([self._input(k, p * c)[r * c : (r + 1) * c] for k in range(p)])
                return _reduce_stack(self.op, stack)
            counts, displs, ext = self._layout(self.counts())
            lo, hi = displs[r], displs[r] + counts[r]
            stack = np.stack([self._input(k, ext)[lo:hi] for k in range(p)])
            return _reduce_stack(self.op, stack)
        if coll == "scatter":
            return self._input(root, p * c)[r * c : (r + 1) * c]
        if coll == "scatterv":
            counts, displs, ext = self._layout(self.counts())
            return self._input(root, ext)[displs[r] : displs[r] + counts[r]]
        if coll in ("gather", "allgather"):
            if p * c == 0:
                return np.empty(0, dt)
            return np.concatenate([self._input(k, c) for k in range(p)])
        if coll in ("gatherv", "allgatherv"):
            counts, displs, ext = self._layout(self.counts())
            out = self._sentinel(ext)
            for k in range(p):
                out[displs[k] : displs[k] + counts[k]] = self._input(k, counts[k])
            return out
        if coll == "alltoall":
            out = np.empty(p * c, dt)
            for k in range(p):
                out[k * c : (k + 1) * c] = self._input(k, p * c)[r * c : (r + 1) * c]
            return out
        if coll in ("alltoallv", "alltoallw"):
            rcounts = [self.pair_count(k, r) for k in range(p)]
            rc, rd, rext = self._layout(rcounts)
            out = self._sentinel(rext)
            for k in range(p):
                sc, sd, sext = self._layout([self.pair_count(k, j) for j in range(p)])
                out[rd[k] : rd[k] + rc[k]] = self._input(k, sext)[sd[r] : sd[r] + sc[r]]
            return out
        raise ValueError(f"unknown collective {coll!r}")

    def describe(self) -> str:
        """The case in words: ``allreduce P=4 dtype=float64 op=sum count=5 in-place``."""
        parts = [self.collective, f"P={self.size}", f"dtype={self.dtype}"]
        if self.is_reduction:
            parts.append(f"op={self.op}")
        if self.collective in ROOTED:
            parts.append(f"root={self.root}")
        parts.append(f"count={self.count // self.per_element}")
        if self.collective in V_COLLECTIVES and not self.uniform:
            parts.append("counts=varying")
        if self.in_place and self.collective in IN_PLACE_COLLECTIVES:
            parts.append("in-place")
        return " ".join(parts)


def _selftest() -> None:  # pragma: no cover - manual check: python -m mpicoll.tools.cases
    comm = MPI.COMM_WORLD
    bad = 0
    for coll in ("bcast", "allreduce", "alltoallv", "gatherv"):
        case = Case(coll, 5, size=comm.size, rank=comm.rank).build()
        case.call(comm)()
        m = compare(case.result(), case.expected())
        bad += m is not None
    print(comm.rank, "ok" if not bad else "mismatch", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    _selftest()
