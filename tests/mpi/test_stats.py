"""bench's per-iteration statistics on every rank of the job (P = 1..5): the record of
:func:`mpicoll.tools.measure.measure_blocking` is the same on every rank and consistent (one
entry per iteration, the counts per rank and per host summing to the iterations, the hosts
the job's), and, with each rank's clock replaced by a known one, each iteration's time (the
max over ranks), its slowest rank and its entry skew are the known ones.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_stats.py``.  Timings are never
asserted: only what is recorded about them.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.tools.measure import SYNC, Settings, measure_blocking, measure_nonblocking

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()


@pytest.mark.mpi
@pytest.mark.parametrize("nonblocking", [False, True])
def test_iteration_stats_are_consistent_and_agreed(nonblocking: bool) -> None:
    comm = WORLD.Dup()
    x = np.arange(10.0)
    y = np.empty_like(x)
    try:
        if nonblocking:
            res = measure_nonblocking(comm, lambda: comm.Iallreduce(x, y),
                                      Settings(6, 1, None))
        else:
            res = measure_blocking(comm, lambda: comm.Allreduce(x, y), Settings(6, 1, None))
        everyone = comm.allgather(res)
    finally:
        comm.Free()
    assert all(r == everyone[0] for r in everyone)
    its = res["iteration_stats"]
    n = res["iterations"]
    assert n == 6
    assert len(its["iterations_us"]) == len(its["slowest_rank"]) == n
    assert len(its["entry_skew_us"]) == n
    assert all(0 <= r < SIZE for r in its["slowest_rank"])
    assert len(its["slowest_count_by_rank"]) == SIZE
    assert sum(its["slowest_count_by_rank"]) == n
    assert its["slowest_count_by_rank"] == [its["slowest_rank"].count(r) for r in range(SIZE)]
    hosts = set(WORLD.allgather(MPI.Get_processor_name()))
    assert set(its["slowest_count_by_host"]) <= hosts
    assert sum(its["slowest_count_by_host"].values()) == n
    assert all(s >= 0 for s in its["entry_skew_us"])
    assert its["sync"] == SYNC
    key = "pure_us" if nonblocking else "time_us"
    t = res[key]
    assert t["max"] == pytest.approx(max(its["iterations_us"]), abs=1e-3)
    assert t["min"] <= t["p10"] <= t["p50"] <= t["p90"] <= t["p99"] <= t["max"]


@pytest.mark.mpi
def test_known_clocks_give_known_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank's clock replaced by one that advances by rank + 1 seconds per reading: every
    call of rank r then lasts r + 1 s and starts at (2k + 1)(r + 1) s in iteration k, so
    every iteration's time is P s, its slowest rank P - 1 and its entry skew (2k + 1)(P - 1)
    s, exactly (one host: the clocks are compared as they are)."""
    import mpicoll.tools.measure as measure

    if len(set(WORLD.allgather(MPI.Get_processor_name()))) > 1:
        pytest.skip("one host only: across hosts the clocks are offset by ping-pong")
    step = float(RANK + 1)
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    monkeypatch.setattr(measure.time, "perf_counter", clock)
    res = measure_blocking(WORLD, lambda: None, Settings(3, 0, None))
    its = res["iteration_stats"]
    assert its["iterations_us"] == [SIZE * 1e6] * 3
    assert its["slowest_rank"] == [SIZE - 1] * 3
    assert its["slowest_count_by_rank"] == [0] * (SIZE - 1) + [3]
    assert its["entry_skew_us"] == [(2 * k + 1) * (SIZE - 1) * 1e6 for k in range(3)]
    assert res["time_us"]["p50"] == SIZE * 1e6
    assert res["time_us"]["cv"] == 0.0
