"""Starting an MPI job from a single-process test: the launcher, and a clean environment."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Variables a launcher or an initialised MPI leaves in this process's environment, which would
# make the child believe it belongs to this process's (singleton) job.
_JOB_VARS = ("PMI_", "PMIX_", "HYDRA_", "MPI_LOCAL", "OMPI_COMM_WORLD", "OMPI_MCA_ess",
             "OMPI_MCA_orte", "OMPI_MCA_pmix", "OMPI_UNIVERSE", "OMPI_FIRST", "OMPI_NUM",
             "OMPI_APP", "OMPI_FILE", "PRTE_", "OMPI_MCA_prte")


def launcher() -> list[str] | None:
    """``[mpiexec, flags...]``: ``$MPIEXEC``, else the ``mpiexec`` next to this interpreter,
    else the first on ``PATH`` (with ``--oversubscribe`` for Open MPI); None if there is none."""
    if os.environ.get("MPIEXEC"):
        return shlex.split(os.environ["MPIEXEC"])
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = (out.stdout + out.stderr).lower()
    if "open mpi" in version or "openrte" in version or "open-mpi" in version:
        return [exe, "--oversubscribe"]
    return [exe]


def job_env(*paths: str | None) -> dict[str, str]:
    """This environment minus inherited launcher state, with ``paths`` and the repository on
    ``PYTHONPATH``, unbuffered output, and Open MPI's run-as-root permission when root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_JOB_VARS)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (*paths, str(REPO), env.get("PYTHONPATH")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root without these
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env
