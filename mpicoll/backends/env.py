"""The environment variables that steer the backends, read and validated in one place.

* ``MPICOLL_CHECK``: checked mode by default (1/true/yes/on; unset, empty or 0/false/no/off:
  off).
* ``MPICOLL_SEGMENT_SIZE``: bytes per segment of the segmented (pipeline) algorithms; a
  positive integer (default 64 KiB); unset or empty means the default.
* ``MPICOLL_RANKS_PER_NODE``: emulate nodes of k consecutive ranks (node-aware algorithms,
  traffic counts, the simulator); a positive integer; unset or empty: the real nodes.
* ``MPICOLL_<COLLECTIVE>_ALGORITHM``: the algorithm a p2p call runs when ``algorithm=`` is not
  given (``auto`` or one of the collective's algorithm names); unset or empty means ``auto``.
* ``MPICOLL_MODEL``: the calibrated cost model ``auto`` chooses by (a file ``mpicoll
  calibrate`` wrote); unset or empty: the built-in rules.  A path that names no model file is
  an error, not the defaults; the ranks agree on the model's *contents* (a digest of the model
  in effect, :func:`model_digest`), not only on its path.

A backend reads them once, when it is made (:func:`read`), validates them there, and the ranks
agree on them in the same construction-time exchange (:func:`mpicoll.backends.checked.
agree_on_construction`): a bad value raises ``ValueError`` naming the variable and the value,
and ranks whose values differ all raise :class:`~mpicoll.MismatchError`.  No call re-reads
them.  The simulator reads the segment size and the node size through the same functions.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..algorithms import registry
from ..algorithms.collectives import BY_NAME, NAMES
from ..algorithms.schedule import DEFAULT_SEGMENT_BYTES
from ..model import alphabeta

__all__ = ["CHECK_VAR", "DEFAULT_SEGMENT_BYTES", "MODEL_VAR", "NO_MODEL", "RANKS_PER_NODE_VAR",
           "SEGMENT_VAR", "Settings", "algorithm_var", "check_env_algorithm", "env_algorithm",
           "env_check", "model_digest", "ranks_per_node", "read", "segment_bytes"]

#: The variable that turns checked mode on by default.
CHECK_VAR = "MPICOLL_CHECK"

#: The variable that sets the segment size in bytes.
SEGMENT_VAR = "MPICOLL_SEGMENT_SIZE"

#: The variable that emulates nodes of k consecutive ranks.
RANKS_PER_NODE_VAR = "MPICOLL_RANKS_PER_NODE"

#: The variable that names the calibrated cost model ``auto`` chooses by.
MODEL_VAR = "MPICOLL_MODEL"

#: :func:`model_digest` of no model (``auto``'s built-in rules).
NO_MODEL = -1


def _positive(var: str, what: str) -> int | None:
    """``$var`` as a positive integer, None when unset or empty; ValueError naming it."""
    raw = os.environ.get(var, "")
    if not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{var}={raw!r}: expected a positive integer ({what})")
    return value


def env_check() -> bool:
    """``$MPICOLL_CHECK``: 1/true/yes/on turns checked mode on by default; unset, empty or
    0/false/no/off leaves it off.

    Raises:
        ValueError: any other value, naming the variable (a typo must not silently turn the
            checks off).
    """
    raw = os.environ.get(CHECK_VAR, "")
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"{CHECK_VAR}={raw!r}: expected 1/true/yes/on or 0/false/no/off")


def segment_bytes(default: int = DEFAULT_SEGMENT_BYTES) -> int:
    """``$MPICOLL_SEGMENT_SIZE`` in bytes (``default`` when unset or empty).

    Raises:
        ValueError: a value that is not a positive integer (``0``, ``-8``, ``1.5``, ``64k``),
            naming the variable and the value.
    """
    value = _positive(SEGMENT_VAR, f"a number of bytes; default {DEFAULT_SEGMENT_BYTES}")
    return default if value is None else value


def ranks_per_node() -> int | None:
    """``$MPICOLL_RANKS_PER_NODE`` (None when unset or empty).

    Raises:
        ValueError: a value that is not a positive integer, naming the variable and the value.
    """
    return _positive(RANKS_PER_NODE_VAR, "ranks per emulated node")


def algorithm_var(collective: str) -> str:
    """The variable that forces ``collective``'s algorithm: ``MPICOLL_ALLREDUCE_ALGORITHM``."""
    return BY_NAME[collective].algorithm_var


def env_algorithm(collective: str) -> str | None:
    """``$MPICOLL_<COLLECTIVE>_ALGORITHM`` as given (surrounding blanks removed), or None when
    unset or empty.  Not validated here: :func:`check_env_algorithm` does that."""
    return os.environ.get(algorithm_var(collective), "").strip() or None


def check_env_algorithm(collective: str) -> str | None:
    """:func:`env_algorithm`, checked against the registry.

    Raises:
        ValueError: a name that is neither ``auto`` nor one of ``collective``'s algorithms;
            the message names the variable, the value and the valid names.
    """
    name = env_algorithm(collective)
    if name is None or name == "auto":
        return name
    try:
        registry.get(collective, name)
    except ValueError as exc:
        raise ValueError(f"{algorithm_var(collective)}={name!r}: {exc}") from None
    return name


def model_digest() -> int:
    """A digest of the cost model that drives ``auto`` in this process
    (:func:`mpicoll.model.current`: the one :func:`mpicoll.model.use` set, else the file
    ``$MPICOLL_MODEL`` names), ``crc32`` of its parameters; :data:`NO_MODEL` when there is none.

    Raises:
        ValueError: ``$MPICOLL_MODEL`` is set, :func:`mpicoll.model.use` did not choose, and
            the file does not exist or is not a model file (naming the variable and the
            path): silently
            falling back to the built-in rules would make this rank choose differently.
    """
    raw = os.environ.get(MODEL_VAR, "")
    model = alphabeta.current()
    if model is None and raw and alphabeta.from_environment():
        path = Path(raw)
        if not path.is_file():
            raise ValueError(f"{MODEL_VAR}={raw!r}: no such file (a model written by mpicoll "
                             "calibrate; unset the variable for auto's built-in rules)")
        if alphabeta.load(path) is None:
            raise ValueError(f"{MODEL_VAR}={raw!r}: not a model file (alpha, beta and gamma "
                             "must be finite numbers >= 0, as mpicoll calibrate writes them)")
    if model is None:
        return NO_MODEL
    return zlib.crc32(json.dumps(asdict(model), sort_keys=True).encode())


@dataclass(frozen=True)
class Settings:
    """What the environment says to one backend, read once when it is made.

    Attributes:
        check: checked mode (``check=`` if given, else ``$MPICOLL_CHECK``).
        segment_bytes: ``$MPICOLL_SEGMENT_SIZE`` (default 64 KiB).
        ranks_per_node: ``$MPICOLL_RANKS_PER_NODE`` (None: the real nodes).
        algorithms: ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` of every collective for which it is
            set to a name other than ``auto`` (the p2p backend checks the names exist; the
            native backend takes them as given: checked mode compares them).
        error: the first refused value (ValueError naming the variable), or None; the backend
            raises it on this rank, after telling the other ranks in the agreement.
        model: :func:`model_digest` (p2p only; :data:`NO_MODEL` where it was not read).
    """

    check: bool = False
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ranks_per_node: int | None = None
    algorithms: dict[str, str] = field(default_factory=dict)
    error: ValueError | None = None
    model: int = NO_MODEL

    def forced(self, collective: str) -> str:
        """The name ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` forces, ``"auto"`` when none."""
        return self.algorithms.get(collective, "auto")


def read(check: bool | None = None, *, p2p: bool) -> Settings:
    """Read and validate the environment once, for a backend being made.

    Args:
        check: ``check=`` of the backend (None: ``$MPICOLL_CHECK``).
        p2p: also validate what only the p2p backend uses (segment size, node size, algorithm
            names, the cost model); the native backend reads only the check flag and the
            algorithm names.

    Never raises: a refused value is returned in :attr:`Settings.error` (the first one, in
    the order above), so that every rank still takes part in the agreement.
    """
    error: ValueError | None = None
    try:
        on = env_check() if check is None else bool(check)
    except ValueError as exc:
        on, error = False, exc
    seg, rpn, model = DEFAULT_SEGMENT_BYTES, None, NO_MODEL
    if p2p:
        try:
            seg = segment_bytes()
        except ValueError as exc:
            error = error or exc
        try:
            rpn = ranks_per_node()
        except ValueError as exc:
            error = error or exc
        try:
            model = model_digest()
        except ValueError as exc:
            error = error or exc
    algorithms: dict[str, str] = {}
    for name in NAMES:
        try:
            value = check_env_algorithm(name) if p2p else env_algorithm(name)
        except ValueError as exc:
            error = error or exc
            continue
        if value is not None and value != "auto":
            algorithms[name] = value
    return Settings(on, seg, rpn, algorithms, error, model)
