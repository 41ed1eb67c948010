"""Shared pytest set-up for both suites.

* ``tests/unit``: plain single-process pytest (``pytest tests/unit``); mpi4py initialises MPI
  as a singleton, no ``mpiexec`` needed.
* ``tests/mpi``: one pytest per rank, under ``mpiexec``::

      mpiexec -n 4 python -m pytest --with-mpi tests/mpi -q -p no:cacheprovider

  (``make test`` runs it for P = 1..5 through ``tests/run_mpi.sh``).

What this file adds:

* ``tests/`` on ``sys.path``, so both suites ``import oracle`` (``tests/oracle.py``, the tests'
  NumPy oracle: every collective's exact result from every rank's arguments);
* fixtures ``comm`` (``MPI.COMM_WORLD``), ``rank``, ``size`` and ``rng``, and
  ``broken_allreduce`` (a deliberately wrong p2p allreduce, for the CLI tests);
* tests marked ``large`` / ``full`` are skipped unless ``MPICOLL_TEST_LARGE=1`` /
  ``MPICOLL_TEST_FULL=1`` (tests may also read those variables to widen their sweeps);
* per-test time limits (pytest-timeout's ``--timeout``) that work while the process is blocked
  inside an MPI call: past the limit a rank prints ``[rank R] TIMEOUT <nodeid>`` and its Python
  stacks, then ends the job with ``MPI.COMM_WORLD.Abort(1)``;

and, when the job has more than one rank:

* only rank 0 writes pytest's report; the other ranks stay quiet;
* fail-fast: a test that fails (setup, call or teardown) or a module that fails to collect on
  any rank makes that rank print ``[rank R] FAILED <nodeid>`` and the failure to stderr, then
  call ``MPI.COMM_WORLD.Abort(1)``: the job ends at once, non-zero, instead of leaving the
  other ranks waiting forever inside a collective;
* every rank must collect the same tests in the same order (else they would deadlock): checked
  once after collection;
* a rank that ends its session with a non-zero status aborts the job rather than hang in
  ``MPI_Finalize`` while the others wait;
* each rank gets its own ``--basetemp`` (``tmp_path``), so ranks never race on temp dirs.
  ``mpi_tmp_path`` (pytest-mpi) gives one directory shared by all ranks.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
import traceback
import zlib
from typing import Any, NoReturn

import _pytest
import numpy as np
import pluggy
import pytest
from mpi4py import MPI

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:  # pytest's default import mode adds it too; importlib mode does not
    sys.path.insert(0, _TESTS)

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
FULL = os.environ.get("MPICOLL_TEST_FULL", "") not in ("", "0")
LARGE = os.environ.get("MPICOLL_TEST_LARGE", "") not in ("", "0")
#: the name of the deliberately wrong algorithm of the ``broken_allreduce`` fixture
BROKEN = "broken_for_test"

# Short array reprs in assertion messages.
np.set_printoptions(threshold=64, edgeitems=4, linewidth=100)

_stderr_fd: int | None = None  # a dup of the real stderr, written past pytest's capture
_real_stdout = sys.stdout  # restored at session start on quiet ranks
_basetemp_root: str | None = None  # per-job temp root (rank 0 removes it after a clean run)
_exitstatus = 0
_failed: list[str] = []  # node ids of the tests that failed so far (with one rank: no abort)
_timer_key = pytest.StashKey[threading.Timer]()
_ABORT_GRACE = 1.0  # seconds between the report on stderr and MPI_Abort


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture
def comm() -> MPI.Intracomm:
    """``MPI.COMM_WORLD``: every rank of the job (one rank when run without ``mpiexec``)."""
    return WORLD


@pytest.fixture
def rank() -> int:
    """This process's rank in ``MPI.COMM_WORLD``."""
    return RANK


@pytest.fixture
def size() -> int:
    """Number of ranks in ``MPI.COMM_WORLD``."""
    return SIZE


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test id: the SAME stream on every rank and every run.

    Draw every rank's input (e.g. shape ``(size, count)``) and take row ``rank``: then every
    rank can compute the expected result of the collective itself.
    """
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# --------------------------------------------------------------------------------------------
# Fail-fast reporting


def _say(header: str, text: str = "") -> None:
    """Write ``header`` and ``text`` to the real stderr, every line prefixed ``[rank R]``."""
    lines = [header, *text.rstrip("\n").splitlines()]
    # The leading newline ends rank 0's unfinished progress line ("....F") on the terminal.
    block = "\n" + "".join(f"[rank {RANK}] {line}\n" for line in lines)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    fd = _stderr_fd if _stderr_fd is not None else 2
    data = block.encode(errors="replace")
    while data:  # few, large write()s keep a rank's lines together as far as possible
        data = data[os.write(fd, data) :]


def _abort(header: str, text: str = "", errorcode: int = 1) -> NoReturn:
    """Report on stderr, then end every rank of the job at once."""
    _say(header, text)
    # MPI_Abort tears the job down at once, and a launcher may not yet have forwarded what was
    # written just before (seen with MPICH's hydra under load): give it a moment.
    time.sleep(_ABORT_GRACE)
    WORLD.Abort(errorcode)
    os._exit(errorcode)  # not reached; Abort does not return


def _report_text(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The failure (traceback and assertion message) plus any output the test captured."""
    parts = [report.longreprtext]
    for title, content in report.sections:
        if content.strip():
            parts.append(f"----- {title} -----\n{content}")
    return "\n".join(parts)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failed test phase on any rank of a multi-rank job: report it and abort the job."""
    if report.failed:
        _failed.append(report.nodeid)
    if SIZE > 1 and report.failed:
        _abort(f"FAILED {report.nodeid} ({report.when})", _report_text(report))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that fails to import on any rank: report it and abort the job."""
    if SIZE > 1 and report.failed:
        _abort(f"ERROR collecting {report.nodeid or '.'}", _report_text(report))


def pytest_internalerror(excrepr: object) -> None:
    """pytest itself failed on this rank: report it and abort the job."""
    if SIZE > 1:
        _abort("INTERNALERROR", str(excrepr))


# --------------------------------------------------------------------------------------------
# Per-test timeout (pytest-timeout's hooks). pytest-timeout's own methods do not fit MPI:
# SIGALRM is not handled while the main thread is blocked inside an MPI call, and its thread
# method ends the rank with os._exit(1), which MPICH's mpiexec does not notice (the other ranks
# hang). Here a timer thread reports the stacks and calls MPI_Abort instead.


def _on_timeout(item: pytest.Item, seconds: float) -> None:
    me = threading.get_ident()
    text = [f"test ran longer than --timeout={seconds:g} s; aborting the MPI job"]
    if _failed:  # their reports would otherwise be lost with pytest's final summary
        text.append(f"tests that failed earlier on this rank: {' '.join(_failed)}")
    capman = item.config.pluginmanager.getplugin("capturemanager")
    try:
        out, err = capman.read_global_capture() if capman else ("", "")
    except Exception:  # the capture state may be mid-change; the stacks matter more
        out, err = "", ""
    for title, content in (("captured stdout", out), ("captured stderr", err)):
        if content.strip():
            text.append(f"----- {title} -----\n{content.rstrip()}")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident != me:
            frames = [f for f in traceback.extract_stack(frame) if not _is_harness(f.filename)]
            stack = "".join(traceback.format_list(frames)).rstrip()
            text.append(f"----- stack of thread {names.get(ident, ident)} -----\n{stack}")
    _abort(f"TIMEOUT {item.nodeid}", "\n".join(text))


_HARNESS_DIRS = tuple(
    os.path.dirname(module.__file__ or "") + os.sep for module in (_pytest, pluggy, pytest)
)


def _is_harness(filename: str) -> bool:
    """Frames of pytest, pluggy, runpy, threading: left out of timeout stacks."""
    return filename == threading.__file__ or filename.startswith(("<frozen", *_HARNESS_DIRS))


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object) -> bool | None:
    """Arm our MPI-aware timer instead of pytest-timeout's (also for one rank: a test can hang
    inside MPI with one rank too, e.g. a receive that no send matches)."""
    seconds = float(getattr(settings, "timeout", 0) or 0)
    timer = threading.Timer(seconds, _on_timeout, (item, seconds))
    timer.daemon = True
    timer.name = f"mpicoll-timeout {item.nodeid}"
    item.stash[_timer_key] = timer
    timer.start()
    return True


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    """Disarm the timer armed by :func:`pytest_timeout_set_timer`."""
    timer = item.stash.get(_timer_key, None)
    if timer is None:
        return None
    timer.cancel()
    timer.join()
    del item.stash[_timer_key]
    return True


# --------------------------------------------------------------------------------------------
# Session set-up and tear-down


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Runs before pytest's own configure hooks (terminal reporter, tmp_path factory)."""
    global _stderr_fd, _basetemp_root
    _stderr_fd = os.dup(2)
    if SIZE == 1:
        return
    if RANK != 0:
        # pytest's terminal reporter binds sys.stdout when it is created, right after this
        # hook: point it at /dev/null on ranks other than 0. Failures still reach stderr above.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the session)
    if config.option.basetemp is None:
        root = tempfile.mkdtemp(prefix="mpicoll-pytest-") if RANK == 0 else None
        _basetemp_root = WORLD.bcast(root, root=0)
        config.option.basetemp = os.path.join(_basetemp_root, f"rank{RANK}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Give the quiet ranks their real stdout back (tests may print; pytest captures it)."""
    sys.stdout = _real_stdout


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``large`` and ``full`` tests unless their environment variable asks for them."""
    skip_large = pytest.mark.skip(reason="large: set MPICOLL_TEST_LARGE=1 (make test-large)")
    skip_full = pytest.mark.skip(reason="full: set MPICOLL_TEST_FULL=1 (make test-full)")
    for item in items:
        if not LARGE and "large" in item.keywords:
            item.add_marker(skip_large)
        if not FULL and "full" in item.keywords:
            item.add_marker(skip_full)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every rank must run the same tests in the same order, or they deadlock."""
    if SIZE == 1:
        return
    ids = [item.nodeid for item in session.items]
    mine = (len(ids), zlib.crc32("\n".join(ids).encode()))
    everyone = WORLD.allgather(mine)
    if all(other == everyone[0] for other in everyone):
        return
    ids0 = WORLD.bcast(ids if RANK == 0 else None, root=0)  # every rank is here: collective
    if ids == ids0:
        WORLD.Barrier()  # wait to be ended by a rank that differs from rank 0
    pairs = enumerate(zip(ids, ids0, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), min(len(ids), len(ids0)))
    counts = ", ".join(f"rank {r}: {n}" for r, (n, _) in enumerate(everyone))
    _abort(
        "ERROR ranks collected different tests (a rank-dependent parametrisation?)",
        f"tests collected: {counts}\n"
        f"test #{first} here:   {ids[first] if first < len(ids) else '(none)'}\n"
        f"test #{first} rank 0: {ids0[first] if first < len(ids0) else '(none)'}",
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remember the exit status for :func:`pytest_unconfigure` (after the final report)."""
    global _exitstatus
    _exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After the report: abort on a non-zero status, else clean the per-rank temp dirs."""
    if SIZE == 1:
        return
    if _exitstatus != 0:
        # e.g. 5 (no tests collected), 2 (interrupted), 4 (usage error): end the whole job
        # now rather than hang in MPI_Finalize while another rank still runs tests.
        name = pytest.ExitCode(_exitstatus).name if _exitstatus < 6 else "?"
        _abort(f"pytest exited with status {_exitstatus} ({name})", errorcode=_exitstatus)
    if _basetemp_root is not None:
        WORLD.Barrier()
        if RANK == 0:
            shutil.rmtree(_basetemp_root, ignore_errors=True)


@pytest.fixture
def broken_allreduce(monkeypatch: pytest.MonkeyPatch) -> str:
    """A p2p allreduce algorithm, ``broken_for_test``, that is deliberately wrong (registered in
    this process only, on every rank; the CLI tests of both suites use it): a correct
    registered schedule runs, then the last rank adds 1 to element 0."""
    from mpicoll import registry

    good = registry.algorithms("allreduce")[0].schedule

    def broken(ctx: Any, *args: Any, **kw: Any) -> Any:
        """Correct allreduce, then corrupt element 0 on the last rank."""
        yield from good(ctx, *args, **kw)
        buf = args[0]
        if ctx.rank == ctx.size - 1 and buf.size:
            buf[0] += 1

    alg = registry.Algorithm("allreduce", BROKEN, broken, "0", lambda p, n, a, b, g: 0.0, (),
                             "tests")
    monkeypatch.setitem(registry._REGISTRY["allreduce"], BROKEN, alg)
    return BROKEN  # monkeypatch removes it after the test


@pytest.fixture
def shared_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """One directory every rank sees (rank 0's tmp_path, broadcast): rank 0 writes files there."""
    return pathlib.Path(MPI.COMM_WORLD.bcast(str(tmp_path), root=0))
