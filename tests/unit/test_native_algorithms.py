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
    # MPICH's bcast tree is k-ary unless told: forced with the settings of its twin's tree
    (tree,) = launch.native_configs("mpich", ["bcast"], ["tree"])
    assert tree.env["MPIR_CVAR_BCAST_TREE_TYPE"] == "knomial_1"
    assert twins.p2p_twin("bcast", "tree", "mpich") == "knomial"
    assert "MPIR_CVAR_BCAST_TREE_TYPE" not in every[0].env
    ompi = launch.native_configs("openmpi", ["allreduce", "bcast"], ["ring", "binomial"])
    assert ompi[0].flags == ["--mca", "coll", launch.OMPI_EXCLUDE, "--mca", "coll_base_verbose",
                             "9", "--mca", "coll_tuned_use_dynamic_rules", "1",
                             "--mca", "coll_tuned_allreduce_algorithm", "4"]
    assert ompi[1].flags[-2:] == ["coll_tuned_bcast_algorithm", "6"]
    assert ompi[0].env == {}
    # two_proc fails at every call at P != 2 (coll/base): not launched there
    names = [c.native for c in launch.native_configs("openmpi", ["allgather"], ["all"], p=4)]
    assert "two_proc" not in names
    assert "ring" in names
    assert "two_proc" in [c.native for c in launch.native_configs("openmpi", ["allgather"],
                                                                  ["all"], p=2)]


def test_ompi_table_and_fallbacks() -> None:
    """The tuned table covers the 15 collectives tuned forces (IDs from 1, no gaps: the enum
    tables); coll/base's silent fallbacks at their documented conditions."""
    assert set(twins.OMPI) == set(twins.MPICH) - {"gatherv", "scatterv", "alltoallw"}
    for coll, table in twins.OMPI.items():
        assert sorted(table) == list(range(1, len(table) + 1)), coll
    for coll, name in twins.OMPI_FALLBACKS:
        assert name in twins.OMPI[coll].values(), (coll, name)
    assert twins.ompi_ran("allgather", "recursive_doubling", 4, 1) == ("recursive_doubling", None)
    assert twins.ompi_ran("allgather", "recursive_doubling", 6, 1)[0] == "bruck"
    assert twins.ompi_ran("allreduce", "ring", 4, 3)[0] == "recursive_doubling"
    assert twins.ompi_ran("allreduce", "ring", 4, 4) == ("ring", None)
    assert twins.ompi_ran("allreduce", "rabenseifner", 6, 4) == ("rabenseifner", None)
    assert twins.ompi_ran("allreduce", "rabenseifner", 6, 3)[0] == "basic_linear"
    assert twins.ompi_ran("allreduce", "rabenseifner", 6, 99, False)[0] == "basic_linear"
    assert twins.ompi_ran("alltoall", "two_proc", 3, 5)[0] is None
    assert twins.ompi_ran("bcast", "binomial", 3, 0) == ("binomial", None)


def test_ompi_selection() -> None:
    text = ("[vm:1] coll:base:comm_select: selecting       tuned, priority  30, Enabled\n"
            "[vm:1] coll:base:comm_select: selecting          sm, priority   0, Disabled\n"
            "[vm:1] coll:base:comm_select: selecting       basic, priority  10, Enabled\n")
    assert launch.ompi_selection(text) == \
        "coll_base_verbose: enabled tuned 30, basic 10: tuned serves the forced collective"
    assert "NOT" in str(launch.ompi_selection(
        text + "coll:base:comm_select: selecting         han, priority  35, Enabled\n"))
    assert launch.ompi_selection("nothing") is None


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
    (["--native-algorithms", "all", "--persistent", "-c", "allreduce"], "not with"),
    (["--native-algorithms", "recursive_multiplying", "--nonblocking", "-c", "allreduce"],
     "unknown"),
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


#: The library's twins of p2p rabenseifner, binomial and bruck (allreduce, bcast, allgather).
_BENCH_NAMES = {"mpich": ("reduce_scatter_allgather", "binomial", "brucks"),
                "openmpi": ("rabenseifner", "binomial", "bruck")}


@pytest.mark.skipif(LAUNCHER is None or KIND not in _BENCH_NAMES,
                    reason="no mpiexec, or a library mpicoll cannot force")
def test_forced_algorithms_ran_in_bench(tmp_path: Path) -> None:
    """``bench --native-algorithms`` at P = 4, one forced algorithm per collective (allreduce
    rabenseifner's twin, bcast binomial's, allgather bruck's), each in its own launch: the
    forced name ran at the sizes it can run, and the library's fallback is recorded at 1 and
    2 elements, where it cannot (needs count >= 4 = pof2(P)): MPICH's own notice, Open MPI's
    coll/base rule (its launch's coll_base_verbose shows tuned selected); the JSON validates;
    the ratios pair the twins."""
    allreduce, bcast_name, allgather = _BENCH_NAMES[KIND]
    # the p2p twin of the library's binomial: binomial (MPICH), bmtree (Open MPI's tree)
    bcast_p2p = twins.p2p_twin("bcast", bcast_name, KIND)
    out = tmp_path / "n.json"
    r = subprocess.run(
        [sys.executable, "-m", "mpicoll", "bench", "--native-algorithms",
         allreduce, bcast_name, allgather, "-n", "4",
         "-c", "allreduce,bcast,allgather", "-a", f"rabenseifner,{bcast_p2p},bruck",
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
            if KIND == "mpich":
                assert x["native_ran"] == "auto", x
                assert "cannot be applied" in x["native_ran_evidence"]
            else:
                assert x["native_ran"] == "basic_linear", x
                assert "coll_base_allreduce.c" in x["native_ran_evidence"]
        else:
            assert x["native_ran"] == x["native_algorithm"], x
    colls = {(c, i) for c, i, _ in forced}
    assert colls == {("allreduce", f"native:{allreduce}"), ("bcast", f"native:{bcast_name}"),
                     ("allgather", f"native:{allgather}")}
    pairs = {(x["collective"], x["p2p"], x["native"]) for x in doc["native_algorithms"]["ratios"]}
    assert pairs == {("allreduce", "rabenseifner", f"native:{allreduce}"),
                     ("bcast", bcast_p2p, f"native:{bcast_name}"),
                     ("allgather", "bruck", f"native:{allgather}")}
    n = sum(1 for c, _, _ in forced if c == "allgather")
    assert f"native:{allgather} ran as forced at {n} of {n} size(s)" in r.stdout
    assert f"native:{allreduce} ran as forced at 2 of 4 size(s); fell back" in r.stdout
    evidence = [ln["evidence"] for ln in doc["provenance"]["launches"] if ln["native"]]
    if KIND == "openmpi":
        assert len(evidence) == 3
        assert all("tuned serves the forced collective" in str(e) for e in evidence), evidence
    else:
        assert evidence == [None, None, None]


def test_nonblocking_tables_and_configs() -> None:
    """The I-forms: MPICH's MPIR_CVAR_I<COLL>_INTRA_ALGORITHM, Open MPI's libnbc IDs; the
    twins of the I-forms (sched_ before tsp_)."""
    (cfg,) = launch.native_configs("mpich", ["allreduce"], ["tsp_ring"], nonblocking=True)
    assert cfg.env["MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM"] == "tsp_ring"
    assert "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM" not in cfg.env
    assert [c.native for c in launch.native_configs("mpich", ["exscan"], ["all"],
                                                    nonblocking=True)] == \
        ["sched_recursive_doubling"]
    (cfg,) = launch.native_configs("openmpi", ["allreduce", "bcast"], ["binomial"],
                                   nonblocking=True)
    assert cfg.flags[-4:] == ["--mca", "coll_libnbc_iallreduce_algorithm", "2",
                              "--mca", "coll_libnbc_ibcast_algorithm", "2"][-4:]
    assert "coll_tuned_use_dynamic_rules" not in cfg.flags
    assert set(twins.MPICH_NB) == set(twins.MPICH)
    assert twins.twin("allgather", "ring", "mpich", nonblocking=True) == "sched_ring"
    assert twins.twin("allreduce", "ring", "mpich", nonblocking=True) == "tsp_ring"
    assert twins.twin("allreduce", "ring", "openmpi", nonblocking=True) == "ring"
    assert twins.twin("alltoall", "pairwise", "openmpi", nonblocking=True) is None
    text = "Iallreduce tsp_ring cannot be applied.\n"
    assert launch.fallback_message(text, "allreduce", nonblocking=True) == \
        "Iallreduce tsp_ring cannot be applied"
    assert launch.fallback_message(text, "allreduce") is None


_NB_NAMES = {"mpich": ("sched_reduce_scatter_allgather", "sched_ring"),
             "openmpi": ("rabenseifner", "recursive_doubling")}


@pytest.mark.skipif(LAUNCHER is None or KIND not in _NB_NAMES,
                    reason="no mpiexec, or a library mpicoll cannot force")
def test_forced_nonblocking_algorithms_in_bench(tmp_path: Path) -> None:
    """``bench --nonblocking --native-algorithms`` at P = 4: the I-form's forced algorithm
    ran (MPICH: no "Iallreduce ... cannot be applied" notice where it applies, the notice at
    1 and 2 elements, where sched_reduce_scatter_allgather cannot run); Open MPI: libnbc
    forced, right results, native_ran unknown (libnbc does not say); the JSON validates."""
    allreduce, allgather = _NB_NAMES[KIND]
    out = tmp_path / "nb.json"
    r = subprocess.run(
        [sys.executable, "-m", "mpicoll", "bench", "--nonblocking", "--native-algorithms",
         allreduce, allgather, "-n", "4", "-c", "allreduce,allgather", "-a", "ring",
         "-m", "8:64", "-i", "2", "-x", "1", "--json", str(out), "-q"],
        capture_output=True, text=True, timeout=TIMEOUT, env=job_env(), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert bench.validate(doc) == []
    forced = [x for x in doc["results"] if x.get("native_algorithm")]
    assert {(x["collective"], x["native_algorithm"]) for x in forced} == {
        (c, n) for c in ("allreduce", "allgather") for n in (allreduce, allgather)
        if n in launch.native_names(KIND, c, nonblocking=True)}
    for x in forced:
        assert x["status"] == "ok", x
        assert x["nonblocking"] is True
        if KIND == "openmpi":
            assert x["native_ran"] is None, x
            assert "coll_libnbc_i" in x["native_ran_evidence"]
        elif x["native_algorithm"] == allreduce and x["count"] < 4:
            assert x["native_ran"] == "auto", x
            assert "Iallreduce sched_reduce_scatter_allgather cannot be applied" in \
                x["native_ran_evidence"]
        else:
            assert x["native_ran"] == x["native_algorithm"], x
    if KIND == "mpich":
        pairs = {(x["collective"], x["p2p"], x["native"])
                 for x in doc["native_algorithms"]["ratios"]}
        assert pairs == {("allgather", "ring", "native:sched_ring")}


# ---- one forced algorithm per collective, in a child launch of plain mpi4py -------------------

PROBE = Path(__file__).with_name("_native_probe.py")

#: Open MPI at P = 4: per collective, a forced tuned algorithm and the internal point-to-point
#: traffic it alone makes (``pml_monitoring_enable 2``: (sender, receiver, messages)), each
#: unlike the library's default choice there (measured with the 5.0.11 wheel).
def _ring(msgs: int) -> set[tuple[int, int, int]]:
    return {(r, (r + 1) % 4, msgs) for r in range(4)}


OMPI_SIGNATURES: dict[str, tuple[str, set[tuple[int, int, int]]]] = {
    "allreduce": ("ring", _ring(6)),  # P-1 reduce-scatter + P-1 allgather steps to the right
    "bcast": ("basic_linear", {(0, j, 1) for j in (1, 2, 3)}),  # default binomial: 1 -> 3
    "reduce": ("linear", {(j, 0, 1) for j in (1, 2, 3)}),  # default binary: 3 -> 1
    "allgather": ("ring", _ring(3)),  # default recursive doubling: r -> r^1, r^2
    "allgatherv": ("ring", _ring(3)),
    "alltoall": ("modified_bruck", {(r, (r + d) % 4, 1) for r in range(4) for d in (1, 2)}),
    "alltoallv": ("pairwise", {(r, (r + d) % 4, 1) for r in range(4) for d in range(4)}),
    "barrier": ("double_ring", _ring(2)),  # default: linear to and from 0
    "reduce_scatter": ("ring", _ring(3)),  # default recursive halving
    # a binary-tree reduce to 0, then a binomial scatter (default recursive halving)
    "reduce_scatter_block": ("basic_linear", {(1, 0, 1), (2, 0, 1), (3, 1, 1), (0, 1, 1),
                                              (0, 2, 1), (2, 3, 1)}),
    "gather": ("basic_linear", {(j, 0, 1) for j in (1, 2, 3)}),  # default binomial: 3 -> 2
    "scatter": ("basic_linear", {(0, j, 1) for j in (1, 2, 3)}),  # default binomial: 2 -> 3
    "scan": ("recursive_doubling", {(r, r ^ d, 1) for r in range(4) for d in (1, 2)}),
    "exscan": ("recursive_doubling", {(r, r ^ d, 1) for r in range(4) for d in (1, 2)}),
}

#: MPICH: per collective, a forced algorithm that applies at P = 4 to the probe's call.
MPICH_FORCED = {
    "barrier": "k_dissemination", "bcast": "scatter_ring_allgather", "gather": "binomial",
    "gatherv": "linear", "scatter": "binomial", "scatterv": "linear", "allgather": "ring",
    "allgatherv": "ring", "alltoall": "pairwise", "alltoallv": "scattered",
    "alltoallw": "scattered", "reduce": "reduce_scatter_gather",
    "allreduce": "ring", "reduce_scatter": "recursive_halving",
    "reduce_scatter_block": "pairwise", "scan": "recursive_doubling",
    "exscan": "recursive_doubling",
}


def _probe(coll: str, p: int, cfg: launch.Config | None, tmp: Path
           ) -> tuple[subprocess.CompletedProcess[str], set[tuple[int, int, int]]]:
    """Run the plain-mpi4py probe of ``coll`` on ``p`` ranks under ``cfg``'s settings (None:
    the library's defaults); Open MPI: with the traffic monitor, whose internal counts are
    returned as (sender, receiver, messages)."""
    assert LAUNCHER is not None
    flags = list(cfg.flags) if cfg else []
    env = job_env()
    env.update(cfg.env if cfg else {})
    if KIND == "openmpi":
        flags += ["--mca", "coll", launch.OMPI_EXCLUDE, "--mca", "pml_monitoring_enable", "2",
                  "--mca", "pml_monitoring_enable_output", "3",
                  "--mca", "pml_monitoring_filename", str(tmp / f"mon-{coll}")]
    r = subprocess.run([*LAUNCHER, *flags, "-n", str(p), sys.executable, str(PROBE), coll],
                       capture_output=True, text=True, timeout=180, env=env, check=False)
    traffic = set()
    for f in tmp.glob(f"mon-{coll}.*.prof"):
        for line in f.read_text().splitlines():
            parts = line.split("\t")
            if parts[0] == "I":
                traffic.add((int(parts[1]), int(parts[2]), int(parts[4].split()[0])))
    return r, traffic


@pytest.mark.skipif(LAUNCHER is None or KIND not in ("mpich", "openmpi"),
                    reason="no mpiexec, or a library mpicoll cannot force")
@pytest.mark.parametrize("coll", sorted(MPICH_FORCED))
def test_forced_algorithm_ran_per_collective(coll: str, tmp_path: Path) -> None:
    """One forced algorithm per collective, in its own launch of a plain mpi4py call at
    P = 4, with the launcher's settings (:func:`launcher.native_configs`), right result, and
    the library's own evidence that the forced algorithm ran.  MPICH: no "cannot be applied"
    notice (``MPIR_CVAR_COLLECTIVE_FALLBACK=print``).  Open MPI: the call's point-to-point
    traffic (``pml_monitoring``) is the forced algorithm's (and not the default's)."""
    if KIND == "openmpi" and coll not in OMPI_SIGNATURES:
        assert coll not in twins.OMPI  # tuned has no algorithms for gatherv/scatterv/alltoallw
        return
    name = MPICH_FORCED[coll] if KIND == "mpich" else OMPI_SIGNATURES[coll][0]
    (cfg,) = launch.native_configs(KIND, [coll], [name], p=4)
    r, traffic = _probe(coll, 4, cfg, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cannot be applied" not in r.stderr, r.stderr
    if KIND == "openmpi":
        assert traffic == OMPI_SIGNATURES[coll][1], sorted(traffic)


@pytest.mark.skipif(LAUNCHER is None or KIND != "mpich", reason="MPICH's settings only")
def test_mpich_settings_are_accepted(tmp_path: Path) -> None:
    """Every :data:`twins.MPICH_SETTINGS` entry, forced as the launcher forces it at P = 4:
    the probe's result is right and MPICH takes the settings (no fallback notice, no error).
    MPICH ignores a value it does not know, so the values themselves are checked against the
    CVAR help text in :data:`twins.MPICH_SETTINGS`' comment (kary, knomial_1, knomial_2)."""
    for coll, name in twins.MPICH_SETTINGS:
        (cfg,) = launch.native_configs("mpich", [coll], [name], p=4)
        r, _ = _probe(coll, 4, cfg, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cannot be applied" not in r.stderr, r.stderr


@pytest.mark.skipif(LAUNCHER is None or KIND not in ("mpich", "openmpi"),
                    reason="no mpiexec, or a library mpicoll cannot force")
def test_forced_algorithm_evidence_is_a_real_signal(tmp_path: Path) -> None:
    """The negative controls: MPICH writes its notice where the forced algorithm cannot run
    (allgather recursive_doubling at P = 3); Open MPI's default allreduce at P = 4 makes other
    traffic than the forced ring (recursive doubling: r -> r^1, r^2)."""
    if KIND == "mpich":
        (cfg,) = launch.native_configs(KIND, ["allgather"], ["recursive_doubling"])
        r, _ = _probe("allgather", 3, cfg, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert launch.fallback_message(r.stderr, "allgather") == \
            "Allgather recursive_doubling cannot be applied"
    else:
        r, traffic = _probe("allreduce", 4, None, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert traffic == {(q, q ^ d, 1) for q in range(4) for d in (1, 2)}
