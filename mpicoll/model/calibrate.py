"""Fit the cost model (:class:`~mpicoll.model.Model`) on the machine in use, and judge the fit.

Everything is timed as ``mpicoll bench`` times a call (OSU's method): a barrier, then one
call, its time the max over ranks 0 and 1, the median over the samples; so the model describes
what bench's ``meas/pred`` column compares it with (a mean over back-to-back calls does not:
on a loaded machine it counts every preemption, which the median of single calls leaves out).

* alpha, beta: an exchange between ranks 0 and 1 (each sends n bytes to the other and
  receives n: ``Irecv`` + ``Isend`` + ``Waitall``, one round of the model, whose ranks send and
  receive at once) over a range of message sizes, fitted as ``alpha + n beta`` by least squares
  (``numpy.polyfit``; the registry's formulas and ``auto`` take the line).
* gamma: a local ``MPI.SUM`` reduction on float64 vectors of 8 B up to ``max_bytes`` (the
  engines' own, ``Context.reducer``, from ``mpicoll calibrate``), ranks 0 and 1
  at once, fitted the same way (slope); delta: ``numpy.copyto`` of float64 vectors, the same.
* the measured times themselves are kept as the model's curves (``message_curve``,
  ``reduce_curve``, ``copy_curve``), from which the simulator, and so bench's predicted
  column, takes each message's, reduction's and copy's time: a line cannot follow the MPI
  library's protocol switch (a step), the caches (a steeper slope past them) or a memcpy
  that is slower at some sizes than at larger ones (as glibc's is on some virtual CPUs).
* o_msg, o_call (LogP's software overhead, given an :class:`OverheadProbe`: it needs the p2p
  backend, which lives above this module): between ranks 0 and 1, interleaved, a raw round
  (``Irecv`` + ``Isend`` + ``Waitall``), the p2p engine running schedules of k = 1, 2, 4, 8
  such rounds as a repeated blocking call runs them (a replayed plan), and one tiny one-round
  p2p collective call (:data:`OVERHEAD_REPS` samples of each per ``iters``).  The engine's
  time is fitted as ``c + k r``; ``o_msg = (r - raw round) / 2`` (a round posts two
  messages); ``o_call = call - (alpha + n beta + n_r gamma + n_c delta + 2 o_msg)``, the call
  minus what the rest of the model predicts for it; ``o_start`` the same of the call's
  persistent form (``Start`` + ``Wait``, where the probe has one).  The raw round is also
  compared with the
  exchange's ``alpha + n beta`` (``round_fit``): the same message, timed apart.

Every fit has a quality (:func:`fit_quality`, :func:`curve_quality`): R^2 where the term is a
line's slope or intercept, and the largest relative residual (for a curve: the largest spread
of the samples at one size).  :func:`fit_warnings` turns a poor one (R^2 below
:data:`MIN_R2`, a residual above :data:`MAX_REL_RESIDUAL`, a term that came out negative and
was set to 0) into warnings that say how to get a better fit.

Run under ``mpiexec -n 2`` (or more: the others wait).  The sizes reach ``max_bytes`` (default
16 MiB, bench's largest in the issue's targets: above the caches, memory sets beta, gamma and
delta).  The result is saved as JSON where
:func:`mpicoll.model.default_path` says (``$MPICOLL_MODEL`` or ``~/.cache/mpicoll/model.json``)
and drives ``algorithm="auto"`` when ``$MPICOLL_MODEL`` names it, the ``simulate`` command and
bench's predicted column.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from .alphabeta import Model

__all__ = [
    "ADVICE", "ENGINE_ROUNDS", "FITS", "MAX_REL_RESIDUAL", "MIN_R2", "Fit", "OverheadProbe",
    "calibrate", "curve_quality", "fit_line", "fit_quality", "fit_warnings",
]

#: a fit is poor below this R^2 (where R^2 applies: a line over a range of sizes or rounds)
MIN_R2 = 0.95
#: ... or above this largest relative residual |measured - fitted| / measured
MAX_REL_RESIDUAL = 0.5
#: the numbers of rounds of the engine schedules timed for o_msg
ENGINE_ROUNDS = (1, 2, 4, 8)
#: samples of each kind of the overhead measurement per ``iters`` (they are short: many help)
OVERHEAD_REPS = 20

#: The fits :func:`calibrate` records in its details, and what each one fits.
FITS = {
    "alpha_beta_fit": "the exchange times (message_curve; the samples' spread at one size)",
    "gamma_fit": "the local reduction times (reduce_curve; the samples' spread at one size)",
    "delta_fit": "the copy times (copy_curve; the samples' spread at one size)",
    "o_msg_fit": "o_msg (p2p engine time against rounds per call)",
    "o_call_fit": "o_call (a one-round p2p call, samples about their median)",
    "o_start_fit": "o_start (Start + Wait of its persistent form, samples about their median)",
    "round_fit": "the raw round of the o_msg measurement against alpha + n beta (the two "
                 "are measured apart: they disagree on a loaded machine)",
}

#: How to get a better fit: the last warning :func:`fit_warnings` returns.
ADVICE = (
    "calibrate: for a better fit, run it longer (-i 200 -x 20), on a quieter machine (no other "
    "jobs: see uptime or top), with pinned ranks (Open MPI: mpiexec --bind-to core; MPICH: "
    "mpiexec -bind-to core) and fewer ranks than cores (calibrate times ranks 0 and 1 only: "
    "mpiexec -n 2 is enough)"
)


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


def fit_quality(fit: Fit | None = None, *,
                samples: Sequence[float] | None = None) -> dict[str, float | None]:
    """The quality record of one fitted term: ``{"r2": R^2 or None, "max_rel_residual": r}``.

    ``fit``: a line (:func:`fit_line`): R^2 and the largest relative residual.  ``samples``:
    repeated measurements of one quantity estimated by their median: R^2 does not apply
    (None), the residual is the largest ``|sample - median| / median``; from 20 samples on
    (single calls timed as bench times them), their interquartile range over their median,
    as for a curve (:func:`curve_quality`): the slowest calls are preemptions, which the
    median ignores too; a spread that matters moves the middle half of them.
    """
    if fit is not None:
        return {"r2": fit.r2, "max_rel_residual": fit.max_rel_residual}
    if not samples:
        raise ValueError("fit_quality: give a fit or samples")
    s = np.asarray(samples, float)
    med = float(np.median(s))
    if s.size >= 20:
        q1, q3 = np.quantile(s, [0.25, 0.75])
        rel = float(q3 - q1) / med if med > 0 else math.inf
    else:
        rel = float(np.max(np.abs(s - med)) / med) if med > 0 else math.inf
    return {"r2": None, "max_rel_residual": rel}


def fit_warnings(details: Mapping[str, Any], *, min_r2: float = MIN_R2,
                 max_rel_residual: float = MAX_REL_RESIDUAL) -> list[str]:
    """What is wrong with a calibration's fits, as lines to print (empty: nothing).

    Args:
        details: :func:`calibrate`'s details, or any mapping with the entries of :data:`FITS`
            it has (each ``{"r2": float or None, "max_rel_residual": float}``) and, optionally,
            ``"unclamped"``: the fitted values before negative ones were set to 0 (seconds).
        min_r2, max_rel_residual: the thresholds (default :data:`MIN_R2`,
            :data:`MAX_REL_RESIDUAL`).

    Returns:
        One ``calibrate: warning: ...`` line per poor fit and per term set to 0, then, if there
        was any, :data:`ADVICE` (how to get a better fit).
    """
    out = []
    for key, what in FITS.items():
        q = details.get(key)
        if q is None:
            continue
        r2, rel = q.get("r2"), q.get("max_rel_residual")
        bad = []
        if r2 is not None and not r2 >= min_r2:  # NaN is poor too
            bad.append(f"R^2 = {r2:.3f} < {min_r2:g}")
        if rel is not None and not rel <= max_rel_residual:
            bad.append(f"max relative residual {100 * rel:.0f}% > {100 * max_rel_residual:.0f}%")
        if bad:
            out.append(f"calibrate: warning: poor fit of {what}: {', '.join(bad)}")
    for name, v in (details.get("unclamped") or {}).items():
        if not v >= 0:  # negative, or NaN
            out.append(f"calibrate: warning: {name} came out negative ({v:.3g} s) and was set "
                       "to 0: the timings are noisy")
    if out:
        out.append(ADVICE)
    return out


@dataclass
class OverheadProbe:
    """What :func:`calibrate` times to fit ``o_call`` and ``o_msg``, on a communicator of two
    ranks.  It needs the p2p backend and its engine, which live above this module, so the
    caller builds it (``mpicoll calibrate`` does).

    Attributes:
        call: one tiny p2p collective call whose schedule is a single round in which each rank
            sends and receives ``call_bytes`` and reduces ``call_reduce_bytes`` (one float64
            ``Allreduce`` by recursive doubling: 8 and 8).
        call_bytes, call_reduce_bytes: those sizes, bytes.
        rounds: ``rounds(k)`` returns a function that runs, through the p2p engine (no front
            door), one schedule of k rounds, each one ``Isend`` and one ``Irecv`` of
            ``call_bytes`` with the other rank, as the engine runs a repeated blocking call
            (from its second run: the compiled plan replayed).
        close: frees what the probe holds (its communicators), or None.
        call_copy_bytes: bytes the call copies locally on the slower rank (its send buffer
            into its receive buffer, its schedule's copies).
        start: ``Start()`` + ``Wait()`` of the persistent form of ``call`` (made once, on the
            same buffers), or None: fits ``o_start``.
    """

    call: Callable[[], object]
    call_bytes: int
    call_reduce_bytes: int
    rounds: Callable[[int], Callable[[], object]]
    close: Callable[[], object] | None = None
    call_copy_bytes: int = 0
    start: Callable[[], object] | None = None


def _samples(comm: MPI.Comm, fn: Callable[[], object] | None, n: int, warmup: int
             ) -> np.ndarray:
    """Times (seconds) of ``n`` barrier-separated calls of ``fn`` after ``warmup`` untimed ones,
    each the max over the ranks of ``comm`` (a rank with ``fn`` None times nothing), as
    ``mpicoll bench`` times a call; the same array on every rank."""
    clock = time.perf_counter
    local = np.zeros(n)
    for i in range(warmup + n):
        comm.Barrier()
        t0 = clock()
        if fn is not None:
            fn()
        if i >= warmup:
            local[i - warmup] = clock() - t0
    out = np.empty_like(local)
    comm.Allreduce(local, out, op=MPI.MAX)
    return out


def _timed(comm: MPI.Comm, make: Callable[[int], Callable[[], object]], sizes: Sequence[int],
           iters: int, warmup: int) -> tuple[list[float], list[float]]:
    """The median time (seconds) at each of ``sizes`` (bytes) of the call ``make(n)`` that
    ranks 0 and 1 make at once (the others wait), timed by :func:`_samples`: ``iters``
    samples up to 64 KiB, fewer above (at least 9); and the spread of the samples at each
    size (their interquartile range over their median)."""
    med, spread = [], []
    for n in sizes:
        fn = make(n) if comm.Get_rank() < 2 else None
        k = max(9, iters // (1 + n // 65536))
        t = _samples(comm, fn, k, warmup)
        m = float(np.median(t))
        q1, q3 = np.quantile(t, [0.25, 0.75])
        med.append(m)
        spread.append(float(q3 - q1) / m if m > 0 else 0.0)
    return med, spread


def curve_quality(spread: Sequence[float]) -> dict[str, float | None]:
    """The quality record of a measured curve (:attr:`~mpicoll.model.Model.message_curve`,
    ...): no R^2 (None); ``max_rel_residual`` is the largest spread of the samples at one
    size (interquartile range over median): how far a repeated measurement may move it."""
    return {"r2": None, "max_rel_residual": float(max(spread)) if spread else 0.0}


def _exchange(comm: MPI.Comm) -> Callable[[int], Callable[[], object]]:
    """``make(n)``: an exchange of n bytes between ranks 0 and 1 (each sends to the other)."""
    peer = 1 - comm.Get_rank()

    def make(n: int) -> Callable[[], object]:
        s = np.zeros(max(n, 1), np.uint8)[:n]
        r = np.zeros(max(n, 1), np.uint8)[:n]
        return lambda: MPI.Request.Waitall([comm.Irecv(r, peer, 7), comm.Isend(s, peer, 7)])

    return make


def _reduction(n: int) -> Callable[[], object]:
    """``MPI.SUM.Reduce_local`` of n bytes of float64 (the default of :func:`calibrate`'s
    ``reduction``)."""
    a, b = np.ones(n // 8), np.ones(n // 8)
    return lambda: MPI.SUM.Reduce_local(a, b)


def _copy(n: int) -> Callable[[], object]:
    """``numpy.copyto`` of n bytes of float64 (a memcpy)."""
    a, b = np.ones(n // 8), np.ones(n // 8)
    return lambda: np.copyto(b, a)


def _time_overhead(pair: MPI.Comm, probe: OverheadProbe, iters: int, warmup: int,
                   reps: int) -> dict[str, list[float]]:
    """Times (seconds, one call each, max over the two ranks of ``pair``: :func:`_samples`)
    of a raw round (``"raw"``), of k raw rounds back to back (``"rawk"`` for k in
    :data:`ENGINE_ROUNDS` above 1), of the engine running k rounds (``"k"`` for k in
    :data:`ENGINE_ROUNDS`), of the probe's call (``"call"``) and of its persistent form
    (``"start"``, if the probe has one), ``iters * reps`` of each;
    the kinds interleave, so drift hits all."""
    peer = 1 - pair.Get_rank()
    n = probe.call_bytes
    sbuf = np.zeros(max(n, 1), np.uint8)[:n]
    rbuf = np.zeros(max(n, 1), np.uint8)[:n]

    def raw() -> None:
        MPI.Request.Waitall([pair.Irecv(rbuf, peer, 11), pair.Isend(sbuf, peer, 11)])

    def chain(k: int) -> Callable[[], None]:
        def f() -> None:
            for _ in range(k):
                raw()
        return f

    kinds: dict[str, Callable[[], object]] = {"raw": raw, "call": probe.call}
    kinds.update({f"raw{k}": chain(k) for k in ENGINE_ROUNDS[1:]})
    if probe.start is not None:
        kinds["start"] = probe.start
    kinds.update({str(k): probe.rounds(k) for k in ENGINE_ROUNDS})
    times: dict[str, list[float]] = {k: [] for k in kinds}
    chunk = max(1, reps)
    for i in range(warmup + iters):
        for kind, f in kinds.items():
            t = _samples(pair, f, chunk, 0)
            if i >= warmup:
                times[kind].extend(t.tolist())
    return times


def _clamp(v: float) -> float:
    """A fitted value as the model takes it: negative (or not finite) -> 0."""
    return v if math.isfinite(v) and v > 0 else 0.0


def skew_of(times: Mapping[str, Sequence[float]]) -> float:
    """The part of a barrier-separated call's time that it pays once, however many rounds it
    has (the ranks leave the barrier apart; the last one's lag counts once): the intercept of
    the raw rounds' time against their number (``"raw"``, ``"raw2"``, ...: k rounds back to
    back), at least 0 and at most the single round's time; 0 without the chains."""
    if not all(f"raw{k}" in times for k in ENGINE_ROUNDS[1:]):
        return 0.0
    ys = [float(np.median(times["raw"]))]
    ys += [float(np.median(times[f"raw{k}"])) for k in ENGINE_ROUNDS[1:]]
    c = fit_line(np.array(ENGINE_ROUNDS, float), np.array(ys)).intercept
    return min(max(c, 0.0), ys[0])


def _fit_overhead(times: Mapping[str, Sequence[float]], partial: Model, probe_bytes: int,
                  probe_reduce_bytes: int, probe_copy_bytes: int = 0
                  ) -> tuple[float, float, dict[str, Any]]:
    """``(o_call, o_msg, details)`` from :func:`_time_overhead`'s samples and the fitted
    alpha, beta, gamma, delta; negative values are returned as they came (the caller
    clamps).  With ``"start"`` samples, ``details["overhead"]["o_start"]`` is ``o_start``
    (the persistent form's time less the same rest), unclamped too."""
    raw = float(np.median(times["raw"]))
    ks = np.array(ENGINE_ROUNDS, float)
    engine = np.array([float(np.median(times[str(k)])) for k in ENGINE_ROUNDS])
    line = fit_line(ks, engine)
    skew, round_s = skew_of(times), raw
    if skew:  # the raw rounds' own line: skew + k round_s
        round_s = raw - skew
    o_msg = (line.slope - round_s) / 2  # a round posts one send and one receive
    call = float(np.median(times["call"]))
    rest = (partial.message(probe_bytes) + probe_reduce_bytes * partial.gamma
            + probe_copy_bytes * partial.delta + 2 * _clamp(o_msg))
    predicted_raw = partial.message(probe_bytes) + skew
    details = {
        "overhead": {
            "probe_bytes": probe_bytes, "probe_reduce_bytes": probe_reduce_bytes,
            "probe_copy_bytes": probe_copy_bytes,
            "samples": len(times["raw"]), "raw_round_s": raw, "skew_s": skew,
            "engine_rounds": list(ENGINE_ROUNDS), "engine_s": engine.tolist(),
            "engine_round_s": line.slope, "engine_call_setup_s": line.intercept,
            "call_s": call,
        },
        "o_msg_fit": fit_quality(line),
        "o_call_fit": fit_quality(samples=times["call"]),
        "round_fit": {"r2": None,
                      "max_rel_residual": abs(raw - predicted_raw) / raw if raw > 0 else math.inf},
    }
    if "start" in times:
        start = float(np.median(times["start"]))
        details["overhead"].update(start_s=start, o_start=start - rest)
        details["o_start_fit"] = fit_quality(samples=times["start"])
    return call - rest, o_msg, details


def _local_sizes(max_bytes: int) -> list[int]:
    """Vector sizes (bytes) of the reduction and copy curves: 8 B (one float64), 16 B, ...
    up to ``max_bytes`` (at least up to 4 KiB, so there is a line to fit)."""
    return [1 << k for k in range(3, max(12, max_bytes.bit_length() - 1) + 1)]


def calibrate(comm: MPI.Comm | None = None, *, max_bytes: int = 1 << 24, iters: int = 50,
              warmup: int = 5, probe: Callable[[MPI.Comm], OverheadProbe] | None = None,
              reduction: Callable[[int], Callable[[], object]] = _reduction,
              ) -> tuple[Model, dict[str, Any]]:
    """Measure and fit the model (collective over ``comm``; needs 2 ranks or more).

    Args:
        comm: the communicator (default ``MPI.COMM_WORLD``); ranks 0 and 1 are timed.
        max_bytes: largest exchange (and largest reduction and copy), bytes.
        iters, warmup: timed and untimed samples per size (fewer above 64 KiB), and
            ``OVERHEAD_REPS`` times as many of each kind of the overhead measurement.
        probe: called on ranks 0 and 1 with a communicator of those two, returns the
            :class:`OverheadProbe` that fits ``o_call`` and ``o_msg``; None: both stay 0 and
            the details have no overhead entries.
        reduction: ``reduction(n)`` makes the timed call reducing n bytes of float64 with
            ``MPI.SUM`` (default ``Reduce_local``; ``mpicoll calibrate`` passes the engines' own
            local reduction, so gamma is what the schedules pay).

    Returns:
        (model, details): the fitted :class:`~mpicoll.model.Model` (same on every rank) and a
        dict with the raw points, the quality of each fit (the entries of :data:`FITS`:
        ``{"r2", "max_rel_residual"}``), ``"unclamped"`` (the fitted values before negative
        ones were set to 0, seconds) and ``"fit_warnings"`` (:func:`fit_warnings`).

    Raises:
        ValueError: fewer than two ranks.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() < 2:
        raise ValueError("calibrate needs at least 2 ranks (an exchange between ranks 0 and 1)")
    sizes = [0] + [1 << k for k in range(max_bytes.bit_length())]
    sizes = [s for s in sizes if s <= max_bytes]
    pts, ps = _timed(comm, _exchange(comm), sizes, iters, warmup)
    local = _local_sizes(max_bytes)
    gy, gs = _timed(comm, reduction, local, iters, warmup)
    cy, cs = _timed(comm, _copy, local, iters, warmup)
    times: dict[str, list[float]] = {}
    probe_sizes = (0, 0, 0)
    if probe is not None:
        pair = comm.Split(0 if comm.Get_rank() < 2 else MPI.UNDEFINED, comm.Get_rank())
        if pair != MPI.COMM_NULL:
            pr = probe(pair)
            try:
                times = _time_overhead(pair, pr, iters, warmup, OVERHEAD_REPS)
                probe_sizes = (pr.call_bytes, pr.call_reduce_bytes, pr.call_copy_bytes)
            finally:
                if pr.close is not None:
                    pr.close()
                pair.Free()
    details: dict[str, Any] = {}
    model = Model()
    if comm.Get_rank() == 0:
        # a message in a chain of rounds costs the exchange less the skew a barrier-separated
        # call pays once: that goes to o_call (what the probe's call costs beyond the rest)
        skew = skew_of(times) if times else 0.0
        pts = [max(t - skew, 0.0) for t in pts]
        net = fit_line(np.array(sizes, float), np.array(pts))
        red = fit_line(np.array(local, float), np.array(gy))
        cop = fit_line(np.array(local, float), np.array(cy))
        fitted: dict[str, float] = {"alpha": net.intercept, "beta": net.slope,
                                    "gamma": red.slope, "delta": cop.slope}
        # the simulator takes the measured times themselves; the lines are for the formulas
        curves: dict[str, Any] = {
            "message_curve": tuple(zip(map(float, sizes), pts, strict=True)),
            "reduce_curve": tuple(zip(map(float, local), gy, strict=True)),
            "copy_curve": tuple(zip(map(float, local), cy, strict=True))}
        details = {
            "exchange_bytes": sizes, "exchange_s": pts, "skew_s": skew,
            "reduce_bytes": local, "reduce_s": gy, "copy_bytes": local, "copy_s": cy,
            "alpha_beta_fit": curve_quality(ps), "gamma_fit": curve_quality(gs),
            "delta_fit": curve_quality(cs),
            "lines": {"alpha_beta": fit_quality(net), "gamma": fit_quality(red),
                      "delta": fit_quality(cop)},
        }
        model = Model(**{k: _clamp(v) for k, v in fitted.items()}, **curves)  # type: ignore[arg-type]
        if times:
            o_call, o_msg, more = _fit_overhead(times, model, *probe_sizes)
            fitted.update(o_call=o_call, o_msg=o_msg)
            if "o_start" in more["overhead"]:
                fitted["o_start"] = more["overhead"]["o_start"]
            details.update(more)
            model = Model(**{k: _clamp(v) for k, v in fitted.items()}, **curves)  # type: ignore[arg-type]
        details["unclamped"] = fitted
        details["fit_warnings"] = fit_warnings(details)
    model = comm.bcast(model, root=0)
    return model, comm.bcast(details, root=0)
