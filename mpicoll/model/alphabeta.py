"""The alpha-beta-gamma cost model with LogP's software overhead: parameters, and the
calibration ``auto`` may use.

``alpha`` is seconds per message, ``beta`` seconds per byte moved, ``gamma`` seconds per byte
reduced (Hockney's model as extended by Thakur, Rabenseifner & Gropp, IJHPCA 2005); ``o_call``
and ``o_msg`` are the software overhead a hand-rolled collective pays on top of them, per call
and per message posted (LogP's *o*: Culler et al., "LogP: towards a realistic model of parallel
computation", PPoPP 1993); ``delta`` is seconds per byte copied locally (the copies of a
schedule and of its send buffer into the receive buffer, which the textbook costs leave out).
All three default to 0, which is the plain alpha-beta-gamma model.
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Model", "current", "load", "save", "DEFAULT"]


@dataclass(frozen=True)
class Model:
    """Model parameters (all finite and >= 0; :class:`ValueError` otherwise).

    Attributes:
        alpha: seconds per message: the latency of one message between two ranks.  Measured
            by ``calibrate`` as the intercept of the time of an exchange (each of two ranks
            sends n bytes to the other and receives n: one round of the model, whose ranks
            send and receive at once) fitted as ``alpha + n beta``.
        beta: seconds per byte sent (1 / bandwidth), the slope of that same fit.
        gamma: seconds per byte reduced, the slope of the engines' local ``MPI.SUM``
            reduction time on float64 vectors against their size (both ranks reducing at once,
            as in a collective).
        o_call: seconds per collective call: the Python front door of the p2p backend (argument
            checking, algorithm choice, the engine's set-up of the call), paid by every rank
            once, at the start of the call, before it posts anything.  Measured as the time of
            a tiny one-round p2p call (one float64 ``Allreduce``, recursive doubling, between
            two ranks) minus what the rest of the model predicts for it
            (``alpha + 8 beta + 8 gamma + 2 o_msg``).
        o_msg: seconds per message (each send and each receive) the p2p engine posts, beyond
            ``alpha``: the Python cost of resuming the schedule and posting its round.  A rank
            that posts a round of k messages is busy for ``k o_msg`` before they start.
            Measured as half the difference between a round run by the p2p engine (one
            ``Isend`` and one ``Irecv`` per rank; the slope of the engine's time against the
            number of rounds) and the same round posted directly (``Irecv`` + ``Isend`` +
            ``Waitall``).
        o_start: what ``o_call`` is to a blocking call, for ``Start()`` + ``Wait()`` of a
            persistent p2p collective (``Allreduce_init``, ...): no front door, the compiled
            plan started.  Measured as the time of the persistent form of ``o_call``'s call
            minus the same rest.  bench's predicted time of its ``X:init`` columns uses it in
            the place of ``o_call``.
        delta: seconds per byte copied locally (``numpy.copyto``, a memcpy): the slope of the
            copy time of float64 vectors against their size (both ranks copying at once).
        message_curve, reduce_curve, copy_curve: measured times, ``((bytes, seconds), ...)``
            at increasing sizes, of an exchange, a reduction and a copy of that many bytes;
            where one is given the simulator takes a message's, a reduction's or a copy's
            time from it (:meth:`message`, :meth:`reduce_time`, :meth:`copy_time`: linear
            between the measured sizes, the last segment's slope beyond them) in the place
            of the line.  A line cannot follow what these times do on a real machine: the
            MPI library's protocol switch (eager to rendezvous, a step), the caches (the
            slope grows past them) and the C library's memcpy (on some CPUs several times
            slower at some sizes than at larger ones).  Empty (the default): the lines.
    """

    alpha: float = 2e-6
    beta: float = 1e-10
    gamma: float = 2.5e-10
    o_call: float = 0.0
    o_msg: float = 0.0
    delta: float = 0.0
    o_start: float = 0.0
    message_curve: Curve = ()
    reduce_curve: Curve = ()
    copy_curve: Curve = ()

    def __post_init__(self) -> None:
        for name, v in asdict(self).items():
            if name in _CURVES:
                object.__setattr__(self, name, _curve(name, v))
                continue
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool)
                    and math.isfinite(v) and float(v) >= 0):
                raise ValueError(f"Model.{name}: expected a finite number >= 0 (seconds), "
                                 f"got {v!r}")

    def line(self, nbytes: float) -> tuple[float, float]:
        """``(alpha, beta)`` of a message of ``nbytes`` bytes, as the registry's formulas take
        them: the segment of ``message_curve`` around ``nbytes`` (intercept, slope) where
        there is one, else ``(alpha, beta)``."""
        if not self.message_curve:
            return self.alpha, self.beta
        xs, ys = _arrays(self.message_curve)
        k = int(np.clip(np.searchsorted(xs, nbytes) - 1, 0, len(xs) - 2)) if len(xs) > 1 else 0
        if len(xs) == 1:
            return float(ys[0]), 0.0
        slope = float((ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k]))
        return max(0.0, float(ys[k] - slope * xs[k])), max(0.0, slope)

    def message(self, nbytes: Any) -> Any:
        """Seconds for one message of ``nbytes`` bytes (a number, or a numpy array of them):
        ``message_curve`` at ``nbytes`` where given, else ``alpha + nbytes beta``."""
        if self.message_curve:
            return _at(self.message_curve, nbytes)
        return self.alpha + nbytes * self.beta

    def reduce_time(self, nbytes: Any) -> Any:
        """Seconds to reduce ``nbytes`` bytes: ``reduce_curve`` or ``nbytes gamma``."""
        if self.reduce_curve:
            return _at(self.reduce_curve, nbytes)
        return nbytes * self.gamma

    def copy_time(self, nbytes: Any) -> Any:
        """Seconds to copy ``nbytes`` bytes locally: ``copy_curve`` or ``nbytes delta``."""
        if self.copy_curve:
            return _at(self.copy_curve, nbytes)
        return nbytes * self.delta

    def persistent(self) -> Model:
        """This model for a persistent collective's ``Start`` + ``Wait``: ``o_start`` in the
        place of ``o_call``."""
        return replace(self, o_call=self.o_start)

    def as_dict(self) -> dict[str, Any]:
        """``{"alpha": ..., "beta": ..., "gamma": ...}`` plus the optional terms (``o_call``,
        ``o_msg``, ``delta``, ``o_start``, the curves as lists of ``[bytes, seconds]``) where
        they are not 0 or empty (so the outputs of a model without those terms are what they
        were before the terms existed); :func:`save` writes them all."""
        d = asdict(self)
        out = {k: v for k, v in d.items() if v or k not in _OPTIONAL}
        for k in _CURVES:
            if k in out:
                out[k] = [list(pt) for pt in out[k]]
        return out


Curve = tuple[tuple[float, float], ...]
_CURVES = ("message_curve", "reduce_curve", "copy_curve")


def _curve(name: str, v: Any) -> Curve:
    """``v`` as a curve: pairs (bytes, seconds), sizes increasing, all finite and >= 0."""
    try:
        pts = tuple((float(a), float(b)) for a, b in v)
    except (TypeError, ValueError):
        raise ValueError(f"Model.{name}: expected (bytes, seconds) pairs, got {v!r}") from None
    if any(not (math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0) for a, b in pts):
        raise ValueError(f"Model.{name}: sizes and times must be finite and >= 0")
    if any(b[0] <= a[0] for a, b in itertools.pairwise(pts)):
        raise ValueError(f"Model.{name}: sizes must increase")
    return pts


def _arrays(c: Curve) -> tuple[np.ndarray, np.ndarray]:
    a = np.array(c, float)
    return a[:, 0], a[:, 1]


def _at(c: Curve, n: Any) -> Any:
    """The curve at ``n`` (bytes; a number or an array): 0 at 0 bytes where the curve does
    not start at 0 (nothing reduced or copied), the first time below the first size, linear
    between the sizes, the last segment's slope beyond the last one."""
    xs, ys = _arrays(c)
    v = np.asarray(n, float)
    t = np.interp(v, xs, ys)
    if len(xs) > 1:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        t = np.where(v > xs[-1], ys[-1] + (v - xs[-1]) * max(slope, 0.0), t)
    if xs[0] > 0:
        t = np.where(v <= 0, 0.0, t)
    return float(t) if np.ndim(n) == 0 else t


#: Round numbers for a shared-memory node, used when nothing was calibrated (no overhead).
DEFAULT = Model()

_ENV = "MPICOLL_MODEL"
#: the parameters a model file must hold, and those it may (absent: 0, as in files written
#: before the overhead terms existed)
_REQUIRED = ("alpha", "beta", "gamma")
_OPTIONAL = ("o_call", "o_msg", "delta", "o_start", *_CURVES)


def default_path() -> Path:
    """Where ``calibrate`` saves: ``$MPICOLL_MODEL`` or ``~/.cache/mpicoll/model.json``."""
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "mpicoll" / "model.json"


def load(path: str | os.PathLike[str] | None = None) -> Model | None:
    """The calibrated model saved at ``path`` (default :func:`default_path`), or None if there
    is no such file or it is not a model file (a parameter missing, not a number, negative or
    not finite).  The optional terms (``o_call``, ``o_msg``, ``delta``, ``o_start``, the
    curves) are 0 or empty where the file has none."""
    p = Path(path) if path is not None else default_path()
    try:
        d = json.loads(p.read_text())
        kw: dict[str, Any] = {k: float(d[k]) for k in _REQUIRED}
        kw.update({k: (d[k] if k in _CURVES else float(d[k])) for k in _OPTIONAL
                   if d.get(k) is not None})
        return Model(**kw)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(m: Model, path: str | os.PathLike[str] | None = None, **extra: object) -> Path:
    """Write ``m`` (all its parameters) and any extra fields (e.g. the fit quality)
    as JSON; returns the path."""
    p = Path(path) if path is not None else default_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({**asdict(m), **extra}, indent=2) + "\n")
    return p


_current: Model | None = None
_loaded = False


def current() -> Model | None:
    """The model that drives ``algorithm="auto"``: set by :func:`use`, else the file named by
    ``$MPICOLL_MODEL`` if that variable is set; None means the static defaults."""
    global _current, _loaded
    if not _loaded:
        _loaded = True
        if os.environ.get(_ENV):
            _current = load()
    return _current


def use(m: Model | None) -> None:
    """Make ``m`` drive ``auto`` in this process (None: back to the static defaults)."""
    global _current, _loaded, _used
    _current, _loaded, _used = m, True, True


_used = False


def from_environment() -> bool:
    """Whether :func:`current` reads ``$MPICOLL_MODEL`` (False once :func:`use` chose)."""
    return not _used
