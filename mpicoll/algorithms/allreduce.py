"""Allreduce: every rank ends with the reduction of all ranks' vectors.

Schedules take ``(ctx, buf, op)``: ``buf`` holds this rank's input and receives the result
(the backend copies the send buffer in unless ``MPI.IN_PLACE``).  Every algorithm leaves
bitwise-identical results on all ranks: each element is reduced once, in one order, and copied.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from . import registry
from .allgather import ring as _allgather_ring
from .bcast import binomial as _bcast_binomial
from .reduce import binomial as _reduce_binomial
from .reduce_scatter import ring_core as _reduce_scatter_ring
from .registry import algorithm, clg, default_rule, lg
from .schedule import Context, Schedule, block_counts, displacements, pof2_floor


@algorithm(
    "allreduce", "recursive_doubling",
    formula="lg p' (alpha + n beta + n gamma), p' = 2^floor(lg p)"
            "  (+ 2 (alpha + n beta) + n gamma to fold if p != p')",
    cost=lambda p, n, a, b, g: (
        lg(pof2_floor(p)) * (a + n * b + n * g)
        + (0 if p & (p - 1) == 0 else 2 * (a + n * b) + n * g)
    ) if p > 1 else 0.0,
    source="MPICH allreduce_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Recursive doubling: in step k, exchange the whole vector with rank ^ 2^k and reduce.

    Extra ranks beyond 2^k are folded in first and given the result at the end (MPICH).
    The lower rank's data is always the left operand, so non-commutative ops are correct.
    Cost: lg p (alpha + n beta + n gamma); the short-message allreduce.
    """
    p = ctx.size
    pof2 = pof2_floor(p)
    rem = p - pof2
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        acc, tmp = buf, ctx.scratch(buf.size)
        mask = 1
        while mask < pof2:
            partner = _pof2.real_rank(newrank ^ mask, rem)
            yield ctx.sendrecv(acc, partner, tmp, partner)
            if partner < ctx.rank:
                ctx.reduce(tmp, acc, op)  # acc = theirs op mine
            else:
                ctx.reduce(acc, tmp, op)  # tmp = mine op theirs
                acc, tmp = tmp, acc
            mask <<= 1
        if acc is not buf:
            ctx.copy(acc, buf)
    yield from _pof2.fold_out(ctx, buf)


@algorithm(
    "allreduce", "ring",
    formula="2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma",
    cost=lambda p, n, a, b, g: 2 * (p - 1) * a + (p - 1) / p * n * (2 * b + g),
    restrictions=("commutative",),
    source="Patarasuk & Yuan, JPDC 69(2) 2009; MPICH allreduce_intra_ring; baidu-allreduce",
)
def ring(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Bandwidth-optimal ring: a ring reduce-scatter, then a ring allgather, of p blocks.

    ::

        reduce-scatter (p-1 steps): each step a rank passes one partial block right and adds
                                    the one from its left; rank r ends owning block r.
        allgather      (p-1 steps): the finished blocks travel once around the ring.

    Each rank sends and receives 2 n (p-1)/p bytes.  Needs a commutative op (blocks are
    reduced in ring order).  Cost: 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma.
    """
    counts = block_counts(buf.size, ctx.size)
    displs = displacements(counts)
    yield from _reduce_scatter_ring(ctx, buf, counts, displs, op)
    yield from _allgather_ring(ctx, buf, counts, displs)


@algorithm(
    "allreduce", "rabenseifner",
    formula="2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma  (+ fold if p != 2^k)",
    cost=lambda p, n, a, b, g: (
        2 * lg(pof2_floor(p)) * a + (pof2_floor(p) - 1) / pof2_floor(p) * n * (2 * b + g)
        + (0 if p & (p - 1) == 0 else 2 * (a + n * b) + n * g)
    ) if p > 1 else 0.0,
    restrictions=("commutative",),
    source="Rabenseifner 2004; MPICH allreduce_intra_reduce_scatter_allgather",
)
def rabenseifner(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling allgather.

    Bandwidth like the ring with only 2 lg p messages; extra ranks beyond 2^k are folded in.
    Needs a commutative op.  Cost: 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma.
    """
    p = ctx.size
    pof2 = pof2_floor(p)
    rem = p - pof2
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        counts = block_counts(buf.size, pof2)
        displs = displacements(counts)
        yield from _pof2.halving_reduce_scatter(ctx, buf, newrank, pof2, rem, counts, displs, op)
        yield from _pof2.doubling_allgather(ctx, buf, newrank, pof2, rem, counts, displs)
    yield from _pof2.fold_out(ctx, buf)


@algorithm(
    "allreduce", "reduce_bcast",
    formula="2 ceil(lg p) (alpha + n beta) + ceil(lg p) n gamma",
    cost=lambda p, n, a, b, g: clg(p) * (2 * a + 2 * n * b + n * g),
    source="MPI-1 reference implementations (MPICH 1.x): binomial reduce to 0, then bcast",
)
def reduce_bcast(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then binomial broadcast from rank 0.

    Cost: 2 ceil(lg p) (alpha + n beta) + ceil(lg p) n gamma.
    """
    yield from _reduce_binomial(ctx, buf, buf if ctx.rank == 0 else None, op, 0)
    yield from _bcast_binomial(ctx, buf, 0)


@algorithm(
    "allreduce", "smp",
    formula="2 ceil(lg k) (alpha_i + n beta_i) + ceil(lg k) n gamma + allreduce(N leaders, "
            "alpha_o, beta_o); k ranks per node, N nodes",
    cost=lambda p, n, a, b, g: clg(p) * (2 * a + 2 * n * b + n * g),
    restrictions=("commutative",),
    source="MPICH allreduce_intra_smp; Open MPI coll/han; Traff, 'SMP-aware message passing'",
    auto=False,
)
def smp(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Hierarchical allreduce: reduce inside each node to its leader (its lowest rank), an
    allreduce among the leaders (the flat algorithm ``auto`` picks for N leaders), then a
    broadcast inside each node.  Only the leaders' step crosses the network: one vector's
    worth per node instead of every rank's share.

    ::

        node 0: r0 <- r1        node 1: r2 <- r3        (reduce to leaders)
                r0 <=========================> r2       (leaders' allreduce)
                r0 -> r1                r2 -> r3        (bcast in nodes)

    Needs a commutative op (node groups need not be rank-contiguous).
    Cost (cost column: all ranks on one node): 2 ceil(lg k) (alpha_i + n beta_i) +
    ceil(lg k) n gamma + T_allreduce(N, alpha_o, beta_o).
    """
    groups, index = ctx.node_groups()
    members = groups[index[ctx.rank]]
    local = ctx.group(members)
    yield from _reduce_binomial(local, buf, buf if local.rank == 0 else None, op, 0)
    if local.rank == 0 and len(groups) > 1:
        leaders = ctx.group([g[0] for g in groups])
        inner = registry.choose("allreduce", leaders.size, ctx.nbytes(buf), commutative=True)
        yield from inner.schedule(leaders, buf, op)
    yield from _bcast_binomial(local, buf, 0)


@default_rule("allreduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling up to 2 KiB or for non-commutative ops, Rabenseifner above;
    # ring for long vectors when p is not a power of two (fold costs a full extra vector).
    if not commutative or nbytes <= 2048:
        return "recursive_doubling"
    if p & (p - 1) and nbytes >= 1 << 20:
        return "ring"
    return "rabenseifner"
