"""``mpicoll bench --pattern``: what each pattern passes at every call, and a run of every
pattern in this process (one rank) whose checks pass and whose JSON validates.

Timings are never asserted: only what is passed and reported.
"""

from __future__ import annotations

import array
import json
import mmap
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll.tools import bench, cli
from mpicoll.tools.cases import Case
from mpicoll.tools.patterns import PATTERNS, adapt, allocator, arguments, parse_patterns

FAST = ["-i", "2", "-x", "1", "-q"]


def make(pattern: str, coll: str = "allreduce", count: int = 3, size: int = 1,
         dtype: str = "float64", op: str = "sum") -> tuple[Case, object, dict[str, object]]:
    ad = adapt(pattern, coll, dtype, op, coll in ("allreduce", "reduce"))
    memory = allocator(pattern)
    case = Case(coll, count, ad.dtype, ad.op, size=size,
                alloc=memory[0] if memory else None).build()
    mk, kw = arguments(pattern, case, memory[1] if memory else None)
    return case, mk, kw


def test_parse_patterns() -> None:
    assert parse_patterns(["all"]) == list(PATTERNS)
    assert parse_patterns(["view,list", "view"]) == ["view", "list"]
    with pytest.raises(ValueError, match="unknown pattern 'nope'"):
        parse_patterns(["nope"])


def test_numpy_passes_the_same_arrays() -> None:
    case, mk, _ = make("numpy")
    a, b = mk(), mk()  # type: ignore[operator]
    assert a[0] is b[0] is case._b["send"]


def test_view_makes_a_new_view_of_the_same_memory_at_every_call() -> None:
    case, mk, _ = make("view")
    a, b = mk(), mk()  # type: ignore[operator]
    assert a[0] is not b[0]
    assert a[0].base is not None
    assert np.shares_memory(a[0], case._b["send"])
    assert a[0].shape == case._b["send"].shape


def test_list_builds_a_new_spec_with_the_named_datatype_at_every_call() -> None:
    case, mk, _ = make("list")
    a, b = mk(), mk()  # type: ignore[operator]
    assert a[0] is not b[0]
    assert a[0] == b[0]
    assert a[0][0] is case._b["send"]
    assert a[0][1] == MPI.DOUBLE


def test_byte_patterns_pass_bytes_and_a_bitwise_op() -> None:
    ad = adapt("bytearray", "allreduce", "float64", "sum", True)
    assert (ad.dtype, ad.op) == ("uint8", "bor")
    assert "MPI_BYTE" in (ad.note or "")
    assert adapt("mmap", "allreduce", "int32", "bxor", True).op == "bxor"
    assert adapt("mmap", "bcast", "float64", "sum", False).dtype == "uint8"
    _case, mk, _ = make("bytearray")
    args = mk()  # type: ignore[operator]
    assert isinstance(args[0], bytearray)
    assert len(args[0]) == 3
    assert args == mk()  # type: ignore[operator]
    _case, mk, _ = make("mmap", "gather", 2, size=1)
    args = mk()  # type: ignore[operator]
    assert isinstance(args[0][0], mmap.mmap)
    assert args[0][1:] == [2, MPI.BYTE]
    assert args[0] is mk()[0]  # type: ignore[operator]  # built once per size


def test_array_passes_an_array_array() -> None:
    _case, mk, _ = make("array", dtype="int32")
    (send, _recv) = mk()  # type: ignore[operator]
    assert isinstance(send, array.array)
    assert send.typecode == np.dtype("int32").char
    assert adapt("array", "bcast", "complex128", "sum", False).skip


def test_scalar_passes_a_zero_d_array() -> None:
    case, mk, _ = make("scalar", "bcast", 1)
    (spec,) = mk()  # type: ignore[operator]
    assert spec[0].shape == ()
    assert np.shares_memory(spec[0], case._b["send"])
    assert "one element" in (adapt("scalar", "gather", "float64", "sum", False).skip or "")


def test_every_skip_has_a_reason() -> None:
    assert adapt("view", "barrier", "float64", "sum", False).skip
    assert "predefined" in (adapt("list", "bcast", "double_int", "sum", False).skip or "")
    assert adapt("numpy", "barrier", "float64", "sum", False).skip is None


@pytest.mark.parametrize("extra", [[], ["--persistent"], ["--nonblocking"]])
def test_bench_every_pattern_checks_and_validates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    path = tmp_path / "out.json"
    colls = ["bcast", "allreduce", "gather", "scatter", "alltoall", "allgatherv",
             "reduce_scatter", "alltoallw", "reduce", "exscan", "barrier"]
    status = cli.main(["bench", "-c", *colls, "-a", "all", "-m", "8:16", "--pattern", "all",
                       *FAST, *extra, "--json", str(path)])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    assert doc["settings"]["patterns"] == list(PATTERNS)
    assert doc["wrong"] == 0
    ran = {(r["collective"], r["pattern"]) for r in doc["results"]}
    skipped = {(s["collective"], s["pattern"]) for s in doc["skipped"]}
    assert ran | skipped == {(c, p) for c in colls for p in PATTERNS}
    assert not ran & skipped
    assert ("barrier", "numpy") in ran
    assert ("bcast", "scalar") in ran
    for s in doc["skipped"]:
        assert f"# {s['collective']} [pattern {s['pattern']}]: skipped: {s['reason']}" in out
    for r in doc["results"]:
        assert r["status"] in ("ok", "n/a"), r
        if r["status"] == "ok":
            assert r["check"] in ("expected", "native")
        if r["pattern"] in ("bytearray", "mmap") and r["collective"] != "barrier":
            assert r["dtype"] == "uint8"
            assert r["op"] == ("bor" if r["collective"] in ("allreduce", "reduce_scatter",
                                                             "reduce", "exscan") else None)
    assert {row["pattern"] for row in doc["summary"]} == set(PATTERNS)
    assert "# allreduce [pattern mmap: [mmap, count, MPI.BYTE]" in out
    assert "op bor on uint8 values as MPI.BYTE" in out


def test_bench_pattern_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--pattern", "views", *FAST]) == 2
    assert "argument --pattern: unknown pattern 'views'" in capsys.readouterr().err
