"""The hand-rolled backend: every collective built from MPI point-to-point messages.

Each call picks an algorithm from :mod:`mpicoll.registry` (``algorithm=`` on the call,
``MPICOLL_<COLLECTIVE>_ALGORITHM`` in the environment, or ``"auto"``), and runs its schedule on
the MPI engines of :mod:`mpicoll.engine`: blocking methods run it to completion, ``I...``
methods return a :class:`~mpicoll.engine.ScheduleRequest` that advances it on
``Test``/``Wait``.

Isolation (as ``mpi4py.util.pkl5.Intracomm`` does): the backend runs on a private ``Dup`` of
the user's communicator, so user point-to-point traffic, even with ``ANY_SOURCE``/``ANY_TAG``,
never meets it.  Every collective call takes a fresh tag (1, 2, ... wrapping at
``tag_ub``), so any number of outstanding ones never cross-match; a persistent one holds a tag
above ``tag_ub`` until its ``Free``; blocking calls take a fresh tag too.

That duplicate lives until :meth:`P2P.Free` (collective) releases it, or until the end of a
``with mpicoll.p2p(comm) as c:`` block, which calls ``Free``.  Nothing frees it behind your
back (``MPI_Comm_free`` is collective, so it is never called from a garbage-collector
finalizer): a program that creates many backends must free them, or MPI runs out of
communicator context ids (MPICH has a few thousand).

Environment (read once, when the backend is made, validated there and agreed across the
ranks; see :mod:`mpicoll.backends.env`): ``MPICOLL_<COLLECTIVE>_ALGORITHM``,
``MPICOLL_SEGMENT_SIZE`` and ``MPICOLL_RANKS_PER_NODE``.

A call goes check-and-parse (:meth:`Collectives._call`, :mod:`mpicoll.backends.args`) ->
select (:meth:`P2P.select`, once) -> engine (:class:`~mpicoll.engines.mpi.Engine`), the chosen
algorithm handed to the engine beside the :class:`~mpicoll.engines.call.Call`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from mpi4py import MPI

from ..algorithms import registry
from ..algorithms.registry import RestrictionError
from ..engines import threads as _threads
from ..engines.mpi import CompletedRequest, Engine, Traffic, check_thread
from ..engines.plan import (
    NAMED,
    BlockingRunner,
    NonblockingRunner,
    NoTemplateError,
    Plan,
    PlanRequest,
    Template,
    compile_plan,
)
from ..model import alphabeta
from .args import PARSERS, Call
from .base import Collectives
from .checked import agree_on_construction
from .env import algorithm_var
from .frontdoor import fresh_of
from .objects import P2PObjects

__all__ = ["P2P", "ZERO_SIZE_COLLECTIVES", "moves_nothing", "p2p"]

#: auto's choices a backend remembers (per model; see P2P.select)
_CHOSEN = 1024

#: Tags wrap below this (MPI guarantees TAG_UB >= 32767).
TAG_WINDOW = 32767


class OutOfCommunicators(MPI.Exception):
    """``comm.Dup()`` failed making a p2p backend: MPI has run out of communicators (MPICH has
    about 2000 context ids).  The message says how to release them."""

    def __init__(self, error_class: int, detail: str) -> None:
        super().__init__(error_class)
        self.detail = detail

    def __str__(self) -> str:
        return ("mpicoll.p2p: MPI could not duplicate the communicator, most likely because it "
                "ran out of communicators: every p2p backend owns a Dup of its communicator "
                "until it is freed; call backend.Free() on backends you no longer need, or use "
                "`with mpicoll.p2p(comm) as c: ...` (MPI said: "
                + self.detail.splitlines()[0] + " ... " + self.detail.splitlines()[-1] + ")")


def node_map(comm: MPI.Comm, k: int | None = None) -> tuple[int, ...]:
    """Node id of every rank of ``comm`` (collective; computed once per backend).

    ``k`` (``$MPICOLL_RANKS_PER_NODE``) emulates nodes of k consecutive ranks (for testing on
    one machine); otherwise ranks sharing memory (``Split_type(COMM_TYPE_SHARED)``) form a
    node, numbered by their lowest rank.
    """
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
            instead of truncating or hanging; the lower-case object methods compare the
            method, root, op (predefined by name, a Python callable by its qualified name)
            and ``algorithm=`` (see :class:`~mpicoll.backends.objects._Front`).

    Raises:
        ValueError: ``$MPICOLL_SEGMENT_SIZE`` or ``$MPICOLL_RANKS_PER_NODE`` is not a positive
            integer, a ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` names no algorithm, ``$MPICOLL_CHECK``
            is not an on/off word, or ``tag_ub`` is out of range, on any rank (the ranks
            exchange that, their check flags and their environment in one small allgather
            before the ``Dup``; the bad rank raises its own error, the others name it).
        MismatchError: the ranks' check flags (``check=`` / ``$MPICOLL_CHECK``) differ, or
            their ``$MPICOLL_SEGMENT_SIZE``, ``$MPICOLL_RANKS_PER_NODE`` or
            ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` differ (the message names the variable and
            the values).
        ThreadLevelError: called from a thread MPI's thread level does not allow (see
            :func:`mpicoll.engines.mpi.check_thread`), before any message.

    Attributes:
        traffic: messages and bytes this rank sent and received (see :class:`Traffic`).
    """

    name = "p2p"
    _wire_env = True

    def __init__(self, comm: MPI.Comm, *, tag_ub: int | None = None,
                 check: bool | None = None) -> None:
        super().__init__(comm, check=check)
        check_thread()  # a thread MPI's thread level does not allow: refused before any message
        limit = comm.Get_attr(MPI.TAG_UB) or TAG_WINDOW
        tag_ub = min(TAG_WINDOW, limit) if tag_ub is None else tag_ub
        error = self.settings.error
        if error is None and not 1 <= tag_ub <= limit:
            error = ValueError(f"tag_ub: must be in [1, {limit}], got {tag_ub}")
        # every rank learns of a refused rank, differing check flags or a differing
        # environment, before the Dup
        agree_on_construction(comm, self.name, self.settings, error=error, p2p=True)
        #: $MPICOLL_<COLLECTIVE>_ALGORITHM, resolved once (the names were checked in read())
        self._forced = {c: registry.get(c, n) for c, n in self.settings.algorithms.items()}
        #: algorithm= names already looked up: (collective, name) -> algorithm
        self._named: dict[tuple[str, str], registry.Algorithm] = {}
        #: auto's choices for the model ``_chosen_model``: (collective, nbytes, commutative,
        #: count, in_place, uniform) -> algorithm (at most _CHOSEN of them)
        self._chosen: dict[tuple[Any, ...], registry.Algorithm] = {}
        self._chosen_model: Any = None
        #: each collective's parser on this communicator (a template's runners parse late)
        self._parsers: dict[str, Callable[..., Call]] = {}
        try:  # the Dup and node_map's Split_type each need a context id
            self._comm = comm.Dup()
            self.nodes = node_map(self._comm, self.settings.ranks_per_node)
        except MPI.Exception as exc:  # MPICH: ~2000 context ids ("Too many communicators")
            raise OutOfCommunicators(exc.Get_error_class(), str(exc)) from exc
        self._check_comm = self._comm
        self._engine = Engine(self._comm, tag_ub, self.nodes, self.settings.segment_bytes,
                              tag_limit=limit)
        self._take_tag = self._engine.take_tag  # type: ignore[method-assign]  # one call less

    @property
    def traffic(self) -> Traffic:
        return self._engine.traffic

    def _checked_call(self, collective: str, nonblocking: bool, algorithm: Any,
                      args: tuple[Any, ...], tag: int | None = None) -> Any:
        """Checked mode's agreement sends messages too: refuse a thread MPI does not allow
        first (the unchecked path meets the same check on entering the engine)."""
        check_thread()
        return super()._checked_call(collective, nonblocking, algorithm, args, tag)

    def _agree_object(self, method: str, error: Exception | None, algorithm: Any = None, *,
                      root: int | None = None, op: Any = None) -> None:
        """As :meth:`_checked_call`: a thread MPI does not allow is refused first.  The
        agreement takes a tag of its own, as every buffer call does before its agreement, so
        the ranks' tag counters stay equal when one rank's object call meets another rank's
        buffer call (both refused)."""
        check_thread()
        tag = self._take_tag()
        try:
            super()._agree_object(method, error, algorithm, root=root, op=op)
        except BaseException:
            self._refuse(tag)
            raise

    def _segment_field(self) -> int:
        return self.settings.segment_bytes

    def select(self, call: Call, algorithm: str | None) -> registry.Algorithm:
        """The algorithm this call runs: ``algorithm`` if given, else
        ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` (as read when the backend was made), else ``auto``
        (:func:`mpicoll.algorithms.registry.choose`).  A name is looked up in the registry
        once per backend; its restrictions are checked at every call.  ``auto``'s choice is
        remembered per (collective, nbytes, commutative, count, in-place, uniform) for the
        model in use (:func:`mpicoll.model.use` forgets them).

        Raises:
            ValueError: an unknown name (listing the valid ones).
            RestrictionError: an algorithm whose restrictions the call breaks; for a name from
                the environment the message starts with the variable.
        """
        where = ""
        if algorithm is None:
            alg = self._forced.get(call.collective)
            where = f"{algorithm_var(call.collective)}={alg.name!r}: " if alg else ""
        elif algorithm == "auto":
            alg = None
        else:
            alg = self._named.get((call.collective, algorithm))
            if alg is None:
                alg = self._named[call.collective, algorithm] = registry.get(call.collective,
                                                                            algorithm)
        if alg is None:  # auto: the choice depends on these values and the model alone
            model = alphabeta.current()
            if model is not self._chosen_model:
                self._chosen.clear()
                self._chosen_model = model
            key = (call.collective, call.nbytes, call.commutative, call.count, call.in_place,
                   call.uniform)
            alg = self._chosen.get(key)
            if alg is None:
                if len(self._chosen) >= _CHOSEN:
                    self._chosen.clear()
                alg = self._chosen[key] = registry.choose(
                    call.collective, self.size, call.nbytes, commutative=call.commutative,
                    count=call.count, in_place=call.in_place, uniform=call.uniform)
            return alg
        if alg.restrictions:
            why = alg.why_not(self.size, commutative=call.commutative, count=call.count,
                              in_place=call.in_place, uniform=call.uniform)
            if why is not None:
                raise RestrictionError(where + why)
        return alg

    _tagged = True

    def _take_tag(self) -> int:
        """The next call's tag (:meth:`Engine.take_tag`; bound to it per backend)."""
        return self._engine.take_tag()

    def _refuse(self, tag: int | None) -> None:
        if tag is not None:
            self._engine.refused(tag)

    def _runner(self, call: Call, nonblocking: bool, algorithm: str | None
                ) -> Callable[..., Any]:
        """What runs ``call`` (the front door caches it): the algorithm is selected here, once;
        a cached ``auto`` choice is selected again if :func:`mpicoll.model.use` changed the
        model since."""
        alg = self.select(call, algorithm)
        engine = self._engine
        if moves_nothing(call):
            return _nothing_nonblocking(engine) if nonblocking else _nothing
        if algorithm not in (None, "auto") or (algorithm is None and
                                               call.collective in self._forced):
            if nonblocking:
                return NonblockingRunner(engine, call, alg)
            return BlockingRunner(engine, call, alg)
        model = alphabeta.current()
        if nonblocking:
            return _AutoNonblocking(self, call, algorithm, alg, model)
        return _AutoBlocking(self, call, algorithm, alg, model)

    _templated = True

    def _parser(self, collective: str) -> Callable[..., Call]:
        parse = self._parsers.get(collective)
        if parse is None:
            parse = self._parsers[collective] = partial(PARSERS[collective], self.size,
                                                        self.rank)
        return parse

    def _fresh(self, collective: str, algorithm: Any, args: tuple[Any, ...], t: Any,
               parse: Callable[..., Any]) -> None:
        """Make ``t``'s fresh-buffers record (:func:`~mpicoll.backends.frontdoor.fresh_of`,
        once per template) the one of ``collective``: the next call of new buffers of this
        layout runs the template without its key; where :meth:`Template.run` declines (the
        buffers may overlap, a schedule in flight) the call goes the parse's way on its
        tag, as it would from the key."""
        record = t.record
        if record is None:
            run = t.run

            def serve(args: tuple[Any, ...], tag: int, *bufs: Any) -> None:
                if run(bufs, parse, args, tag):
                    return None
                return self._parse_and_run(collective, False, algorithm, args, tag, None)

            guard = (None if t.model is NAMED else
                     ("F_MODEL._current is not F_CHOSEN",
                      {"F_MODEL": alphabeta, "F_CHOSEN": t.model}))
            record = t.record = fresh_of(args, algorithm, serve, self.front_door,
                                         self._take_tag, self._refuse, guard,
                                         partial(t.inline, parse=parse)) or False
        if record:
            self.front_door.fresh[collective] = record

    def _template(self, layout: tuple[Any, ...]) -> Template | None:
        """The template of ``layout`` (made now from its first runner, compiled now if it
        was not yet), or None (none can be made, or the model changed since its ``auto``
        choice)."""
        templates = self.front_door.templates
        t = templates.get(layout)
        if t is None:
            return None
        if type(t) is tuple:  # the layout's first runner: made a template now
            source, bufs, _ = t
            t = None
            if (isinstance(source, BlockingRunner)
                    and _threads._thread_level() == MPI.THREAD_MULTIPLE):
                if source._fast is None:  # compiled now, as its second run would
                    source._fast = source._compile()
                    source._runs = 2
                try:
                    t = Template(source, bufs)
                except NoTemplateError:
                    t = None
            templates[layout] = t
            if t is None:
                return None
        if isinstance(t.source, _AutoBlocking) and t.model is not alphabeta.current():
            del templates[layout]  # the model changed: auto may choose another algorithm
            return None
        return t

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...], tag: int | None = None) -> Any:
        """Run a parsed call once, as its runner's first run would (no runner made: a call
        the front door does not keep, checked mode's calls)."""
        alg = self.select(call, algorithm)
        engine = self._engine
        if moves_nothing(call):
            return CompletedRequest(engine) if nonblocking else None
        if nonblocking:
            return engine.start(call, alg, tag)
        engine.run(call, alg, tag)
        return None

    def _persistent(self, call: Call, algorithm: str | None, info: MPI.Info,
                    args: tuple[Any, ...]) -> PlanRequest:
        """A compiled plan (:mod:`mpicoll.engines.plan`): the algorithm selected, the schedule
        run once with a recording context, its scratch allocated and a tag reserved, all
        now; ``Start`` replays it."""
        alg = self.select(call, algorithm)
        e = self._engine
        if moves_nothing(call):  # a plan of no rounds: Start completes it
            plan = Plan(call.collective, alg.name, call.datatype, [], (), 0, 0,
                        dict.fromkeys(_TRAFFIC_KEYS, 0), call.dtype)
        else:
            plan = compile_plan(call, alg, self.rank, self.size, e.nodes, e.segment_bytes)
        return PlanRequest(e, plan, e.reserve_tag())

    def Free(self) -> None:
        """Release the private duplicate of ``comm`` (collective: every rank calls it; a second
        call does nothing).  Outstanding requests are completed first.  Leaving a
        ``with mpicoll.p2p(comm) as c:`` block calls it; nothing else does."""
        if self._comm != MPI.COMM_NULL:
            for _, run, _ in list(self.front_door.entries.values()):
                # a replayed I-form of one round is not in the engine's list in flight
                previous = getattr(run, "_previous", None)
                if previous is not None and not previous.done:
                    previous.Wait()
            self._engine.wait_for(self._engine.idle)
            self.front_door.clear()
            self._comm.Free()
            self._freed = True


#: the collectives whose ``Call.nbytes`` (the bytes of the message signature, which MPI
#: requires to agree across ranks: the count of Bcast and the reductions, the per-rank count
#: of Scatter/Gather/Allgather/Alltoall/Reduce_scatter_block, the sum of the counts every
#: rank passes to Allgatherv and Reduce_scatter) is 0 on every rank alike when it is on one
ZERO_SIZE_COLLECTIVES = frozenset({"bcast", "scatter", "gather", "reduce", "allreduce",
                             "reduce_scatter_block", "reduce_scatter", "allgather",
                             "allgatherv", "alltoall", "scan", "exscan"})
_TRAFFIC_KEYS = ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv",
                 "inter_bytes_sent")


def moves_nothing(call: Call) -> bool:
    """True if ``call`` moves no byte on any rank, decided from values MPI requires every rank
    to agree on, so every rank decides alike: the collectives of :data:`ZERO_SIZE_COLLECTIVES` with
    ``nbytes == 0``.  Never Barrier (it synchronises), nor Scatterv, Gatherv, Alltoallv and
    Alltoallw (a rank's own counts may be 0 while another's are not).  MPI completes such a
    call without a message; so does p2p (a blocking call returns at once, an I-form returns
    a complete request, a persistent one a plan of no rounds)."""
    return call.nbytes == 0 and call.collective in ZERO_SIZE_COLLECTIVES


def _nothing(tag: int | None = None, *_: Any) -> None:
    """The runner of a blocking call that moves nothing (:func:`moves_nothing`)."""


def _nothing_nonblocking(engine: Engine) -> Callable[..., CompletedRequest]:
    """The runner of a non-blocking call that moves nothing: a complete request each run."""
    def run(tag: int | None = None, *_: Any) -> CompletedRequest:
        return CompletedRequest(engine)

    return run


def _reselect(runner: _AutoBlocking | _AutoNonblocking, args: tuple[Any, ...]) -> None:
    """An ``auto`` call's runner: selected again (and its plan dropped) if
    :func:`mpicoll.model.use` changed the model since it was selected (``args``: the run's
    arguments, parsed now by a runner made from a template).  The runner checks the model at
    each run (:meth:`~mpicoll.engines.plan.BlockingRunner.__call__`)."""
    runner.free()
    runner.model = alphabeta.current()
    runner.algorithm = runner.backend.select(runner.call_of(args), runner.name)


class _AutoBlocking(BlockingRunner):
    """A blocking ``auto`` call's runner (see :func:`_reselect`)."""

    __slots__ = ("backend", "name")

    def __init__(self, backend: P2P, call: Call, name: str | None, alg: registry.Algorithm,
                 model: Any) -> None:
        super().__init__(backend._engine, call, alg)
        self.backend, self.name, self.model = backend, name, model

    reselect = _reselect


class _AutoNonblocking(NonblockingRunner):
    """A non-blocking ``auto`` call's runner (see :func:`_reselect`)."""

    __slots__ = ("backend", "name")

    def __init__(self, backend: P2P, call: Call, name: str | None, alg: registry.Algorithm,
                 model: Any) -> None:
        super().__init__(backend._engine, call, alg)
        self.backend, self.name, self.model = backend, name, model

    reselect = _reselect


def p2p(comm: MPI.Comm | None = None, **kw: Any) -> P2P:
    """The hand-rolled backend on ``comm`` (default ``MPI.COMM_WORLD``); collective (it dups
    ``comm``; ``Free()`` or a ``with`` block releases the duplicate).  Keyword arguments go to
    :class:`P2P`."""
    return P2P(MPI.COMM_WORLD if comm is None else comm, **kw)
