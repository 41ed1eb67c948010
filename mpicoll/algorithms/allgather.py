"""Allgather(v): every rank's block ends up on every rank, in rank order.

Schedules take ``(ctx, buf, counts, displs)``: ``buf`` is the whole receive buffer, whose
block ``ctx.rank`` (``counts[rank]`` elements at ``displs[rank]``) already holds this rank's
contribution; the schedule fills in the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule, block, blocks, contiguous_span, displacements, span

#: the ring's cost (also the allgather half of the ring allreduce and ring broadcast)
RING = Cost("(p-1)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.1)


@algorithm(
    ("allgather", "allgatherv"), "ring",
    cost=RING,
    source="MPICH allgather_intra_ring / allgatherv_intra_ring",
)
def ring(ctx: Context, buf: np.ndarray, counts: Sequence[int],
         displs: Sequence[int]) -> Schedule:
    """Ring allgather: in step s, pass block (rank - s) right and receive (rank - s - 1)::

        step 0:  r0 sends b0 -> r1,  r1 sends b1 -> r2, ...,  r(p-1) sends b(p-1) -> r0
        step 1:  r0 sends b(p-1) -> r1, r1 sends b0 -> r2, ...

    Every link carries one block per step; p-1 steps.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):
        yield ctx.sendrecv(block(buf, counts, displs, (r - s) % p), right,
                           block(buf, counts, displs, (r - s - 1) % p), left)


@algorithm(
    "allgather", "recursive_doubling",
    cost=Cost("lg(p)*alpha + (p-1)/p*n*beta"),
    restrictions=("pof2",),
    source="MPICH allgather_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                       displs: Sequence[int]) -> Schedule:
    """Recursive doubling: in step k, exchange everything gathered so far with rank ^ 2^k::

        k=0: {0}<->{1}   {2}<->{3}          (p = 4)
        k=1: {0,1}<->{2,3}

    Data doubles each step; lg p steps.  Blocks not laid out back to back are packed.
    """
    p, r = ctx.size, ctx.rank
    packed = tuple(displs) == displacements(counts)  # blocks back to back: no span check
    dist = 1
    while dist < p:
        mine = r & ~(dist - 1)
        theirs = mine ^ dist
        whole_s = packed or contiguous_span(counts, displs, mine, mine + dist) is not None
        whole_r = packed or contiguous_span(counts, displs, theirs, theirs + dist) is not None
        sbuf = (span(buf, counts, displs, mine, mine + dist) if whole_s else
                ctx.pack(blocks(buf, counts, displs, range(mine, mine + dist))))
        rparts = [] if whole_r else blocks(buf, counts, displs, range(theirs, theirs + dist))
        rbuf = (span(buf, counts, displs, theirs, theirs + dist) if whole_r else
                ctx.scratch(sum(int(v.size) for v in rparts)))
        yield ctx.sendrecv(sbuf, r ^ dist, rbuf, r ^ dist)
        if not whole_r:
            ctx.unpack(rbuf, rparts)
        dist <<= 1


@algorithm(
    ("allgather", "allgatherv"), "bruck",
    cost=Cost("clg(p)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.1),
    source="Bruck et al., IEEE TPDS 8(11) 1997; MPICH allgather_intra_brucks",
)
def bruck(ctx: Context, buf: np.ndarray, counts: Sequence[int],
          displs: Sequence[int]) -> Schedule:
    """Bruck allgather: any p in ceil(lg p) steps, through a rotated temporary buffer.

    ``tmp`` holds blocks in the order rank, rank+1, ..., rank-1.  In step k (k = 1, 2, 4, ...)
    a rank sends its first min(k, p-k) blocks to rank - k and appends the same number received
    from rank + k.  A final copy puts the blocks back in rank order (+ one local copy of n)::

        p = 5, rank 0:   tmp = [b0]  -k=1->  [b0 b1]  -k=2->  [b0 b1 b2 b3]  -k=4->  [b0 .. b4]
    """
    p, r = ctx.size, ctx.rank
    order = [(r + i) % p for i in range(p)]
    offs = [0]
    for i in order:
        offs.append(offs[-1] + counts[i])
    tmp = ctx.scratch(offs[-1])
    ctx.copy(block(buf, counts, displs, r), tmp[: counts[r]])
    k = 1
    while k < p:
        m = min(k, p - k)
        yield ctx.sendrecv(tmp[: offs[m]], (r - k) % p,
                           tmp[offs[k] : offs[k + m]], (r + k) % p)
        k <<= 1
    for i in range(1, p):
        ctx.copy(tmp[offs[i] : offs[i + 1]], block(buf, counts, displs, order[i]))


@default_rule("allgather", "allgatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling for short/medium totals on powers of two, Bruck for short
    # totals otherwise, ring for long messages.
    if nbytes < 524288 and p & (p - 1) == 0:
        return "recursive_doubling"
    if nbytes < 81920:
        return "bruck"
    return "ring"
