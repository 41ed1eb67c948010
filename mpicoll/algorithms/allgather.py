"""Allgather(v): every rank's block ends up on every rank, in rank order.

Schedules take ``(ctx, buf, counts, displs)``: ``buf`` is the whole receive buffer, whose
block ``ctx.rank`` (``counts[rank]`` elements at ``displs[rank]``) already holds this rank's
contribution; the schedule fills in the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from . import fold as _pof2
from .registry import Cost, Param, algorithm, default_rule
from .schedule import (
    Context,
    Recv,
    Schedule,
    Send,
    block,
    blocks,
    contiguous_span,
    displacements,
    pof2_floor,
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


def _bruck_messages(p: int, k: int) -> int:
    """Messages each rank sends in radix-k Bruck: per phase (distance d = 1, k, k^2, ...) one
    for each j in 1..k-1 with j d < p."""
    total, d = 0, 1
    while d < p:
        total += min(k - 1, (p - 1) // d)
        d *= k
    return total


_BRUCK_K = Cost("M*alpha + (p-1)/p*n*beta", let=(("M", "brucks_messages(p, k)"),),
                where="brucks_messages(p, k) = sum over phases d = 1, k, k^2, ... < p of "
                      "min(k-1, floor((p-1)/d)) (ceil(lg p) for k = 2)",
                exact=("even", "one_peer"), bound="p/4 + 0.1",
                extra={"brucks_messages": _bruck_messages})


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

    ``k_brucks`` is the same with radix k (this is its k = 2).
    """
    yield from k_brucks(ctx, buf, counts, displs, k=2)


@algorithm(
    "allgather", "k_brucks",
    cost=_BRUCK_K,
    params=(Param("k", 2, 2, 64, "radix (messages per phase + 1)", examples=(3, 4)),),
    source="MPICH allgather_intra_k_brucks (MPIR_CVAR_ALLGATHER_BRUCKS_KVAL); Bruck et al., "
           "IEEE TPDS 8(11) 1997",
)
def k_brucks(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
             *, k: int = 2) -> Schedule:
    """Radix-k Bruck: ceil(log_k p) phases of up to k-1 messages, through a rotated buffer.

    ``tmp`` holds blocks rank, rank+1, ..., rank-1.  In the phase of distance d (1, k, k^2,
    ...), for j = 1 .. k-1 (while j d < p) a rank sends its first min(d, p - j d) blocks to
    rank - j d and receives as many from rank + j d into slots j d onwards; a final copy puts
    the blocks back in rank order::

        p = 9, k = 3, rank 0:  [b0] -d=1-> [b0 b1 b2] -d=3-> [b0 .. b8]
                               (d=1: b1 <- r1, b2 <- r2;  d=3: b3..b5 <- r3, b6..b8 <- r6)
    """
    p, r = ctx.size, ctx.rank
    order = [(r + i) % p for i in range(p)]
    offs = [0]
    for i in order:
        offs.append(offs[-1] + counts[i])
    tmp = ctx.scratch(offs[-1])
    ctx.copy(block(buf, counts, displs, r), tmp[: counts[r]])
    d = 1
    while d < p:
        ops: list[Send | Recv] = []
        for j in range(1, k):
            if j * d >= p:
                break
            m = min(d, p - j * d)
            ops += (ctx.recv(tmp[offs[j * d] : offs[j * d + m]], (r + j * d) % p),
                    ctx.send(tmp[: offs[m]], (r - j * d) % p))
        yield tuple(ops)
        d *= k
    for i in range(1, p):
        ctx.copy(tmp[offs[i] : offs[i + 1]], block(buf, counts, displs, order[i]))


@algorithm(
    ("allgather", "allgatherv"), "direct",
    cost=Cost("(p-1)*alpha + (p-1)/p*n*beta", exact=("even", "one_peer"), bound="p/4 + 0.1"),
    source="Open MPI ompi_coll_base_allgather_direct_messaging (main's tuned allgather 8, "
           "not in 5.0.x)",
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
    restrictions=("two_ranks",),
    source="Open MPI ompi_coll_base_allgather_intra_two_procs / allgatherv_intra_two_procs "
           "(tuned allgather 6, allgatherv 5)",
)
def two_proc(ctx: Context, buf: np.ndarray, counts: Sequence[int],
             displs: Sequence[int]) -> Schedule:
    """Two ranks swap their blocks in one exchange::

        r0: send b0 -> r1, recv b1 <- r1        r1: send b1 -> r0, recv b0 <- r0

    Open MPI refuses any other p (MPI_ERR_UNSUPPORTED_OPERATION); here p > 2 is refused
    before any message and p = 1 has nothing to exchange.
    """
    if ctx.size != 2:
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


class Recexch(NamedTuple):
    """The rank layout of MPICH's recursive exchange (``MPII_Recexchalgo_get_neighbors``) on
    p ranks with radix k.  ``pofk`` = the largest power of k <= p ranks take part in the
    exchange phases; the other ``rem`` = p - pofk fold in first: among the first ``t`` =
    rem k // (k-1) ranks, in each set of k consecutive ones the first k-1 send their data to
    the last (a short last set sends to rank t)."""

    k: int
    pofk: int
    phases: int
    rem: int
    t: int

    def step2(self, rank: int) -> int:
        """The exchange-phase rank of a participating rank."""
        return rank // self.k if rank < self.t else rank - self.rem

    def orig(self, s: int) -> int:
        """The rank of exchange-phase rank ``s``."""
        k = self.k
        return s * k + k - 1 if s < self.rem // (k - 1) else s + self.rem

    def sendto(self, rank: int) -> int:
        """The participant a folded rank sends to; -1 for a participant."""
        k, t = self.k, self.t
        if rank < t and rank % k != k - 1:
            return min(rank + k - 1 - rank % k, t)
        return -1

    def recvfrom(self, rank: int) -> list[int]:
        """The folded ranks a participant receives from first (and sends the result to)."""
        k, t = self.k, self.t
        if rank < t:
            return [rank - i - 1 for i in range(k - 1)] if rank % k == k - 1 else []
        if rank == t and t >= 1 and (t - 1) % k != k - 1:
            n = (t - 1) % k + 1
            return [t - n + j for j in reversed(range(n))]
        return []

    def nbrs(self, rank: int, phase: int) -> list[int]:
        """A participant's k-1 partners in ``phase``: its exchange-phase rank with base-k digit
        ``phase`` set to each other value."""
        k, s = self.k, self.step2(rank)
        w = k ** phase
        digit = s // w % k
        return [self.orig(s + (v - digit) * w) for v in range(k) if v != digit]

    def blocks(self, rank: int, phase: int) -> tuple[int, int]:
        """(first, stop) of the blocks participant ``rank`` holds before ``phase`` (its own and
        its folded ranks' at phase 0, k^phase exchange-phase ranks' later)."""
        w = self.k ** phase
        lo = self.step2(rank) // w * w - 1
        return (self.orig(lo) + 1 if lo >= 0 else 0), self.orig(lo + w) + 1

    def reverse(self, rank: int) -> int:
        """The participant whose exchange-phase rank has the base-k digits of ``rank``'s
        reversed (distance halving)."""
        s, out = self.step2(rank), 0
        for _ in range(self.phases):
            s, d = divmod(s, self.k)
            out = out * self.k + d
        return self.orig(out)


@lru_cache(maxsize=64)
def recexch(p: int, k: int) -> Recexch:
    """The :class:`Recexch` layout of p ranks with radix k (k is lowered to p for p < k, and
    to 2 for p <= 2, as MPICH does)."""
    if p < k:
        k = p if p > 2 else 2
    pofk, phases = 1, 0
    while pofk * k <= p:
        pofk *= k
        phases += 1
    rem = p - pofk
    return Recexch(k, pofk, phases, rem, rem * k // (k - 1))


def _flgk(p: int, k: int) -> int:
    """floor(log_k p) (0 for p <= 1): the exchange phases of recursive exchange."""
    return recexch(p, k).phases


def _pofk(p: int, k: int) -> int:
    """The largest power of k <= p: the ranks of recursive exchange's phases."""
    return recexch(p, k).pofk


_RECEXCH_PARAMS = (Param("k", 2, 2, 64, "radix (partners per phase + 1)", examples=(3, 4)),)


def _recexch_run(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                 displs: Sequence[int], k: int, halving: bool) -> Schedule:
    """The schedule of ``recexch_doubling`` (``halving`` False) and ``recexch_halving``."""
    p, r = ctx.size, ctx.rank
    x = recexch(p, k)
    packed = tuple(displs) == displacements(counts)
    own = block(buf, counts, displs, r)
    to = x.sendto(r)
    if to >= 0:  # folded: give the block away, get everything back at the end
        yield (ctx.send(own, to),)
        rbuf, parts = _incoming(ctx, buf, counts, displs, 0, p, packed)
        yield (ctx.recv(rbuf, to),)
        if parts is not None:
            ctx.unpack(rbuf, parts)
        return
    folded = x.recvfrom(r)
    if folded:
        yield tuple(ctx.recv(block(buf, counts, displs, q), q) for q in folded)
    me = r
    if halving:
        me = x.reverse(r)
        if me != r:  # swap for the digit-reversed blocks, so they end in rank order
            lo, hi = x.blocks(r, 0)
            plo, phi = x.blocks(me, 0)
            rbuf, parts = _incoming(ctx, buf, counts, displs, plo, phi, packed)
            yield ctx.sendrecv(_outgoing(ctx, buf, counts, displs, lo, hi, packed), me, rbuf, me)
            if parts is not None:
                ctx.unpack(rbuf, parts)
    for j in range(x.phases):
        nbrs = x.nbrs(r, x.phases - 1 - j if halving else j)
        lo, hi = x.blocks(me, j)
        out = _outgoing(ctx, buf, counts, displs, lo, hi, packed)
        ins = [_incoming(ctx, buf, counts, displs,
                         *x.blocks(x.reverse(q) if halving else q, j), packed) for q in nbrs]
        ops: list[Send | Recv] = [ctx.recv(rbuf, q) for q, (rbuf, _) in zip(nbrs, ins,
                                                                              strict=True)]
        ops += [ctx.send(out, q) for q in nbrs]
        yield tuple(ops)
        for rbuf, parts in ins:
            if parts is not None:
                ctx.unpack(rbuf, parts)
    if folded:
        whole = _outgoing(ctx, buf, counts, displs, 0, p, packed)
        yield tuple(ctx.send(whole, q) for q in folded)


def _recexch_cost(swap: str) -> Cost:
    """The cost of recursive exchange (``swap``: the halving's extra term): exact for p a
    power of q; otherwise the fold (q-1 single blocks in, at most) and unfold (the whole result
    to q-1 ranks, one after the other) are charged in full, a bound."""
    return Cost("(q-1)*(L + 2*F)*alpha + (X + F*(q-1)*(p+1))/p*n*beta" + swap,
                let=(("q", "min(k, max(p, 2))"), ("L", "flgk(p, q)"), ("F", "pofk(p, q) != p"),
                     ("X", "p - 1 if F else pofk(p, q) - 1")),
                where="q: the radix, lowered to p for p < k; flgk(p, q) = floor(log_q p); "
                      "pofk(p, q) = q^flgk(p, q); F: 1 when p is not a power of q "
                      "(ranks fold in and out); exact for p a power of q with q = 2 (with more "
                      "partners the simulator's ports serialise a round greedily)",
                exact=("one_peer",), bound=1.0, extra={"flgk": _flgk, "pofk": _pofk})


@algorithm(
    "allgather", "recexch_doubling",
    cost=_recexch_cost(""),
    params=_RECEXCH_PARAMS,
    source="MPICH allgather_intra_recexch (recexch_type distance doubling, "
           "MPIR_CVAR_ALLGATHER_RECEXCH_KVAL); Thakur et al. 2005 (radix 2)",
)
def recexch_doubling(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                     displs: Sequence[int], *, k: int = 2) -> Schedule:
    """Recursive exchange, distance doubling: recursive doubling with radix k.

    1. Fold: of the first rem k/(k-1) ranks (rem = p - k^L), in each set of k the first k-1
       send their block to the set's last rank (MPICH's layout: :class:`Recexch`).
    2. L phases among the k^L others: in phase j each exchanges everything it holds (k^j
       exchange-phase ranks' blocks, folded ones included) with the k-1 ranks whose base-k
       digit j differs, one message to each::

           p = 9, k = 3:  phase 0: {0,1,2} {3,4,5} {6,7,8} all-to-all in threes (1 block each)
                          phase 1: {0,3,6} {1,4,7} {2,5,8} all-to-all in threes (3 blocks each)

    3. Unfold: each set's last rank sends the whole result to the ranks that folded into it.

    MPICH posts the receives of two phases ahead (``single_phase_recv`` off); here one phase
    is one round.  Blocks not laid out back to back are packed.
    """
    yield from _recexch_run(ctx, buf, counts, displs, k, False)


@algorithm(
    "allgather", "recexch_halving",
    cost=_recexch_cost(" + (L >= 2)*(alpha + n/p*beta)"),
    params=_RECEXCH_PARAMS,
    source="MPICH allgather_intra_recexch (recexch_type distance halving); Sack & Gropp, "
           "Faster topology-aware collective algorithms through non-minimal communication, "
           "PPoPP 2012",
)
def recexch_halving(ctx: Context, buf: np.ndarray, counts: Sequence[int],
                    displs: Sequence[int], *, k: int = 2) -> Schedule:
    """Recursive exchange, distance halving: the phases of ``recexch_doubling`` in reverse
    order (farthest partners first, with the least data).

    After the fold, each participant swaps its blocks with the participant whose base-k
    digits are its own reversed; from then on it holds, and passes on, the blocks of its
    digit-reversed rank, so that phase j (partners differing in the top digit first) grows
    the reversed rank's range k-fold and everything ends in rank order::

        p = 4, k = 2:  swap 1<->2;  phase 1: 0<->2, 1<->3 (1 block);  phase 0: 0<->1, 2<->3 (2)

    Then the unfold, as in ``recexch_doubling``.
    """
    yield from _recexch_run(ctx, buf, counts, displs, k, True)


def halving_skips(p: int) -> list[int]:
    """The skips s_0 = 1 < s_1 < ... < s_q = p of Traff's circulant graph, q = ceil(lg p):
    each the ceiling of half the next (``[1, 2, 4, 7]`` for p = 7).  The rounds of the
    circulant allgather, reduce-scatter and allreduce."""
    skips = [p]
    while skips[-1] > 1:
        skips.append(-(-skips[-1] // 2))
    return skips[::-1]


@algorithm(
    ("allgather", "allgatherv"), "circulant",
    cost=Cost("clg(p)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.1),
    source="Traff, 'Optimal, non-pipelined reduce-scatter and allreduce algorithms', arXiv "
           "2410.14234 (2024): the allgather half, ceil(lg p) rounds on the circulant graph of "
           "halving skips, any p",
)
def circulant(ctx: Context, buf: np.ndarray, counts: Sequence[int],
              displs: Sequence[int]) -> Schedule:
    """Allgather in ceil(lg p) rounds for any p, each rank receiving each block once, on the
    circulant graph with skips s_0 = 1 < ... < s_q = p (each the ceiling of half the next).
    Before round k a rank holds the s_k blocks r, r+1, ..., r + s_k - 1; it receives the
    next s_(k+1) - s_k <= s_k of them from rank r + s_k (its lowest) and sends its own lowest
    as many to rank r - s_k::

        p = 5 (skips 1 2 3 5):  k=0: r <- r+1: block r+1               (holds r..r+1)
                                k=1: r <- r+2: block r+2               (holds r..r+2)
                                k=2: r <- r+3: blocks r+3, r+4         (holds all)

    Like Bruck's without its final rotation in place: the blocks travel in a scratch kept
    rotated (block r first), so every message is one range, then are copied out.  No MPI
    library has it.
    """
    p, r = ctx.size, ctx.rank
    if p == 1:
        return
    rot = [counts[(r + j) % p] for j in range(p)]
    offs = displacements(rot)
    work = ctx.scratch(offs[-1] + rot[-1])
    ctx.copy(block(buf, counts, displs, r), work[: rot[0]])
    skips = halving_skips(p)
    for k in range(len(skips) - 1):
        lo, hi = skips[k], skips[k + 1]
        yield ctx.sendrecv(work[: offs[hi - lo]], (r - lo) % p,
                           work[offs[lo] : offs[hi] if hi < p else work.size], (r + lo) % p)
    for j in range(1, p):
        ctx.copy(block(work, rot, offs, j), block(buf, counts, displs, (r + j) % p))


def bine_peer(r: int, s: int, p: int) -> int:
    """Rank r's peer in step s of the Bine (= Swing) butterfly on p = 2^L ranks: ``r + rho(s)``
    for an even r, ``r - rho(s)`` for an odd one (mod p), rho(s) = sum of (-2)^i for i = 0..s
    = 1, -1, 3, -5, 11, -21, ... (distances 1, 1, 3, 5, 11, ...: about 2^s / 1.5 where
    recursive doubling goes 2^s).  De Sensi et al. (SC 2025): flipping the s+1 low digits
    of r's negabinary representation; their libbine's ``pi``."""
    rho = (1 - (-2) ** (s + 1)) // 3
    return (r + rho * (1 - 2 * (r % 2))) % p  # arithmetic, not a branch: the vector engine


def bine_group(v: int, s: int, q: int) -> list[int]:
    """The ranks v reaches through steps s, s+1, ..., L-1 of the Bine butterfly on q = 2^L
    ranks (itself included), sorted: 2^(L-s) ranks, the union of ``bine_group(v, s+1)`` and
    ``bine_group(bine_peer(v, s), s+1)`` (the butterfly property of Swing's peers for a
    power of two; tests/unit/test_bine.py checks it)."""
    out = [v]
    for t in range(s, q.bit_length() - 1):
        out += [bine_peer(x, t, q) for x in out]
    return sorted(out)


def _runs(ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted block indices as maximal ranges [lo, hi)."""
    out: list[tuple[int, int]] = []
    for i in ranks:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def _send_blocks(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
                 ranks: Sequence[int]) -> np.ndarray:
    """Blocks ``ranks`` (sorted) as one send buffer: a view if they lie back to back, else a
    packed copy (:func:`_outgoing` for one range)."""
    runs = _runs(ranks)
    if len(runs) == 1:
        return _outgoing(ctx, buf, counts, displs, *runs[0], False)
    return ctx.pack(blocks(buf, counts, displs, ranks))


def _recv_blocks(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
                 ranks: Sequence[int]) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Where blocks ``ranks`` (sorted) are received (:func:`_incoming` for one range)."""
    runs = _runs(ranks)
    if len(runs) == 1:
        return _incoming(ctx, buf, counts, displs, *runs[0], False)
    parts = blocks(buf, counts, displs, ranks)
    return ctx.scratch(sum(int(v.size) for v in parts)), parts


@algorithm(
    ("allgather", "allgatherv"), "bine",
    cost=Cost("lg(P)*alpha + (p-1)/p*n*beta + fold*(2*alpha + n*beta)",
              where="p' = 2^floor(lg p), fold = [p != p']", exact=("even", "pof2"), bound=0.5),
    source="De Sensi, Pasqualoni, Piarulli, Bonato, Ba, Turisini, Domke & Hoefler, Bine Trees: "
           "Enhancing Collective Operations by Optimizing Communication Locality, SC 2025 "
           "(arXiv 2508.17311): Bine butterflies, distance halving; the authors' libbine "
           "(github.com/HLC-Lab/pico) allgather_bine_* (powers of two only); fold of the extra "
           "ranks: MPICH",
)
def bine(ctx: Context, buf: np.ndarray, counts: Sequence[int],
         displs: Sequence[int]) -> Schedule:
    """Bine allgather: a butterfly whose step-s peer is :func:`bine_peer` (distances 1, 1, 3,
    5, 11, ...), run distance-halving: far peers first while the messages are small, the
    nearest last, when a rank sends half of everything::

        p = 8, holdings after each step (rank 0):
          s=2: 0 <-> 3   {0} + {3}                    (distance 3, one block each)
          s=1: 0 <-> 7   {0,3} + {4,7}                (distance 1, two blocks each)
          s=0: 0 <-> 1   {0,3,4,7} + {1,2,5,6}        (distance 1, four blocks each)

    Before step s a rank holds the blocks of the 2^(L-s-1) ranks it reaches through steps
    s+1..L-1 (:func:`bine_group`); it swaps them with its peer's.  Those ranks are not a range:
    their blocks are packed into one message (and unpacked) unless they lie back to back.
    Recursive doubling's bytes and steps, but its largest messages travel 1 away, not p/2: on
    p = 64 the bytes times ring distance summed over all messages is 0.10 of recursive
    doubling's, and on a dragonfly of groups of 8 its global-link bytes 0.21
    (tests/unit/test_bine.py).

    Any p: with p = 2^L + rem, even ranks 2i < 2 rem first send their block to 2i+1, the
    2^L standing ranks (:func:`~mpicoll.algorithms.fold.group`) run the butterfly on their
    blocks (one or two each), and 2i+1 hands 2i all the rest (MPICH's fold, as Swing's).
    """
    p, r = ctx.size, ctx.rank
    q = pof2_floor(p)
    rem = p - q
    if r < 2 * rem and r % 2 == 0:  # folded out: give the block, get the rest
        yield (ctx.send(block(buf, counts, displs, r), r + 1),)
        ins = [_incoming(ctx, buf, counts, displs, lo, hi, False)
               for lo, hi in ((0, r), (r + 1, p))]
        yield tuple(ctx.recv(v, r + 1) for v, _ in ins)
        for v, parts in ins:
            if parts is not None:
                ctx.unpack(v, parts)
        return
    if r < 2 * rem:
        yield (ctx.recv(block(buf, counts, displs, r - 1), r - 1),)
    g = _pof2.group(ctx) if rem else ctx

    def real(members: list[int]) -> list[int]:  # the blocks the group ranks stand for
        return [b for i in members for b in ((2 * i, 2 * i + 1) if i < rem else (i + rem,))]

    for s in range(q.bit_length() - 2, -1, -1):
        peer = bine_peer(g.rank, s, q)
        into, parts = _recv_blocks(ctx, buf, counts, displs, real(bine_group(peer, s + 1, q)))
        out = _send_blocks(ctx, buf, counts, displs, real(bine_group(g.rank, s + 1, q)))
        yield g.sendrecv(out, peer, into, peer)
        if parts is not None:
            ctx.unpack(into, parts)
    if r < 2 * rem:  # hand the folded-out rank everything but its own block
        outs = [_outgoing(ctx, buf, counts, displs, lo, hi, False)
                for lo, hi in ((0, r - 1), (r, p))]
        yield tuple(ctx.send(v, r - 1) for v in outs)


@default_rule("allgather", "allgatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling for short/medium totals on powers of two, Bruck for short
    # totals otherwise, ring for long messages.
    if nbytes < 524288 and p & (p - 1) == 0:
        return "recursive_doubling"
    if nbytes < 81920:
        return "bruck"
    return "ring"
