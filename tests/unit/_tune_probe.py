"""Run under mpiexec by test_tune: one allreduce with an op that is neither commutative nor
associative but declared commutative, so that every algorithm's order of combination gives its
own result; rank 0 prints every rank's result as JSON.  MPI_Init, a Comm_dup and the call
itself all go through the library's selection (a tuning file loaded at MPI_Init)."""

from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI


def mix(inbuf: object, inoutbuf: object, datatype: object) -> None:
    a = np.frombuffer(inbuf, dtype=np.float64)  # type: ignore[call-overload]
    b = np.frombuffer(inoutbuf, dtype=np.float64)  # type: ignore[call-overload]
    b[:] = 3.0 * a + b * 0.5 + 1.0


comm = MPI.COMM_WORLD.Dup()
op = MPI.Op.Create(mix, commute=True)
n = 12 * comm.Get_size()
x = np.arange(n, dtype=np.float64) + 100.0 * comm.Get_rank()
y = np.empty_like(x)
comm.Allreduce(x, y, op=op)
got = comm.gather(y.tolist(), root=0)
op.Free()
comm.Free()
if MPI.COMM_WORLD.Get_rank() == 0:
    print("RESULT " + json.dumps(got))
