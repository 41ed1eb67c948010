"""``mpicoll simulate`` in this process (no mpiexec): the tables, the best marker, the JSON, the
two-level model and its node-aware algorithms, the model the command picks, argument errors;
and bench's predicted column at P = 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpicoll import registry
from mpicoll.algorithms.schedule import DEFAULT_SEGMENT_BYTES
from mpicoll.model import alphabeta as model
from mpicoll.tools import bench, cli

# a model given in full on the command line: no calibrated file is read
FLAGS = ["--alpha", "1e-6", "--beta", "1e-9", "--gamma", "1e-10"]


@pytest.fixture(autouse=True)
def no_calibration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the calibrated-model file at an empty place (no user's file leaks in)."""
    path = tmp_path / "calibrated" / "model.json"
    monkeypatch.setenv("MPICOLL_MODEL", str(path))
    model.use(None)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def tables(out: str) -> list[list[list[str]]]:
    """The data rows (lines starting with two spaces) of each table, split into cells."""
    blocks: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in out.splitlines():
        if line.startswith("  "):
            if current is None:
                current = []
                blocks.append(current)
            current.append(line.split())
        else:
            current = None
    return blocks


def header(out: str, first: str) -> list[str]:
    """The column names of the table whose header line starts with ``# first``."""
    line = next(x for x in out.splitlines() if x.split()[:2] == ["#", first])
    return line.split()[1:]


def test_table_shape_and_best_marker(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "simulate", "-n", "8", "-c", "allreduce", "-m", "8:64M",
                               *FLAGS)
    assert status == 0, err
    names = [a.name for a in registry.algorithms("allreduce") if a.auto]
    assert header(out, "size") == ["size", "count", *names, "native", "best"]
    times, traffic = tables(out)
    sizes = bench.parse_sizes("8:64M")
    assert [int(r[0]) for r in times] == sizes
    assert [int(r[1]) for r in times] == [s // 8 for s in sizes]
    assert "native: what mpich runs by default" in out or \
        "native: what openmpi runs by default" in out
    for row in times:
        cells = row[2 : 2 + len(names)]
        starred = [n for n, c in zip(names, cells, strict=True) if c.endswith("*")]
        assert starred, row
        assert row[3 + len(names)].rstrip(",") == starred[0]  # after the native column
        # native: the time of one of the algorithms (the library's pick), never starred
        native = row[2 + len(names)]
        assert not native.endswith("*")
        values = [float(c.rstrip("*")) for c in cells]
        assert min(values) == pytest.approx(float(cells[names.index(starred[0])].rstrip("*")),
                                            rel=1e-3)
    # latency-bound small sizes and bandwidth-bound large ones pick differently
    assert times[0][-1] != times[-1][-1]
    # the traffic table: one row per algorithm at the largest size
    assert "traffic at S = 64M (67108864 B)" in out
    assert header(out, "algorithm") == ["algorithm", "time", "msgs", "sent", "bytes", "sent",
                                         "msgs", "recv", "bytes", "recv"]
    assert [r[0] for r in traffic] == [*names, "native"]
    ring = next(r for r in traffic if r[0] == "ring")
    n = 64 << 20
    # the reduce-scatter half sends each n/8 block in segments of 64 KiB, the allgather whole
    msgs = 7 * -(-n // 8 // DEFAULT_SEGMENT_BYTES) + 7
    assert ring[2:] == [str(msgs), str(2 * n * 7 // 8), str(msgs), str(2 * n * 7 // 8)]
    assert "inter-node" not in out
    assert "model command line: alpha = 1 us, beta = 1 ns/B (1 GB/s), gamma = 0.1 ns/B" in out


def test_json_has_every_row_with_per_rank_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "sim.json"
    p = 6
    status, out, err = run_cli(capsys, "simulate", "-n", str(p), "-c", "allreduce", "allgather",
                               "-m", "96:96K", *FLAGS, "--json", str(path))
    assert status == 0, err
    assert f"wrote {path}" in out
    doc = json.loads(path.read_text())
    assert doc["P"] == p
    assert doc["model"] == {"alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10,
                            "source": "command line", "two_level": None}
    sizes = bench.parse_sizes("96:96K")
    ar = [r for r in doc["rows"] if r["collective"] == "allreduce" and r["algorithm"] != "native"]
    names = [a.name for a in registry.algorithms("allreduce") if a.auto]
    assert len(ar) == len(sizes) * len(names)
    for r in ar:
        if r["status"] != "ok":
            continue
        pr = r["per_rank"]
        assert len(pr["clocks_s"]) == p
        assert r["time_us"] == pytest.approx(max(pr["clocks_s"]) * 1e6)
        assert r["bytes_sent"] == max(pr["bytes_sent"])
        assert r["messages_recv"] == max(pr["messages_recv"])
        if r["algorithm"] == "ring":  # bandwidth-optimal: exactly 2 n (p-1)/p per rank
            n = r["size_bytes"]
            assert pr["bytes_sent"] == [2 * n * (p - 1) // p] * p
            assert pr["bytes_recv"] == [2 * n * (p - 1) // p] * p
            assert pr["messages_sent"] == [2 * (p - 1)] * p
    for size in sizes:
        block = [r for r in ar if r["size_bytes"] == size and r["status"] == "ok"]
        fastest = min(r["time_us"] for r in block)
        assert [r["best"] for r in block] == [r["time_us"] <= fastest * (1 + 1e-9)
                                               for r in block]
    ag = [r for r in doc["rows"] if r["collective"] == "allgather"]
    assert {r["size_bytes"] for r in ag} == set(sizes)  # S = gathered output, P blocks
    rd = [r for r in ag if r["algorithm"] == "recursive_doubling"]
    assert rd
    assert all(r["status"] == "n/a" and "power-of-two" in r["reason"] for r in rd)
    assert "recursive_doubling: n/a: allgather algorithm 'recursive_doubling' needs a " \
           "power-of-two number of ranks" in out


def test_ranks_per_node_adds_smp_and_inter_node_bytes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "sim.json"
    status, out, err = run_cli(capsys, "simulate", "-n", "16", "-c", "allreduce", "-m", "1M",
                               *FLAGS, "--ranks-per-node", "4", "--inter-alpha", "5e-6",
                               "--inter-beta", "1e-8", "--json", str(path))
    assert status == 0, err
    assert "smp" in header(out, "size")
    assert "inter-node" in header(out, "algorithm")
    assert "two-level: 4 ranks per node, 4 nodes" in out
    assert "inter-node: alpha = 5 us, beta = 10 ns/B" in out
    doc = json.loads(path.read_text())
    assert doc["model"]["two_level"] == {"ranks_per_node": 4, "nodes": 4, "inter_alpha": 5e-6,
                                         "inter_beta": 1e-8}
    rows = {r["algorithm"]: r for r in doc["rows"]}
    assert set(rows) == {a.name for a in registry.algorithms("allreduce")} | {"native"}
    # 4 nodes of 4, commutative: a node-aware composition (MPICH ch4 alpha, Open MPI han),
    # run as smp
    assert rows["native"]["twin"] == "smp"
    assert rows["native"]["time_us"] == rows["smp"]["time_us"]
    n = 1 << 20
    # node-aware: each node sends its share 2 n (N-1)/N across nodes, once
    assert rows["smp"]["inter_node_bytes"] == 4 * 2 * n * 3 // 4
    assert rows["smp"]["inter_node_bytes"] < rows["recursive_doubling"]["inter_node_bytes"]
    assert rows["smp"]["inter_node_bytes"] == min(r["inter_node_bytes"] for r in rows.values())
    assert sum(r["best"] for r in rows.values()) >= 1
    # without --ranks-per-node, smp is not shown unless asked for by name
    _, flat, _ = run_cli(capsys, "simulate", "-n", "16", "-c", "allreduce", "-m", "1M", *FLAGS)
    assert "smp" not in header(flat, "size")
    assert "inter-node" not in flat
    _, forced, _ = run_cli(capsys, "simulate", "-n", "16", "-c", "allreduce", "-m", "1M",
                           "-a", "ring,smp", *FLAGS)
    assert header(forced, "size") == ["size", "count", "ring", "smp", "native", "best"]


def test_model_flags_scale_the_times(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every term of the model doubled doubles every predicted time; an alpha-only model gives
    the message rounds on the critical path (ring allreduce: 2 (p-1))."""
    times = []
    for scale in (1, 2):
        path = tmp_path / f"sim{scale}.json"
        status, _, err = run_cli(capsys, "simulate", "-n", "8", "-c", "allreduce", "bcast",
                                 "-m", "8:1M", "--alpha", str(scale * 1e-6),
                                 "--beta", str(scale * 1e-9), "--gamma", str(scale * 1e-10),
                                 "--json", str(path))
        assert status == 0, err
        times.append([r["time_us"] for r in json.loads(path.read_text())["rows"]])
    assert len(times[0]) == len(times[1]) > 0
    for t1, t2 in zip(*times, strict=True):
        if t1 is not None:
            assert t2 == pytest.approx(2 * t1)
    path = tmp_path / "alpha.json"
    run_cli(capsys, "simulate", "-n", "8", "-c", "allreduce", "-a", "ring", "-m", "1K",
            "--alpha", "1e-6", "--beta", "0", "--gamma", "0", "--library", "none",
            "--json", str(path))
    (row,) = json.loads(path.read_text())["rows"]
    assert row["time_us"] == pytest.approx(2 * 7 * 1.0)


def test_model_comes_from_the_calibrated_file_then_the_flags(
    capsys: pytest.CaptureFixture[str], no_calibration: Path, tmp_path: Path
) -> None:
    argv = ["simulate", "-n", "4", "-c", "allreduce", "-a", "ring", "-m", "1K"]
    _, out, _ = run_cli(capsys, *argv)
    assert "model default (nothing calibrated at" in out
    assert "alpha = 2 us, beta = 0.1 ns/B (10 GB/s), gamma = 0.25 ns/B" in out
    model.save(model.Model(4e-6, 5e-10, 1e-9), no_calibration)
    _, out, _ = run_cli(capsys, *argv)
    assert f"model calibrated ({no_calibration}): alpha = 4 us, beta = 0.5 ns/B (2 GB/s)" in out
    _, out, _ = run_cli(capsys, *argv, "--alpha", "1e-5")
    assert "with --alpha from the command line: alpha = 10 us, beta = 0.5 ns/B" in out
    other = tmp_path / "other.json"
    model.save(model.Model(7e-6, 1e-9, 1e-9), other)
    _, out, _ = run_cli(capsys, *argv, "--model", str(other))
    assert f"model file {other}: alpha = 7 us" in out


def test_jobs_give_the_same_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``-j 3``: the (size, algorithm) simulations in three forked workers, the largest first:
    the same rows, in the same order, as one process (and the same tables)."""
    docs, outs = [], []
    for jobs in ("1", "3"):
        path = tmp_path / f"j{jobs}.json"
        status, out, err = run_cli(capsys, "simulate", "-n", "7", "-c", "allreduce", "bcast",
                                   "-m", "8:64K", *FLAGS, "-j", jobs, "--json", str(path))
        assert status == 0, err
        docs.append(json.loads(path.read_text()))
        outs.append([line for line in out.splitlines() if not line.startswith("# wrote")])
    assert docs[0]["rows"] == docs[1]["rows"]
    assert len(docs[0]["rows"]) > 40
    assert outs[0] == outs[1]



@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "allreduce"], "the following arguments are required: -n/--ranks"),
        (["-n", "0"], "argument -n/--ranks: need at least one rank"),
        (["-n", "4", "-c", "allreduse"], "unknown collective 'allreduse'"),
        (["-n", "4", "-c", "allreduce", "-a", "bruck"], "unknown algorithm 'bruck'"),
        (["-n", "4", "-m", "64:8"], "argument -m/--message-size"),
        (["-n", "4", "--dtype", "float128"], "argument --dtype"),
        (["-n", "4", "--dtype", "double_int"], "argument --dtype"),
        (["-n", "4", "-c", "bcast", "--root", "4"], "root 4 is not a rank"),
        (["-n", "4", "--alpha", "-1"], "argument --alpha: must be a number >= 0"),
        (["-n", "4", "--beta", "nan"], "argument --beta: must be a number >= 0"),
        (["-n", "4", "--inter-alpha", "1e-6"], "only with --ranks-per-node"),
        (["-n", "4", "--ranks-per-node", "0"], "argument --ranks-per-node: must be >= 1"),
        (["-n", "4", "-j", "0"], "argument -j/--jobs: need at least one"),
        (["-n", "4", "--model", "/nonexistent/model.json"], "argument --model"),
        (["-n", "4", "--json", "/nonexistent/dir/x.json"], "argument --json: directory"),
    ],
)
def test_argument_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = run_cli(capsys, "simulate", *argv)
    assert status == 2
    assert out == ""
    assert "usage: mpicoll simulate" in err
    assert message in err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "simulate", "--help")
    assert status == 0
    for opt in ("-n", "-c", "-a", "-m", "--alpha", "--beta", "--gamma", "--model",
                "--ranks-per-node", "--inter-alpha", "--inter-beta", "--json"):
        assert opt in out, opt
    status, out, _ = run_cli(capsys, "calibrate", "--help")
    assert status == 0
    assert "--output" in out


def test_calibrate_needs_two_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "calibrate")
    assert status == 2
    assert out == ""
    assert "error: calibrate needs at least 2 ranks" in err


def test_bench_records_have_the_predicted_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """P = 1: p2p records carry a prediction (0 us: no message), the v-variants' too (bench and
    the simulator build the same call), and no ratio; native neither; the JSON still follows
    the schema."""
    path = tmp_path / "bench.json"
    status, out, err = run_cli(capsys, "bench", "-c", "allreduce", "allgatherv", "-a", "all",
                               "-m", "8:16", "-i", "2", "-x", "1", "-q", "--json", str(path))
    assert status == 0, err
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    assert doc["settings"]["model"]["source"].startswith("default")
    for r in doc["results"]:
        assert r["measured_over_predicted"] is None
        if r["backend"] == "p2p" and r["status"] == "ok":
            assert r["predicted_us"] == 0.0
        else:
            assert r["predicted_us"] is None  # native and n/a
    assert "meas/pred" in header(out, "size")
    status, _, err = run_cli(capsys, "bench", "-c", "allreduce", "-m", "8", "--model",
                             str(tmp_path / "missing.json"))
    assert status == 2
    assert "argument --model" in err


def test_count_for_is_public() -> None:
    assert bench.count_for("allreduce", 1024, 4, 8) == 128
    assert bench.count_for("allgather", 1024, 4, 8) == 32
    assert bench.count_for("allgather", 8, 4, 8) == 1
    assert bench.count_for("barrier", 1024, 4, 8) == 0


def test_inter_node_terms_replace_a_measured_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A calibrated model with a measured message curve (fitted inside a node): the inter-node
    alpha and beta given on the command line are what inter-node messages cost, not the
    curve (a cluster-emulation finding: they were ignored)."""
    curve = ((8, 2e-6), (1 << 20, 1e-4))
    path = tmp_path / "curved.json"
    model.save(model.Model(2e-6, 1e-10, 1e-10, message_curve=curve), path)
    argv = ["simulate", "-n", "8", "-c", "allreduce", "-a", "ring", "-m", "1M", "--model",
            str(path), "--ranks-per-node", "4", "--library", "none", "--json"]
    times = []
    for beta in ("1e-9", "1e-8"):
        out = tmp_path / f"sim-{beta}.json"
        status, _, err = run_cli(capsys, *argv, str(out), "--inter-beta", beta)
        assert status == 0, err
        (row,) = json.loads(out.read_text())["rows"]
        times.append(row["time_us"])
    # ring at P = 8 on 2 nodes: 2 (P-1) steps of n/P, each crossing a node boundary
    assert times[1] > times[0] * 2


@pytest.mark.parametrize("library", ["mpich", "openmpi"])
def test_native_column_is_the_library_pick_run_as_its_twin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, library: str
) -> None:
    """P = 64, flat: the native row at each size is the library's default pick
    (:func:`library_default`) simulated as its twin, the same time as that twin's own row;
    never starred; the footnote names each pick; the JSON follows simulate's schema."""
    from mpicoll.algorithms.native_defaults import library_default
    from mpicoll.tools import report, simulate

    m = model.Model(1e-6, 1e-9, 1e-10)
    path = tmp_path / "sim.json"
    status, out, err = run_cli(capsys, "simulate", "-n", "64", "-c", "allreduce", "bcast",
                               "-a", "recursive_doubling,binomial", "-m", "8:4M", *FLAGS,
                               "--library", library, "--json", str(path))
    assert status == 0, err
    doc = json.loads(path.read_text())
    assert report.validate(doc, json.loads(simulate.SCHEMA_PATH.read_text())) == []
    assert doc["library"] == library
    assert f"native: what {library} runs by default" in out
    for coll in ("allreduce", "bcast"):
        rows = [r for r in doc["rows"] if r["collective"] == coll]
        native = [r for r in rows if r["algorithm"] == "native"]
        assert [r["size_bytes"] for r in native] == bench.parse_sizes("8:4M")
        for r in native:
            d = library_default(library, coll, 64, r["count"], 8)
            assert (r["native_algorithm"], r["twin"]) == (d.native, d.p2p)
            assert not r["best"]
            twin = next((x for x in rows if x["algorithm"] == d.p2p
                         and x["size_bytes"] == r["size_bytes"]), None)
            if twin is None:  # not asked for with -a: simulate it here
                [twin] = simulate.predict_rows(coll, 64, [r["size_bytes"]], m, [d.p2p])
            assert r["status"] == "ok"
            assert r["time_us"] == twin["time_us"]
            assert f"{d.native} -> twin {d.p2p}" in out
    # the picks change with the size (MPICH: recursive_doubling, then reduce_scatter_allgather)
    picks = {r["native_algorithm"] for r in doc["rows"]
             if r["collective"] == "allreduce" and r["algorithm"] == "native"}
    assert len(picks) >= 2
    status, out, _ = run_cli(capsys, "simulate", "-n", "4", "-c", "bcast", "-m", "8", *FLAGS,
                             "--library", "none")
    assert status == 0
    assert "native" not in header(out, "size")


def test_native_column_says_where_there_is_no_twin(capsys: pytest.CaptureFixture[str]) -> None:
    """One node of 4 ranks under MPICH: bcast is POSIX release_gather, no twin: n/a, and the
    footnote says why."""
    status, out, err = run_cli(capsys, "simulate", "-n", "4", "-c", "bcast", "-m", "8:64",
                               *FLAGS, "--ranks-per-node", "4", "--library", "mpich")
    assert status == 0, err
    times = tables(out)[0]
    col = header(out, "size").index("native")
    assert all(r[col] == "n/a" for r in times)
    assert "release_gather -> no twin: n/a" in out


def test_native_column_reuses_the_twins_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native column at a size where its twin is one of the algorithms compared is that
    algorithm's row (the same simulation, not run twice); elsewhere it is simulated."""
    from mpicoll.algorithms.native_defaults import library_default
    from mpicoll.tools import simulate as sim_tool

    m = model.Model(alpha=1e-6, beta=1e-9, gamma=1e-10)
    sizes = [8, 1 << 20]
    twins = {library_default("mpich", "allreduce", 8, c, 8, uniform=True).p2p
             for c in (1, (1 << 20) // 8)}
    rows = sim_tool.predict_rows("allreduce", 8, sizes, m, sorted(twins))
    ring = sim_tool.predict_rows("allreduce", 8, sizes, m, ["ring"])
    calls = []
    real = sim_tool.simulate
    monkeypatch.setattr(sim_tool, "simulate", lambda *a, **k: calls.append(a) or real(*a, **k))
    native = sim_tool.native_rows("allreduce", 8, rows, "mpich", m)
    assert not calls  # every twin's row was there
    for row in native:
        twin = next(r for r in rows if r["algorithm"] == row["twin"]
                    and r["count"] == row["count"])
        assert row["time_us"] == twin["time_us"]
        assert row["bytes_sent"] == twin["bytes_sent"]
        assert row["best"] is False
    assert not twins & {"ring"}
    again = sim_tool.native_rows("allreduce", 8, ring, "mpich", m)
    assert len(calls) == len(sizes)  # no twin's row among ring's: each size simulated
    assert [r["time_us"] for r in again] == [r["time_us"] for r in native]
