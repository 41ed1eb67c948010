"""Child job of tests/mpi/test_threads.py: ``mpiexec -n P python _thread_level_child.py LEVEL``.

MPI is initialised at LEVEL (``single``, ``funneled`` or ``serialized``, through
``mpi4py.rc.thread_level``).  Checks, on every rank, that the p2p backend refuses a call from a
thread MPI does not allow with :class:`mpicoll.ThreadLevelError` before any message (so the job
neither hangs nor mismatches), and that the calls MPI allows give the right results.  Prints
``OK LEVEL`` per rank and exits 0, else raises (non-zero exit).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import mpi4py

LEVEL = sys.argv[1]
mpi4py.rc.thread_level = LEVEL

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpicoll  # noqa: E402

WORLD = MPI.COMM_WORLD
P = WORLD.size
WANT = {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
        "serialized": MPI.THREAD_SERIALIZED}[LEVEL]


def in_thread(fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` in another thread (serialised: this thread waits); its exception or None."""
    box: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            box.append(exc)

    t = threading.Thread(target=run, name="helper")
    t.start()
    t.join()
    return box[0] if box else None


def refused(exc: BaseException | None, what: str) -> None:
    assert isinstance(exc, mpicoll.ThreadLevelError), (
        f"{what}: expected ThreadLevelError, got {exc!r}")
    assert "MPI_THREAD_" in str(exc), str(exc)


def main() -> None:
    level = MPI.Query_thread()
    assert level == WANT, f"asked for {LEVEL}, MPI provides {level}"
    b = mpicoll.p2p(WORLD)
    x, y = np.ones(10), np.zeros(10)
    b.Allreduce(x, y)  # the main thread may always call
    assert np.array_equal(y, np.full(10, float(P)))

    if LEVEL in ("single", "funneled"):
        refused(in_thread(lambda: mpicoll.p2p(WORLD)), "p2p() from a helper thread")
        refused(in_thread(lambda: b.Allreduce(x, y)), "Allreduce from a helper thread")
        refused(in_thread(lambda: b.Iallreduce(x, y)), "Iallreduce from a helper thread")
        req = b.Iallreduce(x * 2, y)
        refused(in_thread(req.Test), "Test from a helper thread")
        refused(in_thread(req.Wait), "Wait from a helper thread")
        refused(in_thread(lambda: mpicoll.Waitall([req])), "Waitall from a helper thread")
        refused(in_thread(lambda: mpicoll.Waitany([req])), "Waitany from a helper thread")
        req.Wait()  # nothing was sent by the refused calls: the job is still in step
        assert np.array_equal(y, np.full(10, 2.0 * P))
    else:
        # serialised by join: any thread may call, one at a time
        z = np.zeros(10)
        assert in_thread(lambda: b.Allreduce(x * 3, z)) is None
        assert np.array_equal(z, np.full(10, 3.0 * P))
        req = b.Iallreduce(x * 4, z)
        assert in_thread(req.Wait) is None
        assert np.array_equal(z, np.full(10, 4.0 * P))
        # overlapping: a user op runs inside the engine (main thread); a helper thread's call
        # meanwhile is refused (the reduction needs two ranks)
        probed: list[BaseException | None] = []

        def add(a: Any, c: Any, dt: Any) -> None:
            if not probed:
                probed.append(in_thread(b.Barrier))
            np.frombuffer(c, dtype=np.float64)[:] += np.frombuffer(a, dtype=np.float64)

        op = MPI.Op.Create(add, commute=True)
        try:
            b.Allreduce(x, z, op=op, algorithm="ring")  # every rank reduces
        finally:
            op.Free()
        assert np.array_equal(z, np.full(10, float(P)))
        if P > 1:
            assert probed, "the user op never ran"
            refused(probed[0], "Barrier from a helper thread during a call of the main thread")
    b.Free()
    WORLD.Barrier()
    print(f"OK {LEVEL} rank {WORLD.rank}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # end the whole job at once, not hang in another rank's Barrier
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        WORLD.Abort(1)
