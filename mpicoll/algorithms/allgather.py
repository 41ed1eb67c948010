"""Allgather(v): every rank's block ends up on every rank, in rank order.

Schedules take ``(ctx, buf, counts, displs)``: ``buf`` is the whole receive buffer, whose
block ``ctx.rank`` (``counts[rank]`` elements at ``displs[rank]``) already holds this rank's
contribution; the schedule fills in the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import Cost, algorithm, default_rule
from .schedule import (
    Context,
    Recv,
    Schedule,
    Send,
    block,
    blocks,
    contiguous_span,
    displacements,
    span,
)

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


def _outgoing(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
              lo: int, hi: int, packed: bool) -> np.ndarray:
    """Blocks ``lo .. hi-1`` as one send buffer: a view where they lie back to back (always
    where ``packed``: the blocks fill the buffer in rank order), else a packed copy."""
    if packed or contiguous_span(counts, displs, lo, hi) is not None:
        return span(buf, counts, displs, lo, hi)
    return ctx.pack(blocks(buf, counts, displs, range(lo, hi)))


def _incoming(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
              lo: int, hi: int, packed: bool) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Where blocks ``lo .. hi-1`` are received: ``(view, None)`` where they lie back to back,
    else ``(scratch, parts)``: :meth:`Context.unpack` the scratch into ``parts`` after the
    round."""
    if packed or contiguous_span(counts, displs, lo, hi) is not None:
        return span(buf, counts, displs, lo, hi), None
    parts = blocks(buf, counts, displs, range(lo, hi))
    return ctx.scratch(sum(int(v.size) for v in parts)), parts


@algorithm(
    ("allgather", "allgatherv"), "recursive_doubling",
    cost=Cost("lg(p)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.5),
    restrictions=("pof2",),
    source="MPICH allgather_intra_recursive_doubling / allgatherv_intra_recursive_doubling "
           "(its non-power-of-two branch is marked experimental and asserted off); Thakur, "
           "Rabenseifner & Gropp 2005",
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
        rbuf, parts = _incoming(ctx, buf, counts, displs, theirs, theirs + dist, packed)
        yield ctx.sendrecv(_outgoing(ctx, buf, counts, displs, mine, mine + dist, packed),
                           r ^ dist, rbuf, r ^ dist)
        if parts is not None:
            ctx.unpack(rbuf, parts)
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


@algorithm(
    ("allgather", "allgatherv"), "direct",
    cost=Cost("(p-1)*alpha + (p-1)/p*n*beta", exact=("even", "one_peer"), bound="p/4 + 0.1"),
    source="Open MPI ompi_coll_base_allgather_direct_messaging (main; allgather algorithm 8, "
           "not in 5.0.x) and the linear allgatherv (coll/base default_allgatherv: gatherv + "
           "bcast is tuned's ID 1; this is the direct exchange)",
)
def direct(ctx: Context, buf: np.ndarray, counts: Sequence[int],
           displs: Sequence[int]) -> Schedule:
    """Direct messaging: one round in which every rank sends its block to every other rank and
    receives theirs, peers taken from rank + 1 onwards::

        p = 4, rank 0:  recv b1 <- r1, send b0 -> r1, recv b2 <- r2, send b0 -> r2, ...

    p-1 messages in and out of every rank; the network orders them (p(p-1) messages in all:
    for small blocks).
    """
    p, r = ctx.size, ctx.rank
    own = block(buf, counts, displs, r)
    ops: list[Send | Recv] = []
    for i in range(1, p):
        q = (r + i) % p
        ops += (ctx.recv(block(buf, counts, displs, q), q), ctx.send(own, q))
    if ops:
        yield tuple(ops)


@algorithm(
    ("allgather", "allgatherv"), "two_proc",
    cost=RING,
    source="Open MPI ompi_coll_base_allgather_intra_two_procs / allgatherv_intra_two_procs "
           "(tuned allgather 6, allgatherv 5)",
)
def two_proc(ctx: Context, buf: np.ndarray, counts: Sequence[int],
             displs: Sequence[int]) -> Schedule:
    """Two ranks swap their blocks in one exchange::

        r0: send b0 -> r1, recv b1 <- r1        r1: send b1 -> r0, recv b0 <- r0

    Open MPI refuses any other p (MPI_ERR_UNSUPPORTED_OPERATION); here p != 2 runs ``ring``
    (of which this exchange is the p = 2 case), so the cost is the ring's everywhere.
    """
    if ctx.size != 2:
        yield from ring(ctx, buf, counts, displs)
        return
    r = ctx.rank
    yield ctx.sendrecv(block(buf, counts, displs, r), 1 - r,
                       block(buf, counts, displs, 1 - r), 1 - r)


@algorithm(
    ("allgather", "allgatherv"), "neighbor_exchange",
    cost=Cost("R*alpha + (p-1)/p*n*beta", let=(("R", "p/2 if p % 2 == 0 else p-1"),),
              exact=("even",), bound=0.5),
    source="Chen et al., HPCAsia 2005; Open MPI ompi_coll_base_allgather_intra_neighborexchange"
           " / allgatherv_intra_neighborexchange (tuned 5 / 4)",
)
def neighbor_exchange(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                      displs: Sequence[int]) -> Schedule:
    """Neighbor exchange (even p): p/2 steps, alternating between the two ring neighbours.

    Step 0: even rank r and r+1 swap their own blocks, so each holds the pair {r, r+1}.
    Step i >= 1: exchange with the neighbour on side i % 2 (an even rank: right at odd
    steps, left at even ones; an odd rank the mirror) the pair received in the step before,
    receiving the next pair out from that side::

        p = 6      r0      r1      r2      r3      r4      r5
        step 0   {0,1}   {0,1}   {2,3}   {2,3}   {4,5}   {4,5}     (0<->1, 2<->3, 4<->5)
        step 1   +{4,5}  +{2,3}  +{0,1}  +{4,5}  +{2,3}  +{0,1}    (1<->2, 3<->4, 5<->0)
        step 2   +{2,3}  +{4,5}  +{4,5}  +{0,1}  +{0,1}  +{2,3}    (0<->1, 2<->3, 4<->5)

    One block then p/2 - 1 two-block messages.  Odd p runs ``ring``, as Open MPI does.
    Pairs not laid out back to back (allgatherv) are packed.
    """
    p, r = ctx.size, ctx.rank
    if p % 2:
        yield from ring(ctx, buf, counts, displs)
        return
    packed = tuple(displs) == displacements(counts)
    if r % 2 == 0:
        nbr, frm, step = ((r + 1) % p, (r - 1) % p), [r, r], (2, -2)
    else:
        nbr, frm, step = ((r - 1) % p, (r + 1) % p), [r - 1, r - 1], (-2, 2)
    yield ctx.sendrecv(block(buf, counts, displs, r), nbr[0],
                       block(buf, counts, displs, nbr[0]), nbr[0])
    send_from = frm[0]  # the pair {r - r % 2, ...} this rank now holds
    for i in range(1, p // 2):
        side = i % 2
        frm[side] = (frm[side] + step[side]) % p
        rbuf, parts = _incoming(ctx, buf, counts, displs, frm[side], frm[side] + 2, packed)
        yield ctx.sendrecv(_outgoing(ctx, buf, counts, displs, send_from, send_from + 2, packed),
                           nbr[side], rbuf, nbr[side])
        if parts is not None:
            ctx.unpack(rbuf, parts)
        send_from = frm[side]


@algorithm(
    ("allgather", "allgatherv"), "sparbit",
    cost=Cost("(p-1)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.5),
    source="Loch & Koslovski, Sparbit: a new logarithmic-cost and data locality-aware MPI "
           "Allgather algorithm, SBAC-PAD 2021; Open MPI ompi_coll_base_allgather_intra_sparbit "
           "/ allgatherv_intra_sparbit (tuned 7 / 6)",
)
def sparbit(ctx: Context, buf: np.ndarray, counts: Sequence[int],
            displs: Sequence[int]) -> Schedule:
    """Sparbit: Bruck's ceil(lg p) steps with the distances reversed (largest first), every
    block sent straight from the receive buffer as its own message.

    Step i (distance d = 2^(ceil(lg p)-1-i)): send to rank + d the blocks rank, rank - 2d,
    rank - 4d, ... (all held so far), receive from rank - d the blocks rank - d, rank - 3d,
    ...; a step whose distance is a bit where p's trailing pattern says the block would
    arrive twice sends one block fewer::

        p = 6 (d = 4, 2, 1)   rank 0 holds   {0} -> {0,2} -> {0,2,4} -> {0..5}
                              sends          1       1         3      (blocks, one message each)

    p-1 messages of one block in and out of each rank; no local copy.
    """
    p, r = ctx.size, ctx.rank
    steps = (p - 1).bit_length() if p > 1 else 0
    dist = 1 << (steps - 1) if steps else 0
    low = (p & -p).bit_length() - 1 if p else 0  # trailing zero bits of p
    ignore = (~(p >> low) | 1) << low  # the distances whose step sends one block fewer
    expected = 1
    for _ in range(steps):
        to, frm = (r + dist) % p, (r - dist) % p
        excl = int(dist & ignore == dist)
        ops: list[Send | Recv] = []
        for t in range(expected - excl):
            ops.append(ctx.recv(block(buf, counts, displs, (r - (2 * t + 1) * dist) % p), frm))
            ops.append(ctx.send(block(buf, counts, displs, (r - 2 * t * dist) % p), to))
        if ops:
            yield tuple(ops)
        dist >>= 1
        expected = 2 * expected - excl


@default_rule("allgather", "allgatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling for short/medium totals on powers of two, Bruck for short
    # totals otherwise, ring for long messages.
    if nbytes < 524288 and p & (p - 1) == 0:
        return "recursive_doubling"
    if nbytes < 81920:
        return "bruck"
    return "ring"
