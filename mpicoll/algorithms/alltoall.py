"""All-to-all(v/w): block j of rank i's send buffer lands in block i of rank j's receive buffer.

Schedules take ``(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)``, all indexed by
peer rank.  With ``MPI.IN_PLACE`` the backend passes a copy of the receive buffer as
``sendbuf``.  Alltoallw passes each buffer as a :class:`~mpicoll.algorithms.datatypes.PerPeer`
(one view with its own datatype per peer; :func:`~mpicoll.algorithms.schedule.block` then
takes block ``i`` as ``buf[i]`` and the displacements are unused).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .allgather import _bruck_messages
from .registry import Cost, Param, algorithm, default_rule
from .schedule import Context, Recv, Schedule, Send, block, blocks, equal_blocks, is_pof2


def _own_block(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
               sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
               rdispls: Sequence[int]) -> None:
    """Copy this rank's block to itself (the one block no message carries)."""
    r = ctx.rank
    ctx.copy(block(sendbuf, scounts, sdispls, r), block(recvbuf, rcounts, rdispls, r))


def _post(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int], sdispls: Sequence[int],
          recvbuf: np.ndarray, rcounts: Sequence[int], rdispls: Sequence[int],
          srcs: Sequence[int], dsts: Sequence[int]) -> tuple[Send | Recv, ...]:
    """One round: a receive of each block from ``srcs``, then a send of each to ``dsts``, in
    those orders (the order a network meets them in)."""
    ops: tuple[Send | Recv, ...] = tuple(
        ctx.recv(v, q) for q, v in zip(srcs, blocks(recvbuf, rcounts, rdispls, srcs),
                                       strict=True))
    return ops + tuple(ctx.send(v, q) for q, v in
                       zip(dsts, blocks(sendbuf, scounts, sdispls, dsts), strict=True))


_DIRECT = "(p-1)*alpha + (p-1)/p*n*beta"  # p-1 messages of one block each on every port


@algorithm(("alltoall", "alltoallv", "alltoallw"), "pairwise",
           cost=Cost(_DIRECT, exact=("even",), bound=0.1),
           source="MPICH alltoall_intra_pairwise / alltoallv_intra_pairwise_sendrecv_replace")
def pairwise(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
             sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
             rdispls: Sequence[int]) -> Schedule:
    """Pairwise exchange: p-1 steps; in step i exchange with rank XOR i (p = 2^k) or send to
    rank + i and receive from rank - i (otherwise)::

        p = 4:  step 1:  0<->1, 2<->3    step 2:  0<->2, 1<->3    step 3:  0<->3, 1<->2

    One message in and out per step, so no link or receiver is oversubscribed.
    """
    p, r = ctx.size, ctx.rank
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
    pof2 = is_pof2(p)
    for i in range(1, p):
        dst, src = (r ^ i, r ^ i) if pof2 else ((r + i) % p, (r - i) % p)
        yield ctx.sendrecv(block(sendbuf, scounts, sdispls, dst), dst,
                           block(recvbuf, rcounts, rdispls, src), src)


@algorithm(("alltoall", "alltoallv", "alltoallw"), "scattered",
           cost=Cost(_DIRECT, exact=("even", "one_peer"), bound="p/4 + 0.1"),
           source="MPICH alltoall_intra_scattered / alltoallv_intra_scattered")
def scattered(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
              sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
              rdispls: Sequence[int]) -> Schedule:
    """Post every receive and every send at once (destinations staggered from rank + 1) and
    wait for them all: the network schedules the traffic::

        p = 4, one round:  rank r sends to r+1, r+2, r+3 and receives from r-1, r-2, r-3
    """
    p, r = ctx.size, ctx.rank
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
    if p > 1:
        yield _post(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls,
                    [(r - i) % p for i in range(1, p)], [(r + i) % p for i in range(1, p)])


@algorithm("alltoall", "linear",
           cost=Cost(_DIRECT, exact=("even", "one_peer"), bound="p/4 + 0.1"),
           source="Open MPI ompi_coll_base_alltoall_intra_basic_linear (tuned alltoall 1)")
def linear(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
           sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
           rdispls: Sequence[int]) -> Schedule:
    """Basic linear: one round; every receive is posted first (from rank + 1, rank + 2, ...),
    then every send in the reverse order (to rank - 1, rank - 2, ...), so that messages tend
    to arrive in the order their receives were posted::

        p = 4, rank 0:  recv <- r1, r2, r3;  send -> r3, r2, r1

    Rank r's i-th send goes to the rank whose i-th receive waits for it.
    """
    yield from linear_sync(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)


@algorithm(("alltoallv", "alltoallw"), "linear",
           cost=Cost(_DIRECT, exact=("even", "one_peer"), bound="p/4 + 0.1"),
           source="Open MPI ompi_coll_base_alltoallv_intra_basic_linear (tuned alltoallv 1); "
                  "coll/basic mca_coll_basic_alltoallw_intra")
def linear_v(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
             sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
             rdispls: Sequence[int]) -> Schedule:
    """Basic linear (v/w): one round; every receive is posted first, then every send, both in
    rank order 0, 1, ..., p-1 (this rank skipped)::

        p = 4, rank 1:  recv <- r0, r2, r3;  send -> r0, r2, r3

    Open MPI skips empty messages; here they go (zero bytes), as every schedule's do.
    """
    p, r = ctx.size, ctx.rank
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
    peers = [q for q in range(p) if q != r]
    if peers:
        yield _post(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls, peers, peers)


@algorithm("alltoall", "linear_sync",
           cost=Cost(_DIRECT, exact=("even", "one_peer"), bound="p/4 + 0.1"),
           params=(Param("reqs", 0, 0, 1 << 20, "receives (and sends) in flight; 0: all p-1",
                         examples=(1, 2)),),
           source="Open MPI ompi_coll_base_alltoall_intra_linear_sync (tuned alltoall 4, "
                  "coll_tuned_alltoall_max_requests)")
def linear_sync(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
                sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
                rdispls: Sequence[int], *, reqs: int = 0) -> Schedule:
    """Linear with at most ``reqs`` receives and ``reqs`` sends in flight (0: all p-1, which
    is ``linear``): the peers of ``linear``, in that order, in rounds of ``reqs``::

        p = 5, reqs = 2, rank 0:  round 1: recv <- r1, r2; send -> r4, r3
                                  round 2: recv <- r3, r4; send -> r2, r1

    Open MPI refills a slot as soon as any request completes (``Waitany``); here a round
    waits for its batch, so a rank may idle where Open MPI would post the next message.
    A send of batch j meets its receive in batch j on the other side.
    """
    p, r = ctx.size, ctx.rank
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
    width = p - 1 if reqs <= 0 or reqs > p - 1 else reqs
    for lo in range(1, p, max(width, 1)):
        hi = min(lo + width, p)
        yield _post(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls,
                    [(r + i) % p for i in range(lo, hi)], [(r - i) % p for i in range(lo, hi)])


@algorithm("alltoall", "two_proc",
           cost=Cost(_DIRECT, exact=("even",), bound=0.1),
           restrictions=("two_ranks",),
           source="Open MPI ompi_coll_base_alltoall_intra_two_procs (tuned alltoall 5)")
def two_proc(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
             sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
             rdispls: Sequence[int]) -> Schedule:
    """Two ranks swap the block meant for the other in one exchange, then copy their own::

        r0: send s0[1] -> r1, recv r0[1] <- r1        r1: send s1[0] -> r0, recv r1[0] <- r0

    Open MPI refuses any other p (MPI_ERR_UNSUPPORTED_OPERATION); here p > 2 is refused
    before any message and p = 1 only copies its own block.
    """
    if ctx.size != 2:
        _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
        return
    q = 1 - ctx.rank
    yield ctx.sendrecv(block(sendbuf, scounts, sdispls, q), q,
                       block(recvbuf, rcounts, rdispls, q), q)
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)


@algorithm(("alltoall", "alltoallv", "alltoallw"), "pairwise_sendrecv_replace",
           cost=Cost("max(2*p-3, 0)*(alpha + n/p*beta)", exact=("even",), bound=0.5),
           source="MPICH alltoall(v,w)_intra_pairwise_sendrecv_replace (MPII_alltoall_"
                  "pairwise_sendrecv_replace, its default order: no intranode table, "
                  "MPIR_CVAR_ALLTOALLV_PAIRWISE_NEW off)")
def pairwise_sendrecv_replace(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
                              sdispls: Sequence[int], recvbuf: np.ndarray,
                              rcounts: Sequence[int], rdispls: Sequence[int]) -> Schedule:
    """MPICH's in-place all-to-all: one blocking exchange at a time, every rank taking its
    peers in rank order 0, 1, ..., p-1 (itself skipped), so the pairs run in the global order
    (0,1), (0,2), ..., (0,p-1), (1,2), ...; an exchange waits for both ranks' earlier ones::

        p = 4   time 1: 0<->1   2: 0<->2   3: 0<->3, 1<->2   4: 1<->3   5: 2<->3

    2p-3 exchange times: a latency-bound order, meant for ``MPI.IN_PLACE`` (MPICH forces it
    there), where it needs one block of temporary memory.  With ``MPI.IN_PLACE`` the send
    buffer here is the backend's copy of the receive buffer (what ``MPI_Sendrecv_replace``
    buffers internally).
    """
    p, r = ctx.size, ctx.rank
    _own_block(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)
    for q in range(p):
        if q != r:
            yield ctx.sendrecv(block(sendbuf, scounts, sdispls, q), q,
                               block(recvbuf, rcounts, rdispls, q), q)


def _bruck_blocks(p: int, k: int = 2) -> int:
    """Blocks a rank sends over all phases of radix-k Bruck all-to-all: per phase (distance
    d = 1, k, k^2, ...), the slots i < p whose base-k digit at d is not 0."""
    total, d = 0, 1
    while d < p:
        total += sum(1 for i in range(p) if i // d % k)
        d *= k
    return total


@algorithm(
    "alltoall", "bruck",
    cost=Cost("clg(p)*alpha + n/p*B(p)*beta",
              where="B(p) = sum over k < ceil(lg p) of #{i < p: bit k of i set} (p/2 ceil(lg p) "
                    "for p = 2^k)",
              extra={"B": _bruck_blocks}),
    source="Bruck et al., IEEE TPDS 8(11) 1997; MPICH alltoall_intra_brucks; Open MPI "
           "ompi_coll_base_alltoall_intra_bruck (tuned modified_bruck: the same rounds, "
           "received in place through a derived datatype)",
)
def bruck(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
          sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
          rdispls: Sequence[int]) -> Schedule:
    """Bruck all-to-all: ceil(lg p) steps for any p, trading bandwidth for latency.

    1. Rotate: ``tmp[i]`` = the block for rank + i.
    2. For k = 1, 2, 4, ...: send every block whose index has bit k set to rank + k (packed
       into one message), receive the same slots from rank - k.  A block for distance i
       hops through the set bits of i.
    3. Un-rotate: the block in slot i came from rank - i.

    ::

        p = 4, slots 0 1 2 3:   k=1: slots 1, 3 -> rank+1    k=2: slots 2, 3 -> rank+2

    About n/2 bytes move per step.  ``k_brucks`` is the same with radix k (this is its k = 2).
    """
    yield from k_brucks(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls, k=2)


@algorithm(
    "alltoall", "k_brucks",
    cost=Cost("M*alpha + n/p*B*beta",
              let=(("M", "brucks_messages(p, k)"), ("B", "brucks_blocks(p, k)")),
              where="brucks_messages(p, k) = sum over phases d = 1, k, k^2, ... < p of "
                    "min(k-1, floor((p-1)/d)); brucks_blocks(p, k) = sum over the same d of "
                    "#{i < p: digit d of i in base k is not 0}",
              exact=("one_peer",), bound="p/4 + 0.1",
              extra={"brucks_messages": _bruck_messages, "brucks_blocks": _bruck_blocks}),
    params=(Param("k", 2, 2, 64, "radix (messages per phase + 1)", examples=(3, 4)),),
    source="MPICH alltoall_intra_k_brucks (MPIR_CVAR_ALLTOALL_BRUCKS_KVAL); Bruck et al., "
           "IEEE TPDS 8(11) 1997",
)
def k_brucks(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
             sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
             rdispls: Sequence[int], *, k: int = 2) -> Schedule:
    """Radix-k Bruck all-to-all: ceil(log_k p) phases of up to k-1 messages.

    1. Rotate: ``tmp[i]`` = the block for rank + i.
    2. For each phase (distance d = 1, k, k^2, ...) and digit value j = 1 .. k-1 (while
       j d < p): send the slots whose base-k digit at d is j to rank + j d (packed into one
       message), receive the same slots from rank - j d.  A block for distance i hops once
       for each nonzero digit of i.
    3. Un-rotate: the block in slot i came from rank - i.

    ::

        p = 9, k = 3:  d=1: slots 1,4,7 -> rank+1, slots 2,5,8 -> rank+2
                       d=3: slots 3,4,5 -> rank+3, slots 6,7,8 -> rank+6
    """
    p, r = ctx.size, ctx.rank
    n = rcounts[0] if rcounts else 0  # in the receive datatype's units (the call's)
    rot_counts, rot_displs = equal_blocks(n, p)
    tmp = ctx.scratch(p * n)
    for i in range(p):
        ctx.copy(block(sendbuf, scounts, sdispls, (r + i) % p),
                 block(tmp, rot_counts, rot_displs, i))
    d = 1
    while d < p:
        ops: list[Send | Recv] = []
        moves = []
        for j in range(1, k):
            if j * d >= p:
                break
            slots = [i for lo in range(j * d, p, k * d) for i in range(lo, min(lo + d, p))]
            parts = blocks(tmp, rot_counts, rot_displs, slots)  # base-k digit at d is j
            out = ctx.pack(parts)
            inc = ctx.scratch(out.size)
            ops += (ctx.recv(inc, (r - j * d) % p), ctx.send(out, (r + j * d) % p))
            moves.append((inc, parts))
        yield tuple(ops)
        for inc, parts in moves:
            ctx.unpack(inc, parts)
        d *= k
    for i in range(p):
        ctx.copy(block(tmp, rot_counts, rot_displs, i),
                 block(recvbuf, rcounts, rdispls, (r - i) % p))


@default_rule("alltoall", "alltoallv", "alltoallw")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: Bruck for short blocks (<= 256 B each) on 8+ ranks, scattered for medium, pairwise
    # for long.  alltoallv/w pass nbytes = 0 (their counts differ between ranks).
    if nbytes == 0:
        return "scattered"
    block = nbytes // max(p, 1)
    if block <= 256 and p >= 8:
        return "bruck"
    if block <= 32768:
        return "scattered"
    return "pairwise"
