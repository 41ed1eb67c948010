"""The one record per collective agrees with mpi4py and with the backends that read it."""

from __future__ import annotations

import inspect

import pytest
from mpi4py import MPI

from mpicoll.algorithms import registry
from mpicoll.algorithms.collectives import BY_NAME, NAMES, RECORDS, Collective, get
from mpicoll.backends.args import PARSERS
from mpicoll.backends.base import Collectives
from mpicoll.tools import bench


def test_registry_collectives_are_the_records() -> None:
    assert registry.COLLECTIVES == NAMES == tuple(c.name for c in RECORDS)
    assert set(PARSERS) == set(NAMES)
    with pytest.raises(ValueError, match="unknown collective 'allreduc'"):
        get("allreduc")


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r.name)
def test_methods_are_mpi4py_s(rec: Collective) -> None:
    """method / nonblocking / persistent name methods of mpi4py's Comm; the backends have the
    first two; rooted and reduction match the signatures (a root, an op)."""
    c = BY_NAME[rec.name]
    assert c.method.lower() == c.name
    for name in (c.method, c.nonblocking):
        assert hasattr(MPI.Intracomm, name), name
        assert hasattr(Collectives, name), name
    if hasattr(MPI.Intracomm, "Allreduce_init"):  # MPI-4 persistent collectives
        assert hasattr(MPI.Intracomm, c.persistent), c.persistent
    params = inspect.signature(getattr(Collectives, c.method)).parameters
    assert ("root" in params) == c.rooted
    assert ("op" in params) == c.reduction
    assert c.algorithm_var == f"MPICOLL_{c.name.upper()}_ALGORITHM"
    assert bool(c.in_place) == bool(c.in_place_at)
    assert not (c.symmetric and c.rooted)


def test_busbw_factors_come_from_the_record() -> None:
    assert BY_NAME["allreduce"].busbw(4) == pytest.approx(1.5)
    assert BY_NAME["allgather"].busbw(4) == pytest.approx(0.75)
    assert BY_NAME["barrier"].busbw(4) is None
    for c in RECORDS:
        assert bench.busbw_factor(c.name, 5) == c.busbw(5)
