"""Scatter(v): block i of the root's send buffer goes to rank i.

Schedules take ``(ctx, sendbuf, counts, displs, recvbuf, root)``: ``sendbuf`` is the root's
whole send buffer (None elsewhere) with ``counts``/``displs`` per rank (known at the root;
elsewhere only ``counts[rank] == recvbuf.size`` is), ``recvbuf`` this rank's block.  With
``MPI.IN_PLACE`` at the root, ``recvbuf`` is the root's own block of ``sendbuf``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import algorithm, clg, default_rule
from .schedule import Context, Schedule


@algorithm(
    ("scatter", "scatterv"), "linear",
    formula="(p-1) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * b,
    source="MPICH scatterv_allcomm_linear",
)
def linear(ctx: Context, sendbuf: np.ndarray | None, counts: Sequence[int] | None,
           displs: Sequence[int] | None, recvbuf: np.ndarray, root: int) -> Schedule:
    """The root sends every other rank its block directly, all messages in flight at once.

    Cost: (p-1) alpha + (p-1)/p n beta at the root (single port); the only choice for scatterv,
    whose counts are known only at the root.
    """
    p, r = ctx.size, ctx.rank
    if r != root:
        yield (ctx.recv(recvbuf, root),)
        return
    assert sendbuf is not None
    assert counts is not None
    assert displs is not None
    ctx.copy(sendbuf[displs[r] : displs[r] + counts[r]], recvbuf)
    ops = tuple(ctx.send(sendbuf[displs[i] : displs[i] + counts[i]], i)
                for i in range(p) if i != r)
    if ops:
        yield ops


@algorithm(
    "scatter", "binomial",
    formula="ceil(lg p) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: clg(p) * a + (p - 1) / p * n * b,
    source="MPICH scatter_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray | None, counts: Sequence[int] | None,
             displs: Sequence[int] | None, recvbuf: np.ndarray, root: int) -> Schedule:
    """Binomial-tree scatter: each subtree's blocks travel as one message, halving each level.

    Relative rank vr receives the blocks of its whole subtree [vr, vr + lowbit(vr)) from its
    parent, keeps its own and forwards each child's subtree.  The root first lays its blocks
    out in relative order (rank root, root+1, ...) unless root = 0.
    Cost: ceil(lg p) alpha + (p-1)/p n beta.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    n = recvbuf.size  # equal blocks: every rank's count is its own recvbuf's
    if vr == 0:
        assert sendbuf is not None
        assert displs is not None
        if root == 0 and (tuple(displs) == tuple(range(0, p * n, n)) if n else True):
            tmp = sendbuf
        else:
            tmp = c.scratch(p * n)
            for i in range(p):
                j = (i + root) % p
                c.copy(sendbuf[displs[j] : displs[j] + n], tmp[i * n : (i + 1) * n])
        sub = p
    else:
        low = vr & -vr
        sub = min(low, p - vr)
        tmp = c.scratch(sub * n)
        yield (c.recv(tmp, vr - low),)
    mask = 1
    while mask < sub:
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if mask < sub:
            hi = min(2 * mask, sub)
            yield (c.send(tmp[mask * n : hi * n], vr + mask),)
        mask >>= 1
    c.copy(tmp[:n], recvbuf)


@default_rule("scatter", "scatterv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "binomial" if p > 2 else "linear"
