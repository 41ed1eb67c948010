"""The cost model (:mod:`mpicoll.model`): the model file, LogP's overhead terms and the copy
term in the simulator's clocks (against hand computations), and the calibration's fitting and
warnings on synthetic points (no timing here: the MPI test runs a real calibration)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.model import alphabeta as model
from mpicoll.model import calibrate
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import simulate

# powers of two: every sum below is exact in binary, so clocks are compared with ==
A, B, G = 2.0**-18, 2.0**-30, 2.0**-31  # alpha, beta, gamma
O_CALL, O_MSG = 2.0**-16, 2.0**-20
WITH_O = Model(A, B, G, o_call=O_CALL, o_msg=O_MSG)
D = 2.0**-32  # delta


# ---- the model file


@pytest.mark.parametrize("m", [Model(3e-6, 2e-10, 5e-10),
                               Model(3e-6, 2e-10, 5e-10, o_call=1.5e-5, o_msg=4e-7),
                               Model(3e-6, 2e-10, 5e-10, o_call=1.5e-5, o_msg=4e-7, delta=1e-10)],
                         ids=["without-o", "with-o", "with-o-and-delta"])
def test_model_file_round_trip(m: Model, tmp_path: Path) -> None:
    path = model.save(m, tmp_path / "a" / "model.json", P=2, fit_warnings=[])
    assert model.load(path) == m
    doc = json.loads(path.read_text())
    terms = ("alpha", "beta", "gamma", "o_call", "o_msg", "delta")
    assert {k: doc[k] for k in terms} == {k: getattr(m, k) for k in terms}
    assert doc["P"] == 2


def test_an_old_model_file_loads_with_no_overhead(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"alpha": 4e-6, "beta": 5e-10, "gamma": 1e-9, "P": 2}))
    assert model.load(path) == Model(4e-6, 5e-10, 1e-9, 0.0, 0.0, 0.0)
    # a file written before the copy term: delta 0, the rest as saved
    path.write_text(json.dumps({"alpha": 4e-6, "beta": 5e-10, "gamma": 1e-9, "o_call": 1e-5,
                                "o_msg": 1e-7}))
    assert model.load(path) == Model(4e-6, 5e-10, 1e-9, 1e-5, 1e-7, 0.0)


@pytest.mark.parametrize("bad", [{"o_call": -1e-6}, {"o_msg": "fast"}, {"o_msg": math.nan},
                                 {"delta": -1e-10},
                                 {"alpha": math.inf}, {"beta": None}])
def test_a_file_with_a_bad_term_is_not_a_model(bad: dict, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"alpha": 4e-6, "beta": 5e-10, "gamma": 1e-9, **bad}))
    assert model.load(path) is None


@pytest.mark.parametrize("kw", [{"o_call": -1e-9}, {"o_msg": math.nan}, {"alpha": -1.0},
                                {"delta": -1e-12},
                                {"gamma": math.inf}, {"o_call": True}])
def test_model_refuses_a_term_that_is_not_a_time(kw: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        Model(**kw)


def test_the_persistent_model_pays_o_start_for_o_call() -> None:
    m = Model(A, B, G, o_call=O_CALL, o_msg=O_MSG, o_start=O_CALL / 8)
    assert m.persistent() == Model(A, B, G, o_call=O_CALL / 8, o_msg=O_MSG, o_start=O_CALL / 8)
    blocking = simulate("allreduce", 2, 1, algorithm="recursive_doubling", model=m)
    started = simulate("allreduce", 2, 1, algorithm="recursive_doubling", model=m.persistent())
    assert blocking.time - started.time == O_CALL - O_CALL / 8


def test_as_dict_shows_the_overhead_terms_only_when_set() -> None:
    assert Model(1e-6, 1e-9, 1e-10).as_dict() == {"alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10}
    assert Model(1e-6, 1e-9, 1e-10, o_msg=2e-7).as_dict() == {
        "alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10, "o_msg": 2e-7}
    assert Model(1e-6, 1e-9, 1e-10, delta=1e-11).as_dict() == {
        "alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10, "delta": 1e-11}


# ---- the overhead terms in the simulator's clocks


def test_binomial_bcast_pays_o_call_once_and_o_msg_per_message_posted() -> None:
    """p = 4, root 0: round 1 0->2, round 2 0->1 and 2->3.  Each message costs c = alpha + n
    beta; every rank starts at o_call; rank 2 posts its receive (o_msg) while the root posts
    its first send (o_msg), then its own send (o_msg): the critical path is
    o_call + 2 o_msg + 2 c on every rank.  p = 3: rank 2 only receives (o_call + o_msg + c)."""
    n = 1024  # bytes: 128 float64
    c = A + n * B
    r4 = simulate("bcast", 4, 128, algorithm="binomial", model=WITH_O)
    assert r4.clocks.tolist() == [O_CALL + 2 * O_MSG + 2 * c] * 4
    r3 = simulate("bcast", 3, 128, algorithm="binomial", model=WITH_O)
    assert r3.clocks.tolist() == [O_CALL + 2 * O_MSG + 2 * c] * 2 + [O_CALL + O_MSG + c]
    # the same without overhead is the registry's formula, ceil(lg p) (alpha + n beta)
    assert simulate("bcast", 4, 128, algorithm="binomial", model=Model(A, B, G)).time == 2 * c


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_symmetric_schedules_add_the_overhead_to_their_formula(p: int) -> None:
    """Each round of dissemination barrier and ring allreduce is one send and one receive per
    rank: the time is the registry's formula plus o_call plus 2 o_msg per round."""
    bar = simulate("barrier", p, 0, algorithm="dissemination", model=WITH_O)
    formula = registry.get("barrier", "dissemination").cost
    assert bar.time == O_CALL + formula(p, 0.0, A + 2 * O_MSG, B, G)
    count = 64 * p  # divisible by p: every rank finishes together
    ring = simulate("allreduce", p, count, algorithm="ring", model=WITH_O)
    plain = simulate("allreduce", p, count, algorithm="ring", model=Model(A, B, G))
    assert ring.time == pytest.approx(plain.time + O_CALL + 2 * (p - 1) * 2 * O_MSG,
                                      rel=1e-12)
    assert simulate("allreduce", 1, 10, model=WITH_O).time == O_CALL  # the front door alone


def test_zero_overhead_terms_change_no_clock() -> None:
    for coll, alg in (("allreduce", "recursive_doubling"), ("bcast", "binomial"),
                      ("alltoall", "pairwise")):
        a = simulate(coll, 6, 100, algorithm=alg, model=Model(A, B, G))
        b = simulate(coll, 6, 100, algorithm=alg, model=Model(A, B, G, 0.0, 0.0, 0.0))
        assert np.array_equal(a.clocks, b.clocks)


# ---- the copy term (delta) in the simulator's clocks


@pytest.mark.parametrize("data", [True, False], ids=["data", "cost-only"])
def test_recursive_doubling_pays_delta_for_each_byte_it_copies(data: bool) -> None:
    """p = 2, n bytes: each rank copies its send buffer into its receive buffer, exchanges
    and reduces into its receive buffer (a commutative op: theirs op mine on both sides, as
    MPICH does): n copied each.  A non-commutative op keeps the lower rank on the left: rank 0
    reduces into scratch (mine op theirs) and copies the result back, 2 n.  In place, each
    copies n less."""
    n = 1024  # 128 float64
    c = A + n * B + n * G  # the exchange and the reduction
    m = Model(A, B, G, delta=D)
    r = simulate("allreduce", 2, 128, algorithm="recursive_doubling", model=m, data=data)
    assert r.clocks.tolist() == [c + n * D, c + n * D]
    r = simulate("allreduce", 2, 128, algorithm="recursive_doubling", model=m, data=data,
                 in_place=True)
    assert r.clocks.tolist() == [c, c]
    noncommutative = MPI.Op.Create(lambda a, b, t: None, commute=False)
    try:
        r = simulate("allreduce", 2, 128, algorithm="recursive_doubling", model=m, data=False,
                     op=noncommutative)
        assert r.clocks.tolist() == [c + 2 * n * D, c + n * D]
        r = simulate("allreduce", 2, 128, algorithm="recursive_doubling", model=m, data=False,
                     op=noncommutative, in_place=True)
        assert r.clocks.tolist() == [c + n * D, c]
    finally:
        noncommutative.Free()


@pytest.mark.parametrize(("coll", "alg"), [("allreduce", "ring"), ("allgather", "ring"),
                                           ("alltoall", "pairwise")])
def test_both_engines_charge_copies_alike(coll: str, alg: str) -> None:
    """The vector engine charges the copies (the send buffer's included) as the per-rank one
    does, bit for bit; without delta the clocks are those of the model without it."""
    m = Model(A, B, G, o_call=O_CALL, o_msg=O_MSG, delta=D)
    vec = simulate(coll, 5, 1000, algorithm=alg, model=m, data=False, engine="vector")
    rank = simulate(coll, 5, 1000, algorithm=alg, model=m, data=False, engine="rank")
    assert vec.clocks.tolist() == rank.clocks.tolist()
    plain = simulate(coll, 5, 1000, algorithm=alg, model=WITH_O, data=False, engine="vector")
    assert (vec.clocks > plain.clocks).all()  # every rank copies its own block at least


# ---- fitting and its warnings (synthetic points)


def test_overhead_formulas_on_synthetic_times() -> None:
    """raw round 3 us, engine 6 us + 5 us per round, call 50 us: o_msg = (5 - 3) / 2 us and
    o_call = 50 us - (alpha + 8 beta + 8 gamma + 2 o_msg)."""
    us = 1e-6
    times = {"raw": [3 * us] * 5, "call": [50 * us] * 5}
    times.update({str(k): [(6 + 5 * k) * us] * 5 for k in calibrate.ENGINE_ROUNDS})
    partial = Model(2 * us, 1e-9, 1e-10, delta=1e-10)
    o_call, o_msg, details = calibrate._fit_overhead(times, partial, 8, 8, 16)
    assert o_msg == pytest.approx(1 * us, rel=1e-9)
    assert o_call == pytest.approx(50 * us - (2 * us + 8e-9 + 8e-10 + 16e-10 + 2 * us), rel=1e-9)
    assert details["o_msg_fit"]["r2"] == pytest.approx(1.0)
    assert details["o_msg_fit"]["max_rel_residual"] == pytest.approx(0.0, abs=1e-9)
    assert details["o_call_fit"] == {"r2": None, "max_rel_residual": 0.0}
    raw_vs_model = (3 * us - (2 * us + 8e-9)) / (3 * us)  # the raw round against alpha + n beta
    assert details["round_fit"]["max_rel_residual"] == pytest.approx(raw_vs_model)
    assert details["overhead"]["engine_call_setup_s"] == pytest.approx(6 * us, rel=1e-9)
    assert details["overhead"]["samples"] == 5
    assert "o_start_fit" not in details  # no persistent form timed
    assert calibrate.fit_warnings(details) == []
    # the persistent form, 9 us: o_start = 9 us - the same rest
    start = calibrate._fit_overhead({**times, "start": [9 * us] * 5}, partial, 8, 8, 16)[2]
    assert start["overhead"]["o_start"] == pytest.approx(
        9 * us - (2 * us + 8e-9 + 8e-10 + 16e-10 + 2 * us), rel=1e-9)
    assert start["o_start_fit"] == {"r2": None, "max_rel_residual": 0.0}
    # a raw round 50x the ping-pong's alpha (every wait preempted on a loaded machine) warns,
    # even though the engine's line fits well
    times["raw"] = [100 * us] * 5
    details = calibrate._fit_overhead(times, partial, 8, 8)[2]
    assert details["o_msg_fit"]["max_rel_residual"] == pytest.approx(0.0, abs=1e-9)
    out = calibrate.fit_warnings(details)
    assert "poor fit of the raw round" in out[0]
    assert out[-1] == calibrate.ADVICE


def _line_details(noise: np.ndarray) -> dict:
    """Ping-pong-like points 2 us + n / (10 GB/s), times (1 + noise), and their fit."""
    x = np.array([0] + [1 << k for k in range(21)], float)
    y = (2e-6 + x * 1e-10) * (1 + noise)
    return {"alpha_beta_fit": calibrate.fit_quality(calibrate.fit_line(x, y))}


def test_a_good_fit_does_not_warn() -> None:
    rng = np.random.default_rng(1)
    details = _line_details(rng.uniform(-0.05, 0.05, 22))  # 5 % noise
    details["o_call_fit"] = calibrate.fit_quality(samples=[20e-6, 21e-6, 19.5e-6, 20.2e-6])
    details["unclamped"] = {"alpha": 2e-6, "o_msg": 1e-7}
    assert calibrate.fit_warnings(details) == []


def test_a_poor_fit_warns_and_says_how_to_do_better() -> None:
    # the case: a few sizes far off the line (a loaded machine)
    noise = np.zeros(22)
    noise[[1, 4, 9]] = 8.0
    details = _line_details(noise)
    assert details["alpha_beta_fit"]["max_rel_residual"] > calibrate.MAX_REL_RESIDUAL
    out = calibrate.fit_warnings(details)
    assert len(out) == 2
    assert out[0].startswith("calibrate: warning: poor fit of the exchange times")
    assert "max relative residual" in out[0]
    assert out[-1] == calibrate.ADVICE
    for how in ("-i 200", "quieter machine", "--bind-to core", "-bind-to core",
                "fewer ranks than cores"):
        assert how in out[-1], how


def test_each_kind_of_poor_fit_warns() -> None:
    q = {"r2": 0.75, "max_rel_residual": 0.10}
    assert "R^2 = 0.750 < 0.95" in calibrate.fit_warnings({"gamma_fit": q})[0]
    spread = calibrate.fit_quality(samples=[20e-6, 20e-6, 61e-6])  # one batch 3x the others
    assert spread["max_rel_residual"] == pytest.approx(2.05)
    assert "o_call" in calibrate.fit_warnings({"o_call_fit": spread})[0]
    nan = {"r2": math.nan, "max_rel_residual": math.nan}
    assert len(calibrate.fit_warnings({"o_msg_fit": nan})) == 2
    clamped = calibrate.fit_warnings({"unclamped": {"alpha": 1e-6, "o_msg": -3e-7}})
    assert "o_msg came out negative" in clamped[0]
    assert clamped[-1] == calibrate.ADVICE
    # the thresholds are arguments
    assert calibrate.fit_warnings({"gamma_fit": q}, min_r2=0.7) == []
    assert calibrate.fit_warnings({"gamma_fit": q}, max_rel_residual=0.05, min_r2=0.7) != []
    with pytest.raises(ValueError):
        calibrate.fit_quality()


def test_a_few_preempted_calls_do_not_make_a_median_poor() -> None:
    """Single calls timed as bench times them: a tenth preempted (100x the rest) is what the
    median ignores, and so does the quality; when the middle half spreads, it is poor."""
    calls = [20e-6 * (1 + 0.01 * (k % 5)) for k in range(40)]
    assert calibrate.fit_quality(samples=[*calls[:-4], *[2e-3] * 4])["max_rel_residual"] < 0.1
    slow = calibrate.fit_quality(samples=[*calls[:-14], *[2e-3] * 14])
    assert slow["max_rel_residual"] > calibrate.MAX_REL_RESIDUAL
    assert "o_call" in calibrate.fit_warnings({"o_call_fit": slow})[0]


def test_a_poor_copy_fit_warns() -> None:
    q = {"r2": 0.26, "max_rel_residual": 0.76}
    out = calibrate.fit_warnings({"delta_fit": q})
    assert out[0].startswith("calibrate: warning: poor fit of the copy times")
    assert "R^2 = 0.260 < 0.95" in out[0]
    assert "max relative residual 76% > 50%" in out[0]
    assert out[-1] == calibrate.ADVICE


@pytest.mark.parametrize(("max_bytes", "top"), [(1 << 10, 1 << 12), (1 << 22, 1 << 22),
                                                (1 << 24, 1 << 24)])
def test_the_local_curves_reach_the_largest_size(max_bytes: int, top: int) -> None:
    sizes = calibrate._local_sizes(max_bytes)
    assert sizes[0] == 8
    assert sizes[-1] == top
    assert sizes == [8 << k for k in range(len(sizes))]


# ---- the measured curves


CURVE = ((0.0, 4 * A), (4096.0, 4 * A + 4096 * B), (8192.0, 16 * A), (16384.0, 20 * A))


def test_a_curve_is_read_between_and_beyond_its_sizes() -> None:
    m = Model(A, B, G, message_curve=CURVE, reduce_curve=((8.0, G), (16.0, 3 * G)))
    assert m.message(0) == 4 * A
    assert m.message(4096) == 4 * A + 4096 * B
    assert m.message(6144) == pytest.approx((4 * A + 4096 * B + 16 * A) / 2)
    assert m.message(32768) == pytest.approx(28 * A)  # the last segment's slope beyond
    assert m.reduce_time(0) == 0.0  # nothing reduced: nothing paid
    assert m.reduce_time(4) == G  # below the first size: its time
    assert m.reduce_time(12) == pytest.approx(2 * G)
    assert m.copy_time(100) == 100 * m.delta  # no curve: the line
    sizes = np.array([0, 4, 12, 24])
    assert m.reduce_time(sizes).tolist() == [m.reduce_time(int(n)) for n in sizes]
    # the formulas' line at a size: the segment around it
    slope = (12 * A - 4096 * B) / 4096  # from 4 KiB to 8 KiB; its intercept is below 0: 0
    assert m.line(6000) == pytest.approx((0.0, slope))
    assert m.line(10000) == pytest.approx((12 * A, 4 * A / 8192))
    assert Model(A, B, G).line(1 << 20) == (A, B)


@pytest.mark.parametrize("bad", [((0, 1e-6), (0, 2e-6)), ((8, -1.0),), ((8, math.nan),), "x"])
def test_a_curve_must_be_sizes_and_times(bad: object) -> None:
    with pytest.raises(ValueError, match="message_curve"):
        Model(message_curve=bad)  # type: ignore[arg-type]


def test_a_model_with_curves_round_trips_through_its_file(tmp_path: Path) -> None:
    m = Model(A, B, G, o_call=O_CALL, message_curve=CURVE, copy_curve=((8.0, D), (64.0, 8 * D)))
    path = model.save(m, tmp_path / "m.json")
    assert model.load(path) == m
    assert m.as_dict()["message_curve"] == [list(pt) for pt in CURVE]
    assert "reduce_curve" not in m.as_dict()


@pytest.mark.parametrize("count", [4 * 512, 4 * 513, 4 * 4096])
def test_both_engines_read_the_curves_alike(count: int) -> None:
    m = Model(A, B, G, o_msg=O_MSG, delta=D, message_curve=CURVE,
              reduce_curve=((8.0, G), (65536.0, 65536 * G * 2)),
              copy_curve=((8.0, D), (65536.0, 65536 * D * 3)))
    vec = simulate("allreduce", 4, count, algorithm="ring", model=m, data=False, engine="vector")
    rank = simulate("allreduce", 4, count, algorithm="ring", model=m, data=False, engine="rank")
    assert vec.clocks.tolist() == rank.clocks.tolist()
    rd = simulate("allreduce", 2, count, algorithm="recursive_doubling", model=m)
    n = count * 8  # (a commutative op: each rank copies its send buffer once, no copy back)
    assert rd.time == pytest.approx(2 * O_MSG + m.message(n) + m.reduce_time(n)
                                    + m.copy_time(n))


def test_the_skew_of_a_barrier_is_paid_once() -> None:
    """k raw rounds back to back take 2 us + k 3 us: the skew is 2 us, a round 3 us; the
    engine's 6 us + 5 us per round then gives o_msg = (5 - 3) / 2 us."""
    us = 1e-6
    times = {"raw": [5 * us] * 5, "call": [50 * us] * 5}
    times.update({f"raw{k}": [(2 + 3 * k) * us] * 5 for k in calibrate.ENGINE_ROUNDS[1:]})
    times.update({str(k): [(6 + 5 * k) * us] * 5 for k in calibrate.ENGINE_ROUNDS})
    assert calibrate.skew_of(times) == pytest.approx(2 * us)
    o_call, o_msg, details = calibrate._fit_overhead(times, Model(3 * us, 0.0, 0.0), 8, 8)
    assert o_msg == pytest.approx(1 * us)
    assert o_call == pytest.approx(50 * us - (3 * us + 2 * us))  # the skew stays in o_call
    assert details["overhead"]["skew_s"] == pytest.approx(2 * us)
    assert details["round_fit"]["max_rel_residual"] == pytest.approx(0.0, abs=1e-9)
    assert calibrate.skew_of({"raw": [5 * us]}) == 0.0  # no chains: no skew


def test_a_noisy_curve_warns() -> None:
    assert calibrate.curve_quality([0.02, 0.05, 0.01]) == {"r2": None, "max_rel_residual": 0.05}
    out = calibrate.fit_warnings({"delta_fit": calibrate.curve_quality([0.02, 0.8])})
    assert out[0].startswith("calibrate: warning: poor fit of the copy times")
    assert out[-1] == calibrate.ADVICE
