"""The hand-rolled algorithms, one module per collective, each a schedule (see
:mod:`mpicoll.schedule`) registered in :mod:`mpicoll.registry`.  Importing this package
registers them all."""

from . import (  # noqa: F401
    allgather,
    allreduce,
    alltoall,
    barrier,
    bcast,
    gather,
    reduce,
    reduce_scatter,
    scan,
    scatter,
)
