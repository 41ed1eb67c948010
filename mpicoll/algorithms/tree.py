"""The trees the rooted algorithms walk (bcast, scatter, gather, reduce), each written once:
the binomial tree below and its mirror (Open MPI's bmtree), then the k-nomial, k-ary, chain
and in-order binary shapes and the two walks (:func:`send_down`, :func:`reduce_up`) the tree
broadcasts and reduces share.

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

from collections.abc import Callable, Generator, Sequence
from functools import lru_cache

import numpy as np
from mpi4py import MPI

from .schedule import Context, Recv, Round, Schedule, Send, span

__all__ = ["bm_children", "bm_parent", "chain_children", "chain_parent", "chains", "children",
           "circulant_recv", "circulant_rounds", "circulant_skips", "down_sends", "gather_blocks",
           "in_order_children", "kary_children", "kary_level", "kary_parent",
           "knomial_children", "knomial_parent", "parent", "reduce_up", "scatter_blocks",
           "send_down", "subtree", "up_rounds"]


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


def bm_parent(vr: int) -> int:
    """The parent of relative rank ``vr`` in Open MPI's ``bmtree`` (-1 for the root): ``vr``
    with its highest set bit cleared, where :func:`parent` clears the lowest."""
    return vr - (1 << (vr.bit_length() - 1)) if vr else -1


def bm_children(vr: int, p: int) -> list[int]:
    """The children of relative rank ``vr`` among ``p`` ranks in Open MPI's ``bmtree``
    (``ompi_coll_base_topo_build_bmtree``), nearest first: ``vr + 2^j`` for every ``2^j``
    above ``vr``'s highest set bit (every ``2^j < p`` at the root) that is below p.  For p a
    power of two it is the tree of :func:`children` on bit-reversed ranks.  The subtree of
    ``vr > 0`` is the ranks equal to ``vr`` modulo ``2^bit_length(vr)``, so the nearest child
    holds the largest subtree (the odd ranks below the root) and the farthest the smallest::

        p = 8:            0
                       /  |  \\
                      1   2   4
                     / \\  |
                    3   5 6
                    |
                    7
    """
    out = []
    mask = 1 << vr.bit_length()
    while vr + mask < p:
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



# ---------------------------------------------------------------------------------------------
# The other tree shapes (relative ranks, root 0): k-nomial, k-ary, chains, the in-order binary
# tree; and the two walks every tree algorithm of bcast and reduce shares.
#
# A shape is a pair of functions of the relative rank: its parent (-1 at the root) and its
# children in *reduce order* (the order a reduction folds them in; a broadcast sends to them
# farthest subtree first, the reverse of that list).


def knomial_parent(vr: int, k: int) -> int:
    """The parent of ``vr`` in the radix-``k`` k-nomial tree: ``vr`` with its lowest nonzero
    base-k digit cleared (-1 for the root).  k = 2 is :func:`parent`."""
    if vr == 0:
        return -1
    mask = 1
    while (vr // mask) % k == 0:
        mask *= k
    return vr - ((vr // mask) % k) * mask


def knomial_children(vr: int, p: int, k: int) -> list[int]:
    """The children of ``vr`` among ``p`` ranks in the radix-``k`` k-nomial tree, nearest
    first: ``vr + r k^j`` for every ``k^j`` below ``vr``'s lowest nonzero digit (every
    ``k^j < p`` at the root) and r = 1 .. k-1, that is below p.  The subtree of child
    ``vr + r k^j`` is the contiguous range ``[vr + r k^j, vr + (r+1) k^j)`` (cut at p), so a
    reduction that folds them in this order keeps rank order::

        p = 9, k = 3:        0
                          / | | \\
                         1  2  3   6
                              /|   |\\
                             4 5   7 8
    """
    out: list[int] = []
    mask = 1
    while mask < p and (vr // mask) % k == 0:
        for r in range(1, k):
            ch = vr + r * mask
            if ch >= p:
                return out
            out.append(ch)
        mask *= k
    return out


def kary_level(vr: int, k: int) -> tuple[int, int]:
    """(level, first rank of that level) of ``vr`` in Open MPI's k-ary tree (levels numbered
    breadth first: level L holds k^L ranks)."""
    level, first, width = 0, 0, 1
    while vr >= first + width:
        first += width
        width *= k
        level += 1
    return level, first


def kary_parent(vr: int, k: int) -> int:
    """The parent of ``vr`` in Open MPI's k-ary tree (-1 for the root)."""
    if vr == 0:
        return -1
    level, first = kary_level(vr, k)
    above = k ** (level - 1)
    return first - above + (vr - first) % above


def kary_children(vr: int, p: int, k: int) -> list[int]:
    """The children of ``vr`` in Open MPI's k-ary tree (``ompi_coll_base_topo_build_tree``):
    ``vr + k^L (i+1)`` for i = 0 .. k-1, L the level of ``vr``, that are below p.  The levels
    are numbered breadth first, so a node's children are not consecutive ranks (a subtree is
    not a range of ranks: a reduction on it needs a commutative op)::

        p = 7, k = 2:       0
                          /   \\
                         1     2
                        / \\   / \\
                       3   5 4   6
    """
    level, _ = kary_level(vr, k)
    step = k ** level
    return [ch for ch in (vr + step * (i + 1) for i in range(k)) if ch < p]


def chains(p: int, fanout: int) -> list[tuple[int, int]]:
    """The (head, length) of each of Open MPI's chains (``ompi_coll_base_topo_build_chain``):
    the p-1 non-root ranks cut into ``min(fanout, p-1)`` runs of consecutive ranks, the first
    ``(p-1) % fanout`` of them one longer."""
    f = min(fanout, p - 1)
    if f <= 0:
        return []
    q, r = divmod(p - 1, f)
    out, head = [], 1
    for i in range(f):
        n = q + (i < r)
        out.append((head, n))
        head += n
    return out


def chain_parent(vr: int, p: int, fanout: int) -> int:
    """The parent of ``vr`` in the chains of :func:`chains`: the root for a head, else vr-1."""
    if vr == 0:
        return -1
    return 0 if any(vr == h for h, _ in chains(p, fanout)) else vr - 1


def chain_children(vr: int, p: int, fanout: int) -> list[int]:
    """The children of ``vr`` in the chains of :func:`chains`: the heads at the root, else
    the next rank of its chain (none at its tail)::

        p = 8, fanout = 3:   0 -> 1 -> 2 -> 3
                             0 -> 4 -> 5
                             0 -> 6 -> 7
    """
    runs = chains(p, fanout)
    if vr == 0:
        return [h for h, _ in runs]
    for h, n in runs:
        if h <= vr < h + n:
            return [vr + 1] if vr + 1 < h + n else []
    return []


def in_order_children(r: int, p: int) -> tuple[int, list[int]]:
    """(parent, children) of rank ``r`` in Open MPI's in-order binary tree
    (``ompi_coll_base_topo_build_in_order_bintree``), on absolute ranks: its root is rank
    p-1; a node of a subtree of ranks ``[lo, lo + size)`` is its highest rank, its left child
    the rank just below (the top of ``[lo + size//2, lo + size - 1)``), its right child the top
    of the low half ``[lo, lo + size//2)``.  Every subtree is a range of ranks with its node on
    top, so ``right op (left op node)`` keeps rank order for any op::

        p = 9:        8
                    /   \\
                   7     3
                  / \\   / \\
                 6   5 2   1
                    /     /
                   4     0

    Children are returned nearest range first (left, then right): the order in which a
    reduction folds them in front of the node's own value (:func:`reduce_up` ``before``).
    """
    lo, size, parent = 0, p, -1
    while True:
        node = lo + size - 1
        half = size // 2
        right = lo + half - 1 if half else -1       # top of [lo, lo + half)
        left = node - 1 if size - 1 > half else -1  # top of [lo + half, node)
        if r == node:
            return parent, [c for c in (left, right) if c >= 0]
        parent = node
        if r >= lo + half:   # in the left subtree [lo + half, node)
            lo, size = lo + half, size - half - 1
        else:                # in the right subtree [lo, lo + half)
            size = half


def send_down(c: Context, buf: np.ndarray, parent: int, kids: Sequence[int],
              seg: int = 0) -> Schedule:
    """A broadcast down one tree, in segments of ``seg`` elements (0: one message).  A rank
    receives from its parent, then sends to its children (``kids``, in send order) one
    message per round, so its port serves them in that order.  With segments, a rank
    receives segment j from its parent while it forwards segment j-1 to its children (Open
    MPI's ``ompi_coll_base_bcast_intra_generic``)::

        round:        0                1                     2
        root:     s0 -> each kid   s1 -> each kid
        inner:    s0 <- parent     s1 <- parent, s0 -> kids  s1 -> kids
    """
    n = buf.size
    nseg = 1 if seg <= 0 or n <= seg else -(-n // seg)
    if nseg == 1:
        if parent >= 0:
            yield (c.recv(buf, parent),)
        for ch in kids:
            yield (c.send(buf, ch),)
        return
    segs = [buf[j * seg : (j + 1) * seg] for j in range(nseg)]
    if parent < 0:
        for part in segs:
            for ch in kids:
                yield (c.send(part, ch),)
        return
    for j in range(nseg + 1):
        ops: list[Send | Recv] = [c.recv(segs[j], parent)] if j < nseg else []
        if j:
            ops.extend(c.send(segs[j - 1], ch) for ch in kids)
        if ops:
            yield tuple(ops)


def reduce_up(c: Context, sendbuf: np.ndarray, op: MPI.Op, parent: int, kids: Sequence[int],
              *, before: bool = False) -> Generator[Round, None, np.ndarray]:
    """A reduction up one tree: receive and fold each child's partial result (``kids`` in
    fold order, one message per round, each reduced before the next round), then send this
    rank's to its parent; returns the partial result (the whole result at the top).
    ``before``: the children's ranks precede this rank's (the in-order tree: result =
    child_0 op child_1 op ... op mine), else they follow it (result = mine op child_0 op
    ...); a tree whose subtrees are ranges of ranks, folded so, keeps rank order for any op::

        p = 4, binomial:   round 1:  1 -> 0, 3 -> 2      (0: x0 op x1,  2: x2 op x3)
                           round 2:  2 -> 0              (0: (x0 op x1) op (x2 op x3))
    """
    n = sendbuf.size
    acc = sendbuf
    spare: np.ndarray | None = None
    if before and kids:  # the children's values fold into acc in place: a copy of ours
        acc = c.scratch(n)
        c.copy(sendbuf, acc)
    for ch in kids:
        tmp = spare if spare is not None else c.scratch(n)
        yield (c.recv(tmp, ch),)
        if before:
            c.reduce(tmp, acc, op)  # acc = theirs op acc
            spare = tmp
        else:
            c.reduce(acc, tmp, op)  # tmp = acc op theirs
            spare = acc if acc is not sendbuf else None
            acc = tmp
    if parent >= 0:
        yield (c.send(acc, parent),)
    return acc


# ---------------------------------------------------------------------------------------------
# Critical paths of these walks (the costs' helpers: the same trees, walked as the simulator
# runs them, one message of T seconds at a time per port).

Shape = Callable[[int], Sequence[int]]


def down_sends(p: int, kids: Shape) -> int:
    """The most messages a rank waits for in sequence in an unsegmented :func:`send_down`
    broadcast: a child that is i-th in its parent's send order has the data i+1 message
    times after its parent (the parent's port sends one message at a time)."""
    best, stack = 0, [(0, 0)]
    while stack:
        vr, t = stack.pop()
        best = max(best, t)
        stack.extend((ch, t + i + 1) for i, ch in enumerate(kids(vr)))
    return best


def up_rounds(p: int, kids: Shape, top: int = 0) -> int:
    """Message-and-reduce steps on the longest path of an unsegmented :func:`reduce_up` to
    ``top`` (each ``alpha + n beta + n gamma``): a rank receives its children one after
    another, from when both ends are ready, reducing each before the next, and its parent
    can receive from it once it is done."""
    order, stack = [], [top]
    while stack:
        vr = stack.pop()
        order.append(vr)
        stack.extend(kids(vr))
    done: dict[int, int] = {}
    for vr in reversed(order):  # children before parents
        clock = 0
        for ch in kids(vr):
            clock = max(clock, done[ch]) + 1
        done[vr] = clock
    return done[top]


# ---------------------------------------------------------------------------------------------
# Traff's circulant graph (round-optimal pipelined broadcast for any p): the skips and, per
# rank, which block it receives in each of the q rounds of a phase.


@lru_cache(maxsize=64)
def circulant_skips(p: int) -> tuple[int, ...]:
    """The q+1 skips of the circulant graph on p >= 2 ranks, q = ceil(lg p): ``skip[q] = p``,
    ``skip[k] = ceil(skip[k+1] / 2)`` (1, 2, 4, ... for a power of two).  In round k of a phase
    rank r sends to ``r + skip[k]`` and receives from ``r - skip[k]`` (mod p)."""
    q = max(1, (p - 1).bit_length())
    s = [0] * (q + 1)
    s[q] = p
    for k in range(q - 1, -1, -1):
        s[k] = (s[k + 1] + 1) // 2
    return tuple(s)


def _baseblock(r: int, s: Sequence[int]) -> int:
    """The one block of the first phase rank r > 0 receives: the last skip of r written as
    a sum of distinct skips, largest first (q for the root)."""
    q = len(s) - 1
    if r == 0:
        return q
    for k in range(q - 1, -1, -1):
        if r >= s[k]:
            r -= s[k]
            if r == 0:
                return k
    raise AssertionError(f"rank {r} is no sum of skips {s}")


@lru_cache(maxsize=4096)
def circulant_recv(r: int, p: int) -> tuple[int, ...]:
    """The block relative rank r (> 0) receives in each round k of a phase, relative to the
    phase (negative: a block of an earlier phase; its base block b in the round it first gets
    it).  Round k's block is the largest base block not yet taken among the ranks r - s with
    ``skip[k] <= s < skip[k+1]``, found as the first sum of distinct free skips, searched
    depth first from the largest, that falls in that window (Traff 2025, section 3; MPICH
    circ_graph.c ``gen_rsched``)."""
    s = circulant_skips(p)
    q = len(s) - 1
    b = _baseblock(r, s)
    below = {e: e - 1 for e in range(q + 1)}  # the free skips, a linked list from q down
    above = {e: e + 1 for e in range(q + 1)}
    above[q] = -1

    def take(e: int) -> None:  # unlinks e (its own links stay, as the search reads them)
        if above[e] != -1:
            below[above[e]] = below[e]
        if below[e] != -1:
            above[below[e]] = above[e]

    take(b)
    out: list[int] = []
    e, path, at = q, [q], p  # at = r' + p: the sum of the skips on the path
    low, high = r + p - s[1], r + p - s[0]
    while len(out) < q:
        if at < low or (at == low and below[e] > -1):
            e = below[e]
            path.append(e)
            at += s[e]
        elif at > high:
            at -= s[path.pop()]
        else:  # low < at <= high: the path's last skip is this round's block
            e = path[-1]
            out.append(e)
            high, low = low, r + p - s[len(out) + 1] if len(out) < q else 0
            take(e)
            at -= s[path.pop()]
    return tuple(b if x == q else x - q for x in out)


def circulant_rounds(vr: int, p: int, nb: int) -> list[list[tuple[bool, int, int]]]:
    """Relative rank ``vr``'s rounds of the circulant-graph broadcast of ``nb`` blocks from
    rank 0 on p >= 2 ranks: each round a list of ``(is_send, block, peer)``.  N - 1 + q rounds
    (q = ceil(lg p)); in round i (k = i mod q) a rank sends to ``vr + skip[k]`` the block that
    rank receives in round k of the phase (:func:`circulant_recv`) and receives its own, each
    phase q blocks further on; a block before 0 is not sent, one past N-1 stands for N-1.  A
    rank that must forward the block it receives in the same round (only where blocks past
    N-1 are cut back) gets a round for the receive alone first."""
    skip = circulant_skips(p)
    q = len(skip) - 1
    mine = circulant_recv(vr, p) if vr else None
    theirs = [k if vr == 0 else circulant_recv((vr + skip[k]) % p, p)[k]
              if (vr + skip[k]) % p else None for k in range(q)]
    have = [vr == 0] * nb
    x = (q - (nb - 1) % q) % q  # so that the last round is a phase's last (k = q-1)
    offset = -x
    out: list[list[tuple[bool, int, int]]] = []
    for i in range(x, nb - 1 + q + x):
        k = i % q
        ops: list[tuple[bool, int, int]] = []
        got = -1
        if mine is not None and mine[k] + offset >= 0:
            got = min(mine[k] + offset, nb - 1)
            ops.append((False, got, (vr - skip[k]) % p))
        to = theirs[k]
        if to is not None and to + offset >= 0:
            blk = min(to + offset, nb - 1)
            if not have[blk]:  # the block arriving now: receive it first
                out.append(ops)
                ops = []
            ops.append((True, blk, (vr + skip[k]) % p))
        if got >= 0:
            have[got] = True
        if ops:
            out.append(ops)
        if k == q - 1:
            offset += q
    return out
