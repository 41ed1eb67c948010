"""``bench --split MOD:k|DIV:k`` on every rank of the job (P = 1..5): the groups partition the
world as nccl-tests' split does, every group checks then times every implementation, the JSON
(against the schema) has each group's records and the aggregate (the slowest group's median),
and bad specs are refused on every rank.  Timings are never asserted.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_split.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import run_all
from mpi4py import MPI

from mpicoll.tools import bench
from mpicoll.tools.split import color, group_sizes

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["MOD", "DIV"])
def test_bench_split_runs_every_group_and_aggregates(
    capsys: pytest.CaptureFixture[str], shared_dir: Path, kind: str
) -> None:
    k = min(2, SIZE)
    spec = f"{kind}:{k}"
    path = shared_dir / f"split-{kind}.json"
    status, out, err = run_all(capsys, "bench", "-c", "allreduce", "gather", "-m", "8:24",
                               "-i", "2", "-x", "0", "-q", "--split", spec, "--json", str(path))
    assert status == 0, out + err
    if RANK != 0:
        return
    doc = json.loads(path.read_text())
    assert bench.validate(doc) == []
    want = {}
    for r in range(SIZE):
        want.setdefault(color(kind, k, r), []).append(r)
    groups = doc["split"]["groups"]
    assert [(g["group"], g["ranks"]) for g in groups] == sorted(want.items())
    assert [g["size"] for g in groups] == group_sizes(kind, k, SIZE)
    for g in groups:
        recs = [r for r in doc["results"] if r["group"] == g["group"]]
        assert recs
        assert {r["group_size"] for r in recs} == {g["size"]}
        assert {r["implementation"] for r in recs} == {"native", "mpi4py", "auto"}
        assert all(r["status"] == "ok" for r in recs), recs
        assert f"# --split {spec}: group {g['group']} ({g['size']} rank" in out
    assert doc["wrong"] == 0
    agg = doc["split"]["aggregate"]
    assert agg
    for row in agg:
        meds = [next(r["time_us"]["median"] for r in doc["results"]
                     if r["group"] == g["group"] and r["collective"] == row["collective"]
                     and r["implementation"] == row["implementation"]
                     and r["size_bytes"] == row["size_bytes"]) for g in groups]
        assert row["group_median_us"] == meds
        assert row["slowest_group_us"] == max(meds)
    assert f"# --split {spec}: {len(groups)} groups at once" in out


@pytest.mark.mpi
def test_bench_split_refuses_bad_specs(capsys: pytest.CaptureFixture[str]) -> None:
    for spec, msg in (("MOD:0", "k must be between 1 and P"),
                      (f"DIV:{SIZE + 1}", "k must be between 1 and P"),
                      ("XOR:2", "is not MOD:k or DIV:k")):
        status, _, err = run_all(capsys, "bench", "-c", "bcast", "-m", "8", "--split", spec)
        assert status == 2
        if RANK == 0:
            assert msg in err, err
    if SIZE > 1:  # a root of the world that no group of one rank has
        smallest = min(group_sizes("DIV", 1, SIZE))
        status, _, err = run_all(capsys, "bench", "-c", "bcast", "-m", "8", "--split",
                                 "DIV:1", "--root", str(smallest))
        assert status == 2
        if RANK == 0:
            assert "is not a rank of the smallest group" in err
