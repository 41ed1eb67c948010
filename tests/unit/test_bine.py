"""Bine trees and butterflies (De Sensi et al., SC 2025): the trees are trees of ceil(lg p)
rounds for any p, and the property the paper claims, shorter distances than the binomial tree
and recursive doubling, holds step by step and on a ring's links.

Correctness against NumPy and the cost formulas are the registry sweeps' (test_sim*.py,
test_costs.py, tests/mpi): every ``bine`` entry is in them.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpicoll.algorithms import tree
from mpicoll.algorithms.allgather import bine_group, bine_peer
from mpicoll.algorithms.bcast import bine_tree
from mpicoll.algorithms.registry import clg
from mpicoll.engines.network import Network, parse_topology
from mpicoll.tools.simulate import simulate


def ring(a: int, b: int, p: int) -> int:
    """Distance between ranks a and b on a ring of p (the paper's modulo distance)."""
    d = abs(a - b) % p
    return min(d, p - d)


def rounds(p: int) -> list[int]:
    """The round in which each relative rank receives in the Bine broadcast (root: 0)."""
    _parents, kids = bine_tree(p)
    got = [0] * p
    order = [0]
    for x in order:  # breadth first: a parent's round is known before its children's
        for i, c in enumerate(kids[x]):
            got[c] = got[x] + i + 1
            order.append(c)
    assert sorted(order) == list(range(p))
    return got


@pytest.mark.parametrize("p", [*range(1, 34), 48, 64, 100, 1000])
def test_bine_tree_is_a_tree_of_ceil_lg_p_rounds(p: int) -> None:
    parents, kids = bine_tree(p)
    assert parents[0] == -1
    assert all(parents[c] == x for x in range(p) for c in kids[x])
    assert sum(len(k) for k in kids) == p - 1
    assert max(rounds(p)) == clg(p)


@pytest.mark.parametrize("L", [1, 2, 3, 4, 6])
def test_bine_tree_edges_are_the_butterfly_steps_far_first(L: int) -> None:
    p = 1 << L
    parents, _kids = bine_tree(p)
    got = rounds(p)
    for c in range(1, p):  # received in round t + 1 over step s = L-1-t
        assert c == bine_peer(parents[c], L - got[c], p)


def test_bine_tree_p8_as_drawn() -> None:
    assert bine_tree(8)[1][0] == (3, 7, 1)
    assert bine_tree(8)[1][3] == (4, 2)


@pytest.mark.parametrize("L", [1, 2, 3, 5, 6])
def test_butterfly_groups_double(L: int) -> None:
    q = 1 << L
    for v in range(q):
        for s in range(L):
            mine, theirs = bine_group(v, s + 1, q), bine_group(bine_peer(v, s, q), s + 1, q)
            assert not set(mine) & set(theirs)
            assert sorted(mine + theirs) == bine_group(v, s, q)
        assert bine_group(v, 0, q) == list(range(q))


@pytest.mark.parametrize("p", [16, 64])
def test_bine_tree_is_shorter_than_binomial_step_by_step(p: int) -> None:
    """Sum of the ring distances of each round's messages: never longer, shorter in all."""
    L = clg(p)
    parents, _ = bine_tree(p)
    got = rounds(p)
    bine = [sum(ring(c, parents[c], p) for c in range(1, p) if got[c] == t)
            for t in range(1, L + 1)]
    # binomial (MPICH): rank c receives from c - lowbit(c) in round L - lg lowbit(c)
    binomial = [sum(ring(c, tree.parent(c), p) for c in range(1, p)
                    if (c & -c) == 1 << (L - t)) for t in range(1, L + 1)]
    assert all(b <= d for b, d in zip(bine, binomial, strict=True)), (bine, binomial)
    assert sum(bine) < sum(binomial)
    assert sum(bine) / sum(binomial) == pytest.approx({16: 23 / 32, 64: 135 / 192}[p])


@pytest.mark.parametrize("p", [16, 64])
def test_bine_butterfly_is_shorter_than_recursive_doubling(p: int) -> None:
    """Allgather, far peers first (2^t blocks in step t): each step no longer than the
    distance-halving butterfly's (r ^ 2^(L-1-t)), bytes x distance summed shorter than
    recursive doubling's (whose steps are near first)."""
    L = clg(p)
    for t in range(L):
        bine = sum(ring(r, bine_peer(r, L - 1 - t, p), p) for r in range(p))
        halving = sum(ring(r, r ^ (1 << (L - 1 - t)), p) for r in range(p))
        assert bine <= halving
    total = sum((1 << t) * sum(ring(r, bine_peer(r, L - 1 - t, p), p) for r in range(p))
                for t in range(L))
    total_rd = sum((1 << t) * sum(ring(r, r ^ (1 << t), p) for r in range(p)) for t in range(L))
    assert total / total_rd == pytest.approx({16: 368 / 1360, 64: 8640 / 87360}[p])


@pytest.mark.parametrize("p", [16, 64])
@pytest.mark.parametrize(("coll", "bine", "classic"), [
    ("bcast", "bine", "binomial"),
    ("reduce", "bine", "binomial"),
    ("allgather", "bine", "recursive_doubling"),
    ("allreduce", "swing_latency", "recursive_doubling"),
    ("allreduce", "swing_bandwidth", "rabenseifner"),
])
def test_fewer_bytes_cross_the_links_of_a_ring(p: int, coll: str, bine: str,
                                               classic: str) -> None:
    """On a 1-D torus (ranks in a ring), the bytes x links the messages cross."""
    def load(alg: str) -> float:
        r = simulate(coll, p, 1024, algorithm=alg, network=Network(f"torus:{p}"))
        return float(np.sum(r.link_bytes))

    assert load(bine) < load(classic)


@pytest.mark.parametrize(("p", "topo"), [(16, "dragonfly:4:2:2"), (64, "dragonfly:8:4:2")])
def test_trees_cross_fewer_global_links_whatever_the_root(p: int, topo: str) -> None:
    """The paper's claim (abstract, Sec. 1): less traffic on a dragonfly's global links, with no
    assumption on how ranks fall into groups.  Summed over every root (every alignment of
    the tree to the groups of 4 or 8 consecutive ranks), the Bine tree sends 0.79 (p = 16)
    and 0.76 (p = 64) of the binomial tree's global-link bytes (root 0, where the binomial
    tree's power-of-two distances align with the groups, is its best case: there it needs
    only the minimum of one message per group)."""
    top = parse_topology(topo, p)
    glob = [i for i in range(top.n_links) if "=>" in top.link_name(i)]

    def load(coll: str, alg: str) -> int:
        return sum(int(simulate(coll, p, 16, algorithm=alg, root=root,
                                network=Network(topo)).link_bytes[glob].sum())
                   for root in range(p))

    for coll in ("bcast", "reduce"):
        assert load(coll, "bine") < 0.8 * load(coll, "binomial")


@pytest.mark.parametrize(("coll", "bine", "classic"), [
    ("allgather", "bine", "recursive_doubling"),
    ("allreduce", "swing_bandwidth", "rabenseifner"),
])
def test_butterflies_cross_fewer_global_links(coll: str, bine: str, classic: str) -> None:
    """p = 64 on dragonfly:8:4:2: the Bine allgather sends 0.21 of recursive doubling's
    global-link bytes, the Bine allreduce 0.21 of Rabenseifner's."""
    top = parse_topology("dragonfly:8:4:2", 64)
    glob = [i for i in range(top.n_links) if "=>" in top.link_name(i)]

    def load(alg: str) -> int:
        r = simulate(coll, 64, 1024, algorithm=alg, network=Network("dragonfly:8:4:2"))
        return int(r.link_bytes[glob].sum())

    assert load(bine) < 0.25 * load(classic)
