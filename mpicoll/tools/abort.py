"""No stranded ranks: end the whole MPI job when one rank fails.

An uncaught exception on one rank of an MPI job leaves every other rank waiting forever inside
the next collective: they cannot know that their peer is gone, and ``mpiexec`` waits for them.
``python -m mpi4py script.py`` solves this for a script: on an unhandled exception it prints the
traceback and calls ``MPI_Abort``.  This module does the same for mpicoll's own entry points
(the CLI, the examples), so that ``mpiexec -n 4 python -m mpicoll ...`` ends at once, non-zero,
with the failing rank's traceback on stderr::

    from mpicoll.tools.abort import abort_on_exception

    def main() -> int:
        ...
        return 0

    if __name__ == "__main__":
        raise SystemExit(abort_on_exception(main))

or, around a block of code::

    from mpicoll.tools.abort import aborting

    with aborting():
        run_the_example()

Rules (those of ``mpi4py.run``):

* an exception (including ``KeyboardInterrupt``) on any rank: that rank writes
  ``[rank R] Traceback ...`` (every line prefixed) to stderr, flushes, and calls
  ``MPI.COMM_WORLD.Abort(errorcode)`` (130 for ``KeyboardInterrupt``), which ends every rank;
* ``SystemExit`` with a non-zero status (``sys.exit(2)``, argparse errors): abort with that
  status, after writing ``[rank R] exit status N``; ``SystemExit(0)``/``SystemExit(None)`` is a
  normal exit and is passed on;
* a job of one process (``COMM_WORLD`` of size 1), or a process where MPI is not initialised or
  is already finalised: nothing can be stranded, so the exception is passed on unchanged (Python
  prints it and exits 1).  This also keeps the wrappers harmless when a test calls a wrapped
  function in-process.

Wrap only the outermost entry point (``__main__``, the console script): a function that raises
on purpose inside a test run under ``mpiexec`` must not be wrapped, or its test aborts the job.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any, NoReturn

__all__ = ["abort_on_exception", "aborting", "report"]

#: ``MPI_Abort`` error code for ``KeyboardInterrupt`` (128 + SIGINT), as mpi4py uses.
INTERRUPTED = 130


def _world() -> Any:
    """``MPI.COMM_WORLD`` if MPI is imported, initialised, not finalised, and has peers;
    else None (nothing to abort)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return None
    try:
        if not mpi.Is_initialized() or mpi.Is_finalized():
            return None
        world = mpi.COMM_WORLD
        return world if world.Get_size() > 1 else None
    except Exception:  # a broken MPI state: let the exception through rather than mask it
        return None


def _rank() -> int | None:
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return int(mpi.COMM_WORLD.Get_rank())
    except Exception:
        pass
    return None


def report(text: str, rank: int | None = None) -> None:
    """Write ``text`` to stderr with every line prefixed ``[rank R] ``, and flush.

    Goes straight to file descriptor 2 (one ``write`` per chunk) so that the lines reach the
    terminal even when ``sys.stderr`` is replaced or buffered, and lines of different ranks
    interleave as whole blocks.

    Args:
        text: one or more lines (a formatted traceback).
        rank: the rank to name; default this process's rank in ``MPI.COMM_WORLD`` (``?`` if
            MPI is not initialised).
    """
    r = _rank() if rank is None else rank
    tag = f"[rank {'?' if r is None else r}] "
    lines = text.rstrip("\n").splitlines() or [""]
    block = "".join(tag + line + "\n" for line in lines).encode(errors="replace")
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    with suppress(OSError):
        while block:
            written = os.write(2, block)
            block = block[written:]


def _abort(world: Any, errorcode: int) -> NoReturn:
    time.sleep(1.0)  # let mpiexec forward the report before MPI_Abort tears the job down
    world.Abort(errorcode)
    os._exit(errorcode)  # not reached: MPI_Abort does not return


def _exit_status(code: object) -> int:
    """The process exit status ``SystemExit(code)`` stands for (Python's own rules)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def _user_frames(exc: BaseException) -> TracebackType | None:
    """The traceback without this module's own frames at its top (they say nothing)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


@contextmanager
def aborting(errorcode: int = 1) -> Iterator[None]:
    """Context manager: an exception leaving the block aborts every rank of the job.

    Args:
        errorcode: the ``MPI_Abort`` error code (the job's exit status under most launchers)
            for an ordinary exception.

    Raises:
        whatever the block raises, unchanged, when there is no job to abort (one process, or
        MPI not initialised or already finalised), and ``SystemExit(0)`` always.
    """
    try:
        yield
    except SystemExit as exc:
        status = _exit_status(exc.code)
        world = _world() if status else None
        if world is None:
            raise
        report(f"exit status {status} (SystemExit); aborting the MPI job")
        _abort(world, status)
    except BaseException as exc:
        world = _world()
        if world is None:
            raise
        code = INTERRUPTED if isinstance(exc, KeyboardInterrupt) else errorcode
        report("".join(traceback.format_exception(type(exc), exc, _user_frames(exc)))
               .rstrip("\n")
               + f"\naborting the MPI job (MPI_Abort with error code {code})")
        _abort(world, code)


def abort_on_exception(main: Callable[[], int | None], errorcode: int = 1) -> int:
    """Run ``main()`` and return its exit status; abort every rank if it raises.

    Args:
        main: the program, taking no arguments and returning an exit status (``None`` = 0).
        errorcode: the ``MPI_Abort`` error code for an uncaught exception.

    Returns:
        ``main()``'s status, for ``raise SystemExit(abort_on_exception(main))``.  A status
        returned this way ends the process normally on every rank (no abort): return a status
        rather than calling ``sys.exit`` when all ranks agree on it.

    Raises:
        nothing on a multi-rank job (the job is aborted instead, see :func:`aborting`); on a
        single process, ``main``'s own exception.
    """
    with aborting(errorcode):
        status = main()
    return 0 if status is None else int(status)
