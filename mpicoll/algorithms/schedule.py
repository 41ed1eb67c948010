"""The schedule language every hand-rolled algorithm is written in.

An algorithm is a generator function ``fn(ctx, *args)``.  It yields *rounds*: tuples of
:class:`Send` and :class:`Recv` operations (numpy views and peer ranks) that may all be in flight
at once; between rounds it does its local work through the context: :meth:`Context.copy`,
:meth:`Context.reduce` and :meth:`Context.scratch`.  It never touches MPI itself, so the same
source runs on every engine:

* the blocking MPI engine posts a round's ``Irecv``/``Isend`` and ``Waitall``\\s it;
* the non-blocking MPI engine does the same one round per progress step, driven by
  ``Test``/``Wait`` on the returned request (the libNBC / MPICH ``sched`` model);
* the simulator matches all ranks' rounds in memory and advances a clock per rank.

A round may also carry local work that runs while its messages are in flight (an
:class:`Overlap`, rule 3): a segmented schedule posts the next segment's transfers, reduces the
segment already received, then waits, so reduction (gamma) overlaps transfer (beta).

Rules a schedule keeps, so that every engine can run it:

1. All data movement between a rank's own buffers goes through ``ctx.copy``/``ctx.reduce``
   (the cost-only simulator replaces them with clock arithmetic).
2. Sends and receives between one pair of ranks are matched in the order they are yielded
   (MPI's non-overtaking rule); both sides yield the same number of messages per round.
3. A buffer yielded for sending is not written, and one yielded for receiving is not read,
   until the round has completed (the engine resumes the generator only then).  This holds
   for what is in flight too: a round may carry local work to run *while* it is in flight
   (``yield ctx.overlap(round, during)``, an :class:`Overlap`); every engine posts the round,
   runs ``during()``, then waits.  ``during`` does local work only (``ctx.copy``/``ctx.reduce``
   on buffers a previous round completed: never a message), and it touches no buffer of the
   round in flight, neither its send buffers nor its receive buffers (the simulator checks
   this in data mode).  A :class:`Pipeline` builds such rounds.
4. Zero-length messages are still sent: both sides then agree without looking at counts.
5. Operations are made with ``ctx.send``/``ctx.recv``/``ctx.sendrecv`` (never ``Send(...)``
   directly), so :meth:`Context.relative` can renumber ranks for rooted trees.
6. Counts are in this rank's own units.  MPI matches type signatures, not datatypes, so the
   ranks may pass different datatypes (and counts) of one signature: a schedule sizes a
   block, a scratch buffer or a message from the tables it is given for that buffer (the
   receive side's counts for the receive buffer and scratch, the send side's for the send
   buffer), never from another buffer's length, and never splits one rank's block in a way
   another rank cannot reproduce (Bcast, which splits, runs on bytes).  A send buffer in a
   datatype other than the call's is a
   :class:`~mpicoll.algorithms.datatypes.TypedView` carrying its own: messages of it carry
   that datatype, copies from it go by signature (:meth:`Context.copy`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np
from mpi4py import MPI

from .datatypes import PerPeer, TypedView, is_derived, typed_copy, typed_scratch

__all__ = [
    "Context",
    "Overlap",
    "Pipeline",
    "Recv",
    "Round",
    "Schedule",
    "Send",
    "Table",
    "block",
    "block_counts",
    "blocks",
    "displacements",
    "equal_blocks",
    "is_pof2",
    "pof2_floor",
    "segment",
    "segment_bounds",
    "segment_count",
    "segments",
    "span",
    "split",
]


#: bytes per pipeline segment when ``MPICOLL_SEGMENT_SIZE`` is not set (64 KiB)
DEFAULT_SEGMENT_BYTES = 65536


class Send(NamedTuple):
    """Send ``buf`` (a 1-D numpy view) to rank ``peer``."""

    buf: np.ndarray
    peer: int


class Recv(NamedTuple):
    """Receive into ``buf`` (a 1-D numpy view) from rank ``peer``."""

    buf: np.ndarray
    peer: int


Round = tuple[Send | Recv, ...]

#: ``Send(buf, peer)`` is ``_op(Send, (buf, peer))`` without the named tuple's Python-level
#: ``__new__`` (a simulated call makes millions: a third of their cost)
_op = tuple.__new__


class Overlap(NamedTuple):
    """A round with local work to do while it is in flight (rule 3 of the module docstring).

    Engines post ``ops``, call ``during()``, then wait for ``ops``.  ``during`` must not
    touch (read or write) any buffer of ``ops``, nor communicate.
    """

    ops: Round
    during: Callable[[], None]


Schedule = Generator[Round | Overlap, None, None]


#: numpy's loops that may stand for a predefined op, by (dtype kind, itemsize, op handle):
#: MPI computes ``inoutbuf[i] = inbuf[i] op inoutbuf[i]`` elementwise, and these ufuncs
#: compute the same function.  Whether one gives *this* MPI library's bits (which operand's
#: NaN an add returns, a MAX of NaN, Open MPI 5.0's vectorised 8- and 16-bit SUM that
#: saturates where C wraps) is asked of the library itself, once per (datatype, op) and
#: process, by :func:`numpy_reduction`; a candidate that differs anywhere is never used.
UFUNCS: dict[tuple[str, int, int], Any] = {
    **{(kind, size, op.handle): fn for kind in "iu" for size in (1, 2, 4, 8)
       for op, fn in ((MPI.SUM, np.add), (MPI.PROD, np.multiply), (MPI.MAX, np.maximum),
                      (MPI.MIN, np.minimum), (MPI.BAND, np.bitwise_and),
                      (MPI.BOR, np.bitwise_or), (MPI.BXOR, np.bitwise_xor))},
    **{("f", size, op.handle): fn for size in (4, 8)
       for op, fn in ((MPI.SUM, np.add), (MPI.PROD, np.multiply), (MPI.MAX, np.maximum),
                      (MPI.MIN, np.minimum))},
}
#: bytes from which a reduction may run numpy's loop: below, its call and the
#: ``np.errstate`` that keeps it silent (MPI raises and warns about nothing) cost more than
#: ``MPI_Reduce_local`` saves (MPICH's is half numpy's speed at 1 MiB here)
UFUNC_BYTES = 256 << 10

#: (datatype handle, op handle) -> the numpy reduction that gives the library's bits, or None
_AGREED: dict[tuple[int, int], Callable[[Any, Any], Any] | None] = {}


def _ufunc_reduce(ufunc: Any, swapped: bool, a: np.ndarray, b: np.ndarray) -> None:
    """``b = a op b`` by ``ufunc`` (``b op a`` in the ufunc's operand order if ``swapped``:
    the order whose NaN the library returns), with numpy's floating-point errors off."""
    with np.errstate(all="ignore"):
        if swapped:
            ufunc(b, a, out=b)
        else:
            ufunc(a, b, out=b)


def _probe_values(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Two vectors meeting every pair of a type's edge values (extremes, signed zeros,
    infinities, NaNs of both signs and two payloads, subnormals) and then random ones, long
    enough for a library's vector loops and their tails."""
    rng = np.random.default_rng(20261201)
    if dtype.kind in "iu":
        ints = np.iinfo(dtype)
        edge = np.array([ints.min, ints.max, 0, 1, ints.max // 2 + 1, ints.min + 1], dtype)
        body = rng.integers(ints.min, ints.max, 1000, dtype=dtype, endpoint=True)
        body2 = rng.integers(ints.min, ints.max, 1000, dtype=dtype, endpoint=True)
    else:
        bits = np.dtype(f"u{dtype.itemsize}")
        nans = np.array([0x7FC00001, 0xFFC00002] if dtype.itemsize == 4 else
                        [0x7FF8000000000001, 0xFFF8000000000002], bits).view(dtype)
        info = np.finfo(dtype)
        edge = np.concatenate([np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, info.max,
                                         -info.max, info.tiny / 4, 1e-30], dtype), nans])
        scale = rng.choice([1e-30, 1.0, 1e30], 1000)
        body = (rng.standard_normal(1000) * scale).astype(dtype)
        body2 = (rng.standard_normal(1000) * scale[::-1]).astype(dtype)
    a = np.concatenate([np.repeat(edge, edge.size), body])
    b = np.concatenate([np.tile(edge, edge.size), body2])
    return a, b


def numpy_reduction(datatype: MPI.Datatype, dtype: np.dtype, op: MPI.Op
                    ) -> Callable[[Any, Any], Any] | None:
    """numpy's loop for ``op`` on ``datatype`` (a predefined datatype of elements ``dtype``)
    as ``fn(inbuf, inoutbuf)``, if it gives ``op.Reduce_local``'s result bit for bit on every
    pair of edge values and on random ones (asked of the library once, then remembered);
    None otherwise (not a :data:`UFUNCS` candidate, or the library's bits differ)."""
    key = (datatype.handle, op.handle)
    if key in _AGREED:
        return _AGREED[key]
    found = None
    ufunc = UFUNCS.get((dtype.kind, dtype.itemsize, op.handle))
    if ufunc is not None:
        a, b = _probe_values(dtype)
        want = b.copy()
        op.Reduce_local([a, datatype], [want, datatype])
        for swapped in (True, False):
            got = b.copy()
            _ufunc_reduce(ufunc, swapped, a, got)
            if got.tobytes() == want.tobytes():
                found = partial(_ufunc_reduce, ufunc, swapped)
                break
    _AGREED[key] = found
    return found


class Context:
    """What a schedule sees of its engine: rank, size and local data operations.

    Attributes:
        rank: this rank in the (private) communicator, 0 <= rank < size.
        size: number of ranks p.
        datatype: the MPI datatype of every element this call moves.
        dtype: the numpy dtype of those elements (``np.dtype((np.void, extent))`` for a
            derived datatype: see :mod:`mpicoll.algorithms.datatypes`).
        derived: the datatype is derived (local work then goes through MPI, never numpy).
        unit: bytes of data per element on the wire (``datatype.Get_size()``).
    """

    def __init__(self, rank: int, size: int, datatype: MPI.Datatype, dtype: np.dtype,
                 nodes: tuple[int, ...] | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.rank = rank
        self.size = size
        self.datatype = datatype
        self.dtype = dtype
        self.derived = is_derived(datatype)
        self.unit = int(datatype.Get_size()) if self.derived else dtype.itemsize
        #: node id of every rank (node-aware algorithms); None: one rank per node
        self.nodes = nodes
        #: bytes per pipeline segment (the backend's ``MPICOLL_SEGMENT_SIZE``, read once)
        self.segment_bytes = segment_bytes

    # --- communication (yielded, never executed here) ---
    def send(self, buf: np.ndarray, dest: int) -> Send:
        return _op(Send, (buf, dest))

    def recv(self, buf: np.ndarray, source: int) -> Recv:
        return _op(Recv, (buf, source))

    def sendrecv(self, sbuf: np.ndarray, dest: int, rbuf: np.ndarray, source: int) -> Round:
        """A round of one send and one receive (``MPI_Sendrecv``)."""
        return (_op(Recv, (rbuf, source)), _op(Send, (sbuf, dest)))

    def overlap(self, ops: Round, during: Callable[[], None]) -> Overlap:
        """``ops`` with ``during()`` to run while they are in flight (see :class:`Overlap`)."""
        return Overlap(ops, during)

    def relative(self, root: int) -> Context:
        """This context seen from ``root``: ranks renumbered ``(rank - root) % size``.

        A schedule written for root 0 runs for any root through it (tree algorithms), and a
        sub-schedule can be run on blocks indexed by relative rank.
        """
        return _Relative(self, root) if root % self.size else self

    def group(self, members: Sequence[int]) -> Context:
        """This context restricted to ``members`` (ranks of this context, in the new order):
        rank i of the group is ``members[i]``.  This rank must be a member.  Node-aware
        algorithms run flat sub-schedules on the node groups and the leaders' group this way."""
        return _Group(self, tuple(members))

    def node_groups(self) -> tuple[list[list[int]], list[int]]:
        """(members of each node in rank order, node index of each rank), from ``nodes``."""
        nodes = self.nodes if self.nodes is not None else tuple(range(self.size))
        order: dict[int, int] = {}
        groups: list[list[int]] = []
        index = []
        for r, nd in enumerate(nodes):
            if nd not in order:
                order[nd] = len(groups)
                groups.append([])
            groups[order[nd]].append(r)
            index.append(order[nd])
        return groups, index

    # --- local work between rounds ---
    def copy(self, src: np.ndarray, dst: np.ndarray) -> None:
        """``dst[:] = src``; for a derived datatype only the bytes of its typemap (the holes
        of ``dst`` stay untouched).  A :class:`~mpicoll.algorithms.datatypes.TypedView` on
        either side (a buffer in a datatype other than the call's: a send buffer whose type
        signature, not its datatype, matches the receive side's) or two lengths that differ
        copy by type signature (:func:`~mpicoll.algorithms.datatypes.typed_copy`: what does
        not fit is dropped, as MPI's local copy drops it)."""
        if src.size:
            if (self.derived or isinstance(src, TypedView) or isinstance(dst, TypedView)
                    or src.size != dst.size):
                typed_copy(src, dst, self.datatype)
            else:
                np.copyto(dst, src)

    def reduce(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op) -> None:
        """``inoutbuf = inbuf op inoutbuf`` with MPI's semantics (``inbuf`` on the left), on
        the call's datatype (derived ones included: a user op sees exactly what MPI gives it),
        by :meth:`reducer`."""
        if inbuf.size:
            fn, a, b = self.reducer(inbuf, inoutbuf, op)
            fn(a, b)

    def reducer(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op
                ) -> tuple[Callable[[Any, Any], Any], Any, Any]:
        """What computes ``inoutbuf = inbuf op inoutbuf``: ``(fn, a, b)``, called ``fn(a, b)``
        (the compiled plans keep it).  From :data:`UFUNC_BYTES`, numpy's loop where it gives
        this library's ``MPI_Reduce_local`` result bit for bit (:func:`numpy_reduction`: about
        twice as fast as MPICH's at 1 MiB), else ``op.Reduce_local`` on the call's datatype."""
        n = inbuf.size
        if (n * self.unit >= UFUNC_BYTES and not self.derived and type(inbuf) is np.ndarray
                and op.is_predefined):
            fn = numpy_reduction(self.datatype, self.dtype, op)
            if fn is not None:
                return fn, inbuf, inoutbuf
        return op.Reduce_local, [inbuf, n, self.datatype], [inoutbuf, n, self.datatype]

    def scratch(self, count: int) -> np.ndarray:
        """A new, uninitialised 1-D buffer of ``count`` elements of this call's dtype (a
        derived datatype: sized by its true extent, see
        :func:`~mpicoll.algorithms.datatypes.typed_scratch`)."""
        if self.derived:
            return typed_scratch(count, self.datatype)
        return np.empty(count, self.dtype)

    def nbytes(self, buf: np.ndarray) -> int:
        """Bytes of data in ``buf`` (what a message of it carries): ``len(buf) * unit``."""
        return buf.size * self.unit

    def pack(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """Copy several views into one new contiguous buffer (for a single message)."""
        out = self.scratch(sum(int(p.size) for p in parts))
        off = 0
        for p in parts:
            self.copy(p, out[off : off + p.size])
            off += p.size
        return out

    def unpack(self, buf: np.ndarray, parts: Sequence[np.ndarray]) -> None:
        """Inverse of :meth:`pack`: scatter ``buf`` back into the views ``parts``."""
        off = 0
        for p in parts:
            self.copy(buf[off : off + p.size], p)
            off += p.size


class _View(Context):
    """A renumbering view of another context: rank ``i`` here is ``self._to_base(i)`` there.

    Communication goes to the base context with translated peers; local work is the base's.
    """

    def __init__(self, base: Context, rank: int, size: int) -> None:
        super().__init__(rank, size, base.datatype, base.dtype, None, base.segment_bytes)
        self._base = base

    def _to_base(self, peer: int) -> int:
        raise NotImplementedError

    def send(self, buf: np.ndarray, dest: int) -> Send:
        return self._base.send(buf, self._to_base(dest))

    def recv(self, buf: np.ndarray, source: int) -> Recv:
        return self._base.recv(buf, self._to_base(source))

    def sendrecv(self, sbuf: np.ndarray, dest: int, rbuf: np.ndarray, source: int) -> Round:
        return (self.recv(rbuf, source), self.send(sbuf, dest))

    def copy(self, src: np.ndarray, dst: np.ndarray) -> None:
        self._base.copy(src, dst)

    def reduce(self, inbuf: np.ndarray, inoutbuf: np.ndarray, op: MPI.Op) -> None:
        self._base.reduce(inbuf, inoutbuf, op)

    def scratch(self, count: int) -> np.ndarray:
        return self._base.scratch(count)


class _Group(_View):
    """A sub-group of another context (see :meth:`Context.group`)."""

    def __init__(self, base: Context, members: tuple[int, ...]) -> None:
        rank = base.rank
        if isinstance(rank, np.ndarray):  # a vector of ranks (the simulator's): each's place
            place = np.full(base.size, -1, np.int64)
            place[list(members)] = np.arange(len(members))
            rank = place[rank.view(np.ndarray)]
            if (rank < 0).any():
                raise ValueError("a rank that is not a member of the group")
            rank = rank.view(type(base.rank))
            members = Table(members)
        else:
            rank = members.index(rank)
        super().__init__(base, rank, len(members))
        self._members = members

    def _to_base(self, peer: int) -> int:
        return self._members[peer]


class _Relative(_View):
    """Ranks renumbered from a root (see :meth:`Context.relative`)."""

    def __init__(self, base: Context, root: int) -> None:
        super().__init__(base, (base.rank - root) % base.size, base.size)
        self._root = root

    def _to_base(self, peer: int) -> int:
        return (peer + self._root) % self.size

    def relative(self, root: int) -> Context:
        return self._base.relative((root + self._root) % self.size)


class Table(tuple[int, ...]):
    """A tuple of per-block integers (counts, displacements) that can also be indexed by an
    integer numpy array of block indices, giving the array of entries (or, where the table's
    entries are all alike, that one int: the vector engine takes an int as every rank's value,
    and skips the per-rank arithmetic).

    Plain ``int`` indexing and slicing behave exactly as a tuple's.  The array form is what
    lets the simulator's vector engine run a schedule once for all ranks at the same time
    (``counts[(rank - s) % p]`` with ``rank`` the vector of every rank; see
    :mod:`mpicoll.sim`).
    """

    _array: np.ndarray
    _same: int | None  # the one entry of a table whose entries are all alike, else None

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, np.ndarray) or not i.ndim:  # an int or a slice: a tuple's
            return tuple.__getitem__(self, i)
        try:  # (a vector of indices is tested first: tuple's TypeError costs microseconds)
            arr, same = self._array, self._same
        except AttributeError:
            arr = self._array = np.array(self, dtype=np.int64)
            same = self._same = (int(arr[0]) if arr.size and (arr == arr[0]).all()
                                 else None)
        if same is not None and i.ndim == 1 and i.size and i.dtype.kind in "iu":
            v = i.view(np.ndarray)  # every entry alike: one int stands for them all
            if not (v.dtype == np.int64 and v.view(np.uint64).max() < arr.size) and (
                    v.max() >= arr.size or v.min() < -arr.size):  # (all in [0, size): one pass)
                raise IndexError(f"index out of range for a table of {arr.size}")
            return same
        out = arr[i]  # entries of a rank vector stay one (its lanes' truth value)
        return out if type(i) is np.ndarray else out.view(type(i))


@lru_cache(maxsize=64)
def block_counts(n: int, p: int) -> Table:
    """Split ``n`` elements into ``p`` blocks of ``n//p`` or ``n//p + 1`` (the first ``n%p``).

    Cached: every rank of a simulated call asks for the same split."""
    q, r = divmod(n, p)
    return Table(q + (i < r) for i in range(p))


def equal_blocks(n: int, p: int) -> tuple[Table, Table]:
    """(counts, displs) of p back-to-back blocks of n elements each."""
    counts = Table((n,) * p)
    return counts, displacements(counts)


def displacements(counts: Sequence[int]) -> Table:
    """Running sum of ``counts``, starting at 0 (contiguous blocks in rank order)."""
    if isinstance(counts, tuple):
        return _displacements(counts)
    return _displacements.__wrapped__(tuple(counts))


@lru_cache(maxsize=64)
def _displacements(counts: tuple[int, ...]) -> Table:
    out, off = [], 0
    for c in counts:
        out.append(off)
        off += c
    return Table(out)


def is_pof2(p: int) -> bool:
    return p > 0 and p & (p - 1) == 0


def pof2_floor(p: int) -> int:
    """Largest power of two <= p."""
    return 1 << (p.bit_length() - 1)


def block(buf: np.ndarray, counts: Sequence[int], displs: Sequence[int], i: int) -> np.ndarray:
    """Block ``i`` of ``buf``: its ``counts[i]`` elements at ``displs[i]`` (a view); of a
    :class:`~mpicoll.algorithms.datatypes.PerPeer` (Alltoallw), its own view ``buf[i]``; of
    a buffer with a ``block_of(counts, displs, i)`` method (the simulator vector engine's
    stand-in for every rank's buffer: it knows when no block needs clipping), that."""
    if type(buf) is not np.ndarray:  # (a plain array, the common case, skips the tests)
        if isinstance(buf, PerPeer):
            return buf[i]
        own = getattr(buf, "block_of", None)
        if own is not None:
            return own(counts, displs, i)
    start = displs[i]  # looked up once (a lookup by a rank vector is a gather of p entries)
    return buf[start : start + counts[i]]


def blocks(buf: np.ndarray, counts: Sequence[int], displs: Sequence[int],
           ranks: Sequence[int]) -> list[np.ndarray]:
    """The views :func:`block` of ``buf`` for each block index in ``ranks``."""
    return [block(buf, counts, displs, i) for i in ranks]


def span(buf: np.ndarray, counts: Sequence[int], displs: Sequence[int], lo: int, hi: int,
         base: int = 0) -> np.ndarray:
    """Blocks ``lo .. hi-1`` of ``buf`` as one view, for blocks laid out back to back (block
    ``i`` at ``displs[i] - base``).  Empty if ``lo >= hi``."""
    if lo >= hi:
        return buf[:0]
    return buf[displs[lo] - base : displs[hi - 1] + counts[hi - 1] - base]


def contiguous_span(counts: Sequence[int], displs: Sequence[int], lo: int, hi: int) -> Any:
    """(start, stop) if blocks lo..hi-1 are laid out back to back, else None."""
    for i in range(lo, hi - 1):
        if displs[i] + counts[i] != displs[i + 1]:
            return None
    if lo >= hi:
        return (0, 0)
    return (displs[lo], displs[hi - 1] + counts[hi - 1])


def segment_count(ctx: Context, seg: int = 0) -> int:
    """Elements per pipeline segment: ``seg`` bytes (an algorithm's ``seg`` parameter), or for
    0 ``ctx.segment_bytes`` (the backend's ``MPICOLL_SEGMENT_SIZE``, default
    :data:`DEFAULT_SEGMENT_BYTES`), at least one element.

    It reads the segment size (agreed at construction) and ``ctx.unit``, the element's size:
    the same on every rank where a segmented schedule runs (a reduction's datatype, which MPI
    requires to agree; a Bcast, which runs on bytes); a datatype of size 0 counts as 1 byte
    (it moves nothing)."""
    return max(1, (seg or ctx.segment_bytes) // max(1, ctx.unit))


def segments(ctx: Context, count: Any) -> int:
    """How many segments of at most :func:`segment_count` elements the largest of ``count``
    (an int, or per-rank ints in the vector engine) needs: at least 1."""
    top = int(np.max(count)) if type(count) is np.ndarray else count
    seg = ctx.segment_bytes // max(1, ctx.unit)  # segment_count(ctx), inlined: once a call
    return 1 if top <= seg else -(-top // max(1, seg))


def segment(start: Any, count: Any, nseg: int, j: int) -> tuple[Any, Any]:
    """(start, stop) of segment ``j`` of ``nseg`` near-equal segments of the ``count`` elements
    at ``start`` (the first ``count % nseg`` one larger, as :func:`block_counts`).  Works on
    per-rank integer vectors too (the vector engine)."""
    if nseg == 1:
        return start, start + count
    q, r = divmod(count, nseg)
    lo = start + j * q + (j < r) * j + (j >= r) * r
    return lo, lo + q + (j < r)


@lru_cache(maxsize=256)
def segment_bounds(start: int, count: int, nseg: int) -> tuple[tuple[int, int], ...]:
    """(start, stop) of every segment of :func:`segment`, in order.

    Cached: every rank of a simulated call asks for the same few splits."""
    return tuple(segment(start, count, nseg, j) for j in range(nseg))


def split(buf: np.ndarray, nseg: int) -> list[np.ndarray]:
    """The ``nseg`` segment views of ``buf`` (:func:`segment`); ``[buf]`` itself for one."""
    if nseg == 1:
        return [buf]
    n = buf.size
    if type(n) is int:
        return [buf[a:b] for a, b in segment_bounds(0, n, nseg)]
    return [buf[a:b] for a, b in (segment(0, n, nseg, j) for j in range(nseg))]  # per-rank n


class Pipeline:
    """The local work of a segmented schedule, run while the next round is in flight.

    ``yield pipe.round(ops)`` instead of ``yield ops``, then ``pipe.then(fn, *args)`` for the
    work on what that round received (``fn(*args)``, e.g. ``ctx.reduce``); ``pipe.flush()``
    after the last round.  The work registered after one round runs during the next when
    ``round(ops, overlaps=True)`` (the caller vouches that the work touches no buffer of
    ``ops``: rule 3), else before ``ops`` is posted.  Every work still runs after its own
    round and before the next one's work: overlapping changes when local work runs, never what
    it computes.  The rounds must be built from indices only (the previous round's work may
    not have run yet).
    """

    __slots__ = ("_args", "_fn")

    def __init__(self) -> None:
        self._fn: Callable[..., None] | None = None
        self._args: tuple[Any, ...] = ()

    def round(self, ops: Round, overlaps: bool = True) -> Round | Overlap:
        """``ops``, carrying the pending work where ``overlaps`` (else that work runs now)."""
        fn = self._fn
        if fn is None:
            return ops
        self._fn = None
        if overlaps:
            return _op(Overlap, (ops, partial(fn, *self._args)))
        fn(*self._args)
        return ops

    def then(self, fn: Callable[..., None], *args: Any) -> None:
        """Register ``fn(*args)``: the work on what the round just yielded received."""
        if self._fn is not None:
            self.flush()
        self._fn, self._args = fn, args

    def flush(self) -> None:
        """Run the pending work now (after the last round)."""
        fn = self._fn
        if fn is not None:
            self._fn = None
            fn(*self._args)
