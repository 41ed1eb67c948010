"""The hand-rolled algorithms, one module per collective, each a schedule (see
:mod:`mpicoll.algorithms.schedule`) registered in :mod:`mpicoll.algorithms.registry`; the
binomial tree in :mod:`~mpicoll.algorithms.tree`, the power-of-two fold in
:mod:`~mpicoll.algorithms.fold`, the node-aware compositions in :mod:`~mpicoll.algorithms.smp`.
Importing this package registers them all (``smp`` last: each collective's node-aware entry
follows its flat ones)."""

from . import (  # noqa: F401
    allgather,
    allreduce,
    alltoall,
    barrier,
    bcast,
    exscan,
    gather,
    reduce,
    reduce_scatter,
    scan,
    scatter,
    smp,
)
