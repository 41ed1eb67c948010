"""bench's per-iteration statistics on every rank of the job (P = 1..5): the record of
:func:`mpicoll.tools.measure.measure_blocking` is the same on every rank and consistent (one
entry per iteration, the counts per rank and per host summing to the iterations, the hosts
the job's), and each iteration's time is the max over ranks of the local call times, which a
rank that always sleeps longest makes it the slowest of every iteration.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_stats.py``.  Timings are never
asserted: only what is recorded about them.
"""

from __future__ import annotations

import time

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
def test_the_rank_that_sleeps_is_the_slowest_of_every_iteration() -> None:
    """The last rank sleeps 200 ms in each call, the others return at once: each iteration's
    time is its (the max over ranks), and it is the slowest rank of all of them."""
    last = SIZE - 1

    def fn() -> None:
        if last == RANK:
            time.sleep(0.2)

    res = measure_blocking(WORLD, fn, Settings(3, 0, None))
    its = res["iteration_stats"]
    assert its["slowest_rank"] == [last] * 3
    assert its["slowest_count_by_rank"][last] == 3
    assert all(t >= 2e5 for t in its["iterations_us"])  # the sleeper's 200 ms, not a no-op's
