"""The collective API both backends share: the methods of ``mpi4py.MPI.Comm``.

Every method checks its arguments through :mod:`mpicoll._args` (raising ``TypeError`` or
``ValueError`` before any message) and then hands the call to the backend's ``_run``.  The
buffer specs, ``MPI.IN_PLACE`` rules, defaults and argument order are mpi4py's, so existing
mpi4py code switches backend by changing one line.  ``algorithm=`` picks a hand-rolled
algorithm on the p2p backend (see :mod:`mpicoll.registry`); the native backend accepts only
``None``/``"native"`` there.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from mpi4py import MPI

from ..algorithms.registry import COLLECTIVES
from ..engines.mpi import Waitall
from .args import PARSERS, Call
from .buffers import Buf, is_in_place, parse
from .env import algorithm_var

__all__ = ["Collectives", "MismatchError"]


class MismatchError(ValueError):
    """Checked mode: ranks called a collective with arguments that do not agree.

    Raised on every rank at once, naming the field and the ranks that differ.
    """


_PREDEFINED_OPS = (
    "SUM",
    "PROD",
    "MAX",
    "MIN",
    "LAND",
    "LOR",
    "LXOR",
    "BAND",
    "BOR",
    "BXOR",
    "MAXLOC",
    "MINLOC",
)
_FIELDS = ("collective", "root", "count", "dtype", "item size", "op", "argument error",
           "forced algorithm", "segment size", "counts", "peer counts", "recvcounts given",
           "non-blocking")
# column of each field in the table of checked mode
(_COLL, _ROOT, _COUNT, _DTYPE, _ITEMSIZE, _OP, _ERROR, _FORCED, _SEGMENT, _COUNTS, _PEER,
 _STAGE, _NB) = range(len(_FIELDS))
# compared field by field (every rank must have the same value)
_UNIFORM = (_ROOT, _COUNT, _DTYPE, _ITEMSIZE, _OP, _FORCED, _SEGMENT)
# collectives whose every rank passes the same full counts list (compared by hash)
_SAME_COUNTS = {"allgatherv": "recvcounts", "reduce_scatter": "recvcounts"}
# collectives whose per-rank count is compared with the root's counts
_ROOTED_V = {"scatterv": ("sendcounts", "recvbuf"), "gatherv": ("recvcounts", "sendbuf")}
# _STAGE: 0 the call itself; 1 Reduce_scatter(recvcounts=None) gathering the counts first
_GATHER_COUNTS = 1


def _op_code(op: MPI.Op | None) -> int:
    if op is None:
        return -1
    for i, name in enumerate(_PREDEFINED_OPS):
        if op == getattr(MPI, name):
            return i
    return 100  # any user op: handles cannot be compared across processes


def _mix(keys: np.ndarray) -> np.ndarray:
    """splitmix64 of uint64 ``keys``: a pseudo-random 64-bit weight per key."""
    x = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _weighted(values: Sequence[int] | np.ndarray, keys: np.ndarray) -> int:
    """sum(values[j] * mix(keys[j])) mod 2**64, as a signed 64-bit int (a linear hash: two
    lists that differ anywhere give different sums except with probability ~2**-64)."""
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    total = np.array([(v * _mix(keys)).sum(dtype=np.uint64)], dtype=np.uint64)
    return int(total.view(np.int64)[0])


def _list_hash(counts: Sequence[int] | np.ndarray) -> int:
    return _weighted(counts, np.arange(len(counts), dtype=np.uint64))


def _ranks(rows: Sequence[int] | np.ndarray) -> str:
    return "[" + ", ".join(str(int(r)) for r in rows) + "]"


def agree_on_construction(comm: MPI.Comm, name: str, check: bool,
                          error: Exception | None) -> None:
    """Constructing a backend (collective over ``comm``): before anything else collective, the
    ranks exchange (check flag, whether this rank's environment/arguments were accepted) in one
    small allgather.  Any refused rank: every rank raises ``ValueError`` (that rank its own
    error, the others naming it); check flags that differ: every rank raises
    :class:`MismatchError`.  So one rank's bad ``$MPICOLL_SEGMENT_SIZE`` or lone
    ``$MPICOLL_CHECK`` cannot leave the others hanging in a later collective."""
    mine = np.array([int(check), 0 if error is None else 1], dtype=np.int64)
    table = np.empty((comm.Get_size(), 2), dtype=np.int64)
    Waitall([comm.Iallgather(mine, table)])
    bad = np.flatnonzero(table[:, 1])
    if error is not None:
        raise error
    if bad.size:
        raise ValueError(f"mpicoll.{name}: the environment or arguments were refused on "
                         f"rank(s) {_ranks(bad)} (see the error there); every rank stops")
    flags = table[:, 0]
    if (flags != flags[0]).any():
        raise MismatchError(
            f"mpicoll.{name}: ranks disagree on checked mode (check= or $MPICOLL_CHECK): "
            f"on for rank(s) {_ranks(np.flatnonzero(flags))}, off for rank(s) "
            f"{_ranks(np.flatnonzero(flags == 0))}; every rank must use the same")


def env_check() -> bool:
    """``$MPICOLL_CHECK``: 1/true/yes/on turns checked mode on by default; unset, empty or
    0/false/no/off leaves it off.

    Raises:
        ValueError: any other value, naming the variable (a typo must not silently turn the
            checks off).
    """
    raw = os.environ.get("MPICOLL_CHECK", "")
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"MPICOLL_CHECK={raw!r}: expected 1/true/yes/on or 0/false/no/off")


class Collectives:
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
    they disagree (see :meth:`_agree` for what is compared), instead of truncating or hanging.

    Backends are context managers: ``with mpicoll.p2p(comm) as c: ...`` calls :meth:`Free` on
    exit (collective for p2p, which frees its duplicate of ``comm``; nothing for native).

    Attributes:
        comm: the user's communicator (an intracommunicator).
        rank, size: this rank and the number of ranks p (also ``Get_rank()``/``Get_size()``).
        name: ``"native"`` or ``"p2p"``.
    """

    name = "base"

    def __init__(self, comm: MPI.Comm, *, check: bool | None = None) -> None:
        if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
            raise TypeError(f"comm: expected an mpi4py intracommunicator, got {comm!r}")
        if comm.Is_inter():
            raise TypeError("comm: intercommunicators are not supported")
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        #: a refused environment, raised by :func:`agree_on_construction` on every rank
        self._refused: ValueError | None = None
        try:
            self.check = env_check() if check is None else bool(check)
        except ValueError as exc:
            self.check, self._refused = False, exc
        self._check_comm = comm

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

    def _check_options(self, collective: str, algorithm: Any) -> None:
        """Check what is not a buffer argument, before any message: ``algorithm=`` must be None
        or a str (TypeError otherwise); the p2p backend also checks its environment."""
        if algorithm is not None and not isinstance(algorithm, str):
            raise TypeError(
                f"algorithm: expected an algorithm name (str) or None, got "
                f"{type(algorithm).__name__} {algorithm!r}"
            )

    def _segment_field(self) -> int:
        """The segment size checked mode compares (-1: not used by this backend)."""
        return -1

    def _check_usable(self) -> None:
        """Raise (before any MPI call) if the backend can no longer be used (p2p: freed)."""

    def _call(self, collective: str, nonblocking: bool, algorithm: str | None, *args: Any) -> Any:
        self._check_usable()
        if not self.check:
            self._check_options(collective, algorithm)
            call = PARSERS[collective](self.size, self.rank, *args)
            return self._run(call, nonblocking, algorithm, args)
        try:
            self._check_options(collective, algorithm)
            call = PARSERS[collective](self.size, self.rank, *args)
        except (TypeError, ValueError) as exc:
            self._agree(collective, None, exc, algorithm, nonblocking=nonblocking)
            raise
        self._agree(collective, call, None, algorithm, nonblocking=nonblocking)
        return self._run(call, nonblocking, algorithm, args)

    def _agree(self, collective: str, call: Call | None, error: Exception | None,
               algorithm: Any = None, *, gathering: Buf | None = None,
               stage: int = 0, nonblocking: bool = False) -> np.ndarray:
        """Checked mode: every rank compares its call with the others' and all raise the same
        :class:`MismatchError` if they disagree, or if any rank's arguments were refused (that
        rank re-raises its own error).  Costs one ``MPI_Iallgather`` of 13 integers per rank,
        completed while progressing every p2p schedule in flight (a peer may be waiting for
        this rank's outstanding schedule before it joins the agreement).

        Compared: the collective, blocking or non-blocking form (MPI never matches the two),
        root, element count, dtype and item size, op (predefined
        ops by name; any user op as "user op"), the forced algorithm (``algorithm=`` or
        ``$MPICOLL_<COLLECTIVE>_ALGORITHM``), the p2p segment size, and the counts of the
        v-collectives:

        * allgatherv, reduce_scatter: every rank's full recvcounts list (a 64-bit hash of it);
        * scatterv / gatherv: each rank's own count (its recvbuf's / sendbuf's) against the
          root's ``counts[rank]`` (the root's list by hash; the root names the ranks);
        * alltoallv: rank i's ``sendcounts[j]`` against rank j's ``recvcounts[i]`` for every
          pair (a linear 64-bit hash over all pairs: every rank contributes its rows).

        Hashes are 64-bit, so two different counts lists pass as equal with probability about
        2**-64.  ``gathering`` (Reduce_scatter with recvcounts=None): this rank's parsed
        recvbuf; the ranks then agree on the collective and exchange their receive counts in
        the same allgather (the returned table's "peer counts" column holds them); ``stage``
        marks that agreement (``_GATHER_COUNTS``) when this rank's recvbuf was refused.

        Returns:
            The table of every rank's signature (one row per rank).
        """
        sig = np.full(len(_FIELDS), -1, dtype=np.int64)
        sig[_COLL] = COLLECTIVES.index(collective)
        forced = algorithm if algorithm is not None else (
            os.environ.get(algorithm_var(collective), "").strip() or "auto")
        sig[_FORCED] = zlib.crc32(str(forced).encode())
        sig[_NB] = int(nonblocking)
        sig[_SEGMENT] = self._segment_field()
        sig[_STAGE] = _GATHER_COUNTS if gathering is not None else stage
        sig[_ERROR] = 0 if error is None else 1
        if gathering is not None:
            sig[_DTYPE] = gathering.array.dtype.num
            sig[_ITEMSIZE] = gathering.array.dtype.itemsize
            sig[_PEER] = gathering.count
        elif call is not None:
            sig[_ROOT] = call.root
            sig[_COUNT] = -1 if call.count is None else call.count
            sig[_DTYPE] = call.dtype.num
            sig[_ITEMSIZE] = call.dtype.itemsize
            sig[_OP] = _op_code(call.op)
            if collective in ("alltoallv", "alltoallw"):  # alltoallw: in bytes
                assert call.counts is not None
                assert call.send_counts is not None
                me, p = self.rank, self.size
                peers = np.arange(p, dtype=np.uint64)
                sig[_COUNTS] = _weighted(call.send_counts, np.uint64(me) * np.uint64(p) + peers)
                sig[_PEER] = _weighted(call.counts, peers * np.uint64(p) + np.uint64(me))
            else:
                if call.counts is not None:
                    sig[_COUNTS] = _list_hash(call.counts)
                if call.own_count is not None:
                    sig[_PEER] = call.own_count
        table = np.empty((self.size, len(_FIELDS)), dtype=np.int64)
        Waitall([self._check_comm.Iallgather(sig, table)])
        self._compare(collective, table, call, error, gathering is not None, str(forced))
        return table

    def _compare(self, collective: str, table: np.ndarray, call: Call | None,
                 error: Exception | None, gathering: bool, forced: str = "auto") -> None:
        """Raise :class:`MismatchError` if the rows of ``table`` disagree (see :meth:`_agree`);
        return quietly on a rank whose own arguments were refused (it re-raises its error)."""
        bad = np.flatnonzero(table[:, _ERROR])
        if bad.size:
            if error is not None:
                return  # this rank re-raises its own error
            raise MismatchError(f"{collective}: the arguments were refused on rank(s) "
                                f"{_ranks(bad)}; every rank stops")

        def same(f: int) -> None:
            col = table[:, f]
            if (col != col[0]).any():
                vals: dict[int, Any] = {int(r): int(v) for r, v in enumerate(col)}
                if f == _COLL:
                    vals = {r: COLLECTIVES[v] for r, v in vals.items()}
                what = "recvcounts given (a list, or None)" if f == _STAGE else _FIELDS[f]
                raise MismatchError(
                    f"{collective}: ranks disagree on {what}: {vals} (rank: value)")

        same(_COLL)
        nb = table[:, _NB]
        if (nb != nb[0]).any():
            name = collective.capitalize()  # Allreduce, Reduce_scatter_block, ...
            raise MismatchError(
                f"{collective}: ranks {_ranks(np.flatnonzero(nb))} call the non-blocking form "
                f"(I{name[0].lower()}{name[1:]}), ranks {_ranks(np.flatnonzero(nb == 0))} the "
                f"blocking one ({name}); MPI never matches the two")
        same(_STAGE)

        def same_forced() -> None:  # each rank knows only its own name: say which ranks differ
            col = table[:, _FORCED]
            if (col == col[0]).all():
                return
            me = self.rank
            others = np.flatnonzero(col != col[me])
            also = [int(r) for r in np.flatnonzero(col == col[me]) if r != me]
            what = "forces no algorithm ('auto')" if forced == "auto" else f"forces {forced!r}"
            raise MismatchError(
                f"{collective}: ranks disagree on the forced algorithm (algorithm= or "
                f"${algorithm_var(collective)}): this rank ({me}) {what}"
                + (f", as do ranks {_ranks(also)}" if also else "")
                + f"; ranks {_ranks(others)} force other algorithms (or none)")

        uniform: tuple[int, ...] = _UNIFORM
        if gathering or collective in ("scatterv", "gatherv", "alltoallv", "alltoallw",
                                       *_SAME_COUNTS):
            uniform = tuple(f for f in uniform if f != _COUNT)  # compared through the counts
        for f in uniform:
            if f == _FORCED:
                same_forced()
            else:
                same(f)
        if gathering:
            return
        if collective in _SAME_COUNTS:
            col = table[:, _COUNTS]
            if (col != col[0]).any():
                groups: dict[int, list[int]] = {}
                for r, h in enumerate(col):
                    groups.setdefault(int(h), []).append(r)
                shown = ", ".join(_ranks(g) for g in groups.values())
                raise MismatchError(
                    f"{collective}: ranks disagree on the counts: every rank must pass the same "
                    f"{_SAME_COUNTS[collective]}, but ranks {shown} pass different lists")
        elif collective in _ROOTED_V:
            root = int(table[0, _ROOT])
            own = table[:, _PEER]
            if _list_hash(own) != int(table[root, _COUNTS]):
                counts_name, buf_name = _ROOTED_V[collective]
                given = {int(r): int(c) for r, c in enumerate(own)}
                detail = ""
                if call is not None and call.counts is not None:  # the root knows which
                    detail = "; " + ", ".join(
                        f"rank {r} has {given[r]}, the root expects {c}"
                        for r, c in enumerate(call.counts) if c != given[r])
                raise MismatchError(
                    f"{collective}: the ranks' {buf_name} counts {given} (rank: count) do not "
                    f"match the {counts_name} of the root (rank {root}){detail}")
        elif collective in ("alltoallv", "alltoallw"):
            sent = np.array([table[:, _COUNTS].astype(np.uint64).sum(dtype=np.uint64)])
            recv = np.array([table[:, _PEER].astype(np.uint64).sum(dtype=np.uint64)])
            if sent[0] != recv[0]:
                raise MismatchError(
                    f"{collective}: the send and receive counts do not pair up: rank i's "
                    "sendcounts[j] must equal rank j's recvcounts[i] for every pair of ranks")

    def _run(
        self, call: Call, nonblocking: bool, algorithm: str | None, args: tuple[Any, ...]
    ) -> Any:
        raise NotImplementedError

    def _recvcounts(self, sendbuf: Any, recvbuf: Any, recvcounts: Any,
                    algorithm: Any = None, nonblocking: bool = False) -> Any:
        """Reduce_scatter's counts: as given, or every rank's receive count (allgather).

        In checked mode that allgather is the agreement itself (the ranks first check that they
        all call Reduce_scatter with recvcounts=None), so a rank calling another collective
        meets a :class:`MismatchError`, not a mismatched allgather."""
        if recvcounts is not None:
            return recvcounts
        self._check_usable()
        if self.check:
            try:
                self._check_options("reduce_scatter", algorithm)
                if is_in_place(sendbuf):
                    raise ValueError(
                        "recvcounts: Reduce_scatter with MPI.IN_PLACE needs recvcounts")
                rb = parse(recvbuf, "recvbuf", writable=True)
            except (TypeError, ValueError) as exc:
                self._agree("reduce_scatter", None, exc, algorithm, stage=_GATHER_COUNTS,
                            nonblocking=nonblocking)
                raise
            table = self._agree("reduce_scatter", None, None, algorithm, gathering=rb,
                                nonblocking=nonblocking)
            return [int(c) for c in table[:, _PEER]]
        self._check_options("reduce_scatter", algorithm)
        if is_in_place(sendbuf):
            raise ValueError("recvcounts: Reduce_scatter with MPI.IN_PLACE needs recvcounts")
        try:  # every rank takes part in the allgather, even one whose recvbuf is refused
            count, error = parse(recvbuf, "recvbuf", writable=True).count, None
        except (TypeError, ValueError) as exc:
            count, error = -1, exc
        mine = np.array([count], dtype=np.int64)
        gathered = np.empty(self.size, dtype=np.int64)
        # non-blocking, completed while progressing every p2p schedule in flight: a peer may be
        # waiting for this rank's outstanding schedule before it joins this allgather
        Waitall([self._check_comm.Iallgather(mine, gathered)])
        counts = [int(c) for c in gathered]
        if error is not None:
            raise error
        bad = [r for r, c in enumerate(counts) if c < 0]
        if bad:
            raise MismatchError(
                f"reduce_scatter: recvbuf was refused on rank(s) {bad}; every rank stops"
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
        recvcounts = self._recvcounts(sendbuf, recvbuf, recvcounts, algorithm)
        self._call("reduce_scatter", False, algorithm, sendbuf, recvbuf, recvcounts, op)

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
        recvcounts = self._recvcounts(sendbuf, recvbuf, recvcounts, algorithm, True)
        return self._call("reduce_scatter", True, algorithm, sendbuf, recvbuf, recvcounts, op)

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
