"""Data-parallel training (DDP) of a small NumPy MLP on scikit-learn's handwritten digits.

Every rank holds the same model (weights broadcast from rank 0 at the start, as PyTorch's DDP
does) and trains on its own shard of the training set.  Each step, every rank computes the
gradient of its local mini-batch, the gradients are summed across ranks with ``Allreduce`` and
divided by the global batch size, and every rank applies the same SGD-with-momentum update, so
the replicas stay identical.  Loss and accuracy are printed per epoch, with the time spent in
the gradient ``Allreduce``.

``--compare`` trains twice, with the native and the p2p backend, from the same start.  Floating
point addition is not associative, and the two backends add the P partial gradients in
different orders, so in general their weights drift apart by rounding.  With ``--quantize``
(the default) each rank rounds its gradient to a multiple of 2**-20 before the ``Allreduce``:
such numbers (of magnitude below 2**33) add EXACTLY in float64 in any order, so the two backends
must end with bitwise-identical weights, and the script checks ``np.array_equal``.  With
``--no-quantize`` it checks agreement within a tolerance instead.

It also trains the same model in a single process on rank 0, on all the training data with
the same global batch size, and shows that DDP reaches the same test accuracy.

The data set (1797 8x8 images, 10 classes) ships inside scikit-learn: no download.
scikit-learn is the optional extra ``examples`` (``pip install .[examples]``).

Run:

    mpiexec -n 4 python -m mpi4py examples/data_parallel.py
    mpiexec -n 4 python -m mpi4py examples/data_parallel.py --compare
    mpiexec -n 4 python -m mpi4py examples/data_parallel.py --backend p2p --algorithm ring

The model, data and training loop here are also used by ``zero_sharding.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import registry

WORLD = MPI.COMM_WORLD
#: ``make examples`` sets MPICOLL_EXAMPLES_SMALL=1: the same as ``--small``
SMALL = os.environ.get("MPICOLL_EXAMPLES_SMALL", "") not in ("", "0")
QUANTUM = 2.0**-20  # gradients are rounded to multiples of this with --quantize


def say(text: str = "") -> None:
    if WORLD.rank == 0:
        print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Data:
    """The digits, split into a training and a test set (features scaled to [0, 1])."""

    x_train: np.ndarray  # (n_train, 64) float64
    y_train: np.ndarray  # (n_train,) int64, classes 0..9
    x_test: np.ndarray
    y_test: np.ndarray


def load_data(seed: int = 0, test_fraction: float = 0.2) -> Data:
    """The handwritten digits from scikit-learn, shuffled with ``seed`` and split.

    Raises:
        SystemExit: scikit-learn is not installed (with the command that installs it).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        msg = ("this example needs scikit-learn (it ships the digits data set): "
               "pip install 'mpicoll[examples]'  (or: pip install scikit-learn)")
        if WORLD.rank == 0:
            print(f"error: {msg}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    digits = load_digits()
    x = digits.data.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Data(x[train], y[train], x[test], y[test])


def shard(n: int, rank: int, size: int) -> np.ndarray:
    """Indices of rank's shard of n samples: contiguous, sizes differing by at most one."""
    return np.array_split(np.arange(n), size)[rank]


# ---------------------------------------------------------------------------------------------
# The model: a 2-layer MLP (64 -> hidden, ReLU -> 10, softmax), parameters in ONE flat float64
# vector, so that a whole gradient is one buffer for one collective call.


class MLP:
    """Shapes and flat-vector layout of the MLP's parameters."""

    def __init__(self, n_in: int = 64, hidden: int = 32, n_out: int = 10) -> None:
        self.shapes = [(n_in, hidden), (hidden,), (hidden, n_out), (n_out,)]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.size = sum(self.sizes)

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """W1, b1, W2, b2 as views of ``flat`` (writing them writes ``flat``)."""
        out, at = [], 0
        for shape, n in zip(self.shapes, self.sizes, strict=True):
            out.append(flat[at:at + n].reshape(shape))
            at += n
        return out

    def init(self, seed: int) -> np.ndarray:
        """He-initialised weights, zero biases, as one flat vector."""
        rng = np.random.default_rng(seed)
        theta = np.zeros(self.size)
        w1, _, w2, _ = self.views(theta)
        w1[...] = rng.normal(0.0, np.sqrt(2.0 / w1.shape[0]), w1.shape)
        w2[...] = rng.normal(0.0, np.sqrt(2.0 / w2.shape[0]), w2.shape)
        return theta

    def logits(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2 = self.views(theta)
        return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2

    def loss_grad(self, theta: np.ndarray, x: np.ndarray,
                  y: np.ndarray) -> tuple[float, np.ndarray]:
        """Cross-entropy SUMMED over the batch and its gradient (flat, like ``theta``)."""
        w1, b1, w2, b2 = self.views(theta)
        grad = np.zeros_like(theta)
        if len(y) == 0:
            return 0.0, grad
        h = np.maximum(x @ w1 + b1, 0.0)
        z = h @ w2 + b2
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y]).sum())
        dz = p
        dz[np.arange(len(y)), y] -= 1.0
        g1, gb1, g2, gb2 = self.views(grad)
        g2[...] = h.T @ dz
        gb2[...] = dz.sum(axis=0)
        dh = (dz @ w2.T) * (h > 0)
        g1[...] = x.T @ dh
        gb1[...] = dh.sum(axis=0)
        return loss, grad

    def stats(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """(summed loss, number correct) on a set."""
        if len(y) == 0:
            return 0.0, 0
        loss, _ = self.loss_grad(theta, x, y)
        return loss, int((self.logits(theta, x).argmax(axis=1) == y).sum())


# ---------------------------------------------------------------------------------------------
# Gradient synchronisation + optimizer step: DDP here, ZeRO in zero_sharding.py.


class Update(Protocol):
    """Turns this rank's summed local gradient into the new parameters (in place)."""

    comm_time: float  # seconds spent in collectives
    bytes_sent: dict[str, int]  # bytes this rank sent per step, by collective (p2p only)
    lr: float  # learning rate of the next steps (the training loop sets it every epoch)

    def __call__(self, theta: np.ndarray, grad_sum: np.ndarray, batch: int) -> None: ...


class DDPUpdate:
    """DDP: ``Allreduce`` the gradient sums, divide by the global batch, SGD with momentum.

    Every rank keeps the full momentum buffer and applies the full update.

    Args:
        backend: a mpicoll backend (native or p2p).
        n: number of parameters.
        lr, momentum: SGD hyper-parameters.
        kw: extra keywords for the collective (p2p ``algorithm=``).
    """

    def __init__(self, backend: Any, n: int, lr: float, momentum: float,
                 kw: dict[str, str]) -> None:
        self.b, self.lr, self.mu, self.kw = backend, lr, momentum, kw
        self.velocity = np.zeros(n)
        self.total = np.empty(n)
        self.comm_time = 0.0
        self.calls = 0
        self.bytes_sent: dict[str, int] = {}  # per step, from the p2p traffic counters

    def __call__(self, theta: np.ndarray, grad_sum: np.ndarray, batch: int) -> None:
        count = self.calls == 0 and hasattr(self.b, "traffic")  # count the first step's bytes
        if count:
            self.b.traffic.reset()
        t0 = time.perf_counter()
        self.b.Allreduce(grad_sum, self.total, op=MPI.SUM, **self.kw)
        self.comm_time += time.perf_counter() - t0
        if count:
            self.bytes_sent["allreduce"] = self.b.traffic.bytes_sent
        self.calls += 1
        self.velocity *= self.mu
        self.velocity += self.total / batch
        theta -= self.lr * self.velocity


@dataclass
class Config:
    epochs: int = 20
    batch: int = 16  # per rank; the global batch is P times this
    lr: float = 0.1
    momentum: float = 0.9
    hidden: int = 32
    seed: int = 0
    quantize: bool = True

    def lr_at(self, epoch: int) -> float:
        """Learning rate of ``epoch`` (0-based), cosine-decayed from lr to lr/10."""
        return self.lr * (0.1 + 0.9 * 0.5 * (1.0 + np.cos(np.pi * epoch / self.epochs)))


@dataclass
class Result:
    theta: np.ndarray
    history: list[tuple[float, float, float]] = field(default_factory=list)  # loss, acc, test
    comm_time: float = 0.0
    wall_time: float = 0.0
    bytes_sent: dict[str, int] = field(default_factory=dict)  # per step, this rank (p2p only)


def evaluate(b: Any, model: MLP, theta: np.ndarray, data: Data, train_idx: np.ndarray,
             test_idx: np.ndarray) -> tuple[float, float, float]:
    """Mean training loss, training and test accuracy over all ranks' shards."""
    loss, correct = model.stats(theta, data.x_train[train_idx], data.y_train[train_idx])
    _, test_correct = model.stats(theta, data.x_test[test_idx], data.y_test[test_idx])
    local = np.array([loss, correct, len(train_idx), test_correct, len(test_idx)], float)
    total = np.empty_like(local)
    b.Allreduce(local, total, op=MPI.SUM)
    return total[0] / total[2], total[1] / total[2], total[3] / total[4]


def train(b: Any, data: Data, cfg: Config, make_update: Any,
          verbose: bool = True) -> Result:
    """Data-parallel training on backend ``b``; ``make_update(b, n)`` builds the sync+step.

    Every rank trains on its shard; each step is one global batch of up to P * cfg.batch
    samples (the last step of an epoch may be smaller).  Returns the final parameters (the
    same on every rank) and the per-epoch (loss, train accuracy, test accuracy).
    """
    p, r = b.size, b.rank
    model = MLP(hidden=cfg.hidden)
    theta = model.init(cfg.seed) if r == 0 else np.empty(model.size)
    b.Bcast(theta, root=0)  # every replica starts from rank 0's weights
    update: Update = make_update(b, model.size)
    mine = shard(len(data.y_train), r, p)
    test_mine = shard(len(data.y_test), r, p)
    sizes = [len(shard(len(data.y_train), q, p)) for q in range(p)]
    steps = -(-max(sizes) // cfg.batch)  # the same number of steps on every rank
    rng = np.random.default_rng(cfg.seed + 1 + r)  # each rank shuffles its own shard
    out = Result(theta)
    t_start = time.perf_counter()
    for epoch in range(cfg.epochs):
        update.lr = cfg.lr_at(epoch)
        order = mine[rng.permutation(len(mine))]
        for s in range(steps):
            idx = order[s * cfg.batch:(s + 1) * cfg.batch]
            _, g = model.loss_grad(theta, data.x_train[idx], data.y_train[idx])
            if cfg.quantize:
                g = np.round(g / QUANTUM) * QUANTUM  # exact sums in any order
            # the global batch size: known on every rank without communication
            batch = sum(min(cfg.batch, max(0, n - s * cfg.batch)) for n in sizes)
            update(theta, g, batch)
        loss, acc, test = evaluate(b, model, theta, data, mine, test_mine)
        out.history.append((loss, acc, test))
        if verbose:
            say(f"  epoch {epoch + 1:3d}   loss {loss:.4f}   train accuracy {100 * acc:6.2f} %"
                f"   test accuracy {100 * test:6.2f} %")
    out.wall_time = float(WORLD.allreduce(time.perf_counter() - t_start, op=MPI.MAX))
    out.comm_time = float(WORLD.allreduce(update.comm_time, op=MPI.MAX))
    out.bytes_sent = dict(getattr(update, "bytes_sent", {}))
    return out


def single_process(data: Data, cfg: Config, global_batch: int) -> tuple[float, float]:
    """The baseline: the same model and optimizer in one process, on all the training data,
    with the DDP run's global batch size.  Returns (test accuracy, seconds)."""
    model = MLP(hidden=cfg.hidden)
    theta = model.init(cfg.seed)
    velocity = np.zeros_like(theta)
    rng = np.random.default_rng(cfg.seed + 1)
    n = len(data.y_train)
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        lr = cfg.lr_at(epoch)
        order = rng.permutation(n)
        for s in range(0, n, global_batch):
            idx = order[s:s + global_batch]
            _, g = model.loss_grad(theta, data.x_train[idx], data.y_train[idx])
            velocity = cfg.momentum * velocity + g / len(idx)
            theta -= lr * velocity
    _, correct = model.stats(theta, data.x_test, data.y_test)
    return correct / len(data.y_test), time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# Command line


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The options data_parallel.py and zero_sharding.py share."""
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs (default 20; 5 with --small)")
    parser.add_argument("--batch", type=int, default=16,
                        help="mini-batch per rank (default 16; the global batch is P times it)")
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    parser.add_argument("--hidden", type=int, default=32, help="hidden units (default 32)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=True,
                        help="round gradients to multiples of 2**-20 so every sum is exact "
                             "(default on)")
    parser.add_argument("--small", action="store_true", default=SMALL,
                        help="a quick run: 5 epochs unless --epochs says otherwise")


def config(args: argparse.Namespace) -> Config:
    epochs = args.epochs if args.epochs is not None else 5 if args.small else 20
    return Config(epochs=epochs, batch=args.batch, lr=args.lr,
                  hidden=args.hidden, seed=args.seed, quantize=args.quantize)


def training_problem(cfg: Config) -> str | None:
    """What is wrong with the training options, or None."""
    if min(cfg.epochs, cfg.batch, cfg.hidden) < 1 or cfg.lr <= 0:
        return "--epochs, --batch and --hidden must be >= 1 and --lr > 0"
    return None


def usage_error(text: str) -> int:
    if WORLD.rank == 0:
        print(f"error: {text}", file=sys.stderr, flush=True)
    return 2


def unknown_algorithm(name: str | None, *collectives: str) -> str | None:
    """Why ``name`` cannot be forced on any of ``collectives`` (None if it can, or is auto)."""
    if name in (None, "auto"):
        return None
    names = sorted({a.name for c in collectives for a in registry.algorithms(c)})
    if name in names:
        return None
    return f"--algorithm: unknown {'/'.join(collectives)} algorithm {name!r}; " \
           f"expected one of {names} or 'auto'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["native", "p2p"], default="p2p",
                        help="backend that averages the gradients (default p2p)")
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="p2p allreduce algorithm (recursive_doubling, ring, rabenseifner, "
                             "reduce_bcast; default auto)")
    parser.add_argument("--compare", action="store_true",
                        help="train with both backends and compare the final weights")
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    cfg = config(args)
    why = unknown_algorithm(args.algorithm, "allreduce") or training_problem(cfg)
    if why is not None:
        return usage_error(why)
    data = load_data(cfg.seed)
    p = WORLD.size

    say(f"Data-parallel training: MLP 64-{cfg.hidden}-10 on the digits ({len(data.y_train)} "
        f"training / {len(data.y_test)} test images), P = {p} ranks")
    say(f"each rank: a shard of ~{len(data.y_train) // p} images, mini-batch {cfg.batch} "
        f"(global batch {cfg.batch * p}), SGD lr {cfg.lr} momentum {cfg.momentum}, "
        f"{cfg.epochs} epochs")
    say("gradients " + ("rounded to multiples of 2**-20 (exact sums), " if cfg.quantize else "")
        + "summed with Allreduce every step")
    say()

    backends = ["native", "p2p"] if args.compare else [args.backend]
    results: dict[str, Result] = {}
    for name in backends:
        b = mpicoll.native(WORLD) if name == "native" else mpicoll.p2p(WORLD)
        kw = {"algorithm": args.algorithm} if name == "p2p" and args.algorithm else {}
        label = name + (f" (algorithm {args.algorithm})" if kw else "")
        say(f"{label}:")

        def make_update(b: Any, n: int, kw: dict[str, str] = kw) -> DDPUpdate:
            return DDPUpdate(b, n, cfg.lr, cfg.momentum, kw)

        res = train(b, data, cfg, make_update)
        results[name] = res
        say(f"  time in gradient Allreduce: {res.comm_time:.3f} s of {res.wall_time:.3f} s "
            f"({100 * res.comm_time / res.wall_time:.0f} %), slowest rank")
        say()
        b.Free()

    ok = True
    if args.compare:
        a, b2 = results["native"].theta, results["p2p"].theta
        same = bool(WORLD.allreduce(bool(np.array_equal(a, b2)), op=MPI.LAND))
        diff = float(WORLD.allreduce(float(np.max(np.abs(a - b2))), op=MPI.MAX))
        if cfg.quantize:
            ok &= same
            say("native vs p2p final weights: "
                + ("bitwise identical (np.array_equal), as exact sums guarantee" if same
                   else f"DIFFERENT (max |diff| {diff:.3g}) although every sum is exact"))
        else:
            close = diff <= 1e-6 * max(1.0, float(np.max(np.abs(a))))
            ok &= close
            say(f"native vs p2p final weights: max |diff| = {diff:.3g} "
                + ("(bitwise identical)" if same else "(rounding: the backends add in different "
                   "orders)") + ("; agree within 1e-6" if close else "; DISAGREE beyond 1e-6"))
    final = results[backends[-1]]
    replicas = WORLD.allgather(final.theta.tobytes())
    in_sync = all(t == replicas[0] for t in replicas)
    ok &= in_sync
    say("model replicas identical on every rank: " + ("yes" if in_sync else "NO"))

    test_ddp = final.history[-1][2]
    base = None
    if WORLD.rank == 0:
        base = single_process(data, cfg, cfg.batch * p)
    base = WORLD.bcast(base, root=0)
    acc, seconds = base
    gap = 100 * (acc - test_ddp)
    reached = gap <= 2.0
    ok &= reached
    say(f"single-process baseline (rank 0, all {len(data.y_train)} images, batch {cfg.batch * p}):"
        f" test accuracy {100 * acc:.2f} % in {seconds:.2f} s")
    say(f"DDP test accuracy {100 * test_ddp:.2f} %: "
        + (f"reaches the baseline (within {max(gap, 0.0):.2f} points; 2 allowed)" if reached
           else f"BELOW the baseline by {gap:.2f} points"))
    say("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
