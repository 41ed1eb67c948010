"""The simulator: the third engine.  All p ranks' schedules run in one process.

The same schedule generators as the MPI engines (no second copy of any algorithm) are driven
round by round; their messages are matched in memory per (source, destination) pair in post
order, exactly as MPI's non-overtaking rule matches them.  Each rank has a clock:

* a message of n bytes takes ``alpha + n beta`` (or the intra-/inter-node pair of a
  :class:`TwoLevel` model); it starts when both ends have posted it and both ports are free:
  a rank sends one message at a time and receives one at a time, but may do both at once
  (single-port, full-duplex, as the Thakur-Rabenseifner-Gropp costs assume);
* a local reduction of n bytes adds ``n gamma``; local copies are free;
* a round ends when all its messages have; the collective ends at the latest rank's clock.

Two modes: with data (real numpy buffers; results can be checked against NumPy) and cost-only
(buffers are never read or written: one shared allocation stands for every rank's, and scratch
buffers are zero-stride views, so p = 4096 with 64 MiB vectors costs no memory).
A schedule that waits for a message nobody sends raises :class:`DeadlockError`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from . import registry
from ._args import PARSERS, Call
from .model import DEFAULT, Model
from .schedule import Context, Recv, Schedule

__all__ = ["DeadlockError", "SimResult", "Simulator", "TwoLevel", "simulate"]


def node_size_env() -> int | None:
    """``$MPICOLL_RANKS_PER_NODE``: emulate nodes of k consecutive ranks (None if unset)."""
    import os

    v = os.environ.get("MPICOLL_RANKS_PER_NODE")
    if not v:
        return None
    k = int(v)
    if k < 1:
        raise ValueError(f"MPICOLL_RANKS_PER_NODE must be >= 1, got {v!r}")
    return k


class DeadlockError(RuntimeError):
    """A simulated schedule can make no progress (a send or receive is never matched)."""


@dataclass(frozen=True)
class TwoLevel:
    """A two-level model: ranks ``rank // ranks_per_node`` share a node.

    Messages inside a node cost ``intra.alpha + n intra.beta``, across nodes
    ``inter.alpha + n inter.beta``; reductions cost ``intra.gamma`` per byte.  Each node has
    one network port (one inter-node send and one receive at a time, shared by its ranks), so
    k ranks of a node sending across nodes at once queue behind each other, as on a real NIC.
    """

    ranks_per_node: int
    intra: Model
    inter: Model

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node


@dataclass
class SimResult:
    """What a simulated collective did.

    Attributes:
        time: seconds until the last rank finished (the collective's predicted time).
        clocks: per-rank finishing times, seconds.
        messages_sent, bytes_sent, messages_recv, bytes_recv: per-rank counts (numpy int64).
        inter_bytes_sent: per-rank bytes sent to another node (two-level model; else zeros).
        outputs: per-rank user buffers after the call (data mode only).
    """

    collective: str
    algorithm: str
    p: int
    nbytes: int
    time: float
    clocks: np.ndarray
    messages_sent: np.ndarray
    bytes_sent: np.ndarray
    messages_recv: np.ndarray
    bytes_recv: np.ndarray
    inter_bytes_sent: np.ndarray
    outputs: list[Any] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective, "algorithm": self.algorithm, "p": self.p,
            "nbytes": self.nbytes, "time_s": self.time,
            "clocks_s": self.clocks.tolist(),
            "messages_sent": self.messages_sent.tolist(), "bytes_sent": self.bytes_sent.tolist(),
            "messages_recv": self.messages_recv.tolist(), "bytes_recv": self.bytes_recv.tolist(),
            "inter_bytes_sent": self.inter_bytes_sent.tolist(),
        }


class SimContext(Context):
    """A schedule context whose local work is simulated (and done, in data mode)."""

    def __init__(self, sim: Simulator, rank: int, datatype: MPI.Datatype,
                 dtype: np.dtype) -> None:
        super().__init__(rank, sim.p, datatype, dtype, sim.nodes)
        self.sim = sim

    def copy(self, src: np.ndarray, dst: np.ndarray) -> None:
        if self.sim.data and src.size:
            np.copyto(dst, src)

    def reduce(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op) -> None:
        self.sim.clock[self.rank] += inbuf.nbytes * self.sim.gamma
        if self.sim.data and inbuf.size:
            op.Reduce_local([inbuf, self.datatype], [inoutbuf, self.datatype])

    def scratch(self, count: int) -> np.ndarray:
        if self.sim.data:
            return np.empty(count, self.dtype)
        return np.lib.stride_tricks.as_strided(np.empty(1, self.dtype), (count,), (0,))


class Simulator:
    """Runs p schedules together (see the module docstring).

    Args:
        p: number of ranks.
        model: a :class:`~mpicoll.model.Model` or :class:`TwoLevel` (default: the defaults).
        data: move real data (True) or only account for it (False).
    """

    def __init__(self, p: int, model: Model | TwoLevel | None = None, data: bool = True,
                 nodes: Sequence[int] | None = None) -> None:
        if p < 1:
            raise ValueError(f"p: need at least one rank, got {p}")
        self.p = p
        self.model = DEFAULT if model is None else model
        self.data = data
        self.gamma = (self.model.intra.gamma if isinstance(self.model, TwoLevel)
                      else self.model.gamma)
        self.clock = [0.0] * p
        k = self.model.ranks_per_node if isinstance(self.model, TwoLevel) else node_size_env()
        self.nodes = tuple(r // k for r in range(p)) if k else None
        if nodes is not None:
            if len(nodes) != p:
                raise ValueError(f"nodes: expected a node id for each of {p} ranks")
            self.nodes = tuple(nodes)

    def context(self, rank: int, datatype: MPI.Datatype, dtype: np.dtype) -> SimContext:
        return SimContext(self, rank, datatype, dtype)

    def _cost_fn(self) -> Callable[[int, int, int], float]:
        m = self.model
        if isinstance(m, TwoLevel):
            nd = self.nodes
            assert nd is not None
            a0, b0, a1, b1 = m.intra.alpha, m.intra.beta, m.inter.alpha, m.inter.beta
            return lambda s, d, n: (a0 + n * b0) if nd[s] == nd[d] else (a1 + n * b1)
        a, b = m.alpha, m.beta
        return lambda s, d, n: a + n * b

    def run(self, gens: Sequence[Schedule]) -> dict[str, np.ndarray]:
        """Drive one schedule per rank to completion; returns per-rank clocks and counts."""
        p = self.p
        cost = self._cost_fn()
        two = isinstance(self.model, TwoLevel)  # one network port per node
        nd = self.nodes if self.nodes is not None else range(p)
        counted = self.nodes is not None  # inter-node bytes are counted when nodes are known
        clock = self.clock = [0.0] * p
        send_free = [0.0] * p
        recv_free = [0.0] * p
        rend = [0.0] * p
        pending = [0] * p
        done = [False] * p
        msent = [0] * p
        bsent = [0] * p
        mrecv = [0] * p
        brecv = [0] * p
        inter = [0] * p
        nic_send: dict[int, float] = {}
        nic_recv: dict[int, float] = {}
        sendq: dict[tuple[int, int], deque[tuple[np.ndarray, float]]] = {}
        recvq: dict[tuple[int, int], deque[tuple[np.ndarray, float]]] = {}
        ready: deque[int] = deque(range(p))
        data = self.data

        def match(s: int, d: int, sbuf: np.ndarray, ts: float, rbuf: np.ndarray,
                  tr: float) -> None:
            n = sbuf.nbytes
            if n > rbuf.nbytes:
                raise RuntimeError(
                    f"simulated message {s}->{d} truncated: {n} bytes into {rbuf.nbytes}"
                )
            if data and sbuf.size:
                rbuf[: sbuf.size] = sbuf
            start = max(ts, tr, send_free[s], recv_free[d])
            crossing = counted and nd[s] != nd[d]
            if crossing and two:
                start = max(start, nic_send.get(nd[s], 0.0), nic_recv.get(nd[d], 0.0))
            end = start + cost(s, d, n)
            send_free[s] = recv_free[d] = end
            if crossing and two:
                nic_send[nd[s]] = nic_recv[nd[d]] = end
            if end > rend[s]:
                rend[s] = end
            if end > rend[d]:
                rend[d] = end
            msent[s] += 1
            bsent[s] += n
            mrecv[d] += 1
            brecv[d] += n
            if crossing:
                inter[s] += n
            pending[s] -= 1
            if pending[s] == 0:
                ready.append(s)
            pending[d] -= 1
            if pending[d] == 0:
                ready.append(d)

        while ready:
            r = ready.popleft()
            if rend[r] > clock[r]:
                clock[r] = rend[r]
            while True:
                try:
                    rnd = next(gens[r])
                except StopIteration:
                    done[r] = True
                    break
                if rnd:
                    break
            if done[r]:
                continue
            t = clock[r]
            pending[r] = len(rnd)
            for o in rnd:
                if type(o) is Recv:
                    key = (o.peer, r)
                    sq = sendq.get(key)
                    if sq:
                        sbuf, ts = sq.popleft()
                        match(o.peer, r, sbuf, ts, o.buf, t)
                    else:
                        recvq.setdefault(key, deque()).append((o.buf, t))
                else:
                    key = (r, o.peer)
                    rq = recvq.get(key)
                    if rq:
                        rbuf, tr = rq.popleft()
                        match(r, o.peer, o.buf, t, rbuf, tr)
                    else:
                        sendq.setdefault(key, deque()).append((o.buf, t))
        if not all(done):
            stuck = [r for r in range(p) if not done[r]]
            waits = sorted({key for key, q in list(sendq.items()) + list(recvq.items()) if q})
            raise DeadlockError(
                f"ranks {stuck[:16]} never finished; unmatched (source, dest) pairs: "
                f"{waits[:16]}"
            )
        i64 = np.int64
        return {
            "clocks": np.array(clock), "messages_sent": np.array(msent, i64),
            "bytes_sent": np.array(bsent, i64), "messages_recv": np.array(mrecv, i64),
            "bytes_recv": np.array(brecv, i64), "inter_bytes_sent": np.array(inter, i64),
        }


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
    if c in ("alltoall", "alltoallv"):
        if c == "alltoallv":
            sc = [max(0, n + (rank + j) % 3 - 1) for j in range(p)]
            rc = [max(0, n + (j + rank) % 3 - 1) for j in range(p)]
        else:
            sc = rc = [n] * p
        r_out = B("r", sum(rc), dtype, rank, in_place)
        sbuf = MPI.IN_PLACE if in_place else B("s", sum(sc), dtype, rank, True)
        if c == "alltoallv":
            return ((sbuf if in_place else [sbuf, sc]), [r_out, rc]), r_out
        return (sbuf, r_out), r_out
    raise ValueError(f"unknown collective {collective!r}")


def simulate(collective: str, p: int, count: int, *, algorithm: str = "auto",
             dtype: Any = np.float64, op: MPI.Op = MPI.SUM, root: int = 0,
             in_place: bool = False, model: Model | TwoLevel | None = None,
             data: bool = False,
             args: Sequence[tuple[Any, ...]] | None = None,
             nodes: Sequence[int] | None = None) -> SimResult:
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

    Returns:
        a :class:`SimResult`.

    Raises:
        ValueError / TypeError: bad arguments, as the MPI backends raise them.
        mpicoll.registry.RestrictionError: a forced algorithm that cannot run on this call.
        DeadlockError: the schedule never completes (a bug in an algorithm).
    """
    dt = np.dtype(dtype)
    sim = Simulator(p, model, data=data, nodes=nodes)
    factory = _Args(data)
    parser = PARSERS[collective]
    gens = []
    outputs = []
    alg: registry.Algorithm | None = None
    nbytes = 0
    for rank in range(p):
        if args is not None:
            a, out = tuple(args[rank]), None
        else:
            a, out = make_args(collective, p, rank, count, dt, op=op, root=root,
                               in_place=in_place, factory=factory)
        call: Call = parser(p, rank, *a)
        chosen = select(call, p, algorithm)
        if alg is None:
            alg, nbytes = chosen, call.nbytes
        ctx = sim.context(rank, call.datatype, call.dtype)
        gens.append(chosen.schedule(ctx, *call.prepare(ctx)))
        outputs.append(out)
    assert alg is not None
    stats = sim.run(gens)
    return SimResult(collective, alg.name, p, nbytes, float(stats["clocks"].max()),
                     outputs=outputs if data else [], **stats)


def select(call: Call, p: int, algorithm: str | None) -> registry.Algorithm:
    """The algorithm a call runs on p ranks (see :func:`mpicoll.registry.select`)."""
    return registry.select(call.collective, p, algorithm, nbytes=call.nbytes,
                           commutative=call.commutative, count=call.count,
                           in_place=call.in_place, uniform=call.uniform)
