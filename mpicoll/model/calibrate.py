"""Fit the alpha-beta-gamma model on the machine in use.

* alpha, beta: ping-pong between ranks 0 and 1 (as ``osu_latency`` does) over a range of
  message sizes; the one-way time t(n) = RTT/2 is fitted as ``alpha + n beta`` by least
  squares (``numpy.polyfit``), reported with R^2 and the largest relative residual.
* gamma: ``MPI.SUM.Reduce_local`` throughput on float64 vectors, fitted the same way (slope).

Run under ``mpiexec -n 2`` (or more: the others wait).  The result is saved as JSON where
:func:`mpicoll.model.default_path` says (``$MPICOLL_MODEL`` or ``~/.cache/mpicoll/model.json``)
and drives ``algorithm="auto"`` when ``$MPICOLL_MODEL`` names it, the ``simulate`` command and
bench's predicted column.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from .alphabeta import Model

__all__ = ["Fit", "calibrate", "fit_line"]


@dataclass
class Fit:
    """A least-squares line ``y = intercept + slope x`` and how well it fits."""

    intercept: float
    slope: float
    r2: float
    max_rel_residual: float


def fit_line(x: np.ndarray, y: np.ndarray) -> Fit:
    """Least-squares fit of ``y = a + b x`` (``numpy.polyfit``, weighted by 1/y so that the
    relative error counts), with R^2 and the largest relative residual."""
    # weights 1/y minimise relative residuals, so the large messages do not swamp alpha
    b, a = np.polyfit(x, y, 1, w=1.0 / np.maximum(np.abs(y), 1e-300))
    pred = a + b * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
    rel = float(np.max(np.abs(y - pred) / np.maximum(np.abs(y), 1e-300)))
    return Fit(float(a), float(b), 1.0 - ss_res / ss_tot, rel)


def _pingpong(comm: MPI.Comm, nbytes: int, iters: int, warmup: int) -> float:
    """Median one-way time (seconds) of an ``nbytes`` message between ranks 0 and 1."""
    buf = np.zeros(max(nbytes, 1), np.uint8)[:nbytes]
    times = []
    r = comm.Get_rank()
    for i in range(warmup + iters):
        comm.Barrier()
        t0 = MPI.Wtime()
        if r == 0:
            comm.Send(buf, 1, 7)
            comm.Recv(buf, 1, 7)
        elif r == 1:
            comm.Recv(buf, 0, 7)
            comm.Send(buf, 0, 7)
        if i >= warmup:
            times.append((MPI.Wtime() - t0) / 2)
    return float(np.median(times)) if r == 0 else 0.0


def calibrate(comm: MPI.Comm | None = None, *, max_bytes: int = 1 << 22, iters: int = 50,
              warmup: int = 5) -> tuple[Model, dict[str, Any]]:
    """Measure and fit the model (collective over ``comm``; needs 2 ranks or more).

    Returns:
        (model, details): the fitted :class:`~mpicoll.model.Model` (same on every rank) and a
        dict with the raw points and the fit quality of each line.

    Raises:
        ValueError: fewer than two ranks.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() < 2:
        raise ValueError("calibrate needs at least 2 ranks (ping-pong between ranks 0 and 1)")
    sizes = [0] + [1 << k for k in range(max_bytes.bit_length())]
    sizes = [s for s in sizes if s <= max_bytes]
    pts = [_pingpong(comm, s, max(5, iters // (1 + s // 65536)), warmup) for s in sizes]
    gx, gy = [], []
    if comm.Get_rank() == 0:
        for s in (1 << 12, 1 << 15, 1 << 18, 1 << 21):
            a = np.ones(s // 8)
            b = np.ones(s // 8)
            reps = max(3, (1 << 22) // s)
            t0 = time.perf_counter()
            for _ in range(reps):
                MPI.SUM.Reduce_local(a, b)
            gx.append(s)
            gy.append((time.perf_counter() - t0) / reps)
    details: dict[str, Any] = {}
    model = Model()
    if comm.Get_rank() == 0:
        net = fit_line(np.array(sizes, float), np.array(pts))
        red = fit_line(np.array(gx, float), np.array(gy))
        model = Model(max(net.intercept, 0.0), max(net.slope, 0.0), max(red.slope, 0.0))
        details = {
            "pingpong_bytes": sizes, "pingpong_one_way_s": pts,
            "reduce_bytes": gx, "reduce_s": gy,
            "alpha_beta_fit": {"r2": net.r2, "max_rel_residual": net.max_rel_residual},
            "gamma_fit": {"r2": red.r2, "max_rel_residual": red.max_rel_residual},
        }
    model = comm.bcast(model, root=0)
    return model, comm.bcast(details, root=0)
