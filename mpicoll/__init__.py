"""mpicoll: MPI collectives twice over, MPI's own (``native``) and hand-rolled from
point-to-point (``p2p``), with the same mpi4py API, cross-checked and benchmarked.

    from mpi4py import MPI
    import mpicoll
    hand = mpicoll.p2p(MPI.COMM_WORLD)
    hand.Allreduce(x, y, op=MPI.SUM, algorithm="ring")
"""

from __future__ import annotations

from .algorithms import registry
from .algorithms.registry import RestrictionError
from .backends.base import MismatchError
from .backends.native import Native, native
from .backends.p2p import P2P, p2p
from .engines.mpi import (
    ScheduleRequest,
    Testall,
    Testany,
    Testsome,
    ThreadLevelError,
    Traffic,
    Waitall,
    Waitany,
    Waitsome,
)
from .engines.plan import PlanRequest, Startall
from .tools.simulate import simulate

__version__ = "0.1.0"

__all__ = [
    "MismatchError",
    "P2P",
    "PlanRequest",
    "Native",
    "RestrictionError",
    "ScheduleRequest",
    "Startall",
    "Testall",
    "Testany",
    "Testsome",
    "ThreadLevelError",
    "Traffic",
    "Waitall",
    "Waitany",
    "Waitsome",
    "__version__",
    "native",
    "p2p",
    "registry",
    "simulate",
]
