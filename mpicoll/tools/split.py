"""``bench --split MOD:k|DIV:k``: the benchmark on several sub-communicators at once.

As nccl-tests' ``NCCL_TESTS_SPLIT`` (and IMB's ``-multi``): ``MOD:k`` puts rank r in group
``r mod k`` (k groups, their ranks strided), ``DIV:k`` in group ``r div k`` (groups of k
consecutive ranks).  ``MPI_Comm_split`` makes the groups; each runs the whole benchmark on its
own communicator, all groups at the same time (they are synchronised within a group only, by
its barriers), so the collectives of the groups compete for the machine as those of
concurrent communicators of an application do.

Every group's tables are printed, then the aggregate: per (collective, pattern,
implementation, size) the median of each group and the slowest of them.  The JSON holds every
group's records (``group``, ``group_size`` on each), the summary of group 0, and ``split``:
the spec, each group's world ranks, and the aggregate rows.
"""

from __future__ import annotations

import argparse
import copy
import io
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["aggregate", "color", "group_sizes", "parse_split", "run_split"]


def parse_split(text: str, p: int) -> tuple[str, int]:
    """``"MOD:2"`` -> ``("MOD", 2)``.

    Raises:
        ValueError: not ``MOD:k``/``DIV:k`` with 1 <= k <= P.
    """
    kind, _, k = text.partition(":")
    if kind.upper() not in ("MOD", "DIV") or not k.isdigit():
        raise ValueError(f"{text!r} is not MOD:k or DIV:k (k a positive integer)")
    n = int(k)
    if not 1 <= n <= p:
        raise ValueError(f"{text!r}: k must be between 1 and P = {p}")
    return kind.upper(), n


def group_sizes(kind: str, k: int, p: int) -> list[int]:
    """The size of each group of ``p`` ranks, in group order."""
    sizes: dict[int, int] = {}
    for r in range(p):
        c = color(kind, k, r)
        sizes[c] = sizes.get(c, 0) + 1
    return [sizes[c] for c in sorted(sizes)]


def color(kind: str, k: int, rank: int) -> int:
    """The group of ``rank``: ``rank mod k`` (MOD) or ``rank div k`` (DIV)."""
    return rank % k if kind == "MOD" else rank // k


def aggregate(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (collective, pattern, implementation, size) timed in every group: each group's
    median (us) and the slowest (the max), in the order of group 0's records."""
    by: dict[tuple[str, str, str, int], list[float | None]] = {}
    order: list[tuple[str, str, str, int]] = []
    for g, doc in enumerate(groups):
        for r in doc["results"]:
            key = (r["collective"], r.get("pattern", "numpy"), r["implementation"],
                   r["size_bytes"])
            t = r.get("pure_us") if r.get("nonblocking") else r.get("time_us")
            if key not in by:
                by[key] = [None] * len(groups)
                order.append(key)
            by[key][g] = float(t["median"]) if r["status"] == "ok" and t else None
    out = []
    for key in order:
        meds = by[key]
        if any(m is None for m in meds):
            continue
        vals = [m for m in meds if m is not None]
        out.append({"collective": key[0], "pattern": key[1], "implementation": key[2],
                    "size_bytes": key[3], "group_median_us": vals,
                    "slowest_group_us": max(vals)})
    return out


def format_aggregate(rows: Sequence[dict[str, Any]], spec: str, n: int) -> str:
    """The aggregate table: a row per (collective, size, implementation)."""
    from .report import fmt_us, table

    if not rows:
        return f"# --split {spec}: no result was timed in every group\n"
    heads = ["collective", "size", "implementation", *(f"group {g}" for g in range(n)),
             "slowest"]
    units = ["", "(B)", "", *(["(us)"] * n), "(us)"]
    body = [[r["collective"], str(r["size_bytes"]), r["implementation"],
             *(fmt_us(m) for m in r["group_median_us"]), fmt_us(r["slowest_group_us"])]
            for r in rows]
    lines = [f"# --split {spec}: {n} groups at once; median per group and the slowest group"]
    return "\n".join([*lines, *table(heads, units, body, [])]) + "\n"


def run_split(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO,
              run: Callable[[argparse.Namespace, Any, Sequence[str], TextIO], int],
              write: Callable[[argparse.Namespace, dict[str, Any]], None]) -> int:
    """Run bench (``run``, with ``--split`` off) on each group's communicator at once; world
    rank 0 prints every group's tables and the aggregate and writes the outputs (``write``).
    The exit status: 1 if any group had a WRONG result."""
    kind, k = parse_split(args.split, comm.Get_size())
    rank = comm.Get_rank()
    sub = comm.Split(color(kind, k, rank), rank)
    try:
        inner = copy.copy(args)
        inner.split = None
        inner.json = inner.csv = inner.plot = None
        inner.quiet = True
        inner.last_document = None
        buf = io.StringIO()
        status = run(inner, sub, argv, buf)
        group = color(kind, k, rank)
        mine = (group, sub.Get_size(), inner.last_document, buf.getvalue()) \
            if sub.Get_rank() == 0 else None
        ranks = comm.gather((group, rank), root=0)
        parts = comm.gather(mine, root=0)
        status = int(comm.allreduce(status, op=_max()))
    finally:
        sub.Free()
    if rank != 0:
        return status
    assert parts is not None
    assert ranks is not None
    got = sorted((p for p in parts if p is not None), key=lambda x: x[0])
    members = {g: [r for gg, r in ranks if gg == g] for g, *_ in got}
    docs = []
    for g, size, doc, text in got:
        out.write(f"# --split {args.split}: group {g} ({size} rank{'s' * (size != 1)}: world "
                  f"ranks {', '.join(map(str, members[g]))})\n")
        out.write(text)
        for r in doc["results"]:
            r["group"], r["group_size"] = g, size
        docs.append(doc)
    rows = aggregate(docs)
    out.write(format_aggregate(rows, args.split, len(docs)))
    merged = dict(docs[0])
    merged["results"] = [r for d in docs for r in d["results"]]
    merged["wrong"] = sum(d["wrong"] for d in docs)
    merged["split"] = {"spec": args.split,
                       "groups": [{"group": g, "size": size, "ranks": members[g]}
                                  for g, size, *_ in got],
                       "aggregate": rows}
    write(args, merged)
    out.flush()
    return status


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
