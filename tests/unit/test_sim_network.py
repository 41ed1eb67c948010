"""The simulator's network models (mpicoll.engines.network): routes, link contention, the
fat tree's oversubscription, LogGP's gap, placement; known answers on small hand-computed
cases; the new terms reduce to the flat model where they are zero; the per-rank and vector
engines agree bit for bit under every model; ``mpicoll simulate --topology``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import registry
from mpicoll.algorithms.schedule import Context, Schedule
from mpicoll.engines.network import (
    Dragonfly,
    FatTree,
    Network,
    Torus,
    parse_topology,
    placement,
)
from mpicoll.engines.sim import Simulator, TwoLevel
from mpicoll.model import alphabeta as model
from mpicoll.model.alphabeta import Model
from mpicoll.tools import cli
from mpicoll.tools.simulate import SYMMETRIC, make_args, simulate

F8 = np.dtype(np.float64)
N = 1000  # bytes of the hand-made messages (125 float64)
#: alpha 0: a message's time is its bandwidth term alone, so "twice as long" is exact
BW = Model(alpha=0.0, beta=1e-9, gamma=0.0)
AB = Model(alpha=1e-6, beta=1e-9, gamma=0.0)


def run_messages(p: int, pairs: Sequence[tuple[int, int]], network: Network, m: Model = BW,
                 rounds: int = 1) -> np.ndarray:
    """Per-rank clocks after ``rounds`` rounds in which each (source, dest) of ``pairs``
    carries N bytes (a rank's messages of a round posted together)."""

    def make(sim: Simulator) -> list[Schedule]:
        def sched(ctx: Context) -> Schedule:
            r = int(ctx.rank)
            for _ in range(rounds):
                ops = [ctx.send(np.zeros(N // 8), d) for s, d in pairs if s == r]
                ops += [ctx.recv(np.zeros(N // 8), s) for s, d in pairs if d == r]
                if ops:
                    yield tuple(ops)
        return [sched(sim.context(r, MPI.DOUBLE, F8)) for r in range(p)]

    sim = Simulator(p, m, data=False, network=network)
    return sim.run_schedules(make)["clocks"]


# --- routes -------------------------------------------------------------------------------


def test_torus_route_length() -> None:
    t = Torus([8, 8, 8])
    node = lambda x, y, z: x + 8 * (y + 8 * z)  # noqa: E731
    assert t.hops(node(0, 0, 0), node(4, 4, 4)) == 12  # 4 + 4 + 4, the tie the + way
    assert t.hops(node(0, 0, 0), node(7, 0, 0)) == 1  # round the wrap
    assert t.hops(node(1, 2, 3), node(6, 7, 0)) == 3 + 3 + 3
    r = t.route(node(0, 0, 0), node(7, 1, 0))
    assert len(r) == 2 + 2  # injection, -x, +y, ejection
    assert r[0] == node(0, 0, 0)
    assert r[-1] == t.nodes + node(7, 1, 0)
    assert [t.link_name(x) for x in r[1:-1]] == ["(0,0,0)-x", "(7,0,0)+y"]
    assert t.route(5, 5) == []
    # every route has hops(a, b) links between the NICs, and no link twice
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 512, 200), rng.integers(0, 512, 200)
    a, b = a[a != b], b[a != b]
    routes = t.routes(a, b)
    for i in range(len(a)):
        links = [x for x in routes[i] if x >= 0]
        assert len(links) == t.hops(int(a[i]), int(b[i])) + 2
        assert len(set(links)) == len(links)


def test_fat_tree_and_dragonfly_routes() -> None:
    f = FatTree(4, 2.0, 8)
    assert f.route(0, 3) == [0, 8 + 3]  # same leaf: NIC to NIC
    assert [f.link_name(x) for x in f.route(0, 5)] == [
        "node0->net", "leaf0->spine", "spine->leaf1", "net->node5"]
    assert f.width[f.route(0, 5)[1]] == 2.0  # 4 nodes' links / ratio 2
    d = Dragonfly(3, 2, 1)  # 3 groups of 2 routers of 1 node
    assert len(d.route(0, 1)) == 3  # one local link
    names = [d.link_name(x) for x in d.route(0, 5)]  # group 0 router 0 -> group 2 router 1
    assert names[0] == "node0->net"
    assert names[-1] == "net->node5"
    assert "g0=>g2" in names
    assert 4 <= len(names) <= 5


def test_parse_topology_and_placement(tmp_path: Path) -> None:
    assert parse_topology("torus:8x8x8", 1).nodes == 512
    assert parse_topology("fattree:16:2", 100).nodes == 112
    assert parse_topology("dragonfly:4:2:3", 1).nodes == 24
    assert parse_topology("cluster:4", 3).nodes == 3
    f = tmp_path / "topo.txt"
    f.write_text("# my machine\ntorus:4x4\n")
    assert parse_topology(str(f), 1).spec == "torus:4x4"
    for bad in ("torus", "torus:0x4", "mesh:4", "fattree:4:0", "dragonfly:1:2"):
        with pytest.raises(ValueError):
            parse_topology(bad, 4)
    assert placement("block", 6, 3, 2) == (0, 0, 1, 1, 2, 2)
    assert placement("round-robin", 6, 4) == (0, 1, 2, 3, 0, 1)
    g = tmp_path / "nodes.txt"
    g.write_text("3\n2\n1\n0\n")
    assert placement(str(g), 4, 4) == (3, 2, 1, 0)
    with pytest.raises(ValueError, match="node ids"):
        placement("block", 9, 8)
    with pytest.raises(ValueError, match="4 node ids for 3"):
        placement(str(g), 3, 4)
    with pytest.raises(ValueError):
        Network("torus:2x2").fabric(5)
    with pytest.raises(ValueError):
        Network("torus:2x2", gap=-1.0)


# --- contention ---------------------------------------------------------------------------


def test_two_messages_sharing_one_link_take_twice_as_long() -> None:
    ring4 = Network("torus:4")
    alone = run_messages(4, [(0, 2)], ring4)  # links 0+x, 1+x
    both = run_messages(4, [(0, 2), (1, 3)], ring4)  # 1+x shared
    assert alone.max() == N * BW.beta
    assert both.max() == 2 * alone.max()
    apart = run_messages(4, [(0, 1), (2, 3)], ring4)  # disjoint routes
    assert apart.max() == alone.max()
    # with latency: the bandwidth term doubles, alpha does not
    assert run_messages(4, [(0, 2), (1, 3)], ring4, AB).max() == pytest.approx(
        AB.alpha + 2 * N * AB.beta, rel=1e-12)
    # a rank's own two sends are serialised by its port, not charged twice on its NIC
    own = run_messages(4, [(0, 1), (0, 3)], ring4, AB)
    assert own.max() == pytest.approx(2 * (AB.alpha + N * AB.beta), rel=1e-12)
    # and without contention they do not slow each other
    off = Network("torus:4", contention=False)
    assert run_messages(4, [(0, 2), (1, 3)], off).max() == alone.max()


def test_a_node_shares_its_nic() -> None:
    two = Network("cluster:2")  # ranks 0, 1 on node 0; 2, 3 on node 1
    assert run_messages(4, [(0, 2)], two).max() == N * BW.beta
    assert run_messages(4, [(0, 2), (1, 3)], two).max() == 2 * N * BW.beta
    assert run_messages(4, [(0, 1), (2, 3)], two).max() == N * BW.beta  # inside the nodes


def test_fat_tree_oversubscription_halves_bandwidth_across_the_top() -> None:
    pairs = [(0, 2), (1, 3)]  # both nodes of leaf 0 to both of leaf 1
    full = run_messages(4, pairs, Network("fattree:2:1"))
    half = run_messages(4, pairs, Network("fattree:2:2"))
    assert full.max() == N * BW.beta
    assert half.max() == 2 * N * BW.beta
    # inside a leaf the ratio does not matter
    assert run_messages(4, [(0, 1), (2, 3)], Network("fattree:2:2")).max() == N * BW.beta


def test_alltoall_on_an_oversubscribed_fat_tree_is_slowed_by_the_ratio() -> None:
    t = {r: simulate("alltoall", 16, 1 << 16, algorithm="pairwise", model=BW,
                     network=Network(f"fattree:4:{r}")).time for r in (1, 2, 4)}
    # pairwise exchange at p = 16 (a power of two): round k = 1..15 pairs r with r ^ k; in
    # rounds 1..3 every message stays in its leaf of 4, in rounds 4..15 all 4 nodes of every
    # leaf cross the top at once, which carries 4 / ratio nodes' bandwidth: slowed by the ratio
    one = (1 << 16) * 8 * BW.beta  # one 512 KiB block at full bandwidth
    for r in (1, 2, 4):
        assert t[r] == pytest.approx(one * (3 + 12 * r), rel=1e-12)


def test_a_ring_on_a_torus_has_no_contention() -> None:
    for spec, p in (("torus:4x4", 16), ("torus:4x4x4", 64), ("torus:8", 8)):
        flat = simulate("allreduce", p, 4096, algorithm="ring", model=AB)
        net = simulate("allreduce", p, 4096, algorithm="ring", model=AB, network=Network(spec))
        assert net.time == flat.time
        assert np.array_equal(net.clocks, flat.clocks)


def test_hop_latency_counts_the_route() -> None:
    t = run_messages(512, [(0, 4 + 8 * (4 + 8 * 4))], Network("torus:8x8x8", hop=1e-7), AB)
    assert t.max() == pytest.approx(AB.alpha + N * AB.beta + 14 * 1e-7, rel=1e-12)


# --- the gap ------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_the_gap_serialises_k_minus_1_sends(k: int) -> None:
    pairs = [(0, d) for d in range(1, k)]
    bw = N * AB.beta  # 1 us
    for g in (0.0, 0.4e-6, 3e-6):
        t = run_messages(k, pairs, Network("cluster:1", gap=g), AB)
        assert t.max() == pytest.approx((k - 2) * max(g, bw) + AB.alpha + bw, rel=1e-12)
    # no gap: a port busy for each whole message (today's single-port model)
    t = run_messages(k, pairs, Network("cluster:1"), AB)
    assert t.max() == pytest.approx((k - 1) * (AB.alpha + bw), rel=1e-12)


def test_a_nodes_ranks_share_its_nic_gap() -> None:
    # 4 ranks of node 0 each send 0 bytes off-node at once: the NIC starts them g apart
    g = 2e-6
    net = Network("cluster:4", gap=g)

    def make(sim: Simulator) -> list[Schedule]:
        def sched(ctx: Context) -> Schedule:
            r = int(ctx.rank)
            yield (ctx.send(np.zeros(0), 4 + r),) if r < 4 else (ctx.recv(np.zeros(0), r - 4),)
        return [sched(sim.context(r, MPI.DOUBLE, F8)) for r in range(8)]

    clocks = Simulator(8, AB, data=False, network=net).run_schedules(make)["clocks"]
    assert sorted(clocks[:4]) == pytest.approx([AB.alpha + i * g for i in range(4)])
    # without a gap the NIC adds nothing to zero-byte messages
    clocks = Simulator(8, AB, data=False, network=Network("cluster:4")).run_schedules(make)
    assert (clocks["clocks"][:4] == AB.alpha).all()


# --- reduces to today's model; engines agree ------------------------------------------------


FLAT_MODELS = [AB, Model(alpha=3e-6, beta=7e-10, gamma=1.3e-10, o_call=1.1e-5, o_msg=4.7e-7)]


@pytest.mark.parametrize("coll", ["allreduce", "bcast", "allgather", "alltoall", "reduce"])
def test_zero_terms_reduce_to_the_flat_model(coll: str) -> None:
    # one rank per node on a crossbar: every link carries one message at a time
    for alg in registry.algorithms(coll):
        for p in (1, 3, 8, 13):
            if alg.why_not(p) is not None:
                continue
            for m in FLAT_MODELS:
                for net in (Network("cluster:1"), Network("torus:4x4", contention=False)):
                    try:
                        ref = simulate(coll, p, 37, algorithm=alg.name, model=m, engine="rank")
                    except registry.RestrictionError:
                        continue
                    got = simulate(coll, p, 37, algorithm=alg.name, model=m, network=net,
                                   engine="rank")
                    assert np.array_equal(ref.clocks, got.clocks), (coll, alg.name, p, net)


NETWORKS = [
    Network("torus:4x4"),
    Network("torus:2x2x3", placement="round-robin", hop=1e-7),
    Network("fattree:2:2", gap=5e-7),
    Network("dragonfly:2:2:2", ranks_per_node=2),
    Network("cluster:2", gap=1e-6),
    Network("cluster:3", contention=False),
]


@pytest.mark.parametrize("net", NETWORKS, ids=lambda n: f"{n.topology}-{n.placement}-{n.gap}")
@pytest.mark.parametrize("coll", sorted(SYMMETRIC))
def test_engines_agree_under_every_network(coll: str, net: Network) -> None:
    used = 0
    fields = ("clocks", "messages_sent", "bytes_sent", "messages_recv", "bytes_recv",
              "inter_bytes_sent", "link_bytes")
    two = TwoLevel(2, FLAT_MODELS[1], Model(alpha=9e-6, beta=2e-9, gamma=1.3e-10))
    for alg in registry.algorithms(coll):
        for p in (3, 8, 12):
            if alg.why_not(p) is not None:
                continue
            for m in (FLAT_MODELS[1], two):
                for count in (0, 1000) if coll != "barrier" else (0,):
                    kw = {"algorithm": alg.name, "model": m, "network": net}
                    try:
                        ref = simulate(coll, p, count, engine="rank", **kw)  # type: ignore
                    except registry.RestrictionError:
                        continue
                    got = simulate(coll, p, count, **kw)  # type: ignore[arg-type]
                    if got.engine != "vector":
                        continue
                    used += 1
                    for f in fields:
                        assert np.array_equal(getattr(ref, f), getattr(got, f)), (
                            coll, alg.name, p, count, f)
                    assert ref.busiest_link() == got.busiest_link()
    # a node's ranks sharing a NIC with a gap are served in order by the per-rank engine
    assert used or net.topology == "cluster:2"


def test_link_bytes_count_every_byte_on_its_route() -> None:
    net = Network("torus:4x4")
    r = simulate("allreduce", 16, 1000, algorithm="recursive_doubling", model=AB, network=net)
    assert r.link_bytes is not None
    assert r.fabric is not None
    topo = r.fabric.topology
    # each message crosses its route: total link bytes = sum over messages of bytes x links
    expect = 0
    for k in range(4):
        for s in range(16):
            expect += 8000 * len(topo.route(s, s ^ (1 << k)))
    assert int(r.link_bytes.sum()) == expect
    name, nbytes = r.busiest_link()  # type: ignore[misc]
    assert nbytes == int(r.link_bytes.max())
    assert isinstance(name, str)


def test_data_mode_with_a_network_gives_the_right_answer() -> None:
    r = simulate("allreduce", 6, 10, algorithm="recursive_doubling", model=AB, data=True,
                 network=Network("torus:3x2"))
    want = sum(np.asarray(make_input(rank)) for rank in range(6))
    for out in r.outputs:
        assert np.allclose(out, want)


def make_input(rank: int) -> np.ndarray:
    args, _ = make_args("allreduce", 6, rank, 10, F8)
    return np.asarray(args[0])


# --- the command ----------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(autouse=True)
def no_calibration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MPICOLL_MODEL", str(tmp_path / "none" / "model.json"))
    model.use(None)


def test_simulate_command_with_a_topology(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    js = tmp_path / "out.json"
    status, out, err = run_cli(capsys, "simulate", "-n", "16", "-c", "allreduce", "-m",
                               "8:64K", "--topology", "torus:4x4", "--alpha", "1e-6",
                               "--beta", "1e-9", "--gamma", "1e-10", "--json", str(js), "-q")
    assert status == 0, err
    assert "# network: torus:4x4, 16 nodes" in out
    assert "busiest_link" in out
    doc = json.loads(js.read_text())
    assert doc["network"]["topology"] == "torus:4x4"
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    assert all(r["busiest_link_bytes"] > 0 for r in rows)
    # a torus fills its nodes when -n is not given
    status, out, err = run_cli(capsys, "simulate", "--topology", "torus:2x2x2", "-c",
                               "allreduce", "-m", "8:16", "-a", "ring", "-q")
    assert status == 0, err
    assert "P=8 simulated ranks" in out
    status, out, err = run_cli(capsys, "simulate", "--topology", "fattree:4", "-c", "allreduce")
    assert status != 0
    assert "the following arguments are required: -n/--ranks" in err
    for bad in (["--topology", "torus:2x2"], ["--topology", "nonsense:1"],
                ["--gap", "1e-6"], ["--topology", "torus:4x4", "--placement", "nowhere"]):
        status, out, err = run_cli(capsys, "simulate", "-n", "16", "-c", "allreduce", *bad)
        assert status != 0
        assert "--topology" in err or "--gap" in err

