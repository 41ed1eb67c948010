"""``mpiexec -n 2 python -m mpicoll ...`` as a user types it: exit codes, no hang, one usage.

Each run is under a ``timeout``: a hang fails the test instead of stalling the suite.  Skipped
when no ``mpiexec`` is found (``$MPIEXEC``, the interpreter's bin directory, or ``PATH``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _launch import job_env, launcher
from mpi4py import MPI

import mpicoll
from mpicoll import registry
from mpicoll.tools import bench, harness

REPO = Path(mpicoll.__file__).resolve().parent.parent
TIMEOUT = 180


LAUNCHER = launcher()
pytestmark = pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")

def mpirun(n: int, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n N python ARGS`` with this interpreter and this checkout of mpicoll."""
    assert LAUNCHER is not None
    env = job_env()
    cmd = [*LAUNCHER, "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                          cwd=cwd, check=False)


def test_acceptance_command(tmp_path: Path) -> None:
    """The issue's acceptance command, with a smaller top size: every p2p algorithm's median
    against native, in the JSON."""
    path = tmp_path / "out.json"
    r = mpirun(2, "-m", "mpicoll", "bench", "-c", "allreduce", "-a", "all", "-m", "8:32K",
               "--time-budget", "0.01", "--json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    assert doc["provenance"]["P"] == 2
    names = {a.name for a in registry.algorithms("allreduce")}
    for size in [8 << k for k in range(13)]:
        row = {r["implementation"]: r for r in doc["results"] if r["size_bytes"] == size}
        assert set(row) == {"native", "mpi4py"} | names, size
        assert row["native"]["time_us"]["median"] > 0
        assert row["mpi4py"]["time_us"]["median"] > 0
        for name in names:
            assert row[name]["status"] in ("ok", "n/a")
            if row[name]["status"] == "ok":
                assert row[name]["time_us"]["median"] > 0
    assert r.stdout.count("# allreduce:") == 1
    assert "[mpicoll bench] allreduce" in r.stderr  # the progress line


def test_usage_error_once_and_clean_exit() -> None:
    r = mpirun(2, "-m", "mpicoll", "bench", "-m", "8:4X")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("usage: mpicoll bench") == 1
    assert "error: argument -m/--message-size: invalid size '4X'" in r.stderr
    assert r.stdout == ""


def test_verify_exit_status(tmp_path: Path) -> None:
    r = mpirun(2, "-m", "mpicoll", "verify", "--quick", "-q", "-c", "allgather", "scan")
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout


_BROKEN_SCRIPT = """
import sys
from mpicoll.tools import cli
from mpicoll import registry
good = registry.algorithms("allreduce")[0].schedule
def broken(ctx, *args, **kw):
    yield from good(ctx, *args, **kw)
    if ctx.rank == ctx.size - 1 and args[0].size:
        args[0][0] += 1
registry._REGISTRY["allreduce"]["broken_for_test"] = registry.Algorithm(
    "allreduce", "broken_for_test", broken, "0", lambda p, n, a, b, g: 0.0)
sys.exit(cli.main(sys.argv[1:]))
"""


def test_broken_algorithm_fails_bench_and_verify(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text(_BROKEN_SCRIPT)
    r = mpirun(2, str(script), "bench", "-c", "allreduce", "-a", "all", "-m", "8:64", "-i", "2",
               "-q")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "WRONG" in r.stdout
    assert "broken_for_test: WRONG at 4 size(s)" in r.stdout
    r = mpirun(2, str(script), "verify", "-q", "--quick", "-c", "allreduce")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL allreduce/broken_for_test: allreduce P=2" in r.stdout


_RAISE_SCRIPT = """
import sys
from mpicoll.tools import cli
def boom(args, comm, argv, out):
    if comm.rank == 1:
        raise RuntimeError("deliberate failure on rank 1")
    comm.Barrier()  # rank 0 would wait here forever without the Abort
    return 0
cli.register(cli.Subcommand("boom", "raise on rank 1", lambda p: None, boom))
sys.exit(cli.main(["boom"]))
"""


def test_uncaught_exception_aborts_every_rank(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(_RAISE_SCRIPT)
    r = mpirun(2, str(script))
    assert r.returncode != 0
    assert "RuntimeError: deliberate failure on rank 1" in r.stderr
    assert "aborting the MPI job" in r.stderr


_STRANDED_SCRIPT = """
import sys
from mpicoll.tools import cli
from mpicoll import registry
good = registry.algorithms("allreduce")[0].schedule
def stranded(ctx, *args, **kw):
    if ctx.rank == 1:
        raise ValueError("rank 1 gives up before sending")
    yield from good(ctx, *args, **kw)
registry._REGISTRY["allreduce"]["stranded_for_test"] = registry.Algorithm(
    "allreduce", "stranded_for_test", stranded, "0", lambda p, n, a, b, g: 0.0)
sys.exit(cli.main(sys.argv[1:]))
"""


def test_stranded_rank_is_aborted_not_hung(tmp_path: Path) -> None:
    """The rank whose call raised names the case, the algorithm and its error, and ends the
    job (within min(10, timeout/2) s) before the stranded rank's watchdog reports a timeout."""
    script = tmp_path / "stranded.py"
    script.write_text(_STRANDED_SCRIPT)
    r = mpirun(2, str(script), "verify", "-q", "-c", "allreduce", "-a", "stranded_for_test",
               "--counts", "4", "--ops", "sum", "--dtypes", "float64", "--in-place", "no",
               "--timeout", "8")
    assert r.returncode != 0
    assert ("[rank 1] mpicoll: verify allreduce P=2 dtype=float64 op=sum count=4 "
            "stranded_for_test blocking: ValueError: rank 1 gives up before sending") in r.stderr
    assert "stranded them inside the call" in r.stderr
    assert "did not finish in time" not in r.stderr


# The native backend's MPI_Bcast fails at the root with an MPI error (as MPICH's MPI_Gather of
# MPI_DOUBLE_INT does at P >= 4): the other ranks wait inside MPI_Bcast for ever.
_NATIVE_ERROR_SCRIPT = """
import sys
from mpi4py import MPI
from mpicoll.tools import cli
from mpicoll.backends.native import Native
real = Native.Bcast
def bcast(self, buf, root=0, **kw):
    if self.rank == root:
        raise MPI.Exception(MPI.ERR_TYPE)
    return real(self, buf, root, **kw)
Native.Bcast = bcast
sys.exit(cli.main(sys.argv[1:]))
"""


def test_native_error_that_strands_ranks_is_named(tmp_path: Path) -> None:
    script = tmp_path / "native_error.py"
    script.write_text(_NATIVE_ERROR_SCRIPT)
    r = mpirun(3, str(script), "verify", "-q", "-c", "bcast", "--counts", "5", "--dtypes",
               "float64", "--roots", "0", "--timeout", "8")
    assert r.returncode != 0
    error = harness.describe_error(MPI.Exception(MPI.ERR_TYPE))  # the MPI library's own text
    assert ("[rank 0] mpicoll: verify bcast P=3 dtype=float64 root=0 count=5 native blocking: "
            f"{error}") in r.stderr, r.stderr
    assert "aborting the MPI job" in r.stderr
    assert "did not finish in time" not in r.stderr
