"""MPI errors on a p2p collective's messages, said readably (what MPI said, the peer, the
collective), as an ``MPI.Exception`` of MPI's error class."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

from mpi4py import MPI

__all__ = ["LocalError", "MessageError", "explain", "settle", "truncated"]


class MessageError(MPI.Exception):
    """An MPI error on one of a p2p collective's messages (a truncation: a peer sent more
    bytes than this rank's receive buffer holds), said as MPI said it: the collective, the
    peer, the bytes, MPI's own words.  An ``MPI.Exception`` whose ``Get_error_class()`` is
    MPI's (``MPI.ERR_TRUNCATE`` for a truncation), raised on the rank MPI raises it on."""

    def __init__(self, code: int, message: str) -> None:
        MPI.Exception.__init__(self, code)
        self.message = message

    def __str__(self) -> str:
        return self.message


_TRUNCATED = re.compile(r"(?:[Mm]essage from rank (\d+) and tag \d+ truncated; )?"
                        r"(\d+) bytes received but buffer size is (\d+)")


def explain(exc: MPI.Exception, what: str, statuses: Sequence[MPI.Status] = (),
            peers: Sequence[int] = ()) -> MPI.Exception:
    """``exc`` (raised by a wait on ``what``'s messages) as a :class:`MessageError` that says
    what MPI said: the failing message's status (from ``statuses``, when the wait filled
    them: ``MPI_ERR_IN_STATUS``), else ``exc`` itself; ``peers``: the ranks of the round,
    named when the status does not say which one failed."""
    code = exc.Get_error_code()
    peer: int | None = None
    got: int | None = None
    for st in statuses:
        err = st.Get_error()
        if err not in (MPI.SUCCESS, MPI.ERR_PENDING):
            code, peer = err, st.Get_source()
            try:
                got = st.Get_count(MPI.BYTE)
            except MPI.Exception:
                got = None
            break
    text = MPI.Get_error_string(code)
    m = _TRUNCATED.search(text) or _TRUNCATED.search(str(exc))
    if MPI.Get_error_class(code) == MPI.ERR_TRUNCATE or m:
        if m is not None:
            if m.group(1) is not None and peer is None:
                peer = int(m.group(1))
            # a truncation is always the larger count into the smaller buffer (MPICH's
            # sentence names them the other way round)
            a, b = int(m.group(2)), int(m.group(3))
            said = f"message truncated: {max(a, b)} bytes into a buffer of {min(a, b)}"
        else:
            said = "message truncated" + (f": {got} bytes received" if got else "")
        frm = (f" from rank {peer}" if peer is not None and peer >= 0 else
               f" from one of ranks {sorted(set(peers))}" if peers else "")
        msg = (f"{what}: {said}{frm} (the ranks passed different amounts of data: MPI requires "
               "the type signatures of sender and receiver to match)")
    else:
        first = text.splitlines()[0] if text else str(exc)
        msg = f"{what}: MPI error on a message" + (f" with rank {peer}" if peer is not None
                                                    else "") + f": {first}"
    return MessageError(code, msg)


class LocalError(str):
    """What a rank raises at the end of a call for something it did alone (no message's
    error): a ``str`` (the whole sentence after the collective's name) that carries its MPI
    error class (``error_class``), e.g. a receive buffer smaller than its spec's count
    (``MPI_ERR_TRUNCATE``), a send spec reaching past its buffer (``MPI_ERR_BUFFER``); see
    :class:`mpicoll.engines.call.Call` (``truncated``)."""

    error_class: int

    def __new__(cls, detail: str, error_class: int = MPI.ERR_TRUNCATE) -> LocalError:
        out = super().__new__(cls, detail)
        out.error_class = error_class
        return out


def truncated(what: str, detail: str) -> MessageError:
    """``MPI_ERR_TRUNCATE`` for a truncation this rank makes without a message (``detail``:
    what did not fit, e.g. its own block of an Alltoall), on ``what`` (the collective); a
    :class:`LocalError` ``detail`` says its own sentence, with its own error class."""
    if isinstance(detail, LocalError):
        return MessageError(detail.error_class, f"{what}: {detail}")
    return MessageError(MPI.ERR_TRUNCATE, f"{what}: message truncated: {detail} (the ranks "
                        "passed different amounts of data: MPI requires the type signatures "
                        "of sender and receiver to match)")


def settle(reqs: Sequence[MPI.Request]) -> None:
    """Complete every request of a round whose wait raised (blocking), ignoring their errors:
    the first error is already recorded, and the schedule goes on to its next rounds, as
    MPICH's collectives go on after an error (``MPIR_ERR_COLL_CHECKANDCONT``), so no peer
    waits forever on a message this rank would not send.  MPICH's ``Waitall`` has completed
    them all already (the failed ones are null; ``Wait`` frees the others); an MPI whose
    ``Waitall`` returns early completes them here."""
    for q in reqs:
        with contextlib.suppress(MPI.Exception):
            q.Wait()


def _name(ctx: Any) -> str:
    """The collective a context or tag record runs, for an error message."""
    c = getattr(ctx, "collective", None)
    return "mpicoll.p2p " + (c.capitalize() if c else "collective")


def _peers(reqs_ops: Any) -> list[int]:
    return [o.peer for o in reqs_ops] if reqs_ops else []
