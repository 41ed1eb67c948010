"""The MPI engines: run a schedule with real point-to-point messages.

One :class:`Engine` per p2p backend object.  It owns the private communicator, the tag counter
and the list of schedules in flight.  A blocking collective and a non-blocking one are the same
thing here: a :class:`ScheduleRequest` that posts a round (``Irecv`` first, then ``Isend``),
and, once every request of that round has completed, resumes the generator for the next one.
A blocking call waits on its request at once; a non-blocking call returns it.  A round that
carries local work (an :class:`~mpicoll.algorithms.schedule.Overlap`: a segmented schedule's
reduction of the segment already received) runs it right after posting the round's messages
and before any wait on them, in the same call (under the schedule's claim, see below).

Progress is made only inside mpicoll's completion calls (``Test``/``Wait`` of a request,
:func:`Waitall`, :func:`Testall`, :func:`Waitany`, :func:`Testany`, :func:`Waitsome`,
:func:`Testsome`, and the internal agreements): the libNBC model.  MPI itself makes no progress
on a Python generator, so ``MPI.Request.Waitall([p2p_request])`` cannot work (mpi4py refuses
an object that is not an ``MPI.Request``, and no MPI call would ever post the next round):
pass p2p requests, native ones and plain ``MPI.Request``\\s, mixed, to ``mpicoll.Waitall``
and its siblings instead.  Progress is global: any completion call advances *every* live
engine's schedules, so requests can be completed in any order without deadlock, and a
blocking collective issued while non-blocking ones are outstanding does not starve them.

Threads (``MPI_THREAD_MULTIPLE``): each schedule has a *claim*, a lock taken only with a
non-blocking try-acquire.  Whoever holds it is the one thread that tests that schedule's MPI
requests and resumes its generator, so a round is posted exactly once and no MPI request is
ever in two concurrent test/wait calls (which MPI forbids).  A progress pass claims every free
schedule in flight, advances them, and releases them; schedules another thread holds are
skipped (that thread moves them).  A blocking wait blocks inside MPI (``Waitany``) only on the
requests of schedules it has claimed, never holding any other lock: when every schedule it
waits for is its own it sleeps in MPI, and each claimed schedule wakes it when its round
completes, so holding the claim never delays it.  When a schedule it waits for is claimed by
another thread, it does not enter MPI; it sleeps on a condition variable that every release
notifies (with a short timeout as a safety net), and the holder advances that schedule.  So a
thread waiting on its own schedule never stops another thread's from moving, and a thread is
never stuck in MPI on requests unrelated to what it waits for (which could deadlock a peer
rank).  The engines' lists of schedules in flight are guarded by one short lock never held
across an MPI call.

Lower thread levels (``MPI.Query_thread()``): under ``MPI_THREAD_FUNNELED`` and
``MPI_THREAD_SINGLE`` a p2p call or completion call from a thread that is not MPI's main thread
(``MPI.Is_thread_main()``) raises :class:`ThreadLevelError` before any message; under
``MPI_THREAD_SERIALIZED`` one that starts while another thread is inside the p2p engine
raises it too (the overlap is detected when it happens, so calls must be serialised by the
user, e.g. with a lock).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.datatypes import TypedView
from ..algorithms.registry import Algorithm
from ..algorithms.schedule import DEFAULT_SEGMENT_BYTES, Context, Overlap, Recv, Round, Schedule
from .call import Call
from .completion import Testall, Testany, Testsome, Waitall, Waitany, Waitsome
from .errors import MessageError, _name, explain, settle, truncated
from .requests import (
    _ENGINES,
    _IN_FLIGHT,
    CompletedRequest,
    ScheduleRequest,
    _any_in_flight,
    _claim,
    _poll_claimed,
    _wait_until,
    progress_all,
)
from .threads import ThreadLevelError, _guard, _lock, check_thread

__all__ = ["CompletedRequest", "Engine", "MessageError", "Replayed", "ScheduleRequest",
           "Testall", "Testany", "Testsome", "ThreadLevelError", "Traffic", "Waitall", "Waitany",
           "Waitsome", "check_thread", "explain", "progress_all"]

#: ``bench --phases`` only: while a list, :meth:`Engine.run`'s blocking path appends
#: ``MPI.Wtime()`` once its schedule is made and after each round's ``Waitall`` (round k's
#: time: marks k+1 - k, the local work before its post included).  None (always, otherwise):
#: nothing is recorded.
round_marks: list[float] | None = None


class Traffic:
    """Messages and bytes this rank sent and received (cumulative; :meth:`reset` to zero),
    and the bytes it sent to ranks on other nodes (``inter_bytes_sent``), and the rounds.

    The engine counts a generator-run schedule's messages as it posts them; a compiled plan
    (a persistent request, a replayed blocking call) knows its counts per run, so a run only
    adds one to its :class:`Replayed` record, and the counters add those up when read."""

    __slots__ = ("_n", "_replays")

    #: the counters, in the order of :attr:`Replayed.counts`
    FIELDS = ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv", "inter_bytes_sent",
              "rounds")

    def __init__(self) -> None:
        #: the counters (see FIELDS), counted as the engine posts a schedule's messages
        self._n = [0] * 6
        #: the compiled plans' records (by id: dropped in O(1)), added up when a counter is
        #: read
        self._replays: dict[int, Replayed] = {}

    def track(self, counts: tuple[int, ...]) -> Replayed:
        """A record for a compiled plan whose every run sends and receives ``counts`` (in the
        order of :data:`FIELDS`); the plan adds one to its ``runs`` per run."""
        rec = Replayed(counts)
        self._replays[id(rec)] = rec
        return rec

    def untrack(self, rec: Replayed) -> None:
        """Add up ``rec``'s runs and forget it (its plan is freed)."""
        if self._replays.pop(id(rec), None) is rec:  # its runs alone added up
            runs, rec.runs = rec.runs, 0
            n = self._n
            for i, c in enumerate(rec.counts):
                n[i] += runs * c

    def _flush(self) -> list[int]:
        n = self._n
        for rec in self._replays.values():
            runs = rec.runs
            if runs:
                rec.runs = 0
                for i, c in enumerate(rec.counts):
                    n[i] += runs * c
        return n

    def reset(self) -> None:
        """Zero every counter."""
        self._flush()
        self._n[:] = [0] * 6

    @property
    def messages_sent(self) -> int:
        return self._flush()[0]

    @property
    def messages_recv(self) -> int:
        return self._flush()[1]

    @property
    def bytes_sent(self) -> int:
        return self._flush()[2]

    @property
    def bytes_recv(self) -> int:
        return self._flush()[3]

    @property
    def inter_bytes_sent(self) -> int:
        """Bytes sent to ranks on another node (the backend's node map)."""
        return self._flush()[4]

    @property
    def rounds(self) -> int:
        return self._flush()[5]

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.FIELDS, self._flush(), strict=True))

    def __repr__(self) -> str:
        return f"Traffic({self.as_dict()})"


class Replayed:
    """A compiled plan's traffic: its per-run ``counts`` (:data:`Traffic.FIELDS` order) and
    the ``runs`` not yet added to its :class:`Traffic`."""

    __slots__ = ("counts", "runs")

    def __init__(self, counts: tuple[int, ...]) -> None:
        self.counts = counts
        self.runs = 0


class MPIContext(Context):
    """A schedule context bound to a communicator and the tag of one collective call."""

    def __init__(self, comm: MPI.Comm, tag: int, datatype: MPI.Datatype, dtype: np.dtype,
                 traffic: Traffic, nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        super().__init__(comm.Get_rank(), comm.Get_size(), datatype, dtype, nodes, segment_bytes)
        self.comm = comm
        self.tag = tag
        self.traffic = traffic
        #: the collective it runs (for error messages)
        self.collective = ""

    def post(self, rnd: Round | Overlap) -> list[MPI.Request]:
        """Start every operation of a round: receives first, then sends; then, for an
        :class:`Overlap`, run its local work while they are in flight.  Each message is
        ``[buf, len(buf), datatype]`` (a derived datatype's typemap, holes untouched); traffic
        counts ``len(buf) * unit`` bytes (the datatype's size, not the view's extent)."""
        if isinstance(rnd, Overlap):
            reqs = self.post(rnd.ops)
            rnd.during()
            return reqs
        comm, tag, dt, unit = self.comm, self.tag, self.datatype, self.unit
        t = self.traffic._n  # Traffic.FIELDS order
        reqs = []
        for o in rnd:
            if type(o) is Recv:
                n, b = o.buf.size, o.buf
                if type(b) is TypedView:  # Alltoallw: the block's own datatype
                    reqs.append(comm.Irecv([b, n, b.datatype], o.peer, tag))
                    t[3] += n * b.datatype.Get_size()
                else:
                    reqs.append(comm.Irecv([b, n, dt], o.peer, tag))
                    t[3] += n * unit
                t[1] += 1
        nodes = self.nodes
        for o in rnd:
            if type(o) is not Recv:
                n, b = o.buf.size, o.buf
                if type(b) is TypedView:
                    reqs.append(comm.Isend([b, n, b.datatype], o.peer, tag))
                    nb = n * b.datatype.Get_size()
                else:
                    reqs.append(comm.Isend([b, n, dt], o.peer, tag))
                    nb = n * unit
                t[0] += 1
                t[2] += nb
                if nodes is not None and nodes[o.peer] != nodes[self.rank]:
                    t[4] += nb
        t[5] += 1
        return reqs


class Engine:
    """The blocking and non-blocking MPI engines of one p2p backend.

    Args:
        comm: the private communicator (a ``Dup`` of the user's, owned by the backend).
        tag_ub: tags used are 1..tag_ub, one per collective call, wrapping; at most MPI's
            ``TAG_UB`` attribute.

    One backend (one engine) may be used by several threads only if they serialise their
    calls (MPI requires that collective calls on one communicator are issued in the same order
    on every rank); separate backends need no user lock under ``MPI_THREAD_MULTIPLE``.
    """

    def __init__(self, comm: MPI.Comm, tag_ub: int,
                 nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, tag_limit: int | None = None
                 ) -> None:
        self.comm = comm
        self.nodes = nodes
        self.segment_bytes = segment_bytes
        self.tag_ub = tag_ub
        self.tag = 0
        #: MPI's TAG_UB: persistent plans take tags above tag_ub when there are any
        self.tag_limit = tag_ub if tag_limit is None else max(tag_limit, tag_ub)
        #: tags held by persistent plans until their Free (see :meth:`reserve_tag`)
        self.reserved: set[int] = set()
        #: tags of calls this rank refused (see :meth:`take_tag`)
        self._refused: set[int] = set()
        self._plan_tag = tag_ub
        self.active: list[ScheduleRequest] = []
        #: the live persistent plans (a started one leaves :attr:`active` once its last round
        #: is posted)
        self.plans: weakref.WeakSet[ScheduleRequest] = weakref.WeakSet()
        self.traffic = Traffic()
        with _lock:
            _ENGINES.add(self)

    def _live(self) -> list[ScheduleRequest]:
        """A snapshot of this engine's schedules in flight."""
        with _lock:
            return list(self.active)

    def _retire(self, r: ScheduleRequest) -> None:
        with _lock:
            if r in self.active:
                self.active.remove(r)
                _IN_FLIGHT[0] -= 1

    def take_tag(self) -> int:
        """The next call's tag: 1, 2, ..., tag_ub, 1, ... (skipping those persistent plans
        hold).  The backend takes it before it checks the call's arguments, so a call refused
        on some ranks only still consumes its tag on every rank and the ranks' counters never
        drift apart (a refused call's messages, sent eagerly by the ranks that accepted it,
        keep a tag no later call uses until the counter comes round; :meth:`refused` drains
        them then)."""
        self.tag = tag = self.tag % self.tag_ub + 1
        if self.reserved and tag in self.reserved:
            tag = self._skip_reserved()
        return tag

    def take_tag_lines(self) -> tuple[list[str], dict[str, Any]]:
        """:meth:`take_tag` as lines of Python that set ``tag``, and the objects they read,
        for a caller that writes its own code (the front door's last-call records: one
        call less per call); the same steps, on this engine's counter and reserved tags."""
        return (["tag = T_ENGINE.tag % T_UB + 1", "T_ENGINE.tag = tag",
                 "if T_RESERVED and tag in T_RESERVED: tag = T_ENGINE._skip_reserved()"],
                {"T_ENGINE": self, "T_UB": self.tag_ub, "T_RESERVED": self.reserved})

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

    def _context(self, call: Call, algorithm: Algorithm, tag: int | None = None
                 ) -> tuple[MPIContext, Schedule]:
        """A context for ``call`` on ``tag`` (taken with :meth:`take_tag`; a fresh one if
        None), and ``algorithm``'s schedule started on it."""
        if tag is None:
            tag = self.take_tag()
        self.clear_tag(tag)
        ctx = MPIContext(self.comm, tag, call.datatype, call.dtype, self.traffic, self.nodes,
                         self.segment_bytes)
        ctx.collective = call.collective
        return ctx, call.schedule(ctx, algorithm)

    def clear_tag(self, tag: int) -> None:
        """Make ``tag`` ready for a new call: drop what peers sent for calls this rank refused
        (:meth:`_drain`), and finish an older call still on it."""
        if self._refused:
            self._drain(tag)
        old = [r for r in self._live() if r._ctx.tag == tag] if self.active else []
        if old:
            # More than tag_ub collectives outstanding: the tag comes round again while an
            # older call still uses it.  Finish that call here first; two calls in flight with
            # one tag would cross-match their messages.  Every rank does the same, so every
            # rank posts the new call's receives only after the old call's are all matched.
            _wait_until(lambda: all(r.done for r in old), old)

    def _skip_reserved(self) -> int:
        """The next rotating tag no persistent plan holds (plans share the rotating tags only
        when MPI's TAG_UB leaves none above ``tag_ub``)."""
        if len(self.reserved) >= self.tag_ub:
            raise RuntimeError("mpicoll: every tag is held by a persistent collective; Free some")
        while self.tag in self.reserved:
            self.tag = self.tag % self.tag_ub + 1
        return self.tag

    def reserve_tag(self) -> int:
        """A tag for a persistent plan, held until :meth:`release_tag`.

        Plans take the tags above ``tag_ub`` (up to MPI's TAG_UB) in turn, so the rotating
        tags of the other calls never meet them, and every rank, making its persistent
        collectives in the same order, reserves the same tag whenever each rank frees its
        plans.  Where MPI leaves no tag above ``tag_ub``, a plan holds a rotating tag, which
        the rotation then skips (the ranks must then free their plans at the same point of
        their sequence of calls)."""
        if self.tag_limit > self.tag_ub:
            width = self.tag_limit - self.tag_ub
            if len(self.reserved) >= width:
                raise RuntimeError("mpicoll: every plan tag is held; Free some persistent "
                                   "collectives")
            tag = self._plan_tag
            while True:
                tag = tag + 1 if tag < self.tag_limit else self.tag_ub + 1
                if tag not in self.reserved:
                    break
            self._plan_tag = tag
        else:
            self.tag = self.tag % self.tag_ub + 1
            tag = self._skip_reserved()
            old = [r for r in self._live() if r._ctx.tag == tag] if self.active else []
            if old:
                _wait_until(lambda: all(r.done for r in old), old)
        self.reserved.add(tag)
        return tag

    def release_tag(self, tag: int) -> None:
        """Give back a tag :meth:`reserve_tag` handed out."""
        self.reserved.discard(tag)

    def start(self, call: Call, algorithm: Algorithm,
              tag: int | None = None) -> ScheduleRequest:
        """Start ``call`` with ``algorithm`` (chosen by the backend) on ``tag`` (see
        :meth:`take_tag`; a fresh one if None) and return its request."""
        with _guard():
            ctx, gen = self._context(call, algorithm, tag)
            req = ScheduleRequest(self, gen, ctx)
            if call.truncated is not None and req._error is None:
                req._error = truncated(_name(ctx), call.truncated)
            return req

    def run(self, call: Call, algorithm: Algorithm, tag: int | None = None) -> None:
        """Blocking: run ``call`` with ``algorithm`` on ``tag`` (a fresh one if None) to
        completion (progressing any outstanding others).

        Raises:
            MessageError: an MPI error on one of its messages (``MPI_ERR_TRUNCATE``: a peer
                sent more than this rank's receive holds), the first one, once every round
                has run (the failed receive's buffer holds what MPI left there), as MPICH's
                collectives do: no peer is left waiting for this rank's later messages."""
        with _guard():
            if _any_in_flight():  # keep everything in flight moving
                self.start(call, algorithm, tag).Wait()
                return
            ctx, gen = self._context(call, algorithm, tag)  # the common case: Waitall each round
            err = None
            marks = round_marks
            if marks is not None:
                marks.append(MPI.Wtime())
            for rnd in gen:
                reqs = ctx.post(rnd)
                if reqs:
                    statuses = [MPI.Status() for _ in reqs]
                    try:
                        MPI.Request.Waitall(reqs, statuses)
                    except MPI.Exception as exc:  # kept; the rounds go on (see settle)
                        err = err or explain(exc, _name(ctx), statuses)
                        settle(reqs)
                if marks is not None:
                    marks.append(MPI.Wtime())
            if err is None and call.truncated is not None:
                err = truncated(_name(ctx), call.truncated)
            if err is not None:
                raise err

    def progress(self) -> bool:
        """One pass over this engine's schedules in flight (those no other thread holds);
        True if any advanced."""
        return _poll_claimed(_claim(self._live()))

    def wait_for(self, cond: Callable[[], bool]) -> None:
        """Progress every live engine's schedules until ``cond()``, which may depend on any of
        this engine's schedules in flight and its started persistent plans."""
        with _guard():
            _wait_until(cond, self._live() + [p for p in list(self.plans) if not p.done])

    def idle(self) -> bool:
        """Nothing of this engine is in flight: no schedule, no started plan unfinished."""
        return not self.active and all(p.done for p in list(self.plans))
