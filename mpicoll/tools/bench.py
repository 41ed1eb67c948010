"""``mpicoll bench``: native against hand-rolled collectives, side by side, checked then timed.

Methodology (that of the OSU Micro-Benchmarks, the Intel MPI Benchmarks and nccl-tests):

* for every (collective, message size, implementation) the buffers are allocated and filled
  outside the timed loop;
* the result is first checked, outside any timing, against the native result on inputs whose
  exact answer is known (small integers, floats included, so any summation order is exact;
  native itself is checked against a NumPy reference).  A wrong implementation is reported as
  ``WRONG`` and counted in ``#wrong`` (as nccl-tests does), never timed, never the fastest;
  the command then exits with status 1;
* warm-up iterations at every size, then timed iterations, each preceded by a barrier
  (``MPI_Barrier`` on the user's communicator); each iteration's time is the MAX over ranks;
  min / median / mean / max / std over iterations are reported (the table shows the median);
* the number of iterations is fixed (``-i``) or set per size from ``--time-budget`` seconds
  (IMB-style: fewer repetitions for large messages);
* message size S (bytes) is the one nccl-tests uses, which its bus-bandwidth factors assume:
  bcast, reduce, allreduce, scan, exscan: the vector on each rank; allgather(v): the gathered
  output on each rank (P blocks); reduce_scatter(_block): the input vector on each rank
  (P blocks); alltoall(v): what one rank sends in all (P blocks); gather(v): the root's output;
  scatter(v): the root's input.  S is rounded down to whole blocks (at least one element a block);
* ``algbw = S / t`` and ``busbw = algbw x factor`` in GB/s (1e9 bytes/s) with the factors of
  nccl-tests ``doc/PERFORMANCE.md`` (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
  allreduce 2(P-1)/P; reduce_scatter, allgather, alltoall (P-1)/P; bcast, reduce 1; and, from
  its ``src/gather.cu``/``src/scatter.cu``, gather and scatter (P-1)/P.  nccl-tests has no scan:
  scan/exscan use 1 (a bound of the same kind as reduce's).

Non-blocking mode (``--nonblocking``) follows OSU's ``osu_i*`` benchmarks: the pure
communication time ``t_pure`` (start + wait), then start + a busy compute of length ``t_pure``
(with ``--test-calls N`` calls to ``Test()`` spread through it, OSU's ``-t``) + wait, giving
``t_total`` and the compute time actually spent ``t_compute``; then

* OSU:     ``overlap = max(0, 100 (1 - (t_total - t_compute) / t_pure))``
* IMB-NBC: ``overlap = 100 max(0, min(1, (t_pure + t_compute - t_total) / min(t_pure, t_compute)))``

with times per iteration taken from the rank with the largest ``t_total`` (IMB).

Persistent mode (``--persistent``) adds, beside each implementation ``X`` (native, mpi4py and
each p2p algorithm), a column ``X:init``: the same call made once as a persistent request
(``Allreduce_init``, MPI-4) and then timed as ``Start()`` + ``Wait()`` per iteration, checked
against native like the others (records with ``"persistent": true``; the summary's fastest,
best p2p and speed-up are over the blocking calls).

Beside native, the ``mpi4py`` column times the same call on a plain duplicate of the
``MPI.Comm`` (no mpicoll at all), checked against native like the p2p results: native minus
mpi4py is what mpicoll's front door costs per call (``native_over_mpi4py`` in the summary).

Native algorithms (``--native-algorithms all|NAMES -n P``, run without mpiexec): the MPI
library's own algorithms as columns ``native:NAME`` beside the library's default and the p2p
ones, one ``mpiexec`` per configuration (:mod:`.launcher`, :func:`run_native`), with the
same-algorithm ratio ``p2p:X / native:X`` and, per size, whether the library says the forced
algorithm ran (docs/bench.md#native-algorithms).

Defaults: the main collectives (:data:`DEFAULT_COLLECTIVES`), native and p2p ``auto``, sizes
8 B to 4 MiB (``make bench``, 4 ranks on 2 cores, stays within a few minutes; ask for more with
``-m 8:16M``), float64 and MPI.SUM, root 0, out of place, a time budget of 0.1 s per size and
implementation with 5 to 1000 timed iterations after 2 warm-up ones.  Exit status: 0, or 1 if
any result was WRONG (or raised), or 2 for a usage error.  Output files (``--json``,
``--csv``, ``--plot``: writable, not a directory, a format matplotlib writes) and numeric
options are checked before anything runs.  A call that raises is reported as ``ERROR`` with
its exception's text; one that strands other ranks ends the job (see :class:`CallGuard`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np

from ..algorithms.collectives import BY_NAME
from . import cases as _cases
from . import dtypes as _dtypes
from .cases import Case, count_for, method_name
from .compare import compare
from .harness import (
    WATCHDOG,
    CallGuard,
    Plan,
    Progress,
    Stderr,
    consensus,
    describe_error,
    make_backends,
    provenance,
    run_checked,
)
from .launcher import add_launch_options
from .measure import (
    DEFAULT_TIME_BUDGET,
    DEFAULT_WARMUP,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    Settings,
    measure_blocking,
    measure_nonblocking,
    measure_phases,
    overlap_imb,
    overlap_osu,
)
from .options import (
    DEFAULT_COLLECTIVES,
    DEFAULT_SIZES,
    algorithms_of,
    output_file_problem,
    parse_size,
    parse_sizes,
    resolve_model,
    seconds_problem,
    selection,
    split,
)
from .patterns import PATTERNS, adapt, allocator, parse_patterns
from .patterns import arguments as pattern_arguments
from .report import (
    CSV_COLUMNS,
    SCHEMA_ID,
    SCHEMA_PATH,
    busbw_factor,
    describe_model,
    document,
    format_block,
    format_stats,
    header,
    human_size,
    plot_problem,
    validate,
    write_csv,
    write_plot,
)
from .simulate import predict_us

#: The names this module offered before measuring, reporting and the harness became modules of
#: their own (``bench.validate``, ``bench.parse_sizes``, ...): re-exported, not redefined.
__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_COLLECTIVES",
    "DEFAULT_SIZES",
    "DEFAULT_TIME_BUDGET",
    "DEFAULT_WARMUP",
    "EXPECTED_LIMIT",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCHEMA_ID",
    "SCHEMA_PATH",
    "CallGuard",
    "Settings",
    "add_arguments",
    "bench_collective",
    "busbw_factor",
    "count_for",
    "describe_error",
    "describe_model",
    "environment_problem",
    "human_size",
    "make_plan",
    "output_file_problem",
    "overlap_imb",
    "overlap_osu",
    "parse_size",
    "parse_sizes",
    "plot_problem",
    "predict_us",
    "provenance",
    "resolve_model",
    "run",
    "validate",
]

#: Largest P x (elements of S) for which native is checked against the NumPy reference (above
#: it native is the reference unchecked, ``check: "none"``; the p2p results are still checked).
EXPECTED_LIMIT = 1 << 25


@dataclass
class Impl:
    """One implementation in a run: native, the plain mpi4py call, or a p2p algorithm
    (``auto`` or a registry name)."""

    label: str
    backend: Any
    algorithm: str | None = None
    #: ``"native"``, ``"mpi4py"`` (the same call on a plain ``MPI.Comm``, no mpicoll) or ``"p2p"``
    kind: str = "p2p"
    #: the ``*_init`` form, timed as Start + Wait (``--persistent``)
    persistent: bool = False


class _Persistent:
    """``fn()`` for a persistent implementation: the ``*_init`` request is made at the first
    call (collective, so every rank makes it there) with the arguments as the pattern passes
    them (``make()``, ``kw``), then each call is ``Start()`` + ``Wait()``; :meth:`free`
    releases it."""

    def __init__(self, case: Case, backend: Any, algorithm: str | None,
                 make: Callable[[], tuple[Any, ...]], kw: dict[str, Any]) -> None:
        self.method = getattr(backend, BY_NAME[case.collective].persistent)
        self.args, self.kw = make(), dict(kw)
        if algorithm is not None:
            self.kw["algorithm"] = algorithm
        self.req: Any = None

    def __call__(self) -> None:
        if self.req is None:
            self.req = self.method(*self.args, **self.kw)
        self.req.Start()
        self.req.Wait()

    def free(self) -> None:
        if self.req is not None:
            self.req.Free()
            self.req = None


def _auto_choice(case: Case, p2p: Any) -> str | None:
    """Name of the algorithm ``auto`` runs for ``case`` on this rank (None if unknown)."""
    select = getattr(p2p, "select", None)
    if select is None:
        return None
    try:
        from ..backends.args import PARSERS

        args, kw = case.arguments()
        call = PARSERS[case.collective](case.size, case.rank, *args, **kw)
        return str(select(call, "auto").name)
    except Exception:
        return None


def _call(case: Case, impl: Impl, nonblocking: bool, pattern: str,
          make: Callable[[], tuple[Any, ...]], kw: dict[str, Any]) -> Callable[[], Any]:
    """``fn()``: one call of ``impl`` on ``case`` with its arguments as ``pattern`` passes them
    (``make()``, ``kw``: :func:`mpicoll.tools.patterns.arguments`)."""
    if pattern == "numpy":
        return case.call(impl.backend, impl.algorithm, nonblocking)
    method = getattr(impl.backend, method_name(case.collective, nonblocking))
    kwargs = dict(kw)
    if impl.algorithm is not None:
        kwargs["algorithm"] = impl.algorithm

    def fn() -> Any:
        return method(*make(), **kwargs)

    return fn


def _record(plan: Plan, case: Case, impl: Impl, pattern: str) -> dict[str, Any]:
    coll = case.collective
    return {
        "collective": coll,
        "pattern": pattern,
        "implementation": impl.label,
        "backend": impl.kind,
        "algorithm": impl.algorithm,
        "auto_choice": _auto_choice(case, impl.backend) if impl.algorithm == "auto" else None,
        "size_bytes": case.nbytes(),
        "count": case.count // case.per_element,  # elements of the datatype (derived too)
        "dtype": case.dtype,
        "op": case.op if case.is_reduction else None,
        "root": case.root if coll in _cases.ROOTED else None,
        "in_place": bool(case.in_place and coll in _cases.IN_PLACE_COLLECTIVES),
        "nonblocking": plan.nonblocking,
        "persistent": impl.persistent,
        "status": "ok",
        "check": None,
        "reason": None,
        "wrong_rank": None,
        "iterations": None,
        "warmup": None,
        "time_us": None,
        "algbw_gbps": None,
        "busbw_gbps": None,
        "busbw_factor": busbw_factor(coll, case.size),
        "predicted_us": None,
        "measured_over_predicted": None,
    }


def _predicted(plan: Plan, case: Case, rec: dict[str, Any],
               cache: dict[tuple[str, int, bool], float | None],
               nodes: Sequence[int] | None = None) -> None:
    """Fill ``predicted_us`` and ``measured_over_predicted`` of a timed p2p record (simulated
    on ``nodes``, the p2p backend's node of each rank: a node-aware algorithm's prediction
    is that of what it ran)."""
    if plan.model is None or rec["backend"] != "p2p" or rec["status"] != "ok":
        return
    t = rec.get("pure_us") if plan.nonblocking else rec.get("time_us")
    if not t:
        return
    alg = rec["auto_choice"] or rec["algorithm"]
    persistent = bool(rec.get("persistent"))  # Start + Wait: o_start, not o_call
    key = (alg, case.count, persistent)
    if key not in cache:
        m = plan.model.persistent() if persistent else plan.model
        cache[key] = predict_us(case, alg, m, nodes)
    pred = cache[key]
    rec["predicted_us"] = pred
    if pred:
        rec["measured_over_predicted"] = t["median"] / pred


def _bandwidths(rec: dict[str, Any]) -> None:
    t = rec["time_us"]
    if not t or rec["size_bytes"] == 0 or t["median"] <= 0:
        return
    algbw = rec["size_bytes"] / (t["median"] * 1e-6) / 1e9
    rec["algbw_gbps"] = algbw
    if rec["busbw_factor"] is not None:
        rec["busbw_gbps"] = algbw * rec["busbw_factor"]


def bench_collective(
    comm: Any, plan: Plan, coll: str, native: Any, p2p: Any, progress: Progress,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    guard: CallGuard | None = None, plain: Any = None, pattern: str = "numpy",
    native_label: str | None = None,
) -> list[dict[str, Any]]:
    """Check and time every size x implementation of one collective; records for all of them.

    ``pattern``: how every call passes its buffers (:mod:`mpicoll.tools.patterns`; one the
    collective can run: :func:`~mpicoll.tools.patterns.adapt` gives no ``skip``), the same
    for every implementation and for the check.

    ``plain``: an ``MPI.Comm`` on which the same call is also made with mpi4py alone (the
    ``mpi4py`` column: what native costs on top of MPI); None: no such column.

    ``guard``: settles each check call across ranks (see :class:`CallGuard`); after a native
    call raised, the rest runs on ``guard.native``, a fresh native backend (default: a guard
    made and freed here).

    ``native_label``: the library algorithm this launch forced (``--native-label``): the
    native column is ``native:NAME`` and each size records whether MPICH said it fell back
    (:func:`_forced_ran`)."""
    own_guard = guard is None
    if guard is None:
        guard = CallGuard(comm, plan.timeout)
    # --phases: the per-round pass on a checked-mode twin of the p2p backend, whose calls
    # all go through the engine's blocking loop (the timed calls' compiled replays do not)
    phased = None
    if plan.phases and p2p is not None:
        from ..backends.p2p import p2p as checked_p2p
        phased = checked_p2p(comm, check=True)
    try:
        return _bench_collective(comm, plan, coll, native, p2p, progress, on_row, guard, plain,
                                 pattern, native_label, phased)
    finally:
        if own_guard:
            guard.Free()
        if phased is not None:
            phased.Free()


def _forced_ran(comm: Any, case: Case, name: str, text: str, nonblocking: bool = False
                ) -> dict[str, Any]:
    """``native_ran`` and ``native_ran_evidence`` of one size of a forced native algorithm
    (the same on every rank).

    MPICH: from what the ranks' library wrote on stderr during the check call
    (``text``): with ``MPIR_CVAR_COLLECTIVE_FALLBACK=print`` it writes "<Coll> <name> cannot
    be applied." when the forced algorithm cannot run on the call and it runs its own choice;
    with ``MPIR_CVAR_DEVICE_COLLECTIVES=none`` no device algorithm can replace it silently.
    Open MPI: tuned calls the forced ID's coll/base function unconditionally; that function
    runs another algorithm, silently, where :func:`mpicoll.algorithms.twins.ompi_ran` says."""
    from ..algorithms.twins import ompi_ran
    from .launcher import fallback_message, library, ompi_id

    coll = case.collective
    said = [m for m in comm.allgather(fallback_message(text, coll, nonblocking)) if m]
    kind = library()[0]
    if kind == "openmpi" and nonblocking:
        return {"native_ran": None,
                "native_ran_evidence": f"unknown: Open MPI: coll_libnbc_i{coll}_algorithm="
                                       f"{ompi_id(coll, name, True)} forced; libnbc does not "
                                       "say whether it ran, and its fallbacks are not tabulated"}
    if kind == "openmpi":
        ident = ompi_id(coll, name)
        count = case.count // _dtypes.per_element(case.dtype)
        ran, why = ompi_ran(coll, name, case.size, count, case.op != "noncomm")
        forced = f"coll_tuned_{coll}_algorithm={ident} under coll_tuned_use_dynamic_rules=1"
        if why is None:
            return {"native_ran": name,
                    "native_ran_evidence": f"Open MPI: {forced}; no coll/base fallback applies "
                                           f"(P = {case.size}, count {count})"}
        return {"native_ran": ran or "none",
                "native_ran_evidence": f"Open MPI: {forced}; coll/base falls back silently "
                                       f"to {ran or 'an error'}: {why}"}
    if kind != "mpich":
        return {"native_ran": None,
                "native_ran_evidence": f"unknown: {kind} does not say per call which "
                                       "algorithm ran"}
    if said:
        return {"native_ran": "auto",
                "native_ran_evidence": f"MPICH fell back to its own choice: {said[0]!r}"}
    return {"native_ran": name,
            "native_ran_evidence": "MPICH (MPIR_CVAR_COLLECTIVE_FALLBACK=print, "
                                   "MPIR_CVAR_DEVICE_COLLECTIVES=none) wrote no fallback notice"}


def _bench_collective(
    comm: Any, plan: Plan, coll: str, native: Any, p2p: Any, progress: Progress,
    on_row: Callable[[list[dict[str, Any]]], None] | None, guard: CallGuard, plain: Any,
    pattern: str, native_label: str | None = None, phased: Any = None,
) -> list[dict[str, Any]]:
    from ..algorithms import registry

    p, rank = comm.Get_size(), comm.Get_rank()
    adapted = adapt(pattern, coll, plan.dtype, plan.op, coll in _cases.REDUCTIONS)
    if adapted.skip:
        raise ValueError(adapted.skip)
    dtype, op = adapted.dtype, adapted.op
    k = _dtypes.per_element(dtype)  # derived: one element is k base values
    itemsize = _dtypes.numpy_dtype(dtype).itemsize * k
    impls = [Impl("native" if native_label is None else f"native:{native_label}", native,
                  kind="native")]
    if plain is not None:
        impls.append(Impl("mpi4py", plain, kind="mpi4py"))
    if p2p is not None:
        impls += [Impl(a, p2p, a) for a in algorithms_of(coll, plan.algorithms)]
    if plan.persistent:
        impls += [Impl(f"{i.label}:init", i.backend, i.algorithm, i.kind, persistent=True)
                  for i in impls]
    sizes = [0] if coll == "barrier" else [itemsize] if pattern == "scalar" else plan.sizes
    counts: list[int] = []
    for s in sizes:
        c = count_for(coll, s, p, itemsize) * k
        if c not in counts:
            counts.append(c)
    records: list[dict[str, Any]] = []
    measure = measure_nonblocking if plan.nonblocking else measure_blocking
    predictions: dict[tuple[str, int, bool], float | None] = {}
    for count in counts:
        memory = allocator(pattern)
        case = Case(coll, count, dtype, op, plan.root, plan.in_place, p, rank,
                    alloc=memory[0] if memory else None).build()
        make, kw = pattern_arguments(pattern, case, memory[1] if memory else None)
        row: list[dict[str, Any]] = []
        reference: np.ndarray[Any, Any] | None = None
        native_ok = False
        for impl in impls:
            rec = _record(plan, case, impl, pattern)
            if impl.kind == "native" and native_label is not None:
                rec["native_algorithm"] = native_label
            row.append(rec)
            label = f"{coll} {human_size(case.nbytes())}B {impl.kind}:{impl.label}" + (
                f" [{pattern}]" if pattern != "numpy" else "")
            progress.show(f"[mpicoll bench] {label}")
            if impl.kind != "native" and not native_ok:
                rec.update(status="n/a", reason="no reference: the native result failed its check")
                continue
            if impl.algorithm not in (None, "auto"):
                alg = registry.get(coll, impl.algorithm)
                why = alg.why_not(p, **case.restriction_kwargs())
                if why is not None:
                    rec.update(status="n/a", reason=why)
                    continue
            if impl.persistent:  # made on the case's buffers, which reset() refills in place
                fn: Any = _Persistent(case, impl.backend, impl.algorithm, make, kw)
            else:
                fn = _call(case, impl, plan.nonblocking, pattern, make, kw)
            WATCHDOG.arm(plan.timeout, f"bench {label}")
            try:
                # ---- check (outside timing) -------------------------------------------------
                case.reset()
                if impl.kind == "native" and native_label is not None:
                    with Stderr() as err:
                        status, detail = run_checked(comm, fn, plan.nonblocking)
                    rec.update(_forced_ran(comm, case, native_label, err.text,
                                               plan.nonblocking))
                else:
                    status, detail = run_checked(comm, fn, plan.nonblocking)
                guard.settle(status, detail, f"bench {label}", native=impl.kind == "native")
                if guard.raised(native=True):
                    impls[0].backend = guard.fresh_native(impl.backend)
                got = case.result() if status == "ok" else None
                if status == "ok":
                    if impl.kind == "native":
                        reference = got
                        # the NumPy reference builds every rank's input: P x S work
                        cheap = case.size * case.nbytes() // itemsize <= EXPECTED_LIMIT
                        mism = compare(got, case.expected()) if cheap else None
                        rec["check"] = "expected" if cheap else "none"
                    else:
                        mism = compare(got, reference)
                        rec["check"] = "native"
                    if mism is not None:
                        status, detail = "wrong", str(mism)
                status, detail, bad_rank = consensus(guard.comm, status, detail)
                if status != "ok":
                    rec.update(status=status, reason=detail, wrong_rank=bad_rank)
                    continue
                if impl.kind == "native":
                    native_ok = True
                # ---- timing ------------------------------------------------------------------
                rec.update(measure(comm, fn, plan.settings))
                if phased is not None and impl.kind == "p2p" and not impl.persistent:
                    twin = Impl(impl.label, phased, impl.algorithm)
                    ph = measure_phases(comm, _call(case, twin, False, pattern, make, kw),
                                        min(int(rec["iterations"]), PHASE_ITERATIONS))
                    if ph is not None:
                        ran = (impl.algorithm if impl.algorithm not in (None, "auto")
                               else rec.get("auto_choice"))
                        ph["labels_rank0"] = phase_labels(coll, ran, p, len(ph["rank0_us"]))
                        ph["labels_slowest"] = phase_labels(coll, ran, p,
                                                            len(ph["slowest_us"]))
                        rec["phases"] = ph
                _bandwidths(rec)
                _predicted(plan, case, rec, predictions, getattr(p2p, "nodes", None))
            finally:
                WATCHDOG.disarm()
                if impl.persistent:
                    fn.free()
        records.extend(row)
        if on_row is not None:
            on_row(row)
    return records


#: ``--phases``: at most this many iterations of per-round timing (after the timed ones)
PHASE_ITERATIONS = 20

#: ``--phases``: the algorithms whose rounds split into two named phases of equal round
#: counts on every rank (the first half, the second half), and when they do (P -> bool).
PHASE_SPLITS: dict[tuple[str, str], tuple[str, str, Callable[[int], bool]]] = {
    ("allreduce", "ring"): ("reduce-scatter", "allgather", lambda p: True),
    ("allreduce", "rabenseifner"): ("reduce-scatter", "allgather",
                                    lambda p: p & (p - 1) == 0),
}


def phase_labels(coll: str, algorithm: str | None, p: int, rounds: int) -> list[str]:
    """A label per round of ``algorithm``'s schedule on one rank (``rounds`` of them) at P =
    ``p``: for :data:`PHASE_SPLITS` (ring allreduce: a reduce-scatter then an allgather of the
    same number of rounds, segments included), the two phases' names; else ``round k``."""
    split_ = PHASE_SPLITS.get((coll, algorithm or ""))
    if split_ is not None and split_[2](p) and rounds and rounds % 2 == 0:
        return [split_[0]] * (rounds // 2) + [split_[1]] * (rounds // 2)
    return [f"round {k}" for k in range(rounds)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` options."""
    from ..algorithms.registry import COLLECTIVES

    g = parser.add_argument_group("what to run")
    g.add_argument(
        "-c", "--collective", nargs="+", metavar="NAME", default=None,
        help=f"collective(s) ({', '.join(COLLECTIVES)}, or 'all'); "
        f"default: {' '.join(DEFAULT_COLLECTIVES)}",
    )
    g.add_argument(
        "-a", "--algorithm", nargs="+", metavar="NAME", default=["auto"],
        help="p2p algorithm(s) to time besides native: 'auto' (default), 'all' (every registered "
        "one), 'none' (native only) or registry names (comma-separated or several)",
    )
    g.add_argument(
        "-m", "--message-size", default=DEFAULT_SIZES, metavar="MIN:MAX[:F]",
        help=f"message sizes S in bytes: MIN, 2 MIN, 4 MIN, ... up to MAX (MIN:MAX:F: MIN, F MIN, "
        "F^2 MIN, ...), K/M/G suffixes "
        f"(default {DEFAULT_SIZES}); each is rounded down to whole elements (whole blocks of "
        "P for the block collectives), and sizes that round to the same count run once",
    )
    g.add_argument("--dtype", default="float64",
                   help="element type (default float64), or a derived datatype: "
                        f"{_dtypes.DERIVED_GRAMMAR}, e.g. vector:2:3:float64")
    g.add_argument("--op", default="sum", help="reduction op (default sum)")
    g.add_argument(
        "--pattern", nargs="+", metavar="NAME", default=["numpy"],
        help=f"how each call passes its buffers, as real programs do: {', '.join(PATTERNS)}, "
        "or 'all' (one table per pattern; default numpy: the same array at every call); "
        "every implementation is timed with the same pattern (docs/bench.md#patterns)",
    )
    g.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    g.add_argument("--in-place", action="store_true", help="use MPI.IN_PLACE")
    g.add_argument(
        "--nonblocking", action="store_true",
        help="time the I-forms and report communication/computation overlap (OSU, IMB-NBC)",
    )
    g.add_argument(
        "--objects", action="store_true",
        help="time the lower-case object methods instead (allreduce(1.5), bcast(dict), "
        "gather(3), allgather(rank), alltoall(list), barrier()) for mpi4py, native and the -a "
        "p2p algorithms, of the -c collectives that have one (docs/bench.md#objects)",
    )
    g.add_argument(
        "--persistent", action="store_true",
        help="also time each implementation's persistent form (Allreduce_init, ...: Start + "
        "Wait), in a column X:init beside X",
    )
    g.add_argument(
        "--test-calls", type=int, default=0, metavar="N",
        help="--nonblocking: call Test() N times during the compute (OSU -t)",
    )
    t = parser.add_argument_group("timing")
    t.add_argument("-i", "--iterations", type=int, default=None,
                   help="timed iterations per size (default: from --time-budget)")
    t.add_argument("-x", "--warmup", type=int, default=None,
                   help=f"warm-up iterations per size (default {DEFAULT_WARMUP}; with -i and "
                   "no --time-budget, iterations/10, at least 1)")
    t.add_argument(
        "--time-budget", type=float, default=None, metavar="SECONDS",
        help=f"seconds of timed iterations per size and implementation (default "
        f"{DEFAULT_TIME_BUDGET} unless -i is given; with -i, -i is the cap)",
    )
    t.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="abort the job if one size of one implementation takes longer "
                   "(default 300; 0: no limit)")
    t.add_argument("--model", metavar="FILE", default=None,
                   help="cost model for the predicted time of each p2p result (a file written "
                   "by mpicoll calibrate; default: the calibrated model if there is one, else "
                   "the built-in defaults)")
    t.add_argument("--phases", action="store_true",
                   help="also time each round of the p2p algorithms (rank 0 and the slowest "
                   f"rank; up to {PHASE_ITERATIONS} extra iterations after the timed ones): "
                   "per-round times in the JSON, a stacked bar per algorithm in the plot "
                   "(ring allreduce: its reduce-scatter and allgather rounds)")
    t.add_argument("--split", metavar="MOD:k|DIV:k", default=None,
                   help="run on several sub-communicators at once (nccl-tests' split, IMB "
                   "-multi): MOD:k, rank r in group r mod k; DIV:k, in group r div k; every "
                   "group's tables, then the aggregate")
    n = parser.add_argument_group("native algorithms (run without mpiexec: bench launches)")
    n.add_argument(
        "--native-algorithms", nargs="+", metavar="NAME", default=None,
        help="also time the MPI library's own algorithms, a column native:NAME each: 'all' or "
        "names (MPICH: MPIR_CVAR_<COLL>_INTRA_ALGORITHM values; Open MPI: coll_tuned names); "
        "bench then starts one mpiexec -n P per algorithm itself and merges the results "
        "(docs/bench.md#native-algorithms)",
    )
    n.add_argument("-n", "--np", type=int, default=None, metavar="P",
                   help="--native-algorithms: ranks of each launch (default 4)")
    add_launch_options(n, what="--native-algorithms: ")
    n.add_argument("--native-label", default=None, help=argparse.SUPPRESS)
    o = parser.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", help="write every statistic and provenance as JSON")
    o.add_argument("--csv", metavar="FILE", help="write every statistic as CSV")
    o.add_argument("--plot", metavar="FILE.png",
                   help="latency vs size plot (needs matplotlib; the extension names the "
                   "format: png, svg, pdf, ...)")
    o.add_argument("--stats", action="store_true",
                   help="print, under each table, p50/p90/p99/min/max, the coefficient of "
                   "variation, the entry skew and the most often slowest rank of every timed "
                   "result (the JSON always has them, and every iteration's time)")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")


def make_plan(args: argparse.Namespace, p: int, error: Callable[[str], Any]) -> Plan:
    """Validate ``bench`` arguments (same verdict on every rank); ``error(msg)`` raises."""

    colls, algs = selection(args, DEFAULT_COLLECTIVES, ["auto"], ("auto", "all", "none"), error)
    p = _native_options(args, colls, p, error)
    try:
        sizes = parse_sizes(args.message_size)
    except ValueError as exc:
        error(f"argument -m/--message-size: {exc}")
    if not _dtypes.known_dtype(args.dtype):
        error(f"argument --dtype: unknown dtype {args.dtype!r} (choose from "
              f"{', '.join(_dtypes.DTYPES)}, or a derived {_dtypes.DERIVED_GRAMMAR})")
    if args.op not in _dtypes.OPS:
        error(f"argument --op: unknown op {args.op!r} (choose from {', '.join(_dtypes.OPS)})")
    if any(c in _cases.REDUCTIONS for c in colls):
        why = _dtypes.dtype_op_problem(args.dtype, args.op, p)
        if why:
            error(f"argument --op: {why}")
    # options that apply to none of the collectives asked for: refused, not ignored
    if args.op != "sum" and not any(c in _cases.REDUCTIONS for c in colls):
        error(f"argument --op: none of {', '.join(colls)} reduces (an op applies to "
              f"{', '.join(sorted(_cases.REDUCTIONS))})")
    if args.root != 0 and not any(c in _cases.ROOTED for c in colls):
        error(f"argument --root: none of {', '.join(colls)} has a root (a root applies to "
              f"{', '.join(sorted(_cases.ROOTED))})")
    if any(c in _cases.ROOTED for c in colls) and not 0 <= args.root < p:
        error(f"argument --root: root {args.root} is not a rank (P = {p})")
    try:
        patterns = parse_patterns(getattr(args, "pattern", None) or ["numpy"])
    except ValueError as exc:
        error(f"argument --pattern: {exc}")
    if args.iterations is not None and args.iterations < 1:
        error("argument -i/--iterations: must be >= 1")
    if args.warmup is not None and args.warmup < 0:
        error("argument -x/--warmup: must be >= 0")
    if args.time_budget is not None and not (math.isfinite(args.time_budget)
                                             and args.time_budget > 0):
        error(f"argument --time-budget: must be > 0 (a finite number of seconds), got "
              f"{args.time_budget:g}")
    timeout_problem = seconds_problem("--timeout", args.timeout)
    if timeout_problem:
        error(timeout_problem)
    if args.test_calls < 0:
        error("argument --test-calls: must be >= 0")
    if args.test_calls and not args.nonblocking:
        error("argument --test-calls: only with --nonblocking")
    if getattr(args, "split", None):
        from .split import group_sizes, parse_split
        try:
            smallest = min(group_sizes(*parse_split(args.split, p), p))
        except ValueError as exc:
            error(f"argument --split: {exc}")
        if any(c in _cases.ROOTED for c in colls) and args.root >= smallest:
            error(f"argument --root: root {args.root} is not a rank of the smallest group "
                  f"of --split {args.split} ({smallest} ranks)")
        for other, given in (("--native-algorithms", getattr(args, "native_algorithms", None)),
                             ("--objects", getattr(args, "objects", False))):
            if given:
                error(f"argument --split: not with {other}")
    persistent = bool(getattr(args, "persistent", False))
    phases = bool(getattr(args, "phases", False))
    if phases:
        for other, given in (("--nonblocking", args.nonblocking),
                             ("--objects", getattr(args, "objects", False))):
            if given:
                error(f"argument --phases: not with {other} (it times blocking p2p calls)")
        # (a forced launch of --native-algorithms or sweep runs -a none: nothing to phase)
        if not any(algorithms_of(c, algs) for c in colls) and \
                getattr(args, "native_label", None) is None:
            error("argument --phases: no p2p algorithm to time (-a none)")
    if persistent and args.nonblocking:
        error("argument --persistent: not with --nonblocking")
    if getattr(args, "objects", False):
        pattern_given = getattr(args, "pattern", None) not in (None, ["numpy"])
        for other, given in (("--nonblocking", args.nonblocking), ("--persistent", persistent),
                             ("--native-algorithms", getattr(args, "native_algorithms", None)),
                             ("--pattern", pattern_given)):
            if given:
                error(f"argument --objects: not with {other}")
        if not any(c in OBJECT_CALLS for c in colls):
            error(f"argument --objects: none of {', '.join(colls)} has an object call "
                  f"(choose from {', '.join(OBJECT_CALLS)})")
    budget = args.time_budget
    if budget is None and args.iterations is None:
        budget = DEFAULT_TIME_BUDGET
    settings = Settings(args.iterations, args.warmup, budget, args.test_calls)
    return Plan(colls, algs, args.nonblocking, args.timeout, sizes=sizes, dtype=args.dtype,
                op=args.op, root=args.root, in_place=args.in_place, settings=settings,
                model_path=getattr(args, "model", None), persistent=persistent,
                patterns=patterns, phases=phases)


def _native_options(args: argparse.Namespace, colls: Sequence[str], p: int,
                    error: Callable[[str], Any]) -> int:
    """Check ``--native-algorithms``, ``-n``, ``--native-label`` (the same verdict on every
    rank: the library is the same everywhere); the P the rest of the checks use."""
    from .launcher import library, native_names

    names = split(getattr(args, "native_algorithms", None))
    label = getattr(args, "native_label", None)
    if getattr(args, "np", None) is not None and not names:
        error("argument -n/--np: only with --native-algorithms (else run under mpiexec -n P)")
    if not names and label is None:
        return p
    kind, version = library()
    known = sorted({n for c in colls for n in native_names(kind, c, args.nonblocking)})
    if kind == "other":
        error(f"argument --native-algorithms: {version}: forcing its algorithms is supported "
              "for MPICH and Open MPI only")
    for n in names if names != ["all"] else []:
        if n not in known:
            error(f"argument --native-algorithms: unknown {kind} "
                  f"{'non-blocking ' if args.nonblocking else ''}algorithm {n!r} for "
                  f"{', '.join(colls)} (choose from all, {', '.join(known)})")
    if label is not None:
        if label not in known:
            error(f"argument --native-label: unknown {kind} algorithm {label!r}")
        return p
    if p > 1:
        error("argument --native-algorithms: bench starts one mpiexec per configuration "
              "itself: run it without mpiexec (python -m mpicoll bench --native-algorithms "
              "... -n P)")
    if getattr(args, "persistent", False):
        error("argument --native-algorithms: not with --persistent yet")
    args.np = 4 if args.np is None else args.np
    if args.np < 1:
        error("argument -n/--np: must be >= 1")
    why = seconds_problem("--launch-timeout", args.launch_timeout)
    if why:
        error(why)
    args.native_algorithms = names
    return int(args.np)


def environment_problem(args: argparse.Namespace) -> str | None:
    """Checks that only rank 0 can make, before anything runs: matplotlib and the image
    format of ``--plot``, ``--model``, and that every output file (``--json``, ``--csv``,
    ``--plot``) can be written and no two of them are the same file; None if fine."""
    if args.plot:
        why = plot_problem(args.plot)
        if why:
            return why
    if getattr(args, "model", None):
        try:
            resolve_model(args.model)
        except ValueError as exc:
            return f"argument --model: {exc}"
    seen: dict[str, str] = {}
    for opt in ("json", "csv", "plot"):
        path = getattr(args, opt)
        if path:
            why = output_file_problem(f"--{opt}", path)
            if why:
                return why
            key = os.path.realpath(path)
            if key in seen:
                return f"arguments --{seen[key]} and --{opt}: both write {path!r}"
            seen[key] = opt
    return None


def run(
    args: argparse.Namespace, comm: Any, argv: Sequence[str] = (), out: TextIO | None = None
) -> int:
    """Run ``bench`` with validated ``args`` on ``comm``; the exit status (same on all ranks).

    Returns:
        0 if every checked result was right, 1 if any implementation was WRONG or raised.
    """
    out = out or sys.stdout
    if getattr(args, "native_algorithms", None):
        return run_native(args, argv, out)
    if getattr(args, "split", None):
        from .split import run_split
        return run_split(args, comm, argv, out, run, _write_outputs)
    rank, p = comm.Get_rank(), comm.Get_size()
    plan: Plan = args.plan
    label = getattr(args, "native_label", None)
    plan.model, plan.model_source = comm.bcast(
        resolve_model(plan.model_path) if rank == 0 else None, root=0
    )
    need_p2p = any(algorithms_of(c, plan.algorithms) for c in plan.collectives)
    native, p2p = make_backends(comm, need_p2p)
    prov = provenance(comm, ["bench", *argv])
    progress = Progress(rank == 0 and not args.quiet)
    if rank == 0:
        out.write(header(plan, prov))
        out.flush()
    all_records: list[dict[str, Any]] = []
    guard = CallGuard(comm, plan.timeout)
    # the mpi4py column's communicator: no message of mpicoll's on it (a forced-algorithm
    # launch has its native:NAME column only)
    plain = comm.Dup() if label is None else None
    skipped: list[dict[str, Any]] = []
    partial: list[dict[str, Any]] = []  # the sizes done of the collective in progress
    # Ctrl-C is rank 0's alone (mpiexec forwards it to every rank): a rank interrupted at a
    # Python point leaves the collective in progress, and rank 0, blocked in MPI waiting for
    # it, would never reach the code that writes the results; the others keep going until
    # rank 0's MPI_Abort ends them
    main = threading.current_thread() is threading.main_thread()
    ignored = rank != 0 and main
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignored else None
    # Open MPI's launcher answers Ctrl-C with SIGTERM to every rank: rank 0 takes it as one
    term = signal.signal(signal.SIGTERM, _terminated) if rank == 0 and main else None
    try:
        for coll in plan.collectives if getattr(args, "objects", False) else ():
            if coll not in OBJECT_CALLS:
                continue
            recs = bench_objects(comm, plan, coll, native, p2p, plain, progress)
            all_records += recs
            progress.clear()
            if rank == 0:
                out.write(format_objects(coll, recs) + "\n")
                out.flush()
        for coll in plan.collectives if not getattr(args, "objects", False) else ():
            for pattern in plan.patterns:
                adapted = adapt(pattern, coll, plan.dtype, plan.op, coll in _cases.REDUCTIONS)
                if adapted.skip:  # the same verdict on every rank (the command line's)
                    skipped.append({"collective": coll, "pattern": pattern,
                                    "reason": adapted.skip})
                    if rank == 0:
                        out.write(f"# {coll} [pattern {pattern}]: skipped: {adapted.skip}\n\n")
                    continue
                recs = bench_collective(comm, plan, coll, guard.native or native, p2p,
                                        progress, guard=guard, plain=plain, pattern=pattern,
                                        native_label=label, on_row=partial.extend)
                partial.clear()
                all_records += recs
                progress.clear()
                if rank == 0:
                    out.write(format_block(plan, coll, recs, p, pattern, adapted.note) + "\n")
                    if getattr(args, "stats", False):
                        out.write(format_stats(recs) + "\n")
                    out.flush()
    except KeyboardInterrupt:
        progress.clear()
        _interrupted(args, comm, document(plan, prov, all_records + partial, skipped), out)
    finally:
        progress.clear()
        if ignored:
            signal.signal(signal.SIGINT, previous)
        if term is not None:
            signal.signal(signal.SIGTERM, term)
    guard.Free()
    if plain is not None:
        plain.Free()
    wrong = sum(r["status"] in ("wrong", "error") for r in all_records)
    if rank == 0:
        doc = document(plan, prov, all_records, skipped)
        args.last_document = doc  # --split: the group's document, for its merge
        _write_outputs(args, doc)
        if wrong:
            out.write(f"# {wrong} WRONG result(s): see the notes under the tables\n")
        out.flush()
    return 1 if wrong else 0




#: ``--objects``: collective -> (the call as text, ``make(rank, p)`` -> its arguments, root).
OBJECT_CALLS: dict[str, tuple[str, Callable[[int, int], tuple[Any, ...]], int | None]] = {
    "allreduce": ("allreduce(1.5)", lambda r, p: (1.5,), None),
    "bcast": ("bcast(dict)", lambda r, p: ({"step": 7, "lr": 0.5, "name": "run", "ids": [1, 2]}
                                           if r == 0 else None,), 0),
    "gather": ("gather(3)", lambda r, p: (3,), 0),
    "allgather": ("allgather(rank)", lambda r, p: (r,), None),
    "alltoall": ("alltoall(list)", lambda r, p: ([r * p + j for j in range(p)],), None),
    "barrier": ("barrier()", lambda r, p: (), None),
}


def bench_objects(comm: Any, plan: Plan, coll: str, native: Any, p2p: Any, plain: Any,
                  progress: Progress) -> list[dict[str, Any]]:
    """``--objects``: time the lower-case object call of ``coll`` (:data:`OBJECT_CALLS`) on
    plain mpi4py (a duplicate of ``comm``), the native backend and each ``-a`` p2p algorithm
    (``algorithm=``; ``auto``: none), each checked first against mpi4py's return value on
    every rank (``WRONG`` and not timed where any rank differs).  One record each, pattern
    ``object``; ``size_bytes`` is the pickled size of this rank 0's argument."""
    import pickle

    from ..algorithms.registry import RestrictionError

    text, make, root = OBJECT_CALLS[coll]
    p, rank = comm.Get_size(), comm.Get_rank()
    args = make(rank, p)
    kw = {} if root is None else {"root": root}
    size = len(pickle.dumps(args[0] if args else None)) if coll != "barrier" else 0
    size = comm.bcast(size, root=0)
    impls: list[tuple[str, str, Any, str | None]] = [("mpi4py", "mpi4py", plain, None),
                                                     ("native", "native", native, None)]
    if p2p is not None:
        impls += [(a, "p2p", p2p, a) for a in algorithms_of(coll, plan.algorithms)]
    want = getattr(plain, coll)(*args, **kw)
    records = []
    for label, kind, backend, alg in impls:
        rec: dict[str, Any] = {
            "collective": coll, "pattern": "object", "object_call": text,
            "implementation": label, "backend": kind, "algorithm": alg, "auto_choice": None,
            "size_bytes": size, "count": 1, "dtype": "object",
            "op": "sum" if coll == "allreduce" else None, "root": root, "in_place": False,
            "nonblocking": False, "persistent": False, "status": "ok", "check": None,
            "reason": None, "wrong_rank": None, "iterations": None, "warmup": None,
            "time_us": None, "algbw_gbps": None, "busbw_gbps": None,
            "busbw_factor": busbw_factor(coll, p), "predicted_us": None,
            "measured_over_predicted": None}
        extra = {} if kind != "p2p" or alg in (None, "auto") else {"algorithm": alg}
        method = getattr(backend, coll)

        def fn(method: Any = method, extra: dict[str, Any] = extra) -> Any:
            return method(*args, **kw, **extra)

        progress.show(f"[mpicoll bench] {text} {label}")
        WATCHDOG.arm(plan.timeout, f"bench {text} {label}")
        try:
            na = None
            try:
                got, err = fn(), None
            except (RestrictionError, ValueError) as exc:  # refused before any message
                got, err, na = None, describe_error(exc), str(exc)
            except Exception as exc:  # an implementation's own error: reported, not timed
                got, err = None, describe_error(exc)
            bad = comm.allgather(err if err else None if got == want else
                                 f"got {got!r}, expected {want!r}")
            first = next((k for k, b in enumerate(bad) if b), None)
            if na is not None and all(b is not None for b in bad):
                rec.update(status="n/a", reason=na)
            elif first is not None:
                rec.update(status="error" if err else "wrong", check="mpi4py",
                           reason=bad[first], wrong_rank=first)
            else:
                rec["check"] = "mpi4py"
                rec.update(measure_blocking(comm, fn, plan.settings))
        finally:
            WATCHDOG.disarm()
        records.append(rec)
    return records


def format_objects(coll: str, records: Sequence[dict[str, Any]]) -> str:
    """``--objects``: one row per implementation: median, min and max time (us), and its
    ratio to mpi4py's median."""
    text = records[0]["object_call"]
    base = next((r["time_us"]["median"] for r in records
                 if r["implementation"] == "mpi4py" and r["time_us"]), None)
    lines = [f"# {text}: {records[0]['size_bytes']} bytes pickled; the lower-case object "
             "method, checked against mpi4py's result on every rank",
             f"# {'implementation':<20} {'check':>6} {'median':>10} {'min':>10} {'max':>10} "
             f"{'/mpi4py':>8}",
             f"# {'':<20} {'':>6} {'(us)':>10} {'(us)':>10} {'(us)':>10} {'(x)':>8}"]
    for r in records:
        t = r["time_us"]
        if t is None:
            lines.append(f"  {r['implementation']:<20} {r['status'].upper():>6}  "
                         f"{str(r['reason'])[:150]}")
            continue
        ratio = f"{t['median'] / base:.2f}" if base else "-"
        lines.append(f"  {r['implementation']:<20} {'ok':>6} {t['median']:>10.2f} "
                     f"{t['min']:>10.2f} {t['max']:>10.2f} {ratio:>8}")
    return "\n".join(lines) + "\n"


def _child_args(argv: Sequence[str]) -> list[str]:
    """The driver's bench arguments less those the driver itself handles (the launches'
    size, the native algorithms, the output files, -q)."""
    from .launcher import child_args
    return child_args(argv, {"--native-algorithms", "-n", "--np", "--launch-timeout",
                             "--json", "--csv", "--plot"}, {"-q", "--quiet"})


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM on rank 0 during bench: handled as Ctrl-C (:func:`_interrupted`)."""
    raise KeyboardInterrupt


def _interrupted(args: argparse.Namespace, comm: Any, doc: dict[str, Any], out: TextIO
                 ) -> NoReturn:
    """Ctrl-C: rank 0 writes what was measured so far (``doc``) where ``--json``, ``--csv``
    and ``--plot`` ask, says so in one line, and ends the job with status 130 (``MPI_Abort``
    under mpiexec: no traceback per rank); the other ranks wait for that abort (then abort
    themselves, should rank 0 not have been interrupted)."""
    import time

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        files = [f for f in (args.json, args.csv, args.plot) if f]
        try:
            _write_outputs(args, doc)
            said = (f"wrote the {len(doc['results'])} result(s) measured so far to "
                    f"{', '.join(files)}" if files else "nothing written (no --json/--csv/--plot)")
        except Exception as exc:  # the interrupted run's files: best effort
            said = f"could not write the results so far: {exc}"
        out.write(f"\n# interrupted (Ctrl-C): {said}\n")
        out.flush()
        if world.Get_size() > 1:
            world.Abort(130)
        raise SystemExit(130)
    time.sleep(10)
    world.Abort(130)
    raise SystemExit(130)  # not reached


def _write_outputs(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Write bench's document where ``--json``, ``--csv`` and ``--plot`` ask (rank 0)."""
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.csv:
        write_csv(args.csv, doc)
    if args.plot:
        write_plot(args.plot, doc)


def run_native(args: argparse.Namespace, argv: Sequence[str], out: TextIO) -> int:
    """``bench --native-algorithms``: one launch for the library's default (native, mpi4py and
    the ``-a`` p2p algorithms) and one per forced native algorithm (:mod:`.launcher`), merged
    into one table per collective with a ``native:NAME`` column each, the same-algorithm
    ratios ``p2p:X / native:X`` of :mod:`mpicoll.algorithms.twins` and, per forced column,
    where the library says it ran.  Runs in one process, without mpiexec."""
    from . import launcher

    plan: Plan = args.plan
    kind, version = launcher.library()
    configs = [launcher.Config("default"),
               *launcher.native_configs(kind, plan.collectives, args.native_algorithms,
                                        p=args.np, nonblocking=plan.nonblocking)]
    progress = Progress(not args.quiet)
    child = _child_args(argv)
    launches = launcher.run(configs, args.np, child, timeout=args.launch_timeout,
                            progress=progress.show)
    progress.clear()
    doc = launcher.merge(launches, kind, version)
    records = doc["results"]
    for r in records:
        if r["backend"] == "native" and "native_algorithm" not in r:
            r["native_ran"] = None
            r["native_ran_evidence"] = f"unknown: {kind} does not say which algorithm its " \
                                       "default selection ran"
    ratios = same_algorithm_ratios(records, kind)
    doc["native_algorithms"] = {"library": kind, "version": version,
                                "requested": args.native_algorithms, "ratios": ratios}
    out.write(f"# native library: {version} ({kind}); P = {args.np}; one launch per "
              f"configuration ({len(launches)}):\n")
    for ln in launches:
        state = "ok" if ln.status == 0 else f"exit {ln.status}"
        out.write(f"#   {ln.config.name}: {ln.config.setting()} [{state}, {ln.seconds:.1f} s]\n")
        if ln.evidence:
            out.write(f"#     {ln.evidence}\n")
        if ln.doc is None:
            out.write("#     " + ln.output.strip().replace("\n", "\n#     ")[-1500:] + "\n")
    out.write("\n")
    for coll in plan.collectives:
        for pattern in plan.patterns:
            recs = [r for r in records if r["collective"] == coll
                    and r.get("pattern", "numpy") == pattern]
            if not recs:
                continue
            out.write(format_block(plan, coll, recs, args.np, pattern))
            if getattr(args, "stats", False):
                out.write(format_stats(recs))
            out.write(format_native_notes(coll, recs, [x for x in ratios
                                                       if x["collective"] == coll
                                                       and x["pattern"] == pattern]) + "\n")
    _write_outputs(args, doc)
    failed = [ln for ln in launches if ln.status != 0]
    if doc["wrong"]:
        out.write(f"# {doc['wrong']} WRONG result(s): see the notes under the tables\n")
    if failed:
        out.write(f"# {len(failed)} launch(es) failed: "
                  f"{', '.join(ln.config.name for ln in failed)}\n")
    out.flush()
    return 1 if doc["wrong"] or failed else 0


def same_algorithm_ratios(records: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Per (collective, pattern, size) and twin pair: ``p2p:X`` median time over
    ``native:Y``'s, Y being X's twin in library ``kind`` (:func:`mpicoll.algorithms.twins.twin`)
    where both were timed; > 1: the Python schedule is slower than the library's same
    algorithm."""
    from ..algorithms.twins import twin

    by: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "ok" and r["time_us"] and not r.get("persistent"):
            key = (r["collective"], r.get("pattern", "numpy"), r["size_bytes"])
            by.setdefault(key, {})[r["implementation"]] = r
    out = []
    for (coll, pattern, size), row in by.items():
        for lab, r in row.items():
            if r["backend"] != "p2p" or not r["algorithm"] or r["algorithm"] == "auto":
                continue
            name = twin(coll, r["algorithm"], kind, bool(r.get("nonblocking")))
            nat = row.get(f"native:{name}") if name else None
            if nat is None or nat["time_us"]["median"] <= 0:
                continue
            out.append({"collective": coll, "pattern": pattern, "size_bytes": size,
                        "p2p": lab, "native": f"native:{name}",
                        "native_ran": nat.get("native_ran"),
                        "ratio": r["time_us"]["median"] / nat["time_us"]["median"]})
    return out


def format_native_notes(coll: str, records: Sequence[dict[str, Any]],
                        ratios: Sequence[dict[str, Any]]) -> str:
    """Under a --native-algorithms table: what each forced column ran (per size, as the
    library says) and the same-algorithm ratios, a row per size."""
    lines: list[str] = []
    forced: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("native_algorithm"):
            forced.setdefault(r["implementation"], []).append(r)
    for lab, recs in forced.items():
        ran = [r for r in recs if r.get("native_ran") == r["native_algorithm"]]
        back = [r for r in recs if r.get("native_ran") not in (None, r["native_algorithm"])]
        unknown = [r for r in recs if r.get("native_ran") is None and r["status"] == "ok"]
        text = f"#   {lab} ran as forced at {len(ran)} of {len(recs)} size(s)"
        if back:
            text += (f"; fell back to {back[0]['native_ran']} at "
                     f"{', '.join(human_size(r['size_bytes']) + 'B' for r in back)} "
                     f"({back[0]['native_ran_evidence']})")
        if unknown:
            text += f"; unknown at {len(unknown)} ({unknown[0]['native_ran_evidence']})"
        lines.append(text)
    if ratios:
        pairs: list[tuple[str, str]] = []
        for x in ratios:
            if (x["p2p"], x["native"]) not in pairs:
                pairs.append((x["p2p"], x["native"]))
        heads = [f"{a}/{b}" for a, b in pairs]
        lines.append("#   same algorithm, p2p median / native median (> 1: the Python "
                     "schedule is slower; * native fell back at that size):")
        lines.append("#   " + "  ".join([f"{'size':>8}", *(f"{h:>{len(h)}}" for h in heads)]))
        sizes = sorted({x["size_bytes"] for x in ratios})
        for size in sizes:
            cells = []
            for (a, b), h in zip(pairs, heads, strict=True):
                hit: dict[str, Any] | None = next(
                    (y for y in ratios if y["size_bytes"] == size and y["p2p"] == a
                     and y["native"] == b), None)
                cell = "-" if hit is None else f"{hit['ratio']:.2f}" + (
                    "*" if hit["native_ran"] not in (None, b.split(":", 1)[1]) else "")
                cells.append(f"{cell:>{len(h)}}")
            lines.append("#   " + "  ".join([f"{human_size(size) + 'B':>8}", *cells]))
    return "\n".join(lines) + ("\n" if lines else "")
