"""Timing loops of ``mpicoll bench``: OSU-style warm-up, barrier-separated iterations, max over
ranks.

Each iteration's time is the MAX over ranks of the local time of one call, preceded by a
barrier; statistics (min / median / mean / max / std, p10 / p50 / p90 / p99, coefficient of
variation; microseconds) are over iterations.  Every record also keeps each iteration's time,
the slowest rank of each iteration, how often each rank and host was the slowest, and the entry
skew of each iteration (latest minus earliest start over ranks, clocks compared as
:func:`clock_offsets` says): :func:`iteration_stats`.  The
number of iterations is fixed (``-i``) or set from a time budget (IMB-style).  Non-blocking
calls are also timed with a busy compute overlapping them (OSU's ``osu_i*``; overlap as OSU
and IMB-NBC define it).  ``bench --phases`` times each round of a p2p schedule apart, in
iterations of their own after the timed ones (:func:`measure_phases`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = [
    "DEFAULT_TIME_BUDGET",
    "DEFAULT_WARMUP",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SYNC",
    "Settings",
    "clock_offsets",
    "iteration_stats",
    "measure_blocking",
    "measure_nonblocking",
    "measure_phases",
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
    comm: Any, fn: Callable[[], Any], n: int, nonblocking: bool,
    entry: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Local times (s) of ``n`` barrier-separated calls; ``entry[k]``, when given, receives the
    clock (``time.perf_counter``, s) at which call ``k`` started on this rank."""
    times = np.empty(n)
    starts = np.empty(n) if entry is None else entry
    barrier = comm.Barrier
    clock = time.perf_counter
    if nonblocking:
        for k in range(n):
            barrier()
            t0 = clock()
            fn().Wait()
            times[k] = clock() - t0
            starts[k] = t0
    else:
        for k in range(n):
            barrier()
            t0 = clock()
            fn()
            times[k] = clock() - t0
            starts[k] = t0
    return times


def _max_over_ranks(comm: Any, local: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out = np.empty_like(local)
    comm.Allreduce(local, out, op=MPI.MAX)
    return out


def _stats_us(samples: np.ndarray[Any, Any]) -> dict[str, float]:
    """min, median, mean, max, std (ddof 1), p10, p50, p90, p99 (NumPy's linear
    interpolation between the closest ranks) and cv (std / mean; 0 for one sample or a zero
    mean) of ``samples`` in seconds, as microseconds (cv: a ratio)."""
    us = np.asarray(samples, dtype=float) * 1e6
    p10, p50, p90, p99 = (float(x) for x in np.percentile(us, [10, 50, 90, 99]))
    mean = float(us.mean())
    std = float(us.std(ddof=1)) if us.size > 1 else 0.0
    return {
        "min": float(us.min()),
        "median": p50,
        "mean": mean,
        "max": float(us.max()),
        "std": std,
        "p10": p10,
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "cv": std / mean if mean > 0 else 0.0,
    }


#: What separates two timed iterations (``iteration_stats.sync`` of every record).
SYNC = "MPI_Barrier on the benchmarked communicator before each iteration"


def clock_offsets(comm: Any, hosts: Sequence[str] | None = None
                  ) -> tuple[np.ndarray[Any, Any], str]:
    """Each rank's ``time.perf_counter`` offset to rank 0's (s; the same array on every rank)
    and how it was found.  Ranks on rank 0's host share its clock (``CLOCK_MONOTONIC``, one per
    machine): offset 0.  Others: Cristian's estimate from 10 ping-pongs with rank 0, the one
    of least round-trip time (error at most half of it).  Collective over ``comm``."""
    p, rank = comm.Get_size(), comm.Get_rank()
    if hosts is None:
        hosts = comm.allgather(MPI.Get_processor_name())
    off = np.zeros(p)
    rtt = np.zeros(p)
    clock = time.perf_counter
    for r in range(1, p):
        if hosts[r] == hosts[0]:
            continue
        if rank == 0:
            for _ in range(10):
                comm.recv(source=r, tag=7)
                comm.send(clock(), dest=r, tag=7)
        elif rank == r:
            best = (math.inf, 0.0)
            for _ in range(10):
                t0 = clock()
                comm.send(None, dest=0, tag=7)
                t_root = comm.recv(source=0, tag=7)
                t1 = clock()
                if t1 - t0 < best[0]:
                    best = (t1 - t0, (t0 + t1) / 2 - t_root)
            rtt[r], off[r] = best
    local = np.array([off[rank], rtt[rank]])
    both = np.empty((p, 2))
    comm.Allgather(local, both)
    off, rtt = both[:, 0].copy(), both[:, 1]
    remote = [r for r in range(p) if hosts[r] != hosts[0]]
    how = ("one host: every rank reads the same CLOCK_MONOTONIC" if not remote else
           f"ranks on {hosts[0]} share rank 0's clock; the {len(remote)} other(s) offset by "
           f"ping-pong with rank 0 (error <= {float(rtt.max()) / 2 * 1e6:.2g} us)")
    return off, how


def iteration_stats(times: np.ndarray[Any, Any], entries: np.ndarray[Any, Any],
                    hosts: Sequence[str], clock: str = "") -> dict[str, Any]:
    """The per-iteration statistics of one measurement, from every rank's local call times
    ``times`` (s, shape ``(P, n)``) and entry clocks ``entries`` (s, rank 0's time base,
    ``(P, n)``); ``hosts[r]``: rank r's host.

    Returns ``iterations_us`` (each iteration's time: the max over ranks, us),
    ``slowest_rank`` (per iteration, the rank of that max; the lowest on a tie),
    ``slowest_count_by_rank`` (length P) and ``slowest_count_by_host`` (how often each was
    slowest), ``entry_skew_us`` (per iteration, latest minus earliest entry over ranks, us:
    how late the last rank arrived) with its stats, and ``sync``/``clock``: what separated the
    iterations and how the entry clocks were compared."""
    times = np.asarray(times, dtype=float)
    entries = np.asarray(entries, dtype=float)
    worst = np.argmax(times, axis=0)
    p = times.shape[0]
    by_rank = np.bincount(worst, minlength=p)
    by_host: dict[str, int] = {}
    for r, c in enumerate(by_rank):
        if c:
            by_host[hosts[r]] = by_host.get(hosts[r], 0) + int(c)
    skew = entries.max(axis=0) - entries.min(axis=0)
    return {
        "iterations_us": [round(float(x) * 1e6, 3) for x in times.max(axis=0)],
        "slowest_rank": [int(x) for x in worst],
        "slowest_count_by_rank": [int(x) for x in by_rank],
        "slowest_count_by_host": by_host,
        "entry_skew_us": [round(float(x) * 1e6, 3) for x in skew],
        "entry_skew_stats_us": _stats_us(skew),
        "sync": SYNC,
        "clock": clock,
    }


def _gathered(comm: Any, local: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Every rank's ``local`` (length n), as ``(P, n)`` on every rank."""
    out = np.empty((comm.Get_size(), local.size))
    comm.Allgather(np.ascontiguousarray(local, dtype=float), out)
    return out


def _timed(comm: Any, fn: Callable[[], Any], n: int, nonblocking: bool
           ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
    """``n`` timed calls: each iteration's max over ranks (s) and :func:`iteration_stats`."""
    entry = np.empty(n)
    local = _timed_loop(comm, fn, n, nonblocking, entry)
    hosts = comm.allgather(MPI.Get_processor_name())
    offsets, how = clock_offsets(comm, hosts)
    times = _gathered(comm, local)
    entries = _gathered(comm, entry - offsets[comm.Get_rank()])
    return times.max(axis=0), iteration_stats(times, entries, hosts, how)


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
    """Warm up, then time barrier-separated calls; stats (us) of each iteration's max over
    ranks (``time_us``) and the per-iteration ones (``iteration_stats``)."""
    w, n = _iterations(comm, fn, settings, nonblocking=False)
    t, its = _timed(comm, fn, n, nonblocking=False)
    return {"iterations": n, "warmup": w, "time_us": _stats_us(t), "iteration_stats": its}


def measure_phases(comm: Any, fn: Callable[[], Any], iterations: int) -> dict[str, Any] | None:
    """Per-round times of a blocking p2p call ``fn`` (``bench --phases``): ``iterations``
    barrier-separated calls with :data:`mpicoll.engines.mpi.round_marks` on (the engine's
    hook, off again before returning), each round's time (us) the median over iterations on
    each rank.  Returns ``{"iterations", "rounds", "rank0_us", "slowest_rank",
    "slowest_us"}`` (``rounds``: rank 0's; the slowest rank: the largest sum of its rounds'
    medians, the lowest on a tie; a rank's rounds are those of its own schedule, so a rooted
    algorithm's ranks may have different counts), the same on every rank; None where rank 0
    ran no round through the engine's blocking path (P = 1, a call with nothing to send)."""
    from ..engines import mpi as engine

    runs: list[list[float]] = []
    try:
        for _ in range(max(1, iterations)):
            comm.Barrier()
            marks: list[float] = []
            engine.round_marks = marks
            try:
                fn()
            finally:
                engine.round_marks = None
            runs.append([(b - a) * 1e6 for a, b in itertools.pairwise(marks)])
    finally:
        engine.round_marks = None
    n = min(len(r) for r in runs)
    local = [float(np.median([r[k] for r in runs])) for k in range(n)] if n else []
    every = comm.allgather(local)
    if not every[0]:
        return None
    slowest = max(range(len(every)), key=lambda r: (sum(every[r]), -r))
    return {"iterations": len(runs), "rounds": len(every[0]), "rank0_us": every[0],
            "slowest_rank": slowest, "slowest_us": every[slowest]}


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
    pure, its = _timed(comm, fn, n, nonblocking=True)
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
        "iteration_stats": its,
    }


