"""Node-aware (smp) algorithms on an emulated node map (``MPICOLL_RANKS_PER_NODE=k``): the
same results as native for every root and count, and only node leaders' traffic crosses
nodes."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

COMM = MPI.COMM_WORLD
COUNTS = (0, 1, 7, 1000)


def _backend(monkeypatch: pytest.MonkeyPatch, k: int) -> mpicoll.P2P:
    monkeypatch.setenv("MPICOLL_RANKS_PER_NODE", str(k))
    hand = mpicoll.p2p(COMM)
    assert hand.nodes == tuple(r // k for r in range(COMM.size))
    return hand


def _data(rank: int, n: int) -> np.ndarray:
    return ((np.arange(n) * 3 + rank * 5) % 7 + 1).astype(np.float64)


@pytest.mark.mpi
@pytest.mark.parametrize("k", [1, 2, 3])
def test_smp_matches_native(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    hand = _backend(monkeypatch, k)
    nat = mpicoll.native(COMM)
    p, r = COMM.size, COMM.rank
    for n in COUNTS:
        x = _data(r, n)
        want, got = np.empty(n), np.full(n, -1.0)
        nat.Allreduce(x, want)
        hand.Allreduce(x, got, algorithm="smp")
        assert np.array_equal(got, want), ("allreduce", k, n)
        want, got = np.empty(n * p), np.full(n * p, -1.0)
        nat.Allgather(x, want)
        hand.Allgather(x, got, algorithm="smp")
        assert np.array_equal(got, want), ("allgather", k, n)
        want, got = np.empty(n), np.full(n, -1.0)
        nat.Scan(x, want)
        hand.Scan(x, got, algorithm="smp")
        assert np.array_equal(got, want), ("scan", k, n)
        for root in range(p):
            want, got = x.copy(), x.copy()
            nat.Bcast(want, root)
            hand.Bcast(got, root, algorithm="smp")
            assert np.array_equal(got, want), ("bcast", k, n, root)
            want, got = np.zeros(n), np.full(n, -1.0)
            nat.Reduce(x, want if r == root else None, MPI.SUM, root)
            hand.Reduce(x, got if r == root else None, MPI.SUM, root, algorithm="smp")
            if r == root:
                assert np.array_equal(got, want), ("reduce", k, n, root)
        hand.Barrier(algorithm="smp")
    hand.Free()


@pytest.mark.mpi(min_size=4)
def test_only_leaders_cross_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes of 2 ranks: in smp allreduce only each node's lowest rank sends to another node,
    and a node sends exactly what the leaders' allreduce needs (counted in the MPI run)."""
    hand = _backend(monkeypatch, 2)
    n = 1024 * COMM.size
    x = np.ones(n)
    y = np.empty(n)
    hand.traffic.reset()
    hand.Allreduce(x, y, algorithm="smp")
    assert np.array_equal(y, np.full(n, float(COMM.size)))
    inter = COMM.allgather(hand.traffic.inter_bytes_sent)
    leaders = [i for i in range(COMM.size) if i % 2 == 0]
    assert all(inter[i] == 0 for i in range(COMM.size) if i not in leaders)
    sim = mpicoll.simulate("allreduce", COMM.size, n, algorithm="smp", nodes=hand.nodes)
    assert inter == sim.inter_bytes_sent.tolist()
    hand.Free()
