"""The message-spec grammar of :mod:`mpicoll.backends.buffers` against mpi4py itself.

Every spec is parsed by mpicoll and handed to plain mpi4py on ``COMM_SELF`` (one process, so
no launcher is needed): where mpi4py accepts a spec mpicoll must accept it with the count,
displacement and datatype mpi4py uses (checked through the bytes a ``Bcast``/``Allgatherv``
on ``COMM_SELF`` leaves); where mpi4py raises, mpicoll must raise the same exception type.
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.backends import buffers
from mpicoll.backends.args import PARSERS

SELF = MPI.COMM_SELF
D = MPI.DOUBLE


def _arr() -> np.ndarray:
    return np.arange(8, dtype=np.float64)


SIMPLE: dict[str, Any] = {
    "buffer": lambda: _arr(),
    "buf_datatype": lambda: [_arr(), D],
    "buf_typecode": lambda: [_arr(), "d"],
    "buf_count": lambda: [_arr(), 3],
    "buf_count_displ": lambda: [_arr(), (3, 2)],
    "buf_count_displ_list": lambda: [_arr(), [3, 2]],
    "buf_count_datatype": lambda: [_arr(), 3, D],
    "buf_count_none_datatype": lambda: [_arr(), (None, 2), D],
    "four_items": lambda: [_arr(), 2, 1, D],
    "null": lambda: [None, MPI.INT],
    "null_zero": lambda: [None, (0, None), MPI.INT],
    "bytearray": lambda: bytearray(5),
    "bytes_typecode_c": lambda: [bytearray(b"abc"), "c"],
    "memoryview_cast": lambda: memoryview(bytearray(8)).cast("i"),
    "numpy_int_count": lambda: [_arr(), np.int32(2)],
    # refused
    "five_items": lambda: [_arr(), 1, 0, D, 1],
    "one_item": lambda: [_arr()],
    "not_a_buffer": lambda: 5,
    "none": lambda: None,
    "unknown_typecode": lambda: [_arr(), "zz"],
    "negative_count": lambda: [_arr(), -1],
    "float_count": lambda: [_arr(), 1.5],
    "null_with_count": lambda: [None, 1, MPI.INT],
    "negative_displ": lambda: [_arr(), (1, -1), D],
    "displ_past_end": lambda: [_arr(), (0, 9), D],
    "not_contiguous": lambda: _arr()[::2],
    "bytes_not_whole": lambda: [bytearray(5), MPI.INT],
}
SIMPLE.update({f"array_{c}": (lambda c=c: array.array(c, range(3))) for c in "bBhHiIlLqQfd"})


def _outcome(f: Any) -> tuple[type[BaseException] | None, Any]:
    try:
        return None, f()
    except Exception as exc:
        return type(exc), exc


def _raw(spec: Any) -> bytes:
    obj = spec[0] if isinstance(spec, list) else spec
    if obj is None:
        return b""
    return np.asarray(memoryview(obj)).tobytes()


@pytest.mark.parametrize("name", sorted(SIMPLE))
def test_simple_spec_as_mpi4py(name: str) -> None:
    """A Bcast spec: same acceptance and exception type as mpi4py; the parsed view is the
    part of the buffer mpi4py sends (a Bcast from a marked copy into a zeroed one writes
    exactly those bytes)."""
    want_exc, _ = _outcome(lambda: SELF.Bcast(SIMPLE[name]()))
    got_exc, got = _outcome(lambda: buffers.parse(SIMPLE[name](), "buf", writable=True))
    if want_exc is None:
        assert got_exc is None, f"mpicoll refused what mpi4py accepts: {got}"
        assert got.datatype.Get_size() * got.count == got.array.nbytes
        spec = SIMPLE[name]()
        obj = spec[0] if isinstance(spec, list) else spec
        if obj is None:
            return
        mine = buffers.parse(spec, "buf", writable=True).array
        raw = np.asarray(memoryview(obj)).reshape(-1).view(np.uint8)
        raw[:] = 0x11
        offset = mine.__array_interface__["data"][0] - raw.__array_interface__["data"][0]
        src = np.full(mine.nbytes, 0x5A, np.uint8)
        SELF.Sendrecv([src, MPI.BYTE], 0, 0, spec, 0, 0)  # mpi4py receives into the spec
        want = np.full(raw.size, 0x11, np.uint8)
        want[offset : offset + mine.nbytes] = 0x5A
        assert raw.tobytes() == want.tobytes(), "mpi4py's message is not mpicoll's view"
    else:
        assert got_exc is not None, f"mpicoll accepted what mpi4py refuses ({want_exc})"
        assert issubclass(got_exc, want_exc), f"{got_exc.__name__}, mpi4py {want_exc.__name__}"


VECTOR: dict[str, Any] = {
    "buffer": lambda: _arr(),
    "counts": lambda: [_arr(), [5]],
    "numpy_counts": lambda: [_arr(), np.array([5])],
    "one_count": lambda: [_arr(), 4],
    "count_none": lambda: [_arr(), (4, None), D],
    "count_stride": lambda: [_arr(), (4, 3), D],
    "counts_displs_tuple": lambda: [_arr(), ([3], [2])],
    "four_items": lambda: [_arr(), [3], [2], D],
    "typecode": lambda: [_arr(), [3], "d"],
    "null_zero": lambda: [None, (0, None), MPI.INT],
    "list_is_counts": lambda: [_arr(), [[3], [2]], D],
    "float_counts": lambda: [_arr(), np.ones(1)],
    "wrong_length": lambda: [_arr(), [1, 1]],
}


@pytest.mark.parametrize("name", sorted(VECTOR))
def test_vector_spec_as_mpi4py(name: str) -> None:
    """An Allgatherv receive spec on COMM_SELF: same acceptance, exception type and
    (count, displacement) as mpi4py."""
    want_exc, _ = _outcome(lambda: SELF.Allgatherv(MPI.IN_PLACE, VECTOR[name]()))
    got_exc, got = _outcome(lambda: buffers.parse_v(VECTOR[name](), "recvbuf", 1,
                                                    writable=True))
    if want_exc is None:
        assert got_exc is None, f"mpicoll refused what mpi4py accepts: {got}"
        spec = VECTOR[name]()
        obj = spec[0] if isinstance(spec, list) else spec
        if obj is not None and got.counts[0]:
            flat = np.asarray(memoryview(obj)).reshape(-1)
            send = np.full(got.counts[0], 99.0)
            SELF.Allgatherv([send, got.counts[0], D], spec)
            hit = np.flatnonzero(flat == 99.0)
            assert list(hit) == list(range(got.displs[0], got.displs[0] + got.counts[0]))
    else:
        assert got_exc is not None, f"mpicoll accepted what mpi4py refuses ({want_exc})"
        assert issubclass(got_exc, want_exc), f"{got_exc.__name__}, mpi4py {want_exc.__name__}"


@pytest.mark.parametrize(("root", "exc"), [(0, None), (0.0, None), (np.int64(0), None),
                                           (True, MPI.Exception), ("0", TypeError),
                                           (None, TypeError), (1, MPI.Exception)])
def test_root_as_mpi4py(root: Any, exc: type[BaseException] | None) -> None:
    """root is converted as mpi4py converts it; out of range is MPI.Exception (and
    ValueError)."""
    want_exc, _ = _outcome(lambda: SELF.Bcast(np.zeros(2), root))
    assert want_exc is exc or (exc is not None and want_exc is not None
                               and issubclass(want_exc, exc))
    got_exc, got = _outcome(lambda: PARSERS["bcast"](1, 0, np.zeros(2), root))
    if exc is None:
        assert got_exc is None, got
    else:
        assert got_exc is not None, got
        assert issubclass(got_exc, exc), got
        if exc is MPI.Exception:
            assert isinstance(got, ValueError)


@pytest.mark.parametrize("coll", ["allgather", "allreduce", "scan", "exscan",
                                  "reduce_scatter_block", "alltoall", "reduce", "gather"])
def test_none_is_in_place(coll: str) -> None:
    """None as the send buffer is in place wherever mpi4py reads it so."""
    call = PARSERS[coll](1, 0, None, np.zeros(4))
    assert call.in_place


# ---- MPI.BOTTOM with absolute addresses --------------------------------------------------


def _absolute(a: np.ndarray, b: np.ndarray) -> MPI.Datatype:
    """A struct of ``a`` and ``b`` (float64 arrays) at their absolute addresses."""
    return MPI.Datatype.Create_struct([a.size, b.size], [MPI.Get_address(a), MPI.Get_address(b)],
                                      [D, D]).Commit()


def test_bottom_is_the_users_memory_with_a_shifted_twin_datatype() -> None:
    """[MPI.BOTTOM, n, dt]: a view at the typemap's lowest address, with a datatype of the same
    size, extent and type signature whose true lower bound is 0 (what the p2p schedules and
    scratch buffers need); Bcast on COMM_SELF of both forms touches the same bytes."""
    a, b = np.arange(3.0), np.arange(2.0) + 10
    dt = _absolute(a, b)
    try:
        buf = buffers.parse([MPI.BOTTOM, 1, dt], "buf", writable=True)
        view, twin = buf.array, buf.datatype
        assert buf.bottom is dt
        assert view.size == 1
        assert view.__array_interface__["data"][0] == dt.Get_true_extent()[0]
        assert twin.Get_size() == dt.Get_size() == 40
        assert twin.Get_extent()[1] == dt.Get_extent()[1]
        assert twin.Get_true_extent() == (0, dt.Get_true_extent()[1])
        packed = np.empty(40, np.uint8)  # the twin at the view reads the user's doubles
        twin.Pack(view, packed, 0, SELF)
        assert np.array_equal(packed.view(np.float64), [0, 1, 2, 10, 11])
        # two elements and a displacement: element k at BOTTOM + k * extent
        two = buffers.parse([MPI.BOTTOM, 2, 1, dt], "buf")
        ext = dt.Get_extent()[1]
        assert two.array.__array_interface__["data"][0] == dt.Get_true_extent()[0] + ext
        assert two.count == 2
        # block collectives: count per block x blocks
        assert buffers.parse([MPI.BOTTOM, 1, dt], "recvbuf", blocks=3).count == 3
        # zero elements: a null buffer, no twin
        zero = buffers.parse([MPI.BOTTOM, 0, dt], "buf")
        assert zero.count == 0
        assert zero.bottom is None
        assert buffers.parse([MPI.BOTTOM, dt], "buf").count == 0  # count inferred: 0
        v = buffers.parse_v([MPI.BOTTOM, ([1, 1], [1, 0]), dt], "recvbuf", 2)
        assert v.counts == [1, 1]
        assert v.displs == [1, 0]
        assert v.array.size == 2
    finally:
        dt.Free()


@pytest.mark.parametrize("make", [
    lambda: [MPI.BOTTOM, 1, MPI.DOUBLE],  # a buffer at address 0
    lambda: [MPI.BOTTOM, 1, "d"],
    lambda: [MPI.BOTTOM, 2, MPI.DOUBLE.Create_contiguous(2).Commit()],  # relative offsets
], ids=["predefined", "typecode", "relative"])
def test_bottom_without_absolute_addresses_is_mpi_err_buffer(make: Any) -> None:
    spec = make()
    try:
        with pytest.raises(buffers.MPIValueError) as info:
            buffers.parse(spec, "buf")
        assert info.value.Get_error_class() == MPI.ERR_BUFFER
        assert isinstance(info.value, MPI.Exception)
    finally:
        if isinstance(spec[2], MPI.Datatype) and not spec[2].is_predefined:
            spec[2].Free()


def test_bottom_reductions_need_one_datatype_as_in_mpi4py() -> None:
    a, b = np.arange(3.0), np.arange(2.0)
    c, d = np.zeros(3), np.zeros(2)
    s, r = _absolute(a, b), _absolute(c, d)
    try:
        with pytest.raises(ValueError, match="mismatch"):
            PARSERS["allreduce"](1, 0, [MPI.BOTTOM, 1, s], [MPI.BOTTOM, 1, r], MPI.SUM)
        with pytest.raises(ValueError, match="mismatch"):
            SELF.Allreduce([MPI.BOTTOM, 1, s], [MPI.BOTTOM, 1, r], op=MPI.SUM)  # mpi4py too
    finally:
        s.Free()
        r.Free()
