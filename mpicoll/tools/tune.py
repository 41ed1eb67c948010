"""``mpicoll tune``: selection files written from a sweep's measurements.

From the ``--json`` of ``mpicoll sweep`` (:mod:`.sweep`), per collective, P and message size
S, the fastest algorithm among those measured, written as:

* ``--emit mpich``: MPICH's JSON selection tree for ``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``
  (read at ``MPI_Init``; the tree of ``MPIR_<Coll>_impl``, so also set
  ``MPIR_CVAR_DEVICE_COLLECTIVES=none``, which the forced launches of the sweep ran under).
  The file replaces MPICH's built-in tree, and a collective it lacks has no algorithm at all,
  so the tree is complete: every collective MPICH selects through it (:data:`MPICH_SAFE`: the
  blocking, non-blocking and neighbourhood ones, intra- and inter-communicator) gets a branch,
  every list of siblings ends in a ``...=any`` key, and a measured choice with a restriction in
  MPICH (:data:`MPICH_RESTRICTED`: commutative ops only, built-in ops only, count >= the
  largest power of two <= P, P a power of two, in place or not) sits behind a guard node
  whose other branch is the collective's unrestricted algorithm, as MPICH's own
  ``maint/tuning/coll/mpir/generic.json`` does.  Candidates: the sweep's ``native:NAME``
  columns where MPICH said NAME ran (``native_ran``), NAME without extra parameters (a
  ``k`` the tree would have to give).  Conditions: ``comm_size<=P`` per measured P (the
  largest: ``comm_size=any``), then ``avg_msg_size<S'`` (bcast, reduce, allreduce: S is the
  per-rank vector, which is MPICH's avg_msg_size) or ``total_msg_size<S'`` (allgather,
  alltoall: S is the whole gathered / sent data, MPICH's total_msg_size), S' the next
  measured size whose choice differs; the other collectives get one algorithm per P (MPICH
  defines no message size for them).
* ``--emit ompi``: Open MPI's classic rules file for ``coll_tuned_dynamic_rules_filename``
  (with ``coll_tuned_use_dynamic_rules 1``): per collective its ID (``coll_base_functions.h``),
  per measured P a block whose first rule is at message size 0 and whose sizes ascend, each
  rule ``size alg faninout segsize`` (0 0: the algorithm's defaults).  Open MPI 5's tuned
  picks the block of the largest P <= the communicator's size, and in it the rule of the
  largest size <= the message size, which for the collectives written is bench's S (dtype size
  x count for bcast, reduce, allreduce; x P x count for allgather and alltoall).  The file has
  no op dimension: an algorithm that coll/base runs only for commutative ops
  (:func:`mpicoll.algorithms.twins.ompi_ran` says it falls back otherwise) is not a candidate
  for a reduction unless ``--commutative-only`` says the program reduces with commutative ops
  only.
* ``--emit mpicoll``: mpicoll's measured selection table (:mod:`mpicoll.model.selection`),
  which ``algorithm="auto"`` reads, in preference to the model, from the file named by
  ``$MPICOLL_SELECTION``: per collective and measured P the fastest p2p algorithm from each
  size up (candidates: the sweep's p2p columns other than ``auto``).

Every choice is printed with its measured time and the default's (the library's own choice;
for ``mpicoll``, ``auto``'s).  A rule is kept only where its algorithm is not slower than the
default beyond the measured noise (:func:`slower_beyond_noise`: its p10 above the default's
p90): the others are pruned, the file leaving those sizes to the default (Open MPI: algorithm
0, tuned's fixed decision; mpicoll: ``"algorithm": null``, the model's choice; MPICH, whose
user file replaces the whole tree: the collective's unrestricted algorithm of
:data:`MPICH_SAFE`), and adjacent sizes with the same rule are merged (:func:`ranges`).  The
pruned rules are listed.  ``--check`` reruns bench with the file loaded and without, prints
the verdict per size (:func:`check`), prunes the rules it finds slower too and rewrites the
file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TextIO

from .launcher import add_launch_options

__all__ = [
    "MPICH_RESTRICTED",
    "MPICH_SAFE",
    "OMPI_IDS",
    "add_arguments",
    "check_arguments",
    "choices",
    "emit_mpich",
    "emit_mpicoll",
    "emit_ompi",
    "ranges",
    "run",
]

#: Open MPI's collective IDs (``COLLTYPE_T`` of ``ompi/mca/coll/base/coll_base_functions.h``).
OMPI_IDS = {"allgather": 0, "allgatherv": 1, "allreduce": 2, "alltoall": 3, "alltoallv": 4,
            "alltoallw": 5, "barrier": 6, "bcast": 7, "exscan": 8, "gather": 9, "gatherv": 10,
            "reduce": 11, "reduce_scatter": 12, "reduce_scatter_block": 13, "scan": 14,
            "scatter": 15, "scatterv": 16}

#: Collectives whose message size in Open MPI's dynamic rules is bench's S (the others are
#: written with one rule at size 0 per P).
OMPI_SIZED = ("allgather", "allreduce", "alltoall", "bcast", "reduce")

#: MPICH's message-size condition per collective (csel.c's get_avg_msgsize /
#: get_total_msgsize) equal to bench's S; the others get no size condition.
MPICH_SIZE_KEY = {"allreduce": "avg_msg_size", "bcast": "avg_msg_size",
                  "reduce": "avg_msg_size", "allgather": "total_msg_size",
                  "alltoall": "total_msg_size"}

#: MPICH intra algorithms (blocking) and their restrictions (``src/mpi/coll/coll_algorithms.txt``):
#: commutative, builtin-op, size-ge-pof2 (count >= the largest power of two <= P),
#: power-of-two (P), inplace, noinplace; ``params``: needs extra parameters (never emitted).
MPICH_RESTRICTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("reduce", "reduce_scatter_gather"): ("size-ge-pof2", "builtin-op"),
    ("reduce", "smp"): ("commutative", "params"),
    ("allreduce", "smp"): ("commutative", "params"),
    ("allreduce", "recursive_multiplying"): ("commutative", "params"),
    ("allreduce", "reduce_scatter_allgather"): ("size-ge-pof2", "builtin-op"),
    ("allreduce", "ring"): ("commutative",),
    ("allreduce", "k_reduce_scatter_allgather"): ("commutative", "params"),
    ("allreduce", "tree"): ("params",),
    ("allreduce", "recexch"): ("params",),
    ("reduce_scatter", "pairwise"): ("commutative",),
    ("reduce_scatter", "recursive_halving"): ("commutative",),
    ("reduce_scatter", "noncommutative"): ("power-of-two",),
    ("reduce_scatter_block", "noncommutative"): ("power-of-two",),
    ("reduce_scatter_block", "pairwise"): ("commutative",),
    ("reduce_scatter_block", "recursive_halving"): ("commutative",),
    ("allgather", "recursive_doubling"): ("power-of-two",),
    ("allgatherv", "recursive_doubling"): ("power-of-two",),
    ("allgather", "k_brucks"): ("params",),
    ("allgather", "recexch_doubling"): ("params",),
    ("allgather", "recexch_halving"): ("params",),
    ("alltoall", "brucks"): ("noinplace",),
    ("alltoall", "k_brucks"): ("noinplace", "params"),
    ("alltoall", "pairwise"): ("noinplace",),
    ("alltoall", "pairwise_sendrecv_replace"): ("inplace",),
    ("alltoall", "scattered"): ("noinplace",),
    ("alltoallv", "pairwise_sendrecv_replace"): ("inplace",),
    ("alltoallv", "scattered"): ("noinplace",),
    ("alltoallw", "pairwise_sendrecv_replace"): ("inplace",),
    ("alltoallw", "scattered"): ("noinplace",),
    ("barrier", "smp"): ("params",),
    ("bcast", "smp"): ("params",),
    ("bcast", "tree"): ("params",),
    ("bcast", "pipelined_tree"): ("params",),
    ("scan", "smp"): ("commutative", "params"),
}


def _alg(coll: str, kind: str, name: str) -> dict[str, Any]:
    c = coll[0].upper() + coll[1:]
    return {f"algorithm=MPIR_{c}_{kind}_{name}": {}}


def _either(key: str, yes: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    return {f"{key}=yes": yes, f"{key}=any": other}


#: Per collective MPICH selects through its tree: the intra-communicator subtree that runs on
#: every call (the unrestricted algorithm; an in-place guard where there is none) and the
#: inter-communicator one (None: the collective has no inter form).
MPICH_SAFE: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "barrier": ({"algorithm=MPIR_Barrier_intra_k_dissemination": {"k=2": {}}},
                _alg("barrier", "inter", "bcast")),
    "bcast": (_alg("bcast", "intra", "binomial"),
              _alg("bcast", "inter", "remote_send_local_bcast")),
    "gather": (_alg("gather", "intra", "binomial"), _alg("gather", "inter", "linear")),
    "gatherv": ({"algorithm=MPIR_Gatherv_allcomm_linear": {}},
                {"algorithm=MPIR_Gatherv_allcomm_linear": {}}),
    "scatter": (_alg("scatter", "intra", "binomial"), _alg("scatter", "inter", "linear")),
    "scatterv": ({"algorithm=MPIR_Scatterv_allcomm_linear": {}},
                 {"algorithm=MPIR_Scatterv_allcomm_linear": {}}),
    "allgather": (_alg("allgather", "intra", "brucks"),
                  _alg("allgather", "inter", "local_gather_remote_bcast")),
    "allgatherv": (_alg("allgatherv", "intra", "brucks"),
                   _alg("allgatherv", "inter", "remote_gather_local_bcast")),
    "alltoall": (_either("is_sendbuf_inplace", _alg("alltoall", "intra",
                                                    "pairwise_sendrecv_replace"),
                         _alg("alltoall", "intra", "scattered")),
                 _alg("alltoall", "inter", "pairwise_exchange")),
    "alltoallv": (_either("is_sendbuf_inplace", _alg("alltoallv", "intra",
                                                     "pairwise_sendrecv_replace"),
                          _alg("alltoallv", "intra", "scattered")),
                  _alg("alltoallv", "inter", "pairwise_exchange")),
    "alltoallw": (_either("is_sendbuf_inplace", _alg("alltoallw", "intra",
                                                     "pairwise_sendrecv_replace"),
                          _alg("alltoallw", "intra", "scattered")),
                  _alg("alltoallw", "inter", "pairwise_exchange")),
    "reduce": (_alg("reduce", "intra", "binomial"),
               _alg("reduce", "inter", "local_reduce_remote_send")),
    "allreduce": (_alg("allreduce", "intra", "recursive_doubling"),
                  _alg("allreduce", "inter", "reduce_exchange_bcast")),
    "reduce_scatter": (_alg("reduce_scatter", "intra", "recursive_doubling"),
                       _alg("reduce_scatter", "inter", "remote_reduce_local_scatter")),
    "reduce_scatter_block": (_alg("reduce_scatter_block", "intra", "recursive_doubling"),
                             _alg("reduce_scatter_block", "inter",
                                  "remote_reduce_local_scatter")),
    "scan": (_alg("scan", "intra", "recursive_doubling"), None),
    "exscan": (_alg("exscan", "intra", "recursive_doubling"), None),
    "ibarrier": (_alg("ibarrier", "intra", "sched_recursive_doubling"),
                 _alg("ibarrier", "inter", "sched_bcast")),
    "ibcast": (_alg("ibcast", "intra", "sched_binomial"), _alg("ibcast", "inter", "sched_flat")),
    "igather": (_alg("igather", "intra", "sched_binomial"),
                _alg("igather", "inter", "sched_long")),
    "igatherv": ({"algorithm=MPIR_Igatherv_allcomm_sched_linear": {}},
                 {"algorithm=MPIR_Igatherv_allcomm_sched_linear": {}}),
    "iscatter": (_alg("iscatter", "intra", "sched_binomial"),
                 _alg("iscatter", "inter", "sched_linear")),
    "iscatterv": ({"algorithm=MPIR_Iscatterv_allcomm_sched_linear": {}},
                  {"algorithm=MPIR_Iscatterv_allcomm_sched_linear": {}}),
    "iallgather": (_alg("iallgather", "intra", "sched_ring"),
                   _alg("iallgather", "inter", "sched_local_gather_remote_bcast")),
    "iallgatherv": (_alg("iallgatherv", "intra", "sched_ring"),
                    _alg("iallgatherv", "inter", "sched_remote_gather_local_bcast")),
    "ialltoall": (_either("is_sendbuf_inplace", _alg("ialltoall", "intra", "sched_inplace"),
                          _alg("ialltoall", "intra", "sched_pairwise")),
                  _alg("ialltoall", "inter", "sched_pairwise_exchange")),
    "ialltoallv": (_either("is_sendbuf_inplace", _alg("ialltoallv", "intra", "sched_inplace"),
                           _alg("ialltoallv", "intra", "sched_blocked")),
                   _alg("ialltoallv", "inter", "sched_pairwise_exchange")),
    "ialltoallw": (_either("is_sendbuf_inplace", _alg("ialltoallw", "intra", "sched_inplace"),
                           _alg("ialltoallw", "intra", "sched_blocked")),
                   _alg("ialltoallw", "inter", "sched_pairwise_exchange")),
    "ireduce": (_alg("ireduce", "intra", "sched_binomial"),
                _alg("ireduce", "inter", "sched_local_reduce_remote_send")),
    "iallreduce": (_alg("iallreduce", "intra", "sched_recursive_doubling"),
                   _alg("iallreduce", "inter", "sched_remote_reduce_local_bcast")),
    "ireduce_scatter": (_alg("ireduce_scatter", "intra", "sched_recursive_doubling"),
                        _alg("ireduce_scatter", "inter", "sched_remote_reduce_local_scatterv")),
    "ireduce_scatter_block": (_alg("ireduce_scatter_block", "intra",
                                   "sched_recursive_doubling"),
                              _alg("ireduce_scatter_block", "inter",
                                   "sched_remote_reduce_local_scatterv")),
    "iscan": (_alg("iscan", "intra", "sched_recursive_doubling"), None),
    "iexscan": (_alg("iexscan", "intra", "sched_recursive_doubling"), None),
    **{f"neighbor_{c}": ({f"algorithm=MPIR_Neighbor_{c}_allcomm_nb": {}}, None)
       for c in ("allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw")},
    **{f"ineighbor_{c}": ({f"algorithm=MPIR_Ineighbor_{c}_allcomm_sched_linear": {}}, None)
       for c in ("allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw")},
}


def _time(r: dict[str, Any]) -> float | None:
    t = r.get("pure_us") if r.get("nonblocking") else r.get("time_us")
    return float(t["median"]) if r["status"] == "ok" and t else None


def _spread(r: dict[str, Any]) -> tuple[float, float, float]:
    """``(p10, median, p90)`` of a timed record in us (min and max where a record has no
    percentiles; the median where it has neither)."""
    t: dict[str, Any] = r["pure_us"] if r.get("nonblocking") else r["time_us"]
    mid = float(t["median"])
    return float(t.get("p10", t.get("min", mid))), mid, float(t.get("p90", t.get("max", mid)))


class Choice(NamedTuple):
    """One measured size of one (collective, P): the fastest candidate ``name`` and its
    ``(p10, median, p90)`` in us, the default's (None: not measured), and why the rule is
    pruned (None: kept)."""

    size: int
    name: str
    spread: tuple[float, float, float]
    default: tuple[float, float, float] | None
    pruned: str | None = None

    @property
    def rule(self) -> str | None:
        """The algorithm the file names from this size: ``name``, or None (the library's own
        choice; mpicoll: the model's) where the rule is pruned."""
        return None if self.pruned else self.name


def slower_beyond_noise(tuned: tuple[float, float, float],
                        default: tuple[float, float, float]) -> bool:
    """Whether ``tuned`` is slower than ``default`` beyond the measured noise: its p10 above
    the default's p90 (both ``(p10, median, p90)``; the ranges do not overlap)."""
    return tuned[0] > default[2]


def choices(doc: dict[str, Any], target: str, commutative_only: bool = False,
            drop: Mapping[tuple[str, int, int], str] | None = None
            ) -> dict[str, dict[int, list[Choice]]]:
    """Per collective and P of sweep document ``doc``: a :class:`Choice` per measured size,
    ascending, ``name`` the fastest candidate (by median) of ``target`` (``mpich``/``ompi``:
    the forced ``native:NAME`` columns that ran as forced, the default being the library's
    ``native``; ``mpicoll``: the p2p columns but ``auto``, the default being ``auto``, the
    model's choice); blocking, not persistent, pattern numpy only.  A choice slower than the
    default beyond the noise (:func:`slower_beyond_noise`) is pruned, and so is every
    ``(collective, P, size)`` of ``drop`` (with its reason: ``tune --check``'s verdicts)."""
    from ..algorithms.twins import ompi_ran

    out: dict[str, dict[int, list[Choice]]] = {}
    for run in doc["runs"]:
        p = run["P"]
        cells: dict[tuple[str, int], list[tuple[float, str, tuple[float, float, float]]]] = {}
        default: dict[tuple[str, int], tuple[float, float, float]] = {}
        for r in run["doc"]["results"]:
            t = _time(r)
            if (t is None or r.get("persistent") or r.get("nonblocking")
                    or r.get("pattern", "numpy") != "numpy"):
                continue
            key = (r["collective"], r["size_bytes"])
            if target == "mpicoll":
                if r["backend"] == "p2p" and r["algorithm"] == "auto":
                    default[key] = _spread(r)
                if r["backend"] != "p2p" or r["algorithm"] in (None, "auto"):
                    continue
                name = str(r["algorithm"])
            else:
                if r["backend"] == "native" and not r.get("native_algorithm"):
                    default[key] = _spread(r)
                name = r.get("native_algorithm") or ""
                if not name or r.get("native_ran") != name:
                    continue
                if target == "mpich" and "params" in MPICH_RESTRICTED.get(
                        (r["collective"], name), ()):
                    continue
                if (target == "ompi" and r["op"] is not None and not commutative_only
                        and ompi_ran(r["collective"], name, p, max(1, r["count"]),
                                     False)[1] is not None):
                    continue  # coll/base runs something else for a non-commutative op
            cells.setdefault(key, []).append((t, name, _spread(r)))
        for (coll, size), cands in sorted(cells.items()):
            _, name, spread = min(cands)
            d = default.get((coll, size))
            why = (drop or {}).get((coll, p, size))
            if why is None and d is not None and slower_beyond_noise(spread, d):
                why = (f"{name} {spread[1]:.1f} [{spread[0]:.1f}..{spread[2]:.1f}] us is "
                       f"slower than the default's {d[1]:.1f} [{d[0]:.1f}..{d[2]:.1f}] in "
                       "the sweep")
            out.setdefault(coll, {}).setdefault(p, []).append(Choice(size, name, spread, d,
                                                                     why))
    return out


def ranges(rows: Sequence[Choice]) -> list[tuple[int, str | None]]:
    """``(from S, rule)`` runs of one P (rule None: pruned, the library's own choice): the
    first from 0, a new one at each measured size whose rule differs from the previous
    size's, so adjacent sizes with the same rule (or pruned alike) are merged."""
    out: list[tuple[int, str | None]] = []
    for c in rows:
        if not out:
            out.append((0, c.rule))
        elif out[-1][1] != c.rule:
            out.append((c.size, c.rule))
    return out


def _per_p(rows: Sequence[Choice]) -> str | None:
    """The one rule of a P for a collective without a size condition: the one kept at most
    sizes (None, pruned, where most sizes were pruned)."""
    names = [c.rule for c in rows]
    return max(names, key=lambda n: (names.count(n), n is not None))


def _mpich_leaf(coll: str, name: str | None) -> dict[str, Any]:
    """The subtree running MPICH algorithm ``name`` of ``coll`` behind the guards its
    restrictions need (the other branch of each: :data:`MPICH_SAFE`); ``name`` None (a pruned
    rule): the safe subtree itself."""
    safe = MPICH_SAFE[coll][0]
    if name is None:
        return safe
    # nb (and gatherv's, scatterv's linear) serve both communicator kinds: MPIR_<Coll>_allcomm_*
    allcomm = name == "nb" or (coll in ("gatherv", "scatterv") and name == "linear")
    node: dict[str, Any] = (_alg(coll, "allcomm", name) if allcomm
                            else _alg(coll, "intra", name))
    for r in MPICH_RESTRICTED.get((coll, name), ()):
        if r == "commutative":
            node = {"is_commutative=no": safe, "is_commutative=any": node}
        elif r == "builtin-op":
            node = {"is_op_built_in=no": safe, "is_op_built_in=any": node}
        elif r == "size-ge-pof2":
            node = {"count<pow2": safe, "count=any": node}
        elif r == "power-of-two":
            node = {"comm_size=pow2": node, "comm_size=any": safe}
        elif r == "inplace":
            node = {"is_sendbuf_inplace=yes": node, "is_sendbuf_inplace=any": safe}
        elif r == "noinplace":
            node = {"is_sendbuf_inplace=yes": safe, "is_sendbuf_inplace=any": node}
    return node


def emit_mpich(doc: dict[str, Any], drop: Mapping[tuple[str, int, int], str] | None = None
               ) -> dict[str, Any]:
    """MPICH's selection tree from sweep ``doc`` (see the module docstring; ``drop``: as
    :func:`choices`)."""
    picked = choices(doc, "mpich", drop=drop)
    tree: dict[str, Any] = {}
    for coll, (intra, inter) in MPICH_SAFE.items():
        per_p = picked.get(coll)
        if per_p:
            ps = sorted(per_p)
            body: dict[str, Any] = {}
            for k, p in enumerate(ps):
                runs = ranges(per_p[p])
                key = MPICH_SIZE_KEY.get(coll)
                if key is None:  # one algorithm per P: the one kept at most sizes
                    sub = _mpich_leaf(coll, _per_p(per_p[p]))
                else:
                    sub = {}
                    for j, (_, name) in enumerate(runs):
                        cond = (f"{key}<{runs[j + 1][0]}" if j + 1 < len(runs)
                                else f"{key}=any")
                        sub[cond] = _mpich_leaf(coll, name)
                body["comm_size=any" if k == len(ps) - 1 else f"comm_size<={p}"] = sub
            intra = body
        branch: dict[str, Any] = {"comm_type=intra": intra}
        branch["comm_type=any"] = inter if inter is not None else intra
        tree[f"collective={coll}"] = branch
    return tree


def emit_ompi(doc: dict[str, Any], commutative_only: bool = False,
              drop: Mapping[tuple[str, int, int], str] | None = None) -> str:
    """Open MPI's classic dynamic rules file from sweep ``doc`` (see the module docstring;
    ``drop``: as :func:`choices`).  A pruned rule is written as algorithm 0, which tuned
    reads as "no rule": its fixed decision, the library's default."""
    from ..algorithms.twins import OMPI

    picked = choices(doc, "ompi", commutative_only, drop)
    colls = [c for c in OMPI_IDS if c in picked and c in OMPI]
    lines = [f"{len(colls)}  # collectives (mpicoll tune --emit ompi; sizes: bytes)"]
    for coll in colls:
        ids = {v: k for k, v in OMPI[coll].items()}
        per_p = picked[coll]
        lines.append(f"{OMPI_IDS[coll]}  # {coll}")
        lines.append(f"{len(per_p)}  # communicator sizes")
        for p in sorted(per_p):
            runs = (ranges(per_p[p]) if coll in OMPI_SIZED
                    else [(0, _per_p(per_p[p]))])
            lines.append(f"{p}  # P >= {p}")
            lines.append(f"{len(runs)}  # message sizes")
            for size, name in runs:
                lines.append(f"{size} {ids[name]} 0 0  # {name}" if name is not None else
                             f"{size} 0 0 0  # pruned: the library's own decision")
    return "\n".join(lines) + "\n"


def emit_mpicoll(doc: dict[str, Any], drop: Mapping[tuple[str, int, int], str] | None = None
                 ) -> dict[str, Any]:
    """mpicoll's selection table (:mod:`mpicoll.model.selection`) from sweep ``doc``
    (``drop``: as :func:`choices`; a pruned rule is ``"algorithm": null``, the model's
    choice)."""
    from ..model.selection import SCHEMA_ID

    picked = choices(doc, "mpicoll", drop=drop)
    rules: dict[str, list[dict[str, Any]]] = {}
    for coll, per_p in picked.items():
        rules[coll] = [{"p_min": p, "p_max": p,
                        "sizes": [{"min_bytes": s, "algorithm": n}
                                  for s, n in ranges(per_p[p])]}
                       for p in sorted(per_p)]
    return {"schema": SCHEMA_ID, "source": f"mpicoll tune from a sweep of "
            f"{doc['provenance']['date']} on {doc['provenance']['hostname']}",
            "rules": rules}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tune`` options."""
    parser.add_argument("sweep", metavar="SWEEP.json", help="a sweep's --json file")
    parser.add_argument("--emit", required=True, choices=("mpich", "ompi", "mpicoll"),
                        help="mpich: MPICH's JSON selection tree; ompi: Open MPI's classic "
                        "dynamic rules file; mpicoll: the table algorithm='auto' reads")
    parser.add_argument("-o", "--output", metavar="FILE", required=True,
                        help="the file to write")
    parser.add_argument("--check", action="store_true",
                        help="then rerun bench (without mpiexec: one launch per P of the "
                        "sweep with the file loaded, one without) and print, per collective "
                        "and size, the default's and the tuned time and whether the tuned one "
                        "is faster, slower or within the noise")
    add_launch_options(parser, what="--check: ")
    parser.add_argument("--commutative-only", action="store_true",
                        help="--emit ompi: the program reduces with commutative ops only "
                        "(allows algorithms Open MPI runs for commutative ops alone)")


def check_arguments(args: argparse.Namespace, size: int, error: Callable[[str], NoReturn]
                    ) -> None:
    """Read and check the sweep file (the same verdict on every rank); sets ``args.doc``."""
    from .sweep import SCHEMA_ID

    try:
        doc = json.loads(Path(args.sweep).read_text())
    except (OSError, ValueError) as exc:
        error(f"argument SWEEP.json: cannot read {args.sweep}: {exc}")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        error(f"argument SWEEP.json: {args.sweep} is not a sweep file (mpicoll sweep --json)")
    kind = doc["provenance"]["library"]["kind"]
    want = {"mpich": "mpich", "ompi": "openmpi"}.get(args.emit)
    if want is not None and kind != want:
        error(f"argument --emit: {args.emit} needs a sweep made with {want}, not {kind}")
    if args.commutative_only and args.emit != "ompi":
        error("argument --commutative-only: only with --emit ompi")
    if args.check and size > 1:
        error("argument --check: tune launches bench itself: run it without mpiexec")
    args.doc = doc


def _write(args: argparse.Namespace, drop: Mapping[tuple[str, int, int], str] | None = None
           ) -> str:
    """Write ``args.output`` from ``args.doc`` (``drop``: as :func:`choices`); how to load it."""
    doc = args.doc
    if args.emit == "mpich":
        Path(args.output).write_text(json.dumps(emit_mpich(doc, drop), indent=2) + "\n")
        return (f"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={args.output} "
                "MPIR_CVAR_DEVICE_COLLECTIVES=none mpiexec ...")
    if args.emit == "ompi":
        Path(args.output).write_text(emit_ompi(doc, args.commutative_only, drop))
        return (f"mpiexec --mca coll_tuned_use_dynamic_rules 1 --mca "
                f"coll_tuned_dynamic_rules_filename {args.output} ...")
    Path(args.output).write_text(json.dumps(emit_mpicoll(doc, drop), indent=1) + "\n")
    return f"MPICOLL_SELECTION={args.output} (algorithm='auto' then reads it)"


def format_pruned(picked: Mapping[str, Mapping[int, Sequence[Choice]]]) -> str:
    """A line per pruned rule (collective, P, size, why), under a count; empty if none."""
    rows = [(coll, p, c) for coll, per_p in picked.items() for p in sorted(per_p)
            for c in per_p[p] if c.pruned]
    if not rows:
        return "# pruned: none (every rule is not slower than the default beyond the noise)\n"
    lines = [f"# pruned {len(rows)} rule(s) (the file leaves those sizes to the library's own "
             "choice; mpicoll: to the model's):"]
    lines += [f"#   {coll} P={p} {c.size}B: {c.pruned}" for coll, p, c in rows]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, comm: Any, argv: Sequence[str], out: TextIO) -> int:
    """Write the file (rules slower than the default beyond the noise pruned); print every
    choice beside the default's time, what was pruned and how to load the file."""
    if comm.Get_rank() != 0:
        return 0
    doc = args.doc
    target = args.emit
    picked = choices(doc, target, args.commutative_only)
    if not picked:
        out.write(f"# {args.sweep}: no {'p2p' if target == 'mpicoll' else 'forced native'} "
                  "measurement to choose from (sweep with -a all / --native all)\n")
        return 1
    how = _write(args)
    default = "auto, the model's choice" if target == "mpicoll" else "the library's own choice"
    for coll, per_p in picked.items():
        out.write(f"# {coll}: the fastest {'p2p' if target == 'mpicoll' else 'forced'} "
                  f"algorithm per P and size, median us and the default's / its (default: "
                  f"{default})\n")
        for p in sorted(per_p):
            cells = []
            for c in per_p[p]:
                ratio = f" {c.default[1] / c.spread[1]:.2f}x" if c.default else ""
                cells.append(f"{c.size}B {c.name} {c.spread[1]:.1f}{ratio}"
                             + (" (pruned)" if c.pruned else ""))
            out.write(f"#   P={p}: " + "; ".join(cells) + "\n")
    out.write(format_pruned(picked))
    out.write(f"# wrote {args.output}: use it as {how}\n")
    if args.check:
        return check(args, out, picked)
    return 0


def check(args: argparse.Namespace, out: TextIO,
          picked: Mapping[str, Mapping[int, Sequence[Choice]]] | None = None) -> int:
    """``--check``: per P of the sweep, bench launched with the file loaded and without
    (:func:`.launcher.run`; the sweep's bench arguments, native only, or p2p ``auto`` only for
    ``--emit mpicoll``), and per collective and size: the default's and the tuned median
    [p10..p90], the file's rule there (``picked``: :func:`choices`) and the verdict,
    ``faster``/``SLOWER`` where the p10..p90 ranges do not overlap, else ``within noise``.
    The rules found SLOWER are then pruned too and the file rewritten; the rules pruned (from
    the sweep and from the check) are listed.  Returns 1 if a size was SLOWER."""
    from . import launcher
    from .launcher import OMPI_EXCLUDE, Config

    doc = args.doc
    path = str(Path(args.output).resolve())
    if args.emit == "mpich":
        tuned = Config("tuned", env={"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": path,
                                     "MPIR_CVAR_DEVICE_COLLECTIVES": "none"})
    elif args.emit == "ompi":
        tuned = Config("tuned", flags=["--mca", "coll", OMPI_EXCLUDE, "--mca",
                                       "coll_tuned_use_dynamic_rules", "1", "--mca",
                                       "coll_tuned_dynamic_rules_filename", path])
    else:
        tuned = Config("tuned", env={"MPICOLL_SELECTION": path})
    column = "auto" if args.emit == "mpicoll" else "native"
    bench_args = [*doc["settings"]["bench_args"], "-a", "auto" if column == "auto" else "none"]
    rules = {(coll, p, c.size): c for coll, per_p in (picked or {}).items()
             for p, cs in per_p.items() for c in cs}
    drop: dict[tuple[str, int, int], str] = {}
    slower = 0
    for run in doc["runs"]:
        p = run["P"]
        launches = launcher.run([Config("default"), tuned], p, bench_args,
                                timeout=args.launch_timeout)
        got = {}
        for ln in launches:
            if ln.doc is None:
                out.write(f"# --check P={p}: the {ln.config.name} launch failed (status "
                          f"{ln.status}): {ln.output[-600:]}\n")
                return 1
            got[ln.config.name] = {(r["collective"], r["size_bytes"]): r
                                   for r in ln.doc["results"]
                                   if r["implementation"] == column and r["status"] == "ok"
                                   and r["time_us"] and not r.get("persistent")}
        out.write(f"# --check P={p}: {column} median [p10..p90] us, default vs with "
                  f"{args.output}\n")
        for key in sorted(got["default"]):
            if key not in got["tuned"]:
                continue
            d, t = _spread(got["default"][key]), _spread(got["tuned"][key])
            verdict = ("faster" if t[2] < d[0] else "SLOWER" if slower_beyond_noise(t, d)
                       else "within noise")
            rule = rules.get((key[0], p, key[1]))
            note = ("" if rule is None else " (rule: pruned in the sweep)" if rule.pruned
                    else f" (rule: {rule.name})")
            slower += verdict == "SLOWER"
            if verdict == "SLOWER" and rule is not None and not rule.pruned:
                drop[(key[0], p, key[1])] = (
                    f"{rule.name} {t[1]:.1f} [{t[0]:.1f}..{t[2]:.1f}] us is slower than the "
                    f"default's {d[1]:.1f} [{d[0]:.1f}..{d[2]:.1f}] in --check")
            out.write(f"#   {key[0]} {key[1]}B: default {d[1]:.1f} [{d[0]:.1f}..{d[2]:.1f}], "
                      f"tuned {t[1]:.1f} [{t[0]:.1f}..{t[2]:.1f}]: {verdict}{note}\n")
    if picked is not None:
        if drop:
            _write(args, drop)
            picked = choices(doc, args.emit, args.commutative_only, drop)
            out.write(f"# --check: {len(drop)} rule(s) slower than the default beyond the "
                      f"noise: pruned, {args.output} rewritten\n")
            if args.emit == "mpich":
                out.write("# (MPICH: the file loads only with MPIR_CVAR_DEVICE_COLLECTIVES="
                          "none, which also turns off the device (shared-memory) collectives "
                          "the default runs; a pruned size runs the generic tree's algorithm, "
                          "which may be the one that lost: there the default cannot be had "
                          "with a tuning file)\n")
        out.write(format_pruned(picked))
    return 1 if slower else 0
