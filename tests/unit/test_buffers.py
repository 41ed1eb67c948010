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
