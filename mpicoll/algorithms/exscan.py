"""Exscan: rank r ends with ``x0 op ... op x(r-1)``; rank 0's receive buffer is left untouched,
as MPICH does (MPI leaves it undefined).

Schedules take ``(ctx, sendbuf, recvbuf, op)`` as the scan's, and run the scan's prefix walks
(:mod:`~mpicoll.algorithms.scan`) without the rank's own contribution.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .registry import Cost, algorithm
from .scan import prefix_chain, prefix_doubling
from .schedule import Context, Schedule


@algorithm(
    "exscan", "recursive_doubling",
    cost=Cost("clg(p)*(alpha + n*beta + 2*n*gamma) - (p > 1)*n*gamma", exact=("pof2",),
              bound=0.25),
    source="MPICH exscan_intra_recursive_doubling",
)
def recursive_doubling(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray,
                       op: MPI.Op) -> Schedule:
    """As the scan's recursive doubling, but the result starts empty (the first lower
    partner's partial is copied in, not reduced: one reduction fewer)::

        p = 4:  k=0: 0<->1, 2<->3   (1: x0, 3: x2)
                k=1: 0<->2, 1<->3   (2: x0..1, 3: x0..2)
    """
    yield from prefix_doubling(ctx, sendbuf, recvbuf, op, inclusive=False)


@algorithm(
    "exscan", "linear",
    cost=Cost("(p-1)*(alpha + n*beta) + max(0, p-2)*n*gamma"),
    source="MPI-1 reference implementation: a chain from rank 0 to rank p-1",
)
def linear(ctx: Context, sendbuf: np.ndarray, recvbuf: np.ndarray, op: MPI.Op) -> Schedule:
    """Chain: rank r receives the prefix of ranks 0..r-1 straight into its result, then passes
    ``prefix op x_r`` on::

        p = 4:   0 -x0-> 1 -x0..1-> 2 -x0..2-> 3
    """
    yield from prefix_chain(ctx, sendbuf, recvbuf, op, inclusive=False)
