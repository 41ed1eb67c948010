"""``verify --native-algorithms``: the plain-mpi4py reproducer, the driver end to end.

The reproducer test writes, in this one process, every rank's part of a case (rooted, v-forms
with gapped displacements, in place, blocking and non-blocking), runs the script under
``mpiexec -n P`` with plain mpi4py and checks it says "all ranks right"; with one rank's
expected values altered it must say WRONG and exit 1 (the script does detect a wrong result).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _launch import job_env, launcher

from mpicoll.tools import cli, reproducer
from mpicoll.tools import launcher as launch
from mpicoll.tools.cases import Case

KIND, VERSION = launch.library()
LAUNCHER = launcher()


CASES = [
    ("allreduce", 3, {"count": 4}, False),
    ("gatherv", 3, {"count": 2, "root": 1, "uniform": False}, True),
    ("allgatherv", 4, {"count": 3, "uniform": False, "in_place": True}, True),
    ("scatter", 3, {"count": 2, "root": 2, "in_place": True}, False),
    ("alltoallv", 3, {"count": 2, "uniform": False}, True),
    ("reduce_scatter", 3, {"count": 2, "uniform": False, "op": "max", "dtype": "int32"}, False),
    ("bcast", 2, {"count": 3, "root": 1}, True),
    ("exscan", 3, {"count": 2}, True),
]


@pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")
@pytest.mark.parametrize(("coll", "p", "kw", "nb"), CASES, ids=[c[0] for c in CASES])
def test_reproducer_runs_with_plain_mpi4py(coll: str, p: int, kw: dict[str, object], nb: bool,
                                           tmp_path: Path) -> None:
    assert LAUNCHER is not None
    parts = []
    for r in range(p):
        case = Case(coll, size=p, rank=r, **kw).build()  # type: ignore[arg-type]
        assert reproducer.unsupported(case) is None
        case.reset()
        parts.append(reproducer.rank_part(case, nb))
    text = reproducer.script(parts, f"test {coll}")
    assert "mpicoll" not in text
    assert (f"comm.I{coll[0]}" if nb else f"comm.{coll[0].upper()}") in text
    path = tmp_path / "repro.py"
    path.write_text(text)
    cmd = [*LAUNCHER, "-n", str(p), sys.executable, str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=job_env(),
                       check=False)
    assert r.returncode == 0, text + r.stdout + r.stderr
    assert "all ranks right" in r.stdout
    # the script detects a wrong value: alter the last rank with an output
    k = max(i for i, part in enumerate(parts) if part["want"])
    want = list(parts[k]["want"])  # type: ignore[call-overload]
    want[0] = want[0] + 1
    parts[k]["want"] = want
    path.write_text(reproducer.script(parts, "altered"))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=job_env(),
                       check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"rank {k}: WRONG at index 0" in r.stdout


def test_reproducer_unsupported_and_command() -> None:
    assert "predefined ops" in str(reproducer.unsupported(Case("allreduce", 2, op="noncomm",
                                                               dtype="int64", size=2)))
    assert "predefined datatypes" in str(reproducer.unsupported(Case("bcast", 2,
                                                                     dtype="double_int")))
    assert reproducer.command(3, "r.py", {"A": "x y"}, ["--mca", "k", "v"]) == \
        "A='x y' mpiexec --mca k v -n 3 python r.py"


@pytest.mark.parametrize(("argv", "message"), [
    (["--native-algorithms", "no_such", "-c", "allreduce"], "unknown"),
    (["-n", "4", "-c", "allreduce"], "only with --native-algorithms"),
    (["--native-algorithms", "all", "-n", "0", "-c", "allreduce"], "must be >= 1"),
    (["--json", "x.json", "-c", "allreduce"], "only with --native-algorithms"),
])
def test_verify_native_option_refused(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    if KIND == "other":
        pytest.skip("a library mpicoll cannot force")
    assert cli.run(["verify", *argv]) == 2
    assert message in capsys.readouterr().err


_RING = {"mpich": ("ring", "tsp_ring"), "openmpi": ("ring", "ring")}


@pytest.mark.skipif(LAUNCHER is None or KIND not in _RING,
                    reason="no mpiexec, or a library mpicoll cannot force")
def test_verify_native_algorithms_end_to_end(tmp_path: Path) -> None:
    """The driver at P = 2 and 3: the forced ring (blocking) and its I-form, allreduce and
    allgatherv, every root, in place, uneven counts; a row per (collective, form, algorithm)
    with a cell per P, all passing; the JSON lists them."""
    blocking, nonblocking = _RING[KIND]
    out = tmp_path / "v.json"
    r = subprocess.run(
        [sys.executable, "-m", "mpicoll", "verify", "--native-algorithms", blocking,
         nonblocking, "-n", "2", "3", "-c", "allreduce,allgatherv", "--nonblocking",
         "--counts", "0,1,5", "--json", str(out), "--repro-dir", str(tmp_path / "r"), "-q"],
        capture_output=True, text=True, timeout=400, env=job_env(), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"# mpicoll verify --native-algorithms: {VERSION}" in r.stdout
    doc = json.loads(out.read_text())
    rows = {(x["collective"], x["form"], x["algorithm"]): x["cells"] for x in doc["rows"]}
    expect = {("allreduce", "blocking", blocking), ("allgatherv", "blocking", blocking)}
    expect |= {(c, "nonblocking", nonblocking) for c in ("allreduce", "allgatherv")
               if nonblocking in launch.native_names(KIND, c, nonblocking=True)}
    assert set(rows) == expect
    for cells in rows.values():
        assert set(cells) == {"2", "3"}
        assert all(v.rstrip("*") == "ok" for v in cells.values()), cells
    assert doc["failures"] == []


@pytest.mark.skipif(LAUNCHER is None or KIND != "mpich" or "5.0.2" not in VERSION,
                    reason="uses a bug of the mpich 5.0.2 wheel as its fixture")
def test_verify_native_reports_a_library_abort(tmp_path: Path) -> None:
    """MPICH 5.0.2's forced reduce_scatter ``noncommutative`` asserts equal recvcounts
    (reduce_scatter_intra_noncommutative.c:48) instead of falling back, and aborts the
    process: verify reports the case it died in (P = 2, counts [0, 1]) with MPICH's message,
    launches the other collective of the configuration again (reduce_scatter_block passes),
    and the reproducer, run with plain mpi4py and the same settings, aborts the same way."""
    assert LAUNCHER is not None
    out = tmp_path / "v.json"
    r = subprocess.run(
        [sys.executable, "-m", "mpicoll", "verify", "--native-algorithms", "noncommutative",
         "-n", "2", "-c", "reduce_scatter,reduce_scatter_block", "--counts", "0,1",
         "--json", str(out), "--repro-dir", str(tmp_path / "r"), "-q"],
        capture_output=True, text=True, timeout=400, env=job_env(), check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    rows = {x["collective"]: x["cells"]["2"] for x in doc["rows"]}
    assert rows == {"reduce_scatter": "DIED", "reduce_scatter_block": "ok"}
    (fail,) = doc["failures"]
    assert fail["smallest"]["status"] == "died"
    assert fail["smallest"]["case"]["counts"] == [0, 1]
    assert "recvcounts[i] == recvcounts[i + 1]" in fail["smallest"]["detail"]
    assert "MPIR_CVAR_REDUCE_SCATTER_INTRA_ALGORITHM=noncommutative" in fail["command"]
    env = job_env()
    env.update({"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "MPIR_CVAR_COLLECTIVE_FALLBACK": "print",
                "MPIR_CVAR_REDUCE_SCATTER_INTRA_ALGORITHM": "noncommutative"})
    rep = subprocess.run([*LAUNCHER, "-n", "2", sys.executable, fail["reproducer"]],
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert rep.returncode != 0
    assert "recvcounts[i] == recvcounts[i + 1]" in rep.stdout + rep.stderr
    plain = subprocess.run([*LAUNCHER, "-n", "2", sys.executable, fail["reproducer"]],
                           capture_output=True, text=True, timeout=120, env=job_env(),
                           check=False)
    assert plain.returncode == 0, plain.stdout + plain.stderr  # MPICH's default: right
    assert "all ranks right" in plain.stdout


class _Killed(BaseException):
    """The stand-in for the outer timeout's kill, raised by a fake launch."""


@pytest.mark.skipif(KIND not in _RING, reason="a library mpicoll cannot force")
def test_verify_native_file_written_per_launch_and_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file after each launch: a run killed during its third launch keeps the first two
    (``complete`` false, the rest ``pending``); the same command again runs only the others
    (the resume code is sweep's, :mod:`mpicoll.tools.launcher`), and the final file has every
    row; other settings are refused, ``--fresh`` starts over."""
    from dataclasses import asdict

    from mpicoll.tools.verify import Outcome

    names = launch.native_names(KIND, "allreduce")[:2]
    calls: list[tuple[int, str]] = []

    def fake(kill_at: int | None) -> Any:
        def run(configs: list[launch.Config], p: int, args: list[str],
                **kw: Any) -> list[launch.Launch]:
            (cfg,) = configs
            if kill_at is not None and len(calls) + 1 == kill_at:
                raise _Killed
            calls.append((p, cfg.name))
            o = Outcome("allreduce", f"native:{cfg.native}", 5, "ok", f"count 5 P={p}")
            return [launch.Launch(cfg, 0, 0.1, {"outcomes": [asdict(o)]}, "")]
        return run

    out = tmp_path / "v.json"
    argv = ["verify", "--native-algorithms", *names, "-n", "2", "3", "-c", "allreduce",
            "--json", str(out), "--repro-dir", str(tmp_path / "r"), "-q"]
    monkeypatch.setattr(launch, "run", fake(kill_at=3))
    with pytest.raises(_Killed):
        cli.main(argv)
    killed = json.loads(out.read_text())
    assert killed["schema"] == "mpicoll-verify-native/1"
    assert not killed["complete"]
    assert [(x["P"], x["config"]["name"]) for x in killed["launches"]] == calls
    assert calls == [(2, f"native:{n}") for n in names]
    assert [(x["P"], x["config"]) for x in killed["pending"]] == [(3, f"native:{n}")
                                                                  for n in names]
    capsys.readouterr()
    calls.clear()
    monkeypatch.setattr(launch, "run", fake(kill_at=None))
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert calls == [(3, f"native:{n}") for n in names]
    assert "4 launches (2 taken from" in text
    doc = json.loads(out.read_text())
    assert doc["complete"]
    assert doc["pending"] == []
    rows = {x["algorithm"]: x["cells"] for x in doc["rows"]}
    assert rows == {n: {"2": "ok", "3": "ok"} for n in names}
    # nothing left: a third run launches nothing
    calls.clear()
    assert cli.main(argv) == 0
    assert calls == []
    capsys.readouterr()
    # other settings: refused; --fresh: everything again
    assert cli.main([*argv[:6], *argv[7:]]) == 2
    assert "holds a verify --native-algorithms run of other settings (np: [2, 3] in the " \
        "file, [2] now)" in capsys.readouterr().err
    assert cli.main([*argv, "--fresh"]) == 0
    assert len(calls) == 4
    assert cli.main(["verify", "--fresh", "-c", "allreduce"]) == 2
    assert "argument --fresh: only with --native-algorithms" in capsys.readouterr().err
