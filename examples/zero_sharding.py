"""ZeRO / FSDP-style sharded training: reduce-scatter the gradients, all-gather the parameters.

The same MLP, data and mini-batches as ``data_parallel.py``, but the gradient synchronisation
is split in two, as the article "Communication Primitives" (Distributed GPU Systems) says ZeRO
does (AllReduce = ReduceScatter + AllGather):

1. ``Reduce_scatter(grad, shard, recvcounts)``: rank r receives the SUM over ranks of only its
   slice of the gradient.  The parameter count rarely divides by P (2410 for the default MLP),
   so the slices are given by ``recvcounts`` (sizes n//P or n//P + 1).
2. Rank r updates only its slice of the parameters, and keeps optimizer state (the momentum
   buffer) only for that slice: 1/P of the memory of DDP's full buffer.
3. ``Allgatherv(MPI.IN_PLACE, [theta, (counts, displs), MPI.DOUBLE])``: every rank gets every
   updated slice back; its own slice is already in place.

This is ZeRO stage 1/2 (optimizer state and gradients sharded).  FSDP / ZeRO-3 also frees the
full parameters between uses and all-gathers them just before the forward pass: the same two
collectives per step.  Each rank sends N(P-1)/P bytes in each of them, 2N(P-1)/P in all, exactly
what a bandwidth-optimal Allreduce sends (printed from the p2p traffic counters).

The script then trains the plain DDP version (one ``Allreduce``) from the same start and checks
that both end with the same weights: bitwise identical with ``--quantize`` (the default:
gradients rounded to multiples of 2**-20, so every sum is exact in any order; see
``data_parallel.py``), within a tolerance with ``--no-quantize``.

Needs scikit-learn (the optional extra ``examples``), for the digits data set.

Run:

    mpiexec -n 4 python -m mpi4py examples/zero_sharding.py
    mpiexec -n 4 python -m mpi4py examples/zero_sharding.py --backend both --algorithm ring
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from data_parallel import (
    WORLD,
    DDPUpdate,
    Result,
    add_training_arguments,
    config,
    load_data,
    say,
    train,
    training_problem,
    unknown_algorithm,
    usage_error,
)
from mpi4py import MPI

import mpicoll
from mpicoll import registry


def shard_layout(n: int, p: int) -> tuple[list[int], list[int]]:
    """(counts, displacements) of n parameters over p ranks: sizes n//p or n//p + 1."""
    counts = [n // p + (i < n % p) for i in range(p)]
    displs = [sum(counts[:i]) for i in range(p)]
    return counts, displs


class ZeroUpdate:
    """Sharded synchronisation + SGD-with-momentum step (the ``Update`` of data_parallel.py).

    Args:
        backend: a mpicoll backend.
        n: number of parameters.
        lr, momentum: SGD hyper-parameters (the same arithmetic as ``DDPUpdate``).
        rs_kw, ag_kw: extra keywords (p2p ``algorithm=``) for Reduce_scatter and Allgatherv.
    """

    def __init__(self, backend: Any, n: int, lr: float, momentum: float,
                 rs_kw: dict[str, str], ag_kw: dict[str, str]) -> None:
        self.b, self.lr, self.mu = backend, lr, momentum
        self.rs_kw, self.ag_kw = rs_kw, ag_kw
        self.counts, self.displs = shard_layout(n, backend.size)
        r = backend.rank
        self.lo, self.hi = self.displs[r], self.displs[r] + self.counts[r]
        self.grad = np.empty(self.counts[r])  # this rank's slice of the summed gradient
        self.velocity = np.zeros(self.counts[r])  # optimizer state: this rank's slice only
        self.comm_time = 0.0
        self.calls = 0
        self.bytes_sent: dict[str, int] = {}

    def __call__(self, theta: np.ndarray, grad_sum: np.ndarray, batch: int) -> None:
        count = self.calls == 0 and hasattr(self.b, "traffic")  # count the first step's bytes
        if count:
            self.b.traffic.reset()
        t0 = time.perf_counter()
        self.b.Reduce_scatter(grad_sum, self.grad, recvcounts=self.counts, op=MPI.SUM,
                              **self.rs_kw)
        t1 = time.perf_counter()
        if count:
            self.bytes_sent["reduce_scatter"] = self.b.traffic.bytes_sent
            self.b.traffic.reset()
        self.velocity *= self.mu
        self.velocity += self.grad / batch
        theta[self.lo:self.hi] -= self.lr * self.velocity  # update my slice only
        t2 = time.perf_counter()
        self.b.Allgatherv(MPI.IN_PLACE, [theta, (self.counts, self.displs), MPI.DOUBLE],
                          **self.ag_kw)
        self.comm_time += (t1 - t0) + (time.perf_counter() - t2)
        if count:
            self.bytes_sent["allgatherv"] = self.b.traffic.bytes_sent
        self.calls += 1


def algorithm_kw(backend: Any, name: str | None, collective: str) -> dict[str, str]:
    """``algorithm=name`` if backend is p2p and ``collective`` has an algorithm so named."""
    if backend.name != "p2p" or name is None:
        return {}
    names = [a.name for a in registry.algorithms(collective)]
    return {"algorithm": name if name in names else "auto"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p", "both"], default="p2p",
                        help="backend(s) to train with (default p2p)")
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="p2p algorithm forced on Reduce_scatter and Allgatherv where they "
                             "have one so named (ring, bruck, pairwise, recursive_halving, ...; "
                             "default auto)")
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    cfg = config(args)
    why = (unknown_algorithm(args.algorithm, "reduce_scatter", "allgatherv", "allreduce")
           or training_problem(cfg))
    if why is not None:
        return usage_error(why)
    data = load_data(cfg.seed)
    p = WORLD.size
    model_size = 64 * cfg.hidden + cfg.hidden + cfg.hidden * 10 + 10
    counts, displs = shard_layout(model_size, p)

    say(f"ZeRO-style sharded training: MLP 64-{cfg.hidden}-10 ({model_size} parameters) on the "
        f"digits, P = {p} ranks, {cfg.epochs} epochs")
    say("parameter slices (Reduce_scatter recvcounts): "
        + ", ".join(f"rank {r} [{displs[r]}, {displs[r] + counts[r]})" for r in range(p)))
    say("each step: Reduce_scatter(grad, recvcounts) -> update my slice -> "
        "Allgatherv(IN_PLACE)")
    say()

    names = ["native", "p2p"] if args.backend == "both" else [args.backend]
    zero: dict[str, Result] = {}
    ddp: dict[str, Result] = {}
    for name in names:
        b = mpicoll.native(WORLD) if name == "native" else mpicoll.p2p(WORLD)
        rs_kw = algorithm_kw(b, args.algorithm, "reduce_scatter")
        ag_kw = algorithm_kw(b, args.algorithm, "allgatherv")
        ar_kw = algorithm_kw(b, args.algorithm, "allreduce")
        label = name + (f" (reduce_scatter {rs_kw['algorithm']}, allgatherv "
                        f"{ag_kw['algorithm']})" if rs_kw else "")

        def make_zero(b: Any, n: int, rs: dict[str, str] = rs_kw,
                      ag: dict[str, str] = ag_kw) -> ZeroUpdate:
            return ZeroUpdate(b, n, cfg.lr, cfg.momentum, rs, ag)

        def make_ddp(b: Any, n: int, kw: dict[str, str] = ar_kw) -> DDPUpdate:
            return DDPUpdate(b, n, cfg.lr, cfg.momentum, kw)

        say(f"ZeRO, {label}:")
        res = zero[name] = train(b, data, cfg, make_zero)
        say(f"  time in Reduce_scatter + Allgatherv: {res.comm_time:.3f} s of "
            f"{res.wall_time:.3f} s, slowest rank")
        say(f"  momentum buffer on rank 0: {counts[0]} floats (DDP: {model_size} on every rank)")
        ddp[name] = train(b, data, cfg, make_ddp, verbose=False)
        say(f"  DDP reference ({name}, one Allreduce per step) trained: test accuracy "
            f"{100 * ddp[name].history[-1][2]:.2f} %, {ddp[name].comm_time:.3f} s in Allreduce")
        if res.bytes_sent:
            sent = WORLD.gather((res.bytes_sent, ddp[name].bytes_sent), root=0)
            if sent is not None:
                rs, ag = sent[0][0]["reduce_scatter"], sent[0][0]["allgatherv"]
                ar = sent[0][1]["allreduce"]
                say(f"  bytes rank 0 sent per step (p2p traffic counters): Reduce_scatter {rs} + "
                    f"Allgatherv {ag} = {rs + ag};")
                say(f"  DDP's Allreduce: {ar}; the table's 2N(P-1)/P = "
                    f"{2 * model_size * 8 * (p - 1) / p:.0f} for N = {model_size * 8} B")
        say()
        b.Free()

    ok = True
    first = names[0]
    pairs = [(f"ZeRO ({n})", zero[n], f"DDP ({n})", ddp[n]) for n in names]
    if len(names) > 1:
        pairs.append((f"ZeRO ({first})", zero[first], f"ZeRO ({names[1]})", zero[names[1]]))
    for la, ra, lb, rb in pairs:
        same = bool(WORLD.allreduce(bool(np.array_equal(ra.theta, rb.theta)), op=MPI.LAND))
        diff = float(WORLD.allreduce(float(np.max(np.abs(ra.theta - rb.theta))), op=MPI.MAX))
        good = same if cfg.quantize else diff <= 1e-6 * max(1.0, float(np.max(np.abs(ra.theta))))
        ok &= good
        verdict = ("bitwise identical" if same else f"max |diff| {diff:.3g}"
                   + ("" if good else (" (exact sums were expected to agree bitwise)"
                                       if cfg.quantize else " (beyond 1e-6)")))
        say(f"{la} vs {lb} final weights: {verdict} -> {'agree' if good else 'DIFFER'}")
    replicas = WORLD.allgather(zero[names[-1]].theta.tobytes())
    in_sync = all(t == replicas[0] for t in replicas)
    ok &= in_sync
    say("ZeRO replicas identical on every rank after the last Allgatherv: "
        + ("yes" if in_sync else "NO"))
    say("same result as the data-parallel version: OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
