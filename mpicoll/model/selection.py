"""A measured selection table: which p2p algorithm ``algorithm="auto"`` runs, per collective,
P range and message size, as ``mpicoll tune --emit mpicoll`` writes it from a sweep.

File format (JSON)::

    {"schema": "mpicoll-selection/1", "source": "...",
     "rules": {"allreduce": [{"p_min": 2, "p_max": 2,
                              "sizes": [{"min_bytes": 0, "algorithm": "recursive_doubling"},
                                        {"min_bytes": 65536, "algorithm": "ring"}]}]}}

A call of ``collective`` on P ranks with a message of ``nbytes`` (the type signature's bytes,
as :func:`mpicoll.algorithms.registry.choose` reads it) runs the algorithm of the first rule
with ``p_min <= P <= p_max`` whose entry has the largest ``min_bytes <= nbytes`` (an entry
``"algorithm": null``, a rule ``mpicoll tune`` pruned: as without the table).  The table
is read from the file named by ``$MPICOLL_SELECTION`` (or set with :func:`use`) and is
preferred over the model; a call it does not cover, or whose chosen algorithm's restrictions
the call breaks, is chosen as without it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_ID", "Table", "current", "load", "use"]

SCHEMA_ID = "mpicoll-selection/1"
_ENV = "MPICOLL_SELECTION"


@dataclass
class Table:
    """A loaded selection table: collective -> ``[(p_min, p_max, [(min_bytes, name), ...])]``
    (sizes ascending)."""

    rules: dict[str, list[tuple[int, int, list[tuple[int, str | None]]]]]
    source: str = ""

    def pick(self, collective: str, p: int, nbytes: int) -> str | None:
        """The algorithm the table names for this call, or None where it has no rule (or a
        pruned one)."""
        for lo, hi, sizes in self.rules.get(collective, ()):
            if lo <= p <= hi:
                name = None
                for floor, alg in sizes:
                    if floor <= nbytes:
                        name = alg
                return name
        return None


def from_dict(doc: Any, where: str = "table") -> Table:
    """A :class:`Table` from the loaded JSON ``doc``.

    Raises:
        ValueError: not a selection table (wrong schema, a malformed rule, sizes not
            ascending or not starting at 0).
    """
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        raise ValueError(f"{where}: not a selection table (schema {SCHEMA_ID!r})")
    rules: dict[str, list[tuple[int, int, list[tuple[int, str | None]]]]] = {}
    try:
        for coll, blocks in doc["rules"].items():
            for b in blocks:
                sizes = [(int(e["min_bytes"]),
                          None if e["algorithm"] is None else str(e["algorithm"]))
                         for e in b["sizes"]]
                floors = [s for s, _ in sizes]
                if not sizes or floors[0] != 0 or floors != sorted(set(floors)):
                    raise ValueError(f"{where}: {coll} P {b['p_min']}..{b['p_max']}: sizes "
                                     "must start at 0 and ascend")
                rules.setdefault(coll, []).append((int(b["p_min"]), int(b["p_max"]), sizes))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: malformed rule ({exc!r})") from None
    return Table(rules, str(doc.get("source", "")))


def load(path: str | os.PathLike[str]) -> Table:
    """Read a table file (:func:`from_dict` raises ValueError on a bad one; OSError if
    unreadable)."""
    return from_dict(json.loads(Path(path).read_text()), str(path))


_current: Table | None = None
_loaded = False


def current() -> Table | None:
    """The table ``auto`` reads: set by :func:`use`, else the file named by
    ``$MPICOLL_SELECTION`` if set (read once); None: no table."""
    global _current, _loaded
    if not _loaded:
        _loaded = True
        if os.environ.get(_ENV):
            _current = load(os.environ[_ENV])
    return _current


def use(table: Table | None) -> None:
    """Make ``table`` the one ``auto`` reads in this process (None: none)."""
    global _current, _loaded
    _current, _loaded = table, True
