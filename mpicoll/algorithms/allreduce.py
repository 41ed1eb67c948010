"""Allreduce: every rank ends with the reduction of all ranks' vectors.

Schedules take ``(ctx, buf, op)``: ``buf`` holds this rank's input and receives the result
(the backend copies the send buffer in unless ``MPI.IN_PLACE``).  Every algorithm leaves
bitwise-identical results on all ranks: each element is reduced once, in one order, and copied.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .bcast import binomial as _bcast_binomial
from .reduce import TREE as _TREE
from .reduce import TREE_EXTRA as _TREE_EXTRA
from .reduce import TREE_WHERE as _TREE_WHERE
from .reduce import binomial as _reduce_binomial
from .reduce_scatter import RING as _RING
from .reduce_scatter import RING_LET as _RING_LET
from .reduce_scatter import SEGS
from .reduce_scatter import ring_core as _reduce_scatter_ring
from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule, block_counts, displacements, span


@algorithm(
    "allreduce", "recursive_doubling",
    cost=_pof2.DOUBLING,
    source="MPICH allreduce_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Recursive doubling: in step k, exchange the whole vector with rank ^ 2^k and reduce::

        k=0: 0<->1  2<->3     k=1: 0<->2  1<->3        (p = 4; everyone has it all)

    Extra ranks beyond 2^k are folded in first and given the result at the end (MPICH).
    The lower rank's data is always the left operand, so non-commutative ops are correct.
    The short-message allreduce.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        acc, tmp = buf, ctx.scratch(buf.size)
        mask = 1
        while mask < g.size:
            partner = g.rank ^ mask
            yield g.sendrecv(acc, partner, tmp, partner)
            if partner < g.rank:
                ctx.reduce(tmp, acc, op)  # acc = theirs op mine
            else:
                ctx.reduce(acc, tmp, op)  # tmp = mine op theirs
                acc, tmp = tmp, acc
            mask <<= 1
        if acc is not buf:
            ctx.copy(acc, buf)
    yield from _pof2.fold_out(ctx, buf)


@algorithm(
    "allreduce", "ring",
    cost=Cost(_RING + " + (p-1)*(alpha + n/p*beta)", let=_RING_LET, where=SEGS,
              exact=("even", "whole_segments"), bound=0.1),
    restrictions=("commutative",),
    source="Patarasuk & Yuan, JPDC 69(2) 2009; MPICH allreduce_intra_ring; baidu-allreduce",
)
def ring(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Bandwidth-optimal ring: a ring reduce-scatter, then a ring allgather, of p blocks::

        reduce-scatter (p-1 steps): each step a rank passes one partial block right and adds
                                    the one from its left; rank r ends owning block r.
        allgather      (p-1 steps): the finished blocks travel once around the ring.

    Each rank sends and receives 2 n (p-1)/p bytes.  Needs a commutative op (blocks are
    reduced in ring order).  Blocks larger than a segment travel as segments, each reduced
    while the next is in flight (:func:`~mpicoll.algorithms.reduce_scatter.ring_core`).
    """
    counts = block_counts(buf.size, ctx.size)
    displs = displacements(counts)
    yield from _reduce_scatter_ring(ctx, buf, counts, displs, op)
    yield from _allgather_ring(ctx, buf, counts, displs)


@algorithm(
    "allreduce", "rabenseifner",
    cost=_pof2.RABENSEIFNER,
    restrictions=("commutative",),
    source="Rabenseifner 2004; MPICH allreduce_intra_reduce_scatter_allgather",
)
def rabenseifner(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling allgather::

        p = 4:   halving:   {0,1} <-[halves]-> {2,3};  0<->1, 2<->3    rank i owns block i
                 doubling:  0<->1, 2<->3;  {0,1} <-[halves]-> {2,3}    everyone has it all

    Bandwidth like the ring with only 2 lg p messages; extra ranks beyond 2^k are folded in.
    Needs a commutative op.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        counts = block_counts(buf.size, g.size)
        displs = displacements(counts)
        yield from _pof2.halving_reduce_scatter(g, buf, counts, displs, op)
        yield from _allgather_rd(g, buf, counts, displs)
    yield from _pof2.fold_out(ctx, buf)


@algorithm(
    "allreduce", "reduce_bcast",
    cost=Cost(_TREE + " + clg(p)*(alpha + n*beta)", where=_TREE_WHERE, extra=_TREE_EXTRA,
              exact=("whole_segments",), bound=0.1),
    source="MPI-1 reference implementations (MPICH 1.x): binomial reduce to 0, then bcast",
)
def reduce_bcast(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then binomial broadcast from rank 0::

        p = 4:   reduce:  1 -> 0, 3 -> 2;  2 -> 0        bcast:  0 -> 2;  0 -> 1, 2 -> 3
    """
    yield from _reduce_binomial(ctx, buf, buf if ctx.rank == 0 else None, op, 0)
    yield from _bcast_binomial(ctx, buf, 0)


#: the radix-k terms of a :class:`Cost` (with ``extra=_RADIX``): K the radix used (k, or p if
#: p < k), L = floor(log_K p) exchange phases on K^L ranks, f the ranks the busiest one folds in
def _radix_k(p: int, k: int) -> int:
    return _pof2.radix(p, k)[0]


def _radix_pow(p: int, k: int, shrink: bool = True) -> int:
    return _pof2.radix(p, k, shrink)[1]


_RADIX = {"radix_k": _radix_k, "radix_pow": _radix_pow, "radix_rounds": _pof2.radix_rounds,
          "radix_fold": _pof2.radix_fold}
_RADIX_LET = (("k", "2"), ("K", "radix_k(p, k)"), ("L", "radix_rounds(p, k)"),
              ("f", "radix_fold(p, k)"))
_RADIX_WHERE = ("K = k, or p if p < k (at least 2); L = floor(log_K p); f = min(p - K^L, K - 1) "
                "ranks folded into one")


def _exchange(g: Context, buf: np.ndarray, op: MPI.Op, k: int, rounds: int) -> Schedule:
    """Recursive exchange on the k^rounds ranks of ``g``: in phase j a rank trades its whole
    vector with the k-1 ranks that differ from it in base-k digit j only, and reduces the k
    vectors in rank order (left to right: the same expression on every rank)::

        k = 3, 9 ranks:  phase 0 (digit 0):  {0 1 2} {3 4 5} {6 7 8}
                         phase 1 (digit 1):  {0 3 6} {1 4 7} {2 5 8}

    A phase is k-1 rounds: in round i a rank sends to the member of digit + i and receives
    from the one of digit - i (mod k), a permutation of the group (MPICH posts the k-1
    exchanges at once: the same messages, which a single-port rank serialises anyway).
    """
    tmp = [g.scratch(buf.size) for _ in range(k - 1)]
    d = 1
    for _ in range(rounds):
        dig = (g.rank // d) % k
        base = g.rank - dig * d
        for i in range(1, k):
            yield g.sendrecv(buf, base + (dig + i) % k * d, tmp[i - 1], base + (dig - i) % k * d)
        parts = [buf if e == dig else tmp[(dig - e) % k - 1] for e in range(k)]
        _pof2.fold_left(g, parts, buf, op)
        d *= k


@algorithm(
    "allreduce", "recexch",
    cost=Cost("L*(K-1)*(alpha + n*beta + n*gamma) + f*(2*(alpha + n*beta) + n*gamma)",
              let=_RADIX_LET, where=_RADIX_WHERE, extra=_RADIX),
    source="MPICH allreduce_intra_recexch (recexchalgo.c neighbours)",
)
def recexch(ctx: Context, buf: np.ndarray, op: MPI.Op, *, k: int = 2) -> Schedule:
    """Recursive exchange: radix-k recursive doubling, any p (MPICH ``recexch``)::

        p = 11, k = 3:   fold in:   0, 1 -> 2                  (2 reduces x0 x1 x2)
                         exchange:  new ranks 0..8 (ranks 2..10), 2 phases of 3-rank groups
                         fold out:  2 -> 0, 1                  (the result)

    Step 1 folds the p - k^L extra ranks into groups of k consecutive ranks
    (:func:`~mpicoll.algorithms.fold.radix_fold_in`), step 2 is :func:`_exchange` on the k^L
    that stand, step 3 hands the result back.  Every fold and every phase reduces in rank
    order, so any op is allowed and every rank ends with the same bits.  k = 2 is recursive
    doubling with MPICH's non-power-of-two fold of whole groups.
    """
    kk, _, rounds = _pof2.radix(ctx.size, k)
    newrank = yield from _pof2.radix_fold_in(ctx, buf, op, kk)
    if newrank >= 0:
        yield from _exchange(_pof2.radix_group(ctx, kk), buf, op, kk, rounds)
    yield from _pof2.radix_fold_out(ctx, buf, kk)


@algorithm(
    "allreduce", "recursive_multiplying",
    cost=Cost("L*(k-1)*(alpha + n*beta + n*gamma) + f*(2*(alpha + n*beta) + n*gamma)",
              let=(("k", "2"), ("L", "radix_rounds(p, k, False)"),
                   ("f", "ceil((p - radix_pow(p, k, False))/radix_pow(p, k, False))")),
              where="L = floor(log_k p) (0 if p < k); f = ceil((p - k^L)/k^L)",
              extra=_RADIX),
    restrictions=("commutative",),
    source="MPICH allreduce_intra_recursive_multiplying",
)
def recursive_multiplying(ctx: Context, buf: np.ndarray, op: MPI.Op, *, k: int = 2
                          ) -> Schedule:
    """Recursive multiplying: the radix-k exchange of :func:`recexch` on ranks 0..k^L-1, the
    others folded in round robin (MPICH ``recursive_multiplying``)::

        p = 11, k = 3:   pre:   9 -> 0, 10 -> 1                 (reduced: commutative op)
                         main:  ranks 0..8, 2 phases of 3-rank groups (as recexch)
                         post:  0 -> 9, 1 -> 10

    Rank r < k^L receives from r + k^L, r + 2 k^L, ... in one round.  k is not lowered
    when p < k (then rank 0 alone gathers and answers everyone).
    """
    p, r = ctx.size, ctx.rank
    _, pofk, rounds = _pof2.radix(p, k, shrink=False)
    extra = list(range(r + pofk, p, pofk)) if r < pofk else []
    if r >= pofk:
        yield (ctx.send(buf, r % pofk),)
    elif extra:
        tmp = [ctx.scratch(buf.size) for _ in extra]
        yield tuple(ctx.recv(t, s) for t, s in zip(tmp, extra, strict=True))
        _pof2.fold_left(ctx, [*tmp, buf], buf, op)
    if r < pofk:
        g = ctx if pofk == p else ctx.group(list(range(pofk)))
        yield from _exchange(g, buf, op, k, rounds)
    if r >= pofk:
        yield (ctx.recv(buf, r % pofk),)
    elif extra:
        yield tuple(ctx.send(buf, s) for s in extra)


@algorithm(
    "allreduce", "k_reduce_scatter_allgather",
    cost=Cost("2*L*(K-1)*alpha + (1 - K**-L)*n*(2*beta + gamma) + f*(2*(alpha + n*beta) + "
              "n*gamma)", let=_RADIX_LET, where=_RADIX_WHERE, extra=_RADIX, exact=("even",),
              bound=0.1),
    restrictions=("commutative",),
    source="MPICH allreduce_intra_k_reduce_scatter_allgather (recexchalgo.c neighbours)",
)
def k_reduce_scatter_allgather(ctx: Context, buf: np.ndarray, op: MPI.Op, *, k: int = 2
                               ) -> Schedule:
    """k-ary Rabenseifner: a radix-k recursive-exchange reduce-scatter of k^L blocks, then the
    mirror allgather, the extra ranks folded as in :func:`recexch`::

        k = 3, 9 ranks, blocks b0..b8:
          reduce-scatter:  {0 3 6}: rank 0 keeps b0-b2, 3 keeps b3-b5, 6 keeps b6-b8
                           (each sends the other two their thirds, reduces the two it gets)
                           {0 1 2}: rank 0 keeps b0, 1 keeps b1, 2 keeps b2
          allgather:       the same groups in reverse, each passing what it holds

    A phase is k-1 rounds (round i: to digit + i, from digit - i, mod k).  Each rank sends
    and receives 2 n (k^L-1)/k^L bytes in 2 L (k-1) messages.  Blocks are reduced in the
    order they arrive: needs a commutative op (MPICH asserts it).
    """
    kk, pofk, rounds = _pof2.radix(ctx.size, k)
    newrank = yield from _pof2.radix_fold_in(ctx, buf, op, kk)
    if newrank >= 0:
        g = _pof2.radix_group(ctx, kk)
        counts = block_counts(buf.size, pofk)
        displs = displacements(counts)
        tmp = g.scratch(span(buf, counts, displs, 0, pofk // kk).size if rounds else 0)
        v = g.rank
        d = pofk
        for _ in range(rounds):  # reduce-scatter: groups of the top digit first, ranges shrink
            d //= kk
            dig, lo = (v // d) % kk, v - v % (kk * d)
            kept = span(buf, counts, displs, lo + dig * d, lo + (dig + 1) * d)
            for i in range(1, kk):
                to, frm = (dig + i) % kk, (dig - i) % kk
                yield g.sendrecv(span(buf, counts, displs, lo + to * d, lo + (to + 1) * d),
                                 lo + to * d + v % d, tmp[: kept.size], lo + frm * d + v % d)
                g.reduce(tmp[: kept.size], kept, op)
        for _ in range(rounds):  # allgather: the same groups in reverse, ranges grow
            dig, lo = (v // d) % kk, v - v % (kk * d)
            mine = span(buf, counts, displs, lo + dig * d, lo + (dig + 1) * d)
            for i in range(1, kk):
                to, frm = (dig + i) % kk, (dig - i) % kk
                yield g.sendrecv(mine, lo + to * d + v % d,
                                 span(buf, counts, displs, lo + frm * d, lo + (frm + 1) * d),
                                 lo + frm * d + v % d)
            d *= kk
    yield from _pof2.radix_fold_out(ctx, buf, kk)


@default_rule("allreduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling up to 2 KiB or for non-commutative ops, Rabenseifner above;
    # ring for long vectors when p is not a power of two (fold costs a full extra vector).
    if not commutative or nbytes <= 2048:
        return "recursive_doubling"
    if p & (p - 1) and nbytes >= 1 << 20:
        return "ring"
    return "rabenseifner"
