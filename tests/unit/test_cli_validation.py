"""Command-line checks made before anything runs, and what the headers and progress lines say.

* bench's output files (``--json``, ``--csv``, ``--plot``): a directory, a place where no file
  can be created, two options naming one file, an image format matplotlib cannot write: a
  usage error (exit status 2) before any measurement, not a traceback after the whole run;
* non-finite or negative numbers (``nan``, ``inf``, ``-1``) for the seconds options;
* the iterations and warm-up bench's header announces are those that run;
* ``simulate``'s progress line on stderr (stdout keeps only the tables).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from mpicoll.model import alphabeta as model
from mpicoll.tools import bench, cli, simulate
from mpicoll.tools.bench import MAX_ITERATIONS, MIN_ITERATIONS, Settings

FAST = ["-c", "bcast", "-m", "8", "-q"]
FLAGS = ["--alpha", "1e-6", "--beta", "1e-9", "--gamma", "1e-10"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``argv``, which must be a usage error before anything ran; its stderr."""
    status, out, err = run_cli(capsys, *argv)
    assert status == 2, out + err
    assert out == ""  # nothing was measured or simulated
    assert err.startswith("usage: mpicoll ")
    return err


@pytest.fixture
def fake_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in matplotlib that writes png, pdf and svg (whether or not one is installed)."""
    mpl = types.ModuleType("matplotlib")
    bases = types.ModuleType("matplotlib.backend_bases")

    class FigureCanvasBase:
        @classmethod
        def get_supported_filetypes(cls) -> dict[str, str]:
            return {"png": "Portable Network Graphics", "pdf": "Portable Document Format",
                    "svg": "Scalable Vector Graphics"}

    bases.FigureCanvasBase = FigureCanvasBase  # type: ignore[attr-defined]
    mpl.backend_bases = bases  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", bases)


# ---- 1. output files, checked up front -----------------------------------------------------


@pytest.mark.parametrize("option", ["--json", "--csv"])
def test_output_that_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    option: str) -> None:
    err = usage_error(capsys, "bench", *FAST, option, str(tmp_path))
    assert f"error: argument {option}: {str(tmp_path)!r} is a directory, not a file" in err


def test_output_in_a_directory_where_nothing_can_be_created(
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc = Path("/proc")
    if not (proc / "self").exists():
        pytest.skip("needs Linux /proc (a directory where even root cannot create a file)")
    err = usage_error(capsys, "bench", *FAST, "--csv", "/proc/bench.csv")
    assert "error: argument --csv: cannot write in directory '/proc'" in err


def test_output_in_a_missing_directory(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    err = usage_error(capsys, "bench", *FAST, "--csv", str(tmp_path / "nope" / "x.csv"))
    assert "argument --csv: directory" in err
    assert "does not exist" in err


def test_two_outputs_naming_one_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "out")
    err = usage_error(capsys, "bench", *FAST, "--json", path, "--csv", path)
    assert "error: arguments --json and --csv: both write" in err


def test_plot_format_checked_up_front(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      fake_matplotlib: None) -> None:
    err = usage_error(capsys, "bench", *FAST, "--plot", str(tmp_path / "latency.xyz"))
    assert "error: argument --plot: matplotlib cannot write 'xyz' files (supported: pdf, png, " \
        "svg)" in err
    err = usage_error(capsys, "bench", *FAST, "--plot", str(tmp_path / "latency"))
    assert "has no file extension" in err
    assert bench.plot_problem(str(tmp_path / "latency.PDF")) is None


def test_plot_format_with_the_real_matplotlib(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    err = usage_error(capsys, "bench", *FAST, "--plot", str(tmp_path / "latency.xyz"))
    assert "matplotlib cannot write 'xyz' files" in err
    assert bench.plot_problem(str(tmp_path / "latency.svg")) is None


def test_plot_into_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               fake_matplotlib: None) -> None:
    (tmp_path / "x.png").mkdir()
    err = usage_error(capsys, "bench", *FAST, "--plot", str(tmp_path / "x.png"))
    assert "argument --plot:" in err
    assert "is a directory" in err


def test_simulate_json_into_a_directory(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    err = usage_error(capsys, "simulate", "-n", "4", "-c", "bcast", "-m", "8", *FLAGS,
                      "--json", str(tmp_path))
    assert "argument --json:" in err
    assert "is a directory" in err


def test_good_outputs_are_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run_cli(capsys, "bench", *FAST, "-i", "2", "--json",
                               str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"))
    assert status == 0, out + err
    assert json.loads((tmp_path / "b.json").read_text())["wrong"] == 0
    assert (tmp_path / "b.csv").read_text().startswith("# ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv", "b.json"]  # no test file


# ---- 2. numbers: finite, in range ----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--time-budget", "nan"], "argument --time-budget: must be > 0"),
        (["bench", "--time-budget", "inf"], "argument --time-budget: must be > 0"),
        (["bench", "--time-budget", "-1"], "argument --time-budget: must be > 0"),
        (["bench", "--timeout", "nan"], "argument --timeout: must be a finite number"),
        (["bench", "--timeout", "inf"], "argument --timeout: must be a finite number"),
        (["bench", "--timeout", "-5"], "argument --timeout: must be a finite number"),
        (["verify", "--timeout", "nan"], "argument --timeout: must be a finite number"),
        (["verify", "--timeout", "-1"], "argument --timeout: must be a finite number"),
    ],
)
def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                                      message: str) -> None:
    err = usage_error(capsys, *argv)
    assert message in err


# ---- 3. the header says what runs ----------------------------------------------------------


def test_iteration_range() -> None:
    assert Settings(3, None, None).iteration_range() == (3, 3)
    assert Settings(None, None, 0.1).iteration_range() == (MIN_ITERATIONS, MAX_ITERATIONS)
    assert Settings(3, None, 0.1).iteration_range() == (3, 3)  # -i below the minimum
    assert Settings(20, None, 0.1).iteration_range() == (MIN_ITERATIONS, 20)
    # the count stays in the range whatever the estimate
    for t_est in (0.0, 1e-9, 1.0):
        assert Settings(3, None, 0.1).iteration_count(None, t_est) == 3
        assert MIN_ITERATIONS <= Settings(20, None, 0.1).iteration_count(None, t_est) <= 20


@pytest.mark.parametrize(
    ("argv", "announced", "lo", "hi"),
    [
        (["-i", "3"], "# 3 iterations per size; warm-up 1;", 3, 3),
        (["-i", "3", "--time-budget", "0.01"], "# 3 iterations per size (-i 3 leaves the time "
         "budget of 0.01 s nothing to choose); warm-up 2;", 3, 3),
        (["-i", "8", "--time-budget", "0.001"], "# time budget 0.001 s per size and "
         f"implementation ({MIN_ITERATIONS} to 8 iterations); warm-up 2;", MIN_ITERATIONS, 8),
        (["-i", "6", "-x", "0", "--time-budget", "0.001"], "# time budget 0.001 s per size and "
         f"implementation ({MIN_ITERATIONS} to 6 iterations); warm-up 0 (1 untimed call sets "
         "the iteration count);", MIN_ITERATIONS, 6),
    ],
)
def test_header_announces_what_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    argv: list[str], announced: str, lo: int, hi: int) -> None:
    path = tmp_path / "b.json"
    status, out, err = run_cli(capsys, "bench", "-c", "bcast", "allreduce", "-m", "8:16", "-q",
                               *argv, "--json", str(path))
    assert status == 0, out + err
    assert announced in out
    assert f"{MIN_ITERATIONS}..{hi}" not in out
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    settings = doc["settings"]
    assert (settings["min_iterations"], settings["max_iterations"]) == (lo, hi)
    ran = [r for r in doc["results"] if r["status"] == "ok"]
    assert ran
    for r in ran:
        assert lo <= r["iterations"] <= hi
        assert r["warmup"] == settings["warmup"]


# ---- 5. simulate's progress ------------------------------------------------------------------


@pytest.fixture
def no_calibration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MPICOLL_MODEL", str(tmp_path / "calibrated" / "model.json"))
    model.use(None)


def test_simulate_shows_progress_on_stderr_for_many_ranks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_calibration: None
) -> None:
    p = simulate.SIMULATE_PROGRESS_RANKS
    path = tmp_path / "sim.json"
    argv = ["simulate", "-n", str(p), "-c", "bcast", "-a", "binomial", "pipeline", "-m", "8:16",
            "--library", "none", *FLAGS]
    status, out, err = run_cli(capsys, *argv, "-j", "1", "--json", str(path))
    assert status == 0, out + err
    lines = err.splitlines()  # not a terminal: one line per simulation as it starts
    assert lines == [
        "[mpicoll simulate] bcast 8B binomial (1/4)",
        "[mpicoll simulate] bcast 8B pipeline (2/4)",
        "[mpicoll simulate] bcast 16B binomial (3/4)",
        "[mpicoll simulate] bcast 16B pipeline (4/4)",
    ]
    assert "[mpicoll simulate]" not in out
    status, out_jobs, err = run_cli(capsys, *argv, "-j", "2", "--json", str(path))
    assert status == 0, out_jobs + err
    lines = err.splitlines()  # two workers: a line per simulation as it ends, in any order
    assert [line.rsplit(" (", 1)[1] for line in lines] == ["1/4)", "2/4)", "3/4)", "4/4)"]
    assert sorted(line.rsplit(" (", 1)[0] for line in lines) == [
        f"[mpicoll simulate] bcast {s}B {a}" for s in (16, 8) for a in ("binomial", "pipeline")]
    assert out_jobs == out
    assert len(json.loads(path.read_text())["rows"]) == 4
    status, out_quiet, err = run_cli(capsys, *argv, "-q")
    assert status == 0
    assert err == ""
    assert out_quiet.replace(f"# wrote {path}\n", "") == out.replace(f"# wrote {path}\n", "")


def test_simulate_is_quiet_for_few_ranks_off_a_terminal(
    capsys: pytest.CaptureFixture[str], no_calibration: None
) -> None:
    status, out, err = run_cli(capsys, "simulate", "-n", "8", "-c", "bcast", "-m", "8", *FLAGS)
    assert status == 0
    assert "# bcast:" in out
    assert err == ""


@pytest.mark.parametrize(("var", "value"), [("MPICOLL_RANKS_PER_NODE", "abc"),
                                            ("MPICOLL_RANKS_PER_NODE", "0"),
                                            ("MPICOLL_SEGMENT_SIZE", "abc")])
def test_simulate_refuses_a_bad_environment(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch, var: str,
                                            value: str) -> None:
    monkeypatch.setenv(var, value)
    assert var in usage_error(capsys, "simulate", "-n", "6", "-m", "8:8", "-c", "allreduce")
