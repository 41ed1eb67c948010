"""Derived datatypes without mpiexec: the parsed form, local copies and scratch, the simulator's
cost-only mode, and the dtype names of verify/bench (the collectives themselves are in
tests/mpi/test_derived.py)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi4py.util import dtlib

from mpicoll.algorithms import registry
from mpicoll.algorithms.datatypes import (
    TypedView,
    extents,
    is_derived,
    typed_copy,
    typed_scratch,
)
from mpicoll.algorithms.schedule import Context
from mpicoll.backends.args import PARSERS
from mpicoll.backends.buffers import parse, parse_v
from mpicoll.backends.ops import check_op
from mpicoll.engines.sim import Simulator
from mpicoll.engines.vector import run_vector
from mpicoll.tools import dtypes
from mpicoll.tools.simulate import simulate

VEC = MPI.DOUBLE.Create_vector(2, 1, 3).Commit()          # doubles 0 and 3: size 16, extent 32
INTERLEAVED = VEC.Create_resized(-8, 16).Commit()         # element i: doubles 2i, 2i + 3
NEG = MPI.INT64_T.Create_hindexed([1, 1], [-8, 8]).Commit()  # true lb -8: bytes [-8, 16)
CONTIG = MPI.INT64_T.Create_contiguous(2).Commit()


def test_is_derived() -> None:
    assert is_derived(VEC)
    assert is_derived(INTERLEAVED)
    assert not is_derived(MPI.DOUBLE)
    assert not is_derived(MPI.DOUBLE_INT)
    dup = dtlib.from_numpy_dtype(np.dtype(np.float64))  # an MPI_Type_dup of MPI_DOUBLE
    assert not dup.is_predefined
    assert not is_derived(dup)
    d = VEC.Dup()
    assert is_derived(d)
    d.Free()


def test_parse_gives_one_element_per_instance() -> None:
    buf = np.zeros(12)
    b = parse([buf, 3, VEC], "buf")
    assert b.array.dtype == np.dtype((np.void, 32))
    assert b.count == 3
    assert b.datatype == VEC
    assert b.array.ctypes.data == buf.ctypes.data
    b = parse([buf, (1, 1), VEC], "buf")  # displacement in extents
    assert b.array.ctypes.data == buf.ctypes.data + 32
    assert parse([buf, VEC], "buf").count == 3  # no count: bytes over the extent, as mpi4py


def _past(spec: Any, words: str, size: int = 0) -> None:
    """A spec whose typemap leaves its buffer is no refusal (check (B) reads one rank's own
    values): as a receive it runs on a scratch and truncates (MPI_ERR_TRUNCATE at the end of
    the call), as a send of an array that owns its memory it sends zeros past it
    (MPI_ERR_BUFFER); the problem is said in the words checked mode refuses it with."""
    for writable, cls in ((True, MPI.ERR_TRUNCATE), (False, MPI.ERR_BUFFER)):
        b = parse_v(spec, "buf", size, writable=writable) if size else \
            parse(spec, "buf", writable=writable)
        assert b.spill is not None
        assert re.search(words, b.spill.problem), b.spill.problem
        assert b.spill.error_class == cls


def test_parse_checks_the_typemap_bytes() -> None:
    _past([np.zeros(12), 4, VEC], r"touch bytes \[0, 128\)")  # 3 * 32 + 32 bytes > 96
    assert parse([np.zeros(10), 4, INTERLEAVED], "buf").count == 4  # (4-1)*16 + 32 = 80 bytes
    _past([np.zeros(9), 4, INTERLEAVED], "touch bytes")
    _past([np.zeros(8), 1, NEG], r"touch bytes \[-8, ")  # the true lower bound is before it
    assert parse([np.zeros(8), (1, 1), NEG], "buf").count == 1  # origin 24 bytes in
    with pytest.raises(ValueError, match="not a multiple"):
        parse([np.zeros(5), VEC], "buf")
    flat = MPI.DOUBLE.Create_resized(0, 0).Commit()
    one = parse([np.zeros(4), 3, flat], "buf")  # one block: one element of a twin type
    assert one.twin_of == flat
    assert one.count == 1
    assert one.datatype.Get_size() == 24
    with pytest.raises(ValueError, match="cannot infer count"):  # mpi4py's own
        parse([np.zeros(4), flat], "buf")
    # p blocks at one address: a scratch of p elements of a positive-extent twin, packed
    # from the buffer before the call (and unpacked after it, for a receive)
    sent = parse([np.arange(4.0), 1, flat], "buf", blocks=2)
    assert sent.count == 2
    assert sent.twin_of == flat
    assert sent.datatype.Get_size() == 8
    assert sent.datatype.Get_extent() == (0, 8)
    assert sent.spill is not None
    assert sent.spill.copy_out == ()
    assert not sent.spill.problem
    got = parse([np.zeros(4), 1, flat], "buf", blocks=2, writable=True)
    assert got.spill is not None
    assert len(got.spill.copy_out) == 1
    assert "one location twice" in got.spill.problem  # what checked mode refuses
    empty = parse([np.zeros(4), 0, flat], "buf", blocks=2)
    assert empty.count == 0
    assert empty.spill is None
    one = MPI.DOUBLE.Create_hindexed([1], [24])
    rev = one.Create_resized(0, -8).Commit()  # element k: the double at byte 24 - 8 k
    one.Free()
    down = parse_v([np.arange(4.0), ([1, 2], [0, 1]), rev], "buf", 2)  # blocks walking down
    assert down.counts == [1, 2]
    assert down.displs == [0, 1]  # back to back in the scratch
    assert down.spill is not None
    assert down.spill.error_class is None  # inside the buffer: no (B) spill
    assert len(down.spill.copy_in) == 2
    past = parse_v([np.arange(4.0), ([1, 2], [0, 3]), rev], "buf", 2, writable=True)
    assert past.spill is not None
    assert past.spill.error_class == MPI.ERR_TRUNCATE  # block 1 below byte 0: (B), it goes
    rev.Free()


def test_a_send_past_a_slice_reads_the_array_it_slices() -> None:
    """A send spec past a slice of a larger array reads that array's memory, as MPI does (no
    scratch, no error); a receive past it still truncates (MPI would write there)."""
    whole = np.arange(16.0)
    b = parse([whole[:10], 4, VEC], "buf")  # 128 bytes of a 80-byte slice of 128 bytes
    assert b.spill is None
    assert isinstance(b.array, TypedView)
    assert b.array.ctypes.data == whole.ctypes.data
    assert parse([whole[:10], 4, VEC], "buf", writable=True).spill is not None
    v = parse_v([whole[4:8], ([1, 1], [-1, 2]), MPI.DOUBLE], "buf", 2)
    assert v.spill is None
    assert v.block(0)[0] == 3.0
    assert v.block(1)[0] == 6.0


def test_parse_v_blocks_in_extents() -> None:
    buf = np.zeros(20)
    v = parse_v([buf, ([1, 2], [0, 2]), INTERLEAVED], "buf", 2)
    assert v.block(1).ctypes.data == buf.ctypes.data + 32
    assert v.block(1).size == 2
    _past([buf, ([1, 2], [0, 8]), INTERLEAVED], "block 1", size=2)


def test_view_past_the_end_is_only_addresses() -> None:
    """A resized type whose extent exceeds its true extent: the last element's extent runs
    past the buffer, its typemap does not."""
    wide = MPI.INT.Create_resized(0, 16).Commit()
    buf = np.zeros(9, np.int32)  # 3 elements: bytes 0, 16, 32 (+4)
    b = parse([buf, 3, wide], "buf", writable=True)
    assert b.count == 3
    typed_copy(parse([np.arange(12, dtype=np.int32), 3, wide], "src").array, b.array, wide)
    assert buf.tolist() == [0, 0, 0, 0, 4, 0, 0, 0, 8]


def test_copy_keeps_the_holes() -> None:
    src = np.arange(12.0)
    dst = np.full(12, -1.0)
    typed_copy(parse([src, 3, VEC], "s").array, parse([dst, 3, VEC], "d").array, VEC)
    want = np.full(12, -1.0)
    want[[0, 3, 4, 7, 8, 11]] = [0, 3, 4, 7, 8, 11]
    assert dst.tolist() == want.tolist()
    x = np.arange(10.0)  # overlapping source and destination are safe (Pack, then Unpack)
    v = parse([x, 4, INTERLEAVED], "x", writable=True).array
    typed_copy(v[1:3], v[0:2], INTERLEAVED)
    assert x.tolist() == [2, 1, 4, 5, 4, 7, 6, 7, 8, 9]


@pytest.mark.parametrize("t", [VEC, INTERLEAVED, NEG, CONTIG], ids=["vec", "inter", "neg", "c"])
def test_scratch_holds_the_typemap(t: MPI.Datatype) -> None:
    for n in (0, 1, 5):
        s = typed_scratch(n, t)
        assert s.size == n
        assert s.dtype.itemsize == extents(t).extent
        lo, hi = extents(t).span(n)
        base = s.base
        while base is not None and not isinstance(base, np.ndarray):
            base = base.base
        start = s.ctypes.data - base.ctypes.data  # type: ignore[union-attr]
        assert start + lo >= 0
        assert start + hi <= base.nbytes
        ones = np.full(t.Pack_size(n, MPI.COMM_SELF), 7, np.uint8)
        t.Unpack(ones, 0, s, MPI.COMM_SELF)  # writes exactly the typemap, inside the allocation


def test_context_reduces_with_the_datatype() -> None:
    seen: list[int] = []

    def fn(a: object, b: object, dt: MPI.Datatype) -> None:
        x = np.frombuffer(a, np.int64)  # type: ignore[call-overload]
        y = np.frombuffer(b, np.int64)  # type: ignore[call-overload]
        seen.append(len(x))
        y[:] = 10 * x + y

    op = MPI.Op.Create(fn, commute=False)
    ctx = Context(0, 1, CONTIG, np.dtype((np.void, 16)))
    assert ctx.derived
    assert ctx.unit == 16
    a = ctx.scratch(2)
    b = ctx.scratch(2)
    ctx.copy(parse([np.array([1, 2, 3, 4]), 2, CONTIG], "a").array, a)
    ctx.copy(parse([np.array([5, 6, 7, 8]), 2, CONTIG], "b").array, b)
    ctx.reduce(a, b, op)
    out = np.zeros(4, np.int64)
    ctx.copy(b, parse([out, 2, CONTIG], "o", writable=True).array)
    assert out.tolist() == [15, 26, 37, 48]
    assert seen == [4]
    op.Free()


def test_predefined_ops_refused_on_derived() -> None:
    """MPICH 5 and Open MPI 5 define no predefined op on a derived datatype (MPI_ERR_OP): both
    backends refuse them before any message, user ops pass."""
    with pytest.raises(TypeError, match="not defined"):
        check_op(MPI.SUM, CONTIG, np.dtype((np.void, 16)))
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    assert check_op(op, CONTIG, np.dtype((np.void, 16))) is op
    op.Free()


def test_call_bytes_are_the_datatype_size() -> None:
    call = PARSERS["allgather"](4, 0, [np.zeros(12), 3, VEC], [np.zeros(48), 3, VEC])
    assert call.nbytes == 4 * 3 * 16  # not the views' 4 * 3 * 32


def _allgather_args(p: int, n: int) -> list[tuple[object, ...]]:
    return [([np.zeros(4 * n), n, VEC], [np.zeros(4 * n * p), n, VEC]) for _ in range(p)]


def test_simulator_counts_datatype_bytes() -> None:
    p, n = 4, 3
    r = simulate("allgather", p, n, algorithm="ring", args=_allgather_args(p, n), data=False)
    assert r.bytes_sent.tolist() == [(p - 1) * n * 16] * p
    with pytest.raises(TypeError, match="cost-only"):
        simulate("allgather", p, n, algorithm="ring", args=_allgather_args(p, n), data=True)


def test_vector_engine_counts_datatype_bytes() -> None:
    p, n = 5, 2
    args = _allgather_args(p, n)[0]
    call = PARSERS["allgather"](p, 0, *args)
    alg = registry.get("allgather", "ring")
    stats = run_vector(Simulator(p, data=False), alg.schedule, call.datatype, call.dtype,
                       call.prepare)
    per_rank = simulate("allgather", p, n, algorithm="ring", args=_allgather_args(p, n),
                        data=False, engine="rank")
    assert stats["bytes_sent"].tolist() == per_rank.bytes_sent.tolist() == [(p - 1) * n * 16] * p
    assert np.allclose(stats["clocks"], per_rank.clocks)


def test_case_dtype_names() -> None:
    t, base = dtypes.derived_datatype("vector:2:3:float64")  # type: ignore[misc]
    assert base == "float64"
    assert t.Get_size() == 16
    assert t.Get_extent() == (0, 32)
    t, _ = dtypes.derived_datatype("vector:2:2:4:int32")  # type: ignore[misc]
    assert t.Get_size() == 16
    assert t.Get_extent() == (0, 24)
    t, _ = dtypes.derived_datatype("resized:-8:16:vector:2:3:float64")  # type: ignore[misc]
    assert t.Get_extent() == (-8, 16)
    assert dtypes.per_element("contiguous:2:int64") == 2
    assert dtypes.per_element("int64") == 1
    assert dtypes.numpy_dtype("contiguous:2:int64") == np.int64
    for bad in ("vector:2:double", "contiguous:x:int64", "blob:1:int8", "contiguous:2:maxloc"):
        assert not dtypes.known_dtype(bad), bad
    assert dtypes.dtype_op_problem("contiguous:2:int64", "sum") is not None
    assert dtypes.dtype_op_problem("contiguous:2:int64", "user") is None


def test_same_layout_types_match() -> None:
    """Two vectors built alike are one layout: the send side is then used as it is; a send
    side of another datatype with the same type signature goes as a TypedView of its own
    datatype (MPI matches signatures, not datatypes); only a reduction refuses two datatypes,
    as mpi4py (ValueError)."""
    from mpicoll.algorithms.datatypes import TypedView, same_layout
    from mpicoll.backends.buffers import same_type, sent_view

    twin = MPI.DOUBLE.Create_vector(2, 1, 3).Commit()
    assert same_layout(VEC, twin)
    assert not same_layout(VEC, MPI.DOUBLE.Create_vector(2, 1, 2).Commit())
    assert not same_layout(CONTIG, MPI.INT64_T.Create_hindexed([1, 1], [8, 0]).Commit())
    big = MPI.BYTE.Create_indexed_block(1, [0, 44, 300]).Commit()  # 300 = 256 + 44
    assert same_layout(big, MPI.BYTE.Create_indexed_block(1, [0, 44, 300]).Commit())
    # same extents, same low offset bytes in pack order; only the second pass tells them apart
    assert not same_layout(big, MPI.BYTE.Create_indexed_block(1, [0, 300, 44]).Commit())
    buf = np.zeros(12)
    s, r = parse([buf, 1, VEC], "s"), parse([buf, 1, twin], "r")
    same_type(s, r, "Gather")
    assert type(sent_view(s, twin, 1, 1)) is np.ndarray
    s2, r2 = parse([buf, 2, MPI.DOUBLE], "s"), parse([buf, 1, VEC], "r")
    same_type(s2, r2, "Gather")  # not a reduction: nothing to refuse
    view = sent_view(s2, VEC, 2, 1)
    assert type(view) is TypedView
    assert view.datatype == MPI.DOUBLE
    with pytest.raises(ValueError, match="mismatch in send and receive MPI datatypes"):
        same_type(s2, r2, "Allreduce", reduction=True)


def test_copy_by_signature() -> None:
    """Context.copy between a send side of one datatype (a TypedView) and a receive side of
    another copies by type signature: a strided vector's int64s land packed in an int64
    array; a longer source is cut to what fits; a shorter one fills the front, the last
    element partly (its first bytes in pack order), the rest untouched, as MPI fills it."""
    from mpicoll.algorithms.datatypes import TypedView
    from mpicoll.algorithms.schedule import Context

    ctx = Context(0, 1, MPI.INT64_T, np.dtype(np.int64))
    vec = MPI.INT64_T.Create_vector(2, 1, 2).Create_resized(0, 32).Commit()
    try:
        src = np.arange(8, dtype=np.int64)
        view = TypedView.of(parse([src, 2, vec], "s").array, vec)
        out = np.full(4, -1, np.int64)
        ctx.copy(view, out)
        assert out.tolist() == [0, 2, 4, 6]
        short = np.full(3, -1, np.int64)
        ctx.copy(view, short)  # 4 int64 into 3: cut
        assert short.tolist() == [0, 2, 4]
    finally:
        vec.Free()
    half = TypedView.of(np.array([7, 9, 11], np.int32), MPI.INT32_T)
    dst = np.full(3, -1, np.int64)
    ctx.copy(half, dst)  # 12 bytes into 24: one int64 and the first half of the next
    raw = np.full(3, -1, np.int64)
    raw.view(np.int32)[:3] = [7, 9, 11]
    assert dst.tobytes() == raw.tobytes()
