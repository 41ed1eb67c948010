"""bench's and report's plots: sizes labelled B/KiB/MiB at the measured sizes (not 2^k),
barrier (no message size) drawn as bars instead of an empty panel, and no matplotlib warning.
The document is a real one of this process (P = 1)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from mpicoll.tools import cli, report


def test_size_label() -> None:
    assert [report.size_label(n) for n in (0, 8, 1000, 1024, 3 << 10, 1 << 20, 5 << 30)] == \
        ["0 B", "8 B", "1000 B", "1 KiB", "3 KiB", "1 MiB", "5 GiB"]


def test_size_axis_ticks_are_the_sizes_in_units() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    sizes = [8 << k for k in range(18)]  # 8 B .. 1 MiB: thinned to at most 12 ticks
    ax.plot(sizes, sizes)
    report._size_axis(ax, sizes)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "8 B"
    assert "32 B" in labels
    assert 1 < len(labels) <= 12
    assert all(x.endswith(("B", "KiB", "MiB")) and "^" not in x for x in labels)
    assert list(ax.get_xticks()) == sizes[::2]
    assert not any(t.label1.get_text() for t in ax.xaxis.get_minor_ticks())
    plt.close(fig)


def test_plots_with_barrier_warn_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    assert cli.main(["bench", "-c", "allreduce", "barrier", "-m", "8:1K", "-i", "2", "-x", "0",
                     "-q", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.write_plot(str(tmp_path / "bench.png"), doc)
        report.write_ratio_plot(str(tmp_path / "ratio.png"), doc, doc,
                                report.compare_runs(doc, doc))
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "ratio.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("n", [1, 2])
def test_few_sizes(n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    report._size_axis(ax, [64 << k for k in range(n)])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64 B", "128 B"][:n]
    plt.close(fig)


@pytest.mark.parametrize(("ratios", "scale"), [((0.8, 1.15), "linear"), ((0.3, 6.0), "log")])
def test_ratio_plot_axis_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               ratios: tuple[float, float], scale: str) -> None:
    """The B/A plot's y axis: linear where the ratios span 4x or less (a log axis there has
    no label but 1), log above; its tick labels are numbers either way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown: list[Any] = []
    monkeypatch.setattr(plt, "close", lambda fig: shown.append(fig))
    rows = [{"collective": "allreduce", "size_bytes": s, "pattern": "numpy",
             "implementation": "native", "ratio": r} for s, r in zip((8, 64), ratios, strict=True)]
    doc = {"provenance": {"mpi_vendor": "MPICH", "P": 2, "date": "today"}, "results": []}
    report.write_ratio_plot(str(tmp_path / "ratio.png"), doc, doc, rows)
    ax = shown[0].axes[0]
    assert ax.get_yscale() == scale
    shown[0].canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.yaxis.get_minorticklabels()
              if t.get_text()]
    assert len(labels) >= 2, labels
    matplotlib.pyplot.close("all")


def test_bench_plot_names_what_it_draws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                        ) -> None:
    """bench's plot: the title names the persistent curves when they are drawn, each line
    has its p10..p90 spread shaded, and two summary panels follow the collectives (the best
    p2p's speedup over native, native's busbw), each with a line per collective."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path / "b.json"
    assert cli.main(["bench", "-c", "allreduce", "bcast", "-m", "8:64", "-i", "2", "-x", "0",
                     "--persistent", "-q", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    shown: list[Any] = []
    monkeypatch.setattr(plt, "close", lambda fig: shown.append(fig))
    report.write_plot(str(tmp_path / "bench.png"), doc)
    fig = shown[0]
    assert "persistent" in fig._suptitle.get_text()
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles[:2] == ["allreduce", "bcast"]
    assert "speedup of the best p2p over native" in titles
    assert "native busbw" in titles
    for ax in fig.axes[:2]:
        assert ax.collections, "no p10..p90 band"
    speed = fig.axes[titles.index("speedup of the best p2p over native")]
    assert sorted(line.get_label() for line in speed.get_lines()
                  if not line.get_label().startswith("_")) == ["allreduce", "bcast"]
    matplotlib.pyplot.close("all")
