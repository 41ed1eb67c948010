"""The static ``auto`` rules (``@default_rule``): the picks that issue 22's algorithms changed,
each an algorithm whose restrictions the call meets."""

from __future__ import annotations

import pytest

from mpicoll.algorithms import registry


@pytest.mark.parametrize("coll", ["reduce_scatter_block", "reduce_scatter"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 64])
@pytest.mark.parametrize("nbytes", [0, 8, 4096, 1 << 20, 8 << 20])
def test_reduce_scatter_non_commutative_is_a_butterfly(coll: str, p: int, nbytes: int) -> None:
    """MPICH's noncommutative butterfly on a power of two, Open MPI's butterfly (the fold
    first) otherwise; never reduce + scatterv, whose vector goes through rank 0."""
    picked = registry.choose(coll, p, nbytes, commutative=False)
    want = "noncommutative" if p & (p - 1) == 0 else "butterfly"
    assert picked.name == want
    assert picked.why_not(p, commutative=False, uniform=coll.endswith("block")) is None


@pytest.mark.parametrize("coll", ["reduce_scatter_block", "reduce_scatter"])
def test_reduce_scatter_commutative_keeps_mpich_thresholds(coll: str) -> None:
    assert registry.choose(coll, 6, 524288).name == "recursive_halving"
    assert registry.choose(coll, 6, 524289).name == "pairwise"
