"""Reduce-scatter(-block): rank i ends with block i of the reduction of all ranks' vectors.

Schedules take ``(ctx, sendbuf, recvbuf, counts, op)``: ``sendbuf`` is this rank's whole input
(``sum(counts)`` elements, never written; blocks in rank order), ``recvbuf`` this rank's
``counts[rank]`` result elements.  ``reduce_scatter_block`` is the case of equal counts.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .reduce import binomial as _reduce_binomial
from .registry import algorithm, clg, default_rule, lg
from .scatter import linear as _scatter_linear
from .schedule import Context, Round, Schedule, displacements, pof2_floor

_BOTH = ("reduce_scatter_block", "reduce_scatter")


def ring_core(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
              op: MPI.Op) -> Generator[Round, None, None]:
    """Ring reduce-scatter in place on ``buf``: afterwards block ``rank`` is fully reduced.

    In step s a rank sends its partial block (rank - s - 1) right and reduces the partial
    block (rank - s - 2) arriving from the left into its own copy; each block travels p - 1
    hops, picking up one contribution per hop, and stops at its owner.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    tmp = ctx.scratch(max(counts) if counts else 0)
    for s in range(p - 1):
        sb, rb = (r - s - 1) % p, (r - s - 2) % p
        incoming = tmp[: counts[rb]]
        yield ctx.sendrecv(buf[displs[sb] : displs[sb] + counts[sb]], right, incoming, left)
        ctx.reduce(incoming, buf[displs[rb] : displs[rb] + counts[rb]], op)


@algorithm(
    _BOTH, "ring",
    formula="(p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * (b + g),
    restrictions=("commutative",),
    source="Patarasuk & Yuan 2009 (first half of the ring allreduce)",
)
def ring(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
         op: MPI.Op) -> Schedule:
    """Ring reduce-scatter: p-1 steps, one block per link per step (see :func:`ring_core`).

    Each rank sends and receives n (p-1)/p bytes.  Needs a commutative op.
    Cost: (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma.
    """
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    yield from ring_core(ctx, work, counts, displs, op)
    r = ctx.rank
    ctx.copy(work[displs[r] : displs[r] + counts[r]], recvbuf)


@algorithm(
    _BOTH, "pairwise",
    formula="(p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma",
    cost=lambda p, n, a, b, g: (p - 1) * a + (p - 1) / p * n * (b + g),
    restrictions=("commutative",),
    source="MPICH reduce_scatter_intra_pairwise",
)
def pairwise(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
             op: MPI.Op) -> Schedule:
    """Pairwise exchange: in step i, send block rank+i of the input to rank+i and reduce the
    block rank received from rank-i.  No intermediate forwarding: each block crosses one link.

    Needs a commutative op.  Cost: (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma.
    """
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    ctx.copy(sendbuf[displs[r] : displs[r] + counts[r]], recvbuf)
    tmp = ctx.scratch(counts[r])
    for i in range(1, p):
        dst, src = (r + i) % p, (r - i) % p
        yield ctx.sendrecv(sendbuf[displs[dst] : displs[dst] + counts[dst]], dst, tmp, src)
        ctx.reduce(tmp, recvbuf, op)


@algorithm(
    _BOTH, "recursive_halving",
    formula="lg p alpha + (p-1)/p n beta + (p-1)/p n gamma  (+ fold if p != 2^k)",
    cost=lambda p, n, a, b, g: (
        lg(pof2_floor(p)) * a + (pof2_floor(p) - 1) / pof2_floor(p) * n * (b + g)
        + (0 if p & (p - 1) == 0 else 2 * a + n * (b + g) + n / p * b)
    ) if p > 1 else 0.0,
    restrictions=("commutative",),
    source="Thakur, Rabenseifner & Gropp 2005; MPICH reduce_scatter_intra_recursive_halving",
)
def recursive_halving(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                      counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Recursive halving: lg p exchanges of half the remaining vector with rank ^ 2^k.

    Extra ranks beyond 2^k are folded in first: rank 2i hands its vector to 2i+1, which works
    for both and returns block 2i at the end.  Needs a commutative op.
    Cost: lg p alpha + (p-1)/p n beta + (p-1)/p n gamma.
    """
    p, r = ctx.size, ctx.rank
    pof2 = pof2_floor(p)
    rem = p - pof2
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    newrank = yield from _pof2.fold_in(ctx, work, op)
    if newrank >= 0:
        newcounts = [counts[2 * i] + counts[2 * i + 1] if i < rem else counts[i + rem]
                     for i in range(pof2)]
        yield from _pof2.halving_reduce_scatter(ctx, work, newrank, pof2, rem, newcounts,
                                                displacements(newcounts), op)
    if r < 2 * rem:
        if r % 2:
            yield (ctx.send(work[displs[r - 1] : displs[r - 1] + counts[r - 1]], r - 1),)
        else:
            yield (ctx.recv(recvbuf, r + 1),)
            return
    ctx.copy(work[displs[r] : displs[r] + counts[r]], recvbuf)


@algorithm(
    _BOTH, "reduce_scatterv",
    formula="ceil(lg p) (alpha + n beta + n gamma) + (p-1) alpha + (p-1)/p n beta",
    cost=lambda p, n, a, b, g: clg(p) * (a + n * b + n * g) + (p - 1) * a + (p - 1) / p * n * b,
    source="MPI-1 reference implementations (MPICH 1.x): reduce to rank 0, then scatterv",
)
def reduce_scatterv(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                    counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then a linear scatterv of the blocks.

    The algorithm for non-commutative ops, any p and any counts.
    Cost: ceil(lg p) (alpha + n beta + n gamma) + (p-1) alpha + (p-1)/p n beta.
    """
    full = ctx.scratch(sendbuf.size) if ctx.rank == 0 else None
    yield from _reduce_binomial(ctx, sendbuf, full, op, 0)
    yield from _scatter_linear(ctx, full, counts, displacements(counts), recvbuf, 0)


@default_rule(*_BOTH)
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive halving for short vectors, pairwise for long ones (commutative ops).
    if not commutative:
        return "reduce_scatterv"
    if nbytes <= 524288:
        return "recursive_halving"
    return "pairwise"
