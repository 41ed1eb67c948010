"""What bench and verify share to run calls on every rank: the plan, the watchdog, call guards,
consensus across ranks, progress and provenance.

A call that raises on one rank may strand the others inside the collective: :class:`CallGuard`
settles each call's outcome across ranks without hanging, :data:`WATCHDOG` aborts the job when
a call overruns, :func:`consensus` gives every rank the worst verdict.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import numpy as np
from mpi4py import MPI

from .measure import Settings

if TYPE_CHECKING:
    from ..model.alphabeta import Model

__all__ = [
    "WATCHDOG",
    "package_version",
    "CallGuard",
    "Plan",
    "Progress",
    "Stderr",
    "Watchdog",
    "consensus",
    "describe_error",
    "make_backends",
    "provenance",
    "run_checked",
    "stranding_grace",
]

def package_version() -> str | None:
    """mpicoll's version (``mpicoll.__version__``, without importing the package front: this
    module is imported from inside it); None if it cannot be read."""
    front = sys.modules.get(__name__.split(".")[0])
    version = getattr(front, "__version__", None)
    if version is None:
        from importlib import metadata

        try:  # the installed distribution's (setup.cfg reads it from mpicoll.__version__)
            version = metadata.version("mpicoll")
        except metadata.PackageNotFoundError:  # pragma: no cover - neither
            return None
    return str(version)


def _versions() -> dict[str, Any]:
    import mpi4py

    version = package_version()
    vendor = MPI.get_vendor()
    return {
        "mpi_library": " ".join(_library_text().splitlines()[0].split()),
        "mpi_library_full": _library_text(),
        "mpi_vendor": f"{vendor[0]} {'.'.join(map(str, vendor[1]))}",
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py": mpi4py.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "mpicoll": version,
    }


_THREAD_LEVELS = {
    MPI.THREAD_SINGLE: "single",
    MPI.THREAD_FUNNELED: "funneled",
    MPI.THREAD_SERIALIZED: "serialized",
    MPI.THREAD_MULTIPLE: "multiple",
}


def _library_text() -> str:
    """``MPI_Get_library_version``, stripped, without the NUL Open MPI's ends in (it would cut
    a JSON reader's or a terminal's copy of the line there)."""
    return MPI.Get_library_version().replace("\x00", "").strip()


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; all of ``os.cpu_count()`` where the
    platform does not say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def provenance(comm: Any, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Where and how a run was made (collective over ``comm``; the same dict on every rank).

    Returns:
        MPI library and version, mpi4py / numpy / python / mpicoll versions, MPI thread level,
        P, host names (with ranks per host, the CPUs their affinities cover, ``cores``, and the
        fewest one rank may use, ``cpus_per_rank``: below ``cores``, the launcher bound the
        ranks), UTC date (ISO 8601) and the command line.
    """
    names = comm.allgather((MPI.Get_processor_name(), usable_cpus()))
    hosts: dict[str, int] = {}
    cpus: dict[str, set[int]] = {}
    narrowest: dict[str, int] = {}
    for h, mine in names:
        hosts[h] = hosts.get(h, 0) + 1
        cpus.setdefault(h, set()).update(mine)
        narrowest[h] = min(narrowest.get(h, len(mine)), len(mine))
    info = _versions()
    info.update(
        {
            "thread_level": _THREAD_LEVELS.get(MPI.Query_thread(), str(MPI.Query_thread())),
            "P": comm.Get_size(),
            "hosts": [{"name": h, "ranks": n, "cores": len(cpus[h]),
                       "cpus_per_rank": narrowest[h]} for h, n in hosts.items()],
            "hostname": socket.gethostname(),
            "date": comm.bcast(
                _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), root=0
            ),
            "command_line": "mpicoll " + shlex.join(list(argv)) if argv is not None else None,
            "argv": list(sys.argv),
        }
    )
    return info



class Watchdog:
    """Aborts the whole MPI job when a guarded region overruns (a rank stranded by another).

    One daemon thread per process; :meth:`arm` sets a deadline and a label, :meth:`disarm`
    clears it.  On expiry it prints the label on stderr and calls ``MPI.COMM_WORLD.Abort(1)``
    (``os._exit(1)`` if MPI is not thread-safe enough, which makes ``mpiexec`` end the rest).
    """

    def __init__(self) -> None:
        self._deadline: float | None = None
        self._label = ""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, label: str) -> None:
        """Abort if :meth:`disarm` is not called within ``seconds`` (<= 0: no limit)."""
        if seconds <= 0:
            return
        with self._lock:
            self._deadline = time.monotonic() + seconds
            self._label = label
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="mpicoll-watchdog",
                                                daemon=True)
                self._thread.start()

    def disarm(self) -> None:
        """Cancel the current deadline."""
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            with self._lock:
                deadline, label = self._deadline, self._label
            now = time.monotonic()
            if deadline is None:
                time.sleep(1.0)
                continue
            if now < deadline:
                time.sleep(min(deadline - now, 1.0))
                continue
            rank = MPI.COMM_WORLD.Get_rank() if MPI.Is_initialized() else 0
            sys.stderr.write(
                f"mpicoll: rank {rank}: {label} did not finish in time "
                "(hang? a rank may have failed); aborting\n"
            )
            sys.stderr.flush()
            if MPI.Is_initialized() and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
                MPI.COMM_WORLD.Abort(1)
            os._exit(1)


WATCHDOG = Watchdog()


def make_backends(comm: Any, need_p2p: bool) -> tuple[Any, Any]:
    """``(mpicoll.native(comm), mpicoll.p2p(comm) or None)``; collective over ``comm``."""
    from ..backends.native import native
    from ..backends.p2p import p2p

    return native(comm), (p2p(comm) if need_p2p else None)


def run_checked(
    comm: Any, fn: Callable[[], Any], nonblocking: bool
) -> tuple[str, str | None]:
    """Run one call; ``("ok", None)``, ``("n/a", why)`` (RestrictionError) or ``("error", msg)``.

    Local only: the caller makes the verdict collective.
    """
    from ..algorithms.registry import RestrictionError

    try:
        r = fn()
        if nonblocking:
            r.Wait()
    except RestrictionError as exc:
        return "n/a", str(exc)
    except Exception as exc:  # a broken implementation, or MPI's own error: reported
        return "error", describe_error(exc)
    return "ok", None


def _mpi_error_class_name(error_class: int) -> str | None:
    names = sorted(k for k in dir(MPI) if k.startswith("ERR_")
                   and isinstance(getattr(MPI, k), int) and getattr(MPI, k) == error_class)
    return f"MPI_{names[0]}" if names else None


def describe_error(exc: BaseException) -> str:
    """One line naming ``exc`` and giving its text: ``ValueError: ...``, or for an error of the
    MPI library ``MPI.Exception [MPI_ERR_TYPE]: Invalid datatype, error stack: | ...`` (MPI's
    multi-line error stack joined with `` | ``, its dot padding dropped)."""
    if isinstance(exc, MPI.Exception):
        try:
            cls = _mpi_error_class_name(exc.Get_error_class())
        except Exception:  # pragma: no cover - MPI finalised
            cls = None
        name = "MPI.Exception" + (f" [{cls}]" if cls else "")
    else:
        name = type(exc).__name__
    lines = [re.sub(r"\.{2,}:\s*", ": ", re.sub(r"\.{2,}:?\s*$", "", ln)).strip()
             for ln in str(exc).splitlines()]
    text = " | ".join(ln for ln in lines if ln)
    return f"{name}: {text}" if text else name


class Stderr:
    """Captures what is written on file descriptor 2 (the MPI library's C ``stderr`` too)
    inside the ``with`` block, in :attr:`text`; lines that are not MPICH's fallback notice
    are written to stderr again afterwards."""

    def __init__(self, path: str | None = None) -> None:
        #: where the capture goes (None: an anonymous temporary file); a named file outlives a
        #: process that dies inside the block (an MPI library's abort), so a parent can read
        #: what the library said
        self.path = path

    def __enter__(self) -> Stderr:
        sys.stderr.flush()
        self._file = open(self.path, "w+b") if self.path else tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()
        if self.path:
            os.unlink(self.path)
        rest = [ln for ln in self.text.splitlines(keepends=True)
                if "cannot be applied" not in ln and "not usable for the provided" not in ln]
        if rest:
            sys.stderr.write("".join(rest))


def stranding_grace(timeout: float) -> float:
    """Seconds a rank whose call raised waits for the others to finish the call before it
    concludes that its error stranded them: ``min(10, timeout / 2)`` (10 without a timeout),
    so that it speaks before the watchdog of a stranded rank (``timeout``) does."""
    return min(10.0, timeout / 2) if timeout > 0 else 10.0


class CallGuard:
    """Makes the outcome of each checked call known to every rank, without hanging.

    An exception on one rank inside a collective (a broken p2p schedule, or an error of the MPI
    library itself, such as MPICH's ``MPI_Gather`` of ``MPI_DOUBLE_INT``) may leave other ranks
    waiting inside the same call for a message that will never come.  After each call, every
    rank calls :meth:`settle`, which starts one small non-blocking allreduce on a private
    duplicate of the communicator.  A rank whose call returned does not wait for it (it is
    completed at the next :meth:`settle` or :meth:`raised`): a call costs one small
    non-blocking allreduce and no wait of its own.  A rank whose call raised waits for it at
    most :func:`stranding_grace` seconds: if every rank finished the call, the run goes on
    (the caller records the error, and :meth:`raised` tells every rank that a call raised);
    if not, the error has stranded a rank inside the call and the job cannot go on: the
    failing rank writes the call's label and the error on stderr and aborts the whole job
    (``MPI_Abort``), so the report names the real error rather than a timeout.

    Collective (every rank creates it, calls :meth:`settle` after the same calls, and
    :meth:`raised` and :meth:`Free` at the same points).
    """

    def __init__(self, comm: Any, timeout: float) -> None:
        self.comm = comm.Dup()
        self.grace = stranding_grace(timeout)
        self._spares: list[Any] = []
        self._pending: tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
        self._seen = 0  # bits of the completed settles: 1 a call raised, 2 a native one
        #: the native backend made by the latest :meth:`fresh_native` (None: none yet)
        self.native: Any = None

    def settle(self, status: str, detail: str | None, label: str, native: bool = False) -> None:
        """Record the outcome of the call labelled ``label`` (``native``: a native call).

        Returns at once unless this rank's call raised (``status`` ``error`` or ``n/a``):
        then it waits for every rank to finish the call, and aborts the job (see the class)
        if some rank does not within the grace time."""
        self._complete()
        raised = status in ("error", "n/a")
        flag = np.array([(1 | (2 if native else 0)) if raised else 0], dtype=np.int32)
        seen = np.zeros(1, dtype=np.int32)
        req = self.comm.Iallreduce(flag, seen, op=MPI.BOR)
        self._pending = (req, flag, seen)
        if raised:
            if not self._wait(req, self.grace):
                self._abandon(label, detail)
            self._complete()

    def raised(self, native: bool = False) -> bool:
        """True if a call (``native``: a native call) settled since the last ``raised`` raised
        on some rank; the same answer on every rank (waits for the last settle)."""
        self._complete()
        bit = 2 if native else 1
        answer = bool(self._seen & bit)
        self._seen &= ~bit
        return answer

    def _complete(self) -> None:
        if self._pending is not None:
            req, _, seen = self._pending
            req.Wait()
            self._seen |= int(seen[0])
            self._pending = None

    @staticmethod
    def _wait(req: Any, seconds: float) -> bool:
        end = time.monotonic() + seconds
        pause = 1e-4
        while not req.Test():
            if time.monotonic() >= end:
                return False
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return True

    def _abandon(self, label: str, detail: str | None) -> NoReturn:
        from .abort import report

        report(f"mpicoll: {label}: {detail}\n"
               f"mpicoll: the other ranks did not finish this call within {self.grace:g} s of "
               "that error: it stranded them inside the call (waiting for a message this rank "
               "will never send or receive), so the run cannot go on; aborting the MPI job")
        time.sleep(1.0)  # let mpiexec forward the report before MPI_Abort ends the job
        MPI.COMM_WORLD.Abort(1)
        os._exit(1)  # pragma: no cover - MPI_Abort does not return

    def fresh_native(self, native: Any) -> Any:
        """A native backend like ``native`` on a new duplicate of the communicator (collective):
        messages a failed native call left in flight on the old one can never be matched by
        a later call.  The duplicate made by the previous call is freed (its backend is the
        one being replaced), so a run with many failures holds one at most."""
        from ..backends.native import native as make_native

        comm = self.comm.Dup()
        for old in self._spares:
            old.Free()
        self._spares = [comm]
        self.native = make_native(comm, check=getattr(native, "check", None))
        return self.native

    def Free(self) -> None:
        """Free the private communicators (collective)."""
        self._complete()
        for c in self._spares:
            c.Free()
        self._spares = []
        self.comm.Free()


def consensus(comm: Any, status: str, detail: str | None) -> tuple[str, str | None, int | None]:
    """Combine every rank's ``(status, detail)``: the worst status, its detail and its rank.

    Order of badness: error > wrong > n/a > ok.  The same answer on every rank.
    """
    order = {"ok": 0, "n/a": 1, "wrong": 2, "error": 3}
    allv = comm.allgather((order[status], status, detail))
    worst = max(range(len(allv)), key=lambda k: (allv[k][0], -k))
    _, st, det = allv[worst]
    return st, det, (worst if st != "ok" else None)


class Progress:
    """Progress line on rank 0's stderr (rewritten in place on a terminal)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = 0

    def show(self, text: str) -> None:
        """Show ``text`` as the current progress line."""
        if not self.enabled:
            return
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the progress line (terminal only)."""
        if self.enabled and self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0





@dataclass
class Plan:
    """What a ``bench`` or ``verify`` run covers, from its validated command line.

    Both: ``collectives``, ``algorithms`` (the ``-a`` words, resolved per collective by
    :func:`mpicoll.tools.options.algorithms_of`), ``nonblocking``, ``timeout`` (seconds a
    call may take; 0: no limit).  ``bench``: one call per size (``sizes``, bytes) with
    ``dtype``, ``op``, ``root``, ``in_place``, its timing ``settings`` and cost model.
    ``verify``: a matrix of calls: ``counts`` x ``reduction_pairs`` (dtype, op) or
    ``data_dtypes`` x ``roots`` (None: every rank) x ``in_places`` x ``uniform``, and how many
    failures to list (``max_failures``).
    """

    collectives: list[str]
    algorithms: list[str]
    nonblocking: bool = False
    timeout: float = 300.0
    # ---- bench
    #: ``--persistent``: also time every implementation's ``*_init`` form (Start + Wait)
    persistent: bool = False
    #: ``--phases``: also time each round of the p2p schedules (:func:`.measure.measure_phases`)
    phases: bool = False
    #: ``--pattern``: how each call passes its buffers (:data:`mpicoll.tools.patterns.PATTERNS`)
    patterns: list[str] = field(default_factory=lambda: ["numpy"])
    sizes: list[int] = field(default_factory=list)
    dtype: str = "float64"
    op: str = "sum"
    root: int = 0
    in_place: bool = False
    #: bench's timing (verify: each call once, no warm-up)
    settings: Settings = field(default_factory=lambda: Settings(1, 0, None))
    #: ``--model FILE`` (None: the calibrated file at :func:`mpicoll.model.default_path` if
    #: there is one, else :data:`mpicoll.model.DEFAULT`)
    model_path: str | None = None
    #: the model the predicted column uses, and where it came from (set by the bench run)
    model: Model | None = None
    model_source: str = ""
    # ---- verify
    counts: list[int] = field(default_factory=list)
    reduction_pairs: list[tuple[str, str]] = field(default_factory=list)
    data_dtypes: list[str] = field(default_factory=list)
    roots: list[int] | None = None
    in_places: list[bool] = field(default_factory=lambda: [False])
    uniform: list[bool] = field(default_factory=lambda: [True])
    max_failures: int = 20
