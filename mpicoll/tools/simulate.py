"""``mpicoll.simulate``: one collective call simulated on p ranks, as a user would make it.

Builds every rank's mpi4py-style arguments, checks and parses them as the backends do
(:mod:`mpicoll.backends.args`), picks the algorithm, and runs the schedules on the simulator
(:mod:`mpicoll.engines.sim`: the vector engine where it applies, else per rank).  The
environment (``MPICOLL_RANKS_PER_NODE``, ``MPICOLL_SEGMENT_SIZE``) is read here, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms import registry
from ..algorithms.datatypes import is_derived
from ..backends import env as _env
from ..backends.args import PARSERS, Call, select
from ..backends.buffers import datatype_of
from ..engines.sim import NotVectorizableError, SimResult, Simulator, TwoLevel, run_vector
from ..model.alphabeta import Model

__all__ = ["SYMMETRIC", "make_args", "simulate", "vcounts"]


# ---------------------------------------------------------------------------------------------
# Building each rank's arguments: the same mpi4py-style calls a user makes.


def vcounts(count: int, p: int) -> list[int]:
    """Uneven per-rank counts averaging ``count`` (some zero): the v-variants' test shape."""
    return [max(0, count + (i % 3) - 1) for i in range(p)]


def _data(rank: int, n: int, dtype: np.dtype, salt: int = 0) -> np.ndarray:
    """Small integer-valued inputs (exact in every dtype and op we test)."""
    vals = (np.arange(n, dtype=np.int64) * 7 + rank * 3 + salt) % 5 + 1
    if dtype == np.bool_:
        return (vals % 2).astype(bool)
    return vals.astype(dtype)


class _Args:
    """Per-rank user arguments of one collective call (see :func:`make_args`)."""

    def __init__(self, data: bool) -> None:
        self.data = data
        self._shared: dict[tuple[str, int, str], np.ndarray] = {}

    def buf(self, kind: str, n: int, dtype: np.dtype, rank: int, fill: bool) -> np.ndarray:
        if self.data:
            return _data(rank, n, dtype, salt=len(kind)) if fill else np.zeros(n, dtype)
        key = (kind, n, dtype.str)
        if key not in self._shared:  # never touched in cost-only mode: no pages are committed
            self._shared[key] = np.empty(n, dtype)
        return self._shared[key]


def make_args(collective: str, p: int, rank: int, count: int, dtype: np.dtype, *,
              op: MPI.Op = MPI.SUM, root: int = 0, in_place: bool = False,
              factory: _Args | None = None) -> tuple[tuple[Any, ...], Any]:
    """The arguments rank ``rank`` passes to the collective's mpi4py method, and its output.

    ``count`` is elements per rank (per block for the block collectives); v-variants use
    :func:`vcounts`.
    """
    f = factory or _Args(True)
    B = f.buf
    n = count
    c = collective
    if c == "barrier":
        return (), None
    if c == "bcast":
        b = B("x", n, dtype, root, True) if rank == root else B("y", n, dtype, rank, False)
        return (b, root), b
    if c in ("scatter", "scatterv"):
        counts = vcounts(n, p) if c == "scatterv" else [n] * p
        total = sum(counts)
        s = B("s", total, dtype, root, True) if rank == root else None
        if rank == root and in_place:
            rb: Any = MPI.IN_PLACE
            out = s
        else:
            rb = out = B("r", counts[rank], dtype, rank, False)
        sspec = [s, counts] if (c == "scatterv" and s is not None) else s
        return (sspec, rb, root), out
    if c in ("gather", "gatherv"):
        counts = vcounts(n, p) if c == "gatherv" else [n] * p
        rbuf = B("r", sum(counts), dtype, rank, False) if rank == root else None
        if rank == root and in_place:
            assert rbuf is not None
            off = sum(counts[:rank])
            if f.data:
                rbuf[off : off + counts[rank]] = _data(rank, counts[rank], dtype)
            sb: Any = MPI.IN_PLACE
        else:
            sb = B("s", counts[rank], dtype, rank, True)
        rspec = [rbuf, counts] if (c == "gatherv" and rbuf is not None) else rbuf
        return (sb, rspec, root), rbuf
    if c in ("reduce", "allreduce", "scan", "exscan"):
        r_out = B("r", n, dtype, rank, False) if (c != "reduce" or rank == root) else None
        if in_place and r_out is not None:
            if f.data:
                r_out[:] = _data(rank, n, dtype)
            sbuf: Any = MPI.IN_PLACE
        else:
            sbuf = B("s", n, dtype, rank, True)
        if c == "reduce":
            return (sbuf, r_out, op, root), r_out
        return (sbuf, r_out, op), r_out
    if c in ("reduce_scatter_block", "reduce_scatter"):
        counts = vcounts(n, p) if c == "reduce_scatter" else [n] * p
        total = sum(counts)
        if in_place:
            r_out = B("r", total, dtype, rank, True)
            sbuf = MPI.IN_PLACE
        else:
            r_out = B("r", counts[rank], dtype, rank, False)
            sbuf = B("s", total, dtype, rank, True)
        if c == "reduce_scatter":
            return (sbuf, r_out, counts, op), r_out
        return (sbuf, r_out, op), r_out
    if c in ("allgather", "allgatherv"):
        counts = vcounts(n, p) if c == "allgatherv" else [n] * p
        r_out = B("r", sum(counts), dtype, rank, False)
        if in_place:
            off = sum(counts[:rank])
            if f.data:
                r_out[off : off + counts[rank]] = _data(rank, counts[rank], dtype)
            sbuf = MPI.IN_PLACE
        else:
            sbuf = B("s", counts[rank], dtype, rank, True)
        rspec = [r_out, counts] if c == "allgatherv" else r_out
        return (sbuf, rspec), r_out
    if c in ("alltoall", "alltoallv", "alltoallw"):
        if c != "alltoall":
            sc = [max(0, n + (rank + j) % 3 - 1) for j in range(p)]
            rc = [max(0, n + (j + rank) % 3 - 1) for j in range(p)]
        else:
            sc = rc = [n] * p
        r_out = B("r", sum(rc), dtype, rank, in_place)
        sbuf = MPI.IN_PLACE if in_place else B("s", sum(sc), dtype, rank, True)
        if c == "alltoallw":  # alltoallv's blocks, a datatype per peer, byte displacements
            types = [datatype_of(np.dtype(dtype))] * p

            def w(buf: Any, counts: list[int]) -> list[Any]:
                displs = np.concatenate(([0], np.cumsum(counts[:-1]))) * np.dtype(dtype).itemsize
                return [buf, (counts, [int(d) for d in displs[:p]]), types]

            return ((sbuf if in_place else w(sbuf, sc)), w(r_out, rc)), r_out
        if c == "alltoallv":
            return ((sbuf if in_place else [sbuf, sc]), [r_out, rc]), r_out
        return (sbuf, r_out), r_out
    raise ValueError(f"unknown collective {collective!r}")


#: collectives without a root whose ranks all pass the same counts (each its own block aside):
#: the vector engine prepares rank 0's call for all ranks.  tests/unit/test_sim_vector.py
#: checks every algorithm of these against the per-rank engine.
SYMMETRIC = frozenset({"barrier", "allreduce", "allgather", "allgatherv", "reduce_scatter_block",
                       "reduce_scatter", "alltoall"})


def simulate(collective: str, p: int, count: int, *, algorithm: str = "auto",
             dtype: Any = np.float64, op: MPI.Op = MPI.SUM, root: int = 0,
             in_place: bool = False, model: Model | TwoLevel | None = None,
             data: bool = False,
             args: Sequence[tuple[Any, ...]] | None = None,
             nodes: Sequence[int] | None = None, engine: str = "auto") -> SimResult:
    """Simulate one collective call on p ranks with one algorithm.

    Args:
        collective: registry name (``allreduce``, ...).
        p: number of ranks.
        count: elements per rank (per block for scatter/gather/allgather/alltoall/
            reduce_scatter_block; average per rank for the v-variants).
        algorithm: registry name or ``"auto"`` (the static defaults, or the loaded model's best).
        dtype: numpy dtype of the elements.
        op, root, in_place: as in the MPI call.
        model: cost model (default :data:`mpicoll.model.DEFAULT`).
        data: move and reduce real data (results in ``outputs``), else cost-only.
        args: per-rank argument tuples to use instead of the generated ones (data mode).
        nodes: node id of each rank (node-aware algorithms; default: from a
            :class:`TwoLevel` model or ``$MPICOLL_RANKS_PER_NODE``, else one rank per node).
        engine: ``"auto"`` (the vector engine where it applies, else per rank), ``"rank"``
            (always per rank) or ``"vector"`` (raise :class:`NotVectorizableError` if it does not
            apply).  Both give identical results; see the module docstring.

    Returns:
        a :class:`SimResult` (``engine`` says which engine ran).

    Raises:
        ValueError / TypeError: bad arguments, as the MPI backends raise them.
        mpicoll.registry.RestrictionError: a forced algorithm that cannot run on this call.
        DeadlockError: the schedule never completes (a bug in an algorithm).
        NotVectorizableError: ``engine="vector"`` on a call the vector engine cannot run.
    """
    if engine not in ("auto", "rank", "vector"):
        raise ValueError(f"engine: expected 'auto', 'rank' or 'vector', got {engine!r}")
    if collective == "alltoallw":
        if args is None:  # one datatype for every peer: alltoallv's messages and schedules
            collective = "alltoallv"
        elif any(is_derived(t) for a in args for spec in a[:2] if isinstance(spec, list)
                 for t in spec[-1]):
            raise TypeError("simulate: alltoallw with a derived datatype per peer is not "
                            "simulated (predefined ones are)")
    dt = np.dtype(dtype)
    sim = Simulator(p, model, data=data, nodes=nodes, ranks_per_node=_env.ranks_per_node(),
                    segment_bytes=_env.segment_bytes())
    p = sim.p  # a plain int
    factory = _Args(data)
    parser = PARSERS[collective]

    def call_of(rank: int) -> tuple[Call, Any]:
        if args is not None:
            return parser(p, rank, *tuple(args[rank])), None
        a, out = make_args(collective, p, rank, count, dt, op=op, root=root,
                           in_place=in_place, factory=factory)
        return parser(p, rank, *a), out

    if engine != "rank":
        why = None
        if data or args is not None or collective not in SYMMETRIC:
            why = "data mode, given arguments and rooted or v-collectives run per rank"
        else:
            call, _ = call_of(0)
            alg = select(call, p, algorithm)
            try:
                stats = run_vector(sim, alg.schedule, call.datatype, call.dtype, call.prepare)
            except (NotVectorizableError, TypeError, ValueError, AttributeError, IndexError) as e:
                why = f"{type(e).__name__}: {e}"
            else:
                return _result(collective, alg.name, p, call.nbytes, stats, [], "vector")
        if engine == "vector":
            raise NotVectorizableError(f"{collective}/{algorithm} on {p} ranks: {why}")
    gens = []
    outputs = []
    chosen_alg: registry.Algorithm | None = None
    nbytes = 0
    for rank in range(p):
        call, out = call_of(rank)
        chosen = select(call, p, algorithm)
        if chosen_alg is None:
            chosen_alg, nbytes = chosen, call.nbytes
        ctx = sim.context(rank, call.datatype, call.dtype)
        gens.append(chosen.schedule(ctx, *call.prepare(ctx)))
        outputs.append(out)
    assert chosen_alg is not None
    stats = sim.run(gens)
    return _result(collective, chosen_alg.name, p, nbytes, stats, outputs if data else [],
                   "rank")


def _result(collective: str, name: str, p: int, nbytes: int, stats: dict[str, np.ndarray],
            outputs: list[Any], engine: str) -> SimResult:
    return SimResult(collective, name, p, nbytes, float(stats["clocks"].max()),
                     stats["clocks"], stats["messages_sent"], stats["bytes_sent"],
                     stats["messages_recv"], stats["bytes_recv"], stats["inter_bytes_sent"],
                     outputs, engine)
