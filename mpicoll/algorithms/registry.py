"""The algorithm catalog: one entry per hand-rolled algorithm.

Every p2p algorithm is registered here exactly once, by the ``@algorithm`` decorator on its
schedule in ``mpicoll/algorithms/<collective>.py``.  The CLI (``mpicoll algorithms``), the
algorithm table in docs/algorithms.md, the bench, ``verify`` and the tests all read this
registry; nothing else lists algorithms.  This plays the part of MPICH's ``coll_algorithms.txt``.

Costs use the Hockney alpha-beta-gamma model (Thakur, Rabenseifner & Gropp, IJHPCA 19(1),
2005): ``alpha`` seconds per message, ``beta`` seconds per byte sent, ``gamma`` seconds per
byte reduced.  ``n`` is in bytes; its meaning per collective is the record's ``size_meaning``
(:mod:`mpicoll.algorithms.collectives`).  Each algorithm's cost is written once, as a
:class:`Cost` (one expression): the text the CLI and the docs show (:attr:`Algorithm.formula`)
and the function the model evaluates (:attr:`Algorithm.cost`, :attr:`Algorithm.cost2`) are both
made from it, and the decorator appends it to the schedule's docstring.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .collectives import BY_NAME, NAMES
from .schedule import DEFAULT_SEGMENT_BYTES

__all__ = [
    "COLLECTIVES",
    "Cost",
    "Param",
    "Algorithm",
    "RestrictionError",
    "algorithm",
    "algorithms",
    "get",
    "lg",
    "clg",
    "clgk",
    "choose",
    "known",
    "select",
    "twins",
    "variants",
]

#: Every collective of the API, in the order the docs list them (the names of
#: :data:`mpicoll.algorithms.collectives.RECORDS`, which holds each one's facts).
COLLECTIVES: tuple[str, ...] = NAMES

#: Restriction names, with the sentence an error shows.
RESTRICTIONS: dict[str, str] = {
    "pof2": "needs a power-of-two number of ranks",
    "commutative": "needs a commutative op",
    "count_ge_p": "needs count >= number of ranks",
    "no_in_place": "does not support MPI.IN_PLACE",
    "uniform": "needs equal counts on every rank",
    "two_ranks": "needs at most two ranks (Open MPI's two_proc forms)",
}


class RestrictionError(ValueError):
    """A forced algorithm cannot run on this call (names the restriction)."""


def lg(p: int) -> float:
    """log2(p) (0 for p <= 1)."""
    return math.log2(p) if p > 1 else 0.0


def clg(p: int) -> int:
    """ceil(log2(p)) (0 for p <= 1)."""
    return (p - 1).bit_length() if p > 1 else 0


def clgk(p: int, k: int) -> int:
    """ceil(log_k(p)) (0 for p <= 1): the rounds of a radix-k tree or dissemination."""
    rounds, reach = 0, 1
    while reach < p:
        reach *= k
        rounds += 1
    return rounds


@dataclass(frozen=True)
class Param:
    """One integer parameter of a parameterised algorithm (a radix k, a segment size).

    Users spell the algorithm ``name`` (every parameter at its default) or ``name:v1[:v2...]``
    (values in the order of the algorithm's ``params``): ``knomial:4``, ``pipelined_tree:2:8192``;
    the same spelling in the API (``algorithm=``), the CLI (``-a``) and the environment.  The
    schedule takes each parameter as a keyword-only argument with the same default; the cost
    expression reads it by name.  A parameter named ``seg`` is a segment size in bytes whose
    default 0 means the engine's (``MPICOLL_SEGMENT_SIZE``); when nonzero it is the cost's ``s``.

    Attributes:
        name: the keyword (``k``, ``seg``).
        default: the value of the bare name.
        lo, hi: the accepted range, inclusive (ValueError outside it, on every rank alike: the
            name is an argument every rank passes).
        doc: what it is, for ``mpicoll algorithms`` and the docs.
        examples: values the tests try besides the default.
    """

    name: str
    default: int
    lo: int
    hi: int
    doc: str = ""
    examples: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        """``k=2 (2..64)`` as the listing shows it."""
        return f"{self.name}={self.default} ({self.lo}..{self.hi})"


CostFn = Callable[[int, float, float, float, float], float]


def overlapped(rounds: float, t: float, w: float) -> float:
    """Seconds for ``rounds`` rounds of ``t`` seconds on the wire, each followed by ``w``
    seconds of local work that runs while the next round is in flight (the last one's after
    it): ``t + (rounds-1) max(t, w) + w``; 0 for no rounds."""
    return t + (rounds - 1) * max(t, w) + w if rounds > 0 else 0.0

#: Conditions under which a cost is exact for the simulator's model (see :class:`Cost`).
EXACT_WHEN: dict[str, str] = {
    "pof2": "p is a power of two",
    "even": "every block holds the same number of elements (count divisible by p and by p')",
    "one_peer": "p <= 2 (with more peers the simulator's ports serialise a round's messages "
                "greedily, in post order, where the formula assumes the best order)",
    "whole_segments": "n is at most one segment or a whole number of segments (for the "
                      "segmented reductions: what each step sends)",
    "full_nodes": "every node holds ranks_per_node ranks (ranks_per_node divides p)",
}

# Display forms of the expression language (Python syntax evaluated, math shown).
_SHOW = (
    (re.compile(r"\bclg\(([^()]*)\)"), r"ceil(lg \1)"),
    (re.compile(r"\blg\((\w+)\)"), r"lg \1"),
    (re.compile(r"\bP\b"), "p'"),
    (re.compile(r"\s*\*\s*"), " "),
)


def _show(expr: str) -> str:
    for pat, rep in _SHOW:
        expr = pat.sub(rep, expr)
    return expr


class Cost:
    """One algorithm's alpha-beta-gamma cost, written once as an expression.

    ``expr`` is a Python expression that reads as the formula: ``*`` is shown as a space,
    ``lg(p)`` as ``lg p``, ``clg(p)`` as ``ceil(lg p)``, ``P`` as ``p'``.  Flat costs use ``p``,
    ``n`` (bytes, see the record's ``size_meaning``), ``alpha``, ``beta``, ``gamma``, ``P`` (the
    largest power of two <= p), ``fold`` (1 if p is not a power of two, else 0) and ``s`` (segment
    bytes).  Two-level costs (``two_level=True``, node-aware algorithms) use ``alpha_i``,
    ``beta_i`` (inside a node), ``alpha_o``, ``beta_o`` (between nodes), ``gamma``, ``k`` (ranks
    per node, at most p), ``N`` (nodes) and ``s``; the flat cost of such an algorithm is its
    two-level cost with one rank per node (what the simulator runs when no nodes are given).

    ``overlapped(R, t, w)`` is ``t + (R-1) max(t, w) + w``: R rounds that each take ``t`` on the
    wire, each followed by ``w`` of local work that runs while the next round is in flight
    (segmented schedules, :class:`~mpicoll.algorithms.schedule.Overlap`).

    Args:
        expr: the expression.
        let: ``(name, expression)`` definitions evaluated in order before ``expr`` (each may
            use the ones before it), shown after the formula as ``name = expression``.
        where: definitions shown after the formula (e.g. ``"s = segment bytes"``).
        exact: names from :data:`EXACT_WHEN`: the simulator's critical path equals the cost
            when all hold (and always when empty).
        bound: elsewhere, ``|simulated - cost| <= bound * cost`` (relative; 0 when exact
            everywhere); a number, or an expression in ``p``.
        extra: names usable in ``expr`` besides the standard ones (helper functions).
    """

    def __init__(self, expr: str, *, let: tuple[tuple[str, str], ...] = (), where: str = "",
                 exact: tuple[str, ...] = (), bound: float | str = 0.0, two_level: bool = False,
                 extra: dict[str, Any] | None = None) -> None:
        for e in exact:
            if e not in EXACT_WHEN:
                raise KeyError(f"unknown exactness condition {e!r}")
        self.expr = expr
        self.where = where
        self.exact = tuple(exact)
        self.bound = bound
        self.two_level = two_level
        self.let = tuple(let)
        self._code = compile(expr, f"<cost {expr}>", "eval")
        self._let = tuple((k, compile(v, f"<cost {k} = {v}>", "eval")) for k, v in let)
        self._names: dict[str, Any] = {"lg": lg, "clg": clg, "clgk": clgk, "min": min,
                                       "max": max, "ceil": math.ceil, "overlapped": overlapped,
                                       **(extra or {})}
        #: parameter values (:class:`Param`) the expression reads, set by :meth:`bind`
        self.values: dict[str, int] = {}

    def bind(self, values: dict[str, int]) -> Cost:
        """This cost with the parameters ``values`` (name -> value) set."""
        import copy

        bound = copy.copy(self)
        bound.values = dict(values)
        return bound

    @property
    def segment_bytes(self) -> int:
        """The cost's ``s``: the ``seg`` parameter where set, else the default segment size."""
        return self.values.get("seg") or DEFAULT_SEGMENT_BYTES

    @property
    def text(self) -> str:
        """The formula as the CLI and README show it."""
        parts = [_show(self.expr)]
        if self.let:
            parts.append(", ".join(f"{k} = {_show(v)}" for k, v in self.let))
        if self.where:
            parts.append(self.where)
        return "; ".join(parts)

    def _eval(self, **names: Any) -> float:
        env: dict[str, Any] = {"__builtins__": {}}
        ns = {**self._names, **self.values, **names}
        for k, code in self._let:
            ns[k] = eval(code, env, ns)
        return float(eval(self._code, env, ns))

    def __call__(self, p: int, n: float, alpha: float, beta: float, gamma: float) -> float:
        """Seconds on p ranks for n bytes under the flat model (alpha, beta, gamma)."""
        if self.two_level:
            m = _Flat(alpha, beta, gamma)
            return self.two(p, n, m, m, 1)
        pp = 1 << (p.bit_length() - 1) if p > 0 else 1
        return self._eval(p=p, n=n, alpha=alpha, beta=beta, gamma=gamma, P=pp,
                          fold=int(pp != p), s=self.segment_bytes)

    def two(self, p: int, n: float, intra: Any, inter: Any, ranks_per_node: int) -> float:
        """Seconds on p ranks in nodes of ``ranks_per_node`` (the last may hold fewer) under a
        two-level model (``intra``/``inter`` have ``alpha``, ``beta``, ``gamma``; reductions
        cost ``intra.gamma``, as in the simulator's ``TwoLevel``).  A flat cost is evaluated
        with the intra-node parameters if all ranks share one node, else the inter-node ones."""
        k = max(1, min(ranks_per_node, p))
        nn = -(-p // k)
        if not self.two_level:
            m = intra if nn == 1 else inter
            return self(p, n, m.alpha, m.beta, intra.gamma)
        return self._eval(p=p, n=n, k=k, N=nn, alpha_i=intra.alpha, beta_i=intra.beta,
                          alpha_o=inter.alpha, beta_o=inter.beta, gamma=intra.gamma,
                          s=self.segment_bytes)

    def exact_for(self, p: int, *, even: bool = True, whole_segments: bool = True,
                  full_nodes: bool = True) -> bool:
        """Whether the cost is exact for this call (see ``exact``)."""
        holds = {"pof2": p & (p - 1) == 0, "even": even, "whole_segments": whole_segments,
                 "full_nodes": full_nodes, "one_peer": p <= 2}
        return all(holds[e] for e in self.exact)

    def bound_at(self, p: int) -> float:
        """The relative bound where the cost is not exact, on p ranks."""
        if isinstance(self.bound, str):
            return float(eval(self.bound, {"__builtins__": {}}, {"p": p}))
        return self.bound

    def __repr__(self) -> str:
        return f"Cost({self.expr!r})"


@dataclass(frozen=True)
class _Flat:
    alpha: float
    beta: float
    gamma: float


@dataclass(frozen=True)
class Algorithm:
    """One hand-rolled algorithm of one collective.

    Attributes:
        collective: one of :data:`COLLECTIVES`.
        name: the field's name for it (``ring``, ``recursive_doubling``, ``bruck``, ...).
        schedule: the generator function (see :mod:`mpicoll.schedule`).
        formula: the alpha-beta-gamma cost as text, ``n`` in bytes (see
            :attr:`~mpicoll.algorithms.collectives.Collective.size_meaning`).
        cost: ``cost(p, n, alpha, beta, gamma) -> seconds``, the same formula as code.
        restrictions: names from :data:`RESTRICTIONS`.
        source: paper or library the algorithm follows.
        model: the :class:`Cost` both ``formula`` and ``cost`` come from (None for an entry made
            by hand with a bare function).
        params: the :class:`Param` s the algorithm takes (empty for most).
        base: the registered name (``knomial`` for ``knomial:4``).
        values: the parameter values this entry runs with (the defaults for the bare name).
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
    model: Cost | None = field(default=None, compare=False)
    params: tuple[Param, ...] = ()
    base: str = ""
    values: tuple[int, ...] = ()

    def bind(self, values: tuple[int, ...]) -> Algorithm:
        """This algorithm with its parameters set to ``values`` (in the order of ``params``;
        missing trailing ones take their defaults), named ``base:v1:v2...``; its schedule
        takes them as keywords.

        Raises:
            ValueError: more values than parameters, or a value outside its range.
        """
        import functools

        if len(values) > len(self.params):
            raise ValueError(f"{self.collective} algorithm {self.base!r} takes "
                             f"{len(self.params)} parameter(s) "
                             f"({', '.join(q.text for q in self.params) or 'none'}), "
                             f"got {len(values)}")
        full = tuple(values) + tuple(q.default for q in self.params[len(values):])
        for q, v in zip(self.params, full, strict=False):
            if not q.lo <= v <= q.hi:
                raise ValueError(f"{self.collective} algorithm {self.base!r}: {q.name} = {v} "
                                 f"out of range {q.lo}..{q.hi} ({q.doc})")
        if full == self.values:
            return self
        kw = {q.name: v for q, v in zip(self.params, full, strict=False)}
        model = self.model.bind(kw) if self.model is not None else None
        name = ":".join([self.base, *(str(v) for v in values)])
        schedule = functools.wraps(self.schedule)(functools.partial(self.schedule, **kw))
        return replace(self, name=name, schedule=schedule,
                       cost=model if model is not None else self.cost, model=model,
                       values=full)

    @property
    def examples(self) -> list[Algorithm]:
        """This algorithm at its parameters' example values (one parameter varied at a time,
        the others at their defaults): what the tests run besides the default."""
        out = []
        for i, q in enumerate(self.params):
            for v in q.examples:
                if v != q.default:
                    vals = (*tuple(x.default for x in self.params[:i]), v)
                    out.append(self.bind(vals))
        return out

    def cost2(self, p: int, n: float, intra: Any, inter: Any, ranks_per_node: int) -> float:
        """Seconds under a two-level model (see :meth:`Cost.two`); an entry without a
        :class:`Cost` falls back to its flat cost with the inter-node parameters."""
        if self.model is None:
            return self.cost(p, n, inter.alpha, inter.beta, intra.gamma)
        return self.model.two(p, n, intra, inter, ranks_per_node)

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
                or (r == "two_ranks" and p > 2)
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
    cost: Cost,
    restrictions: tuple[str, ...] = (),
    source: str = "",
    auto: bool = True,
    params: tuple[Param, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a schedule as algorithm ``name`` of one or more collectives.

    ``params`` are the algorithm's :class:`Param` s: the schedule takes each as a keyword-only
    argument with the same default, the cost expression reads each by name.  The schedule's
    docstring gets the rendered cost, the parameters, the restrictions and the source
    appended, so ``help()`` shows them without the docstring retyping them."""
    if isinstance(collectives, str):
        collectives = (collectives,)

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        import inspect

        sig = inspect.signature(fn).parameters
        for q in params:
            kw = sig.get(q.name)
            if kw is None or kw.kind != kw.KEYWORD_ONLY or kw.default != q.default:
                raise TypeError(f"{name}: parameter {q.name!r} must be a keyword-only argument "
                                f"of the schedule with default {q.default}")
        bound = cost.bind({q.name: q.default for q in params})
        _document(fn, collectives, bound, restrictions, source, params)
        for coll in collectives:
            if coll not in _REGISTRY:
                raise KeyError(f"unknown collective {coll!r}")
            if name in _REGISTRY[coll]:
                raise KeyError(f"{coll} algorithm {name!r} registered twice")
            for r in restrictions:
                if r not in RESTRICTIONS:
                    raise KeyError(f"unknown restriction {r!r}")
            _REGISTRY[coll][name] = Algorithm(
                coll, name, fn, cost.text, bound, tuple(restrictions), source,
                (fn.__doc__ or "").strip().split("\n")[0], auto, bound, tuple(params), name,
                tuple(q.default for q in params),
            )
        return fn

    return deco


def _document(fn: Callable[..., Any], collectives: tuple[str, ...], cost: Cost,
              restrictions: tuple[str, ...], source: str, params: tuple[Param, ...]) -> None:
    """Append cost, restrictions and source to ``fn.__doc__`` (once per schedule)."""
    import inspect

    doc = inspect.cleandoc(fn.__doc__ or "")
    n = "; ".join(f"{c}: {BY_NAME[c].size_meaning}" for c in collectives)
    lines = [doc, "", f"Cost: {cost.text}  (n = {n})."]
    if params:
        lines.append("Parameters (spelled ``name:" + ":".join(q.name for q in params) +
                     "``): " + "; ".join(f"{q.text}: {q.doc}" for q in params) + ".")
    lines += [
             "Restrictions: " + (", ".join(RESTRICTIONS[r] for r in restrictions) or "none") + "."]
    if cost.exact:
        within = (f"{cost.bound:.0%}" if isinstance(cost.bound, float)
                  else f"a factor {_show(cost.bound)}")
        lines.append("Exact for the simulator when " +
                     " and ".join(EXACT_WHEN[e] for e in cost.exact) +
                     f"; within {within} otherwise.")
    if source:
        lines.append(f"Source: {source}.")
    fn.__doc__ = "\n".join(lines) + "\n"


def _load() -> None:
    from .. import algorithms  # noqa: F401  (registers every schedule)


def algorithms(collective: str) -> list[Algorithm]:
    """Every registered algorithm of ``collective``, in registration order."""
    _load()
    if collective not in _REGISTRY:
        raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}")
    return list(_REGISTRY[collective].values())


def variants(collective: str) -> list[Algorithm]:
    """Every algorithm of ``collective`` and, after each parameterised one, its bindings at
    its parameters' example values (:attr:`Algorithm.examples`): what the tests sweep."""
    return [v for a in algorithms(collective) for v in (a, *a.examples)]


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
    hit = table.get(name)
    if hit is not None:
        return hit
    base, sep, rest = name.partition(":")
    if base not in table:
        raise ValueError(
            f"unknown {collective} algorithm {name!r}; expected one of {sorted(table)} or 'auto'"
        )
    key = (collective, name)
    bound = _BOUND.get(key)
    if bound is None:
        fields = rest.split(":") if sep else []  # "knomial:" is a typo, not the defaults
        if all(re.fullmatch(r"-?[0-9]+", v) for v in fields):
            values = tuple(int(v) for v in fields)
        else:
            raise ValueError(f"{collective} algorithm {name!r}: parameters are integers after "
                             f"the name, ':'-separated ({base}:"
                             f"{':'.join(q.name for q in table[base].params) or '-'})")
        bound = _BOUND[key] = table[base].bind(values)
    return bound


#: bound parameterised algorithms by (collective, name as spelled): one object per spelling,
#: so the plan caches keyed by the algorithm see the same one at every call
_BOUND: dict[tuple[str, str], Algorithm] = {}


def known(collective: str, name: str) -> bool:
    """Whether ``name`` (``ring``, ``knomial:4``) is a valid algorithm of ``collective``."""
    try:
        get(collective, name)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Default ("auto") selection: one rule per collective, MPICH-like static thresholds.

AutoRule = Callable[[int, int, bool], str]
_AUTO: dict[str, AutoRule] = {}


def default_rule(*collectives: str) -> Callable[[AutoRule], AutoRule]:
    """Decorator registering ``rule(p, nbytes, commutative) -> name`` as the static default.
    A rule reads only those three values, which every rank shares (``nbytes``: the type
    signature's size in bytes, see :func:`choose`)."""

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
    """The algorithm ``"auto"`` runs: the measured selection table's pick where one is loaded
    (:mod:`mpicoll.model.selection`) and covers the call, else the static rule's pick, or, if
    a calibrated model is loaded (:mod:`mpicoll.model`), the lowest predicted time; never one
    whose restrictions the call breaks (the first applicable one in registration order is the
    fallback).

    It reads only values every rank shares, so every rank picks the same algorithm: ``p``,
    ``nbytes`` (the message's type signature in bytes, count x the datatype's size: the same
    on every rank even where the ranks pass different datatypes and counts of one signature;
    0 for the v-collectives), ``commutative`` (the op, which MPI requires to agree), the
    model (agreed at construction) and, for the restrictions, ``in_place``/``uniform`` only
    where MPI requires them to agree; ``count`` is read by the ``count_ge_p`` restriction,
    which no algorithm has today (a rank's own element count is not shared: a new
    restriction on it must read a count of the signature's units).  Never the local count
    or element size.
    """
    _load()
    kw: dict[str, Any] = dict(commutative=commutative, count=count, in_place=in_place,
                              uniform=uniform)
    ok = [a for a in _REGISTRY[collective].values() if a.auto and a.why_not(p, **kw) is None]
    if not ok:
        raise RestrictionError(f"no {collective} algorithm applies to this call")
    from ..model import alphabeta as model
    from ..model import selection

    table = selection.current()
    if table is not None:  # measured on this machine (mpicoll tune --emit mpicoll)
        picked = table.pick(collective, p, nbytes)
        base = (picked or "").partition(":")[0]  # a parameterised name: pipeline:65536
        for a in ok:
            if picked is not None and a.name == base:
                return get(collective, picked) if picked != base else a
    m = model.current()
    if m is not None:  # the formulas take one line: the one of a message of nbytes
        alpha, beta = m.line(nbytes)
        return min(ok, key=lambda a: a.cost(p, float(nbytes), alpha, beta, m.gamma))
    rule = _AUTO.get(collective)
    if rule is not None:
        name = rule(p, nbytes, commutative)
        base = name.partition(":")[0]
        for a in ok:
            if a.name == base:
                return get(collective, name) if name != base else a
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


def twins(collective: str, name: str) -> dict[str, str | None]:
    """The MPI libraries' own algorithm that is p2p algorithm ``name``'s twin, per library
    (``{"mpich": "ring", "openmpi": "ring"}``; None where none): the table of :mod:`.twins`."""
    from .twins import twin

    get(collective, name)
    return {lib: twin(collective, name, lib) for lib in ("mpich", "openmpi")}
