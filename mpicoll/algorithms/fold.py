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

import math
from collections.abc import Generator, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from mpi4py import MPI

from .registry import Cost, overlapped
from .schedule import (
    Context,
    Overlap,
    Pipeline,
    Round,
    pof2_floor,
    segment_count,
    segments,
    span,
    split,
)

Sub = Generator[Round, None, int]

#: the cost of :func:`fold_in` plus :func:`fold_out` of a whole vector (a :class:`Cost` term;
#: ``fold`` is 1 if p is not a power of two)
FOLD = "fold*(2*(alpha + n*beta) + n*gamma)"
_WHERE = "p' = 2^floor(lg p), fold = [p != p']"



def halving_time(pof2: int, n: float, s: float, alpha: float, beta: float,
                 gamma: float) -> float:
    """Seconds of :func:`halving_reduce_scatter` on ``pof2`` ranks of an n-byte vector: step
    t exchanges b = n/2^t bytes as S = ceil(b/s) segments (s: segment bytes), each reduced
    while the next is in flight."""
    t, b = 0.0, float(n)
    while pof2 > 1:
        b /= 2
        nseg = max(1, math.ceil(b / s))
        t += overlapped(nseg, alpha + b / nseg * beta, b / nseg * gamma)
        pof2 //= 2
    return t


_HALVING = "halving(P, n, s, alpha, beta, gamma)"
_HALVING_WHERE = (_WHERE + "; halving = the sum over the lg p' steps of overlapped(S, alpha + "
                  "b/S beta, b/S gamma), b = n/2, n/4, ..., S = ceil(b/s) segments, s = segment "
                  "bytes (MPICOLL_SEGMENT_SIZE, 64 KiB)")
_EXTRA = {"halving": halving_time}

#: Rabenseifner's reduce and allreduce: halving reduce-scatter, then a doubling allgather or a
#: binomial gather of the blocks (the same steps and bytes), plus the fold
RABENSEIFNER = Cost(_HALVING + " + lg(P)*alpha + (P-1)/P*n*beta + " + FOLD,
                    where=_HALVING_WHERE, exact=("even", "whole_segments"), bound=0.1,
                    extra=_EXTRA)
#: recursive doubling on whole vectors, plus the fold
DOUBLING = Cost("lg(P)*(alpha + n*beta + n*gamma) + " + FOLD, where=_WHERE)
#: recursive halving (reduce-scatter): the fold hands back one block instead of the vector
HALVING = Cost(_HALVING + " + fold*(2*alpha + n*(beta + gamma) + n/p*beta)",
               where=_HALVING_WHERE, exact=("even", "pof2", "whole_segments"), bound=0.25,
               extra=_EXTRA)


def real_rank(newrank: int, rem: int) -> int:
    """The rank standing for ``newrank`` in the power-of-two group."""
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def group(ctx: Context) -> Context:
    """The power-of-two group of the ranks that stand after :func:`fold_in` (its rank is the
    new rank).  Only those ranks may call it."""
    return ctx.group(_standing(ctx.size))


@lru_cache(maxsize=64)
def _standing(p: int) -> tuple[int, ...]:
    """The ranks of :func:`group` on p ranks, made once per p (every rank of a simulated call
    asks for them: p times p steps otherwise)."""
    pof2 = pof2_floor(p)
    return tuple(real_rank(i, p - pof2) for i in range(pof2))


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


def _step_segments(g: Context, kept: Any, given: Any) -> int:
    """Segments of a halving step: those of its larger half (the partner's kept half is this
    rank's given, so both ends agree).  Per-rank sizes (numpy vectors: the simulator's vector
    engine) must give every rank the same number; ValueError otherwise (that engine then
    hands the call to another)."""
    if type(kept) is int and type(given) is int:
        return segments(g, max(kept, given))
    top = np.maximum(kept, given)
    n = segments(g, top)  # the largest rank's
    if n != segments(g, int(np.min(top))):
        raise ValueError("the ranks' halving steps differ in their number of segments")
    return n


def halving_reduce_scatter(g: Context, buf: np.ndarray, counts: Sequence[int],
                           displs: Sequence[int], op: MPI.Op
                           ) -> Generator[Round | Overlap, None, None]:
    """Recursive halving over the ``g.size`` (a power of two) contiguous blocks of ``buf``,
    on the group ``g`` (commutative op).

    In each step a rank keeps half of its current range of blocks and sends the other half to
    the partner at distance p/2, p/4, ..., 1, reducing what it receives into the half it
    keeps.  At the end ``buf``'s block ``g.rank`` holds the full reduction of that block::

        p=4:  [b0 b1 b2 b3] --dist 2--> ranks 0,1 keep b0 b1; ranks 2,3 keep b2 b3
                            --dist 1--> rank i keeps b_i

    A half larger than a segment (``ctx.segment_bytes``) travels as S segments, one round
    each, and each segment is reduced while the next is in flight (within a step: the next
    step sends part of what this one reduced).  Each element is reduced in the same order.
    """
    sc = segment_count(g)
    w = sc if buf.size > sc else buf.size  # the largest segment any step receives
    tmp = g.scratch(2 * w if buf.size > sc else w)  # segmented: one in flight, one reduced

    pipe = Pipeline()
    lo, hi = 0, g.size
    dist = g.size >> 1
    k = 0
    while dist:
        mid = (lo + hi) // 2
        partner = g.rank ^ dist
        # the upper half if the rank's bit is set, else the lower; arithmetic, not a branch,
        # so that the simulator's vector engine runs every rank at once (lo, hi per rank)
        up = (g.rank & dist) // dist
        keep = (lo + up * (mid - lo), mid + up * (hi - mid))
        give = (mid - up * (mid - lo), hi - up * (hi - mid))
        kept = span(buf, counts, displs, *keep)
        given = span(buf, counts, displs, *give)
        nseg = _step_segments(g, kept.size, given.size)
        pipe.flush()  # the next step sends part of what this one reduced: no overlap between
        if nseg == 1:
            incoming = tmp[: kept.size]
            yield g.sendrecv(given, partner, incoming, partner)
            g.reduce(incoming, kept, op)
        else:
            out, into = split(given, nseg), split(kept, nseg)
            for j in range(nseg):
                incoming = tmp[k % 2 * w : k % 2 * w + into[j].size]
                yield pipe.round(g.sendrecv(out[j], partner, incoming, partner))
                pipe.then(g.reduce, incoming, into[j], op)
                k += 1
        lo, hi = keep
        dist >>= 1
    pipe.flush()


# ---------------------------------------------------------------------------------------------
# Radix k: MPICH's recursive exchange (recexchalgo.c) folds p = k^L + rem ranks onto k^L.

def radix(p: int, k: int, shrink: bool = True) -> tuple[int, int, int]:
    """``(k', k'^L, L)``: the radix a recursive exchange runs with on p ranks (k' = k, or with
    ``shrink`` p if p < k, at least 2: MPICH's ``MPII_Recexchalgo_get_neighbors``), the
    largest power of it <= p, and its exponent."""
    if shrink and p < k:
        k = max(p, 2)
    pofk, rounds = 1, 0
    while pofk * k <= p:
        pofk *= k
        rounds += 1
    return k, pofk, rounds


def radix_rounds(p: int, k: int, shrink: bool = True) -> int:
    """L = floor(log_k' p) (:func:`radix`): the exchange phases of a radix-k algorithm."""
    return radix(p, k, shrink)[2]


def radix_fold(p: int, k: int) -> int:
    """How many ranks the busiest rank of :func:`radix_fold_in` receives from (0 if p is a
    power of k')."""
    k, pofk, _ = radix(p, k)
    return min(p - pofk, k - 1)


def radix_real_rank(newrank: int, p: int, k: int) -> int:
    """The rank standing for ``newrank`` of the k'^L group after :func:`radix_fold_in`."""
    k, pofk, _ = radix(p, k)
    rem = p - pofk
    return newrank * k + k - 1 if newrank < rem // (k - 1) else newrank + rem


def radix_group(ctx: Context, k: int) -> Context:
    """The k'^L group of the ranks that stand after :func:`radix_fold_in` (its rank is the new
    rank, in rank order).  Only those ranks may call it."""
    pofk = radix(ctx.size, k)[1]
    if pofk == ctx.size:
        return ctx
    return ctx.group([radix_real_rank(i, ctx.size, k) for i in range(pofk)])


def _radix_senders(r: int, p: int, k: int) -> tuple[int, list[int]]:
    """(the rank r sends its vector to or -1, the ranks it receives from in rank order)."""
    k, pofk, _ = radix(p, k)
    rem = p - pofk
    t = rem * k // (k - 1)  # the first t ranks form groups of k; k-1 of each fold into the last
    if r < t:
        if r % k != k - 1:
            return min(r + k - 1 - r % k, t), []  # a partial last group folds into rank t
        return -1, list(range(r - k + 1, r))
    if t >= 1 and r == t and (t - 1) % k != k - 1:  # t first: with t = 0 (p a power of k),
        # every rank of the vector engine's rank vector takes the same way
        return -1, list(range(t - (t - 1) % k - 1, t))
    return -1, []


def radix_fold_in(ctx: Context, buf: np.ndarray, op: MPI.Op, k: int) -> Sub:
    """Fold the p - k'^L extra ranks in (MPICH recursive exchange, step 1); returns this rank's
    new rank, or -1 if it sits out.

    The first t = rem k'/(k'-1) ranks form groups of k' consecutive ranks whose first k'-1
    send their vector to the last (a partial group to rank t), which reduces them in rank
    order, its own last (any op)::

        p = 11, k = 3 (9 + 2):   0, 1 -> 2          new ranks: 2 -> 0, 3..10 -> 1..8

    All of a group's messages are in flight at once (one round).
    """
    p, r = ctx.size, ctx.rank
    dest, sources = _radix_senders(r, p, k)
    if dest >= 0:
        yield (ctx.send(buf, dest),)
        return -1
    if sources:
        tmp = [ctx.scratch(buf.size) for _ in sources]
        yield tuple(ctx.recv(t, s) for t, s in zip(tmp, sources, strict=True))
        fold_left(ctx, [*tmp, buf], buf, op)
    kk, pofk, _ = radix(p, k)
    rem = p - pofk
    t = rem * kk // (kk - 1)
    return r // kk if r < t else r - rem


def radix_fold_out(ctx: Context, buf: np.ndarray, k: int) -> Generator[Round, None, None]:
    """Give the ranks :func:`radix_fold_in` folded out the result (step 3), one round."""
    dest, sources = _radix_senders(ctx.rank, ctx.size, k)
    if dest >= 0:
        yield (ctx.recv(buf, dest),)
    elif sources:
        yield tuple(ctx.send(buf, s) for s in sources)


def fold_left(ctx: Context, parts: Sequence[np.ndarray], out: np.ndarray, op: MPI.Op) -> None:
    """``out = ((parts[0] op parts[1]) op parts[2]) ...``: the parts in rank order, reduced
    left to right (the same expression on every rank, so the bits agree).  Every part but
    ``out`` may be overwritten; ``out`` may be one of them."""
    acc = parts[0]
    for x in parts[1:]:
        ctx.reduce(acc, x, op)  # x = acc op x
        acc = x
    if acc is not out:
        ctx.copy(acc, out)
