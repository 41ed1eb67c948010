"""The front door caches every buffer kind real programs pass, never a stale parse.

For each kind the cache keys (a view made anew of the same memory, ``bytearray``,
``array.array``, ``mmap``, ``memoryview``, a list spec built anew, a 0-d array inside a list
spec), a contents-only change hits and gives plain mpi4py's result, and each change that could
make the cached parse wrong misses or is refused by Python while the entry holds an export
(a ``bytearray``/``array.array`` resized, a ``memoryview`` released); a closed ``mmap``
raises what plain mpi4py raises.  The native backend hands every call to mpi4py without the
cache (its results for the same buffer kinds are compared with plain mpi4py's in
``test_native.py``), so the cache's tests run on p2p.  Zero-size calls (every count 0 on
every rank) give plain mpi4py's result and send nothing.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_buffer_kinds.py`` (P = 1..5).
"""

from __future__ import annotations

import array
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _runners import backend
from mpi4py import MPI

from mpicoll.backends import base as base_module
from mpicoll.backends.frontdoor import key_of

WORLD = MPI.COMM_WORLD
P, RANK = WORLD.size, WORLD.rank
TOTAL = float(sum(range(1, P + 1)))
MPICH = "MPICH" in MPI.Get_library_version()


def _expect(b: Any, call: Callable[[], Any], hit: bool) -> None:
    h, m = b.front_door.hits, b.front_door.misses
    call()
    got = (b.front_door.hits - h, b.front_door.misses - m)
    assert got == ((1, 0) if hit else (0, 1)), ("hit" if hit else "miss", got)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
def test_a_view_made_anew_of_the_same_memory_hits(kind: str) -> None:
    b = backend(kind)
    big, out = np.zeros(16), np.zeros(16)
    for n, hit in ((3, False), (3, True), (5, False)):
        big[:] = RANK + 1.0 + n
        _expect(b, lambda n=n: b.Allreduce(big[:n], out[:n]), hit=hit)
        assert np.array_equal(out[:n], np.full(n, TOTAL + P * n))
    big[:] = RANK + 1.0
    out[:] = 0
    _expect(b, lambda: b.Allreduce(big[:3], out[:3]), hit=True)  # contents only
    assert np.array_equal(out[:3], np.full(3, TOTAL))
    _expect(b, lambda: b.Allreduce(big[1:4], out[:3]), hit=False)  # another offset
    _expect(b, lambda: b.Allreduce(big[:3], out[1:4]), hit=False)
    other = np.full(16, RANK + 1.0)
    _expect(b, lambda: b.Allreduce(other[:3], out[:3]), hit=False)  # another base
    for _ in range(2):  # other strides: not contiguous, refused at every call
        with pytest.raises(BufferError, match="contiguous"):
            b.Allreduce(big[:6:2], out[:3])
    # a view of a view, and a reshaped view of the same memory: their own keys
    _expect(b, lambda: b.Allreduce(big[:4][:3], out[:3]), hit=True)
    _expect(b, lambda: b.Allreduce(big[:4].reshape(2, 2), out[:4].reshape(2, 2)), hit=False)
    assert np.array_equal(out[:4], np.full(4, TOTAL))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
def test_bytearray_and_array_are_cached_and_held(kind: str) -> None:
    b = backend(kind)
    buf = bytearray(8)
    plain = bytearray(8)
    for k in range(3):
        buf[:] = plain[:] = bytes([RANK + k]) * 8
        _expect(b, lambda: b.Bcast(buf, root=P - 1), hit=k > 0)
        WORLD.Bcast(plain, root=P - 1)
        assert buf == plain
    with pytest.raises(BufferError):  # Python refuses while the cache holds an export
        buf.extend(b"xx")
    arr, out, want = array.array("d", [RANK + 1.0] * 3), array.array("d", [0.0] * 3), \
        array.array("d", [0.0] * 3)
    for k in range(3):
        arr[0] = RANK + k
        _expect(b, lambda: b.Allreduce(arr, out), hit=k > 0)
        WORLD.Allreduce(arr, want)
        assert out == want
    with pytest.raises(BufferError):
        out.append(1.0)
    # as a list spec built anew at each call
    _expect(b, lambda: b.Allreduce([arr, MPI.DOUBLE], [out, MPI.DOUBLE]), hit=False)
    _expect(b, lambda: b.Allreduce([arr, MPI.DOUBLE], [out, MPI.DOUBLE]), hit=True)
    _expect(b, lambda: b.Allreduce([arr, 2, MPI.DOUBLE], [out, 2, MPI.DOUBLE]), hit=False)
    b.front_door.clear()  # the exports go with the entries
    buf.extend(b"xx")
    out.append(1.0)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
def test_memoryview_is_cached_and_held(kind: str) -> None:
    b = backend(kind)
    x, y = np.full(4, RANK + 1.0), np.zeros(4)
    mx, my = memoryview(x), memoryview(y)
    for k in range(2):
        x[0] = RANK + 1.0 + k
        _expect(b, lambda: b.Allreduce(mx, my), hit=k > 0)
        assert y[0] == TOTAL + P * k
        assert y[1] == TOTAL
    with pytest.raises(BufferError):
        my.release()
    b.front_door.clear()
    mx.release()
    for _ in range(2):  # released: as mpi4py, at every call
        with pytest.raises(ValueError, match="released"):
            WORLD.Allreduce(mx, my)
        with pytest.raises(ValueError, match="released"):
            b.Allreduce(mx, my)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
@pytest.mark.parametrize("form", ["blocking", "nonblocking"])
def test_mmap_specs_as_mpi4pys_demos_pass_them(kind: str, form: str) -> None:
    b = backend(kind)
    m, out = mmap.mmap(-1, 64), mmap.mmap(-1, 64)
    plain = bytearray(8)
    spec, ospec = [m, 8, MPI.BYTE], [out, 8, MPI.BYTE]

    def call(s: Any = spec, o: Any = ospec) -> None:
        if form == "blocking":
            b.Allreduce(s, o, MPI.BOR)
        else:
            b.Iallreduce(s, o, MPI.BOR).Wait()

    for k in range(3):
        m[:8] = bytes([1 << ((RANK + k) % 8)]) * 8
        _expect(b, call, hit=k > 0)
        WORLD.Allreduce([m, 8, MPI.BYTE], [plain, 8, MPI.BYTE], MPI.BOR)
        assert out[:8] == plain
    # a list built anew with equal items hits; one whose buffer was replaced misses
    _expect(b, lambda: call([m, 8, MPI.BYTE], [out, 8, MPI.BYTE]), hit=True)
    other = mmap.mmap(-1, 64)
    spec[0] = other
    _expect(b, call, hit=False)
    spec[0] = m
    _expect(b, call, hit=True)
    # the program may close an mmap the cache knows (it holds no export of it): the next
    # call raises what plain mpi4py raises, at every call
    if form == "nonblocking":  # an I-form's request holds it until complete, as mpi4py's
        req = b.Iallreduce(spec, ospec, MPI.BOR)
        if kind == "p2p":
            with pytest.raises(BufferError):
                m.close()
        req.Wait()
    m.close()
    for _ in range(2):
        with pytest.raises(ValueError, match="closed"):
            WORLD.Allreduce(spec, ospec, MPI.BOR)
        with pytest.raises(ValueError, match="closed"):
            b.Allreduce(spec, ospec, MPI.BOR)
    WORLD.Barrier()
    out.close()
    other.close()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
def test_a_list_reused_whose_item_was_replaced_misses(kind: str) -> None:
    b = backend(kind)
    x, y, z = np.full(4, RANK + 1.0), np.zeros(4), np.zeros(4)
    sx, sy = [x, MPI.DOUBLE], [y, MPI.DOUBLE]
    _expect(b, lambda: b.Allreduce(sx, sy), hit=False)
    _expect(b, lambda: b.Allreduce(sx, sy), hit=True)
    assert np.array_equal(y, np.full(4, TOTAL))
    sy[0] = z  # another buffer
    _expect(b, lambda: b.Allreduce(sx, sy), hit=False)
    assert np.array_equal(z, np.full(4, TOTAL))
    sx[:] = [x, 2, MPI.DOUBLE]  # a count, the list's length
    sy[:] = [z, 2, MPI.DOUBLE]
    z[:] = 0
    _expect(b, lambda: b.Allreduce(sx, sy), hit=False)
    assert np.array_equal(z, [TOTAL, TOTAL, 0, 0])
    sx[2] = sy[2] = MPI.FLOAT  # a datatype: refused (8 bytes are 2 floats, not 2 doubles)
    _expect(b, lambda: b.Allreduce(sx, sy), hit=False)
    sx[2] = sy[2] = MPI.DOUBLE
    _expect(b, lambda: b.Allreduce(sx, sy), hit=True)
    # built anew at every call: the same items hit, another item misses
    _expect(b, lambda: b.Allreduce([x, 2, MPI.DOUBLE], [z, 2, MPI.DOUBLE]), hit=True)
    y[:] = 0
    _expect(b, lambda: b.Allreduce([x, 2, MPI.DOUBLE], [y, 2, MPI.DOUBLE]), hit=False)
    _expect(b, lambda: b.Allreduce([x, 3, MPI.DOUBLE], [y, 3, MPI.DOUBLE]), hit=False)
    assert np.array_equal(y, [TOTAL] * 3 + [0])


@pytest.mark.mpi
def test_views_and_mmaps_as_the_last_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A view made anew of the same memory, bare or in a list built anew, and an mmap spec,
    are the last call of their collective (no key built); what would make the key another
    one misses there too: another offset, base, dtype or writeable flag, an mmap closed."""
    b = backend("p2p")
    big, out = np.zeros(8), np.zeros(8)
    lasts = b.front_door.last[False]
    keys = [0]

    def counted(*a: Any) -> Any:
        keys[0] += 1
        return key_of(*a)

    monkeypatch.setattr(base_module, "key_of", counted)

    def last_hit(call: Callable[[], Any]) -> None:  # a hit that built no key
        k = keys[0]
        _expect(b, call, hit=True)
        assert keys[0] == k, "the last call's path built a key"

    def call(x: Any, y: Any) -> None:
        b.Allreduce(x, y)

    for k in range(3):
        big[:] = RANK + 1.0 + k
        _expect(b, lambda: call(big[:4], out[:4]), hit=k > 0)
        assert np.array_equal(out[:4], np.full(4, TOTAL + P * k))
    last_hit(lambda: call(big[:4], out[:4]))
    _expect(b, lambda: call(big[1:5], out[:4]), hit=False)  # another offset
    _expect(b, lambda: call(np.zeros(8)[:4], out[:4]), hit=False)  # another base
    _expect(b, lambda: call(big[:4], out[:4]), hit=True)
    big.flags.writeable = False  # its views now read-only: another key
    _expect(b, lambda: call(big[:4], out[:4]), hit=False)
    big.flags.writeable = True
    _expect(b, lambda: call(big[:4], out[:4]), hit=True)
    ints = np.zeros(8, dtype=np.int64)
    _expect(b, lambda: call(ints.view(np.float64)[:4], out[:4]), hit=False)  # another base
    # in a list spec built anew
    spec = lambda: call([big[:4], MPI.DOUBLE], [out[:4], MPI.DOUBLE])  # noqa: E731
    for k in range(3):
        big[:] = RANK + 2.0
        _expect(b, spec, hit=k > 0)
        assert np.array_equal(out[:4], np.full(4, TOTAL + P))
    last_hit(spec)
    _expect(b, lambda: call([big[2:6], MPI.DOUBLE], [out[:4], MPI.DOUBLE]), hit=False)
    # an mmap spec reused (mpi4py's OSU demos)
    m, o = mmap.mmap(-1, 16), mmap.mmap(-1, 16)
    ms, os_ = [m, 8, MPI.BYTE], [o, 8, MPI.BYTE]
    plain = bytearray(8)
    for k in range(3):
        m[:8] = bytes([1 << ((RANK + k) % 8)]) * 8
        _expect(b, lambda: b.Allreduce(ms, os_, MPI.BOR), hit=k > 0)
        WORLD.Allreduce([m, 8, MPI.BYTE], [plain, 8, MPI.BYTE], MPI.BOR)
        assert o[:8] == plain
    assert lasts["allreduce"].args[0] is ms, "the mmap spec is a last call"
    last_hit(lambda: b.Allreduce(ms, os_, MPI.BOR))
    m.close()
    for _ in range(2):
        with pytest.raises(ValueError, match="closed"):
            b.Allreduce(ms, os_, MPI.BOR)
    WORLD.Barrier()
    o.close()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_counts_changed_in_place_in_a_nested_sequence(kind: str) -> None:
    """``[out, (counts, displs), MPI.DOUBLE]`` reused, its displacements list reordered in
    place between calls: the next call uses the new values, as plain mpi4py."""
    b = backend(kind)
    counts, displs = [1] * P, list(range(P))
    out, plain = np.zeros(P), np.zeros(P)
    spec = [out, (counts, displs), MPI.DOUBLE]
    mine = np.full(1, RANK + 1.0)
    for k in range(3):
        displs[:] = [(r + k) % P for r in range(P)]
        b.Allgatherv(mine, spec)
        WORLD.Allgatherv(mine, [plain, (counts, displs), MPI.DOUBLE])
        assert np.array_equal(out, plain), (k, out, plain)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["p2p"])  # native bypasses the cache: test_native.py
def test_a_0d_array_in_a_list_spec_is_a_cached_buffer(kind: str) -> None:
    """mpi4py's compute-pi demo: ``Bcast([n, MPI.INT], root=0)`` with n a 0-d array."""
    b = backend(kind)
    n, plain = np.array(0, dtype=np.intc), np.array(0, dtype=np.intc)
    for k in range(3):
        n[()] = plain[()] = 100 + k if RANK == 0 else -1
        _expect(b, lambda: b.Bcast([n, MPI.INT], root=0), hit=k > 0)
        WORLD.Bcast([plain, MPI.INT], root=0)
        assert n == plain == 100 + k


# ------------------------------------------------------------------------------------------
# zero-size calls

def _zero_calls(p: int) -> dict[str, Callable[[Any, str], Any]]:
    """One call per collective whose every count is 0 on every rank: ``fn(comm, form)``."""
    e = np.empty(0)

    def f(name: str, *args: Any) -> Callable[[Any, str], Any]:
        def call(c: Any, form: str) -> Any:
            if form == "blocking":
                return getattr(c, name)(*args)
            if form == "nonblocking":
                return getattr(c, "I" + name.lower())(*args).Wait()
            req = getattr(c, name + "_init")(*args)
            for _ in range(2):
                req.Start()
                req.Wait()
            req.Free()
            return None
        return call

    zeros = [0] * p
    return {
        "bcast": f("Bcast", e, p - 1), "scatter": f("Scatter", e, np.empty(0), 0),
        "gather": f("Gather", e, np.empty(0), p - 1), "reduce": f("Reduce", e, np.empty(0)),
        "allreduce": f("Allreduce", e, np.empty(0)),
        "reduce_scatter_block": f("Reduce_scatter_block", e, np.empty(0)),
        "reduce_scatter": f("Reduce_scatter", e, np.empty(0), zeros),
        "allgather": f("Allgather", e, np.empty(0)),
        "allgatherv": f("Allgatherv", e, [np.empty(0), (zeros, zeros), MPI.DOUBLE]),
        "alltoall": f("Alltoall", e, np.empty(0)), "scan": f("Scan", e, np.empty(0)),
        "exscan": f("Exscan", e, np.empty(0)),
    }


@pytest.mark.mpi
@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
@pytest.mark.parametrize("coll", sorted(_zero_calls(1)))
def test_zero_size_calls_send_nothing(coll: str, form: str) -> None:
    b = backend("p2p")
    call = _zero_calls(P)[coll]
    call(WORLD, form)  # plain mpi4py completes it
    for _ in range(3):  # the miss, then the cached call (and its compiled plan)
        b.traffic.reset()
        call(b, form)
        assert b.traffic.as_dict() == dict.fromkeys(b.traffic.as_dict(), 0), coll
    WORLD.Barrier()


@pytest.mark.mpi
def test_zero_only_here_is_not_zero_size() -> None:
    """A v-collective where this rank's counts are 0 and others' are not still moves the
    others' data (the decision reads no rank's own counts); Barrier always synchronises."""
    b = backend("p2p")
    counts = [0] + [2] * (P - 1)
    displs = [0, *np.cumsum(counts[:-1]).tolist()]
    mine = np.full(counts[RANK], RANK + 1.0)
    for c in (b, WORLD):
        out = np.zeros(sum(counts))
        c.Gatherv(mine, [out, (counts, displs), MPI.DOUBLE] if RANK == 0 else None, 0)
        if RANK == 0:
            assert np.array_equal(out, np.repeat(np.arange(2.0, P + 1), 2))
    b.traffic.reset()
    b.Barrier()
    assert P == 1 or b.traffic.messages_sent > 0


# ------------------------------------------------------------------------------------------
# MPI's errors from p2p, said readably


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["blocking", "nonblocking"])
def test_a_truncation_says_what_mpi_said(form: str) -> None:
    """Allreduce of 2 float64 on rank 0 and 2 float32 on rank 1 (ranks 0 and 1 of the
    world; the others wait): rank 1 receives 16 bytes into a buffer of 8, and raises MPI's
    ``MPI.ERR_TRUNCATE`` as an ``MPI.Exception`` saying so, at every call (the first run, the
    compiled replays); rank 0 completes, as on MPI; no rank hangs."""
    import mpicoll

    sub = WORLD.Split(0 if RANK < 2 else 1, RANK)
    if RANK < 2 and sub.size == 2:
        b = mpicoll.p2p(sub)
        dt = np.float64 if RANK == 0 else np.float32
        x, y = np.ones(2, dt), np.zeros(2, dt)
        for _ in range(3):
            raised: MPI.Exception | None = None
            try:
                if form == "blocking":
                    b.Allreduce(x, y, algorithm="recursive_doubling")
                else:
                    b.Iallreduce(x, y, algorithm="recursive_doubling").Wait()
            except MPI.Exception as exc:
                raised = exc
            assert (raised is not None) == (RANK == 1)
            if raised is not None:
                assert raised.Get_error_class() == MPI.ERR_TRUNCATE
                text = str(raised)
                assert "Allreduce" in text
                # MPICH's status gives both sizes and the peer; Open MPI's at most the
                # bytes received, and the peers a request may have failed on
                assert "message truncated" in text, text
                if MPICH:
                    assert "16 bytes into a buffer of 8" in text, text
                    assert "from rank 0" in text, text
        sub.Barrier()
        b.Free()
    sub.Free()
    WORLD.Barrier()


class _DLPack:
    """A producer with DLPack only, no buffer protocol (as a PyTorch CPU tensor): mpi4py 4
    takes it by ``__dlpack__`` after the buffer protocol."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw: Any) -> Any:
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


class _CudaArray:
    """A device buffer as the CUDA array interface describes one (here host memory: only
    the p2p backend's refusal is under test, no byte of it is read)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3}


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_a_dlpack_producer_is_a_buffer_as_in_mpi4py(kind: str) -> None:
    """Both backends take a DLPack-only object bare and in a list spec, blocking,
    non-blocking and persistent, and give plain mpi4py's results in its memory; read-only
    where written is mpi4py's BufferError."""
    b = backend(kind)
    n = 2 * P + 1
    x = np.arange(n, dtype=np.float64) + RANK
    cases: list[tuple[str, Callable[[Any, Any, Any], Any], np.ndarray]] = [
        ("Allreduce", lambda c, s, r: c.Allreduce(s, r), np.zeros(n)),
        ("Allreduce list", lambda c, s, r: c.Allreduce([s, MPI.DOUBLE], [r, n, MPI.DOUBLE]),
         np.zeros(n)),
        ("Bcast", lambda c, s, r: c.Bcast(r, root=P - 1), x.copy()),
        ("Allgather", lambda c, s, r: c.Allgather(s, r), np.zeros(n * P)),
        ("Alltoall", lambda c, s, r: c.Alltoall(s, r), np.zeros(P)),
        ("Scan", lambda c, s, r: c.Scan(s, r, op=MPI.MAX), np.zeros(n)),
        ("Iallreduce", lambda c, s, r: c.Iallreduce(s, r).Wait(), np.zeros(n)),
        ("Allreduce_init", lambda c, s, r: _started(c.Allreduce_init(s, r)), np.zeros(n)),
    ]
    for name, call, out in cases:
        send = x[:P] if name == "Alltoall" else x
        want = out.copy()
        call(WORLD, send.copy(), want)  # plain mpi4py on plain arrays
        got = out.copy()
        call(b, _DLPack(send.copy()), _DLPack(got))
        assert np.array_equal(got, want), name
    ro = np.zeros(n)
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        b.Allreduce(_DLPack(x), _DLPack(ro))
    with pytest.raises(BufferError):  # plain mpi4py refuses it alike
        WORLD.Allreduce(_DLPack(x), _DLPack(ro))


def _started(req: Any) -> None:
    req.Start()
    req.Wait()
    req.Free()


@pytest.mark.mpi
def test_a_device_buffer_is_refused_by_p2p_before_any_message() -> None:
    """p2p copies and reduces on the host: a ``__cuda_array_interface__`` buffer is a
    TypeError on every rank (all pass one), and the next call runs."""
    b = backend("p2p")
    x, y = np.ones(4), np.zeros(4)
    with pytest.raises(TypeError, match="device buffer"):
        b.Allreduce(_CudaArray(x), y)
    b.Allreduce(x, y)
    assert np.array_equal(y, np.full(4, float(P)))
