"""Overlap inside a schedule (issue 14, item 3), in the simulator.

* the schedule language: a :class:`~mpicoll.algorithms.schedule.Pipeline` runs a round's work
  during the next round where allowed, before it otherwise, the last one after the last round;
  the simulator runs an :class:`~mpicoll.algorithms.schedule.Overlap`'s work while the round
  is in flight, and refuses work that touches the round's buffers (rule 3);
* every segmented algorithm at p = 1..5 and 8, counts 0, 1, not divisible by p and several
  segments (a 16-byte segment size): bitwise the results of one segment (a segment larger than
  the message) for float64 sums (which depend on the order of the operands), equal to NumPy for
  int64, in rank order for a non-commutative op where the algorithm takes one, in place and
  not; the same bytes per rank, and the message counts the segments imply;
* both simulator engines give the same clocks for segmented rounds;
* a hand-checked case: overlap shortens the critical path, by the formula.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from segmented import SEGMENTED

from mpicoll.algorithms import registry
from mpicoll.algorithms.schedule import (
    Context,
    Overlap,
    Pipeline,
    Schedule,
    segment,
    segments,
    split,
)
from mpicoll.engines.sim import Simulator
from mpicoll.model.alphabeta import DEFAULT, Model
from mpicoll.tools.cases import Case
from mpicoll.tools.simulate import make_args, simulate

PS = (1, 2, 3, 4, 5, 8)
SMALL = 16  # bytes per segment: two float64 / int64
WHOLE = 1 << 30  # one segment for every message here
VAR = "MPICOLL_SEGMENT_SIZE"


def _concat(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    """x op y = the decimal digits of x then those of y (positive int64): associative, not
    commutative."""
    a = np.frombuffer(inbuf, np.int64)
    b = np.frombuffer(inoutbuf, np.int64)
    b[:] = a * 10 ** (np.floor(np.log10(b)).astype(np.int64) + 1) + b


CONCAT = MPI.Op.Create(_concat, commute=False)


def _counts(p: int) -> tuple[int, ...]:
    """0, 1, not divisible by p, and several 16-byte segments per block."""
    return (0, 1, 2 * p + 1, 9 * p + 5)


def _run(mp: pytest.MonkeyPatch, coll: str, alg: str, p: int, count: int, seg: int, *,
         dtype: Any = np.float64, op: MPI.Op = MPI.SUM, root: int = 0, in_place: bool = False,
         random: bool = False) -> tuple[list[Any], list[np.ndarray], Any]:
    """(each rank's result, each rank's input, the SimResult) of a simulated call with data,
    in ``seg``-byte segments; ``random``: standard-normal float inputs (sums whose bits depend
    on the order of the operands)."""
    mp.setenv(VAR, str(seg))
    dt = np.dtype(dtype)
    made = [make_args(coll, p, r, count, dt, op=op, root=root, in_place=in_place)
            for r in range(p)]
    inputs = []
    for r, (args, out) in enumerate(made):
        arr = out if args[0] is MPI.IN_PLACE else args[0]
        if random:
            arr[:] = np.random.default_rng(100 + r).standard_normal(arr.size)
        inputs.append(arr.copy())
    res = simulate(coll, p, count, algorithm=alg, dtype=dt, op=op, root=root,
                   in_place=in_place, data=True, args=[a for a, _ in made])
    counts = _block_counts(coll, p, count)
    outs = [None if o is None else np.array(o[: counts[r]] if counts else o, copy=True)
            for r, (_, o) in enumerate(made)]  # in place, the result is the first block
    return outs, inputs, res


def _block_counts(coll: str, p: int, count: int) -> list[int]:
    if coll == "reduce_scatter_block":
        return [count] * p
    return Case(coll, count, size=p, uniform=False).counts() if coll == "reduce_scatter" else []


def _expected_int(coll: str, p: int, count: int, inputs: list[np.ndarray], root: int,
                  op: MPI.Op) -> list[Any]:
    """The NumPy reference for int64 inputs: rank-order fold ``x0 op (x1 op ...)``."""
    acc = inputs[-1].copy()
    for x in reversed(inputs[:-1]):
        op.Reduce_local(x, acc)
    if coll == "allreduce":
        return [acc] * p
    if coll == "reduce":
        return [acc if r == root else None for r in range(p)]
    counts = _block_counts(coll, p, count)
    offs = np.cumsum([0, *counts])
    return [acc[offs[r] : offs[r + 1]] for r in range(p)]


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return bool(np.asarray(a).tobytes() == np.asarray(b).tobytes())


@pytest.mark.parametrize(("coll", "alg"), SEGMENTED, ids=[f"{c}-{a}" for c, a in SEGMENTED])
def test_segmented_is_bitwise_the_unsegmented(monkeypatch: pytest.MonkeyPatch, coll: str,
                                              alg: str) -> None:
    for p in PS:
        if registry.get(coll, alg).why_not(p) is not None:
            continue
        for count in _counts(p):
            for root in ({0, p - 1} if coll == "reduce" else {0}):
                for in_place in (False, True):
                    where = (coll, alg, p, count, root, in_place)
                    # float64 sums: the order of the operands shows in the bits
                    seg, _, sres = _run(monkeypatch, coll, alg, p, count, SMALL, random=True,
                                        root=root, in_place=in_place)
                    one, _, ores = _run(monkeypatch, coll, alg, p, count, WHOLE, random=True,
                                        root=root, in_place=in_place)
                    assert all(_same(x, y) for x, y in zip(seg, one, strict=True)), where
                    assert (sres.bytes_sent == ores.bytes_sent).all(), where
                    assert (sres.bytes_recv == ores.bytes_recv).all(), where
                    assert (sres.messages_sent >= ores.messages_sent).all(), where
                    # int64: the exact reduction
                    got, inputs, _ = _run(monkeypatch, coll, alg, p, count, SMALL,
                                          dtype=np.int64, root=root, in_place=in_place)
                    want = _expected_int(coll, p, count, inputs, root, MPI.SUM)
                    assert all(_same(x, y) for x, y in zip(got, want, strict=True)), where


@pytest.mark.parametrize(("coll", "alg"), [("reduce", "binomial"), ("allreduce", "reduce_bcast"),
                                           ("reduce_scatter", "reduce_scatterv")])
def test_segmented_tree_keeps_rank_order(monkeypatch: pytest.MonkeyPatch, coll: str,
                                         alg: str) -> None:
    """The binomial reduce and what is built on it accept non-commutative ops: segmented, the
    operands of every element are still combined in rank order."""
    for p in PS:
        for count in _counts(p):
            for root in ({0, p - 1, p // 2} if coll == "reduce" else {0}):
                got, inputs, _ = _run(monkeypatch, coll, alg, p, count, SMALL,
                                      dtype=np.int64, op=CONCAT, root=root)
                want = _expected_int(coll, p, count, inputs, root, CONCAT)
                assert all(_same(x, y) for x, y in zip(got, want, strict=True)), (p, count, root)


def _ring_messages(p: int, block_bytes: int, seg: int) -> int:
    """Messages a rank sends in the ring reduce-scatter: p-1 steps of ceil(block/seg)."""
    return (p - 1) * max(1, -(-block_bytes // seg))


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_message_counts_follow_the_segments(monkeypatch: pytest.MonkeyPatch, p: int) -> None:
    block = 5 * 8  # five float64 per block: three 16-byte segments
    monkeypatch.setenv(VAR, str(SMALL))
    for alg in ("ring", "pairwise"):
        r = simulate("reduce_scatter_block", p, 5, algorithm=alg)
        assert (r.messages_sent == _ring_messages(p, block, SMALL)).all(), alg
        assert (r.bytes_sent == (p - 1) * block).all(), alg
    ar = simulate("allreduce", p, 5 * p, algorithm="ring")
    assert (ar.messages_sent == _ring_messages(p, block, SMALL) + p - 1).all()
    red = simulate("reduce", p, 5, algorithm="binomial", root=0)
    assert red.messages_sent[0] == 0
    assert (red.messages_sent[1:] == 3).all()  # every non-root sends its vector once, 3 segments
    assert red.messages_recv.sum() == 3 * (p - 1)


@pytest.mark.parametrize("model", [Model(3e-6, 7e-10, 1.3e-9),
                                   Model(3e-6, 7e-10, 1.3e-9, o_call=1e-5, o_msg=5e-7)])
def test_both_engines_agree_on_segmented_rounds(monkeypatch: pytest.MonkeyPatch,
                                                model: Model) -> None:
    monkeypatch.setenv(VAR, str(SMALL))
    for coll, alg in (("allreduce", "ring"), ("reduce_scatter_block", "ring"),
                      ("reduce_scatter_block", "pairwise"), ("reduce_scatter", "ring"),
                      ("reduce_scatter", "pairwise")):
        for p in (2, 3, 5, 8):
            for count in (1, 7, 40):
                a = simulate(coll, p, count, algorithm=alg, model=model, engine="rank")
                b = simulate(coll, p, count, algorithm=alg, model=model, engine="vector")
                assert np.array_equal(a.clocks, b.clocks), (coll, alg, p, count)
                assert np.array_equal(a.messages_sent, b.messages_sent)
                assert np.array_equal(a.bytes_recv, b.bytes_recv)


def test_overlap_shortens_the_critical_path_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ring reduce-scatter on 2 ranks, blocks of 4 float64 (32 B), segments of 16 B:
    alpha = 1 s, beta = 1/16 s/B, gamma = 3/16 s/B, so a segment takes t = 1 + 1 = 2 s on the
    wire and w = 3 s to reduce.  Two rounds: segment 0 alone (2 s), segment 1 while segment 0
    is reduced (max(2, 3) = 3 s), then segment 1's reduction (3 s): 8 s.  In one segment:
    1 + 32/16 + 3 * 32/16 = 9 s."""
    m = Model(alpha=1.0, beta=1 / 16, gamma=3 / 16)
    monkeypatch.setenv(VAR, "16")
    seg = simulate("reduce_scatter_block", 2, 4, algorithm="ring", model=m)
    monkeypatch.setenv(VAR, str(WHOLE))
    one = simulate("reduce_scatter_block", 2, 4, algorithm="ring", model=m)
    assert seg.time == 8.0
    assert one.time == 9.0
    assert registry.overlapped(2, 2.0, 3.0) == 8.0
    # with gamma = 0 there is nothing to hide: segments only add alpha
    flat = Model(alpha=1.0, beta=1 / 16, gamma=0.0)
    monkeypatch.setenv(VAR, "16")
    assert simulate("reduce_scatter_block", 2, 4, algorithm="ring", model=flat).time == 4.0


def test_ring_allreduce_8_ranks_8_mib_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's figure: ring allreduce, p = 8, n = 8 MiB, the default model, 64 KiB
    segments against one segment per block; the registry's cost gives the segmented time."""
    n = 8 << 20
    monkeypatch.delenv(VAR, raising=False)
    seg = simulate("allreduce", 8, n // 8, algorithm="ring")
    monkeypatch.setenv(VAR, str(n))
    one = simulate("allreduce", 8, n // 8, algorithm="ring")
    a, b, g = DEFAULT.alpha, DEFAULT.beta, DEFAULT.gamma
    assert seg.time < one.time
    assert one.time == pytest.approx(7 * (a + n / 8 * (b + g)) + 7 * (a + n / 8 * b))
    want = registry.get("allreduce", "ring").cost(8, float(n), a, b, g)
    assert seg.time == pytest.approx(want, rel=1e-12)
    m = n / 8 / 16  # 16 segments of 64 KiB per block
    assert want == pytest.approx(registry.overlapped(7 * 16, a + m * b, m * g)
                                 + 7 * (a + n / 8 * b))


# ------------------------------------------------------------------------------------------
# the schedule language


def test_pipeline_runs_work_during_the_next_round_where_allowed() -> None:
    log: list[str] = []
    pipe = Pipeline()
    assert pipe.round(()) == ()  # nothing pending: the round itself
    pipe.then(log.append, "w0")
    first = pipe.round((), overlaps=False)  # w0 must end before this round is posted
    assert first == ()
    assert log == ["w0"]
    pipe.then(log.append, "w1")
    second = pipe.round(())  # w1 runs while this round is in flight
    assert isinstance(second, Overlap)
    assert second.ops == ()
    assert log == ["w0"]
    second.during()
    pipe.then(log.append, "w2")
    pipe.flush()  # after the last round
    pipe.flush()
    assert log == ["w0", "w1", "w2"]  # every work exactly once, in order


def test_segments_split_like_block_counts() -> None:
    ctx = Context(0, 2, MPI.DOUBLE, np.dtype(np.float64), None, 16)
    assert segments(ctx, 0) == segments(ctx, 2) == 1
    assert segments(ctx, 3) == 2
    assert segments(ctx, np.array([1, 5, 3])) == 3  # the largest of per-rank counts
    got = [segment(10, 7, 3, j) for j in range(3)]
    assert got == [(10, 13), (13, 15), (15, 17)]
    assert [v.tolist() for v in split(np.arange(7), 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    whole = np.arange(4)
    assert split(whole, 1)[0] is whole
    lo, hi = segment(np.array([0, 10]), np.array([7, 2]), 3, 1)  # per-rank vectors
    assert lo.tolist() == [3, 11]
    assert hi.tolist() == [5, 12]


def _overlapping(bad: bool) -> Any:
    def sched(ctx: Context) -> Schedule:
        peer = 1 - ctx.rank
        a, b, c, d = (ctx.scratch(4) for _ in range(4))
        a[:] = ctx.rank + 1
        c[:] = 0
        yield ctx.sendrecv(a, peer, b, peer)
        # reduce what arrived while the next exchange is in flight; "bad" writes its send buffer
        work = (lambda: ctx.reduce(c, a, MPI.SUM)) if bad else (lambda: ctx.reduce(b, c, MPI.SUM))
        yield ctx.overlap(ctx.sendrecv(a, peer, d, peer), work)
    return sched


def test_simulator_runs_overlap_work_in_flight_and_checks_rule_3() -> None:
    sim = Simulator(2, Model(1.0, 0.0, 1.0 / 32), data=True)
    gens = [_overlapping(False)(sim.context(r, MPI.DOUBLE, np.dtype(np.float64)))
            for r in range(2)]
    stats = sim.run(gens)
    # round 1: 1 s; round 2: 1 s on the wire while 32 B are reduced (1 s): 2 s in all
    assert stats["clocks"].tolist() == [2.0, 2.0]
    sim = Simulator(2, data=True)
    gens = [_overlapping(True)(sim.context(r, MPI.DOUBLE, np.dtype(np.float64)))
            for r in range(2)]
    with pytest.raises(RuntimeError, match="rule 3"):
        sim.run(gens)
