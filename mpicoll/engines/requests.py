"""The requests of p2p collectives and their progress: :class:`ScheduleRequest` (a schedule
advanced round by round by the completion calls), the claims that let one thread at a time
advance a schedule, and the global progress pass over every live engine's schedules in flight
(the protocol: :mod:`mpicoll.engines.mpi`'s module docstring)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mpi4py import MPI

from ..algorithms.schedule import Schedule
from . import threads as _threads
from .errors import _name, explain, settle
from .threads import _MULTIPLE_LEVEL, _guard, _lock

#: an :class:`~mpicoll.engines.mpi.Engine` and its :class:`~mpicoll.engines.mpi.MPIContext`
#: (the engine module imports this one, never the other way round)
Engine = Any
MPIContext = Any

__all__ = ["CompletedRequest", "ScheduleRequest", "progress_all"]

#: holds sleeps on it instead of entering MPI.
_released = threading.Condition(threading.Lock())
#: Seconds a waiter sleeps at most on :data:`_released` before looking again (a safety net:
#: every release notifies).
_NAP = 0.005
#: Every live engine: a wait on one progresses all of them (MPI's progress is global: a rank
#: waiting on one backend's request must not starve another backend's schedule that a peer
#: is waiting on).
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
#: how many schedules are in flight on all engines together, counted with the engines' lists
#: (under :data:`_lock`): the blocking fast path's question, without walking the WeakSet
_IN_FLIGHT = [0]


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
        while not self.done:
            try:
                if not MPI.Request.Testall(self._reqs, st := self._statuses()):
                    break
            except MPI.Exception as exc:  # kept; the rounds go on (see _note)
                self._note(exc, st)
                if not self._test_each():
                    break
            self._advance()
            moved = True
        if self.done:
            self._engine._retire(self)
        return moved

    #: what the request keeps alive until it is complete (exports of a call's mmaps)
    held: Any = None

    def _statuses(self) -> list[MPI.Status]:
        """Statuses for a wait on the posted round (read only on an MPI error: which message
        failed, and how)."""
        return [MPI.Status() for _ in self._reqs]

    #: the first MPI error on this run's messages, raised when the run is reported complete
    _error: MPI.Exception | None = None

    def _note(self, exc: MPI.Exception, statuses: Sequence[MPI.Status] = ()) -> None:
        """An MPI error on a message of the posted round (``exc``, raised by a wait or test
        on it; ``statuses`` that call's): keep the first one, said readably, to raise when
        the run is reported complete.  The schedule goes on with its later rounds, as MPICH's
        collectives do (``MPIR_ERR_COLL_CHECKANDCONT``), so no peer waits forever for a
        message this rank would otherwise never send."""
        if self._error is None:
            self._error = explain(exc, _name(self._ctx), statuses)

    def _test_each(self) -> bool:
        """Test the posted round's requests one by one (after a ``Testall`` raised: MPICH's
        reports the failed request again until every one is complete); errors noted; True
        once every one is complete."""
        done = True
        for q in self._reqs:
            try:
                if not q.Test():
                    done = False
            except MPI.Exception as exc:
                self._note(exc)
        return done

    def _complete(self, status: MPI.Status | None = None) -> None:
        """Report completion: the request becomes inactive.

        Raises:
            MessageError: the first MPI error on the run's messages (see :meth:`_note`);
                ``status``'s error field is set to it."""
        self._inactive = True
        self.held = None
        _empty_status(status)
        err = self._error
        if err is not None:
            self._error = None
            if status is not None:
                status.Set_error(err.Get_error_code())
            raise err

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
        if (_threads._level == _MULTIPLE_LEVEL and not self._inactive
                and _IN_FLIGHT[0] == self._listed and self._claim.acquire(blocking=False)):
            # the only schedule in flight anywhere (an unlisted one: none is), so nothing else
            # needs progress
            try:
                while not self.done:
                    try:
                        MPI.Request.Waitall(self._reqs, st := self._statuses())
                    except MPI.Exception as exc:  # kept; the rounds go on
                        self._note(exc, st)
                        settle(self._reqs)
                    self._advance()
                if self._listed:  # (an unlisted one is in no list: no lock to take)
                    self._engine._retire(self)
            finally:
                self._claim.release()
                if _WAITERS[0]:
                    _notify()
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
                except MPI.Exception as exc:  # kept; the rounds go on
                    claimed[0]._note(exc, st)
                    settle(rounds)
                return None
            else:
                st1 = status if status is not None else MPI.Status()
                try:
                    i = MPI.Request.Waitany(rounds + left, st1) - len(rounds)
                except MPI.Exception as exc:  # a round's message (by its tag): kept, go on
                    mine_ = [r for r in claimed if not r.done and r._ctx.tag == st1.Get_tag()]
                    if not mine_ or st1.Get_tag() < 0:
                        raise  # one of the plain requests: the caller's error, as MPI's
                    mine_[0]._note(exc, [st1])
                    return None
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
