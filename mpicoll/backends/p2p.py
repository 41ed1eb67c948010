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

That duplicate lives until :meth:`P2P.Free` (collective) releases it, or until the end of a
``with mpicoll.p2p(comm) as c:`` block, which calls ``Free``.  Nothing frees it behind your
back (``MPI_Comm_free`` is collective, so it is never called from a garbage-collector
finalizer): a program that creates many backends must free them, or MPI runs out of
communicator context ids (MPICH has a few thousand).

Environment (read at every call, validated before the call sends anything; see
:mod:`mpicoll._env`): ``MPICOLL_<COLLECTIVE>_ALGORITHM`` and ``MPICOLL_SEGMENT_SIZE``.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from ..algorithms import registry
from ..engines.mpi import Engine, Traffic, check_thread
from . import env as _env
from .args import Call, select
from .base import Collectives, agree_on_construction
from .env import algorithm_var, env_algorithm
from .objects import P2PObjects

__all__ = ["P2P", "p2p"]

#: Tags wrap below this (MPI guarantees TAG_UB >= 32767).
TAG_WINDOW = 32767


def node_map(comm: MPI.Comm) -> tuple[int, ...]:
    """Node id of every rank of ``comm`` (collective; computed once per backend).

    ``$MPICOLL_RANKS_PER_NODE=k`` emulates nodes of k consecutive ranks (for testing on one
    machine); otherwise ranks sharing memory (``Split_type(COMM_TYPE_SHARED)``) form a node,
    numbered by their lowest rank.
    """
    k = _env.ranks_per_node()
    if k is not None:
        return tuple(r // k for r in range(comm.Get_size()))
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        lowest = shared.allreduce(comm.Get_rank(), op=MPI.MIN)
    finally:
        shared.Free()
    return tuple(comm.allgather(lowest))


class P2P(P2PObjects, Collectives):
    """Hand-rolled collectives with the methods of ``mpi4py.MPI.Comm``.

    Args:
        comm: any intracommunicator.  Constructing the backend is collective over it (``Dup``);
            :meth:`Free` (or leaving a ``with`` block) releases the duplicate.
        tag_ub: largest tag used before wrapping to 1 (default min(32767, MPI's TAG_UB)).
        check: checked mode (default ``$MPICOLL_CHECK``): before each collective the ranks
            compare (collective, root, count, dtype, op, forced algorithm, segment size, and
            the counts of the v-collectives: see :meth:`Collectives._agree`) with one small
            ``MPI_Allgather`` and all raise :class:`~mpicoll.MismatchError` if they differ,
            instead of truncating or hanging.

    Raises:
        ValueError: ``$MPICOLL_SEGMENT_SIZE`` is not a positive integer, or ``tag_ub`` is out of
            range, on any rank (the ranks exchange that, and their check flags, in one small
            allgather before the ``Dup``; the bad rank raises its own error, the others name
            it); the segment size is checked again at every call, before any message.
        MismatchError: the ranks' check flags (``check=`` / ``$MPICOLL_CHECK``) differ.
        ThreadLevelError: called from a thread MPI's thread level does not allow (see
            :func:`mpicoll.engines.mpi.check_thread`), before any message.

    Attributes:
        traffic: messages and bytes this rank sent and received (see :class:`Traffic`).
    """

    name = "p2p"

    def __init__(self, comm: MPI.Comm, *, tag_ub: int | None = None,
                 check: bool | None = None) -> None:
        super().__init__(comm, check=check)
        check_thread()  # a thread MPI's thread level does not allow: refused before any message
        limit = comm.Get_attr(MPI.TAG_UB) or TAG_WINDOW
        tag_ub = min(TAG_WINDOW, limit) if tag_ub is None else tag_ub
        error = self._refused  # $MPICOLL_CHECK
        try:
            if not 1 <= tag_ub <= limit:
                raise ValueError(f"tag_ub: must be in [1, {limit}], got {tag_ub}")
            _env.segment_bytes()  # a bad value fails here, before the collective Dup
        except ValueError as exc:
            error = exc
        # every rank learns of a refused rank, and of differing check flags, before the Dup
        agree_on_construction(comm, self.name, self.check, error)
        self._comm = comm.Dup()
        self._check_comm = self._comm
        self.nodes = node_map(self._comm)
        self._engine = Engine(self._comm, tag_ub, self.nodes, _env.segment_bytes())

    @property
    def traffic(self) -> Traffic:
        return self._engine.traffic

    def _check_options(self, collective: str, algorithm: Any) -> None:
        """Also refuse (ValueError naming the variable) a bad ``$MPICOLL_SEGMENT_SIZE`` and,
        when ``algorithm=`` is not given, an unknown ``$MPICOLL_<COLLECTIVE>_ALGORITHM``:
        before any message, and in checked mode before the ranks compare their calls."""
        super()._check_options(collective, algorithm)
        _env.segment_bytes()
        if algorithm is None:
            _env.check_env_algorithm(collective)

    def _check_usable(self) -> None:
        """After :meth:`Free`: RuntimeError; from a thread MPI's thread level does not allow:
        :class:`~mpicoll.ThreadLevelError`; both before any MPI call."""
        if self._comm == MPI.COMM_NULL:
            raise RuntimeError("this p2p backend was freed")
        check_thread()

    def _segment_field(self) -> int:
        try:
            return _env.segment_bytes()
        except ValueError:
            return -2  # refused: the rank reports its error in the same agreement

    def select(self, call: Call, algorithm: str | None) -> registry.Algorithm:
        """The algorithm this call runs: ``algorithm`` if given, else
        ``$MPICOLL_<COLLECTIVE>_ALGORITHM``, else ``auto`` (see :func:`mpicoll.registry.select`).

        Raises:
            TypeError: ``algorithm`` is not a str.
            ValueError / RestrictionError: an unknown name, or one whose restrictions the call
                breaks; for a name from the environment the message starts with the variable.
        """
        if algorithm is None:
            name = env_algorithm(call.collective)
            if name is not None:
                try:
                    return select(call, self.size, name)
                except ValueError as exc:  # RestrictionError included: keep its type
                    raise type(exc)(f"{algorithm_var(call.collective)}={name!r}: {exc}") from None
        return select(call, self.size, algorithm)

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...]) -> Any:
        self._check_usable()
        call.schedule = self.select(call, algorithm).schedule
        if nonblocking:
            return self._engine.start(call)
        self._engine.run(call)
        return None

    def Free(self) -> None:
        """Release the private duplicate of ``comm`` (collective: every rank calls it; a second
        call does nothing).  Outstanding requests are completed first.  Leaving a
        ``with mpicoll.p2p(comm) as c:`` block calls it; nothing else does."""
        if self._comm != MPI.COMM_NULL:
            self._engine.wait_for(lambda: not self._engine.active)
            self._comm.Free()


def p2p(comm: MPI.Comm | None = None, **kw: Any) -> P2P:
    """The hand-rolled backend on ``comm`` (default ``MPI.COMM_WORLD``); collective (it dups
    ``comm``; ``Free()`` or a ``with`` block releases the duplicate).  Keyword arguments go to
    :class:`P2P`."""
    return P2P(MPI.COMM_WORLD if comm is None else comm, **kw)
