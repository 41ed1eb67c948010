"""Deterministic inputs of the cases and their exact reduction (the expected values).

Inputs are small integers (stored in the case's dtype, floats included), so every reduction is
exact whatever order an algorithm adds in: outputs are compared for equality, never with a
tolerance.  :func:`data_input` is a non-reduction input, :func:`reduction_input` one suited to
an op, :func:`reduce_stack` reduces every rank's input as MPI defines the op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import concat_digits

__all__ = ["data_input", "reduce_stack", "reduction_input"]


def data_input(rank: int, n: int, dt: np.dtype[Any]) -> np.ndarray[Any, Any]:
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


def reduction_input(
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


def reduce_stack(op: str, stack: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
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
            acc = concat_digits(acc, row).astype(dt)
        return acc
    raise ValueError(f"unknown op {op!r}")
