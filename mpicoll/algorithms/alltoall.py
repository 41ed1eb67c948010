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

from .registry import Cost, algorithm, default_rule
from .schedule import Context, Recv, Schedule, Send, block, blocks, equal_blocks, is_pof2


def _own_block(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
               sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
               rdispls: Sequence[int]) -> None:
    """Copy this rank's block to itself (the one block no message carries)."""
    r = ctx.rank
    ctx.copy(block(sendbuf, scounts, sdispls, r), block(recvbuf, rcounts, rdispls, r))


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
    srcs = [(r - i) % p for i in range(1, p)]
    dsts = [(r + i) % p for i in range(1, p)]
    rviews = blocks(recvbuf, rcounts, rdispls, srcs)
    sviews = blocks(sendbuf, scounts, sdispls, dsts)
    ops: tuple[Send | Recv, ...] = tuple(
        ctx.recv(v, s) for s, v in zip(srcs, rviews, strict=True))
    ops += tuple(ctx.send(v, d) for d, v in zip(dsts, sviews, strict=True))
    if ops:
        yield ops


def _bruck_blocks(p: int) -> int:
    """Blocks a rank sends over all steps of Bruck's all-to-all: sum over k of #{i < p: i & k}."""
    total, k = 0, 1
    while k < p:
        total += sum(1 for i in range(p) if i & k)
        k <<= 1
    return total


@algorithm(
    "alltoall", "bruck",
    cost=Cost("clg(p)*alpha + n/p*B(p)*beta",
              where="B(p) = sum over k < ceil(lg p) of #{i < p: bit k of i set} (p/2 ceil(lg p) "
                    "for p = 2^k)",
              extra={"B": _bruck_blocks}),
    source="Bruck et al., IEEE TPDS 8(11) 1997; MPICH alltoall_intra_brucks",
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

    About n/2 bytes move per step.
    """
    p, r = ctx.size, ctx.rank
    n = rcounts[0] if rcounts else 0  # in the receive datatype's units (the call's)
    rot_counts, rot_displs = equal_blocks(n, p)
    tmp = ctx.scratch(p * n)
    for i in range(p):
        ctx.copy(block(sendbuf, scounts, sdispls, (r + i) % p),
                 block(tmp, rot_counts, rot_displs, i))
    k = 1
    while k < p:
        parts = blocks(tmp, rot_counts, rot_displs, [i for i in range(p) if i & k])
        out = ctx.pack(parts)
        inc = ctx.scratch(out.size)
        yield ctx.sendrecv(out, (r + k) % p, inc, (r - k) % p)
        ctx.unpack(inc, parts)
        k <<= 1
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
