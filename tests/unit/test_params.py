"""Parameterised algorithms: one spelling (``name:v1[:v2]``) everywhere, bound by the
registry, checked before any message, read by the cost, listed by the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.algorithms import registry
from mpicoll.algorithms.registry import Cost, Param, clgk
from mpicoll.tools.cli import algorithms_table
from mpicoll.tools.simulate import simulate


def test_clgk_is_the_rounds_of_a_radix_k_tree() -> None:
    assert [clgk(p, 2) for p in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    assert [clgk(p, 3) for p in (1, 3, 4, 9, 10, 27, 28)] == [0, 1, 2, 2, 3, 3, 4]
    assert clgk(4096, 8) == 4


def test_bare_name_is_the_defaults_and_a_suffix_binds() -> None:
    base = registry.get("bcast", "pipeline")
    assert base.params
    assert base.values == (0,)
    assert base.base == "pipeline"
    assert registry.get("bcast", "pipeline:0") is base  # the defaults: the registered entry
    bound = registry.get("bcast", "pipeline:1024")
    assert bound.name == "pipeline:1024"
    assert bound.base == "pipeline"
    assert bound.values == (1024,)
    assert registry.get("bcast", "pipeline:1024") is bound  # one object per spelling
    assert registry.known("bcast", "pipeline:1024")
    assert not registry.known("bcast", "ring:3")


@pytest.mark.parametrize("name", ["pipeline:-1", "pipeline:2000000000", "pipeline:x",
                                  "pipeline:1:2", "binomial:3", "nosuch:2",
                                  # an empty or non-decimal field: a typo, not the defaults
                                  "pipeline:", "knomial:", "pipelined_tree:3:", "knomial: 3",
                                  "knomial:+3", "knomial:3 "])
def test_bad_parameters_raise_value_error(name: str) -> None:
    with pytest.raises(ValueError):
        registry.get("bcast", name)
    with pytest.raises(ValueError):
        registry.select("bcast", 4, name, nbytes=8)


def test_the_cost_reads_the_parameter() -> None:
    """``seg`` is the cost's ``s``: a smaller segment, more pipeline steps, more alpha."""
    n, alpha = 1 << 20, 1e-6
    t64k = registry.get("bcast", "pipeline").cost(8, n, alpha, 0.0, 0.0)
    t8k = registry.get("bcast", "pipeline:8192").cost(8, n, alpha, 0.0, 0.0)
    assert t64k == pytest.approx((8 - 2 + 16) * alpha)
    assert t8k == pytest.approx((8 - 2 + 128) * alpha)


def test_the_schedule_runs_with_the_parameter() -> None:
    """The bound schedule cuts the message into ``seg``-byte pieces: messages counted by the
    simulator (p = 3, a chain of two hops)."""
    counts = {}
    for name in ("pipeline", "pipeline:1024", "pipeline:8192"):
        res = simulate("bcast", 3, 4096, algorithm=name, dtype=np.float64)
        counts[name] = int(res.messages_sent.sum())
    assert counts["pipeline:1024"] == 2 * 32
    assert counts["pipeline:8192"] == 2 * 4
    assert counts["pipeline"] == 2 * 1


def test_examples_are_swept() -> None:
    names = [a.name for a in registry.variants("bcast")]
    assert "pipeline:1024" in names
    assert "pipeline:8192" in names


def test_declared_parameter_must_be_a_keyword_of_the_schedule() -> None:
    def sched(ctx, buf, root):  # type: ignore[no-untyped-def]
        yield ()

    with pytest.raises(TypeError, match="keyword-only"):
        registry.algorithm("bcast", "test_only_bad", cost=Cost("alpha"),
                           params=(Param("k", 2, 2, 8),))(sched)
    assert not registry.known("bcast", "test_only_bad")


def test_listing_fits_a_terminal_and_names_the_parameters() -> None:
    short = algorithms_table()
    assert max(len(line) for line in short.splitlines()) <= 120
    assert "seg=0 (0..1073741824)" in short
    assert "alpha" in algorithms_table(long=True)


def test_forced_by_keyword_on_a_real_call() -> None:
    """The spelling reaches the front door (P = 1 here; the MPI tests run it at P = 1..5)."""
    import mpicoll

    hand = mpicoll.p2p(MPI.COMM_SELF)
    try:
        buf = np.arange(5.0)
        hand.Bcast(buf, root=0, algorithm="pipeline:16")
        assert list(buf) == [0.0, 1.0, 2.0, 3.0, 4.0]
        with pytest.raises(ValueError, match="out of range"):
            hand.Bcast(buf, root=0, algorithm="pipeline:-5")
    finally:
        hand.Free()
