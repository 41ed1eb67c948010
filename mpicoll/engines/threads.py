"""Thread levels: which threads may enter the p2p engine (see :mod:`mpicoll.engines.mpi`'s
module docstring), and the one short lock that guards the engines' lists of schedules in
flight."""

from __future__ import annotations

import threading

from mpi4py import MPI

__all__ = ["ThreadLevelError", "check_thread"]

#: Guards the engines' lists of schedules in flight and :data:`_ENGINES`; held only for list
#: operations, never across an MPI call or a schedule's code.
_lock = threading.Lock()
#: Notified whenever a thread releases schedule claims: a waiter whose schedule another thread


class ThreadLevelError(RuntimeError):
    """A p2p call from a thread that MPI's thread level does not allow (see the module
    docstring); raised before any message."""


_LEVEL_NAMES = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED",
                MPI.THREAD_MULTIPLE: "MPI_THREAD_MULTIPLE"}
_level: int | None = None  # MPI.Query_thread(), read once (it cannot change after MPI_Init)
_MULTIPLE_LEVEL = MPI.THREAD_MULTIPLE


def _thread_level() -> int:
    global _level
    if _level is None:
        _level = MPI.Query_thread()
    return _level


class _Serial:
    """Under ``MPI_THREAD_SERIALIZED``: which thread is inside the engine (re-entrant)."""

    def __init__(self) -> None:
        self.owner: int | None = None
        self.depth = 0

    def __enter__(self) -> None:
        check_thread()
        me = threading.get_ident()
        with _lock:  # the check again, atomic with taking the place
            if self.owner is not None and self.owner != me:
                raise _overlap("mpicoll.p2p")
            self.owner = me
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        with _lock:
            self.depth -= 1
            if not self.depth:
                self.owner = None


class _Unguarded:
    """Under ``MPI_THREAD_MULTIPLE``: no check."""

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_SERIAL = _Serial()
_UNGUARDED = _Unguarded()


def _guard() -> _Serial | _Unguarded:
    """What every engine entry point runs under: the thread-level check (and, under
    ``MPI_THREAD_SERIALIZED``, the record of the thread inside)."""
    return _UNGUARDED if _thread_level() == MPI.THREAD_MULTIPLE else _SERIAL


def check_thread(what: str = "mpicoll.p2p") -> None:
    """Refuse a p2p call from a thread MPI's thread level does not allow, before any message.

    Under ``MPI_THREAD_MULTIPLE`` (mpi4py's default) every thread may call.  Under
    ``MPI_THREAD_FUNNELED`` and ``MPI_THREAD_SINGLE`` only MPI's main thread
    (``MPI.Is_thread_main()``) may; under ``MPI_THREAD_SERIALIZED`` any thread may, but not
    while another thread is inside the p2p engine.

    Raises:
        ThreadLevelError: the calling thread may not call MPI now.
    """
    level = _thread_level()
    if level == MPI.THREAD_MULTIPLE:
        return
    if level in (MPI.THREAD_SINGLE, MPI.THREAD_FUNNELED):
        if not MPI.Is_thread_main():
            me = threading.current_thread().name
            raise ThreadLevelError(
                f"{what}: called from thread {me!r}, but MPI runs at "
                f"{_LEVEL_NAMES.get(level, str(level))}: only MPI's main thread may call MPI; "
                f"call from the main thread, or {_FIX}")
        return
    owner = _SERIAL.owner
    if owner is not None and owner != threading.get_ident():
        raise _overlap(what)


_FIX = ("initialise MPI with MPI_THREAD_MULTIPLE (mpi4py's default: "
        "mpi4py.rc.thread_level = 'multiple' before importing mpi4py.MPI)")


def _overlap(what: str) -> ThreadLevelError:
    me = threading.current_thread().name
    return ThreadLevelError(
        f"{what}: called from thread {me!r} while another thread is inside an mpicoll p2p "
        f"call, but MPI runs at MPI_THREAD_SERIALIZED: calls must not overlap; serialise "
        f"them (one lock around every MPI call of every thread), or {_FIX}")
