"""Checked mode of the lower-case object methods, on both backends.

``mpicoll.native(comm, check=True)`` and ``mpicoll.p2p(comm, check=True)``: before any message
of an object call (``bcast``, ``gather``, ``scatter``, ``allgather``, ``alltoall``, ``reduce``,
``allreduce``, ``scan``, ``exscan``, ``barrier``) the ranks compare the method (an object
method never matches a buffer method), the root, the op (predefined ops by name, a Python
callable by its module and qualified name) and ``algorithm=``, and learn whether any rank
refused its arguments (a root that is not a rank, an op that is not callable, a scatter root's
or an alltoall rank's ``sendobj`` that is not a sequence of p items).  Every rank raises:
:class:`mpicoll.MismatchError` naming the values (``MPI.SUM ... MPI.MAX``), or, on a rank
whose own arguments were refused, that rank's own error.  No payload message is sent (p2p:
its traffic counters do not move; no stray message is left on either communicator), and a
correct call afterwards still gives the right result.

Agreeing calls give what plain mpi4py gives (P = 1 included).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_objects_checked.py``
(P = 1..5; the mismatches need two ranks).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
KINDS = ("native", "p2p")
_BACKENDS: dict[str, Any] = {}
MismatchError = mpicoll.MismatchError


def backend(kind: str) -> Any:
    if kind not in _BACKENDS:
        make = mpicoll.native if kind == "native" else mpicoll.p2p
        _BACKENDS[kind] = make(WORLD, check=True)
    return _BACKENDS[kind]


@pytest.fixture(scope="module", autouse=True)
def _free() -> Iterator[None]:
    yield
    for kind in sorted(_BACKENDS):
        _BACKENDS.pop(kind).Free()
    for op in _USER_OPS.values():
        op.Free()


def _plus(a: Any, b: Any) -> Any:
    return a + b


def _times(a: Any, b: Any) -> Any:
    return a * b


def _user_plus(a: Any, b: Any, datatype: Any = None) -> Any:
    return a + b


#: user MPI.Ops over the same function: commutative (True) and not (False); freed at the end
_USER_OPS = {True: MPI.Op.Create(_user_plus, commute=True),
             False: MPI.Op.Create(_user_plus, commute=False)}


def _agree(problems: list[str], what: str) -> None:
    """Fail on every rank if any rank found a problem."""
    everyone = WORLD.allgather(problems)
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{what}:\n" + "\n".join(lines)


def _recover(b: Any) -> list[str]:
    """Correct object and buffer calls after a refused one; then no stray message anywhere."""
    problems: list[str] = []
    p, r = WORLD.size, WORLD.rank
    if (got := b.bcast(("after", r), root=p - 1)) != ("after", p - 1):
        problems.append(f"bcast after the error gave {got!r}")
    if (got := b.allreduce(r + 1, op=MPI.SUM)) != p * (p + 1) // 2:
        problems.append(f"allreduce after the error gave {got!r}")
    if (got := b.scatter([10 * i for i in range(p)] if r == 0 else None)) != 10 * r:
        problems.append(f"scatter after the error gave {got!r}")
    if (got := b.alltoall([(r, j) for j in range(p)])) != [(i, r) for i in range(p)]:
        problems.append(f"alltoall after the error gave {got!r}")
    z = np.arange(4, dtype=np.int64) if r == 0 else np.full(4, -1, np.int64)
    b.Bcast(z, root=0)
    if not np.array_equal(z, np.arange(4)):
        problems.append(f"Bcast after the error gave {z}")
    b.barrier()
    WORLD.Barrier()
    private = getattr(b, "_comm", None)
    for name, c in (("the user's communicator", WORLD), ("the p2p private communicator", private)):
        if isinstance(c, MPI.Comm) and c != MPI.COMM_NULL:
            st = MPI.Status()
            if c.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
                problems.append(f"a stray message waits on {name} (source {st.source}, "
                                f"tag {st.tag})")
    WORLD.Barrier()
    return problems


# ---- agreeing calls: the same results as plain mpi4py ---------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_agreeing_calls_give_mpi4py_results(kind: str) -> None:
    b = backend(kind)
    p, me = WORLD.size, WORLD.rank
    # (method, fresh arguments, keywords): a generator is consumed once, so each call makes
    # its own
    calls: tuple[tuple[str, Callable[[], tuple[Any, ...]], dict[str, Any]], ...] = (
        ("barrier", lambda: (), {}),
        ("bcast", lambda: ({"r": me, "a": [1, 2]},), {"root": p - 1}),
        ("gather", lambda: ([me],), {"root": p // 2}),
        ("scatter", lambda: ([("s", i) for i in range(p)] if me == 0 else None,), {}),
        ("scatter", lambda: ((("g", i) for i in range(p)) if me == p - 1 else None,),
         {"root": p - 1}),
        ("allgather", lambda: (me,), {}),
        ("alltoall", lambda: ([me * p + j for j in range(p)],), {}),
        ("alltoall", lambda: (None,), {}),
        ("reduce", lambda: (me + 1,), {"op": MPI.PROD, "root": p - 1}),
        ("reduce", lambda: (str(me),), {"op": _plus}),
        ("allreduce", lambda: ((me * 7) % 5,), {"op": MPI.MAX}),
        ("allreduce", lambda: ([me],), {"op": lambda a, c: a + c}),  # one qualified name
        ("allreduce", lambda: (me,), {"op": operator.add}),
        ("allreduce", lambda: ([me],), {"op": _USER_OPS[False]}),  # the same user op
        ("scan", lambda: (me + 1,), {"op": _times}),
        ("exscan", lambda: ([me],), {}),
    )
    problems: list[str] = []
    for method, make, kw in calls:
        want = getattr(WORLD, method)(*make(), **kw)
        got = getattr(b, method)(*make(), **kw)
        if got != want:
            problems.append(f"{kind} {method} {kw}: got {got!r}, mpi4py {want!r}")
    _agree(problems, f"checked {kind}: agreeing calls")


# ---- disagreeing calls ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """``call(b, rank, p)`` makes the ranks disagree; ``words``: what the MismatchError names;
    ``own(rank, p)``: the error type a rank raises itself (its own arguments were refused), or
    None for MismatchError."""

    name: str
    call: Callable[[Any, int, int], Any]
    words: tuple[str, ...]
    own: Callable[[int, int], type[BaseException] | None] = lambda r, p: None
    kinds: tuple[str, ...] = KINDS


def _cases() -> list[Case]:
    def op(a: Any, b: Any) -> Callable[[Any, int, int], Any]:
        return lambda c, r, p: c.allreduce(r, op=a if r == 0 else b)

    return [
        Case("allreduce_op", op(MPI.SUM, MPI.MAX), ("op", "MPI.SUM", "MPI.MAX", " vs ")),
        Case("reduce_op", lambda c, r, p: c.reduce(r, op=MPI.MIN if r == p - 1 else MPI.SUM),
             ("op", "MPI.MIN", "MPI.SUM")),
        Case("scan_op_predefined_vs_callable", lambda c, r, p: c.scan(
            r, op=MPI.SUM if r == 0 else operator.add), ("op", "MPI.SUM", "operator.add")),
        Case("exscan_two_callables", lambda c, r, p: c.exscan(
            r + 1, op=_plus if r == 0 else _times), ("op", "_plus", "_times")),
        Case("allreduce_user_op_vs_predefined", lambda c, r, p: c.allreduce(
            r, op=_plus if r == 0 else MPI.SUM), ("op", "_plus", "MPI.SUM")),
        Case("reduce_mpi_user_ops_of_differing_commutativity", lambda c, r, p: c.reduce(
            r, op=_USER_OPS[r == 0]), ("op", "a user op", "a non-commutative user op")),
        Case("scan_mpi_user_op_vs_predefined", lambda c, r, p: c.scan(
            r, op=_USER_OPS[True] if r == p - 1 else MPI.SUM), ("op", "a user op", "MPI.SUM")),
        Case("exscan_mpi_user_op_vs_callable", lambda c, r, p: c.exscan(
            r, op=_USER_OPS[False] if r == 0 else _plus),
             ("op", "a non-commutative user op", "_plus")),
        Case("bcast_root", lambda c, r, p: c.bcast(r, root=0 if r == 0 else 1),
             ("root", "rank 0")),
        Case("gather_root", lambda c, r, p: c.gather(r, root=p - 1 if r == 0 else 0),
             ("root",)),
        Case("reduce_root", lambda c, r, p: c.reduce(r, MPI.SUM, r), ("root",)),
        Case("scatter_root", lambda c, r, p: c.scatter(list(range(p)), root=min(r, 1)),
             ("root",)),
        Case("scatter_not_a_sequence_at_the_root",
             lambda c, r, p: c.scatter(5 if r == 0 else None),
             ("refused", "rank(s) [0]", "TypeError"),
             own=lambda r, p: TypeError if r == 0 else None),
        Case("scatter_wrong_length_at_the_root",
             lambda c, r, p: c.scatter(list(range(p + 1)) if r == p - 1 else None, root=p - 1),
             ("refused", f"rank(s) [{WORLD.size - 1}]", "expecting"),
             own=lambda r, p: ValueError if r == p - 1 else None),
        Case("alltoall_wrong_length_on_one_rank",
             lambda c, r, p: c.alltoall(list(range(p - 1 if r == 1 else p))),
             ("refused", "rank(s) [1]", "ValueError"),
             own=lambda r, p: ValueError if r == 1 else None),
        Case("root_outside_on_one_rank", lambda c, r, p: c.bcast(r, root=p if r == 1 else 0),
             ("refused", "rank(s) [1]", "root"),
             own=lambda r, p: ValueError if r == 1 else None),
        Case("op_not_callable_on_one_rank",
             lambda c, r, p: c.allreduce(r, op="max" if r == 0 else MPI.MAX),
             ("refused", "rank(s) [0]", "TypeError"),
             own=lambda r, p: TypeError if r == 0 else None),
        Case("different_methods",
             lambda c, r, p: c.bcast(r) if r == 0 else c.allgather(r), ("collective", "bcast")),
        Case("object_vs_buffer_method",
             lambda c, r, p: c.bcast(r) if r == 0 else c.Bcast(np.zeros(1), root=0),
             ("collective", "object method")),
        Case("barrier_vs_bcast", lambda c, r, p: c.barrier() if r == 0 else c.bcast(r),
             ("collective", "barrier")),
        Case("forced_algorithm", lambda c, r, p: c.bcast(
            r, algorithm="binomial" if r == 0 else None), ("forced algorithm",),
             kinds=("p2p",)),
    ]


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_disagreeing_object_calls_raise_on_every_rank(kind: str, case: Case) -> None:
    p, r = WORLD.size, WORLD.rank
    if p < 2:
        pytest.skip("a disagreement needs two ranks")
    if kind not in case.kinds:
        pytest.skip(f"{case.name} is for {'/'.join(case.kinds)} only")
    b = backend(kind)
    traffic = getattr(b, "traffic", None)
    before = None if traffic is None else (traffic.messages_sent, traffic.messages_recv)
    problems: list[str] = []
    own = case.own(r, p)
    try:
        case.call(b, r, p)
    except MismatchError as exc:
        if own is not None:
            problems.append(f"raised MismatchError ({exc}); expected its own {own.__name__}")
        missing = [w for w in case.words if w not in str(exc)]
        if missing:
            problems.append(f"message {str(exc)!r} does not name {missing}")
    except Exception as exc:
        if own is None or not isinstance(exc, own):
            problems.append(f"raised {type(exc).__name__}: {exc}; expected "
                            f"{'MismatchError' if own is None else own.__name__}")
    else:
        problems.append("no exception")
    if traffic is not None and (traffic.messages_sent, traffic.messages_recv) != before:
        problems.append(f"the refused call sent or received messages: {before} -> "
                        f"{(traffic.messages_sent, traffic.messages_recv)}")
    problems += _recover(b)
    _agree(problems, f"checked {kind}: {case.name}")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_refused_on_every_rank_raises_each_ranks_own_error(kind: str) -> None:
    """A bad root everywhere (every rank refuses): each rank raises its own error, as the
    unchecked backend does, and the backend works afterwards (P = 1 included)."""
    b, p = backend(kind), WORLD.size
    problems: list[str] = []
    for bad, want in ((p, ValueError), ("0", TypeError), (2**40, OverflowError)):
        try:
            b.bcast(1, root=bad)
        except MismatchError as exc:
            problems.append(f"root={bad!r}: MismatchError {exc}; expected {want.__name__}")
        except Exception as exc:
            if not isinstance(exc, want):
                problems.append(f"root={bad!r}: {type(exc).__name__}; expected {want.__name__}")
        else:
            problems.append(f"root={bad!r}: no exception")
    if p > 1:
        problems += _recover(b)
    _agree(problems, f"checked {kind}: refused everywhere")
