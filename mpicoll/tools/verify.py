"""``mpicoll verify``: every p2p algorithm against native, exactly, on every rank.

The matrix: every collective x every p2p algorithm (``auto`` included) x dtypes x ops x roots x
in-place x equal / varying counts (v-variants) x a set of counts (0, 1, P-1, P+1 and a larger
one).  Each case runs native first; native is checked against the exact NumPy answer, then each
algorithm against native's output (against the NumPy answer where native itself failed).  Cases
an algorithm's registry restrictions forbid (:meth:`mpicoll.registry.Algorithm.why_not`) are
``n/a``.  Rank 0 prints a compact pass/fail matrix (rows: collective x implementation, columns:
counts) and then one line per failure naming collective, algorithm, P, dtype, op, root, count
and the first differing index on which rank.  Exit status 1 on any failure.

Inputs are small integers in every dtype, so results are exact whatever the reduction order;
a difference is a bug, never rounding.

A call that raises is a failure of its case (``error``), whichever backend raised: a FAIL line
names the collective, the backend (``native`` or the p2p algorithm), the case, the rank and the
exception's text (for an error of the MPI library, its error class and message, e.g. MPICH
5's ``MPI.Exception [MPI_ERR_TYPE]: Invalid datatype`` for ``MPI_Gather`` of ``MPI_DOUBLE_INT``
with 1000 elements at P >= 4).  Native errors are failures, not skips: verify cannot tell an
upstream bug from a wrong call mpicoll makes, so it shows the error and exits 1; the p2p
algorithms of that case are then checked against the exact NumPy answer.  After each call the
ranks settle its outcome (:class:`~mpicoll.tools.harness.CallGuard`): when an error has stranded
other ranks inside the call (waiting for a message the failing rank will never send or receive, as
MPICH's error above does at P = 6), the run cannot go on, so the failing rank prints the case,
the backend and the error on stderr and aborts the job (non-zero exit status) after at most
``min(10, --timeout / 2)`` seconds, instead of the others reporting a timeout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

from . import cases as _cases
from . import dtypes as _dtypes
from .cases import Case
from .compare import compare
from .harness import (
    WATCHDOG,
    CallGuard,
    Plan,
    Progress,
    Stderr,
    make_backends,
    provenance,
    run_checked,
)
from .launcher import add_launch_options
from .options import algorithms_of, seconds_problem, selection, split

__all__ = ["DEFAULT_DATA_DTYPES", "DEFAULT_REDUCTION_DTYPES", "add_arguments", "make_plan", "run"]

#: Default dtypes of each op (reductions): one or two per op, covering every type class.
DEFAULT_REDUCTION_DTYPES: dict[str, list[str]] = {
    "sum": ["int32", "float64", "complex128"],
    "prod": ["int64", "float32"],
    "max": ["int16", "float64"],
    "min": ["uint8", "float32"],
    "land": ["bool", "int32"],
    "lor": ["bool"],
    "lxor": ["int64"],
    "band": ["uint8"],
    "bor": ["int32"],
    "bxor": ["uint64"],
    "maxloc": ["double_int", "2int"],
    "minloc": ["float_int", "long_int"],
    "user": ["float64"],
    "noncomm": ["int64"],
}
#: Default dtypes of the data-movement collectives (8-byte and 1-byte elements).
DEFAULT_DATA_DTYPES: list[str] = ["float64", "int8"]
#: The larger count of the default set.
LARGE_COUNT = 1000

_QUICK_REDUCTION_DTYPES = {"sum": ["float64"], "max": ["int32"], "noncomm": ["int64"]}


@dataclass
class Outcome:
    """One (case, implementation, form) verdict, as rank 0 records it."""

    collective: str
    implementation: str
    count: int
    status: str  # ok | wrong | error | n/a
    describe: str
    detail: str | None = None
    rank: int | None = None
    form: str = "blocking"
    #: --native-label launches: MPICH's fallback notice during the native call (None: none)
    notice: str | None = None
    #: --native-label launches, a failing native call: the case's shape (P, root, counts,
    #: displacements, ...) and every rank's reproducer part (:mod:`.reproducer`)
    case: dict[str, Any] | None = None
    repro: list[dict[str, Any]] | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verify`` options."""
    parser.add_argument("-c", "--collective", nargs="+", metavar="NAME",
                        help="collectives to verify (default: all)")
    parser.add_argument("-a", "--algorithm", nargs="+", metavar="NAME",
                        help="p2p algorithms: 'all' (default: every registered one and auto), "
                        "'auto', or names")
    parser.add_argument("--counts", metavar="N,N,...",
                        help=f"element counts (default: 0,1,P-1,P+1,{LARGE_COUNT})")
    parser.add_argument("--dtypes", metavar="T,T,...",
                        help="dtypes, or 'all' (default: one or two per op / type class); "
                             "derived datatypes too: " + _dtypes.DERIVED_GRAMMAR
                             + ", e.g. vector:2:3:float64 (reductions: user ops only)")
    parser.add_argument("--ops", metavar="OP,OP,...",
                        help=f"reduction ops, or 'all' (default all: {','.join(_dtypes.OPS)})")
    parser.add_argument("--roots", metavar="R,R,...",
                        help="roots of rooted collectives, or 'all' (default: 0, P/2, P-1)")
    parser.add_argument("--in-place", choices=["no", "yes", "both"], default="both",
                        help="out-of-place, in-place or both (default both)")
    parser.add_argument("--nonblocking", action="store_true",
                        help="also verify the I-forms (start + Wait)")
    parser.add_argument("--quick", action="store_true",
                        help="a small matrix: counts 0,1,P+1; ops sum,max,noncomm; one dtype each")
    parser.add_argument("--max-failures", type=int, default=20, metavar="N",
                        help="failures listed in detail (default 20; all are counted)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="abort the job if one call takes longer (a hang; default 60; 0: "
                        "no limit); a rank whose call raised while others never finished it "
                        "aborts the job after min(10, SECONDS/2) s, naming the error")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")
    n = parser.add_argument_group("native algorithms (run without mpiexec: verify launches)")
    n.add_argument("--native-algorithms", nargs="+", metavar="NAME", default=None,
                   help="check the MPI library's own algorithms, each forced in its own launch "
                   "(MPICH: MPIR_CVAR_[I]<COLL>_INTRA_ALGORITHM values; Open MPI: coll_tuned / "
                   "coll_libnbc names): 'all' or names; with --nonblocking the I-forms' too "
                   "(docs/bench.md#verify-native-algorithms)")
    n.add_argument("-n", "--np", type=int, nargs="+", default=None, metavar="P",
                   help="--native-algorithms: the launches' rank counts (default 2 3 4 5)")
    add_launch_options(n, fresh=True, what="--native-algorithms: ")
    n.add_argument("--repro-dir", default="mpicoll-repro", metavar="DIR",
                   help="--native-algorithms: where the reproducers are written "
                   "(default ./mpicoll-repro)")
    n.add_argument("--json", metavar="FILE",
                   help="--native-algorithms: write the outcomes (rewritten after every "
                   "launch, so a run killed by a timeout keeps what finished; rerunning the "
                   "same command resumes from it)")
    n.add_argument("--native-label", default=None, help=argparse.SUPPRESS)
    n.add_argument("--native-form", choices=["blocking", "nonblocking"], default="blocking",
                   help=argparse.SUPPRESS)


def _native_options(args: argparse.Namespace, colls: Sequence[str], p: int,
                    error: Callable[[str], NoReturn]) -> None:
    """Check ``--native-algorithms``, ``-n``, ``--native-label`` (the same verdict on every
    rank)."""
    from .launcher import library, native_names

    names = split(getattr(args, "native_algorithms", None))
    label = getattr(args, "native_label", None)
    if getattr(args, "np", None) is not None and not names:
        error("argument -n/--np: only with --native-algorithms (else run under mpiexec -n P)")
    if not names and label is None:
        for opt, given in (("--json", getattr(args, "json", None)),
                           ("--fresh", getattr(args, "fresh", False))):
            if given:
                error(f"argument {opt}: only with --native-algorithms")
        return
    kind, version = library()
    if kind == "other":
        error(f"argument --native-algorithms: {version}: forcing its algorithms is supported "
              "for MPICH and Open MPI only")
    forms = [False, True] if args.nonblocking else [False]
    if label is not None:
        forms = [args.native_form == "nonblocking"]
    known = sorted({n for c in colls for nb in forms for n in native_names(kind, c, nb)})
    for n in ([label] if label is not None else names if names != ["all"] else []):
        if n not in known:
            error(f"argument --native-algorithms: unknown {kind} algorithm {n!r} for "
                  f"{', '.join(colls)} (choose from all, {', '.join(known)})")
    if label is not None:
        return
    if p > 1:
        error("argument --native-algorithms: verify starts one mpiexec per configuration "
              "itself: run it without mpiexec (python -m mpicoll verify --native-algorithms "
              "... -n P ...)")
    args.np = args.np or [2, 3, 4, 5]
    if any(x < 1 for x in args.np):
        error("argument -n/--np: must be >= 1")
    why = seconds_problem("--launch-timeout", args.launch_timeout)
    if why:
        error(why)
    args.native_algorithms = names


def make_plan(args: argparse.Namespace, p: int, error: Callable[[str], NoReturn]) -> Plan:
    """Validate ``verify`` arguments (the same verdict on every rank)."""
    from ..algorithms import registry

    colls, algs = selection(args, registry.COLLECTIVES, ["all", "auto"], ("all", "auto", "none"),
                            error)
    _native_options(args, colls, p, error)
    native_mode = bool(getattr(args, "native_algorithms", None)) or \
        getattr(args, "native_label", None) is not None
    if args.counts:
        try:
            counts = [int(x) for x in split([args.counts])]
        except ValueError:
            error(f"argument --counts: expected integers, got {args.counts!r}")
        if any(c < 0 for c in counts):
            error("argument --counts: counts must be >= 0")
    elif args.quick:
        counts = [0, 1, p + 1]
    else:
        counts = [0, 1, p - 1, p + 1, LARGE_COUNT]
    counts = sorted(set(counts))
    # ops and dtypes
    ops = split([args.ops]) if args.ops else None
    if ops == ["all"]:
        ops = list(_dtypes.OPS)
    for o in ops or []:
        if o not in _dtypes.OPS:
            error(f"argument --ops: unknown op {o!r} (choose from {', '.join(_dtypes.OPS)})")
    dtypes = split([args.dtypes]) if args.dtypes else None
    if dtypes == ["all"]:
        dtypes = list(_dtypes.DTYPES)
    for d in dtypes or []:
        if not _dtypes.known_dtype(d):
            error(f"argument --dtypes: unknown dtype {d!r} (choose from "
                  f"{', '.join(_dtypes.DTYPES)}, or a derived {_dtypes.DERIVED_GRAMMAR})")
    table = _QUICK_REDUCTION_DTYPES if args.quick else DEFAULT_REDUCTION_DTYPES
    if ops is None and native_mode:  # predefined types and ops: the reproducers need them
        ops = ["sum", "max"]
        table = {"sum": ["float64"], "max": ["int32"]}
    if ops is None:
        ops = list(table) if dtypes is None else list(_dtypes.OPS)
    pairs: list[tuple[str, str]] = []
    for o in ops:
        for d in dtypes if dtypes is not None else table.get(o, DEFAULT_REDUCTION_DTYPES[o]):
            if _dtypes.dtype_op_problem(d, o, 1) is None:
                pairs.append((d, o))
    if any(c in _cases.REDUCTIONS for c in colls) and not pairs:
        error("arguments --ops/--dtypes: no valid (dtype, op) pair among them")
    data_dtypes = dtypes if dtypes is not None else (
        ["float64"] if args.quick else DEFAULT_DATA_DTYPES
    )
    roots: list[int] | None
    if args.roots == "all":
        roots = None
    elif args.roots:
        try:
            roots = sorted({int(x) for x in split([args.roots])})
        except ValueError:
            error(f"argument --roots: expected integers or 'all', got {args.roots!r}")
        bad = [r for r in roots if not 0 <= r < p]
        if bad:
            error(f"argument --roots: {bad[0]} is not a rank (P = {p})")
    else:
        roots = None if native_mode else sorted({0, p // 2, p - 1}) if not args.quick \
            else sorted({0, p - 1})
    in_place = {"no": [False], "yes": [True], "both": [False, True]}[args.in_place]
    if args.max_failures < 0:
        error("argument --max-failures: must be >= 0")
    timeout_problem = seconds_problem("--timeout", args.timeout)
    if timeout_problem:
        error(timeout_problem)
    return Plan(colls, algs, args.nonblocking, args.timeout, counts=counts,
                reduction_pairs=pairs, data_dtypes=data_dtypes, roots=roots, in_places=in_place,
                uniform=[True, False], max_failures=args.max_failures)


def cases_of(plan: Plan, coll: str, p: int, rank: int) -> list[Case]:
    """Every case of ``coll`` in ``plan`` (the same list, in the same order, on every rank)."""
    out = []
    combos: list[tuple[str, str]]
    if coll in _cases.REDUCTIONS:
        combos = plan.reduction_pairs
    else:
        combos = [(d, "sum") for d in plan.data_dtypes]
    roots = [0]
    if coll in _cases.ROOTED:
        roots = plan.roots if plan.roots is not None else list(range(p))
    in_places = plan.in_places if coll in _cases.IN_PLACE_COLLECTIVES else [False]
    uniforms = plan.uniform if coll in _cases.V_COLLECTIVES else [True]
    counts = [0] if coll == "barrier" else plan.counts
    for count in counts:
        for dtype, op in combos:
            for root in roots:
                for ip in in_places:
                    for uni in uniforms:
                        k = _dtypes.per_element(dtype)  # derived: counts in base values
                        case = Case(coll, count * k, dtype, op, root, ip, p, rank, uni)
                        out.append(case)
                if coll == "barrier":
                    return out
    return out


def _check_case(
    comm: Any, case: Case, impls: list[str], native: Any, p2p: Any, forms: list[bool],
    timeout: float, guard: CallGuard, native_name: str = "native",
    stderr_path: str | None = None,
) -> tuple[list[tuple[str, str, str, str | None]], Any, str | None]:
    """Run one case on every implementation and form.

    Every call is settled with ``guard`` (see :class:`mpicoll.tools.harness.CallGuard`).
    ``native_name``: the native implementation's label (``native:NAME`` in a forced launch,
    whose native calls' stderr is captured for MPICH's fallback notice, in ``stderr_path``
    when given: the file stays if the library aborts the process inside the call).

    Returns:
        the local ``(impl, form, status, detail)`` verdicts, the native backend to use
        from now on (``native``, or a fresh one if a native call raised on some rank), and
        the fallback notice this rank's library wrote during a native call (None: none).
    """
    from ..algorithms import registry
    from .launcher import fallback_message

    out: list[tuple[str, str, str, str | None]] = []
    problem = case.problem()
    if problem is not None:
        return [(impl, "", "n/a", problem) for impl in [native_name, *impls]], native, None
    case.build()
    expected = case.expected()
    notice = None

    for nb in forms:
        form = "nonblocking" if nb else "blocking"
        label = f"verify {case.describe()} {native_name} {form}"
        WATCHDOG.arm(timeout, label)
        try:
            case.reset()
            if native_name != "native":
                with Stderr(stderr_path) as err:
                    status, detail = run_checked(comm, case.call(native, None, nb), nb)
                notice = notice or fallback_message(err.text, case.collective, nb)
            else:
                status, detail = run_checked(comm, case.call(native, None, nb), nb)
            guard.settle(status, detail, label, native=True)
        finally:
            WATCHDOG.disarm()
        reference = expected
        if status == "ok":
            got = case.result()
            m = compare(got, expected)
            if m is not None:
                status, detail = "wrong", str(m)
            else:
                reference = got
        out.append((native_name, form, status, detail))
        for name in impls:
            if name != "auto":
                alg = registry.get(case.collective, name)
                why = alg.why_not(case.size, **case.restriction_kwargs())
                if why is not None:
                    out.append((name, form, "n/a", why))
                    continue
            label = f"verify {case.describe()} {name} {form}"
            WATCHDOG.arm(timeout, label)
            try:
                case.reset()
                st, det = run_checked(comm, case.call(p2p, name, nb), nb)
                guard.settle(st, det, label)
            finally:
                WATCHDOG.disarm()
            if st == "ok":
                m = compare(case.result(), reference)
                if m is not None:
                    st, det = "wrong", str(m)
            out.append((name, form, st, det))
    if guard.raised(native=True):  # messages of the failed call may be left on its comm
        native = guard.fresh_native(native)
    return out, native, notice


_ORDER = {"ok": 0, "n/a": 1, "wrong": 2, "error": 3}
_FORMS = {(False,): "blocking", (True,): "non-blocking", (False, True): "blocking + non-blocking"}


Verdict = tuple[str, str, str, str | None]  # (implementation, form, status, detail)


def _merge(per_rank: list[list[Verdict]]) -> list[tuple[str, str, str, str | None, int | None]]:
    """Worst verdict over ranks for each (impl, form), with the first rank that had it."""
    merged = []
    for k in range(len(per_rank[0])):
        worst_rank = max(range(len(per_rank)), key=lambda r: (_ORDER[per_rank[r][k][2]], -r))
        impl, form, st, det = per_rank[worst_rank][k]
        merged.append((impl, form, st, det, worst_rank if st in ("wrong", "error") else None))
    return merged


def _cell(stats: dict[str, int]) -> str:
    fail = stats.get("wrong", 0) + stats.get("error", 0)
    ok = stats.get("ok", 0)
    if fail:
        return f"F{fail}/{fail + ok}"
    if ok:
        return "ok"
    return "n/a" if stats.get("n/a") else ""


def format_matrix(plan: Plan, outcomes: list[Outcome], p: int) -> str:
    """The pass/fail matrix: rows collective x implementation, columns counts, then totals."""
    rows: dict[tuple[str, str], dict[int, dict[str, int]]] = {}
    for o in outcomes:
        cell = rows.setdefault((o.collective, o.implementation), {}).setdefault(o.count, {})
        cell[o.status] = cell.get(o.status, 0) + 1
    counts = plan.counts
    w_coll = max([10] + [len(c) for c, _ in rows])
    w_impl = max([14] + [len(i) for _, i in rows])
    w_cell = max(9, *(len(str(c)) + 2 for c in counts))
    head = f"{'collective':<{w_coll}}  {'implementation':<{w_impl}}" + "".join(
        f"{'count=' + str(c) if k == 0 else str(c):>{w_cell}}" for k, c in enumerate(counts)
    ) + f"{'passed':>8}{'failed':>8}{'n/a':>6}"
    lines = [head, "-" * len(head)]
    for (coll, impl), cells in rows.items():
        tot = {"ok": 0, "fail": 0, "n/a": 0}
        text = []
        for c in counts:
            st = cells.get(c, {})
            text.append(f"{_cell(st):>{w_cell}}")
            tot["ok"] += st.get("ok", 0)
            tot["fail"] += st.get("wrong", 0) + st.get("error", 0)
            tot["n/a"] += st.get("n/a", 0)
        if coll == "barrier":  # one count only
            st = cells.get(0, {})
            text = [f"{_cell(st):>{w_cell}}"] + [f"{'':>{w_cell}}"] * (len(counts) - 1)
        lines.append(f"{coll:<{w_coll}}  {impl:<{w_impl}}" + "".join(text)
                     + f"{tot['ok']:>8}{tot['fail']:>8}{tot['n/a']:>6}")
    return "\n".join(lines) + "\n"


def run(
    args: argparse.Namespace, comm: Any, argv: Sequence[str] = (), out: TextIO | None = None
) -> int:
    """Run ``verify``; exit status 0 if everything applicable matched, 1 otherwise (all ranks).
    With ``--native-algorithms``: the driver (:func:`run_native`); with ``--native-label``:
    one forced launch, the native column ``native:NAME`` in the one form forced."""
    if getattr(args, "native_algorithms", None):
        return run_native(args, argv, out or sys.stdout)
    out = out or sys.stdout
    plan: Plan = args.plan
    rank, p = comm.Get_rank(), comm.Get_size()
    label = getattr(args, "native_label", None)
    native_name = "native" if label is None else f"native:{label}"
    impls_of = {c: algorithms_of(c, plan.algorithms) for c in plan.collectives}
    native, p2p = make_backends(comm, any(impls_of.values()))
    prov = provenance(comm, ["verify", *argv])
    forms = [False, True] if plan.nonblocking else [False]
    if label is not None:
        forms = [args.native_form == "nonblocking"]
    progress = Progress(rank == 0 and not args.quiet)
    if rank == 0:
        out.write(
            f"# mpicoll verify  P={p}  {prov['mpi_library']}  mpi4py {prov['mpi4py']}  "
            f"numpy {prov['numpy']}\n"
            f"# counts {' '.join(map(str, plan.counts))}; roots "
            f"{'all' if plan.roots is None else ' '.join(map(str, plan.roots))}; in-place "
            f"{'/'.join('yes' if x else 'no' for x in plan.in_places)}; "
            f"{_FORMS[tuple(forms)]} forms\n"
            "# cell: ok = every applicable case matched; Fk/n = k of n failed; n/a = the "
            "algorithm's restrictions rule every case out\n\n"
        )
        out.flush()
    outcomes: list[Outcome] = []
    guard = CallGuard(comm, plan.timeout)
    try:
        for coll in plan.collectives:
            impls = impls_of[coll] if p2p is not None else []
            for case in cases_of(plan, coll, p, rank):
                progress.show(f"[mpicoll verify] {case.describe()}")
                stderr_path = None
                if label is not None and getattr(args, "json", None):
                    stderr_path = _announce(args.json, case, forms[0])
                local, native, notice = _check_case(comm, case, impls, native, p2p, forms,
                                                    plan.timeout, guard, native_name,
                                                    stderr_path)
                # on the guard's communicator: a native call that failed may have left
                # messages in flight on comm
                per_rank = guard.comm.gather((local, notice), root=0)
                repro = None
                if label is not None:
                    repro = _reproduce(guard, case, native, forms[0], local, native_name)
                if rank == 0:
                    assert per_rank is not None
                    said = next((n for _, n in per_rank if n), None)
                    for impl, form, st, det, bad in _merge([v for v, _ in per_rank]):
                        o = Outcome(coll, impl, case.count, st, case.describe(), det, bad, form)
                        if impl == native_name and label is not None:
                            o.notice = said
                            if st in ("wrong", "error"):
                                o.case, o.repro = _shape(case), repro
                        outcomes.append(o)
    finally:
        progress.clear()
    guard.Free()
    failed = [o for o in outcomes if o.status in ("wrong", "error")]
    if rank == 0:
        out.write(format_matrix(plan, outcomes, p))
        for o in failed[: plan.max_failures]:
            form = " (non-blocking)" if o.form == "nonblocking" else ""
            where = f"rank {o.rank}: " if o.rank is not None else ""
            out.write(f"FAIL {o.collective}/{o.implementation}{form}: {o.describe}: "
                      f"{where}{o.detail}\n")
        if len(failed) > plan.max_failures:
            out.write(f"... and {len(failed) - plan.max_failures} more failures\n")
        n_ok = sum(o.status == "ok" for o in outcomes)
        n_na = sum(o.status == "n/a" for o in outcomes)
        out.write(f"\nverify: {len(outcomes)} checks: {n_ok} passed, {len(failed)} failed, "
                  f"{n_na} n/a\n")
        out.flush()
        if getattr(args, "json", None):
            Path(args.json).write_text(json.dumps(
                {"P": p, "native": label, "form": args.native_form,
                 "outcomes": [asdict(o) for o in outcomes]}) + "\n")
    return 1 if rank == 0 and failed else 0


def _announce(json_path: str, case: Case, nb: bool) -> str:
    """A forced launch, before a case: write this rank's ``JSON.rank<r>.current`` (the case,
    its shape and its reproducer part), so that the driver can report the case and rebuild
    the call if the library kills the process inside it; returns the path under which the
    native call's stderr is captured (``JSON.rank<r>.stderr``)."""
    from .reproducer import rank_part, unsupported

    base = f"{json_path}.rank{case.rank}"
    info: dict[str, Any] = {"describe": case.describe(), "collective": case.collective,
                            "count": case.count}
    if case.problem() is None:
        info["shape"] = _shape(case)
        if unsupported(case) is None:
            case.build()
            case.reset()
            info["part"] = rank_part(case, nb)
    Path(base + ".tmp").write_text(json.dumps(info))
    os.replace(base + ".tmp", base + ".current")  # whole or absent, should the job be killed
    return base + ".stderr"


def _shape(case: Case) -> dict[str, Any]:
    """The case's shape for a report: P, root, count, per-rank counts and displacements
    (the v-forms), dtype, op, in-place."""
    from .cases import ROOTED, V_COLLECTIVES

    shape: dict[str, Any] = {"P": case.size, "count": case.count, "dtype": case.dtype,
                             "in_place": case.in_place}
    if case.is_reduction:
        shape["op"] = case.op
    if case.collective in ROOTED:
        shape["root"] = case.root
    if case.collective in ("alltoallv", "alltoallw"):
        p = case.size
        shape["pair_counts"] = [[case.pair_count(i, j) for j in range(p)] for i in range(p)]
        shape["displacements"] = [case._layout([case.pair_count(i, j) for j in range(p)])[1]
                                  for i in range(p)]
    elif case.collective in V_COLLECTIVES:
        counts, displs, _ = case._layout(case.counts())
        shape["counts"], shape["displacements"] = counts, displs
    return shape


def _reproduce(guard: CallGuard, case: Case, native: Any, nb: bool,
               local: list[Verdict], native_name: str) -> list[dict[str, Any]] | None:
    """Collective: when the native call of ``case`` failed on some rank, every rank's
    reproducer part (:func:`.reproducer.rank_part`), gathered at rank 0 (None elsewhere, and
    when nothing failed or the case cannot be written as plain mpi4py)."""
    from .reproducer import rank_part, unsupported

    failed = any(impl == native_name and st in ("wrong", "error") for impl, _, st, _ in local)
    if not guard.comm.allreduce(failed, op=_lor()) or case.problem() is not None \
            or unsupported(case) is not None:
        return None
    case.reset()
    part = rank_part(case, nb)
    parts = guard.comm.gather(part, root=0)
    return parts


def _lor() -> Any:
    from mpi4py import MPI

    return MPI.LOR



def _child_args(argv: Sequence[str]) -> list[str]:
    """The driver's verify arguments less those the driver itself handles."""
    from .launcher import child_args
    out = child_args(argv, {"--native-algorithms", "-n", "--np", "--launch-timeout",
                            "--json", "--repro-dir", "-c", "--collective"},
                     {"-q", "--quiet", "--nonblocking", "--fresh"})
    if not any(a.split("=", 1)[0] in ("-a", "--algorithm") for a in out):
        out += ["-a", "auto"]  # p2p auto: the cross-check on the same inputs
    return out


def _died(res: dict[str, Any], cfg: Any) -> Outcome | None:
    """A forced launch that wrote no results but left its ranks' ``.current`` files: the
    case inside which the library killed the process, as a ``died`` outcome (what the ranks'
    captured stderr says as its detail, every rank's reproducer part); None if it left none."""
    left: dict[str, str] = res["left"]
    current: dict[int, dict[str, Any]] = {}
    for k, v in left.items():
        if k.endswith(".current"):
            try:
                current[int(k.split(".")[1].removeprefix("rank"))] = json.loads(v)
            except ValueError:  # unreadable: that rank's part is missing
                continue
    if not current:
        return None
    said = [v.strip() for k, v in sorted(left.items()) if k.endswith(".stderr") and v.strip()]
    first = current[min(current)]
    text = said[0] if said else res["output"].strip()[-400:]
    detail = "the process died inside the call: " + " | ".join(
        ln.strip() for ln in text.splitlines()[:2])
    parts: list[dict[str, Any]] = [current[r]["part"] for r in sorted(current)
                                   if current[r].get("part")]
    return Outcome(first["collective"], f"native:{cfg.native}", first["count"], "died",
                   first["describe"], detail, None,
                   "nonblocking" if cfg.nonblocking else "blocking", None, first.get("shape"),
                   parts if len(parts) == res["P"] else None)


def run_native(args: argparse.Namespace, argv: Sequence[str], out: TextIO) -> int:
    """``verify --native-algorithms``: one launch per forced native algorithm, form and P
    (:mod:`.launcher`), each verifying ``native:NAME`` against the NumPy answer and p2p
    ``auto`` (or ``-a``) on every case; a table of passed/failed per algorithm, form and P,
    then per failing algorithm and form its smallest failing case as the MPI library's, with a
    plain mpi4py reproducer (written under ``--repro-dir``) and the command that runs it."""
    from . import launcher
    from .reproducer import command, script

    plan: Plan = args.plan
    kind, version = launcher.library()
    child = _child_args(argv)
    progress = Progress(not args.quiet)
    settings = {"np": list(args.np), "native": list(args.native_algorithms),
                "collectives": list(plan.collectives), "nonblocking": plan.nonblocking,
                "verify_args": child}
    why = launcher.resume_problem(args.json, args.fresh, NATIVE_SCHEMA_ID, settings,
                                  "verify --native-algorithms run")
    if why:
        sys.stderr.write(f"mpicoll verify: error: {why}\n")
        return 2
    old = {_launch_key(r["P"], launcher.config_of(r["config"])): r
           for r in launcher.resumed(args.json, args.fresh).get("launches", [])}

    def extra(cfg: launcher.Config) -> list[str]:
        assert cfg.native is not None
        return ["--native-label", cfg.native, "--native-form",
                "nonblocking" if cfg.nonblocking else "blocking",
                "-c", ",".join(cfg.collectives)]

    forms = [False, True] if plan.nonblocking else [False]
    results: list[dict[str, Any]] = []  # per launch
    planned = [(p, c) for p in args.np for nb in forms for c in launcher.native_configs(
        kind, plan.collectives, args.native_algorithms, p=p, nonblocking=nb)]

    def save(complete: bool) -> None:
        """The file after each launch: what ran, what is still to run (a run killed by a
        timeout keeps what finished; rerunning resumes)."""
        if not args.json:
            return
        done = {_launch_key(r["P"], r["config"]) for r in results}
        launcher.save_json(args.json, {
            "schema": NATIVE_SCHEMA_ID, "library": kind, "version": version, "P": args.np,
            "settings": settings,
            "launches": [{**r, "config": launcher.config_dict(r["config"])} for r in results],
            "pending": [{"P": p, "config": c.name, "collectives": c.collectives}
                        for p, c in planned if _launch_key(p, c) not in done],
            "complete": complete, "rows": [], "failures": []})

    reused = 0
    for p in args.np:
        configs = [c for q, c in planned if q == p]
        while configs:  # a launch the library killed: again for its other collectives
            again = []
            for cfg in configs:
                res = old.get(_launch_key(p, cfg))
                if res is not None:
                    res = {**res, "config": cfg}
                    reused += 1
                else:
                    (ln,) = launcher.run([cfg], p, child, timeout=args.launch_timeout,
                                         progress=progress.show, command="verify",
                                         extra=extra)
                    res = {"P": p, "config": ln.config, "status": ln.status, "doc": ln.doc,
                           "output": ln.output, "left": ln.leftovers}
                results.append(res)
                save(False)
                died = _died(res, cfg) if res["doc"] is None else None
                colls = cfg.collectives
                if died is not None and len(colls) > 1:  # the others' results died with it
                    rest = [c for c in colls if c != died.collective]
                    again.append(dataclasses.replace(cfg, collectives=rest))
            configs = again
    progress.clear()
    out.write(f"# mpicoll verify --native-algorithms: {version} ({kind}); P = "
              f"{' '.join(map(str, args.np))}; one launch per forced algorithm, form and P; "
              "native:NAME against NumPy and the p2p algorithms on the same inputs\n")
    # rows: (collective, form, algorithm) -> P -> cell
    rows: dict[tuple[str, str, str], dict[int, str]] = {}
    fails: dict[tuple[str, str, str], list[tuple[int, Outcome, launcher.Config]]] = {}
    fell: dict[tuple[str, str, str], list[str]] = {}
    cross: dict[tuple[int, str, str], list[str]] = {}  # p2p verdicts on the same inputs
    bad_launches = []
    for res in results:
        cfg, p = res["config"], res["P"]
        form = "nonblocking" if cfg.nonblocking else "blocking"
        if res["doc"] is None:
            died = _died(res, cfg)
            if died is None:
                bad_launches.append(res)
            for c in cfg.collectives:
                if died is None or c == died.collective:
                    rows.setdefault((c, form, cfg.native), {})[p] = f"exit {res['status']}"
            if died is not None:
                rows[(died.collective, form, cfg.native)][p] = "DIED"
                fails.setdefault((died.collective, form, cfg.native), []).append(
                    (p, died, cfg))
            continue
        stats: dict[str, dict[str, int]] = {}
        for raw in res["doc"]["outcomes"]:
            o = Outcome(**raw)
            if o.implementation != f"native:{cfg.native}":
                cross.setdefault((p, o.describe, o.form), []).append(
                    f"{o.implementation} {o.status}")
                continue
            key = (o.collective, form, cfg.native)
            st = stats.setdefault(o.collective, {})
            st[o.status] = st.get(o.status, 0) + 1
            if o.notice:
                fell.setdefault(key, []).append(f"P={p}: {o.notice}")
            if o.status in ("wrong", "error"):
                fails.setdefault(key, []).append((p, o, cfg))
        for c, st in stats.items():
            mark = "*" if any(x.startswith(f"P={p}:") for x in fell.get((c, form, cfg.native),
                                                                         [])) else ""
            rows.setdefault((c, form, cfg.native), {})[p] = _cell(st) + mark
    w = max([16] + [len(a) for _, _, a in rows])
    head = f"{'collective':<20}  {'form':<11}  {'native algorithm':<{w}}" + "".join(
        f"{'P=' + str(p):>9}" for p in args.np)
    out.write(head + "\n" + "-" * len(head) + "\n")
    for (c, form, alg), cells in rows.items():
        out.write(f"{c:<20}  {form:<11}  {alg:<{w}}" + "".join(
            f"{cells.get(p, '-'):>9}" for p in args.np) + "\n")
    out.write("# cell: ok = every applicable case right; Fk/n = k of n wrong or raising; * = "
              "the library fell back to its own choice on some case (MPICH's notice); DIED = "
              "the library killed the launch inside a native call (its later cases not run); "
              "exit N = the launch failed otherwise\n\n")
    repro_dir = Path(args.repro_dir)
    summary = []
    for key, lst in fails.items():
        c, form, alg = key
        p, o, cfg = min(lst, key=lambda x: (x[0], x[1].count, x[1].status != "died"))
        shape = ", ".join(f"{k} {v}" for k, v in (o.case or {}).items())
        nb = " (non-blocking)" if form == "nonblocking" else ""
        out.write(f"FAIL {version}: {c}{nb} forced by {cfg.setting()}: {len(lst)} failing "
                  f"case(s); the smallest: {o.describe}: {shape}: "
                  f"{'rank ' + str(o.rank) + ': ' if o.rank is not None else ''}{o.detail}\n")
        if o.notice:
            out.write(f"  (the library fell back to its own choice here: {o.notice!r}: the "
                      "wrong result is its default algorithm's)\n")
        if (p, o.describe, o.form) in cross:
            same = sorted(set(cross[(p, o.describe, o.form)]))
            out.write(f"  p2p on the same inputs: {', '.join(same)}\n")
        entry = {"collective": c, "form": form, "algorithm": alg, "library": version,
                 "setting": cfg.setting(), "failing_cases": len(lst), "smallest": asdict(o),
                 "reproducer": None, "command": None}
        if o.repro:
            repro_dir.mkdir(parents=True, exist_ok=True)
            path = repro_dir / f"{c}-{'i' if form == 'nonblocking' else ''}{alg}-P{p}.py"
            text = script(o.repro, f"{version}: {c}{nb} with {cfg.setting()}\n"
                          f"{o.describe}; {shape}\nmpicoll verify: {o.detail}")
            path.write_text(text)
            cmd = command(p, str(path), cfg.env, cfg.flags)
            entry["reproducer"], entry["command"] = str(path), cmd
            out.write(f"reproducer ({path}):\n{text}\nrun: {cmd}\n\n")
        else:
            out.write("  (no reproducer: a derived/pair datatype or a user op)\n\n")
        summary.append(entry)
    for res in bad_launches:
        out.write(f"LAUNCH FAILED P={res['P']} {res['config'].name} ({res['config'].setting()})"
                  f": exit {res['status']}: {res['output'].strip()[-600:]}\n")
    n_fail = sum(len(v) for v in fails.values())
    out.write(f"\nverify --native-algorithms: {len(results)} launches"
              + (f" ({reused} taken from {args.json})" if reused else "")
              + f", {len(rows)} (collective, form, algorithm) rows, {len(fails)} failing "
              f"({n_fail} cases), {len(bad_launches)} launch(es) failed\n")
    if args.json:
        save(True)
        final = json.loads(Path(args.json).read_text())
        final["rows"] = [{"collective": c, "form": f, "algorithm": a, "cells": cells}
                         for (c, f, a), cells in rows.items()]
        final["failures"] = summary
        launcher.save_json(args.json, final)
        out.write(f"# wrote {args.json}\n")
    out.flush()
    return 1 if fails or bad_launches else 0


#: The ``schema`` of ``verify --native-algorithms --json`` (read back to resume).
NATIVE_SCHEMA_ID = "mpicoll-verify-native/1"


def _launch_key(p: int, cfg: Any) -> tuple[Any, ...]:
    """What identifies one launch of ``verify --native-algorithms`` in its file: P, the
    configuration's name and form and the collectives it ran (a relaunch after a library
    abort runs fewer)."""
    return (p, cfg.name, bool(cfg.nonblocking), tuple(cfg.collectives))
