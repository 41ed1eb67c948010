"""Blocking vs non-blocking all-gather, measured: Appendix A of "From Scatter to All-Reduce:
A Plain-English Guide to Collective Operations".

Scenario 1 (blocking): ``Allgather`` of every rank's weights, then a computation; the CPU waits
for the network first.  Scenario 2 (non-blocking): ``Iallgather``, then an independent
computation of about the same length while the all-gather is in flight, then ``Wait``.  The
script times both, for the native backend (``MPI_Iallgather``) and the hand-rolled p2p backend,
and reports the overlap percentage as the OSU micro-benchmarks define it::

    overlap % = max(0, 100 * (1 - (t_overlapped - t_compute) / t_comm_pure))

where ``t_comm_pure`` is ``Iallgather`` + ``Wait`` with nothing in between, ``t_overlapped``
start + compute + wait, and ``t_compute`` the time spent computing inside that same run (the
computation is sized, as OSU does, to last about ``t_comm_pure``).  100 % means the
communication was completely hidden behind the computation, 0 % that none of it was.

Progress: the p2p backend is a Python generator that runs a schedule round by round; nothing
runs it in the background, so it advances ONLY inside ``req.Test()`` and ``req.Wait()``.
Without calls in the compute loop, only its first round (already posted when ``Iallgather``
returns) moves during the computation.  So the non-blocking scenario is run twice: without
``Test()`` calls, and with ``--test-calls N`` calls spread through the computation (OSU's ``-t``
option).  MPI's own non-blocking collectives mostly behave the same way: without an
asynchronous progress thread (``MPICH_ASYNC_PROGRESS=1``) or network offload, MPICH and Open MPI
also progress inside MPI calls, which is why the comparison with native is instructive.

Run:

    mpiexec -n 4 python -m mpi4py examples/overlap.py
    mpiexec -n 4 python -m mpi4py examples/overlap.py --backend p2p --algorithm ring \\
        --size 4M --test-calls 64

Each time is the median over iterations of the slowest rank's time.  With more ranks than cores
(a laptop), a rank that waits spins on a core another rank needs for its computation: the
figures are then noisy and understate what a cluster shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import registry

WORLD = MPI.COMM_WORLD
#: ``make examples`` sets MPICOLL_EXAMPLES_SMALL=1: the same as ``--small``
SMALL = os.environ.get("MPICOLL_EXAMPLES_SMALL", "") not in ("", "0")


def say(text: str = "") -> None:
    if WORLD.rank == 0:
        print(text, flush=True)


def parse_size(text: str) -> int:
    """'1M' -> 1048576 bytes (K, M, G suffixes, powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    scale = units.get(t[-1:], 1)
    value = int(float(t[:-1] if t[-1:] in units else t) * scale)
    if value < 8:
        raise argparse.ArgumentTypeError(f"size must be at least 8 bytes, got {text!r}")
    return value


class Compute:
    """Independent work for the overlap: ``np.sin`` over a small array, for a set wall time.

    As in OSU's benchmarks the work runs until ``seconds`` have passed (not a fixed number of
    operations), so its length does not depend on how much CPU a crowded node leaves it.
    ``run(test, calls)`` calls ``test()`` ``calls`` times, evenly spaced in time.
    """

    def __init__(self, seconds: float = 0.0) -> None:
        self.a = np.linspace(0.0, 1.0, 4096)
        self.out = np.empty_like(self.a)
        self.seconds = seconds

    def run(self, test: Callable[[], Any] | None = None, calls: int = 0) -> None:
        t0 = time.perf_counter()
        step = self.seconds / (calls + 1)
        next_test = t0 + step if test is not None and calls > 0 else float("inf")
        while (now := time.perf_counter()) - t0 < self.seconds:
            np.sin(self.a, out=self.out)  # ~10 us of work that needs no MPI at all
            if now >= next_test:
                assert test is not None
                test()  # let the collective progress (for p2p: post its next round)
                next_test += step


def timed(fn: Callable[[], float | None], iterations: int) -> tuple[float, float]:
    """Run ``fn`` ``iterations`` times, barrier-separated; each iteration's times are those of
    the slowest rank.  Returns the medians of (total time, compute time ``fn`` returned)."""
    totals, computes = [], []
    for _ in range(iterations):
        WORLD.Barrier()
        t0 = time.perf_counter()
        spent = fn()
        total = time.perf_counter() - t0
        slowest = max(WORLD.allgather((total, spent or 0.0)))
        totals.append(slowest[0])
        computes.append(slowest[1])
    return float(np.median(totals)), float(np.median(computes))


def overlap_pct(t_ovl: float, t_comp: float, t_pure: float) -> float:
    """OSU's overlap percentage."""
    return max(0.0, 100.0 * (1.0 - (t_ovl - t_comp) / t_pure)) if t_pure > 0 else 0.0


def measure(b: Any, kw: dict[str, str], count: int, iterations: int, warmup: int,
            test_calls: int) -> dict[str, float]:
    """Every timing of Appendix A on backend ``b``; checks the all-gather's result too."""
    p, r = b.size, b.rank
    local = np.full(count, float(r))  # this rank's "local_weights_buffer"
    everyone = np.empty(count * p)  # "all_weights_buffer"
    expected = np.repeat(np.arange(p, dtype=np.float64), count)
    comp = Compute()

    def pure() -> None:
        b.Iallgather(local, everyone, **kw).Wait()

    def compute() -> float:
        t0 = time.perf_counter()
        comp.run()
        return time.perf_counter() - t0

    def blocking() -> float:  # Scenario 1
        b.Allgather(local, everyone, **kw)
        return compute()

    def overlapped(calls: int) -> Callable[[], float]:  # Scenario 2
        def go() -> float:
            req = b.Iallgather(local, everyone, **kw)  # returns at once
            t0 = time.perf_counter()
            comp.run(req.Test, calls)  # independent work, with `calls` req.Test() in between
            spent = time.perf_counter() - t0
            req.Wait()  # pauses only if the all-gather is not done yet
            return spent
        return go

    for _ in range(warmup):
        pure()
    t: dict[str, float] = {}
    t["pure"], _ = timed(pure, iterations)
    comp.seconds = t["pure"]  # OSU: compute as long as the pure communication
    t["compute"], _ = timed(compute, iterations)
    t["blocking"], _ = timed(blocking, iterations)
    # OSU uses the compute time spent inside the overlapped run itself (same noise as its total)
    t["no_test"], t["no_test_compute"] = timed(overlapped(0), iterations)
    t["with_test"], t["with_test_compute"] = timed(overlapped(test_calls), iterations)
    everyone.fill(-1.0)
    overlapped(test_calls)()
    t["correct"] = float(WORLD.allreduce(bool(np.array_equal(everyone, expected)), op=MPI.LAND))
    return t


def report(label: str, t: dict[str, float], test_calls: int) -> None:
    rows = [
        ("pure communication", "Iallgather + Wait", "pure"),
        ("compute alone", "sized to the pure communication", "compute"),
        ("Scenario 1", "Allgather, then compute", "blocking"),
        ("Scenario 2", "Iallgather, compute, Wait", "no_test"),
        ("Scenario 2", f"the same with {test_calls} req.Test() in compute", "with_test"),
    ]
    say(label)
    for what, how, key in rows:
        line = f"  {what:19} {how:42} {t[key] * 1e3:9.3f} ms"
        if key == "blocking":
            line += f"   (comm + compute = {(t['pure'] + t['compute']) * 1e3:.3f} ms)"
        elif key not in ("pure", "compute"):
            pct = overlap_pct(t[key], t[key + "_compute"], t["pure"])
            line += f"   overlap {pct:5.1f} % (compute {t[key + '_compute'] * 1e3:.3f} ms)"
        say(line)
    saved = t["blocking"] - t["with_test"]
    say(f"  non-blocking + Test() vs blocking: {saved * 1e3:+.3f} ms saved "
        f"({100 * saved / t['blocking']:.0f} % of the blocking time); all-gather result "
        f"{'OK' if t['correct'] else 'WRONG'}")
    say()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p", "both"], default="both",
                        help="backend(s) to measure (default both)")
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="p2p allgather algorithm (ring, recursive_doubling, bruck; "
                             "default auto)")
    parser.add_argument("--size", type=parse_size, default=parse_size("1M"), metavar="BYTES",
                        help="bytes each rank contributes (float64; K/M/G suffixes; default 1M)")
    parser.add_argument("--iterations", type=int, default=20, help="timed runs (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    parser.add_argument("--test-calls", type=int, default=16, metavar="N",
                        help="req.Test() calls spread through the compute (default 16)")
    parser.add_argument("--small", action="store_true", default=SMALL,
                        help="a quick run: 64 KiB, 5 iterations, 1 warm-up (for the tests)")
    args = parser.parse_args(argv)
    if args.small:
        args.size, args.iterations, args.warmup = 64 << 10, 5, 1

    if args.algorithm not in (None, "auto"):
        names = [a.name for a in registry.algorithms("allgather")]
        if args.algorithm not in names:
            if WORLD.rank == 0:
                print(f"error: --algorithm: unknown allgather algorithm {args.algorithm!r}; "
                      f"expected one of {names} or 'auto'", file=sys.stderr, flush=True)
            return 2
    if args.iterations < 1 or args.test_calls < 0:
        if WORLD.rank == 0:
            print("error: --iterations must be >= 1 and --test-calls >= 0", file=sys.stderr)
        return 2

    count = args.size // 8
    node = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    crowded = node.size > len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else False
    crowded = bool(WORLD.allreduce(crowded, op=MPI.LOR))
    node.Free()

    say("Appendix A: blocking vs non-blocking all-gather, overlapped with independent compute")
    say(f"P = {WORLD.size} ranks, {count * 8} bytes (float64) per rank, {args.iterations} "
        "iterations; times: median over iterations of the slowest rank")
    say("overlap % = max(0, 100 * (1 - (t_overlapped - t_compute) / t_comm_pure))   (OSU;")
    say("            t_compute: the computing time inside the overlapped run; 100 % = fully "
        "hidden)")
    if crowded:
        say("note: more ranks than cores on a node here: waiting ranks steal compute cores, so "
            "times are noisy")
        say("      and overlap is understated.")
    say()

    runs: list[tuple[str, Any, dict[str, str]]] = []
    if args.backend in ("native", "both"):
        runs.append(("native (MPI_Iallgather, progress by the MPI library)",
                     mpicoll.native(WORLD), {}))
    if args.backend in ("p2p", "both"):
        alg = args.algorithm or "auto"
        runs.append((f"p2p (algorithm {alg}; progress only inside Test/Wait)",
                     mpicoll.p2p(WORLD), {"algorithm": alg}))
    ok = True
    for label, b, kw in runs:
        t = measure(b, kw, count, args.iterations, args.warmup, args.test_calls)
        report(label, t, args.test_calls)
        ok &= bool(t["correct"])
        b.Free()
    say("Without Test() calls the p2p all-gather moves only its first round during the compute;")
    say("each Test() lets it post the next one, so the communication hides behind the compute.")
    say("Native MPI without an asynchronous progress thread also advances mostly inside MPI calls.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
