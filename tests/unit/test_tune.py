"""``mpicoll tune``: the three files from a sweep document (well-formed, complete, guarded,
the classic Open MPI format), mpicoll's table driving ``auto``, and the MPICH tree loaded by
the library at MPI_Init with the chosen algorithm shown to run (an op that is neither
commutative nor associative but declared commutative gives each algorithm its own result:
the tree's result must be that of the same algorithm forced by its CVAR)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _launch import REPO, job_env
from _launch import launcher as find_mpiexec

from mpicoll.algorithms import registry
from mpicoll.model import selection
from mpicoll.tools import cli, tune
from mpicoll.tools.launcher import library


def rec(coll: str, size: int, impl: str, t: float, ran: str | None = "same",
        op: str | None = "sum") -> dict[str, Any]:
    """A timed record as bench writes it (the fields tune reads)."""
    native = impl.startswith("native")
    name = impl.split(":", 1)[1] if ":" in impl else None
    r: dict[str, Any] = {
        "collective": coll, "pattern": "numpy", "size_bytes": size, "count": size // 8,
        "op": op, "status": "ok", "time_us": {"median": t}, "implementation": impl,
        "backend": "native" if native else "p2p", "algorithm": None if native else impl,
        "persistent": False, "nonblocking": False}
    if name:
        r["native_algorithm"] = name
        r["native_ran"] = name if ran == "same" else ran
    return r


def sweep_doc(kind: str, runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"schema": "mpicoll-sweep/1",
            "provenance": {"library": {"kind": kind, "version": kind}, "date": "d",
                           "hostname": "h"},
            "runs": [{"P": p, "doc": {"results": recs}} for p, recs in sorted(runs.items())]}


def mpich_doc() -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {}
    for p in (2, 4):
        recs = []
        for size in (8, 64, 4096, 65536):
            big = size >= 4096
            recs += [rec("allreduce", size, "native", 10.0),
                     rec("allreduce", size, "native:recursive_doubling", 3.0 if not big else 9.0),
                     rec("allreduce", size, "native:ring", 5.0 if not big else 2.0),
                     # fastest of all, but needs a k the tree would have to give: never chosen
                     rec("allreduce", size, "native:tree", 1.0),
                     # fell back (MPICH said so): not a candidate
                     rec("allreduce", size, "native:reduce_scatter_allgather", 0.5, ran="auto"),
                     rec("bcast", size, "native", 4.0, op=None),
                     rec("bcast", size, "native:binomial", 3.0, op=None),
                     rec("bcast", size, "native:scatter_ring_allgather", 2.0 if big else 6.0,
                         op=None),
                     rec("allgather", size, "native:recursive_doubling", 1.0, op=None),
                     rec("allgather", size, "native:ring", 2.0, op=None),
                     rec("reduce_scatter_block", size, "native:pairwise", 1.0),
                     rec("reduce_scatter_block", size, "native:recursive_doubling", 2.0)]
        runs[p] = recs
    return sweep_doc("mpich", runs)


def walk(node: dict[str, Any], path: str, out: list[str]) -> None:
    """Every condition sibling list that does not end in =any (algorithm leaves and their
    parameters are not condition lists)."""
    keys = list(node)
    if not keys or keys[0].startswith(("algorithm=", "composition=")):
        return
    if not keys[-1].endswith("=any"):
        out.append(f"{path}: {keys}")
    for k, v in node.items():
        walk(v, f"{path}/{k}", out)


def test_mpich_tree_is_complete_guarded_and_ends_every_list_in_any() -> None:
    tree = json.loads(json.dumps(tune.emit_mpich(mpich_doc())))  # well-formed JSON
    assert set(tree) == {f"collective={c}" for c in tune.MPICH_SAFE}
    bad: list[str] = []
    for coll, branch in tree.items():
        assert list(branch) == ["comm_type=intra", "comm_type=any"], coll
        walk(branch, coll, bad)
    assert bad == []
    ar = tree["collective=allreduce"]["comm_type=intra"]
    assert list(ar) == ["comm_size<=2", "comm_size=any"]
    small = ar["comm_size<=2"]
    assert list(small) == ["avg_msg_size<4096", "avg_msg_size=any"]
    assert small["avg_msg_size<4096"] == {
        "algorithm=MPIR_Allreduce_intra_recursive_doubling": {}}
    # ring is for commutative ops only: a guard sends the others to recursive doubling
    assert small["avg_msg_size=any"] == {
        "is_commutative=no": {"algorithm=MPIR_Allreduce_intra_recursive_doubling": {}},
        "is_commutative=any": {"algorithm=MPIR_Allreduce_intra_ring": {}}}
    text = json.dumps(tree)
    assert "MPIR_Allreduce_intra_tree" not in text  # needs parameters
    assert "MPIR_Allreduce_intra_reduce_scatter_allgather" not in text  # MPICH fell back
    bc = tree["collective=bcast"]["comm_type=intra"]["comm_size=any"]
    assert list(bc) == ["avg_msg_size<4096", "avg_msg_size=any"]
    assert bc["avg_msg_size=any"] == {"algorithm=MPIR_Bcast_intra_scatter_ring_allgather": {}}
    # recursive doubling allgather needs P a power of two; total_msg_size is allgather's S
    ag = tree["collective=allgather"]["comm_type=intra"]["comm_size=any"]["total_msg_size=any"]
    assert ag == {"comm_size=pow2": {"algorithm=MPIR_Allgather_intra_recursive_doubling": {}},
                  "comm_size=any": {"algorithm=MPIR_Allgather_intra_brucks": {}}}
    # no size condition where MPICH defines none: one algorithm per P, guarded
    rsb = tree["collective=reduce_scatter_block"]["comm_type=intra"]["comm_size=any"]
    assert rsb == {"is_commutative=no": {
        "algorithm=MPIR_Reduce_scatter_block_intra_recursive_doubling": {}},
        "is_commutative=any": {"algorithm=MPIR_Reduce_scatter_block_intra_pairwise": {}}}
    # an untuned collective keeps one always-applicable algorithm, and its inter form
    assert tree["collective=gather"] == {
        "comm_type=intra": {"algorithm=MPIR_Gather_intra_binomial": {}},
        "comm_type=any": {"algorithm=MPIR_Gather_inter_linear": {}}}
    assert tree["collective=scan"]["comm_type=any"] == tree["collective=scan"]["comm_type=intra"]


def test_mpich_names_of_the_allcomm_algorithms() -> None:
    """MPICH's CVAR value nb is the container MPIR_<Coll>_allcomm_nb (one for intra and
    inter), gatherv's linear MPIR_Gatherv_allcomm_linear; the others are intra ones."""
    assert tune._mpich_leaf("allreduce", "nb") == {"algorithm=MPIR_Allreduce_allcomm_nb": {}}
    assert tune._mpich_leaf("bcast", "nb") == {"algorithm=MPIR_Bcast_allcomm_nb": {}}
    assert tune._mpich_leaf("gatherv", "linear") == {"algorithm=MPIR_Gatherv_allcomm_linear": {}}
    assert tune._mpich_leaf("bcast", "binomial") == {"algorithm=MPIR_Bcast_intra_binomial": {}}


def test_mpich_guard_for_count_below_pof2() -> None:
    leaf = tune._mpich_leaf("allreduce", "reduce_scatter_allgather")
    safe = {"algorithm=MPIR_Allreduce_intra_recursive_doubling": {}}
    assert leaf == {"is_op_built_in=no": safe, "is_op_built_in=any": {
        "count<pow2": safe,
        "count=any": {"algorithm=MPIR_Allreduce_intra_reduce_scatter_allgather": {}}}}


def ompi_doc() -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {}
    for p in (3, 2):
        recs = []
        for size in (8, 64, 1024, 65536):
            recs += [rec("allreduce", size, "native", 10.0),
                     rec("allreduce", size, "native:recursive_doubling", 3.0),
                     rec("allreduce", size, "native:ring", 1.0 if size >= 1024 else 4.0),
                     # rabenseifner: commutative ops only in coll/base
                     rec("allreduce", size, "native:rabenseifner", 0.5 if size >= 64 else 9.0),
                     rec("bcast", size, "native:binomial", 2.0, op=None),
                     rec("bcast", size, "native:pipeline", 1.0 if size == 64 else 3.0,
                         op=None),
                     rec("barrier", 0, "native:bruck", 1.0, op=None)]
        runs[p] = recs
    return sweep_doc("openmpi", runs)


def parse_classic(text: str) -> list[tuple[int, list[tuple[int, list[tuple[int, int]]]]]]:
    """Open MPI's classic reader, in Python: numbers only, '#' to the end of a line is a
    comment; returns [(collective ID, [(P, [(size, alg)])])] and checks the counts."""
    nums = [int(t) for line in text.splitlines() for t in line.split("#")[0].split()]
    it = iter(nums)
    out = []
    for _ in range(next(it)):
        cid, blocks = next(it), []
        for _ in range(next(it)):
            p, rules = next(it), []
            for _ in range(next(it)):
                size, alg, fan, seg = next(it), next(it), next(it), next(it)
                assert (fan, seg) == (0, 0)
                rules.append((size, alg))
            blocks.append((p, rules))
        out.append((cid, blocks))
    assert next(it, None) is None
    return out


def test_ompi_rules_file_classic_format() -> None:
    rules = parse_classic(tune.emit_ompi(ompi_doc()))
    by = dict(rules)
    assert set(by) == {tune.OMPI_IDS["allreduce"], tune.OMPI_IDS["bcast"],
                       tune.OMPI_IDS["barrier"]}
    for _, blocks in rules:
        ps = [p for p, _ in blocks]
        assert ps == sorted(ps)
        for _, rs in blocks:
            sizes = [s for s, _ in rs]
            assert sizes[0] == 0
            assert sizes == sorted(set(sizes))
    # allreduce: rabenseifner (commutative only) is left out; ring from 1024 B (IDs: 3
    # recursive doubling, 4 ring, 6 rabenseifner)
    assert by[2] == [(2, [(0, 3), (1024, 4)]), (3, [(0, 3), (1024, 4)])]
    assert by[7] == [(2, [(0, 6), (64, 3), (1024, 6)]), (3, [(0, 6), (64, 3), (1024, 6)])]
    assert by[6] == [(2, [(0, 4)]), (3, [(0, 4)])]
    asked = dict(parse_classic(tune.emit_ompi(ompi_doc(), commutative_only=True)))
    assert asked[2] == [(2, [(0, 3), (64, 6)]), (3, [(0, 3), (64, 6)])]


def test_mpicoll_table_drives_auto(tmp_path: Path) -> None:
    runs = {2: [rec("allreduce", s, a, t) for s in (8, 4096)
                for a, t in (("recursive_doubling", 1.0 if s == 8 else 5.0),
                             ("ring", 3.0 if s == 8 else 2.0), ("auto", 4.0))]}
    table = tune.emit_mpicoll(sweep_doc("mpich", runs))
    assert table["rules"] == {"allreduce": [{"p_min": 2, "p_max": 2, "sizes": [
        {"min_bytes": 0, "algorithm": "recursive_doubling"},
        {"min_bytes": 4096, "algorithm": "ring"}]}]}
    path = tmp_path / "sel.json"
    path.write_text(json.dumps(table))
    before = registry.choose("allreduce", 2, 1 << 20).name
    try:
        selection.use(selection.load(path))
        assert registry.choose("allreduce", 2, 8).name == "recursive_doubling"
        assert registry.choose("allreduce", 2, 4095).name == "recursive_doubling"
        assert registry.choose("allreduce", 2, 1 << 20).name == "ring"
        # outside the table's P range: as without it
        selection.use(None)
        want3 = registry.choose("allreduce", 3, 1 << 20).name
        selection.use(selection.load(path))
        assert registry.choose("allreduce", 3, 1 << 20).name == want3
        # a choice whose restrictions the call breaks is not taken
        ring = registry.get("allreduce", "ring")
        if ring.why_not(2, commutative=False) is not None:
            assert registry.choose("allreduce", 2, 1 << 20, commutative=False).name != "ring"
    finally:
        selection.use(None)
    assert registry.choose("allreduce", 2, 1 << 20).name == before
    for bad in ({"schema": "x"}, {"schema": selection.SCHEMA_ID, "rules": {"allreduce": [
            {"p_min": 2, "p_max": 2, "sizes": [{"min_bytes": 8, "algorithm": "ring"}]}]}},
            {"schema": selection.SCHEMA_ID, "rules": {"allreduce": [{"p_min": 2}]}}):
        with pytest.raises(ValueError):
            selection.from_dict(bad)


def test_tune_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s.json"
    src.write_text(json.dumps(mpich_doc()))
    out = tmp_path / "t.json"
    assert cli.main(["tune", str(src), "--emit", "mpich", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=" in text
    assert "P=2: 8B recursive_doubling 3.0 3.33x" in text
    assert json.loads(out.read_text()) == tune.emit_mpich(mpich_doc())
    assert cli.main(["tune", str(src), "--emit", "ompi", "-o", str(out)]) == 2
    assert "ompi needs a sweep made with openmpi, not mpich" in capsys.readouterr().err
    assert cli.main(["tune", str(src), "--emit", "mpicoll", "-o", str(out)]) == 1
    assert "no p2p measurement" in capsys.readouterr().out
    (tmp_path / "x.json").write_text("{}")
    assert cli.main(["tune", str(tmp_path / "x.json"), "--emit", "mpich", "-o",
                     str(out)]) == 2
    assert "is not a sweep file" in capsys.readouterr().err


def probe(env: dict[str, str], flags: list[str] | None = None) -> list[list[float]]:
    mpiexec = find_mpiexec()
    assert mpiexec is not None
    full = job_env()
    full.update(env)
    res = subprocess.run([*mpiexec, *(flags or []), "-n", "3", sys.executable,
                          str(REPO / "tests" / "unit" / "_tune_probe.py")],
                         env=full, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])  # type: ignore[no-any-return]


def tree_for(alg: str, other: str, kind: str) -> dict[str, Any]:
    return sweep_doc(kind, {3: [rec("allreduce", 8, f"native:{alg}", 1.0),
                                rec("allreduce", 8, f"native:{other}", 2.0)]})


@pytest.mark.skipif(find_mpiexec() is None or library()[0] != "mpich",
                    reason="the MPICH tree is loaded by MPICH (the Open MPI test is below)")
def test_mpich_tree_loads_and_its_algorithm_runs(tmp_path: Path) -> None:
    results = {}
    for alg, other in (("ring", "recursive_doubling"), ("recursive_doubling", "ring"),
                       ("nb", "ring")):
        path = tmp_path / f"{alg}.json"
        path.write_text(json.dumps(tune.emit_mpich(tree_for(alg, other, "mpich"))))
        tuned = probe({"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(path),
                       "MPIR_CVAR_DEVICE_COLLECTIVES": "none"})
        forced = probe({"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": alg,
                        "MPIR_CVAR_DEVICE_COLLECTIVES": "none"})
        assert tuned == forced, alg
        results[alg] = tuned
    assert results["ring"] != results["recursive_doubling"]  # the probe tells them apart


@pytest.mark.skipif(find_mpiexec() is None or library()[0] != "openmpi",
                    reason="the rules file is read by Open MPI's tuned (MPICH test above)")
def test_ompi_rules_load_and_their_algorithm_runs(tmp_path: Path) -> None:
    from mpicoll.tools.launcher import OMPI_EXCLUDE, ompi_id

    base = ["--mca", "coll", OMPI_EXCLUDE, "--mca", "coll_tuned_use_dynamic_rules", "1"]
    results = {}
    for alg, other in (("ring", "recursive_doubling"), ("recursive_doubling", "ring")):
        path = tmp_path / f"{alg}.rules"
        path.write_text(tune.emit_ompi(tree_for(alg, other, "openmpi"), commutative_only=True))
        tuned = probe({}, [*base, "--mca", "coll_tuned_dynamic_rules_filename", str(path)])
        forced = probe({}, [*base, "--mca", "coll_tuned_allreduce_algorithm",
                            str(ompi_id("allreduce", alg))])
        assert tuned == forced, alg
        results[alg] = tuned
    assert results["ring"] != results["recursive_doubling"]
    # a pruned rule (algorithm 0) leaves the call to tuned's fixed decision: the default's
    doc = tree_for("ring", "recursive_doubling", "openmpi")
    for r in doc["runs"][0]["doc"]["results"]:
        r["time_us"] = {"median": 50.0 if r["implementation"] == "native:ring" else 90.0,
                        "p10": 49.0 if r["implementation"] == "native:ring" else 89.0,
                        "p90": 51.0 if r["implementation"] == "native:ring" else 91.0}
    doc["runs"][0]["doc"]["results"].append(
        {**doc["runs"][0]["doc"]["results"][0], "implementation": "native",
         "native_algorithm": None, "native_ran": None,
         "time_us": {"median": 2.0, "p10": 1.0, "p90": 3.0}})
    path = tmp_path / "pruned.rules"
    path.write_text(tune.emit_ompi(doc, commutative_only=True))
    assert parse_classic(path.read_text()) == [(tune.OMPI_IDS["allreduce"], [(3, [(0, 0)])])]
    pruned = probe({}, [*base, "--mca", "coll_tuned_dynamic_rules_filename", str(path)])
    assert pruned == probe({}, base[:3]) != results["ring"]


def test_tune_check_compares_default_and_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from mpicoll.tools import launcher

    src = tmp_path / "s.json"
    doc = mpich_doc()
    doc["settings"] = {"bench_args": ["-c", "allreduce", "-m", "8:64"]}
    src.write_text(json.dumps(doc))
    seen: list[tuple[int, list[str], list[str]]] = []

    def fake(configs: list[launcher.Config], p: int, bench_args: list[str],
             **kw: Any) -> list[launcher.Launch]:
        seen.append((p, [c.name for c in configs], list(bench_args)))
        out = []
        for c in configs:
            tuned = c.name == "tuned"
            assert tuned == ("MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE" in c.env)
            recs = []
            for size, (lo, mid, hi) in ((8, (1, 2, 3) if tuned else (5, 6, 7)),
                                        (64, (4, 5, 6) if tuned else (1, 2, 3)),
                                        (512, (1, 2, 5) if tuned else (2, 3, 4))):
                r = rec("allreduce", size, "native", mid)
                r["time_us"] = {"median": mid, "min": lo, "max": hi, "p10": lo, "p90": hi}
                recs.append(r)
            out.append(launcher.Launch(c, 0, 1.0, {"results": recs}, ""))
        return out

    monkeypatch.setattr(launcher, "run", fake)
    status = cli.main(["tune", str(src), "--emit", "mpich", "-o", str(tmp_path / "t.json"),
                       "--check"])
    text = capsys.readouterr().out
    assert status == 1  # a size was slower
    assert seen == [(p, ["default", "tuned"], ["-c", "allreduce", "-m", "8:64", "-a", "none"])
                    for p in (2, 4)]
    assert "allreduce 8B: default 6.0 [5.0..7.0], tuned 2.0 [1.0..3.0]: faster" in text
    assert "allreduce 64B: default 2.0 [1.0..3.0], tuned 5.0 [4.0..6.0]: SLOWER" in text
    assert "allreduce 512B: default 3.0 [2.0..4.0], tuned 2.0 [1.0..5.0]: within noise" in text
    # the rule that lost at 64 B (recursive_doubling at both P) is pruned and the file rewritten
    assert "allreduce 64B: default 2.0 [1.0..3.0], tuned 5.0 [4.0..6.0]: SLOWER " \
        "(rule: recursive_doubling)" in text
    assert "2 rule(s) slower than the default beyond the noise: pruned" in text
    assert "allreduce P=2 64B: recursive_doubling 5.0 [4.0..6.0] us is slower than the " \
        "default's 2.0 [1.0..3.0] in --check" in text
    drop = {("allreduce", p, 64): "x" for p in (2, 4)}
    tree = json.loads((tmp_path / "t.json").read_text())
    assert tree == tune.emit_mpich(doc, drop) != tune.emit_mpich(doc)
    body = tree["collective=allreduce"]["comm_type=intra"]["comm_size<=2"]
    assert list(body) == ["avg_msg_size<64", "avg_msg_size<4096", "avg_msg_size=any"]
    assert body["avg_msg_size<4096"] == tune.MPICH_SAFE["allreduce"][0]


def spread(r: dict[str, Any], lo: float, mid: float, hi: float) -> dict[str, Any]:
    r["time_us"] = {"median": mid, "min": lo, "max": hi, "p10": lo, "p90": hi}
    return r


def pruning_doc(kind: str) -> dict[str, Any]:
    """P = 2, allreduce: ring wins at 8 and 64 B; recursive_doubling, the fastest forced one at
    512 and 1024 B, is slower than the default beyond the noise there (pruned, one range);
    at 4096 B within the noise (kept).  The p2p columns the same, ``auto`` the default."""
    a, b = ("ring", "recursive_doubling")
    table = {8: ((1, 2, 3), (4, 5, 6), (5, 6, 7)), 64: ((1, 2, 3), (4, 5, 6), (5, 6, 7)),
             512: ((20, 21, 22), (8, 9, 10), (2, 3, 4)),
             1024: ((20, 21, 22), (8, 9, 10), (2, 3, 4)),
             4096: ((20, 21, 22), (3, 4, 6), (2, 3, 5))}
    recs = []
    for size, (ta, tb, td) in table.items():
        recs += [spread(rec("allreduce", size, "native", 0), *td),
                 spread(rec("allreduce", size, f"native:{a}", 0), *ta),
                 spread(rec("allreduce", size, f"native:{b}", 0), *tb),
                 spread(rec("allreduce", size, "auto", 0), *td),
                 spread(rec("allreduce", size, a, 0), *ta),
                 spread(rec("allreduce", size, b, 0), *tb)]
    return sweep_doc(kind, {2: recs})


def test_tune_prunes_rules_slower_than_the_default_beyond_the_noise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("mpich", "ompi", "mpicoll"):
        got = tune.choices(pruning_doc("mpich"), target, commutative_only=True
                           )["allreduce"][2]
        assert [(c.size, c.name, c.pruned is not None) for c in got] == [
            (8, "ring", False), (64, "ring", False), (512, "recursive_doubling", True),
            (1024, "recursive_doubling", True), (4096, "recursive_doubling", False)], target
        # adjacent sizes of one rule merged, the pruned ones too
        assert tune.ranges(got) == [(0, "ring"), (512, None), (4096, "recursive_doubling")]
    assert tune.slower_beyond_noise((3.1, 4, 5), (1, 2, 3))
    assert not tune.slower_beyond_noise((3.0, 4, 5), (1, 2, 3))
    # Open MPI: algorithm 0 (tuned's fixed decision) over the pruned range
    rules = dict(parse_classic(tune.emit_ompi(pruning_doc("openmpi"),
                                              commutative_only=True)))
    assert rules[tune.OMPI_IDS["allreduce"]] == [(2, [(0, 4), (512, 0), (4096, 3)])]
    # MPICH: the safe subtree over the pruned range
    tree = tune.emit_mpich(pruning_doc("mpich"))
    body = tree["collective=allreduce"]["comm_type=intra"]["comm_size=any"]
    assert list(body) == ["avg_msg_size<512", "avg_msg_size<4096", "avg_msg_size=any"]
    assert body["avg_msg_size<512"] == tune._mpich_leaf("allreduce", "ring")
    assert body["avg_msg_size<4096"] == tune.MPICH_SAFE["allreduce"][0]
    assert body["avg_msg_size=any"] == tune._mpich_leaf("allreduce", "recursive_doubling")
    # mpicoll: "algorithm": null there, which leaves the call to the model
    table = tune.emit_mpicoll(pruning_doc("mpich"))
    assert table["rules"]["allreduce"][0]["sizes"] == [
        {"min_bytes": 0, "algorithm": "ring"}, {"min_bytes": 512, "algorithm": None},
        {"min_bytes": 4096, "algorithm": "recursive_doubling"}]
    loaded = selection.from_dict(table)
    assert loaded.pick("allreduce", 2, 600) is None
    assert loaded.pick("allreduce", 2, 100) == "ring"
    model = registry.choose("allreduce", 2, 600).name
    try:
        selection.use(loaded)
        assert registry.choose("allreduce", 2, 600).name == model
        assert registry.choose("allreduce", 2, 100).name == "ring"
    finally:
        selection.use(None)
    # the command says what it pruned
    src = tmp_path / "s.json"
    src.write_text(json.dumps(pruning_doc("mpich")))
    assert cli.main(["tune", str(src), "--emit", "mpich", "-o", str(tmp_path / "t.json")]) == 0
    text = capsys.readouterr().out
    assert "512B recursive_doubling 9.0 0.33x (pruned)" in text
    assert "# pruned 2 rule(s)" in text
    assert "allreduce P=2 1024B: recursive_doubling 9.0 [8.0..10.0] us is slower than the " \
        "default's 3.0 [2.0..4.0] in the sweep" in text
    src.write_text(json.dumps(mpich_doc()))
    assert cli.main(["tune", str(src), "--emit", "mpich", "-o", str(tmp_path / "t.json")]) == 0
    assert "# pruned: none" in capsys.readouterr().out


@pytest.mark.parametrize("coll", ["bcast", "reduce", "allreduce", "reduce_scatter_block",
                                  "reduce_scatter", "allgather", "alltoall", "gather",
                                  "scatter", "scan", "exscan"])
@pytest.mark.parametrize("p", [1, 3, 4])
def test_bench_size_is_the_nbytes_auto_reads(coll: str, p: int) -> None:
    """The mpicoll table is keyed on bench's S; auto looks it up with the call's nbytes: the
    same number for every collective the table can hold (non-v ones), at every rank."""
    from mpicoll.backends.args import PARSERS
    from mpicoll.tools.cases import Case, count_for

    for size in (8, 4096, 1000):
        for rank in range(p):
            case = Case(coll, count_for(coll, size, p, 8), "float64", "sum", 0, False, p,
                        rank).build()
            args, kw = case.arguments()
            assert PARSERS[coll](p, rank, *args, **kw).nbytes == case.nbytes(), (size, rank)


@pytest.mark.skipif(find_mpiexec() is None or library()[0] != "mpich",
                    reason="MPICH parses the tree (the names are MPICH's)")
def test_mpich_parses_every_name_the_tree_can_hold(tmp_path: Path) -> None:
    """MPICH reads the whole tree at MPI_Init and aborts on a name it does not know (the
    negative control: a bogus one). Every forceable algorithm of every collective (without
    parameters), as the fastest, in rounds: each tree must load and the probe run."""
    from mpicoll.algorithms.twins import MPICH

    usable = {c: [n for n in names if "params" not in tune.MPICH_RESTRICTED.get((c, n), ())]
              for c, names in MPICH.items()}
    rounds = max(len(v) for v in usable.values())
    for k in range(rounds):
        recs = [rec(c, 8, f"native:{names[k % len(names)]}", 1.0, op=None)
                for c, names in usable.items() if names]
        path = tmp_path / f"round{k}.json"
        path.write_text(json.dumps(tune.emit_mpich(sweep_doc("mpich", {3: recs}))))
        probe({"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(path),
               "MPIR_CVAR_DEVICE_COLLECTIVES": "none"})
    bogus = tune.emit_mpich(sweep_doc("mpich", {}))
    bogus["collective=bcast"]["comm_type=intra"] = {"algorithm=MPIR_Bcast_intra_bogus": {}}
    path = tmp_path / "bogus.json"
    path.write_text(json.dumps(bogus))
    mpiexec = find_mpiexec()
    assert mpiexec is not None
    env = job_env()
    env.update({"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(path),
                "MPIR_CVAR_DEVICE_COLLECTIVES": "none"})
    res = subprocess.run([*mpiexec, "-n", "2", sys.executable,
                          str(REPO / "tests" / "unit" / "_tune_probe.py")],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode != 0
    assert "algorithm=MPIR_Bcast_intra_bogus" in res.stdout + res.stderr
