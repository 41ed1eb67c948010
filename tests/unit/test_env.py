"""The environment variables (``MPICOLL_SEGMENT_SIZE``, ``MPICOLL_<COLL>_ALGORITHM``,
``MPICOLL_RANKS_PER_NODE``, ``MPICOLL_CHECK``), read once when a backend is made, and the type
of ``algorithm=``, in one process (no mpiexec)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll import registry
from mpicoll.algorithms.schedule import Context, segment_count
from mpicoll.backends import env

BAD_SEGMENTS = ["0", "-1", "-65536", "abc", "1.5", "64k", "0x40"]


def ctx(dtype: str = "float64") -> Context:
    return Context(0, 2, MPI.DOUBLE, np.dtype(dtype))


def test_segment_count_comes_from_the_context() -> None:
    """Schedules never read the environment: the segment size arrives through the context."""
    assert segment_count(ctx()) == 65536 // 8  # the default
    assert segment_count(Context(0, 2, MPI.DOUBLE, np.dtype("float64"), None, 128)) == 16
    # smaller than an element: one element
    assert segment_count(Context(0, 2, MPI.DOUBLE, np.dtype("complex128"), None, 1)) == 1
    assert segment_count(ctx().relative(1)) == 65536 // 8  # views keep the base's


def test_segment_size_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPICOLL_SEGMENT_SIZE", raising=False)
    assert env.segment_bytes() == 65536
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", "")  # empty: the default, as unset
    assert env.segment_bytes() == 65536
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", " 128 ")
    assert env.segment_bytes() == 128


@pytest.mark.parametrize("value", BAD_SEGMENTS)
def test_segment_size_refuses_bad_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", value)
    with pytest.raises(ValueError, match="MPICOLL_SEGMENT_SIZE") as info:
        env.segment_bytes()
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", ["0", "abc"])
def test_bad_segment_size_refused_by_the_backend_and_the_simulator(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", value)
    with pytest.raises(ValueError, match="MPICOLL_SEGMENT_SIZE"):
        mpicoll.p2p(MPI.COMM_SELF)  # refused before the Dup
    with pytest.raises(ValueError, match="MPICOLL_SEGMENT_SIZE"):
        mpicoll.simulate("bcast", 4, 1024, algorithm="pipeline")


def test_bad_env_algorithm_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown name is refused when the backend is made (naming the variable, the value and
    the valid names); ``auto`` is accepted."""
    monkeypatch.setenv("MPICOLL_BCAST_ALGORITHM", "nope")
    with pytest.raises(ValueError, match=r"MPICOLL_BCAST_ALGORITHM='nope'.*binomial"):
        mpicoll.p2p(MPI.COMM_SELF)
    monkeypatch.setenv("MPICOLL_BCAST_ALGORITHM", "auto")
    with mpicoll.p2p(MPI.COMM_SELF) as b:
        b.Bcast(np.zeros(3))


def test_env_algorithm_is_used_and_the_keyword_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPICOLL_ALLGATHER_ALGORITHM", "recursive_doubling")
    with mpicoll.p2p(MPI.COMM_SELF) as b:
        assert b.settings.forced("allgather") == "recursive_doubling"
        assert b.settings.forced("allreduce") == "auto"
        x, y = np.arange(3.0), np.zeros(3)
        b.Allgather(x, y)
        assert np.array_equal(x, y)
        b.Allgather(x, y, algorithm="ring")  # the keyword wins over the variable


def test_environment_is_read_once_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set after the backend was made changes nothing: no call re-reads it."""
    for var in ("MPICOLL_SEGMENT_SIZE", "MPICOLL_RANKS_PER_NODE", "MPICOLL_BCAST_ALGORITHM"):
        monkeypatch.delenv(var, raising=False)
    with mpicoll.p2p(MPI.COMM_SELF) as b:
        monkeypatch.setenv("MPICOLL_SEGMENT_SIZE", "0")
        monkeypatch.setenv("MPICOLL_BCAST_ALGORITHM", "nope")
        monkeypatch.setenv("MPICOLL_RANKS_PER_NODE", "abc")
        a = np.arange(4.0)
        b.Bcast(a)
        b.Bcast(a, algorithm="pipeline")
        s = b.settings
        assert (s.segment_bytes, s.ranks_per_node, s.algorithms) == (65536, None, {})
        assert np.array_equal(a, np.arange(4.0))


@pytest.mark.parametrize(("var", "value"), [("MPICOLL_RANKS_PER_NODE", "0"),
                                            ("MPICOLL_SEGMENT_SIZE", "64k"),
                                            ("MPICOLL_ALLREDUCE_ALGORITHM", "rign")])
def test_p2p_refuses_a_bad_variable_at_construction(monkeypatch: pytest.MonkeyPatch, var: str,
                                                    value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"{var}={value!r}"):
        mpicoll.p2p(MPI.COMM_SELF)
    with mpicoll.native(MPI.COMM_SELF) as n:  # native does not use them
        n.Barrier()


def test_env_algorithm_restriction_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forced algorithm whose restriction a call breaks: RestrictionError at that call,
    starting with the variable."""
    monkeypatch.setenv("MPICOLL_ALLREDUCE_ALGORITHM", "ring")  # needs a commutative op
    noncomm = MPI.Op.Create(lambda a, b, t: None, commute=False)
    try:
        with mpicoll.p2p(MPI.COMM_SELF) as b, pytest.raises(
                registry.RestrictionError, match=r"^MPICOLL_ALLREDUCE_ALGORITHM='ring': .*"
                                                 r"commutative"):
            b.Allreduce(np.zeros(2), np.zeros(2), op=noncomm)
    finally:
        noncomm.Free()


@pytest.mark.parametrize("kind", ["native", "p2p"])
@pytest.mark.parametrize("algorithm", [3, 1.0, b"ring", ["ring"]])
def test_algorithm_that_is_not_a_str_is_a_type_error(kind: str, algorithm: object) -> None:
    with getattr(mpicoll, kind)(MPI.COMM_SELF) as b, pytest.raises(TypeError, match="algorithm"):
        b.Allreduce(np.zeros(2), np.zeros(2), algorithm=algorithm)
    with pytest.raises(TypeError, match="algorithm"):
        registry.get("allreduce", algorithm)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5"])
def test_ranks_per_node_refuses_bad_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MPICOLL_RANKS_PER_NODE", value)
    with pytest.raises(ValueError, match="MPICOLL_RANKS_PER_NODE"):
        mpicoll.simulate("allreduce", 4, 10)


def test_ranks_per_node_sets_the_simulated_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPICOLL_RANKS_PER_NODE", "2")
    r = mpicoll.simulate("allreduce", 4, 8, algorithm="ring")
    # ranks 1 and 3 send all their 2 (p-1) blocks of 16 B to the next node
    assert r.inter_bytes_sent.tolist() == [0, 96, 0, 96]
    monkeypatch.setenv("MPICOLL_RANKS_PER_NODE", "")
    assert mpicoll.simulate("allreduce", 4, 8, algorithm="ring").inter_bytes_sent.sum() == 0


def test_simulate_takes_int_ranks_only() -> None:
    assert mpicoll.simulate("allreduce", np.int64(5), 7).p == 5
    with pytest.raises(TypeError, match="ranks"):
        mpicoll.simulate("allreduce", True, 7)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", [mpicoll.native, mpicoll.p2p])
def test_mpicoll_check_values(monkeypatch: pytest.MonkeyPatch, backend: object) -> None:
    """``$MPICOLL_CHECK``: the on and off words, and a typo refused (not silently off)."""
    for value, on in (("1", True), ("YES", True), (" on ", True), ("", False), ("0", False),
                      ("off", False), ("false", False)):
        monkeypatch.setenv("MPICOLL_CHECK", value)
        with backend(MPI.COMM_SELF) as c:  # type: ignore[operator]
            assert c.check is on, value
    monkeypatch.setenv("MPICOLL_CHECK", "maybe")
    with pytest.raises(ValueError, match="MPICOLL_CHECK='maybe'"):
        backend(MPI.COMM_SELF)  # type: ignore[operator]
