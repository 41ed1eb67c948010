"""Scatter(v): block i of the root's send buffer goes to rank i.

Schedules take ``(ctx, sendbuf, counts, displs, recvbuf, root)``: ``sendbuf`` is the root's
whole send buffer (None elsewhere) with ``counts``/``displs`` per rank (known at the root;
elsewhere only ``counts[rank] == recvbuf.size`` is), ``recvbuf`` this rank's block.  With
``MPI.IN_PLACE`` at the root, ``recvbuf`` is the root's own block of ``sendbuf``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import tree
from .registry import Cost, Param, algorithm, default_rule
from .schedule import Context, Schedule, block, blocks, equal_blocks

#: the root-to-all direct cost, shared with the linear gather (its mirror)
LINEAR = Cost("(p-1)*alpha + (p-1)/p*n*beta", exact=("even",), bound=0.1)


@algorithm(
    ("scatter", "scatterv"), "linear",
    cost=LINEAR,
    source="MPICH scatterv_allcomm_linear",
)
def linear(ctx: Context, sendbuf: np.ndarray | None, counts: Sequence[int] | None,
           displs: Sequence[int] | None, recvbuf: np.ndarray, root: int) -> Schedule:
    """The root sends every other rank its block directly, all messages in flight at once::

        p = 4, root 0:   one round:  0 -b1-> 1,  0 -b2-> 2,  0 -b3-> 3

    The root's single port sends them one after another.  The only choice for scatterv, whose
    counts are known only at the root.
    """
    yield from linear_exchange(ctx, root, recvbuf, sendbuf, counts, displs, gather=False)


def linear_exchange(ctx: Context, root: int, mine: np.ndarray, buf: np.ndarray | None,
                    counts: Sequence[int] | None, displs: Sequence[int] | None,
                    gather: bool, every: int = 0) -> Schedule:
    """The linear scatter (``gather=False``) and its mirror, the linear gather: the root
    exchanges block i of ``buf`` with rank i, all in one round (``every`` > 1: a round ends
    at each rank i with ``i % every == 0``, where Open MPI's linear_nb scatter makes a
    blocking send); ``mine`` is this rank's block (at the root, copied from or to its own
    block of ``buf``)."""
    if ctx.rank != root:
        yield ((ctx.send(mine, root) if gather else ctx.recv(mine, root)),)
        return
    assert buf is not None
    assert counts is not None
    assert displs is not None
    own = block(buf, counts, displs, root)
    ctx.copy(*((mine, own) if gather else (own, mine)))
    others = [i for i in range(ctx.size) if i != root]
    make = ctx.recv if gather else ctx.send
    ops = [make(v, i) for i, v in zip(others, blocks(buf, counts, displs, others), strict=True)]
    if every > 1:
        cut = 0
        for j, i in enumerate(others):
            if i % every == 0:
                yield tuple(ops[cut : j + 1])
                cut = j + 1
        ops = ops[cut:]
    if ops:
        yield tuple(ops)


@algorithm(
    "scatter", "binomial",
    cost=Cost("clg(p)*alpha + (p-1)/p*n*beta"),
    source="MPICH scatter_intra_binomial; Thakur, Rabenseifner & Gropp 2005",
)
def binomial(ctx: Context, sendbuf: np.ndarray | None, counts: Sequence[int] | None,
             displs: Sequence[int] | None, recvbuf: np.ndarray, root: int) -> Schedule:
    """Binomial-tree scatter: each subtree's blocks travel as one message, halving each level::

        p = 4:   step 1:  0 --[b2 b3]--> 2
                 step 2:  0 --[b1]--> 1,   2 --[b3]--> 3

    Relative rank vr receives the blocks of its whole subtree from its parent, keeps its own
    and forwards each child's subtree (:func:`~mpicoll.algorithms.tree.scatter_blocks`).  The
    root first lays its blocks out in relative order (rank root, root+1, ...) unless root = 0.
    """
    c = ctx.relative(root)
    vr, p = c.rank, c.size
    n = recvbuf.size  # equal blocks: every rank's count is its own recvbuf's, in its units
    rel_counts, rel_displs = equal_blocks(n, p)
    if vr == 0:  # the root's send blocks: counts/displs, in its send datatype's units
        assert sendbuf is not None
        assert counts is not None
        assert displs is not None
        if root == 0 and (tuple(displs) == tuple(rel_displs) and tuple(counts) ==
                          tuple(rel_counts) if n else True):
            tmp = sendbuf
        else:
            tmp = c.scratch(p * n)
            for i in range(p):
                c.copy(block(sendbuf, counts, displs, (i + root) % p),
                       block(tmp, rel_counts, rel_displs, i))
    else:
        tmp = c.scratch(tree.subtree(vr, p) * n)
    yield from tree.scatter_blocks(c, tmp, rel_counts, rel_displs, base=vr * n)
    c.copy(tmp[:n], recvbuf)


@algorithm(
    "scatter", "linear_nb",
    cost=LINEAR,
    params=(Param("max_reqs", 0, 0, 1 << 20, "a blocking send every this many sends (0, 1: "
                  "none)", examples=(2, 3)),),
    source="Open MPI coll_base_scatter.c ompi_coll_base_scatter_intra_linear_nb "
           "(coll_tuned_scatter_algorithm_max_requests)",
)
def linear_nb(ctx: Context, sendbuf: np.ndarray | None, counts: Sequence[int] | None,
              displs: Sequence[int] | None, recvbuf: np.ndarray, root: int, *,
              max_reqs: int = 0) -> Schedule:
    """Open MPI's non-blocking linear scatter: the root posts a send of every rank's block
    at once, except that every rank i with ``i % max_reqs == 0`` gets a blocking send, which
    ends a round (the sends posted before it are waited for with it)::

        p = 6, root 0, max_reqs 2:   round 1:  0 -b1-> 1,  0 -b2-> 2
                                     round 2:  0 -b3-> 3,  0 -b4-> 4
                                     round 3:  0 -b5-> 5

    ``max_reqs`` 0 (Open MPI's default) or 1: one round, :func:`linear`'s; the root's port
    sends the blocks one after another either way.
    """
    yield from linear_exchange(ctx, root, recvbuf, sendbuf, counts, displs, gather=False,
                               every=max_reqs)


@default_rule("scatter", "scatterv")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "binomial" if p > 2 else "linear"
