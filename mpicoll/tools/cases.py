"""Test and benchmark cases: every collective's arguments on a backend and the output expected.

One :class:`Case` is one collective call as every rank makes it: the collective, the element
``count``, the dtype, the op, the root, in-place or not, and the number of ranks ``P``.  It
allocates its buffers once (:meth:`Case.build`), fills them with deterministic integer-valued
inputs (:meth:`Case.reset`), returns a callable that runs it on a backend with a chosen algorithm
(:meth:`Case.call`), hands back this rank's output (:meth:`Case.result`) and computes, with NumPy
from the same inputs of every rank, the exact output this rank must see
(:meth:`Case.expected`).  ``mpicoll bench``, ``mpicoll verify`` and the simulator are built on it.

The inputs and their exact reduction are :mod:`mpicoll.tools.inputs`'s, the type and op
names :mod:`mpicoll.tools.dtypes`'s, the comparison :mod:`mpicoll.tools.compare`'s.

``count`` is the collective's own count argument, as MPI names it:

==========================  ===================================================================
collective                  ``count`` is
==========================  ===================================================================
bcast                       elements of the buffer
reduce, allreduce, scan,    elements of the vector each rank contributes
exscan
scatter, gather,            elements of one block (one rank's share): sendcount = recvcount
allgather, alltoall,
reduce_scatter_block
scatterv, gatherv,          base count of one block; with ``uniform=False`` block ``i`` holds
allgatherv, alltoallv,      ``max(0, count + i % 3 - 1)`` elements (alltoallv: ``(i + j) % 3``),
reduce_scatter, alltoallw   with a one-element gap between blocks (not reduce_scatter, whose
                            blocks are contiguous by definition); alltoallw is alltoallv with
                            a datatype per peer (the case's) and displacements in bytes
barrier                     unused (0)
==========================  ===================================================================
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..algorithms.collectives import BY_NAME, RECORDS
from .compare import compare
from .dtypes import PAIR_DTYPES, dtype_op_problem, mpi_datatype, mpi_op, numpy_dtype, per_element
from .inputs import data_input, reduce_stack, reduction_input

__all__ = [
    "BLOCK_COLLECTIVES",
    "IN_PLACE_COLLECTIVES",
    "REDUCTIONS",
    "ROOTED",
    "V_COLLECTIVES",
    "Case",
    "count_for",
    "method_name",
]

#: Collectives whose ``count`` is one block of ``P`` (sizes in bytes are per block x P).
BLOCK_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.blocks)
#: Collectives with a root.
ROOTED: frozenset[str] = frozenset(c.name for c in RECORDS if c.rooted)
#: Collectives that reduce with an op.
REDUCTIONS: frozenset[str] = frozenset(c.name for c in RECORDS if c.reduction)
#: Collectives that accept ``MPI.IN_PLACE`` (bcast is in place by nature: the flag is moot).
IN_PLACE_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.in_place)
#: Collectives whose counts may differ per rank (``uniform`` applies).
V_COLLECTIVES: frozenset[str] = frozenset(c.name for c in RECORDS if c.vector)

#: Sentinel written where a call must not write (gaps of v-variants, receive buffers).
_SENTINEL = 77


def method_name(collective: str, nonblocking: bool = False) -> str:
    """Backend method of a collective: ``reduce_scatter_block`` -> ``Reduce_scatter_block``."""
    return BY_NAME[collective].method_for(nonblocking)


def count_for(coll: str, size: int, p: int, itemsize: int) -> int:
    """The count argument for message size S = ``size`` bytes (S as :meth:`Case.nbytes`).

    One element of ``itemsize`` bytes per ``itemsize`` bytes of S; block collectives
    (:data:`mpicoll.BLOCK_COLLECTIVES`) split S into P blocks.  Rounded down to whole
    elements, at least one (a block); barrier: 0.
    """
    if coll == "barrier":
        return 0
    blocks = p if coll in BLOCK_COLLECTIVES else 1
    return max(1, size // (blocks * itemsize))


# --------------------------------------------------------------------------------------------
# the case


@dataclass
class Case:
    """One collective call as every rank makes it, with its buffers on this rank.

    Attributes:
        collective: registry collective name (see :data:`mpicoll.registry.COLLECTIVES`).
        count: the collective's count argument (module docstring gives its meaning).
        dtype: a name of :data:`DTYPES`.
        op: a name of :data:`OPS` (reductions only; ignored otherwise).
        root: root rank (rooted collectives only).
        in_place: use ``MPI.IN_PLACE`` where the collective accepts it.
        size: number of ranks P.
        rank: this rank.
        uniform: v-variants: equal counts on every rank (False: counts differ per rank).
        gaps: see the attribute's comment.
        op_object: see the attribute's comment.
    """

    collective: str
    count: int
    dtype: str = "float64"
    op: str = "sum"
    root: int = 0
    in_place: bool = False
    size: int = 1
    rank: int = 0
    uniform: bool = True
    #: varying counts of a v-variant: a one-element gap between blocks, so a write outside a
    #: block is caught (False: packed blocks passed as ``[buf, counts]``, the simulator's form)
    gaps: bool = True
    #: an ``MPI.Op`` to pass instead of the named ``op``'s (a caller's own op); the inputs stay
    #: those made for ``op`` (:meth:`expected` still reduces with the named one)
    op_object: Any = None
    #: ``alloc(n, dtype)`` -> an array of ``n`` elements to use as a buffer (None: ``np.empty``):
    #: bench's patterns put the buffers in a ``bytearray``, ``array.array`` or ``mmap``
    alloc: Callable[[int, np.dtype[Any]], np.ndarray[Any, Any]] | None = field(
        default=None, repr=False)
    _b: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    #: derived dtypes: the buffers MPI sees (the values of ``_b`` at the typemap's positions)
    _host: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def per_element(self) -> int:
        """Base values per element of the datatype (1 for a predefined one): for a derived
        dtype name every count of the case (``count`` included) is in base values, a multiple
        of this; the call passes counts in elements of the datatype."""
        return per_element(self.dtype)

    # ---- shape of the call -------------------------------------------------------------

    @property
    def np_dtype(self) -> np.dtype[Any]:
        """NumPy dtype of the elements."""
        return numpy_dtype(self.dtype)

    @property
    def mpi_type(self) -> Any:
        """Predefined MPI datatype of the elements."""
        return mpi_datatype(self.dtype)

    @property
    def mpi_op(self) -> Any:
        """The ``MPI.Op`` the call passes (:attr:`op_object`, else the named op's)."""
        return self.op_object if self.op_object is not None else mpi_op(self.op)

    @property
    def is_reduction(self) -> bool:
        """Whether the collective reduces with an op."""
        return self.collective in REDUCTIONS

    @property
    def uses_in_place(self) -> bool:
        """Whether this call passes ``MPI.IN_PLACE`` on this rank."""
        if not self.in_place or self.collective not in IN_PLACE_COLLECTIVES:
            return False
        if BY_NAME[self.collective].in_place_at == "root":
            return self.rank == self.root
        return True

    def counts(self) -> list[int]:
        """Per-rank block counts (v-variants; equal to ``count`` when ``uniform``)."""
        p, c, k = self.size, self.count, self.per_element
        if self.uniform:
            return [c] * p
        return [k * max(0, c // k + i % 3 - 1) for i in range(p)]

    def pair_count(self, src: int, dst: int) -> int:
        """Alltoallv: elements ``src`` sends to ``dst`` (symmetric, so in-place is legal)."""
        if self.uniform:
            return self.count
        k = self.per_element
        return k * max(0, self.count // k + (src + dst) % 3 - 1)

    def _layout(self, counts: Sequence[int]) -> tuple[list[int], list[int], int]:
        """(counts, displacements, extent); v-variants with varying counts leave a one-element
        gap between blocks (reduce_scatter excepted: its blocks are contiguous)."""
        gap = 0 if self.uniform or not self.gaps or self.collective == "reduce_scatter" \
            else self.per_element
        displs, pos = [], 0
        for c in counts:
            displs.append(pos)
            pos += c + gap
        return list(counts), displs, pos

    def nbytes(self) -> int:
        """Message size S in bytes as nccl-tests defines it (the size busbw factors apply to).

        bcast/reduce/allreduce/scan/exscan: the vector on each rank; allgather(v): the gathered
        output on each rank; reduce_scatter(_block): the input vector on each rank; alltoall(v):
        what a rank sends in all; gather(v): the root's output; scatter(v): the root's input.
        """
        if self.collective == "barrier":
            return 0
        item = self.np_dtype.itemsize
        if self.collective in BLOCK_COLLECTIVES:
            if self.collective in ("alltoallv", "alltoallw"):
                return item * sum(self.pair_count(self.rank, j) for j in range(self.size))
            return item * sum(self.counts())
        return item * self.count

    def restriction_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`mpicoll.registry.Algorithm.why_not` (besides ``p``).

        The same on every rank (unlike the backend's own per-rank view, where in-place holds
        only at the root of rooted collectives), so an n/a verdict never splits the ranks.
        ``count`` is the collective's count argument (the smallest block for the v-variants
        with counts; None for scatterv/gatherv/alltoallv, whose counts only the root or each
        pair knows); ``uniform`` is whether every block count is equal.
        """
        coll = self.collective
        commutative = True
        if self.is_reduction:
            commutative = bool(self.mpi_op.Is_commutative())
        count: int | None = self.count
        uniform = True
        if coll in ("scatterv", "gatherv", "alltoallv", "alltoallw"):
            count, uniform = None, False
        elif coll in ("allgatherv", "reduce_scatter"):
            counts = self.counts()
            count = min(counts) if counts else 0
            uniform = len(set(counts)) <= 1
        return {
            "commutative": commutative,
            "count": count,
            "in_place": bool(self.in_place and coll in IN_PLACE_COLLECTIVES),
            "uniform": uniform,
        }

    def problem(self) -> str | None:
        """Why MPI itself rules this call out (bad root, op/dtype), or None if it is legal."""
        if self.collective in ROOTED and not 0 <= self.root < self.size:
            return f"root {self.root} is not a rank of {self.size}"
        if self.count < 0:
            return "count must be >= 0"
        if self.is_reduction:
            return dtype_op_problem(self.dtype, self.op, self.size)
        return None

    # ---- buffers -----------------------------------------------------------------------

    def _input(self, rank: int, n: int) -> np.ndarray[Any, Any]:
        if self.is_reduction:
            return reduction_input(self.op, rank, n, self.np_dtype, self.size)
        return data_input(rank, n, self.np_dtype)

    def _sentinel(self, n: int) -> np.ndarray[Any, Any]:
        dt = self.np_dtype
        out = np.zeros(n, dtype=dt)
        if dt.names:
            out[dt.names[0]] = _SENTINEL
            out[dt.names[1]] = -1
        elif dt.kind != "b":
            out[...] = _SENTINEL
        return out

    def _send_len(self) -> int:
        """Elements of this rank's input vector (before any in-place placement)."""
        coll, p, c, r = self.collective, self.size, self.count, self.rank
        if coll in ("bcast", "reduce", "allreduce", "scan", "exscan"):
            return c
        if coll in ("scatter", "alltoall", "reduce_scatter_block"):
            return p * c
        if coll in ("gather", "allgather"):
            return c
        if coll in ("gatherv", "allgatherv"):
            return self.counts()[r]
        if coll in ("scatterv", "reduce_scatter"):
            return self._layout(self.counts())[2]
        if coll in ("alltoallv", "alltoallw"):
            return self._layout([self.pair_count(r, j) for j in range(p)])[2]
        return 0

    def build(self, shared: dict[tuple[str, int, str], np.ndarray[Any, Any]] | None = None) -> Case:
        """Allocate this rank's buffers (once) and fill them (:meth:`reset`); returns self.

        ``shared``: cost-only mode (the simulator's): the buffers come from this pool, one
        per (role, length, dtype) for every rank that uses it, and are never filled, so no page
        of them is ever touched (P ranks of 64 MiB each cost nothing)."""
        coll, p, r = self.collective, self.size, self.rank
        c = self.count
        dt = self.np_dtype
        b: dict[str, Any] = {}
        if coll == "barrier":
            self._b = b
            return self

        def empty(role: str, n: int) -> np.ndarray[Any, Any]:
            if shared is None:
                return np.empty(n, dtype=dt) if self.alloc is None else self.alloc(n, dt)
            key = (role, n, dt.str)
            if key not in shared:
                shared[key] = np.empty(n, dtype=dt)
            return shared[key]

        b["send"] = empty("send", self._send_len())
        if coll == "bcast":
            pass
        elif coll in ("reduce", "allreduce", "scan", "exscan", "scatter"):
            b["recv"] = empty("recv", c)
        elif coll == "scatterv":
            b["recv"] = empty("recv", self.counts()[r])
        elif coll in ("gather", "allgather"):
            b["recv"] = empty("recv", p * c)
        elif coll in ("gatherv", "allgatherv"):
            b["recv"] = empty("recv", self._layout(self.counts())[2])
        elif coll == "alltoall":
            b["recv"] = empty("recv", p * c)
        elif coll in ("alltoallv", "alltoallw"):
            b["recv"] = empty("recv", self._layout([self.pair_count(j, r) for j in range(p)])[2])
        elif coll == "reduce_scatter_block":
            b["recv"] = empty("recv", p * c if self.uses_in_place else c)
        elif coll == "reduce_scatter":
            n = self._send_len() if self.uses_in_place else self.counts()[r]
            b["recv"] = empty("recv", n)
        else:
            raise ValueError(f"unknown collective {coll!r}")
        self._b = b
        if shared is None:
            self.reset()
        return self

    def reset(self) -> None:
        """Refill inputs and sentinels (outside any timed region)."""
        self._fill()
        self._to_host()

    def _fill(self) -> None:
        coll, p, r, c = self.collective, self.size, self.rank, self.count
        b = self._b
        if coll == "barrier":
            return
        send = b["send"]
        if coll == "bcast":
            send[...] = (
                self._input(self.root, send.size) if r == self.root else self._sentinel(send.size)
            )
            return
        send[...] = self._input(r, send.size)
        recv = b["recv"]
        recv[...] = self._sentinel(recv.size)
        if not self.uses_in_place:
            return
        # MPI.IN_PLACE: the input lives in the receive buffer (or stays in the send buffer).
        if coll in ("alltoallv", "alltoallw"):  # blocks only: the gaps keep their sentinel
            counts, displs, _ = self._layout([self.pair_count(r, j) for j in range(p)])
            for d, n in zip(displs, counts, strict=True):
                recv[d : d + n] = send[d : d + n]
        elif coll in ("reduce", "allreduce", "scan", "exscan", "alltoall",
                      "reduce_scatter_block", "reduce_scatter"):
            recv[: send.size] = send
        elif coll == "gather" or coll == "allgather":
            recv[r * c : (r + 1) * c] = send
        elif coll in ("gatherv", "allgatherv"):
            counts, displs, _ = self._layout(self.counts())
            recv[displs[r] : displs[r] + counts[r]] = send
        # scatter(v) at root: recvbuf = IN_PLACE, the root's block stays in sendbuf.

    def _to_host(self) -> None:
        """Derived dtypes: write the values of every buffer at the typemap's positions of its
        host buffer (the holes hold the sentinel byte)."""
        if self.per_element == 1:
            return
        t, k = self.mpi_type, self.per_element
        ext = t.Get_extent()[1]
        for key, arr in self._b.items():
            n = arr.size // k
            lo, hi = t.Get_true_extent()[0], 0
            hi = max(n * ext, (n - 1) * ext + lo + t.Get_true_extent()[1]) if n else 0
            host = self._host.get(key)
            if host is None or host.size != hi:
                host = self._host[key] = np.empty(hi, np.uint8)
            host[...] = _SENTINEL
            if n:
                t.Unpack(arr.view(np.uint8), 0, host[: n * ext], MPI.COMM_SELF)

    def _from_host(self) -> None:
        """Derived dtypes: read every buffer's values back from the typemap's positions."""
        if self.per_element == 1:
            return
        t, k = self.mpi_type, self.per_element
        ext = t.Get_extent()[1]
        for key, arr in self._b.items():
            n = arr.size // k
            if n:
                t.Pack(self._host[key][: n * ext], arr.view(np.uint8), 0, MPI.COMM_SELF)

    def _host_spec(self, arr: np.ndarray[Any, Any]) -> list[Any]:
        """``[host, count, datatype]`` of a buffer of a derived dtype (see :meth:`counted_spec`)."""
        key = next(k for k, v in self._b.items() if v is arr)
        return self.counted_spec(arr, self._host[key])

    def counted_spec(self, arr: np.ndarray[Any, Any], buf: Any = None,
                     datatype: Any = None) -> list[Any]:
        """``[buf, count, datatype]`` of the case's buffer ``arr`` (``buf``: the memory to pass,
        default ``arr``; ``datatype``: default the case's); the count is one block's where
        mpi4py reads it so (the block buffers of Scatter, Gather, Allgather, Alltoall and
        Reduce_scatter_block's input), in elements of the case's datatype."""
        key = next(k for k, v in self._b.items() if v is arr)
        per_block = {"scatter": "send", "gather": "recv", "allgather": "recv",
                     "alltoall": "send recv", "reduce_scatter_block": "send"}
        blocks = self.size if key in per_block.get(self.collective, "").split() else 1
        if self.collective == "reduce_scatter_block" and key == "recv" and self.uses_in_place:
            blocks = self.size  # mpicoll reads this count per block (mpi4py: the whole)
        return [arr if buf is None else buf, arr.size // self.per_element // blocks,
                self.mpi_type if datatype is None else datatype]

    # ---- the call ----------------------------------------------------------------------

    def _vspec(self, arr: np.ndarray[Any, Any], counts: Sequence[int]) -> list[Any]:
        if not self.gaps and self.dtype not in PAIR_DTYPES and self.per_element == 1:
            return [arr, list(counts)]
        cs, ds, _ = self._layout(counts)
        k = self.per_element
        if k > 1:
            return [self._host_spec(arr)[0], ([c // k for c in cs], [d // k for d in ds]),
                    self.mpi_type]
        return [arr, (cs, ds), self.mpi_type]

    def _wspec(self, arr: np.ndarray[Any, Any], counts: Sequence[int]) -> list[Any]:
        """Alltoallw's ``[buf, (counts, byte displacements), datatypes]``: the v layout, every
        block of the case's datatype."""
        cs, ds, _ = self._layout(counts)
        k, t = self.per_element, self.mpi_type
        buf = self._host_spec(arr)[0] if k > 1 else arr
        ext = t.Get_extent()[1]
        return [buf, ([c // k for c in cs], [d // k * ext for d in ds]), [t] * self.size]

    def _spec(self, arr: np.ndarray[Any, Any]) -> Any:
        if self.per_element > 1:
            return self._host_spec(arr)
        if self.dtype in PAIR_DTYPES:
            return [arr, self.mpi_type]
        return arr

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments of the backend method on this rank."""
        coll, p, r, root = self.collective, self.size, self.rank, self.root
        b, ip = self._b, self.uses_in_place
        if coll == "barrier":
            return (), {}
        IN_PLACE = MPI.IN_PLACE
        send: Any = b["send"]
        recv: Any = b.get("recv")
        sp = self._spec
        kw: dict[str, Any] = {}
        if self.is_reduction:
            kw["op"] = self.mpi_op
        if coll in ROOTED:
            kw["root"] = root
        if coll == "bcast":
            return (sp(send),), kw
        if coll in ("allreduce", "scan", "exscan", "reduce_scatter_block", "alltoall"):
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "reduce":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "reduce_scatter":
            kw["recvcounts"] = [c // self.per_element for c in self.counts()]
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "scatter":
            if r != root:
                return (None, sp(recv)), kw
            return (sp(send), IN_PLACE if ip else sp(recv)), kw
        if coll == "gather":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        if coll == "allgather":
            return (IN_PLACE if ip else sp(send), sp(recv)), kw
        counts = self.counts()
        if coll == "scatterv":
            if r != root:
                return (None, sp(recv)), kw
            return (self._vspec(send, counts), IN_PLACE if ip else sp(recv)), kw
        if coll == "gatherv":
            if r != root:
                return (sp(send), None), kw
            return (IN_PLACE if ip else sp(send), self._vspec(recv, counts)), kw
        if coll == "allgatherv":
            return (IN_PLACE if ip else sp(send), self._vspec(recv, counts)), kw
        if coll in ("alltoallv", "alltoallw"):
            scounts = [self.pair_count(r, j) for j in range(p)]
            rcounts = [self.pair_count(j, r) for j in range(p)]
            vs = self._vspec if coll == "alltoallv" else self._wspec
            if ip:
                return (IN_PLACE, vs(recv, rcounts)), kw
            return (vs(send, scounts), vs(recv, rcounts)), kw
        raise ValueError(f"unknown collective {coll!r}")

    def positional(self) -> tuple[Any, ...]:
        """:meth:`arguments` as one positional tuple, in the order of mpi4py's signatures
        (the buffers, then ``recvcounts``, ``op``, ``root``)."""
        args, kw = self.arguments()
        return (*args, *(kw[k] for k in ("recvcounts", "op", "root") if k in kw))

    def output(self) -> np.ndarray[Any, Any] | None:
        """This rank's output buffer itself (not a copy, unlike :meth:`result`: a call writes
        into it); None where the call gives this rank no output."""
        coll, r = self.collective, self.rank
        b = self._b
        if coll == "barrier" or (coll in ("reduce", "gather", "gatherv") and r != self.root):
            return None
        if coll == "bcast":
            return b["send"]
        if coll in ("scatter", "scatterv") and r == self.root and self.uses_in_place:
            counts, displs, _ = self._layout(self.counts())
            return b["send"][displs[r] : displs[r] + counts[r]]
        return b["recv"]

    def call(
        self, backend: Any, algorithm: str | None = None, nonblocking: bool = False
    ) -> Callable[[], Any]:
        """A no-argument callable running this call on ``backend``.

        Args:
            backend: ``mpicoll.native(comm)``, ``mpicoll.p2p(comm)`` or anything with the
                ``mpi4py.MPI.Comm`` collective methods.
            algorithm: p2p algorithm name (``"auto"`` or a registry name); None for native.
            nonblocking: call the ``I...`` form; the callable then returns the request.

        Returns:
            ``fn()`` that makes the call with this case's (already built) buffers.
        """
        if not self._b and self.collective != "barrier":
            self.build()
        method = getattr(backend, method_name(self.collective, nonblocking))
        args, kw = self.arguments()
        if algorithm is not None:
            kw["algorithm"] = algorithm

        def fn() -> Any:
            return method(*args, **kw)

        return fn

    def result(self) -> np.ndarray[Any, Any] | None:
        """Copy of this rank's output after a call; None where the call defines no output."""
        coll, r, p, c = self.collective, self.rank, self.size, self.count
        b = self._b
        if coll == "barrier":
            return None
        self._from_host()
        if coll == "bcast":
            return np.array(b["send"])
        if coll == "exscan" and r == 0:
            return None
        recv = b["recv"]
        if coll in ("reduce", "gather", "gatherv") and r != self.root:
            return None
        if coll in ("scatter", "scatterv") and r == self.root and self.uses_in_place:
            if coll == "scatterv":
                counts, displs, _ = self._layout(self.counts())
            else:
                counts, displs = [c] * p, [i * c for i in range(p)]
            return np.array(b["send"][displs[r] : displs[r] + counts[r]])
        if coll == "reduce_scatter_block":
            return np.array(recv[:c])
        if coll == "reduce_scatter":
            return np.array(recv[: self.counts()[r]])
        return np.array(recv)

    def expected(self) -> np.ndarray[Any, Any] | None:
        """Exact output this rank must see, from every rank's inputs (NumPy; O(P x n) work)."""
        coll, r, p, c, root = self.collective, self.rank, self.size, self.count, self.root
        if coll == "barrier":
            return None
        if coll == "exscan" and r == 0:
            return None
        if coll in ("reduce", "gather", "gatherv") and r != root:
            return None
        dt = self.np_dtype
        if coll == "bcast":
            return self._input(root, c)
        if self.is_reduction:
            if coll in ("reduce", "allreduce", "scan", "exscan"):
                n, ranks = c, range(p)
                if coll == "scan":
                    ranks = range(r + 1)
                elif coll == "exscan":
                    ranks = range(r)
                stack = (
                    np.stack([self._input(k, n) for k in ranks])
                    if n else np.empty((len(ranks), 0), dt)
                )
                return reduce_stack(self.op, stack)
            if coll == "reduce_scatter_block":
                stack = np.stack([self._input(k, p * c)[r * c : (r + 1) * c] for k in range(p)])
                return reduce_stack(self.op, stack)
            counts, displs, ext = self._layout(self.counts())
            lo, hi = displs[r], displs[r] + counts[r]
            stack = np.stack([self._input(k, ext)[lo:hi] for k in range(p)])
            return reduce_stack(self.op, stack)
        if coll == "scatter":
            return self._input(root, p * c)[r * c : (r + 1) * c]
        if coll == "scatterv":
            counts, displs, ext = self._layout(self.counts())
            return self._input(root, ext)[displs[r] : displs[r] + counts[r]]
        if coll in ("gather", "allgather"):
            if p * c == 0:
                return np.empty(0, dt)
            return np.concatenate([self._input(k, c) for k in range(p)])
        if coll in ("gatherv", "allgatherv"):
            counts, displs, ext = self._layout(self.counts())
            out = self._sentinel(ext)
            for k in range(p):
                out[displs[k] : displs[k] + counts[k]] = self._input(k, counts[k])
            return out
        if coll == "alltoall":
            out = np.empty(p * c, dt)
            for k in range(p):
                out[k * c : (k + 1) * c] = self._input(k, p * c)[r * c : (r + 1) * c]
            return out
        if coll in ("alltoallv", "alltoallw"):
            rcounts = [self.pair_count(k, r) for k in range(p)]
            rc, rd, rext = self._layout(rcounts)
            out = self._sentinel(rext)
            for k in range(p):
                sc, sd, sext = self._layout([self.pair_count(k, j) for j in range(p)])
                out[rd[k] : rd[k] + rc[k]] = self._input(k, sext)[sd[r] : sd[r] + sc[r]]
            return out
        raise ValueError(f"unknown collective {coll!r}")

    def describe(self) -> str:
        """The case in words: ``allreduce P=4 dtype=float64 op=sum count=5 in-place``."""
        parts = [self.collective, f"P={self.size}", f"dtype={self.dtype}"]
        if self.is_reduction:
            parts.append(f"op={self.op}")
        if self.collective in ROOTED:
            parts.append(f"root={self.root}")
        parts.append(f"count={self.count // self.per_element}")
        if self.collective in V_COLLECTIVES and not self.uniform:
            parts.append("counts=varying")
        if self.in_place and self.collective in IN_PLACE_COLLECTIVES:
            parts.append("in-place")
        return " ".join(parts)


def _selftest() -> None:  # pragma: no cover - manual check: python -m mpicoll.tools.cases
    comm = MPI.COMM_WORLD
    bad = 0
    for coll in ("bcast", "allreduce", "alltoallv", "gatherv"):
        case = Case(coll, 5, size=comm.size, rank=comm.rank).build()
        case.call(comm)()
        m = compare(case.result(), case.expected())
        bad += m is not None
    print(comm.rank, "ok" if not bad else "mismatch", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    _selftest()
