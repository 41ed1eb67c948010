"""Reduce: the root ends with the reduction of every rank's vector.

Schedules take ``(ctx, sendbuf, recvbuf, op, root)``: ``sendbuf`` is this rank's input (never
written), ``recvbuf`` the root's output (None elsewhere).  With ``MPI.IN_PLACE`` the backend
passes a copy of the root's input as ``sendbuf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache, partial

import numpy as np
from mpi4py import MPI

from . import fold as _pof2
from . import tree
from .bcast import bine_tree as _bine_tree
from .registry import Cost, Param, algorithm, clg, default_rule, overlapped
from .schedule import (
    Context,
    Pipeline,
    Recv,
    Schedule,
    Send,
    block_counts,
    displacements,
    pof2_floor,
    segment_count,
    segments,
    split,
)


def tree_time(q: int, n: float, s: float, alpha: float, beta: float, gamma: float) -> float:
    """Seconds of :func:`binomial` on q ranks for an n-byte vector: ``clg(q) (alpha + n beta +
    n gamma)`` for n <= s (one segment), else S = ceil(n/s) segments of m = n/S bytes per
    child, each reduced while the next arrives: ``overlapped(clg(q) S, alpha + m beta,
    m gamma)`` (a child's first segment leaves while its last one is reduced, so the levels
    chain without a gap)."""
    nseg = max(1, math.ceil(n / s))
    if q <= 1:
        return 0.0
    if nseg == 1:
        return clg(q) * (alpha + n * beta + n * gamma)
    m = n / nseg
    return overlapped(clg(q) * nseg, alpha + m * beta, m * gamma)


#: the binomial reduce as a term of a :class:`Cost` (with ``extra=TREE_EXTRA``)
TREE = "reduce_tree(p, n, s, alpha, beta, gamma)"
TREE_WHERE = ("reduce_tree(q, n, s, alpha, beta, gamma) = ceil(lg q) (alpha + n beta + n gamma) "
              "if n <= s, else overlapped(ceil(lg q) S, alpha + m beta, m gamma), S = ceil(n/s) "
              "segments of m = n/S bytes; s = segment bytes (MPICOLL_SEGMENT_SIZE, 64 KiB)")
TREE_EXTRA = {"reduce_tree": tree_time}


@algorithm(
    "reduce", "binomial",
    cost=Cost(TREE, where=TREE_WHERE, extra=TREE_EXTRA, exact=("whole_segments",), bound=0.1),
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

    A vector larger than a segment (``ctx.segment_bytes``) travels as S segments, one round
    each, and each segment is reduced while the next one arrives (child k+1's first while
    child k's last is reduced; the send to the parent starts while the last is)::

        round:    (c0,0)  (c0,1) ... (c1,0)    ...  (up,0)          (up,1) ...
        wire:     c0 s0   c0 s1      c1 s0          to parent: s0   s1
        reduce:           c0 s0      c0 s(S-1)      c(last) s(S-1)

    Each element is reduced in the same order either way.
    """
    troot = root if op.Is_commutative() else 0
    c = ctx.relative(troot)
    vr = c.rank
    n = sendbuf.size
    kids = tree.children(vr, c.size)
    nseg = segments(c, n)
    acc, spare = sendbuf, None
    if nseg == 1:  # one segment: each reduction must end before the next round, nothing overlaps
        for ch in kids:
            tmp = spare if spare is not None else c.scratch(n)
            yield (c.recv(tmp, ch),)
            c.reduce(acc, tmp, op)  # tmp = mine op theirs (mine covers lower ranks)
            spare = acc if acc is not sendbuf else None
            acc = tmp
        if vr:
            yield (c.send(acc, tree.parent(vr)),)
    else:
        # child i's partial result arrives in pool[i % 2] and becomes acc = acc op it; child
        # i+1's arrives where acc was read from: segment j of it only once segment j of acc
        # is reduced, so no round touches a segment that local work still uses
        pool = [c.scratch(n) for _ in range(min(len(kids), 2))]
        segs = [split(b, nseg) for b in pool]
        pipe = Pipeline()
        mine = split(sendbuf, nseg)
        for i, ch in enumerate(kids):
            theirs = segs[i % 2]
            for j in range(nseg):
                yield pipe.round((c.recv(theirs[j], ch),))
                pipe.then(c.reduce, mine[j], theirs[j], op)  # theirs = mine op theirs
            mine = theirs
        acc = pool[(len(kids) - 1) % 2] if kids else sendbuf
        if vr:
            parent = tree.parent(vr)
            for part in split(acc, nseg):
                yield pipe.round((c.send(part, parent),))
        pipe.flush()
    if vr == 0:
        if troot == root:
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


# ---------------------------------------------------------------------------------------------
# The other trees (:mod:`~mpicoll.algorithms.tree`), unsegmented: Open MPI's forced tree
# reductions run with segment size 0 (one message per edge) unless told otherwise.


def _deliver(ctx: Context, acc: np.ndarray, recvbuf: np.ndarray | None, root: int,
             holder: int) -> Schedule:
    """The result, held by rank ``holder`` in ``acc``, into the root's ``recvbuf`` (one more
    message if the holder is another rank)."""
    if ctx.rank == holder:
        if holder == root:
            assert recvbuf is not None
            if acc is not recvbuf:
                ctx.copy(acc, recvbuf)
        else:
            yield (ctx.send(acc, root),)
    elif ctx.rank == root:
        assert recvbuf is not None
        yield (ctx.recv(recvbuf, holder),)


def _up(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op, root: int,
        shape: Callable[[int, int], tuple[int, list[int]]]) -> Schedule:
    """Reduce up the tree ``shape(vr, p) -> (parent, children in fold order)`` of relative
    ranks whose subtrees are ranges of ranks above their node: rooted at the root for a
    commutative op; for a non-commutative one at rank 0 (rank order is then relative order),
    which forwards the result to the root (as :func:`binomial`)."""
    top = root if op.Is_commutative() else 0
    c = ctx.relative(top)
    parent, kids = shape(c.rank, c.size)
    acc = yield from tree.reduce_up(c, sendbuf, op, parent, kids)
    yield from _deliver(ctx, acc, recvbuf, root, top)


@lru_cache(maxsize=256)
def _rounds(shape: str, p: int, k: int) -> int:
    if shape == "knomial":
        return tree.up_rounds(p, partial(tree.knomial_children, p=p, k=k))
    if shape == "kary":
        return tree.up_rounds(p, partial(tree.kary_children, p=p, k=k))
    if shape == "chain":
        return tree.up_rounds(p, partial(tree.chain_children, p=p, fanout=k))
    return tree.up_rounds(p, lambda r: tree.in_order_children(r, p)[1], top=p - 1)


def knomial_rounds(p: int, k: int) -> int:
    """Steps on the longest path of :func:`knomial`: ``(k-1) ceil(log_k p)`` for p a power of
    k."""
    return _rounds("knomial", p, k)


def kary_rounds(p: int, k: int) -> int:
    """Steps on the longest path of :func:`kary`: k per level above the deepest leaf."""
    return _rounds("kary", p, k)


def chain_rounds(p: int, fanout: int) -> int:
    """Steps on the longest path of :func:`chain`."""
    return _rounds("chain", p, fanout)


def in_order_rounds(p: int) -> int:
    """Steps on the longest path of :func:`in_order_binary` to rank p-1."""
    return _rounds("in_order", p, 2)


ROUNDS_EXTRA = {"knomial_rounds": knomial_rounds, "kary_rounds": kary_rounds,
                "chain_rounds": chain_rounds, "in_order_rounds": in_order_rounds}
ROUNDS_WHERE = ("{f} = the receive-and-reduce steps on the tree's longest path (a rank takes "
                "its children one at a time)")


@algorithm(
    "reduce", "knomial",
    cost=Cost("knomial_rounds(p, k)*(alpha + n*beta + n*gamma)",
              where=ROUNDS_WHERE.format(f="knomial_rounds(p, k)") +
              ", (k-1) ceil(log_k p) when p is a power of k",
              extra=ROUNDS_EXTRA),
    params=(Param("k", 4, 2, 64, "tree radix (children per node per level)",
                  examples=(2, 3, 8)),),
    source="Open MPI coll_base_reduce.c ompi_coll_base_reduce_intra_knomial (main; "
           "coll_base_topo.c kmtree); MPICH reduce tsp_tree (knomial_1)",
)
def knomial(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
            root: int, *, k: int = 4) -> Schedule:
    """k-nomial tree reduce: rank vr receives and folds its children ``vr + r k^j``, nearest
    first, then sends its partial result to its parent (relative ranks)::

        p = 9, k = 3:   step 1-2:  4, 5 -> 3;  7, 8 -> 6;  1, 2 -> 0
                        step 3-4:  3 -> 0, then 6 -> 0

    Every subtree is a range of ranks above its node: for a non-commutative op the tree is
    rooted at rank 0, which sends the result to the root.  k = 2 is :func:`binomial`
    (unsegmented).
    """
    yield from _up(ctx, sendbuf, recvbuf, op, root,
                   lambda vr, p: (tree.knomial_parent(vr, k), tree.knomial_children(vr, p, k)))


@algorithm(
    "reduce", "kary",
    cost=Cost("kary_rounds(p, k)*(alpha + n*beta + n*gamma)",
              where=ROUNDS_WHERE.format(f="kary_rounds(p, k)"), extra=ROUNDS_EXTRA),
    params=(Param("k", 2, 1, 64, "children per node", examples=(1, 3, 4)),),
    restrictions=("commutative",),
    source="Open MPI coll_base_reduce.c ompi_coll_base_reduce_intra_binary (k = 2; "
           "coll_base_topo.c ompi_coll_base_topo_build_tree)",
)
def kary(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
         root: int, *, k: int = 2) -> Schedule:
    """k-ary tree reduce (k = 2: Open MPI's binary tree), the mirror of the k-ary broadcast:
    a rank folds its k children's partial results, then sends to its parent::

        p = 7, k = 2:   step 1-2:  3, 5 -> 1;  4, 6 -> 2
                        step 3-4:  1, 2 -> 0

    The breadth-first numbering puts non-consecutive ranks in a subtree: commutative ops
    only (:func:`in_order_binary` is the binary tree for any op).
    """
    yield from _up(ctx, sendbuf, recvbuf, op, root,
                   lambda vr, p: (tree.kary_parent(vr, k), tree.kary_children(vr, p, k)))


@algorithm(
    "reduce", "chain",
    cost=Cost("chain_rounds(p, fanout)*(alpha + n*beta + n*gamma)",
              where=ROUNDS_WHERE.format(f="chain_rounds(p, fanout)") +
              ": the longest chain, then the root's fanout heads",
              extra=ROUNDS_EXTRA),
    params=(Param("fanout", 4, 1, 64, "chains into the root", examples=(1, 2, 8)),),
    source="Open MPI coll_base_reduce.c ompi_coll_base_reduce_intra_chain "
           "(coll_base_topo.c ompi_coll_base_topo_build_chain)",
)
def chain(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
          root: int, *, fanout: int = 4) -> Schedule:
    """Reduce along ``fanout`` chains of consecutive ranks into the root: each rank folds
    the partial result of the rank after it in its chain and passes it on; the root folds
    the chains' heads in order::

        p = 7, fanout = 2:   3 -> 2 -> 1 -> 0
                             6 -> 5 -> 4 -> 0       (0: x0 op chain(1..3) op chain(4..6))

    Every chain is a range of ranks: for a non-commutative op they run to rank 0, which
    sends the result to the root.
    """
    yield from _up(ctx, sendbuf, recvbuf, op, root,
                   lambda vr, p: (tree.chain_parent(vr, p, fanout),
                                  tree.chain_children(vr, p, fanout)))


@algorithm(
    "reduce", "in_order_binary",
    cost=Cost("(in_order_rounds(p) + (p > 1))*(alpha + n*beta + n*gamma) - (p > 1)*n*gamma",
              where=ROUNDS_WHERE.format(f="in_order_rounds(p)") +
              "; one more message from rank p-1 to a root other than it",
              extra=ROUNDS_EXTRA),
    source="Open MPI coll_base_reduce.c ompi_coll_base_reduce_intra_in_order_binary "
           "(coll_base_topo.c ompi_coll_base_topo_build_in_order_bintree)",
)
def in_order_binary(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None,
                    op: MPI.Op, root: int) -> Schedule:
    """Reduce up Open MPI's in-order binary tree: its top is rank p-1, each subtree a range
    of ranks with its node the highest, so a node folds its left child (the range just below
    it) in front of its own value, then its right child (the lowest range) in front of
    that: rank order for any op::

        p = 9:   8 <- 7, 3;   7 <- 6, 5;   5 <- 4;   3 <- 2, 1;   1 <- 0
                 8: (x0 .. x3) op (x4 .. x7) op x8

    Rank p-1 then sends the result to the root (unless it is the root).
    """
    p = ctx.size
    parent, kids = tree.in_order_children(ctx.rank, p)
    acc = yield from tree.reduce_up(ctx, sendbuf, op, parent, kids, before=True)
    yield from _deliver(ctx, acc, recvbuf, root, p - 1)


@algorithm(
    "reduce", "pipeline",
    cost=Cost("(p > 1)*(p - 2 + max(1, n/s))*(alpha + min(n, s)*(beta + gamma))",
              where="s = segment bytes (seg, or MPICOLL_SEGMENT_SIZE)",
              exact=("whole_segments",), bound=0.1),
    params=(Param("seg", 0, 0, 1 << 30, "segment bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024, 8192)),),
    source="Open MPI coll_base_reduce.c ompi_coll_base_reduce_intra_pipeline (a chain of "
           "fanout 1, segmented)",
)
def pipeline(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
             root: int, *, seg: int = 0) -> Schedule:
    """Segmented reduce along one chain p-1 -> p-2 -> ... -> 0 (relative ranks): in step j a
    rank receives segment j of its successor's partial result while it sends segment j-1 of
    its own (already folded) to its predecessor, so the chain fills like a pipeline::

        step:        0        1        2        3
        3 -> 2      s0       s1       s2
        2 -> 1               s0       s1       s2       (2: s_j = x2 op s_j, after step j)

    A rank folds ``mine op theirs``: rank order, for any op (rooted at rank 0, which forwards
    the result, if the op is not commutative).  For long vectors close to n (beta + gamma),
    independent of p.
    """
    top = root if op.Is_commutative() else 0
    c = ctx.relative(top)
    vr, p = c.rank, c.size
    n = sendbuf.size
    m = segment_count(c, seg)
    nseg = max(1, -(-n // m))

    def cut(b: np.ndarray) -> list[np.ndarray]:
        return [b] if nseg == 1 else [b[j * m : (j + 1) * m] for j in range(nseg)]

    mine = cut(sendbuf)
    parent = vr - 1
    acc = sendbuf
    if vr + 1 >= p:  # the chain's tail: its own vector, segment by segment
        if parent >= 0:
            for part in mine:
                yield (c.send(part, parent),)
    else:
        acc = c.scratch(n)
        theirs = cut(acc)
        for j in range(nseg + 1):
            ops: list[Send | Recv] = [c.recv(theirs[j], vr + 1)] if j < nseg else []
            if j and parent >= 0:
                ops.append(c.send(theirs[j - 1], parent))
            yield tuple(ops)
            if j < nseg:
                c.reduce(mine[j], theirs[j], op)  # theirs = mine op theirs
    yield from _deliver(ctx, acc, recvbuf, root, top)


@algorithm(
    "reduce", "circ_graph",
    cost=Cost("(p > 1)*(max(1, ceil(n/s)) - 1 + clg(p))*(alpha + min(n, s)*(beta + gamma))",
              where="s = block bytes (seg, or MPICOLL_SEGMENT_SIZE)",
              exact=("whole_segments",), bound=0.25),
    params=(Param("seg", 0, 0, 1 << 30, "block bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024, 4096)),),
    restrictions=("commutative",),
    source="Traff, Broadcast and reduction in circulant graphs, ACM TOPC 2025 "
           "(doi 10.1145/3735139); MPICH 5 reduce_intra_circ_graph",
)
def circ_graph(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
               root: int, *, seg: int = 0) -> Schedule:
    """The circulant-graph broadcast (:func:`mpicoll.algorithms.bcast.circ_graph`) run
    backwards: its rounds in reverse order, each send turned into a receive of a partial
    result that is folded into this rank's block, each receive into the send of this rank's
    partial block (once all it forwarded to in the broadcast have sent theirs back)::

        p = 4, N = 1:  round 1:  2 -> 0, 3 -> 1     (skip 2)
                       round 2:  1 -> 0             (skip 1)

    Each block's reduction tree is its broadcast tree reversed, so partial results meet in an
    order that depends on p: commutative ops only.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    n = sendbuf.size
    acc = recvbuf if vr == 0 and recvbuf is not None else c.scratch(n)
    c.copy(sendbuf, acc)
    if p == 1:
        return
    m = segment_count(c, seg)
    nb = max(1, -(-n // m))
    parts = [acc] if nb == 1 else [acc[j * m : (j + 1) * m] for j in range(nb)]
    tmp = c.scratch(min(n, m))
    for rnd in reversed(tree.circulant_rounds(vr, p, nb)):
        ops: list[Send | Recv] = []
        fold: tuple[np.ndarray, np.ndarray] | None = None
        for out, b, peer in rnd:
            if out:  # the broadcast sent block b there: its partial comes back
                theirs = tmp[: parts[b].size]
                ops.append(c.recv(theirs, peer))
                fold = (theirs, parts[b])
            else:
                ops.append(c.send(parts[b], peer))
        yield tuple(ops)
        if fold is not None:
            c.reduce(*fold, op)  # block = theirs op block


@algorithm(
    "reduce", "bine",
    cost=Cost("clg(p)*(alpha + n*beta + n*gamma)"),
    restrictions=("commutative",),
    source="De Sensi, Pasqualoni, Piarulli, Bonato, Ba, Turisini, Domke & Hoefler, Bine Trees: "
           "Enhancing Collective Operations by Optimizing Communication Locality, SC 2025 "
           "(arXiv 2508.17311): Bine trees, the broadcast tree reversed; any p: mpicoll drops "
           "leaves of the last step (:func:`~mpicoll.algorithms.bcast.bine_tree`)",
)
def bine(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
         root: int) -> Schedule:
    """Bine-tree reduce: the Bine broadcast tree (:func:`~mpicoll.algorithms.bcast.bine`)
    run backwards; a rank folds in its children's partial results, the last-joined (nearest
    subtree) first, then sends its own to its parent (ranks relative to the root)::

        p = 8:   round 1:  1 -> 0, 6 -> 7, 2 -> 3, 5 -> 4               (distance 1 each)
                 round 2:  7 -> 0, 4 -> 3                               (distance 1, 1)
                 round 3:  3 -> 0                                       (distance 3)

    The binomial reduce's rounds and bytes with shorter distances.  A subtree is not a range
    of ranks above its node: needs a commutative op.
    """
    parents, kids = _bine_tree(ctx.size)
    yield from _up(ctx, sendbuf, recvbuf, op, root,
                   lambda vr, p: (parents[vr], list(reversed(kids[vr]))))


@default_rule("reduce")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH: binomial for short vectors or non-commutative ops, Rabenseifner above 2 KiB.
    if not commutative or nbytes <= 2048:
        return "binomial"
    return "rabenseifner"
