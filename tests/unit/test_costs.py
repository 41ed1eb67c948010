"""Every registry entry's cost against the simulator's critical path.

For every collective and every algorithm of it (``registry.algorithms``, nothing skipped but
what an entry's own restrictions forbid), at p = 1, 2, 3, 4, 5, 7, 8, 16 and several counts,
a cost-only simulation (the same one bench's predicted column runs) must give the entry's
cost at the same n: ``n`` is the call's ``nbytes`` as the simulator reports it (what ``auto``
chooses by, the record's ``size_meaning``), and for the v-variants, whose
call carries no size, the bytes of their blocks in all.  Where the entry says its cost is
exact (:attr:`Cost.exact`: power-of-two p, equal blocks, whole segments, full nodes) the two
agree to 1e-9 relative; elsewhere within the entry's stated ``bound``.  The node-aware entries
are checked under the two-level model on nodes of 2, 3 and 4 ranks (:meth:`Algorithm.cost2`)
and under the flat model (one rank per node).
"""

from __future__ import annotations

import pytest

from mpicoll.algorithms import registry
from mpicoll.algorithms.collectives import RECORDS
from mpicoll.algorithms.schedule import pof2_floor
from mpicoll.engines.sim import TwoLevel
from mpicoll.model.alphabeta import Model
from mpicoll.tools.cases import Case
from mpicoll.tools.simulate import simulate

PS = (1, 2, 3, 4, 5, 7, 8, 16)
#: 1680 = lcm(PS): equal blocks at every p; 1, 5, 1000, 20000 uneven somewhere; 20000 and
#: 8192 * 105 (whole 64 KiB segments, divisible by every p) exercise the pipeline
COUNTS = (1, 5, 1000, 1680, 20000, 8192 * 105)
FLAT = Model(alpha=1e-6, beta=1e-9, gamma=3e-10)
INTRA = Model(alpha=1e-7, beta=1e-10, gamma=3e-10)
INTER = Model(alpha=3e-6, beta=2e-9, gamma=3e-10)
#: one term at a time: the critical path's message rounds, bytes, and bytes reduced
TERMS = (Model(1.0, 0.0, 0.0), Model(0.0, 1.0, 0.0), Model(0.0, 0.0, 1.0))
ITEM = 8  # float64, simulate's default dtype
#: collectives whose count is per rank's whole vector (blocks are count / p)
PER_VECTOR = {"bcast", "reduce", "allreduce", "scan", "exscan"}
#: the v-collectives (alltoallw: alltoallv's counts, a datatype per peer)
V = {c.name for c in RECORDS if c.vector}


def vcounts(count: int, p: int) -> list[int]:
    """The per-rank counts the simulator's v-collectives use (the one builder's uneven ones)."""
    return Case("allgatherv", count, size=p, uniform=False).counts()

ENTRIES = [(c, a.name) for c in registry.COLLECTIVES for a in registry.variants(c)]


def _n(coll: str, p: int, count: int, reported: int) -> float:
    """n in bytes as the cost formula means it (see the module docstring)."""
    if coll in V and coll != "reduce_scatter":
        return float(sum(vcounts(count, p)) * ITEM)
    return float(reported)


def _even(coll: str, p: int, count: int) -> bool:
    if coll in V:
        return len(set(vcounts(count, p))) == 1
    return coll not in PER_VECTOR or count % p == count % pof2_floor(p) == 0


def _check(coll: str, alg: registry.Algorithm, p: int, count: int,
           model: Model | TwoLevel) -> None:
    r = simulate(coll, p, count, algorithm=alg.name, model=model, data=False)
    n = _n(coll, p, count, r.nbytes)
    cost = alg.model
    assert cost is not None
    if isinstance(model, TwoLevel):
        k = model.ranks_per_node
        want = alg.cost2(p, n, model.intra, model.inter, k)
        full = p % k == 0
    else:
        want = alg.cost(p, n, model.alpha, model.beta, model.gamma)
        full = True
    seg = n <= cost.segment_bytes or n % cost.segment_bytes == 0
    exact = cost.exact_for(p, even=_even(coll, p, count), whole_segments=seg, full_nodes=full)
    where = (coll, alg.name, p, count, model, r.time, want)
    if exact:
        assert r.time == pytest.approx(want, rel=1e-9, abs=0.0), where
    elif model in TERMS:
        return  # a bound holds for the whole cost, not for each term alone
    else:
        assert abs(r.time - want) <= cost.bound_at(p) * want * (1 + 1e-9), where


@pytest.mark.parametrize(("coll", "name"), ENTRIES)
def test_cost_matches_the_simulated_critical_path(coll: str, name: str) -> None:
    alg = registry.get(coll, name)
    assert alg.model is not None, f"{coll}/{name} has no Cost"
    ran = 0
    for p in PS:
        for count in COUNTS:
            if count > 20000 and coll != "bcast":
                continue  # the segment sizes matter to the pipeline only
            if alg.why_not(p, count=count) is not None:
                continue
            models: list[Model | TwoLevel] = [FLAT]
            if count == 1680:  # each term alone (where exact): rounds, bytes, bytes reduced
                models += list(TERMS)
            if alg.model.two_level:
                models += [TwoLevel(k, INTRA, INTER) for k in (2, 3, 4)]
            for m in models:
                _check(coll, alg, p, count, m)
                ran += 1
    assert ran >= len(PS), (coll, name, ran)  # restrictions leave most cases in


def test_every_entry_is_covered() -> None:
    """The matrix above is the registry: nothing is filtered out of it."""
    assert len(ENTRIES) == sum(len(registry.variants(c)) for c in registry.COLLECTIVES)
    assert all(registry.get(c, n).model is not None for c, n in ENTRIES)


def test_formula_text_and_help_come_from_the_cost() -> None:
    for c, name in ENTRIES:
        a = registry.get(c, name)
        assert a.model is not None
        assert a.formula == a.model.text
        assert a.formula in (a.schedule.__doc__ or ""), (c, name)
