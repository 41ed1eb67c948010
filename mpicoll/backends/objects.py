"""The lower-case object collectives of ``mpi4py.MPI.Comm`` on both backends.

``barrier``, ``bcast``, ``gather``, ``scatter``, ``allgather``, ``alltoall``, ``reduce``,
``allreduce``, ``scan`` and ``exscan`` take and return Python objects, with mpi4py's signatures,
defaults and return values (``gather`` returns None at non-roots, ``exscan`` None at rank 0).

* :class:`NativeObjects` (native backend) delegates to mpi4py's own method on the user's
  communicator.
* :class:`P2PObjects` (p2p backend) serializes with ``MPI.pickle`` (so a user's
  ``MPI.pickle.__init__(dumps, loads)`` is honoured) and, unless an algorithm is forced, sends
  the pickled bytes as point-to-point messages on the backend's private communicator with the
  call's own tag (the *direct* protocol): the first message of each object holds its size
  (int64) and, up to :data:`EAGER` bytes, the bytes themselves, so a small object costs one
  message and no size exchange; a larger one follows in a second message of exactly its size.
  Each object is pickled once, by the rank that has it, and forwarded as received.
  ``bcast``: binomial tree from the root; ``gather``/``scatter``: linear (as MPICH's
  Gatherv/Scatterv); ``allgather`` (p <= 32) and ``alltoall``: every rank sends every other
  one its message in one round.  With ``algorithm=`` naming an algorithm (or
  ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` set), the bytes go through the backend's own buffer
  collectives instead, sizes first, as mpi4py does in ``msgpickle.pxi`` (``bcast`` = Bcast of
  an int64 size then Bcast of the bytes; ``gather`` = Gather then Gatherv; and so on).  Sizes
  are int64 and every message carries its count as an MPI count (mpi4py passes it to
  ``MPI_Isend_c``), so objects over 2 GiB go through.

Reductions (p2p) apply ``op`` in the grouping mpi4py's own object reductions use, so even a
non-associative or non-commutative callable gives mpi4py's result.  Direct, they run mpi4py's
own algorithms distributed as mpi4py runs them (``mpi4py.rc.fast_reduce``, the default):
``reduce`` a binomial tree to rank 0 (then to the root), ``allreduce`` that tree and a binomial
broadcast from rank 0, ``scan``/``exscan`` recursive doubling.  On the buffer collectives, or
with ``fast_reduce`` off (a left fold in rank order), the objects are gathered at one rank,
which reduces them (it then holds every rank's object at once), then ``allreduce`` broadcasts
the result and ``scan``/``exscan`` scatter each rank's prefix.

Errors (both backends): ``root`` is converted as the buffer methods convert it
(:func:`~mpicoll.backends.args.root_of`: not a number: ``TypeError``; beyond a C int:
``OverflowError``; outside [0, p): :class:`~mpicoll.backends.buffers.MPIValueError`, both a
``ValueError`` and mpi4py's ``MPI.Exception`` (``MPI_ERR_ROOT``)); an op that is not callable
is a ``TypeError``; both before any message.  Checked mode: see :class:`_Front`.

Errors (p2p, unchecked): what one rank alone can know (its object does not pickle; a
scatter/alltoall ``sendobj`` that is not a sequence of p items: ``ValueError`` /
``TypeError``; an ``op`` that raises where it is applied) it raises itself after sending a
negative size where its bytes were due (it names the rank and the kind of error, and is
forwarded as such through trees); every rank whose result needs those bytes then raises an
exception of the same type (naming the rank), so nobody hangs, and every message of the call
is received.  Ranks that need nothing from the failed one return normally: the non-roots of
``gather`` and ``reduce``, and the ranks of ``scan`` below it (of ``exscan``: up to it).

Security: unpickling runs code chosen by whoever wrote the bytes (Python's ``pickle`` docs:
"Never unpickle data received from an untrusted or unauthenticated source"), as in mpi4py's
own object methods: they trust every peer; never use them with untrusted ranks.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import mpi4py
import numpy as np
from mpi4py import MPI

from ..algorithms import registry
from ..engines import mpi as _mpi
from .args import root_of
from .checked import check_algorithm_type

__all__ = ["NativeObjects", "P2PObjects"]

_BYTE = MPI.BYTE
_COUNT = MPI.INT64_T
_NOTHING = np.empty(0, dtype=np.uint8)
#: exception types a refused rank reports by code (-1 - index) in place of a size; any other
#: reaches the other ranks as RuntimeError
_KINDS: tuple[type[Exception], ...] = (
    ValueError, TypeError, AttributeError, pickle.PicklingError, OverflowError, MemoryError,
    RecursionError, KeyError, IndexError, ArithmeticError,
)
_OTHER = -1 - len(_KINDS)


def _code(exc: Exception) -> int:
    """The negative size that reports ``exc`` to the other ranks."""
    for exact in (True, False):
        for i, kind in enumerate(_KINDS):
            if (type(exc) is kind) if exact else isinstance(exc, kind):
                return -1 - i
    return _OTHER


def _remote(method: str, codes: dict[int, int]) -> Exception:
    """The error raised by a rank that learns (rank -> code) of refused ranks."""
    code = min(codes.values())
    kind: type[Exception] = _KINDS[-1 - code] if code > _OTHER else RuntimeError
    ranks = ", ".join(str(r) for r in sorted(codes))
    return kind(f"{method}: refused on rank(s) {ranks} ({kind.__name__}; see the error "
                "there); every rank stops")


def _dumps(obj: Any) -> np.ndarray:
    """``MPI.pickle.dumps(obj)`` as a uint8 array (no copy)."""
    return np.frombuffer(MPI.pickle.dumps(obj), dtype=np.uint8)


def _loads(data: np.ndarray) -> Any:
    """``MPI.pickle.loads`` of the bytes, or None for zero bytes (as mpi4py's pickle_load)."""
    return MPI.pickle.loads(memoryview(data)) if data.size else None  # type: ignore[arg-type]


def _items(sendobj: Any, size: int) -> list[Any]:
    """mpi4py's ``pickle_dumpv`` rule: None means p Nones, else a sequence of exactly p items.

    Raises:
        TypeError: ``sendobj`` is not iterable.
        ValueError: it does not hold ``size`` items.
    """
    items = [None] * size if sendobj is None else list(sendobj)
    if len(items) != size:
        raise ValueError(f"expecting {size} items, got {len(items)}")
    return items


def _join(items: list[Any]) -> tuple[np.ndarray, list[int]]:
    """Pickle every item into one uint8 buffer: (bytes, counts)."""
    parts = [_dumps(x) for x in items]
    data = np.concatenate(parts) if parts else _NOTHING
    return data, [int(p.size) for p in parts]


def _split(data: np.ndarray, counts: Sequence[int] | np.ndarray) -> list[Any]:
    out, offset = [], 0
    for c in counts:
        out.append(_loads(data[offset : offset + c]))
        offset += c
    return out


def _vspec(data: np.ndarray, counts: Sequence[int] | np.ndarray) -> list[Any]:
    """``[data, (counts, displacements), MPI.BYTE]``, the blocks packed in rank order."""
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    displs = [0, *(int(e) for e in ends[:-1])]
    return [data, ([int(c) for c in counts], displs), _BYTE]


def _check_op(op: Any) -> Callable[[Any, Any], Any]:
    if not callable(op):
        raise TypeError(f"op: expected an MPI.Op or a callable f(a, b), got {op!r}")
    return op


# ---- mpi4py's groupings (msgpickle.pxi), run at one rank on every rank's object ------------


#: ``mpi4py.rc.fast_reduce`` as mpi4py.MPI read it when it was imported (just before this)
_FAST_REDUCE = bool(getattr(mpi4py.rc, "fast_reduce", True))


def _fast() -> bool:
    return _FAST_REDUCE


def _fold(items: list[Any], op: Callable[[Any, Any], Any]) -> Any:
    """The reduction of ``items`` (one per rank) as mpi4py's object ``reduce`` groups it."""
    vals = list(items)
    if not _fast():  # PyMPI_reduce_naive: left fold in rank order
        res = vals[0]
        for v in vals[1:]:
            res = op(res, v)
        return res
    # PyMPI_reduce_p2p: binomial tree to rank 0; rank r takes r + m at step m
    size, m = len(vals), 1
    while m < size:
        for r in range(0, size - m, 2 * m):
            vals[r] = op(vals[r], vals[r + m])
        m <<= 1
    return vals[0]


def _prefix(items: list[Any], op: Callable[[Any, Any], Any], exclusive: bool) -> list[Any]:
    """Every rank's (exclusive) prefix reduction as mpi4py's ``scan``/``exscan`` groups it;
    None for rank 0 of an exclusive scan."""
    size = len(items)
    if not _fast():  # _py_scan / _py_exscan
        seq = list(items)
        for i in range(1, size):
            seq[i] = op(seq[i - 1], seq[i])
        return [None, *seq[:-1]] if exclusive else seq
    # PyMPI_scan_p2p / PyMPI_exscan_p2p: recursive doubling (exchange at distance m = 2^k)
    partial = list(items)
    result: list[Any] = list(items)
    started = [False] * size
    m = 1
    while m < size:
        prev = list(partial)
        for r in range(size):
            t = r ^ m
            if t >= size:
                continue
            if r > t:
                partial[r] = op(prev[t], prev[r])
                if exclusive and not started[r]:
                    started[r], result[r] = True, prev[t]
                else:
                    result[r] = op(prev[t], result[r])
            else:
                partial[r] = op(prev[r], prev[t])
        m <<= 1
    if exclusive:
        result[0] = None
    return result


# ---- the front of every method: the arguments checked, then (checked mode) agreed ------------

#: "no such argument" (barrier, allgather, ... take no root; bcast, gather, ... no op)
_UNSET: Any = object()


class _Front:
    """The argument checks both backends' object methods share, and their checked mode.

    Every method first checks what every rank can check (``algorithm=``, ``root`` as the
    buffer methods convert it, :func:`~mpicoll.backends.args.root_of`; a reduction's ``op``)
    and the sequence a scatter root / every alltoall rank sends (mpi4py's rule: None or p
    items).  In checked mode (``check=True`` / ``$MPICOLL_CHECK``) the ranks then agree on the
    call before any message (:meth:`~mpicoll.backends.checked.CheckedMode._agree_object`:
    method, root, op, ``algorithm=``; every rank raises if one rank's arguments were
    refused), so a call refused anywhere is refused everywhere and leaves no message behind.
    """

    if TYPE_CHECKING:  # provided by Collectives
        rank: int
        size: int
        check: bool

        def _agree_object(self, method: str, error: Exception | None, algorithm: Any = None,
                          *, root: int | None = None, op: Any = None) -> None: ...

    #: unchecked mode: whether a bad sendobj sequence is reported to the peers through the
    #: size exchange (p2p) instead of being left to mpi4py (native)
    _local_errors = False

    def _algorithms(self, algorithm: Any, collectives: tuple[str, ...]) -> tuple[Any, ...]:
        raise NotImplementedError

    def _check_callable(self, op: Any) -> Callable[[Any, Any], Any]:
        return _check_op(op)

    def _front(self, method: str, algorithm: Any, collectives: tuple[str, ...] = (), *,
               root: Any = _UNSET, op: Any = _UNSET, sendobj: Any = _UNSET,
               at_root: bool = False
               ) -> tuple[tuple[Any, ...], int, Any, list[Any] | None, Exception | None]:
        """(the ``algorithm=`` of each buffer collective used, the root (0 if none), the op,
        ``sendobj`` as a list of p items (None where not converted), the error of that
        conversion).  ``sendobj`` is converted at the root only if ``at_root``, else at every
        rank; in unchecked mode only where :attr:`_local_errors` (its error is then returned,
        for the size exchange to report; any other error is raised here).  In checked mode
        every rank agrees first and raises together."""
        error: Exception | None = None
        alg: tuple[Any, ...] = ()
        value, fn = 0, None
        try:
            alg = self._algorithms(algorithm, collectives)
            if root is not _UNSET:
                value = root_of(root, self.size)
            if op is not _UNSET:
                fn = self._check_callable(op)
        except Exception as exc:
            error = exc
        items, local = None, None
        if (error is None and sendobj is not _UNSET and (self.check or self._local_errors)
                and (not at_root or self.rank == value)):
            try:
                items = _items(sendobj, self.size)
            except Exception as exc:
                local = exc
        if self.check:
            self._agree_object(method, error or local, algorithm,
                               root=None if root is _UNSET else value,
                               op=None if op is _UNSET else op)
            if local is not None:
                raise local
        if error is not None:
            raise error
        return alg, value, fn, items, local


# ---- native ---------------------------------------------------------------------------------


class NativeObjects(_Front):
    """The object collectives of the native backend: mpi4py's own, on the user's communicator.

    Outside checked mode each method hands its arguments straight to mpi4py's method (as the
    buffer methods do): ``algorithm=`` is accepted as on the buffer methods (None or
    ``"native"`` only; checked only when given), and a reduction's op that is not callable
    raises ``TypeError`` on every rank (P > 1; plain mpi4py raises at the rank that applies it
    and leaves the others waiting: the op is a value MPI requires to agree).  Anything else is
    what mpi4py does, on the same ranks: a bad ``root`` raises mpi4py's exception, or, when
    mpi4py raised one of the same kind, mpicoll's clearer one
    (:func:`~mpicoll.backends.args.root_of`: ``TypeError``, ``OverflowError``, or outside
    [0, p) :class:`~mpicoll.backends.buffers.MPIValueError`, both ``ValueError`` and
    ``MPI.Exception`` ``MPI_ERR_ROOT``).  Where plain mpi4py would hang, as with a bad
    ``sendobj`` at the root of ``scatter``, this hangs too unless checked mode is on (then
    every rank agrees on method, root, op and ``algorithm=`` and raises before any message;
    see :class:`_Front`).
    """

    if TYPE_CHECKING:  # provided by Collectives
        comm: MPI.Comm

    def _algorithms(self, algorithm: Any, collectives: tuple[str, ...]) -> tuple[Any, ...]:
        check_algorithm_type(algorithm)
        if algorithm not in (None, "native"):
            raise ValueError(
                f"algorithm: the native backend runs MPI's own algorithm; got {algorithm!r} "
                "(use mpicoll.p2p to choose one)"
            )
        return ()

    def _check_callable(self, op: Any) -> Any:
        """A reduction's op that is not callable raises TypeError on every rank that has one
        (plain mpi4py raises at the rank that applies it and leaves the others waiting; at
        P = 1 it applies nothing and returns, and so does this)."""
        return _check_op(op) if self.size > 1 else op

    def _slow(self, algorithm: Any) -> bool:
        """Whether a call goes through :meth:`_Front._front` (checked mode or an
        ``algorithm=`` given); else it goes straight to mpi4py."""
        return self.check or algorithm is not None

    def _root_error(self, exc: Exception, root: Any) -> None:
        """mpi4py raised ``exc`` for a call with ``root``: raise :func:`root_of`'s refusal
        instead if it is of the same kind (see :mod:`mpicoll.backends.native`)."""
        try:
            root_of(root, self.size)
        except Exception as mine:
            if isinstance(mine, type(exc)) and (
                    not isinstance(exc, MPI.Exception)
                    or mine.Get_error_class() == exc.Get_error_class()):  # type: ignore[attr-defined]
                raise mine from exc

    def barrier(self, *, algorithm: str | None = None) -> None:
        """``comm.barrier()``: synchronise all ranks."""
        if self._slow(algorithm):
            self._front("barrier", algorithm)
        self.comm.barrier()

    def bcast(self, obj: Any, root: int = 0, *, algorithm: str | None = None) -> Any:
        """``comm.bcast(obj, root)``: the root's ``obj`` (a copy) on every rank."""
        if self._slow(algorithm):
            _, root, *_ = self._front("bcast", algorithm, root=root)
        try:
            return self.comm.bcast(obj, root)
        except Exception as exc:
            self._root_error(exc, root)
            raise

    def gather(self, sendobj: Any, root: int = 0, *,
               algorithm: str | None = None) -> list[Any] | None:
        """``comm.gather(sendobj, root)``: the list of every rank's object at the root."""
        if self._slow(algorithm):
            _, root, *_ = self._front("gather", algorithm, root=root)
        try:
            return self.comm.gather(sendobj, root)
        except Exception as exc:
            self._root_error(exc, root)
            raise

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0, *,
                algorithm: str | None = None) -> Any:
        """``comm.scatter(sendobj, root)``: item i of the root's sequence on rank i."""
        if self._slow(algorithm):
            _, root, _, items, _ = self._front("scatter", algorithm, root=root,
                                               sendobj=sendobj, at_root=True)
            if items is not None:
                sendobj = items
        try:
            return self.comm.scatter(sendobj, root)
        except Exception as exc:
            self._root_error(exc, root)
            raise

    def allgather(self, sendobj: Any, *, algorithm: str | None = None) -> list[Any]:
        """``comm.allgather(sendobj)``: the list of every rank's object on every rank."""
        if self._slow(algorithm):
            self._front("allgather", algorithm)
        return self.comm.allgather(sendobj)

    def alltoall(self, sendobj: Sequence[Any], *, algorithm: str | None = None) -> list[Any]:
        """``comm.alltoall(sendobj)``: item j of rank i's sequence becomes item i of rank j's
        result."""
        if self._slow(algorithm):
            _, _, _, items, _ = self._front("alltoall", algorithm, sendobj=sendobj)
            if items is not None:
                sendobj = items
        return self.comm.alltoall(sendobj)

    def reduce(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM,
               root: int = 0, *, algorithm: str | None = None) -> Any | None:
        """``comm.reduce(sendobj, op, root)``: the reduction at the root, None elsewhere."""
        if self._slow(algorithm):
            _, root, *_ = self._front("reduce", algorithm, root=root, op=op)
        elif self.size > 1 and not callable(op):
            _check_op(op)
        try:
            return self.comm.reduce(sendobj, op, root)
        except Exception as exc:
            self._root_error(exc, root)
            raise

    def allreduce(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
                  algorithm: str | None = None) -> Any:
        """``comm.allreduce(sendobj, op)``: the reduction on every rank."""
        if self._slow(algorithm):
            self._front("allreduce", algorithm, op=op)
        elif self.size > 1 and not callable(op):
            _check_op(op)
        return self.comm.allreduce(sendobj, op)

    def scan(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
             algorithm: str | None = None) -> Any:
        """``comm.scan(sendobj, op)``: rank r gets x0 op ... op xr."""
        if self._slow(algorithm):
            self._front("scan", algorithm, op=op)
        elif self.size > 1 and not callable(op):
            _check_op(op)
        return self.comm.scan(sendobj, op)  # type: ignore[attr-defined]

    def exscan(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
               algorithm: str | None = None) -> Any:
        """``comm.exscan(sendobj, op)``: rank r gets x0 op ... op x(r-1); None on rank 0."""
        if self._slow(algorithm):
            self._front("exscan", algorithm, op=op)
        elif self.size > 1 and not callable(op):
            _check_op(op)
        return self.comm.exscan(sendobj, op)  # type: ignore[attr-defined]


def _pickled(obj: Any) -> tuple[np.ndarray, Exception | None, np.ndarray]:
    """(``obj``'s pickle as bytes, None, its size as a 1-element int64 array), or, if it does
    not pickle, (nothing, the error, the error's negative code in place of the size): the size
    message every rank sends first, so the peers learn of the error instead of hanging."""
    try:
        data = _dumps(obj)
    except Exception as exc:
        return _NOTHING, exc, np.array([_code(exc)], dtype=np.int64)
    return data, None, np.array([data.size], dtype=np.int64)


# ---- p2p, direct: the object protocol on point-to-point messages -----------------------------

#: the first message of every object: its size in bytes (int64, little-endian; negative: the
#: sender refused, see :func:`_refusal`), then the bytes themselves if they are at most
#: :data:`EAGER`; larger objects follow in a second message of exactly their size
_HEADER = struct.Struct("<q")
#: bytes of a pickled object that travel in the first message with its size (eager); a larger
#: object costs a second message (its receiver allocates it once the size is known)
EAGER = 4096 - _HEADER.size
#: the fixed size of a first message's receive buffer
_SLOT = _HEADER.size + EAGER
#: _KINDS and "any other": the kinds a refusal names
_NKINDS = len(_KINDS) + 1
#: beyond this many ranks allgather runs on the buffer collectives (the direct exchange sends
#: p - 1 messages from every rank)
_DIRECT_ALLGATHER_MAX = 32


def _refusal(exc: Exception, rank: int) -> int:
    """The negative size by which ``rank`` reports ``exc``: the kind (:func:`_code`) and the
    rank, so a refusal forwarded through a tree still names the rank it came from."""
    return -1 - ((-1 - _code(exc)) + _NKINDS * rank)


def _refused(method: str, sizes: list[int]) -> Exception:
    """The error a rank raises that learned of refusals (negative ``sizes``)."""
    codes: dict[int, int] = {}
    for size in sizes:
        v = -1 - size
        codes.setdefault(v // _NKINDS, -1 - v % _NKINDS)
    return _remote(method, codes)


def _pickle(obj: Any) -> Any:
    """``MPI.pickle.dumps(obj)`` as a flat buffer of bytes."""
    data = MPI.pickle.dumps(obj)
    return data if type(data) is bytes else memoryview(data).cast("B")


def _unpickle(data: Any) -> Any:
    """``MPI.pickle.loads``, or None for zero bytes (as mpi4py's pickle_load)."""
    return MPI.pickle.loads(data) if len(data) else None


def _copy(obj: Any) -> Any:
    """mpi4py's ``PyMPI_copy``: the object through ``MPI.pickle``."""
    return _unpickle(_pickle(obj))


class _Message:
    """One object on the wire: the first message (``head``: size, and the bytes if they fit),
    and ``tail`` (the bytes, if they did not; else None)."""

    __slots__ = ("head", "size", "tail")

    def __init__(self, head: Any, tail: Any, size: int) -> None:
        self.head, self.tail, self.size = head, tail, size

    @classmethod
    def of(cls, data: Any) -> _Message:
        """The message of pickled bytes ``data``."""
        n = len(data)
        if n <= EAGER:
            return cls(_HEADER.pack(n) + data, None, n)
        return cls(_HEADER.pack(n), data, n)

    @classmethod
    def refusal(cls, size: int) -> _Message:
        """The message of a refusal (a negative size, see :func:`_refusal`)."""
        return cls(_HEADER.pack(size), None, size)


class _Wire:
    """A p2p backend's object messages: on its private communicator, with the call's tag
    (taken per call as every collective takes one), counted in its traffic.

    Receives of first messages are posted into :data:`_SLOT`-byte buffers before anything is
    waited for; a larger object's second message is received once its size is known.  Every
    wait completes the receives first, then the sends: a second message (rendezvous-size) is
    matched only once its receiver has read the first one."""

    __slots__ = ("comm", "nodes", "rank", "traffic")

    def __init__(self, comm: MPI.Comm, traffic: list[int], nodes: tuple[int, ...] | None,
                 rank: int) -> None:
        self.comm, self.traffic, self.nodes, self.rank = comm, traffic, nodes, rank

    @staticmethod
    def wait(reqs: list[MPI.Request]) -> None:
        """Complete ``reqs``; while any p2p schedule is in flight (an outstanding I-form or
        started persistent collective, on any backend) through
        :func:`mpicoll.engines.mpi.Waitall`, which progresses them meanwhile: a peer may be
        waiting on one of them before it takes part in this call (its ranks need not
        complete their requests at the same point)."""
        if _mpi._IN_FLIGHT[0]:
            _mpi.Waitall(reqs)
        else:
            MPI.Request.Waitall(reqs)

    def send(self, msg: _Message, dst: int, tag: int, reqs: list[MPI.Request]) -> None:
        """Post ``msg`` to ``dst`` (its one or two messages)."""
        comm, t = self.comm, self.traffic
        reqs.append(comm.Isend([msg.head, _BYTE], dst, tag))
        nb = len(msg.head)
        if msg.tail is not None:
            reqs.append(comm.Isend([msg.tail, _BYTE], dst, tag))
            t[0] += 1
            nb += len(msg.tail)
        t[0] += 1
        t[2] += nb
        nodes = self.nodes
        if nodes is not None and nodes[dst] != nodes[self.rank]:
            t[4] += nb

    def put(self, msg: _Message, dst: int, tag: int) -> None:
        """Send ``msg`` to ``dst`` and return when its buffers may be reused: a blocking
        ``Send`` of a first message that holds the bytes (eager in MPI libraries; every use
        here is acyclic: the receiver never waits on this rank first), else as :meth:`send`
        and wait."""
        if msg.tail is None and not _mpi._IN_FLIGHT[0]:
            self.comm.Send([msg.head, _BYTE], dst, tag)
            t = self.traffic
            t[0] += 1
            nb = len(msg.head)
            t[2] += nb
            nodes = self.nodes
            if nodes is not None and nodes[dst] != nodes[self.rank]:
                t[4] += nb
            return
        reqs: list[MPI.Request] = []
        self.send(msg, dst, tag, reqs)
        self.wait(reqs)

    def swap(self, msg: _Message, peer: int, tag: int) -> _Message:
        """Send ``msg`` to ``peer`` and receive its message (both first messages in one
        ``Sendrecv``, then the second ones, if any)."""
        slots = _slots(1)
        if _mpi._IN_FLIGHT[0]:
            recvs: list[MPI.Request] = []
            self.post(slots, 0, peer, tag, recvs)
            sends: list[MPI.Request] = []
            self.send(msg, peer, tag, sends)
            self.wait(recvs)
            got = self.take(slots, 0, peer, tag)
            self.wait(sends)
            return got
        tail = None
        self.comm.Sendrecv([msg.head, _BYTE], peer, tag, [slots, _BYTE], peer, tag)
        if msg.tail is not None:
            tail = self.comm.Isend([msg.tail, _BYTE], peer, tag)
        got = self.take(slots, 0, peer, tag)
        if tail is not None:
            tail.Wait()
        t = self.traffic
        nb = len(msg.head) + (0 if msg.tail is None else len(msg.tail))
        t[0] += 1 if msg.tail is None else 2
        t[2] += nb
        nodes = self.nodes
        if nodes is not None and nodes[peer] != nodes[self.rank]:
            t[4] += nb
        return got

    def post(self, slots: memoryview, i: int, src: int, tag: int,
             reqs: list[MPI.Request]) -> None:
        """Post the receive of ``src``'s first message into slot ``i``."""
        reqs.append(self.comm.Irecv([slots[i * _SLOT:(i + 1) * _SLOT], _BYTE], src, tag))

    def take(self, slots: memoryview, i: int, src: int, tag: int) -> _Message:
        """The message whose first part arrived in slot ``i`` from ``src`` (its second part
        received now, if any); ``head``/``tail`` can be forwarded as they are."""
        at = i * _SLOT
        n = _HEADER.unpack_from(slots, at)[0]
        t = self.traffic
        t[1] += 1
        if n < 0:
            t[3] += _HEADER.size
            return _Message(slots[at:at + _HEADER.size], None, n)
        if n <= EAGER:
            t[3] += _HEADER.size + n
            return _Message(slots[at:at + _HEADER.size + n], None, n)
        tail = bytearray(n)
        if _mpi._IN_FLIGHT[0]:
            self.wait([self.comm.Irecv([tail, _BYTE], src, tag)])
        else:
            self.comm.Recv([tail, _BYTE], src, tag)
        t[1] += 1
        t[3] += _HEADER.size + n
        return _Message(slots[at:at + _HEADER.size], tail, n)

    def recv(self, src: int, tag: int) -> _Message:
        """Receive one message from ``src`` (blocking)."""
        slots = _slots(1)
        if _mpi._IN_FLIGHT[0]:
            self.wait([self.comm.Irecv([slots, _BYTE], src, tag)])
        else:
            self.comm.Recv([slots, _BYTE], src, tag)
        return self.take(slots, 0, src, tag)


def _slots(k: int) -> memoryview:
    """Receive buffers for ``k`` first messages."""
    if k <= 16:
        return memoryview(bytearray(k * _SLOT))
    return memoryview(np.empty(k * _SLOT, np.uint8))  # type: ignore[arg-type]


def _data(msg: _Message) -> Any:
    """The pickled bytes a received (or made) message carries (size >= 0)."""
    return msg.tail if msg.tail is not None else msg.head[_HEADER.size:]


# ---- p2p ------------------------------------------------------------------------------------


class P2PObjects(_Front):
    """The object collectives of the p2p backend: the direct protocol, or its own buffer
    collectives (see the module docstring).

    Every method takes ``algorithm=``.  None or ``"auto"`` runs the direct protocol, unless
    ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` names an algorithm for one of the buffer collectives
    the method would run (then those run, each with its variable's algorithm or ``auto``).  A
    name is forwarded to each buffer collective the method runs that has an algorithm of that
    name (``mpicoll algorithms`` lists them; e.g. ``allgather(obj, algorithm="ring")`` runs a
    ring Allgather of the sizes and a ring Allgatherv of the bytes); the others choose
    automatically.  A name none of them has is refused (ValueError) before any message.
    These are values every rank shares, so every rank takes the same path.

    Isolation: the direct protocol's messages travel on the private communicator with a tag
    taken per call (:meth:`~mpicoll.engines.mpi.Engine.take_tag`), as every p2p collective's:
    user point-to-point traffic and outstanding non-blocking collectives never match them.
    While p2p schedules are in flight a direct call waits through
    :func:`mpicoll.engines.mpi.Waitall`, progressing them, so the ranks may complete their
    requests before or after an object call.
    """

    if TYPE_CHECKING:  # provided by Collectives and P2P
        rank: int
        size: int
        Barrier: Callable[..., None]
        Bcast: Callable[..., None]
        Gather: Callable[..., None]
        Gatherv: Callable[..., None]
        Scatter: Callable[..., None]
        Scatterv: Callable[..., None]
        Allgather: Callable[..., None]
        Allgatherv: Callable[..., None]
        Alltoall: Callable[..., None]
        Alltoallv: Callable[..., None]
        _freed: bool
        name: str
        _comm: MPI.Comm
        _engine: _mpi.Engine
        _forced: dict[str, Any]

        def _take_tag(self) -> int: ...

    _local_errors = True

    def _front(self, method: str, algorithm: Any, collectives: tuple[str, ...] = (), *,
               root: Any = _UNSET, op: Any = _UNSET, **kw: Any) -> Any:
        """:meth:`_Front._front`; the common call (unchecked, no ``algorithm=``, an int root
        that is a rank, a callable op, no sequence to convert) answered without its
        machinery, with the same result."""
        if self._freed:  # before checked mode's agreement on the freed communicator
            raise RuntimeError(f"this {self.name} backend was freed")
        if (algorithm is None and not kw and not self.check
                and (root is _UNSET or (type(root) is int and 0 <= root < self.size))
                and (op is _UNSET or callable(op))):
            return ((None,) * len(collectives), 0 if root is _UNSET else root,
                    None if op is _UNSET else op, None, None)
        return super()._front(method, algorithm, collectives, root=root, op=op, **kw)

    def _algorithms(self, algorithm: Any, collectives: tuple[str, ...]) -> tuple[str | None, ...]:
        """The ``algorithm=`` of each buffer collective used (see the class docstring)."""
        check_algorithm_type(algorithm)
        if algorithm is None or algorithm == "auto":
            picked: tuple[str | None, ...] = (algorithm,) * len(collectives)
        else:
            picked = tuple(algorithm if registry.known(c, algorithm) else "auto"
                           for c in collectives)
            if all(p == "auto" for p in picked):
                known = sorted({a.name for c in collectives for a in registry.algorithms(c)})
                raise ValueError(f"algorithm: {algorithm!r} is not an algorithm of "
                                 f"{' or '.join(collectives)}; expected one of {known}")
        return picked

    # -- the building blocks: (result, error); each rank takes part in every message --

    def _bcast_obj(self, method: str, obj: Any, root: int, alg: tuple[str | None, ...],
                   error: Exception | None = None) -> Any:
        """Bcast of the size, then of the bytes.  ``error`` at the root: flag it instead."""
        data = _NOTHING
        n = np.zeros(1, dtype=np.int64)
        if self.rank == root:
            if error is None:
                try:
                    # writable: some Bcast schedules also receive into the root's buffer
                    data = _dumps(obj).copy()
                except Exception as exc:
                    error = exc
            n[0] = _code(error) if error is not None else data.size
        self.Bcast([n, _COUNT], root, algorithm=alg[0])
        if n[0] < 0:
            raise error if error is not None else _remote(method, {root: int(n[0])})
        if self.rank != root:
            data = np.empty(int(n[0]), dtype=np.uint8)
        self.Bcast([data, _BYTE], root, algorithm=alg[-1])
        return _loads(data)

    def _gather_obj(self, method: str, sendobj: Any, root: int, alg: tuple[str | None, ...]
                    ) -> tuple[list[Any] | None, Exception | None]:
        """Gather of the sizes, then Gatherv of the bytes: (objects at the root, error)."""
        data, error, mine = _pickled(sendobj)
        sizes = np.zeros(self.size if self.rank == root else 0, dtype=np.int64)
        self.Gather([mine, _COUNT], [sizes, _COUNT], root, algorithm=alg[0])
        if self.rank != root:
            self.Gatherv([data, _BYTE], None, root, algorithm=alg[-1])
            return None, error
        counts = np.maximum(sizes, 0)
        buf = np.empty(int(counts.sum()), dtype=np.uint8)
        self.Gatherv([data, _BYTE], _vspec(buf, counts), root, algorithm=alg[-1])
        bad = {r: int(s) for r, s in enumerate(sizes) if s < 0}
        if error is None and bad:
            error = _remote(method, bad)
        return (None if bad else _split(buf, counts)), error

    def _scatter_obj(self, method: str, items: list[Any] | None, root: int,
                     alg: tuple[str | None, ...], error: Exception | None = None) -> Any:
        """Scatter of the sizes, then Scatterv of the bytes.  At the root ``items`` is the
        list of p objects, or ``error`` is flagged."""
        data, counts = _NOTHING, [0] * self.size
        sizes = np.zeros(self.size if self.rank == root else 0, dtype=np.int64)
        if self.rank == root:
            if error is None:
                try:
                    data, counts = _join(items if items is not None else [None] * self.size)
                    sizes[:] = counts
                except Exception as exc:
                    error = exc
            if error is not None:
                sizes[:] = _code(error)
        n = np.zeros(1, dtype=np.int64)
        self.Scatter([sizes, _COUNT], [n, _COUNT], root, algorithm=alg[0])
        if n[0] < 0:
            raise error if error is not None else _remote(method, {root: int(n[0])})
        out = np.empty(int(n[0]), dtype=np.uint8)
        send = _vspec(data, counts) if self.rank == root else None
        self.Scatterv(send, [out, _BYTE], root, algorithm=alg[-1])
        return _loads(out)

    # -- direct: the object protocol on point-to-point messages (see the class docstring) --

    _wire: _Wire | None = None

    def _direct(self, algorithm: Any, collectives: tuple[str, ...]) -> _Wire | None:
        """The wire if this call runs direct, else None (it runs on the buffer collectives):
        direct when ``algorithm=`` is None or "auto" and no ``$MPICOLL_<COLLECTIVE>_ALGORITHM``
        names an algorithm for the buffer collectives it would run, values every rank shares
        (the variables are agreed at construction), so every rank decides alike."""
        if algorithm is not None and algorithm != "auto":
            return None
        if algorithm is None and self._forced and any(c in self._forced for c in collectives):
            return None
        wire = self._wire
        if wire is None:
            e = self._engine
            wire = self._wire = _Wire(self._comm, e.traffic._n, e.nodes, self.rank)
        return wire

    def _tag(self) -> int:
        """This call's tag (taken as every collective takes one, and made ready), after the
        thread-level check every p2p entry point makes
        (:func:`~mpicoll.engines.mpi.check_thread`)."""
        _mpi.check_thread()
        tag = self._take_tag()
        self._engine.clear_tag(tag)
        return tag

    def _tree_bcast(self, wire: _Wire, tag: int, root: int, msg: _Message | None) -> _Message:
        """Binomial tree from ``root``: the root's ``msg`` (given there, None elsewhere)
        reaches every rank, forwarded as received (pickled once, at the root); returns it.
        Cost: ceil(lg p) (alpha + n beta)."""
        p, me = self.size, self.rank
        rel = (me - root) % p
        if rel:
            low = rel & -rel
            msg = wire.recv((rel - low + root) % p, tag)
            m = low >> 1
        else:
            m = 1 << ((p - 1).bit_length() - 1) if p > 1 else 0
        assert msg is not None
        if msg.tail is None:  # small: one blocking send per child
            while m:
                if rel + m < p:
                    wire.put(msg, (rel + m + root) % p, tag)
                m >>= 1
            return msg
        reqs: list[MPI.Request] = []
        while m:
            if rel + m < p:
                wire.send(msg, (rel + m + root) % p, tag, reqs)
            m >>= 1
        if reqs:
            wire.wait(reqs)
        return msg

    def _tree_reduce(self, wire: _Wire, tag: int, sendobj: Any, fn: Callable[[Any, Any], Any]
                     ) -> tuple[Any, Exception | None, int]:
        """mpi4py's ``PyMPI_reduce_p2p`` to rank 0 (binomial: at step m = 1, 2, 4, ... rank r
        with bit m set sends its partial result to r - m and leaves; rank r + m's arrives at r,
        which applies ``fn(mine, theirs)``), without its messages whose result is dropped.

        Returns (the result at rank 0, else None; this rank's own error; the first refusal
        it received, 0 if none).  A rank that fails (pickling, unpickling, ``fn``) or learns of
        a refusal goes on receiving from its subtree and sends its parent a refusal instead."""
        p, me = self.size, self.rank
        result, copied, error, code = sendobj, False, None, 0
        m = 1
        while m < p:
            if me & m:
                msg = None
                if error is None and not code:
                    try:
                        msg = _Message.of(_pickle(result))
                    except Exception as exc:
                        error = exc
                if msg is None:
                    msg = _Message.refusal(_refusal(error, me) if error is not None else code)
                wire.put(msg, me - m, tag)
                return None, error, code
            if me + m < p:
                got = wire.recv(me + m, tag)
                if got.size < 0:
                    code = code or got.size
                elif error is None and not code:
                    try:
                        if not copied:  # mpi4py's PyMPI_copy(sendobj)
                            result, copied = _copy(result), True
                        result = fn(result, _unpickle(_data(got)))
                    except Exception as exc:
                        error = exc
            m <<= 1
        if not copied and error is None:
            try:
                result = _copy(result)
            except Exception as exc:
                error = exc
        return result, error, code

    def _result_message(self, result: Any, error: Exception | None, code: int
                        ) -> tuple[_Message, Exception | None]:
        """What this rank sends on: ``result`` pickled, or its own refusal, or the one it
        received; and its error (one pickling ``result`` included)."""
        if error is None and not code:
            try:
                return _Message.of(_pickle(result)), None
            except Exception as exc:
                error = exc
        return _Message.refusal(_refusal(error, self.rank) if error is not None else code), error

    def _bcast_direct(self, wire: _Wire, obj: Any, root: int) -> Any:
        tag = self._tag()
        msg, error = None, None
        if self.rank == root:
            msg, error = self._result_message(obj, None, 0)
        msg = self._tree_bcast(wire, tag, root, msg)
        if error is not None:
            raise error
        if msg.size < 0:
            raise _refused("bcast", [msg.size])
        return _unpickle(_data(msg))

    def _gather_direct(self, wire: _Wire, method: str, sendobj: Any, root: int) -> Any:
        """Linear gather (as MPICH's Gatherv): every rank sends the root one message (two for
        an object over :data:`EAGER`); the root has posted every first receive at once."""
        tag = self._tag()
        p, me = self.size, self.rank
        if me != root:
            msg, error = self._result_message(sendobj, None, 0)
            wire.put(msg, root, tag)
            if error is not None:
                raise error
            return None
        error, own = None, None
        try:
            own = _copy(sendobj)
        except Exception as exc:
            error = exc
        slots = _slots(p)
        reqs: list[MPI.Request] = []
        for r in range(p):
            if r != root:
                wire.post(slots, r, r, tag, reqs)
        if reqs:
            wire.wait(reqs)
        msgs = [wire.take(slots, r, r, tag) if r != root else None for r in range(p)]
        if error is not None:
            raise error
        bad = [m.size for m in msgs if m is not None and m.size < 0]
        if bad:
            raise _refused(method, bad)
        return [own if m is None else _unpickle(_data(m)) for m in msgs]

    def _scatter_direct(self, wire: _Wire, items: list[Any] | None, root: int,
                        error: Exception | None) -> Any:
        """Linear scatter: the root sends rank i item i (pickled, one or two messages)."""
        tag = self._tag()
        p, me = self.size, self.rank
        if me != root:
            msg = wire.recv(root, tag)
            if msg.size < 0:
                raise _refused("scatter", [msg.size])
            return _unpickle(_data(msg))
        datas: list[Any] = []
        if error is None:
            try:
                datas = [_pickle(x) for x in (items if items is not None else [None] * p)]
            except Exception as exc:
                error = exc
        no = None if error is None else _Message.refusal(_refusal(error, me))
        reqs: list[MPI.Request] = []
        for k in range(1, p):
            r = (me + k) % p
            wire.send(no if no is not None else _Message.of(datas[r]), r, tag, reqs)
        if reqs:
            wire.wait(reqs)
        if error is not None:
            raise error
        return _unpickle(datas[me])

    def _swap(self, wire: _Wire, method: str, outgoing: Callable[[int], _Message],
                  own: Any, error: Exception | None) -> list[Any]:
        """Every rank sends every other rank ``outgoing(peer)`` and receives theirs (one round;
        rank r sends to r + 1, r + 2, ...); the list of every rank's object, ``own`` (this
        rank's pickled bytes) unpickled at this rank's place.  Cost: (p - 1) (alpha + n beta)
        per rank."""
        tag = self._tag()
        p, me = self.size, self.rank
        if p == 1:
            if error is not None:
                raise error
            return [_unpickle(own)]
        if p == 2:
            peer = 1 - me
            got = wire.swap(outgoing(peer), peer, tag)
            msgs = [None, got] if me == 0 else [got, None]
        else:
            slots = _slots(p)
            recvs: list[MPI.Request] = []
            for r in range(p):
                if r != me:
                    wire.post(slots, r, r, tag, recvs)
            sends: list[MPI.Request] = []
            for k in range(1, p):
                r = (me + k) % p
                wire.send(outgoing(r), r, tag, sends)
            wire.wait(recvs)
            msgs = [wire.take(slots, r, r, tag) if r != me else None for r in range(p)]
            wire.wait(sends)
        if error is not None:
            raise error
        bad = [m.size for m in msgs if m is not None and m.size < 0]
        if bad:
            raise _refused(method, bad)
        return [_unpickle(own) if m is None else _unpickle(_data(m)) for m in msgs]

    def _allgather_direct(self, wire: _Wire, sendobj: Any) -> list[Any]:
        msg, error = self._result_message(sendobj, None, 0)
        own = None if error is not None else _data(msg)
        return self._swap(wire, "allgather", lambda r: msg, own, error)

    def _alltoall_direct(self, wire: _Wire, items: list[Any] | None,
                         error: Exception | None) -> list[Any]:
        p, me = self.size, self.rank
        datas: list[Any] = []
        if error is None:
            try:
                datas = [_pickle(x) for x in (items if items is not None else [None] * p)]
            except Exception as exc:
                error = exc
        if error is not None:
            no = _Message.refusal(_refusal(error, me))
            return self._swap(wire, "alltoall", lambda r: no, None, error)
        return self._swap(wire, "alltoall", lambda r: _Message.of(datas[r]), datas[me],
                              None)

    def _reduce_direct(self, wire: _Wire, sendobj: Any, fn: Callable[[Any, Any], Any],
                       root: int) -> Any:
        tag = self._tag()
        me = self.rank
        result, error, code = self._tree_reduce(wire, tag, sendobj, fn)
        if root != 0:
            if me == 0:
                msg, error = self._result_message(result, error, code)
                wire.put(msg, root, tag)
            elif me == root:
                got = wire.recv(0, tag)
                if got.size < 0:
                    code = code or got.size
                elif error is None:
                    try:
                        result = _unpickle(_data(got))
                    except Exception as exc:
                        error = exc
        if error is not None:
            raise error
        if me != root:
            return None
        if code:
            raise _refused("reduce", [code])
        return result

    def _allreduce_direct(self, wire: _Wire, sendobj: Any,
                          fn: Callable[[Any, Any], Any]) -> Any:
        """mpi4py's ``PyMPI_allreduce_intra``: the tree reduction to rank 0, then its result
        down a binomial tree from rank 0 (pickled once; on one tag: the reduction's messages
        go to lower ranks, the broadcast's to higher ones)."""
        tag = self._tag()
        result, error, code = self._tree_reduce(wire, tag, sendobj, fn)
        if self.size == 1:  # the reduction's copy is the result
            if error is not None:
                raise error
            return result
        msg = None
        if self.rank == 0:
            msg, error = self._result_message(result, error, code)
        msg = self._tree_bcast(wire, tag, 0, msg)
        if error is not None:
            raise error
        if msg.size < 0:
            raise _refused("allreduce", [msg.size])
        return _unpickle(_data(msg))

    def _scan_direct(self, wire: _Wire, method: str, sendobj: Any,
                     fn: Callable[[Any, Any], Any], exclusive: bool) -> Any:
        """mpi4py's ``PyMPI_scan_p2p`` / ``PyMPI_exscan_p2p``: recursive doubling; at step
        m = 1, 2, 4, ... rank r exchanges its partial reduction with r ^ m (if that is a rank)
        and folds it in (``fn(theirs, mine)`` from a lower rank, which also enters the result;
        ``fn(mine, theirs)`` from a higher one).  Cost: ceil(lg p) (alpha + n beta + n gamma).

        A rank that fails, or receives a refusal, sends refusals on; it raises if its own
        step failed or if its result needs a refused rank's object (a lower rank's, or its
        own: then every refusal reaches it through the partials)."""
        tag = self._tag()
        p, me = self.size, self.rank
        error: Exception | None = None
        code = 0  # a refusal in this rank's partial (it covers its block of 2^k ranks)
        bad = 0  # a refusal in its result
        result = partial = None
        pdata: Any = None  # the partial's pickle while the partial is unchanged
        try:
            pdata = _pickle(sendobj)
            result = partial = _unpickle(pdata)  # PyMPI_copy(sendobj)
        except Exception as exc:
            error = exc
        started = False
        m = 1
        while m < p:
            t = me ^ m
            if t < p:
                if error is None and not code and pdata is None:
                    try:
                        pdata = _pickle(partial)
                    except Exception as exc:
                        error = exc
                if error is not None or code:
                    msg = _Message.refusal(_refusal(error, me) if error is not None else code)
                else:
                    msg = _Message.of(pdata)
                got = wire.swap(msg, t, tag)
                theirs = None
                if got.size < 0:
                    code = code or got.size
                    if me > t:
                        bad = bad or got.size
                elif error is None:
                    try:
                        theirs = _unpickle(_data(got))
                        if me > t:
                            if not code:
                                partial, pdata = fn(theirs, partial), None
                            if not bad:
                                first = exclusive and not started
                                result = theirs if first else fn(theirs, result)
                        elif not code:
                            partial, pdata = fn(partial, theirs), None
                    except Exception as exc:
                        error = exc
                if me > t:
                    started = True
            m <<= 1
        if error is not None:
            raise error
        if bad:
            raise _refused(method, [bad])
        return None if exclusive and me == 0 else result

    # -- the public methods --

    def barrier(self, *, algorithm: str | None = None) -> None:
        """As ``comm.barrier()``: synchronise all ranks (the p2p Barrier)."""
        self._front("barrier", algorithm, ("barrier",))
        self.Barrier(algorithm=algorithm)

    def bcast(self, obj: Any, root: int = 0, *, algorithm: str | None = None) -> Any:
        """As ``comm.bcast(obj, root)``: the root's ``obj``, pickled, on every rank (the root
        gets a copy too).  ``obj`` is read at the root only.

        Raises: see the module docstring (the root's pickling error on every rank)."""
        alg, r, *_ = self._front("bcast", algorithm, ("bcast",), root=root)
        wire = self._direct(algorithm, ("bcast",))
        if wire is not None:
            return self._bcast_direct(wire, obj, r)
        return self._bcast_obj("bcast", obj, r, alg)

    def gather(self, sendobj: Any, root: int = 0, *,
               algorithm: str | None = None) -> list[Any] | None:
        """As ``comm.gather(sendobj, root)``: at the root, the list of every rank's object in
        rank order; None at the other ranks."""
        alg, r, *_ = self._front("gather", algorithm, ("gather", "gatherv"), root=root)
        wire = self._direct(algorithm, ("gather", "gatherv"))
        if wire is not None:
            return self._gather_direct(wire, "gather", sendobj, r)
        items, error = self._gather_obj("gather", sendobj, r, alg)
        if error is not None:
            raise error
        return items

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0, *,
                algorithm: str | None = None) -> Any:
        """As ``comm.scatter(sendobj, root)``: rank i gets item i of the root's ``sendobj``
        (a sequence of exactly p objects, or None meaning p Nones; read at the root only).

        Raises (on every rank): ValueError if the root's ``sendobj`` does not hold p items,
        TypeError if it is not iterable."""
        alg, r, _, items, error = self._front("scatter", algorithm, ("scatter", "scatterv"),
                                              root=root, sendobj=sendobj, at_root=True)
        wire = self._direct(algorithm, ("scatter", "scatterv"))
        if wire is not None:
            return self._scatter_direct(wire, items, r, error)
        return self._scatter_obj("scatter", items, r, alg, error)

    def allgather(self, sendobj: Any, *, algorithm: str | None = None) -> list[Any]:
        """As ``comm.allgather(sendobj)``: every rank's object, in rank order, on every rank."""
        alg, *_ = self._front("allgather", algorithm, ("allgather", "allgatherv"))
        wire = self._direct(algorithm, ("allgather", "allgatherv"))
        if wire is not None and self.size <= _DIRECT_ALLGATHER_MAX:
            return self._allgather_direct(wire, sendobj)
        data, error, mine = _pickled(sendobj)
        sizes = np.empty(self.size, dtype=np.int64)
        self.Allgather([mine, _COUNT], [sizes, _COUNT], algorithm=alg[0])
        bad = {r: int(s) for r, s in enumerate(sizes) if s < 0}
        if bad:
            raise error if error is not None else _remote("allgather", bad)
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self.Allgatherv([data, _BYTE], _vspec(buf, sizes), algorithm=alg[-1])
        return _split(buf, sizes)

    def alltoall(self, sendobj: Sequence[Any], *, algorithm: str | None = None) -> list[Any]:
        """As ``comm.alltoall(sendobj)``: item j of rank i's ``sendobj`` (a sequence of
        exactly p objects, or None) becomes item i of rank j's result.

        Raises (on every rank): ValueError / TypeError when a rank's ``sendobj`` is not a
        sequence of p items (that rank raises mpi4py's error, the others name it)."""
        alg, _, _, items, error = self._front("alltoall", algorithm, ("alltoall", "alltoallv"),
                                              sendobj=sendobj)
        wire = self._direct(algorithm, ("alltoall", "alltoallv"))
        if wire is not None:
            return self._alltoall_direct(wire, items, error)
        send_sizes = np.empty(self.size, dtype=np.int64)
        data, counts = _NOTHING, [0] * self.size
        if error is None:
            try:
                data, counts = _join(items if items is not None else [None] * self.size)
                send_sizes[:] = counts
            except Exception as exc:
                data, counts, error = _NOTHING, [0] * self.size, exc
        if error is not None:
            send_sizes[:] = _code(error)
        sizes = np.empty(self.size, dtype=np.int64)
        self.Alltoall([send_sizes, _COUNT], [sizes, _COUNT], algorithm=alg[0])
        bad = {r: int(s) for r, s in enumerate(sizes) if s < 0}
        if error is not None or bad:
            raise error if error is not None else _remote("alltoall", bad)
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self.Alltoallv(_vspec(data, counts), _vspec(buf, sizes), algorithm=alg[-1])
        return _split(buf, sizes)

    def reduce(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM,
               root: int = 0, *, algorithm: str | None = None) -> Any | None:
        """As ``comm.reduce(sendobj, op, root)``: at the root, every rank's object reduced
        with ``op`` (an ``MPI.Op``, called as ``op(a, b)``, or any callable) in mpi4py's
        grouping (see the module docstring); None at the other ranks.  Direct: mpi4py's
        binomial tree to rank 0, then to the root; with an algorithm named, the objects are
        gathered at the root (Gather + Gatherv; ``algorithm=`` is forwarded to them)."""
        alg, r, fn, *_ = self._front("reduce", algorithm, ("gather", "gatherv"), root=root,
                                     op=op)
        wire = self._direct(algorithm, ("gather", "gatherv")) if _fast() else None
        if wire is not None:
            return self._reduce_direct(wire, sendobj, fn, r)
        items, error = self._gather_obj("reduce", sendobj, r, alg)
        if error is not None:
            raise error
        return None if items is None else _fold(items, fn)

    def allreduce(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
                  algorithm: str | None = None) -> Any:
        """As ``comm.allreduce(sendobj, op)``: the reduction of :meth:`reduce` on every rank
        (direct: reduced to rank 0 as :meth:`reduce`, then down a binomial tree; with an
        algorithm named, gathered and reduced at rank 0, then broadcast: ``algorithm=`` is
        forwarded to the Gather, Gatherv and Bcast)."""
        alg, _, fn, *_ = self._front("allreduce", algorithm, ("gather", "gatherv", "bcast"),
                                     op=op)
        wire = self._direct(algorithm, ("gather", "gatherv", "bcast")) if _fast() else None
        if wire is not None:
            return self._allreduce_direct(wire, sendobj, fn)
        items, error = self._gather_obj("allreduce", sendobj, 0, alg[:2])
        result = None
        if items is not None:
            try:
                result = _fold(items, fn)
            except Exception as exc:
                error = exc
        mine = error if self.rank == 0 else None
        try:
            return self._bcast_obj("allreduce", result, 0, alg[2:], mine)
        except Exception:
            if error is not None:
                raise error from None
            raise

    def _scan(self, method: str, sendobj: Any, op: Any, algorithm: Any,
              exclusive: bool) -> Any:
        used = ("gather", "gatherv", "scatter", "scatterv")
        alg, _, fn, *_ = self._front(method, algorithm, used, op=op)
        wire = self._direct(algorithm, used) if _fast() else None
        if wire is not None:
            return self._scan_direct(wire, method, sendobj, fn, exclusive)
        items, error = self._gather_obj(method, sendobj, 0, alg[:2])
        results = None
        if items is not None:
            try:
                results = _prefix(items, fn, exclusive)
            except Exception as exc:
                error = exc
        mine = error if self.rank == 0 else None
        try:
            return self._scatter_obj(method, results, 0, alg[2:], mine)
        except Exception:
            if error is not None:
                raise error from None
            raise

    def scan(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
             algorithm: str | None = None) -> Any:
        """As ``comm.scan(sendobj, op)``: rank r gets x0 op ... op xr, in mpi4py's grouping
        (direct: mpi4py's recursive doubling; with an algorithm named, gathered at rank 0,
        reduced, each prefix scattered: ``algorithm=`` is forwarded to the Gather(v) and
        Scatter(v))."""
        return self._scan("scan", sendobj, op, algorithm, exclusive=False)

    def exscan(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
               algorithm: str | None = None) -> Any:
        """As ``comm.exscan(sendobj, op)``: rank r gets x0 op ... op x(r-1); None on rank 0
        (as :meth:`scan`)."""
        return self._scan("exscan", sendobj, op, algorithm, exclusive=True)
