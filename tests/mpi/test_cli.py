"""``mpicoll bench`` / ``verify`` / ``algorithms`` / ``info`` on every rank of the job, in-process.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_cli.py`` (P = 1..5).

Every rank calls ``cli.main`` with the same arguments, as under ``mpiexec``; only rank 0
prints; every rank must return the same exit status.  A deliberately broken p2p algorithm,
registered in this test process only, must show as WRONG in bench (never timed) and make verify
exit non-zero, naming the case and the rank.  Timings are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _cli import run_all
from mpi4py import MPI

from mpicoll import registry
from mpicoll.tools import bench, cli, harness

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
FAST = ["-i", "2", "-x", "1", "-q"]


@pytest.mark.mpi
def test_bench_every_algorithm_against_native(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    path = shared_dir / "allreduce.json"
    status, out, err = run_all(capsys, "bench", "-c", "allreduce", "-a", "all", "-m", "8:1K",
                               *FAST, "--json", str(path))
    assert status == 0, out + err
    if RANK == 0:
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        assert doc["provenance"]["P"] == SIZE
        assert sum(h["ranks"] for h in doc["provenance"]["hosts"]) == SIZE
        names = {a.name for a in registry.algorithms("allreduce")}
        assert {r["implementation"] for r in doc["results"]} == {"native", "mpi4py"} | names
        for r in doc["results"]:
            assert r["status"] in ("ok", "n/a"), r
            if r["status"] == "n/a":
                assert "needs" in r["reason"]
            else:
                assert r["time_us"]["median"] > 0
        for row in doc["summary"]:
            assert row["wrong"] == 0
            assert row["fastest"] in {"native"} | names
        assert "# allreduce: S = vector per rank" in out
        if SIZE > 1:
            assert f"busbw = algbw x 2(P-1)/P = {2 * (SIZE - 1) / SIZE:.3g}" in out


@pytest.mark.mpi
def test_bench_predicts_the_v_collectives_with_its_own_counts(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    """bench and the simulator build the same call (tools/cases.py): each timed p2p result of
    a v-collective carries the time the simulator gives for bench's (equal) counts, under the
    model the JSON records; the mpi4py column is timed and never predicted."""
    from mpicoll.model.alphabeta import Model
    from mpicoll.tools.simulate import simulate

    path = shared_dir / "v.json"
    colls = ["allgatherv", "alltoallv", "gatherv", "reduce_scatter", "scatterv"]
    status, out, err = run_all(capsys, "bench", "-c", *colls, "-a", "all", "-m", "64:256",
                               "--root", str(SIZE - 1), *FAST, "--json", str(path))
    assert status == 0, out + err
    if RANK == 0:
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        m = doc["settings"]["model"]
        model = Model(m["alpha"], m["beta"], m["gamma"])
        timed = [r for r in doc["results"] if r["backend"] == "p2p" and r["status"] == "ok"]
        assert {r["collective"] for r in timed} == set(colls)
        for r in timed:
            alg = r["auto_choice"] or r["algorithm"]
            want = simulate(r["collective"], SIZE, r["count"], algorithm=alg, root=SIZE - 1,
                            model=model, uniform=True)
            assert r["predicted_us"] == pytest.approx(want.time * 1e6), r
        for r in doc["results"]:
            if r["backend"] == "mpi4py":
                assert (r["status"], r["predicted_us"]) == ("ok", None)


@pytest.mark.mpi
def test_bench_reports_a_broken_algorithm_as_wrong(
    capsys: pytest.CaptureFixture[str], shared_dir: Path, broken_allreduce: str
) -> None:
    path = shared_dir / "broken.json"
    status, out, _ = run_all(capsys, "bench", "-c", "allreduce", "-a", "auto", broken_allreduce,
                             "-m", "8:64", *FAST, "--json", str(path))
    assert status == 1
    if RANK == 0:
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        broken = [r for r in doc["results"] if r["implementation"] == broken_allreduce]
        assert [r["status"] for r in broken] == ["wrong"] * 4
        assert all(r["time_us"] is None for r in broken)
        assert all(r["wrong_rank"] == SIZE - 1 for r in broken)
        auto = [r for r in doc["results"] if r["implementation"] == "auto"]
        assert [r["status"] for r in auto] == ["ok"] * 4
        assert doc["wrong"] == 4
        assert all(row["fastest"] != broken_allreduce for row in doc["summary"])
        assert f"{broken_allreduce}: WRONG at 4 size(s)" in out
        assert f"on rank {SIZE - 1}: first differs at index 0" in out


@pytest.mark.mpi
def test_verify_fails_on_a_broken_algorithm(
    capsys: pytest.CaptureFixture[str], broken_allreduce: str
) -> None:
    status, out, _ = run_all(capsys, "verify", "-q", "-c", "allreduce", "-a", "auto",
                             broken_allreduce, "--quick")
    assert status == 1
    if RANK == 0:
        fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
        assert fails
        assert all(line.startswith(f"FAIL allreduce/{broken_allreduce}: allreduce P={SIZE} ")
                   for line in fails)
        assert f"rank {SIZE - 1}: first differs at index 0" in fails[0]
        assert "dtype=" in fails[0]
        assert "op=" in fails[0]
        assert "count=" in fails[0]
        auto_row = next(line for line in out.splitlines()
                        if line.split()[:2] == ["allreduce", "auto"])
        assert " F" not in auto_row


@pytest.mark.mpi
def test_verify_quick_every_collective(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_all(capsys, "verify", "--quick", "-q", "--counts", f"0,1,{SIZE + 1}")
    assert status == 0, out
    if RANK == 0:
        last = out.strip().splitlines()[-1]
        assert " 0 failed" in last
        for coll in registry.COLLECTIVES:
            assert any(line.split()[:2] == [coll, "native"] for line in out.splitlines()), coll


@pytest.mark.mpi
def test_bench_rooted_in_place_and_nonblocking(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    path = shared_dir / "rooted.json"
    status, out, _ = run_all(capsys, "bench", "-c", "reduce", "gather", "scatter", "bcast",
                             "-a", "all", "--root", str(SIZE - 1), "--in-place", "-m", "8:64",
                             "--nonblocking", "--test-calls", "1", *FAST, "--json", str(path))
    assert status == 0, out
    if RANK == 0:
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        for r in doc["results"]:
            assert r["root"] == SIZE - 1
            if r["status"] == "ok":
                assert 0 <= r["overlap_osu_pct"] <= 100
                assert 0 <= r["overlap_imb_pct"] <= 100


@pytest.mark.mpi
def test_usage_error_everywhere_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_all(capsys, "bench", "-c", "bcast", "--root", str(SIZE))
    assert status == 2
    assert out == ""
    if RANK == 0:
        assert err.startswith("usage: mpicoll bench")
        assert f"error: argument --root: root {SIZE} is not a rank (P = {SIZE})" in err
    else:
        assert err == ""


@pytest.mark.mpi
def test_help_everywhere_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_all(capsys, "verify", "--help")
    assert status == 0
    if RANK == 0:
        assert out.startswith("usage: mpicoll verify")


@pytest.mark.mpi
def test_algorithms_and_info(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_all(capsys, "algorithms", "--markdown")
    assert status == 0
    if RANK == 0:
        assert out == cli.algorithms_table(markdown=True)
    status, out, _ = run_all(capsys, "info", "--json")
    assert status == 0
    if RANK == 0:
        info = json.loads(out)
        assert info["P"] == SIZE
        assert info["mpi_library"]


@pytest.mark.mpi
def test_verify_reports_a_native_error_on_one_rank(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native Gather raises an MPI error on the last rank after the call (no rank is
    stranded): verify names the backend, the case, the rank and MPI's error, goes on with the
    p2p algorithms and the next collective, and every rank exits 1."""
    from mpicoll.backends.native import Native

    real = Native.Gather

    def gather(self: Native, *args: Any, **kw: Any) -> Any:
        out = real(self, *args, **kw)
        if self.rank == SIZE - 1:
            raise MPI.Exception(MPI.ERR_TYPE)
        return out

    monkeypatch.setattr(Native, "Gather", gather)
    status, out, _ = run_all(capsys, "verify", "-q", "-c", "gather", "allgather", "--counts",
                             "2", "--dtypes", "float64", "--roots", "0", "--in-place", "no")
    assert status == 1
    if RANK == 0:
        fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
        assert fails == [f"FAIL gather/native: gather P={SIZE} dtype=float64 root=0 count=2: "
                         f"rank {SIZE - 1}: {harness.describe_error(MPI.Exception(MPI.ERR_TYPE))}"]
        rows = [line.split() for line in out.splitlines()
                if line.startswith(("gather ", "allgather "))]
        assert rows
        for cells in rows:
            if cells[:2] == ["gather", "native"]:
                assert cells[2] == "F1/1", cells
            else:  # n/a: an algorithm's restrictions (e.g. P a power of two)
                assert cells[2] in ("ok", "n/a"), cells


@pytest.mark.mpi
def test_bench_every_pattern_on_every_rank(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    """``--pattern all``: every pattern's check passes on every rank, through every column
    (native, mpi4py, each p2p algorithm, the :init forms); the JSON validates."""
    from mpicoll.tools.patterns import PATTERNS

    path = shared_dir / "patterns.json"
    colls = ["bcast", "allreduce", "gather", "alltoall", "scatterv", "scan"]
    status, out, err = run_all(capsys, "bench", "-c", *colls, "-a", "all", "-m", "8:16",
                               "--pattern", "all", "--persistent", "--root", str(SIZE - 1),
                               *FAST, "--json", str(path))
    assert status == 0, out + err
    if RANK == 0:
        doc = json.loads(path.read_text())
        assert bench.validate(doc) == []
        assert doc["wrong"] == 0
        ran = {(r["collective"], r["pattern"]) for r in doc["results"]}
        skipped = {(s["collective"], s["pattern"]) for s in doc["skipped"]}
        assert ran | skipped == {(c, p) for c in colls for p in PATTERNS}
        assert all(s["pattern"] == "scalar" for s in doc["skipped"])
        for r in doc["results"]:
            assert r["status"] in ("ok", "n/a"), r
            if r["status"] == "n/a":
                assert r["reason"], r
