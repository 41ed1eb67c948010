"""Every collective, every implementation, against the NumPy oracle (run under mpiexec).

One pytest item per (collective, implementation); the cases (dtype x op x count x root x in-place
x buffer spec x v-layout) are looped inside it, every failing case recorded with everything needed
to reproduce it, and reported together at the end of the item (``_runners.Run``).

Implementations: ``native``, ``p2p`` with ``algorithm="auto"`` (the default), and ``p2p`` forced to
every algorithm the registry lists for the collective.  A forced algorithm whose restrictions
forbid a case must raise :class:`mpicoll.RestrictionError` on every rank, with every buffer
untouched.

Every rank makes every other rank's arguments (functions of rank and index, see
``tests/oracle.py``) and so gets the exact expected result from ``oracle.expected``, with no MPI
involved: the output buffer must hold it exactly (blocks, gaps, elements past the count), every
other buffer of the call must be unchanged.

``MPICOLL_TEST_FULL=1`` widens the sweep to every dtype x op x count x root x in-place.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_collectives.py`` (P = 1..5).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import oracle
import pytest
from _runners import (
    COLLECTIVES,
    REDUCTIONS,
    ROOTED,
    VECTOR,
    Case,
    Impl,
    Run,
    implementations,
    invoke,
)
from mpi4py import MPI

from mpicoll.algorithms.registry import RestrictionError

WORLD = MPI.COMM_WORLD
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")
BIG = 131075  # elements: about 1 MiB of float64 per rank, not a multiple of 2**k


# ------------------------------------------------------------------------------------------
# cases


def _counts(p: int) -> list[int]:
    return sorted({0, 1, p - 1, p + 1, 7})


#: (dtype, op) pairs of the default reduction sweep: every dtype and op at least once.
REDUCTION_COMBOS = [
    ("int32", "SUM"), ("int32", "PROD"), ("int32", "MAX"), ("int32", "LAND"),
    ("int32", "BOR"), ("int64", "MIN"), ("int64", "BXOR"), ("int64", "AFFINE"),
    ("int64", "LOR"), ("int64", "BAND"), ("float32", "SUM"), ("float32", "MAX"),
    ("float64", "SUM"), ("float64", "PROD"), ("float64", "MIN"), ("complex128", "SUM"),
    ("complex128", "PROD"), ("bool", "LAND"), ("bool", "LOR"), ("bool", "LXOR"),
    ("double_int", "MAXLOC"), ("2int", "MAXLOC"), ("double_int", "MINLOC"),
]
#: Everything MPI defines for these dtypes (the full sweep).
FULL_OPS: dict[str, list[str]] = {
    "int32": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"],
    "int64": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
              "AFFINE"],
    "float32": ["SUM", "PROD", "MAX", "MIN"],
    "float64": ["SUM", "PROD", "MAX", "MIN"],
    "complex128": ["SUM", "PROD"],
    "bool": ["LAND", "LOR", "LXOR"],
    "double_int": ["MAXLOC", "MINLOC"],
    "2int": ["MAXLOC", "MINLOC"],
}
DATA_DTYPES = ["int32", "int64", "float32", "float64", "complex128", "bool", "double_int"]
FORMS = ["plain", "typed", "counted", "2d"]


def _form(i: int, dtype: str) -> str:
    f = FORMS[i % len(FORMS)]
    return "typed" if f in ("plain", "2d") and oracle.is_pair(dtype) else f


def cases(coll: str, p: int) -> Iterator[Case]:
    """The sweep for ``coll`` at ``p`` ranks (widened by MPICOLL_TEST_FULL=1)."""
    rooted = coll in ROOTED
    if coll in VECTOR:
        yield from _vector_cases(coll, p)
        return
    if coll in REDUCTIONS:
        combos: list[tuple[str, str | None]] = list(REDUCTION_COMBOS)
        sweep: list[tuple[str, str | None]] = [
            ("int32", "SUM"), ("int64", "AFFINE"), ("double_int", "MAXLOC")]
        big: list[tuple[str, str | None]] = [("float64", "SUM")]
        if FULL:
            combos = [(d, o) for d, ops in FULL_OPS.items() for o in ops]
            sweep = combos
    else:
        combos = [(d, None) for d in DATA_DTYPES]
        sweep = [("float64", None), ("int32", None)]
        big = [("float64", None)]
        if FULL:
            sweep = combos
    counts = _counts(p)
    roots = range(p) if rooted else [0]
    i = 0
    # every dtype/op, at a count divisible and one not divisible by p
    for dtype, op in combos:
        for count in ([7, p + 1] if FULL else [(7, p + 1)[i % 2]]):
            i += 1
            yield Case(dtype, op, count, root=i % p, in_place=i % 3 == 1, form=_form(i, dtype),
                       nonroot_none=i % 4 != 3)
    # every count, in-place or not
    for dtype, op in sweep:
        for count in counts:
            for in_place in (False, True):
                for root in (roots if FULL else [(count + in_place) % p]):
                    i += 1
                    yield Case(dtype, op, count, root=root, in_place=in_place,
                               form=_form(i, dtype), nonroot_none=i % 4 != 3)
    # every root, in-place or not
    if rooted and not FULL:
        dtype, op = ("float64", "SUM") if coll in REDUCTIONS else ("int64", None)
        for root in roots:
            for in_place in (False, True):
                i += 1
                yield Case(dtype, op, 3, root=root, in_place=in_place, form=_form(i, dtype),
                           nonroot_none=bool(root % 2))
    # about 1 MiB per rank
    for dtype, op in big:
        yield Case(dtype, op, BIG, root=p - 1, in_place=False)


def _vector_cases(coll: str, p: int) -> Iterator[Case]:
    pairs = coll in ("alltoallv", "alltoallw")  # counts[i][j] from i to j
    layouts = [0, 1, 2, 3, 4, 5] if not pairs else [0, 1, 2]
    if coll == "reduce_scatter":
        combos: list[tuple[str, str | None]] = list(REDUCTION_COMBOS)
    else:
        combos = [(d, None) for d in DATA_DTYPES]
    orders = ["reverse", "rank", "shuffle"]
    i = 0
    for layout in layouts:
        for in_place in (False, True):
            if pairs and in_place and layout != 2:
                continue  # in-place alltoallv/w needs symmetric counts
            n_combos = len(combos) if FULL else 2
            for k in range(n_combos):
                dtype, op = combos[(i + k * 5) % len(combos)]
                i += 1
                yield Case(dtype, op, 0, root=i % p, in_place=in_place, layout=layout,
                           order=orders[i % 3], form="nodispl" if i % 7 == 3 else "typed",
                           nonroot_none=i % 4 != 2)
    if coll in ("scatterv", "gatherv"):
        for root in range(p):
            i += 1
            yield Case("int64", None, 0, root=root, in_place=bool(root % 2), layout=0,
                       order=orders[i % 3], nonroot_none=bool(i % 2))


PARAMS = [pytest.param(coll, impl, id=f"{coll}-{impl.label}")
          for coll in COLLECTIVES if coll != "barrier" for impl in implementations(coll)]


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl"), PARAMS)
def test_collective(coll: str, impl: Impl) -> None:
    """``coll`` on ``impl`` matches the NumPy oracle on every case of the sweep."""
    run = Run(coll, impl)
    for case in cases(coll, run.p):
        run.run_case(case)
    run.finish()


# ------------------------------------------------------------------------------------------
# barrier: nobody leaves before everybody entered


@pytest.mark.mpi
@pytest.mark.parametrize("impl", implementations("barrier"), ids=lambda i: i.label)
def test_barrier(impl: Impl) -> None:
    """No rank leaves Barrier before the last rank entered it (one host: a shared clock).

    The late rank sleeps before entering; every rank's exit time (CLOCK_MONOTONIC, shared by
    the processes of one host) must be after the late rank's entry time.
    """
    hosts = WORLD.allgather(MPI.Get_processor_name())
    if len(set(hosts)) > 1:
        pytest.skip("causality check needs one host (a shared monotonic clock)")
    p, r = WORLD.size, WORLD.rank
    if impl.entry is not None and impl.entry.why_not(p) is not None:  # e.g. two_proc at P > 2
        with pytest.raises(RestrictionError):
            invoke(impl, "barrier")
        return
    bad = []
    for late in sorted({p - 1, 0, p // 2}):
        if r == late:
            time.sleep(0.05)
        entered = time.monotonic()
        invoke(impl, "barrier")
        left = time.monotonic()
        late_entered = WORLD.bcast(entered, root=late)
        if left < late_entered:
            bad.append(f"late rank {late}: rank {r} left at {left:.6f} before rank {late} "
                       f"entered at {late_entered:.6f}")
    nbad = WORLD.allreduce(len(bad))
    assert not bad, f"barrier impl={impl.label} P={p}: " + "; ".join(bad)
    assert nbad == 0, f"barrier impl={impl.label} P={p}: failed on another rank"


# ------------------------------------------------------------------------------------------
# floating-point results that are not exact: every rank must get the same bits


def _allreduce_impls() -> list[Impl]:
    return implementations("allreduce")


@pytest.mark.mpi
@pytest.mark.parametrize("impl", _allreduce_impls(), ids=lambda i: i.label)
def test_allreduce_bitwise_identical_on_all_ranks(impl: Impl) -> None:
    """Allreduce of random (inexact) floats gives bitwise identical results on every rank."""
    p, r = WORLD.size, WORLD.rank
    rng = np.random.default_rng(1234 + r)
    bad = []
    for dtype, n, op, in_place in [("float64", 1000, MPI.SUM, False),
                                   ("float32", 2 * p + 1, MPI.SUM, True),
                                   ("float64", 7, MPI.PROD, False),
                                   ("complex128", p + 1, MPI.SUM, True)]:
        x = rng.uniform(0.5, 1.5, size=n) * 10.0 ** rng.integers(-3, 4, size=n)
        if dtype == "complex128":
            x = x + 1j * rng.uniform(-1, 1, size=n)
        x = x.astype(dtype)
        y = x.copy() if in_place else np.zeros_like(x)
        sendarg = MPI.IN_PLACE if in_place else x
        entry = impl.entry
        kw = dict(count=n, in_place=in_place, commutative=True, uniform=True)
        if entry is not None and entry.why_not(p, **kw) is not None:
            with pytest.raises(RestrictionError):
                invoke(impl, "allreduce", sendarg, y, op=op)
            continue
        invoke(impl, "allreduce", sendarg, y, op=op)
        everyone = WORLD.allgather(y.tobytes())
        differ = [q for q in range(p) if everyone[q] != everyone[0]]
        # Swing's latency butterfly brackets the sum per rank from 8 ranks on (its groups
        # are not nested alike: see its docstring); its values are still checked below
        if differ and not (impl.label.endswith("swing_latency") and p >= 8):
            k = int(np.flatnonzero(np.frombuffer(everyone[differ[0]], dtype=dtype)
                                   != np.frombuffer(everyone[0], dtype=dtype))[0])
            bad.append(f"{dtype} n={n} op={op} in_place={in_place}: ranks {differ} differ "
                       f"from rank 0 (first at index {k})")
        # and the result is close to the true sum/product (catches a bitwise-equal garbage)
        xs = WORLD.allgather(x)
        want = oracle.reference_reduce("SUM" if op == MPI.SUM else "PROD",
                                    [np.asarray(v, dtype=np.complex128 if dtype.startswith("c")
                                                else np.float64) for v in xs])
        if not np.allclose(y, want, rtol=1e-4):
            bad.append(f"{dtype} n={n} op={op} in_place={in_place}: not close to the sum")
    nbad = WORLD.allreduce(len(bad))
    assert not bad, f"allreduce impl={impl.label} P={p} rank={r}: " + "; ".join(bad)
    assert nbad == 0, f"allreduce impl={impl.label} P={p}: failed on another rank"
