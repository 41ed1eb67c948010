"""The environment variables that steer the p2p backend, read and validated in one place.

* ``MPICOLL_SEGMENT_SIZE``: bytes per segment of the segmented (pipeline) algorithms; a
  positive integer (default 64 KiB); unset or empty means the default.
* ``MPICOLL_RANKS_PER_NODE``: emulate nodes of k consecutive ranks (node-aware algorithms,
  traffic counts, the simulator); a positive integer; unset or empty: the real nodes.
* ``MPICOLL_<COLLECTIVE>_ALGORITHM``: the algorithm a p2p call runs when ``algorithm=`` is not
  given (``auto`` or one of the collective's algorithm names); unset or empty means ``auto``.

Both are read at every call.  The p2p backend validates them before the call sends anything
(and, in checked mode, before the ranks compare their arguments, so a bad value on one rank
makes every rank raise); an invalid value raises ``ValueError`` naming the variable and the
value.  No module here imports the rest of mpicoll at import time (the schedules use it too).
"""

from __future__ import annotations

import os

from ..algorithms.collectives import BY_NAME
from ..algorithms.schedule import DEFAULT_SEGMENT_BYTES

__all__ = ["DEFAULT_SEGMENT_BYTES", "RANKS_PER_NODE_VAR", "SEGMENT_VAR", "algorithm_var",
           "check_env_algorithm", "env_algorithm", "ranks_per_node", "segment_bytes"]

#: The variable that sets the segment size in bytes.
SEGMENT_VAR = "MPICOLL_SEGMENT_SIZE"

#: The variable that emulates nodes of k consecutive ranks.
RANKS_PER_NODE_VAR = "MPICOLL_RANKS_PER_NODE"


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
    from ..algorithms import registry

    try:
        registry.get(collective, name)
    except ValueError as exc:
        raise ValueError(f"{algorithm_var(collective)}={name!r}: {exc}") from None
    return name
