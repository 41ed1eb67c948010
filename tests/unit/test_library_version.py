"""The MPI library's version line, as every tool writes it: Open MPI's
``MPI_Get_library_version`` ends in a NUL, which cut verify's reproducer scripts (Python
refuses a source file with a NUL in it) and its table's header line."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from mpicoll.tools import harness, launcher

OMPI = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11\x00"


def test_the_nul_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MPI, "Get_library_version", lambda: OMPI)
    kind, line = launcher.library()
    assert kind == "openmpi"
    assert "\x00" not in line
    assert line.endswith("5.0.11")
    assert "\x00" not in harness._library_text()
    compile(f"# {line}\nx = 1\n", "<reproducer>", "exec")  # a script can start with it
