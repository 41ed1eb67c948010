"""No stranded ranks: one rank's uncaught exception ends the whole MPI job (single-process
pytest that launches small ``mpiexec`` jobs).

In each job rank 1 raises while ranks 0 and 2 are already inside a p2p ``Allreduce`` that can
never complete; the job must exit non-zero well within the subprocess timeout, with rank 1's
traceback on stderr.  Three ways of running the script are checked:

* ``python -m mpi4py script.py`` (mpi4py's own abort-on-exception runner), the reference;
* ``raise SystemExit(abort_on_exception(main))`` with :mod:`mpicoll.tools.abort`;
* ``with aborting(): ...`` with :mod:`mpicoll.tools.abort`, and a non-zero ``sys.exit`` on one rank.

``mpiexec`` is the one next to ``sys.executable`` (a virtualenv's MPI wheel), else the first on
``PATH``; Open MPI gets ``--oversubscribe`` (and, as root, its allow-run-as-root variables).
A control run without any wrapper (the job hangs until killed) is marked ``full``.

Run: ``pytest tests/unit/test_abort.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _launch import job_env, launcher

from mpicoll.tools import abort as _abort

REPO = Path(__file__).resolve().parents[2]
NPROCS = 3
TIMEOUT_S = 20.0  # the job must be gone by then; it normally ends in 1-3 s
MESSAGE = "rank one fails on purpose"

# The failing program: everyone completes one Allreduce (the job is really up), then rank 1
# raises while the others wait in the next Allreduce, which needs rank 1.
BODY = """
import sys, time
import numpy as np
from mpi4py import MPI
import mpicoll

def main():
    comm = MPI.COMM_WORLD
    coll = mpicoll.p2p(comm)
    x = np.ones(4)
    y = np.zeros(4)
    coll.Allreduce(x, y)
    if comm.rank == 1:
        time.sleep(0.3)  # let the others enter the next Allreduce first
        {fail}
    coll.Allreduce(x, y)
    print("unreachable", flush=True)
    return 0
"""

RAISE = f'raise RuntimeError("{MESSAGE}")'

SCRIPTS = {
    # mpi4py's runner: the reference behaviour
    "mpi4py": BODY.format(fail=RAISE) + "\nmain()\n",
    # mpicoll's wrapper function
    "wrapper": BODY.format(fail=RAISE) + textwrap.dedent("""
        from mpicoll.tools.abort import abort_on_exception
        raise SystemExit(abort_on_exception(main))
        """),
    # mpicoll's context manager
    "context": BODY.format(fail=RAISE) + textwrap.dedent("""
        from mpicoll.tools.abort import aborting
        with aborting():
            main()
        """),
    # a non-zero sys.exit on one rank strands the others just the same
    "sys_exit": BODY.format(fail="sys.exit(3)") + textwrap.dedent("""
        from mpicoll.tools.abort import aborting
        with aborting():
            main()
        """),
    # no wrapper at all: the control (expected to hang)
    "bare": BODY.format(fail=RAISE) + "\nmain()\n",
}


# --------------------------------------------------------------------------------------------
# launching


def child_env() -> dict[str, str]:
    """A clean job environment (:func:`_launch.job_env`) without checked mode."""
    env = job_env()
    env.pop("MPICOLL_CHECK", None)
    return env


def mpiexec() -> list[str]:
    """``[mpiexec, flags...]`` for this MPI, or skip the test if there is none."""
    cmd = launcher()
    if cmd is None:
        pytest.skip("no mpiexec next to sys.executable, on PATH or in $MPIEXEC")
    return cmd


class Job:
    """The outcome of one ``mpiexec`` run: status, output, seconds, and whether it was killed."""

    def __init__(self, returncode: int | None, stdout: str, stderr: str, seconds: float,
                 timed_out: bool) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.timed_out = timed_out

    def __repr__(self) -> str:
        return (f"Job(returncode={self.returncode}, seconds={self.seconds:.1f}, "
                f"timed_out={self.timed_out})\n--- stdout ---\n{self.stdout[-3000:]}\n"
                f"--- stderr ---\n{self.stderr[-3000:]}")


def run_job(args: list[str], timeout: float = TIMEOUT_S, cwd: Path | None = None) -> Job:
    """Run ``mpiexec -n 3 python ARGS`` in its own process group; kill the group on timeout."""
    cmd = [*mpiexec(), "-n", str(NPROCS), sys.executable, *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(), cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank it started
        out, err = proc.communicate()
    return Job(proc.returncode, out, err, time.monotonic() - start, timed_out)


def script(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}_job.py"
    path.write_text(SCRIPTS[name])
    return path


def assert_aborted(job: Job) -> None:
    """The job ended on its own, non-zero, and never got past the stranded Allreduce."""
    assert not job.timed_out, f"the job hung (killed after {TIMEOUT_S:g} s): {job!r}"
    assert job.returncode not in (0, None), f"the job exited 0: {job!r}"
    assert "unreachable" not in job.stdout, f"a rank passed the stranded Allreduce: {job!r}"


# --------------------------------------------------------------------------------------------
# jobs


def test_mpi4py_runner_aborts(tmp_path: Path) -> None:
    """Reference: ``python -m mpi4py script.py`` aborts the job with rank 1's traceback."""
    job = run_job(["-m", "mpi4py", str(script(tmp_path, "mpi4py"))])
    assert_aborted(job)
    assert "Traceback (most recent call last)" in job.stderr, job
    assert f"RuntimeError: {MESSAGE}" in job.stderr, job


@pytest.mark.parametrize("how", ["wrapper", "context"])
def test_abort_wrapper_aborts(tmp_path: Path, how: str) -> None:
    """``abort_on_exception(main)`` / ``with aborting():``: the job ends non-zero, and stderr
    has rank 1's traceback with every line prefixed ``[rank 1] ``."""
    job = run_job([str(script(tmp_path, how))])
    assert_aborted(job)
    assert "[rank 1] Traceback (most recent call last):" in job.stderr, job
    assert f"[rank 1] RuntimeError: {MESSAGE}" in job.stderr, job
    assert "[rank 1] aborting the MPI job" in job.stderr, job
    for rank in (0, 2):  # only the failing rank reports
        assert f"[rank {rank}] Traceback" not in job.stderr, job


def test_abort_wrapper_via_python_c(tmp_path: Path) -> None:
    """The same through ``python -c`` (no script file on the command line)."""
    code = SCRIPTS["wrapper"]
    job = run_job(["-c", code], cwd=tmp_path)
    assert_aborted(job)
    assert f"[rank 1] RuntimeError: {MESSAGE}" in job.stderr, job


def test_nonzero_sys_exit_on_one_rank_aborts(tmp_path: Path) -> None:
    """``sys.exit(3)`` on rank 1 inside ``aborting()`` ends the job too (status 3 passed to
    ``MPI_Abort``), with a one-line note instead of a traceback."""
    job = run_job([str(script(tmp_path, "sys_exit"))])
    assert_aborted(job)
    assert "[rank 1] exit status 3" in job.stderr, job


@pytest.mark.full
def test_control_without_wrapper_hangs(tmp_path: Path) -> None:
    """Control: with no wrapper the same job never ends on its own (ranks 0 and 2 are
    stranded), so the tests above really measure the wrapper.  Costs the full timeout."""
    job = run_job([str(script(tmp_path, "bare"))], timeout=8.0)
    assert job.timed_out or job.returncode != 0, job
    assert "unreachable" not in job.stdout, job


# --------------------------------------------------------------------------------------------
# in-process (a single process: nothing to strand, so nothing is aborted)


def test_returns_main_status() -> None:
    assert _abort.abort_on_exception(lambda: 0) == 0
    assert _abort.abort_on_exception(lambda: None) == 0
    assert _abort.abort_on_exception(lambda: 4) == 4


def test_single_process_passes_exceptions_through() -> None:
    """In a job of one process the exception is re-raised unchanged (no MPI_Abort), so a
    wrapped function can be tested in-process."""

    def boom() -> int:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        _abort.abort_on_exception(boom)
    with pytest.raises(SystemExit) as info, _abort.aborting():
        sys.exit(2)
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info, _abort.aborting():
        sys.exit(0)
    assert info.value.code == 0


def test_report_prefixes_every_line(capfd: pytest.CaptureFixture[str]) -> None:
    _abort.report("Traceback (most recent call last):\n  line\nValueError: x\n", rank=7)
    err = capfd.readouterr().err
    assert err == ("[rank 7] Traceback (most recent call last):\n[rank 7]   line\n"
                   "[rank 7] ValueError: x\n")
