"""Expert-parallel (mixture-of-experts) token routing with Alltoall and Alltoallv.

Each rank holds T tokens (vectors of D float64) and a router's choice of expert for each (here
random).  Expert e lives on rank e % P.  One MoE layer's communication is:

1. Sort the local tokens by destination rank; count them: ``send_counts[j]`` tokens for rank j.
2. ``Alltoall(send_counts, recv_counts)``: every rank learns how many tokens each other rank
   will send it (rank r receives column r of the P x P count matrix).
3. ``Alltoallv`` the expert ids and the token vectors (counts and displacements from 1. and 2.):
   the dispatch.
4. Each rank applies its experts: expert e maps x to x * (e + 1) + e.
5. ``Alltoallv`` the results back with the counts swapped: the combine.  Unsorting restores the
   tokens' original order.

The script checks that every token came home transformed by exactly the expert it chose
(bitwise: the expected value is computed by the same expression at home) and that every
token reached the rank that holds its expert; it prints the count matrix, each rank's experts
and their load, and "all tokens OK".  This is the all-to-all of the "Expert Parallel (MoE)"
row of the article "Communication Primitives" (Distributed GPU Systems).

Run:

    mpiexec -n 4 python -m mpi4py examples/moe_dispatch.py
    mpiexec -n 4 python -m mpi4py examples/moe_dispatch.py --backend p2p --algorithm pairwise \\
        --tokens 1000 --dim 64 --experts 16
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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


def expert(e: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Expert e applied to rows x (shape (n, D)): x * (e + 1) + e, e broadcast per row."""
    e = e.astype(np.float64)[:, None]
    return x * (e + 1.0) + e


def exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def moe_layer(b: Any, x: np.ndarray, choice: np.ndarray, a2a_kw: dict[str, str],
              a2av_kw: dict[str, str]) -> dict[str, Any]:
    """Dispatch tokens ``x`` (T, D) to experts ``choice`` (T,), apply them, combine back.

    ``a2a_kw`` / ``a2av_kw``: extra keywords (p2p ``algorithm=``) for Alltoall / Alltoallv.
    Returns this rank's outputs in the original token order and what the rank saw.
    """
    p, r = b.size, b.rank
    t, d = x.shape
    dest = choice % p  # the rank that holds each token's expert
    order = np.argsort(dest, kind="stable")  # 1. group tokens by destination rank
    send_x = np.ascontiguousarray(x[order])
    send_e = choice[order].astype(np.int64)
    send_counts = np.bincount(dest, minlength=p).astype(np.int64)
    recv_counts = np.empty(p, dtype=np.int64)
    t0 = time.perf_counter()
    b.Alltoall(send_counts, recv_counts, **a2a_kw)  # 2. exchange the counts
    sdispls, rdispls = exclusive_cumsum(send_counts), exclusive_cumsum(recv_counts)
    n_in = int(recv_counts.sum())
    recv_e = np.empty(n_in, dtype=np.int64)
    recv_x = np.empty((n_in, d))
    sc, sd, rc, rd = (a.tolist() for a in (send_counts, sdispls, recv_counts, rdispls))
    # 3. dispatch: expert ids, then token vectors (D doubles per token)
    b.Alltoallv([send_e, (sc, sd), MPI.INT64_T], [recv_e, (rc, rd), MPI.INT64_T], **a2av_kw)
    b.Alltoallv([send_x, ([c * d for c in sc], [c * d for c in sd]), MPI.DOUBLE],
                [recv_x, ([c * d for c in rc], [c * d for c in rd]), MPI.DOUBLE], **a2av_kw)
    t1 = time.perf_counter()
    here = bool(np.all(recv_e % p == r))  # every token reached its expert's rank
    y = expert(recv_e, recv_x)  # 4. apply the experts that live here
    t2 = time.perf_counter()
    back = np.empty_like(send_x)
    # 5. combine: the same exchange with the counts swapped
    b.Alltoallv([y, ([c * d for c in rc], [c * d for c in rd]), MPI.DOUBLE],
                [back, ([c * d for c in sc], [c * d for c in sd]), MPI.DOUBLE], **a2av_kw)
    t3 = time.perf_counter()
    out = np.empty_like(x)
    out[order] = back  # undo the sort
    load = {int(e): int((recv_e == e).sum()) for e in np.unique(recv_e)}
    return {"out": out, "here": here, "send": send_counts.tolist(),
            "recv": recv_counts.tolist(), "load": load, "comm": (t1 - t0) + (t3 - t2), "n": t}


def algorithm_kw(backend: Any, name: str | None, collective: str) -> dict[str, str]:
    """``algorithm=name`` if backend is p2p and ``collective`` has an algorithm so named."""
    if backend.name != "p2p" or name is None:
        return {}
    names = [a.name for a in registry.algorithms(collective)]
    return {"algorithm": name if name in names else "auto"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p", "both"], default="both",
                        help="backend(s) that route the tokens (default both)")
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="p2p alltoall/alltoallv algorithm (pairwise, scattered; bruck for "
                             "the counts' Alltoall only; default auto)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per rank (default 16)")
    parser.add_argument("--dim", type=int, default=8, help="token dimension D (default 8)")
    parser.add_argument("--experts", type=int, default=None,
                        help="number of experts E (default 2P); expert e lives on rank e %% P")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--small", action="store_true", default=SMALL,
                        help="6 tokens of dimension 4")
    args = parser.parse_args(argv)
    p, r = WORLD.size, WORLD.rank
    if args.small:
        args.tokens, args.dim = 6, 4
    n_experts = 2 * p if args.experts is None else args.experts
    problem = None
    if args.tokens < 0 or args.dim < 1 or n_experts < 1:
        problem = "--tokens must be >= 0, --dim and --experts >= 1"
    elif args.algorithm not in (None, "auto"):
        known = {a.name for c in ("alltoall", "alltoallv") for a in registry.algorithms(c)}
        if args.algorithm not in known:
            problem = (f"--algorithm: unknown alltoall algorithm {args.algorithm!r}; expected "
                       f"one of {sorted(known)} or 'auto'")
    if problem:
        if r == 0:
            print(f"error: {problem}", file=sys.stderr, flush=True)
        return 2

    rng = np.random.default_rng([args.seed, r])
    x = rng.standard_normal((args.tokens, args.dim))
    choice = rng.integers(0, n_experts, args.tokens)  # the router's pick, per token
    expected = expert(choice, x)

    say(f"MoE token routing: P = {p} ranks, {args.tokens} tokens of dimension {args.dim} per "
        f"rank, {n_experts} experts (expert e on rank e % P, expert e: x -> x*(e+1) + e)")
    say()
    ok = True
    backends = ["native", "p2p"] if args.backend == "both" else [args.backend]
    for name in backends:
        b = mpicoll.native(WORLD) if name == "native" else mpicoll.p2p(WORLD)
        a2a_kw = algorithm_kw(b, args.algorithm, "alltoall")
        a2av_kw = algorithm_kw(b, args.algorithm, "alltoallv")
        res = moe_layer(b, x, choice, a2a_kw, a2av_kw)
        good = bool(np.array_equal(res["out"], expected)) and res["here"]
        rows = WORLD.gather((res["send"], res["recv"], res["load"], good), root=0)
        comm = WORLD.allreduce(res["comm"], op=MPI.MAX)
        all_good = bool(WORLD.allreduce(good, op=MPI.LAND))
        ok &= all_good
        if rows is not None:
            alg = (f" (alltoall {a2a_kw['algorithm']}, alltoallv {a2av_kw['algorithm']})"
                   if a2a_kw else "")
            say(f"{name}{alg}: tokens sent (row: from rank, column: to rank)")
            say("          " + "".join(f"{'to ' + str(j):>7}" for j in range(p)) + "   total")
            for q in range(p):
                say(f"  rank {q:<3}" + "".join(f"{c:7d}" for c in rows[q][0])
                    + f"{sum(rows[q][0]):8d}")
            for q in range(p):
                load = ", ".join(f"expert {e}: {n}" for e, n in rows[q][2].items()) or "none"
                say(f"  Rank {q}: receives {rows[q][1]} (column {q}, from its Alltoall); "
                    f"load {load}; {'OK' if rows[q][3] else 'WRONG'}")
            if args.tokens:
                e0 = int(choice[0])
                say(f"  e.g. rank 0's token 0 chose expert {e0} (on rank {e0 % p}): "
                    f"{np.round(x[0, :3], 4).tolist()}... came home as "
                    f"{np.round(res['out'][0, :3], 4).tolist()}...")
            say(f"  dispatch + combine time (slowest rank): {comm * 1e3:.3f} ms")
            say("  all tokens OK: every token came home transformed by its own expert"
                if all_good else "  SOME TOKENS WRONG")
            say()
        b.Free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
