"""The simulator's vector engine: one schedule generator for all ranks.

Cost-only runs of the symmetric collectives (barrier, allreduce, allgather(v),
reduce_scatter(_block), alltoall) first try the **vector engine**: the schedule generator runs
ONCE, with ``ctx.rank`` the numpy vector of all p ranks, so every peer, block index and size it
computes is a vector too (SIMD lanes, one per rank), and each round is matched and timed for all
ranks with a few numpy operations.  It applies to schedules whose control flow does not depend
on the rank and whose rounds are one send and one receive per rank matched within the round
(the ring algorithms, pairwise exchanges, dissemination); anything else (``if rank < rem``
raises "truth value of an array is ambiguous", ``members.index(rank)`` fails, a round that is
not a permutation of the ranks, a two-level model whose node port several ranks of a node
use) falls back to the per-rank engine.  Where it applies it gives the per-rank engine's
clocks and counts bit for bit (``tests/unit/test_sim_vector.py`` checks every algorithm
against it), at
O(rounds) numpy calls instead of O(p * rounds) Python steps: ring allreduce on 4096 ranks is
8190 rounds (33.5 M messages) in under a second.  A branch on the rank runs where every rank
takes the same way (the rank vector's truth value is its lanes' common one: recursive
doubling's fold on a power of two; a :class:`~mpicoll.algorithms.schedule.Table`'s entries at
the rank vector keep that truth value), and the group of every rank in order is the context
itself.  A choice written as arithmetic on the rank instead of a branch (Rabenseifner's halving
step keeps the upper half if the rank's bit is set; Swing's and Bine's peer is ``r + rho`` or
``r - rho`` by parity) runs on every lane: on a power of two Rabenseifner's 4096-rank, 64 MiB
allreduce (a thousand pipelined rounds) takes 0.4 s instead of a minute walked per rank.
While every rank's clock is the same and a round's messages all have one size (a ring of
equal blocks; any schedule's rounds until uneven blocks part the ranks), under one model
without a network, the round is timed once, on one number: the same arithmetic as on p equal
numbers, so the same bits.  A rank's ports are free when it posts (its last round ended), so
only a gap, which keeps a port busy past its message's end, makes the engine follow them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.schedule import Context, Overlap, Recv, Round, Schedule, Send, Table
from ..model.alphabeta import Model
from .sim import NotVectorizableError, Simulator, TwoLevel

__all__ = ["run_vector"]

_Int = int | np.ndarray  # one value for every rank, or a vector of p values
_U64 = np.dtype(np.uint64)  # a vector's bounds as unsigned: a negative one is a huge one


def _lanes(v: Any, p: int) -> _Int:
    """``v`` (an int, or an integer vector of p entries: one per rank) checked: an int or an
    int64 vector of p entries."""
    if isinstance(v, np.ndarray) and v.dtype == np.int64 and v.shape == (p,):
        return v  # the common case, fast
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    a = np.asarray(v)
    if a.dtype.kind not in "iu" or a.shape != (p,):
        raise NotVectorizableError(f"not a per-rank integer: {v!r}")
    return a.astype(np.int64)


def _bound(v: Any, p: int) -> _Int:
    """A slice bound: :func:`_lanes`, a rank vector as a plain one (its arithmetic is faster)."""
    if type(v) is int:
        return v
    v = _lanes(v, p)
    return v.view(np.ndarray) if type(v) is _Lanes else v


class _SplitError(NotVectorizableError):
    """The lanes part ways: a branch on them, or a Python index, hash or int of them, where
    they differ.  ``keys`` (one per lane) is what parts them: the vector engine cannot follow,
    the batch engine's class walk (:func:`mpicoll.engines.batch.walk_classes`) walks each
    part on its own."""

    def __init__(self, keys: np.ndarray) -> None:
        super().__init__("a branch the ranks take different ways")
        self.keys = keys


class _Lanes(np.ndarray):
    """The vector engine's rank (and what is computed from it): one lane per rank.  Its truth
    value is the lanes' common one, so a branch on the rank runs where every rank takes the
    same way (``if rank < 2 * rem`` with rem = 0 on a power of two); where they part, it
    raises :class:`_SplitError`.  So does an index, an ``int`` or a hash of it (``table[rank]``
    of a tuple, a dict keyed by a peer) where the lanes differ; where they agree it is their
    common int."""

    def __bool__(self) -> bool:
        if not self.size:
            return False
        truth = self.view(np.ndarray).astype(bool)
        first = bool(truth.flat[0])
        if self.size > 1 and not (truth == first).all():
            raise _SplitError(truth)
        return first

    def __index__(self) -> int:
        v = self.view(np.ndarray).reshape(-1)  # (a 0-d one: np.min of a rank vector)
        if not v.size or v.dtype.kind not in "iu":
            raise TypeError("only a rank vector of integers stands for an int")
        first = int(v[0])
        if v.size > 1 and not (v == first).all():
            raise _SplitError(v)
        return first

    __int__ = __index__

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self.__index__())

    def __mod__(self, other: Any) -> Any:
        # ``(rank + k) % p``, a ring's peer and block index: the same values as numpy's
        # remainder (floor division's, as Python's), without its integer division
        if type(other) is int and other > 0 and self.dtype == np.int64:
            a = self.view(np.ndarray)
            if not other & (other - 1):  # a power of two: two's complement's low bits
                return (a & (other - 1)).view(_Lanes)
            lo, hi = a.min(), a.max()
            if -other <= lo and hi < 2 * other:
                out = a.copy() if lo >= 0 else a + other * (a < 0)
                if hi >= other:
                    out -= other * (out >= other)
                return out.view(_Lanes)
        return super().__mod__(other)

    # a rank stands for an int, which no augmented assignment changes in place: ``child +=
    # step`` makes a new vector, as it makes a new int (the list ``child`` was appended to
    # keeps the old one)
    def __iadd__(self, other: Any) -> Any:  # type: ignore[misc]
        return self + other

    def __isub__(self, other: Any) -> Any:  # type: ignore[misc]
        return self - other

    def __imul__(self, other: Any) -> Any:  # type: ignore[misc]
        return self * other

    def __ifloordiv__(self, other: Any) -> Any:  # type: ignore[misc]
        return self // other

    def __imod__(self, other: Any) -> Any:
        return self % other

    def __iand__(self, other: Any) -> Any:  # type: ignore[misc]
        return self & other

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]
        return self | other

    def __ixor__(self, other: Any) -> Any:  # type: ignore[misc]
        return self ^ other

    def __ilshift__(self, other: Any) -> Any:  # type: ignore[misc]
        return self << other

    def __irshift__(self, other: Any) -> Any:  # type: ignore[misc]
        return self >> other


def _vector(v: _Int, p: int) -> np.ndarray:
    return v if isinstance(v, np.ndarray) else np.full(p, v, np.int64)


def _uniform(v: _Int) -> _Int:
    """An int where every rank has the same value (so ``block_counts(buf.size, p)`` and
    ``range(n)`` work), else the vector."""
    if isinstance(v, int):
        return v
    first = int(v[0])
    return first if bool((v == first).all()) else v


class _Extents:
    """Cost-only stand-in for one buffer on every rank: elements ``[start, stop)`` of rank r's
    buffer (ints where all ranks agree, else vectors).  Supports what schedules do with
    buffers (slicing with int or vector bounds, ``size``, ``nbytes``, ``len``, ``dtype``);
    anything else raises.  Its vectors are never written (the engine's own; what a schedule
    gets of them is a copy), so an extents' lengths are computed once."""

    __slots__ = ("_fit", "_lengths", "dtype", "p", "start", "stop")

    def __init__(self, start: _Int, stop: _Int, dtype: np.dtype, p: int,
                 lengths: _Int | None = None) -> None:
        self.start, self.stop, self.dtype, self.p = start, stop, dtype, p
        self._lengths = lengths  # stop - start where known, else None: computed when asked
        #: the last tables :meth:`block_of` was asked about and :meth:`_fits`' answer: (counts,
        #: displs, fits, count); set when asked
        self._fit: tuple[Table, Table, bool, int | None]

    def lengths(self) -> _Int:
        """``stop - start``: each rank's element count (the engine's: not to be written)."""
        n = self._lengths
        if n is None:
            start = self.start
            n = self._lengths = self.stop if type(start) is int and start == 0 else (
                self.stop - start)
        return n

    @property
    def size(self) -> _Int:
        n = _uniform(self.lengths())  # (a vector: a copy, the schedule's own)
        return n if isinstance(n, int) else n.view(_Lanes).copy()  # a branch: the lanes' way

    @property
    def nbytes(self) -> _Int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return 1

    def __len__(self) -> int:
        n = _uniform(self.lengths())
        if not isinstance(n, int):
            raise NotVectorizableError("len() of buffers whose length differs between ranks")
        return n

    def __getitem__(self, key: Any) -> _Extents:
        """``[a:b]``, clipped as a slice of each rank's buffer; the new vectors are the
        engine's own (the bounds a schedule passes are copied, never kept)."""
        if type(key) is not slice or key.step not in (None, 1):
            raise NotVectorizableError(f"buffer index {key!r} (only [a:b] slices are vectorised)")
        length = self.lengths()
        a = 0 if key.start is None else _bound(key.start, self.p)
        b = length if key.stop is None else _bound(key.stop, self.p)
        if type(length) is int:  # one pass over a vector bound where it lies in [0, length]
            if isinstance(a, int):
                if a < 0:
                    raise NotVectorizableError("negative slice bounds")
                a = min(a, length)
            elif a.view(_U64).max() <= length:  # a negative bound is a huge unsigned one
                a = a.copy()
            else:
                a = _clip(a, length)
            if isinstance(b, int):
                if b < 0:
                    raise NotVectorizableError("negative slice bounds")
                b = max(min(b, length), a) if type(a) is int else np.maximum(min(b, length), a)
            elif b.view(_U64).max() <= length:
                b = b.copy() if type(a) is int and a == 0 else np.maximum(b, a)
            else:
                b = np.maximum(_clip(b, length), a)
        else:
            a = _clip(a, length)
            b = np.maximum(_clip(b, length), a)
        start = self.start
        if type(start) is int and start == 0:  # a whole buffer's slice (the common case)
            return _Extents(a, b, self.dtype, self.p)
        return _Extents(start + a, start + b, self.dtype, self.p)

    def block_of(self, counts: Any, displs: Any, i: Any) -> _Extents:
        """:func:`~mpicoll.algorithms.schedule.block` of this buffer: ``self[d : d + c]``
        with ``d = displs[i]``, ``c = counts[i]``.  Where every block of the two tables lies
        within the buffer (tables are immutable: asked once per pair, :meth:`_fits`) no bound
        needs clipping, so the extents are ``[d, d + c)`` as they are, and their lengths
        ``c``: the one count of a table whose counts are all alike (the tables have one
        length, so ``displs[i]`` has checked the index)."""
        fit = getattr(self, "_fit", None)  # (unset on most extents: they are never asked)
        if fit is None or fit[0] is not counts or fit[1] is not displs:
            fit = self._fit = (counts, displs, *self._fits(counts, displs))
        if fit[2]:
            start = _bound(displs[i], self.p)
            n = fit[3] if fit[3] is not None else _bound(counts[i], self.p)
            return _Extents(start, start + n, self.dtype, self.p, n)
        start = displs[i]
        return self[start : start + counts[i]]

    def _fits(self, counts: Any, displs: Any) -> tuple[bool, int | None]:
        """(every block of ``counts``/``displs``, two :class:`Table` objects of one length,
        lies within this buffer, a whole one: ``[0, n)`` on every rank; the one count where
        they are all alike, else None)."""
        if not (isinstance(counts, Table) and isinstance(displs, Table)
                and type(self.start) is int and self.start == 0 and type(self.stop) is int
                and len(counts) == len(displs) and len(counts)):
            return False, None
        c, d = np.array(counts, np.int64), np.array(displs, np.int64)
        fits = bool(c.min() >= 0 and d.min() >= 0 and (d + c).max() <= self.stop)
        return fits, int(c[0]) if fits and (c == c[0]).all() else None

    @classmethod
    def whole(cls, n: Any, dtype: np.dtype, p: int) -> _Extents:
        """Every rank's whole buffer of ``n`` elements (a vector of them copied: its own)."""
        n = _lanes(n, p)
        return cls(0, n if isinstance(n, int) else n.view(np.ndarray).copy(), dtype, p)


def _clip(v: _Int, length: _Int) -> np.ndarray:
    """A slice bound ``v`` no greater than ``length`` (one of them a vector): a new vector."""
    if (v < 0) if isinstance(v, int) else v.min() < 0:
        raise NotVectorizableError("negative slice bounds")
    return np.minimum(v, length)


class _VectorContext(Context):
    """The context of all p ranks at once: ``rank`` is ``numpy.arange(p)``."""

    def __init__(self, p: int, datatype: MPI.Datatype, dtype: np.dtype, local: Model,
                 nodes: tuple[int, ...] | None, segment_bytes: int) -> None:
        super().__init__(np.arange(p).view(_Lanes), p, datatype, dtype,  # type: ignore[arg-type]
                         nodes, segment_bytes)
        #: the clocks, shared with the group views of :meth:`group`: one float while every
        #: rank's is the same (the same arithmetic on one number as on p equal ones), else
        #: the vector of p
        self._clock: list[Any] = [0.0]
        self.local = local
        self.copies = bool(local.delta or local.copy_curve)

    @property
    def clock(self) -> Any:
        return self._clock[0]

    @clock.setter
    def clock(self, value: Any) -> None:
        self._clock[0] = value

    def copy(self, src: Any, dst: Any) -> None:
        if self.copies:  # cost-only: a copy is only its charge
            n = src.size if isinstance(src, _Extents) else np.size(src)
            self.clock += self.local.copy_time(n * self.unit)

    def reduce(self, inbuf: Any, inoutbuf: Any, op: MPI.Op) -> None:
        if not isinstance(inbuf, _Extents) or not isinstance(inoutbuf, _Extents):
            raise NotVectorizableError("reduction of a buffer that is not per-rank")
        self.clock += self.local.reduce_time(_uniform(inbuf.lengths()) * self.unit)

    def scratch(self, count: Any) -> Any:
        return _Extents.whole(count, self.dtype, self.size)

    def group(self, members: Sequence[int]) -> Context:
        """The group of every rank in rank order (a power of two's :func:`fold.group`): this
        context as a group view sees it (no node map); any other group runs per rank."""
        if len(members) != self.size or any(m != i for i, m in enumerate(members)):
            raise NotVectorizableError("a group that is not every rank in order")
        view = copy.copy(self)  # the same clocks
        view.nodes = None
        return view

    def pack(self, parts: Any) -> Any:
        raise NotVectorizableError("pack")

    def unpack(self, buf: Any, parts: Any) -> None:
        raise NotVectorizableError("unpack")


def _vectorised(arg: Any, p: int) -> Any:
    """A prepared schedule argument as the vector engine passes it: numpy buffers become
    :class:`_Extents`, integer sequences :class:`~mpicoll.schedule.Table`."""
    if isinstance(arg, np.ndarray):
        if arg.ndim != 1:
            raise NotVectorizableError("a buffer that is not 1-D")
        return _Extents.whole(arg.size, arg.dtype, p)
    if isinstance(arg, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in arg):
        return arg if isinstance(arg, Table) else Table(int(v) for v in arg)
    return arg


def _rotation(idx: np.ndarray, ranks: np.ndarray) -> int | None:
    """k where ``idx[r] == (r + k) % p`` for every rank r (a ring's peers: rank r's right or
    left neighbour), else None: :func:`_take` then gathers by two slice copies."""
    p = len(ranks)
    k = int(idx[0]) if p else 0
    if p and int(idx[-1]) == (k - 1) % p and (idx[: p - k] == ranks[k:]).all() and (
            idx[p - k :] == ranks[:k]).all():
        return k
    return None


def _take(x: np.ndarray, idx: np.ndarray, k: int | None) -> np.ndarray:
    """``x[idx]`` (a new vector), for a rotation ``idx`` (``k``: :func:`_rotation`) by two
    slice copies instead of p indexed loads (the same values)."""
    return x[idx] if k is None else np.concatenate((x[k:], x[:k]))


def _message(m: Model, n: np.ndarray) -> np.ndarray:
    """:meth:`Model.message` of each of the sizes ``n`` (bytes), the same arithmetic."""
    return np.asarray(m.message(n))


def run_vector(sim: Simulator, schedule: Callable[..., Schedule], datatype: MPI.Datatype,
               dtype: np.dtype, prepare: Callable[[Context], tuple[Any, ...]],
               prepared: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Run ``schedule`` for all ranks at once, cost-only (see the module docstring).
    ``prepared``: each rank's clock once its own arguments are prepared, where rank 0's
    preparation is not every rank's (uneven blocks: each copies its own block in).

    Returns what :meth:`Simulator.run` returns, identical to it.
    Raises :class:`NotVectorizableError` where the per-rank engine must run it instead.

    A :class:`TwoLevel` model is taken while each node's network port is used by one rank of
    the node only (one sender, one receiver of inter-node messages over the whole call, as in
    a ring over consecutive ranks): that rank's own port then orders its node's messages, and
    the shared port never delays one; otherwise the per-rank engine serves the port in order.
    """
    if sim.data:
        raise NotVectorizableError("data mode runs per rank")
    p = sim.p
    m = sim.model
    if isinstance(m, TwoLevel) and m.nic is not None:
        raise NotVectorizableError("a token-bucket NIC runs per rank (its state follows the "
                                   "order of the messages)")
    levels: tuple[Model, ...]
    levels = (m.intra, m.inter) if isinstance(m, TwoLevel) else (m,)
    fab = sim.fabric
    gap = fab.network.gap if fab is not None else None
    hop = fab.network.hop if fab is not None else 0.0
    b_in, b_out = levels[0].beta, levels[-1].beta
    nic_user = None  # a node's shared port: the two-level model's, or a network's with a gap
    if (isinstance(m, TwoLevel) and fab is None) or gap is not None:
        nic_user = {"send": np.full(p, -1, np.int64), "receive": np.full(p, -1, np.int64)}
    ctx = _VectorContext(p, datatype, dtype, sim.local, sim.nodes, sim.segment_bytes)
    isz = ctx.unit  # bytes per element on the wire (the datatype's size)
    post = 2 * sim.o_msg
    nd = None if sim.nodes is None else np.asarray(sim.nodes)
    if nd is not None:
        node_index = np.unique(nd, return_inverse=True)[1]  # node ids as 0..N-1
    ranks = np.arange(p)
    # The ports' and the messages' times: one float while every rank's is the same (a
    # round of messages of one size, under one model, leaves them so: the same arithmetic
    # as on p equal numbers, done once), else vectors of p.  A rank posts a round once its
    # last one ended (its clock is then at least ``rend``, the end of each of its messages),
    # so a port that is busy until its message ends is always free by then: the ports are
    # followed only where a gap keeps them busy longer.
    ports = gap is not None
    send_free: Any = 0.0
    recv_free: Any = 0.0
    rend: Any = 0.0
    one_cost = fab is None and nic_user is None and len(levels) == 1  # cost depends on n alone
    i64 = np.int64
    # elements each rank sent and received in the rounds timed per rank (times isz at the
    # end: the same bytes as summing each round's, one multiplication fewer a round)
    sent, got, inter = (np.zeros(p, i64) for _ in range(3))
    same_bytes = 0  # bytes every rank sent (and received) in the rounds timed as one
    rounds = 0  # every rank sends and receives one message per round
    # the last round's peers, checked: the peer objects, dest and src, and each one's
    # rotation (:func:`_rotation`)
    peers: tuple[Any, Any, np.ndarray, np.ndarray, int | None, int | None] | None = None
    args = prepare(ctx)  # its copies charge the clocks (from 0, as in Simulator.run)
    if prepared is not None:
        ctx.clock = (float(prepared[0]) if len(set(prepared)) == 1
                     else np.array(prepared, np.float64))
    ctx.clock += sim.o_call  # as Simulator.run: o_call, then 2 o_msg to post each round
    gen = schedule(ctx, *(_vectorised(a, p) for a in args))
    try:
        while True:
            c = ctx.clock
            if isinstance(c, np.ndarray):
                np.maximum(c, rend, out=c)
            elif isinstance(rend, float):
                if rend > c:
                    ctx.clock = rend
            else:
                ctx.clock = np.maximum(c, rend)
            try:
                item = next(gen)
            except StopIteration:
                break
            during = None
            rnd: Round = item.ops if isinstance(item, Overlap) else item
            if isinstance(item, Overlap):
                during = item.during
                if not rnd:
                    during()
                    continue
            if not rnd:
                continue
            if len(rnd) != 2:
                raise NotVectorizableError("a round that is not one send and one receive per rank")
            snd, rcv = rnd
            if type(snd) is Recv:
                snd, rcv = rcv, snd
            if type(snd) is not Send or type(rcv) is not Recv:
                raise NotVectorizableError("a round that is not one send and one receive per rank")
            if not isinstance(snd.buf, _Extents) or not isinstance(rcv.buf, _Extents):
                raise NotVectorizableError("a message buffer that is not per-rank")
            if peers is not None and snd.peer is peers[0] and rcv.peer is peers[1]:
                # the same (read-only) peer vectors: checked
                dest, src, kd, ks = peers[2], peers[3], peers[4], peers[5]
            else:
                dest, src = _vector(_lanes(snd.peer, p), p), _vector(_lanes(rcv.peer, p), p)
                if (dest.view(np.uint64).max() >= p  # a negative peer is a huge unsigned one
                        or src.view(np.uint64).max() >= p):
                    raise NotVectorizableError("peer out of range")
                if not (dest[src] == ranks).all():  # the receive of r matches src[r]'s send
                    raise NotVectorizableError("messages not matched within the round")
                peers = None
                kd = ks = None
                if isinstance(snd.peer, np.ndarray) and isinstance(rcv.peer, np.ndarray):
                    snd.peer.flags.writeable = False  # so that the same object is the same
                    rcv.peer.flags.writeable = False  # peers in a later round
                    kd, ks = _rotation(dest, ranks), _rotation(src, ranks)
                    peers = (snd.peer, rcv.peer, dest, src, kd, ks)
            slen, rlen = snd.buf.lengths(), rcv.buf.lengths()
            if one_cost and isinstance(ctx.clock, float) and isinstance(rend, float):
                slen, rlen = _uniform(slen), _uniform(rlen)
                if isinstance(slen, int) and isinstance(rlen, int):
                    # every rank alike: the arithmetic below, on one number for all
                    nb = slen * isz
                    if nb > rlen * isz:
                        raise NotVectorizableError("truncation (the per-rank engine reports it)")
                    t = ctx.clock = ctx.clock + post
                    rend = t + levels[0].message(nb)  # its start is t: ports free, all alike
                    rounds += 1
                    same_bytes += nb
                    if nd is not None:
                        inter += np.where(nd[dest] != nd, nb, 0)
                    if during is not None:
                        during()
                    continue
            if not isinstance(ctx.clock, np.ndarray):  # from here on, per rank
                ctx.clock = np.full(p, ctx.clock)
            if not isinstance(rend, np.ndarray):
                rend = np.full(p, rend)
            if ports and not isinstance(send_free, np.ndarray):
                send_free = np.full(p, send_free)
                recv_free = np.full(p, recv_free)
            arriving = _take(_vector(slen, p), src, ks)  # elements arriving at each rank
            if isz and (arriving > rlen).any():  # (as bytes: times isz on both sides)
                raise NotVectorizableError("truncation (the per-rank engine reports it)")
            n = arriving * isz  # bytes arriving at each rank
            if post:  # + 0.0 changes no (non-negative) clock: skipped
                ctx.clock += post
            t = ctx.clock
            start = _take(t, src, ks)
            np.maximum(start, t, out=start)  # max(t[src], t), into the new vector
            if ports:
                start = np.maximum(start, np.maximum(_take(send_free, src, ks), recv_free))
            crossing = None if nd is None else nd[src] != nd
            if nic_user is not None:
                assert crossing is not None
                for role, users in (("send", src[crossing]), ("receive", ranks[crossing])):
                    nodes, user = node_index[users], nic_user[role]
                    if (len(np.unique(nodes)) < len(nodes)
                            or ((user[nodes] != -1) & (user[nodes] != users)).any()):
                        raise NotVectorizableError(
                            f"two ranks of a node {role} across nodes (the shared port is "
                            "served in order by the per-rank engine)")
                    user[nodes] = users
            if len(levels) == 1:
                cost = _message(levels[0], n)  # indexed by receiver, as cost(s, d, n)
            else:
                assert crossing is not None
                cost = np.where(crossing, _message(levels[1], n), _message(levels[0], n))
            busy = None
            if fab is not None:  # the network's terms, as Simulator.run charges them
                assert crossing is not None
                f, h = fab.round(src, ranks, n)
                b = b_in if b_in == b_out else np.where(crossing, b_out, b_in)
                if hop:  # + 0.0 changes no (non-negative) time: skipped
                    cost = cost + h * hop
                cost = cost + (f - 1.0) * n * b
                if gap is not None:
                    busy = start + np.maximum(gap, n * b * f)
            end = start + cost
            if busy is None:
                busy = end
            if ports:
                send_free[src] = busy
                recv_free[:] = busy
            rend = _take(end, dest, kd)
            np.maximum(end, rend, out=rend)  # at least the last rend: the clock was
            rounds += 1
            sent += slen
            got += arriving
            if nd is not None:
                inter += np.where(nd[dest] != nd, slen * isz, 0)
            if during is not None:  # while the round is in flight: clock from t on, as per rank
                during()
    finally:
        gen.close()
    clocks = ctx.clock if isinstance(ctx.clock, np.ndarray) else np.full(p, ctx.clock)
    out = {
        "clocks": clocks, "messages_sent": np.full(p, rounds, i64),
        "bytes_sent": sent * isz + same_bytes, "messages_recv": np.full(p, rounds, i64),
        "bytes_recv": got * isz + same_bytes, "inter_bytes_sent": inter,
    }
    if fab is not None:
        out["link_bytes"] = fab.link_bytes.copy()
    return out

