"""``mpicoll sweep``: resume and merge with fake launches (``launcher.run`` replaced in this
process), the summary rows, the schema, the CSV and the heatmap; and one real small sweep under
mpiexec that is killed after its first launch and resumed.  No timing is asserted."""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _launch import REPO, job_env
from _launch import launcher as find_mpiexec

from mpicoll.tools import cli, launcher, sweep

TEMPLATE: dict[str, Any] = {}


def template(tmp_path: Path) -> dict[str, Any]:
    """A real bench document (this process, P = 1): allreduce at 8 and 16 B, native, mpi4py,
    auto."""
    if not TEMPLATE:
        path = tmp_path / "t.json"
        assert cli.main(["bench", "-c", "allreduce", "-m", "8:16", "-i", "2", "-x", "0", "-q",
                         "--json", str(path)]) == 0
        TEMPLATE.update(json.loads(path.read_text()))
    return copy.deepcopy(TEMPLATE)


class Fake:
    """``launcher.run`` stand-in: each configuration's document made from the template (the
    forced ones: the native record renamed native:NAME, ``factor`` x its time); the ``stop``-th
    launch raises KeyboardInterrupt (Ctrl-C)."""

    def __init__(self, tmp_path: Path, stop: int | None = None,
                 factor: dict[str, float] | None = None) -> None:
        self.tmp_path, self.stop, self.factor = tmp_path, stop, factor or {}
        self.calls: list[tuple[int, str]] = []

    def __call__(self, configs: list[launcher.Config], p: int, bench_args: list[str],
                 **kw: Any) -> list[launcher.Launch]:
        assert len(configs) == 1
        cfg = configs[0]
        if self.stop is not None and len(self.calls) + 1 == self.stop:
            raise KeyboardInterrupt
        self.calls.append((p, cfg.name))
        doc = template(self.tmp_path)
        doc["provenance"]["P"] = p
        if cfg.native is not None:
            recs = []
            for r in doc["results"]:
                if r["backend"] == "native":
                    r = dict(r, implementation=f"native:{cfg.native}",
                             native_algorithm=cfg.native, native_ran=cfg.native,
                             native_ran_evidence="fake")
                    f = self.factor.get(cfg.native, 1.0) * (1 + p / 10)
                    r["time_us"] = {k: v * f if k != "cv" else v
                                    for k, v in r["time_us"].items()}
                    recs.append(r)
            doc["results"], doc["skipped"] = recs, []
        return [launcher.Launch(cfg, 0, 0.5, doc, "", None)]


ARGS = ["sweep", "-n", "3", "2", "--native", "ring", "recursive_doubling", "-q"]
BENCH = ["--", "-c", "allreduce", "-m", "8:16", "-i", "2"]


def test_sweep_resumes_after_an_interruption_and_merges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json"
    files = ["--json", str(out), "--csv", str(tmp_path / "s.csv"),
             "--plot", str(tmp_path / "s.png")]
    first = Fake(tmp_path, stop=4, factor={"ring": 0.5, "recursive_doubling": 2.0})
    monkeypatch.setattr(launcher, "run", first)
    assert cli.main([*ARGS, *files, *BENCH]) == 130
    capsys.readouterr()
    # P in ascending order, the default first, then the library's order (MPICH's table:
    # recursive_doubling before ring); P=3's default was interrupted
    order = [c.name for c in sweep.configs_for(launcher.library()[0], ["allreduce"],
                                               ["ring", "recursive_doubling"], 2, False)]
    assert order == ["default", "native:recursive_doubling", "native:ring"]
    assert first.calls == [(2, c) for c in order]
    doc = json.loads(out.read_text())
    assert sweep.validate(doc) == []
    assert not doc["complete"]
    assert doc["pending"] == [{"P": 3, "config": c} for c in order]
    assert [r["P"] for r in doc["runs"]] == [2]

    second = Fake(tmp_path, factor={"ring": 0.5, "recursive_doubling": 2.0})
    monkeypatch.setattr(launcher, "run", second)
    assert cli.main([*ARGS, *files, *BENCH]) == 0
    text, _ = capsys.readouterr()
    assert second.calls == [(3, c) for c in order]
    assert "3 launch(es) run, 3 taken from" in text
    doc = json.loads(out.read_text())
    assert sweep.validate(doc) == []
    assert doc["complete"]
    assert doc["pending"] == []
    assert [r["P"] for r in doc["runs"]] == [2, 3]
    for run in doc["runs"]:
        impls = {r["implementation"] for r in run["doc"]["results"]}
        assert impls == {"native", "mpi4py", "auto", "native:ring", "native:recursive_doubling"}
        names = [e["name"] for e in run["doc"]["provenance"]["launches"]]
        assert names == order
        assert run["doc"]["provenance"]["P"] == run["P"]
    # best: one row per (P, size); the default and the forced columns compete, mpi4py does not
    assert {(b["P"], b["size_bytes"]) for b in doc["best"]} == {(2, 8), (2, 16), (3, 8), (3, 16)}
    for b in doc["best"]:
        run = next(r for r in doc["runs"] if r["P"] == b["P"])
        cands = [r for r in run["doc"]["results"] if r["size_bytes"] == b["size_bytes"]
                 and r["backend"] != "mpi4py" and r["status"] == "ok"]
        fastest = min(cands, key=lambda r: r["time_us"]["median"])
        assert b["fastest"] == fastest["implementation"]
        default = next(r for r in cands if r["implementation"] == "native")
        assert b["speedup_over_default"] == pytest.approx(
            default["time_us"]["median"] / fastest["time_us"]["median"])
        assert b["fastest"] != "native:recursive_doubling"  # 2x the default's time
    # a third run has nothing left to do
    third = Fake(tmp_path)
    monkeypatch.setattr(launcher, "run", third)
    assert cli.main([*ARGS, *files, *BENCH]) == 0
    assert third.calls == []
    rows = list(csv.reader(line for line in (tmp_path / "s.csv").read_text().splitlines()
                           if not line.startswith("#")))
    assert rows[0][:3] == ["P", "collective", "pattern"]
    assert sorted({r[0] for r in rows[1:]}) == ["2", "3"]
    assert len(rows) - 1 == sum(len(r["doc"]["results"]) for r in doc["runs"])
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_refuses_other_settings_in_its_file_and_bench_options_it_owns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json"
    monkeypatch.setattr(launcher, "run", Fake(tmp_path))
    assert cli.main(["sweep", "-n", "2", "-q", "--json", str(out), *BENCH]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", "-n", "2", "4", "-q", "--json", str(out), *BENCH]) == 2
    assert "holds a sweep of other settings (np: [2] in the file, [2, 4] now)" in \
        capsys.readouterr().err
    fresh = Fake(tmp_path)
    monkeypatch.setattr(launcher, "run", fresh)
    assert cli.main(["sweep", "-n", "2", "4", "-q", "--fresh", "--json", str(out), *BENCH]) == 0
    assert fresh.calls == [(2, "default"), (4, "default")]
    capsys.readouterr()
    for bad, msg in ((["--", "--json", "x.json"], "bench option --json after --"),
                     (["--", "-n", "4"], "bench option -n after --"),
                     (["--", "--op", "nosuch"], "unknown op"),
                     (["--", "--bogus"], "bench options after --: unrecognized arguments"),
                     (["--native", "nosuch", "--", "-c", "allreduce"], "unknown"),
                     (["-n", "0", "--", "-c", "bcast"], "every P must be >= 1")):
        assert cli.main(["sweep", "--json", str(tmp_path / "o.json"), *bad]) == 2, bad
        assert msg in capsys.readouterr().err, bad


def test_sweep_budget_leaves_launches_pending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json"

    class Slow(Fake):
        def __call__(self, *a: Any, **kw: Any) -> list[launcher.Launch]:
            time.sleep(0.3)
            return super().__call__(*a, **kw)

    slow = Slow(tmp_path)
    monkeypatch.setattr(launcher, "run", slow)
    assert cli.main([*ARGS, "--budget", "0.1", "--json", str(out), *BENCH]) == 1
    text, _ = capsys.readouterr()
    assert slow.calls == [(2, "default")]  # the budget is spent after the first launch
    assert "5 pending (rerun the same command to resume)" in text
    doc = json.loads(out.read_text())
    assert len(doc["pending"]) == 5
    assert not doc["complete"]
    assert sweep.validate(doc) == []


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec")
def test_real_sweep_killed_then_resumed(tmp_path: Path) -> None:
    """mpiexec -n 2 and -n 3, the default and one forced algorithm: killed (SIGKILL to the
    whole process group) once the first launch is in the file, then rerun to completion."""
    from mpicoll.tools.launcher import library, native_names

    kind = library()[0]
    names = native_names(kind, "allreduce")
    out = tmp_path / "s.json"
    cmd = [sys.executable, "-m", "mpicoll", "sweep", "-n", "2", "3", "-q", "--json", str(out),
           "--plot", str(tmp_path / "s.png"),
           *(["--native", names[0]] if names else []),
           "--", "-c", "allreduce", "-m", "8:64", "-i", "3", "-x", "1"]
    env = job_env()
    env["MPIEXEC"] = " ".join(find_mpiexec() or [])
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    try:
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert out.exists(), proc.stdout.read().decode() if proc.stdout else ""
    killed = json.loads(out.read_text())
    assert sweep.validate(killed) == []
    total = 2 * (2 if names else 1)
    saved = sum(len(r["doc"]["provenance"]["launches"]) for r in killed["runs"])
    assert 1 <= saved < total
    assert not killed["complete"]
    assert len(killed["pending"]) == total - saved
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{total - saved} launch(es) run, {saved} taken from" in res.stdout
    doc = json.loads(out.read_text())
    assert sweep.validate(doc) == []
    assert doc["complete"]
    assert [r["P"] for r in doc["runs"]] == [2, 3]
    for run in doc["runs"]:
        assert run["doc"]["provenance"]["P"] == run["P"]
        assert run["doc"]["wrong"] == 0
    assert {b["P"] for b in doc["best"]} == {2, 3}
    assert (tmp_path / "s.png").stat().st_size > 0
    assert "# wrote " in res.stdout


def test_best_rows_say_within_noise_where_the_ranges_overlap() -> None:
    def rec(impl: str, lo: float, mid: float, hi: float, size: int = 8) -> dict[str, Any]:
        native = impl.startswith("native")
        return {"collective": "allreduce", "pattern": "numpy", "size_bytes": size, "count": 1,
                "implementation": impl, "backend": "native" if native else "p2p",
                "native_algorithm": impl.split(":", 1)[1] if ":" in impl else None,
                "status": "ok", "persistent": False, "nonblocking": False,
                "time_us": {"median": mid, "min": lo, "max": hi, "p10": lo, "p90": hi}}

    runs = [{"P": 2, "doc": {"results": [
        rec("native", 5, 6, 7), rec("ring", 4, 5, 6), rec("native:ring", 8, 9, 10),   # noise
        rec("native", 5, 6, 7, 16), rec("ring", 1, 2, 3, 16),                         # winner
        rec("native", 1, 2, 3, 32), rec("ring", 3, 4, 5, 32),                         # default
    ]}}]
    got = {b["size_bytes"]: (b["fastest"], b["within_noise"]) for b in sweep.best_rows(runs)}
    assert got == {8: ("ring", True), 16: ("ring", False), 32: ("native", False)}
    text = sweep.format_summary({"best": sweep.best_rows(runs)})
    assert "~ring x1.20" in text
    assert " ring x3.00" in text
    assert "native x1.00" in text


def test_sweep_passes_phases_to_every_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-- --phases``: accepted by the sweep, and by a forced launch's bench (its ``-a none``
    leaves nothing to phase, which is not an error there)."""
    from mpicoll.tools import bench

    fake = Fake(tmp_path)
    monkeypatch.setattr(launcher, "run", fake)
    out = tmp_path / "s.json"
    assert cli.main([*ARGS, "--json", str(out), *BENCH, "--phases"]) == 0
    assert len(fake.calls) == 6
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    forced = parser.parse_args(["-c", "allreduce", "--phases", "-a", "none",
                                "--native-label", launcher.native_names(
                                    launcher.library()[0], "allreduce")[0]])

    def error(msg: str) -> None:
        raise AssertionError(msg)

    assert bench.make_plan(forced, 2, error).phases
