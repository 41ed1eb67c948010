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

Cost-only runs of the symmetric collectives (barrier, allreduce, allgather(v),
reduce_scatter(_block), alltoall) first try the **vector engine**: the schedule generator runs
ONCE, with ``ctx.rank`` the numpy vector of all p ranks, so every peer, block index and size it
computes is a vector too (SIMD lanes, one per rank), and each round is matched and timed for all
ranks with a few numpy operations.  It applies to schedules whose control flow does not depend
on the rank and whose rounds are one send and one receive per rank matched within the round
(the ring algorithms, pairwise exchanges, dissemination); anything else (``if rank < rem``
raises "truth value of an array is ambiguous", ``members.index(rank)`` fails, a round that is
not a permutation of the ranks, a two-level model whose node port several ranks of a node
use) falls back to the per-rank engine.  Where it applies it gives the per-rank engine's
clocks and counts bit for bit (``tests/unit/test_sim_vector.py`` checks every algorithm
against it), at
O(rounds) numpy calls instead of O(p * rounds) Python steps: ring allreduce on 4096 ranks is
8190 rounds (33.5 M messages) in about a second.  A branch on the rank runs where every rank
takes the same way (the rank vector's truth value is its lanes' common one: recursive
doubling's fold on a power of two; a :class:`~mpicoll.algorithms.schedule.Table`'s entries at
the rank vector keep that truth value), and the group of every rank in order is the context
itself.  A choice written as arithmetic on the rank instead of a branch (Rabenseifner's halving
step keeps the upper half if the rank's bit is set; Swing's and Bine's peer is ``r + rho`` or
``r - rho`` by parity) runs on every lane: on a power of two Rabenseifner's 4096-rank, 64 MiB
allreduce (a thousand pipelined rounds) takes 0.4 s instead of a minute walked per rank.
While every rank's clock is the same and a round's messages all have one size (a ring of
equal blocks; any schedule's rounds until uneven blocks part the ranks), under one model
without a network, the round is timed once, on one number: the same arithmetic as on p equal
numbers, so the same bits.  A rank's ports are free when it posts (its last round ended), so
only a gap, which keeps a port busy past its message's end, makes the engine follow them.

Other cost-only runs on a flat model without a network (rooted and segmented schedules, rank-
dependent control flow) go to the **batch engine** (:func:`run_batch`): every rank's generator
runs to its end first (nothing a schedule does depends on the clocks), recording its rounds and
its local charges in order; the messages are matched per (source, destination) pair in post
order with a sort; then the per-rank engine's own order of events is replayed one *generation*
of its ready queue at a time (the ranks it holds at first, 0 .. p-1, then those whose round
completed while the previous generation was served, in the order they completed): each resumes,
posts its next round, and every message whose two ends are now posted is matched in the order
the per-rank engine matches it (the later post's place in the queue, then the operation's place
in its round), a port serving its messages in that order.  Messages that share no port are timed
together with numpy; small generations (a pipeline's wavefront) one by one.  Its results equal
the per-rank engine's bit for bit (``tests/unit/test_sim_batch.py``); a deadlock or a truncated
message is handed back to the per-rank engine, which reports it.
"""

from __future__ import annotations

import copy
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI

from ..algorithms.schedule import (
    DEFAULT_SEGMENT_BYTES,
    Context,
    Overlap,
    Recv,
    Round,
    Schedule,
    Send,
    Table,
)
from ..model.alphabeta import DEFAULT, Model
from .network import Fabric, Network, TokenBucket

__all__ = [
    "DeadlockError", "NotVectorizableError", "SimResult", "Simulator", "TwoLevel", "run_vector",
]


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


# ---------------------------------------------------------------------------------------------
# The vector engine: one generator for all ranks (see the module docstring).


_Int = int | np.ndarray  # one value for every rank, or a vector of p values


def _lanes(v: Any, p: int) -> _Int:
    """``v`` (an int, or an integer vector of p entries: one per rank) checked: an int or an
    int64 vector of p entries."""
    if isinstance(v, np.ndarray) and v.dtype == np.int64 and v.shape == (p,):
        return v  # the common case, fast
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    a = np.asarray(v)
    if a.dtype.kind not in "iu" or a.shape != (p,):
        raise NotVectorizableError(f"not a per-rank integer: {v!r}")
    return a.astype(np.int64)


def _bound(v: Any, p: int) -> _Int:
    """A slice bound: :func:`_lanes`, a rank vector as a plain one (its arithmetic is faster)."""
    if type(v) is int:
        return v
    v = _lanes(v, p)
    return v.view(np.ndarray) if type(v) is _Lanes else v


class _Lanes(np.ndarray):
    """The vector engine's rank (and what is computed from it): one lane per rank.  Its truth
    value is the lanes' common one, so a branch on the rank runs where every rank takes the
    same way (``if rank < 2 * rem`` with rem = 0 on a power of two); where they part, the
    vector engine cannot follow (:class:`NotVectorizableError`)."""

    def __bool__(self) -> bool:
        if not self.size:
            return False
        first = bool(self.flat[0])
        if self.size > 1 and not (self.view(np.ndarray) == self.flat[0]).all():
            raise NotVectorizableError("a branch the ranks take different ways")
        return first

    def __mod__(self, other: Any) -> Any:
        # ``(rank + k) % p``, a ring's peer and block index: the same values as numpy's
        # remainder (floor division's, as Python's), without its integer division
        if type(other) is int and other > 0 and self.dtype == np.int64:
            a = self.view(np.ndarray)
            if not other & (other - 1):  # a power of two: two's complement's low bits
                return (a & (other - 1)).view(_Lanes)
            lo, hi = a.min(), a.max()
            if -other <= lo and hi < 2 * other:
                out = a.copy() if lo >= 0 else a + other * (a < 0)
                if hi >= other:
                    out -= other * (out >= other)
                return out.view(_Lanes)
        return super().__mod__(other)


def _vector(v: _Int, p: int) -> np.ndarray:
    return v if isinstance(v, np.ndarray) else np.full(p, v, np.int64)


def _uniform(v: _Int) -> _Int:
    """An int where every rank has the same value (so ``block_counts(buf.size, p)`` and
    ``range(n)`` work), else the vector."""
    if isinstance(v, int):
        return v
    first = int(v[0])
    return first if bool((v == first).all()) else v


class _Extents:
    """Cost-only stand-in for one buffer on every rank: elements ``[start, stop)`` of rank r's
    buffer (ints where all ranks agree, else vectors).  Supports what schedules do with
    buffers (slicing with int or vector bounds, ``size``, ``nbytes``, ``len``, ``dtype``);
    anything else raises."""

    __slots__ = ("dtype", "p", "start", "stop")

    def __init__(self, start: _Int, stop: _Int, dtype: np.dtype, p: int) -> None:
        self.start, self.stop, self.dtype, self.p = start, stop, dtype, p

    def lengths(self) -> _Int:
        return self.stop - self.start

    @property
    def size(self) -> _Int:
        n = _uniform(self.stop - self.start)
        return n if isinstance(n, int) else n.view(_Lanes)  # a branch on it: the lanes' way

    @property
    def nbytes(self) -> _Int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return 1

    def __len__(self) -> int:
        n = self.size
        if not isinstance(n, int):
            raise NotVectorizableError("len() of buffers whose length differs between ranks")
        return n

    def __getitem__(self, key: Any) -> _Extents:
        if type(key) is not slice or key.step not in (None, 1):
            raise NotVectorizableError(f"buffer index {key!r} (only [a:b] slices are vectorised)")
        start = self.start
        length = self.stop - start
        a = 0 if key.start is None else _bound(key.start, self.p)
        b = length if key.stop is None else _bound(key.stop, self.p)
        if isinstance(a, int) and isinstance(b, int) and isinstance(length, int):
            if a < 0 or b < 0:
                raise NotVectorizableError("negative slice bounds")
            a = min(a, length)
            b = max(min(b, length), a)
        else:
            if ((a < 0) if isinstance(a, int) else a.min() < 0) or (
                    (b < 0) if isinstance(b, int) else b.min() < 0):
                raise NotVectorizableError("negative slice bounds")
            a = np.minimum(a, length)
            b = np.maximum(np.minimum(b, length), a)
        if type(start) is int and start == 0:  # a whole buffer's slice (the common case)
            return _Extents(a, b, self.dtype, self.p)
        return _Extents(start + a, start + b, self.dtype, self.p)

    @classmethod
    def whole(cls, n: Any, dtype: np.dtype, p: int) -> _Extents:
        return cls(0, _lanes(n, p), dtype, p)


class _VectorContext(Context):
    """The context of all p ranks at once: ``rank`` is ``numpy.arange(p)``."""

    def __init__(self, p: int, datatype: MPI.Datatype, dtype: np.dtype, local: Model,
                 nodes: tuple[int, ...] | None, segment_bytes: int) -> None:
        super().__init__(np.arange(p).view(_Lanes), p, datatype, dtype,  # type: ignore[arg-type]
                         nodes, segment_bytes)
        #: the clocks, shared with the group views of :meth:`group`: one float while every
        #: rank's is the same (the same arithmetic on one number as on p equal ones), else
        #: the vector of p
        self._clock: list[Any] = [0.0]
        self.local = local
        self.copies = bool(local.delta or local.copy_curve)

    @property
    def clock(self) -> Any:
        return self._clock[0]

    @clock.setter
    def clock(self, value: Any) -> None:
        self._clock[0] = value

    def copy(self, src: Any, dst: Any) -> None:
        if self.copies:  # cost-only: a copy is only its charge
            n = src.size if isinstance(src, _Extents) else np.size(src)
            self.clock += self.local.copy_time(n * self.unit)

    def reduce(self, inbuf: Any, inoutbuf: Any, op: MPI.Op) -> None:
        if not isinstance(inbuf, _Extents) or not isinstance(inoutbuf, _Extents):
            raise NotVectorizableError("reduction of a buffer that is not per-rank")
        self.clock += self.local.reduce_time(inbuf.size * self.unit)

    def scratch(self, count: Any) -> Any:
        return _Extents.whole(count, self.dtype, self.size)

    def group(self, members: Sequence[int]) -> Context:
        """The group of every rank in rank order (a power of two's :func:`fold.group`): this
        context as a group view sees it (no node map); any other group runs per rank."""
        if len(members) != self.size or any(m != i for i, m in enumerate(members)):
            raise NotVectorizableError("a group that is not every rank in order")
        view = copy.copy(self)  # the same clocks
        view.nodes = None
        return view

    def pack(self, parts: Any) -> Any:
        raise NotVectorizableError("pack")

    def unpack(self, buf: Any, parts: Any) -> None:
        raise NotVectorizableError("unpack")


def _vectorised(arg: Any, p: int) -> Any:
    """A prepared schedule argument as the vector engine passes it: numpy buffers become
    :class:`_Extents`, integer sequences :class:`~mpicoll.schedule.Table`."""
    if isinstance(arg, np.ndarray):
        if arg.ndim != 1:
            raise NotVectorizableError("a buffer that is not 1-D")
        return _Extents.whole(arg.size, arg.dtype, p)
    if isinstance(arg, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in arg):
        return arg if isinstance(arg, Table) else Table(int(v) for v in arg)
    return arg


def _message(m: Model, n: np.ndarray) -> np.ndarray:
    """:meth:`Model.message` of each of the sizes ``n`` (bytes), the same arithmetic."""
    return np.asarray(m.message(n))


def run_vector(sim: Simulator, schedule: Callable[..., Schedule], datatype: MPI.Datatype,
               dtype: np.dtype, prepare: Callable[[Context], tuple[Any, ...]]
               ) -> dict[str, np.ndarray]:
    """Run ``schedule`` for all ranks at once, cost-only (see the module docstring).

    Returns what :meth:`Simulator.run` returns, identical to it.
    Raises :class:`NotVectorizableError` where the per-rank engine must run it instead.

    A :class:`TwoLevel` model is taken while each node's network port is used by one rank of
    the node only (one sender, one receiver of inter-node messages over the whole call, as in
    a ring over consecutive ranks): that rank's own port then orders its node's messages, and
    the shared port never delays one; otherwise the per-rank engine serves the port in order.
    """
    if sim.data:
        raise NotVectorizableError("data mode runs per rank")
    p = sim.p
    m = sim.model
    if isinstance(m, TwoLevel) and m.nic is not None:
        raise NotVectorizableError("a token-bucket NIC runs per rank (its state follows the "
                                   "order of the messages)")
    levels: tuple[Model, ...]
    levels = (m.intra, m.inter) if isinstance(m, TwoLevel) else (m,)
    fab = sim.fabric
    gap = fab.network.gap if fab is not None else None
    hop = fab.network.hop if fab is not None else 0.0
    b_in, b_out = levels[0].beta, levels[-1].beta
    nic_user = None  # a node's shared port: the two-level model's, or a network's with a gap
    if (isinstance(m, TwoLevel) and fab is None) or gap is not None:
        nic_user = {"send": np.full(p, -1, np.int64), "receive": np.full(p, -1, np.int64)}
    ctx = _VectorContext(p, datatype, dtype, sim.local, sim.nodes, sim.segment_bytes)
    post = 2 * sim.o_msg
    nd = None if sim.nodes is None else np.asarray(sim.nodes)
    if nd is not None:
        node_index = np.unique(nd, return_inverse=True)[1]  # node ids as 0..N-1
    ranks = np.arange(p)
    # The ports' and the messages' times: one float while every rank's is the same (a
    # round of messages of one size, under one model, leaves them so: the same arithmetic
    # as on p equal numbers, done once), else vectors of p.  A rank posts a round once its
    # last one ended (its clock is then at least ``rend``, the end of each of its messages),
    # so a port that is busy until its message ends is always free by then: the ports are
    # followed only where a gap keeps them busy longer.
    ports = gap is not None
    send_free: Any = 0.0
    recv_free: Any = 0.0
    rend: Any = 0.0
    one_cost = fab is None and nic_user is None and len(levels) == 1  # cost depends on n alone
    i64 = np.int64
    bsent, brecv, inter = (np.zeros(p, i64) for _ in range(3))
    same_bytes = 0  # bytes every rank sent (and received) in the rounds timed as one
    rounds = 0  # every rank sends and receives one message per round
    peers: tuple[Any, Any, np.ndarray, np.ndarray] | None = None  # the last round's, checked
    args = prepare(ctx)  # its copies charge the clocks (from 0, as in Simulator.run)
    ctx.clock += sim.o_call  # as Simulator.run: o_call, then 2 o_msg to post each round
    gen = schedule(ctx, *(_vectorised(a, p) for a in args))
    try:
        while True:
            c = ctx.clock
            if isinstance(c, np.ndarray):
                np.maximum(c, rend, out=c)
            elif isinstance(rend, float):
                if rend > c:
                    ctx.clock = rend
            else:
                ctx.clock = np.maximum(c, rend)
            try:
                item = next(gen)
            except StopIteration:
                break
            during = None
            rnd: Round = item.ops if isinstance(item, Overlap) else item
            if isinstance(item, Overlap):
                during = item.during
                if not rnd:
                    during()
                    continue
            if not rnd:
                continue
            if len(rnd) != 2 or {type(o) for o in rnd} != {Send, Recv}:
                raise NotVectorizableError("a round that is not one send and one receive per rank")
            snd, rcv = (rnd[0], rnd[1]) if type(rnd[0]) is Send else (rnd[1], rnd[0])
            if not isinstance(snd.buf, _Extents) or not isinstance(rcv.buf, _Extents):
                raise NotVectorizableError("a message buffer that is not per-rank")
            if peers is not None and snd.peer is peers[0] and rcv.peer is peers[1]:
                dest, src = peers[2], peers[3]  # the same (read-only) peer vectors: checked
            else:
                dest, src = _vector(_lanes(snd.peer, p), p), _vector(_lanes(rcv.peer, p), p)
                if (dest.view(np.uint64).max() >= p  # a negative peer is a huge unsigned one
                        or src.view(np.uint64).max() >= p):
                    raise NotVectorizableError("peer out of range")
                if not (dest[src] == ranks).all():  # the receive of r matches src[r]'s send
                    raise NotVectorizableError("messages not matched within the round")
                peers = None
                if isinstance(snd.peer, np.ndarray) and isinstance(rcv.peer, np.ndarray):
                    snd.peer.flags.writeable = False  # so that the same object is the same
                    rcv.peer.flags.writeable = False  # peers in a later round
                    peers = (snd.peer, rcv.peer, dest, src)
            isz = ctx.unit  # bytes per element on the wire (the datatype's size)
            slen, rlen = snd.buf.lengths(), rcv.buf.lengths()
            if one_cost and isinstance(ctx.clock, float) and isinstance(rend, float):
                slen, rlen = _uniform(slen), _uniform(rlen)
                if isinstance(slen, int) and isinstance(rlen, int):
                    # every rank alike: the arithmetic below, on one number for all
                    nb = slen * isz
                    if nb > rlen * isz:
                        raise NotVectorizableError("truncation (the per-rank engine reports it)")
                    t = ctx.clock = ctx.clock + post
                    rend = t + levels[0].message(nb)  # its start is t: ports free, all alike
                    rounds += 1
                    same_bytes += nb
                    if nd is not None:
                        inter += np.where(nd[dest] != nd, nb, 0)
                    if during is not None:
                        during()
                    continue
            if not isinstance(ctx.clock, np.ndarray):  # from here on, per rank
                ctx.clock = np.full(p, ctx.clock)
            if not isinstance(rend, np.ndarray):
                rend = np.full(p, rend)
            if ports and not isinstance(send_free, np.ndarray):
                send_free = np.full(p, send_free)
                recv_free = np.full(p, recv_free)
            sbytes = _vector(slen, p) * isz
            n = sbytes[src]  # bytes arriving at each rank
            if (n > rlen * isz).any():
                raise NotVectorizableError("truncation (the per-rank engine reports it)")
            if post:  # + 0.0 changes no (non-negative) clock: skipped
                ctx.clock += post
            t = ctx.clock
            start = np.maximum(t[src], t)
            if ports:
                start = np.maximum(start, np.maximum(send_free[src], recv_free))
            crossing = None if nd is None else nd[src] != nd
            if nic_user is not None:
                assert crossing is not None
                for role, users in (("send", src[crossing]), ("receive", ranks[crossing])):
                    nodes, user = node_index[users], nic_user[role]
                    if (len(np.unique(nodes)) < len(nodes)
                            or ((user[nodes] != -1) & (user[nodes] != users)).any()):
                        raise NotVectorizableError(
                            f"two ranks of a node {role} across nodes (the shared port is "
                            "served in order by the per-rank engine)")
                    user[nodes] = users
            if len(levels) == 1:
                cost = _message(levels[0], n)  # indexed by receiver, as cost(s, d, n)
            else:
                assert crossing is not None
                cost = np.where(crossing, _message(levels[1], n), _message(levels[0], n))
            busy = None
            if fab is not None:  # the network's terms, as Simulator.run charges them
                assert crossing is not None
                f, h = fab.round(src, ranks, n)
                b = b_in if b_in == b_out else np.where(crossing, b_out, b_in)
                if hop:  # + 0.0 changes no (non-negative) time: skipped
                    cost = cost + h * hop
                cost = cost + (f - 1.0) * n * b
                if gap is not None:
                    busy = start + np.maximum(gap, n * b * f)
            end = start + cost
            if busy is None:
                busy = end
            if ports:
                send_free[src] = busy
                recv_free[:] = busy
            rend = np.maximum(end, end[dest])  # at least the last rend: the clock was
            rounds += 1
            bsent += sbytes
            brecv += n
            if nd is not None:
                inter += np.where(nd[dest] != nd, sbytes, 0)
            if during is not None:  # while the round is in flight: clock from t on, as per rank
                during()
    finally:
        gen.close()
    clocks = ctx.clock if isinstance(ctx.clock, np.ndarray) else np.full(p, ctx.clock)
    out = {
        "clocks": clocks, "messages_sent": np.full(p, rounds, i64),
        "bytes_sent": bsent + same_bytes, "messages_recv": np.full(p, rounds, i64),
        "bytes_recv": brecv + same_bytes, "inter_bytes_sent": inter,
    }
    if fab is not None:
        out["link_bytes"] = fab.link_bytes.copy()
    return out


# ---------------------------------------------------------------------------------------------
# The batch engine: every rank's schedule walked first, then all ranks' rounds timed together.


class _Walk(NamedTuple):
    """Every rank's rounds of a cost-only run, as :func:`_walk` records them.

    Rounds are numbered rank after rank (``rr``), each rank's ending with a terminal round of
    no operation (what it does after its last round); operations are numbered in post order.
    """

    rr_rank: np.ndarray  # rank of each round
    nops: np.ndarray  # operations of each round
    pre_lo: np.ndarray  # charges[pre_lo:pre_hi]: local work before the round is posted
    pre_hi: np.ndarray
    dur_hi: np.ndarray  # charges[pre_hi:dur_hi]: an Overlap's work, while it is in flight
    charges: np.ndarray  # seconds of each local operation, in order
    op_rr: np.ndarray  # round of each operation
    op_send: np.ndarray  # a send (else a receive)
    op_peer: np.ndarray
    op_bytes: np.ndarray  # bytes sent, or room to receive


def _walk(sim: Simulator, gens: Sequence[Schedule]) -> _Walk:
    """Run every rank's schedule generator to its end (cost-only, nothing a schedule does
    depends on the clocks: the engines' rule), recording its rounds and the charges of its
    local work (:attr:`Simulator.record`) in the order the per-rank engine makes them."""
    unit = sim.unit
    charges: list[float] = []
    per_rank = []  # rounds of each rank, its terminal one included
    nops: list[int] = []
    pre_hi: list[int] = []
    dur_hi: list[int] = []
    op_send: list[bool] = []
    op_peer: list[int] = []
    op_bytes: list[int] = []
    sim.record = charges
    try:
        for gen in gens:
            ops: list[Send | Recv] = []  # this rank's, in post order
            before = len(nops)
            for item in gen:
                if isinstance(item, Overlap):
                    rnd = item.ops
                    if not rnd:  # nothing in flight: plain local work
                        item.during()
                        continue
                    nops.append(len(rnd))
                    pre_hi.append(len(charges))
                    ops.extend(rnd)
                    item.during()
                    dur_hi.append(len(charges))
                elif item:
                    nops.append(len(item))
                    pre_hi.append(len(charges))
                    ops.extend(item)
                    dur_hi.append(len(charges))
            nops.append(0)  # the terminal round: the work after the last round
            pre_hi.append(len(charges))
            dur_hi.append(len(charges))
            per_rank.append(len(nops) - before)
            op_send += [type(o) is not Recv for o in ops]
            op_peer += [o[1] for o in ops]
            op_bytes += ([o[0].nbytes for o in ops] if unit is None
                         else [o[0].size * unit for o in ops])
    finally:
        sim.record = None
    i64 = np.int64
    dur = np.array(dur_hi, i64)
    n = np.array(nops, i64)
    return _Walk(np.repeat(np.arange(len(per_rank), dtype=i64), per_rank), n,
                 np.concatenate([np.zeros(1, i64), dur[:-1]]), np.array(pre_hi, i64), dur,
                 np.array(charges, np.float64), np.repeat(np.arange(n.size), n),
                 np.array(op_send, bool), np.array(op_peer, i64), np.array(op_bytes, i64))


def _charge(c: np.ndarray, charges: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``c`` (clocks) plus each lane's charges ``charges[lo:hi]``, added one by one in order
    (as the per-rank engine adds them: the same roundings)."""
    n = hi - lo
    if not n.size or not n.any():
        return c
    c = c.copy()
    for i in range(int(n.max())):
        sel = np.flatnonzero(n > i)
        c[sel] += charges[lo[sel] + i]
    return c


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + counts[i] - 1`` of every i, concatenated."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    offs = np.cumsum(counts) - counts
    return np.repeat(starts - offs, counts) + np.arange(total)


def _previous(keys: np.ndarray) -> np.ndarray:
    """For each position, the previous position holding the same key (-1 if none)."""
    order = np.argsort(keys, kind="stable")
    prev = np.full(keys.size, -1, np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return prev


#: the batch engine serves a generation of at most this many ranks one by one (the same
#: arithmetic, in the same order), larger ones with numpy
SMALL_GENERATION = 24


def run_batch(sim: Simulator, gens: Sequence[Schedule]) -> dict[str, np.ndarray]:
    """:meth:`Simulator.run` of cost-only schedules, with the per-rank engine's results bit
    for bit, at a few numpy operations per step of its ready queue instead of Python work per
    message (see the module docstring).

    First every rank's generator runs to its end (:func:`_walk`); the messages are matched
    per (source, destination) pair in post order; then the per-rank engine's own order of
    events is replayed a *generation* at a time: the ranks its ready queue holds (at first
    0 .. p-1, then those whose round completed while the previous generation was served, in
    the order they completed) each resume (local work, clock), post their next round, and
    every message both of whose ends are now posted is matched, in the order the per-rank
    engine matches it (the later of its two posts: that rank's place in the queue, then the
    operation's place in its round).  A port serves its messages in that order; messages
    that share no port are timed together.

    Raises :class:`NotVectorizableError` where the per-rank engine must run the schedules
    (data mode, a two-level model or a network, a trace; a deadlock or a truncation, whose
    errors the per-rank engine reports): the generators are then spent.
    """
    if sim.data:
        raise NotVectorizableError("data mode runs per rank")
    if sim.fabric is not None or isinstance(sim.model, TwoLevel):
        raise NotVectorizableError("a two-level model or a network runs per rank")
    p = sim.p
    w = _walk(sim, gens)
    i64 = np.int64
    send = w.op_send
    nop = send.size
    peer, op_rank = w.op_peer, w.rr_rank[w.op_rr]
    if nop and (peer.min() < 0 or peer.max() >= p):
        raise NotVectorizableError("a peer that is not a rank (the per-rank engine deadlocks)")
    # match: the j-th send s -> d with the j-th receive at d from s (non-overtaking)
    si, ri = np.flatnonzero(send), np.flatnonzero(~send)
    if si.size != ri.size:
        raise NotVectorizableError("unmatched messages (the per-rank engine deadlocks)")
    ms, md = op_rank[si], peer[si]
    os_ = np.lexsort((si, md, ms))
    orr = np.lexsort((ri, op_rank[ri], peer[ri]))
    ma, mb = si[os_], ri[orr]  # each message's send and receive operation
    ms, md = ms[os_], md[os_]
    if not ((peer[mb] == ms).all() and (op_rank[mb] == md).all()):
        raise NotVectorizableError("unmatched messages (the per-rank engine deadlocks)")
    mn = w.op_bytes[ma]
    if (mn > w.op_bytes[mb]).any():
        raise NotVectorizableError("a truncated message (the per-rank engine reports it)")
    nmsg = ma.size
    op_msg = np.empty(nop, i64)
    op_msg[ma] = np.arange(nmsg)
    op_msg[mb] = np.arange(nmsg)
    partner = np.empty(nop, i64)
    partner[ma], partner[mb] = mb, ma
    rr_op0 = np.cumsum(w.nops) - w.nops
    op_j = np.arange(nop) - rr_op0[w.op_rr]
    jmul = int(w.nops.max()) + 1
    m_rs, m_rd = w.op_rr[ma], w.op_rr[mb]
    cost = _message(sim.model, mn).astype(np.float64, copy=False)
    if cost.shape != mn.shape:
        cost = np.full(nmsg, float(cost))
    o_msg = sim.o_msg
    nrr = w.nops.size
    clock = np.array(sim.clock, np.float64) + sim.o_call
    rend, send_free, recv_free = np.zeros(p), np.zeros(p), np.zeros(p)
    post_t = np.zeros(nrr)
    post_key = np.full(nrr, -1, i64)
    pending = w.nops.copy()
    cur = np.searchsorted(w.rr_rank, np.arange(p))  # each rank's next round
    done = np.zeros(p, bool)
    ranks = np.arange(p)  # the ready queue's generation, in order
    g = 0
    while ranks.size:
        if ranks.size <= SMALL_GENERATION:  # the same steps one by one: fewer numpy calls
            posted: list[int] = []
            for r in ranks.tolist():
                rr = cur[r]
                c = max(clock[r], rend[r])
                for x in w.charges[w.pre_lo[rr]:w.pre_hi[rr]]:
                    c += x
                clock[r] = c
                k = w.nops[rr]
                if not k:
                    done[r] = True
                    continue
                t = c + k * o_msg
                post_t[rr] = t
                post_key[rr] = (g * p + len(posted)) * jmul
                for x in w.charges[w.pre_hi[rr]:w.dur_hi[rr]]:
                    t += x
                clock[r] = t
                posted.append(rr)
            if not posted:
                break
            g += 1
            found = []
            for rr in posted:
                for op in range(rr_op0[rr], rr_op0[rr] + w.nops[rr]):
                    o = partner[op]
                    okey = post_key[w.op_rr[o]]
                    mine = post_key[rr] + op_j[op]
                    if okey >= 0 and mine > okey + op_j[o]:
                        found.append((mine, op_msg[op]))
            found.sort()
            nxt_l = []
            for _, m in found:
                s, d, a, b = ms[m], md[m], m_rs[m], m_rd[m]
                end = max(max(post_t[a], post_t[b]), max(send_free[s], recv_free[d])) + cost[m]
                send_free[s] = end
                recv_free[d] = end
                rend[s] = max(rend[s], end)
                rend[d] = max(rend[d], end)
                for x in (a, b):
                    pending[x] -= 1
                    if not pending[x]:
                        nxt_l.append(x)
            nxt = np.array(nxt_l, i64)
            ranks = w.rr_rank[nxt]
            cur[ranks] = nxt + 1
            continue
        rr = cur[ranks]
        c = _charge(np.maximum(clock[ranks], rend[ranks]), w.charges, w.pre_lo[rr], w.pre_hi[rr])
        k = w.nops[rr]
        live = k > 0
        clock[ranks] = c
        done[ranks[~live]] = True
        ranks, rr, k = ranks[live], rr[live], k[live]
        if not ranks.size:
            break
        t = c[live] + k * o_msg  # busy posting the round
        post_t[rr] = t
        post_key[rr] = (g * p + np.arange(ranks.size)) * jmul
        clock[ranks] = _charge(t, w.charges, w.pre_hi[rr], w.dur_hi[rr])
        g += 1
        ops = _ranges(rr_op0[rr], k)
        other = partner[ops]
        okey = post_key[w.op_rr[other]]
        mine = post_key[w.op_rr[ops]] + op_j[ops]
        hit = (okey >= 0) & (mine > okey + op_j[other])  # matched now, at this post
        ops = ops[hit]
        batch = op_msg[ops[np.argsort(mine[hit], kind="stable")]]
        if batch.size:
            s, d = ms[batch], md[batch]
            ts = np.maximum(post_t[m_rs[batch]], post_t[m_rd[batch]])
            mc = cost[batch]
            prev_s, prev_d = _previous(s), _previous(d)
            chained = bool((prev_s >= 0).any() or (prev_d >= 0).any())
            left = np.ones(batch.size, bool)
            while True:
                if chained:
                    sel = np.flatnonzero(left & ((prev_s < 0) | ~left[prev_s])
                                         & ((prev_d < 0) | ~left[prev_d]))
                    left[sel] = False
                    ss, dd = s[sel], d[sel]
                    start = np.maximum(ts[sel], np.maximum(send_free[ss], recv_free[dd]))
                    end = start + mc[sel]
                else:
                    ss, dd = s, d
                    end = np.maximum(ts, np.maximum(send_free[s], recv_free[d])) + mc
                send_free[ss] = end
                recv_free[dd] = end
                rend[ss] = np.maximum(rend[ss], end)
                rend[dd] = np.maximum(rend[dd], end)
                if not chained or not left.any():
                    break
            ev = np.column_stack((m_rs[batch], m_rd[batch])).ravel()  # in match order
            np.subtract.at(pending, ev, 1)
            u, first = np.unique(ev[::-1], return_index=True)
            full = pending[u] == 0
            nxt = u[full][np.argsort(-first[full], kind="stable")]  # in completion order
        else:
            nxt = np.zeros(0, i64)
        ranks = w.rr_rank[nxt]
        cur[ranks] = nxt + 1
    if not done.all():
        raise NotVectorizableError("ranks never finish (the per-rank engine deadlocks)")
    msent = np.bincount(ms, minlength=p).astype(i64)
    mrecv = np.bincount(md, minlength=p).astype(i64)
    bsent, brecv, inter = np.zeros(p, i64), np.zeros(p, i64), np.zeros(p, i64)
    np.add.at(bsent, ms, mn)
    np.add.at(brecv, md, mn)
    if sim.nodes is not None and nmsg:
        nd = np.asarray(sim.nodes)
        x = nd[ms] != nd[md]
        np.add.at(inter, ms[x], mn[x])
    sim.clock = clock.tolist()
    return {"clocks": clock, "messages_sent": msent, "bytes_sent": bsent,
            "messages_recv": mrecv, "bytes_recv": brecv, "inter_bytes_sent": inter}
