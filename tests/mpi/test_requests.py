"""``mpicoll.Waitany``/``Testany``/``Waitsome``/``Testsome`` (and ``Waitall``/``Testall``) on
lists mixing p2p requests, native ones, plain ``MPI.Request``\\s and ``MPI.REQUEST_NULL``, in
orders shuffled per rank (seeded), compared with what mpi4py's own ``MPI.Request`` methods
return for the same list with every p2p request replaced by a native one (run under mpiexec).

What is compared: each active entry is reported complete exactly once and is then
``== MPI.REQUEST_NULL``; null entries never are; the loops end as mpi4py's do
(``MPI.UNDEFINED``, ``(MPI.UNDEFINED, True)``, ``None``); the statuses of the plain receives
(source, tag, count) and of the other entries (empty) are mpi4py's; every collective's result
is checked.  Also: ``Testall`` that finds one request incomplete changes none; a p2p request's
``Cancel()`` is refused; ``MPI.Request.Waitall([p2p_request])`` is refused by mpi4py (the
reason ``mpicoll.Waitall`` exists).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_requests.py`` (P = 1..5).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
P, RANK = WORLD.size, WORLD.rank
#: the kinds of entry, in the proportion they are drawn
KINDS = ("p2p", "p2p", "native", "recv", "send", "null")
N_ENTRIES = 12
SEEDS = range(4)

_BACKENDS: dict[str, Any] = {}


def _backend(kind: str) -> Any:
    if kind not in _BACKENDS:
        _BACKENDS[kind] = mpicoll.p2p(WORLD) if kind == "p2p" else mpicoll.native(WORLD.Dup())
    return _BACKENDS[kind]


class Entries:
    """One list of requests: ``kinds[k]`` says what entry k is; ``check()`` asserts every
    collective's result once all are complete.

    ``mirror=True`` makes a native request wherever a p2p one would be: the list mpi4py's
    methods can complete by themselves."""

    def __init__(self, seed: int, mirror: bool) -> None:
        rng = np.random.default_rng(seed)  # same draws on every rank: same collectives
        self.kinds = [KINDS[i] for i in rng.integers(0, len(KINDS), N_ENTRIES)]
        self.reqs: list[Any] = []
        self.checks: list[tuple[np.ndarray, np.ndarray]] = []
        self.tags: dict[int, int] = {}  # entry -> tag of a plain receive
        self._bufs: list[np.ndarray] = []
        for k, kind in enumerate(self.kinds):
            n = (k * 7) % 11
            if kind in ("p2p", "native"):
                b = _backend("native" if mirror else kind)
                x = np.arange(n, dtype=np.float64) + RANK + k
                y = np.full(n, np.nan)
                self._bufs.append(x)  # MPI reads a send buffer until completion (Open MPI
                # does, later, and mpi4py does not keep it alive)
                self.reqs.append(b.Iallreduce(x, y))
                self.checks.append((y, P * (np.arange(n, dtype=np.float64) + k) + P * (P - 1) / 2))
            elif kind == "recv":  # on COMM_SELF, tag 100 + k; sent right after
                y = np.full(n, -1, dtype=np.int32)
                self.reqs.append(_self_comm().Irecv(y, 0, 100 + k))
                self.tags[k] = 100 + k
                self.checks.append((y, np.full(n, k, dtype=np.int32)))
                self._bufs.append(np.full(n, k, dtype=np.int32))
                _self_comm().Isend(self._bufs[-1], 0, 100 + k).Wait()
            elif kind == "send":
                buf = np.full(n, k, dtype=np.int32)
                self._bufs.append(buf)
                sink = np.empty(n, dtype=np.int32)
                self._bufs.append(sink)
                self.reqs.append(_self_comm().Isend(buf, 0, 300 + k))
                _self_comm().Recv(sink, 0, 300 + k)
            else:
                self.reqs.append(MPI.REQUEST_NULL)

    def order(self, seed: int) -> list[int]:
        """A per-rank shuffle of the entries (completion order may differ between ranks)."""
        return list(np.random.default_rng([seed, RANK, 7]).permutation(N_ENTRIES))

    def active(self, perm: list[int]) -> set[int]:
        return {i for i, k in enumerate(perm) if self.kinds[k] != "null"}

    def check(self) -> None:
        for got, want in self.checks:
            assert np.array_equal(got, want), f"{got} != {want}"


_SELF: list[MPI.Comm] = []


def _self_comm() -> MPI.Comm:
    """A private duplicate of COMM_SELF for the plain point-to-point entries."""
    if not _SELF:
        _SELF.append(MPI.COMM_SELF.Dup())
    return _SELF[0]


def _status_key(s: MPI.Status) -> tuple[int, int, int]:
    return s.Get_source(), s.Get_tag(), s.Get_count(MPI.INT32_T)


def _expected_status(e: Entries, k: int) -> tuple[int, int, int] | None:
    """The status of entry k mpi4py reports: a plain receive's is known; None: not compared
    (a native collective's or a send's is the MPI library's business)."""
    if e.kinds[k] == "recv":
        n = (k * 7) % 11
        return 0, e.tags[k], n  # rank 0 of COMM_SELF
    if e.kinds[k] == "p2p":
        return MPI.ANY_SOURCE, MPI.ANY_TAG, 0
    return None


def _drive(e: Entries, perm: list[int], how: str,
           fns: dict[str, Callable[..., Any]]) -> tuple[list[int], dict[int, Any]]:
    """Complete ``e``'s requests, listed in order ``perm``, with ``how`` (``fns`` are the four
    functions: mpicoll's or mpi4py's); returns the indices in the order reported, each with
    its status key, and asserts the loop's shape."""
    reqs = [e.reqs[k] for k in perm]
    reported: list[int] = []
    statuses: dict[int, Any] = {}
    for _ in range(10_000):
        if how == "waitany":
            st = MPI.Status()
            i = fns["waitany"](reqs, st)
            if i == MPI.UNDEFINED:
                assert _status_key(st)[:2] == (MPI.ANY_SOURCE, MPI.ANY_TAG)
                break
            got = [i]
            sts = [st]
        elif how == "testany":
            st = MPI.Status()
            i, flag = fns["testany"](reqs, st)
            if i == MPI.UNDEFINED:
                if flag:
                    break
                continue
            assert flag
            got, sts = [i], [st]
        else:
            sts = []
            got = fns[how](reqs, sts)
            if got is None:
                break
            assert got == sorted(got)
            assert len(sts) >= len(got)
            if how == "waitsome":
                assert got
        for i, st in zip(got, sts, strict=False):
            assert reqs[i] == MPI.REQUEST_NULL, f"entry {i} still active after it completed"
            assert i not in reported, f"entry {i} reported twice"
            reported.append(i)
            statuses[i] = _status_key(st)
    else:
        pytest.fail(f"{how}: no end after 10000 calls")
    return reported, statuses


MPICOLL = {"waitany": mpicoll.Waitany, "testany": mpicoll.Testany,
           "waitsome": mpicoll.Waitsome, "testsome": mpicoll.Testsome}
MPI4PY = {"waitany": MPI.Request.Waitany, "testany": MPI.Request.Testany,
          "waitsome": MPI.Request.Waitsome, "testsome": MPI.Request.Testsome}


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["waitany", "testany", "waitsome", "testsome"])
@pytest.mark.parametrize("seed", SEEDS)
def test_mixed_lists_complete_as_mpi4py_does(how: str, seed: int) -> None:
    ours = Entries(seed, mirror=False)
    theirs = Entries(seed, mirror=True)
    perm = ours.order(seed)
    got, st = _drive(ours, perm, how, MPICOLL)
    want, st_want = _drive(theirs, perm, how, MPI4PY)
    ours.check()
    theirs.check()
    active = ours.active(perm)
    assert set(got) == active == set(want), (sorted(got), sorted(want), sorted(active))
    for i, k in enumerate(perm):
        exp = _expected_status(ours, k)
        if exp is not None and i in st:
            assert st[i] == exp, (i, ours.kinds[k], st[i], exp)
        if ours.kinds[k] == "recv":
            assert st_want[i] == exp  # the mirror check: mpi4py reports the same for plain


@pytest.mark.mpi
def test_empty_and_inactive_lists_as_mpi4py() -> None:
    b = _backend("p2p")
    x, y = np.ones(2), np.empty(2)
    done = b.Iallreduce(x, y)
    done.Wait()
    assert done == MPI.REQUEST_NULL
    assert MPI.REQUEST_NULL == done  # noqa: SIM300 (the reflected comparison is the point)
    assert not done
    for reqs_ours, reqs_theirs in (([], []), ([MPI.REQUEST_NULL] * 2, [MPI.REQUEST_NULL] * 2),
                                   ([done, MPI.REQUEST_NULL], [MPI.REQUEST_NULL] * 2)):
        s1, s2 = MPI.Status(), MPI.Status()
        assert mpicoll.Waitany(reqs_ours, s1) == MPI.Request.Waitany(reqs_theirs, s2)
        assert _status_key(s1) == _status_key(s2)
        assert mpicoll.Testany(reqs_ours) == MPI.Request.Testany(reqs_theirs)
        assert mpicoll.Waitsome(reqs_ours) is MPI.Request.Waitsome(reqs_theirs) is None
        assert mpicoll.Testsome(reqs_ours) is MPI.Request.Testsome(reqs_theirs) is None
        assert mpicoll.Waitall(reqs_ours) is MPI.Request.Waitall(reqs_theirs) is True
        assert mpicoll.Testall(reqs_ours) is MPI.Request.Testall(reqs_theirs) is True
    assert done.Test() is True
    assert done.Wait() is True


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_waitall_statuses_and_testall_changes_nothing_until_all_are_complete() -> None:
    comm = _self_comm()
    b = _backend("p2p")
    x, y = np.ones(5), np.empty(5)
    coll = b.Iallreduce(x, y)
    inbox = np.zeros(3, dtype=np.int32)
    recv = comm.Irecv(inbox, 0, 77)  # not sent yet: Testall must find it incomplete
    for _ in range(3):
        assert mpicoll.Testall([coll, recv]) is False
    assert recv != MPI.REQUEST_NULL
    assert coll != MPI.REQUEST_NULL  # not made inactive by a Testall that returned False
    comm.Send(np.array([1, 2, 3], dtype=np.int32), 0, 77)
    statuses: list[MPI.Status] = []
    assert mpicoll.Waitall([MPI.REQUEST_NULL, coll, recv], statuses) is True
    assert len(statuses) == 3
    assert _status_key(statuses[2]) == (0, 77, 3)
    assert _status_key(statuses[1]) == (MPI.ANY_SOURCE, MPI.ANY_TAG, 0)
    assert coll == MPI.REQUEST_NULL
    assert recv == MPI.REQUEST_NULL
    assert np.array_equal(y, np.full(5, float(P)))
    assert inbox.tolist() == [1, 2, 3]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_cancel_refused_and_mpi4py_cannot_wait_on_a_p2p_request() -> None:
    b = _backend("p2p")
    x, y = np.ones(4), np.empty(4)
    req = b.Iallreduce(x, y)
    with pytest.raises(RuntimeError, match="does not cancel collective"):
        req.Cancel()
    with pytest.raises(TypeError):
        MPI.Request.Waitall([req])  # mpi4py takes MPI.Request objects only
    with pytest.raises(TypeError, match=r"requests\[1\]"):
        mpicoll.Waitany([req, object()])
    assert mpicoll.Waitany([req]) == 0  # still completes normally, on every rank
    assert np.array_equal(y, np.full(4, float(P)))


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["waitany", "testany", "waitsome", "testsome", "waitall"])
def test_inactive_persistent_requests_are_skipped_as_mpi_does(how: str) -> None:
    """A persistent request that completed is inactive, not ``REQUEST_NULL``: the ``...any``
    and ``...some`` loops report it once and then skip it, as MPI's (an ``MPI.Prequest`` of
    the native backend and a plain ``Recv_init``, beside a p2p I-form and a p2p plan)."""
    nat, hand = _backend("native"), _backend("p2p")
    x, y, z, w = np.ones(4), np.zeros(4), np.zeros(4), np.zeros(4)
    npr, ppr = nat.Allreduce_init(x, y), hand.Allreduce_init(x, w)
    comm = _self_comm()
    got = np.zeros(3, dtype=np.int32)
    rpr = comm.Recv_init(got, 0, 77)
    try:
        for _ in range(2):  # the second time, every persistent request is inactive first
            npr.Start()
            ppr.Start()
            rpr.Start()
            comm.Send(np.full(3, 7, dtype=np.int32), 0, 77)
            reqs = [npr, hand.Iallreduce(x, z), ppr, rpr]
            seen: list[int] = []
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline:  # the Test loops poll; the Waits block
                if how == "waitany":
                    i = mpicoll.Waitany(reqs)
                    if i == MPI.UNDEFINED:
                        break
                    seen.append(i)
                elif how == "testany":
                    i, flag = mpicoll.Testany(reqs)
                    if i == MPI.UNDEFINED and flag:
                        break
                    if flag:
                        seen.append(i)
                elif how == "waitall":
                    mpicoll.Waitall(reqs)
                    seen = list(range(len(reqs)))
                    break
                else:
                    some = (mpicoll.Waitsome if how == "waitsome" else mpicoll.Testsome)(reqs)
                    if some is None:
                        break
                    seen += some
            else:
                pytest.fail(f"{how}: no end in 30 s")
            assert sorted(seen) == [0, 1, 2, 3], seen
            for out in (y, z, w):
                assert np.array_equal(out, np.full(4, float(P)))
            assert np.array_equal(got, np.full(3, 7))
            y[:] = z[:] = w[:] = 0.0
            got[:] = 0
    finally:
        mpicoll.Waitall([npr, ppr, rpr])  # MPI frees no active request
        for r in (npr, ppr, rpr):
            r.Free()
