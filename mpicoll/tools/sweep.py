"""``mpicoll sweep``: bench over several rank counts and library configurations, one file.

Run without mpiexec: for each P of ``-n`` and each configuration (the library's default, and
with ``--native`` one per forced native algorithm, :func:`.launcher.native_configs`) it starts
``mpiexec -n P python -m mpicoll bench BENCH_ARGS`` (or ``--launcher``'s command) through
:func:`.launcher.run`, the launcher of ``bench --native-algorithms``, and merges each P's
launches with :func:`.launcher.merge` into one bench document.

The ``--json`` file (``schemas/sweep.schema.json``) is rewritten after every launch: it holds
each P's merged bench document (``runs``; valid against the bench schema), what is still to
run (``pending``) and, per (collective, pattern, P, size), the fastest implementation and its
speed-up over the library's default (``best``).  Rerunning the same command resumes: a launch
whose results are in the file (its ``provenance.launches`` entry has no ``error``) is not run
again; the bench arguments, rank counts and ``--native`` names must be those of the file
(``--fresh`` starts over).  ``--budget`` caps this invocation's seconds: launches not started
when it is spent stay pending, for the next run.

Outputs: ``--json``; ``--csv`` (bench's columns after a ``P`` column, a row per record of
every P); ``--plot`` (matplotlib), a heatmap per collective of the fastest implementation per
(P, size), coloured by its speed-up over the library's default ``native``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from . import launcher
from .report import CSV_COLUMNS, human_size

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_PATH",
    "add_arguments",
    "best_rows",
    "check_arguments",
    "configs_for",
    "done_launches",
    "environment_problem",
    "run",
    "validate",
    "write_csv",
    "write_heatmap",
]

SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "sweep.schema.json"
SCHEMA_ID = "mpicoll-sweep/1"

#: bench options the sweep sets itself (its launches' size, native configurations, outputs).
OWNED = ("--json", "--csv", "--plot", "--native-algorithms", "-n", "--np", "--native-label",
         "--launch-timeout")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweep`` options; bench's follow ``--``."""
    parser.add_argument("-n", "--np", nargs="+", type=int, default=[2, 3, 4], metavar="P",
                        help="rank counts, one launch (per configuration) each (default 2 3 4)")
    parser.add_argument("--native", nargs="+", metavar="NAME", default=None,
                        help="also one launch per forced library algorithm: 'all' or names "
                        "(as bench --native-algorithms)")
    parser.add_argument("--launcher", metavar="CMD", default=None,
                        help="the command that starts P ranks with -n P, e.g. 'srun' or "
                        "'mpiexec -f hosts' (default: $MPIEXEC, else the mpiexec beside this "
                        "python)")
    launcher.add_launch_options(parser, budget=True, fresh=True)
    parser.add_argument("--json", metavar="FILE", required=True,
                        help="the sweep's file: written after each launch, read to resume")
    parser.add_argument("--csv", metavar="FILE", help="every record of every P as CSV")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="heatmap of the fastest implementation per (P, size)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("bench_args", nargs="*", metavar="-- BENCH_ARGS",
                        help="bench's options for every launch (after --), e.g. -- -c "
                        "allreduce -m 8:64K -a all")


class _Refusing(argparse.ArgumentParser):
    """A parser of the bench options after ``--`` that raises ValueError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def check_arguments(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
                    ) -> None:
    """Refuse a bad sweep command line (run under mpiexec, P < 1, bench options the sweep
    owns, bench options bench refuses); sets ``args.plan`` (bench's, at the smallest P)."""
    from . import bench
    from .options import seconds_problem, split

    if size > 1:
        error("sweep starts its own mpiexec -n P per launch: run it without mpiexec "
              "(python -m mpicoll sweep -n 2 4 ...)")
    if any(p < 1 for p in args.np):
        error("argument -n/--np: every P must be >= 1")
    args.np = sorted(set(args.np))
    for opt, value in (("--budget", args.budget), ("--launch-timeout", args.launch_timeout)):
        why = seconds_problem(opt, value)
        if why:
            error(why)
    for a in args.bench_args:
        if a.split("=", 1)[0] in OWNED:
            error(f"bench option {a.split('=', 1)[0]} after --: the sweep sets it (use "
                  "sweep's own -n, --native, --json, --csv, --plot, --launch-timeout)")
    parser = _Refusing(prog="mpicoll bench", add_help=False)
    bench.add_arguments(parser)
    try:
        bargs = parser.parse_args(args.bench_args)
    except ValueError as exc:
        error(f"bench options after --: {exc}")
    args.plan = bench.make_plan(bargs, args.np[0], error)
    args.native = split(args.native)
    if args.native:
        kind, version = launcher.library()
        if kind == "other":
            error(f"argument --native: {version}: forcing its algorithms is supported for "
                  "MPICH and Open MPI only")
        known = {n for c in args.plan.collectives
                 for n in launcher.native_names(kind, c, args.plan.nonblocking)}
        for n in args.native if args.native != ["all"] else []:
            if n not in known:
                error(f"argument --native: unknown {kind} algorithm {n!r} for "
                      f"{', '.join(args.plan.collectives)} (choose from all, "
                      f"{', '.join(sorted(known))})")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"np": list(args.np), "native": list(args.native),
            "bench_args": list(args.bench_args),
            "collectives": list(args.plan.collectives)}


def environment_problem(args: argparse.Namespace) -> str | None:
    """What only this process can check before launching: the output files, and that an
    existing ``--json`` holds a sweep of the same settings (else ``--fresh``)."""
    from .options import output_file_problem
    from .report import plot_problem

    if args.plot:
        why = plot_problem(args.plot)
        if why:
            return why
    for opt in ("json", "csv", "plot"):
        path = getattr(args, opt)
        if path:
            why = output_file_problem(f"--{opt}", path)
            if why:
                return why
    return launcher.resume_problem(args.json, args.fresh, SCHEMA_ID, _settings(args), "sweep")


def validate(doc: Any) -> list[str]:
    """Errors of a sweep document against ``schemas/sweep.schema.json`` and of each P's bench
    document against bench's schema (``"$.path: message"``; empty: valid)."""
    from .report import validate as against

    errors = against(doc, json.loads(SCHEMA_PATH.read_text()))
    for k, run in enumerate(doc.get("runs", []) if isinstance(doc, dict) else []):
        errors += [f"$.runs[{k}].doc{e[1:]}" for e in against(run.get("doc"))]
    return errors


def configs_for(kind: str, collectives: Sequence[str], native: Sequence[str], p: int,
                nonblocking: bool) -> list[launcher.Config]:
    """The launches of one P: the library's default, then one per forced native algorithm
    (none without ``native``)."""
    out = [launcher.Config("default")]
    if native:
        out += launcher.native_configs(kind, collectives, list(native), p=p,
                                       nonblocking=nonblocking)
    return out


def done_launches(run: dict[str, Any], nonblocking: bool) -> dict[str, launcher.Launch]:
    """The launches of a P already in a sweep file (``run``: its ``runs`` entry), rebuilt as
    :class:`.launcher.Launch` objects with their part of the merged document, by config name;
    a launch that left no results (``error`` set) is not among them."""
    doc = run["doc"]
    out: dict[str, launcher.Launch] = {}
    for e in doc["provenance"].get("launches", []):
        if e["error"] is not None:
            continue
        cfg = launcher.config_of(e, nonblocking)
        recs = [r for r in doc["results"] if r.get("native_algorithm") == e["native"]]
        part = {**doc, "results": recs,
                "skipped": doc["skipped"] if e["native"] is None else []}
        out[e["name"]] = launcher.Launch(cfg, e["status"], e["seconds"], part, "",
                                         e["evidence"])
    return out


def _time(r: dict[str, Any]) -> float | None:
    t = r.get("pure_us") if r.get("nonblocking") else r.get("time_us")
    return float(t["median"]) if r["status"] == "ok" and t else None


def _range(r: dict[str, Any]) -> tuple[float, float]:
    """A timed record's p10..p90 (us; min..max in a record without percentiles)."""
    t = r["pure_us"] if r.get("nonblocking") else r["time_us"]
    return float(t.get("p10", t["min"])), float(t.get("p90", t["max"]))


def best_rows(runs: Sequence[dict[str, Any]], backends: Sequence[str] = ("native", "p2p")
              ) -> list[dict[str, Any]]:
    """Per (collective, pattern, P, size) of the runs: the fastest of the blocking (not
    ``:init``) implementations whose backend is in ``backends`` (default: native, forced
    native:NAME columns and p2p; the mpi4py column is the default's twin), its median time
    (us), the library default's (``native``), the speed-up default / fastest (None where
    the default was not timed) and whether the two are ``within_noise`` (their p10..p90
    ranges overlap: no winner beyond the noise)."""
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for run in runs:
        for r in run["doc"]["results"]:
            if r.get("persistent") or r["backend"] not in backends or _time(r) is None:
                continue
            key = (r["collective"], r.get("pattern", "numpy"), run["P"], r["size_bytes"])
            groups.setdefault(key, []).append(r)
    out = []
    for (coll, pattern, p, size), recs in sorted(groups.items()):
        fastest = min(recs, key=lambda r: _time(r) or 0.0)
        default = next((r for r in recs if r["backend"] == "native"
                        and not r.get("native_algorithm")), None)
        t_fast, t_def = _time(fastest), _time(default) if default else None
        noise = None
        if default is not None:
            (lo_f, hi_f), (lo_d, hi_d) = _range(fastest), _range(default)
            noise = fastest is not default and lo_d <= hi_f and lo_f <= hi_d
        out.append({
            "collective": coll, "pattern": pattern, "P": p, "size_bytes": size,
            "count": fastest["count"],
            "fastest": fastest["implementation"],
            "fastest_backend": fastest["backend"],
            "fastest_us": t_fast,
            "default_us": t_def,
            "speedup_over_default": (t_def / t_fast if t_def and t_fast else None),
            "within_noise": noise,
        })
    return out


def _document(args: argparse.Namespace, kind: str, version: str, runs: list[dict[str, Any]],
              pending: list[dict[str, Any]], started: str) -> dict[str, Any]:
    import socket

    from .harness import package_version

    return {
        "schema": SCHEMA_ID,
        "provenance": {
            "date": started,
            "command_line": "mpicoll " + shlex.join(["sweep", *args.argv]),
            "launcher": args.launcher_cmd,
            "library": {"kind": kind, "version": version},
            "hostname": socket.gethostname(),
            "mpicoll": package_version(),
            "python": sys.version.split()[0],
        },
        "settings": {**_settings(args), "budget_s": args.budget,
                     "launch_timeout_s": args.launch_timeout},
        "runs": runs,
        "pending": pending,
        "complete": not pending,
        "best": best_rows(runs),
    }


def run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    """Run (or resume) the sweep; 0 if every launch ran and no result was WRONG, 1 otherwise
    (a launch failed or was left pending, or a result was WRONG), 130 on Ctrl-C (the file
    then holds what ran: rerun to resume)."""
    import time

    from .harness import Progress, usable_cpus

    kind, version = launcher.library()
    args.argv = list(argv)
    cores = len(usable_cpus())
    over = [p for p in args.np if p > cores]
    if over:
        out.write(f"# warning: P = {' '.join(map(str, over))} > the {cores} cores here: "
                  "oversubscribed (with mpiexec on this host), ranks wait for a core; compare "
                  "implementations within one P only\n")
    if 1 in args.np:
        out.write("# warning: P = 1: every collective is a local copy there\n")
    prefix = shlex.split(args.launcher) if args.launcher else launcher.mpiexec()
    args.launcher_cmd = shlex.join(prefix)
    plan = args.plan
    old = launcher.resumed(args.json, args.fresh)
    started = old.get("provenance", {}).get("date") or _dt.datetime.now(_dt.UTC).isoformat(
        timespec="seconds")
    old_runs = {r["P"]: r for r in old.get("runs", [])}
    progress = Progress(not args.quiet)
    runs: dict[int, dict[str, Any]] = dict(old_runs)
    t0 = time.monotonic()
    reused = ran = 0
    interrupted = False
    pending: list[dict[str, Any]] = []

    planned = [(p, c.name) for p in args.np
               for c in configs_for(kind, plan.collectives, args.native, p, plan.nonblocking)]

    def snapshot() -> dict[str, Any]:
        done = {(r["P"], e["name"]) for r in runs.values()
                for e in r["doc"]["provenance"].get("launches", []) if e["error"] is None}
        pending[:] = [{"P": p, "config": c} for p, c in planned if (p, c) not in done]
        return _document(args, kind, version, [runs[p] for p in sorted(runs)], pending,
                         started)

    try:
        for p in args.np:
            configs = configs_for(kind, plan.collectives, args.native, p, plan.nonblocking)
            have = done_launches(old_runs[p], plan.nonblocking) if p in old_runs else {}
            launches: list[launcher.Launch] = []
            for cfg in configs:
                if cfg.name in have:
                    launches.append(have[cfg.name])
                    reused += 1
                    continue
                if interrupted or (args.budget and time.monotonic() - t0 > args.budget):
                    continue
                progress.show(f"[mpicoll sweep] P = {p}: {cfg.name} "
                              f"({configs.index(cfg) + 1}/{len(configs)}; "
                              f"{time.monotonic() - t0:.0f} s so far)")
                try:
                    launches += launcher.run([cfg], p, args.bench_args,
                                             timeout=args.launch_timeout, launch=prefix)
                    ran += 1
                except KeyboardInterrupt:
                    interrupted = True
                    continue
                if any(ln.doc is not None for ln in launches):
                    runs[p] = {"P": p, "doc": launcher.merge(launches, kind, version)}
                    launcher.save_json(args.json, snapshot())
            if not any(ln.doc is not None for ln in launches):
                runs.pop(p, None)
                for ln in launches[:1]:
                    out.write(f"# P = {p}: no launch wrote results; {ln.config.name}: "
                              f"status {ln.status}: {ln.output[-600:]}\n")
            else:
                runs[p] = {"P": p, "doc": launcher.merge(launches, kind, version)}
    finally:
        progress.clear()
    doc = snapshot()
    launcher.save_json(args.json, doc)
    if args.csv:
        write_csv(args.csv, doc)
    if args.plot and doc["best"]:
        write_heatmap(args.plot, doc)
    out.write(format_summary(doc))
    broken = [(r["P"], e["name"], e["status"]) for r in doc["runs"]
              for e in r["doc"]["provenance"].get("launches", []) if e["error"] is not None]
    wrong = sum(r["doc"]["wrong"] for r in doc["runs"])
    out.write(f"# {ran} launch(es) run, {reused} taken from {args.json}"
              + (f", {len(pending)} pending (rerun the same command to resume)" if pending
                 else "")
              + (f"; failed: {', '.join(f'P={p} {n} (exit {s})' for p, n, s in broken)}"
                 if broken else "")
              + (f"; {wrong} WRONG result(s)" if wrong else "") + "\n")
    files = [f for f in (args.json, args.csv, args.plot if doc["best"] else None) if f]
    out.write(f"# wrote {', '.join(files)}\n")
    out.flush()
    if interrupted:
        return 130
    return 1 if pending or wrong else 0


def format_summary(doc: dict[str, Any]) -> str:
    """Per collective (and pattern): a row per size, a column per P, each cell the fastest
    implementation and its speed-up over the library's default."""
    lines: list[str] = []
    best = doc["best"]
    keys: list[tuple[str, str]] = []
    for b in best:
        if (b["collective"], b["pattern"]) not in keys:
            keys.append((b["collective"], b["pattern"]))
    for coll, pattern in keys:
        rows = [b for b in best if b["collective"] == coll and b["pattern"] == pattern]
        ps = sorted({b["P"] for b in rows})
        sizes = sorted({b["size_bytes"] for b in rows})
        cells = {(b["P"], b["size_bytes"]): b for b in rows}
        tag = "" if pattern == "numpy" else f" [pattern {pattern}]"
        lines.append(f"# {coll}{tag}: fastest per (P, size), x its speed-up over the "
                     "library's default (native); ~: within the noise (p10..p90 ranges "
                     "overlap), no winner")
        table = [["size", *(f"P={p}" for p in ps)]]
        for s in sizes:
            row = [human_size(s) + "B"]
            for p in ps:
                b = cells.get((p, s))
                sp = b["speedup_over_default"] if b else None
                mark = "~" if b is not None and b.get("within_noise") else ""
                row.append("-" if b is None else
                           f"{mark}{b['fastest']} x{sp:.2f}" if sp is not None
                           else b["fastest"])
            table.append(row)
        widths = [max(len(r[k]) for r in table) for k in range(len(table[0]))]
        for k, r in enumerate(table):
            lead = "# " if k == 0 else "  "
            lines.append(lead + "  ".join(f"{c:>{w}}" for c, w in zip(r, widths, strict=True)))
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "")


def write_csv(path: str, doc: dict[str, Any]) -> None:
    """A row per record of every P (``P`` then bench's :data:`.report.CSV_COLUMNS`)."""
    with open(path, "w", newline="") as fh:
        fh.write(f"# mpicoll sweep {doc['provenance']['date']}; "
                 f"{doc['provenance']['library']['version']}\n")
        w = csv.writer(fh)
        w.writerow(["P", *CSV_COLUMNS])
        for run in doc["runs"]:
            for rec in run["doc"]["results"]:
                row: list[Any] = [run["P"]]
                for col in CSV_COLUMNS:
                    key, _, sub = col.partition(".")
                    v = rec.get(key)
                    if sub:
                        v = v.get(sub) if isinstance(v, dict) else None
                    row.append("" if v is None else v)
                w.writerow(row)


def _wrap(name: str, width: int = 11) -> str:
    """``name`` broken after underscores into lines of about ``width`` characters."""
    lines: list[str] = []
    for part in name.replace("_", "_ ").split(" "):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(lines)


def write_heatmap(path: str, doc: dict[str, Any]) -> None:
    """One panel per collective (numpy pattern, else the first): P (rows) x size (columns),
    each cell the fastest implementation's name and speed-up over the library's default,
    coloured by that speed-up (log scale, 1 = the default is the fastest)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    best = doc["best"]
    colls: list[str] = []
    for b in best:
        if b["collective"] not in colls:
            colls.append(b["collective"])
    n = len(colls)
    ncols = 1  # one collective per row: the sizes run across
    nrows = n
    all_sizes = sorted({b["size_bytes"] for b in best})
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(max(6.0, 1.1 * len(all_sizes)) * ncols,
                                      (1.4 + 0.9 * len(doc["settings"]["np"])) * nrows + 0.8))
    top = max([b["speedup_over_default"] or 1.0 for b in best] + [1.01])
    norm = LogNorm(vmin=1.0, vmax=top)
    image = None
    for k, coll in enumerate(colls):
        ax = axes[k // ncols][k % ncols]
        patterns = [b["pattern"] for b in best if b["collective"] == coll]
        pattern = "numpy" if "numpy" in patterns else patterns[0]
        rows = [b for b in best if b["collective"] == coll and b["pattern"] == pattern]
        ps = sorted({b["P"] for b in rows})
        sizes = sorted({b["size_bytes"] for b in rows})
        grid = [[math.nan] * len(sizes) for _ in ps]
        for b in rows:
            i, j = ps.index(b["P"]), sizes.index(b["size_bytes"])
            sp = b["speedup_over_default"]
            grid[i][j] = sp if sp is not None else math.nan
            dark = sp is not None and norm(sp) > 0.6
            mark = "~" if b.get("within_noise") else ""
            ax.text(j, i, f"{_wrap(b['fastest'].replace('native:', 'n:'))}\n"
                    f"{mark + 'x' + format(sp, '.2f') if sp else '-'}", ha="center", va="center",
                    fontsize=6.5, color="white" if dark else "black")
        image = ax.imshow(grid, cmap="YlGn", norm=norm, aspect="auto", origin="lower")
        ax.set_xticks(range(len(sizes)), [human_size(s) + "B" for s in sizes], rotation=45,
                      fontsize=8)
        ax.set_yticks(range(len(ps)), [str(p) for p in ps])
        ax.set_xlabel("message size S")
        ax.set_ylabel("P (ranks)")
        ax.set_title(coll + ("" if pattern == "numpy" else f" [{pattern}]"), fontsize=10)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), label="speed-up over the default (x)")
    lib = " ".join(doc["provenance"]["library"]["version"].split())
    fig.suptitle(f"mpicoll sweep, {lib[:50]}: the fastest implementation per (P, size) and its "
                 "speed-up over the library's default\n(n:NAME: the library's algorithm NAME "
                 "forced; others: mpicoll's p2p algorithms; ~: within the noise, no winner)",
                 fontsize=9)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
