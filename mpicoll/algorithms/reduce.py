"""Reduce: the root ends with the reduction of every rank's vector.

Schedules take ``(ctx, sendbuf, recvbuf, op, root)``: ``sendbuf`` is this rank's input (never
written), ``recvbuf`` the root's output (None elsewhere).  With ``MPI.IN_PLACE`` the backend
passes a copy of the root's input as ``sendbuf``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from . import tree
from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule, block_counts, displacements, pof2_floor


@algorithm(
    "reduce", "binomial",
    cost=Cost("clg(p)*(alpha + n*beta + n*gamma)"),
    source="MPICH reduce_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
             root: int) -> Schedule:
    """Binomial-tree reduce: rank vr receives and reduces each child's partial result,
    nearest child first, then sends its own to its parent (:mod:`~mpicoll.algorithms.tree`)::

        step 0:  1 -> 0, 3 -> 2, 5 -> 4, 7 -> 6      (p = 8, relative ranks)
        step 1:  2 -> 0, 6 -> 4
        step 2:  4 -> 0

    A subtree holds a contiguous range of ranks and children are higher, so the partial result
    is kept on the left: rank order is preserved.  For a non-commutative op the tree is rooted
    at rank 0 (then the result goes to the root, as MPICH does); for a commutative one, at the
    root.
    """
    troot = root if op.Is_commutative() else 0
    c = ctx.relative(troot)
    vr = c.rank
    acc, spare = sendbuf, None
    for ch in tree.children(vr, c.size):
        tmp = spare if spare is not None else c.scratch(sendbuf.size)
        yield (c.recv(tmp, ch),)
        c.reduce(acc, tmp, op)  # tmp = mine op theirs (mine covers lower ranks)
        spare = acc if acc is not sendbuf else None
        acc = tmp
    if vr:
        yield (c.send(acc, tree.parent(vr)),)
    elif troot == root:
        assert recvbuf is not None
        if acc is not recvbuf:
            c.copy(acc, recvbuf)
    else:
        yield (ctx.send(acc, root),)
    if vr and ctx.rank == root:  # non-commutative op, root != 0: the result comes from rank 0
        assert recvbuf is not None
        yield (ctx.recv(recvbuf, troot),)


@algorithm(
    "reduce", "linear",
    cost=Cost("(p-1)*(alpha + n*beta + n*gamma)"),
    source="MPI-1 reference implementation (MPICH 1.x reduce): the root folds in rank order",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
           root: int) -> Schedule:
    """Every rank sends to the root, which folds from rank p-1 down to rank 0:
    ``result = x0 op (x1 op (... op x(p-1)))``, the exact rank order for any op::

        p = 4, root 0:   3 -> 0,  then 2 -> 0,  then 1 -> 0     (one message per round)

    One receive buffer at the root.
    """
    p, r = ctx.size, ctx.rank
    if r != root:
        yield (ctx.send(sendbuf, root),)
        return
    assert recvbuf is not None
    tmp = ctx.scratch(sendbuf.size) if p > 1 else sendbuf
    for i in range(p - 1, -1, -1):
        if i == root:
            src = sendbuf
        else:
            yield (ctx.recv(tmp, i),)
            src = tmp
        if i == p - 1:
            ctx.copy(src, recvbuf)
        else:
            ctx.reduce(src, recvbuf, op)  # recvbuf = x_i op recvbuf


@algorithm(
    "reduce", "rabenseifner",
    cost=_pof2.RABENSEIFNER,
    restrictions=("commutative",),
    source="Rabenseifner 2004; MPICH reduce_intra_reduce_scatter_gather",
)
def rabenseifner(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
                 root: int) -> Schedule:
    """Recursive-halving reduce-scatter, then a binomial gather of the blocks::

        p = 4:   halving:  {0,1} <-> {2,3} halves, then 0<->1, 2<->3: rank i owns block i
                 gather:   1 -[b1]-> 0, 3 -[b3]-> 2;  2 -[b2 b3]-> 0

    Extra ranks beyond 2^k are folded in first (:mod:`~mpicoll.algorithms.fold`).  The gather
    ends at the rank standing for new rank 0, which forwards the vector to the root if that is
    another rank (one extra message; MPICH instead steers the gather to the root).
    """
    p, r = ctx.size, ctx.rank
    rem = p - pof2_floor(p)
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    newrank = yield from _pof2.fold_in(ctx, work, op)
    holder = _pof2.real_rank(0, rem)
    if newrank >= 0:
        g = _pof2.group(ctx)
        counts = block_counts(work.size, g.size)
        displs = displacements(counts)
        yield from _pof2.halving_reduce_scatter(g, work, counts, displs, op)
        yield from tree.gather_blocks(g, work, counts, displs)
    if r == holder:
        if r == root:
            assert recvbuf is not None
            ctx.copy(work, recvbuf)
        else:
            yield (ctx.send(work, root),)
    elif r == root:
        assert recvbuf is not None
        yield (ctx.recv(recvbuf, holder),)


@default_rule("reduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: binomial for short vectors or non-commutative ops, Rabenseifner above 2 KiB.
    if not commutative or nbytes <= 2048:
        return "binomial"
    return "rabenseifner"
