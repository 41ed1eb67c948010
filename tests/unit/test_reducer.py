"""The local reduction of every engine (``Context.reducer``): numpy's loop only where it gives
this MPI library's ``MPI_Reduce_local`` result bit for bit, MPI's own everywhere else.

For every candidate (dtype, op) of ``mpicoll.algorithms.schedule.UFUNCS`` the library is asked
once (``numpy_reduction``); a candidate it accepts must then agree bit for bit on other values
(edge pairs, integer overflow, NaN payloads, subnormals, random); floating MAX, whose NaN rule
differs between C's ``a > b ? a : b`` and numpy's, must be refused; calls below
``UFUNC_BYTES``, derived datatypes, user ops, complex and logical ops go to ``Reduce_local``; the
numpy path raises and warns about nothing, as MPI does.  Run under both libraries (``make test``
and ``make MPI=openmpi test``): the library's own ``Reduce_local`` is the reference.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms.schedule import UFUNC_BYTES, UFUNCS, Context, numpy_reduction

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
        bits = np.dtype(f"u{dtype.itemsize}")
        nans = np.array([0x7FC00003, 0xFFC00004] if dtype.itemsize == 4 else
                        [0x7FF8000000000003, 0xFFF8000000000004], bits).view(dtype)
        info = np.finfo(dtype)
        edge = np.concatenate([np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max,
                                         info.tiny / 4, -1.5], dtype=dtype), nans])
        body = (rng.standard_normal(n) * rng.choice([1e-30, 1.0, 1e30], n)).astype(dtype)
    return np.concatenate([np.tile(edge, 7), body])


def _cases() -> list[object]:
    return [pytest.param(dt, name, id=f"{dt}-{name}") for dt in _TYPES for name in _OPS
            if (dt.kind, dt.itemsize, _OPS[name].handle) in UFUNCS]


@pytest.mark.parametrize(("dtype", "name"), _cases())
def test_an_accepted_numpy_loop_gives_reduce_local_bit_for_bit(dtype: np.dtype,
                                                                name: str) -> None:
    op, mpitype = _OPS[name], _TYPES[dtype]
    n = UFUNC_BYTES // dtype.itemsize + 3
    a = _values(dtype, n, 1)
    b = _values(dtype, n, 2)[::-1].copy()  # edge values meet each other and the body
    fn, x, y = Context(0, 1, mpitype, dtype).reducer(a, b, op)
    want = b.copy()
    op.Reduce_local([a, mpitype], [want, mpitype])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the numpy path warns about nothing
        with np.errstate(all="raise"):  # ... and raises nothing, whatever the user's setting
            fn(x, y)
    assert y is b or y[0] is b  # numpy's (b itself) or MPI's ([b, n, datatype])
    assert b.tobytes() == want.tobytes(), (dtype, name, fn)
    assert (fn == op.Reduce_local) == (numpy_reduction(mpitype, dtype, op) is None)


def test_the_pairs_left_out_go_to_reduce_local() -> None:
    """Floating MAX (NaN), complex, logical ops, small calls, user ops and derived datatypes:
    MPI's own."""
    n = UFUNC_BYTES // 8 + 1
    f = np.tile([np.nan, 1.0, -0.0], n)
    g = np.tile([1.0, np.nan, 0.0], n)
    assert numpy_reduction(MPI.DOUBLE, np.dtype(np.float64), MPI.MAX) is None
    for op in (MPI.MAX, MPI.LAND):
        fn, _, _ = Context(0, 1, MPI.DOUBLE, np.dtype(np.float64)).reducer(f, g, op)
        assert fn == op.Reduce_local
    few = np.ones(UFUNC_BYTES // 8 - 1)  # below UFUNC_BYTES: MPI's (numpy's call costs more)
    fn, _, _ = Context(0, 1, MPI.DOUBLE, few.dtype).reducer(few, few.copy(), MPI.SUM)
    assert fn == MPI.SUM.Reduce_local
    z = np.ones(n, np.complex128)
    fn, _, _ = Context(0, 1, MPI.C_DOUBLE_COMPLEX, z.dtype).reducer(z, z.copy(), MPI.PROD)
    assert fn == MPI.PROD.Reduce_local
    user = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        i = np.ones(n, np.int64)
        fn, _, _ = Context(0, 1, MPI.INT64_T, i.dtype).reducer(i, i.copy(), user)
        assert fn == user.Reduce_local
    finally:
        user.Free()
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        d = np.ones(2 * n)
        fn, _, _ = Context(0, 1, pair, np.dtype((np.void, 16))).reducer(d, d.copy(), MPI.SUM)
        assert fn == MPI.SUM.Reduce_local
    finally:
        pair.Free()
    # numpy's MAX is not C's on NaN: the reason the library's answer is asked
    want = g.copy()
    MPI.MAX.Reduce_local(f, want)
    assert np.maximum(f, g).tobytes() != want.tobytes()


def test_float64_sum_takes_numpy_loop() -> None:
    """The case the speed-up is for: both libraries' float64 SUM agrees with numpy's add in
    one operand order (each returns the in-out operand's NaN)."""
    assert numpy_reduction(MPI.DOUBLE, np.dtype(np.float64), MPI.SUM) is not None
