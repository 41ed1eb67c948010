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
reduce_scatter              with a one-element gap between blocks (not reduce_scatter, whose
                            blocks are contiguous by definition)
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


@functools.cache
def numpy_dtype(name: str) -> np.dtype[Any]:
    """NumPy dtype of a dtype name of :data:`DTYPES` (pair types: the aligned structured dtype)."""
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
    """The predefined MPI datatype of a dtype name of :data:`DTYPES`."""
    if name in PAIR_DTYPES:
        return PAIR_DTYPES[name]
    return dtlib.from_numpy_dtype(numpy_dtype(name))


def _np_view(buf: Any, datatype: Any) -> np.ndarray[Any, Any]:
    return np.frombuffer(buf, dtype=dtlib.to_numpy_dtype(datatype))


def _user_sum(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a, b = _np_view(inbuf, datatype), _np_view(inoutbuf, datatype)
    np.add(a, b, out=b)


_POW10 = 10.0 ** np.arange(19)


def _ndigits(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.searchsorted(_POW10, x.astype(np.float64), side="right")


def _concat(left: np.ndarray[Any, Any], right: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Decimal concatenation ``left || right`` (digits 1..9): associative, not commutative."""
    shift = _ndigits(right)
    if left.dtype.kind == "i":
        return left * (10 ** shift.astype(np.int64)) + right
    return left * _POW10[shift] + right


def _user_concat(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a, b = _np_view(inbuf, datatype), _np_view(inoutbuf, datatype)
    b[...] = _concat(a, b)


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
        p, c = self.size, self.count
        if self.uniform:
            return [c] * p
        return [max(0, c + i % 3 - 1) for i in range(p)]

    def pair_count(self, src: int, dst: int) -> int:
        """Alltoallv: elements ``src`` sends to ``dst`` (symmetric, so in-place is legal)."""
        if self.uniform:
            return self.count
        return max(0, self.count + (src + dst) % 3 - 1)

    def _layout(self, counts: Sequence[int]) -> tuple[list[int], list[int], int]:
        """(counts, displacements, extent); v-variants with varying counts leave a one-element
        gap between blocks (reduce_scatter excepted: its blocks are contiguous)."""
        gap = 0 if self.uniform or not self.gaps or self.collective == "reduce_scatter" else 1
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
            if self.collective == "alltoallv":
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
        if coll in ("scatterv", "gatherv", "alltoallv"):
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
        if coll == "alltoallv":
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
        elif coll == "alltoallv":
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
        if coll == "alltoallv":  # blocks only: the gaps keep their sentinel
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

    # ---- the call ----------------------------------------------------------------------

    def _vspec(self, arr: np.ndarray[Any, Any], counts: Sequence[int]) -> list[Any]:
        if not self.gaps and self.dtype not in PAIR_DTYPES:
            return [arr, list(counts)]
        cs, ds, _ = self._layout(counts)
        return [arr, (cs, ds), self.mpi_type]

    def _spec(self, arr: np.ndarray[Any, Any]) -> Any:
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
            kw["recvcounts"] = self.counts()
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
        if coll == "alltoallv":
            scounts = [self.pair_count(r, j) for j in range(p)]
            rcounts = [self.pair_count(j, r) for j in range(p)]
            if ip:
                return (IN_PLACE, self._vspec(recv, rcounts)), kw
            return (self._vspec(send, scounts), self._vspec(recv, rcounts)), kw
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
        if coll == "alltoallv":
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
        parts.append(f"count={self.count}")
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
