"""``bench --phases``: per-round times of the p2p schedules (P = 1..5).

:func:`mpicoll.tools.measure.measure_phases` turns the engine's round hook on for its own
iterations only, records one time per round the schedule ran (as many as the engine's traffic
counter says it posted, on rank 0 and on the slowest rank), the same record on every rank; and
``bench --phases`` puts them, labelled (ring allreduce: its reduce-scatter then its allgather
rounds), in the JSON of the p2p records only, valid against the schema, with a plot.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_phases.py``.  Timings are never
asserted: only what is recorded about them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _cli import run_all
from mpi4py import MPI

from mpicoll.backends.p2p import p2p
from mpicoll.engines import mpi as engine
from mpicoll.tools import bench
from mpicoll.tools.measure import measure_phases

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()


@pytest.mark.mpi
@pytest.mark.parametrize(("alg", "count"), [("ring", 7), ("ring", 1), ("recursive_doubling", 5),
                                            ("ring", 0)])
def test_one_time_per_round_agreed_and_the_hook_off_after(alg: str, count: int) -> None:
    b = p2p(WORLD, check=True)  # checked mode: every call through the engine's blocking loop
    x = np.arange(count, dtype=np.float64) + RANK
    y = np.empty_like(x)
    try:
        before = b._engine.traffic.rounds
        b.Allreduce(x, y, algorithm=alg)
        rounds = b._engine.traffic.rounds - before  # what this rank's schedule posted
        np.testing.assert_array_equal(y, sum(np.arange(count) + r for r in range(SIZE)))
        every = WORLD.allgather(rounds)
        ph = measure_phases(WORLD, lambda: b.Allreduce(x, y, algorithm=alg), 3)
        assert engine.round_marks is None
        agreed = WORLD.allgather(ph)
    finally:
        b.Free()
    assert all(a == agreed[0] for a in agreed)
    if every[0] == 0:  # P = 1 or nothing to move: no round to time
        assert ph is None
        return
    assert ph is not None
    assert ph["iterations"] == 3
    assert ph["rounds"] == len(ph["rank0_us"]) == every[0]
    assert 0 <= ph["slowest_rank"] < SIZE
    assert len(ph["slowest_us"]) == every[ph["slowest_rank"]]
    assert all(t >= 0 for t in ph["rank0_us"] + ph["slowest_us"])
    if ph["slowest_rank"] == 0:
        assert ph["slowest_us"] == ph["rank0_us"]


def test_phase_labels_from_the_algorithm_structure() -> None:
    assert bench.phase_labels("allreduce", "ring", 4, 6) == ["reduce-scatter"] * 3 + \
        ["allgather"] * 3
    assert bench.phase_labels("allreduce", "rabenseifner", 8, 6) == ["reduce-scatter"] * 3 + \
        ["allgather"] * 3
    # not a power of two: fold rounds besides; no names
    assert bench.phase_labels("allreduce", "rabenseifner", 6, 5) == [f"round {k}"
                                                                     for k in range(5)]
    assert bench.phase_labels("bcast", "binomial", 4, 2) == ["round 0", "round 1"]


@pytest.mark.mpi
def test_bench_phases_json_and_plot(capsys: pytest.CaptureFixture[str],
                                    shared_dir: Path) -> None:
    path, png = shared_dir / "phases.json", shared_dir / "phases.png"
    status, out, err = run_all(capsys, "bench", "-c", "allreduce", "bcast", "-a", "ring",
                               "binomial", "auto", "-m", "8:4K:8", "-i", "2", "-x", "1", "-q",
                               "--phases", "--json", str(path), "--plot", str(png))
    assert status == 0, out + err
    if RANK != 0:
        return
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    for r in doc["results"]:
        if r["backend"] != "p2p" or SIZE == 1:
            assert "phases" not in r, r["implementation"]
            continue
        ph = r["phases"]
        assert len(ph["labels_rank0"]) == len(ph["rank0_us"]) == ph["rounds"]
        assert len(ph["labels_slowest"]) == len(ph["slowest_us"])
        if r["collective"] == "allreduce" and r["implementation"] == "ring":
            assert ph["rounds"] % (2 * (SIZE - 1)) == 0  # each segment once per phase
            half = ph["rounds"] // 2
            assert ph["labels_rank0"] == ["reduce-scatter"] * half + ["allgather"] * half
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.mpi
def test_bench_phases_refused_where_it_does_not_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    for extra, msg in ((["--nonblocking"], "argument --phases: not with --nonblocking"),
                       (["-a", "none"], "argument --phases: no p2p algorithm to time")):
        status, _out, err = run_all(capsys, "bench", "-c", "allreduce", "-m", "8", "-i", "1",
                                   "-q", "--phases", *extra)
        assert status == 2
        if RANK == 0:
            assert msg in err, err
