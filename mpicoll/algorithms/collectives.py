"""One record per collective: every fact about a collective that is not an algorithm.

The backends (method names, the native calls, checked mode), the registry (the list of
collectives, what ``n`` means in a cost), the tools (bench's busbw factor, the case builder's
roots, ops and in-place rules, the simulator's vector engine) and the tests read these records;
nothing else lists them.  Adding a collective is one more :class:`Collective`
in :data:`RECORDS`, its parser in :mod:`mpicoll.backends.args` and its algorithms.

    >>> from mpicoll.algorithms.collectives import BY_NAME
    >>> BY_NAME["allreduce"].nonblocking, BY_NAME["allreduce"].busbw(4)
    ('Iallreduce', 1.5)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["BY_NAME", "NAMES", "RECORDS", "Collective", "get"]

#: Where ``MPI.IN_PLACE`` may be passed: never, at the root only, or at every rank.
InPlaceAt = Literal["", "root", "all"]


#: nccl-tests' bus-bandwidth factors, by the text bench prints.
_FACTORS: dict[str, Callable[[int], float]] = {
    "1": lambda p: 1.0,
    "(P-1)/P": lambda p: (p - 1) / p,
    "2(P-1)/P": lambda p: 2.0 * (p - 1) / p,
}


@dataclass(frozen=True)
class Collective:
    """The facts of one collective (mpi4py's names, MPI's rules, nccl-tests' busbw factor).

    Attributes:
        name: mpicoll's name, the lower-case MPI name (``allreduce``, ``reduce_scatter_block``);
            the registry, ``-c`` on the command line and ``MPICOLL_<NAME>_ALGORITHM`` use it.
        method: the blocking method of ``mpi4py.MPI.Comm`` and of the backends (``Allreduce``);
            :attr:`nonblocking` and :attr:`persistent` are derived from it.
        rooted: has a ``root`` argument (bcast, scatter(v), gather(v), reduce).
        reduction: takes an ``op`` (reduce, allreduce, reduce_scatter(_block), scan, exscan).
        vector: a v-variant: per-rank counts and displacements, which may differ per rank
            (the ``uniform`` restriction applies; reduce_scatter's ``recvcounts`` included).
        blocks: a count is one block of p (scatter, gather, allgather, alltoall and their
            v-forms, reduce_scatter(_block)): bench's sizes are per block times p.
        in_place: the argument that may be ``MPI.IN_PLACE`` (``sendbuf`` or ``recvbuf``; ""
            for none: barrier, and bcast, which is in place by nature).
        in_place_at: where that is allowed: ``"root"`` (scatter(v): recvbuf; gather(v) and
            reduce: sendbuf), ``"all"`` (every rank), or "" (nowhere).
        symmetric: no root, and every rank passes the same counts (its own block aside), so the
            vector simulator may prepare rank 0's call for all ranks.
        size_meaning: what ``n`` (bytes) means in the collective's cost formulas.
        bench_size: what bench's size S means for it (the ``# <collective>: S = ...`` line).
        busbw_factor: nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md) as bench prints
            it: ``"2(P-1)/P"``, ``"(P-1)/P"`` or ``"1"``; "" where busbw means nothing
            (barrier).  :meth:`busbw` evaluates it.
    """

    name: str
    method: str
    rooted: bool = False
    reduction: bool = False
    vector: bool = False
    blocks: bool = False
    in_place: Literal["", "sendbuf", "recvbuf"] = "sendbuf"
    in_place_at: InPlaceAt = "all"
    symmetric: bool = False
    size_meaning: str = ""
    bench_size: str = ""
    busbw_factor: str = "1"

    @property
    def nonblocking(self) -> str:
        """The non-blocking method: ``Iallreduce``, ``Ireduce_scatter_block``."""
        return "I" + self.method[0].lower() + self.method[1:]

    @property
    def persistent(self) -> str:
        """The persistent (MPI-4) method: ``Allreduce_init``."""
        return self.method + "_init"

    @property
    def algorithm_var(self) -> str:
        """The environment variable forcing the p2p algorithm: ``MPICOLL_ALLREDUCE_ALGORITHM``."""
        return f"MPICOLL_{self.name.upper()}_ALGORITHM"

    def busbw(self, p: int) -> float | None:
        """busbw / algbw at ``p`` ranks (None for barrier): ``2(p-1)/p`` for allreduce."""
        return _FACTORS[self.busbw_factor](p) if self.busbw_factor else None

    def method_for(self, nonblocking: bool) -> str:
        """:attr:`nonblocking` if ``nonblocking`` else :attr:`method`."""
        return self.nonblocking if nonblocking else self.method


_PER_RANK = "vector size per rank"
_RING = "(P-1)/P"
_C = Collective

#: Every collective of the API, in the order the docs list them.
RECORDS: tuple[Collective, ...] = (
    _C("barrier", "Barrier", in_place="", in_place_at="", symmetric=True,
       size_meaning="unused", bench_size="0", busbw_factor=""),
    _C("bcast", "Bcast", rooted=True, in_place="", in_place_at="",
       size_meaning="message size", bench_size="buffer per rank"),
    _C("scatter", "Scatter", rooted=True, blocks=True, in_place="recvbuf", in_place_at="root",
       size_meaning="bytes at the root in all (p blocks)",
       bench_size="root's input (P blocks)", busbw_factor=_RING),
    _C("scatterv", "Scatterv", rooted=True, vector=True, blocks=True, in_place="recvbuf",
       in_place_at="root", size_meaning="bytes at the root in all",
       bench_size="root's input (P blocks)", busbw_factor=_RING),
    _C("gather", "Gather", rooted=True, blocks=True, in_place_at="root",
       size_meaning="bytes at the root in all (p blocks)",
       bench_size="root's output (P blocks)", busbw_factor=_RING),
    _C("gatherv", "Gatherv", rooted=True, vector=True, blocks=True, in_place_at="root",
       size_meaning="bytes at the root in all",
       bench_size="root's output (P blocks)", busbw_factor=_RING),
    _C("reduce", "Reduce", rooted=True, reduction=True, in_place_at="root",
       size_meaning=_PER_RANK, bench_size="vector per rank"),
    _C("allreduce", "Allreduce", reduction=True, symmetric=True,
       size_meaning=_PER_RANK, bench_size="vector per rank", busbw_factor="2(P-1)/P"),
    _C("reduce_scatter_block", "Reduce_scatter_block", reduction=True, blocks=True,
       symmetric=True, size_meaning="input vector size per rank (p blocks)",
       bench_size="input vector per rank (P blocks)", busbw_factor=_RING),
    _C("reduce_scatter", "Reduce_scatter", reduction=True, vector=True, blocks=True,
       symmetric=True, size_meaning="input vector size per rank",
       bench_size="input vector per rank (P blocks)", busbw_factor=_RING),
    _C("allgather", "Allgather", blocks=True, symmetric=True,
       size_meaning="bytes gathered in all (p blocks)",
       bench_size="gathered output per rank (P blocks)", busbw_factor=_RING),
    _C("allgatherv", "Allgatherv", vector=True, blocks=True, symmetric=True,
       size_meaning="bytes gathered in all",
       bench_size="gathered output per rank (P blocks)", busbw_factor=_RING),
    _C("alltoall", "Alltoall", blocks=True, symmetric=True,
       size_meaning="bytes a rank sends in all (p blocks)",
       bench_size="bytes one rank sends in all (P blocks)", busbw_factor=_RING),
    _C("alltoallv", "Alltoallv", vector=True, blocks=True,
       size_meaning="bytes a rank sends in all",
       bench_size="bytes one rank sends in all (P blocks)", busbw_factor=_RING),
    _C("scan", "Scan", reduction=True, size_meaning=_PER_RANK, bench_size="vector per rank"),
    _C("exscan", "Exscan", reduction=True, size_meaning=_PER_RANK,
       bench_size="vector per rank"),
    _C("alltoallw", "Alltoallw", vector=True, blocks=True,
       size_meaning="bytes a rank sends in all",
       bench_size="bytes one rank sends in all (P blocks)", busbw_factor=_RING),
)

#: The records by name.
BY_NAME: dict[str, Collective] = {c.name: c for c in RECORDS}

#: The names, in :data:`RECORDS` order (``registry.COLLECTIVES``).
NAMES: tuple[str, ...] = tuple(BY_NAME)


def get(name: str) -> Collective:
    """The record of ``name``; ValueError listing the valid names if there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; expected one of {NAMES}") from None
