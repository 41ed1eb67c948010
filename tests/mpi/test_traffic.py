"""Traffic counted in a real MPI run equals the simulator's count for the same schedule, and
the bandwidth-optimal forms move exactly the seed article's volumes."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll import registry
from mpicoll.backends.p2p import ZERO_SIZE_COLLECTIVES
from mpicoll.tools.simulate import make_args, simulate

COMM = MPI.COMM_WORLD
METHOD = {c: "".join([c[0].upper(), c[1:]]) for c in registry.COLLECTIVES}


@pytest.fixture(scope="module")
def hand() -> mpicoll.P2P:
    return mpicoll.p2p(COMM)


@pytest.mark.mpi
@pytest.mark.parametrize("coll", registry.COLLECTIVES)
def test_counted_mpi_run_matches_simulator(hand: mpicoll.P2P, coll: str) -> None:
    p, rank = COMM.size, COMM.rank
    dtype = np.dtype(np.float64)
    for alg in registry.variants(coll):
        if alg.why_not(p) is not None:
            continue
        for count in (0, 3, p + 1):
            root = p - 1
            args, _ = make_args(coll, p, rank, count, dtype, root=root)
            hand.traffic.reset()
            getattr(hand, METHOD[coll])(*args, algorithm=alg.name)
            got = hand.traffic.as_dict()
            sim = simulate(coll, p, count, algorithm=alg.name, root=root, nodes=hand.nodes)
            want = {k: int(getattr(sim, k)[rank])
                    for k in ("messages_sent", "bytes_sent", "messages_recv", "bytes_recv")}
            if coll in ZERO_SIZE_COLLECTIVES and not any(sim.bytes_sent):  # no byte: no round
                want = dict.fromkeys(want, 0)
            assert {k: got[k] for k in want} == want, (coll, alg.name, count, rank)


@pytest.mark.mpi
def test_ring_allreduce_moves_2n_p_minus_1_over_p(hand: mpicoll.P2P) -> None:
    p = COMM.size
    n_elems = 1024 * p
    x = np.ones(n_elems)
    y = np.empty_like(x)
    hand.traffic.reset()
    hand.Allreduce(x, y, algorithm="ring")
    t = hand.traffic
    assert np.array_equal(y, np.full(n_elems, float(p)))
    assert t.bytes_sent == t.bytes_recv == 2 * x.nbytes * (p - 1) // p
    hand.traffic.reset()
    out = np.empty(1024)
    hand.Reduce_scatter_block(x, out, algorithm="ring")
    assert t.bytes_sent == t.bytes_recv == x.nbytes * (p - 1) // p
    hand.traffic.reset()
    hand.Allgather(out, y, algorithm="ring")
    assert t.bytes_sent == t.bytes_recv == y.nbytes * (p - 1) // p
