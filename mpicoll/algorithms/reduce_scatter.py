"""Reduce-scatter(-block): rank i ends with block i of the reduction of all ranks' vectors.

Schedules take ``(ctx, sendbuf, recvbuf, counts, op)``: ``sendbuf`` is this rank's whole input
(``sum(counts)`` elements, never written; blocks in rank order), ``recvbuf`` this rank's
``counts[rank]`` result elements.  ``reduce_scatter_block`` is the case of equal counts.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .allgather import halving_skips
from .reduce import TREE as _TREE
from .reduce import TREE_EXTRA as _TREE_EXTRA
from .reduce import TREE_WHERE as _TREE_WHERE
from .reduce import binomial as _reduce_binomial
from .registry import Cost, algorithm, default_rule
from .scatter import linear as _scatter_linear
from .schedule import (
    Context,
    Overlap,
    Pipeline,
    Round,
    Schedule,
    block,
    displacements,
    is_pof2,
    pof2_floor,
    segment,
    segments,
    span,
    split,
)

_BOTH = ("reduce_scatter_block", "reduce_scatter")


def ring_core(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
              op: MPI.Op) -> Generator[Round | Overlap, None, None]:
    """Ring reduce-scatter in place on ``buf``: afterwards block ``rank`` is fully reduced.

    In step s a rank sends its partial block (rank - s - 1) right and reduces the partial
    block (rank - s - 2) arriving from the left into its own copy; each block travels p - 1
    hops, picking up one contribution per hop, and stops at its owner::

        p = 3:  step 0:  r0 -b2-> r1,  r1 -b0-> r2,  r2 -b1-> r0   (each adds its own)
                step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0   (r_i owns b_i)

    Blocks larger than a segment (``ctx.segment_bytes``) travel as S segments, one round
    each, and the reduction of a segment runs while the next one is in flight::

        round:    (s,0)      (s,1)      ...  (s,S-1)       (s+1,0)        ...
        wire:     seg 0      seg 1           seg S-1       seg 0 of rb_s
        reduce:              seg 0      ...  seg S-2       seg S-1 of rb_s

    (segment 0 of the block just reduced leaves while its last segment is being reduced:
    disjoint buffers, rule 3).  With one segment a step sends what the previous one reduced,
    so nothing overlaps: the plain ring.  Each element is reduced in the same order either way.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    width = max(counts) if counts else 0
    nseg = segments(ctx, width)
    if nseg == 1:  # one segment: each step sends what the one before reduced, nothing overlaps
        tmp = ctx.scratch(width)
        for s in range(p - 1):
            sb, rb = (r - s - 1) % p, (r - s - 2) % p
            incoming = tmp[: counts[rb]]
            yield ctx.sendrecv(block(buf, counts, displs, sb), right, incoming, left)
            ctx.reduce(incoming, block(buf, counts, displs, rb), op)
        return
    w = -(-width // nseg)  # the largest segment; two receive slots: one in flight, one reduced
    tmp = ctx.scratch(2 * w)
    pipe = Pipeline()
    k = 0
    for s in range(p - 1):
        sb, rb = (r - s - 1) % p, (r - s - 2) % p
        out = split(block(buf, counts, displs, sb), nseg)
        into = split(block(buf, counts, displs, rb), nseg)
        for j in range(nseg):
            incoming = tmp[k % 2 * w : k % 2 * w + into[j].size]
            yield pipe.round(ctx.sendrecv(out[j], right, incoming, left))
            pipe.then(ctx.reduce, incoming, into[j], op)
            k += 1
    pipe.flush()


#: the ring reduce-scatter (:func:`ring_core`): (p-1) S rounds of one m-byte segment each; with
#: S > 1 each reduction overlaps the next round
RING_LET = (("S", "max(1, ceil(n/(p*s)))"), ("m", "n/(p*S)"))
RING = ("(p > 1)*(overlapped((p-1)*S, alpha + m*beta, m*gamma) if S > 1 "
        "else (p-1)*(alpha + m*(beta + gamma)))")
SEGS = "s = segment bytes (MPICOLL_SEGMENT_SIZE, 64 KiB)"


@algorithm(_BOTH, "ring",
           cost=Cost(RING, let=RING_LET, where=SEGS, exact=("even", "whole_segments"),
                     bound=0.1),
           restrictions=("commutative",),
           source="Patarasuk & Yuan 2009 (first half of the ring allreduce)")
def ring(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
         op: MPI.Op) -> Schedule:
    """Ring reduce-scatter: p-1 steps, one block per link per step (see :func:`ring_core`)::

        p = 3:  step 0:  r0 -b2-> r1,  r1 -b0-> r2,  r2 -b1-> r0
                step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0

    Each rank sends and receives n (p-1)/p bytes.  Needs a commutative op.
    """
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    yield from ring_core(ctx, work, counts, displs, op)
    ctx.copy(block(work, counts, displs, ctx.rank), recvbuf)


@algorithm(_BOTH, "pairwise",
           cost=Cost("overlapped((p-1)*S, alpha + m*beta, m*gamma)", let=RING_LET, where=SEGS,
                     exact=("even", "whole_segments"), bound=0.1),
           restrictions=("commutative",), source="MPICH reduce_scatter_intra_pairwise")
def pairwise(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
             op: MPI.Op) -> Schedule:
    """Pairwise exchange: in step i, send block rank+i of the input to rank+i and reduce the
    block rank received from rank-i.  No intermediate forwarding: each block crosses one link::

        p = 3:  step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0
                step 2:  r0 -b2-> r2,  r1 -b0-> r0,  r2 -b1-> r1

    The reduction of what step i received runs while step i+1 is in flight (it writes
    ``recvbuf``, which no message uses); blocks larger than a segment travel as S segments,
    one round each, pipelined the same way.  Needs a commutative op.
    """
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    ctx.copy(block(sendbuf, counts, displs, r), recvbuf)
    nseg = segments(ctx, max(counts) if counts else 0)
    w = -(-counts[r] // nseg)  # the largest segment of this rank's block
    tmp = ctx.scratch(2 * w)  # two receive slots: one in flight, one being reduced

    pipe = Pipeline()
    own = [segment(0, counts[r], nseg, j) for j in range(nseg)]  # this rank's block's segments
    mine = [recvbuf[a:b] for a, b in own]
    k = 0
    for i in range(1, p):
        dst, src = (r + i) % p, (r - i) % p
        out = split(block(sendbuf, counts, displs, dst), nseg)
        for j in range(nseg):
            a, b = own[j]
            incoming = tmp[k % 2 * w : k % 2 * w + (b - a)]
            yield pipe.round(ctx.sendrecv(out[j], dst, incoming, src))
            pipe.then(ctx.reduce, incoming, mine[j], op)
            k += 1
    pipe.flush()


@algorithm(
    _BOTH, "recursive_halving",
    cost=_pof2.HALVING,
    restrictions=("commutative",),
    source="Thakur, Rabenseifner & Gropp 2005; MPICH reduce_scatter_intra_recursive_halving",
)
def recursive_halving(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                      counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Recursive halving: lg p exchanges of half the remaining vector with rank ^ 2^k::

        p = 4:  dist 2:  0<->2, 1<->3 (halves)    dist 1:  0<->1, 2<->3 (quarters)

    Extra ranks beyond 2^k are folded in first: rank 2i hands its vector to 2i+1, which works
    for both and returns block 2i at the end.  Needs a commutative op.
    """
    p, r = ctx.size, ctx.rank
    rem = p - pof2_floor(p)
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    newrank = yield from _pof2.fold_in(ctx, work, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        newcounts = [counts[2 * i] + counts[2 * i + 1] if i < rem else counts[i + rem]
                     for i in range(g.size)]
        yield from _pof2.halving_reduce_scatter(g, work, newcounts, displacements(newcounts), op)
    if r < 2 * rem:
        if r % 2:
            yield (ctx.send(block(work, counts, displs, r - 1), r - 1),)
        else:
            yield (ctx.recv(recvbuf, r + 1),)
            return
    ctx.copy(block(work, counts, displs, r), recvbuf)


def mirror(i: int, bits: int) -> int:
    """``i`` with its lowest ``bits`` bits in reverse order (the mirror permutation)."""
    out = 0
    for _ in range(bits):
        out = out << 1 | i & 1
        i >>= 1
    return out


def butterfly_core(g: Context, bufs: tuple[np.ndarray, np.ndarray], counts: Sequence[int],
                   displs: Sequence[int], op: MPI.Op
                   ) -> Generator[Round, None, tuple[np.ndarray, int]]:
    """Traff's butterfly on the ``g.size`` (a power of two) contiguous blocks of ``bufs[0]``
    (``counts``/``displs``: one block per rank of ``g``), rank order kept (any op).

    In step k (k = 0, 1, ...) ranks ``g.rank`` and ``g.rank ^ 2^k`` halve their current range
    of blocks: the one with bit k clear keeps the lower half, the other the upper half; each
    sends the half it gives away and reduces what arrives into the half it keeps, the lower
    rank's data on the left (the partners hold the reductions of two neighbouring ranges of
    ranks, 2^k ranks each).  Bit 0 picks the top-level half, so rank i ends with block
    mirror(i) fully reduced::

        p = 4:   k=0: 0<->1, 2<->3: 0, 2 keep [b0 b1], 1, 3 keep [b2 b3]   (sums of pairs)
                 k=1: 0<->2, 1<->3: 0 keeps b0, 2 b1, 1 b2, 3 b3           (sums of all)

    The received half goes to the other buffer at its own place; when the partner is above,
    ``incoming = mine op incoming`` there and the two buffers trade roles (no copy).  Returns
    (the buffer holding the result, the block index it ends with: mirror(g.rank)).
    """
    a, b = bufs
    lo, hi = 0, g.size
    mask = 1
    while mask < g.size:
        peer = g.rank ^ mask
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if g.rank & mask else ((lo, mid), (mid, hi))
        into = span(b, counts, displs, *keep)
        yield g.sendrecv(span(a, counts, displs, *give), peer, into, peer)
        mine = span(a, counts, displs, *keep)
        if g.rank < peer:
            g.reduce(mine, into, op)  # into = mine op theirs: the result now lives in b
            a, b = b, a
        else:
            g.reduce(into, mine, op)  # mine = theirs op mine
        lo, hi = keep
        mask <<= 1
    return a, lo


def butterfly_folded(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                     counts: Sequence[int], op: MPI.Op) -> Schedule:
    """The butterfly for any p: fold, :func:`butterfly_core`, then the mirror exchange (see
    :func:`butterfly`)."""
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    if p == 1:
        ctx.copy(block(sendbuf, counts, displs, 0), recvbuf)
        return
    pof2 = pof2_floor(p)
    rem = p - pof2
    bits = pof2.bit_length() - 1
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    vrank = yield from _pof2.fold_in(ctx, work, op)
    if vrank < 0:  # sat out: the block comes from whoever ends with its pair's
        yield (ctx.recv(recvbuf, _pof2.real_rank(mirror(r // 2, bits), rem)),)
        return
    g = _pof2.group(ctx)
    vcounts = [counts[2 * i] + counts[2 * i + 1] if i < rem else counts[i + rem]
               for i in range(pof2)]
    held, vb = yield from butterfly_core(g, (work, ctx.scratch(sendbuf.size)), vcounts,
                                         displacements(vcounts), op)
    owner = _pof2.real_rank(vb, rem)  # vb == mirror(vrank): its new rank's real rank
    first = 2 * vb if vb < rem else vb + rem  # the first real block of virtual block vb
    ops: list = []
    if vb < rem:  # a pair's block: the first goes to the even rank that sat out
        ops.append(ctx.send(block(held, counts, displs, first), owner - 1))
        first += 1
    if owner == r:
        ctx.copy(block(held, counts, displs, r), recvbuf)
    else:
        ops += ctx.sendrecv(block(held, counts, displs, first), owner, recvbuf, owner)
    if ops:
        yield tuple(ops)


def butterfly_mirrored(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                       counts: Sequence[int], op: MPI.Op) -> Schedule:
    """The butterfly for a power-of-two p on blocks laid out in mirror order, so that no
    exchange follows (see :func:`noncommutative`)."""
    p = ctx.size
    bits = p.bit_length() - 1
    displs = displacements(counts)
    order = [mirror(i, bits) for i in range(p)]  # order[place] = the block at that place
    pcounts = [counts[order[i]] for i in range(p)]
    pdispls = displacements(pcounts)
    work = ctx.scratch(sendbuf.size)
    for i in range(p):
        ctx.copy(block(sendbuf, counts, displs, order[i]), block(work, pcounts, pdispls, i))
    held, place = yield from butterfly_core(ctx, (work, ctx.scratch(sendbuf.size)), pcounts,
                                            pdispls, op)
    ctx.copy(block(held, pcounts, pdispls, place), recvbuf)


#: the butterfly's lg p' halving steps (m: the bytes the p' ranks halve: the first 2(p - p')
#: blocks travel in pairs), the fold's two messages and a block to the ranks that sat out
_FOLDED = ("lg(P)*alpha + (P-1)/P*m*(beta + gamma) + fold*(2*alpha + n*(beta + gamma) + "
           "n/p*beta)")
_FOLDED_LET = (("m", "n*(1 + fold*(p - P)/p)"),)
_FOLDED_WHERE = ("p' = 2^floor(lg p), fold = [p != p']; m = the bytes the p' ranks halve (the "
                 "first 2(p - p') blocks travel in pairs)")
_TRAFF = ("Traff, 'An improved algorithm for (non-commutative) reduce-scatter with an "
          "application', EuroPVM/MPI 2005")


@algorithm(
    "reduce_scatter", "butterfly",
    cost=Cost(_FOLDED + " + (P > 2)*(alpha + n/p*beta)", let=_FOLDED_LET, where=_FOLDED_WHERE,
              exact=("even", "pof2"), bound=0.25),
    source=_TRAFF + "; Open MPI coll_base_reduce_scatter butterfly",
)
def butterfly(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
              op: MPI.Op) -> Schedule:
    """Butterfly reduce-scatter for any op and any p (Open MPI's form of Traff's algorithm).

    The p - p' extra ranks fold in first (rank 2i hands its vector to 2i+1, which reduces it,
    lower rank on the left, as :mod:`~mpicoll.algorithms.fold`); the p' = 2^floor(lg p) ranks
    left run :func:`butterfly_core` on p' blocks (new rank i's block is its own, or the pair's
    two for a folded pair), ending with block mirror(i); one exchange along the mirror
    permutation then hands every block to its owner (a pair's first block to the even rank
    that sat out)::

        p = 6 (p' = 4):  fold:    0 -> 1, 2 -> 3               (new ranks 1:0 3:1 4:2 5:3)
                         halve:   new 0<->1, 2<->3;  0<->2, 1<->3
                         mirror:  new 1 (rank 3) <-> new 2 (rank 4): blocks [b0 b1] and b4;
                                  new 0 (rank 1) -> rank 0;  rank 4 -> rank 2  (pairs' firsts)

    Every step reduces the lower ranks' data on the left: non-commutative ops are correct.
    """
    yield from butterfly_folded(ctx, sendbuf, recvbuf, counts, op)


@algorithm(
    "reduce_scatter_block", "butterfly",
    cost=Cost(_FOLDED + " + fold*(P > 2)*(alpha + n/p*beta)", let=_FOLDED_LET,
              where=_FOLDED_WHERE, exact=("even", "pof2"), bound=0.25),
    source=_TRAFF + "; Open MPI coll_base_reduce_scatter_block butterfly",
)
def butterfly_block(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                    counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Butterfly reduce-scatter-block for any op and any p, as Open MPI runs it: for a power
    of two p the blocks are laid out in mirror order first and no exchange follows (as
    :func:`noncommutative`); otherwise the fold and the mirror exchange of :func:`butterfly`::

        p = 4:  places [b0 b2 b1 b3];  k=0: 0<->1, 2<->3 (halves);  k=1: 0<->2, 1<->3
        p = 6:  fold 0 -> 1, 2 -> 3;  the butterfly on new ranks 0..3;  the mirror exchange

    Every step reduces the lower ranks' data on the left: non-commutative ops are correct.
    """
    if is_pof2(ctx.size):
        yield from butterfly_mirrored(ctx, sendbuf, recvbuf, counts, op)
    else:
        yield from butterfly_folded(ctx, sendbuf, recvbuf, counts, op)


@algorithm(
    _BOTH, "noncommutative",
    cost=Cost("lg(p)*alpha + (p-1)/p*n*(beta + gamma)", exact=("even",), bound=0.05),
    restrictions=("pof2",),
    source=_TRAFF + "; MPICH reduce_scatter_intra_noncommutative",
)
def noncommutative(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                   counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Butterfly reduce-scatter for a power-of-two p (MPICH's form of Traff's algorithm): the
    blocks are first laid out in mirror order (block i at place mirror(i)), so that
    :func:`butterfly_core`, which leaves rank i with place mirror(i), leaves it with its own
    block: no exchange at the end::

        p = 4:  places [b0 b2 b1 b3];  k=0: 0<->1, 2<->3 (halves);  k=1: 0<->2, 1<->3

    The lower ranks' data is always on the left: non-commutative ops are correct.  MPICH
    needs equal counts; here any counts do (the places' sizes follow the blocks').
    """
    yield from butterfly_mirrored(ctx, sendbuf, recvbuf, counts, op)


def _cyclic(wd: Sequence[int], p: int, q0: int, nblocks: int) -> list[tuple[int, int]]:
    """The element ranges of ``nblocks`` blocks from place ``q0`` on, of a buffer laid out
    cyclically (``wd``: the p + 1 offsets of its places), wrapping past place p - 1 to 0:
    one range, or two where they wrap."""
    end = q0 + nblocks
    if end <= p:
        return [(wd[q0], wd[end])]
    return [(wd[q0], wd[p]), (0, wd[end - p])]


@algorithm(
    _BOTH, "recursive_doubling",
    cost=Cost("clg(p)*alpha + (clg(p) - (p-1)/p)*n*(beta + gamma) + "
              "fold*(lg(P) - clg(p - P + 1) + 1)*(alpha + P/p*n*beta)",
              where="p' = 2^floor(lg p), fold = [p != p']: the forwarding rounds of the last "
                    "step, inside the lower half, to the ranks whose partner does not exist",
              exact=("pof2", "even"), bound=0.5),
    source="Thakur, Rabenseifner & Gropp 2005; MPICH reduce_scatter_intra_recursive_doubling; "
           "Open MPI coll_base_reduce_scatter_block recursivedoubling",
)
def recursive_doubling(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                       counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Recursive doubling for any op, any p and any counts: in step k a rank exchanges with
    rank ^ 2^k every block but those of the sender's own subtree (the 2^k ranks that share
    its higher bits: none of them needs them any more), and reduces what arrives into its
    own, the lower subtree's data on the left::

        p = 4:  k=0: 0<->1, 2<->3: all blocks but the sender's own   (3 of 4 blocks)
                k=1: 0<->2, 1<->3: all but the sender's pair's       (2 of 4 blocks)

    A rank keeps its vector rotated to start at its own block, so that what it sends (all but
    its subtree's blocks) is one contiguous range, as is what it receives (all but the
    partner's subtree's, at most two ranges of the rotated vector).  Where p is not a power
    of two, the subtree whose partners do not exist is served by those of its ranks that did
    exchange, along a binomial tree inside the subtree (the received message is forwarded as
    it arrived, then reduced).  Steps move n - n/p, n - 2n/p, n - 4n/p, ... bytes.
    """
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    total = displs[p - 1] + counts[p - 1]
    # the vector rotated to start at block r: place q holds block (r + q) % p
    wcounts = [counts[(r + q) % p] for q in range(p)]
    wd = [*displacements(wcounts), total]
    work = ctx.scratch(total)
    ctx.copy(sendbuf[displs[r] :], work[: total - displs[r]])
    ctx.copy(sendbuf[: displs[r]], work[total - displs[r] :])
    tmp = ctx.scratch(total)
    commutative = op.Is_commutative()

    mask, level = 1, 0
    while mask < p:
        dst = r ^ mask
        mine, theirs = r >> level << level, dst >> level << level  # subtrees' first ranks
        # what goes: the blocks after my subtree, through p-1 and 0, up to it
        out_first = min(mine + mask, p) % p
        (s0, s1), = _cyclic(wd, p, (out_first - r) % p, p - (min(mine + mask, p) - mine))
        # what comes: the same from the partner's subtree, in its order
        in_first = min(theirs + mask, p) % p
        in_blocks = p - max(0, min(theirs + mask, p) - theirs)
        pieces = _cyclic(wd, p, (in_first - r) % p, in_blocks)
        incoming = tmp[: sum(b - a for a, b in pieces)]
        received = dst < p
        if received:
            yield ctx.sendrecv(work[s0:s1], dst, incoming, dst)
        if theirs + mask > p:  # the partner subtree is cut short: forward to who lacks it
            have = p - mine - mask  # ranks of my subtree that exchanged (the lowest ones)
            sub = mask >> 1
            while sub:
                peer = r ^ sub
                root = r >> sub.bit_length() << sub.bit_length()
                if peer > r and r < root + have <= peer:
                    yield (ctx.send(incoming, peer),)
                elif peer < r and peer < root + have <= r:
                    yield (ctx.recv(incoming, peer),)
                    received = True
                sub >>= 1
        if received:
            off = 0
            for a, b in pieces:
                got, into = incoming[off : off + b - a], work[a:b]
                if commutative or theirs < mine:
                    ctx.reduce(got, into, op)  # into = theirs op mine
                else:
                    ctx.reduce(into, got, op)  # got = mine op theirs
                    ctx.copy(got, into)
                off += b - a
        mask <<= 1
        level += 1
    ctx.copy(work[: counts[r]], recvbuf)


@algorithm(
    _BOTH, "circulant",
    cost=Cost("clg(p)*alpha + (p-1)/p*n*(beta + gamma)", exact=("even",), bound=0.05),
    restrictions=("commutative",),
    source="Traff, 'Optimal, non-pipelined reduce-scatter and allreduce algorithms', "
           "arXiv 2410.14234 (2024)",
)
def circulant(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
              op: MPI.Op) -> Schedule:
    """Traff's reduce-scatter in ceil(lg p) rounds for any p, each rank sending, receiving and
    reducing exactly p-1 blocks.  With the skips s_0 = 1 < ... < s_q = p (each the ceiling of
    half the next), a rank holds partial sums of the blocks r, r+1, ..., r + s_(k+1) - 1
    before round k (k = q-1 down to 0); it sends the upper part, blocks r + s_k .. r +
    s_(k+1) - 1, to rank r + s_k (where they are the lowest), and adds what rank r - s_k sends
    to its own lowest s_(k+1) - s_k blocks::

        p = 5 (skips 1 2 3 5):  k=2: r -> r+3: blocks r+3, r+4    (r adds from r-3: r, r+1)
                                k=1: r -> r+2: block r+2          (r adds from r-2: r)
                                k=0: r -> r+1: block r+1          (r adds from r-1: r)

    The vector is kept rotated to start at the rank's own block, so each message is one
    range.  Contributions arrive out of rank order: needs a commutative op.  No MPI library
    has it.
    """
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    total = displs[p - 1] + counts[p - 1]
    mine = displs[r]

    def at(q: int) -> Any:  # where place q (block (r + q) % p) starts in the rotated vector
        return total if q == p else displs[(r + q) % p] - mine + total * (r + q >= p)

    work = ctx.scratch(total)
    ctx.copy(sendbuf[mine:], work[: total - mine])
    ctx.copy(sendbuf[:mine], work[total - mine :])
    tmp = ctx.scratch(total)
    skips = halving_skips(p)
    for k in range(len(skips) - 2, -1, -1):
        lo, hi = skips[k], skips[k + 1]
        incoming = tmp[: at(hi - lo)]
        yield ctx.sendrecv(work[at(lo) : at(hi)], (r + lo) % p, incoming, (r - lo) % p)
        ctx.reduce(incoming, work[: at(hi - lo)], op)
    ctx.copy(work[: counts[r]], recvbuf)


@algorithm(
    _BOTH, "reduce_scatterv",
    cost=Cost(_TREE + " + (p-1)*alpha + (p-1)/p*n*beta", where=_TREE_WHERE,
              extra=_TREE_EXTRA, exact=("even", "whole_segments"), bound=0.1),
    source="MPI-1 reference implementations (MPICH 1.x): reduce to rank 0, then scatterv",
)
def reduce_scatterv(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                    counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then a linear scatterv of the blocks::

        p = 4:   reduce:  1 -> 0, 3 -> 2;  2 -> 0       scatterv:  0 -b1-> 1, 0 -b2-> 2, 0 -b3-> 3

    The algorithm for non-commutative ops, any p and any counts.
    """
    full = ctx.scratch(sendbuf.size) if ctx.rank == 0 else None
    yield from _reduce_binomial(ctx, sendbuf, full, op, 0)
    yield from _scatter_linear(ctx, full, counts, displacements(counts), recvbuf, 0)


@default_rule(*_BOTH)
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    """MPICH's thresholds (``maint/tuning/coll/mpir/generic.json``): for a commutative op,
    recursive halving below 512 KiB, pairwise above.

    For a non-commutative op, MPICH's ``noncommutative`` butterfly on a power of two (lg p
    rounds, (p-1)/p n bytes), else Open MPI's ``butterfly`` (the fold, then the same
    butterfly), not reduce + scatterv (a whole vector through rank 0, then p-1 sends from
    it).  The simulator's default model (2 us, 10 GB/s, 0.25 ns/B), reduce_scatterv over the
    best at 8 B .. 8 MiB: 1.7-2.2x at p = 2, 2.2-2.8x at p = 4, 2.7-3.6x at p = 8, 4.7-11x
    at p = 64; butterfly is within 1.25x of the best at every p up to 64 that is not a
    power of two, where MPICH's recursive doubling (its pick there) is up to 1.9x off
    (p = 24, 8 MiB).  Measured here (MPICH 5.0.2, 2 cores under load ~24, a non-commutative
    Python op, candidates interleaved, median over 20 rounds of t / t_native), at 1 MiB:
    reduce_scatterv 3.7x (p = 2) and 7.6x (p = 4), noncommutative 0.66x and 0.89x,
    butterfly 0.65x and 0.87x (reduce_scatter_block; reduce_scatter alike); at 8 B and
    64 KiB the load's noise (native's minimum 0.2-9 ms) hid any difference.
    """
    if not commutative:
        return "noncommutative" if p & (p - 1) == 0 else "butterfly"
    if nbytes <= 524288:
        return "recursive_halving"
    return "pairwise"
