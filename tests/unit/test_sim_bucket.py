"""The token-bucket NIC of the simulator (mpicoll.engines.network.TokenBucket on the two-level
model's node port): known answers on small hand-computed cases (a message within the burst takes
the line's time, one of twice the burst burst/line + (n - B)/R, an idle gap refills the bucket,
calls back to back settle at the rate); a zero burst (or none) is today's model bit for bit;
the vector engine refuses it and the per-rank engine runs it."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.algorithms.schedule import Context, Schedule
from mpicoll.engines.network import Network, TokenBucket
from mpicoll.engines.sim import NotVectorizableError, Simulator, TwoLevel
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import simulate

F8 = np.dtype(np.float64)
ALPHA = 2e-5  # s, the line's latency and the rate curve's
RATE = 8e-8  # s/B at the rate (100 Mbit/s)
LINE = 1e-9  # s/B at the line
BURST = 1 << 16  # B
BUCKET = TokenBucket(BURST, RATE, LINE, ALPHA)
INTRA = Model(alpha=1e-6, beta=1e-10, gamma=0.0)
INTER = Model(alpha=ALPHA, beta=RATE, gamma=0.0)


def two_nodes(bucket: TokenBucket | None = BUCKET, k: int = 1) -> TwoLevel:
    return TwoLevel(k, INTRA, INTER, bucket)


def one_message(n: int, p: int = 2) -> list[Schedule]:
    """Rank 0 sends n bytes to rank p - 1 (on another node)."""

    def make(sim: Simulator) -> list[Schedule]:
        def sched(ctx: Context) -> Schedule:
            if ctx.rank == 0:
                yield (ctx.send(np.zeros(n // 8), p - 1),)
            elif ctx.rank == p - 1:
                yield (ctx.recv(np.zeros(n // 8), 0),)
        return [sched(sim.context(r, MPI.DOUBLE, F8)) for r in range(p)]
    return make  # type: ignore[return-value]


# --- the formula ----------------------------------------------------------------------------


def test_a_message_within_the_tokens_takes_the_line_time() -> None:
    for n in (8, 1000, BURST):
        assert BUCKET.time(INTER.message(n), n, BURST) == pytest.approx(ALPHA + n * LINE)


def test_a_message_of_twice_the_burst() -> None:
    n = 2 * BURST
    want = ALPHA + BURST * LINE + (n - BURST) * RATE  # alpha + burst/line + (n - B)/R
    assert BUCKET.time(INTER.message(n), n, BURST) == pytest.approx(want, rel=1e-12)
    # a half-full bucket: half the burst at the line
    assert BUCKET.time(INTER.message(n), n, BURST / 2) == pytest.approx(
        ALPHA + BURST / 2 * LINE + (n - BURST / 2) * RATE, rel=1e-12)


def test_no_tokens_is_the_message_itself() -> None:
    for n in (0, 8, 1000, 3 * BURST):
        t = INTER.message(n)
        for tokens in (0.0, -5.0, -1e9):
            assert BUCKET.time(t, n, tokens) == t


def test_never_faster_than_the_line_nor_slower_than_the_message() -> None:
    # a curve already below the line's fit (a calibration's smallest, eager, exchanges)
    fast = 1.5e-5
    assert BUCKET.time(fast, 1000, BURST) == fast  # its measured time
    assert BUCKET.time(3e-5, 1000, BURST) == pytest.approx(ALPHA + 1000 * LINE)
    t = INTER.message(4000)
    assert ALPHA + 4000 * LINE <= BUCKET.time(t, 4000, 100.0) <= t


def test_tokens_refill_at_the_rate_up_to_the_burst() -> None:
    assert BUCKET.tokens(0.0, 1.0, 1.0 + 1000 * RATE) == pytest.approx(1000)
    assert BUCKET.tokens(-500.0, 0.0, 1000 * RATE) == pytest.approx(500)  # a debt first
    assert BUCKET.tokens(BURST - 10, 0.0, 1.0) == BURST  # never above the burst


def test_bad_buckets() -> None:
    for bad in ({"burst": -1, "beta": RATE}, {"burst": 1, "beta": 0.0},
                {"burst": 1, "beta": RATE, "line_beta": 2 * RATE},
                {"burst": float("nan"), "beta": RATE}):
        with pytest.raises(ValueError, match="token bucket"):
            TokenBucket(**bad)  # type: ignore[arg-type]


# --- on the simulator's node port -----------------------------------------------------------


def test_one_message_on_the_node_port() -> None:
    for n, want in ((BURST // 2, ALPHA + BURST // 2 * LINE),
                    (2 * BURST, ALPHA + BURST * LINE + BURST * RATE)):
        sim = Simulator(2, two_nodes(), data=False)
        clocks = sim.run(one_message(n)(sim))["clocks"]  # type: ignore[operator]
        assert clocks[1] == pytest.approx(INTRA.o_call + want, rel=1e-12)


def test_an_idle_gap_refills_the_bucket() -> None:
    n = 2 * BURST
    make = one_message(n)
    sim = Simulator(2, two_nodes(), data=False)
    first = sim.run(make(sim))["clocks"][1]  # type: ignore[operator]
    # the first message left a debt of B at its start; back to back, the second finds
    # (first - B / R) / R... worth of tokens: only what the rate refilled since it started
    sim.clock = [float(first)] * 2
    second = sim.run(make(sim))["clocks"][1] - first  # type: ignore[operator]
    refilled = -BURST + first / RATE
    assert 0 < refilled < BURST
    assert second == pytest.approx(ALPHA + refilled * LINE + (n - refilled) * RATE, rel=1e-9)
    # after an idle gap of B / R more, the bucket is full again: the first call's time
    start = first + second + BURST * RATE
    sim.clock = [start] * 2
    third = sim.run(make(sim))["clocks"][1] - start  # type: ignore[operator]
    assert third == pytest.approx(first, rel=1e-9)
    assert second > third


def test_the_buckets_of_both_ends_are_spent() -> None:
    # 4 ranks on 2 nodes of 2: ranks 0 -> 2 then 1 -> 3 share node 0's outgoing bucket and
    # node 1's incoming one: the second message finds what the first left
    n = (3 * BURST) // 4 // 8 * 8

    def make(sim: Simulator) -> list[Schedule]:
        def sched(ctx: Context) -> Schedule:
            r = int(ctx.rank)
            if r < 2:
                yield (ctx.send(np.zeros(n // 8), r + 2),)
            else:
                yield (ctx.recv(np.zeros(n // 8), r - 2),)
        return [sched(sim.context(r, MPI.DOUBLE, F8)) for r in range(4)]

    sim = Simulator(4, two_nodes(k=2), data=False)
    clocks = sim.run(make(sim))["clocks"]
    t1 = ALPHA + n * LINE
    left = BURST - n + t1 / RATE  # tokens when the port frees
    assert sorted(clocks[2:]) == pytest.approx(
        [t1, t1 + ALPHA + left * LINE + (n - left) * RATE], rel=1e-9)


def test_back_to_back_calls_settle_at_the_rate() -> None:
    # a message of n bytes per call, n a quarter of the burst: the first calls
    # pass on the burst at the line's speed, the steady state carries n per call at the rate
    n = BURST // 4
    make = one_message(n)
    sim = Simulator(2, two_nodes(), data=False)
    stats = sim.run_steady(make)  # type: ignore[arg-type]
    calls = stats["calls"]
    assert calls[0] == pytest.approx(ALPHA + n * LINE, rel=1e-12)
    assert stats["time"] == pytest.approx(n * RATE, rel=1e-3)
    assert 4 < len(calls) < 20
    assert stats["clocks"].max() == pytest.approx(calls[-1])
    # with an idle gap of n / R between calls the bucket refills: every call on the burst
    sim = Simulator(2, two_nodes(), data=False)
    stats = sim.run_steady(make, between=n * RATE)  # type: ignore[arg-type]
    assert stats["time"] == pytest.approx(ALPHA + n * LINE, rel=1e-9)
    assert len(stats["calls"]) == 3


def test_steady_state_of_a_collective_keeps_the_rate() -> None:
    # binomial reduce then bcast on 2 nodes of 2 at 64 KiB: 64 KiB up one NIC, 64 KiB down
    # the other per call: the first calls at the line, the steady state at the rate
    m = two_nodes(TokenBucket(1 << 18, RATE, LINE, ALPHA), k=2)
    one = simulate("allreduce", 4, 8192, algorithm="reduce_bcast", model=m)
    steady = simulate("allreduce", 4, 8192, algorithm="reduce_bcast", model=m, steady=True)
    plain = simulate("allreduce", 4, 8192, algorithm="reduce_bcast", model=two_nodes(None, 2))
    assert one.calls is None
    assert steady.calls is not None
    assert steady.calls[0] == one.time
    assert one.time < (1 << 16) * RATE / 10
    assert steady.time == pytest.approx((1 << 16) * RATE, rel=1e-4)  # the floor, bench's
    assert steady.time < plain.time  # each NIC's bucket refills while the other one works
    assert steady.bytes_sent.tolist() == plain.bytes_sent.tolist()


# --- reduces to today's model; engines ------------------------------------------------------


@pytest.mark.parametrize("coll", ["allreduce", "bcast", "allgather"])
def test_a_zero_burst_is_todays_model(coll: str) -> None:
    zero = two_nodes(TokenBucket(0, RATE, LINE, ALPHA), k=2)
    plain = two_nodes(None, k=2)
    for alg in registry.algorithms(coll):
        for p in (3, 4, 6):
            if alg.why_not(p) is not None:
                continue
            for count in (1, 1000, 20000):
                try:
                    ref = simulate(coll, p, count, algorithm=alg.name, model=plain,
                                   engine="rank")
                except registry.RestrictionError:
                    continue
                got = simulate(coll, p, count, algorithm=alg.name, model=zero)
                assert got.engine == "rank"
                assert np.array_equal(ref.clocks, got.clocks), (coll, alg.name, p, count)
                assert ref.time == got.time
                # without a bucket, steady is one call: the same bits
                again = simulate(coll, p, count, algorithm=alg.name, model=plain, steady=True)
                assert again.time == ref.time
                assert again.calls is None


def test_the_vector_engine_refuses_a_bucket() -> None:
    m = two_nodes(k=2)
    with pytest.raises(NotVectorizableError):
        simulate("allreduce", 4, 1000, algorithm="ring", model=m, engine="vector")
    got = simulate("allreduce", 4, 1000, algorithm="ring", model=m)
    ref = simulate("allreduce", 4, 1000, algorithm="ring", model=m, engine="rank")
    assert got.engine == "rank"
    assert np.array_equal(got.clocks, ref.clocks)
    # without the bucket the vector engine runs it, with other clocks (the burst is gone)
    plain = simulate("allreduce", 4, 1000, algorithm="ring", model=two_nodes(None, 2))
    assert plain.engine == "vector"
    assert plain.time > got.time


def test_a_bucket_is_not_taken_with_a_network() -> None:
    with pytest.raises(ValueError, match="node port"):
        simulate("allreduce", 4, 1000, algorithm="ring", model=two_nodes(k=2),
                 network=Network("cluster:2"))
