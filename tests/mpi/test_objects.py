"""The lower-case object collectives on both backends, cross-checked with plain mpi4py.

Every method (``barrier``, ``bcast``, ``gather``, ``scatter``, ``allgather``, ``alltoall``,
``reduce``, ``allreduce``, ``scan``, ``exscan``) runs on ``mpicoll.native`` and ``mpicoll.p2p``
and on the same communicator's own ``comm.<method>`` with the same inputs: the results must be
equal (same types, same values, numpy arrays by dtype, shape and content).  Inputs: ``None``,
``b""`` (0 bytes), a small tuple, 1 MiB of bytes, a dict of numpy arrays, nested lists; every
root; every predefined op on objects it is defined for, and callables that are neither
commutative nor associative (string concatenation, ``a * 2 + b``, ``(a, b)``), which pin down
mpi4py's grouping.  On ``COMM_WORLD`` and on the halves of a split with reversed rank order.

Errors: a bad root raises what mpi4py raises, on every rank.  What one rank alone can know (a
scatter sequence of the wrong length at the root, an object that does not pickle) raises
mpi4py's exception type on that rank and the same type on every rank that would wait for it,
and the backend works afterwards (these hang in mpi4py itself, so the type is taken from mpi4py
on ``COMM_SELF``).  ``MPI.pickle.__init__(dumps, loads)`` is honoured (and restored).

``large`` (``MPICOLL_TEST_LARGE=1``): p2p bcast and gather of objects over 2 GiB, one message
of more than 2**31 - 1 bytes, on two ranks.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_objects.py`` (P = 1..5).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
KINDS = ("native", "p2p")
COMMS = ("world", "split")
_COMMS: dict[str, MPI.Intracomm] = {}
_BACKENDS: dict[tuple[str, str], Any] = {}


def comm_of(name: str) -> MPI.Intracomm:
    """``COMM_WORLD``, or this rank's half of a split (even/odd ranks, reversed order)."""
    if name == "world":
        return WORLD
    if name not in _COMMS:
        _COMMS[name] = WORLD.Split(WORLD.rank % 2, key=-WORLD.rank)
    return _COMMS[name]


def backend(kind: str, cname: str) -> Any:
    """One backend per (kind, communicator) for this module (a p2p backend is collective)."""
    key = (kind, cname)
    if key not in _BACKENDS:
        make = mpicoll.native if kind == "native" else mpicoll.p2p
        _BACKENDS[key] = make(comm_of(cname))
    return _BACKENDS[key]


def free_backends() -> None:
    """Free every backend and communicator :func:`backend` made (collective; the modules that
    use them call it at their end)."""
    for key in sorted(_BACKENDS):  # the same order on every rank
        _BACKENDS.pop(key).Free()
    for name in sorted(_COMMS):
        _COMMS.pop(name).Free()


@pytest.fixture(scope="module", autouse=True)
def _free() -> Iterator[None]:
    yield
    free_backends()


# ---- inputs and comparison -------------------------------------------------------------------

OBJECTS = ("none", "empty", "small", "mib", "arrays", "nested")
#: (backend, communicator, object kind); the 1 MiB objects on COMM_WORLD only (suite time)
OBJECT_CASES = [(k, c, w) for k in KINDS for c in COMMS for w in OBJECTS
                if not (c == "split" and w == "mib")]


def obj(kind: str, key: int) -> Any:
    """A deterministic object of ``kind`` for ``key`` (a rank, or rank * p + peer)."""
    if kind == "none":
        return None
    if kind == "empty":
        return b""
    if kind == "small":
        return ("rank", key, 1.5 * key, "x" * key)
    if kind == "mib":
        return bytes([key % 251]) * 2**20
    if kind == "arrays":
        return {"a": np.arange(key + 3, dtype=np.float64) / 3,
                "b": np.full((2, key), key, np.int32), "c": np.zeros(0, np.complex64), "key": key}
    if kind == "nested":
        return [[key, [key, (key, None)]], {"x": [key] * 3}, [], [[[]]]]
    raise ValueError(kind)


def assert_same(got: Any, want: Any, where: str) -> None:
    """Equal types and values, recursively (numpy arrays: dtype, shape and content)."""
    assert type(got) is type(want), f"{where}: got {type(got).__name__}, want {type(want).__name__}"
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype, where
        assert got.shape == want.shape, where
        assert np.array_equal(got, want), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: {len(got)} items, want {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def check(kind: str, cname: str, method: str, make_args: Callable[[], tuple[Any, ...]],
          **kw: Any) -> Any:
    """Run ``method`` on plain mpi4py and on the backend with fresh copies of the same
    arguments; the results must be the same.  Returns mpi4py's."""
    comm = comm_of(cname)
    want = getattr(comm, method)(*make_args(), **kw)
    got = getattr(backend(kind, cname), method)(*make_args(), **kw)
    assert_same(got, want, f"{kind} {method} {kw} on {cname} (rank {comm.rank})")
    return want


def roots(what: str, comm: MPI.Intracomm) -> range:
    """Every root; for the 1 MiB objects only the last (keeps the plain suite quick)."""
    return range(comm.size - 1, comm.size) if what == "mib" else range(comm.size)


def raised(fn: Callable[[], Any]) -> type[BaseException] | None:
    try:
        fn()
    except Exception as exc:
        return type(exc)
    return None


# ---- data movement ---------------------------------------------------------------------------


@pytest.mark.parametrize("cname", COMMS)
@pytest.mark.parametrize("kind", KINDS)
def test_barrier(kind: str, cname: str) -> None:
    check(kind, cname, "barrier", lambda: ())


@pytest.mark.parametrize(("kind", "cname", "what"), OBJECT_CASES)
def test_bcast(kind: str, cname: str, what: str) -> None:
    comm = comm_of(cname)
    for root in roots(what, comm):
        mine = obj(what, comm.rank) if comm.rank == root else "ignored"
        check(kind, cname, "bcast", lambda m=mine: (m,), root=root)  # type: ignore[misc]
    check(kind, cname, "bcast", lambda: (obj(what, comm.rank),))  # default root


@pytest.mark.parametrize(("kind", "cname", "what"), OBJECT_CASES)
def test_gather(kind: str, cname: str, what: str) -> None:
    comm = comm_of(cname)
    for root in roots(what, comm):
        check(kind, cname, "gather", lambda: (obj(what, comm.rank),), root=root)
    check(kind, cname, "gather", lambda: (obj(what, comm.rank),))


@pytest.mark.parametrize(("kind", "cname", "what"), OBJECT_CASES)
def test_scatter(kind: str, cname: str, what: str) -> None:
    comm = comm_of(cname)
    p = comm.size
    forms: tuple[Callable[[int], Any], ...] = (
        lambda root: [obj(what, root * p + i) for i in range(p)],
        lambda root: tuple(obj(what, i) for i in range(p)),
        lambda root: (obj(what, i) for i in range(p)),  # any iterable, as mpi4py's list()
    )
    for root in roots(what, comm):
        for form in forms[:1] if what == "mib" else forms:
            def args(root: int = root, form: Callable[[int], Any] = form) -> tuple[Any, ...]:
                return (form(root) if comm.rank == root else None,)
            check(kind, cname, "scatter", args, root=root)
    check(kind, cname, "scatter", lambda: (None,))  # None at the root: p Nones
    check(kind, cname, "scatter", lambda: ([obj(what, i) for i in range(p)],))


@pytest.mark.parametrize(("kind", "cname", "what"), OBJECT_CASES)
def test_allgather(kind: str, cname: str, what: str) -> None:
    comm = comm_of(cname)
    check(kind, cname, "allgather", lambda: (obj(what, comm.rank),))


@pytest.mark.parametrize(("kind", "cname", "what"), OBJECT_CASES)
def test_alltoall(kind: str, cname: str, what: str) -> None:
    comm = comm_of(cname)
    p = comm.size
    check(kind, cname, "alltoall", lambda: ([obj(what, comm.rank * p + j) for j in range(p)],))
    check(kind, cname, "alltoall", lambda: (tuple(obj(what, j) for j in range(p)),))
    check(kind, cname, "alltoall", lambda: (None,))


# ---- reductions ------------------------------------------------------------------------------

#: (label, op, this rank's object)
OPS: tuple[tuple[str, Any, Callable[[int], Any]], ...] = (
    ("SUM", MPI.SUM, lambda r: r + 1),
    ("SUM-float", MPI.SUM, lambda r: 0.5 * r - 1),
    ("SUM-list", MPI.SUM, lambda r: [r, str(r)]),  # list concatenation: not commutative
    ("SUM-array", MPI.SUM, lambda r: np.arange(4) * (r + 1)),
    ("PROD", MPI.PROD, lambda r: r + 2),
    ("MAX", MPI.MAX, lambda r: (r * 7) % 5),
    ("MIN", MPI.MIN, lambda r: (r * 7) % 5 - 2),
    ("LAND", MPI.LAND, lambda r: r % 3),
    ("LOR", MPI.LOR, lambda r: r % 2),
    ("LXOR", MPI.LXOR, lambda r: r % 2),
    ("BAND", MPI.BAND, lambda r: 0xFF ^ (1 << r)),
    ("BOR", MPI.BOR, lambda r: 1 << r),
    ("BXOR", MPI.BXOR, lambda r: r * 37 + 1),
    ("MAXLOC", MPI.MAXLOC, lambda r: ((r * 7) % 3, r)),  # ties: lowest index wins
    ("MINLOC", MPI.MINLOC, lambda r: ((r * 7) % 3, -r)),
    ("concat", lambda a, b: a + b, lambda r: str(r)),
    ("affine", lambda a, b: a * 2 + b, lambda r: r + 1),  # neither commutative nor associative
    ("pair", lambda a, b: (a, b), lambda r: r),  # shows the grouping itself
    ("dict-of-arrays", lambda a, b: {k: a[k] + b[k] for k in a},
     lambda r: {"x": np.arange(3.0) + r, "y": np.full(2, r, np.int64)}),
)
#: the ops whose result depends on the order and grouping (reduce runs them at every root)
ORDERED_OPS = ("SUM-list", "MAXLOC", "MINLOC", "concat", "affine", "pair")
#: every op on COMM_WORLD; on the split the ops that show grouping and types (suite time)
SPLIT_OPS = ("SUM-list", "MAXLOC", "concat", "affine", "pair", "dict-of-arrays")
REDUCTION_CASES = [(k, c, *case) for k in KINDS for c in COMMS for case in OPS
                   if c == "world" or case[0] in SPLIT_OPS]


@pytest.mark.parametrize(("kind", "cname", "label", "op", "make"), REDUCTION_CASES,
                         ids=[f"{k}-{c}-{label}" for k, c, label, _, _ in REDUCTION_CASES])
def test_reductions(kind: str, cname: str, label: str, op: Any,
                    make: Callable[[int], Any]) -> None:
    comm = comm_of(cname)
    args = lambda: (make(comm.rank), op)  # noqa: E731
    # every root where the order matters; else the last root and the default (suite time)
    every = label in ORDERED_OPS
    for root in range(comm.size) if every else range(comm.size - 1, comm.size):
        check(kind, cname, "reduce", args, root=root)
    check(kind, cname, "reduce", args)
    for method in ("allreduce", "scan", "exscan"):
        check(kind, cname, method, args)


@pytest.mark.parametrize("kind", KINDS)
def test_reduction_defaults(kind: str) -> None:
    """op=MPI.SUM and root=0 by default; the result is a copy, even of one rank's object;
    exscan gives None on rank 0."""
    mine = [WORLD.rank]
    for method in ("reduce", "allreduce", "scan"):
        got = check(kind, "world", method, lambda: (mine,))
        assert got is not mine
    got = check(kind, "world", "exscan", lambda: (mine,))
    if WORLD.rank == 0:
        assert got is None
    else:
        assert got == list(range(WORLD.rank))


def test_checked_mode() -> None:
    """p2p in checked mode: every buffer collective an object method runs agrees on every rank,
    also when one rank's input is refused (every rank still takes part in the same calls)."""
    p, me = WORLD.size, WORLD.rank
    with mpicoll.p2p(WORLD, check=True) as b:
        calls: tuple[tuple[str, tuple[Any, ...]], ...] = (
            ("bcast", (obj("arrays", me),)), ("gather", (obj("nested", me),)),
            ("scatter", ([obj("small", i) for i in range(p)],)), ("allgather", (me,)),
            ("alltoall", (list(range(p)),)), ("reduce", (str(me),)), ("allreduce", ([me],)),
            ("scan", ([me],)), ("exscan", ([me],)), ("barrier", ()),
        )
        for method, args in calls:
            assert_same(getattr(b, method)(*args), getattr(WORLD, method)(*args),
                        f"checked {method}")
        # the root's own error; every other rank MismatchError (a ValueError), before any
        # message (see test_objects_checked.py)
        assert raised(lambda: b.scatter(list(range(p + 1)))) is (
            ValueError if me == 0 else mpicoll.MismatchError)
        assert raised(lambda: b.allgather(Unpicklable() if me == p - 1 else me)) is TypeError
        assert b.bcast("ok", root=p - 1) == "ok"


# ---- MPI.pickle --------------------------------------------------------------------------------


@pytest.mark.parametrize("cname", COMMS)
@pytest.mark.parametrize("kind", KINDS)
def test_custom_pickle(kind: str, cname: str) -> None:
    """``MPI.pickle.__init__(dumps, loads)`` is what serializes (both backends, as mpi4py);
    a ``dumps`` that returns no bytes gives None without calling ``loads``."""
    comm = comm_of(cname)
    calls = {"dumps": 0, "loads": 0}

    def dumps(o: Any) -> bytes:
        calls["dumps"] += 1
        return pickle.dumps(("wrapped", o))

    def loads(buf: Any) -> Any:
        calls["loads"] += 1
        return ("seen", pickle.loads(buf)[1])

    protocol, threshold = MPI.pickle.PROTOCOL, MPI.pickle.THRESHOLD
    try:
        MPI.pickle.__init__(dumps, loads)
        check(kind, cname, "bcast", lambda: ({"r": comm.rank},), root=comm.size - 1)
        check(kind, cname, "allgather", lambda: ([comm.rank],))
        check(kind, cname, "scatter", lambda: (list(range(comm.size)),))
        before = dict(calls)
        backend(kind, cname).bcast(comm.rank)
        assert calls["loads"] == before["loads"] + 1  # every rank loads the root's object
        assert calls["dumps"] == before["dumps"] + (comm.rank == 0)
        MPI.pickle.__init__(lambda o: b"", loads)
        check(kind, cname, "bcast", lambda: ("anything",))
        check(kind, cname, "gather", lambda: ("anything",))
    finally:
        MPI.pickle.__init__(None, None, protocol, threshold)
    assert check(kind, cname, "bcast", lambda: ("back",)) == "back"


# ---- errors ------------------------------------------------------------------------------------

BAD_ROOTS = (-1, "size", "size+2", "0", None, 2**40, 1.5)


def _root(bad: Any, size: int) -> Any:
    return {"size": size, "size+2": size + 2}.get(bad, bad) if isinstance(bad, str) and \
        bad.startswith("size") else bad


@pytest.mark.parametrize("bad", BAD_ROOTS, ids=[str(b) for b in BAD_ROOTS])
@pytest.mark.parametrize("kind", KINDS)
def test_bad_root(kind: str, bad: Any) -> None:
    """A root that is not a rank raises mpi4py's exception type (MPI.Exception for a number
    outside [0, p), TypeError for a non-number, OverflowError beyond a C int) on every rank;
    a float is truncated as mpi4py truncates it.  The object methods convert the root as the
    buffer methods do (one rule, :func:`mpicoll.backends.args.root_of`): the same error
    types and messages as ``Bcast`` with the same root."""
    root = _root(bad, WORLD.size)
    b = backend(kind, "world")
    calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = (
        ("bcast", (1,), {"root": root}),
        ("gather", (1,), {"root": root}),
        ("scatter", (list(range(WORLD.size)),), {"root": root}),
        ("reduce", (1,), {"root": root}),
        ("reduce", (1, MPI.SUM, root), {}),
    )
    for method, args, kw in calls:
        want = raised(lambda m=method, a=args, k=kw: getattr(WORLD, m)(*a, **k))  # type: ignore[misc]
        got = raised(lambda m=method, a=args, k=kw: getattr(b, m)(*a, **k))  # type: ignore[misc]
        # an instance of mpi4py's type (out of range: mpicoll's MPIValueError, both the
        # ValueError of the buffer methods and mpi4py's MPI.Exception)
        assert (got is want if want is None or got is None else issubclass(got, want)), \
            f"{kind} {method} root={root!r}: raised {got}, mpi4py {want}"
    buffer_error = error_of(lambda: b.Bcast(np.zeros(1), root=root))
    for method, args, kw in calls:
        got_error = error_of(lambda m=method, a=args, k=kw: getattr(b, m)(*a, **k))  # type: ignore[misc]
        assert got_error == buffer_error, f"{kind} {method} root={root!r}: {got_error} but " \
            f"Bcast raises {buffer_error}"
    assert b.bcast("ok") == "ok"


def error_of(fn: Callable[[], Any]) -> tuple[type[BaseException], str] | None:
    try:
        fn()
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_lenient_roots(kind: str) -> None:
    """Roots mpi4py accepts leniently (a float, numpy ints and floats, a bool) name the same
    rank in the object methods as in the buffer methods."""
    b, p = backend(kind, "world"), WORLD.size
    for root in (float(p - 1), np.int64(p - 1), np.int32(0), np.float64(p - 1), p > 1,
                 np.uint8(p - 1)):
        want = int(root)
        assert WORLD.bcast(WORLD.rank, root=root) == want  # as plain mpi4py
        assert b.bcast(WORLD.rank, root=root) == want, f"{kind} bcast root={root!r}"
        got = b.gather(WORLD.rank, root=root)
        assert got == (list(range(p)) if WORLD.rank == want else None), f"gather root={root!r}"
        got = b.scatter(list(range(10, 10 + p)) if WORLD.rank == want else None, root=root)
        assert got == 10 + WORLD.rank, f"{kind} scatter root={root!r}"
        got = b.reduce(1, MPI.SUM, root)
        assert got == (p if WORLD.rank == want else None), f"{kind} reduce root={root!r}"
        a = np.full(2, WORLD.rank, dtype=np.int64)
        b.Bcast(a, root=root)
        assert (a == want).all(), f"{kind} Bcast root={root!r}"


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle this object")


def _local_lambda() -> Any:
    return lambda: 0  # pickle refuses local objects


def test_root_only_errors() -> None:
    """p2p: the rank that holds the bad argument raises mpi4py's exception; every rank that
    would wait for it raises the same type; then the backend still works."""
    b = backend("p2p", "world")
    p, me = WORLD.size, WORLD.rank
    self_type = raised  # mpi4py's type, taken on COMM_SELF (on WORLD the other ranks hang)

    def expect(fn: Callable[[], Any], want: type[BaseException] | None, what: str) -> None:
        got = raised(fn)
        assert got is want, f"{what}: rank {me} raised {got}, expected {want}"
        assert b.bcast(("after", what), root=p - 1) == ("after", what)

    # scatter: a sequence of the wrong length / not iterable at the root
    wrong = self_type(lambda: MPI.COMM_SELF.scatter([1, 2]))
    assert wrong is ValueError
    for root in range(p):
        expect(lambda r=root: b.scatter(list(range(p + 1)), root=r), wrong, "scatter p+1 items")
    notseq = self_type(lambda: MPI.COMM_SELF.scatter(5))
    expect(lambda: b.scatter(5 if me == 0 else None), notseq, "scatter 5")
    # bcast: the root's object does not pickle
    for bad in (_local_lambda(), Unpicklable()):
        want = self_type(lambda x=bad: MPI.COMM_SELF.bcast(x))  # type: ignore[misc]
        assert want in (AttributeError, TypeError, pickle.PicklingError)
        expect(lambda x=bad: b.bcast(x if me == 0 else None), want, f"bcast {type(bad).__name__}")
    # alltoall: one rank's sequence has the wrong length
    wrong_a = self_type(lambda: MPI.COMM_SELF.alltoall([1, 2]))
    expect(lambda: b.alltoall(list(range(p + (me == p - 1)))), wrong_a, "alltoall")
    # allgather / allreduce: one rank's object does not pickle: every rank raises
    unp = self_type(lambda: MPI.COMM_SELF.allgather(Unpicklable()))
    expect(lambda: b.allgather(Unpicklable() if me == p - 1 else me), unp, "allgather")
    expect(lambda: b.allreduce(Unpicklable() if me == p - 1 else me), unp, "allreduce")
    # scan / exscan: the ranks whose result needs the failed rank's object raise (all but
    # rank 0 of exscan for rank 0; the failed rank alone when it is the last)
    for method in ("scan", "exscan"):
        expect(lambda m=method: getattr(b, m)(Unpicklable() if me == 0 else me),  # type: ignore[misc]
               unp, f"{method} failing at rank 0")
        expect(lambda m=method: getattr(b, m)(Unpicklable() if me == p - 1 else me),  # type: ignore[misc]
               unp if me == p - 1 else None, f"{method} failing at the last rank")
    # gather / reduce: the failing rank and the root raise; the others have nothing to wait for
    for method in ("gather", "reduce"):
        want = unp if me in (0, p - 1) else None
        expect(lambda m=method: getattr(b, m)(Unpicklable() if me == p - 1 else me),  # type: ignore[misc]
               want, method)
    # an op that raises raises where it is applied (allreduce: at the first step of the
    # binomial tree, the even ranks that have a partner; scan and exscan: at the first step
    # of recursive doubling, every rank that has a partner) and reaches every other rank as
    # ArithmeticError
    if p > 1:
        div = self_type(lambda: 1 // 0)
        applies = me % 2 == 0 and me + 1 < p
        expect(lambda: b.allreduce(me, lambda a, c: a // 0),
               div if applies else ArithmeticError, "allreduce")
        for method in ("scan", "exscan"):
            expect(lambda m=method: getattr(b, m)(me, lambda a, c: a // 0),
                   div if me ^ 1 < p else ArithmeticError, method)
    # an op that is not callable: TypeError on every rank, before any message
    for method in ("reduce", "allreduce", "scan", "exscan"):
        expect(lambda m=method: getattr(b, m)(me, "not an op"), TypeError, method)


def test_algorithm() -> None:
    """p2p: ``algorithm=`` goes to the buffer collectives that have it; a name none has is
    refused on every rank; the native backend takes None/"native" only."""
    b, nat = backend("p2p", "world"), backend("native", "world")
    me, p = WORLD.rank, WORLD.size
    cases: tuple[tuple[str, tuple[Any, ...], tuple[str, ...]], ...] = (
        ("barrier", (), ("dissemination",)),
        ("bcast", ({"x": me},), ("binomial", "pipeline", "scatter_ring_allgather")),
        ("gather", ([me],), ("linear", "binomial")),
        ("scatter", (list(range(p)),), ("linear", "binomial")),
        ("allgather", ((me, "x" * me),), ("ring", "bruck")),
        ("alltoall", ([(me, j) for j in range(p)],), ("pairwise", "scattered", "bruck")),
        ("reduce", (str(me), MPI.SUM), ("linear", "binomial")),
        ("allreduce", (str(me), MPI.SUM), ("linear", "binomial", "pipeline")),
        ("scan", (str(me), MPI.SUM), ("binomial", "linear")),
        ("exscan", (str(me), MPI.SUM), ("binomial",)),
    )
    for method, args, names in cases:
        want = getattr(WORLD, method)(*args)
        for name in (*names, "auto", None):
            got = getattr(b, method)(*args, algorithm=name)
            assert_same(got, want, f"p2p {method} algorithm={name}")
        assert raised(lambda m=method, a=args: getattr(b, m)(*a, algorithm="nonesuch")) \
            is ValueError
        assert raised(lambda m=method, a=args: getattr(b, m)(*a, algorithm=3)) is TypeError
        assert_same(getattr(nat, method)(*args, algorithm="native"), want, f"native {method}")
        assert raised(lambda m=method, a=args: getattr(nat, m)(*a, algorithm="ring")) \
            is ValueError
    assert b.bcast("ok") == "ok"


# ---- large: over 2 GiB -------------------------------------------------------------------------


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.large
def test_over_2gib() -> None:
    """p2p bcast (binomial: one message) of an object of 2**31 + 1000 bytes, and gather of two
    objects of 1.1 GiB (displacements past 2**31), on ranks 0 and 1 (about 11 GB of memory;
    the other ranks wait)."""
    need = 12 * 2**30
    ok = WORLD.bcast(_mem_available() >= need if WORLD.rank == 0 else None)
    if not ok:
        pytest.skip(f"needs {need / 2**30:.0f} GiB of free memory (one machine, two ranks)")
    pair = WORLD.Split(0 if WORLD.rank < 2 else MPI.UNDEFINED, key=WORLD.rank)
    if pair == MPI.COMM_NULL:
        WORLD.Barrier()
        return
    try:
        with mpicoll.p2p(pair) as b:
            n = 2**31 + 1000
            data = None
            if pair.rank == 0:
                a = np.full(n, 7, dtype=np.uint8)
                a[-1] = 3
                data = a.tobytes()
                del a
            b.traffic.reset()
            out = b.bcast(data, root=0, algorithm="binomial")
            del data
            assert isinstance(out, bytes)
            assert len(out) == n
            assert out[-1] == 3
            assert out.count(7) == n - 1
            if pair.rank == 0 and pair.size > 1:
                assert b.traffic.messages_sent == 2  # the size, then every byte at once
                assert b.traffic.bytes_sent > n
            del out
            m = 1100 * 2**20
            mine = bytes([pair.rank + 1]) * m
            got = b.gather(mine, root=0, algorithm="linear")
            del mine
            if pair.rank == 0:
                assert got is not None
                assert [len(x) for x in got] == [m] * pair.size
                for r, x in enumerate(got):
                    assert x[0] == x[-1] == r + 1
            else:
                assert got is None
    finally:
        pair.Free()
        WORLD.Barrier()


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["reduce", "allreduce", "scan", "exscan"])
def test_an_op_that_is_not_callable_raises_on_every_rank(kind: str, method: str) -> None:
    """``op=5`` on every rank: TypeError on every rank, before any message, on both backends
    (plain mpi4py raises at the rank that applies it and leaves the others waiting, so it is
    not the reference here); the backend works afterwards."""
    b = backend(kind, "world")
    if WORLD.Get_size() == 1 and kind == "native":
        assert getattr(b, method)(3, op=5) == getattr(WORLD, method)(3, op=5)  # as mpi4py
    else:
        with pytest.raises(TypeError, match="op"):
            getattr(b, method)(3, op=5)
    assert b.allreduce(1) == WORLD.Get_size()
