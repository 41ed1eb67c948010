"""``bench --objects``: the lower-case object methods timed for mpi4py, native and p2p."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _launch import job_env, launcher

from mpicoll.tools import bench, cli

LAUNCHER = launcher()


@pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")
@pytest.mark.parametrize("p", [1, 2, 3])
def test_objects(p: int, tmp_path: Path) -> None:
    """Every object call, each implementation checked against mpi4py's return value on every
    rank and timed; an algorithm the object method refuses (allreduce ring: the object
    allreduce is a gather + bcast) is n/a, not wrong; the JSON validates."""
    assert LAUNCHER is not None
    out = tmp_path / "o.json"
    r = subprocess.run(
        [*LAUNCHER, "-n", str(p), sys.executable, "-m", "mpicoll", "bench", "--objects",
         "-c", "allreduce,bcast,gather,allgather,alltoall,barrier,scatter",
         "-a", "auto", "ring", "binomial", "-i", "2", "-x", "0", "--json", str(out), "-q"],
        capture_output=True, text=True, timeout=300, env=job_env(), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert bench.validate(doc) == []
    recs = doc["results"]
    calls = {x["object_call"] for x in recs}
    assert calls == {text for text, _, _ in bench.OBJECT_CALLS.values()}
    for x in recs:
        assert x["pattern"] == "object"
        if x["implementation"] in ("mpi4py", "native", "auto"):
            assert x["status"] == "ok", x
            assert x["check"] == "mpi4py"
            assert x["time_us"]["median"] > 0
        assert x["status"] in ("ok", "n/a"), x
    by = {(x["collective"], x["implementation"]): x for x in recs}
    assert by[("allreduce", "ring")]["status"] == "n/a"
    assert by[("bcast", "binomial")]["status"] == "ok"
    assert "# allreduce(1.5): 21 bytes pickled" in r.stdout


@pytest.mark.parametrize(("argv", "message"), [
    (["--objects", "--nonblocking", "-c", "allreduce"], "not with --nonblocking"),
    (["--objects", "--pattern", "list", "-c", "allreduce"], "not with --pattern"),
    (["--objects", "-c", "reduce_scatter"], "has an object call"),
])
def test_objects_refused(argv: list[str], message: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["bench", *argv]) == 2
    assert message in capsys.readouterr().err
