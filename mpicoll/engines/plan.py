"""Compiled schedules: a schedule's generator run once, its rounds and local work recorded.

A persistent collective (``Allreduce_init``, ...: MPI-4) is compiled when it is made, as
libNBC and MPICH's ``MPIR_Sched`` build a persistent collective's schedule once at init:

* :func:`compile_plan` runs the algorithm's generator with a :class:`Recorder` context: its
  ``copy``/``reduce`` calls are recorded, not executed, in order between the rounds; its
  ``scratch`` buffers are allocated then, once for the plan; each yielded round is kept with
  its buffers (views of the user's buffers and of the scratch) and peers.  A schedule never
  decides anything on the data (rules 1 and 3 of :mod:`mpicoll.algorithms.schedule`), so the
  recorded plan is what every later run of the generator would do.
* :class:`Plan` is that record.  ``Plan.replay(ctx)`` is a schedule again (a generator doing
  the recorded work through ``ctx`` and yielding the recorded rounds): the simulator runs a
  compiled plan with it, and a test checks that it gives the generator's results, clocks and
  counts.
* :class:`PlanRequest` runs a plan on MPI: every round's messages become persistent
  point-to-point requests (``Recv_init`` first, then ``Send_init``, on the tag the engine
  reserved for the plan), and ``Start`` replays the steps (local work, then
  ``MPI.Prequest.Startall`` of the round) with no generator and no argument parsing on the
  path; ``Wait``/``Test`` and :func:`mpicoll.Waitall` progress it like any other p2p request.

The plan format: ``steps``, a list of ``(local, round, during)`` where ``local`` is a tuple
of ``("copy", src, dst, None)`` / ``("reduce", inbuf, inoutbuf, op)`` done before ``round`` is
posted (a non-empty tuple of :class:`~mpicoll.algorithms.schedule.Send` /
:class:`~mpicoll.algorithms.schedule.Recv`) and ``during`` the work of an overlapped round
(:class:`~mpicoll.algorithms.schedule.Overlap`), done while it is in flight; then ``tail``,
the local work after the last round; ``rounds`` counts every yielded round (empty ones too, as
:class:`~mpicoll.engines.mpi.Traffic` does).
"""

from __future__ import annotations

import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.datatypes import TypedView
from ..algorithms.registry import Algorithm
from ..algorithms.schedule import (
    DEFAULT_SEGMENT_BYTES,
    Context,
    Overlap,
    Recv,
    Schedule,
    Send,
    _ufunc_reduce,
)
from ..model import alphabeta as _alphabeta
from ..model.alphabeta import current as _current_model
from . import threads as _threads
from .call import Call
from .errors import _name, explain, settle, truncated
from .mpi import Engine, Replayed
from .requests import (
    _IN_FLIGHT,
    _WAITERS,
    ScheduleRequest,
    _empty_status,
    _notify,
    _release,
)
from .threads import _guard, _lock

__all__ = ["NAMED", "BlockingRunner", "NoTemplateError", "NonblockingRunner", "Plan", "PlanRequest",
           "Recorder", "ReplayRequest", "Startall", "Template", "compile_plan"]

#: one recorded local operation: (kind, a, b, op)
Local = tuple[str, np.ndarray, np.ndarray, "MPI.Op | None"]


class Recorder(Context):
    """A context that records a schedule's local work instead of doing it (see the module)."""

    def __init__(self, rank: int, size: int, datatype: MPI.Datatype, dtype: np.dtype,
                 nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        super().__init__(rank, size, datatype, dtype, nodes, segment_bytes)
        self.local: list[Local] = []
        self.scratch_bytes = 0

    def copy(self, src: np.ndarray, dst: np.ndarray) -> None:
        if src.size:
            self.local.append(("copy", src, dst, None))

    def reduce(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op) -> None:
        if inbuf.size:
            self.local.append(("reduce", inbuf, inoutbuf, op))

    def scratch(self, count: int) -> np.ndarray:
        out = super().scratch(count)  # once, for the plan's lifetime (by true extent if derived)
        self.scratch_bytes += out.nbytes
        return out


@dataclass
class Plan:
    """A compiled schedule of one rank (see the module docstring for the format).

    Attributes:
        collective, algorithm: what was compiled.
        datatype: the MPI datatype of every message.
        steps: ``(local, round, during)`` triples, in order: ``local`` before the round is
            started, ``during`` while it is in flight (an overlapped round), ``tail`` after
            the last round.
        rounds: rounds the generator yielded (empty ones included).
        scratch_bytes: scratch allocated for the plan (once).
    """

    collective: str
    algorithm: str
    datatype: MPI.Datatype
    steps: list[tuple[tuple[Local, ...], tuple[Send | Recv, ...], tuple[Local, ...]]]
    tail: tuple[Local, ...]
    rounds: int
    scratch_bytes: int = 0
    #: per-rank traffic of one run: messages and bytes sent and received, bytes to other nodes
    traffic: dict[str, int] = field(default_factory=dict)
    #: the numpy dtype of the elements (a derived datatype: one extent per element)
    dtype: Any = None
    #: a local truncation each run raises at its end (:attr:`Call.truncated`)
    truncated: str | None = None

    def replay(self, ctx: Context) -> Schedule:
        """The plan as a schedule again: its local work done through ``ctx`` (so the
        simulator accounts for it), its rounds yielded."""
        for local, rnd, during in self.steps:
            _apply(ctx, local)
            if during:
                yield Overlap(rnd, partial(_apply, ctx, during))
            else:
                yield rnd
        _apply(ctx, self.tail)


def _apply(ctx: Context, local: Iterable[Local]) -> None:
    for kind, a, b, op in local:
        if kind == "copy":
            ctx.copy(a, b)
        else:
            ctx.reduce(a, b, op)  # type: ignore[arg-type]


def compile_plan(call: Call, algorithm: Algorithm, rank: int, size: int,
                 nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Plan:
    """Run ``algorithm``'s schedule for ``call`` once with a :class:`Recorder` and keep what it
    did (rank ``rank`` of ``size``; ``nodes`` and ``segment_bytes`` as the engine's).

    Raises:
        TypeError: the schedule yielded something that is not a round of ``Send``/``Recv``.
    """
    rec = Recorder(rank, size, call.datatype, call.dtype, nodes, segment_bytes)
    steps: list[tuple[tuple[Local, ...], tuple[Send | Recv, ...], tuple[Local, ...]]] = []
    rounds = 0
    sent = recv = bsent = brecv = inter = 0
    for rnd in call.schedule(rec, algorithm):
        rounds += 1
        during: tuple[Local, ...] = ()
        if isinstance(rnd, Overlap):  # its work, recorded apart: it runs while rnd is in flight
            pre, rec.local = rec.local, []
            rnd.during()
            during, rec.local = tuple(rec.local), pre
            rnd = rnd.ops
            if not rnd:
                rec.local += during
                continue
        if not rnd:
            continue
        ops = tuple(rnd)
        for o in ops:
            if type(o) is not Recv and type(o) is not Send:
                raise TypeError(f"compile_plan: a round holds {o!r}, not a Send or Recv")
            nb = _nbytes(rec, o.buf)
            if type(o) is Recv:
                recv += 1
                brecv += nb
            elif type(o) is Send:
                sent += 1
                bsent += nb
                if nodes is not None and nodes[o.peer] != nodes[rank]:
                    inter += nb
            else:
                raise TypeError(f"compile_plan: a round holds {o!r}, not a Send or Recv")
        steps.append((tuple(rec.local), ops, during))
        rec.local = []
    return Plan(call.collective, algorithm.name, call.datatype, steps, tuple(rec.local), rounds,
                rec.scratch_bytes,
                {"messages_sent": sent, "messages_recv": recv, "bytes_sent": bsent,
                 "bytes_recv": brecv, "inter_bytes_sent": inter}, call.dtype, call.truncated)


def _nbytes(ctx: Context, buf: np.ndarray) -> int:
    """Bytes a message of ``buf`` carries (an Alltoallw block: its own datatype's size)."""
    if type(buf) is TypedView:
        return int(buf.size) * int(buf.datatype.Get_size())
    return ctx.nbytes(buf)


def _spec(buf: np.ndarray, datatype: MPI.Datatype) -> Any:
    """The message spec of ``buf``, as the engine posts it: ``[buf, len(buf), datatype]``
    (a typed view: its own datatype), built once.  Always the explicit spec, even where mpi4py
    could infer the datatype from a bare array: mpi4py 4.1 then looks the buffer's typecode
    up at every post, about 45 ns a buffer more than reading the spec's three items (Sendrecv
    of 8 B on MPICH 5.0: 650 ns bare, 565 ns with specs)."""
    if type(buf) is TypedView:
        return [buf, buf.size, buf.datatype]
    return [buf, buf.size, datatype]


def _fast(local: Iterable[Local], ctx: Context) -> tuple[tuple[Any, Any, Any], ...]:
    """The recorded local work as ``(fn, a, b)`` calls ``fn(a, b)`` (specs built once; copies
    of a derived datatype through the context, which keeps its holes)."""
    out: list[tuple[Any, Any, Any]] = []
    for kind, a, b, op in local:
        if kind == "copy":
            if ctx.derived or type(a) is TypedView:
                out.append((ctx.copy, a, b))
            else:  # b[...] = a: numpy's copy, without np.copyto's argument handling
                out.append((b.__setitem__, Ellipsis, a))
        else:
            assert op is not None
            out.append(ctx.reducer(a, b, op))
    return tuple(out)


class _Tagged:
    """What the engine's tag bookkeeping reads of a request in flight (``_ctx.tag``), and the
    collective it runs (for error messages)."""

    __slots__ = ("collective", "tag")

    def __init__(self, tag: int, collective: str = "") -> None:
        self.tag = tag
        self.collective = collective


class PlanRequest(ScheduleRequest):
    """A persistent p2p collective (MPI-4): made inactive; ``Start()`` runs it, ``Wait()`` /
    ``Test()`` (or :func:`mpicoll.Waitall` / :func:`mpicoll.Testall`, mixed with any other
    requests) complete it, and it can be started again; ``Free()`` releases its persistent
    point-to-point requests and its tag.  Between ``Start`` and completion its buffers belong to
    the library, as in MPI; their contents may change between runs.

    ``Wait``/``Test`` on an inactive request return at once (``Test`` gives True), as MPI's do.

    Raises (``Start``): ``RuntimeError`` if it is active already or was freed.
    """

    def __init__(self, engine: Engine, plan: Plan, tag: int) -> None:
        self._engine = engine
        self._ctx = _Tagged(tag, plan.collective)
        self.plan = plan
        self.tag = tag
        comm, dt = engine.comm, plan.datatype
        ctx = Context(comm.Get_rank(), comm.Get_size(), dt, plan.dtype)  # local work only
        self._prequests: list[MPI.Prequest] = []
        steps = []
        for local, rnd, during in plan.steps:
            reqs = [comm.Recv_init(_spec(o.buf, dt), o.peer, tag) for o in rnd
                    if type(o) is Recv]
            reqs += [comm.Send_init(_spec(o.buf, dt), o.peer, tag) for o in rnd
                     if type(o) is Send]
            self._prequests += reqs
            steps.append((_fast(local, ctx), reqs, _fast(during, ctx)))
        self._steps = steps
        #: a local truncation each run raises at its end (:attr:`Plan.truncated`)
        self._truncated = plan.truncated
        #: each step's statuses, for its waits (read only on an MPI error: see errors.explain)
        self._all_statuses = [[MPI.Status() for _ in reqs] for _, reqs, _ in steps]
        self._tail = _fast(plan.tail, ctx)
        self._replayed = engine.traffic.track(_traffic_of(plan))
        self._next = 0
        self._reqs: list[MPI.Request] = []
        #: held by the one thread that tests this plan's requests or advances it
        self._claim = threading.Lock()
        self.done = True  # no run in progress
        self._inactive = True  # not started, or its run reported complete
        #: in the engine's list of schedules in flight: only while a round is left to post
        #: (once the last is posted no peer waits on this rank's Python for it)
        self._listed = False
        self.freed = False
        #: a plan of one round under MPI_THREAD_MULTIPLE (no thread check to make, never
        #: listed): its step, run by the short paths of Start and Wait; None once freed
        self._one = (steps[0] if len(steps) == 1 and _threads._thread_level() == _MULTIPLE
                     else None)
        engine.plans.add(self)

    def Start(self) -> None:
        """Start the collective (every rank starts its persistent collectives in the same
        order, as MPI requires)."""
        one = self._one
        if one is not None and self._inactive:  # one round: never listed, nothing to check
            if self._truncated is not None:
                self._error = truncated(_name(self._ctx), self._truncated)
            self._inactive = self.done = False
            self._replayed.runs += 1
            self._next = 0
            self._advance()
            return
        if _threads._level == _MULTIPLE:  # no thread check to make
            self._start()
            return
        with _guard():
            self._start()

    def _start(self) -> None:
        if not self._inactive or self.freed:
            raise RuntimeError("Start: this persistent request was freed" if self.freed else
                               "Start: this persistent request is active (complete it "
                               "with Wait/Test first)")
        self._replayed.runs += 1
        self.done = self._inactive = False
        if self._truncated is not None:
            self._error = truncated(_name(self._ctx), self._truncated)
        self._next = 0
        self._advance()  # not in flight yet: nobody else sees it, no claim needed
        if self._next < len(self._steps):  # a round left to post: progress must see it
            with _lock:
                self._engine.active.append(self)
                _IN_FLIGHT[0] += 1
            self._listed = True

    def _advance(self) -> None:
        """The next step: its local work, then its round started; or the tail and done.  After
        the last round is posted the request leaves the engine's list (nothing is left that a
        peer waits for; its owner's Wait/Test finishes it)."""
        i = self._next
        steps = self._steps
        if i < len(steps):
            local, reqs, during = steps[i]
            for fn, a, b in local:
                fn(a, b)
            _STARTALL(reqs)
            for fn, a, b in during:
                fn(a, b)
            self._reqs = reqs  # type: ignore[assignment]
            self._next = i = i + 1
            if i == len(steps) and self._listed:
                self._listed = False
                self._engine._retire(self)
            return
        for fn, a, b in self._tail:
            fn(a, b)
        self._reqs = []
        self.done = True

    def Wait(self, status: MPI.Status | None = None) -> bool:
        """Block until the run is complete (at once if inactive), progressing every other p2p
        request in flight meanwhile; True.  When no other schedule is in flight it sleeps in
        ``Waitall`` on each round in turn (no polling)."""
        if self._inactive:
            if status is not None:
                _empty_status(status)
            return True
        if self._one is not None and not _IN_FLIGHT[0] and self._claim.acquire(blocking=False):
            # one round, posted; nothing in flight anywhere needs progress
            try:
                if not self.done:
                    try:
                        _WAITALL(self._reqs, st := self._all_statuses[0])
                    except MPI.Exception as exc:  # kept, raised below once complete
                        self._note(exc, st)
                        settle(self._reqs)
                    for fn, a, b in self._tail:
                        fn(a, b)
                    self._reqs = _NO_REQS
                    self.done = True
            finally:
                self._claim.release()
                if _WAITERS[0]:
                    _notify()
            if self._error is not None:
                self._complete(status)  # raises it
            self._inactive = True
            if status is not None:
                _empty_status(status)
            return True
        if (_threads._level == _MULTIPLE and _IN_FLIGHT[0] == self._listed
                and self._claim.acquire(blocking=False)):
            # nothing else in flight anywhere needs progress (this one is counted there
            # while it is listed)
            try:
                while not self.done:
                    try:
                        _WAITALL(self._reqs, st := self._statuses())
                    except MPI.Exception as exc:  # kept; the rounds go on
                        self._note(exc, st)
                        settle(self._reqs)
                    self._advance()
            finally:
                _release([self])
            if self._error is not None:
                self._complete(status)  # raises it
            self._inactive = True
            if status is not None:
                _empty_status(status)
            return True
        return super().Wait(status)

    def _statuses(self) -> list[MPI.Status]:
        if self._next:
            return self._all_statuses[self._next - 1]
        return super()._statuses()

    def Free(self) -> None:
        """Complete an active run, then release the persistent requests and the tag."""
        if self.freed:
            return
        if not self._inactive:
            self.Wait()
        for r in self._prequests:
            r.Free()
        self._prequests = []
        self._steps = []
        self._one = None
        self.freed = True
        self._engine.traffic.untrack(self._replayed)
        self._engine.plans.discard(self)
        self._engine.release_tag(self.tag)

    @staticmethod
    def Startall(requests: Iterable[Any]) -> None:
        """Start every request of a list (see :func:`Startall`)."""
        Startall(requests)



def Startall(requests: Iterable[Any]) -> None:
    """Start a list of persistent requests, p2p (:class:`PlanRequest`) and MPI
    (``MPI.Prequest``, e.g. the native backend's) mixed, in list order for the p2p ones."""
    reqs = list(requests)
    mpi_reqs = [r for r in reqs if not isinstance(r, PlanRequest)]
    if mpi_reqs:
        MPI.Prequest.Startall(mpi_reqs)
    for r in reqs:
        if isinstance(r, PlanRequest):
            r.Start()


def _replay_steps(engine: Engine, call: Call, algorithm: Algorithm
                  ) -> tuple[tuple[Any, ...], tuple[Any, ...], Replayed]:
    """Compile ``call``'s plan for replay with fresh tags: its steps as ``(local, recvs,
    sends, during)`` (``recvs``/``sends``: ``(spec, peer)`` pairs, specs built once), its
    tail, and its traffic record on ``engine``."""
    comm = engine.comm
    plan = compile_plan(call, algorithm, comm.Get_rank(), comm.Get_size(), engine.nodes,
                        engine.segment_bytes)
    dt = plan.datatype
    ctx = Context(comm.Get_rank(), comm.Get_size(), dt, plan.dtype)  # local work only
    steps = tuple((_fast(local, ctx),
                   tuple((_spec(o.buf, dt), o.peer) for o in rnd if type(o) is Recv),
                   tuple((_spec(o.buf, dt), o.peer) for o in rnd if type(o) is Send),
                   _fast(during, ctx))
                  for local, rnd, during in plan.steps)
    return steps, _fast(plan.tail, ctx), engine.traffic.track(_traffic_of(plan))


class _Runner:
    """What :class:`BlockingRunner` and :class:`NonblockingRunner` share: the call, its
    algorithm and engine, the runs before compiling, the compiled plan and its traffic
    record.  A runner made from a :class:`Template` has no call until one is needed (a run
    through the engine, an error's message, a new ``auto`` choice): :meth:`call_of` parses
    the arguments of the run that needs it then (``_parse``: their key is the entry's, so
    they parse as the template's did)."""

    __slots__ = ("_args", "_call", "_fast", "_parse", "_replayed", "_runs", "_truncated",
                 "algorithm", "engine", "model")

    def __init__(self, engine: Engine, call: Call, algorithm: Algorithm) -> None:
        self.engine, self.algorithm = engine, algorithm
        #: the cost model an ``auto`` runner chose its algorithm with (:meth:`reselect` when
        #: :func:`mpicoll.model.use` changed it since); :data:`NAMED` for a named algorithm
        self.model: Any = NAMED
        self._call: Call | None = call
        #: the call's local truncation (:attr:`Call.truncated`: a template's runners have it
        #: of their source, whose layout decides it)
        self._truncated = call.truncated
        self._parse: Callable[..., Call] | None = None
        #: a bound runner's first arguments (for :attr:`call` alone)
        self._args: tuple[Any, ...] = ()
        self._runs = 0
        self._fast: tuple[Any, ...] | None = None
        self._replayed: Replayed | None = None  # the compiled plan's traffic record

    def call_of(self, args: tuple[Any, ...]) -> Call:
        """The parsed call; a runner made from a template parses ``args`` (the arguments of
        the run that needs it) the first time."""
        call = self._call
        if call is None:
            assert self._parse is not None
            call = self._call = self._parse(*args)
            self._parse = None
            self._args = ()
        return call

    def reselect(self, args: tuple[Any, ...]) -> None:
        """Choose the algorithm again for the model in use (an ``auto`` runner: the backend's;
        ``args``: the run's arguments, parsed now by a runner made from a template)."""

    @property
    def call(self) -> Call:
        """The parsed call (a runner made from a template: of its first arguments)."""
        return self._call if self._call is not None else self.call_of(self._args)

    def free(self) -> None:
        """Drop the compiled plan (the next runs compile it again)."""
        self._fast = None
        self._runs = 0
        if self._replayed is not None:
            self.engine.traffic.untrack(self._replayed)
            self._replayed = None


class BlockingRunner(_Runner):
    """What the front door caches for a blocking p2p call: ``runner(tag)`` runs it on the
    engine, on the call's own fresh tag (as every p2p call: a call refused on some ranks only
    then never meets a later call's messages).

    The first run goes through the engine (the schedule's generator); the second compiles the
    call's :class:`Plan` (its scratch allocated once, kept with the entry), and it and every
    later run replay it: per round the recorded local work, then the recorded messages on the
    call's tag (``Irecv``/``Isend``/``Waitall``; a round of one message each way and no
    overlapped work is one ``Sendrecv``, a lone send or receive one ``Send``/``Recv``); no
    generator, no context.  A run replays only while
    no p2p schedule is in flight anywhere (else it must progress them: it goes through the
    engine) and under ``MPI_THREAD_MULTIPLE`` (else the engine's thread checks apply).
    ``free()`` drops the plan (the front door's eviction, a changed model)."""

    __slots__ = ("_go",)

    def __call__(self, tag: int | None = None, *args: Any) -> None:
        model = self.model
        if model is not NAMED and _current_model() is not model:
            self.reselect(args)
        fast = self._fast
        engine = self.engine
        if fast is None:  # compiled at the second run, under MPI_THREAD_MULTIPLE only
            self._runs += 1
            if self._runs < 2 or _threads._thread_level() != _MULTIPLE:
                # a call made once: no compiling
                engine.run(self.call_of(args), self.algorithm, tag)
                return
            fast = self._fast = self._compile(args)
        if _IN_FLIGHT[0] or tag is None:
            engine.run(self.call_of(args), self.algorithm, tag)
            return
        if engine._refused:
            engine._drain(tag)
        failed = self._go(engine.comm, tag, *fast)
        self._replayed.runs += 1  # type: ignore[union-attr]
        if failed is not None or self._truncated is not None:
            self._raise(failed, args)

    def _raise(self, failed: tuple[MPI.Exception, int] | None, args: tuple[Any, ...]) -> None:
        """Raise the first MPI error of a replayed run (``failed``: the exception and its
        step; MPI's words, the collective, the peer), else the call's local truncation."""
        what = _name(self.call_of(args))
        if failed is None:
            raise truncated(what, self._truncated)  # type: ignore[arg-type]
        exc, i = failed
        _, kind, msgs, _ = self._fast[0][i]  # type: ignore[index]
        raise explain(exc, what, msgs[2] if kind is _GENERAL else (), _round_peers(kind, msgs))

    def inline(self) -> tuple[str, list[str], list[str], dict[str, Any]] | None:
        """This runner's replay as code for the front door to write into a last call's
        record (one function less on the path): ``(guard, unpack, body, names)``.  ``guard``
        is an expression true where a run must go through :meth:`__call__` instead (the plan
        dropped or compiled again, a schedule in flight, a refused call's messages to drain,
        an ``auto`` runner's model changed); ``unpack`` the statements run once, when the
        record is made, that name the plan's objects; ``body`` the replay (it reads ``tag``
        and ``ARGS``, the run's arguments, and ends in a ``return``); ``names`` the objects
        they read.  None for a runner not compiled, with a local truncation to raise, or
        whose plan has too many steps (:data:`_STRAIGHT_STEPS`)."""
        fast = self._fast
        if fast is None or self._truncated is not None:
            return None
        shape = _shape(*fast)
        if shape is None:
            return None
        unpack, body = _straight_lines(shape, "R_STEPS", "R_TAIL")
        guard = "R_RUN._fast is not R_FAST or R_IN_FLIGHT[0] or R_ENGINE._refused"
        if self.model is not NAMED:  # (the model was read once: _current is the model now)
            guard += " or R_MODEL._current is not R_CHOSEN"
        names = {"R_RUN": self, "R_FAST": fast, "R_STEPS": fast[0], "R_TAIL": fast[1],
                 "R_IN_FLIGHT": _IN_FLIGHT, "R_ENGINE": self.engine, "R_MODEL": _alphabeta,
                 "R_CHOSEN": self.model, "R_REPLAYED": self._replayed, "comm": self.engine.comm,
                 **_REPLAY_GLOBALS}
        return guard, unpack, [*body, "R_REPLAYED.runs += 1",
                               "if failed is not None: R_RUN._raise(failed, ARGS)",
                               "return None"], names

    def _compile(self, args: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        general, tail, self._replayed = _replay_steps(self.engine, self.call_of(args),
                                                      self.algorithm)
        steps = []
        for local, recvs, sends, during in general:
            msgs: tuple[Any, ...]
            if during or len(recvs) > 1 or len(sends) > 1:  # statuses: read on an error
                kind, msgs = _GENERAL, (recvs, sends,
                                        [MPI.Status() for _ in range(len(recvs) + len(sends))])
            elif recvs and sends:  # Sendrecv: Irecv + Isend + Waitall in one call
                kind, msgs = _SENDRECV, (*sends[0], *recvs[0])
            elif sends:  # Send: Isend + Wait (every round is waited for before the next)
                kind, msgs = _SEND, sends[0]
            else:
                kind, msgs = _RECV, recvs[0]
            steps.append((local, kind, msgs, during))
        self._go = _straight(steps, tail)
        return (tuple(steps), tail)



def _replay(comm: MPI.Comm, tag: int, steps: tuple[Any, ...], tail: tuple[Any, ...]
            ) -> tuple[MPI.Exception, int] | None:
    """Run a compiled blocking plan's steps (:meth:`BlockingRunner._compile`) on ``tag``: per
    step its local work, then its round (one ``Sendrecv``, ``Send`` or ``Recv``, or
    ``Irecv``s, ``Isend``s, the overlapped work and ``Waitall``), then the tail.  An MPI error
    is kept and the rounds go on, as MPICH's collectives do, so no peer waits for this rank;
    returns the first one and its step's index, or None.  :func:`_straight` writes this out
    for one plan's shape."""
    failed = None
    for i, (local, kind, msgs, during) in enumerate(steps):
        for fn, a, b in local:
            fn(a, b)
        reqs = None
        try:
            if kind is _SENDRECV:  # one message each way, nothing to overlap: one MPI call
                sspec, dest, rspec, source = msgs
                comm.Sendrecv(sspec, dest, tag, rspec, source, tag)
            elif kind is _SEND:
                comm.Send(msgs[0], msgs[1], tag)
            elif kind is _RECV:
                comm.Recv(msgs[0], msgs[1], tag)
            else:
                recvs, sends, statuses = msgs
                reqs = [comm.Irecv(spec, peer, tag) for spec, peer in recvs]
                for spec, peer in sends:
                    reqs.append(comm.Isend(spec, peer, tag))
                for fn, a, b in during:
                    fn(a, b)
                _WAITALL(reqs, statuses)
        except MPI.Exception as exc:
            if failed is None:
                failed = (exc, i)
            if reqs:
                settle(reqs)
    for fn, a, b in tail:
        fn(a, b)
    return failed


#: plans with more steps than this replay through :func:`_replay`'s loop
_STRAIGHT_STEPS = 32
#: :func:`_straight`'s functions, by plan shape (at most :data:`_SHAPES`)
_STRAIGHT: dict[tuple[Any, ...], Callable[..., Any]] = {}
_SHAPES = 256


def _shape(steps: Sequence[tuple[Any, ...]], tail: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What :func:`_straight_lines` writes a compiled blocking plan's replay from: the number
    of local operations of each step, its kind and messages, its overlapped work, the tail's;
    None for a plan of more than :data:`_STRAIGHT_STEPS` steps."""
    if len(steps) > _STRAIGHT_STEPS:
        return None
    return (tuple((len(local), kind,
                   (len(msgs[0]), len(msgs[1])) if kind is _GENERAL else (), len(during))
                  for local, kind, msgs, during in steps), len(tail))


def _straight_lines(shape: tuple[Any, ...], steps: str, tail: str
                    ) -> tuple[list[str], list[str]]:
    """:func:`_replay` written out for plans of ``shape`` (:func:`_shape`): the statements
    that unpack every object of the plan's tuples (named ``steps`` and ``tail``) into names in
    one statement each, and those of the replay itself (no loop, no kind tested; it reads
    ``comm`` and ``tag`` and leaves the first error and its step in ``failed``).  Unindented;
    the names are ``f``, ``x``, ``y`` (local work), ``s``, ``d``, ``r``, ``p``, ``st``
    (messages) with numbers, ``reqs``, ``exc`` and ``failed``."""
    n = [0]

    def calls(k: int) -> tuple[str, list[str]]:  # (fn, a, b) triples: the target and the calls
        xs = [(f"f{n[0] + j}", f"x{n[0] + j}", f"y{n[0] + j}") for j in range(k)]
        n[0] += k
        return ("(" + "".join(f"({f}, {x}, {y}), " for f, x, y in xs) + ")",
                [f"{f}({x}, {y})" for f, x, y in xs])

    targets, body = [], ["failed = None"]
    for i, (nlocal, kind, counts, nduring) in enumerate(shape[0]):
        local, pre = calls(nlocal)
        during, mid = calls(nduring)
        body += pre
        if kind is _SENDRECV:
            msgs, post = f"(s{i}, d{i}, r{i}, p{i})", [
                f"comm.Sendrecv(s{i}, d{i}, tag, r{i}, p{i}, tag)"]
        elif kind is _SEND:
            msgs, post = f"(s{i}, d{i})", [f"comm.Send(s{i}, d{i}, tag)"]
        elif kind is _RECV:
            msgs, post = f"(r{i}, p{i})", [f"comm.Recv(r{i}, p{i}, tag)"]
        else:
            rs = [f"r{i}_{j}" for j in range(counts[0])]
            ss = [f"s{i}_{j}" for j in range(counts[1])]
            msgs = ("((" + "".join(f"({r}, {r}p), " for r in rs) + "), ("
                    + "".join(f"({q}, {q}p), " for q in ss) + f"), st{i})")
            posts = [f"comm.Irecv({r}, {r}p, tag)" for r in rs] + [
                f"comm.Isend({q}, {q}p, tag)" for q in ss]
            post = [f"reqs = [{', '.join(posts)}]", *mid, f"WAITALL(reqs, st{i})"]
            body.append("reqs = None")
        targets.append(f"({local}, _, {msgs}, {during})")
        body += ["try:", *["    " + line for line in post], "except MPI.Exception as exc:",
                 f"    if failed is None: failed = (exc, {i})"]
        if kind is _GENERAL:
            body.append("    if reqs: SETTLE(reqs)")
    tail_target, tail_body = calls(shape[1])
    return ([f"({''.join(t + ', ' for t in targets)}) = {steps}", f"{tail_target} = {tail}"],
            body + tail_body)


def _straight(steps: Sequence[tuple[Any, ...]], tail: tuple[Any, ...]) -> Callable[..., Any]:
    """:func:`_replay` written out for plans of the shape of ``(steps, tail)``
    (:func:`_straight_lines`).  One function per shape (a template's runners share their
    source's)."""
    shape = _shape(steps, tail)
    if shape is None:
        return _replay
    fn = _STRAIGHT.get(shape)
    if fn is not None:
        return fn
    unpack, body = _straight_lines(shape, "steps", "tail")
    src = "\n".join(["def replay(comm, tag, steps, tail):",
                     *["    " + line for line in (*unpack, *body)], "    return failed"])
    scope: dict[str, Any] = dict(_REPLAY_GLOBALS)
    exec(src, scope)  # one function per plan shape
    if len(_STRAIGHT) >= _SHAPES:
        del _STRAIGHT[next(iter(_STRAIGHT))]
    fn = _STRAIGHT[shape] = scope["replay"]
    return fn


class NonblockingRunner(_Runner):
    """What the front door caches for a non-blocking p2p call (``Iallreduce``, ...):
    ``runner(tag)`` starts it on its fresh tag and returns its request.

    The first run starts the schedule's generator (:meth:`Engine.start`); the second compiles
    the call's plan, and it and every later run start a :class:`ReplayRequest` on it: the
    recorded rounds posted in turn (``Irecv`` first, then ``Isend``) as each completes, the
    recorded local work between them; no generator, no context.  A run that finds the
    previous replay unfinished (its scratch still in use), or a thread level below
    ``MPI_THREAD_MULTIPLE``, starts the generator instead.  ``free()`` drops the plan."""

    __slots__ = ("_previous",)

    def __init__(self, engine: Engine, call: Call, algorithm: Algorithm) -> None:
        super().__init__(engine, call, algorithm)
        self._previous: ReplayRequest | None = None

    def __call__(self, tag: int | None = None, *args: Any) -> ScheduleRequest:
        model = self.model
        if model is not NAMED and _current_model() is not model:
            self.reselect(args)
        fast = self._fast
        engine = self.engine
        if fast is None:  # compiled at the second run, under MPI_THREAD_MULTIPLE only
            self._runs += 1
            if self._runs < 2 or _threads._thread_level() != _MULTIPLE:
                return engine.start(self.call, self.algorithm, tag)
            steps, tail, self._replayed = _replay_steps(engine, self.call, self.algorithm)
            fast = self._fast = (steps, tail, tuple([MPI.Status() for _ in (*r, *s)]
                                                    for _, r, s, _ in steps))
        previous = self._previous
        if tag is None or (previous is not None and not previous.done):
            return engine.start(self.call, self.algorithm, tag)
        if engine._refused or engine.active:  # (else clear_tag has nothing to do)
            engine.clear_tag(tag)
        self._replayed.runs += 1  # type: ignore[union-attr]
        if (_POOLED and previous is not None and previous._inactive
                and _refcount(previous) <= _UNHELD and previous._claim.acquire(blocking=False)):
            # the last replay, complete and reported, held by nobody but this runner (no
            # caller, no progress pass's snapshot), and claimed: started again (no new
            # request, lock or tag record)
            try:
                previous._restart(tag)
            finally:
                previous._claim.release()
                if _WAITERS[0]:
                    _notify()
            req = previous
        else:
            req = self._previous = ReplayRequest(engine, fast[0], fast[1], tag,
                                                 self.call.collective, fast[2])
        if self._truncated is not None and req._error is None:
            req._error = truncated(_name(req._ctx), self._truncated)
        return req

    def inline(self) -> tuple[str, list[str], list[str], dict[str, Any]] | None:
        """This runner's restart of its pooled request as code for the front door to write
        into a last call's record (as :meth:`BlockingRunner.inline`): for a plan of one round
        (never listed in flight), the last request restarted on ``tag`` in place, its round
        posted; the guard sends every other case to :meth:`__call__` (the plan dropped or
        compiled again, no last request or one unfinished, unreported or held by anyone,
        a refused call's messages to drain, schedules in flight, ``auto``'s model changed,
        the request's claim taken).  None for a plan of more rounds, a local truncation to
        raise, or where the pool cannot count references."""
        fast = self._fast
        if fast is None or self._truncated is not None or not _POOLED or len(fast[0]) != 1:
            return None
        local, recvs, sends, during = fast[0][0]

        def triples(prefix: str, k: int) -> tuple[str, list[str]]:
            names = [(f"{prefix}f{j}", f"{prefix}a{j}", f"{prefix}b{j}") for j in range(k)]
            return ("(" + "".join(f"({f}, {a}, {b}), " for f, a, b in names) + ")",
                    [f"{f}({a}, {b})" for f, a, b in names])

        def pairs(prefix: str, k: int) -> tuple[str, list[str]]:
            names = [(f"{prefix}{j}", f"{prefix}{j}p") for j in range(k)]
            return "(" + "".join(f"({b}, {q}), " for b, q in names) + ")", [
                f"{b}, {q}" for b, q in names]

        ltarget, lcalls = triples("l", len(local))
        dtarget, dcalls = triples("d", len(during))
        rtarget, rposts = pairs("r", len(recvs))
        starget, sposts = pairs("s", len(sends))
        unpack = [f"(({ltarget}, {rtarget}, {starget}, {dtarget}), ) = R_STEPS"]
        guard = ("R_RUN._fast is not R_FAST or (P := R_RUN._previous) is None or not P.done"
                 " or not P._inactive or R_ENGINE._refused or R_ENGINE.active")
        if self.model is not NAMED:
            guard += " or R_MODEL._current is not R_CHOSEN"
        guard += " or REFCOUNT(P) > UNHELD or not P._claim.acquire(False)"
        posts = [f"comm.Irecv({x}, tag)" for x in rposts] + [
            f"comm.Isend({x}, tag)" for x in sposts]
        body = ["R_REPLAYED.runs += 1", "try:",
                "    P._ctx.tag = tag", "    P.done = P._inactive = False", "    P._error = None",
                *["    " + c for c in lcalls], f"    P._reqs = [{', '.join(posts)}]",
                *["    " + c for c in dcalls], "    P._next = 1", "finally:",
                "    P._claim.release()", "    if WAITERS[0]: NOTIFY()", "return P"]
        names = {"R_RUN": self, "R_FAST": fast, "R_STEPS": fast[0], "R_ENGINE": self.engine,
                 "R_MODEL": _alphabeta, "R_CHOSEN": self.model, "R_REPLAYED": self._replayed,
                 "comm": self.engine.comm, "REFCOUNT": _refcount, "UNHELD": _UNHELD,
                 "WAITERS": _WAITERS, "NOTIFY": _notify}
        return guard, unpack, body, names

    def free(self) -> None:
        """Drop the compiled plan (the next runs compile it again)."""
        super().free()
        self._previous = None


class ReplayRequest(ScheduleRequest):
    """The request of a non-blocking p2p call replaying its compiled plan (see
    :class:`NonblockingRunner`): a :class:`~mpicoll.engines.mpi.ScheduleRequest` whose rounds
    come from the plan instead of a generator, completed and progressed like any other."""

    def __init__(self, engine: Engine, steps: tuple[Any, ...], tail: tuple[Any, ...],
                 tag: int, collective: str = "",
                 statuses: tuple[list[MPI.Status], ...] = ()) -> None:
        self._ctx = _Tagged(tag, collective)
        self._steps = steps
        #: each step's statuses (shared by the runner's replays, which never overlap)
        self._all_statuses = statuses
        self._tail = tail
        self._next = 0
        #: a plan of one round is never in the list of schedules in flight: once its round is
        #: posted no peer waits on this rank's Python (its owner's Wait/Test, or a completion
        #: call given it, finishes it), so starting and completing it takes no lock
        self._listed = len(steps) > 1
        self._begin(engine)

    def _restart(self, tag: int) -> None:
        """Start this request again on ``tag`` (its runner's pool of one: see
        :class:`NonblockingRunner`; it is complete, reported and held by no one, and the
        caller holds its claim)."""
        self._ctx.tag = tag
        self.done = self._inactive = False
        self._error = None  # (reported with the last run: _complete cleared it)
        if not self._steps:  # no round: the tail, and done
            self._next = 0
            self._advance()
            return
        # the first step, as _advance posts it (written out: the common call)
        local, recvs, sends, during = self._steps[0]
        for fn, a, b in local:
            fn(a, b)
        comm = self._engine.comm
        reqs = []
        for spec, peer in recvs:
            reqs.append(comm.Irecv(spec, peer, tag))
        for spec, peer in sends:
            reqs.append(comm.Isend(spec, peer, tag))
        for fn, a, b in during:
            fn(a, b)
        self._reqs = reqs
        self._next = 1
        if self._listed:  # a round left to post (one round: never listed)
            with _lock:
                self._engine.active.append(self)
                _IN_FLIGHT[0] += 1

    def _advance(self) -> None:
        """Post the next recorded round (its local work first, its overlapped work after);
        after the last, the tail, and done."""
        i = self._next
        steps = self._steps
        if i < len(steps):
            local, recvs, sends, during = steps[i]
            for fn, a, b in local:
                fn(a, b)
            comm, tag = self._engine.comm, self._ctx.tag
            reqs = [comm.Irecv(spec, peer, tag) for spec, peer in recvs]
            for spec, peer in sends:
                reqs.append(comm.Isend(spec, peer, tag))
            for fn, a, b in during:
                fn(a, b)
            self._reqs = reqs
            self._next = i + 1
            return
        for fn, a, b in self._tail:
            fn(a, b)
        self._reqs = _NO_REQS
        self.done = True

    def _statuses(self) -> list[MPI.Status]:
        if self._all_statuses and self._next:
            return self._all_statuses[self._next - 1]
        return super()._statuses()

    def Wait(self, status: MPI.Status | None = None) -> bool:
        """As :meth:`ScheduleRequest.Wait`; a plan of one round, posted, with nothing in flight
        anywhere (under ``MPI_THREAD_MULTIPLE``: nothing else needs progress) sleeps in
        ``Waitall`` on its round and does its tail here, without the general machinery."""
        if (self._listed or self._inactive or _IN_FLIGHT[0] or _threads._level != _MULTIPLE
                or not self._claim.acquire(blocking=False)):
            return ScheduleRequest.Wait(self, status)
        try:
            if not self.done:
                reqs = self._reqs
                try:
                    _WAITALL(reqs, st := self._all_statuses[0])
                except MPI.Exception as exc:  # kept; raised below once complete
                    self._note(exc, st)
                    settle(reqs)
                for fn, a, b in self._tail:
                    fn(a, b)
                self._reqs = _NO_REQS
                self.done = True
        finally:
            self._claim.release()
            if _WAITERS[0]:
                _notify()
        if self._error is not None or status is not None:
            self._complete(status)  # sets status, raises the error
            return True
        self._inactive = True
        self.held = None
        return True


class Template:
    """A compiled blocking plan made reusable for other buffers of the same layout: what a
    call the front door does not hold (new arrays at every call: ``Allreduce(np.ones(n),
    out)``, a view made anew of a new base, a list spec of new arrays) replays instead of
    parsing its arguments and running its schedule's generator.

    It is made from a :class:`BlockingRunner` whose call's buffer arguments were ``bufs``
    (numpy arrays, contiguous, none overlapping another).  Every array of the runner's compiled
    steps (:meth:`BlockingRunner._compile`) that lies in one of ``bufs`` is recorded as a
    byte range of it (1-D, contiguous, as every view the parse makes is); the others (the
    plan's scratch) are kept.  :meth:`bind` makes the same steps for new buffers: the same
    views, at the same byte offsets, of each new buffer.  The front door uses a template only
    for a call whose key (:func:`mpicoll.backends.frontdoor.shape_of`) equals the template's
    but for the buffers' identities and addresses: the same collective, ``algorithm=``,
    counts, datatypes, ops and root, buffers of the same type, dtype, shape, strides and
    flags.  Every check of the parse depends on those alone but one (send and receive
    buffers that overlap): :meth:`bind` refuses buffers whose memory may overlap, and the
    call is parsed (and so checked) as any other.  So the parse would accept the call and
    make the same schedule (the algorithm's choice reads only what the key holds), with
    views at the same offsets of the new buffers.

    Raises (the constructor): :class:`NoTemplateError` if the steps hold anything else than the
    objects listed in :func:`_constant` or arrays other than numpy's own (a derived
    datatype's typed views)."""

    __slots__ = ("_bind", "_replayed", "counts", "model", "record", "source")

    def __init__(self, source: BlockingRunner, bufs: Sequence[np.ndarray]) -> None:
        fast = source._fast
        if fast is None or source._replayed is None or type(fast) is not tuple:
            raise NoTemplateError("not compiled")
        ranges = []
        for b in bufs:
            if type(b) is not np.ndarray or not (b.flags.c_contiguous or b.flags.f_contiguous):
                raise NoTemplateError("buffer")
            lo = b.__array_interface__["data"][0]
            ranges.append((lo, lo + b.nbytes))
        for i, (lo, hi) in enumerate(ranges):  # no two buffers overlap (each view is in one)
            if any(lo < end and start < hi for start, end in ranges[i + 1:]):
                raise NoTemplateError("overlap")
        consts: list[Any] = []
        views: dict[tuple[int, int, int, Any], str] = {}
        lines: list[str] = []

        def view(a: np.ndarray) -> str | None:
            if not a.size:
                return None  # no byte of it is read or written: kept
            at = a.__array_interface__["data"][0]
            k = next((i for i, (lo, hi) in enumerate(ranges) if lo <= at < hi), -1)
            if k < 0:
                return None  # the plan's scratch
            lo, hi = ranges[k]
            if a.ndim != 1 or a.strides[0] != a.itemsize or at + a.nbytes > hi:
                raise NoTemplateError("view")
            off, isz = at - lo, a.itemsize
            b = bufs[k]
            if off % isz or b.nbytes % isz:
                raise NoTemplateError("offset")
            start, stop = off // isz, off // isz + a.size
            spot = (k, start, a.size, a.dtype)
            if spot not in views:
                if a.dtype != b.dtype:  # another dtype (Bcast's bytes): through the bytes
                    consts.append(a.dtype)
                    how = (f"b{k}.reshape(-1, order='A').view(np.uint8)"
                           f".view(c[{len(consts) - 1}])[{start}:{stop}]")
                elif b.ndim == 1:
                    how = f"b{k}[{start}:{stop}]"
                else:
                    how = f"b{k}.reshape(-1, order='A')[{start}:{stop}]"
                name = views[spot] = f"v{len(views)}"
                lines.append(f"    {name} = {how}")
            return views[spot]

        def expr(o: Any) -> str:
            t = type(o)
            if t is tuple:
                return "(" + "".join(expr(x) + ", " for x in o) + ")"
            if t is list:
                return "[" + ", ".join(expr(x) for x in o) + "]"
            if t is np.ndarray:
                name = view(o)
                if name is not None:
                    return name
            elif type(getattr(o, "__self__", None)) is np.ndarray:  # b.__setitem__
                name = view(o.__self__)
                if name is not None:
                    return f"{name}.{o.__name__}"
            elif not _constant(o):
                raise NoTemplateError(t.__name__)
            consts.append(o)
            return f"c[{len(consts) - 1}]"

        body = expr(fast)
        args = ", ".join(f"b{k}" for k in range(len(bufs)))
        src = "\n".join([f"def bind({args}):", *lines, f"    return {body}"])
        scope: dict[str, Any] = {"c": tuple(consts), "np": np}
        exec(src, scope)  # one function per template: the views and tuples in one go
        self._bind: Callable[..., tuple[Any, ...]] = scope["bind"]
        self.source = source
        #: the cost model an ``auto`` source chose its algorithm with (None: named)
        self.model = source.model
        self.counts = source._replayed.counts
        #: the traffic record of the calls :meth:`run` replays (made at its first)
        self._replayed: Replayed | None = None
        #: the front door's fresh-buffers record of this template (made at its first
        #: :meth:`run`: :func:`mpicoll.backends.frontdoor.fresh_of`; False: none can be)
        self.record: Any = None

    def bind(self, bufs: Sequence[np.ndarray], parse: Callable[..., Call],
             args: tuple[Any, ...]) -> BlockingRunner | None:
        """A runner of the template's kind for the call ``args`` on ``bufs`` (its buffers, in
        the order of the template's), its plan already compiled and its call parsed only when
        a run needs it (``parse(*run_args)``); None if two of ``bufs`` may overlap (the call
        must then be parsed: the parse refuses aliased buffers)."""
        if len(bufs) > 1 and _may_overlap(bufs):
            return None
        return self._runner(self._bind(*bufs), parse, args, True)

    def _runner(self, fast: tuple[Any, ...], parse: Callable[..., Call], args: tuple[Any, ...],
                tracked: bool) -> BlockingRunner:
        src = self.source
        run = _clone(type(src))(src)
        run._call = None
        run._parse = parse
        run._args = args
        run._runs = 2
        run._fast = fast
        run._replayed = src.engine.traffic.track(self.counts) if tracked else None
        return run

    def run(self, bufs: Sequence[np.ndarray], parse: Callable[..., Call],
            args: tuple[Any, ...], tag: int) -> bool:
        """Run the call ``args`` once on ``bufs`` on ``tag`` without making a runner: the
        replay of a call of new buffers that the front door does not keep (its views made,
        then the template's replay run on them: no runner copied, no traffic record made and
        dropped per call; the call parsed only for an error's message).  False, having done
        nothing, where :meth:`bind` must serve it instead (buffers that may overlap, a p2p
        schedule in flight, a local truncation to raise).

        Raises: as the runner's replay would (the first MPI error, with the collective and
        the peer)."""
        src = self.source
        if _IN_FLIGHT[0] or src._truncated is not None or (len(bufs) > 1
                                                            and _may_overlap(bufs)):
            return False
        engine = src.engine
        if engine._refused:
            engine._drain(tag)
        fast = self._bind(*bufs)
        failed = src._go(engine.comm, tag, *fast)
        rec = self._replayed
        if rec is None:
            rec = self._replayed = engine.traffic.track(self.counts)
        rec.runs += 1
        if failed is not None:
            self.fail(parse, fast, failed, args)
        return True

    def fail(self, parse: Callable[..., Call], fast: tuple[Any, ...], failed: Any,
             args: tuple[Any, ...]) -> None:
        """Raise the MPI error ``failed`` of a run of the call ``args`` on the bound steps
        ``fast``, as that call's runner would (the collective and the peer named)."""
        self._runner(fast, parse, args, False)._raise(failed, args)

    def inline(self, bufs: Sequence[str], parse: Callable[..., Call]
               ) -> tuple[str, list[str], dict[str, Any]] | None:
        """:meth:`run` as code for the front door to write into a fresh-buffers record
        (:func:`~mpicoll.backends.frontdoor.fresh_of`), the buffers named ``bufs``:
        ``(guard, body, names)``; ``guard`` is true where :meth:`run` must serve the call
        instead (a schedule in flight, a refused call's messages to drain, buffers that may
        overlap: a view, or one array passed twice); ``body`` binds and replays (it reads
        ``tag`` and ``args``, sets ``out``); ``names`` the objects they read.  None before
        the first :meth:`run` or for a plan with a local truncation to raise."""
        if self._replayed is None or self.source._truncated is not None:
            return None
        guard = "X_IN_FLIGHT[0] or X_ENGINE._refused"
        if len(bufs) == 2:
            guard += f" or {bufs[0]}.base is not None or {bufs[1]}.base is not None " \
                     f"or {bufs[0]} is {bufs[1]}"
        elif len(bufs) > 2:
            guard += f" or X_OVERLAP(({', '.join(bufs)},))"
        body = [f"fast = X_BIND({', '.join(bufs)})",
                "failed = X_SOURCE._go(X_COMM, tag, *fast)",
                "X_REPLAYED.runs += 1",
                "if failed is not None: X_TEMPLATE.fail(X_PARSE, fast, failed, args)",
                "out = None"]
        src = self.source
        names = {"X_IN_FLIGHT": _IN_FLIGHT, "X_ENGINE": src.engine, "X_OVERLAP": _may_overlap,
                 "X_BIND": self._bind, "X_SOURCE": src, "X_COMM": src.engine.comm,
                 "X_REPLAYED": self._replayed, "X_TEMPLATE": self, "X_PARSE": parse}
        return guard, body, names


def _may_overlap(bufs: Sequence[np.ndarray]) -> bool:
    """Whether two of ``bufs`` (contiguous: their layout is a template's) may share memory
    (their byte ranges meet, or one has no address mpi4py can read: the parse decides).
    Arrays that own their memory share none with another (two distinct ones never do)."""
    if len(bufs) == 2:
        a, b = bufs
        if a.base is None and b.base is None:
            return a is b
    try:
        spans = [(at := int(_ADDRESS(b)), at + b.nbytes) for b in bufs]
    except Exception:
        return True
    for i in range(len(spans) - 1):
        lo, hi = spans[i]
        for j in range(i + 1, len(spans)):
            if lo < spans[j][1] and spans[j][0] < hi:
                return True
    return False


#: the :attr:`_Runner.model` of a runner whose algorithm was named (never chosen again)
NAMED: Any = object()


class NoTemplateError(Exception):
    """A compiled plan that :class:`Template` cannot make reusable (the reason)."""


_ADDRESS = MPI.Get_address
_CLONES: dict[type, Callable[[Any], Any]] = {}


def _clone(cls: type) -> Callable[[Any], Any]:
    """A function copying a runner of ``cls`` into a new one: every slot (its own and its
    bases') but those :meth:`Template.bind` sets, made once per class (one function of plain
    attribute copies, no loop over names)."""
    out = _CLONES.get(cls)
    if out is None:
        names = [n for c in cls.__mro__ for n in getattr(c, "__slots__", ())
                 if n not in ("_args", "_call", "_parse", "_runs", "_fast", "_replayed")]
        src = "\n".join(["def clone(src):", "    run = new(cls)",
                         *[f"    run.{n} = src.{n}" for n in names], "    return run"])
        scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
        exec(src, scope)
        out = _CLONES[cls] = scope["clone"]
    return out


def _constant(o: Any) -> bool:
    """What a compiled step may hold that is the same for every call of a template: kinds,
    counts and peers, ``...``, datatypes, ops and their ``Reduce_local``, statuses, numpy's
    reduction loops (:func:`~mpicoll.algorithms.schedule.numpy_reduction`), dtypes."""
    if type(o) in _CONSTANTS:
        return True
    if type(o) is partial:
        return (o.func is _ufunc_reduce and not o.keywords
                and all(_constant(a) for a in o.args))
    owner = getattr(o, "__self__", None)
    return type(owner) is MPI.Op or (isinstance(o, np.ufunc))


_CONSTANTS = frozenset({str, int, bool, type(None), type(Ellipsis), MPI.Datatype, MPI.Status,
                        MPI.Op, np.dtype, type(np.dtype("f8"))})


_WAITALL = MPI.Request.Waitall
#: what the written-out replays (:func:`_straight_lines`) read besides their plan
_REPLAY_GLOBALS = {"MPI": MPI, "WAITALL": _WAITALL, "SETTLE": settle}
_refcount = sys.getrefcount
#: references to a runner's last request when only the runner holds it: its attribute, the
#: caller's local name and getrefcount's argument (CPython)
_UNHELD = 3
#: the pool needs exact reference counts: CPython with its GIL (a free-threaded build defers
#: some counts)
_POOLED = (sys.implementation.name == "cpython"
           and not sysconfig.get_config_var("Py_GIL_DISABLED"))
#: the requests of a finished run (never appended to)
_NO_REQS: list[MPI.Request] = []
#: how a replayed blocking round posts its messages (see BlockingRunner._compile)
_SENDRECV, _SEND, _RECV, _GENERAL = "sendrecv", "send", "recv", "general"
_STARTALL = MPI.Prequest.Startall
_MULTIPLE = MPI.THREAD_MULTIPLE


def _round_peers(kind: str, msgs: tuple[Any, ...]) -> list[int]:
    """The peers this rank receives from in a compiled blocking round (for an error)."""
    if kind is _SENDRECV:
        return [msgs[3]]
    if kind is _RECV:
        return [msgs[1]]
    if kind is _GENERAL:
        return [peer for _, peer in msgs[0]]
    return []


def _traffic_of(plan: Plan) -> tuple[int, ...]:
    tr = plan.traffic
    return (tr["messages_sent"], tr["messages_recv"], tr["bytes_sent"], tr["bytes_recv"],
            tr["inter_bytes_sent"], plan.rounds)
