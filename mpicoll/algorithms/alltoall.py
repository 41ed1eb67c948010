"""All-to-all(v/w): block j of rank i's send buffer lands in block i of rank j's receive buffer.

Schedules take ``(ctx, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls)``, all indexed by
peer rank.  With ``MPI.IN_PLACE`` the backend passes a copy of the receive buffer as
``sendbuf``.  Alltoallw passes each buffer as a :class:`~mpicoll.algorithms.datatypes.PerPeer`
(one view with its own datatype per peer; the displacements are then unused).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .datatypes import PerPeer
from .registry import algorithm, clg, default_rule
from .schedule import Context, Recv, Schedule, Send, is_pof2


def _blk(buf: np.ndarray, counts: Sequence[int], displs: Sequence[int], i: int) -> np.ndarray:
    if isinstance(buf, PerPeer):  # alltoallw: a view (and a datatype) per peer
        return buf[i]
    return buf[displs[i] : displs[i] + counts[i]]


@algorithm(
    ("alltoall", "alltoallv", "alltoallw"), "pairwise",
    formula="(p-1) alpha + n beta",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH alltoall_intra_pairwise / alltoallv_intra_pairwise_sendrecv_replace",
)
def pairwise(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
             sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
             rdispls: Sequence[int]) -> Schedule:
    """Pairwise exchange: p-1 steps; in step i exchange with rank XOR i (p = 2^k) or send to
    rank + i and receive from rank - i (otherwise).  One message in and out per step, so no
    link or receiver is oversubscribed.  Cost: (p-1) alpha + n beta (n = bytes sent in all).
    """
    p, r = ctx.size, ctx.rank
    ctx.copy(_blk(sendbuf, scounts, sdispls, r), _blk(recvbuf, rcounts, rdispls, r))
    pof2 = is_pof2(p)
    for i in range(1, p):
        dst, src = (r ^ i, r ^ i) if pof2 else ((r + i) % p, (r - i) % p)
        yield ctx.sendrecv(_blk(sendbuf, scounts, sdispls, dst), dst,
                           _blk(recvbuf, rcounts, rdispls, src), src)


@algorithm(
    ("alltoall", "alltoallv", "alltoallw"), "scattered",
    formula="(p-1) alpha + n beta  (all messages in flight at once)",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH alltoall_intra_scattered / alltoallv_intra_scattered",
)
def scattered(ctx: Context, sendbuf: np.ndarray, scounts: Sequence[int],
              sdispls: Sequence[int], recvbuf: np.ndarray, rcounts: Sequence[int],
              rdispls: Sequence[int]) -> Schedule:
    """Post every receive and every send at once (destinations staggered from rank + 1) and
    wait for them all: the network schedules the traffic.  Cost: (p-1) alpha + n beta.
    """
    p, r = ctx.size, ctx.rank
    ctx.copy(_blk(sendbuf, scounts, sdispls, r), _blk(recvbuf, rcounts, rdispls, r))
    peers = [(r + i) % p for i in range(1, p)]
    ops: tuple[Send | Recv, ...] = tuple(
        ctx.recv(_blk(recvbuf, rcounts, rdispls, (r - i) % p), (r - i) % p) for i in range(1, p)
    )
    ops += tuple(ctx.send(_blk(sendbuf, scounts, sdispls, d), d) for d in peers)
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
    formula="ceil(lg p) alpha + (n/2) ceil(lg p) beta  (exactly: n/p sum_k #{i < p: i & 2^k})",
    cost=lambda p, n, a, b, g: clg(p) * a + n / p * _bruck_blocks(p) * b,
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

    About n/2 bytes move per step.  Cost: ceil(lg p) alpha + (n/2) ceil(lg p) beta.
    """
    p, r = ctx.size, ctx.rank
    n = scounts[0] if scounts else 0
    tmp = ctx.scratch(p * n)
    for i in range(p):
        ctx.copy(_blk(sendbuf, scounts, sdispls, (r + i) % p), tmp[i * n : (i + 1) * n])
    k = 1
    while k < p:
        slots = [i for i in range(p) if i & k]
        parts = [tmp[i * n : (i + 1) * n] for i in slots]
        out = ctx.pack(parts)
        inc = ctx.scratch(out.size)
        yield ctx.sendrecv(out, (r + k) % p, inc, (r - k) % p)
        ctx.unpack(inc, parts)
        k <<= 1
    for i in range(p):
        ctx.copy(tmp[i * n : (i + 1) * n], _blk(recvbuf, rcounts, rdispls, (r - i) % p))


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
