"""A call that raises, in verify and bench (one rank, in this process): the report names the
backend, the case and the error's text on one line; an MPI library error shows its class.

The multi-rank side (an error that strands other ranks inside the call) is in
``test_cli_subprocess.py`` and ``tests/mpi/test_cli.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mpi4py import MPI

from mpicoll.backends.native import Native
from mpicoll.tools import cli, harness

# An MPICH 5 error stack, as str(MPI.Exception) gives it (cut where MPI cuts it).
MPICH_STACK = (
    "Invalid datatype, error stack:\n"
    "internal_Gather_c(389)....................: MPI_Gather_c(sendbuf=0x5, sendcount=750, "
    "MPI_CHAR, recvbuf=0x6, recvcount=750, MPI_CHAR, 0, MPI_COMM_WORLD) failed\n"
    "MPID_Gather(880)..........................: \n"
    "MPIR_Gather_intra_binomial(142)...........: \n"
    "MPIC_Recv(210).............."
)


class _StackError(MPI.Exception):
    """An MPI_ERR_TYPE whose text is MPICH's multi-line error stack."""

    def __init__(self) -> None:
        super().__init__(MPI.ERR_TYPE)

    def __str__(self) -> str:
        return MPICH_STACK


@pytest.fixture
def failing_native_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native backend's Gather (blocking and non-blocking) raises an MPI error."""
    def failing(self: Native, *args: Any, **kw: Any) -> Any:
        raise _StackError()

    monkeypatch.setattr(Native, "Gather", failing)
    monkeypatch.setattr(Native, "Igather", failing)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_describe_error() -> None:
    assert harness.describe_error(ValueError("bad\nvalue")) == "ValueError: bad | value"
    assert harness.describe_error(MPI.Exception(MPI.ERR_TYPE)).startswith(
        "MPI.Exception [MPI_ERR_TYPE]: ")
    assert harness.describe_error(_StackError()) == (
        "MPI.Exception [MPI_ERR_TYPE]: Invalid datatype, error stack: | internal_Gather_c(389): "
        "MPI_Gather_c(sendbuf=0x5, sendcount=750, MPI_CHAR, recvbuf=0x6, recvcount=750, "
        "MPI_CHAR, 0, MPI_COMM_WORLD) failed | MPID_Gather(880) | "
        "MPIR_Gather_intra_binomial(142) | MPIC_Recv(210)"
    )


def test_verify_reports_a_native_mpi_error_as_a_failure(
    capsys: pytest.CaptureFixture[str], failing_native_gather: None
) -> None:
    status, out, _ = run_cli(capsys, "verify", "-q", "-c", "gather", "bcast", "--counts", "3",
                             "--dtypes", "float64", "--in-place", "no", "--nonblocking")
    assert status == 1
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails == [
        "FAIL gather/native: gather P=1 dtype=float64 root=0 count=3: rank 0: "
        + harness.describe_error(_StackError()),
        "FAIL gather/native (non-blocking): gather P=1 dtype=float64 root=0 count=3: rank 0: "
        + harness.describe_error(_StackError()),
    ]
    rows = {tuple(line.split()[:2]): line.split() for line in out.splitlines()
            if line.startswith(("gather ", "bcast "))}
    assert rows[("gather", "native")][2] == "F2/2"
    # the p2p algorithms of the case are still checked (against the NumPy answer), and later
    # cases run on a fresh native backend
    for (coll, impl), cells in rows.items():
        if (coll, impl) != ("gather", "native"):
            assert cells[2] in ("ok", "n/a"), cells
    assert out.splitlines()[-1].startswith("verify: ")
    assert " 2 failed" in out.splitlines()[-1]


def test_bench_reports_a_native_mpi_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, failing_native_gather: None
) -> None:
    path = tmp_path / "b.json"
    status, out, _ = run_cli(capsys, "bench", "-c", "gather", "bcast", "-m", "8", "-i", "2",
                             "-q", "--json", str(path))
    assert status == 1
    doc = json.loads(path.read_text())
    native = {r["collective"]: r for r in doc["results"] if r["backend"] == "native"}
    assert native["gather"]["status"] == "error"
    assert native["gather"]["reason"] == harness.describe_error(_StackError())
    assert native["bcast"]["status"] == "ok"  # the next collective runs
    assert "native: ERROR at 1 size(s)" in out
    assert "MPI.Exception [MPI_ERR_TYPE]: Invalid datatype" in out


def test_call_guard_tells_whether_a_call_raised() -> None:
    guard = harness.CallGuard(MPI.COMM_WORLD, timeout=60.0)
    try:
        assert guard.grace == 10.0
        guard.settle("ok", None, "a")
        assert not guard.raised()
        guard.settle("error", "ValueError: x", "b")
        guard.settle("ok", None, "c")
        assert guard.raised()
        assert not guard.raised(native=True)
        assert not guard.raised()  # reset
        guard.settle("error", "MPI.Exception", "d", native=True)
        assert guard.raised(native=True)
        fresh = guard.fresh_native(cli_native := Native(MPI.COMM_WORLD))
        assert isinstance(fresh, Native)
        assert fresh is guard.native
        assert fresh.comm != cli_native.comm
        assert fresh.Get_size() == cli_native.Get_size()
    finally:
        guard.Free()
    assert harness.stranding_grace(4.0) == 2.0
    assert harness.stranding_grace(0.0) == 10.0
