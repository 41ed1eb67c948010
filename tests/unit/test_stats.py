"""bench's statistics: percentiles, cv, the per-iteration record (max over ranks, slowest rank,
entry skew) from known inputs; and that bench's JSON carries them (one rank), the ``--stats``
table shows them, and the schema accepts them.  No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mpicoll.tools import bench, cli
from mpicoll.tools.measure import SYNC, _stats_us, iteration_stats


def test_percentiles_and_cv_of_known_samples() -> None:
    s = _stats_us(np.arange(1, 101) * 1e-6)  # 1..100 us
    assert s["min"] == pytest.approx(1.0)
    assert s["max"] == pytest.approx(100.0)
    assert s["mean"] == pytest.approx(50.5)
    assert s["p50"] == s["median"] == pytest.approx(50.5)
    assert s["p10"] == pytest.approx(10.9)  # linear: 1 + 0.1 * 99
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)
    std = float(np.std(np.arange(1, 101), ddof=1))
    assert s["std"] == pytest.approx(std)
    assert s["cv"] == pytest.approx(std / 50.5)


def test_stats_of_one_sample_and_of_constant_samples() -> None:
    one = _stats_us(np.array([5e-6]))
    assert one["p50"] == one["p99"] == one["min"] == one["max"] == pytest.approx(5.0)
    assert one["std"] == 0.0
    assert one["cv"] == 0.0
    flat = _stats_us(np.full(7, 2e-6))
    assert flat["cv"] == pytest.approx(0.0, abs=1e-12)
    assert flat["p90"] == pytest.approx(2.0)
    zero = _stats_us(np.zeros(3))
    assert zero["cv"] == 0.0


def test_iteration_stats_from_known_rank_times() -> None:
    # 3 ranks x 4 iterations (seconds); rank 2 slowest twice, rank 0 once, ties -> lowest rank
    times = np.array([[5, 1, 1, 2],
                      [1, 1, 1, 2],
                      [1, 4, 3, 1]], dtype=float) * 1e-6
    entries = np.array([[0, 10, 20, 30],
                        [1, 10, 25, 30],
                        [3, 11, 20, 30]], dtype=float) * 1e-6
    hosts = ["a", "a", "b"]
    its = iteration_stats(times, entries, hosts, "one host")
    assert its["iterations_us"] == [5.0, 4.0, 3.0, 2.0]
    assert its["slowest_rank"] == [0, 2, 2, 0]  # iteration 3: ranks 0 and 1 tie at 2 us
    assert its["slowest_count_by_rank"] == [2, 0, 2]
    assert its["slowest_count_by_host"] == {"a": 2, "b": 2}
    assert its["entry_skew_us"] == [3.0, 1.0, 5.0, 0.0]
    assert its["entry_skew_stats_us"]["max"] == pytest.approx(5.0)
    assert its["entry_skew_stats_us"]["p50"] == pytest.approx(2.0)
    assert its["sync"] == SYNC
    assert its["clock"] == "one host"


def test_bench_json_has_the_statistics(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    status = cli.main(["bench", "-c", "allreduce", "-m", "8:16", "-i", "7", "-x", "1", "-q",
                       "--stats", "--json", str(path)])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    assert doc["settings"]["sync"] == SYNC
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert timed
    for r in timed:
        t, its = r["time_us"], r["iteration_stats"]
        assert len(its["iterations_us"]) == r["iterations"] == 7
        assert its["slowest_rank"] == [0] * 7  # one rank
        assert its["slowest_count_by_rank"] == [7]
        assert sum(its["slowest_count_by_host"].values()) == 7
        assert its["entry_skew_us"] == [0.0] * 7
        assert t["p50"] == pytest.approx(float(np.median(its["iterations_us"])), rel=1e-3,
                                         abs=1e-3)
        assert t["min"] <= t["p10"] <= t["p50"] <= t["p90"] <= t["p99"] <= t["max"]
        assert t["cv"] >= 0
    # the --stats table: a row per timed (size, implementation)
    assert "cv = std / mean" in out
    head = next(ln for ln in out.splitlines() if ln.startswith("#") and " p99" in ln)
    for col in ("p50", "p90", "p99", "cv", "skew", "slowest"):
        assert col in head
    assert sum(1 for ln in out.splitlines() if ln.rstrip().endswith("0 (100%)")) == len(timed)


def test_bench_without_stats_prints_no_stats_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "-c", "bcast", "-m", "8", "-i", "2", "-x", "0", "-q"]) == 0
    out, _ = capsys.readouterr()
    assert "cv = std / mean" not in out


def test_schema_refuses_a_malformed_iteration_record(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    assert cli.main(["bench", "-c", "bcast", "-m", "8", "-i", "2", "-x", "0", "-q",
                     "--json", str(path)]) == 0
    capsys.readouterr()
    doc = json.loads(path.read_text())
    rec = next(r for r in doc["results"] if r["status"] == "ok")
    rec["iteration_stats"]["slowest_rank"] = [-1]
    assert bench.validate(doc)
    del rec["iteration_stats"]["sync"]
    assert any("sync" in e for e in bench.validate(doc))
