"""The lower-case object collectives of ``mpi4py.MPI.Comm`` on both backends.

``barrier``, ``bcast``, ``gather``, ``scatter``, ``allgather``, ``alltoall``, ``reduce``,
``allreduce``, ``scan`` and ``exscan`` take and return Python objects, with mpi4py's signatures,
defaults and return values (``gather`` returns None at non-roots, ``exscan`` None at rank 0).

* :class:`NativeObjects` (native backend) delegates to mpi4py's own method on the user's
  communicator.
* :class:`P2PObjects` (p2p backend) serializes with ``MPI.pickle`` (so a user's
  ``MPI.pickle.__init__(dumps, loads)`` is honoured) and moves the bytes with the backend's own
  buffer collectives, sizes first, as mpi4py does in ``msgpickle.pxi``: ``bcast`` = Bcast of an
  int64 size then Bcast of the bytes; ``gather`` = Gather of the sizes then Gatherv;
  ``scatter`` = Scatter then Scatterv; ``allgather`` = Allgather then Allgatherv;
  ``alltoall`` = Alltoall then Alltoallv.  Sizes are int64 and every message carries its count
  as an MPI count (mpi4py passes it to ``MPI_Isend_c``), so objects over 2 GiB go through.

Reductions (p2p) gather the objects at one rank, which applies ``op`` in the grouping mpi4py's
own object reductions use (``mpi4py.rc.fast_reduce``: a binomial tree for reduce/allreduce, a
recursive-doubling prefix for scan/exscan; otherwise a left fold in rank order), so even a
non-associative or non-commutative callable gives mpi4py's result; then ``allreduce`` broadcasts
it and ``scan``/``exscan`` scatter each rank's prefix.  The gathering rank holds every rank's
object at once (mpi4py's tree holds about lg p): mind the memory for very large objects.

Errors (both backends): ``root`` is converted as the buffer methods convert it
(:func:`~mpicoll.backends.args.root_of`: not a number: ``TypeError``; beyond a C int:
``OverflowError``; outside [0, p): :class:`~mpicoll.backends.buffers.MPIValueError`, both a
``ValueError`` and mpi4py's ``MPI.Exception`` (``MPI_ERR_ROOT``)); an op that is not callable
is a ``TypeError``; both before any message.  Checked mode: see :class:`_Front`.

Errors (p2p, unchecked): what one rank alone can know (its object does not pickle; a
scatter/alltoall ``sendobj`` that is not a sequence of p items: ``ValueError`` /
``TypeError``) it raises itself after sending a negative size in the size exchange; every
rank that would wait for those bytes then raises an exception of the same type (naming the
rank), so nobody hangs.  Ranks that need nothing from the failed one (the non-roots of a
``gather`` or ``reduce``) return normally.

Security: unpickling runs code chosen by whoever wrote the bytes (Python's ``pickle`` docs:
"Never unpickle data received from an untrusted or unauthenticated source"), as in mpi4py's
own object methods: they trust every peer; never use them with untrusted ranks.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import mpi4py
import numpy as np
from mpi4py import MPI

from ..algorithms import registry
from .args import root_of
from .checked import check_algorithm_type

__all__ = ["NativeObjects", "P2PObjects"]

_BYTE = MPI.BYTE
_COUNT = MPI.INT64_T
_NOTHING = np.empty(0, dtype=np.uint8)
#: exception types a refused rank reports by code (-1 - index) in the size exchange; any other
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


# ---- p2p ------------------------------------------------------------------------------------


class P2PObjects(_Front):
    """The object collectives of the p2p backend, built on its own buffer collectives.

    Every method takes ``algorithm=``: the name is forwarded to each buffer collective the
    method runs that has an algorithm of that name (``mpicoll algorithms`` lists them; e.g.
    ``allgather(obj, algorithm="ring")`` runs a ring Allgather of the sizes and a ring
    Allgatherv of the bytes); the others choose automatically.  A name none of them has is
    refused (ValueError) before any message; None leaves each to its
    ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` or ``auto``.
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

    _local_errors = True

    def _front(self, method: str, algorithm: Any, collectives: tuple[str, ...] = (),
               **kw: Any) -> Any:
        if self._freed:  # before checked mode's agreement on the freed communicator
            raise RuntimeError(f"this {self.name} backend was freed")
        return super()._front(method, algorithm, collectives, **kw)

    def _algorithms(self, algorithm: Any, collectives: tuple[str, ...]) -> tuple[str | None, ...]:
        """The ``algorithm=`` of each buffer collective used (see the class docstring)."""
        check_algorithm_type(algorithm)
        if algorithm is None or algorithm == "auto":
            picked: tuple[str | None, ...] = (algorithm,) * len(collectives)
        else:
            names = [{a.name for a in registry.algorithms(c)} for c in collectives]
            picked = tuple(algorithm if algorithm in n else "auto" for n in names)
            if all(p == "auto" for p in picked):
                known = sorted(set().union(*names))
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
        return self._bcast_obj("bcast", obj, r, alg)

    def gather(self, sendobj: Any, root: int = 0, *,
               algorithm: str | None = None) -> list[Any] | None:
        """As ``comm.gather(sendobj, root)``: at the root, the list of every rank's object in
        rank order; None at the other ranks."""
        alg, r, *_ = self._front("gather", algorithm, ("gather", "gatherv"), root=root)
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
        return self._scatter_obj("scatter", items, r, alg, error)

    def allgather(self, sendobj: Any, *, algorithm: str | None = None) -> list[Any]:
        """As ``comm.allgather(sendobj)``: every rank's object, in rank order, on every rank."""
        alg, *_ = self._front("allgather", algorithm, ("allgather", "allgatherv"))
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
        grouping (see the module docstring); None at the other ranks.  The objects are
        gathered at the root (Gather + Gatherv; ``algorithm=`` is forwarded to them)."""
        alg, r, fn, *_ = self._front("reduce", algorithm, ("gather", "gatherv"), root=root,
                                     op=op)
        items, error = self._gather_obj("reduce", sendobj, r, alg)
        if error is not None:
            raise error
        return None if items is None else _fold(items, fn)

    def allreduce(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
                  algorithm: str | None = None) -> Any:
        """As ``comm.allreduce(sendobj, op)``: the reduction of :meth:`reduce` on every rank
        (gathered and reduced at rank 0, then broadcast; ``algorithm=`` is forwarded to the
        Gather, Gatherv and Bcast)."""
        alg, _, fn, *_ = self._front("allreduce", algorithm, ("gather", "gatherv", "bcast"),
                                     op=op)
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
        alg, _, fn, *_ = self._front(method, algorithm,
                                     ("gather", "gatherv", "scatter", "scatterv"), op=op)
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
        (gathered at rank 0, reduced, each prefix scattered; ``algorithm=`` is forwarded to the
        Gather(v) and Scatter(v))."""
        return self._scan("scan", sendobj, op, algorithm, exclusive=False)

    def exscan(self, sendobj: Any, op: MPI.Op | Callable[[Any, Any], Any] = MPI.SUM, *,
               algorithm: str | None = None) -> Any:
        """As ``comm.exscan(sendobj, op)``: rank r gets x0 op ... op x(r-1); None on rank 0
        (as :meth:`scan`)."""
        return self._scan("exscan", sendobj, op, algorithm, exclusive=True)
