"""The algorithm catalog: one entry per hand-rolled algorithm.

Every p2p algorithm is registered here exactly once, by the ``@algorithm`` decorator on its
schedule in ``mpicoll/algorithms/<collective>.py``.  The CLI (``mpicoll algorithms``), the
README's algorithm table, the bench, ``verify`` and the tests all read this registry; nothing
else lists algorithms.  This plays the part of MPICH's ``coll_algorithms.txt``.

Costs use the Hockney alpha-beta-gamma model (Thakur, Rabenseifner & Gropp, IJHPCA 19(1),
2005): ``alpha`` seconds per message, ``beta`` seconds per byte sent, ``gamma`` seconds per
byte reduced.  ``n`` is in bytes; its meaning per collective is given by :data:`SIZE_MEANING`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COLLECTIVES",
    "SIZE_MEANING",
    "Algorithm",
    "RestrictionError",
    "algorithm",
    "algorithms",
    "get",
    "lg",
    "clg",
    "choose",
    "select",
]

#: Every collective of the API, in the order the docs list them.
COLLECTIVES: tuple[str, ...] = (
    "barrier",
    "bcast",
    "scatter",
    "scatterv",
    "gather",
    "gatherv",
    "reduce",
    "allreduce",
    "reduce_scatter_block",
    "reduce_scatter",
    "allgather",
    "allgatherv",
    "alltoall",
    "alltoallv",
    "scan",
    "exscan",
    "alltoallw",
)

#: What ``n`` (bytes) means in each collective's cost formula.
SIZE_MEANING: dict[str, str] = {
    "barrier": "unused",
    "bcast": "message size",
    "scatter": "bytes at the root in all (p blocks)",
    "scatterv": "bytes at the root in all",
    "gather": "bytes at the root in all (p blocks)",
    "gatherv": "bytes at the root in all",
    "reduce": "vector size per rank",
    "allreduce": "vector size per rank",
    "reduce_scatter_block": "input vector size per rank (p blocks)",
    "reduce_scatter": "input vector size per rank",
    "allgather": "bytes gathered in all (p blocks)",
    "allgatherv": "bytes gathered in all",
    "alltoall": "bytes a rank sends in all (p blocks)",
    "alltoallv": "bytes a rank sends in all",
    "scan": "vector size per rank",
    "exscan": "vector size per rank",
    "alltoallw": "bytes a rank sends in all",
}

#: Restriction names, with the sentence an error shows.
RESTRICTIONS: dict[str, str] = {
    "pof2": "needs a power-of-two number of ranks",
    "commutative": "needs a commutative op",
    "count_ge_p": "needs count >= number of ranks",
    "no_in_place": "does not support MPI.IN_PLACE",
    "uniform": "needs equal counts on every rank",
}


class RestrictionError(ValueError):
    """A forced algorithm cannot run on this call (names the restriction)."""


def lg(p: int) -> float:
    """log2(p) (0 for p <= 1)."""
    return math.log2(p) if p > 1 else 0.0


def clg(p: int) -> int:
    """ceil(log2(p)) (0 for p <= 1)."""
    return (p - 1).bit_length() if p > 1 else 0


CostFn = Callable[[int, float, float, float, float], float]


@dataclass(frozen=True)
class Algorithm:
    """One hand-rolled algorithm of one collective.

    Attributes:
        collective: one of :data:`COLLECTIVES`.
        name: the field's name for it (``ring``, ``recursive_doubling``, ``bruck``, ...).
        schedule: the generator function (see :mod:`mpicoll.schedule`).
        formula: the alpha-beta-gamma cost as text, ``n`` in bytes (see :data:`SIZE_MEANING`).
        cost: ``cost(p, n, alpha, beta, gamma) -> seconds``, the same formula as code.
        restrictions: names from :data:`RESTRICTIONS`.
        source: paper or library the algorithm follows.
    """

    collective: str
    name: str
    schedule: Callable[..., Any]
    formula: str
    cost: CostFn
    restrictions: tuple[str, ...] = ()
    source: str = ""
    doc: str = field(default="", compare=False)
    #: considered by ``auto`` (node-aware algorithms run only when forced)
    auto: bool = True

    def why_not(
        self,
        p: int,
        *,
        commutative: bool = True,
        count: int | None = None,
        in_place: bool = False,
        uniform: bool = True,
    ) -> str | None:
        """The first restriction this call breaks, as a sentence, or None if it can run.

        Args:
            p: number of ranks.
            commutative: whether the op is commutative (reductions only).
            count: element count the ``count_ge_p`` restriction is checked against.
            in_place: whether the call uses ``MPI.IN_PLACE``.
            uniform: whether every rank's count is the same (v-variants).
        """
        for r in self.restrictions:
            bad = (
                (r == "pof2" and p & (p - 1) != 0)
                or (r == "commutative" and not commutative)
                or (r == "count_ge_p" and count is not None and count < p)
                or (r == "no_in_place" and in_place)
                or (r == "uniform" and not uniform)
            )
            if bad:
                return f"{self.collective} algorithm {self.name!r} {RESTRICTIONS[r]}"
        return None

    def check(self, p: int, **kw: Any) -> None:
        """Raise :class:`RestrictionError` if :meth:`why_not` finds a broken restriction."""
        why = self.why_not(p, **kw)
        if why is not None:
            raise RestrictionError(why)


_REGISTRY: dict[str, dict[str, Algorithm]] = {c: {} for c in COLLECTIVES}


def algorithm(
    collectives: str | tuple[str, ...],
    name: str,
    *,
    formula: str,
    cost: CostFn,
    restrictions: tuple[str, ...] = (),
    source: str = "",
    auto: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a schedule as algorithm ``name`` of one or more collectives."""
    if isinstance(collectives, str):
        collectives = (collectives,)

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for coll in collectives:
            if coll not in _REGISTRY:
                raise KeyError(f"unknown collective {coll!r}")
            if name in _REGISTRY[coll]:
                raise KeyError(f"{coll} algorithm {name!r} registered twice")
            for r in restrictions:
                if r not in RESTRICTIONS:
                    raise KeyError(f"unknown restriction {r!r}")
            _REGISTRY[coll][name] = Algorithm(
                coll, name, fn, formula, cost, tuple(restrictions), source,
                (fn.__doc__ or "").strip().split("\n")[0], auto,
            )
        return fn

    return deco


def _load() -> None:
    from .. import algorithms  # noqa: F401  (registers every schedule)


def algorithms(collective: str) -> list[Algorithm]:
    """Every registered algorithm of ``collective``, in registration order."""
    _load()
    if collective not in _REGISTRY:
        raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}")
    return list(_REGISTRY[collective].values())


def get(collective: str, name: str) -> Algorithm:
    """The algorithm ``name`` of ``collective``; ValueError listing the valid names if absent,
    TypeError if ``name`` is not a str."""
    _load()
    if not isinstance(name, str):
        raise TypeError(f"algorithm: expected an algorithm name (str), got "
                        f"{type(name).__name__} {name!r}")
    table = _REGISTRY.get(collective)
    if table is None:
        raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}")
    if name not in table:
        raise ValueError(
            f"unknown {collective} algorithm {name!r}; expected one of {sorted(table)} or 'auto'"
        )
    return table[name]


# ---------------------------------------------------------------------------------------------
# Default ("auto") selection: one rule per collective, MPICH-like static thresholds.

AutoRule = Callable[[int, int, bool], str]
_AUTO: dict[str, AutoRule] = {}


def default_rule(*collectives: str) -> Callable[[AutoRule], AutoRule]:
    """Decorator registering ``rule(p, nbytes, commutative) -> name`` as the static default."""

    def deco(fn: AutoRule) -> AutoRule:
        for c in collectives:
            _AUTO[c] = fn
        return fn

    return deco


def choose(
    collective: str,
    p: int,
    nbytes: int,
    *,
    commutative: bool = True,
    count: int | None = None,
    in_place: bool = False,
    uniform: bool = True,
) -> Algorithm:
    """The algorithm ``"auto"`` runs: the static rule's pick, or, if a calibrated model is
    loaded (:mod:`mpicoll.model`), the lowest predicted time; never one whose restrictions the
    call breaks (the first applicable one in registration order is the fallback).
    """
    _load()
    kw: dict[str, Any] = dict(commutative=commutative, count=count, in_place=in_place,
                              uniform=uniform)
    ok = [a for a in _REGISTRY[collective].values() if a.auto and a.why_not(p, **kw) is None]
    if not ok:
        raise RestrictionError(f"no {collective} algorithm applies to this call")
    from ..model import alphabeta as model

    m = model.current()
    if m is not None:
        return min(ok, key=lambda a: a.cost(p, float(nbytes), m.alpha, m.beta, m.gamma))
    rule = _AUTO.get(collective)
    if rule is not None:
        name = rule(p, nbytes, commutative)
        for a in ok:
            if a.name == name:
                return a
    return ok[0]


def select(collective: str, p: int, name: str | None, *, nbytes: int, commutative: bool = True,
           count: int | None = None, in_place: bool = False, uniform: bool = True) -> Algorithm:
    """The algorithm a call runs: ``name`` (checked against its restrictions) or, for None or
    ``"auto"``, :func:`choose`'s pick.

    Raises:
        TypeError: ``name`` is not a str (or None).
        ValueError: an unknown name.
        RestrictionError: a named algorithm this call cannot run (the message names why).
    """
    if name in (None, "auto"):
        return choose(collective, p, nbytes, commutative=commutative, count=count,
                      in_place=in_place, uniform=uniform)
    alg = get(collective, name)
    alg.check(p, commutative=commutative, count=count, in_place=in_place, uniform=uniform)
    return alg
