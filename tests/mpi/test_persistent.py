"""The persistent forms (Barrier_init ... Exscan_init, MPI-4) of both backends (under mpiexec).

* every ``*_init`` gives what its blocking form gives (the NumPy oracle, exactly), on native,
  p2p auto and every p2p algorithm, started twice (the first run on other buffer contents);
  native and p2p auto also started once and 100 times;
* persistent requests of every collective, of both backends, started together in one
  :func:`mpicoll.Startall`, mixed with I-form requests, and completed in a shuffled order
  (seeded by rank: every rank completes them in its own order) by single Waits, Waitall,
  Testall loops, Waitany and Testsome, three times over with new
  buffer contents each time, each result equal to the blocking call's on the same inputs;
* an inactive request waits and tests complete at once; starting an active or a freed one
  raises; a forced algorithm whose restrictions the call breaks raises at init.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_persistent.py`` (P = 1..5).
"""

from __future__ import annotations

import random
from typing import Any

import _runners as runners
import numpy as np
import pytest
from _runners import backend
from mpi4py import MPI
from test_nonblocking import _iform_cases

import mpicoll
from mpicoll.algorithms.collectives import BY_NAME
from mpicoll.algorithms.collectives import NAMES as ALL

#: Alltoallw takes per-peer datatypes that the shared input builder here does not make; its
#: Alltoallw_init is checked against Alltoallw through the runners of tests/mpi/_runners.py
NAMES = tuple(c for c in ALL if c != "alltoallw")

WORLD = MPI.COMM_WORLD


def _params() -> list[Any]:
    out = []
    for coll in ALL:
        for impl in runners.implementations(coll):
            starts = (1, 2, 100) if impl.entry is None else (2,)
            out += [pytest.param(coll, impl, n, id=f"{coll}-{impl.label}-x{n}") for n in starts]
    return out


@pytest.mark.mpi
@pytest.mark.parametrize(("coll", "impl", "starts"), _params())
def test_init_matches_blocking(coll: str, impl: runners.Impl, starts: int) -> None:
    """``X_init`` started ``starts`` times gives what ``X`` gives (the oracle, exactly); 100
    starts run on the first case only (the cost stays moderate)."""
    run = runners.Run(coll, impl, mode=f"persistent:{starts}")
    cases = _iform_cases(coll, run.p) if coll != "barrier" else [runners.Case()]
    if starts > 2:
        cases = cases[:1]
    for case in cases:
        if coll == "barrier":
            run.checks += 1
            if impl.entry is not None and impl.entry.why_not(run.p) is not None:
                with pytest.raises(mpicoll.RestrictionError):  # two_proc at P > 2
                    run.persistent(starts)
                continue
            run.persistent(starts)
            continue
        run.run_case(case)
    run.finish()


# ------------------------------------------------------------------------------------------
# many persistent requests at once, mixed with I-forms, completed in a shuffled order


def _inputs(coll: str, p: int, rank: int, salt: int) -> tuple[tuple[Any, ...], np.ndarray]:
    """(positional arguments, output array) of a small call of ``coll``: float64 values that
    depend on rank and ``salt`` (sums of them are exact), root p - 1."""
    n = 3
    root = p - 1
    x = np.arange(n * p, dtype=np.float64) * (rank + 1) + salt
    if coll == "barrier":
        return (), np.zeros(0)
    if coll == "bcast":
        buf = x[:n].copy() if rank == root else np.full(n, -1.0)
        return (buf, root), buf
    if coll in ("scatter", "scatterv"):
        out = np.full(n, -1.0)
        send = x if rank == root else None
        if coll == "scatterv":
            send = [x, [n] * p, MPI.DOUBLE] if rank == root else None
        return (send, out, root), out
    if coll in ("gather", "gatherv"):
        out = np.full(n * p, -1.0)
        recv: Any = out if rank == root else None
        if coll == "gatherv" and rank == root:
            recv = [out, [n] * p, MPI.DOUBLE]
        return (x[:n].copy(), recv, root), out
    if coll == "reduce":
        out = np.full(n, -1.0)
        return (x[:n].copy(), out, MPI.SUM, root), out
    if coll in ("allreduce", "scan", "exscan"):
        out = np.full(n, -1.0)
        return (x[:n].copy(), out, MPI.SUM), out
    if coll == "reduce_scatter_block":
        out = np.full(n, -1.0)
        return (x.copy(), out, MPI.SUM), out
    if coll == "reduce_scatter":
        out = np.full(n, -1.0)
        return (x.copy(), out, [n] * p, MPI.SUM), out
    if coll == "allgather":
        out = np.full(n * p, -1.0)
        return (x[:n].copy(), out), out
    if coll == "allgatherv":
        out = np.full(n * p, -1.0)
        return (x[:n].copy(), [out, [n] * p, MPI.DOUBLE]), out
    if coll == "alltoall":
        out = np.full(n * p, -1.0)
        return (x.copy(), out), out
    assert coll == "alltoallv"
    out = np.full(n * p, -1.0)
    return ([x.copy(), [n] * p, MPI.DOUBLE], [out, [n] * p, MPI.DOUBLE]), out


def _refill(args: tuple[Any, ...], fresh: tuple[Any, ...]) -> None:
    """Copy the contents of ``fresh``'s arrays into ``args``' arrays (the same buffers)."""
    for a, f in zip(args, fresh, strict=True):
        a0 = a[0] if isinstance(a, list) else a
        f0 = f[0] if isinstance(f, list) else f
        if isinstance(a0, np.ndarray):
            np.copyto(a0, f0)


@pytest.mark.mpi
def test_startall_mixed_with_iforms_completed_in_shuffled_order() -> None:
    p, rank = WORLD.size, WORLD.rank
    rng = random.Random(1234 + rank)
    hand, nat = backend("p2p"), backend("native")
    persistent: list[tuple[str, str, Any, tuple[Any, ...], np.ndarray]] = []
    for name in ("native", "p2p"):
        b = nat if name == "native" else hand
        for coll in NAMES:
            args, out = _inputs(coll, p, rank, 0)
            req = getattr(b, BY_NAME[coll].persistent)(*args)
            persistent.append((name, coll, req, args, out))
    for salt in (1, 2, 3):
        for _name, coll, _req, args, _out in persistent:
            _refill(args, _inputs(coll, p, rank, salt)[0])
        # the I-forms started in between: another tag's traffic in flight beside the plans
        x = np.full(4, float(rank + salt))
        y, z = np.zeros(4), np.zeros(4)
        first = [r for _, _, r, _, _ in persistent[: len(NAMES)]]
        rest = [r for _, _, r, _, _ in persistent[len(NAMES):]]
        mpicoll.Startall(first)
        inb = hand.Iallreduce(x, y)
        mpicoll.Startall(rest)
        nnb = nat.Iallreduce(x, z)
        pending = [r for _, _, r, _, _ in persistent] + [inb, nnb]
        rng.shuffle(pending)
        while pending:  # single Waits, small Waitalls and Test loops, in the shuffled order
            k = rng.randint(1, 3)
            batch, pending = pending[:k], pending[k:]
            how = rng.choice(("wait", "waitall", "test", "waitany", "testsome"))
            if how == "wait" and not isinstance(batch[0], MPI.Request):
                batch[0].Wait()
                batch = batch[1:]
            if how == "test":
                while not mpicoll.Testall(batch):
                    pass
            if how == "waitany":
                mpicoll.Waitany(batch)
            if how == "testsome":
                mpicoll.Testsome(batch)
            mpicoll.Waitall(batch)  # the rest of the batch
        want = np.full(4, float(sum(r + salt for r in range(p))))
        assert np.array_equal(y, want)
        assert np.array_equal(z, want)
        for name, coll, _req, _args, out in persistent:
            fresh, expect = _inputs(coll, p, rank, salt)
            getattr(nat, BY_NAME[coll].method)(*fresh)
            if coll == "exscan" and rank == 0:
                continue  # undefined at rank 0
            assert np.array_equal(out, expect), (name, coll, salt, out, expect)
    for _, _, req, _, _ in persistent:
        req.Free()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["native", "p2p"])
def test_inactive_active_and_freed(kind: str) -> None:
    b = backend(kind)
    x, y = np.ones(2), np.zeros(2)
    req = b.Allreduce_init(x, y)
    req.Wait()  # inactive: returns at once
    assert req.Test()
    req.Start()
    if kind == "p2p" and WORLD.size > 1:  # at P = 1 there is no message: done at Start
        with pytest.raises(RuntimeError, match="active"):
            req.Start()
    req.Wait()
    assert np.array_equal(y, np.full(2, float(WORLD.size)))
    req.Free()
    if kind == "p2p":
        with pytest.raises(RuntimeError, match="freed"):
            req.Start()


@pytest.mark.mpi
def test_init_refuses_bad_input_and_restrictions() -> None:
    hand, nat = backend("p2p"), backend("native")
    for b in (hand, nat):
        with pytest.raises(ValueError, match="root"):
            b.Bcast_init(np.ones(2), root=WORLD.size)
        with pytest.raises(TypeError):
            b.Allreduce_init(np.ones(2), np.zeros(2), op="sum")
    x = np.ones(4)
    with pytest.raises(ValueError, match="overlap"):
        hand.Allreduce_init(x[:2], x[1:3])
    # native hands the call to mpi4py, which does not look for partly overlapping views
    # (MPI only for identical pointers): an inactive request, as plain mpi4py makes
    for c in (WORLD, nat):
        req = c.Allreduce_init(x[:2], x[1:3])
        assert isinstance(req, MPI.Prequest)
        req.Free()
    with pytest.raises(ValueError, match="native backend"):
        nat.Allreduce_init(np.ones(2), np.zeros(2), algorithm="ring")
    op = MPI.Op.Create(lambda a, b, t: None, commute=False)
    try:
        with pytest.raises(mpicoll.RestrictionError):
            hand.Allreduce_init(np.ones(2), np.zeros(2), op, algorithm="ring")
    finally:
        op.Free()


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["recursive_doubling", "ring"])
def test_started_plans_beside_other_calls(algorithm: str) -> None:
    """A started p2p plan leaves the engine's list of schedules in flight once its last round
    is posted (at P = 2 a recursive-doubling allreduce has one round, a ring allreduce two):
    blocking calls made while it is started, on its backend and on another, are right; a
    ``Test`` loop completes it; its traffic counts what the generator's run counts; and the
    backend's ``Free`` completes a plan left started."""
    p, rank = WORLD.size, WORLD.rank
    hand, other = mpicoll.p2p(WORLD), mpicoll.p2p(WORLD)
    n = 2 * p + 1
    x, y = np.full(n, rank + 1.0), np.zeros(n)
    req = hand.Allreduce_init(x, y, algorithm=algorithm)
    hand.traffic.reset()
    hand.Allreduce(x, np.zeros(n), algorithm=algorithm)  # the generator's run
    once = hand.traffic.as_dict()
    total = float(p * (p + 1) // 2)
    for run in range(3):
        hand.traffic.reset()
        x[:] = rank + 1.0 + run
        req.Start()
        a, c = np.zeros(3), np.zeros(3)
        hand.Allreduce(np.ones(3), a, algorithm="recursive_doubling")  # a plan started
        other.Allreduce(np.ones(3), c)  # another backend
        assert np.array_equal(a, np.full(3, float(p)))
        assert np.array_equal(c, a)
        if run == 1:
            while not req.Test():
                pass
        else:
            req.Wait()
        assert np.array_equal(y, np.full(n, total + p * run)), (run, y)
        counts = hand.traffic.as_dict()
        extra = {"messages_sent": 1, "messages_recv": 1, "bytes_sent": 24, "bytes_recv": 24}
        assert counts["messages_sent"] >= once["messages_sent"]
        if p == 2:  # the plan's run plus one recursive-doubling allreduce of 3 doubles
            assert counts == {k: once[k] + extra.get(k, 0) + (k == "rounds")
                              for k in once}, (counts, once)
    x[:] = rank + 1.0
    req.Start()
    hand.Free()  # completes the started plan first
    assert np.array_equal(y, np.full(n, total))
    req.Free()
    other.Free()
