"""Progress is global: a wait on one p2p backend's request moves every backend's schedules, so
ranks may complete requests of different backends in different orders (legal MPI)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

COMM = MPI.COMM_WORLD


@pytest.mark.mpi
def test_two_backends_waited_in_opposite_orders() -> None:
    a, b = mpicoll.p2p(COMM), mpicoll.p2p(COMM)
    ya, yb, yc = np.empty(1000), np.empty(1000), np.empty(1000)
    ra = a.Iallreduce(np.ones(1000), ya, algorithm="ring")
    rb = b.Iallreduce(np.full(1000, 2.0), yb, algorithm="ring")
    if COMM.rank % 2:
        rb.Wait()
        b.Allreduce(np.full(1000, 3.0), yc)  # blocking on b while a's request is in flight
        ra.Wait()
    else:
        ra.Wait()
        rb.Wait()
        b.Allreduce(np.full(1000, 3.0), yc)
    p = COMM.size
    assert np.array_equal(ya, np.full(1000, float(p)))
    assert np.array_equal(yb, np.full(1000, 2.0 * p))
    assert np.array_equal(yc, np.full(1000, 3.0 * p))
    a.Free()
    b.Free()


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["test", "testall", "waitall"])
def test_cross_backend_progress_in_test_testall_waitall(how: str) -> None:
    """Rank 0 completes backend a's request first, the others b's: Test/Testall/Waitall on
    one request must move the other backend's schedule too (the peer waits for it)."""
    with mpicoll.p2p(COMM) as a, mpicoll.p2p(COMM) as b:
        ya, yb = np.zeros(8), np.zeros(8)
        qa = a.Iallreduce(np.ones(8), ya, algorithm="ring")
        qb = b.Iallreduce(np.ones(8), yb, algorithm="ring")
        for q in (qa, qb) if COMM.rank == 0 else (qb, qa):
            if how == "test":
                while not q.Test():
                    pass
            elif how == "testall":
                while not mpicoll.Testall([q]):
                    pass
            else:
                mpicoll.Waitall([q])
        assert np.array_equal(ya, np.full(8, float(COMM.size)))
        assert np.array_equal(yb, np.full(8, float(COMM.size)))


@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("call", ["allreduce", "reduce_scatter_none"])
def test_internal_collectives_progress_outstanding_schedules(check: bool, call: str) -> None:
    """Rank 0 makes a blocking call (checked mode's agreement, Reduce_scatter's counts
    allgather) while its Iallreduce is outstanding; the others wait on that Iallreduce first."""
    p = COMM.size
    with mpicoll.p2p(COMM, check=check) as c:
        y, z = np.zeros(1000), np.zeros(3)
        q = c.Iallreduce(np.ones(1000), y, algorithm="ring")

        def blocking() -> None:
            if call == "allreduce":
                c.Allreduce(np.ones(3), z)
            else:
                c.Reduce_scatter(np.ones(3 * p), z)

        if COMM.rank == 0:
            blocking()
            q.Wait()
        else:
            q.Wait()
            blocking()
        assert np.array_equal(y, np.full(1000, float(p)))
        assert np.array_equal(z, np.full(3, float(p)))
