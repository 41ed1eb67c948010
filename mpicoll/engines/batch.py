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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..algorithms.schedule import Overlap, Recv, Schedule, Send
from .sim import NotVectorizableError, Simulator, TwoLevel
from .vector import _message

__all__ = ["run_batch"]

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
