"""The MPI engines: run a schedule with real point-to-point messages.

One :class:`Engine` per p2p backend object.  It owns the private communicator, the tag counter
and the list of schedules in flight.  A blocking collective and a non-blocking one are the same
thing here: a :class:`ScheduleRequest` that posts a round (``Irecv`` first, then ``Isend``),
and, once every request of that round has completed, resumes the generator for the next one.
A blocking call waits on its request at once; a non-blocking call returns it.

Progress is made only inside ``Test``/``Wait`` (the libNBC model; MPI itself makes no progress
on a Python generator).  Any wait progresses *every* schedule in flight on the engine, so
requests can be completed in any order without deadlock, and a blocking collective issued while
non-blocking ones are outstanding does not starve them.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.registry import Algorithm
from ..algorithms.schedule import DEFAULT_SEGMENT_BYTES, Context, Recv, Round, Schedule
from .call import Call

__all__ = ["Engine", "ScheduleRequest", "Traffic", "Waitall", "Testall", "progress_all"]


class Traffic:
    """Messages and bytes this rank sent and received (cumulative; :meth:`reset` to zero),
    and the bytes it sent to ranks on other nodes (``inter_bytes_sent``)."""

    __slots__ = ("bytes_recv", "bytes_sent", "inter_bytes_sent", "messages_recv",
                 "messages_sent", "rounds")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.messages_sent = 0
        self.messages_recv = 0
        self.bytes_sent = 0
        self.bytes_recv = 0
        self.inter_bytes_sent = 0  # to ranks on another node (node map of the backend)
        self.rounds = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return f"Traffic({self.as_dict()})"


class MPIContext(Context):
    """A schedule context bound to a communicator and the tag of one collective call."""

    def __init__(self, comm: MPI.Comm, tag: int, datatype: MPI.Datatype, dtype: np.dtype,
                 traffic: Traffic, nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        super().__init__(comm.Get_rank(), comm.Get_size(), datatype, dtype, nodes, segment_bytes)
        self.comm = comm
        self.tag = tag
        self.traffic = traffic

    def post(self, rnd: Round) -> list[MPI.Request]:
        """Start every operation of a round: receives first, then sends."""
        comm, tag, dt, t = self.comm, self.tag, self.datatype, self.traffic
        reqs = []
        for o in rnd:
            if type(o) is Recv:
                reqs.append(comm.Irecv([o.buf, dt], o.peer, tag))
                t.messages_recv += 1
                t.bytes_recv += o.buf.nbytes
        nodes = self.nodes
        for o in rnd:
            if type(o) is not Recv:
                reqs.append(comm.Isend([o.buf, dt], o.peer, tag))
                t.messages_sent += 1
                t.bytes_sent += o.buf.nbytes
                if nodes is not None and nodes[o.peer] != nodes[self.rank]:
                    t.inter_bytes_sent += o.buf.nbytes
        t.rounds += 1
        return reqs


class ScheduleRequest:
    """The request of a p2p collective: ``Wait()``, ``Test()``, like an ``MPI.Request``.

    Created started: the schedule has already run up to its first round, and that round is
    posted.  Completing it with ``Wait``/``Test`` (or :func:`Waitall`/:func:`Testall`) finishes the
    collective; until then the call's buffers belong to the library, as in MPI.
    """

    def __init__(self, engine: Engine, gen: Schedule, ctx: MPIContext) -> None:
        self._engine = engine
        self._gen = gen
        self._ctx = ctx
        self._reqs: list[MPI.Request] = []
        self.done = False
        self._advance()
        if not self.done:
            engine.active.append(self)

    def _advance(self) -> None:
        """Resume the schedule until it posts a non-empty round or ends."""
        while True:
            try:
                rnd = next(self._gen)
            except StopIteration:
                self._reqs = []
                self.done = True
                return
            self._reqs = self._ctx.post(rnd)
            if self._reqs:
                return

    def _poll(self) -> bool:
        """Advance as far as completed messages allow; True if the schedule moved."""
        moved = False
        while not self.done and MPI.Request.Testall(self._reqs):
            self._advance()
            moved = True
        if self.done and self in self._engine.active:
            self._engine.active.remove(self)
        return moved

    def Test(self) -> bool:
        """Make progress on every outstanding p2p collective (every backend's); True once this
        one is complete."""
        progress_all()
        return self.done

    def Wait(self, status: MPI.Status | None = None) -> None:
        """Block until this collective is complete, progressing all others meanwhile."""
        self._engine.wait_for(lambda: self.done)

    def Free(self) -> None:
        """Complete the request (MPI forbids freeing an active collective request)."""
        self.Wait()

    def Get_status(self) -> bool:
        return self.done


#: Every live engine: a wait on one progresses all of them (MPI's progress is global: a rank
#: waiting on one backend's request must not starve another backend's schedule that a peer
#: is waiting on).
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
#: an engine's schedules in flight (as a C-level getter: the blocking fast path asks it of every
#: engine on every call)
_ACTIVE = operator.attrgetter("active")


class Engine:
    """The blocking and non-blocking MPI engines of one p2p backend.

    Args:
        comm: the private communicator (a ``Dup`` of the user's, owned by the backend).
        tag_ub: tags used are 1..tag_ub, one per collective call, wrapping; at most MPI's
            ``TAG_UB`` attribute.
    """

    def __init__(self, comm: MPI.Comm, tag_ub: int,
                 nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.comm = comm
        self.nodes = nodes
        self.segment_bytes = segment_bytes
        self.tag_ub = tag_ub
        self.tag = 0
        #: tags of calls this rank refused (see :meth:`take_tag`)
        self._refused: set[int] = set()
        self.active: list[ScheduleRequest] = []
        self.traffic = Traffic()
        _ENGINES.add(self)

    def take_tag(self) -> int:
        """The next call's tag: 1, 2, ..., tag_ub, 1, ...  The backend takes it before it
        checks the call's arguments, so a call refused on some ranks only still consumes its
        tag on every rank and the ranks' counters never drift apart (a refused call's messages,
        sent eagerly by the ranks that accepted it, keep a tag no later call uses until the
        counter comes round; :meth:`refused` drains them then)."""
        self.tag = self.tag % self.tag_ub + 1
        return self.tag

    def refused(self, tag: int) -> None:
        """Note that this rank refused the call of ``tag`` (its peers may have sent on it)."""
        self._refused.add(tag)

    def _drain(self, tag: int) -> None:
        """Receive and drop what peers sent for the calls this rank refused, at every call
        this rank runs while there are any (late arrivals included), for as long as the
        refused tag is more than half a tag window (``tag_ub // 2`` calls) from coming round:
        only a peer that many calls ahead could use it for a new call by then.  After that
        the tag is forgotten undrained.  So the refused calls' messages are all dropped
        unless about ``tag_ub // 2`` (16383) calls in a row are refused, or a peer runs that
        far ahead."""
        status = MPI.Status()
        half = self.tag_ub // 2
        for old in list(self._refused):
            if (old - tag) % self.tag_ub <= half:
                self._refused.discard(old)
                continue
            while True:
                msg = self.comm.Improbe(MPI.ANY_SOURCE, old, status)
                if msg is None:
                    break
                msg.Recv(bytearray(max(0, status.Get_count(MPI.BYTE))))

    def _context(self, call: Call, algorithm: Algorithm,
                 tag: int | None = None) -> tuple[MPIContext, Schedule]:
        """A context for ``call`` on ``tag`` (taken with :meth:`take_tag`; a fresh one if
        None), and ``algorithm``'s schedule started on it."""
        if tag is None:
            tag = self.take_tag()
        if self.active and any(r._ctx.tag == tag for r in self.active):
            # More than tag_ub collectives outstanding: the tag comes round again while an
            # older call still uses it.  Finish that call here first; two calls in flight with
            # one tag would cross-match their messages.  Every rank does the same, so every
            # rank posts the new call's receives only after the old call's are all matched.
            self.wait_for(lambda: all(r._ctx.tag != tag for r in self.active))
        if self._refused:
            self._drain(tag)
        ctx = MPIContext(self.comm, tag, call.datatype, call.dtype, self.traffic, self.nodes,
                         self.segment_bytes)
        return ctx, algorithm.schedule(ctx, *call.prepare(ctx))

    def start(self, call: Call, algorithm: Algorithm,
              tag: int | None = None) -> ScheduleRequest:
        """Start ``call`` with ``algorithm`` (chosen by the backend) on ``tag`` (see
        :meth:`take_tag`; a fresh one if None) and return its request."""
        ctx, gen = self._context(call, algorithm, tag)
        return ScheduleRequest(self, gen, ctx)

    def run(self, call: Call, algorithm: Algorithm, tag: int | None = None) -> None:
        """Blocking: run ``call`` with ``algorithm`` on ``tag`` to completion (progressing
        any outstanding others)."""
        if any(map(_ACTIVE, list(_ENGINES))):  # keep everything in flight moving
            self.start(call, algorithm, tag).Wait()
            return
        ctx, gen = self._context(call, algorithm, tag)  # the common case: Waitall each round
        for rnd in gen:
            reqs = ctx.post(rnd)
            if reqs:
                MPI.Request.Waitall(reqs)

    def progress(self) -> bool:
        """One pass over every schedule in flight; True if any advanced."""
        moved = False
        for r in list(self.active):
            moved = r._poll() or moved
        return moved

    def wait_for(self, cond: Callable[[], bool]) -> None:
        """Progress until ``cond()`` (every live engine's schedules, not only this one's);
        sleeps in ``Waitall``/``Waitany`` rather than spinning."""
        while not cond():
            engines = [e for e in list(_ENGINES) if e.active]
            moved = False
            for e in engines:
                moved = e.progress() or moved
            if moved or cond():
                continue
            active = [r for e in engines for r in e.active]
            if len(active) == 1:  # nothing else to keep moving: block on its round
                MPI.Request.Waitall(active[0]._reqs)
                continue
            pending = [q for r in active for q in r._reqs]
            if not pending:  # nothing in flight yet cond is false: a bug, never a hang
                raise RuntimeError("mpicoll: waiting on a request that cannot progress")
            MPI.Request.Waitany(pending)


def progress_all() -> bool:
    """One pass over every live engine's schedules in flight; True if any advanced.  Every p2p
    progress point (``Test``, ``Wait``, :func:`Testall`, :func:`Waitall`, the internal
    agreements) calls this: progress is global across backends, as MPI's is."""
    moved = False
    for e in [e for e in list(_ENGINES) if e.active]:
        moved = e.progress() or moved
    return moved


def _is_done(r: Any) -> bool:
    if isinstance(r, ScheduleRequest):
        return r.done
    return bool(r == MPI.REQUEST_NULL)


def Waitall(requests: Iterable[Any]) -> None:
    """Complete every request of a list mixing ``MPI.Request`` and p2p requests, in any order,
    progressing every live engine's schedules (not only the listed ones) meanwhile."""
    reqs = list(requests)
    mpi_reqs = [r for r in reqs if not isinstance(r, ScheduleRequest)]
    ours = [r for r in reqs if isinstance(r, ScheduleRequest)]
    while not all(_is_done(r) for r in reqs):
        if progress_all() or all(_is_done(r) for r in reqs):
            continue
        pending = [q for e in list(_ENGINES) for a in e.active for q in a._reqs]
        left = [q for q in mpi_reqs if q != MPI.REQUEST_NULL]
        if not pending:  # no p2p schedule in flight anywhere: plain MPI
            if any(not r.done for r in ours):  # never: a listed schedule is in flight
                raise RuntimeError("mpicoll: waiting on a request that cannot progress")
            MPI.Request.Waitall(left)
            break
        MPI.Request.Waitany(pending + left)


def Testall(requests: Iterable[Any]) -> bool:
    """Progress every live p2p schedule once; True when all listed requests are complete (MPI
    ones are completed too)."""
    reqs = list(requests)
    mpi_reqs = [r for r in reqs if not isinstance(r, ScheduleRequest)]
    progress_all()
    ours_done = all(r.done for r in reqs if isinstance(r, ScheduleRequest))
    mpi_done = MPI.Request.Testall(mpi_reqs) if mpi_reqs else True
    return ours_done and bool(mpi_done)
