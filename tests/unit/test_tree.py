"""The binomial tree helper (mpicoll/algorithms/tree.py) every rooted algorithm walks."""

from __future__ import annotations

import pytest

from mpicoll.algorithms import tree


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
