"""``$MPICOLL_MODEL`` must agree across ranks, by contents (issue 20): set on some ranks only,
naming different models, or naming a file missing on some ranks, it makes every rank raise at
the p2p backend's construction, never a silent split of ``auto``'s choices.

The jobs are MPMD launches (``mpiexec -n 1 env MPICOLL_MODEL=a.json python ... : -n 2 python
...``: Open MPI 5's ``-x`` reaches every context of the job, so the variable is set per context
by ``env``) started from this single process under a timeout, as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _launch import job_env, launcher

from mpicoll.backends import env
from mpicoll.model import alphabeta

LAUNCHER = launcher()
TIMEOUT = 90
CHILD = """
import sys
from mpi4py import MPI
import mpicoll
comm = MPI.COMM_WORLD
try:
    hand = mpicoll.p2p(comm)
except Exception as exc:
    line = f"rank {comm.rank} raised {type(exc).__name__}: {exc}"
else:
    line = f"rank {comm.rank} made it"
    hand.Free()
with open(f"{sys.argv[1]}/rank{comm.rank}", "w") as fh:  # one file a rank: no interleaving
    fh.write(line)
"""


def model_file(path: Path, alpha: float) -> str:
    path.write_text(json.dumps({"alpha": alpha, "beta": 1e-10, "gamma": 2e-10}))
    return str(path)


def mpmd(tmp: Path, values: list[str | None]) -> dict[int, str]:
    """Run :data:`CHILD` on len(values) ranks, rank r with ``MPICOLL_MODEL=values[r]`` (None:
    unset); each rank's printed line, by rank."""
    assert LAUNCHER is not None
    out_dir = tmp / f"job{len(list(tmp.glob('job*')))}"
    out_dir.mkdir()
    environ = job_env()
    environ.pop("MPICOLL_MODEL", None)
    cmd = list(LAUNCHER)
    for k, value in enumerate(values):
        if k:
            cmd.append(":")
        cmd += ["-n", "1"]
        if value is not None:  # env(1), not -env/-x: Open MPI 5 applies -x to every context
            cmd += ["env", f"MPICOLL_MODEL={value}"]
        cmd += [sys.executable, "-c", CHILD, str(out_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environ, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job hung past {TIMEOUT} s\n{out}\n{err}")
    lines = {int(f.name[4:]): f.read_text() for f in out_dir.glob("rank*")}
    assert sorted(lines) == list(range(len(values))), out + err
    return lines


needs_mpiexec = pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")


@needs_mpiexec
def test_model_on_one_rank_only(tmp_path: Path) -> None:
    a = model_file(tmp_path / "a.json", 2e-6)
    lines = mpmd(tmp_path, [a, None, None])
    for line in lines.values():
        assert "raised MismatchError" in line, line
        assert "$MPICOLL_MODEL" in line, line
        assert "none (built-in rules) on rank(s) [1, 2]" in line, line


@needs_mpiexec
def test_two_different_models(tmp_path: Path) -> None:
    a = model_file(tmp_path / "a.json", 2e-6)
    b = model_file(tmp_path / "b.json", 3e-6)
    for line in mpmd(tmp_path, [a, b, b]).values():
        assert "raised MismatchError" in line, line
        assert "compared by contents" in line, line


@needs_mpiexec
def test_a_missing_model_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.json")
    lines = mpmd(tmp_path, [missing, None, None])
    assert lines[0].startswith("rank 0 raised ValueError: MPICOLL_MODEL="), lines[0]
    assert "no such file" in lines[0], lines[0]
    for r in (1, 2):
        assert lines[r].startswith(f"rank {r} raised ValueError"), lines[r]
        assert "refused on rank(s) [0]" in lines[r], lines[r]
    lines = mpmd(tmp_path, [None, missing, missing])  # where it is set, those ranks say why
    assert "refused on rank(s) [1, 2]" in lines[0], lines[0]
    assert all("no such file" in lines[r] for r in (1, 2)), lines


@needs_mpiexec
def test_the_same_model_under_two_paths_agrees(tmp_path: Path) -> None:
    a = model_file(tmp_path / "a.json", 2e-6)
    b = model_file(tmp_path / "copy.json", 2e-6)
    for line in mpmd(tmp_path, [a, b, a]).values():
        assert line.endswith("made it"), line


def test_model_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def digest(value: str | None) -> int:
        monkeypatch.setattr(alphabeta, "_loaded", False)
        monkeypatch.setattr(alphabeta, "_current", None)
        monkeypatch.setattr(alphabeta, "_used", False)
        if value is None:
            monkeypatch.delenv("MPICOLL_MODEL", raising=False)
        else:
            monkeypatch.setenv("MPICOLL_MODEL", value)
        return env.model_digest()

    assert digest(None) == env.NO_MODEL
    a = digest(model_file(tmp_path / "a.json", 2e-6))
    assert a != env.NO_MODEL
    assert digest(model_file(tmp_path / "same.json", 2e-6)) == a
    assert digest(model_file(tmp_path / "b.json", 3e-6)) != a
    with pytest.raises(ValueError, match=r"MPICOLL_MODEL=.*no such file"):
        digest(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a model file"):
        digest(str(tmp_path / "bad.json"))
    settings = env.read(p2p=True)  # the backend gets the error, to raise after the agreement
    assert isinstance(settings.error, ValueError)
    alphabeta.use(None)  # a program's own choice wins over the variable: no error
    assert env.model_digest() == env.NO_MODEL
