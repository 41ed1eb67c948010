"""The call path stays short: public method -> check-and-parse -> select (once) -> engine.

Measured on a communicator whose ``Isend`` records the Python stack the first time it is called:
the frames from the public method (``Allreduce``, ...) down to the one that calls ``Isend``.
Today that is 5 for a blocking call (``Allreduce``, ``Collectives._call``, the cached runner,
``Engine.run``, ``MPIContext.post``) and 7 for an I-form (``Engine.start``, then the request's
first round); the bound is 12.  Also: a call reads no environment variable, and a name given as
``algorithm=`` is looked up in the registry once per backend, not at every call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll.algorithms import registry
from mpicoll.backends import p2p as p2p_module

COMM = MPI.COMM_WORLD
#: the most Python frames from a public method to the one that calls the first Isend
MAX_FRAMES = 12


class Watched(MPI.Intracomm):
    """COMM_WORLD with an ``Isend`` that keeps the names of the Python frames above its first
    call (mpi4py's ``Dup`` keeps the subclass, so the backend's private copy is watched too)."""

    stack: list[str] | None = None

    @staticmethod
    def _watch() -> None:
        if Watched.stack is None:
            names = []
            frame = sys._getframe(2)
            while frame is not None:
                names.append(frame.f_code.co_name)
                frame = frame.f_back
            Watched.stack = names[::-1]

    def Isend(self, *args: Any, **kw: Any) -> MPI.Request:
        self._watch()
        return super().Isend(*args, **kw)

    # a compiled plan's replay (a call of a layout seen before, new arrays: a template's)
    # sends with these
    def Sendrecv(self, *args: Any, **kw: Any) -> Any:
        self._watch()
        return super().Sendrecv(*args, **kw)

    def Send(self, *args: Any, **kw: Any) -> None:
        self._watch()
        return super().Send(*args, **kw)


@pytest.fixture
def hand() -> Iterator[mpicoll.P2P]:
    if COMM.size < 2:
        pytest.skip("no message is sent at P = 1")
    b = mpicoll.p2p(Watched(COMM))
    yield b
    b.Free()


def frames_to_first_isend(method: str, run: Callable[[], Any]) -> list[str] | None:
    """The frame names from ``method`` to the caller of the first Isend ``run`` makes (None:
    this rank sent nothing)."""
    Watched.stack = None
    run()
    stack = Watched.stack
    if stack is None:
        return None
    assert method in stack, stack
    return stack[len(stack) - 1 - stack[::-1].index(method):]


CALLS: list[tuple[str, str, Callable[[mpicoll.P2P], Any]]] = [
    ("Allreduce", "ring",
     lambda b: b.Allreduce(np.ones(8), np.empty(8), algorithm="ring")),
    ("Allreduce", "recursive_doubling",
     lambda b: b.Allreduce(np.ones(1), np.empty(1), algorithm="recursive_doubling")),
    ("Allreduce", "auto", lambda b: b.Allreduce(np.ones(8), np.empty(8))),
    ("Iallreduce", "ring",
     lambda b: b.Iallreduce(np.ones(8), np.empty(8), algorithm="ring").Wait()),
    ("Bcast", "binomial", lambda b: b.Bcast(np.ones(8), root=0, algorithm="binomial")),
    ("Alltoall", "auto", lambda b: b.Alltoall(np.ones(2 * COMM.size), np.empty(2 * COMM.size))),
]


@pytest.mark.mpi
@pytest.mark.parametrize(("method", "algorithm", "run"), CALLS,
                         ids=[f"{m}-{a}" for m, a, _ in CALLS])
def test_at_most_twelve_frames_to_the_first_isend(hand: mpicoll.P2P, method: str,
                                                  algorithm: str, run: Callable[..., Any]
                                                  ) -> None:
    run(hand)  # the first call of a name looks it up in the registry
    frames = frames_to_first_isend(method, lambda: run(hand))
    if frames is None:  # a leaf of the Bcast tree only receives
        assert method == "Bcast"
        assert COMM.rank != 0
        return
    assert len(frames) <= MAX_FRAMES, " -> ".join(frames)
    assert "_checked_call" not in frames


@pytest.mark.mpi
def test_no_call_reads_the_environment(hand: mpicoll.P2P, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    """The environment is read when the backend is made, never by a call."""
    read: list[str] = []

    class Spy(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            read.append(key)
            return super().get(key, default)

        def __getitem__(self, key: Any) -> Any:
            read.append(key)
            return super().__getitem__(key)

    monkeypatch.setattr(os, "environ", Spy(os.environ))
    x, y = np.ones(8), np.empty(8)
    hand.Allreduce(x, y)
    hand.Allreduce(x, y, algorithm="ring")
    hand.Iallgather(x, np.empty(8 * COMM.size)).Wait()
    hand.Bcast(x, algorithm="pipeline")
    hand.Reduce_scatter(np.ones(8 * COMM.size), y)
    assert [k for k in read if "MPICOLL" in str(k)] == []


@pytest.mark.mpi
def test_an_algorithm_name_is_looked_up_once(hand: mpicoll.P2P,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[tuple[str, str]] = []
    real = registry.get

    def get(collective: str, name: str) -> registry.Algorithm:
        looked.append((collective, name))
        return real(collective, name)

    monkeypatch.setattr(p2p_module.registry, "get", get)
    x, y = np.ones(8), np.empty(8)
    for _ in range(3):
        hand.Allreduce(x, y, algorithm="ring")
        assert np.array_equal(y, np.full(8, float(COMM.size)))
    assert looked == [("allreduce", "ring")]
