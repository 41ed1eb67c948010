"""The p2p slow path's reuse never gives a wrong answer.

* A call the front door does not hold but whose layout it has seen (new arrays at every call,
  a list spec of new arrays, a view made anew of a new base) replays the layout's compiled
  plan bound to its own buffers (``mpicoll.engines.plan.Template``): its results equal plain
  mpi4py's, it is not parsed, and buffers that overlap are still refused (the parse's check).
* A replayed I-form call reuses its runner's last request once nobody holds it: a request the
  program still holds is never restarted under it, and a second call made while the first is
  pending gets its own.
* Memos by an MPI datatype's handle: a datatype freed and a new one that gets its handle are
  never confused.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_slow_path.py`` (P = 1..5).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll.backends import args as args_module
from mpicoll.backends.buffers import MPIValueError
from mpicoll.backends.frontdoor import MISS
from mpicoll.engines.plan import Template

WORLD = MPI.COMM_WORLD
P, RANK = WORLD.size, WORLD.rank


@pytest.fixture
def hand() -> Iterator[mpicoll.P2P]:
    b = mpicoll.p2p(WORLD)
    yield b
    b.Free()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each collective's parser ran (the parser table is shared by the backends)."""
    seen: dict[str, int] = {}
    for name, parser in list(args_module.PARSERS.items()):
        def spy(*a: Any, _name: str = name, _parser: Any = parser) -> Any:
            seen[_name] = seen.get(_name, 0) + 1
            return _parser(*a)
        monkeypatch.setitem(args_module.PARSERS, name, spy)
    return seen


def _fresh(kind: str, data: np.ndarray) -> Any:
    """``data`` passed as a new object: a new array, a list spec of one, a view of a new base
    (at an offset), or a new 2-D array."""
    if kind == "array":
        return data.copy()
    if kind == "list":
        return [data.copy(), MPI.DOUBLE]
    if kind == "view":
        base = np.zeros(data.size + 3)
        base[2:2 + data.size] = data
        return base[2:2 + data.size]
    assert kind == "2d"
    return data.copy().reshape(1, -1) if data.size else data.copy()


def _buf(spec: Any) -> np.ndarray:
    return spec[0] if isinstance(spec, list) else spec


CASES: list[tuple[str, Callable[[int], int]]] = [
    ("Allreduce", lambda n: n), ("Bcast", lambda n: n), ("Allgather", lambda n: n),
    ("Alltoall", lambda n: n), ("Reduce", lambda n: n), ("Gather", lambda n: n),
    ("Scatter", lambda n: n),
]


def _run(comm: Any, method: str, kind: str, n: int, i: int) -> np.ndarray:
    """One call of ``method`` on new buffers (``kind``), count ``n``, inputs depending on the
    call's index ``i``; this rank's output."""
    x = np.arange(n * P, dtype=np.float64) + 100.0 * RANK + i
    if method == "Allreduce":
        out = _fresh(kind, np.zeros(n))
        comm.Allreduce(_fresh(kind, x[:n]), out)
    elif method == "Bcast":
        out = _fresh(kind, x[:n] if RANK == 0 else np.zeros(n))
        comm.Bcast(out, root=0)
    elif method in ("Allgather", "Gather"):
        out = _fresh(kind, np.zeros(n * P))
        getattr(comm, method)(_fresh(kind, x[:n]), out)
    elif method == "Alltoall":
        out = _fresh(kind, np.zeros(n * P))
        comm.Alltoall(_fresh(kind, x), out)
    elif method == "Reduce":
        out = _fresh(kind, np.zeros(n))
        comm.Reduce(_fresh(kind, x[:n]), out, root=P - 1)
    else:
        out = _fresh(kind, np.zeros(n))
        comm.Scatter(_fresh(kind, x), out, root=0)
    return _buf(out).ravel().copy()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["array", "list", "view", "2d"])
@pytest.mark.parametrize("method", [m for m, _ in CASES])
def test_new_buffers_at_every_call_equal_mpi4py(hand: mpicoll.P2P, parses: dict[str, int],
                                                method: str, kind: str) -> None:
    for n in (0, 1, P + 1):
        for i in range(4):  # the first of a layout is parsed, the next ones use its template
            got = _run(hand, method, kind, n, i)
            want = _run(WORLD, method, kind, n, i)
            assert np.array_equal(got, want), (method, kind, n, i, got, want)
    templates = [t for t in hand.front_door.templates.values() if isinstance(t, Template)]
    if P > 1:
        assert templates, "no layout made a template"
        # a layout with a template is not parsed again
        before = dict(parses)
        _run(hand, method, kind, 1, 9)
        assert parses == before, (before, parses)


@pytest.mark.mpi
def test_a_template_refuses_overlapping_buffers(hand: mpicoll.P2P) -> None:
    for _ in range(3):  # the layout: two views of 4 elements of a new base of 10, apart
        base = np.arange(10.0) + RANK
        hand.Allreduce(base[0:4], base[6:10])
        assert np.array_equal(base[6:10], np.arange(4.0) * P + sum(range(P)))
    base = np.arange(10.0)
    with pytest.raises(MPIValueError, match="overlap"):  # the same layout, overlapping
        hand.Allreduce(base[0:4], base[2:6])
    with pytest.raises(MPIValueError, match="overlap"):
        hand.Allreduce(base[0:4], base[2:6])
    hand.Barrier()


@pytest.mark.mpi
def test_a_template_call_with_a_schedule_in_flight(hand: mpicoll.P2P,
                                                   parses: dict[str, int]) -> None:
    """A bound runner that must run through the engine (another schedule in flight) parses
    its call then, and gives the same answer."""
    for i in range(3):
        y = np.zeros(3)
        hand.Allreduce(np.full(3, RANK + i + 0.0), y)
    other = np.zeros(5)
    req = hand.Iallgather(np.full(5 // 5, RANK + 0.0), np.zeros(P))  # may be in flight
    big = hand.Iallreduce(np.ones(1 << 16), other := np.zeros(1 << 16))
    y = np.zeros(3)
    hand.Allreduce(np.full(3, RANK + 7.0), y)
    mpicoll.Waitall([req, big])
    assert np.array_equal(y, np.full(3, sum(r + 7.0 for r in range(P))))
    assert np.array_equal(other, np.full(1 << 16, float(P)))


@pytest.mark.mpi
def test_a_template_call_parses_the_arguments_of_its_run(hand: mpicoll.P2P) -> None:
    """A runner bound from a template that must parse (a schedule in flight) parses the
    arguments of the run at hand, not the list its first call passed, changed since."""
    for i in range(3):  # the layout: a list spec of 3 doubles
        y = np.zeros(3)
        hand.Allreduce([np.full(3, RANK + i + 0.0), MPI.DOUBLE], y)
    x, z = np.full(3, RANK + 1.0), np.full(3, 100.0 + RANK)
    spec, y = [x, MPI.DOUBLE], np.zeros(3)
    hand.Allreduce(spec, y)  # bound to x; stored under x's key
    spec[0] = z  # the same list, another array of the layout
    hand.Allreduce(spec, y)
    assert np.array_equal(y, np.full(3, sum(100.0 + r for r in range(P))))
    n = 1 << 15
    big = np.zeros(n)
    req = hand.Iallreduce(np.ones(n), big, algorithm="ring")  # in flight while P > 1
    hand.Allreduce([x, MPI.DOUBLE], y)  # x's key: the runner bound to x, parsing now
    req.Wait()
    assert np.array_equal(y, np.full(3, sum(r + 1.0 for r in range(P))))
    assert np.array_equal(big, np.full(n, float(P)))


@pytest.mark.mpi
def test_a_pooled_request_is_reused_only_when_nobody_holds_it(hand: mpicoll.P2P) -> None:
    x, y = np.full(4, RANK + 1.0), np.zeros(4)
    total = float(sum(range(1, P + 1)))
    for _ in range(3):  # the third call replays (the second compiles)
        hand.Iallreduce(x, y).Wait()
    run = hand.front_door.last[True]["allreduce"].run
    first = weakref.ref(run._previous)  # (a weak reference: not a holder)
    for i in range(4):  # nobody holds the last request: it is started again
        x[:] = RANK + 1.0 + i
        hand.Iallreduce(x, y).Wait()
        assert run._previous is first()
        assert np.array_equal(y, np.full(4, total + i * P))
    # a request the program holds is never restarted under it
    held = hand.Iallreduce(x, y)
    held.Wait()
    again = hand.Iallreduce(x, y)
    assert again is not held
    assert held == MPI.REQUEST_NULL
    assert not held
    assert held.Test()
    again.Wait()
    # a second call while the first is pending gets its own request
    x[:] = RANK + 1.0
    y2 = np.zeros(4)
    r1 = hand.Iallreduce(x, y)
    r2 = hand.Iallreduce(x, y2)
    assert r1 is not r2
    mpicoll.Waitall([r1, r2])
    assert np.array_equal(y, np.full(4, total))
    assert np.array_equal(y2, np.full(4, total))
    # and after both, the pool serves again, with the right answer
    x[:] = 2.0 * (RANK + 1)
    hand.Iallreduce(x, y).Wait()
    assert np.array_equal(y, np.full(4, 2 * total))


@pytest.mark.mpi
def test_a_freed_datatype_and_a_new_one_with_its_handle(hand: mpicoll.P2P) -> None:
    """A derived datatype used with new buffers at every call (keyed by its handle and
    identity, a template kept), freed; a new one of another layout made until it gets the
    freed one's handle (MPICH reuses it at once), used the same way: its own answer."""
    def bcast(comm: Any, dt: MPI.Datatype, n: int, i: int) -> np.ndarray:
        buf = np.arange(n * 4, dtype=np.float64) + i if RANK == 0 else np.full(n * 4, -1.0)
        comm.Bcast([buf, n, dt], root=0)
        return buf

    a = MPI.DOUBLE.Create_contiguous(2).Commit()
    handle = a.handle
    for i in range(3):
        assert np.array_equal(bcast(hand, a, 2, i), bcast(WORLD, a, 2, i))
    a.Free()
    made = []
    b = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()  # 2 doubles of 3: another typemap
    for _ in range(8):
        if b.handle == handle:
            break
        made.append(b)
        b = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    same = WORLD.allreduce(int(b.handle == handle), op=MPI.MIN)
    for i in range(3):
        assert np.array_equal(bcast(hand, b, 1, i), bcast(WORLD, b, 1, i)), same
    for d in [b, *made]:
        d.Free()


@pytest.mark.mpi
def test_a_predefined_datatype_memo_by_handle(hand: mpicoll.P2P) -> None:
    """Typecodes that numpy calls equal but MPI keeps apart (``'l'`` and ``'q'``) keep their
    own datatypes (mpi4py refuses a reduction mixing them)."""
    if np.dtype("l") != np.dtype("q"):
        pytest.skip("long is not long long here")
    for _ in range(2):
        y = np.zeros(2, dtype="q")
        hand.Allreduce(np.ones(2, dtype="q"), y)
        assert np.array_equal(y, np.full(2, P))
    with pytest.raises(ValueError, match="mismatch in send and receive MPI datatypes"):
        hand.Allreduce(np.ones(2, dtype="l"), np.zeros(2, dtype="q"))
    # views of one base, 'q' then 'l': the same base, address, strides, shape and flags
    base, out = np.ones(2, dtype="q"), np.zeros(2, dtype="q")
    for _ in range(2):
        hand.Allreduce(base.view("q"), out)
    with pytest.raises(ValueError, match="mismatch in send and receive MPI datatypes"):
        hand.Allreduce(base.view("l"), out)
    hand.Barrier()


@pytest.mark.mpi
def test_new_buffers_are_stored_at_their_second_call(hand: mpicoll.P2P) -> None:
    """A call a template serves is stored only when the same buffers come twice in a row:
    new arrays at every call leave the cache as it was (only the last call's are kept
    alive), and every call's traffic is counted (a runner run once adds its messages up when
    it is dropped)."""
    for i in range(3):  # the layout's first call: parsed and stored
        hand.Allreduce(np.full(3, RANK + i + 0.0), np.zeros(3))
    door = hand.front_door
    entries = len(door.entries)
    hand.traffic.reset()
    x = np.full(3, RANK + 1.0)
    y = np.zeros(3)
    hand.Allreduce(x, y)  # its first call: run, not stored
    one = (hand.traffic.messages_sent, hand.traffic.bytes_recv)
    refs = []
    for i in range(5):
        y2 = np.zeros(3)
        hand.Allreduce(np.full(3, RANK + i + 0.0), y2)
        assert np.array_equal(y2, np.full(3, sum(r + i + 0.0 for r in range(P))))
        refs.append(weakref.ref(y2))
        del y2
    assert [r() is None for r in refs] == [True] * 4 + [False]  # the last call's: kept
    assert len(door.entries) == entries
    assert (hand.traffic.messages_sent, hand.traffic.bytes_recv) == (6 * one[0], 6 * one[1])
    h = door.hits
    hand.Allreduce(x, y)
    assert len(door.entries) == entries  # not in a row
    assert refs[-1]() is None
    hand.Allreduce(x, y)  # x and y twice in a row: stored
    assert len(door.entries) == entries + 1
    assert door.hits == h
    hand.Allreduce(x, y)  # and a hit
    assert door.hits == h + 1
    assert np.array_equal(y, np.full(3, sum(r + 1.0 for r in range(P))))


@pytest.mark.mpi
def test_the_last_calls_replay_goes_through_its_runner_where_it_must(
        hand: mpicoll.P2P) -> None:
    """A blocking call repeated with the same objects replays its compiled plan inside its
    last-call record (``BlockingRunner.inline``); where its runner's own checks would not
    replay (a schedule in flight, the plan dropped, ``auto``'s model changed) the record
    calls the runner instead.  Every result equals plain mpi4py's."""
    from mpicoll.model import alphabeta

    x, y, plain = np.zeros(5), np.zeros(5), np.zeros(5)

    def check(i: int) -> None:
        x[:] = RANK + i + np.arange(5.0)
        hits = hand.front_door.hits
        hand.Allreduce(x, y)
        assert hand.front_door.hits == hits + (i > 0)  # (the first call is parsed)
        WORLD.Allreduce(x, plain)
        assert np.array_equal(y, plain)

    for i in range(3):
        check(i)
    hit = hand.front_door.last[False]["allreduce"]
    run = hit.run
    assert run._fast is not None
    assert "R_RUN" in hit.__code__.co_freevars, "the record replays the plan itself"
    # a schedule in flight (P > 1): the runner progresses it while it runs this call
    big, n = np.zeros(1000), 1000
    req = hand.Iallreduce(np.ones(n), big, algorithm="ring")
    check(3)
    req.Wait()
    assert np.array_equal(big, np.full(n, float(P)))
    # the plan dropped under the record (an eviction, a changed model): compiled again
    run.free()
    for i in range(4, 7):
        check(i)
    assert hand.front_door.last[False]["allreduce"] is hit
    # auto's model changed: chosen again, for the new model
    try:
        alphabeta.use(alphabeta.Model(alpha=1e-3, beta=1e-12))
        for i in range(7, 10):
            check(i)
        assert run.model is alphabeta.current()
    finally:
        alphabeta.use(None)
    check(10)
    assert run.model is None


@pytest.mark.mpi
def test_a_replayed_request_reports_its_error_at_every_wait(hand: mpicoll.P2P) -> None:
    """A truncating ``Ibcast`` repeated with the same buffers (its plan replayed, its request
    restarted from the pool, waited alone): every ``Wait`` raises ``MPI_ERR_TRUNCATE`` on the
    rank whose buffer is short (the last, a leaf of every tree) and sets its status's error,
    as the generator's run does; the other ranks complete, and a correct call after it
    completes everywhere with the root's values."""
    short = P > 1 and RANK == P - 1
    buf = np.zeros(2 if short else 4)
    for i in range(5):
        if RANK == 0:
            buf[:] = i
        status = MPI.Status()
        if short:
            with pytest.raises(MPI.Exception) as info:
                hand.Ibcast(buf, root=0).Wait(status)
            assert info.value.Get_error_class() == MPI.ERR_TRUNCATE
            assert status.Get_error() != MPI.SUCCESS
        else:
            hand.Ibcast(buf, root=0).Wait(status)
            assert status.Get_error() == MPI.SUCCESS
            assert np.array_equal(buf, np.full(4, float(i)))
    good = np.full(4, float(RANK))
    for _ in range(3):
        hand.Ibcast(good, root=0).Wait()
        assert np.array_equal(good, np.zeros(4))


@pytest.mark.mpi
def test_new_buffers_run_once_refuse_one_array_twice(hand: mpicoll.P2P) -> None:
    """A call of new arrays at every call runs from its layout's template without a runner
    (``Template.run``); the same array passed as both buffers (not ``MPI.IN_PLACE``) is
    still refused, before any message, on every rank, and a later call is not disturbed."""
    for i in range(4):
        y = np.zeros(3)
        hand.Allreduce(np.full(3, RANK + i + 0.0), y)
        assert np.array_equal(y, np.full(3, sum(r + i + 0.0 for r in range(P))))
    x = np.full(3, RANK + 0.0)
    with pytest.raises(MPIValueError, match="overlap"):
        hand.Allreduce(x, x)
    y = np.zeros(3)
    hand.Allreduce(np.full(3, RANK + 5.0), y)
    assert np.array_equal(y, np.full(3, sum(r + 5.0 for r in range(P))))


@pytest.mark.mpi
def test_new_buffers_run_once_raise_mpis_error(hand: mpicoll.P2P) -> None:
    """A ``Bcast`` of new arrays at every call whose last rank's buffer is short (MPI matches
    type signatures: the others send more): that rank's run-once replay raises
    ``MPI_ERR_TRUNCATE`` at every call, as the first, parsed call does; the others complete
    with the root's values, and a correct call after it completes everywhere."""
    short = P > 1 and RANK == P - 1
    for i in range(5):
        buf = np.full(2 if short else 4, float(i) if RANK == 0 else -1.0)
        if short:
            with pytest.raises(MPI.Exception) as info:
                hand.Bcast(buf, root=0)
            assert info.value.Get_error_class() == MPI.ERR_TRUNCATE
        else:
            hand.Bcast(buf, root=0)
            assert np.array_equal(buf, np.full(4, float(i)))
    for i in range(3):
        good = np.full(4, float(RANK + i))
        hand.Bcast(good, root=0)
        assert np.array_equal(good, np.full(4, float(i)))


def _outcome(comm: Any, call: Callable[[Any], np.ndarray]) -> Any:
    """``call(comm)``'s output, or the type of what it raised."""
    try:
        return call(comm)
    except Exception as exc:  # the same refusal on both sides is what is compared
        return type(exc)


@pytest.mark.mpi
def test_the_fresh_buffers_record_serves_only_its_layout(hand: mpicoll.P2P) -> None:
    """New arrays at every call run from the fresh-buffers record of the layout a template
    last served (``frontdoor.fresh_of``), without a key; a call differing in anything the
    layout holds (count, dtype, strides, flags, spec form, op, ``algorithm=``) or whose
    buffers may overlap is not taken by it, and every result (or refusal) equals plain
    mpi4py's; ``auto``'s model changed: the record steps aside."""
    from mpicoll.model import alphabeta

    door = hand.front_door
    taken: list[bool] = []

    def spy() -> None:  # count the record's answers (a slow call may put it back)
        record = door.fresh.get("allreduce")
        if record is None or getattr(record, "spied", False):
            return

        def counted(algorithm: Any, args: tuple[Any, ...]) -> Any:
            out = record(algorithm, args)
            taken.append(out is not MISS)
            return out

        counted.spied = True  # type: ignore[attr-defined]
        door.fresh["allreduce"] = counted

    def new(i: int, **kw: Any) -> Callable[[Any], np.ndarray]:
        def call(comm: Any) -> np.ndarray:
            y = np.zeros(3)
            comm.Allreduce(np.full(3, RANK + i + 0.0), y, **kw)
            return y
        return call

    for i in range(3):  # the layout's template, then its record
        assert np.array_equal(new(i)(hand), new(i)(WORLD))
    if P == 1:
        return  # (one rank: a plan of no rounds, no template)
    assert "allreduce" in door.fresh
    spy()
    misses = door.misses
    assert np.array_equal(new(5)(hand), new(5)(WORLD))
    assert taken == [True]  # served,
    assert door.misses == misses + 1  # counted as a miss

    def readonly(comm: Any) -> np.ndarray:
        x = np.full(3, RANK + 1.0)
        x.flags.writeable = False
        y = np.zeros(3)
        comm.Allreduce(x, y)
        return y

    def readonly_out(comm: Any) -> np.ndarray:
        y = np.zeros(3)
        y.flags.writeable = False
        comm.Allreduce(np.full(3, RANK + 1.0), y)
        return y

    def spec(comm: Any) -> np.ndarray:
        y = np.zeros(3)
        comm.Allreduce([np.full(3, RANK + 2.0), MPI.DOUBLE], [y, MPI.DOUBLE])
        return y

    def count(comm: Any) -> np.ndarray:
        y = np.zeros(4)
        comm.Allreduce(np.full(4, RANK + 3.0), y)
        return y

    def single(comm: Any) -> np.ndarray:
        y = np.zeros(3, np.float32)
        comm.Allreduce(np.full(3, RANK + 4.0, np.float32), y)
        return y

    def strided(comm: Any) -> np.ndarray:
        y = np.zeros(6)[::2]
        comm.Allreduce(np.full(3, RANK + 5.0), y)
        return y

    def overlapping(comm: Any) -> np.ndarray:
        base = np.arange(5.0) + RANK
        comm.Allreduce(base[0:3], base[2:5])
        return base

    def twice(comm: Any) -> np.ndarray:
        x = np.full(3, RANK + 6.0)
        comm.Allreduce(x, x)
        return x

    others: list[tuple[Callable[[Any], Any], Callable[[Any], Any]]] = [
        (c, c) for c in (readonly, readonly_out, spec, count, single, strided,
                         new(7, op=MPI.MAX))]
    others.append((new(8, algorithm="recursive_doubling"), new(8)))
    for call, plain in others:
        taken.clear()
        spy()
        got, want = _outcome(hand, call), _outcome(WORLD, plain)
        assert taken in ([], [False]), call.__name__  # the record did not take it
        if isinstance(want, np.ndarray):
            assert np.array_equal(got, want), (call.__name__, got, want)
        else:
            assert isinstance(got, type), (call.__name__, got)  # refused as by mpi4py
        assert np.array_equal(new(9)(hand), new(9)(WORLD))  # and the layout again
    for call in (overlapping, twice):  # the layout's own, refused by the parse
        spy()
        with pytest.raises(MPIValueError, match="overlap"):
            call(hand)
        assert np.array_equal(new(10)(hand), new(10)(WORLD))
    try:  # auto's model changed: the record steps aside; a new template serves the layout
        record = door.fresh["allreduce"]
        alphabeta.use(alphabeta.Model(alpha=1e-3, beta=1e-12))
        for i in range(11, 15):
            assert np.array_equal(new(i)(hand), new(i)(WORLD))
        assert door.fresh["allreduce"] is not record
    finally:
        alphabeta.use(None)
    assert np.array_equal(new(15)(hand), new(15)(WORLD))
