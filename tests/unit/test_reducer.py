"""The local reduction of every engine (``Context.reducer``): numpy's loop exactly where it
gives ``MPI_Reduce_local``'s result bit for bit, MPI's own everywhere else.

For every (dtype, op) of ``mpicoll.algorithms.schedule.UFUNCS`` the two agree bit for bit on
values that stress them (integer overflow, signed zeros, infinities, NaN, subnormals); the
pairs left out are routed to ``Reduce_local`` (floating MAX/MIN, where numpy's NaN rule is not
C's, complex products, logical ops, 8- and 16-bit integers, derived datatypes, user ops).  Run
under both MPI libraries (``make test`` and ``make MPI=openmpi test``): the library's own
``Reduce_local`` is the reference.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms.schedule import UFUNC_BYTES, UFUNCS, Context

_TYPES = {np.dtype(t): MPI._typedict[np.dtype(t).char]
          for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                    np.uint64, np.float32, np.float64)}
_OPS = {"SUM": MPI.SUM, "PROD": MPI.PROD, "MAX": MPI.MAX, "MIN": MPI.MIN, "BAND": MPI.BAND,
        "BOR": MPI.BOR, "BXOR": MPI.BXOR}


def _values(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        edge = np.array([info.min, info.max, 0, 1, info.max // 2 + 1], dtype=dtype)
        body = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
    else:
        info = np.finfo(dtype)
        edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, info.tiny / 4, -1.5],
                        dtype=dtype)
        body = (rng.standard_normal(n) * rng.choice([1e-30, 1.0, 1e30], n)).astype(dtype)
    return np.concatenate([np.tile(edge, 3), body])


def _cases() -> list[object]:
    return [pytest.param(dt, name, id=f"{dt}-{name}") for dt in _TYPES for name in _OPS
            if (dt.kind, dt.itemsize, _OPS[name].handle) in UFUNCS]


@pytest.mark.parametrize(("dtype", "name"), _cases())
def test_numpy_loop_gives_reduce_local_bit_for_bit(dtype: np.dtype, name: str) -> None:
    op, mpitype = _OPS[name], _TYPES[dtype]
    ctx = Context(0, 1, mpitype, dtype)
    a = _values(dtype, 997, 1)
    b = _values(dtype, 997, 2)[::-1].copy()  # edge values meet each other and the body
    fn, x, y = ctx.reducer(a, b, op)
    assert isinstance(fn, partial)  # numpy's loop was chosen
    want = b.copy()
    op.Reduce_local([a, mpitype], [want, mpitype])
    with np.errstate(all="ignore"):
        fn(x, y)
    assert y is b
    assert b.tobytes() == want.tobytes(), (dtype, name)


def test_the_pairs_left_out_go_to_reduce_local() -> None:
    """Floating MAX/MIN, complex, logical ops, user ops and derived datatypes: MPI's own."""
    f = np.tile([np.nan, 1.0, -0.0], 64)  # past UFUNC_BYTES
    g = np.tile([1.0, np.nan, 0.0], 64)
    for op in (MPI.MAX, MPI.MIN, MPI.LAND):
        fn, _, _ = Context(0, 1, MPI.DOUBLE, np.dtype(np.float64)).reducer(f, g, op)
        assert fn == op.Reduce_local
    small = np.ones(UFUNC_BYTES, np.int16)
    fn, _, _ = Context(0, 1, MPI.INT16_T, small.dtype).reducer(small, small.copy(), MPI.SUM)
    assert fn == MPI.SUM.Reduce_local
    few = np.ones(UFUNC_BYTES // 8 - 1)  # below UFUNC_BYTES: MPI's (numpy's call costs more)
    fn, _, _ = Context(0, 1, MPI.DOUBLE, few.dtype).reducer(few, few.copy(), MPI.SUM)
    assert fn == MPI.SUM.Reduce_local
    z = np.ones(UFUNC_BYTES, np.complex128)
    fn, _, _ = Context(0, 1, MPI.C_DOUBLE_COMPLEX, z.dtype).reducer(z, z.copy(), MPI.PROD)
    assert fn == MPI.PROD.Reduce_local
    user = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        i = np.ones(UFUNC_BYTES, np.int64)
        fn, _, _ = Context(0, 1, MPI.INT64_T, i.dtype).reducer(i, i.copy(), user)
        assert fn == user.Reduce_local
    finally:
        user.Free()
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        d = np.ones(UFUNC_BYTES)
        fn, _, _ = Context(0, 1, pair, np.dtype((np.void, 16))).reducer(d, d.copy(), MPI.SUM)
        assert fn == MPI.SUM.Reduce_local
    finally:
        pair.Free()
    # numpy's MAX is not C's on NaN: the reason floating MAX is left out
    want = g.copy()
    MPI.MAX.Reduce_local(f, want)
    assert np.maximum(f, g).tobytes() != want.tobytes()
