"""Broadcast: ``buf`` at the root is copied into ``buf`` on every rank."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import tree
from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .registry import Cost, Param, algorithm, default_rule
from .schedule import (
    DEFAULT_SEGMENT_BYTES,
    Context,
    Recv,
    Schedule,
    Send,
    block_counts,
    displacements,
    segment_count,
)


@algorithm(
    "bcast", "binomial",
    cost=Cost("clg(p)*(alpha + n*beta)"),
    source="MPICH bcast_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial-tree broadcast: each rank that has the data sends it to the rank 2^k away.

    Ranks are relative to the root; rank vr receives from its parent, then sends to its
    children, farthest first (see :mod:`~mpicoll.algorithms.tree`)::

        round 1:   0 -> 4            (p = 8)
        round 2:   0 -> 2, 4 -> 6
        round 3:   0 -> 1, 2 -> 3, 4 -> 5, 6 -> 7

    Good for short messages.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    if vr:
        yield (c.recv(buf, tree.parent(vr)),)
    for ch in reversed(tree.children(vr, p)):
        yield (c.send(buf, ch),)


@algorithm(
    "bcast", "scatter_allgather",
    cost=Cost("2*lg(p)*alpha + 2*(p-1)/p*n*beta", exact=("even",), bound=0.1),
    restrictions=("pof2",),
    source="van de Geijn (Barnett et al. 1994); "
           "MPICH bcast_intra_scatter_recursive_doubling_allgather",
)
def scatter_allgather(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial scatter of p blocks, then a recursive-doubling allgather of them::

        scatter   (lg p steps):  0 -[b2 b3]-> 2;  0 -[b1]-> 1, 2 -[b3]-> 3      (p = 4)
        allgather (lg p steps):  {0}<->{1}, {2}<->{3};  {0,1}<->{2,3}

    Each rank ends the scatter with one block (n/p); lg p exchanges of doubling size rebuild
    the whole message everywhere.
    """
    yield from _scatter_then(ctx, buf, root, _allgather_rd)


@algorithm(
    "bcast", "scatter_ring_allgather",
    cost=Cost("(clg(p) + p - 1)*alpha + 2*(p-1)/p*n*beta", exact=("even", "pof2"), bound=0.1),
    source="MPICH bcast_intra_scatter_ring_allgather; Thakur, Rabenseifner & Gropp 2005",
)
def scatter_ring_allgather(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial scatter of p blocks, then a ring allgather of them (any p)::

        scatter   (ceil(lg p) steps):  rank i ends with block i           (p = 4)
        allgather (p-1 steps):         r0 -b0-> r1 -b1-> r2 -b2-> r3 -b3-> r0, then b3, b0, ...

    The long-message broadcast of MPICH.
    """
    yield from _scatter_then(ctx, buf, root, _allgather_ring)


def _scatter_then(ctx: Context, buf: np.ndarray, root: int,
                  allgather: Callable[..., Schedule]) -> Schedule:
    """Binomial scatter of p blocks of ``buf`` from ``root``, then ``allgather`` of them
    (ranks relative to the root)."""
    c = ctx.relative(root)
    counts = block_counts(buf.size, c.size)
    displs = displacements(counts)
    yield from tree.scatter_blocks(c, buf, counts, displs)
    if c.rank == 0 and c.size > 1:
        # the root's buffer is input only (it may be read-only, as mpi4py allows): the
        # allgather, which receives on every rank, runs on a copy there
        work = c.scratch(buf.size)
        c.copy(buf, work)
        buf = work
    yield from allgather(c, buf, counts, displs)


@algorithm(
    "bcast", "pipeline",
    cost=Cost("(p > 1)*(p - 2 + max(1, n/s))*(alpha + min(n, s)*beta)",
              where=f"s = segment bytes (seg, or MPICOLL_SEGMENT_SIZE: "
                    f"{DEFAULT_SEGMENT_BYTES >> 10} KiB)",
              exact=("whole_segments",), bound=0.1),
    params=(Param("seg", 0, 0, 1 << 30, "segment bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024, 8192)),),
    source="Open MPI coll/tuned bcast pipeline (chain with fanout 1), segmented",
)
def pipeline(ctx: Context, buf: np.ndarray, root: int, *, seg: int = 0) -> Schedule:
    """Segmented chain broadcast: root -> 1 -> 2 -> ... -> p-1 (relative ranks).

    The message is cut into segments of ``seg`` bytes (``MPICOLL_SEGMENT_SIZE`` for 0); in
    step k a rank receives segment k from its predecessor while forwarding segment k-1, so the
    chain fills
    like a pipeline::

        step:      0      1      2      3
        0 -> 1    s0     s1     s2
        1 -> 2           s0     s1     s2

    For long messages close to n beta, independent of p.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    if p == 1:
        return
    m = segment_count(c, seg)
    nseg = max(1, -(-buf.size // m))
    segs = [buf[k * m : (k + 1) * m] for k in range(nseg)]
    prev, nxt = vr - 1, vr + 1
    if vr == 0:
        for k in range(nseg):
            yield (c.send(segs[k], nxt),)
        return
    for k in range(nseg + 1):
        ops: list[Send | Recv] = []
        if k < nseg:
            ops.append(c.recv(segs[k], prev))
        if k >= 1 and nxt < p:
            ops.append(c.send(segs[k - 1], nxt))
        if ops:
            yield tuple(ops)


@default_rule("bcast")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH defaults: binomial below 12 KiB or p < 8; scatter + recursive-doubling allgather
    # for medium messages on powers of two; scatter + ring allgather otherwise.
    if nbytes < 12288 or p < 8:
        return "binomial"
    if nbytes < 524288 and p & (p - 1) == 0:
        return "scatter_allgather"
    return "scatter_ring_allgather"
