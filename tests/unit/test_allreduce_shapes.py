"""The shapes of the allreduce algorithms of issue 22 against their sources' own pictures (MPICH's
knomial_1 tree and recursive-exchange fold, NCCL's double binary tree, Swing's peers), and the
traffic of the bandwidth-optimal ones counted by the simulator.  The registry sweeps
(test_sim, test_costs, test_sim_vector, tests/mpi) check their results and costs."""

from __future__ import annotations

import pytest

from mpicoll.algorithms import fold
from mpicoll.algorithms.allgather import halving_skips
from mpicoll.algorithms.allreduce import (
    _btree,
    _dtree,
    _knomial1,
    _swing_layout,
    _swing_peer,
)
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import simulate


def test_knomial1_is_mpichs_tree() -> None:
    """treeutil.c's pictures: 8 ranks k = 2, and 9 ranks k = 3 (preorder numbering)."""
    assert [_knomial1(v, 8, 2) for v in range(8)] == [
        (-1, [1, 5, 7]), (0, [2, 4]), (1, [3]), (2, []), (1, []), (0, [6]), (5, []), (0, [])]
    assert [_knomial1(v, 4, 2) for v in range(4)] == [(-1, [1, 3]), (0, [2]), (1, []), (0, [])]
    assert _knomial1(0, 9, 3) == (-1, [1, 4, 7, 8])
    assert _knomial1(4, 9, 3) == (0, [5, 6])


def test_btree_is_ncclgetbtree() -> None:
    """trees.cc's picture for 14 ranks: 0 - 8; 8: 4, 12; 4: 2, 6; 12: 10, 13; ..."""
    want = {0: (-1, [8]), 8: (0, [4, 12]), 4: (8, [2, 6]), 12: (8, [10, 13]), 2: (4, [1, 3]),
            6: (4, [5, 7]), 10: (12, [9, 11]), 13: (12, []), 1: (2, []), 11: (10, [])}
    for r, w in want.items():
        assert _btree(14, r) == w, r


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 12, 13, 14, 33])
def test_dtree_is_two_spanning_trees(p: int) -> None:
    """Both trees span the ranks once; the second is the mirror (even p) or the shift (odd p)
    of the first, and every rank is inner in at most one tree (NCCL's point) for p > 2."""
    first, second = _dtree(p)
    for tree in (first, second):
        assert sum(1 for v in range(p) if tree.parent[v] < 0) == 1
        assert sorted(c for v in range(p) for c in tree.children(v)) == sorted(
            v for v in range(p) if tree.parent[v] >= 0)
    to = (lambda r: p - 1 - r) if p % 2 == 0 else (lambda r: (r + 1) % p)
    for v in range(p):
        assert second.parent[to(v)] == (to(first.parent[v]) if first.parent[v] >= 0 else -1)
    if p > 2 and p % 2 == 0:
        assert not [v for v in range(p) if first.children(v) and second.children(v)]


def test_swing_peers_and_blocks() -> None:
    """rho = 1, -1, 3, -5: the paper's peers on 8 ranks; the block numbering is a permutation
    that makes every rank's remaining blocks an aligned range (checked up to 4096 ranks)."""
    assert [[_swing_peer(r, s, 8) for r in range(8)] for s in range(3)] == [
        [1, 0, 3, 2, 5, 4, 7, 6], [7, 2, 1, 4, 3, 6, 5, 0], [3, 6, 5, 0, 7, 2, 1, 4]]
    for lg in range(13):
        p = 1 << lg
        assert sorted(_swing_layout(p)) == list(range(p))
    assert _swing_layout(4) == (0, 2, 3, 1)


def test_recexch_fold_is_mpichs() -> None:
    """recexchalgo.c: p = 11, k = 3 (9 + 2): ranks 0, 1 fold into 2; p = 4, k = 3 (3 + 1):
    rank 0 folds into rank T = 1; k is lowered to p when p < k."""
    assert fold._radix_senders(0, 11, 3) == (2, [])
    assert fold._radix_senders(2, 11, 3) == (-1, [0, 1])
    assert [fold.radix_real_rank(i, 11, 3) for i in range(9)] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert fold._radix_senders(0, 4, 3) == (1, [])
    assert fold._radix_senders(1, 4, 3) == (-1, [0])
    assert fold.radix(3, 8) == (3, 3, 1)
    assert fold.radix(3, 8, shrink=False) == (8, 1, 0)


@pytest.mark.parametrize(("alg", "ps"), [
    ("circulant", (2, 3, 5, 6, 7, 9, 13)), ("swing_bandwidth", (2, 4, 8, 16)),
    ("k_reduce_scatter_allgather", (2, 4, 8, 16)), ("k_reduce_scatter_allgather:3", (3, 9, 27)),
])
def test_bandwidth_optimal_traffic(alg: str, ps: tuple[int, ...]) -> None:
    """Each rank sends and receives exactly 2 n (p-1)/p bytes (count divisible by p), in
    2 ceil(lg p) messages (2 L (k-1) for the radix k)."""
    for p in ps:
        count = 8 * p * 3
        r = simulate("allreduce", p, count, algorithm=alg, model=Model(1.0, 0.0, 0.0))
        n = count * 8
        assert (r.bytes_sent == 2 * n * (p - 1) // p).all(), (alg, p)
        assert (r.bytes_recv == 2 * n * (p - 1) // p).all(), (alg, p)
        k = int(alg.partition(":")[2] or 2)
        rounds = 2 * (p - 1).bit_length() if alg == "circulant" else \
            2 * fold.radix_rounds(p, k) * (k - 1)
        assert (r.messages_sent == rounds).all(), (alg, p)


def testhalving_skips() -> None:
    assert halving_skips(7) == [1, 2, 4, 7]
    assert halving_skips(9) == [1, 2, 3, 5, 9]
    for p in range(1, 100):
        assert len(halving_skips(p)) - 1 == (p - 1).bit_length()
