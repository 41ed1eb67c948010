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

import json
import math
import numbers
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

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
        gamma: seconds per byte reduced, the slope of ``MPI.SUM.Reduce_local`` time on float64
            vectors against their size (both ranks reducing at once, as in a collective).
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
        eager_limit, alpha_rndv, beta_rndv: a message of more than ``eager_limit`` bytes
            costs ``alpha_rndv + n beta_rndv`` instead (bytes, seconds, seconds per byte):
            MPI libraries switch protocol there (eager to rendezvous: MPICH's shared-memory
            eager limit, Open MPI's ``btl_*_eager_limit``), and the time jumps.  0: one line
            for every size.  ``calibrate`` fits the exchange times as two lines where that
            fits them much better than one (it puts the limit between two measured sizes).
    """

    alpha: float = 2e-6
    beta: float = 1e-10
    gamma: float = 2.5e-10
    o_call: float = 0.0
    o_msg: float = 0.0
    delta: float = 0.0
    o_start: float = 0.0
    eager_limit: float = 0.0
    alpha_rndv: float = 0.0
    beta_rndv: float = 0.0

    def __post_init__(self) -> None:
        for name, v in asdict(self).items():
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool)
                    and math.isfinite(v) and float(v) >= 0):
                raise ValueError(f"Model.{name}: expected a finite number >= 0 (seconds; "
                                 "eager_limit: bytes), "
                                 f"got {v!r}")

    def line(self, nbytes: float) -> tuple[float, float]:
        """``(alpha, beta)`` of a message of ``nbytes`` bytes: ``(alpha_rndv, beta_rndv)``
        above ``eager_limit`` (where it is not 0), else ``(alpha, beta)``."""
        if self.eager_limit and nbytes > self.eager_limit:
            return self.alpha_rndv, self.beta_rndv
        return self.alpha, self.beta

    def message(self, nbytes: float) -> float:
        """Seconds for one message of ``nbytes`` bytes (see :meth:`line`)."""
        a, b = self.line(nbytes)
        return a + nbytes * b

    def persistent(self) -> Model:
        """This model for a persistent collective's ``Start`` + ``Wait``: ``o_start`` in the
        place of ``o_call``."""
        return replace(self, o_call=self.o_start)

    def as_dict(self) -> dict[str, float]:
        """``{"alpha": ..., "beta": ..., "gamma": ...}`` plus the optional terms (``o_call``,
        ``o_msg``, ``delta``, ``eager_limit``, ``alpha_rndv``, ``beta_rndv``) where they are
        not 0 (so the outputs of a model without those terms are what they were before the
        terms existed); :func:`save` writes them all."""
        d = asdict(self)
        return {k: v for k, v in d.items() if v or k not in _OPTIONAL}


#: Round numbers for a shared-memory node, used when nothing was calibrated (no overhead).
DEFAULT = Model()

_ENV = "MPICOLL_MODEL"
#: the parameters a model file must hold, and those it may (absent: 0, as in files written
#: before the overhead terms existed)
_REQUIRED = ("alpha", "beta", "gamma")
_OPTIONAL = ("o_call", "o_msg", "delta", "o_start", "eager_limit", "alpha_rndv", "beta_rndv")


def default_path() -> Path:
    """Where ``calibrate`` saves: ``$MPICOLL_MODEL`` or ``~/.cache/mpicoll/model.json``."""
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "mpicoll" / "model.json"


def load(path: str | os.PathLike[str] | None = None) -> Model | None:
    """The calibrated model saved at ``path`` (default :func:`default_path`), or None if there
    is no such file or it is not a model file (a parameter missing, not a number, negative or
    not finite).  The optional terms (``o_call``, ``o_msg``, ``delta``, ``eager_limit``, ...) are 0
    where the file has none."""
    p = Path(path) if path is not None else default_path()
    try:
        d = json.loads(p.read_text())
        kw = {k: float(d[k]) for k in _REQUIRED}
        kw.update({k: float(d[k]) for k in _OPTIONAL if d.get(k) is not None})
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
    global _current, _loaded
    _current, _loaded = m, True
