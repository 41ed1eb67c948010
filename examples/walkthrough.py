"""The articles' worked examples, computed live, collective by collective: "From Scatter to
All-Reduce: A Plain-English Guide to Collective Operations" and "Communication Primitives"
(Distributed GPU Systems).

Every example of "From Scatter to All-Reduce: A Plain-English Guide to Collective Operations"
(broadcast, scatter, gather, reduce, all-reduce, reduce-scatter, all-gather) and the all-to-all
of "Communication Primitives" runs here on 4 ranks, on the native backend (MPI's own
collectives) and on the hand-rolled p2p backend.  Each rank's initial and final state is printed
in the article's own words ("Rank 2: has data 42"), and each backend's final state is checked
against the article's text, which is kept in this file.

Then "reduce-scatter + all-gather = all-reduce" is shown step by step, first on the article's
numbers, then on a vector of N bytes per rank with the p2p backend's traffic counters: the bytes
each rank really sent and received in each step, next to the per-rank volumes of the second
article's table (ReduceScatter N(P-1)/P, AllGather N(P-1)/P, AllReduce 2N(P-1)/P).

Run (exactly 4 ranks, the articles' examples are for 4):

    mpiexec -n 4 python -m mpi4py examples/walkthrough.py
    mpiexec -n 4 python -m mpi4py examples/walkthrough.py --backend p2p --algorithm ring

Exit status 0 when every state matches the article and every measured volume matches the
table, 1 otherwise, 2 on a usage error (wrong number of ranks, unknown algorithm).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import registry

WORLD = MPI.COMM_WORLD
P = 4
ROOT = 2  # the article's root in every rooted example

# The article's worked examples: inputs (rank 0..3) and its final states, word for word.
SCATTER_IN = [10, 20, 30, 40]
GATHER_IN = ["A", "B", "C", "D"]
REDUCE_IN = [[10, 20, 5], [2, 4, 6], [1, 1, 1], [5, 10, 15]]
RS_IN = [[10, 20, 5, 1], [2, 4, 6, 2], [1, 1, 1, 3], [5, 10, 15, 4]]
ALLGATHER_IN = [[10, 11], [20, 21], [30, 31], [40, 41]]
ARTICLE_FINAL: dict[str, list[str]] = {
    "bcast": ["has data 42"] * P,
    "scatter": ["has data 10", "has data 20", "has data 30", "has data 40"],
    "gather": ["still has its data A", "still has its data B", "has data [A, B, C, D]",
               "still has its data D"],
    "reduce": ["in0 unchanged, no out buffer", "in1 unchanged, no out buffer",
               "has the out buffer [18, 35, 27]", "in3 unchanged, no out buffer"],
    "allreduce": ["out = [18, 35, 27]"] * P,
    "reduce_scatter_block": ["out0 = [18]", "out1 = [35]", "out2 = [27]", "out3 = [10]"],
    "allgather": ["out = [10, 11, 20, 21, 30, 31, 40, 41]"] * P,
    "alltoall": ["has [a0, b0, c0, d0]", "has [a1, b1, c1, d1]", "has [a2, b2, c2, d2]",
                 "has [a3, b3, c3, d3]"],
}


def fmt(values: Any) -> str:
    """[10, 20, 5] for an array or list (the article's notation)."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def letters(codes: np.ndarray) -> list[str]:
    """Byte codes back to the article's labels: [65, 66] -> ['A', 'B']."""
    return [chr(c) for c in codes.tolist()]


# ---------------------------------------------------------------------------------------------
# One function per collective: runs the article's example on backend ``b`` (``kw`` holds the
# p2p ``algorithm=`` or nothing for native) and returns this rank's (initial, final) state text.

Example = Callable[[Any, dict[str, str]], tuple[str, str]]


def bcast(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    buf = np.array([42 if r == ROOT else 0], dtype=np.int64)  # non-roots: "no data"
    before = "has data 42" if r == ROOT else "has no data"
    b.Bcast(buf, root=ROOT, **kw)
    return before, f"has data {buf[0]}"


def scatter(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.array(SCATTER_IN, dtype=np.int64) if r == ROOT else None
    recv = np.empty(1, dtype=np.int64)
    before = f"has data {fmt(SCATTER_IN)}" if r == ROOT else "has no data"
    b.Scatter(send, recv, root=ROOT, **kw)
    return before, f"has data {recv[0]}"


def gather(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.frombuffer(GATHER_IN[r].encode(), dtype=np.uint8).copy()  # "A" -> [65]
    recv = np.empty(P, dtype=np.uint8) if r == ROOT else None
    b.Gather(send, recv, root=ROOT, **kw)
    if r == ROOT:
        assert recv is not None
        return f"has result {GATHER_IN[r]}", f"has data {fmt(letters(recv))}"
    return f"has result {GATHER_IN[r]}", f"still has its data {letters(send)[0]}"


def reduce(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.array(REDUCE_IN[r], dtype=np.int64)
    recv = np.empty(3, dtype=np.int64) if r == ROOT else None
    b.Reduce(send, recv, op=MPI.SUM, root=ROOT, **kw)
    if r == ROOT:
        return f"in{r} = {fmt(REDUCE_IN[r])}", f"has the out buffer {fmt(recv)}"
    unchanged = "unchanged" if send.tolist() == REDUCE_IN[r] else f"CHANGED to {fmt(send)}"
    return f"in{r} = {fmt(REDUCE_IN[r])}", f"in{r} {unchanged}, no out buffer"


def allreduce(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.array(REDUCE_IN[r], dtype=np.int64)
    recv = np.empty(3, dtype=np.int64)
    b.Allreduce(send, recv, op=MPI.SUM, **kw)
    return f"in{r} = {fmt(REDUCE_IN[r])}", f"out = {fmt(recv)}"


def reduce_scatter_block(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.array(RS_IN[r], dtype=np.int64)
    recv = np.empty(1, dtype=np.int64)  # count = 1 per rank
    b.Reduce_scatter_block(send, recv, op=MPI.SUM, **kw)
    return f"in{r} = {fmt(RS_IN[r])}", f"out{r} = {fmt(recv)}"


def allgather(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    r = b.rank
    send = np.array(ALLGATHER_IN[r], dtype=np.int64)
    recv = np.empty(2 * P, dtype=np.int64)  # count = 2 per rank
    b.Allgather(send, recv, **kw)
    return f"in{r} = {fmt(ALLGATHER_IN[r])}", f"out = {fmt(recv)}"


def alltoall(b: Any, kw: dict[str, str]) -> tuple[str, str]:
    # Rank r holds pieces "a0".."a3" (rank 0), "b0".."b3" (rank 1), ...: two bytes per piece.
    r = b.rank
    pieces = [f"{'abcd'[r]}{j}" for j in range(P)]
    send = np.frombuffer("".join(pieces).encode(), dtype=np.uint8).copy()
    recv = np.empty_like(send)
    b.Alltoall(send, recv, **kw)  # 2 elements (one piece) per peer
    got = recv.tobytes().decode()
    return f"has {fmt(pieces)}", f"has {fmt([got[i:i + 2] for i in range(0, 2 * P, 2)])}"


SECTIONS: list[tuple[str, str, str, Example]] = [
    # (collective, title, the article's formula or rule, example)
    ("bcast", f"Broadcast (root {ROOT})", "out[i] = in[i]", bcast),
    ("scatter", f"Scatter (root {ROOT})", "outY[i] = in[Y*count+i], count = 1", scatter),
    ("gather", f"Gather (root {ROOT})", "out[Y*count+i] = inY[i], count = 1", gather),
    ("reduce", f"Reduce (root {ROOT}, sum)", "out[i] = sum(inX[i])", reduce),
    ("allreduce", "All-reduce (sum)", "out[i] = sum(inX[i]) on every rank", allreduce),
    ("reduce_scatter_block", "Reduce-scatter (sum)", "outY[i] = sum(inX[Y*count+i]), count = 1",
     reduce_scatter_block),
    ("allgather", "All-gather", "out[Y*count+i] = inY[i], count = 2", allgather),
    ("alltoall", "All-to-all (second article)",
     "rank i receives the i-th piece from every rank", alltoall),
]


# ---------------------------------------------------------------------------------------------
# Backends and algorithm choice


class Impl:
    """One way to run a collective: a backend, and for p2p the algorithm rule."""

    def __init__(self, backend: Any, algorithm: str | None) -> None:
        self.backend = backend
        self.algorithm = algorithm

    def kw(self, collective: str) -> dict[str, str]:
        """``algorithm=`` for this collective: the forced name if it has one, else auto."""
        if self.backend.name != "p2p" or self.algorithm is None:
            return {}
        names = [a.name for a in registry.algorithms(collective)]
        return {"algorithm": self.algorithm if self.algorithm in names else "auto"}

    def label(self, collective: str) -> str:
        if self.backend.name != "p2p":
            return "native"
        return f"p2p ({self.kw(collective).get('algorithm', 'auto')})"


def check_algorithm(name: str | None) -> str | None:
    """None if ``name`` is a p2p algorithm of at least one walkthrough collective, else why not."""
    if name is None or name == "auto":
        return None
    known = {a.name for c, *_ in SECTIONS for a in registry.algorithms(c)}
    if name in known:
        return None
    return f"--algorithm: unknown algorithm {name!r}; expected one of {sorted(known)} or 'auto'"


# ---------------------------------------------------------------------------------------------
# Printing (rank 0 prints; the other ranks send it their lines with the native gather of
# Python objects, which is used for printing only)


def say(text: str = "") -> None:
    if WORLD.rank == 0:
        print(text, flush=True)


def show_section(coll: str, title: str, rule: str, example: Example, impls: list[Impl]) -> bool:
    """Run one article example on every implementation; print it; True if all match."""
    states, labels = [], []
    for impl in impls:
        kw, label = impl.kw(coll), impl.label(coll)
        try:
            states.append(example(impl.backend, kw))
        except mpicoll.RestrictionError as err:  # raised on every rank, before any message
            states.append(example(impl.backend, {"algorithm": "auto"}))
            label = f"p2p (auto; {err})"
        labels.append(label)
    gathered = WORLD.gather(states, root=0)  # gathered[rank][impl] = (initial, final)
    if WORLD.rank != 0:
        return True
    assert gathered is not None
    say(f"== {title} ==   {rule}")
    say("Initial State:")
    for r in range(P):
        say(f"  Rank {r}: {gathered[r][0][0]}")
    ok = True
    shown: list[list[str]] = []
    verdicts = []
    for i, label in enumerate(labels):
        final = [gathered[r][i][1] for r in range(P)]
        good = final == ARTICLE_FINAL[coll]
        ok &= good
        verdicts.append(f"{label}: {'as in the article' if good else 'DIFFERS'}")
        if final not in shown:  # print each distinct final state once
            shown.append(final)
            say("Final State:" if len(shown) == 1 else f"Final State ({label}):")
            for r in range(P):
                say(f"  Rank {r}: {final[r]}")
    if not ok:
        say("Article's final state:")
        for r in range(P):
            say(f"  Rank {r}: {ARTICLE_FINAL[coll][r]}")
    say("  computed live by " + "; ".join(verdicts))
    say()
    return ok


def rs_plus_ag_small(impls: list[Impl]) -> bool:
    """The article's "Why Reduce-Scatter + All-gather = All-reduce", step by step."""
    say("== Why Reduce-Scatter + All-gather = All-reduce ==")
    say("1. Initial State:")
    for r in range(P):
        say(f"  Rank {r} in: {fmt(RS_IN[r])}")
    ok = True
    for impl in impls:
        b = impl.backend
        x = np.array(RS_IN[b.rank], dtype=np.int64)
        piece = np.empty(1, dtype=np.int64)
        b.Reduce_scatter_block(x, piece, op=MPI.SUM, **impl.kw("reduce_scatter_block"))
        full = np.empty(P, dtype=np.int64)
        b.Allgather(piece, full, **impl.kw("allgather"))
        direct = np.empty(P, dtype=np.int64)
        b.Allreduce(x, direct, op=MPI.SUM, **impl.kw("allreduce"))
        rows = WORLD.gather((piece.tolist(), full.tolist(), direct.tolist()), root=0)
        if WORLD.rank != 0:
            continue
        assert rows is not None
        label = f"{impl.label('reduce_scatter_block')} reduce-scatter, " \
                f"{impl.label('allgather')} all-gather"
        say(f"2.-3. Reduce-Scatter, intermediate state  [{label}]:")
        for r in range(P):
            say(f"  Rank {r} has: {fmt(rows[r][0])}")
        say("4. All-gather, final state:")
        for r in range(P):
            say(f"  Rank {r} has {fmt(rows[r][1])}")
        same = all(rows[r][1] == rows[r][2] == [18, 35, 27, 10] for r in range(P))
        ok &= same
        say(f"  single All-reduce ({impl.label('allreduce')}) gives "
            f"{fmt(rows[0][2])} on every rank: {'identical' if same else 'DIFFERENT'}")
    say()
    return ok


def volume_table(hand: Any, nelem: int) -> bool:
    """Bytes each rank sent/received per step, from the p2p traffic counters, vs the table."""
    nbytes = nelem * 8
    blk = nelem // P
    rng = np.random.default_rng(WORLD.rank)
    x = rng.integers(-1000, 1000, nelem).astype(np.float64)  # integers: every sum is exact
    shard = np.empty(blk)
    full = np.empty(nelem)
    direct = np.empty(nelem)
    a2a = np.empty(nelem)

    steps: list[tuple[str, str, Callable[[], None]]] = [
        ("1. ReduceScatter", "ring",
         lambda: hand.Reduce_scatter_block(x, shard, op=MPI.SUM, algorithm="ring")),
        ("2. AllGather", "ring", lambda: hand.Allgather(shard, full, algorithm="ring")),
        ("AllReduce (1 call)", "ring",
         lambda: hand.Allreduce(x, direct, op=MPI.SUM, algorithm="ring")),
        ("All-to-All", "pairwise", lambda: hand.Alltoall(x, a2a, algorithm="pairwise")),
    ]
    counted = []
    for _, _, run in steps:
        WORLD.Barrier()
        hand.traffic.reset()  # count this step only
        run()
        t = hand.traffic.as_dict()
        counted.append((t["bytes_sent"], t["bytes_recv"], t["messages_sent"]))
    same = bool(np.array_equal(full, direct))
    all_same = WORLD.allreduce(same, op=MPI.LAND)
    rows = WORLD.gather(counted, root=0)  # rows[rank][step] = (sent, received, messages)
    if WORLD.rank != 0:
        return True
    assert rows is not None

    # The second article's "Communication Volume Summary" (per-GPU send / receive) and the bytes
    # a bandwidth-optimal algorithm puts on the wire per rank.
    per = nbytes * (P - 1) // P
    table = [  # (article send, article receive, expected send, expected receive)
        ("N(P-1)/P", "N/P [a]", per, per),
        ("N/P [b]", "N(P-1)/P", per, per),
        ("2N(P-1)/P", "2N(P-1)/P", 2 * per, 2 * per),
        ("N(P-1)/P", "N(P-1)/P", per, per),
    ]
    say("== Communication volume: reduce-scatter + all-gather = all-reduce, counted ==")
    say(f"N = {nbytes} B per rank ({nelem} float64), P = {P}: N/P = {nbytes // P}, "
        f"N(P-1)/P = {per}, 2N(P-1)/P = {2 * per}")
    say("article:  the second article's volume table, per-rank send / receive")
    say("expected: bytes a bandwidth-optimal algorithm sends, and receives, per rank")
    say("sent, received, msgs: p2p traffic counters, reset before each step (xP: on all P ranks)")
    say(f"{'step':20} {'algorithm':10} {'article send / receive':23} {'expected':>8} "
        f"{'sent':>10} {'received':>10} {'msgs':>4}  check")

    def col(values: list[int]) -> str:
        return f"{values[0]} x{P}" if len(set(values)) == 1 else ",".join(map(str, values))

    ok = True
    for i, (step, row) in enumerate(zip(steps, table, strict=True)):
        (name, alg, _), (asend, arecv, esend, erecv) = step, row
        sent = [rows[r][i][0] for r in range(P)]
        recv = [rows[r][i][1] for r in range(P)]
        good = all(s == esend for s in sent) and all(v == erecv for v in recv)
        ok &= good
        say(f"{name:20} {alg:10} {asend + ' / ' + arecv:23} {esend:>8} {col(sent):>10} "
            f"{col(recv):>10} {rows[0][i][2]:>4}  {'match' if good else 'MISMATCH'}")
        if i == 1:
            tot = [rows[r][0][0] + rows[r][1][0] for r in range(P)]
            good = all(t == 2 * per for t in tot)
            ok &= good
            say(f"{'  sum of 1. and 2.':20} {'':10} {'2N(P-1)/P':23} {2 * per:>8} {col(tot):>10} "
                f"{'':>10} {'':>4}  {'match' if good else 'MISMATCH'}")
    say(f"RS + AG result == AllReduce result on every rank: "
        f"{'identical' if all_same else 'DIFFERENT'}")
    ok &= bool(all_same)
    say("[a] the article counts the N/P result shard a rank keeps; on the wire a ring rank")
    say("    receives P-1 partial sums of N/P each: N(P-1)/P.")
    say("[b] the article counts the N/P shard a rank contributes; in a ring each rank sends it")
    say("    and forwards P-2 others: N(P-1)/P (the article's AllGather receive).")
    say("The two steps together send exactly what one AllReduce sends: 2N(P-1)/P per rank,")
    say("nearly 2N however large P grows.")
    say()
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p", "both"], default="both",
                        help="which backend computes the examples (default both)")
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="p2p algorithm forced on every collective that has one of that "
                             "name (the others run auto); see `python -m mpicoll algorithms`")
    parser.add_argument("--count", type=int, default=4096,
                        help="float64 elements per rank in the volume table, a multiple of 4 "
                             "(default 4096 = 32 KiB)")
    args = parser.parse_args(argv)

    problem = None
    if WORLD.size != P:
        problem = (f"walkthrough.py needs exactly {P} ranks (the articles' examples are for 4), "
                   f"got {WORLD.size}: run `mpiexec -n 4 python examples/walkthrough.py`")
    elif args.count <= 0 or args.count % P:
        problem = f"--count: must be a positive multiple of {P}, got {args.count}"
    else:
        problem = check_algorithm(args.algorithm)
    if problem:
        if WORLD.rank == 0:
            print(f"error: {problem}", file=sys.stderr, flush=True)
        return 2

    hand = mpicoll.p2p(WORLD)  # collective: every rank creates it (used by the volume table)
    impls = []
    if args.backend in ("native", "both"):
        impls.append(Impl(mpicoll.native(WORLD), None))
    if args.backend in ("p2p", "both"):
        impls.append(Impl(hand, args.algorithm))

    say("Collective operations, the articles' examples computed live on 4 ranks")
    say(f"backends: {', '.join(i.backend.name for i in impls)}"
        + (f"; p2p algorithm {args.algorithm!r} where the collective has it, auto elsewhere"
           if args.algorithm and args.backend != "native" else ""))
    say()
    ok = True
    for coll, title, rule, example in SECTIONS:
        ok &= show_section(coll, title, rule, example, impls)
    ok &= rs_plus_ag_small(impls)
    ok &= volume_table(hand, args.count)
    hand.Free()
    ok = bool(WORLD.allreduce(ok, op=MPI.LAND))
    say("all states as in the article, all volumes match" if ok else "SOME RESULTS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
