"""``mpicoll.tools.cases``: deterministic inputs, exact expectations and comparison that bench and
verify stand on (single process; the multi-rank check is ``mpicoll verify`` itself)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms.registry import COLLECTIVES
from mpicoll.tools import cases as _cases
from mpicoll.tools.cases import Case
from mpicoll.tools.compare import compare


def test_compare() -> None:
    a = np.arange(5.0)
    assert compare(a, a.copy()) is None
    assert compare(None, None) is None
    b = a.copy()
    b[3] = 9
    m = compare(b, a)
    assert m is not None
    assert m.index == 3
    assert str(m) == "first differs at index 3: got 9.0, expected 3.0"
    assert compare(a[:4], a) is not None
    assert compare(a.astype(np.float32), a) is not None
    assert compare(None, a) is not None


def test_compare_pair_types() -> None:
    dt = _cases.numpy_dtype("double_int")
    a = np.zeros(3, dt)
    b = a.copy()
    assert compare(a, b) is None
    b["f1"][2] = 1
    m = compare(b, a)
    assert m is not None
    assert m.index == 2


@pytest.mark.parametrize(
    ("dtype", "op", "ok"),
    [("float64", "sum", True), ("bool", "sum", False), ("bool", "land", True),
     ("complex64", "max", False), ("float32", "band", False), ("uint8", "bxor", True),
     ("double_int", "maxloc", True), ("double_int", "sum", False), ("int32", "minloc", False),
     ("int64", "noncomm", True), ("int32", "noncomm", False), ("float64", "lor", False)],
)
def test_dtype_op_rules(dtype: str, op: str, ok: bool) -> None:
    assert (_cases.dtype_op_problem(dtype, op) is None) == ok


def test_noncomm_limited_to_exact_rank_counts() -> None:
    assert _cases.dtype_op_problem("float64", "noncomm", 15) is None
    assert _cases.dtype_op_problem("float64", "noncomm", 16) is not None
    assert _cases.dtype_op_problem("int64", "noncomm", 18) is None


def test_noncomm_op_is_rank_ordered() -> None:
    op = _cases.mpi_op("noncomm")
    assert not op.Is_commutative()
    left = np.array([12.0, 3.0])
    right = np.array([4.0, 567.0])
    op.Reduce_local(left, right)
    assert right.tolist() == [124.0, 3567.0]


def test_nbytes_is_the_nccl_tests_size() -> None:
    p = 4
    assert Case("allreduce", 10, "float64", size=p).nbytes() == 80
    assert Case("bcast", 10, "float32", size=p).nbytes() == 40
    assert Case("allgather", 10, "float64", size=p).nbytes() == 320  # gathered output
    assert Case("alltoall", 10, "float64", size=p).nbytes() == 320  # all a rank sends
    assert Case("reduce_scatter_block", 10, "float64", size=p).nbytes() == 320  # input
    assert Case("gather", 10, "int8", size=p).nbytes() == 40
    assert Case("scatter", 10, "int8", size=p).nbytes() == 40
    assert Case("barrier", 0, size=p).nbytes() == 0


def test_restriction_kwargs() -> None:
    kw = Case("allreduce", 3, "int64", "noncomm", size=4, in_place=True).restriction_kwargs()
    assert kw == {"commutative": False, "count": 3, "in_place": True, "uniform": True}
    kw = Case("allgatherv", 3, size=4, uniform=False).restriction_kwargs()
    assert kw["uniform"] is False
    assert kw["count"] == 2
    assert Case("bcast", 3, size=4, in_place=True).restriction_kwargs()["in_place"] is False


def _single_rank_cases() -> list[tuple[str, str, str, bool, bool]]:
    out = []
    for coll in COLLECTIVES:
        if coll in _cases.REDUCTIONS:
            combos = [("float64", "sum"), ("int32", "prod"), ("bool", "lxor"),
                      ("double_int", "minloc"), ("int64", "noncomm"), ("uint8", "band")]
        else:
            combos = [("float64", "sum"), ("int8", "sum"), ("2int", "sum")]
        for (dtype, op), ip, uni in itertools.product(combos, [False, True], [True, False]):
            if coll not in _cases.V_COLLECTIVES and not uni:
                continue
            if coll not in _cases.IN_PLACE_COLLECTIVES and ip:
                continue
            out.append((coll, dtype, op, ip, uni))
    return out


@pytest.mark.parametrize(("coll", "dtype", "op", "in_place", "uniform"), _single_rank_cases())
@pytest.mark.parametrize("count", [0, 1, 7])
def test_case_matches_mpi_at_one_rank(
    coll: str, dtype: str, op: str, in_place: bool, uniform: bool, count: int
) -> None:
    comm = MPI.COMM_SELF
    case = Case(coll, count, dtype, op, 0, in_place, 1, 0, uniform).build()
    case.call(comm)()
    assert compare(case.result(), case.expected()) is None
    # reset restores the inputs: the same call gives the same output again
    first = case.result()
    case.reset()
    case.call(comm)()
    assert compare(case.result(), first) is None


def test_case_nonblocking_form() -> None:
    case = Case("allreduce", 5, size=1, rank=0).build()
    req = case.call(MPI.COMM_SELF, nonblocking=True)()
    req.Wait()
    assert compare(case.result(), case.expected()) is None


def test_describe_names_the_case() -> None:
    text = Case("reduce", 5, "int32", "max", 2, True, 4, 0).describe()
    assert text == "reduce P=4 dtype=int32 op=max root=2 count=5 in-place"


def test_cost_only_cases_share_one_buffer_per_shape() -> None:
    """The simulator's cost-only mode: every rank's Case takes its buffers from one pool (one
    per role and length), never fills them, and its arguments still parse as the data ones."""
    from mpicoll.backends.args import PARSERS

    p, count = 5, 7
    for coll in COLLECTIVES:
        pool: dict = {}
        cases = [Case(coll, count, size=p, rank=r, uniform=False).build(pool) for r in range(p)]
        assert len(pool) <= 2 * 3  # send and recv, at most three lengths each (v-counts)
        shapes = {id(a) for c in cases for a in c._b.values()}
        assert shapes == {id(a) for a in pool.values()}
        for c in cases:
            data = Case(coll, count, size=p, rank=c.rank, uniform=False).build()
            args, kw = c.arguments()
            want = PARSERS[coll](p, c.rank, *data.positional())
            assert PARSERS[coll](p, c.rank, *args, **kw).nbytes == want.nbytes


def test_positional_arguments_follow_mpi4py_signatures() -> None:
    case = Case("reduce", 3, "int32", "max", 1, False, 2, 0).build()  # rank 0: not the root
    sendbuf, recvbuf, op, root = case.positional()
    assert recvbuf is None
    assert (op, root) == (MPI.MAX, 1)
    assert sendbuf is case._b["send"]
    case = Case("reduce_scatter", 2, size=3, rank=0, uniform=False, gaps=False).build()
    _, recvbuf, counts, op = case.positional()
    assert (counts, op) == (case.counts(), MPI.SUM)
    assert case.output() is recvbuf
