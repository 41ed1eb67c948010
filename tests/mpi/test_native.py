"""The native backend is plain mpi4py, plus ``algorithm=`` (issues 20 and 25).

Outside checked mode every native buffer method hands its arguments unchanged to the mpi4py
method of the user's communicator.  Here each test runs the same call on plain mpi4py
(``MPI.COMM_WORLD``) and on ``mpicoll.native(COMM_WORLD)``, with fresh copies of the same
inputs, and compares:

* every buffer kind real programs pass (a list spec built per call, ``bytearray``,
  ``array.array``, ``mmap``, a slice made per call, a 0-d array as ``[x, MPI.INT]``, zero
  counts), blocking, ``I...`` and ``..._init``: the same bytes in every buffer;
* a derived send type against a predefined receive type of the same type signature (and the
  reverse) through Scatter, Gather, Allgather and Alltoall, the issue's column type among
  them: the same bytes (mpicoll used to refuse these on the rank holding the derived type);
* ``Alltoallw`` with extent-0 and size-0 datatypes: the same bytes;
* bad input that plain mpi4py refuses on every rank: native raises on the same ranks an
  exception of the same type (``MPI.Exception``: the same error class), with mpicoll's message
  where its parser refuses the same arguments with an exception of that kind;
* ``algorithm=``: None and ``"native"`` run, another name is a ``ValueError`` and a non-str a
  ``TypeError``, before any message (no stray message afterwards);
* the front door's cache is not used outside checked mode (its counters stay at 0), and
  checked mode still agrees across ranks.

Also the threads of issue 20 item 9: three threads, each with its own native backend on its
own communicator, running the lower-case object reductions concurrently (mpi4py's first
object reduction on a communicator makes a duplicate of it with ``MPI_Comm_dup`` while holding
the GIL; the backend makes it at construction).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_native.py`` (P = 1..5).
"""

from __future__ import annotations

import array
import mmap
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
P, RANK = WORLD.size, WORLD.rank
_NATIVE: list[Any] = []


def native() -> Any:
    if not _NATIVE:
        _NATIVE.append(mpicoll.native(WORLD))
    return _NATIVE[0]


def _agree(problems: list[str], what: str) -> None:
    """Fail on every rank if any rank found a problem."""
    everyone = WORLD.allgather(problems)
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{what}:\n" + "\n".join(lines)


def _bytes(x: Any) -> bytes:
    return bytes(memoryview(x).cast("B"))


def _no_stray_message() -> list[str]:
    WORLD.Barrier()
    st = MPI.Status()
    if WORLD.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
        return [f"a stray message waits (source {st.source}, tag {st.tag})"]
    return []


# ---- every buffer kind, the same bytes as plain mpi4py ----------------------------------------

#: a call: make(rank, p) -> (buffers, call(comm, buffers)); ``call`` builds its specs anew at
#: every call, as real programs do, and runs on ``WORLD`` or on the native backend
Make = Callable[[int, int], tuple[list[Any], Callable[[Any, list[Any]], Any]]]


def _mm(n: int, fill: int) -> mmap.mmap:
    m = mmap.mmap(-1, max(n, 1))
    m.write(bytes([fill % 256]) * max(n, 1))
    return m


def _kinds() -> dict[str, Make]:
    d = MPI.DOUBLE
    return {
        "allreduce_list_spec_per_call": lambda r, p: (
            [np.arange(3.0) + r, np.zeros(3)],
            lambda c, b: c.Allreduce([b[0], d], [b[1], d])),
        "allreduce_list_with_count_per_call": lambda r, p: (
            [np.arange(5.0) + r, np.full(5, -1.0)],
            lambda c, b: c.Allreduce([b[0], 3, d], [b[1], 3, d], MPI.MAX)),
        "allreduce_mmap_bor": lambda r, p: (
            [_mm(8, r + 1), _mm(8, 0)],
            lambda c, b: c.Allreduce([b[0], 8, MPI.BYTE], [b[1], 8, MPI.BYTE], MPI.BOR)),
        "allreduce_array_array": lambda r, p: (
            [array.array("d", [r, 2.0 * r]), array.array("d", [0.0, 0.0])],
            lambda c, b: c.Allreduce(b[0], b[1])),
        "allreduce_slice_per_call": lambda r, p: (
            [np.arange(10.0) * (r + 1), np.zeros(10)],
            lambda c, b: c.Allreduce(b[0][:4], b[1][2:6])),
        "allreduce_zero_count": lambda r, p: (
            [np.zeros(0), np.zeros(0)], lambda c, b: c.Allreduce(b[0], b[1])),
        "allreduce_in_place_bytearray": lambda r, p: (
            [bytearray(np.full(2, r + 1, np.int32).tobytes())],
            lambda c, b: c.Allreduce(MPI.IN_PLACE, [b[0], MPI.INT])),
        "bcast_bytearray": lambda r, p: (
            [bytearray(bytes([r]) * 7)], lambda c, b: c.Bcast(b[0], root=p - 1)),
        "bcast_0d_as_int": lambda r, p: (
            [np.array(100 + r if r == 0 else -1, dtype=np.int64)],
            lambda c, b: c.Bcast([b[0], MPI.INT])),
        "bcast_mmap": lambda r, p: (
            [_mm(16, r + 3)], lambda c, b: c.Bcast([b[0], 16, MPI.BYTE], root=0)),
        "bcast_zero_count": lambda r, p: (
            [np.zeros(0)], lambda c, b: c.Bcast(b[0])),
        "gather_list_spec_per_call": lambda r, p: (
            [np.full(2, r + 0.5), np.zeros(2 * p)],
            lambda c, b: c.Gather([b[0], d], [b[1], d] if RANK == 0 else None)),
        "gather_mmap": lambda r, p: (
            [_mm(8, r + 1), _mm(8 * p, 0)],
            lambda c, b: c.Gather([b[0], 8, MPI.BYTE], [b[1], 8, MPI.BYTE], root=p // 2)),
        "scatter_array_array": lambda r, p: (
            [array.array("i", range(3 * p)), array.array("i", [0, 0, 0])],
            lambda c, b: c.Scatter(b[0], b[1])),
        "allgather_bytearray": lambda r, p: (
            [bytearray(bytes([r + 1]) * 3), bytearray(3 * p)],
            lambda c, b: c.Allgather(b[0], b[1])),
        "allgather_slice_per_call": lambda r, p: (
            [np.arange(6.0) + 10 * r, np.zeros(3 * p + 2)],
            lambda c, b: c.Allgather(b[0][1:4], b[1][:3 * p])),
        "alltoall_list_spec_per_call": lambda r, p: (
            [np.arange(2 * p, dtype=np.int32) + 100 * r, np.zeros(2 * p, np.int32)],
            lambda c, b: c.Alltoall([b[0], MPI.INT], [b[1], MPI.INT])),
        "alltoall_zero_count": lambda r, p: (
            [np.zeros(0), np.zeros(0)], lambda c, b: c.Alltoall(b[0], b[1])),
        "reduce_slice_per_call": lambda r, p: (
            [np.arange(8, dtype=np.int64) * (r + 1), np.zeros(8, np.int64)],
            lambda c, b: c.Reduce(b[0][::1][:5], b[1][:5], MPI.SUM, root=p - 1)),
        "scan_array_array": lambda r, p: (
            [array.array("l", [r + 1, 2]), array.array("l", [0, 0])],
            lambda c, b: c.Scan(b[0], b[1], MPI.PROD)),
        "iallreduce_list_spec_per_call": lambda r, p: (
            [np.arange(3.0) + r, np.zeros(3)],
            lambda c, b: c.Iallreduce([b[0], d], [b[1], d]).Wait()),
        "ibcast_bytearray": lambda r, p: (
            [bytearray(bytes([r + 5]) * 4)], lambda c, b: c.Ibcast(b[0], root=0).Wait()),
        "igather_zero_count": lambda r, p: (
            [np.zeros(0), np.zeros(0)], lambda c, b: c.Igather(b[0], b[1]).Wait()),
        "barrier": lambda r, p: ([], lambda c, b: c.Barrier()),
        "ibarrier": lambda r, p: ([], lambda c, b: c.Ibarrier().Wait()),
        "allreduce_init_mmap": lambda r, p: (
            [_mm(8, 2 * r + 1), _mm(8, 0)],
            lambda c, b: _persistent(c.Allreduce_init([b[0], 8, MPI.BYTE],
                                                      [b[1], 8, MPI.BYTE], MPI.BXOR))),
        "bcast_init_bytearray": lambda r, p: (
            [bytearray(bytes([r]) * 5)], lambda c, b: _persistent(c.Bcast_init(b[0], p - 1))),
        "alltoall_init_zero_count": lambda r, p: (
            [np.zeros(0), np.zeros(0)],
            lambda c, b: _persistent(c.Alltoall_init(b[0], b[1]))),
        "barrier_init": lambda r, p: ([], lambda c, b: _persistent(c.Barrier_init())),
    }


def _persistent(req: MPI.Prequest) -> None:
    """Start and complete a persistent request twice, then free it."""
    for _ in range(2):
        req.Start()
        req.Wait()
    req.Free()


_KINDS = _kinds()


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(_KINDS))
def test_every_buffer_kind_gives_plain_mpi4pys_bytes(name: str) -> None:
    make = _KINDS[name]
    theirs, call = make(RANK, P)
    mine, _ = make(RANK, P)
    problems: list[str] = []
    for _ in range(3):  # built per call, every time (specs, slices, views)
        call(WORLD, theirs)
        call(native(), mine)
        for i, (a, b) in enumerate(zip(theirs, mine, strict=True)):
            if _bytes(a) != _bytes(b):
                problems.append(f"buffer #{i}: native {_bytes(b)!r}, mpi4py {_bytes(a)!r}")
    assert native().front_door.hits == native().front_door.misses == 0
    _agree(problems, name)


# ---- derived send types against predefined receive types of the same signature --------------


def _types() -> dict[str, MPI.Datatype]:
    """Derived datatypes whose one element is 3 int64 (the signature of 3 ``MPI.INT64_T``)."""
    i64 = MPI.INT64_T
    return {
        "contiguous": i64.Create_contiguous(3).Commit(),
        "vector_resized": i64.Create_vector(3, 1, 2).Create_resized(0, 6 * 8).Commit(),
        "indexed": i64.Create_indexed([1, 2], [0, 3]).Create_resized(0, 6 * 8).Commit(),
        "subarray": i64.Create_subarray([6], [3], [1]).Commit(),
        "struct": MPI.Datatype.Create_struct([3], [0], [i64]).Commit(),
    }


_TYPES = _types()


def _derived_cases(t: MPI.Datatype) -> dict[str, Make]:
    """Each collective with the derived type ``t`` (6 int64 slots per element, 3 used) on one
    side and 3 predefined ``MPI.INT64_T`` per element on the other."""
    ext = t.Get_extent()[1] // 8  # int64 slots per element
    i64 = MPI.INT64_T

    def arr(n: int, r: int) -> np.ndarray:
        return np.arange(n, dtype=np.int64) + 1000 * (r + 1)

    return {
        "scatter_derived_send": lambda r, p: (
            [arr(ext * p, r), np.full(3, -1, np.int64)],
            lambda c, b: c.Scatter([b[0], 1, t] if RANK == 0 else None, [b[1], 3, i64])),
        "scatter_derived_recv": lambda r, p: (
            [arr(3 * p, r), np.full(ext, -1, np.int64)],
            lambda c, b: c.Scatter([b[0], 3, i64], [b[1], 1, t], root=p - 1)),
        "gather_derived_send": lambda r, p: (
            [arr(ext, r), np.full(3 * p, -1, np.int64)],
            lambda c, b: c.Gather([b[0], 1, t], [b[1], 3, i64], root=p - 1)),
        "gather_derived_recv": lambda r, p: (
            [arr(3, r), np.full(ext * p, -1, np.int64)],
            lambda c, b: c.Gather([b[0], 3, i64], [b[1], 1, t])),
        "allgather_derived_send": lambda r, p: (
            [arr(ext, r), np.full(3 * p, -1, np.int64)],
            lambda c, b: c.Allgather([b[0], 1, t], [b[1], 3, i64])),
        "allgather_derived_recv": lambda r, p: (
            [arr(3, r), np.full(ext * p, -1, np.int64)],
            lambda c, b: c.Allgather([b[0], 3, i64], [b[1], 1, t])),
        "alltoall_derived_send": lambda r, p: (
            [arr(ext * p, r), np.full(3 * p, -1, np.int64)],
            lambda c, b: c.Alltoall([b[0], 1, t], [b[1], 3, i64])),
        "alltoall_derived_recv": lambda r, p: (
            [arr(3 * p, r), np.full(ext * p, -1, np.int64)],
            lambda c, b: c.Alltoall([b[0], 3, i64], [b[1], 1, t])),
        "ialltoall_derived_send": lambda r, p: (
            [arr(ext * p, r), np.full(3 * p, -1, np.int64)],
            lambda c, b: c.Ialltoall([b[0], 1, t], [b[1], 3, i64]).Wait()),
        "allgather_init_derived_send": lambda r, p: (
            [arr(ext, r), np.full(3 * p, -1, np.int64)],
            lambda c, b: _persistent(c.Allgather_init([b[0], 1, t], [b[1], 3, i64]))),
    }


_DERIVED = [pytest.param(t, c, id=f"{c}-{t}") for t in _TYPES
            for c in _derived_cases(_TYPES[t])]


@pytest.mark.mpi
@pytest.mark.parametrize(("tname", "coll"), _DERIVED)
def test_derived_against_predefined_of_the_same_signature(tname: str, coll: str) -> None:
    make = _derived_cases(_TYPES[tname])[coll]
    theirs, call = make(RANK, P)
    mine, _ = make(RANK, P)
    call(WORLD, theirs)
    call(native(), mine)
    problems = [f"buffer #{i}: native {b.tolist()}, mpi4py {a.tolist()}"
                for i, (a, b) in enumerate(zip(theirs, mine, strict=True))
                if not np.array_equal(a, b)]
    _agree(problems, f"{coll} with {tname}")


@pytest.mark.mpi
def test_a_column_gathered_as_plain_doubles() -> None:
    """The issue's matrix code: a strided column type against 2 plain doubles, as mpi4py."""
    col = MPI.DOUBLE.Create_vector(2, 1, 2).Create_resized(0, 8).Commit()
    try:
        a = np.arange(4.0).reshape(2, 2) + 10 * RANK
        outs = [np.full(2 * P, -1.0), np.full(2 * P, -1.0)]
        WORLD.Allgather([a, 1, col], [outs[0], 2, MPI.DOUBLE])
        native().Allgather([a, 1, col], [outs[1], 2, MPI.DOUBLE])
        want = np.concatenate([[10.0 * r, 10.0 * r + 2] for r in range(P)])
        _agree([] if np.array_equal(outs[0], outs[1]) and np.array_equal(outs[1], want)
               else [f"native {outs[1]}, mpi4py {outs[0]}, expected {want}"], "column")
    finally:
        col.Free()


@pytest.mark.mpi
def test_alltoallw_with_extent_0_and_size_0_datatypes() -> None:
    """Blocks of an extent-0 type (count > 0) and of a size-0 type go to MPI: the same bytes
    as plain mpi4py (mpicoll refused the extent-0 blocks on the ranks sending them)."""
    zero_extent = MPI.INT32_T.Create_resized(0, 0).Commit()
    zero_size = MPI.INT32_T.Create_contiguous(0).Create_resized(0, 8).Commit()
    try:
        problems: list[str] = []
        for send_t in (zero_extent, zero_size, MPI.INT32_T):
            results = []
            for c in (WORLD, native()):
                sbuf = np.arange(4, dtype=np.int32) + 10 * RANK
                rbuf = np.full(4 * P, -1, np.int32)
                # to every peer: 1 element of send_t at byte 0; from every peer: 1 int32 (or
                # nothing when the sender's type has size 0), at its own slot
                n_recv = 0 if send_t is zero_size else 1
                c.Alltoallw([sbuf, ([1] * P, [0] * P), [send_t] * P],
                            [rbuf, ([n_recv] * P, [16 * j for j in range(P)]),
                             [MPI.INT32_T] * P])
                results.append(rbuf)
            if not np.array_equal(*results):
                problems.append(f"{send_t}: native {results[1]}, mpi4py {results[0]}")
        _agree(problems, "Alltoallw with extent-0 / size-0 types")
    finally:
        zero_extent.Free()
        zero_size.Free()


# ---- bad input: the same exception type on the same ranks as plain mpi4py -------------------


def _bad_cases() -> dict[str, Callable[[Any], Any]]:
    """Calls every rank makes that plain mpi4py (MPICH) refuses on every rank."""
    x, y = np.ones(4), np.zeros(4)
    ro = np.zeros(4)
    ro.flags.writeable = False
    return {
        "root_outside": lambda c: c.Bcast(x, root=P),
        "root_not_a_number": lambda c: c.Bcast(x, root="0"),
        "aliased_buffers": lambda c: c.Allreduce(x, x),
        "op_not_for_double": lambda c: c.Allreduce([x, MPI.DOUBLE], [y, MPI.DOUBLE], MPI.BAND),
        "count_mismatch": lambda c: c.Allreduce(x, np.zeros(3)),
        "read_only_recvbuf": lambda c: c.Allreduce(x, ro),
        "not_a_buffer": lambda c: c.Allreduce(object(), y),
        "unknown_typecode": lambda c: c.Allreduce([x, "k"], y),
        "iallreduce_read_only": lambda c: c.Iallreduce(x, ro),
        "allreduce_init_count_mismatch": lambda c: c.Allreduce_init(x, np.zeros(3)),
        "alltoallv_datatype_null": lambda c: c.Alltoallv(
            [x, None, [0] * P, MPI.DATATYPE_NULL], [y, None, [0] * P, MPI.DOUBLE]),
        "byte_order": lambda c: c.Allreduce(np.zeros(4, ">i4"), np.zeros(4, ">i4")),
    }


_BAD = _bad_cases()


def _outcome(call: Callable[[Any], Any], c: Any) -> BaseException | None:
    try:
        out = call(c)
        if isinstance(out, MPI.Request):
            out.Free() if isinstance(out, MPI.Prequest) else out.Wait()
    except Exception as exc:
        return exc
    return None


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(_BAD))
def test_bad_input_raises_what_plain_mpi4py_raises(name: str) -> None:
    theirs = _outcome(_BAD[name], WORLD)
    mine = _outcome(_BAD[name], native())
    problems: list[str] = []
    if theirs is None:
        problems.append("plain mpi4py raised nothing: not a bad input")
    elif not isinstance(mine, type(theirs)):
        problems.append(f"native raised {mine!r}, mpi4py {theirs!r}")
    elif isinstance(theirs, MPI.Exception) and \
            mine.Get_error_class() != theirs.Get_error_class():  # type: ignore[union-attr]
        problems.append(f"native's MPI error class {mine}, mpi4py's {theirs}")
    elif mine is not theirs and mine.__cause__ is not None and \
            type(mine.__cause__) is not type(theirs):
        problems.append(f"native's translation hides {mine.__cause__!r}, mpi4py {theirs!r}")
    problems += _no_stray_message()
    _agree(problems, name)


@pytest.mark.mpi
def test_refusals_of_the_old_front_door_that_mpi4py_completes() -> None:
    """Calls the front door refused and plain mpi4py completes now complete on native with
    the same bytes: a 0-d array as the count of a vector spec, aliased zero-size views."""
    problems: list[str] = []
    for c_i, c in enumerate((WORLD, native())):
        sbuf = np.arange(3 * P, dtype=np.float64) + RANK
        rbuf = np.full(3 * P, -1.0)
        c.Alltoallv([sbuf, (3, [3 * j for j in range(P)])], [rbuf, np.array(3)])
        want = np.concatenate([np.arange(3.0) + 3 * RANK + r for r in range(P)])
        if not np.array_equal(rbuf, want):
            problems.append(f"{('mpi4py', 'native')[c_i]} Alltoallv with a 0-d count: {rbuf}")
    _agree(problems, "completed calls")


# ---- algorithm=, the front door, checked mode ------------------------------------------------


@pytest.mark.mpi
def test_algorithm_native_or_none_runs_and_others_are_refused_before_any_message() -> None:
    b = native()
    x, y = np.full(3, RANK + 1.0), np.zeros(3)
    problems: list[str] = []
    for alg in (None, "native"):
        b.Allreduce(x, y, algorithm=alg)
        b.Iallreduce(x, y, algorithm=alg).Wait()
        _persistent(b.Allreduce_init(x, y, algorithm=alg))
        b.Barrier(algorithm=alg)
        if not np.array_equal(y, np.full(3, P * (P + 1) / 2)):
            problems.append(f"algorithm={alg!r}: {y}")
    for alg, exc in (("ring", ValueError), ("auto", ValueError), (3, TypeError)):
        for call in (lambda a: b.Allreduce(x, y, algorithm=a),
                     lambda a: b.Ibcast(x, 0, algorithm=a),
                     lambda a: b.Gather_init(x, np.zeros(3 * P), algorithm=a),
                     lambda a: b.Barrier(algorithm=a)):
            with pytest.raises(exc, match="algorithm"):
                call(alg)
    problems += _no_stray_message()
    _agree(problems, "algorithm=")


@pytest.mark.mpi
def test_checked_native_still_agrees_across_ranks() -> None:
    """Checked mode keeps the whole front door: a root that differs makes every rank raise
    MismatchError before any message (P >= 2); agreeing calls give mpi4py's result."""
    b = mpicoll.native(WORLD, check=True)
    x = np.full(2, float(RANK))
    b.Bcast(x, root=P - 1)
    assert np.array_equal(x, np.full(2, P - 1.0))
    if P > 1:
        with pytest.raises(mpicoll.MismatchError, match="root"):
            b.Bcast(x, root=0 if RANK else 1)
    _agree(_no_stray_message(), "checked native")


# ---- threads: object reductions on their own communicators (issue 20 item 9) ----------------


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_three_threads_object_reductions_on_own_communicators() -> None:
    """Three threads, each with its own native backend on its own communicator (made in the
    main thread, in the same order on every rank), start their object reductions at once:
    mpi4py's duplicate of each communicator was made at construction, so no thread meets an
    ``MPI_Comm_dup`` while another holds the GIL (before, 2 runs of 8 hung at P = 5).  A hang
    ends at the test's timeout."""
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE")
    comms = [WORLD.Dup() for _ in range(3)]
    backends = [mpicoll.native(c) for c in comms]
    errors: list[str] = []
    start = threading.Barrier(3)

    def work(tid: int) -> None:
        b = backends[tid]
        try:
            # each rank's threads meet the barrier, then go in a rank-dependent order
            start.wait()
            if (RANK + tid) % 2:
                threading.Event().wait(0.001 * tid)
            for i in range(20):
                got = (b.allreduce(RANK + i, op=MPI.SUM), b.scan(1), b.exscan(1),
                       b.reduce(tid, op=MPI.MAX, root=0), b.bcast(tid, root=P - 1))
                want = (P * (P - 1) // 2 + P * i, RANK + 1, None if RANK == 0 else RANK,
                        tid if RANK == 0 else None, tid)
                if got != want:
                    errors.append(f"thread {tid} call {i}: {got} != {want}")
        except Exception as exc:
            errors.append(f"thread {tid}: {exc!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in comms:
        c.Free()
    _agree(errors, "three threads")
