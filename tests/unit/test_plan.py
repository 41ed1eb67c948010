"""A compiled plan (mpicoll.engines.plan) is the schedule it was compiled from.

For every registered algorithm of every collective at p = 1, 3, 4, 5 (in place and not, where
the collective allows it), the simulator's run of the compiled plans (``Plan.replay``) gives
the same outputs, clocks and message counts as its run of the generators; a plan records no
local work twice and allocates its scratch once, at compile time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms import registry
from mpicoll.algorithms.collectives import BY_NAME, NAMES
from mpicoll.backends.args import PARSERS
from mpicoll.engines.plan import Recorder, compile_plan
from mpicoll.engines.sim import Simulator
from mpicoll.model import Model
from mpicoll.tools.simulate import make_args

MODEL = Model(alpha=1e-6, beta=1e-9, gamma=2e-10, o_call=1e-7, o_msg=5e-8)


def _calls(coll: str, p: int, in_place: bool) -> tuple[list[Any], list[Any]]:
    calls, outs = [], []
    for rank in range(p):
        args, out = make_args(coll, p, rank, 5, np.float64, root=p - 1,
                              in_place=in_place)
        calls.append(PARSERS[coll](p, rank, *args))
        outs.append(out)
    return calls, outs


def _cases() -> list[Any]:
    out = []
    for coll in NAMES:
        for alg in registry.variants(coll):
            for in_place in ((False, True) if BY_NAME[coll].in_place else (False,)):
                out.append(pytest.param(coll, alg.name, in_place,
                                        id=f"{coll}-{alg.name}-{'inplace' if in_place else 'out'}"))
    return out


@pytest.mark.parametrize(("coll", "name", "in_place"), _cases())
def test_simulated_plan_equals_the_generator(coll: str, name: str, in_place: bool) -> None:
    alg = registry.get(coll, name)
    ran = 0
    for p in (1, 3, 4, 5):
        calls, outs = _calls(coll, p, in_place)
        if any(alg.why_not(p, commutative=c.commutative, count=c.count, in_place=c.in_place,
                           uniform=c.uniform) for c in calls):
            continue
        ran += 1
        sim = Simulator(p, MODEL)
        gens = []
        for rank, call in enumerate(calls):
            ctx = sim.context(rank, call.datatype, call.dtype)
            gens.append(alg.schedule(ctx, *call.prepare(ctx)))
        want = sim.run(gens)
        want_out = [None if o is None else o.copy() for o in outs]

        calls, outs = _calls(coll, p, in_place)  # fresh buffers, the same inputs
        sim = Simulator(p, MODEL)
        plans = [compile_plan(call, alg, rank, p, sim.nodes, sim.segment_bytes)
                 for rank, call in enumerate(calls)]
        got = sim.run([plan.replay(sim.context(rank, call.datatype, call.dtype))
                       for rank, (plan, call) in enumerate(zip(plans, calls, strict=True))])
        for k in want:
            assert np.array_equal(got[k], want[k]), (p, k, got[k], want[k])
        for rank, (a, b) in enumerate(zip(outs, want_out, strict=True)):
            if b is not None:
                assert np.array_equal(a, b), (p, rank, a, b)
        for rank, plan in enumerate(plans):  # the plan's own count of its traffic
            assert plan.traffic["messages_sent"] == want["messages_sent"][rank]
            assert plan.traffic["bytes_recv"] == want["bytes_recv"][rank]
    assert ran, f"{coll}/{name} ran at none of p = 1, 3, 4, 5"


def test_recorder_defers_local_work_and_allocates_scratch_once() -> None:
    rec = Recorder(0, 2, MPI.DOUBLE, np.dtype(np.float64))
    a, b = np.ones(3), np.zeros(3)
    rec.copy(a, b)
    rec.reduce(a, b, MPI.SUM)
    rec.copy(a[:0], b[:0])  # empty: nothing to record
    assert np.array_equal(b, np.zeros(3)), "a recorder does no work"
    assert [k for k, *_ in rec.local] == ["copy", "reduce"]
    s = rec.scratch(4)
    assert s.shape == (4,)
    assert rec.scratch_bytes == 32


def test_compile_refuses_what_is_not_a_round_of_messages() -> None:
    call = PARSERS["barrier"](2, 0)

    class Odd:
        name = "odd"

        @staticmethod
        def schedule(ctx: Any) -> Any:
            yield ("not a message",)

    with pytest.raises(TypeError, match="not a Send or Recv"):
        compile_plan(call, Odd, 0, 2)  # type: ignore[arg-type]
