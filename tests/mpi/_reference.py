"""NumPy reference for the MPI collective tests: inputs, expected results, comparisons.

Nothing in here communicates.  Every input is a deterministic function of (rank, index) (or of a
small integer *key* and the index), so each rank can compute every other rank's input, and from
them the exact expected output of any collective, locally.

Values are chosen so that every reduction is exact in every dtype the tests use:

* ``SUM``: integers in [-9, 9] (complex: both parts), so even 5 ranks x float32 stay exact;
* ``PROD``: values in {1, 2} (ints and floats) or {1, 2, -1, 1j} (complex): |product| <= 2**P;
* ``MAX``/``MIN``: integers in [-100, 100];
* logical ops: 0/1 patterns (and 0/3 for ints, to check "non-zero is true");
* bitwise ops: 16-bit patterns;
* ``MAXLOC``/``MINLOC``: (value, index) pairs with many ties, ties resolved by the lowest index;
* ``AFFINE``: a user-defined, associative, NON-commutative op (composition of affine maps
  ``x -> a*x + b`` modulo the prime 2**31 - 1, packed in one int64); the reference folds in rank
  order, rank 0's operand leftmost, as MPI requires.

Data-movement collectives use :func:`values`: ``key * 2**17 + index`` (plus a fraction/imaginary
part where the dtype has one), unique per (key, index) for indices < 2**17, exact in float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

# --------------------------------------------------------------------------------------------
# dtypes

#: Pair types for MAXLOC/MINLOC, as (MPI datatype, numpy structured dtype).
PAIR_TYPES: dict[str, Any] = {
    "double_int": MPI.DOUBLE_INT,
    "2int": MPI.TWOINT,
    "float_int": MPI.FLOAT_INT,
    "long_int": MPI.LONG_INT,
}

#: Plain dtypes by name.
PLAIN_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    for name in ("int8", "uint8", "int32", "int64", "uint64", "float32", "float64",
                 "complex64", "complex128", "bool")
}


def np_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype for a dtype name (plain numpy name or a key of :data:`PAIR_TYPES`)."""
    if name in PAIR_TYPES:
        return np.dtype(dtlib.to_numpy_dtype(PAIR_TYPES[name]))
    return PLAIN_DTYPES[name]


def mpi_type(name: str) -> MPI.Datatype:
    """The MPI datatype for a dtype name."""
    if name in PAIR_TYPES:
        return PAIR_TYPES[name]
    # the predefined type itself: dtlib.from_numpy_dtype returns a *duplicate* (a derived
    # type, leaked per call), on which MPICH rejects predefined reduction ops
    return MPI.Datatype.fromcode(PLAIN_DTYPES[name].char)


def is_pair(name: str) -> bool:
    """Whether ``name`` is a (value, index) pair type."""
    return name in PAIR_TYPES


def pair_fields(dt: np.dtype[Any]) -> tuple[str, str]:
    """The (value, index) field names of a pair dtype."""
    names = dt.names
    if names is None or len(names) != 2:
        raise ValueError(f"{dt} is not a (value, index) pair dtype")
    return names[0], names[1]


# --------------------------------------------------------------------------------------------
# the non-commutative user op: composition of affine maps modulo a prime

AFFINE_MOD = 2**31 - 1  # prime; a*b and a*b + c stay below 2**63


def affine_compose(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``u o v`` elementwise, for int64 arrays packing maps ``x -> a*x + b`` as ``a*2**31 + b``.

    (u o v)(x) = u(v(x)) = a_u*(a_v*x + b_v) + b_u.  Associative, not commutative.
    """
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    au, bu = u >> 31, u & (2**31 - 1)
    av, bv = v >> 31, v & (2**31 - 1)
    a = (au * av) % AFFINE_MOD
    b = (au * bv + bu) % AFFINE_MOD
    return (a << 31) | b


def _affine_mpi(inbuf: Any, inoutbuf: Any, datatype: MPI.Datatype) -> None:
    # MPI user op: inoutbuf = inbuf op inoutbuf, inbuf coming from the lower ranks.
    x = np.frombuffer(inbuf, dtype=np.int64)
    y = np.frombuffer(inoutbuf, dtype=np.int64)
    y[...] = affine_compose(x, y)


_USER_OPS: dict[str, MPI.Op] = {}


def mpi_op(name: str) -> MPI.Op:
    """The MPI op for an op name ("SUM", "MAXLOC", ..., or "AFFINE", the user op)."""
    if name == "AFFINE":
        if "AFFINE" not in _USER_OPS:
            _USER_OPS["AFFINE"] = MPI.Op.Create(_affine_mpi, commute=False)
        return _USER_OPS["AFFINE"]
    return getattr(MPI, name)


def is_commutative(op: str) -> bool:
    """Whether the op is commutative (every predefined op is; AFFINE is not)."""
    return op != "AFFINE"


# --------------------------------------------------------------------------------------------
# inputs


def _hash(key: int, n: int, salt: int = 0) -> np.ndarray:
    """Deterministic pseudo-random non-negative int64 per index, depending on (key, salt)."""
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(key + 1) * np.uint64(40503)
         + np.uint64(salt) * np.uint64(97)) % np.uint64(2**31 - 1)
    h = (h * np.uint64(48271)) % np.uint64(2**31 - 1)
    return (h ^ (h >> np.uint64(7))).astype(np.int64)


def values(key: int, n: int, dtype: str) -> np.ndarray:
    """Data-movement payload: distinct per (key, index) for index < 2**17 and key < 128."""
    dt = np_dtype(dtype)
    idx = np.arange(n, dtype=np.int64)
    base = key * 2**17 + idx
    if is_pair(dtype):
        out = np.zeros(n, dtype=dt)
        v, i = pair_fields(dt)
        out[v] = base
        out[i] = (key * 7 + idx) % 1000
        return out
    if dt == np.bool_:
        return (_hash(key, n, 5) % 2).astype(bool)
    if dt.kind == "c":
        return (base + 0.5 + 1j * (key - idx)).astype(dt)
    if dt.kind == "f":
        return (base + 0.5).astype(dt)
    if dt.kind == "u" or dt.itemsize == 1:
        return (_hash(key, n, 3) % 100 + key).astype(dt)
    return base.astype(dt)


def inputs(rank: int, count: int, dtype: str, op: str | None = None, salt: int = 0) -> np.ndarray:
    """Input vector of ``count`` elements of ``rank`` for reduction ``op`` (None: data movement).

    The value range depends on the op so that every reduction over <= 8 ranks is exact.
    """
    if op is None:
        return values(rank, count, dtype)
    dt = np_dtype(dtype)
    h = _hash(rank, count, salt + 11)
    if op in ("MAXLOC", "MINLOC"):
        if not is_pair(dtype):
            raise ValueError(f"{op} needs a pair type, not {dtype}")
        out = np.zeros(count, dtype=dt)
        v, i = pair_fields(dt)
        out[v] = h % 4 - 1          # few distinct values: many ties
        out[i] = (h // 4) % 9       # index, not the rank: ties resolved by the lowest index
        return out
    if op == "AFFINE":
        a = h % (AFFINE_MOD - 1) + 1
        b = _hash(rank, count, salt + 12) % AFFINE_MOD
        return ((a << 31) | b).astype(dt)
    if op == "SUM":
        if dt.kind == "c":
            return (h % 19 - 9 + 1j * ((h // 19) % 19 - 9)).astype(dt)
        return (h % 19 - 9).astype(dt)
    if op == "PROD":
        if dt.kind == "c":
            return np.array([1, 2, -1, 1j], dtype=dt)[h % 4]
        return (h % 2 + 1).astype(dt)
    if op in ("MAX", "MIN"):
        return (h % 201 - 100).astype(dt)
    if op in ("LAND", "LOR", "LXOR"):
        # LAND: mostly true, LOR: mostly false, so both outcomes occur with 5 ranks
        p_true = {"LAND": 0.8, "LOR": 0.2, "LXOR": 0.5}[op]
        truth = (h % 1000) < p_true * 1000
        if dt == np.bool_:
            return truth
        return np.where(truth, 3, 0).astype(dt)   # 3: "non-zero is true"
    if op in ("BAND", "BOR", "BXOR"):
        bits = (np.int64(1) << (h % 16)) | (np.int64(1) << ((h // 16) % 16))
        if op == "BAND":
            return (~bits & 0xFFFF).astype(dt)
        if op == "BOR":
            return bits.astype(dt)
        return (h & 0xFFFF).astype(dt)
    raise ValueError(f"unknown op {op!r}")


def garbage(n: int, dtype: str) -> np.ndarray:
    """A recognisable fill for receive buffers, distinct from every value of :func:`inputs`."""
    dt = np_dtype(dtype)
    idx = np.arange(n, dtype=np.int64)
    if is_pair(dtype):
        out = np.zeros(n, dtype=dt)
        v, i = pair_fields(dt)
        out[v] = -1000 - idx
        out[i] = -1
        return out
    if dt == np.bool_:
        return idx % 3 == 1
    if dt.kind == "c":
        return (-1000.25 - idx - 77j).astype(dt)
    if dt.kind == "f":
        return (-1000.25 - idx).astype(dt)
    if dt.kind == "u":
        return np.full(n, 251, dtype=dt)
    return (-1000 - idx % 100).astype(dt)


# --------------------------------------------------------------------------------------------
# reductions


def _logical(fn: Callable[[Any, Any], np.ndarray]) -> Callable[[np.ndarray, np.ndarray],
                                                                 np.ndarray]:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a != 0, b != 0).astype(a.dtype)
    return f


def _loc(pick_greater: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        v, i = pair_fields(a.dtype)
        out = a.copy()
        better = b[v] > a[v] if pick_greater else b[v] < a[v]
        tie = b[v] == a[v]
        out[better] = b[better]
        out[i][tie] = np.minimum(a[i][tie], b[i][tie])
        return out
    return f


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "SUM": lambda a, b: (a + b).astype(a.dtype),
    "PROD": lambda a, b: (a * b).astype(a.dtype),
    "MAX": np.maximum,
    "MIN": np.minimum,
    "LAND": _logical(np.logical_and),
    "LOR": _logical(np.logical_or),
    "LXOR": _logical(np.logical_xor),
    "BAND": np.bitwise_and,
    "BOR": np.bitwise_or,
    "BXOR": np.bitwise_xor,
    "MAXLOC": _loc(True),
    "MINLOC": _loc(False),
    "AFFINE": affine_compose,
}


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b`` elementwise, ``a`` from the lower rank (matters for AFFINE only)."""
    out = _BINARY[op](a, b)
    return np.asarray(out).astype(a.dtype, copy=False)


def reference_reduce(op: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Fold ``arrays`` (one per rank, rank order) with ``op``: arrays[0] op arrays[1] op ...."""
    if not arrays:
        raise ValueError("nothing to reduce")
    acc = np.array(arrays[0], copy=True)
    for x in arrays[1:]:
        acc = combine(op, acc, x)
    return acc


def reference_scan(op: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inclusive prefix reductions: result[r] = arrays[0] op ... op arrays[r]."""
    out = []
    acc = None
    for x in arrays:
        acc = np.array(x, copy=True) if acc is None else combine(op, acc, x)
        out.append(acc)
    return out


def reference_exscan(op: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """Exclusive prefix reductions: result[0] is None (undefined in MPI), result[r] = scan[r-1]."""
    inc = reference_scan(op, arrays)
    return [None, *inc[:-1]]


# --------------------------------------------------------------------------------------------
# v-variant layouts


def vcounts(p: int, layout: int) -> list[int]:
    """Per-rank counts for v-variants; the layouts include zeros, one big block, all zeros."""
    if layout == 0:
        return [(3 * r + 1) % 5 for r in range(p)]          # 1, 4, 2, 0, 3, ...
    if layout == 1:
        return [0] * (p - 1) + [6]                          # only the last rank has data
    if layout == 2:
        return [r % 2 * 3 + (r == 0) for r in range(p)]     # 1, 3, 0, 3, 0, ...
    if layout == 3:
        return [0] * p                                      # nothing at all
    if layout == 4:
        return [4] * p                                      # uniform
    return [7 - r % 7 for r in range(p)]


def vdispls(counts: Sequence[int], order: str = "reverse", gap: int = 2) -> tuple[list[int], int]:
    """Displacements for ``counts`` with ``gap`` unused elements before every block.

    ``order``: "rank" (block 0 first), "reverse" (block P-1 first) or "shuffle" (the odd
    ranks' blocks first, then the even ranks').  Returns (displs, buffer length).  Elements
    not covered by any block are gaps.
    """
    p = len(counts)
    if order == "rank":
        perm = list(range(p))
    elif order == "reverse":
        perm = list(range(p))[::-1]
    else:
        perm = list(range(1, p, 2)) + list(range(0, p, 2))   # odd ranks first
    displs = [0] * p
    pos = gap
    for r in perm:
        displs[r] = pos
        pos += counts[r] + gap
    return displs, pos


def gap_mask(length: int, counts: Sequence[int], displs: Sequence[int]) -> np.ndarray:
    """Boolean mask of the elements of a length-``length`` buffer covered by no block."""
    mask = np.ones(length, dtype=bool)
    for c, d in zip(counts, displs, strict=True):
        mask[d:d + c] = False
    return mask


def alltoallv_matrix(p: int, layout: int) -> np.ndarray:
    """C[i, j] = elements rank i sends to rank j (zeros included); layout 2 is symmetric."""
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    if layout == 0:
        return (i * 2 + j * 3 + 1) % 4
    if layout == 1:
        return np.where(j == (i + 1) % p, 5, 0)
    return (i + j) % 3 + (i == j)                           # symmetric: usable in place


# --------------------------------------------------------------------------------------------
# comparison


def first_difference(got: np.ndarray, want: np.ndarray) -> int | None:
    """Index of the first element where ``got`` and ``want`` differ (None if they are equal).

    Exact comparison, field by field for structured dtypes; shapes must match (-1 if not).
    """
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return -1
    if got.dtype.names:
        bad = np.zeros(got.shape, dtype=bool)
        for f in got.dtype.names:
            bad |= got[f] != want[f]
    else:
        bad = got != want
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def describe_difference(got: np.ndarray, want: np.ndarray) -> str | None:
    """None if equal, else a short description (first differing index and values)."""
    k = first_difference(got, want)
    if k is None:
        return None
    if k == -1:
        return f"shape {np.shape(got)} != expected {np.shape(want)}"
    return (f"first differing index {k}: got {got.flat[k]!r}, expected {want.flat[k]!r} "
            f"({int(np.count_nonzero(_neq(got, want)))} of {want.size} differ)")


def _neq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.names:
        bad = np.zeros(a.shape, dtype=bool)
        for f in a.dtype.names:
            bad |= a[f] != b[f]
        return bad
    return a != b
