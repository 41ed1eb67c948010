"""The collective API both backends share: the methods of ``mpi4py.MPI.Comm``.

Every method goes through one front door, :meth:`Collectives._call`: its arguments are checked
and parsed once by :mod:`mpicoll.backends.args` (raising ``TypeError`` or ``ValueError`` before
any message) into a :class:`~mpicoll.engines.call.Call`, which goes to the backend's ``_runner``
(native: the mpi4py method; p2p: select the algorithm once, then the engine).  Checked mode
(:mod:`mpicoll.backends.checked`) adds the ranks' agreement in between.  The buffer specs,
``MPI.IN_PLACE`` rules, defaults and argument order are mpi4py's, so existing mpi4py code
switches backend by changing one line.  ``algorithm=`` picks a hand-rolled algorithm on the p2p
backend (see :mod:`mpicoll.algorithms.registry`); the native backend accepts only
``None``/``"native"`` there.  The environment is read once, when a backend is made
(:mod:`mpicoll.backends.env`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Self

import numpy as np
from mpi4py import MPI

from ..engines.call import Call
from ..engines.mpi import Waitall
from .args import PARSERS
from .buffers import ARG_ERRORS, is_in_place, parse
from .checked import CheckedMode, MismatchError, check_algorithm_type
from .env import Settings, read
from .frontdoor import (
    MISS,
    PENDING,
    FrontDoor,
    UncacheableError,
    holds,
    key_and_layout,
    key_of,
    unexported,
)

__all__ = ["Collectives", "MismatchError", "NotProvidedError"]

#: the public methods of mpi4py's communicators (:class:`_NotProvided` on :class:`Collectives`)
_MPI_METHODS = frozenset(n for cls in (MPI.Intracomm, MPI.Topocomm, MPI.Cartcomm)
                         for n in dir(cls) if not n.startswith("_"))


def _by_value(counts: Any) -> Any:
    """Counts given as a 1-d numpy array, as a list: the front door keys a list by its values
    (an array by its identity: a refilled one would hit a stale entry)."""
    return counts.tolist() if type(counts) is np.ndarray and counts.ndim == 1 else counts


def _holding(request: Any, args: tuple[Any, ...]) -> Any:
    """A p2p request, holding exports of its call's mmaps until it is complete (the cache
    holds none of them: see :func:`~mpicoll.backends.frontdoor.holds`)."""
    held = holds(args)
    if held:
        request.held = held
    return request


class NotProvidedError(NotImplementedError, AttributeError):
    """A method of ``mpi4py.MPI.Comm`` that mpicoll does not provide (the README's "Not
    provided" list): the message says to call it on the mpi4py communicator.  Also an
    ``AttributeError``, so ``hasattr(backend, name)`` is False."""


class _NotProvided:
    """A method of mpi4py's communicators that mpicoll does not provide (point-to-point,
    one-sided, topologies, neighbourhood collectives, ...): reading it raises
    :class:`NotProvidedError` saying what to call instead.  One such descriptor per name on
    :class:`Collectives` (not a ``__getattr__``, which would slow every attribute read of a
    backend: CPython then routes each through a hook)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        hint = (" (a neighbourhood collective: on a topology communicator from "
                "comm.Create_cart / Create_dist_graph)" if "eighbor" in self.name else "")
        raise NotProvidedError(
            f"mpicoll.{getattr(owner, 'name', 'backend')} does not provide {self.name} (see "
            f"the README's \"Not provided\" list); call comm.{self.name} on the mpi4py "
            f"communicator itself{hint}, e.g. backend.comm.{self.name}(...)"
        )


class Collectives(CheckedMode):
    """Base of :class:`mpicoll.native.Native` and :class:`mpicoll.p2p.P2P`.

    Every method takes mpi4py's buffer specs (any contiguous buffer of a predefined MPI
    datatype, ``[arr, datatype]``, ``[arr, count, datatype]``, vector specs for the v-variants,
    ``MPI.IN_PLACE`` where MPI allows it) and mpi4py's defaults (``root=0``, ``op=MPI.SUM``).
    Blocking methods return None; ``I...`` methods return a request with ``Wait()`` and
    ``Test()`` (``MPI.Request`` on the native backend), usable with :func:`mpicoll.Waitall`.

    Raises (on the calling rank, before any message): ``TypeError`` for a wrong kind of
    argument (not a buffer, unknown datatype, op undefined for the datatype, differing send
    and receive types), ``ValueError`` for a wrong value (root outside [0, p), sizes that do not
    fit, ``MPI.IN_PLACE`` where MPI forbids it, non-contiguous or read-only buffers, aliased
    buffers), :class:`~mpicoll.registry.RestrictionError` for a forced algorithm that cannot
    run, and in checked mode :class:`MismatchError` on every rank when their calls disagree.

    Checked mode (``check=True`` or ``$MPICOLL_CHECK=1``): before each call the ranks compare
    their arguments with one small ``MPI_Allgather`` and all raise :class:`MismatchError` if
    they disagree (see :meth:`~mpicoll.backends.checked.CheckedMode._agree` for what is
    compared), instead of truncating or hanging.

    Backends are context managers: ``with mpicoll.p2p(comm) as c: ...`` calls :meth:`Free` on
    exit (collective for p2p, which frees its duplicate of ``comm``; nothing for native).

    Attributes:
        comm: the user's communicator (an intracommunicator).
        rank, size: this rank and the number of ranks p (also ``Get_rank()``/``Get_size()``).
        name: ``"native"`` or ``"p2p"``.
        settings: the environment as read when the backend was made
            (:class:`~mpicoll.backends.env.Settings`).
    """

    name = "base"
    #: whether the backend reads the variables that change what goes on the wire (p2p)
    _wire_env = False

    def __init__(self, comm: MPI.Comm, *, check: bool | None = None) -> None:
        if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
            raise TypeError(f"comm: expected an mpi4py intracommunicator, got {comm!r}")
        if comm.Is_inter():
            raise TypeError("comm: intercommunicators are not supported")
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        #: the environment, read once (a refused value is raised by the subclass, on every
        #: rank, in the construction-time agreement)
        self.settings: Settings = read(check, p2p=self._wire_env)
        self.check = self.settings.check
        self._check_comm = comm
        #: set by Free (p2p): every later call raises before any MPI call
        self._freed = False
        #: the cache of parsed calls, with its ``hits``/``misses`` counters
        #: (:mod:`mpicoll.backends.frontdoor`)
        self.front_door = FrontDoor()
        self._entries = self.front_door.entries  # read at every call
        self._last = self.front_door.last
        self._fresh_records = self.front_door.fresh

    def __repr__(self) -> str:
        return f"<mpicoll.{self.name} rank {self.rank} of {self.size}>"

    def Get_rank(self) -> int:
        """This rank in ``comm`` (as ``mpi4py.MPI.Comm.Get_rank``)."""
        return self.rank

    def Get_size(self) -> int:
        """The number of ranks of ``comm`` (as ``mpi4py.MPI.Comm.Get_size``)."""
        return self.size

    def Free(self) -> None:
        """Release what the backend owns (see the subclasses)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving a ``with`` block calls :meth:`Free` (collective for p2p: every rank leaves
        the block)."""
        self.Free()

    def _call(self, collective: str, nonblocking: bool, algorithm: Any, *args: Any) -> Any:
        """The front door of every method: check and parse the call once (into a
        :class:`~mpicoll.engines.call.Call`), then hand it to the backend's runner; in
        checked mode the ranks agree on it in between (:mod:`mpicoll.backends.checked`).

        A call whose arguments make the key of an earlier one (see
        :mod:`mpicoll.backends.frontdoor`: the same buffers with the same shape, strides,
        dtype and flags, the same counts, datatype, op, root, in-place and ``algorithm=``)
        reuses that call's parse and runner (on p2p: its algorithm) without checking again:
        every check's answer depends only on what the key holds.  The last call of each
        collective is found without building the key: the same objects, their arrays and
        user ops unchanged (see :data:`~mpicoll.backends.frontdoor.Last`)."""
        # the hot path: the last call of this collective again, with the same objects (every
        # method passes its collective's whole argument list, so the lengths agree; only
        # unchecked calls are cached, and Free empties the cache, so neither needs a test
        # here); the record checks the arguments, then takes the p2p tag and runs the call
        hit = self._last[nonblocking].get(collective)
        if hit is not None:
            out = hit(algorithm, args)
            if out is not MISS:
                return out
        if not nonblocking:  # new buffers of the layout a template last served (p2p)
            hit = self._fresh_records.get(collective)
            if hit is not None:
                out = hit(algorithm, args)
                if out is not MISS:
                    return out
        return self._cached_call(collective, nonblocking, algorithm, args)

    def _cached_call(self, collective: str, nonblocking: bool, algorithm: Any,
                     args: tuple[Any, ...]) -> Any:
        """A call that is not the last call of its collective: looked up in the cache by
        value, else parsed (:meth:`_parse_and_run`)."""
        # p2p: the tag first: a call refused here but accepted on other ranks still consumes
        # it, so the ranks' tag counters stay equal (see Engine.take_tag)
        tag = self._take_tag() if self._tagged else None
        try:
            key: tuple[Any, ...] | None = None
            shape = None
            # then the cache (by value: see mpicoll.backends.frontdoor)
            if algorithm is None or type(algorithm) is str:
                try:
                    if self._templated:  # the key and the layout in one pass
                        key, shape = key_and_layout((collective, nonblocking, algorithm), args)
                    else:
                        key = key_of((collective, nonblocking, algorithm), args)
                except UncacheableError:
                    pass
                else:
                    entry = self._entries.get(key)
                    if entry is not None:
                        door = self.front_door
                        door.hits += 1
                        run = entry[1]
                        if tag is None:
                            out = run(*args)
                        elif nonblocking:
                            out = _holding(run(tag, *args), args)
                        else:
                            out = run(tag, *args)
                        # now the last call of its collective (its record made at its
                        # first hit, after the run: a p2p runner compiles its plan at its
                        # second run, which the record then replays itself)
                        last = entry[2]
                        if last is PENDING:
                            last = door.settle(key, entry, args, algorithm,
                                               self._take_tag if self._tagged else None,
                                               self._refuse)
                        if last is not None:
                            self._last[nonblocking][collective] = last
                        return out
            return self._parse_and_run(collective, nonblocking, algorithm, args, tag, key,
                                       shape)
        except BaseException:
            if tag is not None:
                self._refuse(tag)
            raise

    def _parse_and_run(self, collective: str, nonblocking: bool, algorithm: Any,
                       args: tuple[Any, ...], tag: int | None,
                       key: tuple[Any, ...] | None,
                       shape: tuple[tuple[Any, ...], list[Any]] | None = None) -> Any:
        """A call the cache does not hold (``key``: its key, None if not cacheable; ``shape``:
        its layout where the key was made with it, :func:`key_and_layout`): checked (in
        checked mode: agreed on), parsed, run, and stored under ``key``."""
        if self._freed:
            raise RuntimeError(f"this {self.name} backend was freed")
        if collective == "reduce_scatter" and args[2] is None:  # gather the counts first
            args = (*args[:2], self._recvcounts(args[0], args[1], None, algorithm,
                                                nonblocking), *args[3:])
            key = shape = None  # the gathered counts may differ at the next call
        if self.check:
            return self._checked_call(collective, nonblocking, algorithm, args, tag)
        if algorithm is not None and not isinstance(algorithm, str):
            check_algorithm_type(algorithm)
        door = self.front_door
        door.misses += 1
        run = None
        once = False
        if nonblocking or key is None:
            shape = None
        elif shape is not None:
            # a layout seen before: its compiled plan, for these buffers (p2p)
            t = self._template(shape[0])
            if t is not None:
                parse = self._parser(collective)
                if not door.again(key, args, shape[1][0] if shape[1] else None):
                    # not these buffers' second call in a row: run once, not stored (a
                    # program passing new arrays at every call would fill the cache)
                    if t.run(shape[1], parse, args, tag):
                        self._fresh(collective, algorithm, args, t, parse)
                        return None
                    key, once = None, True
                run = t.bind(shape[1], parse, args)
        if run is None:
            run = self._runner(PARSERS[collective](self.size, self.rank,
                                                   *(args if key is None else unexported(args))),
                               nonblocking, algorithm)
            if shape is not None:
                door.note(shape, run, args)
        if key is not None:
            door.store(key, args, run)
        if once:
            try:
                return run(tag, *args)
            finally:
                run.free()  # type: ignore[union-attr]  # its traffic added up
        if not self._tagged:
            return run(*args)
        if nonblocking:
            return _holding(run(tag, *args), args)
        return run(tag, *args)

    #: the backend's runners take the call's tag first (p2p: ``run(tag, *args)``)
    _tagged = False
    #: the backend makes runners from templates (:meth:`_template`; p2p)
    _templated = False

    def _template(self, layout: tuple[Any, ...]) -> Any:
        """The template of a layout seen before (p2p:
        :class:`~mpicoll.engines.plan.Template`: ``run`` once or ``bind`` a runner for
        other buffers of that layout), or None."""
        return None

    def _fresh(self, collective: str, algorithm: Any, args: tuple[Any, ...], t: Any,
               parse: Callable[..., Any]) -> None:
        """The template ``t`` just served ``args`` (p2p): make it serve the next calls of
        ``collective`` of that layout from its fresh-buffers record."""

    def _parser(self, collective: str) -> Callable[..., Any]:
        """The parser of ``collective``'s arguments on this communicator (a template's
        runner parses only where a run needs it)."""
        return partial(PARSERS[collective], self.size, self.rank)

    def _take_tag(self) -> int | None:
        """The tag of the next call (p2p), taken before its arguments are checked."""
        return None

    def _refuse(self, tag: int | None) -> None:
        """This rank did not run the call of ``tag`` (p2p: its peers' messages on it are
        drained before the tag is used again)."""

    def _runner(self, call: Call, nonblocking: bool, algorithm: str | None
                ) -> Callable[..., Any]:
        """``run(*args)`` (``run(tag, *args)`` where :attr:`_tagged`): what runs this parsed
        call (the backend's; cached by the front door)."""
        raise NotImplementedError

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...], tag: int | None = None) -> Any:
        """Run a parsed call once (checked mode's path)."""
        run = self._runner(call, nonblocking, algorithm)
        return run(tag, *args) if self._tagged else run(*args)

    def _call_init(self, collective: str, algorithm: Any, info: MPI.Info, *args: Any) -> Any:
        """The front door of the persistent (``*_init``) methods: check and parse the call
        (in checked mode the ranks agree on it, as for a non-blocking call), then make the
        backend's persistent request (native: mpi4py's ``MPI.Prequest``; p2p: a compiled plan,
        :class:`~mpicoll.engines.plan.PlanRequest`)."""
        if self._freed:
            raise RuntimeError(f"this {self.name} backend was freed")
        check_algorithm_type(algorithm)
        if not isinstance(info, MPI.Info):
            raise TypeError(f"info: expected an MPI.Info, got {info!r}")
        if self.check:
            try:
                call = PARSERS[collective](self.size, self.rank, *args)
                if call.bounds is not None:  # a spec past its buffer: refused on every rank
                    raise ValueError(call.bounds)
            except (TypeError, ValueError) as exc:
                self._agree(collective, None, exc, algorithm, nonblocking=True)
                raise
            self._agree(collective, call, None, algorithm, nonblocking=True)
        else:
            call = PARSERS[collective](self.size, self.rank, *args)
        return self._persistent(call, algorithm, info, args)

    def _persistent(self, call: Call, algorithm: str | None, info: MPI.Info,
                    args: tuple[Any, ...]) -> Any:
        """The backend's persistent request for a parsed call."""
        raise NotImplementedError

    def _recvcounts(self, sendbuf: Any, recvbuf: Any, recvcounts: Any,
                    algorithm: Any = None, nonblocking: bool = False) -> Any:
        """Reduce_scatter's counts: as given, or every rank's receive count (allgather).

        In checked mode that allgather is the agreement itself (see
        :meth:`~mpicoll.backends.checked.CheckedMode._checked_recvcounts`)."""
        if recvcounts is not None:
            return recvcounts
        if self._freed:
            raise RuntimeError(f"this {self.name} backend was freed")
        if self.check:
            return self._checked_recvcounts(sendbuf, recvbuf, algorithm, nonblocking)
        check_algorithm_type(algorithm)
        if is_in_place(sendbuf):
            raise TypeError("recvcounts: Reduce_scatter with MPI.IN_PLACE needs recvcounts "
                            "(mpi4py: object of type 'NoneType' has no len())")
        try:  # every rank takes part in the allgather, even one whose recvbuf is refused
            count, error = parse(recvbuf, "recvbuf", writable=True).count, None
        except ARG_ERRORS as exc:
            count, error = -1, exc
        mine = np.array([count], dtype=np.int64)
        gathered = np.empty(self.size, dtype=np.int64)
        # non-blocking, completed while progressing every p2p schedule in flight: a peer may be
        # waiting for this rank's outstanding schedule before it joins this allgather
        Waitall([self._check_comm.Iallgather(mine, gathered)])
        counts = [int(c) for c in gathered]
        bad = [r for r, c in enumerate(counts) if c < 0]
        if bad:  # every rank learns why (only on this error path)
            reasons = self._check_comm.allgather(
                None if error is None else f"{type(error).__name__}: {error}")
            if error is not None:
                raise error
            why = "; ".join(f"rank {r}: {reasons[r]}" for r in bad[:4])
            raise MismatchError(
                f"reduce_scatter: recvbuf was refused on rank(s) {bad}; every rank stops ({why})"
            )
        return counts

    def Barrier(self, *, algorithm: str | None = None) -> None:
        """Synchronise all ranks."""
        self._call("barrier", False, algorithm)

    def Ibarrier(self, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Barrier`: returns a request with ``Wait()``/``Test()``."""
        return self._call("barrier", True, algorithm)

    def Bcast(self, buf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Broadcast ``buf`` (any shape, any dtype) from ``root`` to every rank."""
        self._call("bcast", False, algorithm, buf, root)

    def Ibcast(self, buf: Any, root: int = 0, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Bcast`: returns a request with ``Wait()``/``Test()``."""
        return self._call("bcast", True, algorithm, buf, root)

    def Scatter(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Send block i of the root's ``sendbuf`` (p * count elements) to rank i's ``recvbuf``
        (count elements).  ``recvbuf=MPI.IN_PLACE`` at the root keeps its block in place."""
        self._call("scatter", False, algorithm, sendbuf, recvbuf, root)

    def Iscatter(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Scatter`: returns a request with ``Wait()``/``Test()``."""
        return self._call("scatter", True, algorithm, sendbuf, recvbuf, root)

    def Scatterv(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Scatter with per-rank counts and displacements, given at the root as
        ``[arr, (counts, displs), datatype]``; rank i's ``recvbuf`` gets ``counts[i]``."""
        self._call("scatterv", False, algorithm, sendbuf, recvbuf, root)

    def Iscatterv(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Scatterv`: returns a request with ``Wait()``/``Test()``."""
        return self._call("scatterv", True, algorithm, sendbuf, recvbuf, root)

    def Gather(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Collect every rank's ``sendbuf`` (count elements) into block i of the root's
        ``recvbuf`` (p * count).  ``sendbuf=MPI.IN_PLACE`` at the root: its block is in place."""
        self._call("gather", False, algorithm, sendbuf, recvbuf, root)

    def Igather(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Gather`: returns a request with ``Wait()``/``Test()``."""
        return self._call("gather", True, algorithm, sendbuf, recvbuf, root)

    def Gatherv(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Gather with per-rank counts and displacements given at the root."""
        self._call("gatherv", False, algorithm, sendbuf, recvbuf, root)

    def Igatherv(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Gatherv`: returns a request with ``Wait()``/``Test()``."""
        return self._call("gatherv", True, algorithm, sendbuf, recvbuf, root)

    def Reduce(
        self,
        sendbuf: Any,
        recvbuf: Any,
        op: MPI.Op = MPI.SUM,
        root: int = 0,
        *,
        algorithm: str | None = None,
    ) -> None:
        """Reduce every rank's ``sendbuf`` elementwise with ``op`` into the root's ``recvbuf``."""
        self._call("reduce", False, algorithm, sendbuf, recvbuf, op, root)

    def Ireduce(
        self,
        sendbuf: Any,
        recvbuf: Any,
        op: MPI.Op = MPI.SUM,
        root: int = 0,
        *,
        algorithm: str | None = None,
    ) -> Any:
        """Non-blocking :meth:`Reduce`: returns a request with ``Wait()``/``Test()``."""
        return self._call("reduce", True, algorithm, sendbuf, recvbuf, op, root)

    def Allreduce(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> None:
        """Reduce every rank's ``sendbuf`` elementwise with ``op`` into every rank's ``recvbuf``."""
        self._call("allreduce", False, algorithm, sendbuf, recvbuf, op)

    def Iallreduce(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Allreduce`: returns a request with ``Wait()``/``Test()``."""
        return self._call("allreduce", True, algorithm, sendbuf, recvbuf, op)

    def Reduce_scatter_block(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> None:
        """Reduce p * count elements; rank i receives block i (count elements)."""
        self._call("reduce_scatter_block", False, algorithm, sendbuf, recvbuf, op)

    def Ireduce_scatter_block(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Reduce_scatter_block`: returns a request (``Wait``/``Test``)."""
        return self._call("reduce_scatter_block", True, algorithm, sendbuf, recvbuf, op)

    def Reduce_scatter(
        self,
        sendbuf: Any,
        recvbuf: Any,
        recvcounts: Sequence[int] | None = None,
        op: MPI.Op = MPI.SUM,
        *,
        algorithm: str | None = None,
    ) -> None:
        """Reduce sum(recvcounts) elements; rank i receives recvcounts[i] of them.

        ``recvcounts=None`` gathers every rank's receive count first (an allgather, as mpi4py
        does); with ``MPI.IN_PLACE`` the counts must be given."""
        self._call("reduce_scatter", False, algorithm, sendbuf, recvbuf, _by_value(recvcounts),
                   op)

    def Ireduce_scatter(
        self,
        sendbuf: Any,
        recvbuf: Any,
        recvcounts: Sequence[int] | None = None,
        op: MPI.Op = MPI.SUM,
        *,
        algorithm: str | None = None,
    ) -> Any:
        """Non-blocking :meth:`Reduce_scatter`: returns a request with ``Wait()``/``Test()``."""
        return self._call("reduce_scatter", True, algorithm, sendbuf, recvbuf,
                          _by_value(recvcounts), op)

    def Allgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Every rank receives every rank's ``sendbuf`` (count each) in rank order."""
        self._call("allgather", False, algorithm, sendbuf, recvbuf)

    def Iallgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Allgather`: returns a request with ``Wait()``/``Test()``."""
        return self._call("allgather", True, algorithm, sendbuf, recvbuf)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Allgather with per-rank counts and displacements: ``[arr, (counts, displs), type]``."""
        self._call("allgatherv", False, algorithm, sendbuf, recvbuf)

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Allgatherv`: returns a request with ``Wait()``/``Test()``."""
        return self._call("allgatherv", True, algorithm, sendbuf, recvbuf)

    def Alltoall(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Block j of rank i's ``sendbuf`` goes to block i of rank j's ``recvbuf``."""
        self._call("alltoall", False, algorithm, sendbuf, recvbuf)

    def Ialltoall(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Alltoall`: returns a request with ``Wait()``/``Test()``."""
        return self._call("alltoall", True, algorithm, sendbuf, recvbuf)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """All-to-all with per-peer counts and displacements on both sides."""
        self._call("alltoallv", False, algorithm, sendbuf, recvbuf)

    def Ialltoallv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Alltoallv`: returns a request with ``Wait()``/``Test()``."""
        return self._call("alltoallv", True, algorithm, sendbuf, recvbuf)

    def Alltoallw(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """All-to-all with a count, a byte displacement and a datatype per peer on both sides:
        ``[buf, (counts, displs_in_bytes), datatypes]`` or ``[buf, counts, displs,
        datatypes]`` (mpi4py's BufSpecW); ``sendbuf=MPI.IN_PLACE`` takes the send blocks from
        ``recvbuf``.  Rank i's send block j must have the type signature of rank j's receive
        block i (checked mode compares their bytes)."""
        self._call("alltoallw", False, algorithm, sendbuf, recvbuf)

    def Ialltoallw(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking :meth:`Alltoallw`: returns a request with ``Wait()``/``Test()``."""
        return self._call("alltoallw", True, algorithm, sendbuf, recvbuf)

    def Scan(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> None:
        """Inclusive prefix reduction: rank r receives x0 op ... op xr."""
        self._call("scan", False, algorithm, sendbuf, recvbuf, op)

    def Iscan(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Scan`: returns a request with ``Wait()``/``Test()``."""
        return self._call("scan", True, algorithm, sendbuf, recvbuf, op)

    def Exscan(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> None:
        """Exclusive prefix reduction: rank r receives x0 op ... op x(r-1); rank 0's
        ``recvbuf`` is left untouched (MPI leaves it undefined; MPICH does not write it)."""
        self._call("exscan", False, algorithm, sendbuf, recvbuf, op)

    def Iexscan(
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *, algorithm: str | None = None
    ) -> Any:
        """Non-blocking :meth:`Exscan`: returns a request with ``Wait()``/``Test()``."""
        return self._call("exscan", True, algorithm, sendbuf, recvbuf, op)

    # ---- persistent collectives (MPI-4): made inactive; Start() runs them, as often as wanted

    def Barrier_init(self, info: MPI.Info = MPI.INFO_NULL, *,
                     algorithm: str | None = None) -> Any:
        """Persistent :meth:`Barrier` (MPI-4 ``MPI_Barrier_init``): returns an inactive
        request; ``Start()`` (or :func:`mpicoll.Startall`) runs it, ``Wait()``/``Test()``
        complete it, ``Free()`` releases it.  ``info`` goes to MPI on the native backend and is
        ignored by p2p."""
        return self._call_init("barrier", algorithm, info)

    def Bcast_init(self, buf: Any, root: int = 0, info: MPI.Info = MPI.INFO_NULL, *,
                   algorithm: str | None = None) -> Any:
        """Persistent :meth:`Bcast` (see :meth:`Barrier_init`)."""
        return self._call_init("bcast", algorithm, info, buf, root)

    def Scatter_init(self, sendbuf: Any, recvbuf: Any, root: int = 0,
                     info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Scatter` (see :meth:`Barrier_init`)."""
        return self._call_init("scatter", algorithm, info, sendbuf, recvbuf, root)

    def Scatterv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0,
                      info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Scatterv` (see :meth:`Barrier_init`)."""
        return self._call_init("scatterv", algorithm, info, sendbuf, recvbuf, root)

    def Gather_init(self, sendbuf: Any, recvbuf: Any, root: int = 0,
                    info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Gather` (see :meth:`Barrier_init`)."""
        return self._call_init("gather", algorithm, info, sendbuf, recvbuf, root)

    def Gatherv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0,
                     info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Gatherv` (see :meth:`Barrier_init`)."""
        return self._call_init("gatherv", algorithm, info, sendbuf, recvbuf, root)

    def Reduce_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,
                    info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Reduce` (see :meth:`Barrier_init`)."""
        return self._call_init("reduce", algorithm, info, sendbuf, recvbuf, op, root)

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
                       info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Allreduce` (see :meth:`Barrier_init`)."""
        return self._call_init("allreduce", algorithm, info, sendbuf, recvbuf, op)

    def Reduce_scatter_block_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
                                  info: MPI.Info = MPI.INFO_NULL, *,
                                  algorithm: str | None = None) -> Any:
        """Persistent :meth:`Reduce_scatter_block` (see :meth:`Barrier_init`)."""
        return self._call_init("reduce_scatter_block", algorithm, info, sendbuf, recvbuf, op)

    def Reduce_scatter_init(self, sendbuf: Any, recvbuf: Any,
                            recvcounts: Sequence[int] | None = None, op: MPI.Op = MPI.SUM,
                            info: MPI.Info = MPI.INFO_NULL, *,
                            algorithm: str | None = None) -> Any:
        """Persistent :meth:`Reduce_scatter` (see :meth:`Barrier_init`); ``recvcounts=None``
        gathers the counts once, here."""
        recvcounts = self._recvcounts(sendbuf, recvbuf, recvcounts, algorithm, True)
        return self._call_init("reduce_scatter", algorithm, info, sendbuf, recvbuf,
                               recvcounts, op)

    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: MPI.Info = MPI.INFO_NULL, *,
                       algorithm: str | None = None) -> Any:
        """Persistent :meth:`Allgather` (see :meth:`Barrier_init`)."""
        return self._call_init("allgather", algorithm, info, sendbuf, recvbuf)

    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: MPI.Info = MPI.INFO_NULL, *,
                        algorithm: str | None = None) -> Any:
        """Persistent :meth:`Allgatherv` (see :meth:`Barrier_init`)."""
        return self._call_init("allgatherv", algorithm, info, sendbuf, recvbuf)

    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: MPI.Info = MPI.INFO_NULL, *,
                      algorithm: str | None = None) -> Any:
        """Persistent :meth:`Alltoall` (see :meth:`Barrier_init`)."""
        return self._call_init("alltoall", algorithm, info, sendbuf, recvbuf)

    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: MPI.Info = MPI.INFO_NULL, *,
                       algorithm: str | None = None) -> Any:
        """Persistent :meth:`Alltoallv` (see :meth:`Barrier_init`)."""
        return self._call_init("alltoallv", algorithm, info, sendbuf, recvbuf)

    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: MPI.Info = MPI.INFO_NULL, *,
                       algorithm: str | None = None) -> Any:
        """Persistent :meth:`Alltoallw` (see :meth:`Barrier_init`)."""
        return self._call_init("alltoallw", algorithm, info, sendbuf, recvbuf)

    def Scan_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
                  info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Scan` (see :meth:`Barrier_init`)."""
        return self._call_init("scan", algorithm, info, sendbuf, recvbuf, op)

    def Exscan_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
                    info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None) -> Any:
        """Persistent :meth:`Exscan` (see :meth:`Barrier_init`)."""
        return self._call_init("exscan", algorithm, info, sendbuf, recvbuf, op)


for _name in _MPI_METHODS:  # what the class and its subclasses define comes first
    if _name not in vars(Collectives):
        _descriptor = _NotProvided()
        _descriptor.__set_name__(Collectives, _name)
        setattr(Collectives, _name, _descriptor)
