"""``mpicoll.model.calibrate`` and ``mpicoll calibrate`` on every rank of the job.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_calibrate.py`` (P = 1..5).
Calibration needs two ranks (an exchange between ranks 0 and 1): at P = 1 only the usage error
is checked.  Fitted values are never compared with a machine's expected speed: only that they
are positive (or 0), finite, the same on every rank, saved and loadable.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _cli import run_all
from mpi4py import MPI

from mpicoll.model import alphabeta as model
from mpicoll.model import calibrate
from mpicoll.tools import bench
from mpicoll.tools.calibrate import overhead_probe

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
# small and quick: a few exchanges per size up to 1 MiB (enough bytes for a positive slope)
QUICK = ["--max-bytes", "1M", "-i", "10", "-x", "2"]

needs_two = pytest.mark.skipif(SIZE < 2, reason="calibrate needs at least 2 ranks")
TERMS = ("alpha", "beta", "gamma", "o_call", "o_msg", "delta", "o_start")


@pytest.mark.mpi
@needs_two
def test_calibrate_fits_the_same_model_on_every_rank() -> None:
    m, details = calibrate.calibrate(WORLD, max_bytes=1 << 20, iters=10, warmup=2,
                                     probe=overhead_probe)
    # a fit on a noisy, oversubscribed machine may come out at the clamp (0): no timing
    # thresholds here, only that the numbers are a model, the same everywhere
    values = [getattr(m, k) for k in TERMS]
    assert min(values) >= 0
    assert all(math.isfinite(x) for x in values)
    # the exchange less the barrier's skew (paid once per call, in o_call)
    assert all(t >= 0 for t in details["exchange_s"])
    assert details["exchange_s"][-1] > 0
    assert 0 <= details["skew_s"] <= details["overhead"]["raw_round_s"]
    assert [list(pt) for pt in m.message_curve] == [
        [float(n), t] for n, t in zip(details["exchange_bytes"], details["exchange_s"],
                                      strict=True)]
    assert len(m.reduce_curve) == len(m.copy_curve) == len(details["reduce_bytes"])
    for line in ("alpha_beta", "gamma", "delta"):  # the formulas' lines, with their R^2
        assert details["lines"][line]["r2"] <= 1.0
    assert all(t > 0 for t in details["reduce_s"] + details["copy_s"])
    assert WORLD.allgather(m) == [m] * SIZE
    assert WORLD.allgather(details) == [details] * SIZE
    for fit in calibrate.FITS:  # every fitted term has its quality
        r2 = details[fit]["r2"]
        # R^2 where the term is a line's (a median or a measured curve has none)
        assert r2 is None if fit != "o_msg_fit" else r2 <= 1.0
        assert details[fit]["max_rel_residual"] >= 0.0
    # the model is the fitted values, negative ones set to 0
    assert sorted(details["unclamped"]) == sorted(TERMS)
    assert values == [max(details["unclamped"][k], 0.0) for k in TERMS]
    # the warnings are the function's, and end with the advice when there are any
    assert details["fit_warnings"] == calibrate.fit_warnings(details)
    assert all(isinstance(w, str) for w in details["fit_warnings"])
    if details["fit_warnings"]:
        assert details["fit_warnings"][-1] == calibrate.ADVICE
    over = details["overhead"]
    assert over["engine_rounds"] == list(calibrate.ENGINE_ROUNDS)
    assert over["samples"] == 10 * calibrate.OVERHEAD_REPS
    assert min(over["engine_s"] + [over["raw_round_s"], over["call_s"], over["start_s"]]) > 0
    assert details["exchange_bytes"][0] == 0
    assert details["exchange_bytes"][-1] == 1 << 20
    assert len(details["exchange_s"]) == len(details["exchange_bytes"])
    assert details["copy_bytes"] == details["reduce_bytes"] == calibrate._local_sizes(1 << 20)


@pytest.mark.mpi
@needs_two
def test_calibrate_without_a_probe_fits_no_overhead() -> None:
    m, details = calibrate.calibrate(WORLD, max_bytes=1 << 10, iters=5, warmup=1)
    assert (m.o_call, m.o_msg, m.o_start) == (0.0, 0.0, 0.0)
    assert details["skew_s"] == 0.0
    assert "o_call_fit" not in details
    assert "overhead" not in details
    assert sorted(details["unclamped"]) == ["alpha", "beta", "delta", "gamma"]


@pytest.mark.mpi
@needs_two
def test_calibrate_command_saves_a_loadable_model(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    path = shared_dir / "sub" / "model.json"  # a directory that does not exist yet
    status, out, err = run_all(capsys, "calibrate", "-o", str(path), *QUICK)
    assert status == 0, out + err
    if RANK == 0:
        m = model.load(path)
        assert m is not None
        doc = json.loads(path.read_text())
        for term in TERMS:  # every term is in the file, a time in seconds
            assert math.isfinite(doc[term]), term
            assert doc[term] >= 0, term
            assert getattr(m, term) == doc[term]
        assert doc["P"] == SIZE
        assert "r2" in doc["alpha_beta_fit"]
        assert isinstance(doc["fit_warnings"], list)  # the fit quality is recorded
        assert m.o_call > 0 or doc["unclamped"]["o_call"] <= 0  # the command fits o_call
        for fit in calibrate.FITS:
            assert fit in doc, fit
        # the warnings go to stderr, as recorded, and only there
        assert err.splitlines() == doc["fit_warnings"]
        for w in doc["fit_warnings"]:
            assert w not in out
        for word in ("alpha =", "beta  =", "GB/s", "gamma =", "delta =", "o_call =", "o_msg  =",
                     "o_start =",
                     "R^2 =",
                     "max relative residual", f"saved to {path}"):
            assert word in out, word
        # the printed values are the saved ones
        line = next(x for x in out.splitlines() if x.startswith("alpha ="))
        assert float(line.split()[2]) == pytest.approx(m.alpha * 1e6, rel=1e-3)


@pytest.mark.mpi
@needs_two
def test_bench_predicts_with_the_calibrated_model(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    """bench --model FILE: every timed p2p result has a positive prediction and ratio; native
    has neither; the model is recorded in the JSON."""
    path = shared_dir / "model.json"
    if RANK == 0:
        model.save(model.Model(3e-6, 2e-10, 5e-10, o_call=1e-5, o_msg=5e-7), path)
    WORLD.Barrier()
    out_json = shared_dir / "bench.json"
    status, out, err = run_all(capsys, "bench", "-c", "allreduce", "bcast", "-a", "all",
                               "-m", "1K:4K", "-i", "2", "-x", "1", "-q", "--model", str(path),
                               "--json", str(out_json))
    assert status == 0, out + err
    if RANK == 0:
        doc = json.loads(out_json.read_text())
        assert bench.validate(doc) == []
        assert doc["settings"]["model"] == {"alpha": 3e-6, "beta": 2e-10, "gamma": 5e-10,
                                            "o_call": 1e-5, "o_msg": 5e-7,
                                            "source": f"file {path}"}
        for r in doc["results"]:
            if r["backend"] != "p2p" or r["status"] != "ok":
                assert r["predicted_us"] is None
                assert r["measured_over_predicted"] is None
            else:
                assert r["predicted_us"] > 10, r  # the prediction includes o_call (10 us)
                assert r["measured_over_predicted"] == pytest.approx(
                    r["time_us"]["median"] / r["predicted_us"])
        assert "meas/pred" in out
        assert f"model file {path}: alpha = 3 us" in out


@pytest.mark.mpi
def test_calibrate_on_one_rank_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    if SIZE >= 2:
        pytest.skip("the usage error needs P = 1")
    status, out, err = run_all(capsys, "calibrate")
    assert status == 2
    assert out == ""
    assert "error: calibrate needs at least 2 ranks" in err
    assert "mpiexec -n 2" in err
