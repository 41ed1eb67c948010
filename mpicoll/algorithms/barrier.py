"""Barrier: no rank leaves before every rank has entered.

Schedules take ``(ctx,)`` and move only empty messages (tokens); what a barrier must achieve is
that every rank has heard, directly or through others, from every other rank before it leaves.
"""

from __future__ import annotations

from collections.abc import Generator

from .allgather import recexch as recexch_layout
from .registry import Cost, Param, algorithm, default_rule
from .schedule import Context, Round, Schedule, pof2_floor


def dissemination_sends(p: int, k: int) -> int:
    """Messages each rank sends in :func:`k_dissemination` on p ranks with radix k: k-1 per
    round for ceil(log_k p) rounds, less those whose distance wraps to the rank itself."""
    k = min(k, p)
    sends, shift = 0, 1
    while shift < p:
        sends += sum(1 for j in range(1, k) if j * shift % p)
        shift *= k
    return sends


@algorithm(
    "barrier", "k_dissemination",
    cost=Cost("sends(p, k)*alpha",
              where="sends = k-1 per round for ceil(log_k p) rounds, less those that wrap to the "
                    "rank itself (radix min(k, p))",
              extra={"sends": dissemination_sends}, exact=("one_peer",), bound=2.0),
    params=(Param("k", 2, 2, 64, "radix: peers signalled per round (k - 1 of them)",
                  examples=(3, 4, 5)),),
    source="Hensgen, Finkel & Manber 1988; MPICH barrier_intra_k_dissemination",
)
def k_dissemination(ctx: Context, *, k: int = 2) -> Schedule:
    """Radix-k dissemination: in round i every rank signals ranks r + j k^i and waits for
    r - j k^i, j = 1 .. k-1 (mod p)::

        p = 9, k = 3:   round 0: r -> r+1, r+2      round 1: r -> r+3, r+6     (mod 9)

    After round i every rank has heard, directly or not, from the k^(i+1) ranks before it, so
    ceil(log_k p) rounds of k-1 empty messages suffice for any p.  A distance that wraps to
    the rank itself (j k^i a multiple of p) is left out on both sides; a radix above p is p.
    k = 2 is :func:`dissemination`.
    """
    p, r = ctx.size, ctx.rank
    k = min(k, p)
    shift = 1
    while shift < p:
        ops: list = []
        for j in range(1, k):
            d = j * shift % p
            if d:
                ops += ctx.sendrecv(ctx.scratch(0), (r + d) % p, ctx.scratch(0), (r - d) % p)
        yield tuple(ops)
        shift *= k


@algorithm(
    "barrier", "dissemination",
    cost=Cost("clg(p)*alpha"),
    source="Hensgen, Finkel & Manber 1988; MPICH barrier_intra_dissemination (k=2); Open MPI "
           "barrier bruck",
)
def dissemination(ctx: Context) -> Schedule:
    """Dissemination barrier (:func:`k_dissemination` with k = 2): in round k, signal
    rank + 2^k and wait for rank - 2^k::

        p = 5:   k=1: r -> r+1    k=2: r -> r+2    k=4: r -> r+4     (mod 5)

    After round k every rank has heard, directly or not, from the 2^(k+1) ranks before it, so
    ceil(lg p) rounds of one empty message each suffice for any p.
    """
    yield from k_dissemination(ctx, k=2)


def recexch_neighbors(p: int, k: int, rank: int) -> tuple[int, list[int], list[list[int]]]:
    """MPICH's recursive-exchange pattern for ``rank``, read from the one layout
    (:class:`~mpicoll.algorithms.allgather.Recexch`, radix lowered to p): ``(sendto,
    recvfrom, phases)``.  ``sendto`` is the participant a rank that sits out checks in with
    (-1 for a participant), ``recvfrom`` the ranks a participant serves (steps 1 and 3),
    ``phases`` its k-1 neighbours in each exchange phase (step 2), empty for a rank that sits
    out::

        p = 6, k = 3 (p_of_k 3, rem 3, T 4):  step 1: 0, 1 -> 2;  3 -> 4
                                              step 2: 2 <-> 4 <-> 5 (one phase, new ranks 0 1 2)
                                              step 3: 2 -> 0, 1;  4 -> 3
    """
    x = recexch_layout(p, k)
    sendto = x.sendto(rank)
    if sendto >= 0:
        return sendto, [], []
    return -1, x.recvfrom(rank), [x.nbrs(rank, i) for i in range(x.phases)]


def recexch_floor_phases(p: int, k: int) -> int:
    """The exchange phases of recursive exchange: floor(log_k p), radix lowered to p."""
    return recexch_layout(p, k).phases


def recexch_fold(p: int, k: int) -> int:
    """The most messages a participant of recursive exchange takes in step 1 (and gives back
    in step 3): min(rem, k - 1)."""
    x = recexch_layout(p, k)
    return min(x.rem, x.k - 1)


@algorithm(
    "barrier", "recexch",
    cost=Cost("(L*(K-1) + 2*F)*alpha",
              let=(("K", "max(2, min(k, p))"), ("L", "phases(p, K)"), ("F", "fanin(p, K)")),
              where="K = the radix, lowered to p; L = floor(log_K p) exchange phases; F = "
                    "min(p - K^L, K-1) messages into and out of a participant",
              extra={"phases": recexch_floor_phases, "fanin": recexch_fold},
              exact=("one_peer",), bound=0.75),
    params=(Param("k", 2, 2, 64, "radix: neighbours per exchange phase (k - 1 of them)",
                  examples=(3, 4, 5)),),
    source="MPICH barrier_intra_recexch (allreduce_intra_recexch of 0 bytes), "
           "recexchalgo.c's neighbours",
)
def recexch(ctx: Context, *, k: int = 2) -> Schedule:
    """Recursive exchange (MPICH): the ranks beyond the largest power of k check in with a
    participant (step 1), the k^L participants exchange with their k-1 neighbours in each of
    L = floor(log_k p) phases (step 2: new ranks that differ in digit i of base k), and the
    participants release the ranks that sat out (step 3)::

        p = 6, k = 3:   step 1:  0 -> 2, 1 -> 2, 3 -> 4
                        step 2:  {2, 4, 5} all to all (new ranks 0, 1, 2)
                        step 3:  2 -> 0, 2 -> 1, 4 -> 3

    After phase i a participant has heard from the k^(i+1) new ranks that share its higher
    digits; after the last, from all of them, and through them from everyone.
    """
    sendto, recvfrom, phases = recexch_neighbors(ctx.size, k, ctx.rank)
    if sendto >= 0:
        yield (ctx.send(ctx.scratch(0), sendto),)
        yield (ctx.recv(ctx.scratch(0), sendto),)
        return
    if recvfrom:
        yield tuple(ctx.recv(ctx.scratch(0), src) for src in recvfrom)
    for nbrs in phases:
        ops: list = []
        for nb in nbrs:
            ops += ctx.sendrecv(ctx.scratch(0), nb, ctx.scratch(0), nb)
        yield tuple(ops)
    if recvfrom:
        yield tuple(ctx.send(ctx.scratch(0), dst) for dst in recvfrom)


@algorithm(
    "barrier", "recursive_doubling",
    cost=Cost("(lg(P) + 2*fold)*alpha", where="p' = 2^floor(lg p), fold = [p != p']"),
    source="Open MPI coll_base_barrier recursivedoubling",
)
def recursive_doubling(ctx: Context) -> Schedule:
    """Recursive doubling among the first p' = 2^floor(lg p) ranks: in step k exchange a token
    with rank ^ 2^k.  Each rank r >= p' first checks in with r - p' and waits for it to come
    back at the end::

        p = 6 (p' = 4):   4 -> 0, 5 -> 1;   0<->1, 2<->3;   0<->2, 1<->3;   0 -> 4, 1 -> 5
    """
    p, r = ctx.size, ctx.rank
    pof2 = pof2_floor(p)
    if r >= pof2:
        yield (ctx.send(ctx.scratch(0), r - pof2), ctx.recv(ctx.scratch(0), r - pof2))
        return
    extra = r + pof2 < p
    if extra:
        yield (ctx.recv(ctx.scratch(0), r + pof2),)
    mask = 1
    while mask < pof2:
        yield ctx.sendrecv(ctx.scratch(0), r ^ mask, ctx.scratch(0), r ^ mask)
        mask <<= 1
    if extra:
        yield (ctx.send(ctx.scratch(0), r + pof2),)


def _tree(ctx: Context, fan_in: bool) -> Generator[Round, None, None]:
    """One sweep of Open MPI's tree barrier (see :func:`tree`): towards rank 0 or from it."""
    p, r = ctx.size, ctx.rank
    depth = 1 << (p - 1).bit_length() if p > 1 else 1
    jumps = []
    jump = 1
    while jump < depth:
        jumps.append(jump)
        jump <<= 1
    for jump in jumps if fan_in else reversed(jumps):
        partner = r ^ jump
        if partner & (jump - 1) or partner >= p:
            continue
        if (partner > r) == fan_in:
            yield (ctx.recv(ctx.scratch(0), partner),)
        else:
            yield (ctx.send(ctx.scratch(0), partner),)


@algorithm(
    "barrier", "tree",
    cost=Cost("2*clg(p)*alpha"),
    source="Open MPI coll_base_barrier tree",
)
def tree(ctx: Context) -> Schedule:
    """A binomial fan-in to rank 0, then the same tree back out: in step k rank r with k
    trailing zero bits hears from r + 2^k; a rank whose lowest set bit is 2^k reports to
    r - 2^k, then waits for the release on the same edge::

        p = 4:   in:  1 -> 0, 3 -> 2;  2 -> 0        out:  0 -> 2;  0 -> 1, 2 -> 3
    """
    yield from _tree(ctx, fan_in=True)
    yield from _tree(ctx, fan_in=False)


@algorithm(
    "barrier", "double_ring",
    cost=Cost("(p > 1)*2*p*alpha"),
    source="Open MPI coll_base_barrier doublering",
)
def double_ring(ctx: Context) -> Schedule:
    """A token goes around the ring twice, starting and ending at rank 0: the first lap tells
    rank 0 that every rank has entered, the second lets them go::

        p = 4:   0 -> 1 -> 2 -> 3 -> 0   (everyone in)     0 -> 1 -> 2 -> 3 -> 0   (release)
    """
    p, r = ctx.size, ctx.rank
    if p == 1:
        return
    left, right = (r - 1) % p, (r + 1) % p
    for _ in range(2):
        if r:
            yield (ctx.recv(ctx.scratch(0), left),)
        yield (ctx.send(ctx.scratch(0), right),)
        if not r:
            yield (ctx.recv(ctx.scratch(0), left),)


@algorithm(
    "barrier", "linear",
    cost=Cost("2*(p-1)*alpha"),
    source="Open MPI coll_base_barrier basic_linear",
)
def linear(ctx: Context) -> Schedule:
    """Every rank checks in with rank 0, which waits for all of them, then releases each::

        p = 4:   1 -> 0, 2 -> 0, 3 -> 0;   0 -> 1, 0 -> 2, 0 -> 3
    """
    p, r = ctx.size, ctx.rank
    if p == 1:
        return
    if r:
        yield (ctx.send(ctx.scratch(0), 0),)
        yield (ctx.recv(ctx.scratch(0), 0),)
        return
    yield tuple(ctx.recv(ctx.scratch(0), i) for i in range(1, p))
    yield tuple(ctx.send(ctx.scratch(0), i) for i in range(1, p))


@algorithm(
    "barrier", "two_proc",
    cost=Cost("(p > 1)*alpha"),
    restrictions=("two_ranks",),
    source="Open MPI coll_base_barrier_intra_two_procs",
)
def two_proc(ctx: Context) -> Schedule:
    """Two ranks exchange one empty message::

        p = 2:   0 <-> 1
    """
    if ctx.size == 2:
        peer = 1 - ctx.rank
        yield ctx.sendrecv(ctx.scratch(0), peer, ctx.scratch(0), peer)


@default_rule("barrier")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "dissemination"
