"""A communication thread beside a compute thread: blocking collectives hidden behind compute.

The p2p backend advances its schedules only inside mpicoll calls (see ``overlap.py``), so a
non-blocking collective in the main thread moves only when the compute loop calls ``Test()``.
A second thread removes the need: it makes *blocking* ``Allreduce`` calls on its own backend
while the main thread computes (NumPy's matrix product releases the GIL, and so does MPI while
it waits), which is how a data-parallel trainer overlaps its gradient all-reduces with the
backward pass.  It needs ``MPI_THREAD_MULTIPLE``, mpi4py's default; the backend belongs to
the communication thread (one backend per thread needs no lock: see docs/threads.md).

Three runs, each timed as the slowest rank's, median over ``--reps``:

* communication alone: the thread makes ``--calls`` Allreduces of ``--size`` bytes;
* compute alone: matrix products sized to last about as long;
* both at once: the thread communicates while the main thread computes.

The overlap is the OSU micro-benchmarks' figure::

    overlap % = max(0, 100 * (1 - (t_both - t_compute) / t_comm))

100 % means the communication was completely hidden behind the computation.  Every all-reduce
result is checked ("results OK").  With more ranks than free cores the ranks share cores
with each other and the figure drops; set ``OMP_NUM_THREADS=1`` so BLAS does not take them all.

Run:

    mpiexec -n 2 python -m mpi4py examples/thread_overlap.py
    mpiexec -n 4 python -m mpi4py examples/thread_overlap.py --backend p2p --size 4M
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import mpicoll


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def communicate(backend: Any, rank: int, size: int, count: int, calls: int,
                algorithm: str | None, errors: list[str]) -> None:
    """``calls`` blocking Allreduce(SUM) of ``count`` float64, every result checked."""
    kw = {} if algorithm is None else {"algorithm": algorithm}
    y = np.empty(count)
    base = np.arange(count, dtype=np.float64)
    for i in range(calls):
        x = base + rank + i
        backend.Allreduce(x, y, op=MPI.SUM, **kw)
        if not np.array_equal(y, size * (base + i) + size * (size - 1) / 2):
            errors.append(f"call {i}: wrong sum")


def compute(a: np.ndarray, reps: int) -> float:
    """``reps`` matrix products (the GIL is released inside); a checksum."""
    c = a
    for _ in range(reps):
        c = (a @ c) * (1.0 / a.shape[0])
    return float(c[0, 0])


def slowest(comm: MPI.Comm, seconds: float) -> float:
    return float(comm.allreduce(seconds, op=MPI.MAX))


def timed(comm: MPI.Comm, fn: Callable[[], None]) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return slowest(comm, time.perf_counter() - t0)


def run(comm: MPI.Comm, kind: str, args: argparse.Namespace, count: int) -> dict[str, float]:
    rank, size = comm.Get_rank(), comm.Get_size()
    backend = mpicoll.p2p(comm) if kind == "p2p" else mpicoll.native(comm.Dup())
    algorithm = args.algorithm if kind == "p2p" else None
    errors: list[str] = []

    def comm_thread() -> threading.Thread:
        return threading.Thread(target=communicate, name="communication",
                                args=(backend, rank, size, count, args.calls, algorithm, errors))

    def comm_alone() -> None:
        t = comm_thread()
        t.start()
        t.join()

    a = np.random.default_rng(0).random((args.matrix, args.matrix))
    t_comm = statistics.median(timed(comm, comm_alone) for _ in range(args.reps))
    t_one = timed(comm, lambda: compute(a, 1))
    reps = max(1, round(t_comm / max(t_one, 1e-9)))
    reps = int(comm.allreduce(reps, op=MPI.MAX))  # the same work on every rank
    t_comp = statistics.median(timed(comm, lambda: compute(a, reps)) for _ in range(args.reps))

    def both() -> None:
        t = comm_thread()
        t.start()
        compute(a, reps)
        t.join()

    t_both = statistics.median(timed(comm, both) for _ in range(args.reps))
    bad = comm.allreduce(len(errors), op=MPI.SUM)
    if kind == "p2p":
        backend.Free()
    else:
        backend.comm.Free()
    overlap = max(0.0, 100.0 * (1.0 - (t_both - t_comp) / t_comm))
    return {"comm": t_comm, "compute": t_comp, "both": t_both, "overlap": overlap,
            "bad": bad, "reps": reps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p", "both"], default="both")
    parser.add_argument("--algorithm", default=None, help="p2p allreduce algorithm (auto)")
    parser.add_argument("--size", default="1M", help="bytes per Allreduce (default 1M)")
    parser.add_argument("--calls", type=int, default=20, help="Allreduces per run (20)")
    parser.add_argument("--matrix", type=int, default=256, help="matrix order (256)")
    parser.add_argument("--reps", type=int, default=5, help="runs per figure, median (5)")
    parser.add_argument("--small", action="store_true", help="a quick run (also "
                        "MPICOLL_EXAMPLES_SMALL=1)")
    args = parser.parse_args(argv)
    if args.small or os.environ.get("MPICOLL_EXAMPLES_SMALL", "") not in ("", "0"):
        args.size, args.calls, args.reps, args.matrix = "64K", 8, 3, 128
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    count = max(1, parse_size(args.size) // 8)
    level = {MPI.THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}.get(MPI.Query_thread())
    if level is None:
        if rank == 0:
            print("thread_overlap: needs MPI_THREAD_MULTIPLE (mpi4py.rc.thread_level)")
        return 1
    if rank == 0:
        print(f"thread_overlap: {size} ranks, {level}; a communication thread makes "
              f"{args.calls} blocking Allreduce of {count * 8} bytes (float64) while the main "
              f"thread computes ({args.matrix}x{args.matrix} matrix products)")
    kinds = ["native", "p2p"] if args.backend == "both" else [args.backend]
    bad = 0
    for kind in kinds:
        r = run(comm, kind, args, count)
        bad += int(r["bad"])
        if rank == 0:
            label = kind if kind == "native" else f"p2p (algorithm {args.algorithm or 'auto'})"
            print(f"{label}:")
            print(f"  communication alone   {r['comm'] * 1e3:9.2f} ms")
            print(f"  compute alone         {r['compute'] * 1e3:9.2f} ms  ({r['reps']} products)")
            print(f"  both, two threads     {r['both'] * 1e3:9.2f} ms")
            print(f"  overlap               {r['overlap']:9.1f} %")
            print(f"  results {'OK' if not r['bad'] else 'WRONG'} (every Allreduce checked)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
