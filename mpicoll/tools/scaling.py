"""A scaling plot of the simulator: predicted time against P, one line per algorithm, on a
network (``make scaling-plot`` writes ``docs/simulator-scaling.png``, shown in
docs/simulator.md).

Each point is :func:`mpicoll.tools.simulate.predict_rows` at one P (cost-only, the
collective's count for bench's size S) on ``Network(topology, placement)``; the model is the
flat alpha-beta-gamma one given by ``--alpha --beta --gamma`` (or ``--model FILE``).

Command line::

    python -m mpicoll.tools.scaling -c allreduce -m 1M -n 4:1024 --topology fattree:16:4 \\
        -a recursive_doubling ring rabenseifner swing_bandwidth -o docs/simulator-scaling.png

prints the table (us per P and algorithm) and writes the plot (needs matplotlib) and, with
``--json``, the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..engines.network import Network
from ..model import alphabeta
from ..model.alphabeta import Model
from .options import parse_size
from .simulate import predict_rows

__all__ = ["main", "plot", "powers_of_two", "scaling_rows"]


def powers_of_two(spec: str) -> list[int]:
    """The rank counts of ``"A:B"``: A, 2A, 4A, ... up to B (both >= 2), or of ``"P"``: [P].

    Raises:
        ValueError: not that form, or a count below 2, or B < A.
    """
    lo_s, _, hi_s = spec.partition(":")
    try:
        lo, hi = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise ValueError(f"rank counts: expected P or A:B (integers), got {spec!r}") from None
    if lo < 2 or hi < lo:
        raise ValueError(f"rank counts: need 2 <= A <= B, got {spec!r}")
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= 2
    return out


def scaling_rows(collective: str, ps: Sequence[int], size: int, algorithms: Sequence[str],
                 model: Model, topology: str, placement: str = "block",
                 ranks_per_node: int = 1) -> list[dict[str, Any]]:
    """Rows of :func:`~mpicoll.tools.simulate.predict_rows` (one size S, bytes) at each rank
    count of ``ps`` on ``Network(topology, placement, ranks_per_node)``, each with ``P``
    added; an algorithm that cannot run at some P has ``status`` ``n/a``."""
    rows: list[dict[str, Any]] = []
    for p in ps:
        net = Network(topology, placement, ranks_per_node)
        for r in predict_rows(collective, p, [size], model, algorithms, network=net):
            rows.append({**r, "P": p})
    return rows


def plot(rows: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """Predicted time (ms, log scale) against P (log 2 scale), a line per algorithm, to
    ``path`` (the extension names the format)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    markers = "osD^v<>px*h"
    for i, name in enumerate(names):
        pts = [(r["P"], r["time_us"] / 1e3) for r in rows
               if r["algorithm"] == name and r["status"] == "ok"]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=markers[i % len(markers)], label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ps = sorted({r["P"] for r in rows})
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_xlabel("P (ranks)")
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mpicoll.tools.scaling ...`` (module docstring); exit status 0."""
    ap = argparse.ArgumentParser(prog="python -m mpicoll.tools.scaling",
                                 description="Predicted time against P per algorithm on a "
                                 "network (the simulator, cost-only).")
    ap.add_argument("-c", "--collective", default="allreduce")
    ap.add_argument("-a", "--algorithm", nargs="+", required=True, metavar="NAME")
    ap.add_argument("-m", "--message-size", default="1M", metavar="S",
                    help="bench's size S, K/M suffixes (default 1M)")
    ap.add_argument("-n", "--ranks", default="4:1024", metavar="A:B",
                    help="rank counts A, 2A, ... B (default 4:1024)")
    ap.add_argument("--topology", required=True, metavar="SPEC",
                    help="a network spec as simulate --topology takes it")
    ap.add_argument("--placement", default="block")
    ap.add_argument("--ranks-per-node", type=int, default=1, metavar="K")
    ap.add_argument("--model", metavar="FILE", help="a calibrated model (else --alpha ...)")
    ap.add_argument("--alpha", type=float, default=2e-6, help="seconds per message (2e-6)")
    ap.add_argument("--beta", type=float, default=1e-10, help="seconds per byte (1e-10)")
    ap.add_argument("--gamma", type=float, default=2.5e-10,
                    help="seconds per byte reduced (2.5e-10)")
    ap.add_argument("-o", "--output", required=True, metavar="PNG")
    ap.add_argument("--json", metavar="FILE", help="write the rows here")
    args = ap.parse_args(argv)
    try:
        ps = powers_of_two(args.ranks)
        size = parse_size(args.message_size)
    except ValueError as exc:
        ap.error(str(exc))
    model: Model | None = (alphabeta.load(args.model) if args.model else
                           Model(alpha=args.alpha, beta=args.beta, gamma=args.gamma))
    if model is None:
        ap.error(f"--model {args.model}: no model in it")
    rows = scaling_rows(args.collective, ps, size, args.algorithm, model, args.topology,
                        args.placement, args.ranks_per_node)
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    print(f"# {args.collective}, S = {args.message_size}, {args.topology} "
          f"({args.placement}); predicted time (us)")
    print(f"{'P':>6s} " + " ".join(f"{n:>20s}" for n in names))
    for p in ps:
        t = {r["algorithm"]: r["time_us"] for r in rows if r["P"] == p}
        print(f"{p:6d} " + " ".join(f"{t[n]:20.1f}" if t.get(n) is not None else f"{'n/a':>20s}"
                                    for n in names))
    if model is not None and not args.model:
        how = (f"alpha {args.alpha * 1e6:g} us, beta {args.beta * 1e9:g} ns/B, "
               f"gamma {args.gamma * 1e9:g} ns/B")
    else:
        how = f"model {args.model}"
    plot(rows, args.output, f"{args.collective}, S = {args.message_size} per rank, "
         f"{args.topology} ({args.placement}); {how}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=0) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
