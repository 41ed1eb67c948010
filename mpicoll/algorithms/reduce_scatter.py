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
from .registry import Cost, algorithm, default_rule
from .scatter import linear as _scatter_linear
from .schedule import Context, Round, Schedule, block, displacements, pof2_floor

_BOTH = ("reduce_scatter_block", "reduce_scatter")


def ring_core(ctx: Context, buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
              op: MPI.Op) -> Generator[Round, None, None]:
    """Ring reduce-scatter in place on ``buf``: afterwards block ``rank`` is fully reduced.

    In step s a rank sends its partial block (rank - s - 1) right and reduces the partial
    block (rank - s - 2) arriving from the left into its own copy; each block travels p - 1
    hops, picking up one contribution per hop, and stops at its owner::

        p = 3:  step 0:  r0 -b2-> r1,  r1 -b0-> r2,  r2 -b1-> r0   (each adds its own)
                step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0   (r_i owns b_i)
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    tmp = ctx.scratch(max(counts) if counts else 0)
    for s in range(p - 1):
        sb, rb = (r - s - 1) % p, (r - s - 2) % p
        incoming = tmp[: counts[rb]]
        yield ctx.sendrecv(block(buf, counts, displs, sb), right, incoming, left)
        ctx.reduce(incoming, block(buf, counts, displs, rb), op)


#: ring and pairwise move and reduce the same bytes in the same number of steps
_STEPS = Cost("(p-1)*alpha + (p-1)/p*n*(beta + gamma)", exact=("even",), bound=0.1)


@algorithm(_BOTH, "ring", cost=_STEPS, restrictions=("commutative",),
           source="Patarasuk & Yuan 2009 (first half of the ring allreduce)")
def ring(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
         op: MPI.Op) -> Schedule:
    """Ring reduce-scatter: p-1 steps, one block per link per step (see :func:`ring_core`)::

        p = 3:  step 0:  r0 -b2-> r1,  r1 -b0-> r2,  r2 -b1-> r0
                step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0

    Each rank sends and receives n (p-1)/p bytes.  Needs a commutative op.
    """
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    yield from ring_core(ctx, work, counts, displs, op)
    ctx.copy(block(work, counts, displs, ctx.rank), recvbuf)


@algorithm(_BOTH, "pairwise", cost=_STEPS, restrictions=("commutative",),
           source="MPICH reduce_scatter_intra_pairwise")
def pairwise(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
             op: MPI.Op) -> Schedule:
    """Pairwise exchange: in step i, send block rank+i of the input to rank+i and reduce the
    block rank received from rank-i.  No intermediate forwarding: each block crosses one link::

        p = 3:  step 1:  r0 -b1-> r1,  r1 -b2-> r2,  r2 -b0-> r0
                step 2:  r0 -b2-> r2,  r1 -b0-> r0,  r2 -b1-> r1

    Needs a commutative op.
    """
    p, r = ctx.size, ctx.rank
    displs = displacements(counts)
    ctx.copy(block(sendbuf, counts, displs, r), recvbuf)
    tmp = ctx.scratch(counts[r])
    for i in range(1, p):
        dst, src = (r + i) % p, (r - i) % p
        yield ctx.sendrecv(block(sendbuf, counts, displs, dst), dst, tmp, src)
        ctx.reduce(tmp, recvbuf, op)


@algorithm(
    _BOTH, "recursive_halving",
    cost=_pof2.HALVING,
    restrictions=("commutative",),
    source="Thakur, Rabenseifner & Gropp 2005; MPICH reduce_scatter_intra_recursive_halving",
)
def recursive_halving(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                      counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Recursive halving: lg p exchanges of half the remaining vector with rank ^ 2^k::

        p = 4:  dist 2:  0<->2, 1<->3 (halves)    dist 1:  0<->1, 2<->3 (quarters)

    Extra ranks beyond 2^k are folded in first: rank 2i hands its vector to 2i+1, which works
    for both and returns block 2i at the end.  Needs a commutative op.
    """
    p, r = ctx.size, ctx.rank
    rem = p - pof2_floor(p)
    displs = displacements(counts)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    newrank = yield from _pof2.fold_in(ctx, work, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        newcounts = [counts[2 * i] + counts[2 * i + 1] if i < rem else counts[i + rem]
                     for i in range(g.size)]
        yield from _pof2.halving_reduce_scatter(g, work, newcounts, displacements(newcounts), op)
    if r < 2 * rem:
        if r % 2:
            yield (ctx.send(block(work, counts, displs, r - 1), r - 1),)
        else:
            yield (ctx.recv(recvbuf, r + 1),)
            return
    ctx.copy(block(work, counts, displs, r), recvbuf)


@algorithm(
    _BOTH, "reduce_scatterv",
    cost=Cost("clg(p)*(alpha + n*beta + n*gamma) + (p-1)*alpha + (p-1)/p*n*beta",
              exact=("even",), bound=0.1),
    source="MPI-1 reference implementations (MPICH 1.x): reduce to rank 0, then scatterv",
)
def reduce_scatterv(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                    counts: Sequence[int], op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then a linear scatterv of the blocks::

        p = 4:   reduce:  1 -> 0, 3 -> 2;  2 -> 0       scatterv:  0 -b1-> 1, 0 -b2-> 2, 0 -b3-> 3

    The algorithm for non-commutative ops, any p and any counts.
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
