"""The tests' NumPy oracle (tests/oracle.py), checked on its own.

Single process: the oracle's reductions are compared with MPI's own local reduction
(``op.Reduce_local``, no communication) on the very inputs the MPI tests use, so a wrong
oracle (MAXLOC ties, logical ops on integers, the user op's order) cannot hide a bug in
the collectives or report a false one; :func:`oracle.expected` is checked against small cases
worked by hand (mpi4py-style arguments in, every rank's output buffer out).
"""

from __future__ import annotations

import numpy as np
import oracle as ref
import pytest
from mpi4py import MPI

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


# --------------------------------------------------------------------------------------------
# oracle.expected: every collective on hand-worked cases


def _i(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def _values(want: list[ref.Expected | None]) -> list[list[int] | None]:
    return [None if w is None else w.values.tolist() for w in want]


def test_bcast_writes_the_roots_count_and_keeps_the_tail() -> None:
    # rank 0 passes 4 elements where the root sends 3: MPI rejects that, and so does the oracle
    with pytest.raises(ValueError, match="block 0 holds 4"):
        ref.expected("bcast", [(_i(0, 0, 0, 9),), ([_i(5, 6, 7, 8), 3],)], {"root": 1})
    want = ref.expected("bcast", [([_i(0, 0, 0, 9), 3],), ([_i(5, 6, 7, 8), 3, MPI.INT64_T],),
                                  (_i(1, 1, 1),)], {"root": 1})
    assert _values(want) == [[5, 6, 7, 9], [5, 6, 7, 8], [5, 6, 7]]
    assert [w.arg for w in want if w is not None] == ["buf"] * 3


def test_scatter_gather_allgather_alltoall_by_hand() -> None:
    # Scatter from root 2: rank r gets block r of the root's 6 elements (2 per rank)
    root_send = _i(10, 11, 20, 21, 30, 31)
    want = ref.expected("scatter", [(None, np.zeros(2, np.int64)), (None, np.zeros(2, np.int64)),
                                    (root_send, np.zeros(2, np.int64))], {"root": 2})
    assert _values(want) == [[10, 11], [20, 21], [30, 31]]
    # in-place at the root: its send buffer is the output, unchanged
    want = ref.expected("scatter", [(None, np.zeros(3, np.int64)), (root_send, MPI.IN_PLACE)],
                        {"root": 1})
    assert _values(want) == [[10, 11, 20], [10, 11, 20, 21, 30, 31]]
    assert want[1] is not None
    assert want[1].arg == "sendbuf"
    # Gather to root 0; the non-root's receive buffer is ignored (None there)
    want = ref.expected("gather", [(_i(1, 2), np.full(4, -1, np.int64), 0), (_i(3, 4), None, 0)])
    assert _values(want) == [[1, 2, 3, 4], None]
    # Allgather in place: each rank's block already lies in its receive buffer
    want = ref.expected("allgather", [(MPI.IN_PLACE, _i(7, 0)), (MPI.IN_PLACE, _i(0, 8))])
    assert _values(want) == [[7, 8], [7, 8]]
    # Alltoall: rank i gets the i-th piece from every rank (the seed article's example)
    sends = [_i(4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3) for r in range(4)]
    want = ref.expected("alltoall", [(s, np.zeros(4, np.int64)) for s in sends])
    assert _values(want) == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_v_collectives_write_blocks_and_keep_gaps() -> None:
    # Gatherv to root 1, counts [2, 0, 1], blocks in reverse order with gaps (-1 stays)
    counts, displs = [2, 0, 1], [4, 3, 1]
    recv = np.full(7, -1, np.int64)
    want = ref.expected("gatherv", [(_i(1, 2), None), (_i(), [recv, (counts, displs)]),
                                    (_i(3), None)], {"root": 1})
    assert _values(want) == [None, [-1, 3, -1, -1, 1, 2, -1], None]
    # Allgatherv without displacements: blocks packed in rank order
    want = ref.expected("allgatherv", [(_i(5), [np.zeros(3, np.int64), [1, 2]]),
                                       (_i(6, 7), [np.zeros(3, np.int64), [1, 2], MPI.INT64_T])])
    assert _values(want) == [[5, 6, 7], [5, 6, 7]]
    # Scatterv: rank r gets counts[r] elements from displs[r] of the root's buffer
    want = ref.expected("scatterv", [([_i(9, 8, 7, 6), ([1, 2], [3, 0])], _i(0), 0),
                                     (None, _i(0, 0), 0)])
    assert _values(want) == [[6], [9, 8]]
    # Alltoallv: C[i][j] elements from i to j
    sends = [[_i(1, 2, 3), ([1, 2], [0, 1])], [_i(4, 5), ([0, 2], [0, 0])]]
    recvs = [[np.zeros(1, np.int64), ([1, 0], [0, 1])],
             [np.full(5, -1, np.int64), ([2, 2], [3, 0])]]
    want = ref.expected("alltoallv", [(s, r) for s, r in zip(sends, recvs, strict=True)])
    assert _values(want) == [[1], [4, 5, -1, 2, 3]]
    # Alltoallw: the same blocks, displacements in bytes, a datatype per rank (both forms)
    t = [MPI.INT64_T] * 2
    sends = [[_i(1, 2, 3), ([1, 2], [0, 8]), t], [_i(4, 5), [0, 2], [0, 0], t]]
    recvs = [[np.zeros(1, np.int64), ([1, 0], [0, 8]), t],
             [np.full(5, -1, np.int64), ([2, 2], [24, 0]), t]]
    want = ref.expected("alltoallw", [(s, r) for s, r in zip(sends, recvs, strict=True)])
    assert _values(want) == [[1], [4, 5, -1, 2, 3]]
    with pytest.raises(TypeError, match="item size"):  # a derived type is not modelled
        ref.expected("alltoallw", [([_i(1), [1], [0], [MPI.INT64_T.Create_resized(0, 16)]],
                                    [np.zeros(1, np.int64), [1], [0], [MPI.INT64_T]])])


def test_reductions_fold_in_rank_order() -> None:
    """AFFINE maps compose as u0 o u1 o u2: reversing the ranks changes the result."""
    a = ref.inputs(0, 3, "int64", "AFFINE")
    b = ref.inputs(1, 3, "int64", "AFFINE")
    c = ref.inputs(2, 3, "int64", "AFFINE")
    op = ref.mpi_op("AFFINE")
    ab = ref.combine("AFFINE", a, b)
    abc = ref.combine("AFFINE", ab, c)
    args = [(x, np.zeros(3, np.int64)) for x in (a, b, c)]
    assert _values(ref.expected("allreduce", args, {"op": op})) == [abc.tolist()] * 3
    scan = _values(ref.expected("scan", args, {"op": op}))
    assert scan == [a.tolist(), ab.tolist(), abc.tolist()]
    ex = ref.expected("exscan", args, {"op": op})
    assert _values(ex)[1:] == [a.tolist(), ab.tolist()]
    assert ex[0] is not None
    assert ex[0].defined is not None
    assert not ex[0].defined.any()
    want = ref.expected("reduce", [(x, np.zeros(3, np.int64) if r == 2 else None)
                                   for r, x in enumerate((a, b, c))], {"op": op, "root": 2})
    assert _values(want) == [None, None, abc.tolist()]
    rev = ref.expected("allreduce", args[::-1], {"op": op})
    assert _values(rev)[0] != abc.tolist()


def test_reduce_scatter_by_hand() -> None:
    x0, x1 = _i(1, 2, 3, 4), _i(10, 20, 30, 40)
    # block: 2 each; SUM = [11, 22, 33, 44]
    want = ref.expected("reduce_scatter_block", [(x0, np.zeros(2, np.int64)),
                                                 (x1, np.zeros(2, np.int64))])
    assert _values(want) == [[11, 22], [33, 44]]
    # v, counts [3, 1], rank 1's receive buffer has 2 elements past its count (kept)
    want = ref.expected("reduce_scatter", [(x0, np.zeros(3, np.int64), [3, 1]),
                                           (x1, np.full(3, -1, np.int64), [3, 1])])
    assert _values(want) == [[11, 22, 33], [44, -1, -1]]
    # recvcounts None: each rank's count from its receive buffer
    want = ref.expected("reduce_scatter", [(x0, [np.zeros(4, np.int64), 1]),
                                           (x1, [np.zeros(3, np.int64), 3])])
    assert [w.values.tolist()[:c] for w, c in zip(want, (1, 3), strict=True) if w] == \
        [[11], [22, 33, 44]]
    # in place: the result is the first count elements, the rest undefined
    want = ref.expected("reduce_scatter", [(MPI.IN_PLACE, x0.copy(), [1, 3]),
                                           (MPI.IN_PLACE, x1.copy(), [1, 3])])
    w1 = want[1]
    assert w1 is not None
    assert w1.values.tolist()[:3] == [22, 33, 44]
    assert w1.defined is not None
    assert w1.defined.tolist() == [True, True, True, False]
    assert ref.difference(_i(22, 33, 44, 12345), w1) is None
    assert ref.difference(_i(22, 33, 45, 40), w1) is not None


def test_expected_refuses_what_mpi_refuses() -> None:
    with pytest.raises(ValueError, match="different roots"):
        ref.expected("bcast", [(_i(1),), (_i(1),)], [{"root": 0}, {"root": 1}])
    with pytest.raises(ValueError, match="add up"):
        ref.expected("reduce_scatter", [(_i(1, 2), _i(0), [1, 2]), (_i(1, 2), _i(0), [1, 2])])
    with pytest.raises(TypeError, match="has no argument"):
        ref.expected("allreduce", [(_i(1), _i(0))], {"root": 0})
    with pytest.raises(TypeError, match="does not know the op"):
        ref.expected("allreduce", [(_i(1), _i(0))],
                     {"op": MPI.Op.Create(lambda a, b, t: None, commute=True)})


def test_user_op_folds_with_its_numpy_function() -> None:
    def concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a * 10.0 ** (np.floor(np.log10(b)) + 1) + b

    op = ref.user_op(concat, np.float64)
    xs = [np.array([float(r + 1)]) for r in range(4)]
    want = ref.expected("allreduce", [(x, np.zeros(1)) for x in xs], {"op": op})
    assert want[0] is not None
    assert want[0].values.tolist() == [1234.0]
    acc = xs[-1].copy()   # MPI's own local reduction with the same op agrees
    for x in reversed(xs[:-1]):
        op.Reduce_local(x, acc)
    assert acc.tolist() == [1234.0]
