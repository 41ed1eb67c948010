"""Every script in ``examples/`` run as a user runs it, ``mpiexec -n 4 python examples/X.py``,
at small sizes, with its output checked: so none of them rots.

Single-process tests (plain pytest): each spawns its own ``mpiexec`` (from ``$MPIEXEC``, the
interpreter's bin directory or ``PATH``; Open MPI gets ``--oversubscribe``) under a timeout, and
kills the whole process group if it runs past it.  Skipped when no ``mpiexec`` is found; the
training examples are skipped when scikit-learn (the ``examples`` extra) is not installed.

What is checked: the walkthrough's exact final states (the seed article's numbers, typed here
independently of the script) and its measured traffic against the volume table; for the other
examples their own "agree" / "OK" lines, the accuracy reached, and the exit status.
"""

from __future__ import annotations

import importlib.util
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
EXAMPLES = REPO / "examples"
TIMEOUT = 100  # seconds per example run (under `make test`'s 120 s per-test limit)
HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None


LAUNCHER = launcher()
pytestmark = pytest.mark.skipif(LAUNCHER is None, reason="no mpiexec found")
needs_sklearn = pytest.mark.skipif(not HAVE_SKLEARN,
                                   reason="scikit-learn not installed (the `examples` extra)")

def run_example(script: str, *args: str, n: int = 4, extra_path: str | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n N python examples/SCRIPT ARGS`` with this interpreter and this checkout."""
    assert LAUNCHER is not None
    environ = job_env(extra_path)
    environ.pop("MPICOLL_EXAMPLES_SMALL", None)
    environ.setdefault("OMP_NUM_THREADS", "1")  # 4 ranks on few cores: no BLAS thread storms
    environ.update(env or {})
    cmd = [*LAUNCHER, "-n", str(n), sys.executable, str(EXAMPLES / script), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environ, cwd=REPO, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank it started
        out, err = proc.communicate()
        pytest.fail(f"{shlex.join(cmd)} ran past {TIMEOUT} s\n--- stdout\n{out}\n--- stderr\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def ok(res: subprocess.CompletedProcess[str]) -> str:
    """The output of a run that must have succeeded (else fail, showing everything)."""
    assert res.returncode == 0, (
        f"{shlex.join(res.args)} exited {res.returncode}\n--- stdout\n{res.stdout}\n"
        f"--- stderr\n{res.stderr}")
    return res.stdout


# ---------------------------------------------------------------------------------------------
# walkthrough.py: the article's exact final states and the volume table

#: The seed article's final states (shared/seeds/000_...txt), and the all-to-all of the second
#: article (004_...txt), in the walkthrough's layout: one line per rank.
FINAL_STATES = {
    "Broadcast (root 2)": ["has data 42"] * 4,
    "Scatter (root 2)": ["has data 10", "has data 20", "has data 30", "has data 40"],
    "Gather (root 2)": ["still has its data A", "still has its data B", "has data [A, B, C, D]",
                        "still has its data D"],
    "Reduce (root 2, sum)": ["in0 unchanged, no out buffer", "in1 unchanged, no out buffer",
                             "has the out buffer [18, 35, 27]", "in3 unchanged, no out buffer"],
    "All-reduce (sum)": ["out = [18, 35, 27]"] * 4,
    "Reduce-scatter (sum)": ["out0 = [18]", "out1 = [35]", "out2 = [27]", "out3 = [10]"],
    "All-gather": ["out = [10, 11, 20, 21, 30, 31, 40, 41]"] * 4,
    "All-to-all (second article)": ["has [a0, b0, c0, d0]", "has [a1, b1, c1, d1]",
                                    "has [a2, b2, c2, d2]", "has [a3, b3, c3, d3]"],
}


def _section(out: str, title: str) -> str:
    start = out.index(f"== {title} ==")
    end = out.find("\n== ", start + 1)
    return out[start:end if end != -1 else None]


def _final_block(states: list[str]) -> str:
    return "Final State:\n" + "".join(f"  Rank {r}: {s}\n" for r, s in enumerate(states))


def test_walkthrough_both_backends_print_the_articles_states() -> None:
    out = ok(run_example("walkthrough.py"))
    for title, states in FINAL_STATES.items():
        sec = _section(out, title)
        assert _final_block(states) in sec, f"{title}: final state differs\n{sec}"
        assert "computed live by native: as in the article; p2p (auto): as in the article" in sec
    assert "  Rank 2: has data 42\n  Rank 3: has no data" in _section(out, "Broadcast (root 2)")
    rs = _section(out, "Why Reduce-Scatter + All-gather = All-reduce")
    assert rs.count("  Rank 0 has: [18]\n  Rank 1 has: [35]\n  Rank 2 has: [27]\n"
                    "  Rank 3 has: [10]") == 2  # native, then p2p
    assert rs.count("  Rank 3 has [18, 35, 27, 10]") == 2
    assert rs.count("on every rank: identical") == 2
    assert out.rstrip().endswith("all states as in the article, all volumes match")


def test_walkthrough_volume_table_matches_the_article_exactly() -> None:
    # N = 4096 float64 = 32768 B: N(P-1)/P = 24576, 2N(P-1)/P = 49152, every rank, exactly.
    out = ok(run_example("walkthrough.py", "--backend", "p2p"))
    rows = {
        "1. ReduceScatter": r"ring\s+N\(P-1\)/P / N/P \[a\]\s+24576\s+24576 x4\s+24576 x4\s+3",
        "2. AllGather": r"ring\s+N/P \[b\] / N\(P-1\)/P\s+24576\s+24576 x4\s+24576 x4\s+3",
        "  sum of 1. and 2.": r"2N\(P-1\)/P\s+49152\s+49152 x4",
        "AllReduce (1 call)": r"ring\s+2N\(P-1\)/P / 2N\(P-1\)/P\s+49152\s+49152 x4\s+49152 x4\s+6",
        "All-to-All": r"pairwise\s+N\(P-1\)/P / N\(P-1\)/P\s+24576\s+24576 x4\s+24576 x4\s+3",
    }
    for name, pattern in rows.items():
        assert re.search(rf"^{re.escape(name)}\s+{pattern}\s+match$", out, re.M), \
            f"row {name!r} missing or not matching\n{out}"
    assert "RS + AG result == AllReduce result on every rank: identical" in out


def test_walkthrough_forced_algorithm() -> None:
    out = ok(run_example("walkthrough.py", "--backend", "p2p", "--algorithm", "ring",
                         "--count", "64"))
    for title in ("All-reduce (sum)", "Reduce-scatter (sum)", "All-gather"):
        assert "computed live by p2p (ring): as in the article" in _section(out, title)
    assert "computed live by p2p (auto): as in the article" in _section(out, "Broadcast (root 2)")
    assert "native" not in _section(out, "Gather (root 2)")
    assert "N = 512 B per rank (64 float64)" in out


def test_walkthrough_needs_four_ranks() -> None:
    res = run_example("walkthrough.py", n=2)
    assert res.returncode == 2
    assert "needs exactly 4 ranks" in res.stderr


def test_walkthrough_unknown_algorithm() -> None:
    res = run_example("walkthrough.py", "--algorithm", "no_such_algorithm")
    assert res.returncode == 2
    assert "unknown algorithm 'no_such_algorithm'" in res.stderr


# ---------------------------------------------------------------------------------------------
# overlap.py

_TIME = re.compile(r"^  (pure communication|compute alone|Scenario [12])\s.*?([\d.]+) ms", re.M)
_OVERLAP = re.compile(r"overlap\s+([\d.]+) %")


def _check_overlap_block(block: str) -> None:
    times = _TIME.findall(block)
    assert len(times) == 5, block
    assert all(float(t) > 0 for _, t in times), block
    pcts = [float(p) for p in _OVERLAP.findall(block)]
    assert len(pcts) == 2, block
    assert all(p >= 0.0 for p in pcts), block  # > 100 % happens: timing noise
    assert "all-gather result OK" in block


def test_overlap_both_backends() -> None:
    out = ok(run_example("overlap.py", "--small"))
    assert "65536 bytes (float64) per rank" in out
    native = out[out.index("native (MPI_Iallgather"):out.index("p2p (algorithm")]
    hand = out[out.index("p2p (algorithm auto"):out.index("Without Test()")]
    _check_overlap_block(native)
    _check_overlap_block(hand)


def test_overlap_p2p_forced_algorithm_and_small_from_environment() -> None:
    out = ok(run_example("overlap.py", "--backend", "p2p", "--algorithm", "ring",
                         "--test-calls", "4", env={"MPICOLL_EXAMPLES_SMALL": "1"}))
    assert "65536 bytes (float64) per rank" in out  # MPICOLL_EXAMPLES_SMALL=1 == --small
    assert "native (" not in out
    _check_overlap_block(out[out.index("p2p (algorithm ring"):])
    assert "the same with 4 req.Test() in compute" in out


# ---------------------------------------------------------------------------------------------
# thread_overlap.py: a communication thread beside a compute thread (MPI_THREAD_MULTIPLE)

_THREAD_TIME = re.compile(r"^  (communication alone|compute alone|both, two threads)\s+([\d.]+) ms",
                          re.M)


def test_thread_overlap_both_backends() -> None:
    out = ok(run_example("thread_overlap.py", "--small", n=2))
    assert "MPI_THREAD_MULTIPLE" in out
    for label in ("native:", "p2p (algorithm auto):"):
        block = out[out.index(label):]
        times = _THREAD_TIME.findall(block)[:3]
        assert [k for k, _ in times] == ["communication alone", "compute alone",
                                         "both, two threads"], block
        assert all(float(t) > 0 for _, t in times), block
        m = _OVERLAP.search(block)
        assert m, block
        assert float(m.group(1)) >= 0.0  # a figure, not a threshold: timing is the machine's
        assert "results OK (every Allreduce checked)" in block


# ---------------------------------------------------------------------------------------------
# data_parallel.py and zero_sharding.py (scikit-learn's digits)

_EPOCH = re.compile(r"epoch\s+(\d+)\s+loss ([\d.]+)\s+train accuracy\s+([\d.]+) %\s+"
                    r"test accuracy\s+([\d.]+) %")


@needs_sklearn
def test_data_parallel_compare_bitwise_and_baseline() -> None:
    out = ok(run_example("data_parallel.py", "--small", "--compare"))
    epochs = _EPOCH.findall(out)
    assert len(epochs) == 2 * 5  # native and p2p, 5 epochs each
    native, hand = epochs[:5], epochs[5:]
    assert native == hand  # the same numbers, epoch by epoch
    assert float(native[-1][1]) < float(native[0][1])  # the loss went down
    assert float(native[-1][3]) >= 90.0  # test accuracy
    assert "native vs p2p final weights: bitwise identical (np.array_equal)" in out
    assert "model replicas identical on every rank: yes" in out
    m = re.search(r"baseline .*: test accuracy ([\d.]+) %", out)
    assert m, out
    assert float(m.group(1)) >= 90.0, out
    assert "reaches the baseline" in out
    assert out.count("time in gradient Allreduce:") == 2
    assert out.rstrip().endswith("OK")


@needs_sklearn
def test_data_parallel_unquantized_within_tolerance() -> None:
    out = ok(run_example("data_parallel.py", "--small", "--compare", "--no-quantize",
                         "--algorithm", "ring", "--epochs", "2"))
    assert re.search(r"native vs p2p final weights: max \|diff\| = \S+ .*agree within 1e-6", out)
    assert out.rstrip().endswith("OK")


def test_data_parallel_without_sklearn_says_how_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "sklearn"  # an `import sklearn` that fails, whatever is installed
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    res = run_example("data_parallel.py", "--small", n=2, extra_path=str(tmp_path))
    assert res.returncode == 3, res.stderr
    assert "needs scikit-learn" in res.stderr
    assert "pip install 'mpicoll[examples]'" in res.stderr


@needs_sklearn
def test_zero_sharding_matches_data_parallel() -> None:
    out = ok(run_example("zero_sharding.py", "--small", "--backend", "both", "--epochs", "3"))
    assert "rank 0 [0, 603), rank 1 [603, 1206), rank 2 [1206, 1808), rank 3 [1808, 2410)" in out
    for line in ("ZeRO (native) vs DDP (native) final weights: bitwise identical -> agree",
                 "ZeRO (p2p) vs DDP (p2p) final weights: bitwise identical -> agree",
                 "ZeRO (native) vs ZeRO (p2p) final weights: bitwise identical -> agree",
                 "ZeRO replicas identical on every rank after the last Allgatherv: yes"):
        assert line in out
    assert float(_EPOCH.findall(out)[-1][3]) >= 90.0
    m = re.search(r"Reduce_scatter (\d+) \+ Allgatherv (\d+) = (\d+);", out)
    assert m, out
    assert int(m.group(1)) + int(m.group(2)) == int(m.group(3)), out
    assert out.rstrip().endswith("same result as the data-parallel version: OK")


# ---------------------------------------------------------------------------------------------
# moe_dispatch.py


def test_moe_dispatch_both_backends() -> None:
    out = ok(run_example("moe_dispatch.py", "--small"))
    assert out.count("all tokens OK: every token came home transformed by its own expert") == 2
    # The count matrix: every rank sends its 6 tokens; what rank r receives is column r.
    for block in out.split("tokens sent (row")[1:]:
        rows = re.findall(r"^  rank (\d+)\s+((?:\s*\d+){4})\s+(\d+)$", block, re.M)
        assert len(rows) == 4, block
        matrix = [[int(c) for c in cells.split()] for _, cells, _ in rows]
        assert all(sum(row) == 6 for row in matrix)
        for r in range(4):
            column = [matrix[q][r] for q in range(4)]
            assert f"Rank {r}: receives {column} (column {r}" in block


def test_moe_dispatch_three_ranks_forced_algorithm() -> None:
    out = ok(run_example("moe_dispatch.py", "--backend", "p2p", "--algorithm", "bruck",
                         "--tokens", "40", "--experts", "5", n=3))
    assert "p2p (alltoall bruck, alltoallv auto)" in out
    assert "all tokens OK" in out
