"""The native backend: every collective delegated to the MPI library through mpi4py."""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from ..algorithms.collectives import BY_NAME
from .args import Call
from .base import Collectives
from .checked import agree_on_construction
from .objects import NativeObjects

__all__ = ["Native", "native"]


class Native(NativeObjects, Collectives):
    """MPI's own collectives (``MPI_Allreduce``, ``MPI_Iallgather``, ...) behind mpicoll's
    argument checks.  Non-blocking methods return the ``MPI.Request`` itself.

    Args:
        comm: any intracommunicator (``COMM_WORLD``, ``Split`` results, ``COMM_SELF``).

    Owns no communicator: :meth:`Free` and leaving a ``with`` block do nothing (they exist so
    that code can switch between the backends without changes).

    Constructing it is collective over ``comm`` (as for p2p): the ranks compare their check
    flags in one small allgather, and all raise :class:`~mpicoll.MismatchError` if they differ
    (one rank checking while the others do not would hang at its first call).
    """

    name = "native"

    def __init__(self, comm: MPI.Comm, *, check: bool | None = None) -> None:
        super().__init__(comm, check=check)
        agree_on_construction(comm, self.name, self.settings)

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...], tag: int | None = None) -> Any:
        if algorithm not in (None, "native"):
            raise ValueError(
                f"algorithm: the native backend runs MPI's own algorithm; got {algorithm!r} "
                "(use mpicoll.p2p to choose one)"
            )
        return getattr(self.comm, BY_NAME[call.collective].method_for(nonblocking))(*args)

    def Free(self) -> None:
        """Nothing to free (the native backend owns no communicator)."""


def native(comm: MPI.Comm | None = None, *, check: bool | None = None) -> Native:
    """The native backend on ``comm`` (default ``MPI.COMM_WORLD``); collective over ``comm``
    (the ranks agree on checked mode: one small allgather).

    ``check=True`` (or ``$MPICOLL_CHECK=1``) turns on checked mode (see :class:`P2P`)."""
    return Native(MPI.COMM_WORLD if comm is None else comm, check=check)
