"""Allreduce: every rank ends with the reduction of all ranks' vectors.

Schedules take ``(ctx, buf, op)``: ``buf`` holds this rank's input and receives the result
(the backend copies the send buffer in unless ``MPI.IN_PLACE``).  Every algorithm leaves
bitwise-identical results on all ranks: each element is reduced once, in one order, and copied.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .allgather import bine_peer as _swing_peer  # Swing's peers are Bine's butterfly
from .allgather import bruck as _allgather_bruck
from .allgather import halving_skips
from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .bcast import binomial as _bcast_binomial
from .reduce import TREE as _TREE
from .reduce import TREE_EXTRA as _TREE_EXTRA
from .reduce import TREE_WHERE as _TREE_WHERE
from .reduce import binomial as _reduce_binomial
from .reduce import linear as _reduce_linear
from .reduce_scatter import RING as _RING
from .reduce_scatter import RING_LET as _RING_LET
from .reduce_scatter import SEGS
from .reduce_scatter import ring_core as _reduce_scatter_ring
from .registry import Cost, Param, algorithm, default_rule
from .schedule import (
    Context,
    Recv,
    Schedule,
    Send,
    Table,
    block_counts,
    displacements,
    equal_blocks,
    segment,
    segment_bounds,
    segment_count,
    span,
)


@algorithm(
    "allreduce", "recursive_doubling",
    cost=_pof2.DOUBLING,
    source="MPICH allreduce_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Recursive doubling: in step k, exchange the whole vector with rank ^ 2^k and reduce::

        k=0: 0<->1  2<->3     k=1: 0<->2  1<->3        (p = 4; everyone has it all)

    Extra ranks beyond 2^k are folded in first and given the result at the end (MPICH).
    The lower rank's data is always the left operand, so non-commutative ops are correct;
    a commutative op reduces into the rank's own vector whichever side it is on (MPICH's
    ``is_commutative || dst < rank``: a op b and b op a are bit for bit equal there, but for
    MAX and MIN, whose pick among a NaN or signed zeros depends on the order), so no rank
    copies its result at the end.  The short-message allreduce.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        acc, tmp = buf, ctx.scratch(buf.size)
        # predefined MAX and MIN pick an operand by comparison: with a NaN or signed zeros
        # the pick depends on the order, which must then be every rank's
        commutative = op.is_commutative and op != MPI.MAX and op != MPI.MIN
        mask = 1
        while mask < g.size:
            partner = g.rank ^ mask
            yield g.sendrecv(acc, partner, tmp, partner)
            if commutative or partner < g.rank:
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
_RADIX_LET = (("K", "radix_k(p, k)"), ("L", "radix_rounds(p, k)"),
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
    params=(Param("k", 2, 2, 64, "radix: ranks per exchange group", examples=(3, 4)),),
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
              let=(("L", "radix_rounds(p, k, False)"),
                   ("f", "ceil((p - radix_pow(p, k, False))/radix_pow(p, k, False))")),
              where="L = floor(log_k p) (0 if p < k); f = ceil((p - k^L)/k^L)",
              extra=_RADIX),
    restrictions=("commutative",),
    params=(Param("k", 2, 2, 64, "radix: ranks per exchange group", examples=(3, 4)),),
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
    params=(Param("k", 2, 2, 64, "radix: ranks per exchange group", examples=(4, 8)),),
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


class _Tree(NamedTuple):
    """A tree on p ranks (:func:`_knomial1_tree`, :func:`_dtree`), per rank: parent (-1 at
    the root), its i-th child in ``kid[i]`` (-1 where there is none) and how many, height
    (the longest path down to a leaf) and depth; and the root's height (``max(height)``,
    kept: a rank's schedule reads it, and p ranks scanning p heights each is O(p^2)).
    Tables, so that a vector of ranks (the simulator's) reads its entries at once."""

    parent: Table
    kid: tuple[Table, ...]
    nkids: Table
    height: Table
    depth: Table
    top: int

    def children(self, v: Any) -> list[Any]:
        """The children of rank ``v`` (a rank vector: of a class of ranks with as many)."""
        return [self.kid[i][v] for i in range(self.nkids[v])]


def _tree_tables(parent: list[int], kids: list[list[int]]) -> _Tree:
    """The :class:`_Tree` of the ranks' parents and children (one root)."""
    p = len(parent)
    height, depth = [0] * p, [0] * p
    order = [r for r in range(p) if parent[r] < 0]
    for v in order:  # breadth first from the root (the list grows as it is walked)
        for c in kids[v]:
            depth[c] = depth[v] + 1
            order.append(c)
    for v in reversed(order):
        height[v] = max((height[c] + 1 for c in kids[v]), default=0)
    width = max((len(k) for k in kids), default=0)
    return _Tree(Table(parent), tuple(Table(k[i] if i < len(k) else -1 for k in kids)
                                      for i in range(width)),
                 Table(len(k) for k in kids), Table(height), Table(depth), max(height))


def _knomial1(v: int, p: int, k: int) -> tuple[int, list[int]]:
    """(parent or -1, children in rank order) of rank ``v`` in MPICH's ``knomial_1`` tree on p
    ranks (``MPII_Treeutil_tree_knomial_1_init``, root 0): ranks numbered in preorder, so the
    subtree of v is a range [v, v + size) and its first child has the largest subtree::

        p = 8, k = 2:      0             p = 9, k = 3:       0
                        /  |  \\                        / /  \\  \\
                       1   5   7                      1  4   7  8
                      / \\  |                         /|  |
                     2   4 6                        2 3  5 6
                     |
                     3
    """
    steps, t = 0, p - 1
    while t:
        t //= k
        steps += 1
    parent, current, running, step = -1, 0, 1, 0
    while v != current:
        for _ in range(1, k):
            size = k ** (steps - step - 1)
            if running <= v < running + size:
                parent, current, running = current, running, running + 1
                break
            running += size
        step += 1
    kids, child = [], v + 1
    for i in range(step, steps):
        for _ in range(1, k):
            if child < p:
                kids.append(child)
            child += k ** (steps - i - 1)
    return parent, kids


@lru_cache(maxsize=16)
def _knomial1_tree(p: int, k: int) -> _Tree:
    trees = [_knomial1(v, p, k) for v in range(p)]
    return _tree_tables([up for up, _ in trees], [kids for _, kids in trees])


def tree_time(p: int, k: int, n: float, alpha: float, beta: float, gamma: float) -> float:
    """Seconds of :func:`tree` on p ranks (the critical path, single-port): up the tree a rank
    receives its children in order (each when it is ready: ``alpha + n beta``, then
    ``n gamma``), down the tree it sends to them in order.  For p = k^L:
    ``(k-1) (L(L+1)/2 (alpha + n (beta + gamma)) + L (alpha + n beta))`` (the first child
    holds the deepest subtree, which the parent waits for before the next)."""
    m = alpha + n * beta
    tree = _knomial1_tree(p, k)
    ready, sent, got = [0.0] * p, [0.0] * p, [0.0] * p
    for v in range(p - 1, -1, -1):  # preorder: children are higher ranks
        t = 0.0
        for c in tree.children(v):
            sent[c] = max(t, ready[c]) + m
            t = sent[c] + n * gamma
        ready[v] = t
    end = got[0] = ready[0]
    for v in range(p):
        t = got[v]
        for c in tree.children(v):
            t = got[c] = max(t, sent[c]) + m
        end = max(end, t)
    return end


@algorithm(
    "allreduce", "tree",
    cost=Cost("knomial_tree(p, k, n, alpha, beta, gamma)",
              where="knomial_tree = (k-1) (L(L+1)/2 (alpha + n (beta + gamma)) + L (alpha + "
                    "n beta)) for p = k^L, L = log_k p: the critical path of MPICH's knomial_1 "
                    "tree, up then down",
              extra={"knomial_tree": tree_time}),
    params=(Param("k", 2, 2, 64, "tree radix (k-nomial)", examples=(3, 4)),),
    source="MPICH allreduce_intra_tree (tree_type knomial_1, one chunk); treeutil.c",
)
def tree(ctx: Context, buf: np.ndarray, op: MPI.Op, *, k: int = 2) -> Schedule:
    """k-nomial tree reduce to rank 0, then broadcast down the same tree (MPICH ``tree``
    with its default ``knomial_1`` tree, :func:`_knomial1`)::

        p = 4, k = 2 (0: 1, 3;  1: 2):   up:    2 -> 1;  1 -> 0;  3 -> 0
                                         down:  0 -> 1;  0 -> 3, 1 -> 2

    A rank folds its children in rank order, its own vector first (subtrees are ranges of
    ranks in preorder), so any op is allowed.  MPICH pipelines the vector in chunks
    (``MPIR_CVAR_ALLREDUCE_TREE_PIPELINE_CHUNK_SIZE``, default 0: one chunk); this is the
    one-chunk form.
    """
    tree = _knomial1_tree(ctx.size, k)
    parent, kids = tree.parent[ctx.rank], tree.children(ctx.rank)
    acc, spare = buf, None
    for c in kids:
        tmp = spare if spare is not None else ctx.scratch(buf.size)
        yield (ctx.recv(tmp, c),)
        ctx.reduce(acc, tmp, op)  # tmp = mine op theirs (theirs: higher ranks)
        spare = acc if acc is not buf else None
        acc = tmp
    if parent >= 0:
        yield (ctx.send(acc, parent),)
        yield (ctx.recv(buf, parent),)
    elif acc is not buf:
        ctx.copy(acc, buf)
    for c in kids:
        yield (ctx.send(buf, c),)


@algorithm(
    "allreduce", "basic_linear",
    cost=Cost("(p-1)*(2*alpha + n*(2*beta + gamma))"),
    source="Open MPI coll_base_allreduce_intra_basic_linear (coll/basic's reduce and bcast)",
)
def basic_linear(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Linear reduce to rank 0, then linear broadcast from it (Open MPI ``basic_linear``)::

        p = 4:   reduce:  3 -> 0;  2 -> 0;  1 -> 0     (0 folds x0 op (x1 op (x2 op x3)))
                 bcast:   0 -> 1, 2, 3                  (one round, p-1 messages)

    The reduce is :func:`mpicoll.algorithms.reduce.linear` (exact rank order: any op).
    """
    p, r = ctx.size, ctx.rank
    if r == 0:
        mine = ctx.scratch(buf.size)
        ctx.copy(buf, mine)
        yield from _reduce_linear(ctx, mine, buf, op, 0)
        if p > 1:
            yield tuple(ctx.send(buf, i) for i in range(1, p))
    else:
        yield from _reduce_linear(ctx, buf, None, op, 0)
        yield (ctx.recv(buf, 0),)


@algorithm(
    "allreduce", "allgather_reduce",
    cost=Cost("clg(p)*alpha + (p-1)*n*(beta + gamma)"),
    source="Open MPI coll_base_allreduce_intra_allgather_reduce (main, tuned ID 7; not in "
           "5.0.x)",
)
def allgather_reduce(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Every rank gathers every vector (Bruck allgather, ceil(lg p) rounds), then reduces all
    p of them locally (Open MPI ``allgather_reduce``: latency bought with bandwidth)::

        p = 3:   allgather:  everyone holds [x0 x1 x2]
                 reduce:     x0 op (x1 op x2) on every rank       (rank order: any op)

    Each rank receives (p-1) n bytes and reduces (p-1) n: for small vectors only.  Open MPI
    reduces into x0 (``x_i op acc``, i = 1, 2, ...); here the fold runs from the last rank
    down, so non-commutative ops keep rank order.
    """
    p, r, n = ctx.size, ctx.rank, buf.size
    counts, displs = equal_blocks(n, p)
    work = ctx.scratch(n * p)
    ctx.copy(buf, work[r * n : (r + 1) * n])
    yield from _allgather_bruck(ctx, work, counts, displs)
    if p > 1:
        for i in range(p - 2, -1, -1):  # acc (block p-1 onwards) = x_i op acc
            ctx.reduce(work[i * n : (i + 1) * n], work[(p - 1) * n :], op)
        ctx.copy(work[(p - 1) * n :], buf)


def _ring_phases(p: int, n: float, s: float) -> int:
    """The phases of :func:`segmented_ring` for n bytes, s-byte segments: n/(p s) rounded
    (Open MPI adds a phase when the remainder exceeds half a phase), at least 1."""
    if n < p * s:
        return 1
    whole, rest = divmod(n, p * s)
    return int(whole) + (rest > p * s / 2)


@algorithm(
    "allreduce", "segmented_ring",
    cost=Cost("(p > 1)*(P_s*(p-1)*(alpha + n/(p*P_s)*(beta + gamma)) + (p-1)*(alpha + "
              "n/p*beta))", let=(("P_s", "ring_phases(p, n, s)"),),
              where="P_s = phases: 1 if n < p s, else n/(p s) rounded (a remainder over half "
                    "a phase adds one); s = seg, or MPICOLL_SEGMENT_SIZE (64 KiB)",
              extra={"ring_phases": _ring_phases}, exact=("even",), bound=0.1),
    restrictions=("commutative",),
    params=(Param("seg", 0, 0, 1 << 30, "segment bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(4096,)),),
    source="Open MPI coll_base_allreduce_intra_ring_segmented (tuned ID 5)",
)
def segmented_ring(ctx: Context, buf: np.ndarray, op: MPI.Op, *, seg: int = 0) -> Schedule:
    """Open MPI's segmented ring: the ring reduce-scatter run once per *phase* on one segment
    of every block, then one ring allgather of whole blocks::

        p = 3, 2 phases (block b_i = segments b_i.0 b_i.1):
          phase 0:  ring reduce-scatter of b0.0 b1.0 b2.0     (p-1 steps)
          phase 1:  ring reduce-scatter of b0.1 b1.1 b2.1     (p-1 steps)
          allgather: ring of whole blocks b0 b1 b2            (p-1 steps)

    The phases are ``count / (p segcount)`` rounded (segcount: elements in a segment of
    ``seg`` bytes, default ``ctx.segment_bytes``); below p segments it is the plain,
    unsegmented ring.  mpicoll's
    ``ring`` instead segments each step (every segment of a block before the next block) and
    overlaps reductions with transfers.  Needs a commutative op.
    """
    p, r, n = ctx.size, ctx.rank, buf.size
    counts = block_counts(n, p)
    displs = displacements(counts)
    phases = _ring_phases(p, n, max(1, seg // max(1, ctx.unit)) if seg else segment_count(ctx))
    right, left = (r + 1) % p, (r - 1) % p
    tmp = ctx.scratch(-(-counts[0] // phases) if p > 1 else 0)
    for ph in range(phases):
        for st in range(p - 1):
            sb, rb = (r - st - 1) % p, (r - st - 2) % p
            a, b = segment(displs[sb], counts[sb], phases, ph)
            c, d = segment(displs[rb], counts[rb], phases, ph)
            yield ctx.sendrecv(buf[a:b], right, tmp[: d - c], left)
            ctx.reduce(tmp[: d - c], buf[c:d], op)
    yield from _allgather_ring(ctx, buf, counts, displs)


@lru_cache(maxsize=16)
def _swing_layout(p: int) -> Table:
    """For p = 2^L ranks: the block each rank owns after Swing's reduce-scatter.

    The ranks a rank reaches through steps s..L-1 (itself, its step-s peer, their step-s+1
    peers, ...) form a group of 2^(L-s); the groups of step s+1 pair up into those of step s.
    Numbering the blocks along that hierarchy (the group of the least rank of each pair
    first) makes every group's blocks the aligned range of 2^(L-s) blocks around its
    members' own, so every message is one contiguous span of the vector (the paper sends
    scattered blocks)::

        p = 4 (peers: step 0  0-1, 2-3;  step 1  0-3, 1-2):  owners of blocks 0..3 = 0 3 1 2
    """
    gid = list(range(p))  # the least rank of r's group at level s
    order: dict[int, list[int]] = {r: [r] for r in range(p)}
    for s in range(p.bit_length() - 2, -1, -1):
        new: dict[int, list[int]] = {}
        ids = []
        for r in range(p):
            a, b = gid[r], gid[_swing_peer(r, s, p)]
            lo, hi = min(a, b), max(a, b)
            if lo not in new:
                new[lo] = order[lo] + order[hi]
            ids.append(lo)
        if any(len(v) != p >> s for v in new.values()):
            raise AssertionError(f"Swing on {p} ranks is not a butterfly")
        gid, order = ids, new
    pos = [0] * p
    for i, r in enumerate(order[0]):
        pos[r] = i
    return Table(pos)  # indexable by every rank at once (the simulator's vector engine)


@algorithm(
    "allreduce", "swing_latency",
    cost=_pof2.DOUBLING,
    restrictions=("commutative",),
    source="De Sensi, Bonato, Saam & Hoefler, Swing: Short-cutting Rings for Higher Bandwidth "
           "Allreduce, NSDI 2024 (latency-optimal variant); also Bine's allreduce (De Sensi et "
           "al., Bine Trees, SC 2025; libbine allreduce_bine_lat, github.com/HLC-Lab/pico: the "
           "same butterfly); fold of the extra ranks: MPICH",
)
def swing_latency(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Swing, latency-optimal: recursive doubling whose step-s peer is ``r + rho(s)`` for an
    even rank, ``r - rho(s)`` for an odd one, rho = 1, -1, 3, -5, 11, ... (distances 1, 1, 3,
    5, 11, ...: on a ring or torus the peers stay close, where doubling goes 2^s away)::

        p = 8:  step 0: 0-1 2-3 4-5 6-7   step 1: 0-7 1-2 3-4 5-6   step 2: 0-3 1-6 2-5 4-7

    Whole vectors are exchanged and reduced each step (lg p steps).  A valid butterfly only
    for a power of two: extra ranks are folded in first (:mod:`~mpicoll.algorithms.fold`).
    The groups combined are not ranges of ranks: needs a commutative op.  Nor are they
    nested alike on every rank (p = 8: after step 1 rank 0 holds 0 1 6 7, rank 1 holds
    0 1 2 3), so each rank brackets the reduction its own way: from 8 ranks on, results of
    an op that is not exactly associative (floating-point SUM, PROD) may differ between ranks
    in their last bits, which MPI recommends against (MPI 4.1, 6.9.1) and every other
    allreduce here avoids; exact for integer and logical data.  Bine's allreduce
    (SC 2025) runs this butterfly: libbine's peer function is this rho, so Bine's latency and
    bandwidth allreduce are :func:`swing_latency` and :func:`swing_bandwidth`.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        tmp = ctx.scratch(buf.size)
        for s in range(g.size.bit_length() - 1):
            peer = _swing_peer(g.rank, s, g.size)
            yield g.sendrecv(buf, peer, tmp, peer)
            ctx.reduce(tmp, buf, op)
    yield from _pof2.fold_out(ctx, buf)


#: Swing's (and Bine's) bandwidth-optimal butterfly, plus the fold
_SWING_BANDWIDTH = Cost("2*lg(P)*alpha + (P-1)/P*n*(2*beta + gamma) + " + _pof2.FOLD,
                        where="p' = 2^floor(lg p), fold = [p != p']", exact=("even",),
                        bound=0.1)


@algorithm(
    "allreduce", "swing_bandwidth",
    cost=_SWING_BANDWIDTH,
    restrictions=("commutative",),
    source="De Sensi, Bonato, Saam & Hoefler, Swing: Short-cutting Rings for Higher Bandwidth "
           "Allreduce, NSDI 2024 (bandwidth-optimal variant); also Bine's allreduce (De Sensi "
           "et al., Bine Trees, SC 2025; libbine allreduce_bine_bdw_static: the same "
           "butterfly); fold of the extra ranks: MPICH",
)
def swing_bandwidth(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Swing, bandwidth-optimal: a reduce-scatter then an allgather on Swing's peers (see
    :func:`swing_latency`), Rabenseifner's volumes with Swing's short distances::

        p = 4, blocks 0..3 owned by ranks 0 3 1 2 (:func:`_swing_layout`):
          reduce-scatter:  step 0  0-1, 2-3 trade halves;  step 1  0-3, 1-2 trade quarters
          allgather:       step 1  0-3, 1-2;  step 0  0-1, 2-3         (the reverse)

    In step s a rank sends its peer the blocks of the ranks the peer reaches in the steps
    after s, and keeps those it reaches itself; blocks are numbered so that each such set
    is one span.  Extra ranks beyond 2^k are folded in.  Needs a commutative op.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        q, v, rounds = g.size, g.rank, g.size.bit_length() - 1
        pos = _swing_layout(q)
        counts = block_counts(buf.size, q)
        displs = displacements(counts)
        tmp = ctx.scratch(span(buf, counts, displs, 0, q // 2).size if rounds else 0)

        def held(r: int, s: int) -> np.ndarray:  # the blocks r's group holds at level s
            w = q >> s
            lo = pos[r] - pos[r] % w
            return span(buf, counts, displs, lo, lo + w)

        for s in range(rounds):  # reduce-scatter: halves, quarters, ...
            peer = _swing_peer(v, s, q)
            kept = held(v, s + 1)
            yield g.sendrecv(held(peer, s + 1), peer, tmp[: kept.size], peer)
            ctx.reduce(tmp[: kept.size], kept, op)
        for s in range(rounds - 1, -1, -1):  # allgather: the same steps in reverse
            peer = _swing_peer(v, s, q)
            yield g.sendrecv(held(v, s + 1), peer, held(peer, s + 1), peer)
    yield from _pof2.fold_out(ctx, buf)


def _btree(p: int, r: int) -> tuple[int, list[int]]:
    """(parent or -1, children) of rank r in NCCL's binary tree on p ranks (``ncclGetBtree``,
    src/graph/trees.cc): an in-order tree whose root 0 has one child, the largest power of
    two below p; rank r with lowest set bit b hangs below ``(r ^ b) | 2b`` (``r ^ b`` when
    that is out of range) and has children ``r - b/2`` and ``r + b'`` (b' the largest of
    b/2, b/4, ... that stays below p)."""
    bit = 1
    while bit < p and not bit & r:
        bit <<= 1
    if r == 0:
        return -1, ([bit >> 1] if p > 1 else [])
    up = (r ^ bit) | (bit << 1)
    if up >= p:
        up = r ^ bit
    low = bit >> 1
    if not low:
        return up, []
    kids = [r - low]
    while low and r + low >= p:
        low >>= 1
    if low:
        kids.append(r + low)
    return up, kids


@lru_cache(maxsize=16)
def _dtree(p: int) -> tuple[_Tree, _Tree]:
    """NCCL's double binary tree on p ranks (``ncclGetDtree``): the binary tree of
    :func:`_btree` and its mirror (r -> p-1-r, p even) or its shift by one (r -> r+1, p odd),
    so that a rank inner in one tree is (mostly) a leaf in the other."""

    def build(to: Callable[[int], int], back: Callable[[int], int]) -> _Tree:
        parent, kids = [], []
        for r in range(p):
            up, ch = _btree(p, to(r))
            parent.append(back(up) if up >= 0 else -1)
            kids.append([back(c) for c in ch])
        return _tree_tables(parent, kids)

    first = build(lambda r: r, lambda r: r)
    if p % 2 == 0:
        return first, build(lambda r: p - 1 - r, lambda r: p - 1 - r)
    return first, build(lambda r: (r - 1) % p, lambda r: (r + 1) % p)


@algorithm(
    "allreduce", "double_binary_tree",
    cost=Cost("(p > 1)*((4*lg(p) - 2 + min(8, 2*(p-1))*(C-1))*(alpha + m*beta) + "
              "(lg(p) + C - 1)*m*gamma)",
              let=(("C", "max(1, ceil(n/(2*s)))"), ("m", "n/(2*C)")),
              where="C = ceil(n/(2 s)) chunks of m bytes in each half; s = seg, or "
                    "MPICOLL_SEGMENT_SIZE (64 KiB); an estimate fitted to the simulator "
                    "(2 lg p - 1 fill and drain steps; a step moves up to 4 chunks through an "
                    "inner rank's ports, which the single-port rounds serialise to about 8)",
              exact=("one_peer", "even", "whole_segments"), bound=0.5),
    restrictions=("commutative",),
    params=(Param("seg", 0, 0, 1 << 30, "chunk bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(4096,)),),
    source="NCCL double binary tree (src/graph/trees.cc ncclGetBtree/ncclGetDtree; Sanders, "
           "Speck & Traff, Parallel Computing 35(12) 2009), run on MPI point-to-point",
)
def double_binary_tree(ctx: Context, buf: np.ndarray, op: MPI.Op, *, seg: int = 0
                       ) -> Schedule:
    """Two complementary binary trees, each reducing then broadcasting one half of the vector,
    pipelined in chunks (NCCL's tree allreduce, on CPUs)::

        p = 8:  tree 0 (half 0)          tree 1 (half 1, mirrored: r -> 7-r)
                0 - 4                    7 - 3
                   / \\                     / \
                  2   6                   5   1
                 / \\ / \\                 / \\ / \
                1  3 5  7               6  4 2  0

        chunk c of a half goes up from a rank of height h at step h + c (its children's
        arrived and were reduced before), down from a rank of depth d at step H + d + c
        (H: the root's height); both trees and all chunks advance in the same steps.

    Every message's step is known to both ends, so each step is one round carrying both
    trees' messages (the lower tree first).  A rank inner in one tree is a leaf of the other,
    so both halves move at once.  Subtrees of the second tree are not ranges of ranks: needs
    a commutative op.
    """
    p, r, n = ctx.size, ctx.rank, buf.size
    if p == 1:
        return
    seg_n = max(1, seg // max(1, ctx.unit)) if seg else segment_count(ctx)
    halves = ((0, (n + 1) // 2), ((n + 1) // 2, n // 2))
    trees = _dtree(p)
    nch = [max(1, -(-size // seg_n)) for _, size in halves]
    kids = [tr.children(r) for tr in trees]
    tmp = [[ctx.scratch(size) for _ in kids[t]] for t, (_, size) in enumerate(halves)]

    # This rank's messages as streams: a (tree, direction, peer) moves its half's chunks one
    # a step, chunk c at step first + c.  A stream is (first step, the step after its last,
    # the chunks' views, ctx.send or ctx.recv, peer, the chunks a received one is reduced
    # into, or None), listed in a step's posting order: per tree, the children's chunks
    # arriving, mine leaving for the parent, the result arriving from it, then leaving for
    # each child.  Views and steps are computed once; a step looks at this rank's streams.
    streams: list[tuple[int, int, list[Any], Callable[[Any, int], Send | Recv], int, Any]] = []

    def stream(first: int, views: list[Any], make: Callable[[Any, int], Send | Recv],
               peer: int, into: list[Any] | None = None) -> None:
        first = int(first)  # (a class of ranks the simulator walks together agrees on it)
        streams.append((first, first + len(views), views, make, peer, into))

    for t, tr in enumerate(trees):
        lo, size = halves[t]
        bounds = segment_bounds(lo, size, nch[t])  # (start, stop) of each chunk
        mine = [buf[a:b] for a, b in bounds]
        for ch, got in zip(kids[t], tmp[t], strict=True):  # up: a child's chunk arrives
            stream(tr.height[ch], [got[a - lo : b - lo] for a, b in bounds], ctx.recv, ch,
                   mine)  # (from its height's step on)
        if tr.parent[r] >= 0:
            stream(tr.height[r], mine, ctx.send, tr.parent[r])  # up: mine leaves
            stream(tr.top + tr.depth[r] - 1, mine, ctx.recv, tr.parent[r])  # down: arrives
        for ch in kids[t]:
            stream(tr.top + tr.depth[r], mine, ctx.send, ch)  # down: goes on
    cuts = sorted({s[0] for s in streams} | {s[1] for s in streams})
    for begin, stop in pairwise(cuts):  # steps in which the same streams move
        live = [s for s in streams if s[0] <= begin < s[1]]
        sinks = [(first, views, into) for first, _, views, _, _, into in live
                 if into is not None]
        for step in range(begin, stop):
            if live:
                yield tuple([make(views[step - first], peer)
                             for first, _, views, make, peer, _ in live])
            for first, views, into in sinks:
                ctx.reduce(views[step - first], into[step - first], op)


@algorithm(
    "allreduce", "circulant",
    cost=Cost("2*clg(p)*alpha + (p-1)/p*n*(2*beta + gamma)", exact=("even",), bound=0.1),
    restrictions=("commutative",),
    source="Traff, Optimal, Non-pipelined Reduce-scatter and Allreduce Algorithms, arXiv "
           "2410.14234 (2024): ceil(lg p) rounds each way on the circulant graph of halving "
           "skips, p-1 blocks sent, received and reduced per rank, any p",
)
def circulant(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Reduce-scatter then allgather on the circulant graph with skips s_q = p, s_k =
    ceil(s_(k+1)/2), ..., s_0 = 1: ceil(lg p) rounds each, any p, volume optimal (Traff)::

        blocks relative to the rank (j: block (rank + j) mod p), p = 7, skips 1 2 4 7:
          reduce-scatter  skip 4: send j in [4, 7) to rank+4, fold j in [0, 3) from rank-4
                          skip 2: send [2, 4) to rank+2, fold [0, 2) from rank-2
                          skip 1: send [1, 2) to rank+1, fold [0, 1): block rank is done
          allgather       the mirror: skip 1, 2, 4, receiving [1, 2), [2, 4), [4, 7)
                          from rank + skip

    Before the round of skip s_k a rank holds partial results of its blocks j < s_(k+1); it
    hands the upper ones to rank + s_k, for which they are blocks j - s_k < s_k, and keeps
    the lower ones.  Each rank sends and receives 2 n (p-1)/p bytes in 2 ceil(lg p)
    messages, like Rabenseifner's but without folding the extra ranks.  The blocks are held
    rotated (block rank first: two copies in, two out) so that every message is one span.
    Needs a commutative op.
    """
    p, r, n = ctx.size, ctx.rank, buf.size
    counts = block_counts(n, p)
    displs = displacements(counts)
    mine = displs[r]

    def at(q: int) -> Any:  # where place q (block (r + q) % p) starts in the rotated vector
        return n if q == p else displs[(r + q) % p] - mine + n * (r + q >= p)

    work = ctx.scratch(n)  # blocks r .. p-1, then 0 .. r-1: two copies each way
    ctx.copy(buf[mine:], work[: n - mine])
    ctx.copy(buf[:mine], work[n - mine :])
    skips = halving_skips(p)
    tmp = ctx.scratch(at(p - skips[-2]) if p > 1 else 0)
    for k in range(len(skips) - 2, -1, -1):  # reduce-scatter: skips p/2, p/4, ..., 1
        lo, hi = skips[k], skips[k + 1]
        into = work[: at(hi - lo)]
        yield ctx.sendrecv(work[at(lo) : at(hi)], (r + lo) % p, tmp[: into.size], (r - lo) % p)
        ctx.reduce(tmp[: into.size], into, op)
    for k in range(len(skips) - 1):  # allgather: skips 1, 2, ..., the mirror
        lo, hi = skips[k], skips[k + 1]
        yield ctx.sendrecv(work[: at(hi - lo)], (r - lo) % p, work[at(lo) : at(hi)],
                           (r + lo) % p)
    ctx.copy(work[: n - mine], buf[mine:])
    ctx.copy(work[n - mine :], buf[:mine])


@default_rule("allreduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling up to 2 KiB or for non-commutative ops, Rabenseifner above;
    # ring for long vectors when p is not a power of two (fold costs a full extra vector).
    if not commutative or nbytes <= 2048:
        return "recursive_doubling"
    if p & (p - 1) and nbytes >= 1 << 20:
        return "ring"
    return "rabenseifner"
