"""The emulated cluster (mpicoll.tools.cluster): its parsing without privileges; with root (or
CAP_NET_ADMIN + CAP_SYS_ADMIN), a real 2-node cluster: names, hostnames, traffic through the
rate-limited NICs counted, the ssh stand-in, teardown even after an error, stale cleanup.

The MPI suite on the cluster is `make cluster-test`, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mpicoll.tools import cluster as cl


def test_parse_rate():
    assert cl.parse_rate("1gbit") == 1e9
    assert cl.parse_rate("100mbit") == 1e8
    assert cl.parse_rate("500kbit") == 5e5
    assert cl.parse_rate("10mbps") == 8e7
    assert cl.parse_rate("2.5Gbit") == 2.5e9
    for bad in ("fast", "1gb", "", "-1gbit"):
        with pytest.raises(ValueError, match="tc rate"):
            cl.parse_rate(bad)


def test_launch_args():
    flags, env = cl.launch_args("mpich", ["node0", "node1"], 3, "/x/agent")
    assert flags == ["-launcher", "ssh", "-launcher-exec", "/x/agent", "-hosts", "node0,node1",
                     "-ppn", "3"]
    assert env["MPIR_CVAR_CH4_NETMOD"] == "ofi"
    assert env["FI_PROVIDER"] == "tcp"
    flags, env = cl.launch_args("openmpi", ["node0", "node1"], 2, "/x/agent")
    assert flags[:3] == ["--prtemca", "plm_ssh_agent", "/x/agent"]
    assert flags[flags.index("--host") + 1] == "node0:2,node1:2"
    assert flags[flags.index("btl") + 1] == "tcp,self,sm"
    assert flags[flags.index("--bind-to") + 1] == "none"
    with pytest.raises(ValueError, match="MPICH and Open MPI"):
        cl.launch_args("other", ["node0"], 1, "/x/agent")


def test_missing_capabilities():
    # CapEff bits: 12 CAP_NET_ADMIN, 21 CAP_SYS_ADMIN
    full = f"Name:\tx\nCapEff:\t{(1 << 12) | (1 << 21):016x}\n"
    assert cl.missing_capabilities(full) == []
    assert cl.missing_capabilities(f"CapEff:\t{1 << 21:016x}\n") == ["CAP_NET_ADMIN"]
    assert cl.missing_capabilities("CapEff:\t0000000000000000\n") == ["CAP_NET_ADMIN",
                                                                     "CAP_SYS_ADMIN"]
    with pytest.raises(ValueError):
        cl.missing_capabilities("Name:\tx\n")


def test_bad_shape():
    with pytest.raises(ValueError, match="nodes"):
        cl.Cluster(0, 1)
    with pytest.raises(ValueError, match="ranks_per_node"):
        cl.Cluster(2, 0)
    with pytest.raises(ValueError, match="tc rate"):
        cl.Cluster(2, 1, "fast")


_WHY = cl.unavailable()
needs_root = pytest.mark.skipif(_WHY is not None, reason=f"emulated cluster: {_WHY}")

_SERVER = """
import socket, sys
s = socket.create_server((sys.argv[1], 5000)); print("up", flush=True)
c, _ = s.accept(); n = 0
while (b := c.recv(1 << 16)):
    n += len(b)
print(n, flush=True)
"""
_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5000)); c.sendall(bytes(int(sys.argv[2]))); c.close()
"""


@needs_root
def test_cluster_nodes_traffic_teardown():
    before = set(cl._namespaces())
    with cl.Cluster(2, 1, "100mbit") as c:
        names = set(c.namespaces) | {c.switch}
        assert names <= set(cl._namespaces())
        assert all(ns.startswith(f"mpicoll-{os.getpid()}-") for ns in names)
        for i in range(2):
            assert c.run(i, "hostname").stdout.strip() == f"node{i}"
            assert f"{c.addresses[1]} node1" in c.run(i, "cat", "/etc/hosts").stdout
        # the host's /etc/hosts is untouched by the nodes' private mounts
        with open("/etc/hosts") as f:
            assert "node1" not in f.read().split()
        # a process left running on a node is killed at teardown
        sleeper = subprocess.Popen(["ip", "netns", "exec", c.namespaces[1], "sleep", "300"])
        # 1 MB node1 -> node0 over TCP: node1's NIC sent it, node0's received it
        start = c.link_bytes()
        server = subprocess.Popen(
            c.command(0, sys.executable, "-c", _SERVER, "node0"),
            stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "up"
            out = c.run(1, sys.executable, "-c", _CLIENT, "node0", str(10**6))
            assert out.returncode == 0, out.stderr
            assert int(server.stdout.readline()) == 10**6
        finally:
            server.kill()
            server.wait(10)
        end = c.link_bytes()
        sent1 = end["sent"][1] - start["sent"][1]
        got0 = end["received"][0] - start["received"][0]
        assert 10**6 <= sent1 < 1.2 * 10**6
        assert 10**6 <= got0 < 1.2 * 10**6
        # node0 sent only acknowledgements back
        assert end["sent"][0] - start["sent"][0] < 0.2 * 10**6
    assert sleeper.wait(10) != 0
    assert set(cl._namespaces()) & names == set()
    assert set(cl._namespaces()) >= before - names


@needs_root
def test_agent_script():
    with cl.Cluster(2, 1) as c:
        ok = subprocess.run([c.agent, "-x", "node1", "hostname;", "echo", "$((1+2))"],
                            capture_output=True, text=True, timeout=30, check=False)
        assert ok.returncode == 0
        assert ok.stdout.split() == ["node1", "3"]
        bad = subprocess.run([c.agent, "-x", "elsewhere", "true"], capture_output=True,
                             text=True, timeout=30, check=False)
        assert bad.returncode == 255
        assert "no node named 'elsewhere'" in bad.stderr


@needs_root
def test_teardown_after_error():
    names: set[str] = set()

    def failing() -> None:
        with cl.Cluster(2, 1) as c:
            names.update(c.namespaces, [c.switch])
            raise KeyError("a failing test")

    with pytest.raises(KeyError):
        failing()
    assert names
    assert set(cl._namespaces()) & names == set()


@needs_root
def test_cleanup_stale_only_dead_runs():
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"mpicoll-{dead.pid}-abcdef-n0"
    live = f"mpicoll-{os.getpid()}-abcdef-n0"
    other = "mpicollx-1-abcdef-n0"  # not this module's pattern
    for ns in (stale, live, other):
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=20)
    try:
        assert cl.cleanup_stale() == [stale]
        assert {live, other} <= set(cl._namespaces())
        assert stale not in cl._namespaces()
    finally:
        for ns in (stale, live, other):
            subprocess.run(["ip", "netns", "delete", ns], check=False, timeout=20,
                           capture_output=True)


def test_main_skips_with_reason(monkeypatch, capsys):
    monkeypatch.setattr(cl, "unavailable", lambda: "needs root (a test)")
    assert cl.main(["--", "true"]) == cl.SKIP
    assert "skipped: needs root (a test)" in capsys.readouterr().err


def test_two_level_and_predict_bench():
    from mpicoll.engines.network import Network
    from mpicoll.model.alphabeta import Model
    from mpicoll.tools.simulate import simulate

    intra = Model(alpha=1e-6, beta=1e-10, gamma=2e-10, message_curve=((0, 1e-6), (1 << 20, 2e-4)))
    inter = Model(alpha=5e-5, beta=8e-9, message_curve=((0, 5e-5), (1 << 20, 9e-3)))
    m = cl.two_level(intra, inter, 2)
    assert m.intra is intra
    assert m.inter.message_curve == inter.message_curve
    assert (m.inter.alpha, m.inter.beta, m.inter.gamma) == (5e-5, 8e-9, 2e-10)
    assert m.inter.message(1 << 20) == 9e-3

    def rec(backend, alg, t_us):
        return {"backend": backend, "algorithm": alg, "auto_choice": None, "status": "ok",
                "collective": "allreduce", "size_bytes": 1 << 20, "persistent": False,
                "time_us": {"median": t_us}}

    doc = {"provenance": {"P": 4}, "results": [
        rec("native", None, 900.0), rec("p2p", "ring", 1000.0),
        {**rec("p2p", "ring", 5.0), "persistent": True},
        {**rec("p2p", "ring", 0.0), "status": "WRONG", "time_us": None}]}
    rows = cl.predict_bench(doc, m)
    assert [r["algorithm"] for r in rows] == ["native", "ring"]
    assert rows[0]["predicted_us"] is None
    want = simulate("allreduce", 4, (1 << 20) // 8, algorithm="ring", model=m,
                    network=Network("cluster:2", "block", 2))
    assert rows[1]["predicted_us"] == pytest.approx(want.time * 1e6)
    assert rows[1]["error"] == pytest.approx(1000.0 / rows[1]["predicted_us"] - 1)
    # ring allreduce on 2 nodes of 2: two of the four ring links cross, each 2 (P-1)/P n bytes
    assert rows[1]["inter_node_bytes"] == int(want.inter_bytes_sent.sum()) == 2 * 2 * 3 * (1 << 18)


def _predict_args(tmp_path, inter, collective, algorithm, median_us):
    """``predict``'s arguments over calibrations (intra: 1 us + 0.1 ns/B; ``inter``) and a
    bench document of one p2p result at P = 4, 64 KiB, written under ``tmp_path``."""
    from mpicoll.model.alphabeta import Model, save

    save(Model(alpha=1e-6, beta=1e-10), tmp_path / "intra.json")
    save(inter, tmp_path / "inter.json")
    doc = {"provenance": {"P": 4}, "results": [
        {"backend": "p2p", "algorithm": algorithm, "auto_choice": None,
         "status": "ok", "collective": collective, "size_bytes": 1 << 16,
         "persistent": False, "time_us": {"median": median_us}}]}
    (tmp_path / "bench.json").write_text(json.dumps(doc))
    return ["predict", "--intra", str(tmp_path / "intra.json"), "--inter",
            str(tmp_path / "inter.json"), "-k", "2", "--json", str(tmp_path / "rows.json"),
            str(tmp_path / "bench.json")]


def test_predict_command(tmp_path, capsys):
    from mpicoll.model.alphabeta import Model

    args = _predict_args(tmp_path, Model(alpha=5e-5, beta=8e-9), "allgather",
                         "recursive_doubling", 500.0)
    assert cl.main(args) == 0
    assert cl.main([*args, "--no-network"]) == 0
    out = capsys.readouterr().out
    assert out.count("recursive_doubling") == 2
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["algorithm"] for r in rows] == ["recursive_doubling"]
    # S = 64 KiB gathered: blocks of 16 KiB; the second round, 2 blocks each, crosses nodes
    assert rows[0]["inter_node_bytes"] == 4 * 2 * (1 << 14)
    assert rows[0]["predicted_us"] > 0
    # --rounds: the round cost measured beside the bench raises every round's overhead
    (tmp_path / "r.json").write_text(json.dumps({"P": 4, "round_s": 1e-3}))
    assert cl.main([*args, "--rounds", str(tmp_path / "r.json")]) == 0
    heavy = json.loads((tmp_path / "rows.json").read_text())
    assert heavy[0]["predicted_us"] > rows[0]["predicted_us"] + 1e3  # 2 rounds of >= 1 ms
    # two probes per bench (before, after): their mean, the same as one probe of the mean
    (tmp_path / "a.json").write_text(json.dumps({"P": 4, "round_s": 0.5e-3}))
    (tmp_path / "b.json").write_text(json.dumps({"P": 4, "round_s": 1.5e-3}))
    assert cl.main([*args, "--rounds", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "rows.json").read_text()) == heavy


def test_merge_runs_and_summary():
    def row(alg, size, measured, predicted=100.0, coll="allreduce", p=4):
        return {"P": p, "collective": coll, "algorithm": alg, "size_bytes": size,
                "measured_us": measured, "predicted_us": predicted,
                "error": measured / predicted - 1 if predicted else None,
                "inter_node_bytes": 1}

    rows = [row("ring", 1, 100.0), row("rd", 1, 300.0), row("native", 1, 50.0, None),
            row("ring", 1, 140.0), row("rd", 1, 90.0), row("ring", 1, 120.0),
            row("ring", 2, 130.0)]
    merged = cl.merge_runs(rows)
    assert [(r["algorithm"], r["size_bytes"], r["runs"]) for r in merged] == [
        ("ring", 1, 3), ("rd", 1, 2), ("native", 1, 1), ("ring", 2, 1)]
    assert merged[0]["measured_us"] == 120.0  # the median of 100, 140, 120
    assert merged[1]["measured_us"] == 195.0  # of an even count: the middle two's mean
    assert merged[0]["error"] == pytest.approx(0.2)
    assert merged[2]["error"] is None
    s = cl.summary(merged)
    assert s == [{"P": 4, "ranks_per_node": None, "size_bytes": 1, "collective": "allreduce",
                  "n": 2, "ok": 1, "median_abs_error": pytest.approx((0.2 + 0.95) / 2)},
                 {"P": 4, "ranks_per_node": None, "size_bytes": 2, "collective": "allreduce",
                  "n": 1, "ok": 0, "median_abs_error": pytest.approx(0.3)}]
    # two shapes of one P (2 x 3 and 3 x 2) are kept apart
    shaped = cl.merge_runs([{**row("ring", 1, 100.0), "ranks_per_node": 3},
                            {**row("ring", 1, 300.0), "ranks_per_node": 2}])
    assert [r["measured_us"] for r in shaped] == [100.0, 300.0]
    assert [(g["ranks_per_node"], g["ok"]) for g in cl.summary(shaped)] == [(3, 1), (2, 0)]


def test_plot_validation(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"P": 4, "collective": c, "algorithm": "x", "size_bytes": s, "measured_us": m,
             "predicted_us": p} for c, s, m, p in (("allreduce", 65536, 900.0, 1000.0),
                                                   ("bcast", 1 << 20, 5000.0, 4000.0),
                                                   ("allgather", 65536, 10.0, None))]
    cl.plot_validation(rows, str(tmp_path / "v.png"), "a test")
    assert (tmp_path / "v.png").read_bytes()[:4] == b"\x89PNG"


def test_nic_rate_floor():
    from mpicoll.engines.network import Network
    from mpicoll.model.alphabeta import Model
    from mpicoll.tools.simulate import simulate

    # a token-bucket NIC: small exchanges at burst speed, the largest at the rate (8e-8 s/B)
    inter = Model(alpha=5e-5, beta=1e-9, message_curve=(
        (0, 5e-5), (16384, 1e-4), (1 << 20, (1 << 20) * 8e-8), (1 << 21, (1 << 21) * 8e-8)))
    assert cl.sustained_beta(inter) == pytest.approx(8e-8)
    assert cl.sustained_beta(Model(alpha=1e-6, beta=1e-9)) == 0.0  # no curve: no floor
    intra = Model(alpha=1e-6, beta=1e-10, gamma=2e-10)
    m = cl.two_level(intra, inter, 2)
    doc = {"provenance": {"P": 4}, "results": [
        {"backend": "p2p", "algorithm": alg, "auto_choice": None, "status": "ok",
         "collective": "allreduce", "size_bytes": 1 << 16, "persistent": False,
         "time_us": {"median": 8000.0}} for alg in ("ring", "reduce_bcast")]}
    for network in (True, False):
        plain = cl.predict_bench(doc, m, network=network)
        floored = cl.predict_bench(doc, m, network=network, nic_beta=8e-8)
        for a, b in zip(plain, floored, strict=True):
            assert a["simulated_us"] == a["predicted_us"] == b["simulated_us"]
            assert a["nic_bytes"] == b["nic_bytes"]
            assert b["predicted_us"] == max(a["predicted_us"], b["nic_bytes"] * 8e-8 * 1e6)
            assert b["error"] == pytest.approx(8000.0 / b["predicted_us"] - 1)
        ring, rb = floored
        # ring on 2 nodes of 2: each node's NIC sends one 16 KiB block in each of 6 rounds
        assert ring["nic_bytes"] == 6 * (1 << 14)
        # its messages fit the burst: the floor sets the prediction
        assert ring["predicted_us"] == pytest.approx(6 * (1 << 14) * 8e-8 * 1e6)
        assert ring["simulated_us"] < ring["predicted_us"]
        # binomial reduce then bcast: 64 KiB up one NIC, then 64 KiB down the other
        assert rb["nic_bytes"] == 1 << 16
        want = simulate("allreduce", 4, (1 << 16) // 8, algorithm="reduce_bcast", model=m,
                        network=Network("cluster:2", "block", 2) if network else None)
        assert rb["simulated_us"] == pytest.approx(want.time * 1e6)


def test_loaded_model_pays_the_round_cost():
    from mpicoll.model.alphabeta import Model
    from mpicoll.tools.simulate import simulate

    intra = Model(alpha=1e-6, beta=1e-10, gamma=2e-10, o_msg=1e-6)
    inter = Model(alpha=5e-5, beta=8e-9)
    m = cl.two_level(intra, inter, 2)
    heavy = cl.loaded(m, 2e-3)
    o_msg = (2e-3 - inter.message(8)) / 2
    assert heavy.intra.o_msg == heavy.inter.o_msg == pytest.approx(o_msg)
    assert (heavy.intra.alpha, heavy.inter.beta) == (intra.alpha, inter.beta)  # nothing else
    assert cl.loaded(m, 1e-6).intra.o_msg == 1e-6  # a cheap round leaves o_msg as it is
    # ring allreduce at P = 4: 6 rounds, each posting a send and a receive
    t0, t1 = (simulate("allreduce", 4, 1024, algorithm="ring", model=x).time for x in (m, heavy))
    assert t1 - t0 == pytest.approx(6 * 2 * (o_msg - 1e-6), rel=1e-6)


def test_rounds_command(tmp_path, capsys):
    import json
    import math

    out = tmp_path / "rounds.json"
    assert cl.main(["rounds", "-o", str(out), "--reps", "3"]) == 0
    doc = json.loads(out.read_text())
    assert doc["P"] == 1
    assert math.isfinite(doc["round_s"])
    assert doc["round_s"] >= 0
    assert "round cost at P = 1" in capsys.readouterr().out


def test_parse_size():
    assert cl.parse_size(cl.BURST) == 256 * 1024
    assert cl.parse_size("1mb") == cl.parse_size("1m") == 1 << 20
    assert cl.parse_size("1500b") == cl.parse_size("1500") == 1500
    for bad in ("big", "1.5kb", "", "-1kb", "1kbit"):
        with pytest.raises(ValueError, match="tc size"):
            cl.parse_size(bad)


def test_nic_bucket_from_the_calibrations():
    from mpicoll.model.alphabeta import Model

    # an inter calibration as the emulated cluster gives it: 22 us + 1.2 ns/B while the
    # bucket holds tokens (up to 2 KiB), the rate (8e-8 s/B) from 4 KiB on
    line = [(n, 2.2e-5 + n * 1.2e-9) for n in (256, 512, 1024, 2048)]
    rate = [(n, 2.2e-5 + n * 8e-8) for n in (4096, 1 << 16, 1 << 20, 1 << 21)]
    inter = Model(alpha=1e-5, beta=2e-8, message_curve=((0, 1.2e-5), *line, *rate))
    alpha, beta = cl.line_speed(inter)
    assert alpha == pytest.approx(2.2e-5)
    assert beta == pytest.approx(1.2e-9)
    b = cl.nic_bucket(inter)
    assert b is not None
    assert (b.burst, b.beta) == (256 * 1024, pytest.approx(8e-8))
    assert (b.line_alpha, b.line_beta) == (pytest.approx(alpha), pytest.approx(beta))
    assert cl.nic_bucket(Model(alpha=1e-6, beta=1e-9)) is None  # no curve: no rate
    # every size at the rate: no line seen, the line is the smallest size's time
    flat = Model(alpha=1e-5, beta=8e-8, message_curve=((0, 1e-5), *rate))
    assert cl.line_speed(flat) == (1e-5, 0.0)


#: an inter calibration through a token bucket: the line up to 2 KiB, the rate from 4 KiB on
CURVE = ((256, 2.2e-5), (2048, 2.4e-5),
         *((n, 2e-5 + n * 8e-8) for n in (4096, 1 << 16, 1 << 20, 1 << 21)))


def test_predict_bench_with_the_token_bucket():
    from dataclasses import replace

    from mpicoll.model.alphabeta import Model

    inter = Model(alpha=2e-5, beta=8e-8, message_curve=CURVE)
    m = cl.two_level(Model(alpha=1e-6, beta=1e-10, gamma=2e-10), inter, 2)
    bucketed = replace(m, nic=cl.nic_bucket(inter))
    doc = {"provenance": {"P": 4}, "results": [
        {"backend": "p2p", "algorithm": alg, "auto_choice": None, "status": "ok",
         "collective": "allreduce", "size_bytes": 1 << 16, "persistent": False,
         "time_us": {"median": 6000.0}} for alg in ("ring", "reduce_bcast", "tree")]}
    plain = cl.predict_bench(doc, m, network=False)
    floored = cl.predict_bench(doc, m, network=False, nic_beta=8e-8)
    rows = cl.predict_bench(doc, bucketed, network=False)
    for a, f, b in zip(plain, floored, rows, strict=True):
        assert b["nic_bytes"] == a["nic_bytes"]
        assert b["inter_node_bytes"] == a["inter_node_bytes"]
        assert b["calls"] > 2
        assert a["calls"] is None
        # the steady state: no NIC faster than its rate, no slower than every message at it
        floor = b["nic_bytes"] * 8e-8 * 1e6
        assert floor * (1 - 1e-3) <= b["predicted_us"] <= a["predicted_us"] * (1 + 1e-9)
        assert b["predicted_us"] <= f["predicted_us"] * (1 + 1e-9)
    # reduce then bcast: 64 KiB up one NIC then down the other; sent one after the other at
    # the rate (plain), at the floor once each bucket refills while the other NIC works
    rb = rows[1]
    assert rb["predicted_us"] == pytest.approx((1 << 16) * 8e-8 * 1e6, rel=2e-2)
    assert plain[1]["predicted_us"] > 1.9 * rb["predicted_us"]
    with pytest.raises(ValueError, match="node port"):
        cl.predict_bench(doc, bucketed, network=True)


def test_predict_command_takes_the_bucket(tmp_path, capsys):
    from mpicoll.model.alphabeta import Model

    args = [*_predict_args(tmp_path, Model(alpha=2e-5, beta=8e-8, message_curve=CURVE),
                           "allreduce", "reduce_bcast", 5300.0), "--no-network"]
    assert cl.main(args) == 0
    out = capsys.readouterr().out
    assert "# NICs: token buckets of 262144 B, rate 80 ns/B" in out
    steady = json.loads((tmp_path / "rows.json").read_text())[0]
    assert steady["calls"] > 2
    assert abs(steady["error"]) < 0.05
    assert cl.main([*args, "--no-bucket"]) == 0
    assert "rate floor" in capsys.readouterr().out
    floor = json.loads((tmp_path / "rows.json").read_text())[0]
    assert floor["calls"] is None
    assert floor["error"] < -0.4  # the messages in sequence at the rate: twice too slow


def test_predict_command_reads_each_benchs_shape(tmp_path, capsys):
    import json

    from mpicoll.model.alphabeta import Model, save

    save(Model(alpha=1e-6, beta=1e-10), tmp_path / "intra.json")
    save(Model(alpha=2e-5, beta=8e-8, message_curve=CURVE), tmp_path / "inter.json")

    def bench(name, nodes, k):
        doc = {"provenance": {"P": nodes * k, "hosts": [{"name": f"node{i}", "ranks": k}
                                                        for i in range(nodes)]},
               "results": [{"backend": "p2p", "algorithm": "ring", "auto_choice": None,
                            "status": "ok", "collective": "allreduce", "size_bytes": 1 << 16,
                            "persistent": False, "time_us": {"median": 9000.0}}]}
        (tmp_path / name).write_text(json.dumps(doc))
        return str(tmp_path / name)

    args = ["predict", "--intra", str(tmp_path / "intra.json"), "--inter",
            str(tmp_path / "inter.json"), "--no-network", "--json", str(tmp_path / "rows.json")]
    assert cl.main([*args, bench("a.json", 2, 3), bench("b.json", 3, 2)]) == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [(r["P"], r["ranks_per_node"]) for r in rows] == [(6, 3), (6, 2)]
    assert "  2x3 " in out
    assert "  3x2 " in out
    uneven = json.loads((tmp_path / "a.json").read_text())
    uneven["provenance"]["hosts"][0]["ranks"] = 2
    (tmp_path / "c.json").write_text(json.dumps(uneven))
    with pytest.raises(SystemExit):
        cl.main([*args, str(tmp_path / "c.json")])
    assert "give -k" in capsys.readouterr().err
