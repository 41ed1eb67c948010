"""Barrier."""

from __future__ import annotations

from .registry import Cost, algorithm, default_rule
from .schedule import Context, Schedule


@algorithm(
    "barrier", "dissemination",
    cost=Cost("clg(p)*alpha"),
    source="Hensgen, Finkel & Manber 1988; MPICH barrier_intra_dissemination (k=2)",
)
def dissemination(ctx: Context) -> Schedule:
    """Dissemination barrier: in round k, signal rank + 2^k and wait for rank - 2^k::

        p = 5:   k=1: r -> r+1    k=2: r -> r+2    k=4: r -> r+4     (mod 5)

    After round k every rank has heard, directly or not, from the 2^(k+1) ranks before it, so
    ceil(lg p) rounds of one empty message each suffice for any p.
    """
    p, r = ctx.size, ctx.rank
    token_out, token_in = ctx.scratch(0), ctx.scratch(0)
    k = 1
    while k < p:
        yield ctx.sendrecv(token_out, (r + k) % p, token_in, (r - k) % p)
        k <<= 1


@default_rule("barrier")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "dissemination"
