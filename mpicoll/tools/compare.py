"""Exact comparison of an output with its reference: the first differing element, or None."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Mismatch", "compare"]


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
