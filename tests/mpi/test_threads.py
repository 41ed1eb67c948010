"""The p2p engine under threads (run under mpiexec; mpi4py's default MPI_THREAD_MULTIPLE).

* 2 and 4 threads, each with its own p2p backend, every thread making ``CALLS`` collectives:
  blocking, non-blocking completed by a ``Test()`` loop, by ``Wait()``, by ``mpicoll.Waitall``
  and by ``mpicoll.Waitany``, and every mode at once (one per thread); every result checked;
* one backend shared by two threads that take turns to start their calls (MPI requires one
  order of collectives per communicator on every rank) and complete them concurrently;
* a lower thread level refused: a child job under mpiexec initialised at
  ``MPI_THREAD_FUNNELED`` / ``MPI_THREAD_SERIALIZED`` (``mpi4py.rc.thread_level``) runs
  ``_thread_level_child.py``, which checks that a call from a thread MPI does not allow raises
  :class:`mpicoll.ThreadLevelError` before any message, and that allowed calls work.

Without a lock in the engine, two threads with their own backends each running Iallreduce and a
Test loop made MPICH raise inside ``Testall`` and hang, and Open MPI return wrong sums (issue 15).

``MPICOLL_TEST_FULL=1``: 200 calls per thread, each test repeated 20 times, and the child job
also at ``MPI_THREAD_SINGLE``.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_threads.py`` (P = 2, 3, 4; it
also runs at 1 and 5).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll

WORLD = MPI.COMM_WORLD
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")
CALLS = 200 if FULL else 60
REPEAT = 20 if FULL else 1
#: per-test limit in seconds (20 repeats of 200 calls under FULL take minutes at P = 5)
LIMIT = 1200 if FULL else 120
#: element counts the calls cycle through (0, 1, not divisible by P, a few segments)
COUNTS = (0, 1, 7, 1000, 3, 257)
MODES = ("blocking", "test", "wait", "waitall", "waitany")
HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT = 60  # seconds per child job


def _expected_sum(tid: int, i: int, n: int) -> np.ndarray:
    """Allreduce(SUM) of rank r's input ``r + 10 tid + i + arange(n)`` over every rank."""
    p = WORLD.size
    return p * (np.arange(n, dtype=np.float64) + 10 * tid + i) + p * (p - 1) / 2


def _ring(n: int) -> str | None:
    """The ring allreduce (2 (P-1) rounds: many chances for two threads to meet in one
    schedule) where it may run (count >= P), else auto."""
    return "ring" if n >= WORLD.size else None


def _inputs(tid: int, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = COUNTS[i % len(COUNTS)]
    x = np.arange(n, dtype=np.float64) + WORLD.rank + 10 * tid + i
    return x, np.full(n, np.nan), _expected_sum(tid, i, n)


def _gathered(tid: int, i: int) -> np.ndarray:
    """Allgather of rank r's 3 int64 ``[r, tid, i]``."""
    return np.array([[r, tid, i] for r in range(WORLD.size)], dtype=np.int64).ravel()


def _work(b: Any, tid: int, mode: str, calls: int) -> None:
    """``calls`` collectives on backend ``b`` in ``mode``; raises AssertionError on a wrong
    result."""
    i = 0
    while i < calls:
        x, y, want = _inputs(tid, i)
        if mode == "blocking":
            b.Allreduce(x, y, op=MPI.SUM)
            checks = [(y, want)]
            i += 1
        elif mode in ("test", "wait"):
            req = b.Iallreduce(x, y, op=MPI.SUM, algorithm=_ring(x.size))
            if mode == "test":
                while not req.Test():
                    pass
            else:
                req.Wait()
            assert req == MPI.REQUEST_NULL
            checks = [(y, want)]
            i += 1
        else:  # two allreduces (ring, auto) and an allgather outstanding, then complete them
            x2, y2, want2 = _inputs(tid, i + 1)
            g = np.full(3 * WORLD.size, -1, dtype=np.int64)
            mine = np.array([WORLD.rank, tid, i], dtype=np.int64)  # alive until completion
            reqs = [b.Iallreduce(x, y, op=MPI.SUM, algorithm=_ring(x.size)),
                    b.Iallgather(mine, g),
                    b.Iallreduce(x2, y2, op=MPI.SUM)]
            if mode == "waitall":
                mpicoll.Waitall(reqs)
            else:
                seen = []
                while (k := mpicoll.Waitany(reqs)) != MPI.UNDEFINED:
                    assert reqs[k] == MPI.REQUEST_NULL
                    seen.append(k)
                assert sorted(seen) == [0, 1, 2], seen
            assert all(r == MPI.REQUEST_NULL for r in reqs)
            checks = [(y, want), (g, _gathered(tid, i)), (y2, want2)]
            i += 2
        for got, exp in checks:
            assert np.array_equal(got, exp), (
                f"thread {tid} ({mode}) call {i}: got {got[:6]}..., expected {exp[:6]}...")


def _run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target in its own thread; re-raise the first failure of any."""
    errors: list[BaseException] = []
    ready = threading.Barrier(len(targets))  # start together: they must meet in the engine

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                ready.wait()
                fn()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t), name=f"worker-{k}")
               for k, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # a hang ends at the test's --timeout (conftest aborts the job)
    if errors:
        raise errors[0]


@pytest.mark.mpi
@pytest.mark.timeout(LIMIT)
@pytest.mark.parametrize("nthreads", [2, 4])
@pytest.mark.parametrize("mode", [*MODES, "mixed"])
def test_threads_with_own_backends(nthreads: int, mode: str) -> None:
    """Each thread has its own p2p backend and makes CALLS collectives; ``mixed``: thread k
    uses mode k (blocking, Test loop, Wait, Waitall, Waitany)."""
    backends = [mpicoll.p2p(WORLD) for _ in range(nthreads)]  # collective: on the main thread
    try:
        for _ in range(REPEAT):
            _run_threads([
                (lambda b=b, t=t: _work(b, t, MODES[t % len(MODES)] if mode == "mixed" else mode,
                                        CALLS))
                for t, b in enumerate(backends)])
            WORLD.Barrier()
    finally:
        for b in backends:
            b.Free()


class _Turns:
    """The user's lock for a backend shared by threads: thread ``t`` of ``n`` may start its
    k-th call only at turn ``k n + t``, the same order on every rank."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.turn = 0
        self.cv = threading.Condition()

    def take(self, tid: int, k: int) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.turn == k * self.n + tid)

    def give(self) -> None:
        with self.cv:
            self.turn += 1
            self.cv.notify_all()


@pytest.mark.mpi
@pytest.mark.timeout(LIMIT)
@pytest.mark.parametrize("how", ["blocking", "wait", "test"])
def test_one_backend_shared_by_two_threads_with_a_user_lock(how: str) -> None:
    """Two threads share one backend: they start their calls in turns (the user's lock), and
    complete the non-blocking ones concurrently, each its own."""
    b = mpicoll.p2p(WORLD)
    turns = _Turns(2)

    def work(tid: int) -> None:
        for k in range(CALLS):
            x, y, want = _inputs(tid, k)
            turns.take(tid, k)
            try:
                if how == "blocking":
                    b.Allreduce(x, y, op=MPI.SUM)
                else:
                    req = b.Iallreduce(x, y, op=MPI.SUM)
            finally:
                turns.give()
            if how == "wait":
                req.Wait()
            elif how == "test":
                while not req.Test():
                    pass
            assert np.array_equal(y, want), f"thread {tid} call {k}: {y[:6]} != {want[:6]}"

    try:
        for _ in range(REPEAT):
            turns.turn = 0
            _run_threads([lambda: work(0), lambda: work(1)])
            WORLD.Barrier()
    finally:
        b.Free()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_thread_waits_while_another_holds_its_schedule() -> None:
    """A helper thread keeps calling ``progress`` (Testall on an unrelated request list) while
    the main thread waits on its own schedules: whoever holds a schedule moves it, and neither
    thread is stopped (the helper's Testall never blocks; the Wait returns)."""
    b = mpicoll.p2p(WORLD)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            mpicoll.Testall([])

    t = threading.Thread(target=spin, name="spinner")
    t.start()
    try:
        for i in range(CALLS // 3):
            x, y, want = _inputs(0, i)
            b.Iallreduce(x, y, op=MPI.SUM).Wait()
            assert np.array_equal(y, want)
    finally:
        stop.set()
        t.join()
        b.Free()


class _IsRequest(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, MPI.Request)


class _Watched:
    """Stands for the ``MPI`` module inside the engine: the same, except that its
    ``Request.Testall/Waitall/Waitany`` record which requests are inside a test or wait call
    and sleep there a millisecond (so other threads run meanwhile): two threads with a common
    request inside such calls at once is what MPI forbids, and what the engine must prevent."""

    def __init__(self) -> None:
        self.inside: dict[int, tuple[int, ...]] = {}  # call id -> request ids
        self.overlaps: list[str] = []
        self.calls = 0
        self.lock = threading.Lock()
        watched = self

        def wrap(name: str) -> Any:
            real = getattr(MPI.Request, name)

            def call(requests: Any, *args: Any) -> Any:
                key = tuple(id(r) for r in requests)
                me = object()
                with watched.lock:
                    watched.calls += 1
                    for other in watched.inside.values():
                        if set(other) & set(key):
                            watched.overlaps.append(
                                f"{name} by {threading.current_thread().name} on requests "
                                f"another thread is testing or waiting on")
                    watched.inside[id(me)] = key
                try:
                    time.sleep(0.001)
                    return real(requests, *args)
                finally:
                    with watched.lock:
                        del watched.inside[id(me)]
            return staticmethod(call)

        class Request(metaclass=_IsRequest):  # isinstance(x, Request): x is an MPI.Request
            Testall = wrap("Testall")
            Waitall = wrap("Waitall")
            Waitany = wrap("Waitany")

        self.Request = Request

    def __getattr__(self, name: str) -> Any:
        return getattr(MPI, name)


@pytest.mark.mpi
@pytest.mark.timeout(LIMIT)
@pytest.mark.parametrize("mode", ["test", "wait"])
def test_one_schedule_is_advanced_by_one_thread_at_a_time(monkeypatch: pytest.MonkeyPatch,
                                                          mode: str) -> None:
    """Deterministic form of issue 15's bug: while a thread is inside MPI testing or waiting
    on a schedule's round (held there a millisecond), no other thread may test or wait on
    the same requests.  The engine before the fix let every Test() loop poll every schedule:
    this test saw such overlaps at once."""
    if WORLD.size == 1:
        pytest.skip("one rank: a schedule sends no message, there is no request to share")
    from mpicoll.engines import mpi as engine
    from mpicoll.engines import requests

    backends = [mpicoll.p2p(WORLD) for _ in range(2)]
    watched = _Watched()
    monkeypatch.setattr(engine, "MPI", watched)
    monkeypatch.setattr(requests, "MPI", watched)  # the requests' waits and tests
    try:
        _run_threads([lambda b=b, t=t: _work(b, t, mode, 30) for t, b in enumerate(backends)])
    finally:
        monkeypatch.undo()
        for b in backends:
            b.Free()
    assert watched.calls > 0
    assert not watched.overlaps, watched.overlaps[:3]


# --------------------------------------------------------------------------------------------
# A lower thread level: a child job


def _job_env() -> dict[str, str]:
    """tests/unit/_launch.py's clean environment for a child job."""
    spec = importlib.util.spec_from_file_location("_launch", HERE.parent / "unit" / "_launch.py")
    assert spec is not None
    assert spec.loader is not None
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    return launch.job_env()  # type: ignore[no-any-return]


def _launcher() -> list[str]:
    exe = os.environ.get("MPIEXEC")
    if exe:
        return exe.split()
    here = Path(sys.executable).parent / "mpiexec"
    return [str(here) if here.exists() else "mpiexec"]


def _child_job(level: str, n: int) -> tuple[int, str]:
    cmd = [*_launcher(), "-n", str(n), sys.executable, str(HERE / "_thread_level_child.py"),
           level]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_job_env(), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, f"{' '.join(cmd)} ran past {CHILD_TIMEOUT} s\n{out}"
    return proc.returncode, out


@pytest.mark.mpi
@pytest.mark.timeout(CHILD_TIMEOUT + 30)
@pytest.mark.parametrize("level", ["funneled", "serialized",
                                   pytest.param("single", marks=pytest.mark.full)])
def test_lower_thread_level_refused(level: str) -> None:
    """A child job of P ranks at a lower thread level: every refusal and every allowed call is
    checked in the child (``_thread_level_child.py``), which prints ``OK`` per rank."""
    n = WORLD.size
    result = _child_job(level, n) if WORLD.rank == 0 else None
    rc, out = WORLD.bcast(result, root=0)
    assert rc == 0, f"child job at {level} exited {rc}:\n{out}"
    assert out.count(f"OK {level}") == n, out
