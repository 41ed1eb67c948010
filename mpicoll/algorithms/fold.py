"""Shared pieces of the power-of-two algorithms: MPICH's fold of the extra ranks, and the
recursive-halving reduce-scatter on blocks (Rabenseifner).

With p = 2^k + rem, ranks below 2 rem pair up: even rank 2i sends its vector to 2i+1, which
reduces it (rank order kept: the even rank's data on the left) and stands for both; the even
ranks sit out the power-of-two part.  New ranks: 2i+1 -> i for i < rem, r -> r - rem above::

    p = 6 (rem 2):   fold in:   0 -> 1,  2 -> 3          (1, 3 reduce)
                     pof2 part: ranks 1, 3, 4, 5 as new ranks 0, 1, 2, 3
                     fold out:  1 -> 0,  3 -> 2          (the result)
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
from mpi4py import MPI

from .registry import Cost
from .schedule import Context, Round, pof2_floor, span

Sub = Generator[Round, None, int]

#: the cost of :func:`fold_in` plus :func:`fold_out` of a whole vector (a :class:`Cost` term;
#: ``fold`` is 1 if p is not a power of two)
FOLD = "fold*(2*(alpha + n*beta) + n*gamma)"
_WHERE = "p' = 2^floor(lg p), fold = [p != p']"

#: Rabenseifner's reduce and allreduce: halving reduce-scatter, then a doubling allgather or a
#: binomial gather of the blocks (the same steps and bytes), plus the fold
RABENSEIFNER = Cost("2*lg(P)*alpha + (P-1)/P*n*(2*beta + gamma) + " + FOLD, where=_WHERE,
                    exact=("even",), bound=0.1)
#: recursive doubling on whole vectors, plus the fold
DOUBLING = Cost("lg(P)*(alpha + n*beta + n*gamma) + " + FOLD, where=_WHERE)
#: recursive halving (reduce-scatter): the fold hands back one block instead of the vector
HALVING = Cost("lg(P)*alpha + (P-1)/P*n*(beta + gamma) + "
               "fold*(2*alpha + n*(beta + gamma) + n/p*beta)", where=_WHERE,
               exact=("even", "pof2"), bound=0.25)


def real_rank(newrank: int, rem: int) -> int:
    """The rank standing for ``newrank`` in the power-of-two group."""
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def group(ctx: Context) -> Context:
    """The power-of-two group of the ranks that stand after :func:`fold_in` (its rank is the
    new rank).  Only those ranks may call it."""
    pof2 = pof2_floor(ctx.size)
    rem = ctx.size - pof2
    return ctx.group([real_rank(i, rem) for i in range(pof2)])


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


def halving_reduce_scatter(g: Context, buf: np.ndarray, counts: Sequence[int],
                           displs: Sequence[int], op: MPI.Op) -> Generator[Round, None, None]:
    """Recursive halving over the ``g.size`` (a power of two) contiguous blocks of ``buf``,
    on the group ``g`` (commutative op).

    In each step a rank keeps half of its current range of blocks and sends the other half to
    the partner at distance p/2, p/4, ..., 1, reducing what it receives into the half it
    keeps.  At the end ``buf``'s block ``g.rank`` holds the full reduction of that block::

        p=4:  [b0 b1 b2 b3] --dist 2--> ranks 0,1 keep b0 b1; ranks 2,3 keep b2 b3
                            --dist 1--> rank i keeps b_i
    """
    lo, hi = 0, g.size
    dist = g.size >> 1
    tmp = g.scratch(buf.size)
    while dist:
        mid = (lo + hi) // 2
        partner = g.rank ^ dist
        keep, give = ((mid, hi), (lo, mid)) if g.rank & dist else ((lo, mid), (mid, hi))
        kept = span(buf, counts, displs, *keep)
        yield g.sendrecv(span(buf, counts, displs, *give), partner, tmp[: kept.size], partner)
        g.reduce(tmp[: kept.size], kept, op)
        lo, hi = keep
        dist >>= 1
