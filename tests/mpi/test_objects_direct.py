"""The p2p object methods' direct protocol, against plain mpi4py on the same inputs.

With ``algorithm=`` None or "auto" the p2p object methods send their pickled objects as
point-to-point messages on the backend's private communicator, each call on its own tag: a
first message of at most ``objects._SLOT`` bytes holds the size and, for an object of at most
``objects.EAGER`` bytes, the bytes themselves; a larger object follows in a second message.
These tests cover what that protocol adds:

* objects whose pickle is exactly ``EAGER`` bytes, one less, one more, 0 bytes (a custom
  ``MPI.pickle``) and many times larger, through every method and root;
* one call mixing small and large objects across ranks (even ranks small, odd ranks large);
* reductions with ops that are neither commutative nor associative on objects of both sizes
  (mpi4py's grouping: the results must be mpi4py's);
* a pickling failure on one rank, small or large objects elsewhere: every rank that needs the
  bytes raises, nobody hangs, nothing is left on either communicator, and the next call works;
* object calls between a user's point-to-point messages on the same communicator (posted
  before, matched after) and while I-form buffer collectives are outstanding, including ranks
  that complete those requests at different points (one before the object call, one after).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_objects_direct.py`` (P = 1..5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from test_objects import Unpicklable, assert_same, raised

import mpicoll
from mpicoll.backends import objects

WORLD = MPI.COMM_WORLD
EAGER = objects.EAGER
_B: list[Any] = []


def backend() -> Any:
    if not _B:
        _B.append(mpicoll.p2p(WORLD))
    return _B[0]


@pytest.fixture(scope="module", autouse=True)
def _free() -> Iterator[None]:
    yield
    if _B:
        _B.pop().Free()


def sized(n: int, key: int) -> bytes:
    """A bytes object whose ``MPI.pickle.dumps`` is exactly ``n`` bytes (n >= 20), its
    content depending on ``key``."""
    for k in range(max(0, n - 40), n):
        obj = bytes([key % 251]) * k
        if len(MPI.pickle.dumps(obj)) == n:
            return obj
    raise AssertionError(f"no bytes object pickles to {n} bytes")


#: pickled sizes around the eager limit, and far beyond it
SIZES = (20, EAGER - 1, EAGER, EAGER + 1, 3 * EAGER + 7, 200_000)


#: one call: (method, fresh arguments, keywords)
Call = tuple[str, Callable[[], tuple[Any, ...]], dict[str, Any]]


def same_as_mpi4py(method: str, make: Callable[[], tuple[Any, ...]], **kw: Any) -> Any:
    """``method`` on plain mpi4py and on the p2p backend with fresh copies of the same
    arguments: the same result on every rank."""
    want = getattr(WORLD, method)(*make(), **kw)
    got = getattr(backend(), method)(*make(), **kw)
    assert_same(got, want, f"p2p {method} {kw} (rank {WORLD.rank})")
    return want


def calls(mine: Callable[[int], Any]) -> list[Call]:
    """Every object method with rank r's object ``mine(r)`` (per peer for alltoall and
    scatter: ``mine(r * p + peer)``), every root."""
    p, me = WORLD.size, WORLD.rank
    out: list[Call] = []
    for root in range(p):
        out += [
            ("bcast", lambda root=root: (mine(root) if me == root else None,), {"root": root}),
            ("gather", lambda: (mine(me),), {"root": root}),
            ("scatter", lambda root=root: (
                [mine(root * p + i) for i in range(p)] if me == root else None,),
             {"root": root}),
            ("reduce", lambda: (mine(me), _concat), {"root": root}),
        ]
    out += [("allgather", lambda: (mine(me),), {}),
            ("alltoall", lambda: ([mine(me * p + j) for j in range(p)],), {})]
    out += [(m, lambda: (mine(me), _concat), {}) for m in ("allreduce", "scan", "exscan")]
    return out


def every_method(mine: Callable[[int], Any]) -> None:
    """:func:`calls`, each on plain mpi4py and on the p2p backend: the same results."""
    for method, make, kw in calls(mine):
        same_as_mpi4py(method, make, **kw)


def _concat(a: Any, b: Any) -> Any:
    return a + b


@pytest.mark.mpi
@pytest.mark.parametrize("n", SIZES)
def test_sizes_around_the_eager_limit(n: int) -> None:
    every_method(lambda key: sized(n, key))


@pytest.mark.mpi
def test_small_and_large_in_one_call() -> None:
    """Even ranks' objects fit the first message, odd ranks' do not (and the other way)."""
    for big_on in (1, 0):
        every_method(lambda key, b=big_on: sized(EAGER + 1 if key % 2 == b else 30, key))
        every_method(lambda key, b=big_on: sized(EAGER if key % 2 == b else 80_000, key))


def _pair(a: Any, b: Any) -> Any:
    return (a, b)


def _affine(a: Any, b: Any) -> Any:
    return a * 2 + b


@pytest.mark.mpi
@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("op", [_pair, _affine, _concat], ids=["pair", "affine", "concat"])
def test_grouping_as_mpi4py(op: Callable[[Any, Any], Any], big: bool) -> None:
    """Ops neither commutative nor associative give mpi4py's result (its binomial reduce, its
    recursive-doubling scan), whichever side of the eager limit the partial results are."""
    me, p = WORLD.rank, WORLD.size
    pad = "x" * (EAGER if big else 0)
    values: dict[Any, Callable[[int], Any]] = {
        _pair: lambda r: (r, pad), _affine: lambda r: np.full(3 + 600 * big, r + 1),
        _concat: lambda r: f"{r}{pad}|",
    }
    make = values[op]
    for root in range(p):
        same_as_mpi4py("reduce", lambda: (make(me), op), root=root)
    for method in ("allreduce", "scan", "exscan"):
        same_as_mpi4py(method, lambda: (make(me), op))


def _no_stray(b: Any) -> list[str]:
    """Nothing left to receive on the user's or the backend's communicator."""
    WORLD.Barrier()
    problems = []
    for name, c in (("the user's communicator", WORLD), ("the private one", b._comm)):
        st = MPI.Status()
        if c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
            problems.append(f"a stray message on {name} (source {st.source}, tag {st.tag})")
    WORLD.Barrier()
    return problems


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [30, EAGER + 1, 50_000], ids=["small", "eager+1", "big"])
def test_a_pickling_failure_on_one_rank(size: int) -> None:
    """Rank p - 1's object does not pickle; the others' are ``size`` bytes.  The failing rank
    raises its own TypeError; every rank that needs its bytes raises TypeError naming it;
    the others return what mpi4py would; nothing is left behind."""
    b, p, me = backend(), WORLD.size, WORLD.rank
    last = p - 1
    bad = me == last

    def mine() -> Any:
        return Unpicklable() if bad else sized(size, me)

    problems: list[str] = []

    def expect(what: str, fn: Callable[[], Any], raises: bool, want: Any = None) -> None:
        try:
            got = fn()
        except TypeError as exc:
            if not raises:
                problems.append(f"{what}: raised {exc!r}")
            elif not bad and f"rank(s) {last}" not in str(exc):
                problems.append(f"{what}: {exc} does not name rank {last}")
        except Exception as exc:
            problems.append(f"{what}: raised {type(exc).__name__}: {exc}")
        else:
            if raises:
                problems.append(f"{what}: returned {got!r:.60}")
            elif want is not None and got != want:
                problems.append(f"{what}: wrong result")

    for root in range(p):
        expect(f"bcast root {root}", lambda r=root: b.bcast(mine(), root=r), root == last)
        expect(f"gather root {root}", lambda r=root: b.gather(mine(), root=r),
               me in (root, last))
        expect(f"reduce root {root}", lambda r=root: b.reduce(mine(), _concat, root=r),
               me in (root, last))
        expect(f"scatter root {root}", lambda r=root: b.scatter(
            [Unpicklable() if bad else sized(size, i) for i in range(p)] if me == r else None,
            root=r), root == last)
    expect("allgather", lambda: b.allgather(mine()), True)
    expect("alltoall", lambda: b.alltoall([mine() for _ in range(p)]), True)
    expect("allreduce", lambda: b.allreduce(mine(), _concat), True)
    # scan: the ranks whose result needs rank p - 1's object (itself); exscan: itself only
    want = WORLD.scan(sized(size, me), _concat)
    expect("scan", lambda: b.scan(mine(), _concat), bad, None if bad else want)
    expect("exscan", lambda: b.exscan(mine(), _concat), bad)
    problems += _no_stray(b)
    if b.allreduce(me + 1) != p * (p + 1) // 2:
        problems.append("allreduce afterwards: wrong result")
    everyone = WORLD.allgather(problems)
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, "\n".join(lines)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [30, 50_000], ids=["small", "big"])
def test_between_user_point_to_point(size: int) -> None:
    """A user's receive from ANY_SOURCE with ANY_TAG posted on the communicator before the
    object calls gets the user's message sent after them, not theirs."""
    b, p, me = backend(), WORLD.size, WORLD.rank
    todo = calls(lambda key: sized(size, key))
    # plain mpi4py first: MPICH's own allgather at P = 1 waits forever with such a receive
    # posted on its communicator
    wants = [getattr(WORLD, method)(*make(), **kw) for method, make, kw in todo]
    box = bytearray(64)
    req = WORLD.Irecv(box, MPI.ANY_SOURCE, MPI.ANY_TAG)
    for (method, make, kw), want in zip(todo, wants, strict=True):
        assert_same(getattr(b, method)(*make(), **kw), want, f"p2p {method} {kw}")
    WORLD.Send(bytes([me + 1]) * 64, (me + 1) % p, 7)
    st = MPI.Status()
    req.Wait(st)
    assert (st.source, st.tag) == ((me - 1) % p, 7)
    assert box == bytes([(me - 1) % p + 1]) * 64
    assert not _no_stray(b)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [30, 50_000], ids=["small", "big"])
def test_with_outstanding_nonblocking_collectives(size: int) -> None:
    """Object calls while I-form buffer collectives of the same backend (and of another
    one) are outstanding: all results as mpi4py's.  Rank 0 completes the requests after the
    object calls, the others before them (a peer waits on rank 0's outstanding schedules
    while rank 0 is inside an object call, which must progress them)."""
    b, p, me = backend(), WORLD.size, WORLD.rank
    with mpicoll.p2p(WORLD) as other:
        n = 5000
        x = np.arange(n, dtype=np.float64) + me
        y = np.empty(n)
        z = np.empty(n * p)
        todo = calls(lambda key: sized(size, key))
        reqs = [b.Iallreduce(x, y), other.Iallgather(x, z), b.Ibarrier()]
        if me != 0:
            mpicoll.Waitall(reqs)
        # no plain mpi4py call here: it would not progress rank 0's outstanding schedules
        got = [getattr(b, method)(*make(), **kw) for method, make, kw in todo]
        if me == 0:
            mpicoll.Waitall(reqs)
        for (method, make, kw), g in zip(todo, got, strict=True):
            assert_same(g, getattr(WORLD, method)(*make(), **kw), f"p2p {method} {kw}")
        assert np.array_equal(y, np.arange(n) * p + p * (p - 1) / 2)
        assert np.array_equal(z, np.concatenate([np.arange(n) + r for r in range(p)]))
    assert not _no_stray(b)


@pytest.mark.mpi
def test_zero_bytes_and_traffic() -> None:
    """A ``dumps`` that gives 0 bytes reads back as None on every method (as mpi4py); a
    direct call's messages are counted in the backend's traffic (one first message per peer
    for small objects)."""
    b, p, me = backend(), WORLD.size, WORLD.rank
    protocol, threshold = MPI.pickle.PROTOCOL, MPI.pickle.THRESHOLD
    try:
        MPI.pickle.__init__(lambda o: b"", MPI.pickle.loads)
        for method, make, kw in calls(lambda key: ("anything", key)):
            if method not in ("reduce", "allreduce", "scan", "exscan"):  # None + None
                same_as_mpi4py(method, make, **kw)
    finally:
        MPI.pickle.__init__(None, None, protocol, threshold)
    b.traffic.reset()
    b.allgather(me)
    assert b.traffic.messages_sent == p - 1
    assert b.traffic.messages_recv == p - 1
    b.traffic.reset()
    b.allgather(sized(EAGER + 1, me))
    assert b.traffic.messages_sent == 2 * (p - 1)
    assert b.traffic.bytes_sent == (p - 1) * (8 + EAGER + 1)
    assert raised(lambda: b.bcast(1)) is None
