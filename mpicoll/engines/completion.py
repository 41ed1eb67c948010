"""Completion of lists mixing p2p requests, native ones and plain ``MPI.Request``\\s:
:func:`Waitall`, :func:`Testall`, :func:`Waitany`, :func:`Testany`, :func:`Waitsome`,
:func:`Testsome` (each progresses every live engine's schedules, as MPI's progress is
global)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from mpi4py import MPI

from .requests import ScheduleRequest, _empty_status, _step, progress_all
from .threads import _guard

__all__ = ["Testall", "Testany", "Testsome", "Waitall", "Waitany", "Waitsome"]


def _inactive(r: Any) -> bool:
    """An inactive request: ``MPI.REQUEST_NULL``, or a p2p request already reported."""
    if isinstance(r, ScheduleRequest):
        return r._inactive
    return bool(r == MPI.REQUEST_NULL)


def _split(reqs: Sequence[Any]) -> tuple[list[ScheduleRequest], list[MPI.Request]]:
    """The p2p requests and the MPI ones of a list (anything else: TypeError)."""
    ours, plain = [], []
    for i, r in enumerate(reqs):
        if isinstance(r, ScheduleRequest):
            ours.append(r)
        elif isinstance(r, MPI.Request):
            plain.append(r)
        else:
            raise TypeError(f"requests[{i}]: expected an MPI.Request or an mpicoll p2p "
                            f"request, got {type(r).__name__}")
    return ours, plain


def _fill(statuses: list[MPI.Status] | None, got: Sequence[MPI.Status | None], n: int) -> None:
    """Write statuses as mpi4py does: the list grows to ``len(got)`` entries if shorter, and
    entry k (k < min(n, len(statuses))) gets ``got[k]`` (an empty status past ``got``)."""
    if statuses is None:
        return
    while len(statuses) < len(got):
        statuses.append(MPI.Status())
    for k in range(min(n, len(statuses))):
        s = got[k] if k < len(got) else None
        if s is None:
            _empty_status(statuses[k])
        else:
            statuses[k].Set_source(s.Get_source())
            statuses[k].Set_tag(s.Get_tag())
            statuses[k].Set_error(s.Get_error())
            statuses[k].Set_cancelled(s.Is_cancelled())
            try:
                statuses[k].Set_elements(MPI.BYTE, s.Get_elements(MPI.BYTE))
            except MPI.Exception:  # a collective request's status: Open MPI leaves its count
                # undefined (MPI_ERR_COUNT when read, or when written back); MPI defines none
                statuses[k].Set_elements(MPI.BYTE, 0)


def _sweep(reqs: Sequence[Any], done: dict[int, MPI.Status | None], first: bool) -> bool:
    """Without blocking, record in ``done`` (index -> status, None for a p2p request) the
    listed requests that are complete and not yet recorded; with ``first``, stop at one.
    Recorded MPI requests are completed (now ``MPI.REQUEST_NULL``, or an inactive persistent
    request); p2p requests are made inactive by the caller.  The MPI requests are tested by
    MPI's own ``Testany``/``Testsome``, which skip inactive persistent requests (a completed
    ``Prequest`` is not ``REQUEST_NULL`` and ``Test`` on it answers True again).

    Returns:
        True if nothing listed and unrecorded is active (every p2p request inactive, every
        MPI request null or an inactive persistent one): nothing more can complete.
    """
    pending = False
    for i, r in enumerate(reqs):
        if i in done or not isinstance(r, ScheduleRequest) or r._inactive:
            continue
        if not r.done:
            pending = True
            continue
        done[i] = None
        if first:
            return False
    at = [i for i, r in enumerate(reqs)
          if i not in done and not isinstance(r, ScheduleRequest) and r != MPI.REQUEST_NULL]
    if not at:
        return not pending
    plain = [reqs[i] for i in at]
    if first:
        s = MPI.Status()
        k, idle = MPI.Request.Testany(plain, s)
        if k != MPI.UNDEFINED:
            done[at[k]] = s
            return False
        return idle and not pending
    statuses: list[MPI.Status] = []
    got = MPI.Request.Testsome(plain, statuses)
    if got is None:
        return not pending
    for k, st in zip(got, statuses, strict=False):
        done[at[k]] = st
    return False  # the next sweep tells whether any other is still active


def _wait(reqs: Sequence[Any], enough: Callable[[dict[int, MPI.Status | None]], bool],
          first: bool) -> dict[int, MPI.Status | None]:
    """Progress and block until ``enough(done)`` (see :func:`_sweep`), or until nothing
    listed is active any more; the requests that completed, by index."""
    _split(reqs)
    done: dict[int, MPI.Status | None] = {}
    while True:
        progress_all(reqs)
        if _sweep(reqs, done, first) or enough(done):
            return done
        waiting = [i for i, r in enumerate(reqs) if i not in done and not _inactive(r)]
        mine = [r for i in waiting if isinstance(r := reqs[i], ScheduleRequest)]
        left = [reqs[i] for i in waiting if not isinstance(reqs[i], ScheduleRequest)]
        # block only on what this call still waits for (completed plain requests excluded;
        # MPI's Waitany skips inactive persistent ones)
        status = MPI.Status()
        k = _step(mine, left, functools.partial(_any_done, mine), status)
        if k is not None:
            done[next(i for i in waiting if reqs[i] is left[k])] = status
            if enough(done):
                return done


def _any_done(schedules: Sequence[ScheduleRequest]) -> bool:
    return any(r.done for r in schedules)


def _report(reqs: Sequence[Any], done: dict[int, MPI.Status | None],
            order: Sequence[int]) -> list[MPI.Status | None]:
    """Make the recorded p2p requests inactive; their statuses in ``order``.

    Raises:
        MessageError: the first MPI error on the messages of one of them (every one is made
            inactive first, as MPI's completion calls complete every request they report)."""
    err = None
    for i in order:
        r = reqs[i]
        if isinstance(r, ScheduleRequest):
            try:
                r._complete()
            except MPI.Exception as exc:
                err = err or exc
    if err is not None:
        raise err
    return [done[i] for i in order]


def Waitall(requests: Sequence[Any], statuses: list[MPI.Status] | None = None) -> bool:
    """Complete every request of a list mixing p2p requests, native ones and plain
    ``MPI.Request``\\s, in any order, progressing every live engine's schedules (not only the
    listed ones) meanwhile; as ``MPI.Request.Waitall``.

    Args:
        requests: the requests; inactive ones (``MPI.REQUEST_NULL``, completed p2p requests)
            are skipped.  Every one is inactive on return.
        statuses: if given, a list that receives one ``MPI.Status`` per request (empty for p2p
            and inactive requests), grown to ``len(requests)`` if shorter.

    Returns:
        True.

    Raises:
        TypeError: an entry is neither an ``MPI.Request`` nor a p2p request.
        ThreadLevelError: see :func:`check_thread`.
        MessageError: an MPI error on a p2p request's messages (``MPI_ERR_TRUNCATE``), the
            first, once every listed request is complete (see ``ScheduleRequest._note``).
    """
    with _guard():
        reqs = list(requests)
        live = [i for i, r in enumerate(reqs) if not _inactive(r)]
        done = _wait(reqs, lambda d: len(d) == len(live), first=False)
        order = sorted(done)  # less than live: inactive persistent requests (empty statuses)
        by_index = dict(zip(order, _report(reqs, done, order), strict=True))
        _fill(statuses, [by_index.get(i) for i in range(len(reqs))], len(reqs))
        return True


def Testall(requests: Sequence[Any], statuses: list[MPI.Status] | None = None) -> bool:
    """Progress every live p2p schedule once; True, with every listed request completed and
    inactive, when all are complete; False, with none of them changed, otherwise (as
    ``MPI.Request.Testall``).  ``requests``, ``statuses`` and errors as in :func:`Waitall`."""
    with _guard():
        reqs = list(requests)
        ours, plain = _split(reqs)
        progress_all(ours)
        if not all(r.done for r in ours):
            return False
        got: list[MPI.Status] = []
        # Get_status, then Waitall of what is complete: MPICH 5.0's MPI_Testall fails
        # (MPI_ERR_IN_STATUS, every status MPI_SUCCESS) on a persistent collective request
        # (the native backend's *_init ones)
        if plain:
            for q in plain:
                if not q.Get_status():
                    return False
            MPI.Request.Waitall(plain, got)
        for r in ours:
            r._complete()
        it = iter(got)
        _fill(statuses, [None if isinstance(r, ScheduleRequest) else next(it) for r in reqs],
              len(reqs))
        return True


def Waitany(requests: Sequence[Any], status: MPI.Status | None = None) -> int:
    """Wait until one of the listed requests (p2p, native and plain ``MPI.Request``\\s mixed)
    completes, progressing every live engine's schedules meanwhile; as
    ``MPI.Request.Waitany``.

    Returns:
        The index of the completed request, which is now inactive; ``MPI.UNDEFINED`` if every
        listed request is inactive.  ``status``, if given, receives its status (empty for a
        p2p request or for ``MPI.UNDEFINED``).

    Raises:
        TypeError: an entry is neither an ``MPI.Request`` nor a p2p request.
        ThreadLevelError: see :func:`check_thread`.
    """
    with _guard():
        reqs = list(requests)
        if all(_inactive(r) for r in reqs):
            _split(reqs)
            _empty_status(status)
            return MPI.UNDEFINED
        done = _wait(reqs, bool, first=True)
        if not done:  # only inactive persistent requests were left
            _empty_status(status)
            return MPI.UNDEFINED
        (i,) = done
        _fill_one(status, _report(reqs, done, [i])[0])
        return i


def Testany(requests: Sequence[Any], status: MPI.Status | None = None) -> tuple[int, bool]:
    """Progress every live p2p schedule once, then test the listed requests; as
    ``MPI.Request.Testany``.

    Returns:
        ``(index, True)`` for a request that completed (now inactive; ``status`` gets its
        status), ``(MPI.UNDEFINED, False)`` if none did, ``(MPI.UNDEFINED, True)`` if every
        listed request is inactive.
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            _empty_status(status)
            return MPI.UNDEFINED, True
        progress_all(reqs)
        done: dict[int, MPI.Status | None] = {}
        idle = _sweep(reqs, done, first=True)
        if not done:
            if idle:
                _empty_status(status)
            return MPI.UNDEFINED, idle
        (i,) = done
        _fill_one(status, _report(reqs, done, [i])[0])
        return i, True


def Waitsome(requests: Sequence[Any],
             statuses: list[MPI.Status] | None = None) -> list[int] | None:
    """Wait until at least one listed request completes; as ``MPI.Request.Waitsome``.

    Returns:
        The indices (ascending) of every listed request found complete, now inactive, or None
        if every listed request was inactive.  ``statuses``, if given, receives their statuses
        in the same order (grown if shorter; entries past them are set empty, as mpi4py does).
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            return None
        done = _wait(reqs, bool, first=False)
        if not done:  # only inactive persistent requests were left
            return None
        order = sorted(done)
        _fill(statuses, _report(reqs, done, order), len(reqs))
        return order


def Testsome(requests: Sequence[Any],
             statuses: list[MPI.Status] | None = None) -> list[int] | None:
    """Progress every live p2p schedule once, then test the listed requests; as
    ``MPI.Request.Testsome``.

    Returns:
        The indices (ascending) of the listed requests that are complete, now inactive (an
        empty list if none), or None if every listed request was inactive.  ``statuses`` as
        in :func:`Waitsome`.
    """
    with _guard():
        reqs = list(requests)
        _split(reqs)
        if all(_inactive(r) for r in reqs):
            return None
        progress_all(reqs)
        done: dict[int, MPI.Status | None] = {}
        if _sweep(reqs, done, first=False) and not done:
            return None
        order = sorted(done)
        _fill(statuses, _report(reqs, done, order), len(reqs))
        return order


def _fill_one(status: MPI.Status | None, got: MPI.Status | None) -> None:
    if status is not None:
        _fill([status], [got], 1)
