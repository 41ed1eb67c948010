"""``mpicoll`` command line, single process: argument errors, sizes, formulas, tables, schema.

These tests assert what the CLI accepts and prints, never timings.
"""

from __future__ import annotations

import json

import pytest

from mpicoll import registry
from mpicoll.tools import bench, cli


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``mpicoll ARGV`` in this process: (exit status, stdout, stderr)."""
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# ---- sizes and formulas ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), ("0", 0), ("64K", 65536), ("64k", 65536), ("16M", 16 << 20), ("1G", 1 << 30),
     ("4KiB", 4096), ("2MB", 2 << 20), ("12B", 12)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert bench.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "-8", "8X", "1.5M", "M8", "8 M B X"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        bench.parse_size(text)


def test_parse_sizes_doubles_from_min_to_max() -> None:
    assert bench.parse_sizes("8:64") == [8, 16, 32, 64]
    assert bench.parse_sizes("8:100") == [8, 16, 32, 64]
    assert bench.parse_sizes("1K") == [1024]
    assert bench.parse_sizes("0:0") == [0]
    assert bench.parse_sizes("8:4M")[-1] == 4 << 20
    with pytest.raises(ValueError, match="MIN > MAX"):
        bench.parse_sizes("64:8")
    with pytest.raises(ValueError, match="MIN must be >= 1"):
        bench.parse_sizes("0:8")


def test_busbw_factors_are_those_of_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md; gather/scatter from its src/gather.cu, src/scatter.cu
    p = 4
    assert bench.busbw_factor("allreduce", p) == pytest.approx(2 * 3 / 4)
    for coll in ("reduce_scatter_block", "reduce_scatter", "allgather", "alltoall", "gather",
                 "scatter"):
        assert bench.busbw_factor(coll, p) == pytest.approx(3 / 4), coll
    assert bench.busbw_factor("bcast", p) == 1.0
    assert bench.busbw_factor("reduce", p) == 1.0
    assert bench.busbw_factor("barrier", p) is None
    assert bench.busbw_factor("allreduce", 1) == 0.0


def test_overlap_formulas() -> None:
    # perfect overlap: total = max(pure, compute)
    assert bench.overlap_osu(10.0, 10.0, 10.0) == pytest.approx(100.0)
    assert bench.overlap_imb(10.0, 10.0, 10.0) == pytest.approx(100.0)
    # no overlap: total = pure + compute
    assert bench.overlap_osu(10.0, 10.0, 20.0) == pytest.approx(0.0)
    assert bench.overlap_imb(10.0, 10.0, 20.0) == pytest.approx(0.0)
    # half
    assert bench.overlap_osu(10.0, 10.0, 15.0) == pytest.approx(50.0)
    assert bench.overlap_imb(10.0, 10.0, 15.0) == pytest.approx(50.0)
    # clipped to [0, 100]
    assert bench.overlap_osu(10.0, 10.0, 40.0) == 0.0
    assert bench.overlap_imb(10.0, 10.0, 40.0) == 0.0
    assert bench.overlap_imb(10.0, 10.0, 5.0) == 100.0
    assert bench.overlap_osu(0.0, 1.0, 1.0) == 0.0


# ---- usage errors: argparse style, exit status 2 --------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["nosuch"], "invalid choice"),
        (["bench", "-m", "64:8"], "argument -m/--message-size: invalid size range"),
        (["bench", "-m", "8:4X"], "invalid size '4X'"),
        (["bench", "-c", "allreducee"], "unknown collective 'allreducee'"),
        (["bench", "-c", "allreduce", "-a", "nosuch"], "unknown algorithm 'nosuch'"),
        (["bench", "--dtype", "float16"], "unknown dtype 'float16'"),
        (["bench", "--op", "avg"], "unknown op 'avg'"),
        (["bench", "-c", "allreduce", "--dtype", "complex128", "--op", "max"],
         "op max is not defined on complex128"),
        (["bench", "-c", "reduce", "--dtype", "float64", "--op", "maxloc"], "needs a pair type"),
        (["bench", "-c", "bcast", "--root", "1"], "argument --root: root 1 is not a rank"),
        (["bench", "-c", "bcast", "--op", "max"], "argument --op: none of bcast reduces"),
        (["bench", "-c", "allreduce", "allgather", "--root", "1"],
         "argument --root: none of allreduce, allgather has a root"),
        (["bench", "-m", "8:1K:1"], "invalid step factor '1'"),
        (["bench", "-i", "0"], "argument -i/--iterations: must be >= 1"),
        (["bench", "-x", "-1"], "argument -x/--warmup: must be >= 0"),
        (["bench", "--time-budget", "0"], "argument --time-budget: must be > 0"),
        (["bench", "--test-calls", "3"], "only with --nonblocking"),
        (["bench", "-i", "many"], "invalid int value"),
        (["bench", "--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["verify", "--counts", "1,x"], "argument --counts: expected integers"),
        (["verify", "--counts", "-1"], "counts must be >= 0"),
        (["verify", "--roots", "7"], "argument --roots: 7 is not a rank"),
        (["verify", "--ops", "avg"], "unknown op 'avg'"),
        (["verify", "-c", "allreduce", "--ops", "maxloc", "--dtypes", "float64"],
         "no valid (dtype, op) pair"),
        (["algorithms", "-c", "nosuch"], "unknown collective 'nosuch'"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, out, err = run_cli(capsys, *argv)
    assert status == 2
    assert out == ""
    assert err.startswith("usage: mpicoll")
    assert "error: " in err
    assert message in err


def test_usage_error_names_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_cli(capsys, "bench", "-m", "8:4X")
    assert status == 2
    assert "usage: mpicoll bench" in err
    assert "mpicoll bench: error: argument -m/--message-size" in err


def test_plot_without_matplotlib_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mpicoll")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("matplotlib is installed")
    status, out, err = run_cli(capsys, "bench", "-c", "bcast", "-m", "8", "--plot", "x.png")
    assert status == 2
    assert "--plot needs matplotlib" in err
    assert "mpicoll[plot]" in err
    assert out == ""  # nothing was run


@pytest.mark.parametrize("command", [[], ["bench"], ["verify"], ["algorithms"], ["info"]])
def test_help_exits_zero(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    status, out, _ = run_cli(capsys, *command, "--help")
    assert status == 0
    assert "usage: mpicoll" in out


def test_help_lists_the_options_of_the_issue(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "bench", "--help")
    for opt in ("-c", "--collective", "-a", "--algorithm", "-m", "--message-size", "-i",
                "--iterations", "-x", "--warmup", "--time-budget", "--root", "--in-place",
                "--nonblocking", "--test-calls", "--dtype", "--op", "--json", "--csv",
                "--plot"):
        assert opt in out, opt
    _, out, _ = run_cli(capsys, "verify", "--help")
    for opt in ("-c", "-a", "--counts", "--quick", "--dtypes", "--ops", "--roots",
                "--in-place", "--nonblocking"):
        assert opt in out, opt


def test_subcommands_are_registered_and_extensible() -> None:
    assert list(cli.SUBCOMMANDS)[:4] == ["bench", "verify", "algorithms", "info"]
    seen: list[str] = []

    def configure(p: object) -> None:
        seen.append("configure")

    def run(args: object, comm: object, argv: object, out: object) -> int:
        seen.append("run")
        return 0

    sub = cli.register(cli.Subcommand("plugin-test", "a test subcommand", configure, run))
    try:
        assert cli.main(["plugin-test"]) == 0
        assert seen == ["configure", "run"]
    finally:
        del cli.SUBCOMMANDS[sub.name]


# ---- algorithms and info --------------------------------------------------------------------


def test_algorithms_table_lists_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "algorithms")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["collective", "algorithm", "parameters", "restrictions"]
    for coll in registry.COLLECTIVES:
        for alg in registry.algorithms(coll):
            assert any(line.split()[:2] == [coll, alg.name] for line in lines), (coll, alg.name)


def test_algorithms_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "algorithms", "--markdown")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("| collective | algorithm | parameters | restrictions | cost")
    assert set(lines[1]) <= set("|-")
    n = sum(len(registry.algorithms(c)) for c in registry.COLLECTIVES)
    assert len(lines) == n + 2
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[:1] + lines[2:])
    # same function, importable (the README table is generated from it)
    assert cli.algorithms_table(markdown=True) == out


def test_algorithms_markdown_escapes_pipes() -> None:
    table = cli.algorithms_table(markdown=True)
    for line in table.splitlines()[2:]:
        cells = line[2:-2].split(" | ")
        assert len(cells) == 7, line


def test_algorithms_restrictions_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "algorithms", "-c", "allreduce", "--markdown")
    ring = next(line for line in out.splitlines() if "| ring |" in line)
    assert "commutative op" in ring


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "info")
    assert status == 0
    for key in ("MPI library", "MPI standard", "thread level", "P (ranks)", "hosts", "mpi4py",
                "numpy"):
        assert key in out, key
    status, out, _ = run_cli(capsys, "info", "--json")
    info = json.loads(out)
    assert info["P"] == 1
    assert info["hosts"][0]["ranks"] == 1
    assert 1 <= info["hosts"][0]["cpus_per_rank"] <= info["hosts"][0]["cores"]
    assert f"{info['hosts'][0]['cores']} cores" in run_cli(capsys, "info")[1]


def test_placement_warnings() -> None:
    from mpicoll.tools.report import placement_warnings

    def prov(p: int, *hosts: tuple[int, int]) -> dict[str, object]:
        return {"P": p, "hosts": [{"name": f"h{k}", "ranks": r, "cores": c}
                                  for k, (r, c) in enumerate(hosts)]}

    assert placement_warnings(prov(2, (2, 2))) == []
    assert placement_warnings(prov(4, (2, 2), (2, 8))) == []
    (one,) = placement_warnings(prov(1, (1, 2)))
    assert one.startswith("# warning: P = 1:")
    (over,) = placement_warnings(prov(6, (2, 8), (4, 2)))
    assert over.startswith("# warning: h1 runs 4 ranks on 2 cores: oversubscribed")
    # a file written before cores were recorded: no warning either way
    assert placement_warnings({"P": 4, "hosts": [{"name": "h", "ranks": 4}]}) == []


def test_size_step_factor() -> None:
    from mpicoll.tools.options import parse_sizes

    assert parse_sizes("8:256K:8") == [8, 64, 512, 4096, 32768, 262144]
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    assert parse_sizes("1K:1K:4") == [1024]
    for bad in ("8:64:x", "8:64:0", "64:8:4"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


# ---- the JSON schema and its validator --------------------------------------------------------


def test_schema_file_is_json_with_the_main_parts() -> None:
    schema = json.loads(bench.SCHEMA_PATH.read_text())
    assert set(schema["required"]) >= {"provenance", "settings", "results", "summary", "wrong"}
    assert schema["properties"]["schema"]["const"] == bench.SCHEMA_ID


def test_validator_reports_errors() -> None:
    """``validate`` is the jsonschema package's verdict, one ``$.path: message`` per error."""
    schema = {
        "type": "object",
        "required": ["a", "b"],
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer", "minimum": 1},
            "b": {"type": "array", "items": {"$ref": "#/$defs/x"}},
            "c": {"anyOf": [{"type": "null"}, {"enum": ["u", "v"]}]},
        },
        "$defs": {"x": {"type": ["string", "null"]}},
    }
    assert bench.validate({"a": 1, "b": ["s", None], "c": None}, schema) == []
    assert bench.validate({"a": 1, "b": [], "c": "v"}, schema) == []
    errors = bench.validate({"a": 0, "b": [3], "c": "w", "d": 1}, schema)
    assert sorted(e.split(": ")[0] for e in errors) == ["$", "$.a", "$.b[0]", "$.c"]
    assert any(e.startswith("$: ") and "'d' was unexpected" in e for e in errors)
    assert any(e.startswith("$.a: ") and "minimum of 1" in e for e in errors)
    assert bench.validate({"a": True, "b": []}, schema) == ["$.a: True is not of type 'integer'"]
    assert bench.validate([], schema) == ["$: [] is not of type 'object'"]
    assert bench.validate({"a": 2}, schema) == ["$: 'b' is a required property"]


def test_one_resolver_of_the_algorithm_option() -> None:
    """bench, verify and simulate resolve -a with options.algorithms_of: auto, all, none and
    names in the order asked, names of another collective skipped, node-aware ones only when
    asked for (simulate without --ranks-per-node)."""
    from mpicoll.tools.options import algorithms_of

    names = [a.name for a in registry.algorithms("allreduce")]
    flat = [a.name for a in registry.algorithms("allreduce") if a.auto]
    assert algorithms_of("allreduce", ["auto"]) == ["auto"]
    assert algorithms_of("allreduce", ["none"]) == []
    assert algorithms_of("allreduce", ["all", "auto"]) == [*names, "auto"]
    assert algorithms_of("allreduce", ["ring", "bruck", "auto", "ring"]) == ["ring", "auto"]
    assert algorithms_of("allreduce", ["all"], node_aware=False) == flat
    assert "smp" in names
    assert "smp" not in flat


def test_phase_groups_sum_consecutive_rounds_of_one_label() -> None:
    from mpicoll.tools.report import phase_groups

    labels = ["reduce-scatter"] * 3 + ["allgather"] * 3
    assert phase_groups([1, 2, 3, 4, 5, 6], labels) == [("reduce-scatter", 6),
                                                          ("allgather", 15)]
    assert phase_groups([1.5, 2.5], ["round 0", "round 1"]) == [("round 0", 1.5),
                                                               ("round 1", 2.5)]
    assert phase_groups([], []) == []
