"""Checked mode's names of ops, and the one root rule of buffer and object methods."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.backends.args import root_of
from mpicoll.backends.checked import op_code, op_name


def _plus(a: int, b: int) -> int:
    return a + b


def test_op_names() -> None:
    assert op_name(MPI.SUM) == "MPI.SUM"
    assert op_name(MPI.MAXLOC) == "MPI.MAXLOC"
    assert op_name(operator.add) == "operator.add"
    assert op_name(_plus) == f"{__name__}._plus"
    assert op_name(lambda a, b: a).endswith("test_op_names.<locals>.<lambda>")
    user = MPI.Op.Create(lambda a, b, t: None, commute=True)
    other = MPI.Op.Create(lambda a, b, t: None, commute=False)
    try:
        assert op_name(user) == "a user op"
        assert op_name(other) == "a non-commutative user op"
        assert op_code(user) != op_code(other)
    finally:
        user.Free()
        other.Free()
    assert op_name("max") == "an op that is not callable"
    assert op_name(None) == "no op"


def test_op_codes_compare_callables_by_name() -> None:
    def make() -> object:
        return lambda a, b: a + b

    assert op_code(make()) == op_code(make())  # two closures of one definition: equal
    assert op_code(_plus) != op_code(operator.add)
    assert op_code(MPI.SUM) != op_code(operator.add)
    assert len({op_code(getattr(MPI, n)) for n in ("SUM", "PROD", "MAX", "MIN")}) == 4


@pytest.mark.parametrize(("root", "want"), [
    (1, 1), (1.0, 1), (1.9, 1), (np.int64(2), 2), (np.int32(0), 0), (np.uint8(2), 2),
    (np.float64(2.0), 2), (True, 1),
])
def test_root_of_lenient(root: object, want: int) -> None:
    got = root_of(root, 3)
    assert got == want
    assert type(got) is int


@pytest.mark.parametrize(("root", "error"), [
    ("0", TypeError), (None, TypeError), (b"1", TypeError), ([0], TypeError),
    (2**40, OverflowError), (-(2**40), OverflowError), (3, ValueError), (-1, ValueError),
])
def test_root_of_refused(root: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        root_of(root, 3)
    if error is ValueError:  # also mpi4py's MPI.Exception, class ERR_ROOT
        assert isinstance(info.value, MPI.Exception)
        assert info.value.Get_error_class() == MPI.ERR_ROOT
