"""The node-aware ("smp") algorithms: flat algorithms composed over the node groups and the
group of one leader per node (MPICH's ``*_intra_smp``, Open MPI's ``coll/han``).

Nodes come from the context (``ctx.nodes``: the backend's ``MPICOLL_RANKS_PER_NODE`` or the
simulator's two-level model); only the leaders' phase crosses the network.  They run only when
forced (``auto`` never picks them).  Their costs are two-level: ``alpha_i``, ``beta_i`` inside a
node, ``alpha_o``, ``beta_o`` between nodes, ``k`` ranks per node, ``N`` nodes (see
:meth:`mpicoll.algorithms.registry.Cost.two`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from . import registry
from .allgather import ring as allgather_ring
from .barrier import dissemination
from .bcast import binomial as bcast_binomial
from .gather import linear as gather_linear
from .reduce import TREE_EXTRA, TREE_WHERE
from .reduce import binomial as reduce_binomial
from .registry import Cost, algorithm
from .scan import prefix_doubling
from .schedule import Context, Schedule, block, blocks, contiguous_span, displacements

_NODES = "k = ranks per node, N = nodes"
_FULL = ("full_nodes",)


def _leaders_allreduce(nn: int, n: float, alpha: float, beta: float, gamma: float) -> float:
    """The cost of the flat allreduce ``auto`` picks for the ``nn`` leaders."""
    inner = registry.choose("allreduce", nn, int(n), commutative=True)
    return inner.cost(nn, n, alpha, beta, gamma)


def _reps(ctx: Context, root: int) -> tuple[list[list[int]], list[int], list[int]]:
    """(node groups, node index of each rank, representative of each node: the root on its
    node, the lowest rank elsewhere)."""
    groups, index = ctx.node_groups()
    return groups, index, [root if index[root] == i else g[0] for i, g in enumerate(groups)]


@algorithm(
    "bcast", "smp",
    cost=Cost("clg(N)*(alpha_o + n*beta_o) + clg(k)*(alpha_i + n*beta_i)",
              where=_NODES,
              exact=_FULL, bound=0.1, two_level=True),
    source="MPICH bcast_intra_smp; Open MPI coll/han",
    auto=False,
)
def bcast(ctx: Context, buf: np.ndarray, root: int) -> Schedule:
    """Hierarchical broadcast: a binomial broadcast among one representative per node, then a
    binomial broadcast inside each node::

        nodes {0,1} {2,3}, root 0:   0 ==> 2               (representatives)
                                     0 -> 1,  2 -> 3       (in nodes)

    The network carries N - 1 messages of n bytes.
    """
    groups, index, reps = _reps(ctx, root)
    mine = index[ctx.rank]
    if ctx.rank == reps[mine] and len(groups) > 1:
        yield from bcast_binomial(ctx.group(reps), buf, index[root])
    members = groups[mine]
    yield from bcast_binomial(ctx.group(members), buf, members.index(reps[mine]))


@algorithm(
    "reduce", "smp",
    cost=Cost("reduce_tree(k, n, s, alpha_i, beta_i, gamma) + "
              "reduce_tree(N, n, s, alpha_o, beta_o, gamma)",
              where=_NODES + "; " + TREE_WHERE, extra=TREE_EXTRA,
              exact=(*_FULL, "whole_segments"), bound=0.1, two_level=True),
    restrictions=("commutative",),
    source="MPICH reduce_intra_smp; Open MPI coll/han",
    auto=False,
)
def reduce(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray | None, op: MPI.Op,
           root: int) -> Schedule:
    """Hierarchical reduce: a binomial reduce inside each node to its representative, then a
    binomial reduce of the representatives to the root::

        nodes {0,1} {2,3}, root 0:   1 -> 0,  3 -> 2       (in nodes)
                                     2 ==> 0               (representatives)

    Needs a commutative op.
    """
    groups, index, reps = _reps(ctx, root)
    mine = index[ctx.rank]
    members = groups[mine]
    is_rep = ctx.rank == reps[mine]
    partial = (recvbuf if ctx.rank == root else ctx.scratch(sendbuf.size)) if is_rep else None
    yield from reduce_binomial(ctx.group(members), sendbuf, partial, op,
                               members.index(reps[mine]))
    if is_rep and len(groups) > 1:
        assert partial is not None
        yield from reduce_binomial(ctx.group(reps), partial, recvbuf, op, index[root])


@algorithm(
    "allreduce", "smp",
    cost=Cost("reduce_tree(k, n, s, alpha_i, beta_i, gamma) + clg(k)*(alpha_i + n*beta_i) + "
              "T_allreduce(N, n, alpha_o, beta_o, gamma)",
              where=_NODES + ", T_allreduce = the cost of the flat allreduce auto picks for N; "
              + TREE_WHERE,
              extra={"T_allreduce": _leaders_allreduce, **TREE_EXTRA},
              exact=(*_FULL, "even", "whole_segments"), bound=0.1, two_level=True),
    restrictions=("commutative",),
    source="MPICH allreduce_intra_smp; Open MPI coll/han; Traff, 'SMP-aware message passing'",
    auto=False,
)
def allreduce(ctx: Context, buf: np.ndarray, op: MPI.Op) -> Schedule:
    """Hierarchical allreduce: reduce inside each node to its leader (its lowest rank), an
    allreduce among the leaders (the flat algorithm ``auto`` picks for N leaders), then a
    broadcast inside each node.  Only the leaders' step crosses the network: one vector's
    worth per node instead of every rank's share::

        node 0: r0 <- r1        node 1: r2 <- r3        (reduce to leaders)
                r0 <=========================> r2       (leaders' allreduce)
                r0 -> r1                r2 -> r3        (bcast in nodes)

    Needs a commutative op (node groups need not be rank-contiguous).
    """
    groups, index = ctx.node_groups()
    members = groups[index[ctx.rank]]
    local = ctx.group(members)
    yield from reduce_binomial(local, buf, buf if local.rank == 0 else None, op, 0)
    if local.rank == 0 and len(groups) > 1:
        leaders = ctx.group([g[0] for g in groups])
        inner = registry.choose("allreduce", leaders.size, ctx.nbytes(buf), commutative=True)
        yield from inner.schedule(leaders, buf, op)
    yield from bcast_binomial(local, buf, 0)


@algorithm(
    "allgather", "smp",
    cost=Cost("(k-1)*(alpha_i + n/p*beta_i) + (N-1)*(alpha_o + k*n/p*beta_o) + "
              "clg(k)*(alpha_i + n*beta_i)", where=_NODES,
              two_level=True),
    source="MPICH allgather_intra_smp (gather, leaders' allgather, bcast); Open MPI coll/han",
    auto=False,
)
def allgather(ctx: Context, buf: np.ndarray, counts: Sequence[int],
              displs: Sequence[int]) -> Schedule:
    """Hierarchical allgather: gather each node's blocks to its leader, a ring allgather of
    whole node units among the leaders, then a broadcast of the full buffer inside each node::

        nodes {0,1} {2,3}:   1 -b1-> 0,  3 -b3-> 2                   (gather in nodes)
                             0 =[b0 b1]=> 2,  2 =[b2 b3]=> 0         (leaders' ring)
                             0 -[all]-> 1,  2 -[all]-> 3             (bcast in nodes)

    Each node's data crosses the network once per other node, in one message per step.
    """
    groups, index = ctx.node_groups()
    mine = index[ctx.rank]
    members = groups[mine]
    local = ctx.group(members)
    me = block(buf, counts, displs, ctx.rank)
    yield from gather_linear(local, me, buf if local.rank == 0 else None,
                             [counts[m] for m in members], [displs[m] for m in members], 0)
    if local.rank == 0 and len(groups) > 1:
        # the leaders' ring on node units: in place if each node's blocks are back to back,
        # else on a copy laid out node by node
        units = [blocks(buf, counts, displs, g) for g in groups]
        ucounts = [sum(int(v.size) for v in u) for u in units]
        spans = [contiguous_span(counts, displs, g[0], g[-1] + 1)
                 if g == list(range(g[0], g[-1] + 1)) else None for g in groups]
        if all(s is not None for s in spans):
            yield from allgather_ring(ctx.group([g[0] for g in groups]), buf, ucounts,
                                      [s[0] for s in spans if s is not None])
        else:
            tmp = ctx.scratch(sum(ucounts))
            udispls = displacements(ucounts)
            ctx.copy(ctx.pack(units[mine]), block(tmp, ucounts, udispls, mine))
            yield from allgather_ring(ctx.group([g[0] for g in groups]), tmp, ucounts, udispls)
            for j, u in enumerate(units):
                if j != mine:
                    ctx.unpack(block(tmp, ucounts, udispls, j), u)
    total = contiguous_span(counts, displs, 0, ctx.size)
    if total is not None:
        yield from bcast_binomial(local, buf[total[0] : total[1]], 0)
    else:
        every = blocks(buf, counts, displs, range(ctx.size))
        whole = ctx.pack(every) if local.rank == 0 else ctx.scratch(sum(counts))
        yield from bcast_binomial(local, whole, 0)
        ctx.unpack(whole, every)


@algorithm(
    "barrier", "smp",
    cost=Cost("(k-1)*alpha_i + clg(N)*alpha_o + clg(k)*alpha_i", where=_NODES,
              two_level=True),
    source="MPICH barrier_intra_smp; Open MPI coll/han",
    auto=False,
)
def barrier(ctx: Context) -> Schedule:
    """Hierarchical barrier: every rank checks in with its node leader, the leaders run a
    dissemination barrier, and each leader releases its node with a binomial broadcast::

        nodes {0,1} {2,3}:   1 -> 0,  3 -> 2;   0 <=> 2;   0 -> 1,  2 -> 3
    """
    groups, index = ctx.node_groups()
    members = groups[index[ctx.rank]]
    local = ctx.group(members)
    token = ctx.scratch(0)
    zeros = [0] * len(members)
    yield from gather_linear(local, token, token if local.rank == 0 else None, zeros, zeros, 0)
    if local.rank == 0 and len(groups) > 1:
        yield from dissemination(ctx.group([g[0] for g in groups]))
    yield from bcast_binomial(local, token, 0)


@algorithm(
    "scan", "smp",
    cost=Cost("clg(k)*(alpha_i + n*beta_i + 2*n*gamma) + (N > 1)*((k > 1)*(alpha_i + n*beta_i) "
              "+ clg(N)*(alpha_o + n*beta_o + 2*n*gamma) + alpha_o + n*beta_o + "
              "clg(k)*(alpha_i + n*beta_i) + n*gamma)",
              where=_NODES, exact=("pof2", *_FULL), bound=0.25, two_level=True),
    source="MPICH scan_intra_smp",
    auto=False,
)
def scan(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, op: MPI.Op) -> Schedule:
    """Hierarchical scan for nodes of consecutive ranks: a scan inside each node, its last
    rank hands the node's total to the leader (its lowest rank), the leaders scan the totals
    and pass each prefix one node up, and each leader broadcasts what it got to its node,
    where every rank adds it on the left of its own prefix::

        nodes {0,1} {2,3} {4,5}:  in nodes:  1: x0..1   3: x2..3   5: x4..5    (scans)
                                             1 -> 0,  3 -> 2,  5 -> 4        (node totals)
                                  leaders:   0, 2, 4 scan the totals;  0 -> 2, 2 -> 4
                                             (2 gets x0..1, 4 gets x0..3)
                                  in nodes:  2 -> 3,  4 -> 5;  rank r: prefix op x(node..r)

    Rank order is kept: non-commutative ops are correct.  Nodes that are not runs of
    consecutive ranks have no such split: the flat recursive doubling runs instead (as MPICH
    uses this algorithm only on node-consecutive communicators).  The scans are recursive
    doubling (MPICH's default).
    """
    groups, index = ctx.node_groups()
    if any(g[-1] - g[0] != len(g) - 1 for g in groups):
        yield from prefix_doubling(ctx, sendbuf, recvbuf, op, inclusive=True)
        return
    mine = index[ctx.rank]
    members = groups[mine]
    local = ctx.group(members)
    yield from prefix_doubling(local, sendbuf, recvbuf, op, inclusive=True)
    if len(groups) == 1:
        return
    last = local.size - 1
    if local.rank == 0:
        total = recvbuf
        if last:
            total = ctx.scratch(recvbuf.size)
            yield (local.recv(total, last),)
        leaders = ctx.group([g[0] for g in groups])
        prefix = ctx.scratch(recvbuf.size)
        yield from prefix_doubling(leaders, total, prefix, op, inclusive=True)
        ops: list = []
        if mine + 1 < len(groups):
            ops.append(leaders.send(prefix, mine + 1))
        before = ctx.scratch(recvbuf.size) if mine else None
        if before is not None:
            ops.append(leaders.recv(before, mine - 1))
        yield tuple(ops)
    else:
        if local.rank == last:
            yield (local.send(recvbuf, 0),)
        before = ctx.scratch(recvbuf.size) if mine else None
    if before is not None:
        yield from bcast_binomial(local, before, 0)
        ctx.reduce(before, recvbuf, op)  # recvbuf = x(0..node) op x(node..r)
