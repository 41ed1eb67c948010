"""The binomial tree helper (mpicoll/algorithms/tree.py) every rooted algorithm walks."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms import registry, tree
from mpicoll.engines.sim import Simulator


@pytest.mark.parametrize("p", [*range(1, 18), 31, 32, 33, 100])
def test_the_tree_spans_every_rank_once(p: int) -> None:
    """Each non-root rank has one parent, which lists it as a child; a subtree is its rank
    followed by its children's subtrees, back to back; the root's subtree is everyone."""
    assert tree.parent(0) == -1
    assert tree.subtree(0, p) == p
    for vr in range(p):
        kids = tree.children(vr, p)
        assert kids == sorted(kids)
        assert all(tree.parent(ch) == vr for ch in kids)
        covered = [vr]
        for ch in kids:
            assert ch == covered[-1] + 1
            covered.extend(range(ch, ch + tree.subtree(ch, p)))
        assert covered == list(range(vr, vr + tree.subtree(vr, p)))
    assert sorted(ch for vr in range(p) for ch in tree.children(vr, p)) == list(range(1, p))


def test_the_picture_in_the_docstring() -> None:
    """p = 8: 0 -> 1, 2, 4; 2 -> 3; 4 -> 5, 6; 6 -> 7."""
    assert [tree.children(vr, 8) for vr in range(8)] == [
        [1, 2, 4], [], [3], [], [5, 6], [], [7], []]
    assert [tree.parent(vr) for vr in range(1, 8)] == [0, 0, 2, 0, 4, 4, 6]
    assert [tree.subtree(vr, 8) for vr in range(8)] == [8, 1, 2, 1, 4, 1, 2, 1]
    assert [tree.subtree(vr, 6) for vr in range(6)] == [6, 1, 2, 1, 2, 1]


# --- the other shapes: every rank once, parents and children agree --------------------------

SHAPES = {
    **{f"knomial{k}": (lambda vr, p, k=k: tree.knomial_parent(vr, k),
                       lambda vr, p, k=k: tree.knomial_children(vr, p, k)) for k in (2, 3, 4, 8)},
    **{f"kary{k}": (lambda vr, p, k=k: tree.kary_parent(vr, k),
                    lambda vr, p, k=k: tree.kary_children(vr, p, k)) for k in (1, 2, 3, 4)},
    **{f"chain{f}": (lambda vr, p, f=f: tree.chain_parent(vr, p, f),
                     lambda vr, p, f=f: tree.chain_children(vr, p, f)) for f in (1, 2, 4, 8)},
    "bmtree": (lambda vr, p: tree.bm_parent(vr), tree.bm_children),
}
#: the shapes whose subtrees are ranges of ranks starting at their node (rank-order safe)
RANGES = {name for name in SHAPES if not name.startswith(("kary", "bmtree"))} | {"kary1"}


def _subtree(kids, vr: int, p: int) -> list[int]:
    out, stack = [], [vr]
    while stack:
        v = stack.pop()
        out.append(v)
        stack.extend(kids(v, p))
    return sorted(out)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("p", [*range(1, 18), 27, 31, 32, 33, 100])
def test_every_shape_spans_every_rank_once(name: str, p: int) -> None:
    """One parent each, which lists the rank as its child; every rank is below the root; for
    the k-nomial trees and the chains a subtree is its node followed by its children's
    subtrees, back to back (what lets a reduction keep rank order)."""
    parent, kids = SHAPES[name]
    assert parent(0, p) == -1
    assert _subtree(kids, 0, p) == list(range(p))
    for vr in range(1, p):
        assert vr in kids(parent(vr, p), p)
    for vr in range(p):
        if name in RANGES:
            covered = [vr]
            for ch in kids(vr, p):
                assert ch == covered[-1] + 1, (name, p, vr)
                covered.extend(_subtree(kids, ch, p))
            assert covered == _subtree(kids, vr, p)


@pytest.mark.parametrize("p", [*range(1, 18), 31, 32, 33, 100])
def test_the_in_order_tree_keeps_rank_order(p: int) -> None:
    """The top is p-1; every subtree is a range of ranks topped by its node, the left child's
    range just below the node, the right child's below that: folding left, then right, in
    front of the node's own value is rank order."""
    links = [tree.in_order_children(r, p) for r in range(p)]
    assert links[p - 1][0] == -1
    for r, (par, _kids) in enumerate(links):
        if r != p - 1:
            assert r in links[par][1]

    def below(r: int) -> list[int]:
        return sorted([r, *(x for ch in links[r][1] for x in below(ch))])

    assert below(p - 1) == list(range(p))
    for r in range(p):
        rng = below(r)
        assert rng == list(range(rng[0], r + 1))
        expect_top = r - 1
        for ch in links[r][1]:  # nearest range first
            sub = below(ch)
            assert sub[-1] == expect_top == ch
            expect_top = sub[0] - 1


def test_the_pictures_in_the_docstrings() -> None:
    assert [tree.knomial_children(vr, 9, 3) for vr in (0, 3, 6)] == [[1, 2, 3, 6], [4, 5], [7, 8]]
    assert [tree.kary_children(vr, 7, 2) for vr in range(3)] == [[1, 2], [3, 5], [4, 6]]
    assert [tree.kary_parent(vr, 2) for vr in range(7)] == [-1, 0, 0, 1, 2, 1, 2]
    assert tree.chains(8, 3) == [(1, 3), (4, 2), (6, 2)]
    assert [tree.chain_children(vr, 8, 3) for vr in range(8)] == [
        [1, 4, 6], [2], [3], [], [5], [], [7], []]
    assert {r: tree.in_order_children(r, 9)[1] for r in (8, 7, 5, 3, 1)} == {
        8: [7, 3], 7: [6, 5], 5: [4], 3: [2, 1], 1: [0]}


def test_critical_paths() -> None:
    """The costs' helpers on shapes worked by hand: p = k^m k-nomial trees take (k-1) m
    messages in sequence; a reduce up a chain of p ranks takes p-1 steps."""
    for k, m in ((2, 4), (3, 3), (4, 2)):
        p = k ** m
        assert tree.down_sends(p, lambda vr, p=p, k=k: tree.knomial_children(vr, p, k)[::-1]) \
            == (k - 1) * m
        assert tree.up_rounds(p, lambda vr, p=p, k=k: tree.knomial_children(vr, p, k)) \
            == (k - 1) * m
    assert tree.up_rounds(9, lambda vr: tree.chain_children(vr, 9, 1)) == 8
    assert tree.down_sends(7, lambda vr: tree.kary_children(vr, 7, 2)) == 4


def test_the_circulant_schedule_of_p_17() -> None:
    """Traff's worked example (p = 17, q = 5; also in MPICH's circ_graph.c): the skips and
    the block each rank receives in each round of a phase (negative: an earlier phase's)."""
    assert tree.circulant_skips(17) == (1, 2, 3, 5, 9, 17)
    rows = [tree.circulant_recv(r, 17) for r in range(1, 17)]
    assert [row[0] for row in rows] == [0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5,
                                        -2, -5]
    assert [row[4] for row in rows] == [-1] * 8 + [4, 0, 1, 2, 0, 3, 0, 1]


@pytest.mark.parametrize("p", [2, 3, 5, 6, 7, 12, 17, 31, 33, 64, 100])
def test_every_rank_gets_its_blocks_once_per_phase(p: int) -> None:
    """In a phase's q rounds a rank receives q different blocks: its base block and the
    q-1 others' of the phase before (Traff's correctness condition), and what rank r sends
    in round k is what rank r + skip[k] receives."""
    skip = tree.circulant_skips(p)
    q = len(skip) - 1
    assert skip[0] == 1
    assert skip[q] == p
    for r in range(1, p):
        got = tree.circulant_recv(r, p)
        assert len(set(got)) == q
        base = [b for b in got if b >= 0]
        assert len(base) == 1
        assert sorted(got) == sorted({-q + i for i in range(q)} - {base[0] - q} | set(base))


# --- Open MPI's bmtree, against a transcription of its builder ---------------------------------


def _ompi_bmtree(rank: int, size: int, root: int) -> tuple[int, list[int]]:
    """(tree_prev, tree_next) of ``rank``: ompi/mca/coll/base/coll_base_topo.c
    ``ompi_coll_base_topo_build_bmtree`` line by line (tree_prev is root at the root);
    ``opal_next_poweroftwo(v)``, the least power of two above v, is ``1 << v.bit_length()``."""
    index = rank - root
    if index < 0:
        index += size
    mask = 1 << index.bit_length()
    if root == rank:
        prev = root
    else:
        prev = (index ^ (mask >> 1)) + root
        if prev >= size:
            prev -= size
    nxt = []
    while mask < size:
        remote = index ^ mask
        if remote >= size:
            break
        remote += root
        if remote >= size:
            remote -= size
        nxt.append(remote)
        mask <<= 1
    return prev, nxt


def test_the_bmtree_picture() -> None:
    """coll_base_topo.c's own picture, p = 8: 0 -> 1, 2, 4; 1 -> 3, 5; 2 -> 6; 3 -> 7."""
    assert [tree.bm_children(vr, 8) for vr in range(8)] == [
        [1, 2, 4], [3, 5], [6], [7], [], [], [], []]
    assert [tree.bm_parent(vr) for vr in range(8)] == [-1, 0, 0, 1, 0, 1, 2, 3]
    assert tree.down_sends(8, lambda vr: tree.bm_children(vr, 8)) == 3


@pytest.mark.parametrize("p", [*range(1, 10), 13])
def test_bmtree_bcast_sends_what_open_mpi_sends(p: int) -> None:
    """p2p ``bmtree`` run in the simulator, every root: each rank sends one message to each
    of Open MPI's ``tree_next`` of it, in that order (the order its bcast posts them), and
    receives one from its ``tree_prev``; nothing else.  p2p ``binomial`` differs from p = 4
    on (MPICH's tree: 2 -> 3 where Open MPI's sends 1 -> 3)."""
    alg = registry.get("bcast", "bmtree")
    for root in range(p):
        sim = Simulator(p, data=False)
        gens = [alg.schedule(sim.context(r, MPI.DOUBLE, np.dtype(np.float64)), np.zeros(4),
                             root) for r in range(p)]
        trace = array("q")
        sim.run(gens, trace=trace)
        msgs = sorted(zip(trace[0::4], trace[1::4], trace[2::4], strict=True))
        sent = {r: [d for _, s, d in msgs if s == r] for r in range(p)}
        want = {r: _ompi_bmtree(r, p, root)[1] for r in range(p)}
        assert sent == want, (p, root)
        assert sorted(d for _, _, d in msgs) == sorted(set(range(p)) - {root})
        for _, s, d in msgs:
            assert _ompi_bmtree(d, p, root)[0] == s
    if p >= 4:
        mpich = {(vr, ch) for vr in range(p) for ch in tree.children(vr, p)}
        assert (1, 3) not in mpich
        assert (2, 3) in mpich


def _ompi_in_order_bmtree(rank: int, size: int, root: int) -> tuple[int, list[int]]:
    """(tree_prev, tree_next) of ``rank``: coll_base_topo.c
    ``ompi_coll_base_topo_build_in_order_bmtree`` line by line (tree_prev is root at the
    root), the tree of Open MPI's binomial reduce, gather and scatter."""
    vrank = (rank - root + size) % size
    prev = root if root == rank else -1
    nxt = []
    mask = 1
    while mask < size:
        remote = vrank ^ mask
        if remote < vrank:
            prev = (remote + root) % size
            break
        if remote < size:
            nxt.append((remote + root) % size)
        mask <<= 1
    return prev, nxt


@pytest.mark.parametrize("p", [*range(1, 10), 13])
def test_open_mpis_in_order_bmtree_is_the_binomial_tree(p: int) -> None:
    """Open MPI's reduce, gather and scatter walk its in-order bmtree: that is
    :func:`tree.parent` / :func:`tree.children` (MPICH's tree), children nearest first, so
    their p2p ``binomial`` twins need no mirror (bcast's does: :func:`tree.bm_children`)."""
    for root in range(p):
        for r in range(p):
            vr = (r - root) % p
            prev, nxt = _ompi_in_order_bmtree(r, p, root)
            assert [(ch - root) % p for ch in nxt] == tree.children(vr, p)
            assert (prev - root) % p == (tree.parent(vr) if vr else 0)
