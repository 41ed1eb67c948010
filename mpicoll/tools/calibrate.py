"""``mpicoll calibrate``: fit the alpha-beta-gamma cost model on this machine.

An exchange between ranks 0 and 1 over a range of sizes, fitted as alpha + n beta, the
engines' local MPI.SUM reduction for gamma, a copy for delta and p2p calls for the overhead
o_call, o_msg (:mod:`mpicoll.model.calibrate`), all timed as bench times a call; prints the
fit and saves the model where ``simulate`` and ``bench`` look for it.
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
from ..backends.env import MODEL_VAR
from ..backends.p2p import p2p
from ..engines.call import Call
from ..engines.mpi import Engine
from ..engines.plan import BlockingRunner
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
    Isend + one Irecv run by the p2p engine directly (no front door) as it runs a repeated
    blocking call (:class:`~mpicoll.engines.plan.BlockingRunner`: the plan replayed, on a
    fresh tag each run)."""
    # $MPICOLL_MODEL may name the file this run is about to write (the first calibration): the
    # probe's backend forces its algorithm and needs no model, so it is made without the
    # variable (a missing model file is an error at a backend's construction)
    saved = os.environ.pop(MODEL_VAR, None)
    try:
        hand = p2p(comm)
    finally:
        if saved is not None:
            os.environ[MODEL_VAR] = saved
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
        alg: Any = SimpleNamespace(name="probe", schedule=schedule)  # all the engine reads
        runner = BlockingRunner(engine, call, alg)
        return lambda: runner(engine.take_tag())

    persistent = hand.Allreduce_init(x, y, op=MPI.SUM, algorithm="recursive_doubling")

    def start() -> None:
        persistent.Start()
        persistent.Wait()

    def close() -> None:
        persistent.Free()
        hand.Free()
        dup.Free()

    return _calibrate.OverheadProbe(
        call=lambda: hand.Allreduce(x, y, op=MPI.SUM, algorithm="recursive_doubling"),
        call_bytes=8, call_reduce_bytes=8, rounds=rounds, close=close,
        call_copy_bytes=16,  # rank 0: x into y, then its result (in scratch) into y
        start=start)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="where to save the model (default: $MPICOLL_MODEL, else "
                   "~/.cache/mpicoll/model.json, where simulate and bench look)")
    p.add_argument("--max-bytes", default="16M", metavar="SIZE",
                   help="largest message exchanged (and vector reduced and copied), K/M/G "
                   "suffixes (default 16M)")
    p.add_argument("-i", "--iterations", type=int, default=50,
                   help="timed exchanges per size up to 64 KiB, fewer above (default 50)")
    p.add_argument("-x", "--warmup", type=int, default=5,
                   help="warm-up exchanges per size (default 5)")


def check_arguments(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    if size < 2:
        error(f"calibrate needs at least 2 ranks (an exchange between ranks 0 and 1), got "
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


def engine_reduction(n: int) -> Callable[[], object]:
    """The engines' local reduction (:meth:`~mpicoll.algorithms.schedule.Context.reducer`) of
    n bytes of float64 with ``MPI.SUM``: calibrate's gamma is what the schedules pay."""
    a, b = np.ones(n // 8), np.ones(n // 8)
    fn, x, y = Context(0, 1, MPI.DOUBLE, np.dtype(np.float64)).reducer(a, b, MPI.SUM)
    return lambda: fn(x, y)


def run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    prov = provenance(comm, ["calibrate", *argv])
    m, details = _calibrate.calibrate(comm, max_bytes=args.max_bytes_n, iters=args.iterations,
                                      warmup=args.warmup, probe=overhead_probe,
                                      reduction=engine_reduction)
    if comm.Get_rank() != 0:
        return 0
    sizes = details["exchange_bytes"]
    times = details["exchange_s"]
    lines = details["lines"]
    ab, gf, df = lines["alpha_beta"], lines["gamma"], lines["delta"]
    hosts = ", ".join(f"{h['name']} ({h['ranks']})" for h in prov["hosts"])
    out.write(f"# mpicoll calibrate  {prov['date']}\n# {prov['mpi_library']}; P={prov['P']} on "
              f"{hosts}\n# exchange between ranks 0 and 1 (each sends n bytes to the other), "
              f"{human_size(sizes[0])} to {human_size(sizes[-1])} bytes, fitted as alpha + n "
              "beta (least squares); gamma: the local MPI.SUM reduction on float64, delta: a "
              "copy of float64; each time as bench takes it: barrier, one call, max over ranks 0 "
              "and 1, median; the exchange less the barrier's skew (a call pays it once: o_call "
              f"has it), {details['skew_s'] * 1e6:.3g} us\n")
    fitted = [m.alpha + n * m.beta for n in sizes]
    rows = []
    for n, t, f in zip(sizes, times, fitted, strict=True):
        res = 100.0 * (t - f) / t if t > 0 else 0.0
        rows.append([str(n), f"{t * 1e6:.3f}", f"{f * 1e6:.3f}", f"{res:+.1f}"])
    out.write("\n".join(table(["size", "exchange", "line", "residual"],
                               ["(B)", "(us)", "(us)", "(%)"], rows, [])) + "\n\n")
    bw = f"{1 / m.beta / 1e9:.3g} GB/s" if m.beta > 0 else "inf GB/s"
    gw = f"{1 / m.gamma / 1e9:.3g} GB/s" if m.gamma > 0 else "inf GB/s"
    out.write(f"alpha = {m.alpha * 1e6:.4g} us per message\n")
    out.write(f"beta  = {m.beta * 1e9:.4g} ns/B  ({bw})\n")
    out.write(f"gamma = {m.gamma * 1e9:.4g} ns/B  ({gw} reduced)\n")
    dw = f"{1 / m.delta / 1e9:.3g} GB/s" if m.delta > 0 else "inf GB/s"
    out.write(f"delta = {m.delta * 1e9:.4g} ns/B  ({dw} copied)\n")
    out.write(f"(the lines are the registry's formulas'; the simulator and bench's meas/pred "
              f"take the measured times: {len(m.message_curve)} exchange, "
              f"{len(m.reduce_curve)} reduction and {len(m.copy_curve)} copy sizes)\n")
    if "overhead" in details:
        out.write(f"o_call = {m.o_call * 1e6:.4g} us per p2p collective call\n")
        out.write(f"o_msg  = {m.o_msg * 1e6:.4g} us per message the p2p engine posts\n")
        out.write(f"o_start = {m.o_start * 1e6:.4g} us per Start + Wait of a persistent p2p "
                  "collective\n")
    out.write(f"line alpha + n beta: R^2 = {ab['r2']:.5f}, max relative residual "
              f"{100 * ab['max_rel_residual']:.1f}% ({len(sizes)} sizes)\n")
    out.write(f"line n gamma:        R^2 = {gf['r2']:.5f}, max relative residual "
              f"{100 * gf['max_rel_residual']:.1f}% ({len(details['reduce_bytes'])} sizes)\n")
    out.write(f"line n delta:        R^2 = {df['r2']:.5f}, max relative residual "
              f"{100 * df['max_rel_residual']:.1f}% ({len(details['copy_bytes'])} sizes)\n")
    for key in ("alpha_beta_fit", "gamma_fit", "delta_fit", "o_msg_fit", "o_call_fit",
                "o_start_fit", "round_fit"):
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

