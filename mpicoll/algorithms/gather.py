"""Gather(v): every rank's block lands at block i of the root's receive buffer.

Schedules take ``(ctx, sendbuf, recvbuf, counts, displs, root)``: ``sendbuf`` is this rank's
block, ``recvbuf`` the root's whole receive buffer (None elsewhere) with ``counts``/``displs``
per rank (known at the root).  With ``MPI.IN_PLACE`` at the root, ``sendbuf`` is the root's
own block of ``recvbuf``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import algorithm, clg, default_rule
from .schedule import Context, Schedule


@algorithm(
    ("gather", "gatherv"), "linear",
    formula="(p-1) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH gatherv_allcomm_linear",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
           counts: Sequence[int] | None, displs: Sequence[int] | None,
           root: int) -> Schedule:
    """Every rank sends its block straight to the root, which has all receives posted at once.

    Cost: (p-1) alpha + (p-1)/p n beta at the root.
    """
    p, r = ctx.size, ctx.rank
    if r != root:
        yield (ctx.send(sendbuf, root),)
        return
    assert recvbuf is not None
    assert counts is not None
    assert displs is not None
    ctx.copy(sendbuf, recvbuf[displs[r] : displs[r] + counts[r]])
    ops = tuple(ctx.recv(recvbuf[displs[i] : displs[i] + counts[i]], i)
                for i in range(p) if i != r)
    if ops:
        yield ops


@algorithm(
    "gather", "binomial",
    formula="ceil(lg p) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: clg(p) * a + (p - 1) / p * n * b,
    source="MPICH gather_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
             counts: Sequence[int] | None, displs: Sequence[int] | None,
             root: int) -> Schedule:
    """Binomial-tree gather, the mirror of the binomial scatter.

    Relative rank vr collects its children's subtrees (blocks [vr, vr + lowbit(vr))) into one
    buffer, then sends it to its parent in a single message; the root finally puts the blocks
    from relative into rank order.  Cost: ceil(lg p) alpha + (p-1)/p n beta.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    n = sendbuf.size
    sub = p if vr == 0 else min(vr & -vr, p - vr)
    if sub == 1 and vr != 0:
        yield (c.send(sendbuf, vr - (vr & -vr)),)
        return
    direct = (vr == 0 and root == 0 and recvbuf is not None and displs is not None
              and (tuple(displs) == tuple(range(0, p * n, n)) if n else True))
    tmp = recvbuf if direct else c.scratch(sub * n)
    assert tmp is not None
    c.copy(sendbuf, tmp[:n])
    ops = []
    mask = 1
    while mask < sub:
        hi = min(2 * mask, sub)
        ops.append(c.recv(tmp[mask * n : hi * n], vr + mask))
        mask <<= 1
    if ops:
        yield tuple(ops)
    if vr != 0:
        yield (c.send(tmp, vr - (vr & -vr)),)
        return
    if not direct:
        assert recvbuf is not None
        assert displs is not None
        for i in range(p):
            j = (i + root) % p
            c.copy(tmp[i * n : (i + 1) * n], recvbuf[displs[j] : displs[j] + n])


@default_rule("gather", "gatherv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "binomial" if p > 2 else "linear"
