"""The tests' NumPy oracle: inputs, the exact result of every collective, comparisons.

One oracle for both suites (``import oracle``: ``tests/`` is on ``sys.path`` through
``tests/conftest.py``): the MPI tests (``tests/mpi``) and the simulator tests (``tests/unit``)
compute what every rank must see with :func:`expected`, and ``tests/unit/test_reference.py``
checks the oracle itself against hand-worked cases and MPI's local reduction.  It imports
nothing from ``mpicoll`` (an oracle that shares the package's code would share its bugs).

Nothing in here communicates.  :func:`expected` takes every rank's arguments of one collective
call as mpi4py takes them (``Allgatherv(sendbuf, [recvbuf, (counts, displs), type])`` ...) and
returns, per rank, the exact content its output buffer must hold afterwards: the whole array,
receive blocks written, gaps and elements past the count as they were; reductions folded in rank
order (rank 0's operand leftmost), as MPI requires for non-commutative ops.

Every input is a deterministic function of (rank, index) (or of a small integer *key* and the
index), so each rank can compute every other rank's input, and from them the exact expected
output of any collective, locally.

Values are chosen so that every reduction is exact in every dtype the tests use:

* ``SUM``: integers in [-9, 9] (complex: both parts), so even 5 ranks x float32 stay exact;
* ``PROD``: values in {1, 2} (ints and floats) or {1, 2, -1, 1j} (complex): |product| <= 2**P;
* ``MAX``/``MIN``: integers in [-100, 100];
* logical ops: 0/1 patterns (and 0/3 for ints, to check "non-zero is true");
* bitwise ops: 16-bit patterns;
* ``MAXLOC``/``MINLOC``: (value, index) pairs with many ties, ties resolved by the lowest index;
* ``AFFINE``: a user-defined, associative, NON-commutative op (composition of affine maps
  ``x -> a*x + b`` modulo the prime 2**31 - 1, packed in one int64); the oracle folds in rank
  order, rank 0's operand leftmost, as MPI requires.

Data-movement collectives use :func:`values`: ``key * 2**17 + index`` (plus a fraction/imaginary
part where the dtype has one), unique per (key, index) for indices < 2**17, exact in float32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
#: user ops made by :func:`user_op` (and AFFINE), with the NumPy function the oracle folds with
_USER_FUNCS: list[tuple[MPI.Op, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = []


def mpi_op(name: str) -> MPI.Op:
    """The MPI op for an op name ("SUM", "MAXLOC", ..., or "AFFINE", the user op)."""
    if name == "AFFINE":
        if "AFFINE" not in _USER_OPS:
            _USER_OPS["AFFINE"] = MPI.Op.Create(_affine_mpi, commute=False)
            _USER_FUNCS.append((_USER_OPS["AFFINE"], affine_compose))
        return _USER_OPS["AFFINE"]
    return getattr(MPI, name)


def user_op(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], dtype: Any,
            commute: bool = False) -> MPI.Op:
    """An MPI user op computing ``fn(a, b)`` (``a`` from the lower rank) on arrays of ``dtype``;
    :func:`expected` folds with ``fn`` itself wherever this op is passed."""
    dt = np.dtype(dtype)

    def apply(inbuf: Any, inoutbuf: Any, datatype: MPI.Datatype) -> None:
        a = np.frombuffer(inbuf, dtype=dt)
        b = np.frombuffer(inoutbuf, dtype=dt)
        b[...] = fn(a, b)

    op = MPI.Op.Create(apply, commute=commute)
    _USER_FUNCS.append((op, fn))
    return op


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
    return fold(op, arrays)


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


def op_function(op: str | MPI.Op) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``combine``'s function for an op name, a predefined ``MPI.Op`` or a user op made here
    (:func:`mpi_op`, :func:`user_op`)."""
    if isinstance(op, str):
        return lambda a, b: combine(op, a, b)
    for name in _BINARY:
        if name != "AFFINE" and op == getattr(MPI, name):
            return lambda a, b, name=name: combine(name, a, b)
    for user, fn in _USER_FUNCS:
        if op == user:
            return lambda a, b: np.asarray(fn(a, b)).astype(a.dtype, copy=False)
    raise TypeError(f"the oracle does not know the op {op!r} (make user ops with user_op)")


def fold(op: str | MPI.Op, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """arrays[0] op arrays[1] op ... in rank order (``op`` as :func:`op_function` takes it)."""
    if not arrays:
        raise ValueError("nothing to reduce")
    fn = op_function(op)
    acc = np.array(arrays[0], copy=True)
    for x in arrays[1:]:
        acc = fn(acc, x)
    return acc


# --------------------------------------------------------------------------------------------
# the expected result of one collective call, from every rank's mpi4py-style arguments

#: mpi4py's positional parameters of each collective (``Reduce(sendbuf, recvbuf, op, root)``)
SIGNATURES: dict[str, tuple[str, ...]] = {
    "bcast": ("buf", "root"),
    "scatter": ("sendbuf", "recvbuf", "root"),
    "scatterv": ("sendbuf", "recvbuf", "root"),
    "gather": ("sendbuf", "recvbuf", "root"),
    "gatherv": ("sendbuf", "recvbuf", "root"),
    "reduce": ("sendbuf", "recvbuf", "op", "root"),
    "allreduce": ("sendbuf", "recvbuf", "op"),
    "scan": ("sendbuf", "recvbuf", "op"),
    "exscan": ("sendbuf", "recvbuf", "op"),
    "reduce_scatter_block": ("sendbuf", "recvbuf", "op"),
    "reduce_scatter": ("sendbuf", "recvbuf", "recvcounts", "op"),
    "allgather": ("sendbuf", "recvbuf"),
    "allgatherv": ("sendbuf", "recvbuf"),
    "alltoall": ("sendbuf", "recvbuf"),
    "alltoallv": ("sendbuf", "recvbuf"),
    "alltoallw": ("sendbuf", "recvbuf"),
}
_DEFAULTS: dict[str, Any] = {"root": 0, "op": MPI.SUM, "recvcounts": None}


@dataclass(frozen=True)
class Expected:
    """What one rank's output buffer must hold after the call.

    ``arg``: which argument it is ("buf", "recvbuf", or "sendbuf" for the root of an in-place
    Scatter, whose send buffer MPI leaves as it was); ``values``: the whole array, same shape
    and dtype as the one passed, its receive blocks written, its gaps and the elements past
    the count as they were before the call; ``defined``: where MPI defines the content (None:
    everywhere; an in-place Reduce_scatter leaves the input area past the rank's block
    undefined, Exscan rank 0's whole block).
    """

    arg: str
    values: np.ndarray
    defined: np.ndarray | None = None


class _Buf:
    """A buffer argument read the way mpi4py reads it: a flat copy and its blocks."""

    def __init__(self, spec: Any, blocks: int, vector: bool, what: str, w: bool = False) -> None:
        if isinstance(spec, np.ndarray):
            arr, rest = spec, []
        elif isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], np.ndarray):
            arr, rest = spec[0], list(spec[1:])
        else:
            raise TypeError(f"{what}: not a buffer specification: {spec!r}")
        types: list[Any] = []
        if w:  # Alltoallw: [arr, (counts, byte displs), types] or [arr, counts, displs, types]
            if not rest or not isinstance(rest[-1], (list, tuple)):
                raise ValueError(f"{what}: an Alltoallw buffer needs a datatype per rank")
            types, rest = list(rest[-1]), rest[:-1]
        elif rest and isinstance(rest[-1], MPI.Datatype):
            rest = rest[:-1]
        self.what, self.shape = what, arr.shape
        self.flat = np.array(arr, copy=True).reshape(-1)
        size = self.flat.size
        if vector:
            if len(rest) == 1 and isinstance(rest[0], tuple) and len(rest[0]) == 2 \
                    and not isinstance(rest[0][0], (int, np.integer)):
                counts, displs = rest[0]
            elif len(rest) == 1:
                counts, displs = rest[0], None
            elif len(rest) == 2:
                counts, displs = rest
            else:
                raise ValueError(f"{what}: a v-collective's buffer needs its counts")
            self.counts = [int(c) for c in counts]
            if displs is None:
                displs = np.cumsum([0, *self.counts[:-1]]).tolist()
            if w:  # byte displacements; only predefined types of the array's own item size
                item = arr.dtype.itemsize
                for t in types:
                    named = t.is_predefined or t.combiner == MPI.COMBINER_DUP  # dtlib's dup
                    if not named or t.Get_extent() != (0, item):
                        raise TypeError(f"{what}: the oracle models Alltoallw with predefined "
                                        f"datatypes (or their duplicates) of the array's item "
                                        f"size ({item} bytes) only")
                if any(int(d) % item for d in displs):
                    raise ValueError(f"{what}: byte displacements {list(displs)} are not whole "
                                     f"elements of {item} bytes")
                displs = [int(d) // item for d in displs]
            self.displs = [int(d) for d in displs]
            if len(self.counts) != blocks or len(self.displs) != blocks:
                raise ValueError(f"{what}: {len(self.counts)} counts for {blocks} ranks")
        else:
            n = int(rest[0]) if rest else size // blocks   # mpi4py: the count of ONE block
            self.counts = [n] * blocks
            self.displs = [j * n for j in range(blocks)]
        for c, d in zip(self.counts, self.displs, strict=True):
            if c < 0 or d < 0 or d + c > size:
                raise ValueError(f"{what}: block [{d}, {d + c}) outside the {size} elements")

    def block(self, j: int) -> np.ndarray:
        return self.flat[self.displs[j]:self.displs[j] + self.counts[j]].copy()

    def write(self, j: int, data: np.ndarray) -> None:
        if data.size != self.counts[j]:
            raise ValueError(f"{self.what}: block {j} holds {self.counts[j]} elements, the "
                             f"call sends {data.size}")
        if data.dtype != self.flat.dtype:
            raise TypeError(f"{self.what}: {self.flat.dtype} receives {data.dtype}")
        self.flat[self.displs[j]:self.displs[j] + self.counts[j]] = data

    def result(self, arg: str, undefined: tuple[int, int] | None = None) -> Expected:
        defined = None
        if undefined is not None:
            mask = np.ones(self.flat.size, dtype=bool)
            mask[undefined[0]:undefined[1]] = False
            defined = mask.reshape(self.shape)
        return Expected(arg, self.flat.reshape(self.shape), defined)


def _in_place(x: Any) -> bool:
    return x is MPI.IN_PLACE


def _bind(coll: str, args: Sequence[Any], kw: Mapping[str, Any]) -> dict[str, Any]:
    names = SIGNATURES[coll]
    if len(args) > len(names):
        raise TypeError(f"{coll} takes {len(names)} positional arguments, not {len(args)}")
    bad = set(kw) - set(names)
    if bad:
        raise TypeError(f"{coll} has no argument {sorted(bad)}")
    bound = {k: v for k, v in _DEFAULTS.items() if k in names}
    bound.update(zip(names, args, strict=False))
    bound.update(kw)
    return bound


def expected(coll: str, args: Sequence[Sequence[Any]],
             kwargs: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
             ) -> list[Expected | None]:
    """What every rank's output buffer must hold after one call of ``coll``.

    ``args[r]``: rank r's positional arguments, as mpi4py's method takes them (buffers as
    arrays or ``[array, type]``, ``[array, count, type]`` (the count of one block where the
    buffer holds one block per rank), ``[array, counts, type]``, ``[array, (counts, displs),
    type]``; Alltoallw's ``[array, (counts, byte displs), types]`` and ``[array, counts,
    byte displs, types]``, of predefined types of the array's item size; ``MPI.IN_PLACE``;
    None where MPI ignores the argument); ``kwargs``: rank r's
    keywords (``root``, ``op``, ``recvcounts``), or one mapping for every rank.  ``op``: an
    ``MPI.Op`` (predefined, or made by :func:`mpi_op`/:func:`user_op`) or an op name.

    Returns one :class:`Expected` per rank, None where the call has no output (non-roots of
    Gather/Reduce).  Raises ValueError/TypeError for a call MPI would reject (counts that do
    not match between ranks, roots or ops that differ).  The arguments are not modified.
    """
    p = len(args)
    kws = [kwargs if isinstance(kwargs, Mapping) else kwargs[r] for r in range(p)] \
        if kwargs is not None else [{}] * p
    b = [_bind(coll, args[r], kws[r]) for r in range(p)]
    for key in ("root", "op"):
        if key in b[0] and any(not (x[key] == b[0][key]) for x in b):
            raise ValueError(f"{coll}: the ranks pass different {key}s")
    root = b[0].get("root", 0)
    if not 0 <= root < p:
        raise ValueError(f"{coll}: root {root} outside [0, {p})")
    vector = coll.endswith("v")
    out: list[Expected | None] = [None] * p

    w = coll == "alltoallw"  # a v-collective with byte displacements and a datatype per rank

    def recv(q: int, blocks: int = 1, v: bool = False) -> _Buf:
        return _Buf(b[q]["recvbuf"], blocks, v or w, f"rank {q}'s recvbuf", w)

    def send(q: int, blocks: int = 1, v: bool = False) -> _Buf:
        return _Buf(b[q]["sendbuf"], blocks, v or w, f"rank {q}'s sendbuf", w)

    if coll == "bcast":
        data = _Buf(b[root]["buf"], 1, False, f"root {root}'s buf").block(0)
        for q in range(p):
            buf = _Buf(b[q]["buf"], 1, False, f"rank {q}'s buf")
            buf.write(0, data)
            out[q] = buf.result("buf")
    elif coll in ("scatter", "scatterv"):
        s = send(root, p, vector)
        for q in range(p):
            if q == root and _in_place(b[q]["recvbuf"]):
                out[q] = s.result("sendbuf")
                continue
            r = recv(q)
            r.write(0, s.block(q))
            out[q] = r.result("recvbuf")
    elif coll in ("gather", "gatherv", "allgather", "allgatherv"):
        rooted = coll.startswith("gather")
        blocks = []
        for j in range(p):
            if _in_place(b[j]["sendbuf"]):
                if rooted and j != root:
                    raise ValueError(f"{coll}: IN_PLACE at rank {j}, not the root")
                blocks.append(recv(j, p, vector).block(j))
            else:
                blocks.append(send(j).block(0))
        for q in (root,) if rooted else range(p):
            r = recv(q, p, vector)
            for j in range(p):
                r.write(j, blocks[j])
            out[q] = r.result("recvbuf")
    elif coll in ("alltoall", "alltoallv", "alltoallw"):
        sends = [recv(j, p, vector) if _in_place(b[j]["sendbuf"]) else send(j, p, vector)
                 for j in range(p)]
        for q in range(p):
            r = recv(q, p, vector)
            for j in range(p):
                r.write(j, sends[j].block(q))
            out[q] = r.result("recvbuf")
    elif coll in ("reduce", "allreduce", "scan", "exscan"):
        xs = []
        for q in range(p):
            if _in_place(b[q]["sendbuf"]):
                if coll == "reduce" and q != root:
                    raise ValueError(f"reduce: IN_PLACE at rank {q}, not the root")
                xs.append(recv(q).block(0))
            else:
                xs.append(send(q).block(0))
        op = b[0]["op"]
        for q in (root,) if coll == "reduce" else range(p):
            r = recv(q)
            if coll == "exscan" and q == 0:   # MPI leaves rank 0's result undefined
                out[q] = r.result("recvbuf", undefined=(r.displs[0], r.displs[0] + r.counts[0]))
                continue
            part = xs[:q + 1] if coll == "scan" else xs[:q] if coll == "exscan" else xs
            r.write(0, fold(op, part))
            out[q] = r.result("recvbuf")
    elif coll in ("reduce_scatter_block", "reduce_scatter"):
        in_place = [_in_place(x["sendbuf"]) for x in b]
        xs = [recv(q) if in_place[q] else send(q) for q in range(p)]
        total = fold(b[0]["op"], [x.block(0) for x in xs])
        if coll == "reduce_scatter_block":
            n = total.size // p if in_place[0] else recv(0).counts[0]
            counts = [n] * p
        elif b[0]["recvcounts"] is not None:
            counts = [int(c) for c in b[0]["recvcounts"]]
        elif any(in_place):
            raise ValueError("reduce_scatter: IN_PLACE needs recvcounts")
        else:
            counts = [recv(q).counts[0] for q in range(p)]
        if sum(counts) != total.size:
            raise ValueError(f"{coll}: the counts {counts} add up to {sum(counts)}, the send "
                             f"buffers hold {total.size}")
        offs = np.cumsum([0, *counts]).tolist()
        for q in range(p):
            r = recv(q)
            if counts[q] > r.counts[0]:
                raise ValueError(f"{coll}: rank {q}'s recvbuf holds {r.counts[0]} elements, "
                                 f"its recvcount is {counts[q]}")
            r.flat[:counts[q]] = total[offs[q]:offs[q + 1]]   # the first counts[q] elements
            # in place, the rest of the input area is undefined; else it is left as it was
            out[q] = r.result("recvbuf", undefined=(counts[q], total.size) if in_place[q]
                              else None)
    else:
        raise ValueError(f"unknown collective {coll!r}")
    return out


def difference(got: np.ndarray, want: Expected) -> str | None:
    """None if ``got`` holds what ``want`` says wherever MPI defines it, else a description."""
    got = np.asarray(got)
    if want.defined is None or got.shape != want.values.shape:
        return describe_difference(got, want.values)
    seen = got.copy()
    seen[~want.defined] = want.values[~want.defined]
    return describe_difference(seen, want.values)


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
