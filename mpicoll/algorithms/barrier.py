"""Barrier."""

from __future__ import annotations

from .registry import algorithm, clg, default_rule
from .schedule import Context, Schedule


@algorithm(
    "barrier", "dissemination",
    formula="ceil(lg p) alpha",
    cost=lambda p, n, a, b, g: clg(p) * a,
    source="Hensgen, Finkel & Manber 1988; MPICH barrier_intra_dissemination (k=2)",
)
def dissemination(ctx: Context) -> Schedule:
    """Dissemination barrier: in round k, signal rank + 2^k and wait for rank - 2^k.

    After round k every rank has heard, directly or not, from the 2^(k+1) ranks before it, so
    ceil(lg p) rounds of one empty message each suffice for any p.
    Cost: ceil(lg p) alpha.
    """
    p, r = ctx.size, ctx.rank
    token_out, token_in = ctx.scratch(0), ctx.scratch(0)
    k = 1
    while k < p:
        yield ctx.sendrecv(token_out, (r + k) % p, token_in, (r - k) % p)
        k <<= 1


@algorithm(
    "barrier", "smp",
    formula="ceil(lg N) alpha_o + 2 ceil(lg k) alpha_i (+ (k-1) alpha_i at the leader)",
    cost=lambda p, n, a, b, g: (p - 1) * a + clg(p) * a,
    source="MPICH barrier_intra_smp; Open MPI coll/han",
    auto=False,
)
def smp(ctx: Context) -> Schedule:
    """Hierarchical barrier: every rank checks in with its node leader, the leaders run a
    dissemination barrier, and each leader releases its node with a binomial broadcast.
    """
    from .bcast import binomial as bcast_binomial
    from .gather import linear as gather_linear

    groups, index = ctx.node_groups()
    members = groups[index[ctx.rank]]
    local = ctx.group(members)
    token = ctx.scratch(0)
    zeros = [0] * len(members)
    yield from gather_linear(local, token, token if local.rank == 0 else None, zeros, zeros, 0)
    if local.rank == 0 and len(groups) > 1:
        yield from dissemination(ctx.group([g[0] for g in groups]))
    yield from bcast_binomial(local, token, 0)


@default_rule("barrier")
def _auto(p: int, nbytes: int, commutative: bool) -> str:
    return "dissemination"
