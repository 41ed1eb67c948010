"""Allreduce: every rank ends with the reduction of all ranks' vectors.

Schedules take ``(ctx, buf, op)``: ``buf`` holds this rank's input and receives the result
(the backend copies the send buffer in unless ``MPI.IN_PLACE``).  Every algorithm leaves
bitwise-identical results on all ranks: each element is reduced once, in one order, and copied.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .bcast import binomial as _bcast_binomial
from .reduce import binomial as _reduce_binomial
from .reduce_scatter import ring_core as _reduce_scatter_ring
from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule, block_counts, displacements


@algorithm(
    "allreduce", "recursive_doubling",
    cost=_pof2.DOUBLING,
    source="MPICH allreduce_intra_recursive_doubling; Thakur, Rabenseifner & Gropp 2005",
)
def recursive_doubling(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Recursive doubling: in step k, exchange the whole vector with rank ^ 2^k and reduce::

        k=0: 0<->1  2<->3     k=1: 0<->2  1<->3        (p = 4; everyone has it all)

    Extra ranks beyond 2^k are folded in first and given the result at the end (MPICH).
    The lower rank's data is always the left operand, so non-commutative ops are correct.
    The short-message allreduce.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        acc, tmp = buf, ctx.scratch(buf.size)
        mask = 1
        while mask < g.size:
            partner = g.rank ^ mask
            yield g.sendrecv(acc, partner, tmp, partner)
            if partner < g.rank:
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
    cost=Cost("2*(p-1)*alpha + (p-1)/p*n*(2*beta + gamma)", exact=("even",), bound=0.1),
    restrictions=("commutative",),
    source="Patarasuk & Yuan, JPDC 69(2) 2009; MPICH allreduce_intra_ring; baidu-allreduce",
)
def ring(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Bandwidth-optimal ring: a ring reduce-scatter, then a ring allgather, of p blocks::

        reduce-scatter (p-1 steps): each step a rank passes one partial block right and adds
                                    the one from its left; rank r ends owning block r.
        allgather      (p-1 steps): the finished blocks travel once around the ring.

    Each rank sends and receives 2 n (p-1)/p bytes.  Needs a commutative op (blocks are
    reduced in ring order).
    """
    counts = block_counts(buf.size, ctx.size)
    displs = displacements(counts)
    yield from _reduce_scatter_ring(ctx, buf, counts, displs, op)
    yield from _allgather_ring(ctx, buf, counts, displs)


@algorithm(
    "allreduce", "rabenseifner",
    cost=_pof2.RABENSEIFNER,
    restrictions=("commutative",),
    source="Rabenseifner 2004; MPICH allreduce_intra_reduce_scatter_allgather",
)
def rabenseifner(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling allgather::

        p = 4:   halving:   {0,1} <-[halves]-> {2,3};  0<->1, 2<->3    rank i owns block i
                 doubling:  0<->1, 2<->3;  {0,1} <-[halves]-> {2,3}    everyone has it all

    Bandwidth like the ring with only 2 lg p messages; extra ranks beyond 2^k are folded in.
    Needs a commutative op.
    """
    newrank = yield from _pof2.fold_in(ctx, buf, op)
    if newrank >= 0:
        g = _pof2.group(ctx)
        counts = block_counts(buf.size, g.size)
        displs = displacements(counts)
        yield from _pof2.halving_reduce_scatter(g, buf, counts, displs, op)
        yield from _allgather_rd(g, buf, counts, displs)
    yield from _pof2.fold_out(ctx, buf)


@algorithm(
    "allreduce", "reduce_bcast",
    cost=Cost("clg(p)*(2*alpha + 2*n*beta + n*gamma)"),
    source="MPI-1 reference implementations (MPICH 1.x): binomial reduce to 0, then bcast",
)
def reduce_bcast(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Binomial reduce to rank 0 (rank order kept), then binomial broadcast from rank 0::

        p = 4:   reduce:  1 -> 0, 3 -> 2;  2 -> 0        bcast:  0 -> 2;  0 -> 1, 2 -> 3
    """
    yield from _reduce_binomial(ctx, buf, buf if ctx.rank == 0 else None, op, 0)
    yield from _bcast_binomial(ctx, buf, 0)


@default_rule("allreduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: recursive doubling up to 2 KiB or for non-commutative ops, Rabenseifner above;
    # ring for long vectors when p is not a power of two (fold costs a full extra vector).
    if not commutative or nbytes <= 2048:
        return "recursive_doubling"
    if p & (p - 1) and nbytes >= 1 << 20:
        return "ring"
    return "rabenseifner"
