"""Scan: rank r ends with ``x0 op x1 op ... op xr``.

Schedules take ``(ctx, sendbuf, recvbuf, op)``; ``sendbuf`` is never written (the backend
passes a copy of ``recvbuf`` for ``MPI.IN_PLACE``).  Every schedule keeps rank order, so
non-commutative ops are correct.  The two prefix walks here serve the exclusive scan too
(:mod:`~mpicoll.algorithms.exscan`), with ``inclusive=False``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule


def prefix_doubling(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, op: MPI.Op,
                    inclusive: bool) -> Schedule:
    """The recursive-doubling prefix (see :func:`recursive_doubling`); ``inclusive=False``
    leaves out this rank's own contribution (exscan: the first lower partner's partial is
    copied in, later ones folded in)."""
    p, r = ctx.size, ctx.rank
    partial = ctx.scratch(sendbuf.size)  # x(lo) op ... op x(hi) over the ranks heard so far
    ctx.copy(sendbuf, partial)
    tmp = ctx.scratch(sendbuf.size)
    have = inclusive
    if inclusive:
        ctx.copy(sendbuf, recvbuf)
    mask = 1
    while mask < p:
        partner = r ^ mask
        if partner < p:
            yield ctx.sendrecv(partial, partner, tmp, partner)
            if partner < r:
                ctx.reduce(tmp, partial, op)  # partial = theirs op partial
                if have:
                    ctx.reduce(tmp, recvbuf, op)
                else:
                    ctx.copy(tmp, recvbuf)
                    have = True
            else:
                ctx.reduce(partial, tmp, op)  # tmp = partial op theirs
                partial, tmp = tmp, partial
        mask <<= 1


def prefix_chain(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, op: MPI.Op,
                 inclusive: bool) -> Schedule:
    """The chain prefix (see :func:`linear`); ``inclusive=False``: rank r receives the prefix
    of ranks 0..r-1 straight into its result and passes ``prefix op x_r`` on."""
    p, r = ctx.size, ctx.rank
    if r == 0:
        if inclusive:
            ctx.copy(sendbuf, recvbuf)
        if p > 1:
            yield (ctx.send(sendbuf, 1),)
        return
    prefix = recvbuf if inclusive else ctx.scratch(sendbuf.size)
    incoming = ctx.scratch(sendbuf.size) if inclusive else recvbuf
    yield (ctx.recv(incoming, r - 1),)  # x0 op ... op x(r-1)
    if r + 1 < p or inclusive:
        ctx.copy(sendbuf, prefix)
        ctx.reduce(incoming, prefix, op)  # prefix = x0..x(r-1) op xr
    if r + 1 < p:
        yield (ctx.send(prefix, r + 1),)


@algorithm(
    "scan", "recursive_doubling",
    cost=Cost("clg(p)*(alpha + n*beta + 2*n*gamma)", exact=("pof2",), bound=0.25),
    source="MPICH scan_intra_recursive_doubling",
)
def recursive_doubling(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                       op: MPI.Op) -> Schedule:
    """Recursive doubling (Hillis-Steele on a hypercube): in step k exchange the running
    partial with rank ^ 2^k; fold a lower partner's partial into both the result and the
    partial, a higher one's into the partial only::

        p = 4:  k=0: 0<->1, 2<->3   (1: x0..1, 3: x2..3)
                k=1: 0<->2, 1<->3   (2: x0..2, 3: x0..3)
    """
    yield from prefix_doubling(ctx, sendbuf, recvbuf, op, inclusive=True)


@algorithm(
    "scan", "linear",
    cost=Cost("(p-1)*(alpha + n*beta + n*gamma)"),
    source="MPI-1 reference implementation: a chain from rank 0 to rank p-1",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, op: MPI.Op) -> Schedule:
    """Chain: rank r receives the prefix of ranks 0..r-1, adds its own on the right and passes
    it on; p-1 sequential steps::

        p = 4:   0 -x0-> 1 -x0..1-> 2 -x0..2-> 3
    """
    yield from prefix_chain(ctx, sendbuf, recvbuf, op, inclusive=True)


@default_rule("scan", "exscan")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "recursive_doubling"
