"""The front door's cache (mpicoll.backends.frontdoor) never returns a stale parse.

On both backends, between two calls, one thing the key holds changes at a time: only the
buffer's contents (must hit, and the new contents are used), or its shape, dtype, address
(another array, a view at another offset), writeable flag, counts, op, root, in-place,
datatype or ``algorithm=`` (must miss, and the result is that of the new call).  Bad input
raises at every call, before any message, however often the good call before it was cached.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_front_door.py`` (P = 1..5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _runners as runners
import numpy as np
import pytest
from _runners import backend
from mpi4py import MPI
from test_nonblocking import _iform_cases

from mpicoll.algorithms.collectives import NAMES

WORLD = MPI.COMM_WORLD
P, RANK = WORLD.size, WORLD.rank


def _counts(b: Any) -> tuple[int, int]:
    return b.front_door.hits, b.front_door.misses


def _expect(b: Any, call: Callable[[], Any], hit: bool) -> None:
    """``call()`` hits (or misses) the cache once; on native (unchecked), which hands every
    call to mpi4py without the front door, the cache is never used."""
    h, m = _counts(b)
    call()
    h2, m2 = _counts(b)
    want = (0, 0) if b.name == "native" else (1, 0) if hit else (0, 1)
    assert (h2 - h, m2 - m) == want, ("hit" if hit else "miss", h2 - h, m2 - m)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_each_part_of_the_key(kind: str) -> None:
    b = backend(kind)
    total = float(sum(range(1, P + 1)))
    x = np.full(4, RANK + 1.0)
    y = np.zeros(4)
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    assert np.array_equal(y, np.full(4, total))
    # contents only: a hit, and the new contents are used
    x[:] = 2.0 * (RANK + 1)
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    assert np.array_equal(y, np.full(4, 2 * total))
    x[:] = RANK + 1.0
    # shape (the same array object, reshaped in place)
    x2, y2 = np.full(4, RANK + 1.0), np.zeros(4)
    b.Allreduce(x2, y2)
    x2.shape = (2, 2)
    y2.shape = (2, 2)
    _expect(b, lambda: b.Allreduce(x2, y2), hit=False)
    assert np.array_equal(y2, np.full((2, 2), total))
    # dtype (the same memory seen as another type)
    xi, yi = np.full(4, RANK + 1, dtype=np.int64), np.zeros(4, dtype=np.int64)
    b.Allreduce(xi, yi)
    xi.dtype, yi.dtype = np.float64, np.float64
    xi[:], yi[:] = RANK + 1.0, 0.0
    _expect(b, lambda: b.Allreduce(xi, yi), hit=False)
    assert np.array_equal(yi, np.full(4, total))
    # address: another array, and a view of the same memory at another offset
    base = np.zeros(8)
    _expect(b, lambda: b.Allreduce(x, base[:4]), hit=False)
    _expect(b, lambda: b.Allreduce(x, base[4:]), hit=False)
    assert np.array_equal(base, np.full(8, total))
    # writeable flag: a read-only output is refused, every time
    y.flags.writeable = False
    for _ in range(2):
        with pytest.raises(BufferError, match="read-only"):
            b.Allreduce(x, y)
    y.flags.writeable = True
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    # counts
    _expect(b, lambda: b.Allreduce([x, 3, MPI.DOUBLE], [y, 3, MPI.DOUBLE]), hit=False)
    _expect(b, lambda: b.Allreduce([x, 3, MPI.DOUBLE], [y, 3, MPI.DOUBLE]), hit=True)
    _expect(b, lambda: b.Allreduce([x, 2, MPI.DOUBLE], [y, 2, MPI.DOUBLE]), hit=False)
    # datatype
    xb, yb = np.ones(8, dtype=np.uint8), np.zeros(8, dtype=np.uint8)
    _expect(b, lambda: b.Allreduce([xb, MPI.UINT8_T], [yb, MPI.UINT8_T]), hit=False)
    _expect(b, lambda: b.Allreduce([xb, MPI.BYTE], [yb, MPI.BYTE], MPI.BOR), hit=False)
    # op
    _expect(b, lambda: b.Allreduce(x, y, MPI.MAX), hit=False)
    assert np.array_equal(y, np.full(4, float(P)))
    _expect(b, lambda: b.Allreduce(x, y, MPI.MAX), hit=True)
    # in-place
    y[:] = RANK + 1.0
    _expect(b, lambda: b.Allreduce(MPI.IN_PLACE, y), hit=False)
    assert np.array_equal(y, np.full(4, total))
    # root
    z = np.full(3, float(RANK))
    _expect(b, lambda: b.Bcast(z, root=0), hit=False)
    assert np.array_equal(z, np.zeros(3))
    z[:] = RANK
    _expect(b, lambda: b.Bcast(z, root=P - 1), hit=P == 1)  # at P = 1 the same root
    assert np.array_equal(z, np.full(3, P - 1.0))
    z[:] = RANK
    _expect(b, lambda: b.Bcast(z, root=0), hit=True)
    assert np.array_equal(z, np.zeros(3))
    # blocking vs non-blocking
    _expect(b, lambda: b.Ibcast(z, root=0).Wait(), hit=False)
    _expect(b, lambda: b.Ibcast(z, root=0).Wait(), hit=True)


@pytest.mark.mpi
def test_algorithm_is_in_the_key() -> None:
    b = backend("p2p")
    x, y = np.full(5, RANK + 1.0), np.zeros(5)
    b.Allreduce(x, y, algorithm="ring")
    _expect(b, lambda: b.Allreduce(x, y, algorithm="ring"), hit=True)
    _expect(b, lambda: b.Allreduce(x, y, algorithm="recursive_doubling"), hit=False)
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    _expect(b, lambda: b.Allreduce(x, y, algorithm="auto"), hit=False)
    assert np.array_equal(y, np.full(5, float(sum(range(1, P + 1)))))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_bad_input_raises_every_time_before_any_message(kind: str) -> None:
    """A refused call is never cached; the good call's entry never excuses a bad one."""
    b = backend(kind)
    x, y = np.ones(4), np.zeros(4)
    b.Allreduce(x, y)
    b.Allreduce(x, y)
    for _ in range(3):
        with pytest.raises(ValueError, match="overlap"):
            b.Allreduce(x, x)
        with pytest.raises(ValueError, match="root"):
            b.Bcast(x, root=P)
        with pytest.raises(TypeError, match="root"):
            b.Bcast(x, root="0")
        with pytest.raises(ValueError, match="elements"):
            b.Allreduce(x, np.zeros(3))
        with pytest.raises(TypeError, match="op"):
            b.Allreduce([x, MPI.DOUBLE], [y, MPI.DOUBLE], MPI.BAND)
        with pytest.raises(TypeError, match="algorithm"):
            b.Allreduce(x, y, algorithm=3)
    if kind == "native":
        with pytest.raises(ValueError, match="native backend"):
            b.Allreduce(x, y, algorithm="ring")
        with pytest.raises(ValueError, match="native backend"):
            b.Allreduce(x, y, algorithm="ring")
    WORLD.Barrier()  # every rank raised on its own: nobody sent anything
    b.Allreduce(x, y)
    assert np.array_equal(y, np.full(4, float(P)))


_REPEATED = [pytest.param(coll, impl, id=f"{coll}-{impl.label}")
             for coll in NAMES if coll != "barrier" for impl in runners.implementations(coll)]


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl"), _REPEATED)
def test_repeated_calls_on_the_same_buffers(coll: str, impl: runners.Impl) -> None:
    """A blocking call made 3 times on the same buffers (a miss, then hits: on p2p the
    generator, then the compiled plan twice), other contents before the last: the oracle's
    result, exactly."""
    run = runners.Run(coll, impl, mode="repeated:3")
    for case in _iform_cases(coll, run.p):
        run.run_case(case)
    run.finish()


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl"), _REPEATED)
def test_repeated_iforms_on_the_same_buffers(coll: str, impl: runners.Impl) -> None:
    """The I-form made 3 times on the same buffers (on p2p the generator, then the compiled
    plan replayed twice, completed by a Test loop and by Wait), other contents before the
    last: the oracle's result, exactly."""
    run = runners.Run(coll, impl, mode="irepeated:3")
    for case in _iform_cases(coll, run.p):
        run.run_case(case)
    run.finish()


@pytest.mark.mpi
def test_iforms_outstanding_together() -> None:
    """Cached I-forms of one key outstanding together (two Ibarriers, then two Iallreduces
    on other outputs beside them) replay or start their generator, each on its own tag, and
    complete in any order."""
    b = backend("p2p")
    x = np.full(3, RANK + 1.0)
    outs = [np.zeros(3), np.zeros(3)]
    for _ in range(2):  # cached, then compiled
        b.Ibarrier().Wait()
        for o in outs:
            b.Iallreduce(x, o).Wait()
    for order in (0, 1):
        for o in outs:
            o[:] = 0.0
        reqs = [b.Ibarrier(), b.Ibarrier()] + [b.Iallreduce(x, o) for o in outs]
        reqs += [b.Ibarrier()]
        reqs = reqs[::-1] if order else reqs
        for r in reqs:
            r.Wait()
        for o in outs:
            assert np.array_equal(o, np.full(3, float(sum(range(1, P + 1)))))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_large_calls_are_kept_within_the_pinned_bytes(kind: str) -> None:
    """An entry keeps its buffers alive: the entries hold at most PINNED_BYTES of buffers
    together (the oldest go first), and a call whose buffers alone hold more is parsed every
    time."""
    from mpicoll.backends.frontdoor import PINNED_BYTES

    b = backend(kind)
    quarter = PINNED_BYTES // 4 // 8  # elements: a call of x and y holds half the bytes
    xs = [np.full(quarter, 1.0 + k) for k in range(3)]
    ys = [np.zeros(quarter) for _ in range(3)]
    for k in range(3):
        _expect(b, lambda k=k: b.Allreduce(xs[k], ys[k]), hit=False)
        _expect(b, lambda k=k: b.Allreduce(xs[k], ys[k]), hit=True)
        assert ys[k][-1] == P * (1.0 + k)
        assert b.front_door.pinned <= PINNED_BYTES
    # the first call went to make room for the third
    _expect(b, lambda: b.Allreduce(xs[0], ys[0]), hit=False)
    assert b.front_door.pinned <= PINNED_BYTES
    n = PINNED_BYTES // 8 // 2 + 1
    x, y = np.ones(n), np.zeros(n)
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    assert y[-1] == P
    b.front_door.clear()
    assert b.front_door.pinned == 0


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["recursive_doubling", "ring", "rabenseifner"])
def test_blocking_calls_replay_a_compiled_plan(algorithm: str) -> None:
    """From its second run a cached blocking p2p call replays its compiled plan (no
    generator): the same result as the first run for new contents every time, the same
    messages, bytes and rounds counted per run, and on its own fresh tag each run."""
    b = backend("p2p")
    n = 3 * P + 1  # not divisible by P
    x, y = np.zeros(n), np.zeros(n)
    per_run = []
    for run in range(4):
        x[:] = np.arange(n) * (RANK + 1) + run
        before = b.traffic.as_dict()
        tag = b._engine.tag
        b.Allreduce(x, y, algorithm=algorithm)
        assert b._engine.tag != tag  # a fresh tag each call
        after = b.traffic.as_dict()
        per_run.append({k: after[k] - before[k] for k in after})
        expect = np.arange(n) * (P * (P + 1) // 2) + P * run
        assert np.array_equal(y, expect), (run, y, expect)
    assert per_run[1:] == per_run[:1] * 3
    runners_ = [run for _, run, _ in b.front_door.entries.values()
                if getattr(run, "algorithm", None) is not None
                and run.algorithm.name == algorithm and run.call.count == n]
    assert runners_
    assert all(r._fast is not None for r in runners_)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_counts_arrays_are_keyed_by_their_values(kind: str) -> None:
    """Displacements given as a numpy array and refilled between two calls (the same array
    object, every other argument the same): the second call uses the new values."""
    b = backend(kind)
    counts = np.full(P, 2, dtype=np.int64)
    displs = 2 * np.arange(P, dtype=np.int64)
    recv = np.zeros(2 * P)
    mine = np.full(2, RANK + 1.0)
    for order in (np.arange(P), np.arange(P)[::-1]):
        displs[:] = 2 * order
        recv[:] = 0
        b.Allgatherv(mine, [recv, (counts, displs), MPI.DOUBLE])
        expect = np.zeros(2 * P)
        for r in range(P):
            expect[2 * order[r]: 2 * order[r] + 2] = r + 1.0
        assert np.array_equal(recv, expect), (order, recv)


def _sum_op(a: Any, b: Any, t: MPI.Datatype) -> None:
    """A user-defined SUM on doubles (for the last-call test's user op)."""
    x = np.frombuffer(memoryview(a), dtype=np.float64)
    y = np.frombuffer(memoryview(b), dtype=np.float64)
    y += x


@pytest.mark.mpi
@pytest.mark.filterwarnings("ignore:Setting the strides:DeprecationWarning")
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_the_last_call_sees_its_own_objects_change(kind: str) -> None:
    """The last call of a collective is run again without a key when every argument is the
    same object (mpicoll.backends.frontdoor): each thing that can change on those very
    objects, in place, between two calls makes the next call miss (or be refused, at every
    call), and changing it back makes it hit again; alternating calls hit through the key."""
    b = backend(kind)
    total = float(sum(range(1, P + 1)))
    base = np.zeros(8)
    x, y = np.full(4, RANK + 1.0), base[:4]
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    # shape, in place (to a shape with the same flags: only the shape tells)
    x.shape, y.shape = (1, 4), (1, 4)
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    assert np.array_equal(y, np.full((1, 4), total))
    x.shape, y.shape = (4,), (4,)
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    # dtype, in place (the same bytes as int64)
    x.dtype, y.dtype = np.int64, np.int64
    x[:] = RANK + 1
    _expect(b, lambda: b.Allreduce(x, y), hit=False)
    assert y.dtype == np.int64
    assert np.array_equal(y, np.full(4, int(total)))
    x.dtype, y.dtype = np.float64, np.float64
    x[:] = RANK + 1.0
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    assert np.array_equal(y, np.full(4, total))
    # writeable flag and strides (no longer contiguous), in place: refused at every call
    y.flags.writeable = False
    for _ in range(2):
        with pytest.raises(BufferError, match="read-only"):
            b.Allreduce(x, y)
    y.flags.writeable = True
    y.strides = (16,)
    for _ in range(2):
        with pytest.raises(BufferError, match="not contiguous"):
            b.Allreduce(x, y)
    y.strides = (8,)
    y[:] = 0.0
    _expect(b, lambda: b.Allreduce(x, y), hit=True)
    assert np.array_equal(y, np.full(4, total))
    # a user-defined op, freed: refused at every call (its handle changed)
    op = MPI.Op.Create(_sum_op, commute=True)
    _expect(b, lambda: b.Allreduce(x, y, op), hit=False)
    _expect(b, lambda: b.Allreduce(x, y, op), hit=True)
    assert np.array_equal(y, np.full(4, total))
    op.Free()
    # native raises what plain mpi4py raises on the same call (MPI's "Null MPI_Op")
    refused: Any = (TypeError, ValueError) if kind == "p2p" else MPI.Exception
    # (MPICH: "Null MPI_Op"; Open MPI: "MPI_ERR_OP: invalid reduce operation")
    said = "op" if kind == "p2p" else "MPI_Op|MPI_ERR_OP"
    if kind == "native":
        with pytest.raises(refused, match=said):
            WORLD.Allreduce(x, y, op)
    for _ in range(2):
        with pytest.raises(refused, match=said):
            b.Allreduce(x, y, op)
    # two calls alternating: each is found by its key, then is the last call
    z = np.zeros(4)
    _expect(b, lambda: b.Allreduce(x, z), hit=False)
    for out in (y, z, y, z):
        out[:] = 0.0
        _expect(b, lambda out=out: b.Allreduce(x, out), hit=True)
        assert np.array_equal(out, np.full(4, total))
    WORLD.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_a_root_given_as_a_0d_array_is_read_every_call(kind: str) -> None:
    """A 0-d array refilled between calls (the same object) is a new root each time, as on
    plain mpi4py with the same inputs."""
    b = backend(kind)
    root = np.array(0)
    x, plain = np.zeros(4), np.zeros(4)
    for r in [*range(P), 0]:
        root[()] = r
        x[:] = plain[:] = RANK
        b.Bcast(x, root)
        WORLD.Bcast(plain, root)
        assert np.array_equal(x, plain), (r, x, plain)
        assert np.array_equal(x, np.full(4, float(r))), (r, x)
    root[()] = P
    with pytest.raises(ValueError, match="root"):
        b.Bcast(x, root)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_views_pin_the_arrays_they_view(kind: str) -> None:
    """An entry keeps a view's whole array alive: the pinned bytes count it."""
    from mpicoll.backends.frontdoor import PINNED_BYTES

    b = backend(kind)
    b.front_door.clear()
    base = np.ones(PINNED_BYTES // 8 // 4)  # a quarter of the budget
    out = np.zeros(PINNED_BYTES // 8 // 4)
    b.Allreduce(base[:10], out[:10])
    assert b.front_door.pinned == (0 if kind == "native" else base.nbytes + out.nbytes)
    assert out[9] == P
    b.front_door.clear()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_non_native_byte_order_is_refused_as_mpi4py_does(kind: str) -> None:
    b = backend(kind)
    for n in (4, 100_000):
        x, y = np.full(n, 255, ">i4"), np.zeros(n, ">i4")
        with pytest.raises(BufferError, match="byte order"):
            WORLD.Allreduce(x, y)  # plain mpi4py refuses it before any message
        with pytest.raises(BufferError, match="byte order"):
            b.Allreduce(x, y)
    WORLD.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["recursive_doubling", "ring", "rabenseifner"])
def test_reductions_raise_no_floating_point_error(algorithm: str) -> None:
    """Overflow and NaN in a large reduction (numpy's loop on p2p) give inf and NaN as
    MPI's do, with numpy set to raise: no exception, no warning."""
    import warnings

    b = backend("p2p")
    n = (1 << 19) // 4 + 7  # past UFUNC_BYTES in float32
    x = np.full(n, 3e38, np.float32)
    x[::3] = np.nan
    y, want = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            b.Allreduce(x, y, algorithm=algorithm)
            backend("native").Allreduce(x, want)
    assert y.tobytes() == want.tobytes()
