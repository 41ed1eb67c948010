"""Reduce: the root ends with the reduction of every rank's vector.

Schedules take ``(ctx, sendbuf, recvbuf, op, root)``: ``sendbuf`` is this rank's input (never
written), ``recvbuf`` the root's output (None elsewhere).  With ``MPI.IN_PLACE`` the backend
passes a copy of the root's input as ``sendbuf``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from .registry import algorithm, clg, default_rule, lg
from .schedule import Context, Schedule, block_counts, displacements, pof2_floor


@algorithm(
    "reduce", "binomial",
    formula="ceil(lg p) (alpha + n beta + n gamma)",
    cost=lambda p, n, a, b, g: clg(p) * (a + n * b + n * g),
    source="MPICH reduce_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
             root: int) -> Schedule:
    """Binomial-tree reduce: in step k, rank vr receives from vr + 2^k (if vr's bit k is 0) or
    sends its partial result to vr - 2^k and stops.

    ::

        step 0:  1 -> 0, 3 -> 2, 5 -> 4, 7 -> 6      (p = 8, relative ranks)
        step 1:  2 -> 0, 6 -> 4
        step 2:  4 -> 0

    A subtree holds a contiguous range of ranks and children are higher, so the partial result
    is kept on the left: rank order is preserved.  For a non-commutative op the tree is rooted
    at rank 0 (then the result goes to the root, as MPICH does); for a commutative one, at the
    root.  Cost: ceil(lg p) (alpha + n beta + n gamma).
    """
    p = ctx.size
    troot = root if op.Is_commutative() else 0
    c = ctx.relative(troot)
    vr = c.rank
    acc, spare = sendbuf, None
    mask = 1
    while mask < p:
        if vr & mask:
            yield (c.send(acc, vr - mask),)
            break
        if vr | mask < p:
            tmp = spare if spare is not None else c.scratch(sendbuf.size)
            yield (c.recv(tmp, vr | mask),)
            c.reduce(acc, tmp, op)  # tmp = mine op theirs (mine covers lower ranks)
            spare = acc if acc is not sendbuf else None
            acc = tmp
        mask <<= 1
    if vr == 0:
        if troot == root:
            assert recvbuf is not None
            if acc is not recvbuf:
                c.copy(acc, recvbuf)
        else:
            yield (ctx.send(acc, root),)
    elif ctx.rank == root:  # non-commutative op, root != 0: the result comes from rank 0
        assert recvbuf is not None
        yield (ctx.recv(recvbuf, troot),)


@algorithm(
    "reduce", "linear",
    formula="(p-1) (alpha + n beta + n gamma)",
    cost=lambda p, n, a, b, g: (p - 1) * (a + n * b + n * g),
    source="MPI-1 reference implementation (MPICH 1.x reduce): the root folds in rank order",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
           root: int) -> Schedule:
    """Every rank sends to the root, which folds from rank p-1 down to rank 0:
    ``result = x0 op (x1 op (... op x(p-1)))``, the exact rank order for any op.

    One receive buffer at the root, one message per round.  Cost: (p-1) (alpha + n beta +
    n gamma).
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
    formula="2 lg p' alpha + 2 (p'-1)/p' n beta + (p'-1)/p' n gamma, p' = 2^floor(lg p)"
            "  (+ 2 (alpha + n beta) + n gamma to fold and forward if p != p')",
    cost=lambda p, n, a, b, g: (
        2 * lg(pof2_floor(p)) * a + (pof2_floor(p) - 1) / pof2_floor(p) * n * (2 * b + g)
        + (0 if p & (p - 1) == 0 else 2 * (a + n * b) + n * g)
    ) if p > 1 else 0.0,
    restrictions=("commutative",),
    source="Rabenseifner 2004; MPICH reduce_intra_reduce_scatter_gather",
)
def rabenseifner(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
                 root: int) -> Schedule:
    """Recursive-halving reduce-scatter, then a binomial gather of the blocks.

    The gather ends at the rank standing for new rank 0, which forwards the vector to the root
    if that is another rank (one extra message; MPICH instead steers the gather to the root).
    Needs a commutative op.  Cost: 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma.
    """
    p, r = ctx.size, ctx.rank
    pof2 = pof2_floor(p)
    rem = p - pof2
    work = ctx.scratch(sendbuf.size)
    ctx.copy(sendbuf, work)
    newrank = yield from _pof2.fold_in(ctx, work, op)
    holder = _pof2.real_rank(0, rem)
    if newrank >= 0:
        counts = block_counts(work.size, pof2)
        displs = displacements(counts)
        yield from _pof2.halving_reduce_scatter(ctx, work, newrank, pof2, rem, counts, displs, op)
        mask = 1
        while mask < pof2:
            lo = newrank
            if newrank & mask:
                hi = lo + mask
                yield (ctx.send(work[displs[lo] : displs[hi - 1] + counts[hi - 1]],
                                _pof2.real_rank(newrank - mask, rem)),)
                break
            lo, hi = newrank + mask, newrank + 2 * mask
            yield (ctx.recv(work[displs[lo] : displs[hi - 1] + counts[hi - 1]],
                            _pof2.real_rank(newrank + mask, rem)),)
            mask <<= 1
    if r == holder:
        if r == root:
            assert recvbuf is not None
            ctx.copy(work, recvbuf)
        else:
            yield (ctx.send(work, root),)
    elif r == root:
        assert recvbuf is not None
        yield (ctx.recv(recvbuf, holder),)


@algorithm(
    "reduce", "smp",
    formula="ceil(lg k) (alpha_i + n beta_i + n gamma) + ceil(lg N) (alpha_o + n beta_o + "
            "n gamma); k ranks per node, N nodes",
    cost=lambda p, n, a, b, g: clg(p) * (a + n * b + n * g),
    restrictions=("commutative",),
    source="MPICH reduce_intra_smp; Open MPI coll/han",
    auto=False,
)
def smp(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
        root: int) -> Schedule:
    """Hierarchical reduce: a binomial reduce inside each node to its representative (the root
    on the root's node, the lowest rank elsewhere), then a binomial reduce of the
    representatives to the root.  Needs a commutative op.
    Cost: ceil(lg k) (alpha_i + n beta_i + n gamma) + ceil(lg N) (alpha_o + n beta_o + n gamma).
    """
    groups, index = ctx.node_groups()
    reps = [root if index[root] == i else g[0] for i, g in enumerate(groups)]
    mine = index[ctx.rank]
    members = groups[mine]
    is_rep = ctx.rank == reps[mine]
    partial = (recvbuf if ctx.rank == root else ctx.scratch(sendbuf.size)) if is_rep else None
    yield from binomial(ctx.group(members), sendbuf, partial, op, members.index(reps[mine]))
    if is_rep and len(groups) > 1:
        assert partial is not None
        yield from binomial(ctx.group(reps), partial, recvbuf, op, index[root])


@default_rule("reduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: binomial for short vectors or non-commutative ops, Rabenseifner above 2 KiB.
    if not commutative or nbytes <= 2048:
        return "binomial"
    return "rabenseifner"
