"""Open MPI's default choice, run: the library's own call with nothing forced makes the same
point-to-point messages (sender, receiver, count: the ``pml_monitoring`` traffic monitor) as
mpicoll's p2p twin of what :func:`mpicoll.algorithms.native_defaults.library_default` says it
picks, at P = 4 and 5 on this one node (tuned decides: han disqualifies itself).  The
probe's call: 8 float64 per block, MPI.SUM, root 0 (``_native_probe.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _launch import job_env, launcher

from mpicoll.algorithms.native_defaults import library_default
from mpicoll.tools import launcher as launch

KIND, _ = launch.library()
LAUNCHER = launcher()
PROBE = Path(__file__).with_name("_native_probe.py")


def _traffic(coll: str, p: int, tmp: Path, twin: str | None, repeat: int = 1
             ) -> dict[tuple[int, int], int]:
    """(sender, receiver) -> messages of the probe's ``repeat`` calls: the library's (internal
    traffic) or, with ``twin``, mpicoll's p2p algorithm ``twin`` (external traffic)."""
    assert LAUNCHER is not None
    env = job_env()
    tag = f"{coll}-{p}-{twin or 'native'}-{repeat}".replace(":", "_")
    env["MPICOLL_PROBE_REPEAT"] = str(repeat)
    if twin is not None:
        env.update({"MPICOLL_PROBE_P2P": "1", f"MPICOLL_{coll.upper()}_ALGORITHM": twin})
    flags = ["--mca", "coll", launch.OMPI_EXCLUDE, "--mca", "pml_monitoring_enable", "2",
             "--mca", "pml_monitoring_enable_output", "3",
             "--mca", "pml_monitoring_filename", str(tmp / f"mon-{tag}")]
    r = subprocess.run([*LAUNCHER, *flags, "-n", str(p), sys.executable, str(PROBE), coll],
                       capture_output=True, text=True, timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    kind = "E" if twin is not None else "I"
    out = {}
    for f in tmp.glob(f"mon-{tag}.*.prof"):
        for line in f.read_text().splitlines():
            parts = line.split("\t")
            if parts[0] == kind:
                out[(int(parts[1]), int(parts[2]))] = int(parts[4].split()[0])
    return out


def _one_call(coll: str, p: int, tmp: Path, twin: str) -> dict[tuple[int, int], int]:
    """The p2p twin's messages of one call: two calls' less one call's (mpicoll's set-up,
    the first call's, sends messages of its own)."""
    one, two = _traffic(coll, p, tmp, twin, 1), _traffic(coll, p, tmp, twin, 2)
    diff = {k: two.get(k, 0) - one.get(k, 0) for k in two.keys() | one.keys()}
    return {k: v for k, v in diff.items() if v}


@pytest.mark.skipif(LAUNCHER is None or KIND != "openmpi", reason="Open MPI's traffic monitor")
@pytest.mark.parametrize("p", [4, 5])
@pytest.mark.parametrize("coll", ["allreduce", "bcast", "reduce", "allgather", "alltoall",
                                  "barrier", "reduce_scatter_block", "gather", "scatter"])
def test_default_makes_the_twins_messages(coll: str, p: int, tmp_path: Path) -> None:
    """The library's messages (nothing forced) are those of the twin of
    :func:`library_default`'s pick, pair by pair, message counts included (bcast's binomial:
    p2p bmtree, whose tree sends 1 -> 3 at P = 4 as Open MPI's does, not p2p binomial's
    2 -> 3)."""
    count = 0 if coll == "barrier" else 8
    d = library_default("openmpi", coll, p, count, 8, ranks_per_node=p)
    assert d.p2p is not None, d
    native = _traffic(coll, p, tmp_path, None)
    assert native, "the monitor saw no message"
    assert _one_call(coll, p, tmp_path, d.p2p) == native, (d, sorted(native.items()))
