"""The ``mpicoll`` command: ``python -m mpicoll {bench,verify,...,calibrate,sweep}``.

Run the MPI subcommands under the launcher, e.g. ``mpiexec -n 4 python -m mpicoll bench``.
Every rank parses the same command line; only rank 0 prints.  A usage error is reported once,
argparse-style (usage line + ``error:`` on stderr), and every rank returns 2 without any
communication, so nothing hangs.  An uncaught exception on any rank prints its traceback and
calls ``MPI.COMM_WORLD.Abort(1)`` (:mod:`mpicoll.tools.abort`), so one failing rank never strands
the others.

Subcommands live in :data:`SUBCOMMANDS`; a later module adds its own with :func:`register`.
Each command's options and work are in its own module (:mod:`.bench`, :mod:`.verify`,
:mod:`.simulate`, :mod:`.calibrate`); this one wires the parser and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

from mpi4py import MPI

from ..algorithms.collectives import BY_NAME

__all__ = ["SUBCOMMANDS", "Subcommand", "UsageError", "main", "register", "run"]


class UsageError(Exception):
    """A command-line error: ``parser`` is the (sub)parser whose usage line to show."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _ExitRequest(Exception):  # noqa: N818 (not an error: --help)
    """argparse wanted to exit (``--help``): the status to return."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


_QUIET = False  # True on ranks other than 0 while parsing: argparse prints nothing there


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting and prints only on rank 0."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise _ExitRequest(status)

    def _print_message(self, message: str, file: Any = None) -> None:
        if not _QUIET and message:
            (file or sys.stderr).write(message)


@dataclass
class Subcommand:
    """One subcommand of ``mpicoll``.

    Attributes:
        name: the word on the command line.
        help: one line for ``mpicoll --help``.
        configure: adds the subcommand's options to its parser.
        run: ``run(args, comm, argv, out) -> exit status``; called on every rank.
        validate: optional ``validate(args, p, error)``: checks needing P (same on every rank);
            calls ``error(message)`` (raises) on a bad argument; may set attributes on ``args``.
        rank0_check: optional ``check(args) -> message | None``, made on rank 0 only (files,
            optional packages) and broadcast; a message is a usage error on every rank.
        description: longer text for ``mpicoll NAME --help``.
    """

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Any, Sequence[str], TextIO], int]
    validate: Callable[[argparse.Namespace, int, Callable[[str], NoReturn]], None] | None = None
    rank0_check: Callable[[argparse.Namespace], str | None] | None = None
    description: str | None = None


#: Every subcommand, by name, in the order ``--help`` lists them.
SUBCOMMANDS: dict[str, Subcommand] = {}


def register(sub: Subcommand) -> Subcommand:
    """Add (or replace) a subcommand; returns it."""
    SUBCOMMANDS[sub.name] = sub
    return sub


# --------------------------------------------------------------------------------------------
# bench


def _bench_configure(p: argparse.ArgumentParser) -> None:
    from . import bench

    bench.add_arguments(p)


def _bench_validate(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]) -> None:
    from . import bench

    args.plan = bench.make_plan(args, size, error)


def _bench_check(args: argparse.Namespace) -> str | None:
    from . import bench

    return bench.environment_problem(args)


def _bench_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import bench

    return bench.run(args, comm, argv, out)


# --------------------------------------------------------------------------------------------
# verify


def _verify_configure(p: argparse.ArgumentParser) -> None:
    from . import verify

    verify.add_arguments(p)


def _verify_validate(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]) -> None:
    from . import verify

    args.plan = verify.make_plan(args, size, error)


def _verify_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import verify

    return verify.run(args, comm, argv, out)


# --------------------------------------------------------------------------------------------
# algorithms


_RESTRICTION_LABELS = {
    "pof2": "P power of two",
    "commutative": "commutative op",
    "count_ge_p": "count >= P",
    "no_in_place": "no in-place",
    "uniform": "equal counts",
    "two_ranks": "P <= 2",
}


def _algorithms_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--collective", nargs="+", metavar="NAME",
                   help="only these collectives (default: all)")
    p.add_argument("--long", action="store_true",
                   help="add each algorithm's alpha-beta-gamma cost, what n means and its source")
    p.add_argument("--markdown", action="store_true",
                   help="print a Markdown table (the table in docs/algorithms.md; implies --long)")
    p.add_argument("--twins", action="store_true",
                   help="print the twin table instead: every algorithm MPICH and Open MPI can "
                        "force, with its p2p twin (Markdown with --markdown)")


def _algorithms_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    from ..algorithms.registry import COLLECTIVES
    from .options import split

    names = split(args.collective)
    for c in names:
        if c not in COLLECTIVES:
            error(f"argument -c/--collective: unknown collective {c!r} "
                  f"(choose from {', '.join(COLLECTIVES)})")
    args.collective = names or list(COLLECTIVES)


def algorithm_rows(collectives: Sequence[str] | None = None, long: bool = True
                   ) -> list[list[str]]:
    """Rows ``[collective, algorithm, parameters, restrictions(, cost formula, n, source)]``
    of the registry (the last three with ``long``)."""
    from ..algorithms import registry

    rows = []
    for coll in collectives or registry.COLLECTIVES:
        for a in registry.algorithms(coll):
            labels = [_RESTRICTION_LABELS.get(r, r) for r in a.restrictions]
            if not a.auto:
                labels.append("forced only")
            restr = ", ".join(labels) or "-"
            params = ", ".join(q.text for q in a.params) or "-"
            row = [coll, a.name, params, restr]
            if long:
                row += [a.formula, BY_NAME[coll].size_meaning, a.source or "-"]
            rows.append(row)
    return rows


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        def esc(s: str) -> str:
            return s.replace("|", "\\|")

        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(lines) + "\n"


def algorithms_table(collectives: Sequence[str] | None = None, markdown: bool = False,
                     long: bool = False) -> str:
    """The registry as a text table (the short form fits a terminal; ``long`` adds the cost,
    what n means and the source), or as the Markdown table of docs/algorithms.md."""
    long = long or markdown
    head = ["collective", "algorithm", "parameters", "restrictions"]
    if long:
        head += ["cost (alpha-beta-gamma)", "n (bytes)", "source"]
    return _table(head, algorithm_rows(collectives, long), markdown)


def twin_rows(collectives: Sequence[str] | None = None) -> list[list[str]]:
    """Rows ``[collective, library, native algorithm, p2p twin or why none]``: every blocking
    intracommunicator algorithm MPICH (``MPIR_CVAR_<COLL>_INTRA_ALGORITHM``) and Open MPI
    (``coll_tuned_<coll>_algorithm`` ID) can force, from :mod:`mpicoll.algorithms.twins`."""
    from ..algorithms import registry, twins

    rows = []
    for coll in collectives or registry.COLLECTIVES:
        for lib, names in (("MPICH", list(twins.MPICH.get(coll, ()))),
                           ("Open MPI", [f"{i} {n}" for i, n in
                                         sorted(twins.OMPI.get(coll, {}).items())])):
            for shown in names:
                native = shown.split(" ", 1)[-1]
                key = "mpich" if lib == "MPICH" else "openmpi"
                p2p = twins.p2p_twin(coll, native, key)
                why = twins.NO_TWIN.get((key, coll, native))
                redirect = twins.REDIRECTS.get((key, coll, native))
                env = twins.MPICH_SETTINGS.get((coll, native), {}) if key == "mpich" else {}
                how = f" with {', '.join(f'{k}={v}' for k, v in env.items())}" if env else ""
                rows.append([coll, lib, shown, f"`{p2p}`{how}" if p2p else redirect or
                             f"none: {why or '?'}"])
    return rows


def twins_table(collectives: Sequence[str] | None = None, markdown: bool = False) -> str:
    """The twin table (see :func:`twin_rows`)."""
    return _table(["collective", "library", "native algorithm (value or ID)", "p2p twin"],
                  twin_rows(collectives), markdown)


def _algorithms_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    if comm.Get_rank() == 0:
        if args.twins:
            out.write(twins_table(args.collective, args.markdown))
        else:
            out.write(algorithms_table(args.collective, args.markdown, args.long))
    return 0


# --------------------------------------------------------------------------------------------
# info


def _info_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")


def _info_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    import json

    from .harness import provenance

    info = provenance(comm, ["info", *argv])
    info.pop("argv", None)
    if comm.Get_rank() == 0:
        if args.json:
            out.write(json.dumps(info, indent=1) + "\n")
        else:
            full = info.pop("mpi_library_full")
            hosts = ", ".join(
                f"{h['name']} ({h['ranks']} ranks, {h['cores']} cores"
                + (", oversubscribed" if h["ranks"] > h["cores"] else "")
                + (f", bound to {h['cpus_per_rank']} per rank"
                   if h["cpus_per_rank"] < h["cores"] else "") + ")"
                for h in info.pop("hosts"))
            rows = [
                ("MPI library", info["mpi_library"]),
                ("MPI vendor", info["mpi_vendor"]),
                ("MPI standard", info["mpi_standard"]),
                ("thread level", info["thread_level"]),
                ("P (ranks)", str(info["P"])),
                ("hosts", hosts),
                ("mpi4py", info["mpi4py"]),
                ("numpy", info["numpy"]),
                ("python", info["python"]),
                ("mpicoll", str(info["mpicoll"])),
                ("date", info["date"]),
            ]
            w = max(len(k) for k, _ in rows)
            out.write("".join(f"{k:<{w}}  {v}\n" for k, v in rows))
            out.write("\n" + full + "\n")
    return 0


# --------------------------------------------------------------------------------------------
# simulate (tools/simulate.py) and calibrate (tools/calibrate.py)


def _simulate_configure(p: argparse.ArgumentParser) -> None:
    from . import simulate

    simulate.add_arguments(p)


def _simulate_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    from . import simulate

    simulate.check_arguments(args, size, error)


def _simulate_check(args: argparse.Namespace) -> str | None:
    from . import simulate

    return simulate.environment_problem(args)


def _simulate_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import simulate

    return simulate.run(args, comm, argv, out)


def _calibrate_configure(p: argparse.ArgumentParser) -> None:
    from . import calibrate

    calibrate.add_arguments(p)


def _calibrate_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    from . import calibrate

    calibrate.check_arguments(args, size, error)


def _calibrate_check(args: argparse.Namespace) -> str | None:
    from . import calibrate

    return calibrate.environment_problem(args)


def _calibrate_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import calibrate

    return calibrate.run(args, comm, argv, out)


register(Subcommand(
    "bench", "time native against hand-rolled collectives (run under mpiexec)",
    _bench_configure, _bench_run, _bench_validate, _bench_check,
    description="Check, then time, every implementation at every message size. "
    "Run it under mpiexec -n P, or, with --native-algorithms, without mpiexec (it then "
    "starts one mpiexec -n P per configuration itself). Exit status 1 if any result is WRONG.",
))
register(Subcommand(
    "verify", "check every p2p algorithm against native (run under mpiexec)",
    _verify_configure, _verify_run, _verify_validate,
    description="Every collective x applicable p2p algorithm x dtype x op x root x in-place x "
    "count, compared with native. Exit status 1 on any mismatch. A call that raises, on "
    "either backend (an MPI library error too), fails its case: the FAIL line names the "
    "backend, the case and the error's text; native errors are failures, not skips. If the "
    "error strands other ranks inside the call, the failing rank prints the same on stderr "
    "and aborts the job.",
))
register(Subcommand(
    "algorithms", "list the hand-rolled algorithms (the registry)",
    _algorithms_configure, _algorithms_run, _algorithms_validate,
))
register(Subcommand(
    "info", "MPI library, version, thread level, ranks, hosts, package versions",
    _info_configure, _info_run,
))
register(Subcommand(
    "simulate", "predicted time and traffic of every algorithm (one process, no MPI needed)",
    _simulate_configure, _simulate_run, _simulate_validate, _simulate_check,
    description="Cost-only simulation of the hand-rolled schedules on P ranks: the predicted "
    "time of each algorithm at each message size (fastest marked *), and the messages and "
    "bytes each rank sends and receives. Model: the calibrated one (mpicoll calibrate) if "
    "there is one, else the defaults; --alpha/--beta/--gamma override. Under mpiexec only "
    "rank 0 works.",
))
register(Subcommand(
    "calibrate", "fit the alpha-beta-gamma cost model on this machine (mpiexec -n 2)",
    _calibrate_configure, _calibrate_run, _calibrate_validate, _calibrate_check,
    description="Ping-pong between ranks 0 and 1 over a range of sizes, fitted as alpha + n "
    "beta, and the local MPI.SUM reduction throughput for gamma; prints the fit and saves the "
    "model where simulate and bench look for it. Run under mpiexec -n 2 (or more: the others "
    "wait).",
))


def _sweep_configure(p: argparse.ArgumentParser) -> None:
    from . import sweep

    sweep.add_arguments(p)


def _sweep_validate(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]) -> None:
    from . import sweep

    sweep.check_arguments(args, size, error)


def _sweep_check(args: argparse.Namespace) -> str | None:
    from . import sweep

    return sweep.environment_problem(args)


def _sweep_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import sweep

    return sweep.run(args, comm, argv, out)


register(Subcommand(
    "sweep", "bench over several rank counts and library configurations (run without mpiexec)",
    _sweep_configure, _sweep_run, _sweep_validate, _sweep_check,
    description="Starts mpiexec -n P python -m mpicoll bench BENCH_ARGS (or --launcher's "
    "command) for each P of -n and each configuration (the library's default, and with "
    "--native one per forced library algorithm), under a time budget; writes the merged "
    "results to --json after every launch and resumes from it when rerun; --csv, and --plot "
    "a heatmap of the fastest implementation per (P, size) and its speed-up over the "
    "library's default. Bench's options follow --.",
))


def _report_configure(p: argparse.ArgumentParser) -> None:
    from . import report

    report.add_arguments(p)


def _report_validate(args: argparse.Namespace, size: int,
                     error: Callable[[str], NoReturn]) -> None:
    from . import report

    try:
        args.docs = report.load_runs(args.files)
    except ValueError as exc:
        error(f"argument BENCH.json: {exc}")
    if args.stats and len(args.files) > 1:
        error("argument --stats: with one file only")


def _report_check(args: argparse.Namespace) -> str | None:
    from .options import output_file_problem
    from .report import plot_problem

    if args.plot:
        return plot_problem(args.plot) or output_file_problem("--plot", args.plot)
    return None


def _report_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import report

    return report.run_report(args, out) if comm.Get_rank() == 0 else 0


register(Subcommand(
    "report", "bench's tables and plot again from a saved --json, or two runs compared",
    _report_configure, _report_run, _report_validate, _report_check,
    description="One file: the tables (--stats: the statistics) and --plot of a saved bench "
    "--json. Two files: per implementation and size, both medians with their p10..p90, B/A "
    "and whether B is faster, slower or within the noise, a closing line per collective, and "
    "--plot the B/A ratio against size (MPICH vs Open MPI, before vs after tuning, two "
    "commits).",
))


def _tune_configure(p: argparse.ArgumentParser) -> None:
    from . import tune

    tune.add_arguments(p)


def _tune_validate(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]) -> None:
    from . import tune

    tune.check_arguments(args, size, error)


def _tune_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    from . import tune

    return tune.run(args, comm, argv, out)


register(Subcommand(
    "tune", "write MPICH's, Open MPI's or mpicoll's selection file from a sweep",
    _tune_configure, _tune_run, _tune_validate,
    description="From a sweep's --json (mpicoll sweep), the fastest algorithm per collective, "
    "P and message size, written as MPICH's JSON selection tree "
    "(MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE), Open MPI's classic dynamic rules file "
    "(coll_tuned_dynamic_rules_filename) or mpicoll's table that algorithm='auto' reads "
    "($MPICOLL_SELECTION). No MPI job needed.",
))


# --------------------------------------------------------------------------------------------
# entry points


def build_parser() -> argparse.ArgumentParser:
    """The ``mpicoll`` parser with one subparser per :data:`SUBCOMMANDS` entry."""
    parser = _Parser(
        prog="mpicoll",
        description="MPI collectives, native and hand-rolled from point-to-point: "
        "benchmark, verify, list. Run bench/verify under mpiexec -n P.",
    )
    from .harness import package_version

    version = package_version() or "unknown"
    parser.add_argument("--version", action="version", version=f"mpicoll {version}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for sub in SUBCOMMANDS.values():
        sp = subs.add_parser(sub.name, help=sub.help, description=sub.description or sub.help)
        sub.configure(sp)
        sp.set_defaults(_subcommand=sub, _subparser=sp)
    return parser


def _usage_error(err: UsageError, rank: int, stream: TextIO) -> int:
    if rank == 0:
        stream.write(err.parser.format_usage())
        stream.write(f"{err.parser.prog}: error: {err.message}\n")
        stream.flush()
    return 2


def run(argv: Sequence[str] | None = None, comm: Any = None, out: TextIO | None = None) -> int:
    """Parse ``argv`` and run the subcommand on ``comm`` (default COMM_WORLD); no Abort wrapper.

    Returns:
        the exit status, the same on every rank: 0 success, 1 a check failed, 2 usage error.
    """
    global _QUIET
    comm = MPI.COMM_WORLD if comm is None else comm
    out = sys.stdout if out is None else out
    argv = list(sys.argv[1:] if argv is None else argv)
    rank, size = comm.Get_rank(), comm.Get_size()
    parser = build_parser()
    _QUIET = rank != 0
    try:
        try:
            args = parser.parse_args(argv)
        except _ExitRequest as ex:
            return ex.status
        sub: Subcommand = args._subcommand
        subparser: argparse.ArgumentParser = args._subparser

        def error(message: str) -> NoReturn:
            raise UsageError(subparser, message)

        if sub.validate is not None:
            sub.validate(args, size, error)
    except UsageError as err:
        return _usage_error(err, rank, sys.stderr)
    finally:
        _QUIET = False
    if sub.rank0_check is not None:
        problem = comm.bcast(sub.rank0_check(args) if rank == 0 else None, root=0)
        if problem:
            return _usage_error(UsageError(subparser, problem), rank, sys.stderr)
    status = sub.run(args, comm, argv[1:] if argv and argv[0] == sub.name else argv, out)
    # every rank returns rank 0's verdict
    return int(comm.bcast(status, root=0))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mpicoll`` and ``python -m mpicoll``; returns the exit status.

    An uncaught exception on a rank of a multi-rank job prints that rank's traceback and aborts
    the whole job (``MPI.COMM_WORLD.Abort``, see :mod:`mpicoll.tools.abort`), so the other ranks are
    never left waiting; in a single process the exception propagates as usual.
    """
    from .abort import abort_on_exception

    try:
        return abort_on_exception(lambda: run(argv))
    except BrokenPipeError:  # `mpicoll simulate | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
