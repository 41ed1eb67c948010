"""``mpicoll bench`` / ``verify`` in this process (one rank): the check column, #wrong, the JSON
(against the schema kept in the repo), the CSV, the plot, and a deliberately broken algorithm.

Timings are never asserted: only what is reported about them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mpicoll import registry
from mpicoll.tools import bench, cli


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


FAST = ["-i", "2", "-x", "1", "-q"]


def test_bench_json_validates_and_has_every_algorithm(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "out.json"
    status, out, err = run_cli(capsys, "bench", "-c", "allreduce", "bcast", "-a", "all",
                               "-m", "8:64", *FAST, "--json", str(path))
    assert status == 0, out + err
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    assert doc["wrong"] == 0
    prov = doc["provenance"]
    assert prov["P"] == 1
    assert prov["command_line"].startswith("mpicoll bench -c allreduce bcast")
    for key in ("mpi_library", "mpi4py", "numpy", "hosts", "date"):
        assert prov[key]
    for coll in ("allreduce", "bcast"):
        impls = {r["implementation"] for r in doc["results"] if r["collective"] == coll}
        assert impls == {"native", "mpi4py"} | {a.name for a in registry.algorithms(coll)}
        sizes = sorted({r["size_bytes"] for r in doc["results"] if r["collective"] == coll})
        assert sizes == [8, 16, 32, 64]
    for r in doc["results"]:
        assert r["status"] in ("ok", "n/a")
        if r["status"] == "ok":
            assert r["check"] == ("expected" if r["backend"] == "native" else "native")
            assert r["iterations"] == 2
            assert r["warmup"] == 1
            t = r["time_us"]
            assert t["min"] <= t["median"] <= t["max"]
    # the table: one block per collective, a check column, #wrong
    assert "# allreduce: S = vector per rank" in out
    assert "# bcast: S = buffer per rank" in out
    header = next(line for line in out.splitlines() if line.startswith("# ") and "#wrong" in line)
    for col in ("size", "count", "check", "native", "fastest", "speedup", "algbw", "busbw",
                "#wrong"):
        assert col in header.split(), col


def test_bench_json_validates_with_jsonschema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = tmp_path / "out.json"
    status, _, _ = run_cli(capsys, "bench", "-c", "gather", "-m", "8:16", *FAST, "--json",
                           str(path))
    assert status == 0
    jsonschema.validate(json.loads(path.read_text()), json.loads(bench.SCHEMA_PATH.read_text()))


def test_bench_flags_a_broken_algorithm(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, broken_allreduce: str
) -> None:
    path = tmp_path / "out.json"
    status, out, _ = run_cli(capsys, "bench", "-c", "allreduce", "-a", "auto", broken_allreduce,
                             "-m", "8:32", *FAST, "--json", str(path))
    assert status == 1
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    broken = [r for r in doc["results"] if r["implementation"] == broken_allreduce]
    assert len(broken) == 3
    for r in broken:
        assert r["status"] == "wrong"
        assert r["time_us"] is None  # never timed, so never "fast"
        assert r["wrong_rank"] == 0
        assert "first differs at index 0" in r["reason"]
    assert doc["wrong"] == 3
    assert all(s["wrong"] == 1 for s in doc["summary"])
    assert all(s["fastest"] != broken_allreduce for s in doc["summary"])
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert len(rows) == 3
    for row in rows:
        assert row[2] == "FAIL"  # the check column
        assert "WRONG" in row
        assert row[-1] == "1"  # #wrong
    assert f"{broken_allreduce}: WRONG at 3 size(s)" in out


def test_bench_csv(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    status, _, _ = run_cli(capsys, "bench", "-c", "scatter", "alltoall", "-m", "8:16", *FAST,
                           "--csv", str(path))
    assert status == 0
    lines = path.read_text().splitlines()
    provenance = [line for line in lines if line.startswith("#")]
    assert any(line.startswith("# mpi_library: ") for line in provenance)
    assert any(line.startswith("# P: 1") for line in provenance)
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert rows
    assert set(bench.CSV_COLUMNS) == set(rows[0])
    assert {r["collective"] for r in rows} == {"scatter", "alltoall"}
    assert all(float(r["time_us.median"]) > 0 for r in rows if r["status"] == "ok")


def test_bench_nonblocking(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    status, out, _ = run_cli(capsys, "bench", "-c", "allreduce", "-m", "8:16", "--nonblocking",
                             "--test-calls", "2", *FAST, "--json", str(path))
    assert status == 0
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    for r in doc["results"]:
        assert r["nonblocking"] is True
        assert 0.0 <= r["overlap_osu_pct"] <= 100.0
        assert 0.0 <= r["overlap_imb_pct"] <= 100.0
        assert r["test_calls"] == 2
        for key in ("pure_us", "compute_us", "total_us"):
            assert r[key]["median"] >= 0
    assert "OSU(%)" in out
    assert "IMB(%)" in out


def test_bench_time_budget_and_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    status, _, _ = run_cli(capsys, "bench", "-c", "reduce", "-a", "all", "-m", "1K",
                           "--time-budget", "0.01", "--in-place", "--dtype", "int32", "--op",
                           "max", "-q", "--json", str(path))
    assert status == 0
    doc = json.loads(path.read_text())
    assert doc["settings"]["time_budget_s"] == 0.01
    for r in doc["results"]:
        if r["status"] == "ok":
            assert bench.MIN_ITERATIONS <= r["iterations"] <= bench.MAX_ITERATIONS
            assert r["in_place"] is True
            assert r["op"] == "max"
            assert r["dtype"] == "int32"
            assert r["size_bytes"] == 1024
            assert r["count"] == 256


def test_bench_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "out.png"
    status, _, _ = run_cli(capsys, "bench", "-c", "allreduce", "bcast", "-m", "8:64", *FAST,
                           "--plot", str(path))
    assert status == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_passes(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "verify", "--quick", "-q", "-c", "allreduce", "gatherv",
                             "reduce_scatter")
    assert status == 0, out
    assert "failed" in out.splitlines()[-1]
    assert " 0 failed" in out.splitlines()[-1]


def test_verify_flags_a_broken_algorithm(
    capsys: pytest.CaptureFixture[str], broken_allreduce: str
) -> None:
    status, out, _ = run_cli(capsys, "verify", "-q", "-c", "allreduce", "-a", broken_allreduce,
                             "--counts", "0,3", "--ops", "sum", "--dtypes", "float64")
    assert status == 1
    row = next(line for line in out.splitlines() if line.startswith("allreduce")
               and broken_allreduce in line)
    assert "F" in row  # failed cells in the matrix
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails
    assert fails[0].startswith(f"FAIL allreduce/{broken_allreduce}: allreduce P=1 "
                               "dtype=float64 op=sum count=3")
    assert "rank 0: first differs at index 0" in fails[0]
    # count 0 has nothing to corrupt: it passes
    assert all("count=0" not in line for line in fails)


def test_verify_shows_restrictions_as_na(capsys: pytest.CaptureFixture[str]) -> None:
    noncomm_only = [a.name for a in registry.algorithms("allreduce")
                    if "commutative" in a.restrictions]
    if not noncomm_only:
        pytest.skip("no allreduce algorithm needs a commutative op")
    status, out, _ = run_cli(capsys, "verify", "-q", "-c", "allreduce", "-a", noncomm_only[0],
                             "--ops", "noncomm", "--counts", "1")
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("allreduce")
               and noncomm_only[0] in line)
    assert "n/a" in row


def test_bench_has_an_mpi4py_column_beside_native(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same call on the plain MPI.Comm: checked against native, timed by the same loop, in
    the table after native and in the JSON (backend ``mpi4py``, summary ``native_over_mpi4py``);
    never the ``fastest`` (that is of mpicoll's implementations)."""
    path = tmp_path / "out.json"
    for extra in ([], ["--nonblocking"]):
        status, out, err = run_cli(capsys, "bench", "-c", "allreduce", "gatherv", "-a", "none",
                                   "-m", "8:16", *FAST, *extra, "--json", str(path))
        assert status == 0, out + err
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        plain = [r for r in doc["results"] if r["backend"] == "mpi4py"]
        assert [(r["collective"], r["size_bytes"]) for r in plain] == [
            ("allreduce", 8), ("allreduce", 16), ("gatherv", 8), ("gatherv", 16)]
        for r in plain:
            assert (r["implementation"], r["status"], r["check"]) == ("mpi4py", "ok", "native")
            assert (r["algorithm"], r["predicted_us"]) == (None, None)
            assert r["time_us"]["median"] > 0
        for s in doc["summary"]:
            assert s["fastest"] == "native"  # -a none: native is mpicoll's only one
            assert s["native_over_mpi4py"] > 0
        if not extra:
            heads = next(ln for ln in out.splitlines() if ln.startswith("# size")).split()
            assert heads[4:6] == ["native", "mpi4py"]
