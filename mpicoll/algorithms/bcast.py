"""Broadcast: ``buf`` at the root is copied into ``buf`` on every rank."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .registry import algorithm, clg, default_rule, lg
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
    formula="ceil(lg p) (alpha + n beta)",
    cost=lambda p, n, a, b, g: clg(p) * (a + n * b),
    source="MPICH bcast_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial-tree broadcast: each rank that has the data sends it to the rank 2^k away.

    Ranks are renumbered relative to the root (vr = (rank - root) mod p).  Rank vr receives
    from vr minus its lowest set bit, then sends to vr + m for every m below that bit::

        round 1:   0 -> 4            (p = 8)
        round 2:   0 -> 2, 4 -> 6
        round 3:   0 -> 1, 2 -> 3, 4 -> 5, 6 -> 7

    Cost: ceil(lg p) (alpha + n beta); good for short messages.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    mask = 1
    while mask < p:
        if vr & mask:
            yield (c.recv(buf, vr - mask),)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if vr + mask < p:
            yield (c.send(buf, vr + mask),)
        mask >>= 1


def scatter_blocks(c: Context, buf: np.ndarray, counts: Sequence[int],
                   displs: Sequence[int]) -> Schedule:
    """Binomial scatter of the relative-rank blocks of ``buf`` from relative rank 0.

    Blocks are laid out in relative-rank order, so every subtree's blocks are contiguous and
    travel as one message.  Used by the scatter-allgather broadcasts (van de Geijn).
    """
    vr, p = c.rank, c.size

    def span(lo: int, hi: int) -> np.ndarray:
        hi = min(hi, p)
        return buf[displs[lo] : displs[hi - 1] + counts[hi - 1]]

    mask = 1
    while mask < p:
        if vr & mask:
            yield (c.recv(span(vr, vr + mask), vr - mask),)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if vr + mask < p:
            yield (c.send(span(vr + mask, vr + 2 * mask), vr + mask),)
        mask >>= 1


@algorithm(
    "bcast", "scatter_allgather",
    formula="2 lg p alpha + 2 (p-1)/p n beta",
    cost=lambda p, n, a, b, g: 2 * lg(p) * a + 2 * (p - 1) / p * n * b,
    restrictions=("pof2",),
    source="van de Geijn (Barnett et al. 1994); "
           "MPICH bcast_intra_scatter_recursive_doubling_allgather",
)
def scatter_allgather(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial scatter of p blocks, then a recursive-doubling allgather of them.

    Each rank ends the scatter with one block (n/p), then lg p exchanges of doubling size
    rebuild the whole message everywhere.  Cost: 2 lg p alpha + 2 (p-1)/p n beta.
    """
    c = ctx.relative(root)
    counts = block_counts(buf.size, c.size)
    displs = displacements(counts)
    yield from scatter_blocks(c, buf, counts, displs)
    yield from _allgather_rd(c, buf, counts, displs)


@algorithm(
    "bcast", "scatter_ring_allgather",
    formula="(ceil(lg p) + p - 1) alpha + 2 (p-1)/p n beta",
    cost=lambda p, n, a, b, g: (clg(p) + p - 1) * a + 2 * (p - 1) / p * n * b,
    source="MPICH bcast_intra_scatter_ring_allgather; Thakur, Rabenseifner & Gropp 2005",
)
def scatter_ring_allgather(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Binomial scatter of p blocks, then a ring allgather of them (any p).

    Cost: (ceil(lg p) + p - 1) alpha + 2 (p-1)/p n beta; the long-message broadcast of MPICH.
    """
    c = ctx.relative(root)
    counts = block_counts(buf.size, c.size)
    displs = displacements(counts)
    yield from scatter_blocks(c, buf, counts, displs)
    yield from _allgather_ring(c, buf, counts, displs)


_SEG = DEFAULT_SEGMENT_BYTES  # the cost formula assumes the default segment size


@algorithm(
    "bcast", "pipeline",
    formula="(p - 2 + n/s) (alpha + s beta), s = segment bytes (MPICOLL_SEGMENT_SIZE, 64 KiB)",
    cost=lambda p, n, a, b, g: (
        0.0 if p < 2 else (p - 2 + max(1.0, n / _SEG)) * (a + min(n, _SEG) * b)
    ),
    source="Open MPI coll/tuned bcast pipeline (chain with fanout 1), segmented",
)
def pipeline(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Segmented chain broadcast: root -> 1 -> 2 -> ... -> p-1 (relative ranks).

    The message is cut into segments of ``MPICOLL_SEGMENT_SIZE`` bytes; in step k a rank
    receives segment k from its predecessor while forwarding segment k-1, so the chain fills
    like a pipeline::

        step:      0      1      2      3
        0 -> 1    s0     s1     s2
        1 -> 2           s0     s1     s2

    Cost: (p - 2 + n/s) (alpha + s beta): for long messages close to n beta, independent of p.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    if p == 1:
        return
    seg = segment_count(c)
    nseg = max(1, -(-buf.size // seg))
    segs = [buf[k * seg : (k + 1) * seg] for k in range(nseg)]
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


@algorithm(
    "bcast", "smp",
    formula="ceil(lg N) (alpha_o + n beta_o) + ceil(lg k) (alpha_i + n beta_i); k ranks per "
            "node, N nodes",
    cost=lambda p, n, a, b, g: clg(p) * (a + n * b),
    source="MPICH bcast_intra_smp; Open MPI coll/han",
    auto=False,
)
def smp(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Hierarchical broadcast: a binomial broadcast among one representative per node (the
    root on its own node, the lowest rank elsewhere), then a binomial broadcast inside each
    node.  The network carries N - 1 messages of n bytes.
    Cost: ceil(lg N) (alpha_o + n beta_o) + ceil(lg k) (alpha_i + n beta_i).
    """
    groups, index = ctx.node_groups()
    reps = [root if index[root] == i else g[0] for i, g in enumerate(groups)]
    mine = index[ctx.rank]
    if ctx.rank == reps[mine] and len(groups) > 1:
        yield from binomial(ctx.group(reps), buf, index[root])
    members = groups[mine]
    yield from binomial(ctx.group(members), buf, members.index(reps[mine]))


@default_rule("bcast")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH defaults: binomial below 12 KiB or p < 8; scatter + recursive-doubling allgather
    # for medium messages on powers of two; scatter + ring allgather otherwise.
    if nbytes < 12288 or p < 8:
        return "binomial"
    if nbytes < 524288 and p & (p - 1) == 0:
        return "scatter_allgather"
    return "scatter_ring_allgather"
