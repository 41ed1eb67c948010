"""``mpicoll report``: one saved bench --json printed again (its tables, the plot), two
compared per implementation and size with the noise-aware verdict, and bad files refused.
The documents are real ones of this process (P = 1) with their times set, so the verdicts
are known; no timing is measured."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mpicoll.tools import cli, report


def saved(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "a.json"
    assert cli.main(["bench", "-c", "allreduce", "-m", "8:16", "-i", "2", "-x", "0", "-q",
                     "--json", str(path)]) == 0
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def timed(doc: dict[str, Any], times: dict[tuple[str, int], tuple[float, float, float]]
          ) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for r in doc["results"]:
        lo, mid, hi = times[(r["implementation"], r["size_bytes"])]
        r["time_us"].update(min=lo, p10=lo, median=mid, p50=mid, p90=hi, max=hi)
    return doc


def test_report_one_file_and_two_compared(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    base = saved(tmp_path)
    capsys.readouterr()
    impls = sorted({r["implementation"] for r in base["results"]})
    assert impls == ["auto", "mpi4py", "native"]
    a = timed(base, {(i, s): (10, 11, 12) for i in impls for s in (8, 16)})
    b = timed(base, {**{(i, s): (10.5, 11, 12.5) for i in impls for s in (8, 16)},
                     ("native", 8): (1, 2, 3), ("auto", 16): (20, 30, 40)})
    pa, pb = tmp_path / "A.json", tmp_path / "B.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    # one file: bench's table and plot again
    assert cli.main(["report", str(pa), "--plot", str(tmp_path / "one.png"), "--stats"]) == 0
    text = capsys.readouterr().out
    assert "# allreduce: S = vector per rank" in text
    assert "# warning: P = 1" in text
    assert text.rstrip().endswith(f"# wrote {tmp_path / 'one.png'}")
    assert (tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"
    # two: B against A
    rows = {(r["implementation"], r["size_bytes"]): r for r in report.compare_runs(a, b)}
    assert len(rows) == 6
    assert rows[("native", 8)]["verdict"] == "faster"
    assert rows[("native", 8)]["ratio"] == pytest.approx(2 / 11)
    assert rows[("auto", 16)]["verdict"] == "SLOWER"
    assert rows[("mpi4py", 16)]["verdict"] == "within noise"
    assert cli.main(["report", str(pa), str(pb), "--plot", str(tmp_path / "two.png")]) == 0
    text = capsys.readouterr().out
    assert "# allreduce: B faster at 1, slower at 1, within the noise at 4 of 6" in text
    assert "B/A 0.182  faster" in text
    assert (tmp_path / "two.png").read_bytes()[:4] == b"\x89PNG"
    # refused: a file that is not bench's, three files, --stats with two
    (tmp_path / "x.json").write_text("{}")
    for argv, msg in ((["report", str(tmp_path / "x.json")], "not a bench --json file"),
                      (["report", str(pa), str(pb), str(pa)], "one file, or two"),
                      (["report", str(pa), str(pb), "--stats"], "with one file only"),
                      (["report", str(tmp_path / "nope.json")], "nope.json")):
        assert cli.main(argv) == 2, argv
        assert msg in capsys.readouterr().err, argv
