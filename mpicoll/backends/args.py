"""Argument checking shared by both backends: one function per collective.

Each turns the user's mpi4py-style arguments into a :class:`Call`, raising before any message
is sent.  The native backend uses it only in checked mode (then hands the original arguments to
MPI), and outside it only after mpi4py has raised, for a clearer message of the same kind (see
:mod:`mpicoll.backends.native`); the p2p backend also uses the ``prepare`` step, which makes
the schedule's arguments (in-place copies done through the context, so the simulator can
account for them).

Errors: ``TypeError`` for a wrong kind of argument (not a buffer, unknown datatype, op not
defined for the datatype, a reduction's send and receive datatypes that differ);
``ValueError`` for a wrong value (root outside [0, p), ``MPI.IN_PLACE`` where MPI forbids
it, aliased send and receive buffers).

Every check here is of one kind, named in a comment (``# check (A)``, ...) where it is made;
``docs/errors.md`` lists them with the reason:

* **(A) agreed**: it reads only values MPI requires every rank to pass alike (root, op, the
  collective, a reduction's datatype and count), so every rank raises, before any message;
* **(M) mpi4py's or MPI's own local refusal**: plain mpi4py raises the same error on the
  same rank before any message (its spec grammar, a reduction's two datatypes or counts,
  ``MPI_ERR_COUNT``/``MPI_ERR_TYPE``/``MPI_ERR_BUFFER`` from MPI's argument checks), so a
  program behaves as under plain mpi4py;
* **(b) checked mode only**: :mod:`mpicoll.backends.checked`, and the specs below.

(The one **(L)** check, a derived datatype of extent <= 0 on a side of p blocks, is gone: such
blocks are packed into a scratch, :func:`mpicoll.backends.buffers._packed`.)

A spec that reaches outside its buffer (it was check (B): one rank's own count,
displacements, datatype) and overlapping receive blocks are no refusal: the call goes on a
scratch (:class:`~mpicoll.backends.buffers.Spill`, :func:`_spilled`), a receive keeps what
fits and raises ``MPI_ERR_TRUNCATE`` at the end of the call, a send past an owned array sends
zeros and raises ``MPI_ERR_BUFFER`` there; checked mode refuses them on every rank.

What the ranks may pass differently (their datatypes and counts of one type signature, a
send side against a receive side, a shorter message than the receive) is never checked: the
call goes, p2p moves the data by signature, and MPI raises ``MPI_ERR_TRUNCATE`` where a
message does not fit its receive.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms import registry
from ..algorithms.datatypes import PerPeer, TypedView, is_derived, typed_scratch
from ..algorithms.schedule import Context, block_counts, displacements
from ..engines.call import Call
from ..engines.errors import LocalError
from .buffers import (
    Buf,
    MPIValueError,
    VBuf,
    WBuf,
    check_counts,
    int_list,
    is_in_place,
    is_in_place_constant,
    parse,
    parse_v,
    parse_w,
    same_type,
    sent_view,
    widen,
)
from .buffers import nbytes as _nbytes
from .ops import check_op

__all__ = ["Call", "PARSERS", "root_of", "select"]


def root_of(root: Any, size: int) -> int:
    """``root`` converted as mpi4py converts it (to a C int: ints, numpy ints, and floats
    truncated like ``int()``, e.g. ``root=1.0``).  Check (A): MPI requires every rank to pass
    the same root.

    Raises:
        TypeError: not a number (``"an integer is required"``, as mpi4py).
        OverflowError: beyond a C int.
        MPIValueError: outside [0, p) (a ValueError that is also the ``MPI.Exception`` of class
            ``MPI.ERR_ROOT`` MPI raises through mpi4py).
    """
    if isinstance(root, (str, bytes)) or not hasattr(type(root), "__int__"):
        raise TypeError(f"root: an integer is required, got {root!r}")
    try:
        value = operator.index(root)
    except TypeError:
        value = int(root)
    if not -(2**31) <= value < 2**31:
        raise OverflowError(f"root: value too large to convert to int: {root!r}")
    if not 0 <= value < size:
        raise MPIValueError(MPI.ERR_ROOT, f"root: {value} is outside [0, {size}) for a "
                            f"communicator of {size} ranks")
    return int(value)


def _no_in_place(spec: Any, what: str, coll: str, where: str = "") -> None:
    """Check (M): ``MPI.IN_PLACE`` where MPI does not define it (mpi4py refuses it there
    too: it is no buffer)."""
    if is_in_place_constant(spec):
        raise ValueError(f"{what}: MPI.IN_PLACE is not allowed here in {coll}{where}")


def _no_alias(a: Buf | VBuf, b: Buf | VBuf, coll: str) -> None:
    """Check (M): send and receive buffers that share memory: MPI's argument check
    (MPICH: ``MPI_ERR_BUFFER``, aliased buffers) on the same rank, before any message."""
    x, y = _memory(a), _memory(b)
    if x.size and y.size and np.shares_memory(x, y):
        raise MPIValueError(
            MPI.ERR_BUFFER,
            f"{coll}: sendbuf and recvbuf overlap; MPI forbids aliased buffers "
            "(pass MPI.IN_PLACE as sendbuf instead)"
        )


def _memory(buf: Buf | VBuf | WBuf) -> np.ndarray:
    """The user's own memory of a parsed buffer (not the scratch of a spill)."""
    return buf.array if buf.spill is None else buf.spill.user


def _spilled(call: Call, *bufs: Buf | VBuf | WBuf | None) -> Call:
    """``call`` on the scratch of its buffers' spills (:class:`~mpicoll.backends.buffers.Spill`:
    a spec reaching outside its buffer, overlapping receive blocks): their copies in before
    the schedule's own ``prepare``, their copies out after its ``finish``, and the first
    one's error raised at the end of each run (``Call.truncated``; ``Call.bounds`` for checked
    mode).  ``call`` itself where no buffer spills (every common call)."""
    spills = [b.spill for b in bufs if b is not None and b.spill is not None]
    if not spills:
        return call
    spills = list({id(sp): sp for sp in spills}.values())  # a buffer passed twice: once
    ins = tuple(pair for sp in spills for pair in sp.copy_in)
    outs = tuple(pair for sp in spills for pair in sp.copy_out)
    first = next((sp for sp in spills if sp.error_class is not None), None)
    prepare0, finish0 = call.prepare, call.finish

    def prepare(ctx: Context) -> tuple[Any, ...]:
        for src, dst in ins:
            ctx.copy(src, dst)
        return prepare0(ctx)

    def finish(ctx: Context, args: tuple[Any, ...]) -> None:
        if finish0 is not None:
            finish0(ctx, args)
        for src, dst in outs:
            ctx.copy(src, dst)

    bounds = next((sp.problem for sp in spills if sp.problem), None)
    if first is None or first.error_class is None:
        return dataclasses.replace(call, prepare=prepare, finish=finish, bounds=bounds)
    return dataclasses.replace(call, prepare=prepare, finish=finish,
                               truncated=LocalError(first.detail, first.error_class),
                               bounds=bounds)


def _op(op: Any, buf: Buf | VBuf) -> MPI.Op:
    """Check (A): the op and the reduction's datatype, which MPI requires to agree (so a
    datatype of extent <= 0, which only one-block specs outside reductions take, raises on
    every rank)."""
    twin = getattr(buf, "twin_of", None)
    if twin is not None:
        raise TypeError(f"datatype: a reduction on a derived datatype of extent "
                        f"{twin.Get_extent()[1]}: mpicoll needs a positive extent for "
                        "reductions (Create_resized it)")
    return check_op(op, buf.datatype, buf.array.dtype)


def _copy_of(arr: np.ndarray) -> Callable[[Context], np.ndarray]:
    def make(ctx: Context) -> np.ndarray:
        out = ctx.scratch(arr.size)
        ctx.copy(arr, out)
        return out

    return make


def _given(arr: np.ndarray) -> Callable[[Context], np.ndarray]:
    """The input buffer itself (no copy needed: it is never written)."""
    return lambda ctx: arr


def _regular(n: int, p: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    counts = block_counts(n * p, p)  # p blocks of n (cached: shared by every simulated rank)
    return counts, displacements(counts)


def _per_rank(buf: Buf, p: int, what: str, coll: str) -> int:
    """One block's count of a buffer of p blocks.  Check (M): a count that does not split
    into p blocks (mpi4py's ``cannot infer count``; an explicit count is one block's, so it
    always splits)."""
    if buf.count % p:
        raise ValueError(
            f"{what}: {buf.count} elements do not split into {p} equal blocks for {coll}"
        )
    return buf.count // p


# --------------------------------------------------------------------------------------------


def barrier(size: int, rank: int) -> Call:
    return Call("barrier", MPI.BYTE, np.dtype(np.uint8), lambda ctx: ())


def bcast(size: int, rank: int, buf: Any, root: Any = 0) -> Call:
    """``Bcast``: the schedules move bytes (``MPI.BYTE``) on every rank, as MPICH does for
    a non-contiguous datatype: the ranks may pass different datatypes (and counts) of one
    type signature (200,000 ``INT`` on some, 20,000 of a 10-``INT`` contiguous type on the
    root), and only the message's bytes are the same everywhere, so every split into blocks
    or segments is made in bytes.  A predefined buffer is viewed as its bytes (no copy); a
    derived one is packed into a scratch of bytes at the root (``prepare``) and unpacked from
    one elsewhere (``finish``), holes untouched."""
    root = root_of(root, size)
    _no_in_place(buf, "buf", "Bcast")
    b = parse(buf, "buf", writable=rank != root)
    nbytes = _nbytes(b)
    arr = b.array
    if not is_derived(b.datatype):
        raw = np.asarray(arr).view(np.uint8) if arr.size else np.empty(0, np.uint8)
        if isinstance(arr, TypedView):  # memory past the buffer (buffers._spill): no template
            raw = TypedView.of(raw, MPI.BYTE)
        return _spilled(Call("bcast", MPI.BYTE, raw.dtype, lambda ctx: (raw, root),
                             nbytes=nbytes, count=b.count, root=root,
                             sig_datatype=b.datatype), b)
    user = TypedView.of(arr, b.datatype)

    def prepare(ctx: Context) -> tuple[Any, ...]:
        tmp = ctx.scratch(nbytes)
        if rank == root:
            ctx.copy(user, tmp)
        return (tmp, root)

    def finish(ctx: Context, args: tuple[Any, ...]) -> None:
        if rank != root:  # (a typed source: a compiled plan replays it through ctx.copy)
            ctx.copy(TypedView.of(args[0], MPI.BYTE), user)

    return _spilled(Call("bcast", MPI.BYTE, np.dtype(np.uint8), prepare, nbytes=nbytes,
                         count=b.count, root=root, finish=finish, sig_datatype=b.datatype), b)


def scatter(size: int, rank: int, sendbuf: Any, recvbuf: Any, root: Any = 0) -> Call:
    root = root_of(root, size)
    sarr: np.ndarray | None = None
    s = rb = None
    if rank == root:
        s = parse(sendbuf, "sendbuf", blocks=size)
        if is_in_place(recvbuf):
            n = _per_rank(s, size, "sendbuf", "Scatter")
            rarr, ref = s.array[rank * n : (rank + 1) * n], s
            sarr, per_block = s.array, n
        else:
            rb = parse(recvbuf, "recvbuf", writable=True)
            _no_alias(s, rb, "Scatter")
            n, per_block = rb.count, s.count // size
            sarr = sent_view(s, rb.datatype, per_block, n)
            rarr, ref = rb.array, rb
    else:
        _no_in_place(recvbuf, "recvbuf", "Scatter", " at a non-root rank")
        rb = parse(recvbuf, "recvbuf", writable=True)
        n, rarr, ref = rb.count, rb.array, rb
        per_block = n
    # the root's send blocks in its send datatype's units; elsewhere this rank's own count
    counts, displs = _regular(per_block, size)
    return _spilled(Call("scatter", ref.datatype, rarr.dtype,
                         lambda ctx: (sarr, counts, displs, rarr, root),
                         nbytes=_nbytes(ref, n * size), count=n,
                         in_place=rank == root and is_in_place(recvbuf), root=root), s, rb)


def scatterv(size: int, rank: int, sendbuf: Any, recvbuf: Any, root: Any = 0) -> Call:
    root = root_of(root, size)
    counts: list[int] | None = None
    displs: list[int] | None = None
    sarr: np.ndarray | None = None
    ref: Buf | VBuf
    sendtype = None  # the root's counts: in its send datatype's units
    s: VBuf | None = None
    rb: Buf | None = None
    if rank == root:
        s = parse_v(sendbuf, "sendbuf", size)
        counts, displs, sarr, sendtype = s.counts, s.displs, s.array, s.datatype
        if is_in_place(recvbuf):
            rarr, ref = s.block(rank), s
        else:
            rb = parse(recvbuf, "recvbuf", writable=True)
            _no_alias(s, rb, "Scatterv")
            sarr = sent_view(s, rb.datatype, s.counts[rank], rb.count)
            rarr, ref = rb.array, rb
    else:
        _no_in_place(recvbuf, "recvbuf", "Scatterv", " at a non-root rank")
        rb = parse(recvbuf, "recvbuf", writable=True)
        rarr, ref = rb.array, rb
    return _spilled(Call("scatterv", ref.datatype, rarr.dtype,
                         lambda ctx: (sarr, counts, displs, rarr, root),
                         count=None, uniform=False,
                         in_place=rank == root and is_in_place(recvbuf), root=root,
                         counts=None if counts is None else tuple(counts),
                         own_count=int(rarr.size), count_types=(sendtype, None, None)), s, rb)


def gather(size: int, rank: int, sendbuf: Any, recvbuf: Any, root: Any = 0) -> Call:
    root = root_of(root, size)
    rarr: np.ndarray | None = None
    s = rb = None
    if rank == root:
        rb = parse(recvbuf, "recvbuf", writable=True, blocks=size)
        if is_in_place(sendbuf):
            n = _per_rank(rb, size, "recvbuf", "Gather")
            sarr = rb.array[rank * n : (rank + 1) * n]
        else:
            s = parse(sendbuf, "sendbuf")
            _no_alias(s, rb, "Gather")
            n = rb.count // size  # the root's blocks, in its receive datatype's units
            sarr = sent_view(s, rb.datatype, s.count, n)
        rarr, ref = rb.array, rb
    else:
        _no_in_place(sendbuf, "sendbuf", "Gather", " at a non-root rank")
        s = parse(sendbuf, "sendbuf")
        n, sarr, ref = s.count, s.array, s
    counts, displs = _regular(n, size)
    return _spilled(Call("gather", ref.datatype, ref.array.dtype,
                         lambda ctx: (sarr, rarr, counts, displs, root),
                         nbytes=_nbytes(ref, n * size), count=n,
                         in_place=rank == root and is_in_place(sendbuf), root=root), rb, s)


def gatherv(size: int, rank: int, sendbuf: Any, recvbuf: Any, root: Any = 0) -> Call:
    root = root_of(root, size)
    counts: list[int] | None = None
    displs: list[int] | None = None
    rarr: np.ndarray | None = None
    ref: Buf | VBuf
    own_type = None  # the root's own count: in its send datatype's units
    rv: VBuf | None = None
    s: Buf | None = None
    if rank == root:
        rv = parse_v(recvbuf, "recvbuf", size, writable=True)
        counts, displs, rarr = rv.counts, rv.displs, rv.array
        if is_in_place(sendbuf):
            sarr, ref = rv.block(rank), rv
        else:
            s = parse(sendbuf, "sendbuf")
            _no_alias(s, rv, "Gatherv")
            sarr, ref = sent_view(s, rv.datatype, s.count, rv.counts[rank]), rv
            own_type = s.datatype
    else:
        _no_in_place(sendbuf, "sendbuf", "Gatherv", " at a non-root rank")
        s = parse(sendbuf, "sendbuf")
        sarr, ref = s.array, s
    return _spilled(Call("gatherv", ref.datatype, ref.array.dtype,
                         lambda ctx: (sarr, rarr, counts, displs, root),
                         uniform=False, in_place=rank == root and is_in_place(sendbuf),
                         root=root, counts=None if counts is None else tuple(counts),
                         own_count=int(sarr.size), count_types=(None, None, own_type)), rv, s)


def _input_output(coll: str, sendbuf: Any, recvbuf: Any, send_blocks: int = 1
                  ) -> tuple[Buf, Buf | None, bool]:
    """(output, input or None for in-place, in_place) for the reduction collectives.

    ``send_blocks``: blocks of the input (P for Reduce_scatter_block, whose input's explicit
    count is per block in mpi4py); with ``MPI.IN_PLACE`` the input is recvbuf."""
    if is_in_place(sendbuf):
        return parse(recvbuf, "recvbuf", writable=True, blocks=send_blocks), None, True
    rb = parse(recvbuf, "recvbuf", writable=True)
    s = parse(sendbuf, "sendbuf", blocks=send_blocks)
    same_type(s, rb, coll, reduction=True)  # check (M): mpi4py's, one datatype
    _no_alias(s, rb, coll)
    return rb, s, False


def reduce(size: int, rank: int, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM,
           root: Any = 0) -> Call:
    root = root_of(root, size)
    rarr: np.ndarray | None = None
    rb: Buf | None = None
    s: Buf | None = None
    if rank == root:
        rb, s, in_place = _input_output("Reduce", sendbuf, recvbuf)
        if s is not None:
            # check (M): mpi4py's "mismatch in send count and receive count"
            check_counts("recvbuf", rb.count, s.count, "Reduce (sendbuf's count)")
        ref: Buf = rb
        rarr = rb.array
        src = rb.array if s is None else s.array
        make_send = _copy_of(src) if in_place else _given(src)
    else:
        _no_in_place(sendbuf, "sendbuf", "Reduce", " at a non-root rank")
        ref = parse(sendbuf, "sendbuf")
        in_place = False
        src = ref.array
        make_send = _given(src)
    mop = _op(op, ref)
    return _spilled(Call("reduce", ref.datatype, src.dtype,
                         lambda ctx: (make_send(ctx), rarr, mop, root),
                         nbytes=_nbytes(ref, src.size), count=src.size,
                         commutative=bool(mop.Is_commutative()), in_place=in_place, op=mop,
                         root=root), rb, s, ref)


def allreduce(size: int, rank: int, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> Call:
    rb, s, in_place = _input_output("Allreduce", sendbuf, recvbuf)
    if s is not None:
        # check (M): mpi4py's "mismatch in send count and receive count"
        check_counts("recvbuf", rb.count, s.count, "Allreduce (sendbuf's count)")
    mop = _op(op, rb)
    out = rb.array
    src = None if s is None else s.array

    def prepare(ctx: Context) -> tuple[Any, ...]:
        if src is not None:
            ctx.copy(src, out)
        return (out, mop)

    return _spilled(Call("allreduce", rb.datatype, out.dtype, prepare, nbytes=_nbytes(rb),
                         count=out.size, commutative=bool(mop.Is_commutative()),
                         in_place=in_place, op=mop), rb, s)


def _reduce_scatter(coll: str, name: str, size: int, rank: int, sendbuf: Any, recvbuf: Any,
                    counts: list[int] | None, op: Any) -> Call:
    rb, s, in_place = _input_output(name, sendbuf, recvbuf,
                                    send_blocks=size if counts is None else 1)
    total_known = None if counts is None else sum(counts)
    if counts is None:  # equal blocks
        n = _per_rank(rb, size, "recvbuf", name) if in_place else rb.count
        counts = [n] * size
        total_known = n * size
    if in_place:  # the input is read from recvbuf: (B) past its end, the call goes (widen)
        if rb.count < total_known:  # type: ignore[operator]
            rb = widen(rb, int(total_known),  # type: ignore[arg-type]
                       f"recvbuf: has {rb.count} elements, {name} with MPI.IN_PLACE needs "
                       f"the whole input ({total_known})", counts[rank])
        src = rb.array[:total_known]
    else:
        assert s is not None
        # check (M): mpi4py's "mismatch in send count and sum of receive counts"
        check_counts("sendbuf", s.count, int(total_known),  # type: ignore[arg-type]
                     f"{name} (sum of the counts)")
        if rb.count < counts[rank]:  # check (M): mpi4py's "mismatch in receive count"
            raise ValueError(
                f"recvbuf: has {rb.count} elements, {name} gives this rank {counts[rank]}"
            )
        src = s.array
    out = rb.array[: counts[rank]]
    mop = _op(op, rb)
    make_send = _copy_of(src) if in_place else _given(src)
    cts = list(counts)
    return _spilled(Call(coll, rb.datatype, out.dtype,
                         lambda ctx: (make_send(ctx), out, cts, mop),
                         nbytes=_nbytes(rb, int(total_known)),  # type: ignore[arg-type]
                         count=min(cts) if cts else 0, commutative=bool(mop.Is_commutative()),
                         in_place=in_place, uniform=len(set(cts)) <= 1, op=mop,
                         counts=tuple(cts)), rb, s)


def reduce_scatter_block(size: int, rank: int, sendbuf: Any, recvbuf: Any,
                         op: Any = MPI.SUM) -> Call:
    return _reduce_scatter("reduce_scatter_block", "Reduce_scatter_block", size, rank, sendbuf,
                           recvbuf, None, op)


def reduce_scatter(size: int, rank: int, sendbuf: Any, recvbuf: Any,
                   recvcounts: Sequence[int] | None = None, op: Any = MPI.SUM) -> Call:
    counts = None
    if recvcounts is not None:
        counts = int_list(recvcounts, "recvcounts", "recvcounts", size)
    return _reduce_scatter("reduce_scatter", "Reduce_scatter", size, rank, sendbuf, recvbuf,
                           counts, op)


def allgather(size: int, rank: int, sendbuf: Any, recvbuf: Any) -> Call:
    rb = parse(recvbuf, "recvbuf", writable=True, blocks=size)
    n = _per_rank(rb, size, "recvbuf", "Allgather")  # this rank's blocks, in its own units
    src: np.ndarray | None = None
    s = None
    if not is_in_place(sendbuf):
        s = parse(sendbuf, "sendbuf")
        _no_alias(s, rb, "Allgather")
        src = sent_view(s, rb.datatype, s.count, n)
    counts, displs = _regular(n, size)
    out = rb.array

    def prepare(ctx: Context) -> tuple[Any, ...]:
        if src is not None:
            ctx.copy(src, out[displs[rank] : displs[rank] + n])
        return (out, counts, displs)

    return _spilled(Call("allgather", rb.datatype, out.dtype, prepare, nbytes=_nbytes(rb),
                         count=n, in_place=src is None), rb, s)


def allgatherv(size: int, rank: int, sendbuf: Any, recvbuf: Any) -> Call:
    rv = parse_v(recvbuf, "recvbuf", size, writable=True)
    s = None
    if is_in_place(sendbuf):
        src = None
    else:
        s = parse(sendbuf, "sendbuf")
        _no_alias(s, rv, "Allgatherv")
        src = sent_view(s, rv.datatype, s.count, rv.counts[rank])
    counts, displs, out = rv.counts, rv.displs, rv.array

    def prepare(ctx: Context) -> tuple[Any, ...]:
        if src is not None:
            ctx.copy(src, out[displs[rank] : displs[rank] + counts[rank]])
        return (out, counts, displs)

    return _spilled(Call("allgatherv", rv.datatype, out.dtype, prepare,
                         nbytes=_nbytes(rv, sum(counts)), count=min(counts) if counts else 0,
                         in_place=src is None, uniform=len(set(counts)) <= 1,
                         counts=tuple(counts)), rv, s)


def alltoall(size: int, rank: int, sendbuf: Any, recvbuf: Any) -> Call:
    rb = parse(recvbuf, "recvbuf", writable=True, blocks=size)
    n = _per_rank(rb, size, "recvbuf", "Alltoall")
    in_place = is_in_place(sendbuf)
    counts, displs = _regular(n, size)
    scounts, sdispls = counts, displs
    cut = None
    s = None
    if in_place:
        make_send = _copy_of(rb.array)
    else:
        s = parse(sendbuf, "sendbuf", blocks=size)
        _no_alias(s, rb, "Alltoall")
        per_block = s.count // size  # the send blocks, in the send datatype's units
        scounts, sdispls = _regular(per_block, size)
        make_send = _given(sent_view(s, rb.datatype, per_block, n))
        cut = _own_cut(per_block, s.datatype, n, rb.datatype)
    out = rb.array
    return _spilled(Call("alltoall", rb.datatype, out.dtype,
                         lambda ctx: (make_send(ctx), scounts, sdispls, out, counts, displs),
                         nbytes=_nbytes(rb), count=n, in_place=in_place,
                         truncated=cut), rb, s)


def _own_cut(sent: int, sendtype: MPI.Datatype, got: int, recvtype: MPI.Datatype
             ) -> str | None:
    """A rank's own block of an Alltoall(v) that does not fit its receive block: the local
    copy drops what does not fit, and MPICH raises ``MPI_ERR_TRUNCATE`` on that rank, so the
    call does too, at its end (:attr:`Call.truncated`).  Not a check: the call goes."""
    sb, rb = sent * sendtype.Get_size(), got * recvtype.Get_size()
    return f"this rank's own block, {sb} bytes into a buffer of {rb}" if sb > rb else None


def alltoallv(size: int, rank: int, sendbuf: Any, recvbuf: Any) -> Call:
    rv = parse_v(recvbuf, "recvbuf", size, writable=True)
    in_place = is_in_place(sendbuf)
    sendtype = None  # sendcounts: in the send datatype's units
    sv = None
    if in_place:
        sc, sd = rv.counts, rv.displs
        make_send = _copy_of(rv.array)
    else:
        sv = parse_v(sendbuf, "sendbuf", size)
        _no_alias(sv, rv, "Alltoallv")
        sc, sd, sendtype = sv.counts, sv.displs, sv.datatype
        make_send = _given(sent_view(sv, rv.datatype, sv.counts[rank], rv.counts[rank]))
    rc, rd, out = rv.counts, rv.displs, rv.array
    return _spilled(Call(
        "alltoallv", rv.datatype, out.dtype, lambda ctx: (make_send(ctx), sc, sd, out, rc, rd),
        nbytes=0, count=None, in_place=in_place, uniform=False, counts=tuple(rc),
        send_counts=tuple(sc), count_types=(None, sendtype, None),
        truncated=None if sendtype is None else _own_cut(sc[rank], sendtype, rc[rank],
                                                         rv.datatype)), rv, sv)


def alltoallw(size: int, rank: int, sendbuf: Any, recvbuf: Any) -> Call:
    """``Alltoallw``: a count, a byte displacement and a datatype per peer on both sides
    (:func:`~mpicoll.backends.buffers.parse_w`); the schedules get one view per peer
    (:class:`~mpicoll.algorithms.datatypes.PerPeer`), each message carries its block's
    datatype.  Checked mode pairs the bytes of rank i's send block j with rank j's receive
    block i."""
    rw = parse_w(recvbuf, "recvbuf", size, writable=True)
    in_place = is_in_place(sendbuf)
    if in_place:
        sw = rw

        def make_send(ctx: Context) -> PerPeer:  # a copy of every block, in its own datatype
            out = []
            for b, c, t in zip(rw.blocks, rw.counts, rw.datatypes, strict=True):
                tmp = TypedView.of(typed_scratch(c, t), t)
                ctx.copy(b, tmp)
                out.append(tmp)
            return PerPeer(out)
    else:
        sw = parse_w(sendbuf, "sendbuf", size)
        if sw.array.size and rw.array.size and np.shares_memory(sw.array, rw.array):
            raise MPIValueError(  # check (M), as _no_alias
                MPI.ERR_BUFFER, "Alltoallw: sendbuf and recvbuf overlap; MPI forbids aliased "
                "buffers (pass MPI.IN_PLACE as sendbuf instead)")

        def make_send(ctx: Context) -> PerPeer:
            return sw.blocks
    sc, rc = list(sw.counts), list(rw.counts)
    sent = tuple(sw.nbytes(i) for i in range(size))
    got = tuple(rw.nbytes(i) for i in range(size))
    return _spilled(Call("alltoallw", MPI.BYTE, np.dtype(np.uint8),
                         lambda ctx: (make_send(ctx), sc, sw.displs, rw.blocks, rc, rw.displs),
                         nbytes=0, count=None, in_place=in_place, uniform=False, counts=got,
                         send_counts=sent), rw, None if in_place else sw)


def _scan(coll: str, name: str, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
    rb, s, in_place = _input_output(name, sendbuf, recvbuf)
    if s is not None:
        # check (M): mpi4py's "mismatch in send count and receive count"
        check_counts("recvbuf", rb.count, s.count, f"{name} (sendbuf's count)")
    mop = _op(op, rb)
    out = rb.array
    make_send = _copy_of(out) if s is None else _given(s.array)
    return _spilled(Call(coll, rb.datatype, out.dtype, lambda ctx: (make_send(ctx), out, mop),
                         nbytes=_nbytes(rb), count=out.size,
                         commutative=bool(mop.Is_commutative()), in_place=in_place, op=mop),
                    rb, s)


def scan(size: int, rank: int, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> Call:
    return _scan("scan", "Scan", sendbuf, recvbuf, op)


def exscan(size: int, rank: int, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> Call:
    return _scan("exscan", "Exscan", sendbuf, recvbuf, op)


#: collective name -> checker(size, rank, *args)
PARSERS: dict[str, Callable[..., Call]] = {
    "barrier": barrier, "bcast": bcast, "scatter": scatter, "scatterv": scatterv,
    "gather": gather, "gatherv": gatherv, "reduce": reduce, "allreduce": allreduce,
    "reduce_scatter_block": reduce_scatter_block, "reduce_scatter": reduce_scatter,
    "allgather": allgather, "allgatherv": allgatherv, "alltoall": alltoall,
    "alltoallv": alltoallv, "scan": scan, "exscan": exscan, "alltoallw": alltoallw,
}


def select(call: Call, p: int, algorithm: str | None) -> registry.Algorithm:
    """The algorithm ``call`` runs on p ranks: ``algorithm`` checked against the call's
    restrictions, or for None/``"auto"`` the registry's choice (see
    :func:`mpicoll.algorithms.registry.select`, which raises the errors).  Check (A): the
    name is an argument every rank passes, and the restrictions in use read p, the op's
    commutativity and the ranks' agreed settings only."""
    return registry.select(call.collective, p, algorithm, nbytes=call.nbytes,
                           commutative=call.commutative, count=call.count,
                           in_place=call.in_place, uniform=call.uniform)
