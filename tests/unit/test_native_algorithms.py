"""``bench --native-algorithms``: the twin table, the launcher, the option, a forced launch.

The end-to-end test starts ``python -m mpicoll bench --native-algorithms ... -n 4`` (the
driver, no mpiexec around it), which launches one ``mpiexec -n 4`` per forced MPICH algorithm,
and checks from MPICH's own fallback notices that each forced algorithm ran (and that the
notice does appear where the forced algorithm cannot run: the negative control).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _launch import job_env, launcher

from mpicoll.algorithms import registry, twins
from mpicoll.tools import bench, cli
from mpicoll.tools import launcher as launch

KIND, VERSION = launch.library()
TIMEOUT = 420


def test_twin_table_names_real_entries() -> None:
    """Every twin row names a registered p2p algorithm, an MPICH catalog name, an Open MPI
    ID of its table; the registry's look-up reads the same table."""
    for (coll, name), (mpich, ompi) in twins.TWINS.items():
        registry.get(coll, name)
        assert mpich is None or mpich in twins.MPICH[coll], (coll, name, mpich)
        assert ompi is None or ompi in twins.OMPI[coll], (coll, name, ompi)
        assert twins.p2p_twin(coll, mpich, "mpich") == name if mpich else True
    assert registry.twins("allreduce", "rabenseifner") == {
        "mpich": "reduce_scatter_allgather", "openmpi": "rabenseifner"}
    assert registry.twins("allgather", "bruck") == {"mpich": "brucks", "openmpi": "bruck"}
    assert registry.twins("gatherv", "linear")["openmpi"] is None


def test_native_configs_mpich_and_openmpi() -> None:
    cfgs = launch.native_configs("mpich", ["allreduce", "allgather"], ["ring", "brucks"])
    assert [c.name for c in cfgs] == ["native:ring", "native:brucks"]
    assert cfgs[0].collectives == ["allreduce", "allgather"]
    assert cfgs[0].env == {"MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                           "MPIR_CVAR_COLLECTIVE_FALLBACK": "print",
                           "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring",
                           "MPIR_CVAR_ALLGATHER_INTRA_ALGORITHM": "ring"}
    assert cfgs[0].flags == []
    every = launch.native_configs("mpich", ["bcast"], ["all"])
    assert [c.native for c in every] == list(twins.MPICH["bcast"])
    ompi = launch.native_configs("openmpi", ["allreduce", "bcast"], ["ring", "binomial"])
    assert ompi[0].flags == ["--mca", "coll_tuned_use_dynamic_rules", "1",
                             "--mca", "coll_tuned_allreduce_algorithm", "4"]
    assert ompi[1].flags[-2:] == ["coll_tuned_bcast_algorithm", "6"]
    assert ompi[0].env == {}


def test_fallback_message() -> None:
    text = ("noise\nUser set collective algorithm is not usable for the provided arguments\n"
            "Allreduce reduce_scatter_allgather cannot be applied.\n")
    assert launch.fallback_message(text, "allreduce") == \
        "Allreduce reduce_scatter_allgather cannot be applied"
    assert launch.fallback_message(text, "allgather") is None
    assert launch.fallback_message("", "allreduce") is None


def test_child_args_drop_what_the_driver_handles() -> None:
    argv = ["--native-algorithms", "ring", "brucks", "-n", "4", "-c", "allreduce", "--json",
            "x.json", "-q", "-m", "8:64", "--launch-timeout=60", "--plot", "p.png"]
    assert bench._child_args(argv) == ["-c", "allreduce", "-m", "8:64"]


def _launch(cfg_name: str, native: str | None, records: list[dict[str, Any]],
            status: int = 0) -> launch.Launch:
    doc = {"provenance": {"P": 4}, "settings": {}, "results": records, "skipped": [],
           "summary": [], "wrong": 0, "schema": "mpicoll-bench/1"}
    return launch.Launch(launch.Config(cfg_name, native=native), status, 1.0, doc, "")


def _rec(impl: str, backend: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"collective": "allreduce", "pattern": "numpy", "size_bytes": 8, "count": 1,
            "implementation": impl, "backend": backend, "algorithm": kw.pop("algorithm", None),
            "status": "ok", "time_us": {"median": t}, "algbw_gbps": None, "busbw_gbps": None,
            **kw}


def test_merge_and_ratios() -> None:
    """The parts' records in one document, the default native stays the speed-up's
    reference, the same-algorithm ratio pairs p2p ring with native:ring."""
    a = _launch("default", None, [_rec("native", "native", 10.0),
                                  _rec("ring", "p2p", 30.0, algorithm="ring")])
    b = _launch("native:ring", "ring", [_rec("native:ring", "native", 20.0,
                                             native_algorithm="ring", native_ran="ring")])
    c = launch.Launch(launch.Config("native:tree", native="tree"), 124, 5.0, None, "timed out")
    doc = launch.merge([a, b, c], "mpich", "MPICH Version: 5")
    assert [r["implementation"] for r in doc["results"]] == ["native", "ring", "native:ring"]
    assert [ln["status"] for ln in doc["provenance"]["launches"]] == [0, 0, 124]
    assert doc["provenance"]["launches"][2]["error"] == "timed out"
    (row,) = doc["summary"]
    assert row["speedup_best_p2p_vs_native"] == pytest.approx(10.0 / 30.0)
    (ratio,) = bench.same_algorithm_ratios(doc["results"], "mpich")
    assert (ratio["p2p"], ratio["native"], ratio["ratio"]) == ("ring", "native:ring", 1.5)
    with pytest.raises(ValueError, match="no launch wrote results"):
        launch.merge([c], "mpich", "v")


@pytest.mark.parametrize(("argv", "message"), [
    (["--native-algorithms", "no_such", "-c", "allreduce"], "unknown"),
    (["-n", "4", "-c", "allreduce"], "only with --native-algorithms"),
    (["--native-algorithms", "all", "-n", "0", "-c", "allreduce"], "must be >= 1"),
    (["--native-algorithms", "all", "--nonblocking", "-c", "allreduce"], "not with"),
])
def test_option_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                        ) -> None:
    assert cli.run(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


LAUNCHER = launcher()


@pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")
def test_option_refused_under_mpiexec_on_every_rank() -> None:
    """Under mpiexec -n 2: a bad name, and the driver itself, are usage errors (status 2 on
    every rank, one message)."""
    assert LAUNCHER is not None
    for extra, message in ((["no_such"], "unknown"), (["all"], "without mpiexec")):
        r = subprocess.run([*LAUNCHER, "-n", "2", sys.executable, "-m", "mpicoll", "bench",
                            "-c", "allreduce", "--native-algorithms", *extra],
                           capture_output=True, text=True, timeout=180, env=job_env(),
                           check=False)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.count("error:") == 1, r.stderr
        assert message in r.stderr, r.stderr


@pytest.mark.skipif(LAUNCHER is None or KIND != "mpich",
                    reason="the forced-algorithm proof reads MPICH's fallback notices "
                           "(Open MPI: issue 21, not done)")
def test_forced_mpich_algorithms_ran(tmp_path: Path) -> None:
    """One forced MPICH algorithm per collective at P = 4 (allreduce
    reduce_scatter_allgather, bcast binomial, allgather brucks), each in its own launch:
    MPICH wrote no fallback notice at the sizes the algorithm can run, and did write one
    where it cannot (reduce_scatter_allgather needs count >= 4: 1 and 2 elements), which
    shows the notice is a real signal; the JSON validates; the ratios pair the twins."""
    out = tmp_path / "n.json"
    r = subprocess.run(
        [sys.executable, "-m", "mpicoll", "bench", "--native-algorithms",
         "reduce_scatter_allgather", "binomial", "brucks", "-n", "4",
         "-c", "allreduce,bcast,allgather", "-a", "rabenseifner,binomial,bruck",
         "-m", "8:64", "-i", "2", "-x", "1", "--json", str(out), "-q"],
        capture_output=True, text=True, timeout=TIMEOUT, env=job_env(), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"# native library: {VERSION}" in r.stdout
    doc = json.loads(out.read_text())
    assert bench.validate(doc) == []
    forced = {(x["collective"], x["implementation"], x["count"]): x for x in doc["results"]
              if x.get("native_algorithm")}
    for (coll, _impl, count), x in forced.items():
        assert x["status"] == "ok", x
        if coll == "allreduce" and count < 4:
            assert x["native_ran"] == "auto", x
            assert "cannot be applied" in x["native_ran_evidence"]
        else:
            assert x["native_ran"] == x["native_algorithm"], x
    colls = {(c, i) for c, i, _ in forced}
    assert colls == {("allreduce", "native:reduce_scatter_allgather"),
                     ("bcast", "native:binomial"), ("allgather", "native:brucks")}
    pairs = {(x["collective"], x["p2p"], x["native"]) for x in doc["native_algorithms"]["ratios"]}
    assert pairs == {("allreduce", "rabenseifner", "native:reduce_scatter_allgather"),
                     ("bcast", "binomial", "native:binomial"),
                     ("allgather", "bruck", "native:brucks")}
    n = sum(1 for c, _, _ in forced if c == "allgather")
    assert f"native:brucks ran as forced at {n} of {n} size(s)" in r.stdout
    assert "native:reduce_scatter_allgather ran as forced at 2 of 4 size(s); fell back" in \
        r.stdout
