"""The NumPy reference of the MPI tests (tests/mpi/_reference.py), checked on its own.

Single process: the reference's reductions are compared with MPI's own local reduction
(``op.Reduce_local``, no communication) on the very inputs the MPI tests use, so a wrong
reference (MAXLOC ties, logical ops on integers, the user op's order) cannot hide a bug in
the collectives or report a false one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
import _reference as ref

#: every (dtype, op) pair the MPI tests use
PAIRS = [
    (d, o)
    for d, ops in {
        "int32": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"],
        "int64": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
                  "AFFINE"],
        "float32": ["SUM", "PROD", "MAX", "MIN"],
        "float64": ["SUM", "PROD", "MAX", "MIN"],
        "complex128": ["SUM", "PROD"],
        "bool": ["LAND", "LOR", "LXOR"],
        "double_int": ["MAXLOC", "MINLOC"],
        "2int": ["MAXLOC", "MINLOC"],
    }.items()
    for o in ops
]


def _mpi_fold(op: str, arrays: list[np.ndarray], dtype: str) -> np.ndarray:
    """arrays[0] op arrays[1] op ... with MPI's Reduce_local (inoutbuf = inbuf op inoutbuf),
    folding from the right so the left operand is always the lower rank."""
    mt = ref.mpi_type(dtype)
    acc = arrays[-1].copy()
    for x in reversed(arrays[:-1]):
        ref.mpi_op(op).Reduce_local([x, mt], [acc, mt])
    return acc


@pytest.mark.parametrize(("dtype", "op"), PAIRS, ids=[f"{d}-{o}" for d, o in PAIRS])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_reference_reduce_equals_mpi_reduce_local(dtype: str, op: str, p: int) -> None:
    """The reference fold equals MPI's own reduction, element for element, bit for bit."""
    n = 257
    arrays = [ref.inputs(r, n, dtype, op) for r in range(p)]
    want = _mpi_fold(op, arrays, dtype)
    got = ref.reference_reduce(op, arrays)
    assert got.dtype == want.dtype
    assert ref.describe_difference(got, want) is None, ref.describe_difference(got, want)


@pytest.mark.parametrize(("dtype", "op"), PAIRS, ids=[f"{d}-{o}" for d, o in PAIRS])
def test_inputs_make_both_outcomes_likely(dtype: str, op: str) -> None:
    """The inputs are not degenerate: over 5 ranks the result is not one constant value."""
    arrays = [ref.inputs(r, 64, dtype, op) for r in range(5)]
    out = ref.reference_reduce(op, arrays)
    flat = out[out.dtype.names[0]] if out.dtype.names else out
    assert np.unique(flat).size >= 2, f"{dtype} {op}: the 5-rank result is constant"
    assert not all(np.array_equal(arrays[0], a) for a in arrays[1:]), "ranks' inputs are equal"


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("op", ["SUM", "PROD"])
def test_float_reductions_are_exact(dtype: str, op: str) -> None:
    """Float SUM/PROD over 8 ranks in any association equals the exact integer result."""
    arrays = [ref.inputs(r, 1000, dtype, op) for r in range(8)]
    if dtype.startswith("complex"):   # integer real and imaginary parts, exact as int64
        exact = [(a.real.astype(np.int64), a.imag.astype(np.int64)) for a in arrays]
        pairs = zip(exact, arrays, strict=True)
        assert all(np.array_equal(re + 1j * im, a) for (re, im), a in pairs)
        return _check_complex_exact(op, arrays, exact)
    ints = [a.astype(np.int64) for a in arrays]
    for i, a in zip(ints, arrays, strict=True):
        assert np.array_equal(i, a), "inputs are integers"
    want = ref.reference_reduce(op, ints)
    for order in (arrays, arrays[::-1], arrays[1::2] + arrays[::2]):
        got = ref.reference_reduce(op, order)
        assert np.array_equal(got.astype(np.int64), want), "float reduction is not exact"


def _check_complex_exact(op: str, arrays: list[np.ndarray],
                         exact: list[tuple[np.ndarray, np.ndarray]]) -> None:
    re, im = exact[0]
    for re2, im2 in exact[1:]:
        re, im = (re + re2, im + im2) if op == "SUM" else (re * re2 - im * im2, re * im2 + im * re2)
    for order in (arrays, arrays[::-1]):
        got = ref.reference_reduce(op, order)
        assert np.array_equal(got.real, re)
        assert np.array_equal(got.imag, im)


def test_affine_op_is_associative_and_not_commutative() -> None:
    a, b, c = (ref.inputs(r, 100, "int64", "AFFINE") for r in range(3))
    ab_c = ref.combine("AFFINE", ref.combine("AFFINE", a, b), c)
    a_bc = ref.combine("AFFINE", a, ref.combine("AFFINE", b, c))
    assert np.array_equal(ab_c, a_bc), "AFFINE must be associative"
    assert not np.array_equal(ref.combine("AFFINE", a, b), ref.combine("AFFINE", b, a))
    assert ref.mpi_op("AFFINE").Is_commutative() is False
    assert not ref.is_commutative("AFFINE")


def test_affine_composition_applies_maps_in_rank_order() -> None:
    """(u o v)(x) = u(v(x)): check by evaluating the packed maps on numbers."""
    def pack(a: int, b: int) -> np.ndarray:
        return np.array([(a << 31) | b], dtype=np.int64)

    def apply(m: np.ndarray, x: int) -> int:
        v = int(m[0])
        return ((v >> 31) * x + (v & (2**31 - 1))) % ref.AFFINE_MOD

    u, v = pack(3, 5), pack(7, 11)
    uv = ref.combine("AFFINE", u, v)
    for x in (0, 1, 12345):
        assert apply(uv, x) == apply(u, apply(v, x))


def test_maxloc_ties_take_the_lowest_index() -> None:
    dt = ref.np_dtype("double_int")
    a = np.array([(1.0, 5), (2.0, 1), (3.0, 9)], dtype=dt)
    b = np.array([(1.0, 2), (1.0, 0), (3.0, 4)], dtype=dt)
    out = ref.combine("MAXLOC", a, b)
    assert out.tolist() == [(1.0, 2), (2.0, 1), (3.0, 4)]
    out = ref.combine("MINLOC", a, b)
    assert out.tolist() == [(1.0, 2), (1.0, 0), (3.0, 4)]


def test_scan_and_exscan_are_prefixes() -> None:
    arrays = [np.array([r + 1], dtype=np.int64) for r in range(4)]
    assert [int(x[0]) for x in ref.reference_scan("SUM", arrays)] == [1, 3, 6, 10]
    ex = ref.reference_exscan("SUM", arrays)
    assert ex[0] is None
    assert [int(x[0]) for x in ex[1:] if x is not None] == [1, 3, 6]


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64", "complex128",
                                   "double_int"])
def test_values_are_distinct_and_differ_from_garbage(dtype: str) -> None:
    """Data-movement payloads are unique per (rank, index), so a misplaced element shows."""
    vals = np.concatenate([ref.values(r, 1000, dtype) for r in range(6)])
    key = vals[vals.dtype.names[0]] if vals.dtype.names else vals
    assert np.unique(key).size == key.size
    junk = ref.garbage(1000, dtype)
    jkey = junk[junk.dtype.names[0]] if junk.dtype.names else junk
    assert not np.isin(jkey, key).any()


def test_mpi_type_is_the_predefined_type() -> None:
    for name, want in [("int32", MPI.INT32_T), ("float64", MPI.DOUBLE), ("bool", MPI.C_BOOL),
                       ("complex128", MPI.C_DOUBLE_COMPLEX), ("double_int", MPI.DOUBLE_INT)]:
        t = ref.mpi_type(name)
        assert t.is_predefined
        assert t.Get_size() == want.Get_size()


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("order", ["rank", "reverse", "shuffle"])
@pytest.mark.parametrize("layout", range(6))
def test_v_layouts_have_gaps_and_no_overlap(p: int, order: str, layout: int) -> None:
    counts = ref.vcounts(p, layout)
    assert len(counts) == p
    assert min(counts) >= 0
    displs, length = ref.vdispls(counts, order, gap=2)
    cover = np.zeros(length, dtype=int)
    for c, d in zip(counts, displs, strict=True):
        cover[d:d + c] += 1
    assert cover.max(initial=0) <= 1, "blocks overlap"
    gaps = ref.gap_mask(length, counts, displs)
    assert gaps.sum() == length - sum(counts) >= 2 * p
    if order != "rank" and p > 1 and sum(1 for c in counts if c) > 1:
        nz = [r for r in range(p) if counts[r]]
        assert sorted(nz, key=lambda r: displs[r]) != nz, "blocks are in rank order"


def test_layouts_include_zero_counts_and_symmetric_alltoallv() -> None:
    assert 0 in ref.vcounts(5, 0)
    assert ref.vcounts(5, 3) == [0] * 5
    m = ref.alltoallv_matrix(5, 2)
    assert np.array_equal(m, m.T), "layout 2 must be symmetric (in-place Alltoallv)"
    assert (ref.alltoallv_matrix(5, 0) == 0).any()


def test_describe_difference_names_the_first_index() -> None:
    a = np.arange(10)
    b = a.copy()
    assert ref.describe_difference(a, b) is None
    b[3] = -1
    b[7] = -1
    msg = ref.describe_difference(a, b)
    assert msg is not None
    assert "index 3" in msg
    assert "2 of 10" in msg
    assert ref.first_difference(a, b[:5]) == -1
