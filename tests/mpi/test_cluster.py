"""On the emulated cluster only (``make cluster-test``, which sets ``MPICOLL_CLUSTER``): the
p2p backend's node map is the real one (the ranks' hosts), and the TCP payload the nodes send
one another during a collective equals the simulator's inter-node bytes of that call, for
every allreduce, bcast and allgather algorithm that runs at this P (smp included: only its
node leaders' traffic crosses)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll.algorithms.registry import algorithms
from mpicoll.tools.cluster import tcp_bytes_sent
from mpicoll.tools.simulate import simulate

COMM = MPI.COMM_WORLD
pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not os.environ.get("MPICOLL_CLUSTER"),
                       reason="runs on the emulated cluster only (make cluster-test; "
                       "docs/cluster.md)"),
]


def _numbered(ids: list[object]) -> list[int]:
    """The partition ``ids`` describes, its parts numbered in order of first appearance."""
    first: dict[object, int] = {}
    return [first.setdefault(i, len(first)) for i in ids]


def _nodes() -> list[int]:
    """Node of each rank from its host's name."""
    return _numbered(COMM.allgather(MPI.Get_processor_name()))


def test_node_map_is_the_hosts() -> None:
    hand = mpicoll.p2p(COMM)
    try:
        assert _numbered(list(hand.nodes)) == _nodes()
    finally:
        hand.Free()


def _call(hand: mpicoll.P2P, collective: str, alg: str, count: int):  # type: ignore[no-untyped-def]
    x = np.arange(count, dtype=np.float64) + COMM.rank
    if collective == "allreduce":
        y = np.empty(count)
        return lambda: hand.Allreduce(x, y, algorithm=alg)
    if collective == "bcast":
        return lambda: hand.Bcast(x, root=COMM.size - 1, algorithm=alg)
    y = np.empty(count * COMM.size)
    return lambda: hand.Allgather(x, y, algorithm=alg)


@pytest.mark.parametrize("collective", ["allreduce", "bcast", "allgather"])
def test_inter_node_bytes_equal_simulator(collective: str) -> None:
    nodes = _nodes()
    node = COMM.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.rank == 0
    hand = mpicoll.p2p(COMM)
    count = 10007  # 80 KB per rank, not divisible by P
    checked = 0
    try:
        for a in algorithms(collective):
            try:
                call = _call(hand, collective, a.name, count)
                call()  # connections made, scratch allocated; a restriction raises here
            except ValueError:  # RestrictionError on every rank alike, before any message
                continue
            COMM.Barrier()
            before = tcp_bytes_sent() if leader else 0
            COMM.Barrier()  # no rank sends before every leader has read its counter
            call()
            COMM.Barrier()
            sent = COMM.allreduce((tcp_bytes_sent() - before) if leader else 0)
            sim = simulate(collective, COMM.size, count, algorithm=a.name, root=COMM.size - 1,
                           nodes=nodes)
            want = int(sim.inter_bytes_sent.sum())
            # the MPI library's own headers and the barrier's few messages come on top
            assert want <= sent <= want * 1.01 + 4096, (collective, a.name, sent, want)
            checked += 1
    finally:
        hand.Free()
        node.Free()
    assert checked > 0
