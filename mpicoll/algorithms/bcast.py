"""Broadcast: ``buf`` at the root is copied into ``buf`` on every rank."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial

import numpy as np

from . import tree
from .allgather import bine_peer
from .allgather import recursive_doubling as _allgather_rd
from .allgather import ring as _allgather_ring
from .registry import Cost, Param, algorithm, clg, default_rule
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
    "bcast", "bmtree",
    cost=Cost("clg(p)*(alpha + n*beta)"),
    source="Open MPI coll_base_bcast.c ompi_coll_base_bcast_intra_binomial (tuned bcast 6, "
           "unsegmented; coll_base_topo.c ompi_coll_base_topo_build_bmtree)",
)
def bmtree(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Open MPI's binomial-tree broadcast: the mirror of :func:`binomial`.  Rank vr receives
    from vr with its highest set bit cleared, then sends to ``vr + 2^j`` for each ``2^j``
    above its highest bit, nearest first (:func:`~mpicoll.algorithms.tree.bm_children`;
    ranks relative to the root)::

        round 1:   0 -> 1            (p = 8)
        round 2:   0 -> 2, 1 -> 3
        round 3:   0 -> 4, 1 -> 5, 2 -> 6, 3 -> 7

    Rank vr has the data after bit_length(vr) messages.  The same rounds and volume as
    :func:`binomial`, other partners: at p = 4, 1 -> 3 where binomial sends 2 -> 3.  Open
    MPI posts a rank's sends together (``ompi_coll_base_bcast_intra_generic``); its port
    sends them in this order.  libnbc's ibcast binomial builds the same tree for root 0 (it
    swaps ranks 0 and root where this rotates them).
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, tree.bm_parent(vr), tree.bm_children(vr, p))


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


#: the cost helpers of the tree broadcasts (the trees of :mod:`~mpicoll.algorithms.tree`, walked
#: as the simulator runs them)
def knomial_sends(p: int, k: int) -> int:
    """Messages in sequence to the last rank of :func:`knomial` (the bcast's k-nomial tree,
    farthest child first): ``(k-1) ceil(log_k p)`` when p is a power of k."""
    return _sends("knomial", p, k)


def kary_sends(p: int, k: int) -> int:
    """Messages in sequence to the last rank of :func:`kary`: ``k`` per level below the root,
    ``k (levels - 1)`` for a complete tree."""
    return _sends("kary", p, k)


@lru_cache(maxsize=256)
def _sends(shape: str, p: int, k: int) -> int:
    kids = (partial(_knomial_kids, p=p, k=k) if shape == "knomial"
            else partial(tree.kary_children, p=p, k=k))
    return tree.down_sends(p, kids)


def _knomial_kids(vr: int, p: int, k: int) -> list[int]:
    """The k-nomial children of ``vr`` in a broadcast's send order: farthest first."""
    return tree.knomial_children(vr, p, k)[::-1]


def knomial_kids(p: int, k: int) -> int:
    """The root's children in the k-nomial tree (the messages it sends per segment)."""
    return len(tree.knomial_children(0, p, k))


TREE_EXTRA = {"knomial_sends": knomial_sends, "kary_sends": kary_sends,
              "knomial_kids": knomial_kids}
TREE_WHERE = ("knomial_sends(p, k) = the messages a rank waits for in sequence on the longest "
              "path, (k-1) ceil(log_k p) when p is a power of k; kary_sends(p, k) = k per level "
              "of the k-ary tree below the root (its last level may be partial)")


@algorithm(
    "bcast", "knomial",
    cost=Cost("knomial_sends(p, k)*(alpha + n*beta)", where=TREE_WHERE, extra=TREE_EXTRA),
    params=(Param("k", 4, 2, 64, "tree radix (children per node per level)",
                  examples=(2, 3, 8)),),
    source="MPICH bcast_intra_tree (tree_type knomial_1, treealgo/treeutil.c); Open MPI "
           "coll_base_bcast.c ompi_coll_base_bcast_intra_knomial (coll_base_topo.c kmtree)",
)
def knomial(ctx: Context, buf: np.ndarray, root: int, *, k: int = 4) -> Schedule:
    """k-nomial tree broadcast: rank vr's children are ``vr + r k^j`` (r = 1 .. k-1, for each
    ``k^j`` below vr's lowest nonzero base-k digit); a rank receives from its parent, then
    sends to all its children in one round, farthest first (ranks relative to the root)::

        p = 9, k = 3:    round 1:  0 -> 6, 0 -> 3, 0 -> 2, 0 -> 1    (the root's port in turn)
                         round 2:  6 -> 8, 6 -> 7;  3 -> 5, 3 -> 4

    ceil(log_k p) levels of up to k-1 messages each; k = 2 is :func:`binomial`.  Short
    messages (each rank forwards the whole message).
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, tree.knomial_parent(vr, k), _knomial_kids(vr, p, k))


@algorithm(
    "bcast", "kary",
    cost=Cost("kary_sends(p, k)*(alpha + n*beta)", where=TREE_WHERE, extra=TREE_EXTRA),
    params=(Param("k", 2, 1, 64, "children per node", examples=(1, 3, 4)),),
    source="Open MPI coll_base_bcast.c ompi_coll_base_bcast_intra_bintree (k = 2; "
           "coll_base_topo.c ompi_coll_base_topo_build_tree); MPICH bcast_intra_tree "
           "(tree_type kary)",
)
def kary(ctx: Context, buf: np.ndarray, root: int, *, k: int = 2) -> Schedule:
    """k-ary tree broadcast (k = 2: Open MPI's binary tree): ranks numbered breadth first
    from the root, level L holding k^L of them; a rank receives from its parent, then sends
    to its k children in one round::

        p = 7, k = 2:     0 -> 1, 0 -> 2;   1 -> 3, 1 -> 5;  2 -> 4, 2 -> 6

    Every rank forwards the whole message to at most k children; depth ceil(log_k((k-1)p+1)).
    k = 1 is a chain (:func:`pipeline` unsegmented).
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, tree.kary_parent(vr, k), tree.kary_children(vr, p, k))


@algorithm(
    "bcast", "linear",
    cost=Cost("(p-1)*(alpha + n*beta)"),
    source="Open MPI coll_base_bcast.c ompi_coll_base_bcast_intra_basic_linear",
)
def linear(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """The root sends the whole message to every other rank, all in one round::

        p = 4, root 0:   0 -> 1,  0 -> 2,  0 -> 3      (its port sends them in turn)

    p-1 messages through one port: for very few ranks only.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, 0 if vr else -1, range(1, p) if vr == 0 else ())


@algorithm(
    "bcast", "chain",
    cost=Cost("(p > 1)*(S*F + L - 1 - (F > (p - 1) % F > 0))*(alpha + min(n, s)*beta)",
              let=(("F", "min(fanout, max(p - 1, 1))"), ("L", "ceil((p - 1)/F)"),
                   ("S", "max(1, n/s)")),
              where="F chains of at most L ranks, S segments; s = segment bytes (seg, "
                    "or MPICOLL_SEGMENT_SIZE)",
              exact=("whole_segments",), bound=0.1),
    params=(Param("fanout", 4, 1, 64, "chains from the root", examples=(1, 2, 8)),
            Param("seg", 0, 0, 1 << 30, "segment bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024,))),
    source="Open MPI coll_base_bcast.c ompi_coll_base_bcast_intra_chain "
           "(coll_base_topo.c ompi_coll_base_topo_build_chain)",
)
def chain(ctx: Context, buf: np.ndarray, root: int, *, fanout: int = 4,
          seg: int = 0) -> Schedule:
    """Segmented broadcast down ``fanout`` chains: the other ranks are cut into ``fanout``
    runs of consecutive ranks (relative to the root), the root sends each segment to every
    run's head, and each rank forwards segment j-1 down its run while it receives segment j::

        p = 7, fanout = 2:   0 -> 1 -> 2 -> 3         round:  0    1    2    3
                             0 -> 4 -> 5 -> 6         0->1,4  s0   s1
                                                      1->2         s0   s1
                                                      2->3              s0   s1

    The root's port sends fanout messages per segment; fanout = 1 is :func:`pipeline`.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, tree.chain_parent(vr, p, fanout),
                              tree.chain_children(vr, p, fanout), segment_count(c, seg))


@algorithm(
    "bcast", "pipelined_tree",
    cost=Cost("(knomial_sends(p, k) + (max(1, n/s) - 1)*knomial_kids(p, k))"
              "*(alpha + min(n, s)*beta)",
              where=TREE_WHERE + "; knomial_kids(p, k) = the root's children, (k-1) ceil(log_k "
                    "p) when p is a power of k; s = segment bytes (seg, or "
                    "MPICOLL_SEGMENT_SIZE)",
              extra=TREE_EXTRA, exact=("whole_segments",), bound=0.1),
    params=(Param("k", 2, 2, 64, "tree radix", examples=(3, 4)),
            Param("seg", 0, 0, 1 << 30, "segment bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024,))),
    source="MPICH bcast_intra_pipelined_tree (tree_type knomial_1)",
)
def pipelined_tree(ctx: Context, buf: np.ndarray, root: int, *, k: int = 2,
                   seg: int = 0) -> Schedule:
    """The :func:`knomial` tree with the message cut into segments: a rank forwards segment
    j-1 to all its children while it receives segment j::

        p = 4, k = 2, 2 segments:   round 1:  0 -> 2 s0, 0 -> 1 s0
                                    round 2:  0 -> 2 s1, 0 -> 1 s1;   2 -> 3 s0
                                    round 3:                          2 -> 3 s1

    The root sends every segment to its (k-1) ceil(log_k p) children: its port sets the pace.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    yield from tree.send_down(c, buf, tree.knomial_parent(vr, k), _knomial_kids(vr, p, k),
                              segment_count(c, seg))


def split_sends(p: int) -> int:
    """Half-message times to the end of :func:`split_binary` on p ranks (both phases)."""
    return _split_sends(p)


@lru_cache(maxsize=256)
def _split_sends(p: int) -> int:
    if p < 2:
        return 0
    arrive = {0: 0}
    stack = [0]
    while stack:
        vr = stack.pop()
        for i, ch in enumerate(tree.kary_children(vr, p, 2)):
            arrive[ch] = arrive[vr] + i + 1
            stack.append(ch)
    # a rank posts its exchange once its phase-1 sends are done
    ready = {vr: t + len(tree.kary_children(vr, p, 2)) for vr, t in arrive.items()}
    return max(max(ready[vr], ready[_split_pair(vr, p)]) + 1 for vr in range(1, p))


def _split_pair(vr: int, p: int) -> int:
    """The relative rank ``vr`` swaps halves with in :func:`split_binary`: a left (odd) rank
    the next one, a right (even) rank the one before; 0 (the root) for the last rank of an
    even p."""
    return (vr + 1) % p if vr % 2 else vr - 1


@algorithm(
    "bcast", "split_binary",
    cost=Cost("(n < 2)*(p > 1)*(p - 1)*(alpha + n*beta) + "
              "(n >= 2)*split_sends(p)*(alpha + ceil(n/2)*beta)",
              where="split_sends(p) = half-message times on the longest path: the binary "
                    "tree's depth in messages (2 per level) plus the exchange",
              extra={"split_sends": split_sends}, exact=("even",), bound=0.1),
    source="Open MPI coll_base_bcast.c ompi_coll_base_bcast_intra_split_bintree",
)
def split_binary(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Split-binary-tree broadcast: the message is cut in two halves; the first goes down the
    left subtree of the :func:`kary` binary tree (odd relative ranks), the second down the
    right one (even ranks); then each rank swaps halves with its twin in the other subtree::

        p = 7:   phase 1:  0 -h0-> 1 -h0-> 3, 5        0 -h1-> 2 -h1-> 4, 6
                 phase 2:  1 <-> 2,  3 <-> 4,  5 <-> 6       (p even: 0 -h1-> p-1)

    Each rank receives n/2 twice; the tree's depth carries half messages.  A message of
    fewer than 2 bytes cannot be halved: it goes down the chain (Open MPI does the same).
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    n = buf.size
    if p == 1:
        return
    if n < 2:
        yield from tree.send_down(c, buf, vr - 1 if vr else -1, (vr + 1,) if vr + 1 < p else ())
        return
    h = (n + 1) // 2
    halves = (buf[:h], buf[h:])
    lr = (vr + 1) % 2  # 0: left (odd ranks), 1: right (even ranks and the root)
    kids = tree.kary_children(vr, p, 2)
    if vr == 0:
        yield tuple(c.send(halves[i], ch) for i, ch in enumerate(kids))
    else:
        yield from tree.send_down(c, halves[lr], tree.kary_parent(vr, 2), kids)
    pair = _split_pair(vr, p)
    if vr == 0:
        if p % 2 == 0:
            yield (c.send(halves[1], p - 1),)
    elif pair == 0:
        yield (c.recv(halves[1], 0),)
    else:
        yield c.sendrecv(halves[lr], pair, halves[1 - lr], pair)


@algorithm(
    "bcast", "circ_graph",
    cost=Cost("(p > 1)*(max(1, ceil(n/s)) - 1 + clg(p))*(alpha + min(n, s)*beta)",
              where="s = block bytes (seg, or MPICOLL_SEGMENT_SIZE)",
              exact=("whole_segments",), bound=0.25),
    params=(Param("seg", 0, 0, 1 << 30, "block bytes (0: MPICOLL_SEGMENT_SIZE)",
                  examples=(1024, 4096)),),
    source="Traff, Broadcast and reduction in circulant graphs, ACM TOPC 2025 "
           "(doi 10.1145/3735139); MPICH 5 bcast_intra_circ_graph",
)
def circ_graph(ctx: Context, buf: np.ndarray, root: int, *, seg: int = 0) -> Schedule:
    """Round-optimal pipelined broadcast on a circulant graph, any p: the message is cut into
    N blocks; in round i (k = i mod q, q = ceil(lg p)) every rank r sends one block to
    ``r + skip[k]`` and receives one from ``r - skip[k]`` (relative ranks, mod p; skips
    1, 2, 4, ... halved up from p: p = 6 -> 1, 2, 3, 6).  Which block: in the first q rounds
    every rank receives exactly one new block, its *base block*; each later phase of q rounds
    moves every block q further, so after N - 1 + q rounds every rank holds all N::

        p = 4, N = 1 (q = 2):  round 0:  0 -b0-> 1          (skip 1)
                               round 1:  0 -b0-> 2, 1 -b0-> 3  (skip 2)

    For N = 1 and a power of two it is the binomial tree; for long messages every rank's
    ports stay busy every round, so the time approaches n beta for any p.  A rank that must
    forward a block it receives in the same round (the last phase, where blocks past N-1 stand
    for block N-1) receives it first, in a round of its own.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    if p == 1:
        return
    m = segment_count(c, seg)
    nb = max(1, -(-buf.size // m))
    parts = [buf] if nb == 1 else [buf[j * m : (j + 1) * m] for j in range(nb)]
    for rnd in tree.circulant_rounds(vr, p, nb):
        yield tuple(c.send(parts[b], peer) if out else c.recv(parts[b], peer)
                    for out, b, peer in rnd)


@lru_cache(maxsize=64)
def bine_tree(p: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(parent of each relative rank (-1 for the root), its children in the order it sends
    to them) in the Bine broadcast tree on p ranks (De Sensi et al., SC 2025).

    On q = 2^L >= p positions (L = ceil(lg p)) it is the distance-halving binomial tree whose
    step-t edges are the Bine butterfly's step s = L-1-t (:func:`~mpicoll.algorithms.
    allgather.bine_peer`: distances ..., 11, 5, 3, 1, 1 where a binomial tree goes ..., 4, 2, 1;
    in negabinary, step t flips a position's L-t low digits).  For p < q the q - p extra
    positions are leaves of the last step (one in each of the pairs {0,1}, {2,3}, ... of
    positions it joins, the first q - p pairs), so no edge to a kept position is lost; the
    p kept positions, in ring order, are the ranks, so no distance grows.  The paper's code
    (libbine, bine-trees ``bcast.c``) takes powers of two only."""
    L = clg(p)
    q = 1 << L
    parent = [-1] * q
    kids: list[list[int]] = [[] for _ in range(q)]
    last = [False] * q  # reached in the last step (a leaf)
    have = [0]
    for t in range(L):
        for x in list(have):
            y = bine_peer(x, L - 1 - t, q)
            if y == 0 or parent[y] >= 0:
                raise AssertionError(f"Bine tree on {q} positions: {y} reached twice")
            parent[y] = x
            kids[x].append(y)
            have.append(y)
            last[y] = t == L - 1
    dropped = {2 * i if last[2 * i] else 2 * i + 1 for i in range(q - p)}
    kept = [x for x in range(q) if x not in dropped]
    index = {x: i for i, x in enumerate(kept)}
    return (tuple(index[parent[x]] if parent[x] >= 0 else -1 for x in kept),
            tuple(tuple(index[y] for y in kids[x] if y in index) for x in kept))


@algorithm(
    "bcast", "bine",
    cost=Cost("clg(p)*(alpha + n*beta)"),
    source="De Sensi, Pasqualoni, Piarulli, Bonato, Ba, Turisini, Domke & Hoefler, Bine Trees: "
           "Enhancing Collective Operations by Optimizing Communication Locality, SC 2025 "
           "(arXiv 2508.17311): Bine trees; the authors' libbine (github.com/HLC-Lab/pico) "
           "bcast_bine_lat_reversed, bine-trees src/bcast.c bine_bcast_small (powers of two "
           "only); any p: mpicoll drops leaves of the last step",
)
def bine(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Bine-tree broadcast: a binomial tree (ceil(lg p) rounds, each holder sends once per
    round) whose edges are short, so less traffic crosses the far links of a torus or the
    global links of a dragonfly (:func:`bine_tree`; ranks relative to the root)::

        p = 8:   round 1:  0 -> 3                                   (distance 3)
                 round 2:  0 -> 7, 3 -> 4                           (distance 1, 1)
                 round 3:  0 -> 1, 7 -> 6, 3 -> 2, 4 -> 5           (distance 1 each)

    against the binomial tree's 0 -> 4; 0 -> 2, 4 -> 6; 0 -> 1, ... (distances 4, 2, 1).
    Summed over the messages of p = 64, the ring distance is 0.70 of the binomial tree's; on
    a dragonfly of groups of 8 consecutive ranks, summed over every root, the global-link
    bytes 0.76 (tests/unit/test_bine.py).  Where the groups are powers of two aligned with
    the root (root 0 there; a 4x4x4 torus, block placement) the binomial tree's distances
    already match them and it crosses fewer.  Short messages (each rank forwards the whole
    message).
    """
    c = ctx.relative(root)
    parents, kids = bine_tree(c.size)
    if parents[c.rank] >= 0:
        yield (c.recv(buf, parents[c.rank]),)
    for ch in kids[c.rank]:
        yield (c.send(buf, ch),)


@default_rule("bcast")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    # MPICH defaults: binomial below 12 KiB or p < 8; scatter + recursive-doubling allgather
    # for medium messages on powers of two; scatter + ring allgather otherwise.
    if nbytes < 12288 or p < 8:
        return "binomial"
    if nbytes < 524288 and p & (p - 1) == 0:
        return "scatter_allgather"
    return "scatter_ring_allgather"
