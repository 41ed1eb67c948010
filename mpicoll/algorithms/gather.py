"""Gather(v): every rank's block lands at block i of the root's receive buffer.

Schedules take ``(ctx, sendbuf, recvbuf, counts, displs, root)``: ``sendbuf`` is this rank's
block, ``recvbuf`` the root's whole receive buffer (None elsewhere) with ``counts``/``displs``
per rank (known at the root).  With ``MPI.IN_PLACE`` at the root, ``sendbuf`` is the root's
own block of ``recvbuf``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import tree
from .registry import Cost, algorithm, default_rule
from .scatter import LINEAR, linear_exchange
from .schedule import Context, Recv, Schedule, Send, block, equal_blocks, span


@algorithm(
    ("gather", "gatherv"), "linear",
    cost=LINEAR,
    source="MPICH gatherv_allcomm_linear",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
           counts: Sequence[int] | None, displs: Sequence[int] | None,
           root: int) -> Schedule:
    """Every rank sends its block straight to the root, which has all receives posted at once::

        p = 4, root 0:   one round:  1 -b1-> 0,  2 -b2-> 0,  3 -b3-> 0

    The root's single port receives them one after another.
    """
    yield from linear_exchange(ctx, root, sendbuf, recvbuf, counts, displs, gather=True)


@algorithm(
    "gather", "binomial",
    cost=Cost("clg(p)*alpha + (p-1)/p*n*beta"),
    source="MPICH gather_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
             counts: Sequence[int] | None, displs: Sequence[int] | None,
             root: int) -> Schedule:
    """Binomial-tree gather, the mirror of the binomial scatter::

        p = 4:   step 1:  1 --[b1]--> 0,   3 --[b3]--> 2
                 step 2:  2 --[b2 b3]--> 0

    Relative rank vr collects its children's subtrees (blocks [vr, vr + subtree)) into one
    buffer, then sends it to its parent in a single message; the root finally puts the blocks
    from relative into rank order.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    assert counts is not None
    n = counts[0]  # one block, in this rank's units (the root's: its receive datatype's)
    rel_counts, rel_displs = equal_blocks(n, p)
    kids = tree.children(vr, p)
    if not kids and vr != 0:
        yield (c.send(sendbuf, tree.parent(vr)),)
        return
    direct = (vr == 0 and root == 0 and recvbuf is not None and displs is not None
              and (tuple(displs) == tuple(rel_displs) if n else True))
    tmp = recvbuf if direct else c.scratch(tree.subtree(vr, p) * n)
    assert tmp is not None
    c.copy(sendbuf, tmp[:n])
    ops = tuple(c.recv(span(tmp, rel_counts, rel_displs, ch, ch + tree.subtree(ch, p), vr * n), ch)
                for ch in kids)
    if ops:
        yield ops
    if vr != 0:
        yield (c.send(tmp, tree.parent(vr)),)
        return
    if not direct:
        assert recvbuf is not None
        assert displs is not None
        for i in range(p):
            c.copy(block(tmp, rel_counts, rel_displs, i),
                   block(recvbuf, rel_counts, displs, (i + root) % p))


@algorithm(
    "gather", "linear_sync",
    cost=Cost("(p > 1)*p*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.1),
    source="Open MPI coll_base_gather.c ompi_coll_base_gather_intra_linear_sync",
)
def linear_sync(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
                counts: Sequence[int] | None, displs: Sequence[int] | None,
                root: int) -> Schedule:
    """Linear gather paced by the root: a rank sends its block only after an empty message
    from the root says go; the root sends the next rank its go while it receives the block
    of the rank before, so at most one block is ever unexpected::

        p = 4, root 0:   round 1:  0 -go-> 1
                         round 2:  1 -b1-> 0,  0 -go-> 2
                         round 3:  2 -b2-> 0,  0 -go-> 3
                         round 4:  3 -b3-> 0

    Open MPI also splits each block, its first segment (``first_segment_size``) sent
    synchronously and the rest after; here a block travels whole (a split by bytes is not
    reproducible by ranks whose datatypes differ in size: schedule rule 6).
    """
    p, r = ctx.size, ctx.rank
    go = sendbuf[:0]
    if r != root:
        yield (ctx.recv(go, root),)
        yield (ctx.send(sendbuf, root),)
        return
    assert recvbuf is not None
    assert counts is not None
    assert displs is not None
    ctx.copy(sendbuf, block(recvbuf, counts, displs, root))
    others = [i for i in range(p) if i != root]
    for j in range(len(others) + 1):
        ops: list[Send | Recv] = []
        if j:
            prev = others[j - 1]
            ops.append(ctx.recv(block(recvbuf, counts, displs, prev), prev))
        if j < len(others):
            ops.append(ctx.send(recvbuf[:0], others[j]))
        yield tuple(ops)


@default_rule("gather", "gatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "binomial" if p > 2 else "linear"
