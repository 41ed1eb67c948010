"""Checked mode: the ranks compare their calls before running them, and all raise together.

Two agreements, both one small non-blocking allgather completed while progressing every p2p
schedule in flight (a peer may be waiting on this rank's outstanding schedule before it joins):

* :func:`agree_on_construction`, when a backend is made (both backends, checked or not): the
  check flag, whether this rank's environment and arguments were accepted, and, for p2p, every
  variable that changes what goes on the wire (``$MPICOLL_SEGMENT_SIZE``,
  ``$MPICOLL_RANKS_PER_NODE``, every ``$MPICOLL_<COLLECTIVE>_ALGORITHM``).  A refused rank
  raises its own ``ValueError`` and the others one naming it; differing values make every rank
  raise :class:`MismatchError` naming the variable and the values (Open MPI's ``mpiexec``
  passes a variable to the ranks only with ``-x``, so this happens on real clusters).
* :meth:`CheckedMode._agree`, before every call of a backend in checked mode (``check=True`` or
  ``$MPICOLL_CHECK=1``): collective, blocking or not, root, count, dtype, op, forced algorithm,
  segment size and the counts of the v-collectives (see there).

:class:`CheckedMode` is a base of :class:`mpicoll.backends.base.Collectives`; a call takes the
checked path only when the backend's ``check`` is on.

Check kind (the legend is in :mod:`mpicoll.backends.args`; ``docs/errors.md`` lists them):
everything here is **(b)**, an agreement by one extra small collective, so every rank reaches
the same answer and all raise together, before any message of the call: checked mode per
call, and the construction agreement always (a backend's construction is collective).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from ..algorithms.collectives import BY_NAME, NAMES
from ..algorithms.datatypes import is_derived, signature_unit, type_signature
from ..engines.mpi import Waitall
from .args import PARSERS, Call
from .buffers import ARG_ERRORS, Buf, is_in_place, parse
from .env import MODEL_VAR, NO_MODEL, RANKS_PER_NODE_VAR, SEGMENT_VAR, Settings, algorithm_var

__all__ = [
    "CheckedMode", "MismatchError", "agree_on_construction", "check_algorithm_type", "op_code",
    "op_name",
]


class MismatchError(ValueError):
    """Checked mode: ranks called a collective with arguments that do not agree.

    Raised on every rank at once, naming the field and the ranks that differ.  Also raised by
    every rank when a backend is made and the ranks' check flags or p2p environment differ.
    """


_PREDEFINED_OPS = (
    "SUM",
    "PROD",
    "MAX",
    "MIN",
    "LAND",
    "LOR",
    "LXOR",
    "BAND",
    "BOR",
    "BXOR",
    "MAXLOC",
    "MINLOC",
)
_FIELDS = ("collective", "root", "count", "dtype", "item size", "op", "argument error",
           "forced algorithm", "segment size", "counts", "peer counts", "recvcounts given",
           "non-blocking", "datatype size", "datatype signature", "type signature")
# column of each field in the table of checked mode
(_COLL, _ROOT, _COUNT, _DTYPE, _ITEMSIZE, _OP, _ERROR, _FORCED, _SEGMENT, _COUNTS, _PEER,
 _STAGE, _NB, _TSIZE, _TSIG, _BSIG) = range(len(_FIELDS))
# compared field by field (every rank must have the same value)
_UNIFORM = (_ROOT, _COUNT, _DTYPE, _ITEMSIZE, _TSIZE, _TSIG, _OP, _FORCED, _SEGMENT)
# compared instead where a rank passes a derived datatype to a collective without an op: MPI
# matches type signatures (its shortest repeating unit and the count of them), not datatypes
_BY_SIGNATURE = (_ROOT, _COUNT, _BSIG, _OP, _FORCED, _SEGMENT)
#: the _DTYPE of a derived datatype (its elements are numpy voids)
_VOID = np.dtype(np.void).num
# collectives whose every rank passes the same full counts list (compared by hash)
_SAME_COUNTS = {"allgatherv": "recvcounts", "reduce_scatter": "recvcounts"}
# collectives whose per-rank count is compared with the root's counts
_ROOTED_V = {"scatterv": ("sendcounts", "recvbuf"), "gatherv": ("recvcounts", "sendbuf")}
# _STAGE: 0 the call itself; 1 Reduce_scatter(recvcounts=None) gathering the counts first
_GATHER_COUNTS = 1


#: op codes beyond the predefined ops' indices (_USER_OP: a commutative user ``MPI.Op``)
_USER_OP, _NOT_CALLABLE, _USER_OP_NONCOMMUTATIVE, _CALLABLE = 100, 101, 102, 1000


def op_name(op: Any) -> str:
    """An op as checked mode names it: ``MPI.SUM`` (predefined), ``a user op`` or ``a
    non-commutative user op`` (any other ``MPI.Op``: its handle is a number local to each
    process, and mpi4py keeps its Python function out of reach, so only its commutativity can
    be compared), a Python callable by its module and qualified name (``operator.add``,
    ``mymodule.<lambda>``: two lambdas of one function share a name, and compare equal)."""
    code = op_code(op)
    if code < _CALLABLE:
        return _value_name(_OP, code)
    return _callable_name(op)


def _callable_name(op: Any) -> str:
    qual = getattr(op, "__qualname__", None) or type(op).__qualname__
    module = getattr(op, "__module__", None) or type(op).__module__
    if module and module.startswith("_") and \
            getattr(sys.modules.get(module[1:]), str(qual), None) is op:
        module = module[1:]  # operator.add, not _operator.add
    return f"{module}.{qual}" if module and module != "builtins" else str(qual)


def op_code(op: Any) -> int:
    """The number checked mode exchanges for an op: -1 none, the index of a predefined op,
    ``_USER_OP`` / ``_USER_OP_NONCOMMUTATIVE`` for any other ``MPI.Op`` (by
    ``Is_commutative()``), ``_NOT_CALLABLE``, or for a Python callable ``_CALLABLE`` + the
    CRC-32 of its :func:`op_name` (two callables of the same module and qualified name compare
    equal)."""
    if op is None:
        return -1
    if isinstance(op, MPI.Op):
        for i, name in enumerate(_PREDEFINED_OPS):
            if op == getattr(MPI, name):
                return i
        return _USER_OP if op.Is_commutative() else _USER_OP_NONCOMMUTATIVE
    if not callable(op):
        return _NOT_CALLABLE
    return _CALLABLE + zlib.crc32(_callable_name(op).encode())


def _mix(keys: np.ndarray) -> np.ndarray:
    """splitmix64 of uint64 ``keys``: a pseudo-random 64-bit weight per key."""
    x = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _weighted(values: Sequence[int] | np.ndarray, keys: np.ndarray) -> int:
    """sum(values[j] * mix(keys[j])) mod 2**64, as a signed 64-bit int (a linear hash: two
    lists that differ anywhere give different sums except with probability ~2**-64)."""
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    total = np.array([(v * _mix(keys)).sum(dtype=np.uint64)], dtype=np.uint64)
    return int(total.view(np.int64)[0])


def _list_hash(counts: Sequence[int] | np.ndarray) -> int:
    return _weighted(counts, np.arange(len(counts), dtype=np.uint64))


def _ranks(rows: Sequence[int] | np.ndarray) -> str:
    return "[" + ", ".join(str(int(r)) for r in rows) + "]"


def _span(rows: Sequence[int]) -> str:
    """``rank 0``, ``ranks 1-2``, ``ranks 0, 3-4``: consecutive ranks as ranges."""
    rows = sorted(int(r) for r in rows)
    parts: list[str] = []
    start = prev = rows[0]
    for r in [*rows[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ("rank " if len(rows) == 1 else "ranks ") + ", ".join(parts)


#: numpy type number -> name (checked mode exchanges dtypes by number)
_DTYPE_NAMES: dict[int, str] = {np.dtype(t).num: np.dtype(t).name
                                for t in set(np.sctypeDict.values())}


#: the collective field of a lower-case object method (``bcast``): NAMES' index + this
_OBJECT = len(NAMES)


def _value_name(field: int, v: int, names: dict[int, str] | None = None) -> str:
    """A value of the checked-mode table as the user wrote it (not its code); ``names``: the
    text of codes that only their rank can name (the ops that are Python callables)."""
    if names and v in names:
        return names[v]
    if field == _COLL:
        return NAMES[v] if v < _OBJECT else f"{NAMES[v - _OBJECT]} (object method)"
    if field == _DTYPE:
        return _DTYPE_NAMES.get(v, f"numpy type {v}")
    if field == _OP:
        if v >= _CALLABLE:
            return "a Python callable"
        if v == _USER_OP:
            return "a user op"
        if v == _USER_OP_NONCOMMUTATIVE:
            return "a non-commutative user op"
        if v == _NOT_CALLABLE:
            return "an op that is not callable"
        return "no op" if v < 0 else f"MPI.{_PREDEFINED_OPS[v]}"
    return str(v)


def _by_value(field: int, col: np.ndarray, names: dict[int, str] | None = None) -> str:
    """``float64 on rank 0, float32 on ranks 1-2`` (``MPI.MAX vs MPI.SUM`` added for two)."""
    groups: dict[int, list[int]] = {}
    for r, v in enumerate(col):
        groups.setdefault(int(v), []).append(r)
    text = ", ".join(f"{_value_name(field, v, names)} on {_span(rs)}"
                     for v, rs in groups.items())
    if len(groups) == 2:
        a, b = (_value_name(field, v, names) for v in groups)
        text += f" ({a} vs {b})"
    return text


def _numpy_of(datatype: MPI.Datatype, default: np.dtype) -> np.dtype:
    """The numpy dtype of a predefined datatype (``default`` if numpy has none)."""
    try:
        return np.dtype(dtlib.to_numpy_dtype(datatype))
    except (TypeError, ValueError, KeyError):
        return default


def _in_units(counts: Any, datatype: MPI.Datatype) -> Any:
    """Counts (a sequence, one int or None) of ``datatype`` as counts of its signature's
    repeating unit (:func:`~mpicoll.algorithms.datatypes.signature_unit`): what two ranks
    passing different datatypes of one signature agree on."""
    if counts is None:
        return None
    k = signature_unit(datatype)[1]
    if isinstance(counts, int):
        return counts * k
    return counts if k == 1 else tuple(c * k for c in counts)


def _signature_hash(datatype: MPI.Datatype) -> int:
    return zlib.crc32(repr(type_signature(datatype)).encode())


def check_algorithm_type(algorithm: Any) -> None:
    """``algorithm=`` must be None or a str: TypeError otherwise (before any message)."""
    if algorithm is not None and not isinstance(algorithm, str):
        raise TypeError(
            f"algorithm: expected an algorithm name (str) or None, got "
            f"{type(algorithm).__name__} {algorithm!r}"
        )


# ---- the construction-time agreement ---------------------------------------------------------

# columns of the table: check flag, refused, segment size, ranks per node, the cost model's
# digest, then one hash per collective's forced algorithm
_C_CHECK, _C_ERROR, _C_SEGMENT, _C_NODE, _C_MODEL = range(5)
_C_ALGS = 5
#: bytes of an algorithm variable's value shown when the ranks' values differ
_SHOWN = 64


def _groups(values: Sequence[str]) -> str:
    """``'ring' on rank(s) [0], 'auto' on rank(s) [1, 2]``."""
    by: dict[str, list[int]] = {}
    for r, v in enumerate(values):
        by.setdefault(v, []).append(r)
    return ", ".join(f"{v} on rank(s) {_ranks(rs)}" for v, rs in by.items())


def agree_on_construction(comm: MPI.Comm, name: str, settings: Settings, *,
                          error: Exception | None = None, p2p: bool = False) -> None:
    """Constructing a backend (collective over ``comm``): before anything else collective, the
    ranks exchange their check flag, whether this rank's environment/arguments were accepted
    and, for p2p, the environment that changes what goes on the wire, in one small allgather.

    Raises:
        ValueError: a rank's environment or arguments were refused (that rank raises its own
            ``error``, the others one naming it).
        MismatchError: check flags differ, or (p2p) ``$MPICOLL_SEGMENT_SIZE``,
            ``$MPICOLL_RANKS_PER_NODE``, a ``$MPICOLL_<COLLECTIVE>_ALGORITHM`` or the cost model
            ``auto`` chooses by (``$MPICOLL_MODEL``: its contents, by digest) differ; the
            message names the variable and every value with its ranks.

    So one rank's bad or lone variable cannot leave the others hanging, or silently computing
    something else, in a later collective."""
    error = error if error is not None else settings.error
    mine = np.zeros(_C_ALGS + len(NAMES), dtype=np.int64)
    mine[_C_CHECK] = int(settings.check)
    mine[_C_ERROR] = 0 if error is None else 1
    if p2p:
        mine[_C_SEGMENT] = settings.segment_bytes
        mine[_C_NODE] = settings.ranks_per_node or 0
        mine[_C_MODEL] = settings.model
        for i, coll in enumerate(NAMES):
            mine[_C_ALGS + i] = zlib.crc32(settings.forced(coll).encode())
    table = np.empty((comm.Get_size(), mine.size), dtype=np.int64)
    Waitall([comm.Iallgather(mine, table)])
    bad = np.flatnonzero(table[:, _C_ERROR])
    if error is not None:
        raise error
    if bad.size:
        raise ValueError(f"mpicoll.{name}: the environment or arguments were refused on "
                         f"rank(s) {_ranks(bad)} (see the error there); every rank stops")
    flags = table[:, _C_CHECK]
    if (flags != flags[0]).any():
        raise MismatchError(
            f"mpicoll.{name}: ranks disagree on checked mode (check= or $MPICOLL_CHECK): "
            f"on for rank(s) {_ranks(np.flatnonzero(flags))}, off for rank(s) "
            f"{_ranks(np.flatnonzero(flags == 0))}; every rank must use the same")
    differ: list[str] = []
    for col, var, unset in ((_C_SEGMENT, SEGMENT_VAR, None), (_C_NODE, RANKS_PER_NODE_VAR, 0)):
        values = table[:, col]
        if (values != values[0]).any():
            differ.append(f"${var}: " + _groups(
                ["unset" if v == unset else str(int(v)) for v in values]))
    models = table[:, _C_MODEL]
    if (models != models[0]).any():
        differ.append(f"${MODEL_VAR} (the cost model auto chooses by, compared by contents): "
                      + _groups(["none (built-in rules)" if v == NO_MODEL
                                 else f"model {int(v):08x}" for v in models]))
    algs = [i for i in range(len(NAMES))
            if (table[:, _C_ALGS + i] != table[0, _C_ALGS + i]).any()]
    if algs:  # every rank sees the same table: all exchange the differing values
        shown = np.zeros((len(algs), _SHOWN), dtype=np.uint8)
        for k, i in enumerate(algs):
            raw = settings.forced(NAMES[i]).encode()[:_SHOWN]
            shown[k, :len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        every = np.empty((comm.Get_size(), len(algs), _SHOWN), dtype=np.uint8)
        Waitall([comm.Iallgather(shown, every)])
        for k, i in enumerate(algs):
            names = [repr(bytes(every[r, k]).rstrip(b"\0").decode(errors="replace"))
                     for r in range(comm.Get_size())]
            differ.append(f"${algorithm_var(NAMES[i])}: {_groups(names)}")
    if differ:
        raise MismatchError(
            f"mpicoll.{name}: ranks disagree on the environment: {'; '.join(differ)}; every "
            "rank must see the same values (under Open MPI, export them with mpiexec -x)")


# ---- checked calls ---------------------------------------------------------------------------


class CheckedMode:
    """Checked mode of a backend (a base of :class:`~mpicoll.backends.base.Collectives`).

    Uses the backend's ``rank``, ``size``, ``settings`` and ``_check_comm`` (the communicator
    the agreements run on: the private duplicate on p2p, ``comm`` on native), and its
    ``_run``.
    """

    rank: int
    size: int
    settings: Settings
    _check_comm: MPI.Comm

    def _run(self, call: Call, nonblocking: bool, algorithm: str | None,
             args: tuple[Any, ...], tag: int | None = None) -> Any:
        raise NotImplementedError

    def _segment_field(self) -> int:
        """The segment size checked mode compares (-1: not used by this backend)."""
        return -1

    def _checked_call(self, collective: str, nonblocking: bool, algorithm: Any,
                      args: tuple[Any, ...], tag: int | None = None) -> Any:
        """Check and parse this rank's call, agree with the other ranks, then run it."""
        try:
            check_algorithm_type(algorithm)
            call = PARSERS[collective](self.size, self.rank, *args)
            if call.bounds is not None:  # a spec past its buffer: refused on every rank
                raise ValueError(call.bounds)
        except ARG_ERRORS as exc:
            self._agree(collective, None, exc, algorithm, nonblocking=nonblocking)
            raise
        self._agree(collective, call, None, algorithm, nonblocking=nonblocking)
        return self._run(call, nonblocking, algorithm, args, tag)

    def _checked_recvcounts(self, sendbuf: Any, recvbuf: Any, algorithm: Any,
                            nonblocking: bool) -> list[int]:
        """Reduce_scatter(recvcounts=None) in checked mode: the gathering of every rank's
        receive count is the agreement itself (the ranks first check that they all call
        Reduce_scatter with recvcounts=None), so a rank calling another collective meets a
        :class:`MismatchError`, not a mismatched allgather."""
        try:
            check_algorithm_type(algorithm)
            if is_in_place(sendbuf):
                raise TypeError(
                    "recvcounts: Reduce_scatter with MPI.IN_PLACE needs recvcounts")
            rb = parse(recvbuf, "recvbuf", writable=True)
        except ARG_ERRORS as exc:
            self._agree("reduce_scatter", None, exc, algorithm, stage=_GATHER_COUNTS,
                        nonblocking=nonblocking)
            raise
        table = self._agree("reduce_scatter", None, None, algorithm, gathering=rb,
                            nonblocking=nonblocking)
        return [int(c) for c in table[:, _PEER]]

    def _agree(self, collective: str, call: Call | None, error: Exception | None,
               algorithm: Any = None, *, gathering: Buf | None = None,
               stage: int = 0, nonblocking: bool = False) -> np.ndarray:
        """Checked mode: every rank compares its call with the others' and all raise the same
        :class:`MismatchError` if they disagree, or if any rank's arguments were refused (that
        rank re-raises its own error).  Costs one ``MPI_Iallgather`` of 16 integers per rank,
        completed while progressing every p2p schedule in flight (a peer may be waiting for
        this rank's outstanding schedule before it joins the agreement).

        Compared: the collective, blocking or non-blocking form (MPI never matches the two),
        root, element count, dtype and item size (where a rank of a collective without an op
        passes a derived datatype: the type signature instead, its shortest repeating unit
        and the count of them, as MPI matches signatures, not datatypes), op (predefined
        ops by name; any other ``MPI.Op`` as "a user op" with its commutativity), the forced
        algorithm (``algorithm=`` or ``$MPICOLL_<COLLECTIVE>_ALGORITHM``), the p2p segment
        size, and the counts of the
        v-collectives:

        * allgatherv, reduce_scatter: every rank's full recvcounts list (a 64-bit hash of it);
        * scatterv / gatherv: each rank's own count (its recvbuf's / sendbuf's) against the
          root's ``counts[rank]`` (the root's list by hash; the root names the ranks);
        * alltoallv: rank i's ``sendcounts[j]`` against rank j's ``recvcounts[i]`` for every
          pair (a linear 64-bit hash over all pairs: every rank contributes its rows);
          alltoallw likewise, with each block's count in bytes (``n * Get_size()``).

        Hashes are 64-bit, so two different counts lists pass as equal with probability about
        2**-64.  ``gathering`` (Reduce_scatter with recvcounts=None): this rank's parsed
        recvbuf; the ranks then agree on the collective and exchange their receive counts in
        the same allgather (the returned table's "peer counts" column holds them); ``stage``
        marks that agreement (``_GATHER_COUNTS``) when this rank's recvbuf was refused.

        Returns:
            The table of every rank's signature (one row per rank).
        """
        sig = np.full(len(_FIELDS), -1, dtype=np.int64)
        sig[_COLL] = NAMES.index(collective)
        forced = algorithm if algorithm is not None else self.settings.forced(collective)
        sig[_FORCED] = zlib.crc32(str(forced).encode())
        sig[_NB] = int(nonblocking)
        sig[_SEGMENT] = self._segment_field()
        sig[_STAGE] = _GATHER_COUNTS if gathering is not None else stage
        sig[_ERROR] = 0 if error is None else 1
        if gathering is not None:
            sig[_DTYPE] = gathering.array.dtype.num
            sig[_ITEMSIZE] = gathering.array.dtype.itemsize
            sig[_TSIZE] = gathering.datatype.Get_size()
            sig[_TSIG] = _signature_hash(gathering.datatype)
            sig[_PEER] = gathering.count
        elif call is not None:
            dt = call.datatype if call.sig_datatype is None else call.sig_datatype
            code, k = signature_unit(dt)
            counts, send_counts, own = (_in_units(v, dt if t is None else t) for v, t in zip(
                (call.counts, call.send_counts, call.own_count), call.count_types, strict=True))
            sig[_ROOT] = call.root
            sig[_COUNT] = -1 if call.count is None else call.count * k
            dtype = call.dtype if call.sig_datatype is None or is_derived(dt) else \
                _numpy_of(dt, call.dtype)
            sig[_DTYPE] = _VOID if is_derived(dt) else dtype.num
            sig[_ITEMSIZE] = dtype.itemsize
            sig[_TSIZE] = dt.Get_size()
            sig[_TSIG] = _signature_hash(dt)
            sig[_BSIG] = code
            sig[_OP] = op_code(call.op)
            if collective in ("alltoallv", "alltoallw"):  # alltoallw: in bytes
                assert counts is not None
                assert send_counts is not None
                me, p = self.rank, self.size
                peers = np.arange(p, dtype=np.uint64)
                sig[_COUNTS] = _weighted(send_counts, np.uint64(me) * np.uint64(p) + peers)
                sig[_PEER] = _weighted(counts, peers * np.uint64(p) + np.uint64(me))
            else:
                if counts is not None:
                    sig[_COUNTS] = _list_hash(counts)
                if own is not None:
                    sig[_PEER] = own
        return self._exchange(collective, sig, call, error, gathering is not None,
                              str(forced), None if call is None else call.op)

    def _agree_object(self, method: str, error: Exception | None, algorithm: Any = None, *,
                      root: int | None = None, op: Any = None) -> None:
        """Checked mode of a lower-case object method (``bcast``, ``allreduce``, ...), before
        any of its messages: the ranks compare the method (an object method never matches a
        buffer one), ``root``, ``op`` (predefined ops by name, any other ``MPI.Op`` as "a user
        op" with its commutativity, a Python callable by its module and qualified name: see
        :func:`op_name`; a predefined op, a user op and a callable never compare equal) and
        ``algorithm=``, and learn whether any rank's arguments were refused (``error``: this
        rank's; it covers a root that is not a rank, an op that is not callable and a
        scatter/alltoall ``sendobj`` that is not a sequence of p items).  Same agreement and
        errors as :meth:`_agree`: every rank raises :class:`MismatchError` naming the values
        (``op MPI.SUM on rank 0, MPI.MAX on rank 1 (MPI.SUM vs MPI.MAX)``), a refused rank
        returns here and re-raises its own error."""
        sig = np.full(len(_FIELDS), -1, dtype=np.int64)
        sig[_COLL] = _OBJECT + NAMES.index(method)
        forced = "auto" if algorithm is None else str(algorithm)
        sig[_FORCED] = zlib.crc32(forced.encode())
        sig[_NB] = 0
        sig[_SEGMENT] = self._segment_field()
        sig[_STAGE] = 0
        sig[_ERROR] = 0 if error is None else 1
        if error is None:
            sig[_ROOT] = -1 if root is None else root
            sig[_OP] = op_code(op)
        self._exchange(method, sig, None, error, False, forced, op)

    def _exchange(self, collective: str, sig: np.ndarray, call: Call | None,
                  error: Exception | None, gathering: bool, forced: str, op: Any) -> np.ndarray:
        """Allgather this rank's signature ``sig``, then :meth:`_compare` every rank's.  On
        the error paths only, a second allgather tells every rank why (a refused rank's
        error text), or the names of ops that differ and only their ranks can name (Python
        callables).  Returns the table (one row per rank)."""
        table = np.empty((self.size, len(_FIELDS)), dtype=np.int64)
        Waitall([self._check_comm.Iallgather(sig, table)])
        reasons: list[str | None] = []
        names: dict[int, str] = {}
        ops = table[:, _OP]
        if table[:, _ERROR].any():  # every rank learns why (only on this error path)
            mine = None if error is None else f"{type(error).__name__}: {error}"
            reasons = self._check_comm.allgather(mine)
        elif (ops != ops[0]).any() and (ops >= _CALLABLE).any():
            names = dict(zip((int(v) for v in ops),
                             self._check_comm.allgather(op_name(op)), strict=True))
        self._compare(collective, table, call, error, gathering, forced, reasons, names)
        return table

    def _compare(self, collective: str, table: np.ndarray, call: Call | None,
                 error: Exception | None, gathering: bool, forced: str = "auto",
                 reasons: Sequence[str | None] = (), names: dict[int, str] | None = None
                 ) -> None:
        """Raise :class:`MismatchError` if the rows of ``table`` disagree (see :meth:`_agree`),
        naming the values and the ranks (``dtype float64 on rank 0, float32 on ranks 1-2``);
        return quietly on a rank whose own arguments were refused (it re-raises its error), the
        others naming it with its reason (``reasons``: every rank's error text, or None);
        ``names``: op code -> name, for the ops only their ranks can name."""
        bad = np.flatnonzero(table[:, _ERROR])
        if bad.size:
            if error is not None:
                return  # this rank re-raises its own error
            why = "; ".join(f"rank {int(r)}: {reasons[int(r)]}" for r in bad[:4]
                            if len(reasons) > r and reasons[int(r)])
            raise MismatchError(f"{collective}: the arguments were refused on rank(s) "
                                f"{_ranks(bad)}; every rank stops" + (f" ({why})" if why else ""))

        def same(f: int) -> None:
            col = table[:, f]
            if (col != col[0]).any():
                what = "recvcounts given (a list, or None)" if f == _STAGE else _FIELDS[f]
                raise MismatchError(
                    f"{collective}: ranks disagree on {what}: {_by_value(f, col, names)}")

        same(_COLL)
        nb = table[:, _NB]
        if (nb != nb[0]).any():
            rec = BY_NAME[collective]
            raise MismatchError(
                f"{collective}: ranks {_ranks(np.flatnonzero(nb))} call the non-blocking form "
                f"({rec.nonblocking}), ranks {_ranks(np.flatnonzero(nb == 0))} the "
                f"blocking one ({rec.method}); MPI never matches the two")
        same(_STAGE)

        def same_forced() -> None:  # each rank knows only its own name: say which ranks differ
            col = table[:, _FORCED]
            if (col == col[0]).all():
                return
            me = self.rank
            others = np.flatnonzero(col != col[me])
            also = [int(r) for r in np.flatnonzero(col == col[me]) if r != me]
            what = "forces no algorithm ('auto')" if forced == "auto" else f"forces {forced!r}"
            raise MismatchError(
                f"{collective}: ranks disagree on the forced algorithm (algorithm= or "
                f"${algorithm_var(collective)}): this rank ({me}) {what}"
                + (f", as do ranks {_ranks(also)}" if also else "")
                + f"; ranks {_ranks(others)} force other algorithms (or none)")

        uniform: tuple[int, ...] = _UNIFORM
        if not BY_NAME[collective].reduction and (table[:, _DTYPE] == _VOID).any():
            uniform = _BY_SIGNATURE
        if gathering or collective in ("scatterv", "gatherv", "alltoallv", "alltoallw",
                                       *_SAME_COUNTS):
            uniform = tuple(f for f in uniform if f != _COUNT)  # compared through the counts
        for f in uniform:
            if f == _FORCED:
                same_forced()
            else:
                same(f)
        if gathering:
            return
        if collective in _SAME_COUNTS:
            col = table[:, _COUNTS]
            if (col != col[0]).any():
                groups: dict[int, list[int]] = {}
                for r, h in enumerate(col):
                    groups.setdefault(int(h), []).append(r)
                shown = ", ".join(_ranks(g) for g in groups.values())
                raise MismatchError(
                    f"{collective}: ranks disagree on the counts: every rank must pass the same "
                    f"{_SAME_COUNTS[collective]}, but ranks {shown} pass different lists")
        elif collective in _ROOTED_V:
            root = int(table[0, _ROOT])
            own = table[:, _PEER]
            if _list_hash(own) != int(table[root, _COUNTS]):
                counts_name, buf_name = _ROOTED_V[collective]
                given = {int(r): int(c) for r, c in enumerate(own)}
                detail = ""
                if call is not None and call.counts is not None:  # the root knows which
                    detail = "; " + ", ".join(
                        f"rank {r} has {given[r]}, the root expects {c}"
                        for r, c in enumerate(call.counts) if c != given[r])
                raise MismatchError(
                    f"{collective}: the ranks' {buf_name} counts {given} (rank: count) do not "
                    f"match the {counts_name} of the root (rank {root}){detail}")
        elif collective in ("alltoallv", "alltoallw"):
            sent = np.array([table[:, _COUNTS].astype(np.uint64).sum(dtype=np.uint64)])
            recv = np.array([table[:, _PEER].astype(np.uint64).sum(dtype=np.uint64)])
            if sent[0] != recv[0]:
                raise MismatchError(
                    f"{collective}: the send and receive counts do not pair up: rank i's "
                    "sendcounts[j] must equal rank j's recvcounts[i] for every pair of ranks")
