"""The hand-rolled backend: every collective built from MPI point-to-point messages.

Each call picks an algorithm from :mod:`mpicoll.registry` (``algorithm=`` on the call,
``MPICOLL_<COLLECTIVE>_ALGORITHM`` in the environment, or ``"auto"``), and runs its schedule on
the MPI engines of :mod:`mpicoll.engine`: blocking methods run it to completion, ``I...``
methods return a :class:`~mpicoll.engine.ScheduleRequest` that advances it on
``Test``/``Wait``.

Isolation (as ``mpi4py.util.pkl5.Intracomm`` does): the backend runs on a private ``Dup`` of
the user's communicator, and every collective call takes a fresh tag (1, 2, ... wrapping at
``tag_ub``), so user point-to-point traffic, even with ``ANY_SOURCE``/``ANY_TAG``, and any
number of outstanding non-blocking collectives never cross-match.
"""

from __future__ import annotations

import os
from typing import Any

from mpi4py import MPI

from . import registry
from ._api import Collectives
from ._args import Call
from .engine import Engine, Traffic
from .sim import select

__all__ = ["P2P", "p2p"]

#: Tags wrap below this (MPI guarantees TAG_UB >= 32767).
TAG_WINDOW = 32767


def node_map(comm: MPI.Comm) -> tuple[int, ...]:
    """Node id of every rank of ``comm`` (collective; computed once per backend).

    ``$MPICOLL_RANKS_PER_NODE=k`` emulates nodes of k consecutive ranks (for testing on one
    machine); otherwise ranks sharing memory (``Split_type(COMM_TYPE_SHARED)``) form a node,
    numbered by their lowest rank.
    """
    from .sim import node_size_env

    k = node_size_env()
    if k is not None:
        return tuple(r // k for r in range(comm.Get_size()))
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        lowest = shared.allreduce(comm.Get_rank(), op=MPI.MIN)
    finally:
        shared.Free()
    return tuple(comm.allgather(lowest))


def env_algorithm(collective: str) -> str | None:
    """``$MPICOLL_<COLLECTIVE>_ALGORITHM`` (e.g. ``MPICOLL_ALLREDUCE_ALGORITHM=ring``)."""
    return os.environ.get(f"MPICOLL_{collective.upper()}_ALGORITHM") or None


class P2P(Collectives):
    """Hand-rolled collectives with the methods of ``mpi4py.MPI.Comm``.

    Args:
        comm: any intracommunicator.  Constructing the backend is collective over it (``Dup``).
        tag_ub: largest tag used before wrapping to 1 (default min(32767, MPI's TAG_UB)).
        check: checked mode (default ``$MPICOLL_CHECK``): before each collective the ranks
            compare (collective, root, count, dtype, op) with one small ``MPI_Allgather`` and
            all raise :class:`~mpicoll.MismatchError` if they differ, instead of truncating or
            hanging.

    Attributes:
        traffic: messages and bytes this rank sent and received (see :class:`Traffic`).
    """

    name = "p2p"

    def __init__(self, comm: MPI.Comm, *, tag_ub: int | None = None,
                 check: bool | None = None) -> None:
        super().__init__(comm, check=check)
        limit = comm.Get_attr(MPI.TAG_UB) or TAG_WINDOW
        tag_ub = min(TAG_WINDOW, limit) if tag_ub is None else tag_ub
        if not 1 <= tag_ub <= limit:
            raise ValueError(f"tag_ub: must be in [1, {limit}], got {tag_ub}")
        self._comm = comm.Dup()
        self._check_comm = self._comm
        self.nodes = node_map(self._comm)
        self._engine = Engine(self._comm, tag_ub, self.nodes)

    @property
    def traffic(self) -> Traffic:
        return self._engine.traffic

    def select(self, call: Call, algorithm: str | None) -> registry.Algorithm:
        """The algorithm this call runs: ``algorithm`` if given, else
        ``$MPICOLL_<COLLECTIVE>_ALGORITHM``, else ``auto`` (see :func:`mpicoll.registry.select`).
        """
        return select(call, self.size, algorithm or env_algorithm(call.collective))

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...]) -> Any:
        if self._comm == MPI.COMM_NULL:
            raise RuntimeError("this p2p backend was freed")
        call.schedule = self.select(call, algorithm).schedule
        if nonblocking:
            return self._engine.start(call)
        self._engine.run(call)
        return None

    def Free(self) -> None:
        """Free the private communicator (collective); outstanding requests are completed."""
        if self._comm != MPI.COMM_NULL:
            self._engine.wait_for(lambda: not self._engine.active)
            self._comm.Free()

    def __enter__(self) -> P2P:
        return self

    def __exit__(self, *exc: object) -> None:
        self.Free()


def p2p(comm: MPI.Comm | None = None, **kw: Any) -> P2P:
    """The hand-rolled backend on ``comm`` (default ``MPI.COMM_WORLD``); collective (it dups
    ``comm``).  Keyword arguments go to :class:`P2P`."""
    return P2P(MPI.COMM_WORLD if comm is None else comm, **kw)
