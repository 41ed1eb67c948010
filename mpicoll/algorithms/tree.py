"""The binomial tree every rooted algorithm walks (bcast, scatter, gather, reduce), written once.

Ranks are relative to the root (``vr = (rank - root) mod p``, see
:meth:`~mpicoll.algorithms.schedule.Context.relative`).  Rank ``vr`` hangs below
``vr - lowbit(vr)``; its children are ``vr + 2^j`` for every ``2^j < lowbit(vr)`` (every
``2^j < p`` at the root) that is below p; the subtree of ``vr`` is the contiguous range
``[vr, vr + subtree(vr, p))``::

    p = 8:            0
                   /  |  \\
                  1   2   4
                      |   | \\
                      3   5  6
                             |
                             7

A broadcast walks it top down (children from the farthest), a reduce bottom up (children
from the nearest); the scatter and gather of blocks move whole subtrees in one message.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .schedule import Context, Schedule, span

__all__ = ["children", "gather_blocks", "parent", "scatter_blocks", "subtree"]


def parent(vr: int) -> int:
    """The parent of relative rank ``vr`` (-1 for the root)."""
    return vr - (vr & -vr) if vr else -1


def children(vr: int, p: int) -> list[int]:
    """The children of relative rank ``vr`` among ``p`` ranks, nearest first."""
    out = []
    mask = 1
    while mask < p and not vr & mask:
        if vr + mask >= p:
            break
        out.append(vr + mask)
        mask <<= 1
    return out


def subtree(vr: int, p: int) -> int:
    """How many ranks the subtree of relative rank ``vr`` holds (itself included)."""
    return p if vr == 0 else min(vr & -vr, p - vr)


def scatter_blocks(c: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
                   base: int = 0) -> Schedule:
    """Binomial scatter of blocks laid out in relative-rank order, from relative rank 0.

    Block ``i`` is ``buf[displs[i] - base : ... + counts[i]]``; every subtree's blocks are
    contiguous, so each travels as one message::

        p = 4:   step 1:  0 --[b2 b3]--> 2
                 step 2:  0 --[b1]--> 1,   2 --[b3]--> 3

    Afterwards relative rank ``vr`` holds blocks ``[vr, vr + subtree(vr, p))`` (in ``buf``,
    which at ``vr`` must have room for them).  Used by the binomial scatter and the
    scatter-allgather broadcasts (van de Geijn).
    """
    vr, p = c.rank, c.size
    if vr:
        yield (c.recv(span(buf, counts, displs, vr, vr + subtree(vr, p), base), parent(vr)),)
    for ch in reversed(children(vr, p)):
        yield (c.send(span(buf, counts, displs, ch, ch + subtree(ch, p), base), ch),)


def gather_blocks(c: Context, buf: np.ndarray, counts: Sequence[int],
                  displs: Sequence[int]) -> Schedule:
    """Binomial gather to relative rank 0 of blocks laid out in relative-rank order, the
    mirror of :func:`scatter_blocks` one child per round (nearest first)::

        p = 4:   step 1:  1 --[b1]--> 0,   3 --[b3]--> 2
                 step 2:  2 --[b2 b3]--> 0

    Relative rank ``vr`` holds its own block in ``buf``; it receives each child's subtree
    into place, then sends its whole subtree to its parent.
    """
    vr, p = c.rank, c.size
    for ch in children(vr, p):
        yield (c.recv(span(buf, counts, displs, ch, ch + subtree(ch, p)), ch),)
    if vr:
        yield (c.send(span(buf, counts, displs, vr, vr + subtree(vr, p)), parent(vr)),)

