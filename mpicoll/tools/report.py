"""What ``mpicoll bench`` writes: its tables, the ``--json`` document, CSV and a plot.

Also the small text helpers the other commands print with (:func:`table`, :func:`fmt_us`,
:func:`human_size`, :func:`size_meaning`).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..algorithms.collectives import BY_NAME
from ..model.alphabeta import Model
from .patterns import describe as describe_pattern

if TYPE_CHECKING:
    from .harness import Plan

__all__ = [
    "CSV_COLUMNS",
    "SCHEMA_ID",
    "SCHEMA_PATH",
    "busbw_factor",
    "describe_model",
    "document",
    "fmt_us",
    "format_block",
    "format_stats",
    "header",
    "human_size",
    "size_label",
    "plot_problem",
    "size_meaning",
    "summarize",
    "table",
    "validate",
    "write_csv",
    "write_plot",
]

#: The JSON schema the ``--json`` output follows.
SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "bench.schema.json"
SCHEMA_ID = "mpicoll-bench/1"

def busbw_factor(collective: str, p: int) -> float | None:
    """nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md) of ``collective`` at ``p`` ranks,
    from its record's ``busbw_factor`` (None: barrier)."""
    rec = BY_NAME.get(collective)
    return None if rec is None else rec.busbw(p)


def human_size(n: int) -> str:
    """``4096`` -> ``"4K"``, ``3 << 20`` -> ``"3M"`` (binary units, exact ones only)."""
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def size_label(n: int) -> str:
    """A plot's size tick: ``8`` -> ``"8 B"``, ``4096`` -> ``"4 KiB"``, ``3 << 20`` ->
    ``"3 MiB"`` (binary units, exact ones only)."""
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"


def _size_axis(ax: Any, sizes: Sequence[int]) -> None:
    """A log2 x axis of message sizes, ticks at the measured sizes (at most about 12, evenly
    thinned) labelled B/KiB/MiB, no minor ticks."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    ticks = ticks[::max(1, math.ceil(len(ticks) / 12))]
    ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=45, fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())


def validate(doc: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """Check ``doc`` against a JSON schema with the ``jsonschema`` package (a test dependency:
    ``pip install 'mpicoll[test]'``); the errors, ``"$.path: message"`` each (empty: valid).

    Args:
        doc: the loaded JSON document.
        schema: the schema (default: :data:`SCHEMA_PATH`, the bench document's).
    """
    import jsonschema  # type: ignore[import-untyped]

    if schema is None:
        schema = json.loads(SCHEMA_PATH.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{e.json_path}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: e.json_path)]


def describe_model(m: Model) -> str:
    """``alpha = 2 us, beta = 0.1 ns/B (10 GB/s), gamma = 0.25 ns/B``, then the overhead and
    copy terms where they are not 0 (``, o_call = 5 us, o_msg = 0.5 us, delta = 0.1 ns/B``),
    and whether the model has measured curves."""
    gbps = f"{1.0 / m.beta / 1e9:.3g} GB/s" if m.beta > 0 else "inf GB/s"
    out = (f"alpha = {m.alpha * 1e6:.3g} us, beta = {m.beta * 1e9:.3g} ns/B ({gbps}), "
           f"gamma = {m.gamma * 1e9:.3g} ns/B")
    if m.o_call or m.o_msg:
        out += f", o_call = {m.o_call * 1e6:.3g} us, o_msg = {m.o_msg * 1e6:.3g} us"
    if m.o_start:
        out += f", o_start = {m.o_start * 1e6:.3g} us"
    if m.delta:
        out += f", delta = {m.delta * 1e9:.3g} ns/B"
    if m.message_curve or m.reduce_curve or m.copy_curve:
        out += "; measured times at each size (calibrate's curves)"
    return out



def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (collective, pattern, size): fastest of mpicoll's implementations (native, p2p),
    best p2p, its speed-up over native, native's time over plain mpi4py's, #wrong."""
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in records:
        rows.setdefault((r["collective"], r.get("pattern", "numpy"), r["size_bytes"]),
                        []).append(r)
    out = []
    for (coll, pattern, size), recs in rows.items():
        # the blocking calls (--persistent's X:init columns are beside them, not in the ranking)
        ok = [r for r in recs if r["status"] == "ok" and r["time_us"] and not r.get("persistent")]
        # the library's default (not a forced native:NAME column of --native-algorithms)
        nat = next((r for r in ok if r["backend"] == "native"
                    and not r.get("native_algorithm")), None)
        p2ps = [r for r in ok if r["backend"] == "p2p"]
        mine = [r for r in ok if r["backend"] != "mpi4py"]
        fastest = min(mine, key=lambda r: r["time_us"]["median"]) if mine else None
        plain = next((r for r in ok if r["backend"] == "mpi4py"), None)
        overhead = None
        if nat and plain and plain["time_us"]["median"] > 0:
            overhead = nat["time_us"]["median"] / plain["time_us"]["median"]
        best = min(p2ps, key=lambda r: r["time_us"]["median"]) if p2ps else None
        speedup = None
        if nat and best and best["time_us"]["median"] > 0:
            speedup = nat["time_us"]["median"] / best["time_us"]["median"]
        out.append(
            {
                "collective": coll,
                "pattern": pattern,
                "size_bytes": size,
                "count": recs[0]["count"],
                "fastest": fastest["implementation"] if fastest else None,
                "best_p2p": best["implementation"] if best else None,
                "speedup_best_p2p_vs_native": speedup,
                "native_over_mpi4py": overhead,
                "algbw_gbps": fastest["algbw_gbps"] if fastest else None,
                "busbw_gbps": fastest["busbw_gbps"] if fastest else None,
                "wrong": sum(r["status"] in ("wrong", "error") for r in recs),
            }
        )
    return out


def fmt_us(x: float) -> str:
    """A time in microseconds as the tables print it: ``12345``, ``123.4``, ``1.23``."""
    if x >= 1e4:
        return f"{x:.0f}"
    if x >= 100:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _fmt_opt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _cell(rec: dict[str, Any], key: str = "time_us") -> str:
    st = rec["status"]
    if st == "ok":
        return fmt_us(rec[key]["median"]) if rec.get(key) else "-"
    return {"wrong": "WRONG", "error": "ERROR", "n/a": "n/a"}[st]


def table(
    heads: list[str], units: list[str], rows: list[list[str]], notes: list[str]
) -> list[str]:
    """Right-aligned columns, two spaces apart; header and unit lines start with ``#``."""
    widths = [
        max(len(h), len(u), *(len(r[k]) for r in rows))
        for k, (h, u) in enumerate(zip(heads, units, strict=True))
    ]

    def line(cells: list[str], lead: str) -> str:
        return lead + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))

    return [line(heads, "# "), line(units, "# "), *(line(r, "  ") for r in rows), *notes]


def format_block(plan: Plan, coll: str, records: list[dict[str, Any]], p: int,
                 pattern: str = "numpy", note: str | None = None) -> str:
    """The table of one collective and buffer pattern, nccl-tests style (``note``: what the
    pattern runs instead of the dtype and op asked for, printed under the heading).

    Blocking: one row per size; columns size, count, check, the median time (us) of native and
    of each p2p algorithm (``WRONG``/``ERROR``/``n/a`` instead of a time), the fastest, the
    speed-up of the best p2p over native, algbw and busbw (GB/s) of the fastest, ``#wrong``.
    Non-blocking: one row per size and implementation with pure / compute / total times and the
    OSU and IMB-NBC overlap percentages.  Notes under the table explain n/a and WRONG cells.
    """
    if not records:
        return ""
    labels: list[str] = []
    for r in records:
        if r["implementation"] not in labels:
            labels.append(r["implementation"])
    summary = {s["size_bytes"]: s for s in summarize(records)}
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_size.setdefault(r["size_bytes"], {})[r["implementation"]] = r
    factor = busbw_factor(coll, p)
    ftext = BY_NAME[coll].busbw_factor
    tag = ("" if plan.patterns == ["numpy"]
           else f" [pattern {pattern}: {describe_pattern(pattern)}]")
    head = f"# {coll}{tag}: S = {size_meaning(coll)}" + (
        f"; busbw = algbw x {ftext} = {factor:.3g}" if factor is not None else ""
    )
    if note:
        head += f"\n#   {note}"
    notes: list[str] = []
    bad: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] in ("wrong", "error"):
            bad.setdefault(r["implementation"], []).append(r)
    for lab, recs in bad.items():
        first = recs[0]
        where = f" on rank {first['wrong_rank']}" if first["wrong_rank"] is not None else ""
        sizes = ", ".join(str(r["size_bytes"]) for r in recs)
        notes.append(f"#   {lab}: {first['status'].upper()} at {len(recs)} size(s) ({sizes} B); "
                     f"at {first['size_bytes']} B{where}: {first['reason']}")
    na: dict[str, str] = {}
    for r in records:
        if r["status"] == "n/a" and r["reason"]:
            na.setdefault(r["implementation"], r["reason"])
    notes = [f"#   {lab}: n/a: {why}" for lab, why in na.items()] + notes
    autos = sorted({str(r["auto_choice"]) for r in records if r.get("auto_choice")})
    if autos:
        notes.insert(0, f"#   auto ran: {', '.join(autos)} (per size in the JSON)")
    ratio_note = _ratio_note(records, labels)
    if ratio_note:
        notes.insert(0, ratio_note)
    if plan.nonblocking:
        return "\n".join([head, *_nonblocking_rows(records, labels, by_size), *notes]) + "\n"
    heads = ["size", "count", "check", *labels, "fastest", "speedup", "meas/pred", "algbw",
             "busbw", "#wrong"]
    units = ["(B)", "(elements)", "", *(["(us)"] * len(labels)), "", "(x)", "(x)", "(GB/s)",
             "(GB/s)", ""]
    rows = []
    for size, row in by_size.items():
        s = summary[size]
        best = row.get(s["best_p2p"]) if s["best_p2p"] else None
        cells = [str(size), str(s["count"]), "ok" if s["wrong"] == 0 else "FAIL"]
        cells += [_cell(row[lab]) if lab in row else "" for lab in labels]
        cells += [
            s["fastest"] or "-",
            _fmt_opt(s["speedup_best_p2p_vs_native"]),
            _fmt_opt(best["measured_over_predicted"] if best else None),
            _fmt_opt(s["algbw_gbps"]),
            _fmt_opt(s["busbw_gbps"]),
            str(s["wrong"]),
        ]
        rows.append(cells)
    return "\n".join([head, *table(heads, units, rows, notes)]) + "\n"


def _ratio_note(records: list[dict[str, Any]], labels: list[str]) -> str | None:
    """``#   measured/predicted: auto (ring) 1.2..3.4, ring 1.1..2.0`` (min..max over sizes)."""
    parts = []
    for lab in labels:
        recs = [r for r in records if r["implementation"] == lab
                and r.get("measured_over_predicted") is not None]
        if not recs:
            continue
        xs = [r["measured_over_predicted"] for r in recs]
        lo, hi = min(xs), max(xs)
        span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}..{hi:.2f}"
        parts.append(f"{lab} {span}")
    if not parts:
        return None
    return "#   measured/predicted per p2p implementation (min..max over sizes): " + \
        ", ".join(parts)


def _nonblocking_rows(
    records: list[dict[str, Any]], labels: list[str], by_size: dict[int, dict[str, dict[str, Any]]]
) -> list[str]:
    heads = ["size", "count", "implementation", "check", "pure", "pred", "compute", "total",
             "overlap", "overlap"]
    units = ["(B)", "(elements)", "", "", "(us)", "(us)", "(us)", "(us)", "OSU(%)", "IMB(%)"]
    rows = []
    for size, row in by_size.items():
        for lab in labels:
            rec = row.get(lab)
            if rec is None:
                continue
            ok = rec["status"] == "ok" and bool(rec.get("pure_us"))
            rows.append([
                str(size), str(rec["count"]), lab,
                "ok" if rec["status"] == "ok" else rec["status"].upper(),
                _cell(rec, "pure_us") if ok else "-",
                fmt_us(rec["predicted_us"]) if rec.get("predicted_us") is not None else "-",
                _cell(rec, "compute_us") if ok else "-",
                _cell(rec, "total_us") if ok else "-",
                _fmt_opt(rec.get("overlap_osu_pct"), ".1f") if ok else "-",
                _fmt_opt(rec.get("overlap_imb_pct"), ".1f") if ok else "-",
            ])
    legend = ("#   overlap OSU = max(0, 100 (1 - (total - compute) / pure)); IMB-NBC = "
              "100 max(0, min(1, (pure + compute - total) / min(pure, compute)))")
    return [legend, *table(heads, units, rows, [])]


def format_stats(records: list[dict[str, Any]]) -> str:
    """``bench --stats``: under a table, one row per timed (size, implementation): p50, p90,
    p99, min, max (us), cv, the median entry skew (us) and the rank most often the slowest
    (with its share of the iterations); empty if nothing was timed."""
    heads = ["size", "implementation", "iters", "p50", "p90", "p99", "min", "max", "cv",
             "skew", "slowest"]
    units = ["(B)", "", "", "(us)", "(us)", "(us)", "(us)", "(us)", "", "p50(us)",
             "rank (share)"]
    rows = []
    for r in records:
        t = r.get("pure_us") or r.get("time_us")
        its = r.get("iteration_stats")
        if r["status"] != "ok" or not t or not its:
            continue
        counts = its["slowest_count_by_rank"]
        worst = max(range(len(counts)), key=lambda k: counts[k]) if counts else 0
        share = counts[worst] / max(1, sum(counts)) if counts else 0.0
        rows.append([str(r["size_bytes"]), r["implementation"], str(r["iterations"]),
                     *(fmt_us(t.get(k, t["median"])) for k in ("p50", "p90", "p99")),
                     fmt_us(t["min"]), fmt_us(t["max"]), f"{t.get('cv', 0.0):.2f}",
                     fmt_us(its["entry_skew_stats_us"]["median"]),
                     f"{worst} ({share:.0%})"])
    if not rows:
        return ""
    note = ("#   statistics over iterations (each: the max over ranks); cv = std / mean; "
            "skew = latest minus earliest entry over ranks; slowest: the rank whose call was "
            "the longest most often")
    return "\n".join([note, *table(heads, units, rows, [])]) + "\n"


def size_meaning(coll: str) -> str:
    """What the message size S of ``coll`` is, in words (the tables' headings)."""
    rec = BY_NAME.get(coll)
    return rec.bench_size if rec is not None else "bytes"


def header(plan: Plan, prov: dict[str, Any]) -> str:
    """The ``#`` lines above the tables: provenance and settings."""
    hosts = ", ".join(f"{h['name']} ({h['ranks']} ranks"
                      + (f", {h['cores']} cores" if "cores" in h else "") + ")"
                      for h in prov["hosts"])
    st = plan.settings
    mode = "non-blocking (overlap)" if plan.nonblocking else "blocking"
    if plan.persistent:
        mode += " and persistent (X:init: Start + Wait of the *_init request)"
    patterns = "; ".join(f"{p} ({describe_pattern(p)})" for p in plan.patterns)
    return "\n".join(
        [
            f"# mpicoll bench  {prov['date']}",
            f"# {prov['mpi_library']} (MPI {prov['mpi_standard']}), mpi4py {prov['mpi4py']}, "
            f"numpy {prov['numpy']}, python {prov['python']}",
            f"# P={prov['P']} on {hosts}; thread level {prov['thread_level']}",
            f"# dtype={plan.dtype} op={plan.op} root={plan.root} "
            f"{'in-place' if plan.in_place else 'out-of-place'} {mode}",
            f"# buffers passed as: {patterns}; every implementation with the same pattern",
            f"# {st.describe()}; barrier before each iteration; "
            "time = median over iterations of the max over ranks",
            "# every result checked before timing (native vs NumPy, p2p vs native); "
            "WRONG results are never timed",
            "# mpi4py = the same call on the plain MPI.Comm, no mpicoll (native - mpi4py: "
            "mpicoll's own cost per call); fastest: of native and p2p",
            "# speedup = native / best p2p (> 1: hand-rolled faster); algbw = S/t, "
            "busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md), GB/s = 1e9 B/s",
            *_model_lines(plan),
            *placement_warnings(prov),
            "",
        ]
    )


def placement_warnings(prov: dict[str, Any]) -> list[str]:
    """``# warning:`` lines for a run whose times say little: P = 1 (every collective a local
    copy), or a host with more ranks than cores (``provenance``'s ``cores``: oversubscribed,
    the ranks take turns on the cores and the times measure the scheduler's turns)."""
    out = []
    if prov["P"] == 1:
        out.append("# warning: P = 1: every collective is a local copy here; run under "
                   "mpiexec -n P (P >= 2) to compare algorithms")
    for h in prov["hosts"]:
        if "cores" in h and h["ranks"] > h["cores"]:
            out.append(f"# warning: {h['name']} runs {h['ranks']} ranks on {h['cores']} "
                       "cores: oversubscribed, ranks wait for a core, so times include "
                       "the scheduler's turns (compare implementations within this run only)")
    return out


def _model_lines(plan: Plan) -> list[str]:
    if plan.model is None:
        return []
    return [
        "# meas/pred = measured / predicted time of the best p2p (predicted: cost-only "
        f"simulation of the algorithm run); model {plan.model_source}: "
        f"{describe_model(plan.model)}"
    ]


CSV_COLUMNS = [
    "collective", "pattern", "implementation", "backend", "algorithm", "auto_choice",
    "size_bytes", "count",
    "dtype", "op", "root", "in_place", "nonblocking", "status", "check", "reason", "wrong_rank",
    "iterations", "warmup", "time_us.min", "time_us.median", "time_us.mean", "time_us.max",
    "time_us.std", "time_us.p10", "time_us.p90", "time_us.p99", "time_us.cv", "algbw_gbps",
    "busbw_gbps", "busbw_factor", "pure_us.median",
    "compute_us.median", "total_us.median", "overlap_osu_pct", "overlap_imb_pct", "test_calls",
    "predicted_us", "measured_over_predicted",
]


def write_csv(path: str, doc: dict[str, Any]) -> None:
    """One row per result (columns :data:`CSV_COLUMNS`), provenance as leading ``#`` lines."""
    with open(path, "w", newline="") as fh:
        for key, value in doc["provenance"].items():
            if key == "mpi_library_full":
                continue
            fh.write(f"# {key}: {json.dumps(value) if not isinstance(value, str) else value}\n")
        for key, value in doc["settings"].items():
            fh.write(f"# settings.{key}: {json.dumps(value)}\n")
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for rec in doc["results"]:
            row = []
            for col in CSV_COLUMNS:
                key, _, sub = col.partition(".")
                v = rec.get(key)
                if sub:
                    v = v.get(sub) if isinstance(v, dict) else None
                row.append("" if v is None else v)
            w.writerow(row)


def plot_available() -> str | None:
    """None if ``--plot`` can work, else the error to show (matplotlib missing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return (
            "--plot needs matplotlib, which is not installed: "
            "pip install 'mpicoll[plot]' (or pip install matplotlib)"
        )
    return None


def plot_problem(path: str) -> str | None:
    """None if ``--plot path`` can be written, else the error to show: matplotlib missing, no
    file extension, or a format matplotlib cannot write (checked before anything runs)."""
    why = plot_available()
    if why:
        return why
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    ext = os.path.splitext(path)[1][1:].lower()
    if not ext:
        return (f"argument --plot: {path!r} has no file extension to name the image format "
                f"(e.g. {path}.png; matplotlib writes {', '.join(formats)})")
    if ext not in formats:
        return (f"argument --plot: matplotlib cannot write {ext!r} files "
                f"(supported: {', '.join(formats)})")
    return None


def write_plot(path: str, doc: dict[str, Any]) -> None:
    """Latency (median, us, with its p10..p90 spread shaded) against message size, log-log:
    one panel per collective, one line per implementation (a collective without a message
    size, barrier: one bar each); then two summary panels over the collectives: the speedup
    of the best p2p implementation over native (native / best p2p median, > 1: hand-rolled
    faster) and native's busbw (GB/s), against size; ``--phases`` adds a stacked bar per
    algorithm.  WRONG / n/a points are left out; legends stand beside their panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls: list[str] = []
    for r in doc["results"]:
        if r["collective"] not in colls:
            colls.append(r["collective"])
    phased = [c for c in colls if any(r.get("phases") for r in doc["results"]
                                      if r["collective"] == c)]
    key = "pure_us" if doc["settings"]["nonblocking"] else "time_us"
    sized = [r for r in doc["results"] if r["status"] == "ok" and r.get(key)
             and r["size_bytes"] > 0]
    summary = 2 if sized else 0
    n = max(1, len(colls) + summary + len(phased))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 3.9 * nrows), squeeze=False,
                             layout="constrained")
    prov = doc["provenance"]
    patterns = len(doc["settings"].get("patterns", ["numpy"])) > 1
    for k, coll in enumerate(colls):
        ax = axes[k // ncols][k % ncols]
        lines: dict[str, list[tuple[int, float, float, float]]] = {}
        for r in doc["results"]:
            if r["collective"] != coll:
                continue
            label = r["implementation"]
            if patterns:
                label += f" [{r.get('pattern', 'numpy')}]"
            pts = lines.setdefault(label, [])
            if r["status"] == "ok" and r.get(key) and r["size_bytes"] > 0:
                t = r[key]
                pts.append((r["size_bytes"], t["median"], t.get("p10", t["median"]),
                            t.get("p90", t["median"])))
        ax.set_title(coll)
        ax.set_ylabel("median latency (us)")
        if not any(lines.values()):  # no size (barrier): one bar per implementation
            bars = [(r["implementation"], r[key]["median"]) for r in doc["results"]
                    if r["collective"] == coll and r["status"] == "ok" and r.get(key)]
            if bars:
                ax.bar([b for b, _ in bars], [t for _, t in bars])
                ax.tick_params(axis="x", labelrotation=45, labelsize=7)
            ax.set_xlabel("implementation (no message)")
            ax.grid(True, axis="y", alpha=0.3)
            continue
        for label, pts in lines.items():
            if pts:
                pts.sort()
                xs = [x for x, *_ in pts]
                style = "-o" if label.startswith("native") else "--."
                (line,) = ax.plot(xs, [m for _, m, _, _ in pts], style, label=label,
                                  markersize=4)
                ax.fill_between(xs, [lo for *_, lo, _ in pts], [hi for *_, hi in pts],
                                color=line.get_color(), alpha=0.15, linewidth=0)
        _size_axis(ax, [x for pts in lines.values() for x, *_ in pts])
        ax.set_yscale("log")
        ax.set_xlabel("message size S")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside
    if summary:
        _summary_panels(axes, len(colls), ncols, colls, sized, key)
    for k, coll in enumerate(phased, start=len(colls) + summary):
        _phase_bars(axes[k // ncols][k % ncols], coll, doc["results"])
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    if doc["settings"]["nonblocking"]:
        mode = "non-blocking (pure communication)"
    elif doc["settings"].get("persistent"):
        mode = "blocking and persistent (X:init)"
    else:
        mode = "blocking"
    fig.suptitle(f"mpicoll bench: P={prov['P']}, {prov['mpi_vendor']}, "
                 f"{doc['settings']['dtype']}, {mode}; shaded: p10..p90")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _summary_panels(axes: Any, first: int, ncols: int, colls: Sequence[str],
                    rows: Sequence[dict[str, Any]], key: str) -> None:
    """The two summary panels of :func:`write_plot`: per collective (and buffer pattern),
    native's median over the best p2p implementation's at each size, and native's busbw."""
    best: dict[tuple[str, str, int], float] = {}
    native: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        if r.get("persistent"):
            continue  # the blocking calls (X:init curves are beside them in the panels)
        where = (r["collective"], r.get("pattern", "numpy"), r["size_bytes"])
        if r["backend"] == "native":
            native[where] = r
        elif r["backend"] == "p2p":
            t = r[key]["median"]
            best[where] = min(t, best.get(where, t))
    speed, bw = axes[first // ncols][first % ncols], \
        axes[(first + 1) // ncols][(first + 1) % ncols]
    sizes: list[int] = []
    for coll in colls:
        for pattern in sorted({p for c, p, _ in native if c == coll}):
            at = sorted(s for c, p, s in native if c == coll and p == pattern)
            label = coll if pattern == "numpy" else f"{coll} [{pattern}]"
            ratio = [(s, native[coll, pattern, s][key]["median"] / best[coll, pattern, s])
                     for s in at if best.get((coll, pattern, s))]
            if ratio:
                speed.plot([s for s, _ in ratio], [v for _, v in ratio], "-o", markersize=3,
                           label=label)
            gb = [(s, native[coll, pattern, s].get("busbw_gbps")) for s in at]
            gb = [(s, v) for s, v in gb if v]
            if gb:
                bw.plot([s for s, _ in gb], [v for _, v in gb], "-o", markersize=3, label=label)
            sizes += at
    speed.axhline(1.0, color="grey", linewidth=0.8)
    speed.set_title("speedup of the best p2p over native")
    speed.set_ylabel("native / best p2p (> 1: p2p faster)")
    bw.set_title("native busbw")
    bw.set_ylabel("busbw (GB/s)")
    for ax in (speed, bw):
        _size_axis(ax, sizes)
        ax.set_xlabel("message size S")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


def phase_groups(times: Sequence[float], labels: Sequence[str]) -> list[tuple[str, float]]:
    """``bench --phases``: consecutive rounds of one label summed, ``(label, us)`` in order."""
    out: list[tuple[str, float]] = []
    for t, lab in zip(times, labels, strict=True):
        if out and out[-1][0] == lab:
            out[-1] = (lab, out[-1][1] + t)
        else:
            out.append((lab, t))
    return out


def _phase_bars(ax: Any, coll: str, records: Sequence[dict[str, Any]]) -> None:
    """``bench --phases``: at the largest size with per-round times, a horizontal stacked bar
    per p2p implementation and rank (0, and the slowest), a segment per phase (consecutive
    rounds of one label; unnamed rounds each their own)."""
    recs = [r for r in records if r["collective"] == coll and r.get("phases")]
    size = max(r["size_bytes"] for r in recs)
    recs = [r for r in recs if r["size_bytes"] == size]
    colours: dict[str, Any] = {}
    bars: list[str] = []
    for r in recs:
        ph = r["phases"]
        rows = [("rank 0", ph["rank0_us"], ph["labels_rank0"])]
        if ph["slowest_rank"] != 0:
            rows.append((f"rank {ph['slowest_rank']} (slowest)", ph["slowest_us"],
                         ph["labels_slowest"]))
        for who, times, labels in rows:
            y = len(bars)
            bars.append(f"{r['implementation']}\n{who}")
            left = 0.0
            for lab, t in phase_groups(times, labels):
                colours.setdefault(lab, f"C{len(colours) % 10}")
                ax.barh(y, t, left=left, color=colours[lab], edgecolor="white")
                left += t
    ax.set_yticks(range(len(bars)), bars, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time per round, summed by phase (median us)")
    ax.set_title(f"{coll} {human_size(size)}B: time per phase", fontsize=10)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=lab) for lab, c in list(colours.items())[:10]],
              fontsize="x-small", loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)


def document(plan: Plan, prov: dict[str, Any], records: list[dict[str, Any]],
             skipped: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``--json`` document (see ``schemas/bench.schema.json``); ``skipped``: the
    (collective, pattern) pairs not run, each with its reason."""
    from .measure import SYNC

    st = plan.settings
    lo, hi = st.iteration_range()
    return {
        "schema": SCHEMA_ID,
        "provenance": prov,
        "settings": {
            "collectives": plan.collectives,
            "algorithms": plan.algorithms,
            "sizes": plan.sizes,
            "dtype": plan.dtype,
            "op": plan.op,
            "root": plan.root,
            "in_place": plan.in_place,
            "nonblocking": plan.nonblocking,
            "persistent": plan.persistent,
            "patterns": plan.patterns,
            "iterations": st.iterations,
            "warmup": st.warmup_count(),
            "time_budget_s": st.time_budget,
            "min_iterations": lo,
            "max_iterations": hi,
            "test_calls": st.test_calls,
            "timing": "median over iterations of the max over ranks; barrier before each",
            "sync": SYNC,
            "model": (None if plan.model is None
                      else {**plan.model.as_dict(), "source": plan.model_source}),
        },
        "results": records,
        "skipped": list(skipped or []),
        "summary": summarize(records),
        "wrong": sum(r["status"] in ("wrong", "error") for r in records),
    }




# ---- ``mpicoll report``: saved results again, and two runs compared --------------------------


def add_arguments(parser: Any) -> None:
    """The ``report`` options."""
    parser.add_argument("files", nargs="+", metavar="BENCH.json",
                        help="one bench --json file (its tables again), or two (compared: "
                        "the second against the first)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="one file: bench's plot; two: the second's median over the "
                        "first's per implementation against size")
    parser.add_argument("--stats", action="store_true",
                        help="one file: bench's statistics under each table")


def load_runs(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The bench documents at ``paths``, each checked against the schema.

    Raises:
        ValueError: a file unreadable, not JSON, or not a valid bench document (its first
            errors named), or more than two files."""
    if len(paths) > 2:
        raise ValueError("one file, or two to compare")
    docs = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        errors = validate(doc)
        if errors:
            raise ValueError(f"{path}: not a bench --json file: {'; '.join(errors[:3])}")
        docs.append(doc)
    return docs


def _plan_of(doc: dict[str, Any]) -> Plan:
    from .harness import Plan

    st = doc["settings"]
    return Plan(list(st["collectives"]), list(st["algorithms"]), bool(st["nonblocking"]),
                patterns=list(st.get("patterns", ["numpy"])))


def _spread(r: dict[str, Any]) -> tuple[float, float, float] | None:
    t = r.get("pure_us") if r.get("nonblocking") else r.get("time_us")
    if r["status"] != "ok" or not t:
        return None
    return float(t.get("p10", t["min"])), float(t["median"]), float(t.get("p90", t["max"]))


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (collective, pattern, implementation, size) timed in both runs: both ``(p10,
    median, p90)`` (us), ``ratio`` = b's median / a's, and ``verdict``: ``faster`` (b's p90
    below a's p10), ``SLOWER`` (b's p10 above a's p90) or ``within noise``."""
    def key(r: dict[str, Any]) -> tuple[str, str, str, int]:
        return (r["collective"], r.get("pattern", "numpy"), r["implementation"],
                r["size_bytes"])

    first = {key(r): r for r in a["results"]}
    out = []
    for r in b["results"]:
        old = first.get(key(r))
        sa, sb = (_spread(old) if old else None), _spread(r)
        if sa is None or sb is None:
            continue
        verdict = ("faster" if sb[2] < sa[0] else "SLOWER" if sb[0] > sa[2]
                   else "within noise")
        coll, pattern, impl, size = key(r)
        out.append({"collective": coll, "pattern": pattern, "implementation": impl,
                    "size_bytes": size, "a": sa, "b": sb, "ratio": sb[1] / sa[1],
                    "verdict": verdict})
    return out


def _label(doc: dict[str, Any]) -> str:
    prov = doc["provenance"]
    return f"{prov['mpi_vendor']}, P={prov['P']}, {prov['date']}"


def format_comparison(a: dict[str, Any], b: dict[str, Any], rows: Sequence[dict[str, Any]]
                      ) -> str:
    """The comparison table of :func:`compare_runs` and a closing line per collective: how
    many (implementation, size) cells got faster, slower or stayed within the noise."""
    lines = [f"# A: {_label(a)}", f"# B: {_label(b)}",
             "# per implementation and size: median [p10..p90] us of A and of B, B/A, and the "
             "verdict (faster / SLOWER where the p10..p90 ranges do not overlap)"]
    colls: list[str] = []
    for r in rows:
        if r["collective"] not in colls:
            colls.append(r["collective"])
    for coll in colls:
        mine = [r for r in rows if r["collective"] == coll]
        lines.append(f"# {coll}")
        for r in mine:
            tag = "" if r["pattern"] == "numpy" else f" [{r['pattern']}]"
            (a0, a1, a2), (b0, b1, b2) = r["a"], r["b"]
            lines.append(f"  {r['implementation'] + tag:<28} {human_size(r['size_bytes']) + 'B':>7}"
                         f"  A {fmt_us(a1):>8} [{fmt_us(a0)}..{fmt_us(a2)}]"
                         f"  B {fmt_us(b1):>8} [{fmt_us(b0)}..{fmt_us(b2)}]"
                         f"  B/A {r['ratio']:.3g}  {r['verdict']}")
        n = {v: sum(r["verdict"] == v for r in mine) for v in ("faster", "SLOWER",
                                                                "within noise")}
        lines.append(f"# {coll}: B faster at {n['faster']}, slower at {n['SLOWER']}, within "
                     f"the noise at {n['within noise']} of {len(mine)} (implementation, size)")
    if not rows:
        lines.append("# nothing timed in both runs")
    return "\n".join(lines) + "\n"


def write_ratio_plot(path: str, a: dict[str, Any], b: dict[str, Any],
                     rows: Sequence[dict[str, Any]]) -> None:
    """One panel per collective: B's median over A's against size, a line per
    implementation (log-x; log-y where the ratios span more than 4x, else linear; 1 = no
    change)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    colls: list[str] = []
    for r in rows:
        if r["collective"] not in colls and r["size_bytes"] > 0:
            colls.append(r["collective"])
    n = max(1, len(colls))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.2 * nrows), squeeze=False,
                             layout="constrained")
    for k, coll in enumerate(colls):
        ax = axes[k // ncols][k % ncols]
        lines: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["collective"] == coll and r["size_bytes"] > 0:
                tag = "" if r["pattern"] == "numpy" else f" [{r['pattern']}]"
                lines.setdefault(r["implementation"] + tag, []).append((r["size_bytes"],
                                                                         r["ratio"]))
        for label, pts in lines.items():  # a line per implementation and buffer pattern
            pts.sort()
            ax.plot([x for x, _ in pts], [y for _, y in pts], "-o" if label == "native"
                    else "--o", label=label, markersize=4)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ratios = [y for pts in lines.values() for _, y in pts if y > 0] + [1.0]
        if max(ratios) / min(ratios) > 4:  # a wide span: log, labelled at 1, 2, 5, 10, ...
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            # minor ticks: only 2x and 5x labelled (0.8, 0.9, 1 overlapped)
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if v > 0 and f"{v:.0e}"[0] in "25" else ""))
        # (a narrow one, the common case, stays linear: a log axis there has no label but 1)
        _size_axis(ax, [x for pts in lines.values() for x, _ in pts])
        ax.set_title(coll, fontsize=10)
        ax.set_xlabel("message size S")
        ax.set_ylabel("B / A median (< 1: B faster)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="xx-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    fig.suptitle(f"mpicoll report: B / A\nA: {_label(a)}\nB: {_label(b)}", fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_report(args: Any, out: Any) -> int:
    """``mpicoll report``: one file's tables (and ``--stats``, ``--plot``) again, or two
    files compared (:func:`format_comparison`, ``--plot``: :func:`write_ratio_plot`); the
    last line names the files written."""
    docs = args.docs
    written = []
    if len(docs) == 1:
        doc = docs[0]
        plan = _plan_of(doc)
        p = doc["provenance"]["P"]
        out.write(f"# {args.files[0]}: {_label(doc)}\n")
        for line in placement_warnings(doc["provenance"]):
            out.write(line + "\n")
        for coll in plan.collectives:
            for pattern in plan.patterns:
                recs = [r for r in doc["results"] if r["collective"] == coll
                        and r.get("pattern", "numpy") == pattern]
                if recs:
                    out.write(format_block(plan, coll, recs, p, pattern) + "\n")
                    if args.stats:
                        out.write(format_stats(recs) + "\n")
        if args.plot:
            write_plot(args.plot, doc)
            written.append(args.plot)
    else:
        rows = compare_runs(docs[0], docs[1])
        out.write(format_comparison(docs[0], docs[1], rows))
        if args.plot:
            write_ratio_plot(args.plot, docs[0], docs[1], rows)
            written.append(args.plot)
    if written:
        out.write(f"# wrote {', '.join(written)}\n")
    return 0
