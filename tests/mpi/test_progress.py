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
