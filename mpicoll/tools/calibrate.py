"""``mpicoll calibrate``: fit the alpha-beta-gamma cost model on this machine.

Ping-pong between ranks 0 and 1 over a range of sizes, fitted as alpha + n beta, and MPI.SUM
``Reduce_local`` throughput for gamma (:mod:`mpicoll.model.calibrate`); prints the fit and saves
the model where ``simulate`` and ``bench`` look for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn, TextIO

import numpy as np
from mpi4py import MPI

from ..algorithms.schedule import Context, Schedule
from ..backends.p2p import p2p
from ..engines.call import Call
from ..engines.mpi import Engine
from ..model import alphabeta as _model
from ..model import calibrate as _calibrate
from ..model.alphabeta import default_path
from .harness import provenance
from .options import parse_size
from .report import human_size, table

__all__ = ["add_arguments", "check_arguments", "environment_problem", "overhead_probe", "run"]


def overhead_probe(comm: MPI.Comm) -> _calibrate.OverheadProbe:
    """What fits o_call and o_msg on a two-rank ``comm``: one float64 Allreduce by recursive
    doubling (one round at P = 2) through the p2p front door, and schedules of k rounds of one
    Isend + one Irecv run by the p2p engine directly (no front door)."""
    hand = p2p(comm)
    x, y = np.ones(1), np.empty(1)
    dup = comm.Dup()
    engine = Engine(dup, int(dup.Get_attr(MPI.TAG_UB) or 32767))

    def rounds(k: int) -> Callable[[], object]:
        s, r = np.zeros(1), np.empty(1)

        def schedule(ctx: Context) -> Schedule:
            peer = 1 - ctx.rank
            for _ in range(k):
                yield ctx.sendrecv(s, peer, r, peer)

        call = Call("probe", MPI.DOUBLE, np.dtype(np.float64), lambda ctx: ())
        alg: Any = SimpleNamespace(schedule=schedule)  # the engine reads only .schedule
        return lambda: engine.run(call, alg)

    def close() -> None:
        hand.Free()
        dup.Free()

    return _calibrate.OverheadProbe(
        call=lambda: hand.Allreduce(x, y, op=MPI.SUM, algorithm="recursive_doubling"),
        call_bytes=8, call_reduce_bytes=8, rounds=rounds, close=close)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="where to save the model (default: $MPICOLL_MODEL, else "
                   "~/.cache/mpicoll/model.json, where simulate and bench look)")
    p.add_argument("--max-bytes", default="4M", metavar="SIZE",
                   help="largest ping-pong message, K/M/G suffixes (default 4M)")
    p.add_argument("-i", "--iterations", type=int, default=50,
                   help="timed ping-pongs per size up to 64 KiB, fewer above (default 50)")
    p.add_argument("-x", "--warmup", type=int, default=5,
                   help="warm-up ping-pongs per size (default 5)")


def check_arguments(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    if size < 2:
        error(f"calibrate needs at least 2 ranks (a ping-pong between ranks 0 and 1), got "
              f"P = {size}: run it as mpiexec -n 2 python -m mpicoll calibrate")
    try:
        args.max_bytes_n = parse_size(args.max_bytes)
    except ValueError as exc:
        error(f"argument --max-bytes: {exc}")
    if args.max_bytes_n < 1:
        error("argument --max-bytes: must be >= 1 byte")
    if args.iterations < 1:
        error("argument -i/--iterations: must be >= 1")
    if args.warmup < 0:
        error("argument -x/--warmup: must be >= 0")


def environment_problem(args: argparse.Namespace) -> str | None:
    path = Path(args.output) if args.output else default_path()
    if path.is_dir():
        return f"argument -o/--output: {str(path)!r} is a directory"
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"argument -o/--output: cannot write {str(path)!r} ({str(parent)!r} is not " \
               "a writable directory)"
    return None


def run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    prov = provenance(comm, ["calibrate", *argv])
    m, details = _calibrate.calibrate(comm, max_bytes=args.max_bytes_n, iters=args.iterations,
                                      warmup=args.warmup, probe=overhead_probe)
    if comm.Get_rank() != 0:
        return 0
    sizes = details["pingpong_bytes"]
    times = details["pingpong_one_way_s"]
    ab, gf = details["alpha_beta_fit"], details["gamma_fit"]
    hosts = ", ".join(f"{h['name']} ({h['ranks']})" for h in prov["hosts"])
    out.write(f"# mpicoll calibrate  {prov['date']}\n# {prov['mpi_library']}; P={prov['P']} on "
              f"{hosts}\n# ping-pong between ranks 0 and 1, {human_size(sizes[0])} to "
              f"{human_size(sizes[-1])} bytes: median one-way time (RTT/2), fitted as alpha + n "
              "beta (least squares); gamma: MPI.SUM Reduce_local on float64, rank 0\n")
    fitted = m.alpha + np.array(sizes, float) * m.beta
    rows = []
    for n, t, f in zip(sizes, times, fitted, strict=True):
        res = 100.0 * (t - f) / t if t > 0 else 0.0
        rows.append([str(n), f"{t * 1e6:.3f}", f"{f * 1e6:.3f}", f"{res:+.1f}"])
    out.write("\n".join(table(["size", "one-way", "model", "residual"],
                               ["(B)", "(us)", "(us)", "(%)"], rows, [])) + "\n\n")
    bw = f"{1 / m.beta / 1e9:.3g} GB/s" if m.beta > 0 else "inf GB/s"
    gw = f"{1 / m.gamma / 1e9:.3g} GB/s" if m.gamma > 0 else "inf GB/s"
    out.write(f"alpha = {m.alpha * 1e6:.4g} us per message\n")
    out.write(f"beta  = {m.beta * 1e9:.4g} ns/B  ({bw})\n")
    out.write(f"gamma = {m.gamma * 1e9:.4g} ns/B  ({gw} reduced)\n")
    if "overhead" in details:
        out.write(f"o_call = {m.o_call * 1e6:.4g} us per p2p collective call\n")
        out.write(f"o_msg  = {m.o_msg * 1e6:.4g} us per message the p2p engine posts\n")
    out.write(f"fit alpha + n beta: R^2 = {ab['r2']:.5f}, max relative residual "
              f"{100 * ab['max_rel_residual']:.1f}% ({len(sizes)} sizes)\n")
    out.write(f"fit n gamma:        R^2 = {gf['r2']:.5f}, max relative residual "
              f"{100 * gf['max_rel_residual']:.1f}% ({len(details['reduce_bytes'])} sizes)\n")
    for key in ("o_msg_fit", "o_call_fit", "round_fit"):
        if key in details:
            q = details[key]
            r2 = "" if q["r2"] is None else f"R^2 = {q['r2']:.5f}, "
            out.write(f"fit {_calibrate.FITS[key]}: {r2}max relative residual "
                      f"{100 * q['max_rel_residual']:.1f}%\n")
    for w in details["fit_warnings"]:
        print(w, file=sys.stderr)
    path = _model.save(m, args.output, date=prov["date"], P=prov["P"],
                      mpi_library=prov["mpi_library"], hosts=prov["hosts"], **details)
    if args.output is None or path.absolute() == _model.default_path().absolute():
        how = ("simulate and bench's meas/pred use it from there; MPICOLL_MODEL=" f"{path} "
               "also makes algorithm=\"auto\" choose by it")
    else:
        how = f"use it with --model {path} (simulate, bench), or MPICOLL_MODEL={path}"
    out.write(f"saved to {path}: {how}\n")
    return 0

