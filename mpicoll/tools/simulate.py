"""``mpicoll.simulate`` and ``mpicoll simulate``: collective calls simulated on p ranks.

:func:`simulate` runs one call as a user would make it;
the ``simulate`` command (:func:`run`) predicts the time and traffic of every algorithm at every
message size, and bench's predicted column comes from :func:`predict_us`.

Builds every rank's mpi4py-style arguments, checks and parses them as the backends do
(:mod:`mpicoll.backends.args`), picks the algorithm, and runs the schedules on the simulator
(:mod:`mpicoll.engines.sim`: the vector engine where it applies, else per rank).  The
environment (``MPICOLL_RANKS_PER_NODE``, ``MPICOLL_SEGMENT_SIZE``) is read here, once.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import numpy as np
from mpi4py import MPI

from ..algorithms import registry
from ..algorithms.collectives import RECORDS
from ..algorithms.datatypes import is_derived
from ..algorithms.native_defaults import LIBRARIES, library_default
from ..algorithms.schedule import Schedule
from ..backends import env as _env
from ..backends.args import PARSERS, Call, select
from ..engines.batch import run_batch, run_classes
from ..engines.network import PLACEMENTS, Network, parse_topology
from ..engines.sim import NotVectorizableError, SimResult, Simulator, TwoLevel
from ..engines.vector import run_vector
from ..model.alphabeta import Model
from . import cases as _cases
from . import dtypes as _dtypes
from . import report
from .cases import count_for
from .harness import Progress, usable_cpus
from .options import (
    DEFAULT_COLLECTIVES,
    DEFAULT_SIZES,
    algorithms_of,
    output_file_problem,
    parse_sizes,
    resolve_model,
    selection,
)

if TYPE_CHECKING:
    from .cases import Case

__all__ = [
    "SCHEMA_PATH",
    "SIMULATE_PROGRESS_RANKS",
    "SYMMETRIC",
    "add_arguments",
    "check_arguments",
    "environment_problem",
    "case_of",
    "make_args",
    "native_rows",
    "predict_rows",
    "predict_us",
    "run",
    "simulate",
    "simulation_model",
    "simulation_tables",
]


# ---------------------------------------------------------------------------------------------
# Each rank's arguments: the same mpi4py-style calls a user makes, built by the one builder
# (:class:`mpicoll.tools.cases.Case`) that bench and verify use.


def _op_name(op: Any) -> str:
    """The :data:`mpicoll.tools.cases.OPS` name whose inputs suit ``op`` (a user op: those of
    ``user`` if it commutes, else the digits of ``noncomm``)."""
    for name in _dtypes.OPS:
        if name not in ("user", "noncomm") and _dtypes.mpi_op(name) == op:
            return name
    return "user" if op.Is_commutative() else "noncomm"


def case_of(collective: str, p: int, rank: int, count: int, dtype: Any, *,
            op: MPI.Op = MPI.SUM, root: int = 0, in_place: bool = False,
            uniform: bool = False) -> _cases.Case:
    """The :class:`~mpicoll.tools.cases.Case` the simulator runs on rank ``rank`` (not built).

    ``count`` is the collective's count argument (per block for the block collectives); the
    v-variants have uneven counts (:meth:`~mpicoll.tools.cases.Case.counts`, some zero) unless
    ``uniform``, their blocks packed; ``op`` is passed as it is (a user op too).
    """
    dt = np.dtype(dtype)
    return _cases.Case(collective, count, _dtypes.dtype_name(dt), _op_name(op), root, in_place,
                       p, rank, uniform=uniform, gaps=False, op_object=op)


def make_args(collective: str, p: int, rank: int, count: int, dtype: Any, *,
              op: MPI.Op = MPI.SUM, root: int = 0, in_place: bool = False,
              uniform: bool = False,
              shared: dict[tuple[str, int, str], np.ndarray] | None = None,
              ) -> tuple[tuple[Any, ...], Any]:
    """The positional arguments rank ``rank`` passes to the collective's mpi4py method, and
    its output buffer (None where it has none): :func:`case_of`, built with data, or from the
    ``shared`` pool of a cost-only run (:meth:`mpicoll.tools.cases.Case.build`).
    """
    case = case_of(collective, p, rank, count, dtype, op=op, root=root, in_place=in_place,
                   uniform=uniform).build(shared)
    return case.positional(), case.output()


#: collectives without a root whose ranks all pass the same counts (each its own block aside):
#: the vector engine prepares rank 0's call for all ranks.  tests/unit/test_sim_vector.py
#: checks every algorithm of these against the per-rank engine.
SYMMETRIC = frozenset(c.name for c in RECORDS if c.symmetric)
#: (collective, p, algorithm, nodes) whose class walk was handed back (its ranks part into
#: too many classes, or it packs): the next call, at another size, walks them rank by rank
#: at once (a sweep of sizes pays the attempt once)
_UNCLASSED: set[tuple[str, int, str, Any]] = set()


def simulate(collective: str, p: int, count: int, *, algorithm: str = "auto",
             dtype: Any = np.float64, op: MPI.Op = MPI.SUM, root: int = 0,
             in_place: bool = False, model: Model | TwoLevel | None = None,
             data: bool = False,
             args: Sequence[tuple[Any, ...]] | None = None,
             nodes: Sequence[int] | None = None, engine: str = "auto",
             uniform: bool = False, network: Network | None = None,
             steady: bool = False, between: float = 0.0) -> SimResult:
    """Simulate one collective call on p ranks with one algorithm.

    Args:
        collective: registry name (``allreduce``, ...).
        p: number of ranks.
        count: elements per rank (per block for scatter/gather/allgather/alltoall/
            reduce_scatter_block; average per rank for the v-variants).
        algorithm: registry name or ``"auto"`` (the static defaults, or the loaded model's best).
        dtype: numpy dtype of the elements.
        op, root, in_place: as in the MPI call.
        model: cost model (default :data:`mpicoll.model.DEFAULT`).
        data: move and reduce real data (results in ``outputs``), else cost-only.
        args: per-rank argument tuples to use instead of the generated ones (data mode).
        nodes: node id of each rank (node-aware algorithms; default: from a
            :class:`TwoLevel` model or ``$MPICOLL_RANKS_PER_NODE``, else one rank per node).
        uniform: v-variants: every block of ``count`` elements (default: uneven counts, as
            :func:`case_of` gives them).
        network: a :class:`mpicoll.engines.network.Network` (topology, placement, link
            contention, gap); its placement gives the nodes (``nodes`` must be None).  The
            result then has ``link_bytes`` and :meth:`~SimResult.busiest_link`.
        steady: the steady state of calls made back to back (bench's loop): with a
            two-level model whose NICs are token buckets (:class:`TwoLevel`'s ``nic``), the
            call simulated again and again, carrying the buckets' state, until its time
            settles (:meth:`mpicoll.engines.sim.Simulator.run_steady`, ``between`` seconds
            between calls); the result is that call's.  Without a bucket a call leaves
            nothing behind: one call, as without ``steady``.
        engine: ``"auto"`` (the vector engine where it applies, else the batch engine where
            it applies, else per rank), ``"rank"`` (always per rank), ``"vector"`` or
            ``"batch"`` (raise :class:`NotVectorizableError` if it does not apply).  All give
            identical results; see :mod:`mpicoll.engines.sim`.

    Returns:
        a :class:`SimResult` (``engine`` says which engine ran).

    Raises:
        ValueError / TypeError: bad arguments, as the MPI backends raise them.
        mpicoll.registry.RestrictionError: a forced algorithm that cannot run on this call.
        DeadlockError: the schedule never completes (a bug in an algorithm).
        NotVectorizableError: ``engine="vector"`` on a call the vector engine cannot run.
    """
    if engine not in ("auto", "rank", "vector", "batch"):
        raise ValueError(f"engine: expected 'auto', 'rank', 'vector' or 'batch', got {engine!r}")
    if collective == "alltoallw" and args is not None and any(
            is_derived(t) for a in args for spec in a[:2] if isinstance(spec, list)
            for t in spec[-1]):
        raise TypeError("simulate: alltoallw with a derived datatype per peer is not "
                        "simulated (predefined ones are)")
    dt = np.dtype(dtype)

    def simulator() -> Simulator:
        return Simulator(p, model, data=data, nodes=nodes, ranks_per_node=_env.ranks_per_node(),
                         segment_bytes=_env.segment_bytes(), network=network)

    sim = simulator()
    p = sim.p  # a plain int
    shared: dict[tuple[str, int, str], np.ndarray] | None = None if data else {}
    parser = PARSERS[collective]

    def call_of(rank: int) -> tuple[Call, Any]:
        if args is not None:
            return parser(p, rank, *tuple(args[rank])), None
        a, out = make_args(collective, p, rank, count, dt, op=op, root=root,
                           in_place=in_place, uniform=uniform, shared=shared)
        return parser(p, rank, *a), out

    # the fast engines (vector, class walk) run rank 0's call for every rank: symmetric,
    # cost-only, generated arguments
    fast = engine != "rank" and not data and args is None and collective in SYMMETRIC
    if fast:
        call, _ = call_of(0)
        alg = select(call, p, algorithm)
    clocks: list[list[float]] = []  # prepared's, made once

    def prepared() -> list[float] | None:
        """Each rank's clock once it prepared its own call, where rank 0's preparation is not
        every rank's (uneven blocks: each copies its own block in); else None."""
        if call.uniform:
            return None
        if not clocks:
            s = simulator()
            for rank in range(p):
                c, _ = call_of(rank)
                c.prepare(s.context(rank, c.datatype, c.dtype))
            clocks.append(s.clock)
        return clocks[0]

    if engine in ("auto", "vector"):
        why = None
        if not fast:
            why = "data mode, given arguments and rooted or v-collectives run per rank"
        else:
            try:
                stats = run_vector(sim, alg.schedule, call.datatype, call.dtype, call.prepare,
                                   prepared())
            except (NotVectorizableError, TypeError, ValueError, AttributeError, IndexError) as e:
                why = f"{type(e).__name__}: {e}"
            else:
                return _result(collective, alg.name, p, call.nbytes, stats, [], "vector",
                               sim)
        if engine == "vector":
            raise NotVectorizableError(f"{collective}/{algorithm} on {p} ranks: {why}")
    outputs: list[Any] = []
    chosen_alg: registry.Algorithm | None = None
    nbytes = 0

    def make(s: Simulator) -> list[Schedule]:  # every rank's schedule, on simulator s
        nonlocal chosen_alg, nbytes
        gens = []
        outputs.clear()
        for rank in range(p):
            call, out = call_of(rank)
            chosen = select(call, p, algorithm)
            if chosen_alg is None:
                chosen_alg, nbytes = chosen, call.nbytes
            ctx = s.context(rank, call.datatype, call.dtype)
            gens.append(call.schedule(ctx, chosen))
            outputs.append(out)
        return gens

    if engine == "batch" or (engine == "auto" and not data and network is None
                             and not isinstance(sim.model, TwoLevel)):
        if fast:
            # a symmetric call walked by classes of ranks (a tree's by their place in it), up
            # to 4 lg p + 8 classes: past that, the per-rank walk below is as fast
            key = (collective, p, alg.name, sim.nodes)
            if key not in _UNCLASSED:
                try:
                    stats = run_classes(sim, alg.schedule, call.datatype, call.dtype,
                                        call.prepare, 4 * p.bit_length() + 8, prepared())
                except NotVectorizableError:
                    _UNCLASSED.add(key)  # walked rank by rank below (at other sizes too)
                else:
                    return _result(collective, alg.name, p, call.nbytes, stats, [], "batch",
                                   sim)
        try:
            stats = run_batch(sim, make(sim))
        except NotVectorizableError as e:
            if engine == "batch":
                raise NotVectorizableError(f"{collective}/{algorithm} on {p} ranks: {e}") from e
            sim = simulator()  # the walk spent the generators: the per-rank engine anew
        else:
            assert chosen_alg is not None
            return _result(collective, chosen_alg.name, p, nbytes, stats,
                           outputs if data else [], "batch", sim)
    stats = sim.run_steady(make, between) if steady else sim.run_schedules(make)
    assert chosen_alg is not None
    return _result(collective, chosen_alg.name, p, nbytes, stats, outputs if data else [],
                   "rank", sim)


def _result(collective: str, name: str, p: int, nbytes: int, stats: dict[str, np.ndarray],
            outputs: list[Any], engine: str, sim: Simulator) -> SimResult:
    time = float(stats.get("time", stats["clocks"].max()))  # run_steady's steady time
    return SimResult(collective, name, p, nbytes, time,
                     stats["clocks"], stats["messages_sent"], stats["bytes_sent"],
                     stats["messages_recv"], stats["bytes_recv"], stats["inter_bytes_sent"],
                     outputs, engine, stats.get("link_bytes"), sim.fabric, stats.get("calls"))


def predict_us(case: Case, algorithm: str, m: Model,
               nodes: Sequence[int] | None = None) -> float | None:
    """Predicted time (us) of ``case`` run by p2p ``algorithm`` (a registry name or ``auto``):
    a cost-only simulation (:func:`simulate`) of the same call, counts included, with model
    ``m``, on the ranks' nodes ``nodes`` (the node id of each rank, as the p2p backend that
    ran the call has them: its ``nodes``; None: as :func:`simulate` says); None if the
    simulator cannot run the call.
    """
    try:
        r = simulate(case.collective, case.size, case.count, algorithm=algorithm,
                     dtype=case.np_dtype, op=case.mpi_op if case.is_reduction else MPI.SUM,
                     root=case.root,
                     in_place=bool(case.in_place
                                   and case.collective in _cases.IN_PLACE_COLLECTIVES),
                     model=m, data=False, uniform=case.uniform, nodes=nodes)
    except Exception:  # a call the simulator does not model: no prediction
        return None
    return r.time * 1e6


# ---------------------------------------------------------------------------------------------
# the simulate command: predicted time and traffic of every algorithm, no MPI needed


#: The ``--json`` document's schema (``mpicoll-simulate/1``).
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "simulate.schema.json"

#: From this many simulated ranks, ``simulate`` shows its progress on stderr even when stderr is
#: not a terminal (each algorithm at each size may take seconds).
SIMULATE_PROGRESS_RANKS = 256
#: the most workers ``-j`` starts by default: one simulation at P = 4096 and 64 MiB holds
#: up to about 1.7 GB, so a many-core host is not filled by default
SIMULATE_JOBS = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what to simulate")
    g.add_argument("-n", "--ranks", type=int, default=None, metavar="P",
                   help="number of simulated ranks (default with a torus or a dragonfly: "
                   "its nodes x --ranks-per-node)")
    g.add_argument("-c", "--collective", nargs="+", metavar="NAME", default=None,
                   help=f"collective(s) (or 'all'); default: {' '.join(DEFAULT_COLLECTIVES)}")
    g.add_argument("-a", "--algorithm", nargs="+", metavar="NAME", default=["all"],
                   help="algorithms to compare: 'all' (default: every registered one; the "
                   "node-aware smp ones only with --ranks-per-node) or registry names "
                   "(comma-separated or several)")
    g.add_argument("-m", "--message-size", default=DEFAULT_SIZES, metavar="MIN:MAX",
                   help="message sizes S in bytes, as in bench: powers of two from MIN to MAX, "
                   f"K/M/G suffixes (default {DEFAULT_SIZES})")
    g.add_argument("--dtype", default="float64", help="element type (default float64)")
    g.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    g.add_argument("--library", choices=[*LIBRARIES, "none"], default=None,
                   help="whose default selection the 'native' column runs (the twin of the "
                   "algorithm that library picks at each size; 'none': no native column); "
                   "default: the library mpi4py is built on, else mpich")
    m = p.add_argument_group(
        "cost model (seconds per message, seconds per byte)",
        "Default: the calibrated model (mpicoll calibrate) if there is one, else the built-in "
        "defaults; --alpha/--beta/--gamma override single parameters.",
    )
    m.add_argument("--model", metavar="FILE", default=None,
                   help="a model file written by mpicoll calibrate")
    m.add_argument("--alpha", type=float, metavar="SECONDS", help="time per message")
    m.add_argument("--beta", type=float, metavar="SECONDS", help="time per byte sent")
    m.add_argument("--gamma", type=float, metavar="SECONDS", help="time per byte reduced")
    m.add_argument("--ranks-per-node", type=int, metavar="K", default=None,
                   help="two-level model: ranks r // K share a node, the model above is the "
                   "intra-node one; adds the node-aware smp algorithms and inter-node bytes")
    m.add_argument("--inter-alpha", type=float, metavar="SECONDS",
                   help="inter-node time per message (default: the intra-node alpha)")
    m.add_argument("--inter-beta", type=float, metavar="SECONDS",
                   help="inter-node time per byte (default: the intra-node beta)")
    n = p.add_argument_group(
        "network (docs/simulator.md#networks)",
        "A topology routes the messages between nodes over its links, with link contention.")
    n.add_argument("--topology", metavar="SPEC", default=None,
                   help="torus:AxB[xC], fattree:H[:RATIO] (H nodes per leaf switch), "
                   "dragonfly:G:A:H[:W] (groups, routers per group, nodes per router), "
                   "cluster:K (K ranks per node, a NIC each), or a file holding one")
    n.add_argument("--placement", metavar="HOW", default="block",
                   help=f"ranks on nodes: {', '.join(PLACEMENTS)} or a file of node ids, one "
                   "per rank (default block, --ranks-per-node ranks per node)")
    n.add_argument("--gap", type=float, metavar="SECONDS", default=None,
                   help="LogGP's g: a port is busy max(g, n beta) per message, a node's NIC "
                   "starts messages g apart (default: a port busy for the whole message)")
    n.add_argument("--hop-latency", type=float, metavar="SECONDS", default=0.0,
                   help="time per link a message crosses (default 0)")
    n.add_argument("--no-contention", action="store_true",
                   help="routes count bytes and hops but links are not shared")
    p.add_argument("-j", "--jobs", type=int, metavar="N", default=None,
                   help="processes simulating at once, each a (size, algorithm) at a time "
                   f"(default: the CPUs this process may use, at most {SIMULATE_JOBS}, from "
                   f"{SIMULATE_PROGRESS_RANKS} ranks up, else 1); the results do not depend "
                   "on it")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE",
                   help="write the model and every row, with per-rank clocks and traffic")
    o.add_argument("-q", "--quiet", action="store_true",
                   help=f"no progress line on stderr (shown on a terminal, or always from "
                   f"{SIMULATE_PROGRESS_RANKS} ranks up)")


def check_arguments(
    args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
) -> None:
    if args.ranks is None:
        fixed = args.topology is not None and args.topology.split(":")[0] in (
            "torus", "dragonfly")
        if not fixed:
            error("the following arguments are required: -n/--ranks (a --topology torus or "
                  "dragonfly without it fills its nodes)")
        try:
            args.ranks = parse_topology(args.topology, 1).nodes * (args.ranks_per_node or 1)
        except ValueError as exc:
            error(f"argument --topology: {exc}")
    if args.ranks < 1:
        error(f"argument -n/--ranks: need at least one rank, got {args.ranks}")
    if args.jobs is None:
        args.jobs = (min(len(usable_cpus()), SIMULATE_JOBS)
                     if args.ranks >= SIMULATE_PROGRESS_RANKS else 1)
    elif args.jobs < 1:
        error(f"argument -j/--jobs: need at least one, got {args.jobs}")
    colls, algs = selection(args, DEFAULT_COLLECTIVES, ["all"], ("all",), error)
    try:
        sizes = parse_sizes(args.message_size)
    except ValueError as exc:
        error(f"argument -m/--message-size: {exc}")
    dtypes = [d for d in _dtypes.DTYPES if d not in _dtypes.PAIR_DTYPES]  # predefined types only
    if args.dtype not in dtypes:
        error(f"argument --dtype: unknown dtype {args.dtype!r} (choose from {', '.join(dtypes)})")
    if any(c in _cases.ROOTED for c in colls) and not 0 <= args.root < args.ranks:
        error(f"argument --root: root {args.root} is not a rank (P = {args.ranks})")
    for name in ("alpha", "beta", "gamma", "inter_alpha", "inter_beta", "gap", "hop_latency"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v >= 0):
            error(f"argument --{name.replace('_', '-')}: must be a number >= 0 (seconds), "
                  f"got {v}")
    if args.ranks_per_node is None:
        if args.inter_alpha is not None or args.inter_beta is not None:
            error("argument --inter-alpha/--inter-beta: only with --ranks-per-node K")
    elif args.ranks_per_node < 1:
        error(f"argument --ranks-per-node: must be >= 1, got {args.ranks_per_node}")
    if args.topology is None:
        if args.placement != "block" or args.gap is not None or args.hop_latency or \
                args.no_contention:
            error("arguments --placement/--gap/--hop-latency/--no-contention: only with "
                  "--topology")
        args.network = None
    else:
        try:
            args.network = Network(args.topology, args.placement, args.ranks_per_node or 1,
                                   not args.no_contention, args.gap, args.hop_latency)
            args.network.fabric(args.ranks)
        except (ValueError, OSError) as exc:
            error(f"argument --topology/--placement: {exc}")
    try:  # the environment the schedules read (nodes, pipeline segments)
        _env.ranks_per_node()
        _env.segment_bytes()
    except ValueError as exc:
        error(str(exc))
    args.collectives, args.algorithms, args.sizes = colls, algs, sizes


def environment_problem(args: argparse.Namespace) -> str | None:
    if args.model:
        try:
            resolve_model(args.model)
        except ValueError as exc:
            return f"argument --model: {exc}"
    return output_file_problem("--json", args.json) if args.json else None


def simulation_model(
    args: argparse.Namespace,
) -> tuple[Model | TwoLevel, str, dict[str, Any]]:
    """The model of a ``simulate`` command line: ``(Model or TwoLevel, where from, as JSON)``.

    Base: ``--model FILE``, else the calibrated file, else the defaults; then ``--alpha``,
    ``--beta``, ``--gamma`` replace single parameters.  With ``--ranks-per-node K`` that is
    the intra-node model of a :class:`mpicoll.sim.TwoLevel` whose inter-node alpha and beta are
    ``--inter-alpha`` / ``--inter-beta`` (default: the intra-node ones).
    """
    base, source = resolve_model(args.model)
    given = {k: getattr(args, k) for k in ("alpha", "beta", "gamma")
             if getattr(args, k) is not None}
    if len(given) == 3:
        source = "command line"
    elif given:
        source += ", with " + ", ".join(f"--{k}" for k in given) + " from the command line"
    m = replace(base, **given)
    doc: dict[str, Any] = {**m.as_dict(), "source": source, "two_level": None}
    if args.ranks_per_node is None:
        return m, source, doc
    # given inter-node terms replace the measured message curve (fitted inside one node),
    # which would otherwise be read before alpha and beta
    given_inter = args.inter_alpha is not None or args.inter_beta is not None
    inter = replace(
        m,
        alpha=m.alpha if args.inter_alpha is None else args.inter_alpha,
        beta=m.beta if args.inter_beta is None else args.inter_beta,
        message_curve=() if given_inter else m.message_curve,
    )
    k = args.ranks_per_node
    doc["two_level"] = {"ranks_per_node": k, "nodes": -(-args.ranks // k),
                        "inter_alpha": inter.alpha, "inter_beta": inter.beta}
    return TwoLevel(k, m, inter), source, doc


def predict_rows(collective: str, p: int, sizes: Sequence[int], model: Model | TwoLevel,
                 algorithms: Sequence[str], *, dtype: str = "float64", root: int = 0,
                 per_rank: bool = False,
                 progress: Callable[[str], None] | None = None,
                 network: Network | None = None, steady: bool = False, jobs: int = 1
                 ) -> list[dict[str, Any]]:
    """Cost-only simulation of each named algorithm at each message size S (bytes, as bench).

    Returns one row per (size, algorithm), sizes in order (sizes giving the same count are
    merged): ``collective``, ``algorithm``, ``size_bytes`` (S of the count used), ``count``,
    ``status`` (``ok`` or ``n/a``), ``reason``, ``time_us``, ``best`` (fastest at that size;
    every one of a tie), max over ranks of ``messages_sent``, ``bytes_sent``,
    ``messages_recv``, ``bytes_recv``, the sum over ranks of ``inter_node_bytes``, and with
    ``per_rank`` the simulator's per-rank figures (:meth:`mpicoll.sim.SimResult.as_dict`).
    The count of a size is bench's (:func:`mpicoll.tools.cases.count_for`); for the v-variants S is
    nominal (count x P elements): the simulator gives the ranks uneven counts averaging count
    (:meth:`mpicoll.tools.cases.Case.counts`).  ``progress(text)``, if given, is called as each
    simulation starts (``allreduce 4K ring (3/40)``; with several jobs, as each ends).  With a
    ``network``, ``busiest_link`` and ``busiest_link_bytes`` name the link that carried the
    most bytes.  ``steady``: each call's steady state back to back (:func:`simulate`'s),
    ``calls`` how many it took.  ``jobs``: processes simulating at once (forked workers, the
    largest sizes first; the simulations are deterministic, so the rows are the same).
    """
    np_dtype = _dtypes.numpy_dtype(dtype)
    item = np_dtype.itemsize
    blocks = p if collective in _cases.BLOCK_COLLECTIVES else 1
    counts: list[int] = []
    for s in [0] if collective == "barrier" else sizes:
        c = count_for(collective, s, p, item)
        if c not in counts:
            counts.append(c)
    tasks = [(collective, p, count, count * blocks * item, name, np_dtype, root, model, network,
              steady, per_rank) for count in counts for name in algorithms]

    def label(k: int, n: int) -> str:  # task k, the n-th to start (serial) or end
        t = tasks[k]
        return f"{collective} {report.human_size(t[3])}B {t[4]} ({n}/{len(tasks)})"

    rows: list[dict[str, Any]] = []
    if jobs > 1 and len(tasks) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # forked: the workers inherit the imports (and call no MPI; they leave by os._exit)
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=fork) as pool:
            futures = {pool.submit(_row, *tasks[k]): k for k in reversed(range(len(tasks)))}
            got: dict[int, dict[str, Any]] = {}
            for done, f in enumerate(as_completed(futures), 1):
                got[futures[f]] = f.result()
                if progress is not None:
                    progress(label(futures[f], done))
        rows = [got[k] for k in range(len(tasks))]
    else:
        for k, task in enumerate(tasks):
            if progress is not None:
                progress(label(k, k + 1))
            rows.append(_row(*task))
    for i in range(0, len(rows), len(algorithms)):
        ok = [b for b in rows[i : i + len(algorithms)] if b["status"] == "ok"]
        if ok:
            t_min = min(b["time_us"] for b in ok)
            for b in ok:
                b["best"] = b["time_us"] <= t_min * (1 + 1e-9)
    return rows


def _row(collective: str, p: int, count: int, size: int, name: str, dtype: np.dtype,
         root: int, model: Model | TwoLevel, network: Network | None, steady: bool,
         per_rank: bool) -> dict[str, Any]:
    """One row of :func:`predict_rows` (``best`` still False)."""
    row: dict[str, Any] = {
        "collective": collective, "algorithm": name, "size_bytes": size,
        "count": count, "status": "ok", "reason": None, "time_us": None, "best": False,
        "messages_sent": None, "bytes_sent": None, "messages_recv": None,
        "bytes_recv": None, "inter_node_bytes": None, "per_rank": None,
        "busiest_link": None, "busiest_link_bytes": None, "calls": None,
    }
    try:
        r = simulate(collective, p, count, algorithm=name, dtype=dtype, root=root,
                     model=model, network=network, steady=steady)
    except (ValueError, TypeError) as exc:  # RestrictionError is a ValueError
        row.update(status="n/a", reason=str(exc))
        return row
    row.update(
        time_us=r.time * 1e6,
        messages_sent=int(r.messages_sent.max()),
        bytes_sent=int(r.bytes_sent.max()),
        messages_recv=int(r.messages_recv.max()),
        bytes_recv=int(r.bytes_recv.max()),
        inter_node_bytes=int(r.inter_bytes_sent.sum()),
        per_rank=r.as_dict() if per_rank else None,
        calls=None if r.calls is None else len(r.calls),
    )
    busiest = r.busiest_link()
    if busiest is not None:
        row.update(busiest_link=busiest[0], busiest_link_bytes=busiest[1])
    return row


def native_rows(collective: str, p: int, rows: Sequence[dict[str, Any]], library: str,
                model: Model | TwoLevel, *, dtype: str = "float64", root: int = 0,
                ranks_per_node: int = 1, per_rank: bool = False,
                network: Network | None = None) -> list[dict[str, Any]]:
    """The ``native`` rows of one collective: at each count of ``rows`` (:func:`predict_rows`'
    rows), the algorithm ``library`` runs by default there
    (:func:`mpicoll.algorithms.native_defaults.library_default`: ``native_algorithm``, its
    p2p ``twin``, ``note``: what the twin does not match) simulated as :func:`predict_rows`
    simulates the others (op SUM, not in place; the v-forms' uneven counts); ``status``
    ``n/a`` with the ``reason`` where the library's pick has no twin.  ``best`` stays False:
    the row is the library's, not a candidate."""
    np_dtype = _dtypes.numpy_dtype(dtype)
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    done = {(r["algorithm"], r["count"]): r for r in rows}  # the twin's own row, if simulated
    for r in rows:
        if r["count"] in seen:
            continue
        seen.add(r["count"])
        d = library_default(library, collective, p, r["count"], np_dtype.itemsize,
                            uniform=collective not in _cases.V_COLLECTIVES,
                            ranks_per_node=ranks_per_node)
        row = {**dict.fromkeys(r), "collective": collective, "algorithm": "native",
               "size_bytes": r["size_bytes"], "count": r["count"], "status": "n/a",
               "best": False, "library": library, "native_algorithm": d.native,
               "twin": d.p2p, "note": d.why, "source": d.source,
               "reason": d.why}
        if d.p2p is not None:
            try:
                sim = done.get((d.p2p, r["count"]))  # the same simulation: not run twice
                if sim is None or (per_rank and sim["per_rank"] is None):
                    [sim] = predict_rows(collective, p, [r["size_bytes"]], model, [d.p2p],
                                         dtype=dtype, root=root, per_rank=per_rank,
                                         network=network)
            except ValueError as exc:
                row["reason"] = str(exc)
            else:
                row.update({k: v for k, v in sim.items()
                            if k not in ("algorithm", "best", "reason")},
                           reason=sim["reason"] or d.why)
        out.append(row)
    return out


def _native_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Footnotes of the native column: the library's pick at each run of sizes."""
    native = [r for r in rows if r["algorithm"] == "native"]
    if not native:
        return []
    runs: list[tuple[int, int, dict[str, Any]]] = []
    for r in native:
        key = (r["native_algorithm"], r["twin"], r["note"])
        if runs and (runs[-1][2]["native_algorithm"], runs[-1][2]["twin"],
                     runs[-1][2]["note"]) == key:
            runs[-1] = (runs[-1][0], r["size_bytes"], runs[-1][2])
        else:
            runs.append((r["size_bytes"], r["size_bytes"], r))
    lines = [f"#   native: what {native[0]['library']} runs by default ({native[0]['source']}"
             "; docs: mpicoll.algorithms.native_defaults), simulated as its p2p twin:"]
    for lo, hi, r in runs:
        span = report.human_size(lo) + ("" if lo == hi else f"..{report.human_size(hi)}")
        twin = f"twin {r['twin']}" if r["twin"] else "no twin: n/a"
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(f"#     {span}B: {r['native_algorithm']} -> {twin}{note}")
    return lines


def simulation_tables(collective: str, rows: Sequence[dict[str, Any]],
                      two_level: bool, network: bool = False) -> str:
    """The text of one collective: predicted times (us) per size, ``*`` on the fastest, then
    the traffic of each algorithm at the largest size."""
    names: list[str] = []
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["algorithm"] not in names:
            names.append(r["algorithm"])
        by_size.setdefault(r["size_bytes"], {})[r["algorithm"]] = r
    lines = [f"# {collective}: S = {report.size_meaning(collective)}; predicted time (us), "
             "* = fastest at that size"]
    heads = ["size", "count", *names, "best"]
    units = ["(B)", "(elements)", *(["(us)"] * len(names)), ""]
    table = []
    for size, row in by_size.items():
        cells = [str(size), str(next(iter(row.values()))["count"])]
        for n in names:
            r = row[n]
            cells.append(report.fmt_us(r["time_us"]) + ("*" if r["best"] else " ")
                         if r["status"] == "ok" else "n/a ")
        bests = [n for n in names if row[n]["best"]]
        cells.append(", ".join(bests) or "-")
        table.append(cells)
    na: dict[str, str] = {}
    for r in rows:
        if r["status"] == "n/a" and r["algorithm"] != "native":
            na.setdefault(r["algorithm"], r["reason"])
    lines += report.table(heads, units, table, [f"#   {n}: n/a: {why}" for n, why in na.items()]
                          + _native_notes(rows))
    size = max(by_size)
    last = by_size[size]
    lines.append("")
    lines.append(f"# {collective} traffic at S = {report.human_size(size)} ({size} B), per rank "
                 "(max over ranks)" + ("; inter-node: bytes sent between nodes, all ranks"
                                       if two_level else ""))
    heads = ["algorithm", "time", "msgs sent", "bytes sent", "msgs recv", "bytes recv"]
    units = ["", "(us)", "", "(B)", "", "(B)"]
    if two_level:
        heads.append("inter-node")
        units.append("(B)")
    if network:
        heads += ["busiest_link", "link_bytes"]
        units += ["", "(B)"]
    table = []
    for n in names:
        r = last[n]
        if r["status"] != "ok":
            table.append([n, "n/a", *(["-"] * (len(heads) - 2))])
            continue
        cells = [n, report.fmt_us(r["time_us"]), str(r["messages_sent"]), str(r["bytes_sent"]),
                 str(r["messages_recv"]), str(r["bytes_recv"])]
        if two_level:
            cells.append(str(r["inter_node_bytes"]))
        if network:
            cells += [str(r["busiest_link"]), str(r["busiest_link_bytes"])]
        table.append(cells)
    lines += report.table(heads, units, table, [])
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    if comm.Get_rank() != 0:  # one process simulates every rank: the others have nothing to do
        return 0
    model, source, mdoc = simulation_model(args)
    two = args.ranks_per_node is not None
    p = args.ranks
    network: Network | None = args.network
    fabric = None if network is None else network.fabric(p)
    # stdout keeps only the tables (--json stays valid); the progress line goes to stderr
    progress = Progress(not args.quiet)
    progress.enabled = progress.enabled and (progress.tty or p >= SIMULATE_PROGRESS_RANKS)
    out.write(f"# mpicoll simulate: P={p} simulated ranks, dtype={args.dtype}, root={args.root}; "
              "cost-only simulation of the schedules (no MPI, no data)\n")
    base = model.intra if isinstance(model, TwoLevel) else model
    out.write(f"# model {source}: {report.describe_model(base)}\n")
    if isinstance(model, TwoLevel):
        tl = mdoc["two_level"]
        gbps = f"{1 / model.inter.beta / 1e9:.3g} GB/s" if model.inter.beta > 0 else "inf GB/s"
        out.write(f"# two-level: {tl['ranks_per_node']} ranks per node, {tl['nodes']} nodes; "
                  "intra-node: the model above; inter-node: alpha = "
                  f"{model.inter.alpha * 1e6:.3g} us, beta = {model.inter.beta * 1e9:.3g} ns/B "
                  f"({gbps})\n")
    if fabric is not None:
        d = fabric.describe()
        per_node = max(np.bincount(fabric.node_of)) if p else 0
        gap = "none" if d["gap_s"] is None else f"{d['gap_s'] * 1e6:.3g} us"
        contention = ("on (LogGOPSim's: a message's rate is its most loaded link's in its "
                      "round)" if d["contention"] else "off")
        out.write(f"# network: {d['topology']}, {d['nodes']} nodes, {d['links']} links, "
                  f"{d['placement']} placement (up to {per_node} ranks per node); contention "
                  f"{contention}; gap {gap}; hop latency {d['hop_s'] * 1e6:.3g} us\n")
    library = args.library
    if library is None:
        try:
            from .launcher import library as _library
            library = _library()[0]
        except ImportError:
            library = "mpich"
        library = library if library in LIBRARIES else "mpich"
    if library != "none":
        out.write(f"# native: the algorithm {library} picks by default, run as its p2p twin "
                  "(--library)\n")
    out.write("\n")
    all_rows: list[dict[str, Any]] = []
    for coll in args.collectives:
        names = algorithms_of(coll, args.algorithms, node_aware=two or (
            fabric is not None and len(set(fabric.nodes)) < p))
        if not names:
            out.write(f"# {coll}: none of the algorithms asked for (-a) is one of its own\n\n")
            continue
        try:
            rows = predict_rows(coll, p, args.sizes, model, names, dtype=args.dtype,
                                root=args.root, per_rank=bool(args.json),
                                progress=lambda text: progress.show(f"[mpicoll simulate] {text}"),
                                network=network, jobs=args.jobs)
            if library != "none":
                rows += native_rows(coll, p, rows, library, model, dtype=args.dtype,
                                    root=args.root, ranks_per_node=args.ranks_per_node or 1,
                                    per_rank=bool(args.json), network=network)
        finally:
            progress.clear()
        all_rows += rows
        out.write(simulation_tables(coll, rows, two, network is not None) + "\n")
        out.flush()
    if args.json:
        doc = {
            "schema": "mpicoll-simulate/1",
            "command_line": "mpicoll simulate " + " ".join(argv),
            "P": p, "dtype": args.dtype, "root": args.root, "sizes": args.sizes,
            "library": None if library == "none" else library,
            "model": mdoc,
            "network": None if fabric is None else fabric.describe(),
            "rows": all_rows,
        }
        Path(args.json).write_text(json.dumps(doc) + "\n")
        out.write(f"# wrote {args.json}\n")
    return 0

