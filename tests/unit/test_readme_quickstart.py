"""The README's quick start, run as a new user runs it from a clone after ``make test``: the
example script taken from README.md, the command the README gives (its ``.venv-mpich/bin/``
being this interpreter's environment), under a timeout; every rank must print the values the
README says."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _launch import job_env, launcher

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
TIMEOUT = 100


def quick_start() -> tuple[str, list[str]]:
    """(the ``# allreduce.py`` script, the command that runs it) as README.md gives them."""
    script = re.search(r"```python\n(# allreduce\.py\n.*?)```", README, re.S)
    assert script, "README.md has no '# allreduce.py' example"
    command = re.search(r"```sh\n(\.venv-mpich/bin/mpiexec [^\n#]*)", README)
    assert command, "README.md gives no .venv-mpich/bin/mpiexec command for it"
    return script.group(1), shlex.split(command.group(1))


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    script, argv = quick_start()
    assert "Free()" in script  # the text says to free what p2p duplicated
    assert argv[-1] == "allreduce.py"
    (tmp_path / "allreduce.py").write_text(script)
    # the venv's mpiexec as the README writes it (this venv's: .venv-mpich/bin/mpiexec under
    # MPICH; Open MPI's needs --oversubscribe for 4 ranks on fewer cores; make MPI=system: the
    # site's), from the same place the other launching tests take it
    found = launcher()
    if found is None:
        pytest.skip("no mpiexec found")
    argv = [*found, *argv[1:]]
    argv = [a.replace(".venv-mpich/bin/python", sys.executable) for a in argv]
    environ = job_env()
    environ.pop("PYTHONPATH", None)  # the installed mpicoll, as after make test
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=environ, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{shlex.join(argv)} ran past {TIMEOUT} s\n{out}\n{err}")
    assert proc.returncode == 0, out + err
    # the ranks' lines may interleave in mpiexec's forwarding: count what each rank prints
    assert out.count("[ 6. 10. 14.]") == 4, out
    assert out.count("'bytes_sent': ") == 4, out
