"""Shared pieces of the power-of-two algorithms: MPICH's fold of the extra ranks, and the
recursive-halving reduce-scatter / recursive-doubling allgather on blocks (Rabenseifner).

With p = 2^k + rem, ranks below 2 rem pair up: even rank 2i sends its vector to 2i+1, which
reduces it (rank order kept: the even rank's data on the left) and stands for both; the even
ranks sit out the power-of-two part.  New ranks: 2i+1 -> i for i < rem, r -> r - rem above.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
from mpi4py import MPI

from .schedule import Context, Round, pof2_floor

Sub = Generator[Round, None, int]


def real_rank(newrank: int, rem: int) -> int:
    """The rank standing for ``newrank`` in the power-of-two group."""
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def fold_in(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Sub:
    """Fold the p - 2^k extra ranks in; returns this rank's new rank, or -1 if it sits out.

    ``buf`` holds this rank's vector; on the odd partner it becomes the pair's reduction.
    """
    p, r = ctx.size, ctx.rank
    pof2 = pof2_floor(p)
    rem = p - pof2
    if r < 2 * rem:
        if r % 2 == 0:
            yield (ctx.send(buf, r + 1),)
            return -1
        tmp = ctx.scratch(buf.size)
        yield (ctx.recv(tmp, r - 1),)
        ctx.reduce(tmp, buf, op)  # buf = left op buf: lower rank on the left
        return r // 2
    return r - rem


def fold_out(ctx: Context, buf: np.ndarray) -> Generator[Round, None, None]:
    """Give the folded-out even ranks the result their odd partner holds in ``buf``."""
    p, r = ctx.size, ctx.rank
    rem = p - pof2_floor(p)
    if r < 2 * rem:
        if r % 2:
            yield (ctx.send(buf, r - 1),)
        else:
            yield (ctx.recv(buf, r + 1),)


def halving_reduce_scatter(ctx: Context, buf: np.ndarray, newrank: int, pof2: int, rem: int,
                           counts: Sequence[int], displs: Sequence[int],
                           op: MPI.Op) -> Generator[Round, None, None]:
    """Recursive halving over ``pof2`` contiguous blocks (commutative op).

    In each step a rank keeps half of its current range of blocks and sends the other half to
    the partner at distance pof2/2, pof2/4, ..., 1, reducing what it receives into the half it
    keeps.  At the end ``buf``'s block ``newrank`` holds the full reduction of that block.
    ::

        p=4:  [b0 b1 b2 b3] --dist 2--> ranks 0,1 keep b0 b1; ranks 2,3 keep b2 b3
                            --dist 1--> rank i keeps b_i

    Cost: lg p alpha + (p-1)/p n (beta + gamma).
    """
    lo, hi = 0, pof2
    dist = pof2 >> 1
    tmp = ctx.scratch(buf.size)
    while dist:
        mid = (lo + hi) // 2
        partner = real_rank(newrank ^ dist, rem)
        if newrank & dist:
            keep, give = (mid, hi), (lo, mid)
        else:
            keep, give = (lo, mid), (mid, hi)
        ks, ke = displs[keep[0]], displs[keep[1] - 1] + counts[keep[1] - 1]
        gs, ge = displs[give[0]], displs[give[1] - 1] + counts[give[1] - 1]
        yield ctx.sendrecv(buf[gs:ge], partner, tmp[: ke - ks], partner)
        ctx.reduce(tmp[: ke - ks], buf[ks:ke], op)
        lo, hi = keep
        dist >>= 1


def doubling_allgather(ctx: Context, buf: np.ndarray, newrank: int, pof2: int, rem: int,
                       counts: Sequence[int], displs: Sequence[int]
                       ) -> Generator[Round, None, None]:
    """Recursive doubling over ``pof2`` contiguous blocks: the inverse of
    :func:`halving_reduce_scatter` (distances 1, 2, ..., pof2/2).  Cost: lg p alpha +
    (p-1)/p n beta."""
    dist = 1
    while dist < pof2:
        mine = newrank & ~(dist - 1)
        theirs = mine ^ dist
        partner = real_rank(newrank ^ dist, rem)
        ms, me = displs[mine], displs[mine + dist - 1] + counts[mine + dist - 1]
        ts, te = displs[theirs], displs[theirs + dist - 1] + counts[theirs + dist - 1]
        yield ctx.sendrecv(buf[ms:me], partner, buf[ts:te], partner)
        dist <<= 1
