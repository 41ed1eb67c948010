"""The allgather and alltoall schedules' own structure, beyond the registry-wide sweeps (which
check every algorithm's results and costs): MPICH's recursive-exchange layout, each schedule's
messages per rank, and the documented fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from mpicoll.algorithms.allgather import recexch
from mpicoll.model.alphabeta import Model
from mpicoll.tools.simulate import simulate

UNIT = Model(alpha=1.0, beta=0.0, gamma=0.0)  # time = message rounds on the critical path


def test_recexch_layout_is_mpich_s() -> None:
    """``MPII_Recexchalgo_get_neighbors`` by hand: p = 8, k = 3 (pofk 3, rem 5, T 7): ranks 0,1
    fold into 2, 3,4 into 5, 6 into T = 7; the participants 2, 5, 7 exchange."""
    x = recexch(8, 3)
    assert (x.k, x.pofk, x.phases, x.rem, x.t) == (3, 3, 1, 5, 7)
    assert [x.sendto(r) for r in range(8)] == [2, 2, -1, 5, 5, -1, 7, -1]
    assert [x.recvfrom(r) for r in (2, 5, 7)] == [[1, 0], [4, 3], [6]]
    assert x.nbrs(2, 0) == [5, 7]
    assert x.nbrs(7, 0) == [2, 5]
    assert [x.blocks(r, 0) for r in (2, 5, 7)] == [(0, 3), (3, 6), (6, 8)]
    y = recexch(4, 3)  # one rank folds into rank T = 1
    assert (y.pofk, y.rem, y.t) == (3, 1, 1)
    assert [y.sendto(r) for r in range(4)] == [1, -1, -1, -1]
    assert y.recvfrom(1) == [0]
    assert y.blocks(1, 0) == (0, 2)
    z = recexch(9, 3)  # digits reversed in base 3: 1 = (0, 1) <-> 3 = (1, 0)
    assert [z.reverse(r) for r in range(9)] == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert recexch(2, 4).k == 2
    assert recexch(3, 4).k == 3


@pytest.mark.parametrize(("coll", "name", "p", "messages"), [
    ("allgather", "sparbit", 6, 5),             # p-1 single blocks
    ("allgather", "sparbit", 8, 7),
    ("allgather", "neighbor_exchange", 6, 3),   # p/2 steps
    ("allgather", "neighbor_exchange", 5, 4),   # odd p: the ring's p-1
    ("allgatherv", "neighbor_exchange", 8, 4),
    ("allgather", "direct", 5, 4),
    ("allgather", "two_proc", 2, 1),
    ("allgather", "k_brucks:3", 9, 4),          # 2 phases of k-1 = 2
    ("allgather", "k_brucks:3", 10, 5),         # 3 phases: 2 + 2 + 1
    ("allgather", "recexch_doubling:3", 9, 4),  # 2 phases of 2 partners
    ("allgather", "recexch_halving:3", 9, 5),   # + the digit-reversal swap
    ("allgather", "recexch_doubling:2", 5, 3),  # rank 1: 2 phases, then rank 0's result
    ("alltoall", "k_brucks:3", 9, 4),
    ("alltoall", "linear_sync:2", 7, 6),
    ("alltoall", "two_proc", 2, 1),
    ("alltoall", "pairwise_sendrecv_replace", 5, 4),
])
def test_messages_per_rank(coll: str, name: str, p: int, messages: int) -> None:
    """The most messages any rank sends (the walk-throughs' counts)."""
    r = simulate(coll, p, 6, algorithm=name, data=False, uniform=True)
    assert int(np.max(r.messages_sent)) == messages


def test_linear_sync_batches() -> None:
    """One receive and one send in flight (reqs = 1): p-1 rounds of one message each way, each
    a permutation (time = p-1 messages); reqs = 0 or >= p-1: ``linear``'s one round."""
    r = simulate("alltoall", 7, 4, algorithm="linear_sync:1", model=UNIT, data=False)
    assert r.time == 6
    whole = simulate("alltoall", 7, 4, algorithm="linear", model=UNIT, data=False).time
    for reqs in (0, 6, 9):
        r = simulate("alltoall", 7, 4, algorithm=f"linear_sync:{reqs}", model=UNIT, data=False)
        assert r.time == whole
    r = simulate("alltoall", 7, 4, algorithm="linear_sync:2", model=UNIT, data=False)
    assert r.time >= 6
    assert int(np.max(r.messages_sent)) == 6


def test_pairwise_sendrecv_replace_takes_2p_minus_3_exchange_times() -> None:
    for p in (2, 3, 4, 7):
        r = simulate("alltoall", p, 4, algorithm="pairwise_sendrecv_replace", model=UNIT,
                     data=False)
        assert r.time == 2 * p - 3


@pytest.mark.parametrize("coll", ["allgather", "allgatherv", "alltoall"])
def test_two_proc_refuses_more_than_two_ranks(coll: str) -> None:
    """Open MPI's two_proc forms run on two ranks only (p = 1: nothing to exchange)."""
    from mpicoll.algorithms import registry

    alg = registry.get(coll, "two_proc")
    assert alg.why_not(1) is None
    assert alg.why_not(2) is None
    with pytest.raises(registry.RestrictionError, match="at most two ranks"):
        simulate(coll, 3, 4, algorithm="two_proc", data=False)
