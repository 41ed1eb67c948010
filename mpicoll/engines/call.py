"""What an engine runs: a checked and parsed collective call.

The backends' argument checking (:mod:`mpicoll.backends.args`) makes a :class:`Call`; the
backend chooses the algorithm, and the MPI engines (:mod:`mpicoll.engines.mpi`) and the
simulator (:mod:`mpicoll.engines.sim`) run the call with it: ``engine.run(call, algorithm)``.
A Call is never changed after parsing (a parse cache or a persistent plan can keep it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.registry import Algorithm
from ..algorithms.schedule import Context, Schedule

__all__ = ["Call"]


@dataclass
class Call:
    """A checked collective call.

    Attributes:
        collective: registry name (``allreduce``, ...).
        datatype / dtype: the MPI and numpy element type every message of the call uses.
        prepare: ``prepare(ctx) -> args`` for the schedule (does in-place copies via ctx).
        finish: ``finish(ctx, args)``, local work after the schedule's last round on the
            arguments ``prepare`` made (a Bcast of a derived datatype unpacks what arrived as
            bytes), or None.
        nbytes: the message size the ``auto`` choice uses; identical on every rank.
        count: element count for the ``count_ge_p`` restriction (None if not meaningful).
        commutative / in_place / uniform: what the restrictions are checked against.
        counts / send_counts / own_count: what checked mode compares across ranks for the
            v-collectives (see :meth:`mpicoll.backends.checked.CheckedMode._agree`).
        truncated: what this rank truncates locally, MPI's ``MPI_ERR_TRUNCATE`` without a
            message (its own block of an Alltoall whose receive is smaller than its send), or
            None; the call runs every round and raises it at the end of each run on this
            rank, as MPICH does.  A :class:`~mpicoll.engines.errors.LocalError` says its own
            sentence and error class (a buffer spec reaching outside its buffer: see
            :func:`mpicoll.backends.buffers._spill`).
        bounds: why this rank's buffer specs reach outside its buffers (the call runs on a
            scratch and raises ``truncated`` at its end) or its receive blocks overlap (the
            call goes, no error), or None; checked mode refuses such a call on every rank
            before any message instead.
    """

    collective: str
    datatype: MPI.Datatype
    dtype: np.dtype
    prepare: Callable[[Context], tuple[Any, ...]]
    nbytes: int = 0
    count: int | None = None
    commutative: bool = True
    in_place: bool = False
    uniform: bool = True
    op: MPI.Op | None = field(default=None, repr=False)
    root: int = -1
    #: the per-rank counts list this rank passes that must agree with the other ranks':
    #: allgatherv's and alltoallv's recvcounts, reduce_scatter's recvcounts, the root's counts
    #: of scatterv/gatherv (None elsewhere, and at the non-roots)
    counts: tuple[int, ...] | None = field(default=None, repr=False)
    #: alltoallv's sendcounts (rank j's recvcounts[i] must equal rank i's sendcounts[j])
    send_counts: tuple[int, ...] | None = field(default=None, repr=False)
    #: scatterv/gatherv: this rank's own count (recvbuf's / sendbuf's), which must equal the
    #: root's counts[rank]
    own_count: int | None = None
    finish: Callable[[Context, tuple[Any, ...]], None] | None = field(default=None, repr=False)
    #: the datatype checked mode reads the type signature of (None: ``datatype``; Bcast's
    #: user datatype, whose messages go as bytes)
    sig_datatype: MPI.Datatype | None = field(default=None, repr=False)
    #: the datatypes the units of ``counts``, ``send_counts`` and ``own_count`` are of (None:
    #: the signature's datatype): a root's counts and its own count may be in two datatypes
    count_types: tuple[MPI.Datatype | None, ...] = field(default=(None, None, None), repr=False)
    #: a local truncation on this rank (see the class docstring), said for the error message
    truncated: str | None = None
    #: a buffer spec of this rank reaching outside its buffer (see the class docstring)
    bounds: str | None = field(default=None, repr=False)

    def schedule(self, ctx: Context, algorithm: Algorithm) -> Schedule:
        """``algorithm``'s schedule for this call on ``ctx``: its arguments from
        :attr:`prepare`, then :attr:`finish` after its last round (so a compiled plan records
        it as the tail's local work)."""
        args = self.prepare(ctx)
        gen = algorithm.schedule(ctx, *args)
        if self.finish is None:
            return gen
        return _then(gen, ctx, args, self.finish)


def _then(gen: Schedule, ctx: Context, args: tuple[Any, ...],
          finish: Callable[[Context, tuple[Any, ...]], None]) -> Schedule:
    yield from gen
    finish(ctx, args)
