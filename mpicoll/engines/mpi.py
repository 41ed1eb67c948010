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

import functools
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.datatypes import TypedView
from ..algorithms.registry import Algorithm
from ..algorithms.schedule import DEFAULT_SEGMENT_BYTES, Context, Overlap, Recv, Round, Schedule
from .call import Call

__all__ = ["CompletedRequest", "Engine", "MessageError", "Replayed", "ScheduleRequest",
           "Testall", "Testany", "Testsome", "ThreadLevelError", "Traffic", "Waitall", "Waitany",
           "Waitsome", "check_thread", "explain", "progress_all"]


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
        #: the compiled plans' records, added up when a counter is read
        self._replays: list[Replayed] = []

    def track(self, counts: tuple[int, ...]) -> Replayed:
        """A record for a compiled plan whose every run sends and receives ``counts`` (in the
        order of :data:`FIELDS`); the plan adds one to its ``runs`` per run."""
        rec = Replayed(counts)
        self._replays.append(rec)
        return rec

    def untrack(self, rec: Replayed) -> None:
        """Add up ``rec``'s runs and forget it (its plan is freed)."""
        self._flush()
        if rec in self._replays:
            self._replays.remove(rec)

    def _flush(self) -> list[int]:
        n = self._n
        for rec in self._replays:
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


# --------------------------------------------------------------------------------------------
# Thread levels


class ThreadLevelError(RuntimeError):
    """A p2p call from a thread that MPI's thread level does not allow (see the module
    docstring); raised before any message."""


_LEVEL_NAMES = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED",
                MPI.THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}
_level: int | None = None  # MPI.Query_thread(), read once (it cannot change after MPI_Init)
_MULTIPLE_LEVEL = MPI.THREAD_MULTIPLE


def _thread_level() -> int:
    global _level
    if _level is None:
        _level = MPI.Query_thread()
    return _level


class _Serial:
    """Under ``MPI_THREAD_SERIALIZED``: which thread is inside the engine (re-entrant)."""

    def __init__(self) -> None:
        self.owner: int | None = None
        self.depth = 0

    def __enter__(self) -> None:
        check_thread()
        me = threading.get_ident()
        with _lock:  # the check again, atomic with taking the place
            if self.owner is not None and self.owner != me:
                raise _overlap("mpicoll.p2p")
            self.owner = me
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        with _lock:
            self.depth -= 1
            if not self.depth:
                self.owner = None


class _Unguarded:
    """Under ``MPI_THREAD_MULTIPLE``: no check."""

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_SERIAL = _Serial()
_UNGUARDED = _Unguarded()


def _guard() -> _Serial | _Unguarded:
    """What every engine entry point runs under: the thread-level check (and, under
    ``MPI_THREAD_SERIALIZED``, the record of the thread inside)."""
    return _UNGUARDED if _thread_level() == MPI.THREAD_MULTIPLE else _SERIAL


def check_thread(what: str = "mpicoll.p2p") -> None:
    """Refuse a p2p call from a thread MPI's thread level does not allow, before any message.

    Under ``MPI_THREAD_MULTIPLE`` (mpi4py's default) every thread may call.  Under
    ``MPI_THREAD_FUNNELED`` and ``MPI_THREAD_SINGLE`` only MPI's main thread
    (``MPI.Is_thread_main()``) may; under ``MPI_THREAD_SERIALIZED`` any thread may, but not
    while another thread is inside the p2p engine.

    Raises:
        ThreadLevelError: the calling thread may not call MPI now.
    """
    level = _thread_level()
    if level == MPI.THREAD_MULTIPLE:
        return
    if level in (MPI.THREAD_SINGLE, MPI.THREAD_FUNNELED):
        if not MPI.Is_thread_main():
            me = threading.current_thread().name
            raise ThreadLevelError(
                f"{what}: called from thread {me!r}, but MPI runs at "
                f"{_LEVEL_NAMES.get(level, str(level))}: only MPI's main thread may call MPI; "
                f"call from the main thread, or {_FIX}")
        return
    owner = _SERIAL.owner
    if owner is not None and owner != threading.get_ident():
        raise _overlap(what)


_FIX = ("initialise MPI with MPI_THREAD_MULTIPLE (mpi4py's default: "
        "mpi4py.rc.thread_level = 'multiple' before importing mpi4py.MPI)")


def _overlap(what: str) -> ThreadLevelError:
    me = threading.current_thread().name
    return ThreadLevelError(
        f"{what}: called from thread {me!r} while another thread is inside an mpicoll p2p "
        f"call, but MPI runs at MPI_THREAD_SERIALIZED: calls must not overlap; serialise "
        f"them (one lock around every MPI call of every thread), or {_FIX}")


# --------------------------------------------------------------------------------------------
# MPI errors, said readably


class MessageError(MPI.Exception):
    """An MPI error on one of a p2p collective's messages (a truncation: a peer sent more
    bytes than this rank's receive buffer holds), said as MPI said it: the collective, the
    peer, the bytes, MPI's own words.  An ``MPI.Exception`` whose ``Get_error_class()`` is
    MPI's (``MPI.ERR_TRUNCATE`` for a truncation), raised on the rank MPI raises it on."""

    def __init__(self, code: int, message: str) -> None:
        MPI.Exception.__init__(self, code)
        self.message = message

    def __str__(self) -> str:
        return self.message


_TRUNCATED = re.compile(r"(?:[Mm]essage from rank (\d+) and tag \d+ truncated; )?"
                        r"(\d+) bytes received but buffer size is (\d+)")


def explain(exc: MPI.Exception, what: str, statuses: Sequence[MPI.Status] = (),
            peers: Sequence[int] = ()) -> MPI.Exception:
    """``exc`` (raised by a wait on ``what``'s messages) as a :class:`MessageError` that says
    what MPI said: the failing message's status (from ``statuses``, when the wait filled
    them: ``MPI_ERR_IN_STATUS``), else ``exc`` itself; ``peers``: the ranks of the round,
    named when the status does not say which one failed."""
    code = exc.Get_error_code()
    peer: int | None = None
    got: int | None = None
    for st in statuses:
        err = st.Get_error()
        if err not in (MPI.SUCCESS, MPI.ERR_PENDING):
            code, peer = err, st.Get_source()
            try:
                got = st.Get_count(MPI.BYTE)
            except MPI.Exception:
                got = None
            break
    text = MPI.Get_error_string(code)
    m = _TRUNCATED.search(text) or _TRUNCATED.search(str(exc))
    if MPI.Get_error_class(code) == MPI.ERR_TRUNCATE or m:
        if m is not None:
            if m.group(1) is not None and peer is None:
                peer = int(m.group(1))
            # a truncation is always the larger count into the smaller buffer (MPICH's
            # sentence names them the other way round)
            a, b = int(m.group(2)), int(m.group(3))
            said = f"message truncated: {max(a, b)} bytes into a buffer of {min(a, b)}"
        else:
            said = "message truncated" + (f": {got} bytes received" if got else "")
        frm = (f" from rank {peer}" if peer is not None and peer >= 0 else
               f" from one of ranks {sorted(set(peers))}" if peers else "")
        msg = (f"{what}: {said}{frm} (the ranks passed different amounts of data: MPI requires "
               "the type signatures of sender and receiver to match)")
    else:
        first = text.splitlines()[0] if text else str(exc)
        msg = f"{what}: MPI error on a message" + (f" with rank {peer}" if peer is not None
                                                    else "") + f": {first}"
    return MessageError(code, msg)


def _name(ctx: Any) -> str:
    """The collective a context or tag record runs, for an error message."""
    c = getattr(ctx, "collective", None)
    return "mpicoll.p2p " + (c.capitalize() if c else "collective")


def _peers(reqs_ops: Any) -> list[int]:
    return [o.peer for o in reqs_ops] if reqs_ops else []


# --------------------------------------------------------------------------------------------
# Requests

#: Guards the engines' lists of schedules in flight and :data:`_ENGINES`; held only for list
#: operations, never across an MPI call or a schedule's code.
_lock = threading.Lock()
#: Notified whenever a thread releases schedule claims: a waiter whose schedule another thread
#: holds sleeps on it instead of entering MPI.
_released = threading.Condition(threading.Lock())
#: Seconds a waiter sleeps at most on :data:`_released` before looking again (a safety net:
#: every release notifies).
_NAP = 0.005


def _empty_status(status: MPI.Status | None) -> None:
    """Set ``status`` as MPI sets it for a request with no message (a collective's, a null
    one): source ``ANY_SOURCE``, tag ``ANY_TAG``, error ``SUCCESS``, zero elements."""
    if status is not None:
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)
        status.Set_elements(MPI.BYTE, 0)
        status.Set_cancelled(False)


class ScheduleRequest:
    """The request of a p2p collective, with the methods of an ``MPI.Request``.

    Created started: the schedule has already run up to its first round, and that round is
    posted.  Completing it with ``Wait``/``Test`` (or :func:`Waitall`, :func:`Testall`,
    :func:`Waitany`, :func:`Testany`, :func:`Waitsome`, :func:`Testsome`, which also take native
    and plain ``MPI.Request``\\s) finishes the collective; until then the call's buffers belong
    to the library, as in MPI.  Once a completion call has reported it complete the request is
    inactive, like a completed ``MPI.Request``: it compares equal to ``MPI.REQUEST_NULL``, is
    false in a boolean context, and the ``...any``/``...some`` calls skip it.  Its statuses
    are empty (source ``ANY_SOURCE``, tag ``ANY_TAG``), as MPI's are for a collective.

    Any thread may complete it (under ``MPI_THREAD_MULTIPLE``); see the module docstring.
    """

    #: in its engine's list of schedules in flight until done (a compiled plan leaves it once
    #: its last round is posted: see :class:`~mpicoll.engines.plan.PlanRequest`)
    _listed = True

    def __init__(self, engine: Engine, gen: Schedule, ctx: MPIContext) -> None:
        self._gen = gen
        self._ctx = ctx
        self._begin(engine)

    def _begin(self, engine: Engine) -> None:
        """Start it: the first round posted, and listed in flight unless already done."""
        self._engine = engine
        self._reqs: list[MPI.Request] = []
        #: held by the one thread that tests this schedule's requests or resumes it
        self._claim = threading.Lock()
        self.done = False  # the schedule has finished
        self._inactive = False  # ... and a completion call has reported it
        self._advance()  # nobody else sees this request yet: no claim needed
        if not self.done and self._listed:
            with _lock:
                engine.active.append(self)
                _IN_FLIGHT[0] += 1

    def _advance(self) -> None:
        """Resume the schedule until it posts a non-empty round or ends (claim held)."""
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
        """Advance as far as completed messages allow; True if the schedule moved.  Only the
        thread holding ``_claim`` calls this."""
        moved = False
        try:
            while not self.done and MPI.Request.Testall(self._reqs, st := self._statuses()):
                self._advance()
                moved = True
        except MPI.Exception as exc:
            self._failed()
            raise explain(exc, _name(self._ctx), st) from None
        if self.done:
            self._engine._retire(self)
        return moved

    #: what the request keeps alive until it is complete (exports of a call's mmaps)
    held: Any = None

    def _statuses(self) -> list[MPI.Status]:
        """Statuses for a wait on the posted round (read only on an MPI error: which message
        failed, and how)."""
        return [MPI.Status() for _ in self._reqs]

    def _failed(self) -> None:
        """An MPI error on a message of this request: it is over (done and out of the list
        of schedules in flight, so no other wait spins on it); the error goes to the caller."""
        self.done = True
        self._reqs = []
        self._engine._retire(self)

    def _complete(self, status: MPI.Status | None = None) -> None:
        """Report completion: the request becomes inactive."""
        self._inactive = True
        self.held = None
        _empty_status(status)

    def Test(self, status: MPI.Status | None = None) -> bool:
        """Make progress on every outstanding p2p collective (every backend's); True once this
        one is complete (and for an inactive request)."""
        with _guard():
            if not self._inactive:
                if not self.done:
                    progress_all((self,))
                if not self.done:
                    return False
            self._complete(status)
            return True

    def Wait(self, status: MPI.Status | None = None) -> bool:
        """Block until this collective is complete, progressing all others meanwhile; True.
        Alone in flight (under ``MPI_THREAD_MULTIPLE``) it sleeps in ``Waitall`` on each round
        in turn."""
        if (_level == _MULTIPLE_LEVEL and not self._inactive and _IN_FLIGHT[0] == self._listed
                and self._claim.acquire(blocking=False)):
            # the only schedule in flight anywhere (an unlisted one: none is), so nothing else
            # needs progress
            try:
                while not self.done:
                    try:
                        MPI.Request.Waitall(self._reqs, st := self._statuses())
                    except MPI.Exception as exc:
                        self._failed()
                        raise explain(exc, _name(self._ctx), st) from None
                    self._advance()
                self._engine._retire(self)
            finally:
                _release([self])
            self._complete(status)
            return True
        with _guard():
            if not self._inactive:
                _wait_until(lambda: self.done, [self])
            self._complete(status)
            return True

    def Get_status(self, status: MPI.Status | None = None) -> bool:
        """Progress, then True if complete, without making the request inactive."""
        with _guard():
            if not self.done:
                progress_all((self,))
            if self.done:
                _empty_status(status)
            return self.done

    def Cancel(self) -> None:
        """Refused: MPI does not cancel collective operations (``MPI_Cancel`` on a collective
        request is erroneous, MPI-4.1 section 6.12), and every other rank would wait forever.

        Raises:
            RuntimeError: always; complete the request with ``Wait``/``Test`` instead.
        """
        raise RuntimeError("mpicoll.ScheduleRequest.Cancel: MPI does not cancel collective "
                           "operations; complete the request with Wait()/Test() (or "
                           "mpicoll.Waitall/Waitany/...) on every rank instead")

    def Free(self) -> None:
        """Complete the request (MPI forbids freeing an active collective request)."""
        self.Wait()

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, MPI.Request) and other == MPI.REQUEST_NULL:
            return self._inactive
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        """False once inactive, as ``MPI.Request``'s (``!= MPI.REQUEST_NULL``)."""
        return not self._inactive



class CompletedRequest(ScheduleRequest):
    """The request of a p2p collective that moves nothing (every count 0 on every rank):
    complete when made, never in flight; ``Wait``/``Test`` report it at once."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reqs = []
        self._claim = threading.Lock()
        self.done = True
        self._inactive = False
        self._listed = False


#: Every live engine: a wait on one progresses all of them (MPI's progress is global: a rank
#: waiting on one backend's request must not starve another backend's schedule that a peer
#: is waiting on).
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
#: how many schedules are in flight on all engines together, counted with the engines' lists
#: (under :data:`_lock`): the blocking fast path's question, without walking the WeakSet
_IN_FLIGHT = [0]


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
        return ctx, algorithm.schedule(ctx, *call.prepare(ctx))

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
            return ScheduleRequest(self, gen, ctx)

    def run(self, call: Call, algorithm: Algorithm, tag: int | None = None) -> None:
        """Blocking: run ``call`` with ``algorithm`` on ``tag`` (a fresh one if None) to
        completion (progressing any outstanding others)."""
        with _guard():
            if _any_in_flight():  # keep everything in flight moving
                self.start(call, algorithm, tag).Wait()
                return
            ctx, gen = self._context(call, algorithm, tag)  # the common case: Waitall each round
            for rnd in gen:
                reqs = ctx.post(rnd)
                if reqs:
                    statuses = [MPI.Status() for _ in reqs]
                    try:
                        MPI.Request.Waitall(reqs, statuses)
                    except MPI.Exception as exc:
                        raise explain(exc, _name(ctx), statuses) from None

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


def _any_in_flight() -> bool:
    """Some live engine has a schedule in flight (read without the lock, as a snapshot is)."""
    return _IN_FLIGHT[0] > 0


def _in_flight(extra: Iterable[Any] = ()) -> list[ScheduleRequest]:
    """A snapshot of every live engine's schedules in flight, and those of ``extra`` (any
    requests) that are unfinished but not listed there (compiled plans whose last round is
    posted: only their owner's completion call finishes them)."""
    with _lock:
        out = [r for e in _ENGINES for r in e.active]
    out += [r for r in extra if isinstance(r, ScheduleRequest) and not r._listed and not r.done]
    return out


def _claim(schedules: Iterable[ScheduleRequest]) -> list[ScheduleRequest]:
    """Try-acquire the claim of each schedule; the ones this thread now holds."""
    return [r for r in schedules if r._claim.acquire(blocking=False)]


def _release(claimed: list[ScheduleRequest]) -> None:
    """Release claims, waking the threads asleep on :data:`_released` (if any: a waiter
    counts itself in before it looks at its condition, so a release it misses happened before
    it looked, or it wakes within :data:`_NAP`)."""
    for r in claimed:
        r._claim.release()
    if claimed and _WAITERS[0]:
        _notify()


def _notify() -> None:
    """Wake the threads asleep on :data:`_released` (a claim was released)."""
    with _released:
        _released.notify_all()


#: threads asleep on (or about to sleep on) :data:`_released`, counted under its lock
_WAITERS = [0]


def _poll_claimed(claimed: list[ScheduleRequest]) -> bool:
    """Advance the claimed schedules as far as they go, then release them; True if any moved."""
    moved = False
    try:
        for r in claimed:
            moved = r._poll() or moved
    finally:
        _release(claimed)
    return moved


def progress_all(extra: Iterable[Any] = ()) -> bool:
    """One pass over every live engine's schedules in flight and the unfinished p2p requests
    of ``extra`` (those no other thread is advancing right now); True if any advanced.  Every
    p2p progress point (``Test``, ``Wait``, the completion functions, the internal agreements)
    calls this, with the requests it completes as ``extra``: progress is global across
    backends, as MPI's is.  Never blocks."""
    return _poll_claimed(_claim(_in_flight(extra)))


def _step(mine: Sequence[ScheduleRequest], plain: Sequence[MPI.Request],
          cond: Callable[[], bool], status: MPI.Status | None = None) -> int | None:
    """One step of a blocking wait for ``cond()``, which depends on the schedules ``mine`` and
    the plain requests ``plain``: a progress pass over every free schedule, then, unless that
    moved something or ``cond()`` holds, block until something may have changed.

    Blocks inside MPI (``Waitany`` over the claimed schedules' round and ``plain``) only when
    this thread holds every unfinished schedule of ``mine``; otherwise sleeps until a claim is
    released (see the module docstring).

    Returns:
        The index in ``plain`` of a request that the blocking ``Waitany`` completed (it is now
        ``MPI.REQUEST_NULL``: the caller records it), or None.
    """
    claimed = _claim(_in_flight(mine))
    try:
        moved = False
        for r in claimed:
            moved = r._poll() or moved
        if moved or cond():
            return None
        held = {id(r) for r in claimed}
        if all(r.done or id(r) in held for r in mine):
            rounds = [q for r in claimed if not r.done for q in r._reqs]
            left = [q for q in plain if q != MPI.REQUEST_NULL]
            if not rounds and not left:  # cond is false yet nothing is in flight: a bug
                raise RuntimeError("mpicoll: waiting on a request that cannot progress")
            if not rounds:
                i = MPI.Request.Waitany(left, status)
            elif len(claimed) == 1 and not left:
                try:  # one schedule, nothing else: sleep on its round
                    MPI.Request.Waitall(rounds, st := claimed[0]._statuses())
                except MPI.Exception as exc:
                    claimed[0]._failed()
                    raise explain(exc, _name(claimed[0]._ctx), st) from None
                return None
            else:
                i = MPI.Request.Waitany(rounds + left, status) - len(rounds)
            if i < 0:
                return None
            q = left[i]
            return next(k for k, p in enumerate(plain) if p is q)
    finally:
        _release(claimed)
    with _released:  # another thread holds one of ours: it moves it and wakes us
        _WAITERS[0] += 1
        try:
            if not cond():
                _released.wait(_NAP)
        finally:
            _WAITERS[0] -= 1
    return None


def _wait_until(cond: Callable[[], bool], mine: Sequence[ScheduleRequest]) -> None:
    """Progress every live schedule until ``cond()``, which depends on the schedules ``mine``."""
    while not cond():
        _step(mine, (), cond)


# --------------------------------------------------------------------------------------------
# Completion of lists mixing p2p requests, native ones and plain MPI.Requests


def _inactive(r: Any) -> bool:
    """An inactive request: ``MPI.REQUEST_NULL``, or a p2p request already reported."""
    if isinstance(r, ScheduleRequest):
        return r._inactive
    return bool(r == MPI.REQUEST_NULL)


def _split(reqs: Sequence[Any]) -> tuple[list[ScheduleRequest], list[MPI.Request]]:
    """The p2p requests and the MPI ones of a list (anything else: TypeError)."""
    ours, plain = [], []
    for i, r in enumerate(reqs):
        if isinstance(r, ScheduleRequest):
            ours.append(r)
        elif isinstance(r, MPI.Request):
            plain.append(r)
        else:
            raise TypeError(f"requests[{i}]: expected an MPI.Request or an mpicoll p2p "
                            f"request, got {type(r).__name__}")
    return ours, plain


def _fill(statuses: list[MPI.Status] | None, got: Sequence[MPI.Status | None], n: int) -> None:
    """Write statuses as mpi4py does: the list grows to ``len(got)`` entries if shorter, and
    entry k (k < min(n, len(statuses))) gets ``got[k]`` (an empty status past ``got``)."""
    if statuses is None:
        return
    while len(statuses) < len(got):
        statuses.append(MPI.Status())
    for k in range(min(n, len(statuses))):
        s = got[k] if k < len(got) else None
        if s is None:
            _empty_status(statuses[k])
        else:
            statuses[k].Set_source(s.Get_source())
            statuses[k].Set_tag(s.Get_tag())
            statuses[k].Set_error(s.Get_error())
            statuses[k].Set_cancelled(s.Is_cancelled())
            try:
                statuses[k].Set_elements(MPI.BYTE, s.Get_elements(MPI.BYTE))
            except MPI.Exception:  # a collective request's status: Open MPI leaves its count
                # undefined (MPI_ERR_COUNT when read, or when written back); MPI defines none
                statuses[k].Set_elements(MPI.BYTE, 0)


def _sweep(reqs: Sequence[Any], done: dict[int, MPI.Status | None], first: bool) -> bool:
    """Without blocking, record in ``done`` (index -> status, None for a p2p request) the
    listed requests that are complete and not yet recorded; with ``first``, stop at one.
    Recorded MPI requests are completed (now ``MPI.REQUEST_NULL``, or an inactive persistent
    request); p2p requests are made inactive by the caller.  The MPI requests are tested by
    MPI's own ``Testany``/``Testsome``, which skip inactive persistent requests (a completed
    ``Prequest`` is not ``REQUEST_NULL`` and ``Test`` on it answers True again).

    Returns:
        True if nothing listed and unrecorded is active (every p2p request inactive, every
        MPI request null or an inactive persistent one): nothing more can complete.
    """
    pending = False
    for i, r in enumerate(reqs):
        if i in done or not isinstance(r, ScheduleRequest) or r._inactive:
            continue
        if not r.done:
            pending = True
            continue
        done[i] = None
        if first:
            return False
    at = [i for i, r in enumerate(reqs)
          if i not in done and not isinstance(r, ScheduleRequest) and r != MPI.REQUEST_NULL]
    if not at:
        return not pending
    plain = [reqs[i] for i in at]
    if first:
        s = MPI.Status()
        k, idle = MPI.Request.Testany(plain, s)
        if k != MPI.UNDEFINED:
            done[at[k]] = s
            return False
        return idle and not pending
    statuses: list[MPI.Status] = []
    got = MPI.Request.Testsome(plain, statuses)
    if got is None:
        return not pending
    for k, st in zip(got, statuses, strict=False):
        done[at[k]] = st
    return False  # the next sweep tells whether any other is still active


def _wait(reqs: Sequence[Any], enough: Callable[[dict[int, MPI.Status | None]], bool],
          first: bool) -> dict[int, MPI.Status | None]:
    """Progress and block until ``enough(done)`` (see :func:`_sweep`), or until nothing
    listed is active any more; the requests that completed, by index."""
    _split(reqs)
    done: dict[int, MPI.Status | None] = {}
    while True:
        progress_all(reqs)
        if _sweep(reqs, done, first) or enough(done):
            return done
        waiting = [i for i, r in enumerate(reqs) if i not in done and not _inactive(r)]
        mine = [r for i in waiting if isinstance(r := reqs[i], ScheduleRequest)]
        left = [reqs[i] for i in waiting if not isinstance(reqs[i], ScheduleRequest)]
        # block only on what this call still waits for (completed plain requests excluded;
        # MPI's Waitany skips inactive persistent ones)
        status = MPI.Status()
        k = _step(mine, left, functools.partial(_any_done, mine), status)
        if k is not None:
            done[next(i for i in waiting if reqs[i] is left[k])] = status
            if enough(done):
                return done


def _any_done(schedules: Sequence[ScheduleRequest]) -> bool:
    return any(r.done for r in schedules)


def _report(reqs: Sequence[Any], done: dict[int, MPI.Status | None],
            order: Sequence[int]) -> list[MPI.Status | None]:
    """Make the recorded p2p requests inactive; their statuses in ``order``."""
    for i in order:
        r = reqs[i]
        if isinstance(r, ScheduleRequest):
            r._complete()
    return [done[i] for i in order]


def Waitall(requests: Sequence[Any], statuses: list[MPI.Status] | None = None) -> bool:
    """Complete every request of a list mixing p2p requests, native ones and plain
    ``MPI.Request``\\s, in any order, progressing every live engine's schedules (not only the
    listed ones) meanwhile; as ``MPI.Request.Waitall``.

    Args:
        requests: the requests; inactive ones (``MPI.REQUEST_NULL``, completed p2p requests)
            are skipped.  Every one is inactive on return.
        statuses: if given, a list that receives one ``MPI.Status`` per request (empty for p2p
            and inactive requests), grown to ``len(requests)`` if shorter.

    Returns:
        True.

    Raises:
        TypeError: an entry is neither an ``MPI.Request`` nor a p2p request.
        ThreadLevelError: see :func:`check_thread`.
    """
    with _guard():
        reqs = list(requests)
        live = [i for i, r in enumerate(reqs) if not _inactive(r)]
        done = _wait(reqs, lambda d: len(d) == len(live), first=False)
        order = sorted(done)  # less than live: inactive persistent requests (empty statuses)
        by_index = dict(zip(order, _report(reqs, done, order), strict=True))
        _fill(statuses, [by_index.get(i) for i in range(len(reqs))], len(reqs))
        return True


def Testall(requests: Sequence[Any], statuses: list[MPI.Status] | None = None) -> bool:
    """Progress every live p2p schedule once; True, with every listed request completed and
    inactive, when all are complete; False, with none of them changed, otherwise (as
    ``MPI.Request.Testall``).  ``requests``, ``statuses`` and errors as in :func:`Waitall`."""
    with _guard():
        reqs = list(requests)
        ours, plain = _split(reqs)
        progress_all(ours)
        if not all(r.done for r in ours):
            return False
        got: list[MPI.Status] = []
        # Get_status, then Waitall of what is complete: MPICH 5.0's MPI_Testall fails
        # (MPI_ERR_IN_STATUS, every status MPI_SUCCESS) on a persistent collective request
        # (the native backend's *_init ones)
        if plain:
            for q in plain:
                if not q.Get_status():
                    return False
            MPI.Request.Waitall(plain, got)
        for r in ours:
            r._complete()
        it = iter(got)
        _fill(statuses, [None if isinstance(r, ScheduleRequest) else next(it) for r in reqs],
              len(reqs))
        return True


def Waitany(requests: Sequence[Any], status: MPI.Status | None = None) -> int:
    """Wait until one of the listed requests (p2p, native and plain ``MPI.Request``\\s mixed)
    completes, progressing every live engine's schedules meanwhile; as
    ``MPI.Request.Waitany``.

    Returns:
        The index of the completed request, which is now inactive; ``MPI.UNDEFINED`` if every
        listed request is inactive.  ``status``, if given, receives its status (empty for a
        p2p request or for ``MPI.UNDEFINED``).

    Raises:
        TypeError: an entry is neither an ``MPI.Request`` nor a p2p request.
        ThreadLevelError: see :func:`check_thread`.
    """
    with _guard():
        reqs = list(requests)
        if all(_inactive(r) for r in reqs):
            _split(reqs)
            _empty_status(status)
            return MPI.UNDEFINED
        done = _wait(reqs, bool, first=True)
        if not done:  # only inactive persistent requests were left
            _empty_status(status)
            return MPI.UNDEFINED
        (i,) = done
        _fill_one(status, _report(reqs, done, [i])[0])
        return i


def Testany(requests: Sequence[Any], status: MPI.Status | None = None) -> tuple[int, bool]:
    """Progress every live p2p schedule once, then test the listed requests; as
    ``MPI.Request.Testany``.

    Returns:
        ``(index, True)`` for a request that completed (now inactive; ``status`` gets its
        status), ``(MPI.UNDEFINED, False)`` if none did, ``(MPI.UNDEFINED, True)`` if every
        listed request is inactive.
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            _empty_status(status)
            return MPI.UNDEFINED, True
        progress_all(reqs)
        done: dict[int, MPI.Status | None] = {}
        idle = _sweep(reqs, done, first=True)
        if not done:
            if idle:
                _empty_status(status)
            return MPI.UNDEFINED, idle
        (i,) = done
        _fill_one(status, _report(reqs, done, [i])[0])
        return i, True


def Waitsome(requests: Sequence[Any],
             statuses: list[MPI.Status] | None = None) -> list[int] | None:
    """Wait until at least one listed request completes; as ``MPI.Request.Waitsome``.

    Returns:
        The indices (ascending) of every listed request found complete, now inactive, or None
        if every listed request was inactive.  ``statuses``, if given, receives their statuses
        in the same order (grown if shorter; entries past them are set empty, as mpi4py does).
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            return None
        done = _wait(reqs, bool, first=False)
        if not done:  # only inactive persistent requests were left
            return None
        order = sorted(done)
        _fill(statuses, _report(reqs, done, order), len(reqs))
        return order


def Testsome(requests: Sequence[Any],
             statuses: list[MPI.Status] | None = None) -> list[int] | None:
    """Progress every live p2p schedule once, then test the listed requests; as
    ``MPI.Request.Testsome``.

    Returns:
        The indices (ascending) of the listed requests that are complete, now inactive (an
        empty list if none), or None if every listed request was inactive.  ``statuses`` as
        in :func:`Waitsome`.
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            return None
        progress_all(reqs)
        done: dict[int, MPI.Status | None] = {}
        if _sweep(reqs, done, first=False) and not done:
            return None
        order = sorted(done)
        _fill(statuses, _report(reqs, done, order), len(reqs))
        return order


def _fill_one(status: MPI.Status | None, got: MPI.Status | None) -> None:
    if status is not None:
        _fill([status], [got], 1)
