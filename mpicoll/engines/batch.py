"""The simulator's batch engine: every rank's schedule walked first, then timed together.

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

A symmetric collective's walk need not run every rank's generator: :func:`walk_classes` runs
the schedule once for a *class* of ranks, ``ctx.rank`` the vector of their ranks (the vector
engine's lanes), and splits a class where its ranks part ways (a branch, a loop bound, a step
number the lanes disagree on), walking each part again.  A binomial tree's ranks fall into
about 2 lg p classes, a double binary tree's into 2 lg p (their height in either tree), a ring's
or a butterfly's into one, so a walk costs Python work per class and round instead of per rank
and round; it records exactly what the per-rank walk records (:func:`run_classes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI

from ..algorithms.schedule import Context, Overlap, Recv, Schedule, Send
from .sim import NotVectorizableError, Simulator, TwoLevel
from .vector import _Extents, _Lanes, _message, _SplitError, _VectorContext, _vectorised

__all__ = ["run_batch", "run_classes", "time_walk", "walk_classes"]

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


def _rounds(gen: Schedule, charges: list[Any], nops: list[int], pre_hi: list[int],
            dur_hi: list[int]) -> list[Send | Recv]:
    """Run one schedule generator to its end: each round's number of operations, and where
    the charges stood before it was posted and at the end of its Overlap's work, appended
    (the terminal round, 0 operations, included: the work after the last round); returns its
    operations in post order.  Local work appends its charges to ``charges`` itself."""
    ops: list[Send | Recv] = []
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
    nops.append(0)
    pre_hi.append(len(charges))
    dur_hi.append(len(charges))
    return ops


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
            before = len(nops)
            ops = _rounds(gen, charges, nops, pre_hi, dur_hi)
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


class _ClassContext(_VectorContext):
    """The context of a class of ranks walked together (:func:`walk_classes`): ``rank`` is
    the vector of their ranks (lanes), buffers are :class:`~mpicoll.engines.vector._Extents`
    of that many lanes, and local work is recorded, one charge (a float, or one per lane) per
    copy or reduction, asked of the model once per size as :class:`SimContext` asks it."""

    def __init__(self, sim: Simulator, lanes: np.ndarray, datatype: MPI.Datatype,
                 dtype: np.dtype) -> None:
        Context.__init__(self, lanes.view(_Lanes), sim.p,  # type: ignore[arg-type]
                         datatype, dtype, sim.nodes, sim.segment_bytes)
        if self.derived:
            raise NotVectorizableError("a derived datatype is walked per rank")
        self._clock = [0.0]
        self.local = sim.local
        self.copies = True
        self.sim = sim
        self.lanes = lanes.size
        #: the charges made so far, in order (:func:`_walk_class` moves them to the walk)
        self.record: list[Any] = []

    def _charge(self, known: dict[int, float], time_of: Callable[[int], float], n: Any
                ) -> None:
        if isinstance(n, np.ndarray):
            sizes, where = np.unique(n.view(np.ndarray), return_inverse=True)
            if sizes.size == 1:
                n = int(sizes[0])
            else:
                each = []
                for k in sizes.tolist():
                    tk = known.get(k)
                    if tk is None:
                        tk = known[k] = time_of(k)
                    each.append(tk)
                self.record.append(np.array(each, np.float64)[where])
                return
        t = known.get(n)
        if t is None:
            t = known[n] = time_of(n)
        if t:  # + 0.0 changes no clock: not recorded, as SimContext
            self.record.append(t)

    def copy(self, src: Any, dst: Any) -> None:
        self._charge(self.sim.copy_charge, self.local.copy_time, src.size * self.unit)

    def reduce(self, inbuf: Any, inoutbuf: Any, op: MPI.Op) -> None:
        if not isinstance(inbuf, _Extents) or not isinstance(inoutbuf, _Extents):
            raise NotVectorizableError("reduction of a buffer that is not per-rank")
        self._charge(self.sim.reduce_charge, self.local.reduce_time, inbuf.size * self.unit)

    def scratch(self, count: Any) -> Any:
        return _Extents.whole(count, self.dtype, self.lanes)

    group = Context.group  # any group of which every lane is a member (not only all ranks)


class _Class(NamedTuple):
    """One class's walk (:func:`_walk_class`): what each of its ranks did, as :class:`_Walk`
    records a rank; a charge or an operation's peer or bytes is an int or float (every lane
    alike) or a vector of one per lane."""

    lanes: np.ndarray  # the ranks
    prepared: list[Any]  # the argument copies' charges (before the call: the clocks)
    nops: list[int]  # operations of each round, the terminal one (0) included
    pre_hi: list[int]  # charges[:pre_hi] were made before the round was posted
    dur_hi: list[int]  # charges[:dur_hi] by the end of its Overlap's work
    charges: list[Any]
    op_send: list[bool]
    op_peer: list[Any]
    op_bytes: list[Any]


def _walk_class(sim: Simulator, lanes: np.ndarray, schedule: Callable[..., Schedule],
                datatype: MPI.Datatype, dtype: np.dtype,
                prepare: Callable[[Context], tuple[Any, ...]]) -> _Class:
    """Run ``schedule`` once for the ranks ``lanes`` (:class:`_ClassContext`), recording what
    :func:`_walk` records of each (the same loop); raises :class:`_SplitError` where they part."""
    ctx = _ClassContext(sim, lanes, datatype, dtype)
    m = lanes.size
    args = prepare(ctx)
    prepared, ctx.record = ctx.record, []
    charges = ctx.record
    nops: list[int] = []
    pre_hi: list[int] = []
    dur_hi: list[int] = []
    gen = schedule(ctx, *(_vectorised(a, m) for a in args))
    try:
        ops = _rounds(gen, charges, nops, pre_hi, dur_hi)
    finally:
        gen.close()
    unit = sim.unit
    size: list[Any] = []
    for o in ops:
        b = o[0]
        if not isinstance(b, (_Extents, np.ndarray)):
            raise NotVectorizableError("a message buffer that is not per-rank")
        n = b.size * unit if unit is not None else (b.size * b.dtype.itemsize)
        size.append(n.view(np.ndarray) if isinstance(n, np.ndarray) else int(n))
    return _Class(lanes, prepared, nops, pre_hi, dur_hi, charges,
                  [type(o) is not Recv for o in ops],
                  [o[1].view(np.ndarray) if isinstance(o[1], np.ndarray) else o[1] for o in ops],
                  size)


def _rows(values: list[Any], m: int, dtype: type) -> np.ndarray:
    """``values`` (each a scalar or a vector of m lanes) as a (len(values), m) array."""
    out: np.ndarray = np.empty((len(values), m), dtype)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _assemble(p: int, classes: Sequence[_Class]) -> _Walk:
    """The :class:`_Walk` of every rank from the walks of the classes that hold them: each
    rank's rounds, operations and (non-zero) charges laid out rank after rank, as
    :func:`_walk` lays them out."""
    i64 = np.int64
    n_rr, n_op, n_ch = (np.zeros(p, i64) for _ in range(3))
    tables = []
    for c in classes:
        m = c.lanes.size
        ch = _rows(c.charges, m, np.float64)  # (charges, lanes)
        nz = ch != 0  # a zero charge is not recorded (SimContext's rule): per lane
        upto = np.zeros((len(c.charges) + 1, m), i64)  # non-zero charges before each
        np.cumsum(nz, axis=0, out=upto[1:])
        n_rr[c.lanes], n_op[c.lanes], n_ch[c.lanes] = len(c.nops), len(c.op_send), upto[-1]
        tables.append((ch, nz, upto))
    rr_off, op_off, ch_off = (np.cumsum(n) - n for n in (n_rr, n_op, n_ch))
    nops, pre_hi, dur_hi = (np.empty(int(n_rr.sum()), i64) for _ in range(3))
    charges = np.empty(int(n_ch.sum()), np.float64)
    op_send = np.empty(int(n_op.sum()), bool)
    op_peer, op_bytes = np.empty(op_send.size, i64), np.empty(op_send.size, i64)
    for c, (ch, nz, upto) in zip(classes, tables, strict=True):
        m = c.lanes.size
        rr = rr_off[c.lanes] + np.arange(len(c.nops))[:, None]  # (rounds, lanes)
        nops[rr] = np.array(c.nops, i64)[:, None]
        pre_hi[rr] = ch_off[c.lanes] + upto[c.pre_hi]
        dur_hi[rr] = ch_off[c.lanes] + upto[c.dur_hi]
        h, lane = np.nonzero(nz)
        charges[ch_off[c.lanes][lane] + upto[h, lane]] = ch[h, lane]
        if c.op_send:
            op = op_off[c.lanes] + np.arange(len(c.op_send))[:, None]
            op_send[op] = np.array(c.op_send)[:, None]
            op_peer[op] = _rows(c.op_peer, m, i64)
            op_bytes[op] = _rows(c.op_bytes, m, i64)
    return _Walk(np.repeat(np.arange(p, dtype=i64), n_rr), nops,
                 np.concatenate([np.zeros(1, i64), dur_hi[:-1]]), pre_hi, dur_hi, charges,
                 np.repeat(np.arange(nops.size), nops), op_send, op_peer, op_bytes)


def walk_classes(sim: Simulator, schedule: Callable[..., Schedule], datatype: MPI.Datatype,
                 dtype: np.dtype, prepare: Callable[[Context], tuple[Any, ...]],
                 limit: int | None = None, prepared: Sequence[float] | None = None) -> _Walk:
    """:func:`_walk` of a symmetric collective's schedule (every rank prepares its call as
    rank 0 does, :func:`run_vector`'s premise) by classes of ranks instead of rank by rank.

    The schedule runs for a set of ranks at once, ``ctx.rank`` the vector of their ranks
    (the vector engine's lanes, :class:`~mpicoll.engines.vector._Lanes`), from every rank
    together.  Where the lanes part ways (a branch on the rank, a Python index or hash of a
    per-rank value: :class:`~mpicoll.engines.vector._SplitError`) the walk of that set stops,
    and each part is walked again from the start on its own.  A class is a set of ranks that take
    one control path through the schedule: a binomial tree's ranks by their number of
    children, a double binary tree's by their place in both trees (24 classes of 4096 ranks),
    so a walk costs O(classes x rounds) Python steps on vectors instead of O(p x rounds).
    The prepared arguments' copies are charged to ``sim.clock``, as the per-rank contexts
    charge them when they are made (``prepared``: the clocks each rank's own preparation
    left, where rank 0's is not every rank's, as :func:`run_vector` takes them); the walk
    equals :func:`_walk`'s of every rank's schedule
    (``tests/unit/test_sim_batch.py``).

    Raises :class:`NotVectorizableError` where it cannot (a derived datatype, a buffer or an
    operation the lanes cannot stand for, more than ``limit`` classes: the per-rank walk is
    then the faster)."""
    p = sim.p
    limit = p if limit is None else limit
    todo = [np.arange(p, dtype=np.int64)]
    done: list[_Class] = []
    while todo:
        lanes = todo.pop()
        try:
            c = _walk_class(sim, lanes, schedule, datatype, dtype, prepare)
        except _SplitError as e:
            split = e
        except (TypeError, ValueError, AttributeError, IndexError) as e:
            if not isinstance(e.__context__, _SplitError):  # (numpy's TypeError for a split
                raise NotVectorizableError(f"{type(e).__name__}: {e}") from e  # in a shape)
            split = e.__context__
        else:
            done.append(c)
            continue
        keys = np.asarray(split.keys)
        if keys.shape != lanes.shape:
            raise NotVectorizableError("a split of another vector than the ranks")
        _, part = np.unique(keys, return_inverse=True)
        todo += [lanes[part == k] for k in range(int(part.max()), -1, -1)]
        if len(todo) + len(done) > limit:
            raise NotVectorizableError(f"more than {limit} classes of ranks")
    clock = np.array(sim.clock, np.float64)
    for c in done:
        for t in c.prepared:
            clock[c.lanes] += t
    sim.clock = clock.tolist() if prepared is None else list(prepared)
    return _assemble(p, done)


def _charge(c: np.ndarray, charges: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``c`` (clocks, at least one lane) plus each lane's charges ``charges[lo:hi]``, added
    one by one in order (as the per-rank engine adds them: the same roundings)."""
    n = hi - lo
    top = int(n.max())
    if not top:
        return c
    c = c.copy()
    for i in range(top):
        sel = np.flatnonzero(n > i)
        c[sel] += charges[lo[sel] + i]
    return c


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + counts[i] - 1`` of every i, concatenated (each
    count at least 1)."""
    total = int(counts.sum())
    if total == counts.size:  # every count 1
        return starts
    offs = np.cumsum(counts) - counts
    return np.repeat(starts - offs, counts) + np.arange(total)


def _order(keys: np.ndarray, p: int) -> np.ndarray:
    """The positions of ``keys`` (each in 0 .. p-1) sorted by key, those of one key in place:
    numpy's radix sort where the keys fit 16 bits (p <= 65536), linear in their number."""
    return np.argsort(keys.astype(np.min_scalar_type(max(p - 1, 0))), kind="stable")


def _chains(ports: np.ndarray, nports: int) -> tuple[np.ndarray, np.ndarray]:
    """Each port's slots one after the other: for each of the m slots ``ports`` (a port each,
    in 0 .. nports-1, in the order the ports serve them) the previous slot of its port (m if
    none) and the next one (m + 2 if none); ``prev`` has 4 more entries, m + 2."""
    m = ports.size
    order = _order(ports, nports)
    cut = ports[order[1:]] != ports[order[:-1]]  # between two ports, in the sort
    prev = np.full(m + 4, m + 2)
    prev[order[0]] = m
    prev[order[1:]] = np.where(cut, m, order[:-1])
    nxt = np.empty(m, np.int64)
    nxt[order[-1]] = m + 2
    nxt[order[:-1]] = np.where(cut, m + 2, order[1:])
    return prev, nxt


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
    return time_walk(sim, _walk(sim, gens))


def run_classes(sim: Simulator, schedule: Callable[..., Schedule], datatype: MPI.Datatype,
                dtype: np.dtype, prepare: Callable[[Context], tuple[Any, ...]],
                limit: int | None = None, prepared: Sequence[float] | None = None
                ) -> dict[str, np.ndarray]:
    """:func:`run_batch` of a symmetric collective's schedule walked by classes of ranks
    (:func:`walk_classes`, its arguments) instead of rank by rank: the same results.

    Raises :class:`NotVectorizableError` where :func:`run_batch` or :func:`walk_classes`
    does; ``sim`` is then as it was (its clocks untouched)."""
    if sim.data:
        raise NotVectorizableError("data mode runs per rank")
    if sim.fabric is not None or isinstance(sim.model, TwoLevel):
        raise NotVectorizableError("a two-level model or a network runs per rank")
    return time_walk(sim, walk_classes(sim, schedule, datatype, dtype, prepare, limit,
                                       prepared))


def time_walk(sim: Simulator, w: _Walk) -> dict[str, np.ndarray]:
    """The timing half of :func:`run_batch`: the walk ``w`` of every rank's rounds, matched
    and replayed a ready-queue generation at a time (its docstring); the same results as
    :meth:`Simulator.run` of the schedules walked, bit for bit."""
    p = sim.p
    model = sim.model
    if sim.fabric is not None or isinstance(model, TwoLevel):
        raise NotVectorizableError("a two-level model or a network runs per rank")
    i64 = np.int64
    send = w.op_send
    nop = send.size
    peer, op_rank = w.op_peer, w.rr_rank[w.op_rr]  # op_rank ascends (rank after rank)
    if nop and (peer.min() < 0 or peer.max() >= p):
        raise NotVectorizableError("a peer that is not a rank (the per-rank engine deadlocks)")
    # match: the j-th send s -> d with the j-th receive at d from s (non-overtaking), the
    # messages numbered by (d, s, j): stable sorts of the operations (in post order, rank
    # after rank: the sends by s, the receives by d already)
    si, ri = np.flatnonzero(send), np.flatnonzero(~send)
    if si.size != ri.size:
        raise NotVectorizableError("unmatched messages (the per-rank engine deadlocks)")
    ma = si[_order(peer[si], p)]  # each message's send: by d, a radix sort
    # and receive: by (d, s), numpy's merge sort of keys in order of d already (each rank's
    # block sorted alone, then merged at little cost; fewer fresh pages than two radix passes)
    mb = ri[np.argsort(op_rank[ri] * p + peer[ri], kind="stable")]
    ms, md = op_rank[ma], peer[ma]
    if not ((peer[mb] == ms).all() and (op_rank[mb] == md).all()):
        raise NotVectorizableError("unmatched messages (the per-rank engine deadlocks)")
    mn = w.op_bytes[ma]
    if (mn > w.op_bytes[mb]).any():
        raise NotVectorizableError("a truncated message (the per-rank engine reports it)")
    nmsg = ma.size
    op_msg = np.empty(nop, i64)
    op_msg[ma] = op_msg[mb] = np.arange(nmsg)
    # the two slots of each message (match order, then sender before receiver) at their ports:
    # rank r sends at port 2r, receives at port 2r + 1
    mport = np.empty((nmsg, 2), i64)
    np.multiply(ms, 2, out=mport[:, 0])
    np.multiply(md, 2, out=mport[:, 1])
    mport[:, 1] += 1
    rr_op0 = np.cumsum(w.nops) - w.nops
    cost = _message(model, mn).astype(np.float64, copy=False)
    if cost.shape != mn.shape:
        cost = np.full(nmsg, float(cost))
    o_msg = sim.o_msg
    clock = np.array(sim.clock, np.float64) + sim.o_call
    rend, send_free, recv_free = np.zeros(p), np.zeros(p), np.zeros(p)
    post_t = np.zeros(p)  # when each rank's posted round was posted
    left = np.zeros(p, i64)  # its operations not matched yet
    # each message's first post: its place in the order of the operations posted (nop: not
    # posted yet); its second post matches it
    first = np.full(nmsg, nop, i64)
    posts = 0  # operations posted
    lastq = np.full(2 * p, -1, i64)  # each port's last slot in a generation (-1 between)
    cur = np.searchsorted(w.rr_rank, np.arange(p))  # each rank's next round
    done = np.zeros(p, bool)
    ranks = np.arange(p)  # the ready queue's generation, in order
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
                post_t[r] = t
                for x in w.charges[w.pre_hi[rr]:w.dur_hi[rr]]:
                    t += x
                clock[r] = t
                left[r] = k
                posted.append(rr)
            if not posted:
                break
            found = []  # in match order
            for rr in posted:
                for m in op_msg[rr_op0[rr]:rr_op0[rr] + w.nops[rr]]:
                    if first[m] < posts:
                        found.append(m)
                    else:
                        first[m] = posts
                    posts += 1
            nxt_l = []
            for m in found:
                s, d = ms[m], md[m]
                end = max(max(post_t[s], post_t[d]), max(send_free[s], recv_free[d])) + cost[m]
                send_free[s] = end
                recv_free[d] = end
                rend[s] = max(rend[s], end)
                rend[d] = max(rend[d], end)
                for x in (s, d):
                    left[x] -= 1
                    if not left[x]:
                        nxt_l.append(x)
            ranks = np.array(nxt_l, i64)
            cur[ranks] += 1
            continue
        rr = cur[ranks]
        mid = w.pre_hi[rr]  # the charges before the post, then those while in flight
        c = _charge(np.maximum(clock[ranks], rend[ranks]), w.charges, w.pre_lo[rr], mid)
        k = w.nops[rr]
        if not k.all():  # terminal rounds: those ranks are done
            live = k > 0
            clock[ranks[~live]] = c[~live]
            done[ranks[~live]] = True
            ranks, rr, k, c, mid = ranks[live], rr[live], k[live], c[live], mid[live]
            if not ranks.size:
                break
        t = c + k * o_msg  # busy posting the round
        post_t[ranks] = t
        clock[ranks] = _charge(t, w.charges, mid, w.dur_hi[rr])
        left[ranks] = k
        ops = _ranges(rr_op0[rr], k)  # in post order
        mine = np.arange(posts, posts + ops.size)
        posts += ops.size
        mm = op_msg[ops]
        np.minimum.at(first, mm, mine)
        batch = mm[first[mm] < mine]  # matched now, in order
        n = batch.size
        if not n:
            break
        # the batch's slots (q = 2i: the sender of its i-th message, 2i + 1: the receiver)
        pq = np.take(mport, batch, axis=0).ravel()
        sd = pq >> 1
        s, d = sd[0::2], sd[1::2]
        ts = np.maximum(post_t[s], post_t[d])
        mc = cost[batch]
        q = np.arange(2 * n)
        np.maximum.at(lastq, pq, q)
        lq = lastq[pq]
        # each port serves its messages in order: a message is timed once the previous ones
        # on both its ports are (the same arithmetic per message, a port's in order), those
        # timed at one step sharing no port; all at once where no port serves two
        end = np.empty(n)
        f: slice | np.ndarray = slice(None)
        if (lq != q).any():
            pv, nx = _chains(pq, 2 * p)
            prev_s, prev_d = pv[0::2] >> 1, pv[1::2] >> 1  # n if none, and n + 1 at n + 1
            next_s, next_d = nx[0::2] >> 1, nx[1::2] >> 1  # n + 1 if none
            # the step that timed each message: n not yet, -1 at n (no previous one: timed
            # before all), n at n + 1 (no next one: never ready)
            step_of = np.full(n + 2, n)
            step_of[n] = -1
            f = np.flatnonzero((prev_s[:n] == n) & (prev_d[:n] == n))
        todo, step = n, 0
        while True:
            ss, dd = s[f], d[f]
            e = np.maximum(ts[f], np.maximum(send_free[ss], recv_free[dd])) + mc[f]
            send_free[ss] = e
            recv_free[dd] = e
            end[f] = e
            todo -= e.size
            if not todo:
                break
            step_of[f] = step
            a, b = next_s[f], next_d[f]
            # ready: the other previous one timed (b: before this step, else a has it too)
            f = np.concatenate((a[step_of[prev_d[a]] <= step], b[step_of[prev_s[b]] < step]))
            step += 1
        np.maximum.at(rend, sd, np.repeat(end, 2))  # each rank's last end (a max: any order)
        np.subtract.at(left, sd, 1)
        # the ranks whose round completed, in the order it did: at its last slot (its port's
        # last, after its other port's)
        ranks = sd[(lq == q) & (lastq[pq ^ 1] < q) & (left[sd] == 0)]
        lastq[pq] = -1
        cur[ranks] += 1
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
