"""The ``mpicoll`` command: ``python -m mpicoll {bench,verify,algorithms,info,simulate,calibrate}``.

Run the MPI subcommands under the launcher, e.g. ``mpiexec -n 4 python -m mpicoll bench``.
Every rank parses the same command line; only rank 0 prints.  A usage error is reported once,
argparse-style (usage line + ``error:`` on stderr), and every rank returns 2 without any
communication, so nothing hangs.  An uncaught exception on any rank prints its traceback and
calls ``MPI.COMM_WORLD.Abort(1)`` (:mod:`mpicoll._abort`), so one failing rank never strands
the others.

Subcommands live in :data:`SUBCOMMANDS`; a later module adds its own with :func:`register`
(``simulate`` and ``calibrate`` are meant to plug in that way).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from mpi4py import MPI

from ..algorithms.collectives import BY_NAME

if TYPE_CHECKING:
    from ..engines.sim import TwoLevel
    from ..model.alphabeta import Model

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
}


def _algorithms_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--collective", nargs="+", metavar="NAME",
                   help="only these collectives (default: all)")
    p.add_argument("--markdown", action="store_true",
                   help="print a Markdown table (the README's algorithm table)")


def _algorithms_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    from ..algorithms.registry import COLLECTIVES

    names = [x for v in args.collective or [] for x in v.replace(",", " ").split()]
    for c in names:
        if c not in COLLECTIVES:
            error(f"argument -c/--collective: unknown collective {c!r} "
                  f"(choose from {', '.join(COLLECTIVES)})")
    args.collective = names or list(COLLECTIVES)


def algorithm_rows(collectives: Sequence[str] | None = None) -> list[list[str]]:
    """Rows ``[collective, algorithm, restrictions, cost formula, n, source]`` of the registry."""
    from ..algorithms import registry

    rows = []
    for coll in collectives or registry.COLLECTIVES:
        for a in registry.algorithms(coll):
            labels = [_RESTRICTION_LABELS.get(r, r) for r in a.restrictions]
            if not a.auto:
                labels.append("node-aware: forced only")
            restr = ", ".join(labels) or "-"
            rows.append([coll, a.name, restr, a.formula, BY_NAME[coll].size_meaning,
                         a.source or "-"])
    return rows


def algorithms_table(collectives: Sequence[str] | None = None, markdown: bool = False) -> str:
    """The registry as a text table, or as a Markdown table (``markdown=True``)."""
    head = ["collective", "algorithm", "restrictions", "cost (alpha-beta-gamma)", "n (bytes)",
            "source"]
    rows = algorithm_rows(collectives)
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


def _algorithms_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    if comm.Get_rank() == 0:
        out.write(algorithms_table(args.collective, args.markdown))
    return 0


# --------------------------------------------------------------------------------------------
# info


def _info_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")


def _info_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    import json

    from .bench import provenance

    info = provenance(comm, ["info", *argv])
    info.pop("argv", None)
    if comm.Get_rank() == 0:
        if args.json:
            out.write(json.dumps(info, indent=1) + "\n")
        else:
            full = info.pop("mpi_library_full")
            hosts = ", ".join(f"{h['name']} ({h['ranks']} ranks)" for h in info.pop("hosts"))
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
# simulate: predicted time and traffic of every algorithm, no MPI needed


#: From this many simulated ranks, ``simulate`` shows its progress on stderr even when stderr is
#: not a terminal (each algorithm at each size may take seconds).
SIMULATE_PROGRESS_RANKS = 256


def _simulate_configure(p: argparse.ArgumentParser) -> None:
    from .bench import DEFAULT_COLLECTIVES, DEFAULT_SIZES

    g = p.add_argument_group("what to simulate")
    g.add_argument("-n", "--ranks", type=int, required=True, metavar="P",
                   help="number of simulated ranks")
    g.add_argument("-c", "--collective", nargs="+", metavar="NAME", default=None,
                   help=f"collective(s) (or 'all'); default: {' '.join(DEFAULT_COLLECTIVES)}")
    g.add_argument("-a", "--algorithm", nargs="+", metavar="NAME", default=["all"],
                   help="algorithms to compare: 'all' (default: every registered one; the "
                   "node-aware smp ones only with --ranks-per-node) or registry names "
                   "(comma-separated or several)")
    g.add_argument("-m", "--message-size", default=DEFAULT_SIZES, metavar="MIN:MAX",
                   help="message sizes S in bytes, as in bench: powers of two from MIN to MAX, "
                   f"K/M/G suffixes (default {DEFAULT_SIZES})")
    g.add_argument("--dtype", default="float64", help="element type (default float64)")
    g.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    m = p.add_argument_group(
        "cost model (seconds per message, seconds per byte)",
        "Default: the calibrated model (mpicoll calibrate) if there is one, else the built-in "
        "defaults; --alpha/--beta/--gamma override single parameters.",
    )
    m.add_argument("--model", metavar="FILE", default=None,
                   help="a model file written by mpicoll calibrate")
    m.add_argument("--alpha", type=float, metavar="SECONDS", help="time per message")
    m.add_argument("--beta", type=float, metavar="SECONDS", help="time per byte sent")
    m.add_argument("--gamma", type=float, metavar="SECONDS", help="time per byte reduced")
    m.add_argument("--ranks-per-node", type=int, metavar="K", default=None,
                   help="two-level model: ranks r // K share a node, the model above is the "
                   "intra-node one; adds the node-aware smp algorithms and inter-node bytes")
    m.add_argument("--inter-alpha", type=float, metavar="SECONDS",
                   help="inter-node time per message (default: the intra-node alpha)")
    m.add_argument("--inter-beta", type=float, metavar="SECONDS",
                   help="inter-node time per byte (default: the intra-node beta)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE",
                   help="write the model and every row, with per-rank clocks and traffic")
    o.add_argument("-q", "--quiet", action="store_true",
                   help=f"no progress line on stderr (shown on a terminal, or always from "
                   f"{SIMULATE_PROGRESS_RANKS} ranks up)")


def _simulate_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    import math

    from . import bench
    from . import cases as _cases

    if args.ranks < 1:
        error(f"argument -n/--ranks: need at least one rank, got {args.ranks}")
    colls, algs = bench.selection(args, bench.DEFAULT_COLLECTIVES, ["all"], ("all",), error)
    try:
        sizes = bench.parse_sizes(args.message_size)
    except ValueError as exc:
        error(f"argument -m/--message-size: {exc}")
    dtypes = [d for d in _cases.DTYPES if d not in _cases.PAIR_DTYPES]  # predefined types only
    if args.dtype not in dtypes:
        error(f"argument --dtype: unknown dtype {args.dtype!r} (choose from {', '.join(dtypes)})")
    if any(c in _cases.ROOTED for c in colls) and not 0 <= args.root < args.ranks:
        error(f"argument --root: root {args.root} is not a rank (P = {args.ranks})")
    for name in ("alpha", "beta", "gamma", "inter_alpha", "inter_beta"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v >= 0):
            error(f"argument --{name.replace('_', '-')}: must be a number >= 0 (seconds), "
                  f"got {v}")
    if args.ranks_per_node is None:
        if args.inter_alpha is not None or args.inter_beta is not None:
            error("argument --inter-alpha/--inter-beta: only with --ranks-per-node K")
    elif args.ranks_per_node < 1:
        error(f"argument --ranks-per-node: must be >= 1, got {args.ranks_per_node}")
    from ..backends import env as _env

    try:  # the environment the schedules read (nodes, pipeline segments)
        _env.ranks_per_node()
        _env.segment_bytes()
    except ValueError as exc:
        error(str(exc))
    args.collectives, args.algorithms, args.sizes = colls, algs, sizes


def _simulate_check(args: argparse.Namespace) -> str | None:
    from .bench import output_file_problem, resolve_model

    if args.model:
        try:
            resolve_model(args.model)
        except ValueError as exc:
            return f"argument --model: {exc}"
    return output_file_problem("--json", args.json) if args.json else None


def simulation_model(
    args: argparse.Namespace,
) -> tuple[Model | TwoLevel, str, dict[str, Any]]:
    """The model of a ``simulate`` command line: ``(Model or TwoLevel, where from, as JSON)``.

    Base: ``--model FILE``, else the calibrated file, else the defaults; then ``--alpha``,
    ``--beta``, ``--gamma`` replace single parameters.  With ``--ranks-per-node K`` that is
    the intra-node model of a :class:`mpicoll.sim.TwoLevel` whose inter-node alpha and beta are
    ``--inter-alpha`` / ``--inter-beta`` (default: the intra-node ones).
    """
    from dataclasses import replace

    from ..engines.sim import TwoLevel
    from .bench import resolve_model

    base, source = resolve_model(args.model)
    given = {k: getattr(args, k) for k in ("alpha", "beta", "gamma")
             if getattr(args, k) is not None}
    if len(given) == 3:
        source = "command line"
    elif given:
        source += ", with " + ", ".join(f"--{k}" for k in given) + " from the command line"
    m = replace(base, **given)
    doc: dict[str, Any] = {**m.as_dict(), "source": source, "two_level": None}
    if args.ranks_per_node is None:
        return m, source, doc
    inter = replace(
        m,
        alpha=m.alpha if args.inter_alpha is None else args.inter_alpha,
        beta=m.beta if args.inter_beta is None else args.inter_beta,
    )
    k = args.ranks_per_node
    doc["two_level"] = {"ranks_per_node": k, "nodes": -(-args.ranks // k),
                        "inter_alpha": inter.alpha, "inter_beta": inter.beta}
    return TwoLevel(k, m, inter), source, doc


def _simulation_algorithms(coll: str, requested: Sequence[str], two_level: bool) -> list[str]:
    """Registry names of ``coll`` that ``-a`` selects (``all``: node-aware ones only if
    ``two_level``)."""
    from ..algorithms import registry

    every = registry.algorithms(coll)
    out: list[str] = []
    for tok in requested:
        if tok == "all":
            picks = [a.name for a in every if a.auto or two_level]
        else:
            picks = [a.name for a in every if a.name == tok]
        out += [a for a in picks if a not in out]
    return out


def predict_rows(collective: str, p: int, sizes: Sequence[int], model: Model | TwoLevel,
                 algorithms: Sequence[str], *, dtype: str = "float64", root: int = 0,
                 per_rank: bool = False,
                 progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Cost-only simulation of each named algorithm at each message size S (bytes, as bench).

    Returns one row per (size, algorithm), sizes in order (sizes giving the same count are
    merged): ``collective``, ``algorithm``, ``size_bytes`` (S of the count used), ``count``,
    ``status`` (``ok`` or ``n/a``), ``reason``, ``time_us``, ``best`` (fastest at that size;
    every one of a tie), max over ranks of ``messages_sent``, ``bytes_sent``,
    ``messages_recv``, ``bytes_recv``, the sum over ranks of ``inter_node_bytes``, and with
    ``per_rank`` the simulator's per-rank figures (:meth:`mpicoll.sim.SimResult.as_dict`).
    The count of a size is bench's (:func:`mpicoll.bench.count_for`); for the v-variants S is
    nominal (count x P elements): the simulator gives the ranks uneven counts averaging count
    (:func:`mpicoll.sim.vcounts`).  ``progress(text)``, if given, is called as each
    simulation starts (``allreduce 4K ring (3/40)``).
    """
    from . import cases as _cases
    from .bench import count_for, human_size
    from .simulate import simulate

    np_dtype = _cases.numpy_dtype(dtype)
    item = np_dtype.itemsize
    blocks = p if collective in _cases.BLOCK_COLLECTIVES else 1
    counts: list[int] = []
    for s in [0] if collective == "barrier" else sizes:
        c = count_for(collective, s, p, item)
        if c not in counts:
            counts.append(c)
    rows: list[dict[str, Any]] = []
    total = len(counts) * len(algorithms)
    for k_count, count in enumerate(counts):
        block = []
        for k_alg, name in enumerate(algorithms):
            if progress is not None:
                k = k_count * len(algorithms) + k_alg + 1
                progress(f"{collective} {human_size(count * blocks * item)}B {name} "
                         f"({k}/{total})")
            row: dict[str, Any] = {
                "collective": collective, "algorithm": name, "size_bytes": count * blocks * item,
                "count": count, "status": "ok", "reason": None, "time_us": None, "best": False,
                "messages_sent": None, "bytes_sent": None, "messages_recv": None,
                "bytes_recv": None, "inter_node_bytes": None, "per_rank": None,
            }
            try:
                r = simulate(collective, p, count, algorithm=name, dtype=np_dtype, root=root,
                             model=model)
            except (ValueError, TypeError) as exc:  # RestrictionError is a ValueError
                row.update(status="n/a", reason=str(exc))
            else:
                row.update(
                    time_us=r.time * 1e6,
                    messages_sent=int(r.messages_sent.max()),
                    bytes_sent=int(r.bytes_sent.max()),
                    messages_recv=int(r.messages_recv.max()),
                    bytes_recv=int(r.bytes_recv.max()),
                    inter_node_bytes=int(r.inter_bytes_sent.sum()),
                    per_rank=r.as_dict() if per_rank else None,
                )
            block.append(row)
        ok = [b for b in block if b["status"] == "ok"]
        if ok:
            t_min = min(b["time_us"] for b in ok)
            for b in ok:
                b["best"] = b["time_us"] <= t_min * (1 + 1e-9)
        rows += block
    return rows


def simulation_tables(collective: str, rows: Sequence[dict[str, Any]],
                      two_level: bool) -> str:
    """The text of one collective: predicted times (us) per size, ``*`` on the fastest, then
    the traffic of each algorithm at the largest size."""
    from .bench import _fmt_us, _size_meaning, _table, human_size

    names: list[str] = []
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["algorithm"] not in names:
            names.append(r["algorithm"])
        by_size.setdefault(r["size_bytes"], {})[r["algorithm"]] = r
    lines = [f"# {collective}: S = {_size_meaning(collective)}; predicted time (us), "
             "* = fastest at that size"]
    heads = ["size", "count", *names, "best"]
    units = ["(B)", "(elements)", *(["(us)"] * len(names)), ""]
    table = []
    for size, row in by_size.items():
        cells = [str(size), str(next(iter(row.values()))["count"])]
        for n in names:
            r = row[n]
            cells.append(_fmt_us(r["time_us"]) + ("*" if r["best"] else " ")
                         if r["status"] == "ok" else "n/a ")
        bests = [n for n in names if row[n]["best"]]
        cells.append(", ".join(bests) or "-")
        table.append(cells)
    na: dict[str, str] = {}
    for r in rows:
        if r["status"] == "n/a":
            na.setdefault(r["algorithm"], r["reason"])
    lines += _table(heads, units, table, [f"#   {n}: n/a: {why}" for n, why in na.items()])
    size = max(by_size)
    last = by_size[size]
    lines.append("")
    lines.append(f"# {collective} traffic at S = {human_size(size)} ({size} B), per rank (max over "
                 "ranks)" + ("; inter-node: bytes sent between nodes, all ranks" if two_level
                            else ""))
    heads = ["algorithm", "time", "msgs sent", "bytes sent", "msgs recv", "bytes recv"]
    units = ["", "(us)", "", "(B)", "", "(B)"]
    if two_level:
        heads.append("inter-node")
        units.append("(B)")
    table = []
    for n in names:
        r = last[n]
        if r["status"] != "ok":
            table.append([n, "n/a", *(["-"] * (len(heads) - 2))])
            continue
        cells = [n, _fmt_us(r["time_us"]), str(r["messages_sent"]), str(r["bytes_sent"]),
                 str(r["messages_recv"]), str(r["bytes_recv"])]
        if two_level:
            cells.append(str(r["inter_node_bytes"]))
        table.append(cells)
    lines += _table(heads, units, table, [])
    return "\n".join(lines) + "\n"


def _simulate_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    import json
    from pathlib import Path

    from ..engines.sim import TwoLevel
    from .bench import Progress, describe_model

    if comm.Get_rank() != 0:  # one process simulates every rank: the others have nothing to do
        return 0
    model, source, mdoc = simulation_model(args)
    two = args.ranks_per_node is not None
    p = args.ranks
    # stdout keeps only the tables (--json stays valid); the progress line goes to stderr
    progress = Progress(not args.quiet)
    progress.enabled = progress.enabled and (progress.tty or p >= SIMULATE_PROGRESS_RANKS)
    out.write(f"# mpicoll simulate: P={p} simulated ranks, dtype={args.dtype}, root={args.root}; "
              "cost-only simulation of the schedules (no MPI, no data)\n")
    base = model.intra if isinstance(model, TwoLevel) else model
    out.write(f"# model {source}: {describe_model(base)}\n")
    if isinstance(model, TwoLevel):
        tl = mdoc["two_level"]
        gbps = f"{1 / model.inter.beta / 1e9:.3g} GB/s" if model.inter.beta > 0 else "inf GB/s"
        out.write(f"# two-level: {tl['ranks_per_node']} ranks per node, {tl['nodes']} nodes; "
                  "intra-node: the model above; inter-node: alpha = "
                  f"{model.inter.alpha * 1e6:.3g} us, beta = {model.inter.beta * 1e9:.3g} ns/B "
                  f"({gbps})\n")
    out.write("\n")
    all_rows: list[dict[str, Any]] = []
    for coll in args.collectives:
        names = _simulation_algorithms(coll, args.algorithms, two)
        if not names:
            out.write(f"# {coll}: none of the algorithms asked for (-a) is one of its own\n\n")
            continue
        try:
            rows = predict_rows(coll, p, args.sizes, model, names, dtype=args.dtype,
                                root=args.root, per_rank=bool(args.json),
                                progress=lambda text: progress.show(f"[mpicoll simulate] {text}"))
        finally:
            progress.clear()
        all_rows += rows
        out.write(simulation_tables(coll, rows, two) + "\n")
        out.flush()
    if args.json:
        doc = {
            "schema": "mpicoll-simulate/1",
            "command_line": "mpicoll simulate " + " ".join(argv),
            "P": p, "dtype": args.dtype, "root": args.root, "sizes": args.sizes,
            "model": mdoc,
            "rows": all_rows,
        }
        Path(args.json).write_text(json.dumps(doc) + "\n")
        out.write(f"# wrote {args.json}\n")
    return 0


# --------------------------------------------------------------------------------------------
# calibrate: fit alpha, beta, gamma on this machine


def _calibrate_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="where to save the model (default: $MPICOLL_MODEL, else "
                   "~/.cache/mpicoll/model.json, where simulate and bench look)")
    p.add_argument("--max-bytes", default="4M", metavar="SIZE",
                   help="largest ping-pong message, K/M/G suffixes (default 4M)")
    p.add_argument("-i", "--iterations", type=int, default=50,
                   help="timed ping-pongs per size up to 64 KiB, fewer above (default 50)")
    p.add_argument("-x", "--warmup", type=int, default=5,
                   help="warm-up ping-pongs per size (default 5)")


def _calibrate_validate(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    from .bench import parse_size

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


def _calibrate_check(args: argparse.Namespace) -> str | None:
    import os
    from pathlib import Path

    from ..model.alphabeta import default_path

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


def _calibrate_run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    import numpy as np

    from ..model import alphabeta as model
    from ..model import calibrate
    from .bench import human_size, provenance

    prov = provenance(comm, ["calibrate", *argv])
    m, details = calibrate.calibrate(comm, max_bytes=args.max_bytes_n, iters=args.iterations,
                                     warmup=args.warmup)
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
    from .bench import _table

    out.write("\n".join(_table(["size", "one-way", "model", "residual"],
                               ["(B)", "(us)", "(us)", "(%)"], rows, [])) + "\n\n")
    bw = f"{1 / m.beta / 1e9:.3g} GB/s" if m.beta > 0 else "inf GB/s"
    gw = f"{1 / m.gamma / 1e9:.3g} GB/s" if m.gamma > 0 else "inf GB/s"
    out.write(f"alpha = {m.alpha * 1e6:.4g} us per message\n")
    out.write(f"beta  = {m.beta * 1e9:.4g} ns/B  ({bw})\n")
    out.write(f"gamma = {m.gamma * 1e9:.4g} ns/B  ({gw} reduced)\n")
    out.write(f"fit alpha + n beta: R^2 = {ab['r2']:.5f}, max relative residual "
              f"{100 * ab['max_rel_residual']:.1f}% ({len(sizes)} sizes)\n")
    out.write(f"fit n gamma:        R^2 = {gf['r2']:.5f}, max relative residual "
              f"{100 * gf['max_rel_residual']:.1f}% ({len(details['reduce_bytes'])} sizes)\n")
    if m.alpha == 0.0 or m.beta == 0.0:
        out.write("note: a fitted parameter came out negative and was set to 0: the timings "
                  "are noisy (a loaded machine?); calibrate again on a quiet one\n")
    path = model.save(m, args.output, date=prov["date"], P=prov["P"],
                      mpi_library=prov["mpi_library"], hosts=prov["hosts"], **details)
    if args.output is None or path.absolute() == model.default_path().absolute():
        how = ("simulate and bench's meas/pred use it from there; MPICOLL_MODEL=" f"{path} "
               "also makes algorithm=\"auto\" choose by it")
    else:
        how = f"use it with --model {path} (simulate, bench), or MPICOLL_MODEL={path}"
    out.write(f"saved to {path}: {how}\n")
    return 0


register(Subcommand(
    "bench", "time native against hand-rolled collectives (run under mpiexec)",
    _bench_configure, _bench_run, _bench_validate, _bench_check,
    description="Check, then time, every implementation at every message size. "
    "Run it under mpiexec -n P. Exit status 1 if any result is WRONG.",
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
    "beta, and MPI.SUM Reduce_local throughput for gamma; prints the fit and saves the model "
    "where simulate and bench look for it. Run under mpiexec -n 2 (or more: the others wait).",
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
    try:
        from .. import __version__ as version
    except ImportError:  # pragma: no cover - before the package exports it
        version = "unknown"
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
    the whole job (``MPI.COMM_WORLD.Abort``, see :mod:`mpicoll._abort`), so the other ranks are
    never left waiting; in a single process the exception propagates as usual.
    """
    from .abort import abort_on_exception

    try:
        return abort_on_exception(lambda: run(argv))
    except BrokenPipeError:  # `mpicoll simulate | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
