"""Allgather(v): every rank's block ends up on every rank, in rank order.

Schedules take ``(ctx, buf, counts, displs)``: ``buf`` is the whole receive buffer, whose
block ``ctx.rank`` (``counts[rank]`` elements at ``displs[rank]``) already holds this rank's
contribution; the schedule fills in the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import algorithm, clg, default_rule, lg
from .schedule import Context, Schedule, contiguous_span


def _views(buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
           ranks: Sequence[int]) -> list[np.ndarray]:
    return [buf[displs[i] : displs[i] + counts[i]] for i in ranks]


@algorithm(
    ("allgather", "allgatherv"), "ring",
    formula="(p-1) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH allgather_intra_ring / allgatherv_intra_ring",
)
def ring(ctx: Context, buf: np.ndarray, counts: Sequence[int],
         displs: Sequence[int]) -> Schedule:
    """Ring allgather: in step s, pass block (rank - s) right and receive (rank - s - 1).

    ::

        step 0:  r0 sends b0 -> r1,  r1 sends b1 -> r2, ...,  r(p-1) sends b(p-1) -> r0
        step 1:  r0 sends b(p-1) -> r1, r1 sends b0 -> r2, ...

    Every link carries one block per step; p-1 steps.  Cost: (p-1) alpha + (p-1)/p n beta.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):
        sb, rb = (r - s) % p, (r - s - 1) % p
        yield ctx.sendrecv(buf[displs[sb] : displs[sb] + counts[sb]], right,
                           buf[displs[rb] : displs[rb] + counts[rb]], left)


@algorithm(
    "allgather", "recursive_doubling",
    formula="lg p alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: lg(p) * a + (p - 1) / p * n * b,
    restrictions=("pof2",),
    source="MPICH allgather_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                       displs: Sequence[int]) -> Schedule:
    """Recursive doubling: in step k, exchange everything gathered so far with rank ^ 2^k.

    ::

        k=0: {0}<->{1}   {2}<->{3}          (p = 4)
        k=1: {0,1}<->{2,3}

    Data doubles each step; lg p steps.  Needs p = 2^k.  Cost: lg p alpha + (p-1)/p n beta.
    """
    p, r = ctx.size, ctx.rank
    dist = 1
    while dist < p:
        mine = r & ~(dist - 1)
        theirs = mine ^ dist
        send_span = contiguous_span(counts, displs, mine, mine + dist)
        recv_span = contiguous_span(counts, displs, theirs, theirs + dist)
        sbuf = (buf[send_span[0] : send_span[1]] if send_span else
                ctx.pack(_views(buf, counts, displs, range(mine, mine + dist))))
        rparts = _views(buf, counts, displs, range(theirs, theirs + dist))
        rbuf = (buf[recv_span[0] : recv_span[1]] if recv_span else
                ctx.scratch(sum(int(v.size) for v in rparts)))
        yield ctx.sendrecv(sbuf, r ^ dist, rbuf, r ^ dist)
        if not recv_span:
            ctx.unpack(rbuf, rparts)
        dist <<= 1


@algorithm(
    ("allgather", "allgatherv"), "bruck",
    formula="ceil(lg p) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: clg(p) * a + (p - 1) / p * n * b,
    source="Bruck et al., IEEE TPDS 8(11) 1997; MPICH allgather_intra_brucks",
)
def bruck(ctx: Context, buf: np.ndarray, counts: Sequence[int],
          displs: Sequence[int]) -> Schedule:
    """Bruck allgather: any p in ceil(lg p) steps, through a rotated temporary buffer.

    ``tmp`` holds blocks in the order rank, rank+1, ..., rank-1.  In step k (k = 1, 2, 4, ...)
    a rank sends its first min(k, p-k) blocks to rank - k and appends the same number received
    from rank + k.  A final copy puts the blocks back in rank order.
    Cost: ceil(lg p) alpha + (p-1)/p n beta (+ one local copy of n).
    """
    p, r = ctx.size, ctx.rank
    order = [(r + i) % p for i in range(p)]
    offs = [0]
    for i in order:
        offs.append(offs[-1] + counts[i])
    tmp = ctx.scratch(offs[-1])
    ctx.copy(buf[displs[r] : displs[r] + counts[r]], tmp[: counts[r]])
    k = 1
    while k < p:
        m = min(k, p - k)
        yield ctx.sendrecv(tmp[: offs[m]], (r - k) % p,
                           tmp[offs[k] : offs[k + m]], (r + k) % p)
        k <<= 1
    for i in range(1, p):
        src = order[i]
        ctx.copy(tmp[offs[i] : offs[i + 1]], buf[displs[src] : displs[src] + counts[src]])


def _unit(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
          members: Sequence[int]) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """One node's blocks: a single view if they are back to back, else the list to pack."""
    parts = _views(buf, counts, displs, members)
    ordered = list(members) == list(range(members[0], members[-1] + 1))
    span = contiguous_span(counts, displs, members[0], members[-1] + 1) if ordered else None
    return (buf[span[0] : span[1]] if span else None), parts


@algorithm(
    "allgather", "smp",
    formula="(k-1) alpha_i + (N-1) (alpha_o + k n/p beta_o) + ceil(lg k) (alpha_i + n beta_i); "
            "k ranks per node, N nodes",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH allgather_intra_smp (gather, leaders' allgather, bcast); Open MPI coll/han",
    auto=False,
)
def smp(ctx: Context, buf: np.ndarray, counts: Sequence[int],
        displs: Sequence[int]) -> Schedule:
    """Hierarchical allgather: gather each node's blocks to its leader, a ring allgather of
    whole node units among the leaders, then a broadcast of the full buffer inside each node.
    Each node's data crosses the network once per other node, in one message per step.
    Cost: (k-1) alpha_i + (N-1)(alpha_o + k n/p beta_o) + ceil(lg k)(alpha_i + n beta_i).
    """
    from .bcast import binomial as bcast_binomial
    from .gather import linear as gather_linear

    groups, index = ctx.node_groups()
    mine = index[ctx.rank]
    members = groups[mine]
    local = ctx.group(members)
    me = buf[displs[ctx.rank] : displs[ctx.rank] + counts[ctx.rank]]
    yield from gather_linear(local, me, buf if local.rank == 0 else None,
                             [counts[m] for m in members], [displs[m] for m in members], 0)
    nn = len(groups)
    if local.rank == 0 and nn > 1:
        leaders = ctx.group([g[0] for g in groups])
        right, left = (mine + 1) % nn, (mine - 1) % nn
        for s in range(nn - 1):
            sview, sparts = _unit(ctx, buf, counts, displs, groups[(mine - s) % nn])
            rview, rparts = _unit(ctx, buf, counts, displs, groups[(mine - s - 1) % nn])
            out = sview if sview is not None else ctx.pack(sparts)
            inc = rview if rview is not None else ctx.scratch(sum(int(v.size) for v in rparts))
            yield leaders.sendrecv(out, right, inc, left)
            if rview is None:
                ctx.unpack(inc, rparts)
    total = contiguous_span(counts, displs, 0, ctx.size)
    if total is not None:
        yield from bcast_binomial(local, buf[total[0] : total[1]], 0)
    else:
        every = _views(buf, counts, displs, range(ctx.size))
        whole = ctx.pack(every) if local.rank == 0 else ctx.scratch(sum(counts))
        yield from bcast_binomial(local, whole, 0)
        ctx.unpack(whole, every)


@default_rule("allgather", "allgatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling for short/medium totals on powers of two, Bruck for short
    # totals otherwise, ring for long messages.
    if nbytes < 524288 and p & (p - 1) == 0:
        return "recursive_doubling"
    if nbytes < 81920:
        return "bruck"
    return "ring"
