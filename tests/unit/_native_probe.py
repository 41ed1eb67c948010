"""One call of one collective in plain mpi4py (no mpicoll): ``python _native_probe.py COLL``.

The child of ``test_native_algorithms.py``'s forced-algorithm tests: P ranks, 8 float64 per
block (v-forms: rank r's block has r + 1 elements), MPI.SUM, root 0; exit status 1 when the
result is wrong.  Nothing but this one call communicates, so a traffic monitor's counts are
this call's.  With ``MPICOLL_PROBE_P2P=1`` the call is mpicoll's p2p one (``mpicoll.p2p``;
the algorithm from ``MPICOLL_<COLL>_ALGORITHM``), whose messages the monitor counts as
external (user) traffic; ``MPICOLL_PROBE_REPEAT=k`` makes the call k times (the difference
of two runs' traffic is one call's, without the set-up's)."""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
if os.environ.get("MPICOLL_PROBE_P2P") == "1":
    import mpicoll

    comm = mpicoll.p2p(MPI.COMM_WORLD)
p, r = comm.Get_size(), comm.Get_rank()
coll = sys.argv[1]
n = 8
x = np.arange(n, dtype="f8") + r
ok = True
for _ in range(int(os.environ.get("MPICOLL_PROBE_REPEAT", "1"))):
    if coll == "allreduce":
        y = np.empty(n)
        comm.Allreduce(x, y)
        ok = np.array_equal(y, p * np.arange(n) + p * (p - 1) / 2)
    elif coll == "bcast":
        y = x.copy()
        comm.Bcast(y, root=0)
        ok = np.array_equal(y, np.arange(n))
    elif coll == "reduce":
        y = np.empty(n)
        comm.Reduce(x, y, root=0)
        ok = r != 0 or np.array_equal(y, p * np.arange(n) + p * (p - 1) / 2)
    elif coll in ("allgather", "gather"):
        y = np.empty(n * p)
        (comm.Allgather(x, y) if coll == "allgather" else comm.Gather(x, y, root=0))
        want = np.concatenate([np.arange(n) + j for j in range(p)])
        ok = (coll == "gather" and r != 0) or np.array_equal(y, want)
    elif coll == "allgatherv":
        counts = [j + 1 for j in range(p)]
        y = np.empty(sum(counts))
        comm.Allgatherv(x[: r + 1], [y, counts])
        ok = np.array_equal(y, np.concatenate([np.arange(j + 1) + j for j in range(p)]))
    elif coll == "scatter":
        s = np.arange(n * p, dtype="f8")
        y = np.empty(n)
        comm.Scatter(s, y, root=0)
        ok = np.array_equal(y, np.arange(n) + n * r)
    elif coll == "alltoall":
        s = np.arange(n * p, dtype="f8") + 100 * r
        y = np.empty(n * p)
        comm.Alltoall(s, y)
        ok = np.array_equal(y, np.concatenate([np.arange(n) + n * r + 100 * j for j in range(p)]))
    elif coll == "alltoallv":
        counts = [j + 1 for j in range(p)]  # rank r sends j + 1 elements to j
        s = np.concatenate([np.full(j + 1, 10.0 * r + j) for j in range(p)])
        y = np.empty((r + 1) * p)
        comm.Alltoallv([s, counts], [y, [r + 1] * p])
        ok = np.array_equal(y, np.concatenate([np.full(r + 1, 10.0 * j + r) for j in range(p)]))
    elif coll == "barrier":
        comm.Barrier()
    elif coll in ("reduce_scatter_block", "reduce_scatter"):
        s = np.arange(n * p, dtype="f8") + r
        y = np.empty(n)
        (comm.Reduce_scatter_block(s, y) if coll == "reduce_scatter_block"
         else comm.Reduce_scatter(s, y, [n] * p))
        ok = np.array_equal(y, p * (np.arange(n) + n * r) + p * (p - 1) / 2)
    elif coll in ("scan", "exscan"):
        y = np.zeros(n)
        (comm.Scan(x, y) if coll == "scan" else comm.Exscan(x, y))
        k = r + 1 if coll == "scan" else r
        ok = (coll == "exscan" and r == 0) or np.array_equal(y, k * np.arange(n) + k * (k - 1) / 2)
    elif coll in ("gatherv", "scatterv", "alltoallw"):
        counts = [j + 1 for j in range(p)]
        if coll == "gatherv":
            y = np.empty(sum(counts))
            comm.Gatherv(x[: r + 1], [y, counts], root=0)
            ok = r != 0 or np.array_equal(
                y, np.concatenate([np.arange(j + 1) + j for j in range(p)]))
        elif coll == "scatterv":
            s = np.arange(sum(counts), dtype="f8")
            y = np.empty(r + 1)
            comm.Scatterv([s, counts], y, root=0)
            ok = np.array_equal(y, s[sum(counts[:r]): sum(counts[:r + 1])])
        else:
            s = np.full(p, float(r))
            y = np.empty(p)
            d = [8 * j for j in range(p)]
            comm.Alltoallw([s, [1] * p, d, [MPI.DOUBLE] * p], [y, [1] * p, d, [MPI.DOUBLE] * p])
            ok = np.array_equal(y, np.arange(p, dtype="f8"))
    else:
        raise SystemExit(f"unknown collective {coll!r}")
sys.exit(0 if ok else 1)
