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
from typing import Any

import numpy as np
from mpi4py import MPI

from ._args import PARSERS, Call
from ._buffers import is_in_place, parse
from .registry import COLLECTIVES

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
           "forced algorithm")


def _op_code(op: MPI.Op | None) -> int:
    if op is None:
        return -1
    for i, name in enumerate(_PREDEFINED_OPS):
        if op == getattr(MPI, name):
            return i
    return 100  # any user op: handles cannot be compared across processes


def env_check() -> bool:
    """``$MPICOLL_CHECK`` set to 1/true/yes turns checked mode on by default."""
    return os.environ.get("MPICOLL_CHECK", "").lower() in ("1", "true", "yes", "on")


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

    Attributes:
        comm: the user's communicator (an intracommunicator).
        rank, size: this rank and the number of ranks p.
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
        self.check = env_check() if check is None else bool(check)
        self._check_comm = comm

    def __repr__(self) -> str:
        return f"<mpicoll.{self.name} rank {self.rank} of {self.size}>"

    def _call(self, collective: str, nonblocking: bool, algorithm: str | None, *args: Any) -> Any:
        if not self.check:
            call = PARSERS[collective](self.size, self.rank, *args)
            return self._run(call, nonblocking, algorithm, args)
        try:
            call = PARSERS[collective](self.size, self.rank, *args)
        except (TypeError, ValueError) as exc:
            self._agree(collective, None, exc, algorithm)
            raise
        self._agree(collective, call, None, algorithm)
        return self._run(call, nonblocking, algorithm, args)

    def _agree(self, collective: str, call: Call | None, error: Exception | None,
               algorithm: str | None = None) -> None:
        """Checked mode: all ranks compare (collective, root, count, dtype, op, forced
        algorithm) and raise the same :class:`MismatchError` if they differ, or if any rank's
        arguments were refused.  Costs one ``MPI_Allgather`` of 8 integers per call."""
        sig = np.full(len(_FIELDS), -1, dtype=np.int64)
        sig[0] = COLLECTIVES.index(collective)
        forced = algorithm or os.environ.get(f"MPICOLL_{collective.upper()}_ALGORITHM") or "auto"
        sig[7] = zlib.crc32(forced.encode())
        if call is not None:
            sig[1] = call.root
            sig[2] = -1 if call.count is None else call.count
            sig[3] = call.dtype.num
            sig[4] = call.dtype.itemsize
            sig[5] = _op_code(call.op)
            sig[6] = 0
        else:
            sig[6] = 1
        table = np.empty((self.size, len(_FIELDS)), dtype=np.int64)
        self._check_comm.Allgather(sig, table)
        bad = [int(i) for i in np.flatnonzero(table[:, 6])]
        if bad:
            if error is not None:
                return  # this rank re-raises its own error
            raise MismatchError(
                f"{collective}: the arguments were refused on rank(s) {bad}; every rank stops"
            )
        for f, name in enumerate(_FIELDS):
            if f == 6:
                continue
            col = table[:, f]
            if collective in ("scatterv", "gatherv", "alltoallv") and f == 2:
                continue
            if (col != col[0]).any():
                vals = {int(r): int(v) for r, v in enumerate(col)}
                raise MismatchError(f"{collective}: ranks disagree on {name}: {vals} (rank: value)")

    def _run(
        self, call: Call, nonblocking: bool, algorithm: str | None, args: tuple[Any, ...]
    ) -> Any:
        raise NotImplementedError

    def _recvcounts(self, sendbuf: Any, recvbuf: Any, recvcounts: Any) -> Any:
        """Reduce_scatter's counts: as given, or every rank's receive count (allgather)."""
        if recvcounts is not None:
            return recvcounts
        if is_in_place(sendbuf):
            raise ValueError("recvcounts: Reduce_scatter with MPI.IN_PLACE needs recvcounts")
        try:  # every rank takes part in the allgather, even one whose recvbuf is refused
            count, error = parse(recvbuf, "recvbuf", writable=True).count, None
        except (TypeError, ValueError) as exc:
            count, error = -1, exc
        counts = self._check_comm.allgather(count)
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
        recvcounts = self._recvcounts(sendbuf, recvbuf, recvcounts)
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
        recvcounts = self._recvcounts(sendbuf, recvbuf, recvcounts)
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
