"""Every barrier algorithm is a barrier: no rank's schedule ends before it has heard, directly
or through others, from every rank (knowledge carried by the messages, followed round by round
with MPI's matching rules), at p = 1..40; and the recursive-exchange pattern is MPICH's."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms import registry
from mpicoll.algorithms.barrier import k_dissemination, recexch, recexch_neighbors
from mpicoll.algorithms.schedule import Context, Overlap, Recv, Schedule, Send

SIZES = range(1, 41)


def _heard(schedule: Callable[[Context], Schedule], p: int) -> list[set[int]]:
    """Run ``schedule`` on p ranks; each rank's set of ranks it has heard from when its
    schedule ends.  A message carries what its sender knew when it posted the round."""
    gens = [schedule(Context(r, p, MPI.BYTE, np.dtype(np.uint8))) for r in range(p)]
    known = [{r} for r in range(p)]
    wire: dict[tuple[int, int], deque[frozenset[int]]] = {}
    waiting: list[list[int] | None] = [None] * p
    final: list[set[int]] = [set() for _ in range(p)]

    def post(r: int) -> None:
        try:
            rnd = next(gens[r])
        except StopIteration:
            waiting[r] = None
            final[r] = set(known[r])
            return
        ops = rnd.ops if isinstance(rnd, Overlap) else rnd
        for op in ops:
            if isinstance(op, Send):
                wire.setdefault((r, op.peer), deque()).append(frozenset(known[r]))
        waiting[r] = [op.peer for op in ops if isinstance(op, Recv)]

    for r in range(p):
        post(r)
    while any(w is not None for w in waiting):
        moved = False
        for r in range(p):
            w = waiting[r]
            if w is None:
                continue
            need: dict[int, int] = {}
            for src in w:
                need[src] = need.get(src, 0) + 1
            if all(len(wire.get((s, r), ())) >= c for s, c in need.items()):
                for src in w:
                    known[r] |= wire[(src, r)].popleft()
                post(r)
                moved = True
        assert moved, f"deadlock at p={p}: waiting {waiting}"
    assert not any(wire.values()), f"messages never received at p={p}"
    return final


def _variants() -> list[tuple[str, Callable[[Context], Schedule]]]:
    """Every flat barrier of the registry with its parameters' examples, and larger radices."""
    out: list[tuple[str, Callable[[Context], Schedule]]] = [
        (a.name, a.schedule) for a in registry.variants("barrier") if a.name != "smp"]
    for k in (8, 13):
        out.append((f"k_dissemination:{k}", partial(k_dissemination, k=k)))
        out.append((f"recexch:{k}", partial(recexch, k=k)))
    return out


@pytest.mark.parametrize(("name", "schedule"), _variants(), ids=lambda v: v if isinstance(
    v, str) else "")
def test_no_rank_leaves_before_hearing_from_every_rank(
        name: str, schedule: Callable[[Context], Schedule]) -> None:
    alg = registry.get("barrier", name)
    for p in SIZES:
        if alg.why_not(p) is not None:
            continue
        heard = _heard(schedule, p)
        for r, h in enumerate(heard):
            assert h == set(range(p)), f"{name} p={p}: rank {r} left having heard only {h}"


def test_recexch_pattern_is_mpichs() -> None:
    """p = 6, k = 3 (the docstring's example), and the pattern's symmetry at every p and k:
    a rank's step-2 neighbours list it back, step 1 pairs up, every non-participant once."""
    assert recexch_neighbors(6, 3, 0) == (2, [], [])
    assert recexch_neighbors(6, 3, 1) == (2, [], [])
    assert recexch_neighbors(6, 3, 3) == (4, [], [])
    assert recexch_neighbors(6, 3, 2) == (-1, [1, 0], [[4, 5]])
    assert recexch_neighbors(6, 3, 4) == (-1, [3], [[2, 5]])
    assert recexch_neighbors(6, 3, 5) == (-1, [], [[2, 4]])
    for k in (2, 3, 4, 5):
        for p in SIZES:
            pat = [recexch_neighbors(p, k, r) for r in range(p)]
            for r, (sendto, recvfrom, phases) in enumerate(pat):
                if sendto >= 0:
                    assert r in pat[sendto][1]
                    assert not phases
                for src in recvfrom:
                    assert pat[src][0] == r
                for i, nbrs in enumerate(phases):
                    assert len(set(nbrs)) == len(nbrs)
                    for nb in nbrs:
                        assert r in pat[nb][2][i]
            assert sum(s >= 0 for s, _, _ in pat) == sum(len(f) for _, f, _ in pat)
