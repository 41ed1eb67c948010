"""The alpha-beta-gamma cost model: parameters, and the calibration ``auto`` may use.

``alpha`` is seconds per message, ``beta`` seconds per byte moved, ``gamma`` seconds per byte
reduced (Hockney's model as extended by Thakur, Rabenseifner & Gropp, IJHPCA 2005).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Model", "current", "load", "save", "DEFAULT"]


@dataclass(frozen=True)
class Model:
    """Model parameters, in seconds: per message (alpha), per byte sent (beta), per byte reduced
    (gamma)."""

    alpha: float = 2e-6
    beta: float = 1e-10
    gamma: float = 2.5e-10

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


#: Round numbers for a shared-memory node, used when nothing was calibrated.
DEFAULT = Model()

_ENV = "MPICOLL_MODEL"


def default_path() -> Path:
    """Where ``calibrate`` saves: ``$MPICOLL_MODEL`` or ``~/.cache/mpicoll/model.json``."""
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "mpicoll" / "model.json"


def load(path: str | os.PathLike[str] | None = None) -> Model | None:
    """The calibrated model saved at ``path`` (default :func:`default_path`), or None."""
    p = Path(path) if path is not None else default_path()
    try:
        d = json.loads(p.read_text())
        return Model(float(d["alpha"]), float(d["beta"]), float(d["gamma"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(m: Model, path: str | os.PathLike[str] | None = None, **extra: object) -> Path:
    """Write ``m`` (and any extra fields, e.g. fit quality) as JSON; returns the path."""
    p = Path(path) if path is not None else default_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({**m.as_dict(), **extra}, indent=2) + "\n")
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
