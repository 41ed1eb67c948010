"""``mpicoll bench``: native against hand-rolled collectives, side by side, checked then timed.

Methodology (that of the OSU Micro-Benchmarks, the Intel MPI Benchmarks and nccl-tests):

* for every (collective, message size, implementation) the buffers are allocated and filled
  outside the timed loop;
* the result is first checked, outside any timing, against the native result on inputs whose
  exact answer is known (small integers, floats included, so any summation order is exact;
  native itself is checked against a NumPy reference).  A wrong implementation is reported as
  ``WRONG`` and counted in ``#wrong`` (as nccl-tests does), never timed, never the fastest;
  the command then exits with status 1;
* warm-up iterations at every size, then timed iterations, each preceded by a barrier
  (``MPI_Barrier`` on the user's communicator); each iteration's time is the MAX over ranks;
  min / median / mean / max / std over iterations are reported (the table shows the median);
* the number of iterations is fixed (``-i``) or set per size from ``--time-budget`` seconds
  (IMB-style: fewer repetitions for large messages);
* message size S (bytes) is the one nccl-tests uses, which its bus-bandwidth factors assume:
  bcast, reduce, allreduce, scan, exscan: the vector on each rank; allgather(v): the gathered
  output on each rank (P blocks); reduce_scatter(_block): the input vector on each rank
  (P blocks); alltoall(v): what one rank sends in all (P blocks); gather(v): the root's output;
  scatter(v): the root's input.  S is rounded down to whole blocks (at least one element a block);
* ``algbw = S / t`` and ``busbw = algbw x factor`` in GB/s (1e9 bytes/s) with the factors of
  nccl-tests ``doc/PERFORMANCE.md`` (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
  allreduce 2(P-1)/P; reduce_scatter, allgather, alltoall (P-1)/P; bcast, reduce 1; and, from
  its ``src/gather.cu``/``src/scatter.cu``, gather and scatter (P-1)/P.  nccl-tests has no scan:
  scan/exscan use 1 (a bound of the same kind as reduce's).

Non-blocking mode (``--nonblocking``) follows OSU's ``osu_i*`` benchmarks: the pure
communication time ``t_pure`` (start + wait), then start + a busy compute of length ``t_pure``
(with ``--test-calls N`` calls to ``Test()`` spread through it, OSU's ``-t``) + wait, giving
``t_total`` and the compute time actually spent ``t_compute``; then

* OSU:     ``overlap = max(0, 100 (1 - (t_total - t_compute) / t_pure))``
* IMB-NBC: ``overlap = 100 max(0, min(1, (t_pure + t_compute - t_total) / min(t_pure, t_compute)))``

with times per iteration taken from the rank with the largest ``t_total`` (IMB).

Defaults: the main collectives (:data:`DEFAULT_COLLECTIVES`), native and p2p ``auto``, sizes
8 B to 4 MiB (``make bench``, 4 ranks on 2 cores, stays within a few minutes; ask for more with
``-m 8:16M``), float64 and MPI.SUM, root 0, out of place, a time budget of 0.1 s per size and
implementation with 5 to 1000 timed iterations after 2 warm-up ones.  Exit status: 0, or 1 if
any result was WRONG (or raised), or 2 for a usage error.  Output files (``--json``,
``--csv``, ``--plot``: writable, not a directory, a format matplotlib writes) and numeric
options are checked before anything runs.  A call that raises is reported as ``ERROR`` with
its exception's text; one that strands other ranks ends the job (see :class:`CallGuard`).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
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
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np
from mpi4py import MPI

from ..model.alphabeta import Model
from . import cases as _cases
from .cases import Case, compare

__all__ = [
    "BUSBW_FACTORS",
    "DEFAULT_COLLECTIVES",
    "DEFAULT_SIZES",
    "SCHEMA_PATH",
    "add_arguments",
    "busbw_factor",
    "count_for",
    "describe_error",
    "describe_model",
    "main",
    "overlap_imb",
    "overlap_osu",
    "output_file_problem",
    "parse_size",
    "parse_sizes",
    "predict_us",
    "provenance",
    "resolve_model",
    "run",
    "validate",
]

#: Collectives benched by default (the main ones of the seed articles and nccl-tests).
DEFAULT_COLLECTIVES: tuple[str, ...] = (
    "bcast", "reduce", "allreduce", "reduce_scatter_block", "allgather", "alltoall",
    "gather", "scatter",
)
#: Default ``-m``: 8 B to 4 MiB, which keeps ``make bench`` (4 ranks, 2 cores) to a few minutes.
DEFAULT_SIZES = "8:4M"
#: Default ``--time-budget`` (seconds of timed iterations per size and implementation).
DEFAULT_TIME_BUDGET = 0.1
MIN_ITERATIONS = 5
MAX_ITERATIONS = 1000
#: Default warm-up iterations when none is given.
DEFAULT_WARMUP = 2
#: Largest P x (elements of S) for which native is checked against the NumPy reference (above
#: it native is the reference unchecked, ``check: "none"``; the p2p results are still checked).
EXPECTED_LIMIT = 1 << 25
#: The JSON schema the ``--json`` output follows.
SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "bench.schema.json"
SCHEMA_ID = "mpicoll-bench/1"

#: Bus-bandwidth factor per collective as a function of P (nccl-tests doc/PERFORMANCE.md).
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "allreduce": lambda p: 2.0 * (p - 1) / p,
    "reduce_scatter_block": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "allgatherv": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "alltoallv": lambda p: (p - 1) / p,
    "alltoallw": lambda p: (p - 1) / p,
    "gather": lambda p: (p - 1) / p,
    "gatherv": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p,
    "scatterv": lambda p: (p - 1) / p,
    "bcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "scan": lambda p: 1.0,
    "exscan": lambda p: 1.0,
}
_FACTOR_TEXT = {
    "allreduce": "2(P-1)/P", "bcast": "1", "reduce": "1", "scan": "1", "exscan": "1",
}

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def busbw_factor(collective: str, p: int) -> float | None:
    """nccl-tests bus-bandwidth factor of ``collective`` at ``p`` ranks (None: barrier)."""
    f = BUSBW_FACTORS.get(collective)
    return None if f is None else f(p)


def parse_size(text: str) -> int:
    """Bytes of ``"8"``, ``"64K"``, ``"16M"``, ``"1G"`` (binary suffixes, case-insensitive).

    Raises:
        ValueError: not a non-negative integer with an optional K/M/G (or KiB/MB...) suffix.
    """
    t = text.strip().upper().replace("IB", "").rstrip("B") if text.strip() else ""
    num = t.rstrip("KMG")
    suffix = t[len(num):]
    if not num.isdigit() or suffix not in _SUFFIX:
        raise ValueError(f"invalid size {text!r}: expected bytes such as 8, 64K, 16M, 1G")
    return int(num) * _SUFFIX[suffix]


def parse_sizes(text: str) -> list[int]:
    """Sizes of ``"MIN:MAX"`` (MIN, 2 MIN, 4 MIN, ... <= MAX) or of a single ``"SIZE"``.

    Raises:
        ValueError: bad size, MIN > MAX, or MIN = 0 with MAX > 0.
    """
    if ":" in text:
        lo_s, _, hi_s = text.partition(":")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
    else:
        lo = hi = parse_size(text)
    if lo > hi:
        raise ValueError(f"invalid size range {text!r}: MIN > MAX")
    if lo == 0:
        if hi:
            raise ValueError(f"invalid size range {text!r}: MIN must be >= 1 (sizes double)")
        return [0]
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= 2
    return sizes


def human_size(n: int) -> str:
    """``4096`` -> ``"4K"``, ``3 << 20`` -> ``"3M"`` (binary units, exact ones only)."""
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def overlap_osu(t_pure: float, t_compute: float, t_total: float) -> float:
    """OSU overlap %: ``max(0, 100 (1 - (t_total - t_compute) / t_pure))`` (0 if t_pure <= 0)."""
    if t_pure <= 0:
        return 0.0
    return max(0.0, 100.0 * (1.0 - (t_total - t_compute) / t_pure))


def overlap_imb(t_pure: float, t_compute: float, t_total: float) -> float:
    """IMB-NBC overlap %: ``100 max(0, min(1, (t_pure + t_cpu - t_ovrl) / min(t_pure, t_cpu)))``."""
    m = min(t_pure, t_compute)
    if m <= 0:
        return 0.0
    return 100.0 * max(0.0, min(1.0, (t_pure + t_compute - t_total) / m))


# --------------------------------------------------------------------------------------------
# provenance, validation


def _versions() -> dict[str, Any]:
    import mpi4py

    try:
        import mpicoll

        version = getattr(mpicoll, "__version__", None)
    except Exception:  # pragma: no cover - package always importable here
        version = None
    vendor = MPI.get_vendor()
    return {
        "mpi_library": " ".join(MPI.Get_library_version().strip().splitlines()[0].split()),
        "mpi_library_full": MPI.Get_library_version().strip(),
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


def provenance(comm: Any, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Where and how a run was made (collective over ``comm``; the same dict on every rank).

    Returns:
        MPI library and version, mpi4py / numpy / python / mpicoll versions, MPI thread level,
        P, host names (with ranks per host), UTC date (ISO 8601) and the command line.
    """
    names = comm.allgather(MPI.Get_processor_name())
    hosts: dict[str, int] = {}
    for h in names:
        hosts[h] = hosts.get(h, 0) + 1
    info = _versions()
    info.update(
        {
            "thread_level": _THREAD_LEVELS.get(MPI.Query_thread(), str(MPI.Query_thread())),
            "P": comm.Get_size(),
            "hosts": [{"name": h, "ranks": n} for h, n in hosts.items()],
            "hostname": socket.gethostname(),
            "date": comm.bcast(
                _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), root=0
            ),
            "command_line": "mpicoll " + shlex.join(list(argv)) if argv is not None else None,
            "argv": list(sys.argv),
        }
    )
    return info


def validate(doc: Any, schema: dict[str, Any] | None = None, path: str = "$") -> list[str]:
    """Check ``doc`` against a JSON schema; the list of errors (empty when valid).

    A small hand-written validator of the subset of JSON Schema the bench schema uses
    (``type`` (also as a list), ``properties``, ``required``, ``additionalProperties``
    (bool or schema), ``items``, ``enum``, ``const``, ``minimum``, ``maximum``, ``minItems``,
    ``anyOf``, ``$ref`` to ``#/$defs/...``), so no third-party package is needed.

    Args:
        doc: the loaded JSON document.
        schema: the schema (default: :data:`SCHEMA_PATH`).
    """
    if schema is None:
        schema = json.loads(SCHEMA_PATH.read_text())
    errors: list[str] = []
    _validate(doc, schema, schema, path, errors)
    return errors


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _validate(
    doc: Any, sch: dict[str, Any], root: dict[str, Any], path: str, errors: list[str]
) -> None:
    if "$ref" in sch:
        ref = sch["$ref"]
        if not ref.startswith("#/"):
            errors.append(f"{path}: unsupported $ref {ref}")
            return
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        _validate(doc, target, root, path, errors)
        return
    if "anyOf" in sch:
        for alt in sch["anyOf"]:
            sub: list[str] = []
            _validate(doc, alt, root, path, sub)
            if not sub:
                return
        errors.append(f"{path}: matches none of anyOf")
        return
    types = sch.get("type")
    if types is not None:
        tlist = [types] if isinstance(types, str) else list(types)
        if not any(_JSON_TYPES[t](doc) for t in tlist):
            errors.append(f"{path}: expected {' or '.join(tlist)}, got {type(doc).__name__}")
            return
    if "const" in sch and doc != sch["const"]:
        errors.append(f"{path}: expected {sch['const']!r}")
    if "enum" in sch and doc not in sch["enum"]:
        errors.append(f"{path}: {doc!r} not one of {sch['enum']}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in sch and doc < sch["minimum"]:
            errors.append(f"{path}: {doc} < minimum {sch['minimum']}")
        if "maximum" in sch and doc > sch["maximum"]:
            errors.append(f"{path}: {doc} > maximum {sch['maximum']}")
    if isinstance(doc, dict):
        props = sch.get("properties", {})
        for key in sch.get("required", []):
            if key not in doc:
                errors.append(f"{path}: missing required {key!r}")
        extra = sch.get("additionalProperties", True)
        for key, value in doc.items():
            if key in props:
                _validate(value, props[key], root, f"{path}.{key}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected property {key!r}")
            elif isinstance(extra, dict):
                _validate(value, extra, root, f"{path}.{key}", errors)
    if isinstance(doc, list):
        if "minItems" in sch and len(doc) < sch["minItems"]:
            errors.append(f"{path}: fewer than {sch['minItems']} items")
        if "items" in sch:
            for k, item in enumerate(doc):
                _validate(item, sch["items"], root, f"{path}[{k}]", errors)


# --------------------------------------------------------------------------------------------
# helpers shared with verify


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


@dataclass
class Impl:
    """One implementation in a run: native, or a p2p algorithm (``auto`` or a registry name)."""

    label: str
    backend: Any
    algorithm: str | None = None

    @property
    def kind(self) -> str:
        """``"native"`` or ``"p2p"``."""
        return "native" if self.algorithm is None else "p2p"


def make_backends(comm: Any, need_p2p: bool) -> tuple[Any, Any]:
    """``(mpicoll.native(comm), mpicoll.p2p(comm) or None)``; collective over ``comm``.

    Raises:
        RuntimeError: a backend the run needs is missing from the package.
    """
    import mpicoll

    native_cls = getattr(mpicoll, "native", None)
    if native_cls is None:
        raise RuntimeError("mpicoll.native is not available in this installation")
    native = native_cls(comm)
    p2p = None
    if need_p2p:
        p2p_cls = getattr(mpicoll, "p2p", None)
        if p2p_cls is None:
            raise RuntimeError("mpicoll.p2p is not available in this installation")
        p2p = p2p_cls(comm)
    return native, p2p


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
        import mpicoll

        comm = self.comm.Dup()
        for old in self._spares:
            old.Free()
        self._spares = [comm]
        self.native = mpicoll.native(comm, check=getattr(native, "check", None))
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


# --------------------------------------------------------------------------------------------
# measurement


@dataclass
class Settings:
    """Timing settings of a run (from the command line)."""

    iterations: int | None
    warmup: int | None
    time_budget: float | None
    test_calls: int = 0
    timeout: float = 300.0

    def warmup_count(self) -> int:
        """Warm-up iterations at each size."""
        if self.warmup is not None:
            return self.warmup
        if self.iterations is not None and self.time_budget is None:
            return max(1, self.iterations // 10)
        return DEFAULT_WARMUP

    def iteration_range(self) -> tuple[int, int]:
        """``(fewest, most)`` timed iterations at a size: ``(-i, -i)`` without a time budget;
        with one, :data:`MIN_ITERATIONS`.. :data:`MAX_ITERATIONS`, ``-i`` capping both."""
        if self.time_budget is None:
            assert self.iterations is not None
            return self.iterations, self.iterations
        if self.iterations is None:
            return MIN_ITERATIONS, MAX_ITERATIONS
        return min(MIN_ITERATIONS, self.iterations), self.iterations

    def iteration_count(self, comm: Any, t_est: float) -> int:
        """Timed iterations, given the warm-up estimate ``t_est`` (seconds, same on all ranks)."""
        lo, hi = self.iteration_range()
        if self.time_budget is None or lo == hi:
            return hi
        n = int(self.time_budget / t_est) if t_est > 0 else hi
        return max(lo, min(hi, n))

    def describe(self) -> str:
        """The iterations and warm-up of the run, as the header prints them."""
        lo, hi = self.iteration_range()
        w = self.warmup_count()
        if self.time_budget is None:
            iters = f"{hi} iteration{'s' * (hi != 1)} per size"
        elif lo == hi:
            iters = (f"{hi} iteration{'s' * (hi != 1)} per size (-i {hi} leaves the time "
                     f"budget of {self.time_budget:g} s nothing to choose)")
        else:
            iters = (f"time budget {self.time_budget:g} s per size and implementation "
                     f"({lo} to {hi} iterations)")
        warm = f"warm-up {w}"
        if w == 0 and self.time_budget is not None and lo < hi:
            warm += " (1 untimed call sets the iteration count)"
        return f"{iters}; {warm}"


def _timed_loop(
    comm: Any, fn: Callable[[], Any], n: int, nonblocking: bool
) -> np.ndarray[Any, Any]:
    """Local times (s) of ``n`` barrier-separated calls."""
    times = np.empty(n)
    barrier = comm.Barrier
    clock = time.perf_counter
    if nonblocking:
        for k in range(n):
            barrier()
            t0 = clock()
            fn().Wait()
            times[k] = clock() - t0
    else:
        for k in range(n):
            barrier()
            t0 = clock()
            fn()
            times[k] = clock() - t0
    return times


def _max_over_ranks(comm: Any, local: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out = np.empty_like(local)
    comm.Allreduce(local, out, op=MPI.MAX)
    return out


def _stats_us(samples: np.ndarray[Any, Any]) -> dict[str, float]:
    us = samples * 1e6
    return {
        "min": float(us.min()),
        "median": float(np.median(us)),
        "mean": float(us.mean()),
        "max": float(us.max()),
        "std": float(us.std(ddof=1)) if us.size > 1 else 0.0,
    }


def _iterations(
    comm: Any, fn: Callable[[], Any], settings: Settings, nonblocking: bool
) -> tuple[int, int]:
    """Run the warm-up; return (warm-up count, timed iteration count) agreed by all ranks."""
    w = settings.warmup_count()
    lo, hi = settings.iteration_range()
    t_est = 0.0
    if w > 0:
        tw = _max_over_ranks(comm, _timed_loop(comm, fn, w, nonblocking))
        t_est = float(np.median(tw))
    elif settings.time_budget is not None and lo < hi:
        tw = _max_over_ranks(comm, _timed_loop(comm, fn, 1, nonblocking))
        t_est = float(tw[0])
    return w, settings.iteration_count(comm, t_est)


def measure_blocking(comm: Any, fn: Callable[[], Any], settings: Settings) -> dict[str, Any]:
    """Warm up, then time barrier-separated calls; stats (us) of each iteration's max over ranks."""
    w, n = _iterations(comm, fn, settings, nonblocking=False)
    t = _max_over_ranks(comm, _timed_loop(comm, fn, n, nonblocking=False))
    return {"iterations": n, "warmup": w, "time_us": _stats_us(t)}


def _spin(seconds: float, req: Any, test_calls: int) -> float:
    """Busy compute of ``seconds`` (a spin on perf_counter) calling ``req.Test()`` ``test_calls``
    times evenly through it; returns the time actually spent."""
    clock = time.perf_counter
    t0 = clock()
    end = t0 + seconds
    marks = [t0 + seconds * (k + 1) / (test_calls + 1) for k in range(test_calls)]
    k = 0
    done = False
    while True:
        now = clock()
        if now >= end:
            break
        if k < len(marks) and now >= marks[k]:
            k += 1
            if not done:
                done = bool(req.Test())
    while k < len(marks):  # marks skipped by a late wake-up still get their Test()
        k += 1
        if not done:
            done = bool(req.Test())
    return clock() - t0


def measure_nonblocking(comm: Any, fn: Callable[[], Any], settings: Settings) -> dict[str, Any]:
    """OSU-style overlap measurement of an ``I...`` call (see the module docstring)."""
    w, n = _iterations(comm, fn, settings, nonblocking=True)
    pure = _max_over_ranks(comm, _timed_loop(comm, fn, n, nonblocking=True))
    t_pure = float(np.median(pure))
    clock = time.perf_counter
    # warm-up of the overlapped form too
    for _ in range(max(1, w // 2)):
        comm.Barrier()
        req = fn()
        _spin(t_pure, req, settings.test_calls)
        req.Wait()
    total = np.empty(n)
    cpu = np.empty(n)
    for k in range(n):
        comm.Barrier()
        t0 = clock()
        req = fn()
        cpu[k] = _spin(t_pure, req, settings.test_calls)
        req.Wait()
        total[k] = clock() - t0
    # per iteration, the rank with the largest total (IMB); its compute time goes with it
    pairs = np.stack([total, cpu], axis=1)
    everyone = np.empty((comm.Get_size(), n, 2))
    comm.Allgather(pairs, everyone)
    worst = np.argmax(everyone[:, :, 0], axis=0)
    t_tot = everyone[worst, np.arange(n), 0]
    t_cpu = everyone[worst, np.arange(n), 1]
    med_total, med_cpu = float(np.median(t_tot)), float(np.median(t_cpu))
    return {
        "iterations": n,
        "warmup": w,
        "time_us": _stats_us(pure),
        "pure_us": _stats_us(pure),
        "total_us": _stats_us(t_tot),
        "compute_us": _stats_us(t_cpu),
        "overlap_osu_pct": overlap_osu(t_pure, med_cpu, med_total),
        "overlap_imb_pct": overlap_imb(t_pure, med_cpu, med_total),
        "test_calls": settings.test_calls,
    }


# --------------------------------------------------------------------------------------------
# the run


@dataclass
class Plan:
    """What a bench run does: collectives x sizes x implementations, and the call's parameters."""

    collectives: list[str]
    algorithms: list[str]
    sizes: list[int]
    dtype: str
    op: str
    root: int
    in_place: bool
    nonblocking: bool
    settings: Settings
    argv: list[str] = field(default_factory=list)
    #: ``--model FILE`` (None: the calibrated file at :func:`mpicoll.model.default_path` if
    #: there is one, else :data:`mpicoll.model.DEFAULT`)
    model_path: str | None = None
    #: the model the predicted column uses, and where it came from (set by :func:`run`)
    model: Model | None = None
    model_source: str = ""


def count_for(coll: str, size: int, p: int, itemsize: int) -> int:
    """The count argument for message size S = ``size`` bytes (the S of the module docstring).

    One element of ``itemsize`` bytes per ``itemsize`` bytes of S; block collectives
    (:data:`mpicoll._cases.BLOCK_COLLECTIVES`) split S into P blocks.  Rounded down to whole
    elements, at least one (a block); barrier: 0.
    """
    if coll == "barrier":
        return 0
    blocks = p if coll in _cases.BLOCK_COLLECTIVES else 1
    return max(1, size // (blocks * itemsize))


def resolve_model(path: str | None = None) -> tuple[Model, str]:
    """The cost model in use and a phrase saying where it came from.

    ``path`` given: that file (ValueError if it is missing or not a model file).  Otherwise the
    calibrated file :func:`mpicoll.model.load` finds (``$MPICOLL_MODEL`` or
    ``~/.cache/mpicoll/model.json``), else :data:`mpicoll.model.DEFAULT`.
    """
    from ..model import alphabeta as _model

    if path is not None:
        m = _model.load(path)
        if m is None:
            raise ValueError(f"{path!r} is not a readable model file (run: mpicoll calibrate)")
        return m, f"file {path}"
    m = _model.load()
    if m is not None:
        return m, f"calibrated ({_model.default_path()})"
    return _model.DEFAULT, f"default (nothing calibrated at {_model.default_path()})"


def describe_model(m: Model) -> str:
    """``alpha = 2 us, beta = 0.1 ns/B (10 GB/s), gamma = 0.25 ns/B``."""
    gbps = f"{1.0 / m.beta / 1e9:.3g} GB/s" if m.beta > 0 else "inf GB/s"
    return (f"alpha = {m.alpha * 1e6:.3g} us, beta = {m.beta * 1e9:.3g} ns/B ({gbps}), "
            f"gamma = {m.gamma * 1e9:.3g} ns/B")


def predict_us(case: Case, algorithm: str, m: Model) -> float | None:
    """Predicted time (us) of ``case`` run by p2p ``algorithm`` (a registry name or ``auto``):
    a cost-only simulation (:func:`mpicoll.sim.simulate`) with model ``m``.

    None for the v-variants (the simulator's uneven counts are not bench's), or if the
    simulator cannot run the call.
    """
    if case.collective in _cases.V_COLLECTIVES:
        return None
    from .simulate import simulate

    try:
        r = simulate(case.collective, case.size, case.count, algorithm=algorithm,
                     dtype=case.np_dtype,
                     op=_cases.mpi_op(case.op) if case.is_reduction else MPI.SUM,
                     root=case.root,
                     in_place=bool(case.in_place
                                   and case.collective in _cases.IN_PLACE_COLLECTIVES),
                     model=m, data=False)
    except Exception:  # a call the simulator does not model: no prediction
        return None
    return r.time * 1e6


def _algorithms_for(coll: str, requested: Sequence[str]) -> list[str]:
    """The p2p algorithm names of ``coll`` that a ``-a`` list selects (``auto`` first)."""
    from ..algorithms import registry

    names = [a.name for a in registry.algorithms(coll)]
    out: list[str] = []
    for tok in requested:
        if tok == "none":
            continue
        if tok == "auto":
            picks = ["auto"]
        elif tok == "all":
            picks = names
        else:
            picks = [tok] if tok in names else []
        for a in picks:
            if a not in out:
                out.append(a)
    return out


def _auto_choice(case: Case, p2p: Any) -> str | None:
    """Name of the algorithm ``auto`` runs for ``case`` on this rank (None if unknown)."""
    select = getattr(p2p, "select", None)
    if select is None:
        return None
    try:
        from ..backends.args import PARSERS

        args, kw = case.arguments()
        call = PARSERS[case.collective](case.size, case.rank, *args, **kw)
        return str(select(call, "auto").name)
    except Exception:
        return None


def _record(plan: Plan, case: Case, impl: Impl) -> dict[str, Any]:
    coll = case.collective
    return {
        "collective": coll,
        "implementation": impl.label,
        "backend": impl.kind,
        "algorithm": impl.algorithm,
        "auto_choice": _auto_choice(case, impl.backend) if impl.algorithm == "auto" else None,
        "size_bytes": case.nbytes(),
        "count": case.count // case.per_element,  # elements of the datatype (derived too)
        "dtype": case.dtype,
        "op": case.op if case.is_reduction else None,
        "root": case.root if coll in _cases.ROOTED else None,
        "in_place": bool(case.in_place and coll in _cases.IN_PLACE_COLLECTIVES),
        "nonblocking": plan.nonblocking,
        "status": "ok",
        "check": None,
        "reason": None,
        "wrong_rank": None,
        "iterations": None,
        "warmup": None,
        "time_us": None,
        "algbw_gbps": None,
        "busbw_gbps": None,
        "busbw_factor": busbw_factor(coll, case.size),
        "predicted_us": None,
        "measured_over_predicted": None,
    }


def _predicted(plan: Plan, case: Case, rec: dict[str, Any],
               cache: dict[tuple[str, int], float | None]) -> None:
    """Fill ``predicted_us`` and ``measured_over_predicted`` of a timed p2p record."""
    if plan.model is None or rec["backend"] != "p2p" or rec["status"] != "ok":
        return
    t = rec.get("pure_us") if plan.nonblocking else rec.get("time_us")
    if not t:
        return
    alg = rec["auto_choice"] or rec["algorithm"]
    key = (alg, case.count)
    if key not in cache:
        cache[key] = predict_us(case, alg, plan.model)
    pred = cache[key]
    rec["predicted_us"] = pred
    if pred:
        rec["measured_over_predicted"] = t["median"] / pred


def _bandwidths(rec: dict[str, Any]) -> None:
    t = rec["time_us"]
    if not t or rec["size_bytes"] == 0 or t["median"] <= 0:
        return
    algbw = rec["size_bytes"] / (t["median"] * 1e-6) / 1e9
    rec["algbw_gbps"] = algbw
    if rec["busbw_factor"] is not None:
        rec["busbw_gbps"] = algbw * rec["busbw_factor"]


def bench_collective(
    comm: Any, plan: Plan, coll: str, native: Any, p2p: Any, progress: Progress,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    guard: CallGuard | None = None,
) -> list[dict[str, Any]]:
    """Check and time every size x implementation of one collective; records for all of them.

    ``guard``: settles each check call across ranks (see :class:`CallGuard`); after a native
    call raised, the rest runs on ``guard.native``, a fresh native backend (default: a guard
    made and freed here)."""
    own_guard = guard is None
    if guard is None:
        guard = CallGuard(comm, plan.settings.timeout)
    try:
        return _bench_collective(comm, plan, coll, native, p2p, progress, on_row, guard)
    finally:
        if own_guard:
            guard.Free()


def _bench_collective(
    comm: Any, plan: Plan, coll: str, native: Any, p2p: Any, progress: Progress,
    on_row: Callable[[list[dict[str, Any]]], None] | None, guard: CallGuard,
) -> list[dict[str, Any]]:
    from ..algorithms import registry

    p, rank = comm.Get_size(), comm.Get_rank()
    k = _cases.per_element(plan.dtype)  # derived: one element is k base values
    itemsize = _cases.numpy_dtype(plan.dtype).itemsize * k
    impls = [Impl("native", native)]
    if p2p is not None:
        impls += [Impl(a, p2p, a) for a in _algorithms_for(coll, plan.algorithms)]
    sizes = [0] if coll == "barrier" else plan.sizes
    counts: list[int] = []
    for s in sizes:
        c = count_for(coll, s, p, itemsize) * k
        if c not in counts:
            counts.append(c)
    records: list[dict[str, Any]] = []
    measure = measure_nonblocking if plan.nonblocking else measure_blocking
    predictions: dict[tuple[str, int], float | None] = {}
    for count in counts:
        case = Case(coll, count, plan.dtype, plan.op, plan.root, plan.in_place, p, rank).build()
        row: list[dict[str, Any]] = []
        reference: np.ndarray[Any, Any] | None = None
        native_ok = False
        for impl in impls:
            rec = _record(plan, case, impl)
            row.append(rec)
            label = f"{coll} {human_size(case.nbytes())}B {impl.kind}:{impl.label}"
            progress.show(f"[mpicoll bench] {label}")
            if impl.algorithm is not None and not native_ok:
                rec.update(status="n/a", reason="no reference: the native result failed its check")
                continue
            if impl.algorithm not in (None, "auto"):
                alg = registry.get(coll, impl.algorithm)
                why = alg.why_not(p, **case.restriction_kwargs())
                if why is not None:
                    rec.update(status="n/a", reason=why)
                    continue
            fn = case.call(impl.backend, impl.algorithm, plan.nonblocking)
            WATCHDOG.arm(plan.settings.timeout, f"bench {label}")
            try:
                # ---- check (outside timing) -------------------------------------------------
                case.reset()
                status, detail = run_checked(comm, fn, plan.nonblocking)
                guard.settle(status, detail, f"bench {label}", native=impl.algorithm is None)
                if guard.raised(native=True):
                    impls[0].backend = guard.fresh_native(impl.backend)
                got = case.result() if status == "ok" else None
                if status == "ok":
                    if impl.algorithm is None:
                        reference = got
                        # the NumPy reference builds every rank's input: P x S work
                        cheap = case.size * case.nbytes() // itemsize <= EXPECTED_LIMIT
                        mism = compare(got, case.expected()) if cheap else None
                        rec["check"] = "expected" if cheap else "none"
                    else:
                        mism = compare(got, reference)
                        rec["check"] = "native"
                    if mism is not None:
                        status, detail = "wrong", str(mism)
                status, detail, bad_rank = consensus(guard.comm, status, detail)
                if status != "ok":
                    rec.update(status=status, reason=detail, wrong_rank=bad_rank)
                    continue
                if impl.algorithm is None:
                    native_ok = True
                # ---- timing ------------------------------------------------------------------
                rec.update(measure(comm, fn, plan.settings))
                _bandwidths(rec)
                _predicted(plan, case, rec, predictions)
            finally:
                WATCHDOG.disarm()
        records.extend(row)
        if on_row is not None:
            on_row(row)
    return records


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (collective, size): fastest implementation, best p2p, speed-up over native, #wrong."""
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        rows.setdefault((r["collective"], r["size_bytes"]), []).append(r)
    out = []
    for (coll, size), recs in rows.items():
        ok = [r for r in recs if r["status"] == "ok" and r["time_us"]]
        nat = next((r for r in ok if r["backend"] == "native"), None)
        p2ps = [r for r in ok if r["backend"] == "p2p"]
        fastest = min(ok, key=lambda r: r["time_us"]["median"]) if ok else None
        best = min(p2ps, key=lambda r: r["time_us"]["median"]) if p2ps else None
        speedup = None
        if nat and best and best["time_us"]["median"] > 0:
            speedup = nat["time_us"]["median"] / best["time_us"]["median"]
        out.append(
            {
                "collective": coll,
                "size_bytes": size,
                "count": recs[0]["count"],
                "fastest": fastest["implementation"] if fastest else None,
                "best_p2p": best["implementation"] if best else None,
                "speedup_best_p2p_vs_native": speedup,
                "algbw_gbps": fastest["algbw_gbps"] if fastest else None,
                "busbw_gbps": fastest["busbw_gbps"] if fastest else None,
                "wrong": sum(r["status"] in ("wrong", "error") for r in recs),
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# output


def _fmt_us(x: float) -> str:
    if x >= 1e4:
        return f"{x:.0f}"
    if x >= 100:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _fmt_opt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _cell(rec: dict[str, Any], key: str = "time_us") -> str:
    st = rec["status"]
    if st == "ok":
        return _fmt_us(rec[key]["median"]) if rec.get(key) else "-"
    return {"wrong": "WRONG", "error": "ERROR", "n/a": "n/a"}[st]


def _table(
    heads: list[str], units: list[str], rows: list[list[str]], notes: list[str]
) -> list[str]:
    """Right-aligned columns, two spaces apart; header and unit lines start with ``#``."""
    widths = [
        max(len(h), len(u), *(len(r[k]) for r in rows))
        for k, (h, u) in enumerate(zip(heads, units, strict=True))
    ]

    def line(cells: list[str], lead: str) -> str:
        return lead + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))

    return [line(heads, "# "), line(units, "# "), *(line(r, "  ") for r in rows), *notes]


def format_block(plan: Plan, coll: str, records: list[dict[str, Any]], p: int) -> str:
    """The table of one collective, nccl-tests style.

    Blocking: one row per size; columns size, count, check, the median time (us) of native and
    of each p2p algorithm (``WRONG``/``ERROR``/``n/a`` instead of a time), the fastest, the
    speed-up of the best p2p over native, algbw and busbw (GB/s) of the fastest, ``#wrong``.
    Non-blocking: one row per size and implementation with pure / compute / total times and the
    OSU and IMB-NBC overlap percentages.  Notes under the table explain n/a and WRONG cells.
    """
    if not records:
        return ""
    labels: list[str] = []
    for r in records:
        if r["implementation"] not in labels:
            labels.append(r["implementation"])
    summary = {s["size_bytes"]: s for s in summarize(records)}
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_size.setdefault(r["size_bytes"], {})[r["implementation"]] = r
    factor = busbw_factor(coll, p)
    ftext = _FACTOR_TEXT.get(coll, "(P-1)/P")
    head = f"# {coll}: S = {_size_meaning(coll)}" + (
        f"; busbw = algbw x {ftext} = {factor:.3g}" if factor is not None else ""
    )
    notes: list[str] = []
    bad: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] in ("wrong", "error"):
            bad.setdefault(r["implementation"], []).append(r)
    for lab, recs in bad.items():
        first = recs[0]
        where = f" on rank {first['wrong_rank']}" if first["wrong_rank"] is not None else ""
        sizes = ", ".join(str(r["size_bytes"]) for r in recs)
        notes.append(f"#   {lab}: {first['status'].upper()} at {len(recs)} size(s) ({sizes} B); "
                     f"at {first['size_bytes']} B{where}: {first['reason']}")
    na: dict[str, str] = {}
    for r in records:
        if r["status"] == "n/a" and r["reason"]:
            na.setdefault(r["implementation"], r["reason"])
    notes = [f"#   {lab}: n/a: {why}" for lab, why in na.items()] + notes
    autos = sorted({str(r["auto_choice"]) for r in records if r.get("auto_choice")})
    if autos:
        notes.insert(0, f"#   auto ran: {', '.join(autos)} (per size in the JSON)")
    ratio_note = _ratio_note(records, labels)
    if ratio_note:
        notes.insert(0, ratio_note)
    if plan.nonblocking:
        return "\n".join([head, *_nonblocking_rows(records, labels, by_size), *notes]) + "\n"
    heads = ["size", "count", "check", *labels, "fastest", "speedup", "meas/pred", "algbw",
             "busbw", "#wrong"]
    units = ["(B)", "(elements)", "", *(["(us)"] * len(labels)), "", "(x)", "(x)", "(GB/s)",
             "(GB/s)", ""]
    rows = []
    for size, row in by_size.items():
        s = summary[size]
        best = row.get(s["best_p2p"]) if s["best_p2p"] else None
        cells = [str(size), str(s["count"]), "ok" if s["wrong"] == 0 else "FAIL"]
        cells += [_cell(row[lab]) if lab in row else "" for lab in labels]
        cells += [
            s["fastest"] or "-",
            _fmt_opt(s["speedup_best_p2p_vs_native"]),
            _fmt_opt(best["measured_over_predicted"] if best else None),
            _fmt_opt(s["algbw_gbps"]),
            _fmt_opt(s["busbw_gbps"]),
            str(s["wrong"]),
        ]
        rows.append(cells)
    return "\n".join([head, *_table(heads, units, rows, notes)]) + "\n"


def _ratio_note(records: list[dict[str, Any]], labels: list[str]) -> str | None:
    """``#   measured/predicted: auto (ring) 1.2..3.4, ring 1.1..2.0`` (min..max over sizes)."""
    parts = []
    for lab in labels:
        recs = [r for r in records if r["implementation"] == lab
                and r.get("measured_over_predicted") is not None]
        if not recs:
            continue
        xs = [r["measured_over_predicted"] for r in recs]
        lo, hi = min(xs), max(xs)
        span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}..{hi:.2f}"
        parts.append(f"{lab} {span}")
    if not parts:
        return None
    return "#   measured/predicted per p2p implementation (min..max over sizes): " + \
        ", ".join(parts)


def _nonblocking_rows(
    records: list[dict[str, Any]], labels: list[str], by_size: dict[int, dict[str, dict[str, Any]]]
) -> list[str]:
    heads = ["size", "count", "implementation", "check", "pure", "pred", "compute", "total",
             "overlap", "overlap"]
    units = ["(B)", "(elements)", "", "", "(us)", "(us)", "(us)", "(us)", "OSU(%)", "IMB(%)"]
    rows = []
    for size, row in by_size.items():
        for lab in labels:
            rec = row.get(lab)
            if rec is None:
                continue
            ok = rec["status"] == "ok" and bool(rec.get("pure_us"))
            rows.append([
                str(size), str(rec["count"]), lab,
                "ok" if rec["status"] == "ok" else rec["status"].upper(),
                _cell(rec, "pure_us") if ok else "-",
                _fmt_us(rec["predicted_us"]) if rec.get("predicted_us") is not None else "-",
                _cell(rec, "compute_us") if ok else "-",
                _cell(rec, "total_us") if ok else "-",
                _fmt_opt(rec.get("overlap_osu_pct"), ".1f") if ok else "-",
                _fmt_opt(rec.get("overlap_imb_pct"), ".1f") if ok else "-",
            ])
    legend = ("#   overlap OSU = max(0, 100 (1 - (total - compute) / pure)); IMB-NBC = "
              "100 max(0, min(1, (pure + compute - total) / min(pure, compute)))")
    return [legend, *_table(heads, units, rows, [])]


def _size_meaning(coll: str) -> str:
    return {
        "bcast": "buffer per rank", "reduce": "vector per rank", "allreduce": "vector per rank",
        "scan": "vector per rank", "exscan": "vector per rank",
        "allgather": "gathered output per rank (P blocks)",
        "allgatherv": "gathered output per rank (P blocks)",
        "reduce_scatter_block": "input vector per rank (P blocks)",
        "reduce_scatter": "input vector per rank (P blocks)",
        "alltoall": "bytes one rank sends in all (P blocks)",
        "alltoallv": "bytes one rank sends in all (P blocks)",
        "alltoallw": "bytes one rank sends in all (P blocks)",
        "gather": "root's output (P blocks)", "gatherv": "root's output (P blocks)",
        "scatter": "root's input (P blocks)", "scatterv": "root's input (P blocks)",
        "barrier": "0",
    }.get(coll, "bytes")


def header(plan: Plan, prov: dict[str, Any]) -> str:
    """The ``#`` lines above the tables: provenance and settings."""
    hosts = ", ".join(f"{h['name']} ({h['ranks']})" for h in prov["hosts"])
    st = plan.settings
    mode = "non-blocking (overlap)" if plan.nonblocking else "blocking"
    return "\n".join(
        [
            f"# mpicoll bench  {prov['date']}",
            f"# {prov['mpi_library']} (MPI {prov['mpi_standard']}), mpi4py {prov['mpi4py']}, "
            f"numpy {prov['numpy']}, python {prov['python']}",
            f"# P={prov['P']} on {hosts}; thread level {prov['thread_level']}",
            f"# dtype={plan.dtype} op={plan.op} root={plan.root} "
            f"{'in-place' if plan.in_place else 'out-of-place'} {mode}",
            f"# {st.describe()}; barrier before each iteration; "
            "time = median over iterations of the max over ranks",
            "# every result checked before timing (native vs NumPy, p2p vs native); "
            "WRONG results are never timed",
            "# speedup = native / best p2p (> 1: hand-rolled faster); algbw = S/t, "
            "busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md), GB/s = 1e9 B/s",
            *_model_lines(plan),
            "",
        ]
    )


def _model_lines(plan: Plan) -> list[str]:
    if plan.model is None:
        return []
    return [
        "# meas/pred = measured / predicted time of the best p2p (predicted: cost-only "
        f"simulation of the algorithm run); model {plan.model_source}: "
        f"{describe_model(plan.model)}"
    ]


CSV_COLUMNS = [
    "collective", "implementation", "backend", "algorithm", "auto_choice", "size_bytes", "count",
    "dtype", "op", "root", "in_place", "nonblocking", "status", "check", "reason", "wrong_rank",
    "iterations", "warmup", "time_us.min", "time_us.median", "time_us.mean", "time_us.max",
    "time_us.std", "algbw_gbps", "busbw_gbps", "busbw_factor", "pure_us.median",
    "compute_us.median", "total_us.median", "overlap_osu_pct", "overlap_imb_pct", "test_calls",
    "predicted_us", "measured_over_predicted",
]


def write_csv(path: str, doc: dict[str, Any]) -> None:
    """One row per result (columns :data:`CSV_COLUMNS`), provenance as leading ``#`` lines."""
    with open(path, "w", newline="") as fh:
        for key, value in doc["provenance"].items():
            if key == "mpi_library_full":
                continue
            fh.write(f"# {key}: {json.dumps(value) if not isinstance(value, str) else value}\n")
        for key, value in doc["settings"].items():
            fh.write(f"# settings.{key}: {json.dumps(value)}\n")
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for rec in doc["results"]:
            row = []
            for col in CSV_COLUMNS:
                key, _, sub = col.partition(".")
                v = rec.get(key)
                if sub:
                    v = v.get(sub) if isinstance(v, dict) else None
                row.append("" if v is None else v)
            w.writerow(row)


def plot_available() -> str | None:
    """None if ``--plot`` can work, else the error to show (matplotlib missing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return (
            "--plot needs matplotlib, which is not installed: "
            "pip install 'mpicoll[plot]' (or pip install matplotlib)"
        )
    return None


def plot_problem(path: str) -> str | None:
    """None if ``--plot path`` can be written, else the error to show: matplotlib missing, no
    file extension, or a format matplotlib cannot write (checked before anything runs)."""
    why = plot_available()
    if why:
        return why
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    ext = os.path.splitext(path)[1][1:].lower()
    if not ext:
        return (f"argument --plot: {path!r} has no file extension to name the image format "
                f"(e.g. {path}.png; matplotlib writes {', '.join(formats)})")
    if ext not in formats:
        return (f"argument --plot: matplotlib cannot write {ext!r} files "
                f"(supported: {', '.join(formats)})")
    return None


def output_file_problem(option: str, path: str) -> str | None:
    """None if ``path`` can be written, else the usage error for ``option``: a directory, a
    missing directory, a directory where no file can be created, or a read-only file.

    Made before anything runs (a test file is created in the directory and removed), so a run
    never ends by failing to save its results."""
    full = os.path.abspath(path)
    if os.path.isdir(full):
        return f"argument {option}: {path!r} is a directory, not a file"
    d = os.path.dirname(full)
    if not os.path.isdir(d):
        return f"argument {option}: directory {d!r} does not exist"
    try:
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError as exc:
        return f"argument {option}: cannot write in directory {d!r} ({exc.strerror or exc})"
    if os.path.exists(full) and not os.access(full, os.W_OK):
        return f"argument {option}: {path!r} exists and is not writable"
    return None


def write_plot(path: str, doc: dict[str, Any]) -> None:
    """Latency (median, us) against message size, log-log: one panel per collective, one line
    per implementation.  WRONG / n/a points are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls: list[str] = []
    for r in doc["results"]:
        if r["collective"] not in colls:
            colls.append(r["collective"])
    n = max(1, len(colls))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.8 * nrows), squeeze=False)
    prov = doc["provenance"]
    key = "pure_us" if doc["settings"]["nonblocking"] else "time_us"
    for k, coll in enumerate(colls):
        ax = axes[k // ncols][k % ncols]
        lines: dict[str, list[tuple[int, float]]] = {}
        for r in doc["results"]:
            if r["collective"] != coll:
                continue
            pts = lines.setdefault(r["implementation"], [])
            if r["status"] == "ok" and r.get(key) and r["size_bytes"] > 0:
                pts.append((r["size_bytes"], r[key]["median"]))
        for label, pts in lines.items():
            if pts:
                xs = [x for x, _ in pts]
                ys = [y for _, y in pts]
                style = "-o" if label == "native" else "--."
                ax.plot(xs, ys, style, label=label, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(coll)
        ax.set_xlabel("message size S (bytes)")
        ax.set_ylabel("median latency (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    fig.suptitle(
        f"mpicoll bench: P={prov['P']}, {prov['mpi_vendor']}, {doc['settings']['dtype']}, "
        f"{'non-blocking (pure communication)' if doc['settings']['nonblocking'] else 'blocking'}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` options."""
    from ..algorithms.registry import COLLECTIVES

    g = parser.add_argument_group("what to run")
    g.add_argument(
        "-c", "--collective", nargs="+", metavar="NAME", default=None,
        help=f"collective(s) ({', '.join(COLLECTIVES)}, or 'all'); "
        f"default: {' '.join(DEFAULT_COLLECTIVES)}",
    )
    g.add_argument(
        "-a", "--algorithm", nargs="+", metavar="NAME", default=["auto"],
        help="p2p algorithm(s) to time besides native: 'auto' (default), 'all' (every registered "
        "one), 'none' (native only) or registry names (comma-separated or several)",
    )
    g.add_argument(
        "-m", "--message-size", default=DEFAULT_SIZES, metavar="MIN:MAX",
        help=f"message sizes S in bytes: MIN, 2 MIN, 4 MIN, ... up to MAX, K/M/G suffixes "
        f"(default {DEFAULT_SIZES}); each is rounded down to whole elements (whole blocks of "
        "P for the block collectives), and sizes that round to the same count run once",
    )
    g.add_argument("--dtype", default="float64",
                   help="element type (default float64), or a derived datatype: "
                        f"{_cases.DERIVED_GRAMMAR}, e.g. vector:2:3:float64")
    g.add_argument("--op", default="sum", help="reduction op (default sum)")
    g.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    g.add_argument("--in-place", action="store_true", help="use MPI.IN_PLACE")
    g.add_argument(
        "--nonblocking", action="store_true",
        help="time the I-forms and report communication/computation overlap (OSU, IMB-NBC)",
    )
    g.add_argument(
        "--test-calls", type=int, default=0, metavar="N",
        help="--nonblocking: call Test() N times during the compute (OSU -t)",
    )
    t = parser.add_argument_group("timing")
    t.add_argument("-i", "--iterations", type=int, default=None,
                   help="timed iterations per size (default: from --time-budget)")
    t.add_argument("-x", "--warmup", type=int, default=None,
                   help=f"warm-up iterations per size (default {DEFAULT_WARMUP}; with -i and "
                   "no --time-budget, iterations/10, at least 1)")
    t.add_argument(
        "--time-budget", type=float, default=None, metavar="SECONDS",
        help=f"seconds of timed iterations per size and implementation (default "
        f"{DEFAULT_TIME_BUDGET} unless -i is given; with -i, -i is the cap)",
    )
    t.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="abort the job if one size of one implementation takes longer "
                   "(default 300; 0: no limit)")
    t.add_argument("--model", metavar="FILE", default=None,
                   help="cost model for the predicted time of each p2p result (a file written "
                   "by mpicoll calibrate; default: the calibrated model if there is one, else "
                   "the built-in defaults)")
    o = parser.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", help="write every statistic and provenance as JSON")
    o.add_argument("--csv", metavar="FILE", help="write every statistic as CSV")
    o.add_argument("--plot", metavar="FILE.png",
                   help="latency vs size plot (needs matplotlib; the extension names the "
                   "format: png, svg, pdf, ...)")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")


def _split(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x for x in v.replace(",", " ").split() if x]
    return out


def selection(args: argparse.Namespace, default_collectives: Sequence[str],
              default_algorithms: Sequence[str], keywords: Sequence[str],
              error: Callable[[str], Any]) -> tuple[list[str], list[str]]:
    """The ``-c`` collectives and ``-a`` algorithms of bench, verify and simulate, checked
    against the registry (``all`` for -c means every collective; ``keywords`` are the -a words
    besides algorithm names, e.g. auto/all/none); ``error(message)`` raises."""
    from ..algorithms import registry

    colls = _split(args.collective) or list(default_collectives)
    if colls == ["all"]:
        colls = list(registry.COLLECTIVES)
    for c in colls:
        if c not in registry.COLLECTIVES:
            error(f"argument -c/--collective: unknown collective {c!r} "
                  f"(choose from {', '.join(registry.COLLECTIVES)}, all)")
    algs = _split(args.algorithm) or list(default_algorithms)
    known = {a.name for c in colls for a in registry.algorithms(c)}
    for a in algs:
        if a not in keywords and a not in known:
            error(f"argument -a/--algorithm: unknown algorithm {a!r} for {', '.join(colls)} "
                  f"(choose from {', '.join([*keywords, *sorted(known)]) or '-'})")
    return colls, algs


def seconds_problem(option: str, value: float) -> str | None:
    """The usage error of a ``--timeout``-like option (finite, >= 0; 0: no limit), or None."""
    if math.isfinite(value) and value >= 0:
        return None
    return f"argument {option}: must be a finite number of seconds >= 0 (0: no limit), got " \
           f"{value:g}"


def make_plan(args: argparse.Namespace, p: int, error: Callable[[str], Any]) -> Plan:
    """Validate ``bench`` arguments (same verdict on every rank); ``error(msg)`` raises."""

    colls, algs = selection(args, DEFAULT_COLLECTIVES, ["auto"], ("auto", "all", "none"), error)
    try:
        sizes = parse_sizes(args.message_size)
    except ValueError as exc:
        error(f"argument -m/--message-size: {exc}")
    if not _cases.known_dtype(args.dtype):
        error(f"argument --dtype: unknown dtype {args.dtype!r} (choose from "
              f"{', '.join(_cases.DTYPES)}, or a derived {_cases.DERIVED_GRAMMAR})")
    if args.op not in _cases.OPS:
        error(f"argument --op: unknown op {args.op!r} (choose from {', '.join(_cases.OPS)})")
    if any(c in _cases.REDUCTIONS for c in colls):
        why = _cases.dtype_op_problem(args.dtype, args.op, p)
        if why:
            error(f"argument --op: {why}")
    if any(c in _cases.ROOTED for c in colls) and not 0 <= args.root < p:
        error(f"argument --root: root {args.root} is not a rank (P = {p})")
    if args.iterations is not None and args.iterations < 1:
        error("argument -i/--iterations: must be >= 1")
    if args.warmup is not None and args.warmup < 0:
        error("argument -x/--warmup: must be >= 0")
    if args.time_budget is not None and not (math.isfinite(args.time_budget)
                                             and args.time_budget > 0):
        error(f"argument --time-budget: must be > 0 (a finite number of seconds), got "
              f"{args.time_budget:g}")
    timeout_problem = seconds_problem("--timeout", args.timeout)
    if timeout_problem:
        error(timeout_problem)
    if args.test_calls < 0:
        error("argument --test-calls: must be >= 0")
    if args.test_calls and not args.nonblocking:
        error("argument --test-calls: only with --nonblocking")
    budget = args.time_budget
    if budget is None and args.iterations is None:
        budget = DEFAULT_TIME_BUDGET
    settings = Settings(args.iterations, args.warmup, budget, args.test_calls, args.timeout)
    return Plan(colls, algs, sizes, args.dtype, args.op, args.root, args.in_place,
                args.nonblocking, settings, model_path=getattr(args, "model", None))


def environment_problem(args: argparse.Namespace) -> str | None:
    """Checks that only rank 0 can make, before anything runs: matplotlib and the image
    format of ``--plot``, ``--model``, and that every output file (``--json``, ``--csv``,
    ``--plot``) can be written and no two of them are the same file; None if fine."""
    if args.plot:
        why = plot_problem(args.plot)
        if why:
            return why
    if getattr(args, "model", None):
        try:
            resolve_model(args.model)
        except ValueError as exc:
            return f"argument --model: {exc}"
    seen: dict[str, str] = {}
    for opt in ("json", "csv", "plot"):
        path = getattr(args, opt)
        if path:
            why = output_file_problem(f"--{opt}", path)
            if why:
                return why
            key = os.path.realpath(path)
            if key in seen:
                return f"arguments --{seen[key]} and --{opt}: both write {path!r}"
            seen[key] = opt
    return None


def run(
    args: argparse.Namespace, comm: Any, argv: Sequence[str] = (), out: TextIO | None = None
) -> int:
    """Run ``bench`` with validated ``args`` on ``comm``; the exit status (same on all ranks).

    Returns:
        0 if every checked result was right, 1 if any implementation was WRONG or raised.
    """
    out = out or sys.stdout
    rank, p = comm.Get_rank(), comm.Get_size()
    plan: Plan = args.plan
    plan.argv = list(argv)
    plan.model, plan.model_source = comm.bcast(
        resolve_model(plan.model_path) if rank == 0 else None, root=0
    )
    need_p2p = any(_algorithms_for(c, plan.algorithms) for c in plan.collectives)
    native, p2p = make_backends(comm, need_p2p)
    prov = provenance(comm, ["bench", *argv])
    progress = Progress(rank == 0 and not args.quiet)
    if rank == 0:
        out.write(header(plan, prov))
        out.flush()
    all_records: list[dict[str, Any]] = []
    guard = CallGuard(comm, plan.settings.timeout)
    try:
        for coll in plan.collectives:
            recs = bench_collective(comm, plan, coll, guard.native or native, p2p, progress,
                                    guard=guard)
            all_records += recs
            progress.clear()
            if rank == 0:
                out.write(format_block(plan, coll, recs, p) + "\n")
                out.flush()
    finally:
        progress.clear()
    guard.Free()
    wrong = sum(r["status"] in ("wrong", "error") for r in all_records)
    if rank == 0:
        doc = document(plan, prov, all_records)
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        if args.csv:
            write_csv(args.csv, doc)
        if args.plot:
            write_plot(args.plot, doc)
        if wrong:
            out.write(f"# {wrong} WRONG result(s): see the notes under the tables\n")
        out.flush()
    return 1 if wrong else 0


def document(plan: Plan, prov: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--json`` document (see ``schemas/bench.schema.json``)."""
    st = plan.settings
    lo, hi = st.iteration_range()
    return {
        "schema": SCHEMA_ID,
        "provenance": prov,
        "settings": {
            "collectives": plan.collectives,
            "algorithms": plan.algorithms,
            "sizes": plan.sizes,
            "dtype": plan.dtype,
            "op": plan.op,
            "root": plan.root,
            "in_place": plan.in_place,
            "nonblocking": plan.nonblocking,
            "iterations": st.iterations,
            "warmup": st.warmup_count(),
            "time_budget_s": st.time_budget,
            "min_iterations": lo,
            "max_iterations": hi,
            "test_calls": st.test_calls,
            "timing": "median over iterations of the max over ranks; barrier before each",
            "model": (None if plan.model is None
                      else {**plan.model.as_dict(), "source": plan.model_source}),
        },
        "results": records,
        "summary": summarize(records),
        "wrong": sum(r["status"] in ("wrong", "error") for r in records),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mpicoll bench ARGS``: same as ``mpicoll.cli.main(["bench", *ARGS])``."""
    from .cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])
