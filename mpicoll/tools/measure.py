"""Timing loops of ``mpicoll bench``: OSU-style warm-up, barrier-separated iterations, max over
ranks.

Each iteration's time is the MAX over ranks of the local time of one call, preceded by a
barrier; statistics (min / median / mean / max / std, microseconds) are over iterations.  The
number of iterations is fixed (``-i``) or set from a time budget (IMB-style).  Non-blocking
calls are also timed with a busy compute overlapping them (OSU's ``osu_i*``; overlap as OSU
and IMB-NBC define it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = [
    "DEFAULT_TIME_BUDGET",
    "DEFAULT_WARMUP",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "Settings",
    "measure_blocking",
    "measure_nonblocking",
    "overlap_imb",
    "overlap_osu",
]

#: Default ``--time-budget`` (seconds of timed iterations per size and implementation).
DEFAULT_TIME_BUDGET = 0.1
MIN_ITERATIONS = 5
MAX_ITERATIONS = 1000
#: Default warm-up iterations when none is given.
DEFAULT_WARMUP = 2


def overlap_osu(t_pure: float, t_compute: float, t_total: float) -> float:
    """OSU overlap %: ``max(0, 100 (1 - (t_total - t_compute) / t_pure))`` (0 if t_pure <= 0)."""
    if t_pure <= 0:
        return 0.0
    return max(0.0, 100.0 * (1.0 - (t_total - t_compute) / t_pure))


def overlap_imb(t_pure: float, t_compute: float, t_total: float) -> float:
    """IMB-NBC overlap %: ``100 max(0, min(1, (t_pure + t_cpu - t_ovrl) / min(t_pure, t_cpu)))``."""
    m = min(t_pure, t_compute)
    if m <= 0:
        return 0.0
    return 100.0 * max(0.0, min(1.0, (t_pure + t_compute - t_total) / m))


@dataclass
class Settings:
    """Timing settings of a run (from the command line)."""

    iterations: int | None
    warmup: int | None
    time_budget: float | None
    test_calls: int = 0

    def warmup_count(self) -> int:
        """Warm-up iterations at each size."""
        if self.warmup is not None:
            return self.warmup
        if self.iterations is not None and self.time_budget is None:
            return max(1, self.iterations // 10)
        return DEFAULT_WARMUP

    def iteration_range(self) -> tuple[int, int]:
        """``(fewest, most)`` timed iterations at a size: ``(-i, -i)`` without a time budget;
        with one, :data:`MIN_ITERATIONS`.. :data:`MAX_ITERATIONS`, ``-i`` capping both."""
        if self.time_budget is None:
            assert self.iterations is not None
            return self.iterations, self.iterations
        if self.iterations is None:
            return MIN_ITERATIONS, MAX_ITERATIONS
        return min(MIN_ITERATIONS, self.iterations), self.iterations

    def iteration_count(self, comm: Any, t_est: float) -> int:
        """Timed iterations, given the warm-up estimate ``t_est`` (seconds, same on all ranks)."""
        lo, hi = self.iteration_range()
        if self.time_budget is None or lo == hi:
            return hi
        n = int(self.time_budget / t_est) if t_est > 0 else hi
        return max(lo, min(hi, n))

    def describe(self) -> str:
        """The iterations and warm-up of the run, as the header prints them."""
        lo, hi = self.iteration_range()
        w = self.warmup_count()
        if self.time_budget is None:
            iters = f"{hi} iteration{'s' * (hi != 1)} per size"
        elif lo == hi:
            iters = (f"{hi} iteration{'s' * (hi != 1)} per size (-i {hi} leaves the time "
                     f"budget of {self.time_budget:g} s nothing to choose)")
        else:
            iters = (f"time budget {self.time_budget:g} s per size and implementation "
                     f"({lo} to {hi} iterations)")
        warm = f"warm-up {w}"
        if w == 0 and self.time_budget is not None and lo < hi:
            warm += " (1 untimed call sets the iteration count)"
        return f"{iters}; {warm}"


def _timed_loop(
    comm: Any, fn: Callable[[], Any], n: int, nonblocking: bool
) -> np.ndarray[Any, Any]:
    """Local times (s) of ``n`` barrier-separated calls."""
    times = np.empty(n)
    barrier = comm.Barrier
    clock = time.perf_counter
    if nonblocking:
        for k in range(n):
            barrier()
            t0 = clock()
            fn().Wait()
            times[k] = clock() - t0
    else:
        for k in range(n):
            barrier()
            t0 = clock()
            fn()
            times[k] = clock() - t0
    return times


def _max_over_ranks(comm: Any, local: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out = np.empty_like(local)
    comm.Allreduce(local, out, op=MPI.MAX)
    return out


def _stats_us(samples: np.ndarray[Any, Any]) -> dict[str, float]:
    us = samples * 1e6
    return {
        "min": float(us.min()),
        "median": float(np.median(us)),
        "mean": float(us.mean()),
        "max": float(us.max()),
        "std": float(us.std(ddof=1)) if us.size > 1 else 0.0,
    }


def _iterations(
    comm: Any, fn: Callable[[], Any], settings: Settings, nonblocking: bool
) -> tuple[int, int]:
    """Run the warm-up; return (warm-up count, timed iteration count) agreed by all ranks."""
    w = settings.warmup_count()
    lo, hi = settings.iteration_range()
    t_est = 0.0
    if w > 0:
        tw = _max_over_ranks(comm, _timed_loop(comm, fn, w, nonblocking))
        t_est = float(np.median(tw))
    elif settings.time_budget is not None and lo < hi:
        tw = _max_over_ranks(comm, _timed_loop(comm, fn, 1, nonblocking))
        t_est = float(tw[0])
    return w, settings.iteration_count(comm, t_est)


def measure_blocking(comm: Any, fn: Callable[[], Any], settings: Settings) -> dict[str, Any]:
    """Warm up, then time barrier-separated calls; stats (us) of each iteration's max over ranks."""
    w, n = _iterations(comm, fn, settings, nonblocking=False)
    t = _max_over_ranks(comm, _timed_loop(comm, fn, n, nonblocking=False))
    return {"iterations": n, "warmup": w, "time_us": _stats_us(t)}


def _spin(seconds: float, req: Any, test_calls: int) -> float:
    """Busy compute of ``seconds`` (a spin on perf_counter) calling ``req.Test()`` ``test_calls``
    times evenly through it; returns the time actually spent."""
    clock = time.perf_counter
    t0 = clock()
    end = t0 + seconds
    marks = [t0 + seconds * (k + 1) / (test_calls + 1) for k in range(test_calls)]
    k = 0
    done = False
    while True:
        now = clock()
        if now >= end:
            break
        if k < len(marks) and now >= marks[k]:
            k += 1
            if not done:
                done = bool(req.Test())
    while k < len(marks):  # marks skipped by a late wake-up still get their Test()
        k += 1
        if not done:
            done = bool(req.Test())
    return clock() - t0


def measure_nonblocking(comm: Any, fn: Callable[[], Any], settings: Settings) -> dict[str, Any]:
    """OSU-style overlap measurement of an ``I...`` call (see the module docstring)."""
    w, n = _iterations(comm, fn, settings, nonblocking=True)
    pure = _max_over_ranks(comm, _timed_loop(comm, fn, n, nonblocking=True))
    t_pure = float(np.median(pure))
    clock = time.perf_counter
    # warm-up of the overlapped form too
    for _ in range(max(1, w // 2)):
        comm.Barrier()
        req = fn()
        _spin(t_pure, req, settings.test_calls)
        req.Wait()
    total = np.empty(n)
    cpu = np.empty(n)
    for k in range(n):
        comm.Barrier()
        t0 = clock()
        req = fn()
        cpu[k] = _spin(t_pure, req, settings.test_calls)
        req.Wait()
        total[k] = clock() - t0
    # per iteration, the rank with the largest total (IMB); its compute time goes with it
    pairs = np.stack([total, cpu], axis=1)
    everyone = np.empty((comm.Get_size(), n, 2))
    comm.Allgather(pairs, everyone)
    worst = np.argmax(everyone[:, :, 0], axis=0)
    t_tot = everyone[worst, np.arange(n), 0]
    t_cpu = everyone[worst, np.arange(n), 1]
    med_total, med_cpu = float(np.median(t_tot)), float(np.median(t_cpu))
    return {
        "iterations": n,
        "warmup": w,
        "time_us": _stats_us(pure),
        "pure_us": _stats_us(pure),
        "total_us": _stats_us(t_tot),
        "compute_us": _stats_us(t_cpu),
        "overlap_osu_pct": overlap_osu(t_pure, med_cpu, med_total),
        "overlap_imb_pct": overlap_imb(t_pure, med_cpu, med_total),
        "test_calls": settings.test_calls,
    }


