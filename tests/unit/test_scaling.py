"""``mpicoll.tools.scaling``: the simulator's scaling plot (time against P per algorithm)."""

from __future__ import annotations

import json

import pytest

from mpicoll.engines.network import Network
from mpicoll.model.alphabeta import Model
from mpicoll.tools import scaling
from mpicoll.tools.simulate import simulate


def test_powers_of_two():
    assert scaling.powers_of_two("4:64") == [4, 8, 16, 32, 64]
    assert scaling.powers_of_two("4:70") == [4, 8, 16, 32, 64]
    assert scaling.powers_of_two("6") == [6]
    for bad in ("1:8", "8:4", "a:b", ""):
        with pytest.raises(ValueError):
            scaling.powers_of_two(bad)


def test_rows_are_the_simulators_on_the_network():
    m = Model(alpha=2e-6, beta=1e-10, gamma=2.5e-10)
    rows = scaling.scaling_rows("allreduce", [4, 8, 16], 1 << 16, ["ring", "recursive_doubling"],
                                m, "fattree:4:2")
    assert [(r["P"], r["algorithm"]) for r in rows] == [
        (p, a) for p in (4, 8, 16) for a in ("ring", "recursive_doubling")]
    for r in rows:
        want = simulate("allreduce", r["P"], (1 << 16) // 8, algorithm=r["algorithm"], model=m,
                        network=Network("fattree:4:2"))
        assert r["time_us"] == pytest.approx(want.time * 1e6, rel=1e-12)
    # P = 16 on leaves of 4 under a 2:1 spine: recursive doubling's far rounds cross it
    far = {r["algorithm"]: r["time_us"] for r in rows if r["P"] == 16}
    flat = simulate("allreduce", 16, (1 << 16) // 8, algorithm="recursive_doubling", model=m)
    assert far["recursive_doubling"] > flat.time * 1e6


def test_command_writes_the_plot_and_rows(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png, rows = tmp_path / "s.png", tmp_path / "rows.json"
    assert scaling.main(["-c", "allgather", "-m", "64K", "-n", "4:16", "--topology",
                         "torus:4x4", "-a", "ring", "bruck", "-o", str(png),
                         "--json", str(rows)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    got = json.loads(rows.read_text())
    assert {(r["P"], r["algorithm"]) for r in got} == {
        (p, a) for p in (4, 8, 16) for a in ("ring", "bruck")}
    out = capsys.readouterr().out
    assert "torus:4x4" in out
    assert out.count("\n") == 2 + 3  # the heading, the column names, a line per P


def test_command_refuses_bad_counts(tmp_path):
    with pytest.raises(SystemExit):
        scaling.main(["-n", "8:4", "--topology", "fattree:4", "-a", "ring",
                      "-o", str(tmp_path / "x.png")])
