"""The simulator: the third engine.  All p ranks' schedules run in one process.

The same schedule generators as the MPI engines (no second copy of any algorithm) are driven
round by round; their messages are matched in memory per (source, destination) pair in post
order, exactly as MPI's non-overtaking rule matches them.  Each rank has a clock:

* a message of n bytes takes ``alpha + n beta`` (or the intra-/inter-node pair of a
  :class:`TwoLevel` model; a model's measured ``message_curve`` at n where it has one:
  :meth:`~mpicoll.model.Model.message`); it starts when both ends have posted it and both
  ports are free: a rank sends one message at a time and receives one at a time, but may do
  both at once
  (single-port, full-duplex, as the Thakur-Rabenseifner-Gropp costs assume);
* a local reduction of n bytes adds ``n gamma``, a local copy of n bytes ``n delta`` (the
  model's copy term: 0 unless calibrated, as in the textbook costs; the copy of the send
  buffer into the receive buffer that a call's arguments ask for is charged too), or the
  model's measured curves at n (:meth:`~mpicoll.model.Model.reduce_time`,
  :meth:`~mpicoll.model.Model.copy_time`);
* local work carried by a round (an :class:`~mpicoll.algorithms.schedule.Overlap`) runs while
  the round's messages are in flight: the rank's clock at the end of such a round is
  ``max(end of its messages, post time + k o_msg + the work's gamma and delta charges)``;
* software overhead (LogP's *o*, :class:`~mpicoll.model.Model`'s ``o_call`` and ``o_msg``):
  every rank's clock starts at ``o_call`` (the call's front door) plus the copies its
  arguments ask for, and a rank that posts a
  round of k messages (sends and receives) is busy for ``k o_msg`` first: its messages are
  posted, and may start, at its clock plus ``k o_msg``;
* with a :class:`~mpicoll.engines.network.Network` (a topology, rank placement, link
  contention, LogGP's gap: that module's docstring), an off-node message also pays its route's
  hop latency and its bandwidth term is scaled by the most loaded link of its route in its
  round; with a gap a port is busy ``max(g, n beta f)`` per message, not the whole message;
* with a :class:`TwoLevel` model's ``nic`` (a token bucket per direction of each node's port,
  Linux's ``tbf``: :class:`~mpicoll.engines.network.TokenBucket`), an inter-node message
  takes the line's time for the bytes that find tokens and the rate's for the rest; the
  buckets carry over from one call to the next (:meth:`Simulator.run_steady`: bench's calls
  back to back, to their steady state);
* a round ends when all its messages have; the collective ends at the latest rank's clock.

Two modes: with data (real numpy buffers; results can be checked against NumPy) and cost-only
(buffers are never read or written: one shared allocation stands for every rank's, and scratch
buffers are zero-stride views, so p = 4096 with 64 MiB vectors costs no memory).
A schedule that waits for a message nobody sends raises :class:`DeadlockError`.

Cost-only runs have two faster engines with the same results bit for bit: the **vector engine**
(:mod:`mpicoll.engines.vector`: one generator for all ranks, for the symmetric collectives) and
the **batch engine** (:mod:`mpicoll.engines.batch`: every rank's schedule walked first, then all
ranks timed together); :func:`mpicoll.tools.simulate.simulate` picks one.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.schedule import (
    DEFAULT_SEGMENT_BYTES,
    Context,
    Overlap,
    Recv,
    Round,
    Schedule,
)
from ..model.alphabeta import DEFAULT, Model
from .network import Fabric, Network, TokenBucket

__all__ = ["DeadlockError", "NotVectorizableError", "SimResult", "Simulator", "TwoLevel"]


#: :meth:`Simulator.run_steady`: calls simulated at most, and the relative difference
#: between a call and the one two before it (their times; their buckets' tokens, as time at
#: the rate) that counts as settled
STEADY_MAX_CALLS = 200
STEADY_RTOL = 1e-3


class DeadlockError(RuntimeError):
    """A simulated schedule can make no progress (a send or receive is never matched)."""


class NotVectorizableError(Exception):
    """The vector engine cannot run this schedule (the per-rank engine can)."""


@dataclass(frozen=True)
class TwoLevel:
    """A two-level model: ranks ``rank // ranks_per_node`` share a node.

    Messages inside a node cost ``intra.alpha + n intra.beta``, across nodes
    ``inter.alpha + n inter.beta``; reductions cost ``intra.gamma`` per byte, and the software
    overhead is ``intra.o_call`` and ``intra.o_msg`` (a property of the rank, not the link).
    Each node has one network port (one inter-node send and one receive at a time, shared by
    its ranks), so k ranks of a node sending across nodes at once queue behind each other, as
    on a real NIC.

    ``nic``, if given, shapes each direction of each node's port by a token bucket
    (:class:`~mpicoll.engines.network.TokenBucket`: what the node sends, and what it
    receives): an inter-node message takes :meth:`TokenBucket.time
    <mpicoll.engines.network.TokenBucket.time>` of its ``inter`` time with the fewer tokens of
    its sender's outgoing and its receiver's incoming bucket at its start, and spends its
    bytes from both.  The buckets start full; a :class:`Simulator` carries their state from
    one :meth:`Simulator.run` to the next (calls back to back:
    :func:`mpicoll.tools.simulate.simulate`'s ``steady``).  Only the per-rank engine runs it.
    """

    ranks_per_node: int
    intra: Model
    inter: Model
    nic: TokenBucket | None = None

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node


@dataclass
class SimResult:
    """What a simulated collective did.

    Attributes:
        time: seconds until the last rank finished (the collective's predicted time; with
            ``steady`` calls back to back, the steady per-call time:
            :meth:`Simulator.run_steady`).
        clocks: per-rank finishing times, seconds.
        messages_sent, bytes_sent, messages_recv, bytes_recv: per-rank counts (numpy int64).
        inter_bytes_sent: per-rank bytes sent to another node (two-level model; else zeros).
        link_bytes: with a network, the bytes each of its links carried (else None).
        fabric: with a network, the :class:`~mpicoll.engines.network.Fabric` it ran on (its
            topology names the links; :meth:`busiest_link`).
        outputs: per-rank user buffers after the call (data mode only).
        engine: ``"vector"`` (all ranks at once), ``"batch"`` (per-rank generators walked
            first, timed together) or ``"rank"`` (per-rank generators).
        calls: with ``steady`` calls back to back (:meth:`Simulator.run_steady`), each
            call's time (s), the last the result's; else None.
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
    engine: str = "rank"
    link_bytes: np.ndarray | None = None
    fabric: Fabric | None = field(default=None, repr=False)
    calls: np.ndarray | None = None

    def busiest_link(self) -> tuple[str, int] | None:
        """With a network: the link that carried the most bytes (its name) and its bytes."""
        if self.link_bytes is None or self.fabric is None:
            return None
        i = int(np.argmax(self.link_bytes))
        return self.fabric.topology.link_name(i), int(self.link_bytes[i])

    def as_dict(self) -> dict[str, Any]:
        net: dict[str, Any] = {}
        if self.link_bytes is not None:
            net = {"link_bytes": self.link_bytes.tolist(), "busiest_link": self.busiest_link()}
        return {**net,
            "collective": self.collective, "algorithm": self.algorithm, "p": self.p,
            "nbytes": self.nbytes, "time_s": self.time,
            "clocks_s": self.clocks.tolist(),
            "messages_sent": self.messages_sent.tolist(), "bytes_sent": self.bytes_sent.tolist(),
            "messages_recv": self.messages_recv.tolist(), "bytes_recv": self.bytes_recv.tolist(),
            "inter_bytes_sent": self.inter_bytes_sent.tolist(), "engine": self.engine,
        }


class SimContext(Context):
    """A schedule context whose local work is simulated (and done, in data mode)."""

    def __init__(self, sim: Simulator, rank: int, datatype: MPI.Datatype,
                 dtype: np.dtype) -> None:
        super().__init__(rank, sim.p, datatype, dtype, sim.nodes, sim.segment_bytes)
        if self.derived and sim.data:
            raise TypeError(
                f"the simulator runs derived datatypes ({datatype.Get_name() or 'derived'}) in "
                "cost-only mode only (data=False); check their results on the MPI backends")
        self.sim = sim
        sim.unit = self.unit if self.derived else None  # what run() counts per element

    def _charge(self, charges: dict[int, float], time_of: Callable[[int], float],
                n: int) -> None:
        """Charge this rank ``time_of(n)`` seconds of local work on ``n`` bytes (asked of the
        model once per size: ``charges`` remembers it); during the batch engine's walk it is
        recorded instead, to be charged later in order (+ 0.0 changes no clock: not
        recorded)."""
        sim = self.sim
        t = charges.get(n)
        if t is None:
            t = charges[n] = time_of(n)
        if sim.record is None:
            sim.clock[self.rank] += t
        elif t:
            sim.record.append(t)

    def copy(self, src: np.ndarray, dst: np.ndarray) -> None:
        sim = self.sim
        self._charge(sim.copy_charge, sim.local.copy_time, src.size * self.unit)
        if sim.data and src.size:
            if sim.inflight:
                sim.check_inflight(src, dst)
            np.copyto(dst, src)

    def reduce(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op) -> None:
        sim = self.sim
        self._charge(sim.reduce_charge, sim.local.reduce_time, inbuf.size * self.unit)
        if sim.data and inbuf.size:
            if sim.inflight:
                sim.check_inflight(inbuf, inoutbuf)
            fn, a, b = self.reducer(inbuf, inoutbuf, op)
            fn(a, b)

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
        nodes: node id of each rank (default: from a :class:`TwoLevel` model, else nodes of
            ``ranks_per_node`` consecutive ranks, else one rank per node).
        ranks_per_node: emulated node size when neither ``nodes`` nor a two-level model says.
        segment_bytes: bytes per pipeline segment the schedules see (``ctx.segment_bytes``).
        network: a :class:`~mpicoll.engines.network.Network` (topology, placement,
            contention, gap): its placement gives the nodes (``nodes`` must then be None);
            off-node messages follow its routes.  Run the schedules with
            :meth:`run_schedules` (two passes: the first finds each round's traffic).
    """

    def __init__(self, p: int, model: Model | TwoLevel | None = None, data: bool = True,
                 nodes: Sequence[int] | None = None, *, ranks_per_node: int | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 network: Network | None = None) -> None:
        self.segment_bytes = segment_bytes
        #: bytes per element on the wire (the datatype's size), set by :meth:`context`;
        #: None: the buffers' itemsize
        self.unit: int | None = None
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise TypeError(f"p: expected an int number of ranks, got {p!r}")
        p = int(p)
        if p < 1:
            raise ValueError(f"p: need at least one rank, got {p}")
        self.p = p
        self.model = DEFAULT if model is None else model
        self.data = data
        local = self.model.intra if isinstance(self.model, TwoLevel) else self.model
        self.gamma = local.gamma
        self.o_call = local.o_call  # seconds at the start of the call, every rank
        self.o_msg = local.o_msg  # seconds per message a rank posts, before it starts
        self.delta = local.delta  # seconds per byte copied locally
        #: the rank's model: its reduce_time and copy_time charge local work
        self.local = local
        #: bytes -> the seconds ``local`` charges a reduction (a copy) of them, each asked
        #: once: a simulated call asks for a few sizes millions of times
        self.reduce_charge: dict[int, float] = {}
        self.copy_charge: dict[int, float] = {}
        #: per-rank clocks; before :meth:`run`, what the calls' argument copies charged
        self.clock = [0.0] * p
        #: the batch engine's walk (:func:`run_batch`): the contexts append each local charge
        #: here, in order, instead of adding it to their rank's clock
        self.record: list[float] | None = None
        #: data mode, while an overlapped round's work runs: that round's buffers
        self.inflight: tuple[np.ndarray, ...] = ()
        k = self.model.ranks_per_node if isinstance(self.model, TwoLevel) else ranks_per_node
        self.nodes = tuple(r // k for r in range(p)) if k else None
        if nodes is not None:
            if len(nodes) != p:
                raise ValueError(f"nodes: expected a node id for each of {p} ranks")
            self.nodes = tuple(nodes)
        #: the network laid out for p ranks (None: the flat or two-level model alone)
        self.fabric: Fabric | None = None
        #: per-rank engine with a network: the bandwidth factor and the links crossed of
        #: each message, in the order the engine matches them, from the first pass of
        #: :meth:`run_schedules`
        self.factors: tuple[list[float], list[int]] | None = None
        if network is not None:
            if nodes is not None:
                raise ValueError("nodes: a network places the ranks itself (its placement)")
            if isinstance(self.model, TwoLevel) and self.model.nic is not None:
                raise ValueError("a token-bucket NIC is the two-level model's node port: "
                                 "simulate it without a network")
            self.fabric = network.fabric(p)
            self.nodes = self.fabric.nodes
        #: the two-level model's token buckets: per node, ``[left, since]`` of what it sends
        #: and of what it receives (:meth:`TokenBucket.tokens`), kept from one run to the next
        self.nic_out: dict[int, list[float]] = {}
        self.nic_in: dict[int, list[float]] = {}

    def run_schedules(self, make: Callable[[Simulator], Sequence[Schedule]]
                      ) -> dict[str, np.ndarray]:
        """:meth:`run` of the schedules ``make(sim)`` builds for a simulator ``sim``: with a
        network, twice: first cost-only on a plain simulator of the same ranks and nodes,
        which records every message's sender round, ends and bytes (the traffic of a schedule
        does not depend on time), from which each round's contention is found; then on this
        one.  The engine's control flow (which rank resumes, which messages match) never
        depends on the clocks, so the second pass matches the messages in the first's order
        (checked)."""
        if self.fabric is None:
            return self.run(make(self))
        tracer = Simulator(self.p, self.model, data=False, nodes=self.nodes,
                           segment_bytes=self.segment_bytes)
        trace = array("q")
        tracer.run(make(tracer), trace=trace)
        self.fabric.link_bytes[:] = 0  # what a vector engine's attempt counted
        self.factors = self.fabric.trace_factors(trace)
        return self.run(make(self))

    def run_steady(self, make: Callable[[Simulator], Sequence[Schedule]],
                   between: float = 0.0) -> dict[str, Any]:
        """:meth:`run` of ``make(sim)``'s schedules called back to back, as bench times a
        call, until the calls settle; returns the last call's clocks (from its start) and
        counts, ``time``, the steady per-call time (s), and ``calls``, the per-call times (s)
        of every call simulated.

        Call j starts on every rank at the end of call j - 1's last rank plus ``between``
        seconds (bench's barrier between calls), with the NICs' token buckets
        (:class:`TwoLevel`'s ``nic``) as call j - 1 left them.  The buckets start full and
        lose per call the bytes the call sends beyond what the rate refills while it runs,
        so the per-call time falls to a steady value once they have emptied (or, where the
        rate refills them within a call, stays at the first's).  The buckets may settle into
        two states that alternate (a call that finds them low leaves them fuller for the
        next: recursive doubling on 3 nodes of 2 at 1 MiB alternates 221 and 241 ms, closing
        in on 231), so a call is compared with the one two before it.
        Settled: call j finds every bucket holding what it held at call j - 2's start, to
        the bytes the rate passes in :data:`STEADY_RTOL` of call j - 1's time (a difference
        that changes no message by more than that), and calls j - 1 and j - 3 took the same
        time to :data:`STEADY_RTOL`: from there calls repeat in pairs, and the steady time is
        the mean of the last two.  A bucket whose tokens drift by less than that tolerance
        per two calls changes the time by less than :data:`STEADY_RTOL` of it (uneven blocks
        leave one direction 8 bytes a call ahead: it would take 30,000 calls to fill).  This
        takes about burst / (bytes a call sends beyond what the rate refills during it) + 3
        calls: 3 to 45 (median 4) for the 366 algorithm-cases of the emulated cluster's
        validation (docs/cluster.md), the most where two states alternate; at most
        :data:`STEADY_MAX_CALLS` (then the mean of the last two).  Without a bucket nothing
        carries over and one call is the steady state."""
        m = self.model
        if not (isinstance(m, TwoLevel) and m.nic is not None):
            return self.run_schedules(make)
        bucket = m.nic
        start = began = 0.0
        times: list[float] = []
        held: list[list[float]] = []  # every bucket's tokens (bytes) at each call's start
        while len(times) < STEADY_MAX_CALLS:
            held.append([max(0.0, bucket.tokens(left, since, start))  # a debt is no token
                         for nic in (self.nic_out, self.nic_in)
                         for _, (left, since) in sorted(nic.items())])
            if len(times) >= 3:
                tol = STEADY_RTOL * times[-1] / bucket.beta
                now, before = held[-1], held[-3]
                if (len(now) == len(before)
                        and all(abs(a - b) <= tol for a, b in zip(now, before, strict=True))
                        and abs(times[-1] - times[-3]) <= STEADY_RTOL * times[-1]):
                    break
            began = start
            self.clock = [began] * self.p
            stats: dict[str, Any] = self.run(make(self))
            end = float(stats["clocks"].max())
            times.append(end - began)
            start = end + between
        stats["clocks"] = stats["clocks"] - began
        stats["calls"] = np.array(times)
        stats["time"] = (times[-1] + times[-2]) / 2 if len(times) > 1 else times[-1]
        return stats

    def check_inflight(self, *bufs: np.ndarray) -> None:
        """Rule 3 of the schedule language: local work run during a round touches none of
        its buffers (checked in data mode; :class:`RuntimeError` names the breach)."""
        for b in bufs:
            for f in self.inflight:
                if b.size and f.size and np.shares_memory(b, f):
                    raise RuntimeError("schedule breaks rule 3: local work run during a round "
                                       "touches a buffer of that round")

    def context(self, rank: int, datatype: MPI.Datatype, dtype: np.dtype) -> SimContext:
        return SimContext(self, rank, datatype, dtype)

    def _cost_fn(self) -> Callable[[int, int, int], float]:
        m = self.model
        if isinstance(m, TwoLevel):
            nd = self.nodes
            assert nd is not None
            if m.intra.message_curve or m.inter.message_curve:
                intra, inter = m.intra.message, m.inter.message
                return lambda s, d, n: intra(n) if nd[s] == nd[d] else inter(n)
            a0, b0, a1, b1 = m.intra.alpha, m.intra.beta, m.inter.alpha, m.inter.beta
            return lambda s, d, n: (a0 + n * b0) if nd[s] == nd[d] else (a1 + n * b1)
        if m.message_curve:
            return lambda s, d, n: m.message(n)
        a, b = m.alpha, m.beta
        return lambda s, d, n: a + n * b

    def run(self, gens: Sequence[Schedule], trace: array[int] | None = None
            ) -> dict[str, np.ndarray]:
        """Drive one schedule per rank to completion; returns per-rank clocks and counts.

        Each rank's clock starts at ``o_call`` plus what its context charged before (the
        copies of the call's arguments: ``prepare``).  ``trace``, if given, receives
        ``sender's round, source, dest, bytes`` of each message, in the order they match.
        With a network, :attr:`factors` must be set (:meth:`run_schedules` does it)."""
        p = self.p
        cost = self._cost_fn()
        fab = self.fabric
        factors = self.factors
        if fab is not None and factors is None:
            raise RuntimeError("a simulator with a network runs by run_schedules()")
        fl, hl = factors if factors is not None else ([], [])
        seq = [0]  # messages matched so far
        gap = fab.network.gap if fab is not None else None
        hop = fab.network.hop if fab is not None else 0.0
        m = self.model
        b_in, b_out = ((m.intra.beta, m.inter.beta) if isinstance(m, TwoLevel)
                       else (m.beta, m.beta))
        two = isinstance(self.model, TwoLevel) and fab is None  # one network port per node
        bucket = m.nic if two and isinstance(m, TwoLevel) else None
        full = [0.0 if bucket is None else bucket.burst, 0.0]
        nic_out, nic_in = self.nic_out, self.nic_in
        nic_gap = fab is not None and gap is not None  # a node's NIC spaces messages by g
        nd = self.nodes if self.nodes is not None else range(p)
        counted = self.nodes is not None  # inter-node bytes are counted when nodes are known
        clock = self.clock = [c + self.o_call for c in self.clock]
        o_msg = self.o_msg
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
        sendq: dict[tuple[int, int], deque[tuple[np.ndarray, float, int]]] = {}
        posted = [0] * p  # rounds each rank has posted
        recvq: dict[tuple[int, int], deque[tuple[np.ndarray, float]]] = {}
        ready: deque[int] = deque(range(p))
        data = self.data
        unit = self.unit

        def match(s: int, d: int, sbuf: np.ndarray, ts: float, rbuf: np.ndarray,
                  tr: float, i: int) -> None:
            n, room = ((sbuf.nbytes, rbuf.nbytes) if unit is None
                       else (sbuf.size * unit, rbuf.size * unit))
            if n > room:
                raise RuntimeError(
                    f"simulated message {s}->{d} truncated: {n} bytes into {room}"
                )
            if data and sbuf.size:
                rbuf[: sbuf.size] = sbuf
            start = max(ts, tr, send_free[s], recv_free[d])
            crossing = counted and nd[s] != nd[d]
            if crossing and (two or nic_gap):
                start = max(start, nic_send.get(nd[s], 0.0), nic_recv.get(nd[d], 0.0))
            if trace is not None:
                trace.extend((i, s, d, n))
            if factors is None:
                t_msg = cost(s, d, n)
                if crossing and bucket is not None:  # the fewer tokens of the two buckets
                    out_b = nic_out.setdefault(nd[s], full.copy())
                    in_b = nic_in.setdefault(nd[d], full.copy())
                    t_out = bucket.tokens(out_b[0], out_b[1], start)
                    t_in = bucket.tokens(in_b[0], in_b[1], start)
                    t_msg = bucket.time(t_msg, n, min(t_out, t_in))
                    out_b[0], out_b[1] = t_out - n, start
                    in_b[0], in_b[1] = t_in - n, start
                end = busy = start + t_msg
            else:
                k = seq[0]
                seq[0] = k + 1
                f, h = fl[k], hl[k]
                b = b_out if crossing else b_in
                end = start + (cost(s, d, n) + h * hop + (f - 1.0) * n * b)
                busy = end if gap is None else start + max(gap, n * b * f)
            send_free[s] = recv_free[d] = busy
            if crossing and two:
                nic_send[nd[s]] = nic_recv[nd[d]] = end
            elif crossing and nic_gap:
                assert gap is not None
                nic_send[nd[s]] = nic_recv[nd[d]] = start + gap
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
            during = None
            while True:
                try:
                    item = next(gens[r])
                except StopIteration:
                    done[r] = True
                    break
                rnd: Round = item.ops if isinstance(item, Overlap) else item
                if isinstance(item, Overlap):
                    during = item.during
                    if not rnd:  # nothing in flight: plain local work
                        during()
                        during = None
                        continue
                if rnd:
                    break
            if done[r]:
                continue
            t = clock[r] = clock[r] + len(rnd) * o_msg  # busy posting the round
            pending[r] = len(rnd)
            i = posted[r]
            posted[r] = i + 1
            for o in rnd:
                if type(o) is Recv:
                    key = (o.peer, r)
                    sq = sendq.get(key)
                    if sq:
                        sbuf, ts, si = sq.popleft()
                        match(o.peer, r, sbuf, ts, o.buf, t, si)
                    else:
                        recvq.setdefault(key, deque()).append((o.buf, t))
                else:
                    key = (r, o.peer)
                    rq = recvq.get(key)
                    if rq:
                        rbuf, tr = rq.popleft()
                        match(r, o.peer, o.buf, t, rbuf, tr, i)
                    else:
                        sendq.setdefault(key, deque()).append((o.buf, t, i))
            if during is not None:  # runs while the round is in flight: clock[r] from t on
                if data:
                    self.inflight = tuple(o.buf for o in rnd)
                try:
                    during()
                finally:
                    self.inflight = ()
        if not all(done):
            stuck = [r for r in range(p) if not done[r]]
            waits = sorted({key for key, q in list(sendq.items()) + list(recvq.items()) if q})
            raise DeadlockError(
                f"ranks {stuck[:16]} never finished; unmatched (source, dest) pairs: "
                f"{waits[:16]}"
            )
        if factors is not None and seq[0] != len(fl):
            raise RuntimeError("the network's second pass matched other messages than its first")
        i64 = np.int64
        out = {
            "clocks": np.array(clock), "messages_sent": np.array(msent, i64),
            "bytes_sent": np.array(bsent, i64), "messages_recv": np.array(mrecv, i64),
            "bytes_recv": np.array(brecv, i64), "inter_bytes_sent": np.array(inter, i64),
        }
        if fab is not None:
            out["link_bytes"] = fab.link_bytes.copy()
        return out
