"""Running ``mpicoll`` commands in-process on every rank of an MPI test."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from mpicoll.tools import cli

WORLD = MPI.COMM_WORLD


def run_all(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``mpicoll ARGV`` on every rank; asserts every rank got the same exit status and that
    only rank 0 printed."""
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    statuses = WORLD.allgather(status)
    assert statuses == [status] * WORLD.Get_size(), statuses
    if WORLD.Get_rank() != 0:
        assert out == "", "only rank 0 prints"
    return status, out, err
