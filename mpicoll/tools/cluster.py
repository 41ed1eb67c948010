"""An emulated cluster on one machine: N nodes as network namespaces, a rate-limited NIC each.

What it builds (root, or CAP_NET_ADMIN + CAP_SYS_ADMIN, and ``ip``, ``tc``, ``unshare``)::

    <prefix>-n0   eth0 10.250.0.1/24 --veth--+
    <prefix>-n1   eth0 10.250.0.2/24 --veth--+-- br0 in <prefix>-sw (a switch namespace)
    ...                                      |

Every node is a network namespace with its own loopback and one NIC, ``eth0``, a veth pair
whose other end is a port of a bridge in a separate "switch" namespace.  Each NIC is limited to
``rate`` in both directions by a token-bucket (``tbf``) qdisc: on ``eth0`` (what the node
sends) and on its switch port (what it receives), so a node's ranks share one NIC as on a real
cluster.  Nothing is created in the host's own namespace (the veth pairs are made directly
between the new namespaces), so the addresses (10.250.0.0/24, fixed: they exist only inside
this run's namespaces) can clash with nothing, no packet leaves the machine, and several runs
coexist.  Latency cannot be added: this kernel has no ``netem``; the emulated network's
latency is the kernel TCP stack's (tens of microseconds).

Processes run on node i as ``ip netns exec <prefix>-n<i> unshare --uts --mount``: their own
hostname (``node<i>``) and a private ``/etc/hosts`` bind-mounted over the host's (the mount
namespace is private, so the host's file is untouched) that names every node.  The MPI
launcher runs on node 0 and starts the other nodes' daemons through :attr:`Cluster.agent`, a
script in the place of ``ssh`` that hydra calls as ``AGENT -x HOST COMMAND`` and PRRTE as
``AGENT HOST COMMAND``.  :attr:`Cluster.mpiexec` is a script that runs the real ``mpiexec``
on node 0 with the library's settings (:func:`launch_args`); anything that reads ``$MPIEXEC``
(``tests/run_mpi.sh``, ``mpicoll calibrate``, ``sweep``, bench's native algorithms) then runs
its ranks on the cluster, block-placed, ``ranks_per_node`` per node:

* MPICH (hydra): ``-launcher ssh -launcher-exec AGENT -hosts node0,node1,... -ppn K`` and
  ``MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp``: without the last two the wheel's ranks still
  talk through shared memory across namespaces (it sees one machine), the qdisc counters stay
  at zero (``MPIR_CVAR_NOLOCAL`` and ``FI_SHM_DISABLE`` alone do not change that).
* Open MPI (PRRTE): ``--prtemca plm_ssh_agent AGENT --host node0:K,node1:K,...`` and
  ``--mca pml ob1 --mca btl tcp,self,sm --mca btl_tcp_if_include eth0`` (TCP between
  nodes, shared memory inside one; ``sm`` is 5.0's name of ``vader``).

:meth:`Cluster.link_bytes` reads the qdisc byte counters (``tc -s``): what crossed each NIC.

Teardown (:meth:`Cluster.close`: the context manager's exit, an ``atexit`` hook, and at the
next start :func:`cleanup_stale` for the namespaces of runs whose process is gone) kills the
processes left in the run's namespaces and deletes them, which removes their veths and bridge.
The names carry the creating process's id, ``mpicoll-<pid>-<tag>-n<i>``, so a cleanup touches
only this module's namespaces of dead runs.

Command line (the ``make cluster-test`` target)::

    python -m mpicoll.tools.cluster -N 2 -k 2 --rate 1gbit -- COMMAND...

runs COMMAND (on the host) with ``MPIEXEC`` pointing at the cluster's launcher, prints the bytes
each NIC sent and received, and tears the cluster down; exit status 77 (with the reason) where
the machine cannot host one.  Its ``MPICOLL_CLUSTER`` names the run (``tests/mpi/
test_cluster.py`` runs only where it is set).

Validation of the simulator (docs/cluster.md): :func:`two_level` makes the simulator's
two-level model from an intra-node and an inter-node calibration on the cluster,
:func:`predict_bench` sets a bench document measured there beside the simulator's prediction
(``python -m mpicoll.tools.cluster predict --intra A --inter B [-k K] BENCH.json...``) with
the NICs as the token buckets they are (:func:`nic_bucket`: a ``tbf`` NIC passes a burst at
the veth's speed, but not more than its rate over bench's back-to-back calls, simulated to
their steady state; or, ``--no-bucket``, :func:`sustained_beta`'s floor) and, measured beside
each bench
(``mpiexec -n P python -m mpicoll.tools.cluster rounds -o R.json``, :func:`round_cost`), the
host's cost of a round as loaded then (:func:`loaded`); :func:`merge_runs` and
:func:`summary` make the tables, :func:`plot_validation` the plot; :func:`tcp_bytes_sent`,
called in a rank, counts the TCP payload its node has sent.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from ..engines.network import Network, TokenBucket
from ..engines.sim import TwoLevel
from ..model.alphabeta import Model

__all__ = [
    "Cluster",
    "ClusterUnavailableError",
    "cleanup_stale",
    "launch_args",
    "loaded",
    "main",
    "merge_runs",
    "missing_capabilities",
    "line_speed",
    "nic_bucket",
    "parse_rate",
    "parse_size",
    "plot_validation",
    "predict_bench",
    "round_cost",
    "summary",
    "sustained_beta",
    "tcp_bytes_sent",
    "two_level",
    "unavailable",
]

#: Every namespace this module creates starts with this; then ``<pid>-<tag>-``.
PREFIX = "mpicoll-"
#: The nodes' subnet (it exists only inside a run's namespaces).
SUBNET = "10.250.0"
#: The ``tbf`` bucket of every NIC direction (tc's units: 256 KiB).  It must hold the largest
#: segment the kernel hands the qdisc (64 KiB with GSO); :func:`nic_bucket` models it.
BURST = "256kb"
#: Exit status of the command line where no cluster can be built (automake's "skipped").
SKIP = 77
_STALE = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]+-(?:n\d+|sw)$")
_TIMEOUT = 20.0  # seconds for one ip/tc command


class ClusterUnavailableError(RuntimeError):
    """This machine (or this process) cannot build the emulated cluster; the message says why."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT, check=check)


def parse_rate(rate: str) -> float:
    """Bits per second of a ``tc`` rate (``"1gbit"``, ``"100mbit"``, ``"500kbit"``,
    ``"10mbps"`` = bytes), as ``tc`` reads it (SI prefixes).

    Raises:
        ValueError: not a rate ``tc`` takes.
    """
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(bit|bps)\s*", rate.lower())
    if not m:
        raise ValueError(f"not a tc rate: {rate!r} (e.g. 1gbit, 100mbit)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return float(m.group(1)) * scale * (8 if m.group(3) == "bps" else 1)


def parse_size(size: str) -> int:
    """Bytes of a ``tc`` size (``"256kb"``, ``"1mb"``, ``"1500b"``, ``"64k"``, ``"2m"``), as
    ``tc`` reads it (binary prefixes: kb = 1024 bytes; tc(8), "PARAMETERS").

    Raises:
        ValueError: not a size ``tc`` takes.
    """
    m = re.fullmatch(r"\s*([0-9]+)\s*([kmg]?)b?\s*", size.lower())
    if not m:
        raise ValueError(f"not a tc size: {size!r} (e.g. 256kb, 1mb)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def unavailable() -> str | None:
    """Why this process cannot build a cluster (``None`` if it can): no Linux, no
    ``ip``/``tc``/``unshare``, no CAP_NET_ADMIN or CAP_SYS_ADMIN, or a namespace that cannot be
    made (it tries one, named as :func:`cleanup_stale` would clean it, and deletes it)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    missing = [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH (iproute2, util-linux)"
    try:
        lacking = missing_capabilities(Path("/proc/self/status").read_text())
    except (OSError, ValueError):
        return "cannot read this process's capabilities (/proc/self/status)"
    if lacking:
        return (f"needs root or {' and '.join(lacking)} (network namespaces, qdiscs, "
                "mounts): run as root, e.g. `sudo make cluster-test`")
    # capabilities are not all (a container may forbid namespaces or mounts): try both
    probe = f"{PREFIX}{os.getpid()}-000000-n0"
    try:
        made = _run("ip", "netns", "add", probe, check=False)
        if made.returncode:
            return f"cannot create a network namespace: {made.stderr.strip()}"
        uts = _run("ip", "netns", "exec", probe, "unshare", "--uts", "--mount", "true",
                   check=False)
        if uts.returncode:
            return f"cannot unshare the UTS and mount namespaces: {uts.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot try a network namespace: {exc}"
    finally:
        _run("ip", "netns", "delete", probe, check=False)
    return None


def missing_capabilities(status: str) -> list[str]:
    """The capabilities a cluster needs (CAP_NET_ADMIN, CAP_SYS_ADMIN) that the effective
    set ``CapEff`` of ``status`` (a ``/proc/<pid>/status`` text) lacks.

    Raises:
        ValueError: no ``CapEff`` line.
    """
    line = next((x for x in status.splitlines() if x.startswith("CapEff:")), None)
    if line is None:
        raise ValueError("no CapEff line")
    caps = int(line.split()[1], 16)
    return [name for name, bit in (("CAP_NET_ADMIN", 12), ("CAP_SYS_ADMIN", 21))
            if not caps >> bit & 1]


def launch_args(kind: str, hosts: Sequence[str], ranks_per_node: int, agent: str
                ) -> tuple[list[str], dict[str, str]]:
    """``(mpiexec flags, environment)`` that make library ``kind`` (``"mpich"`` or
    ``"openmpi"``) start its ranks on ``hosts`` through ``agent`` (in the place of ``ssh``),
    ``ranks_per_node`` per host in block order, and talk TCP between hosts (module docstring).

    Raises:
        ValueError: another library.
    """
    if kind == "mpich":
        return (["-launcher", "ssh", "-launcher-exec", agent, "-hosts", ",".join(hosts),
                 "-ppn", str(ranks_per_node)],
                {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"})
    if kind == "openmpi":
        return (["--prtemca", "plm_ssh_agent", agent,
                 "--host", ",".join(f"{h}:{ranks_per_node}" for h in hosts),
                 "--mca", "pml", "ob1", "--mca", "btl", "tcp,self,sm",
                 "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
                 "--bind-to", "none"],
                {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    raise ValueError(f"the emulated cluster knows MPICH and Open MPI, not {kind!r}")


def _library_of(mpiexec: str) -> str:
    """``"mpich"`` or ``"openmpi"``: whose ``mpiexec`` this is (its ``--version``)."""
    out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                         timeout=_TIMEOUT, check=False)
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    raise ClusterUnavailableError(f"{mpiexec}: neither MPICH's hydra nor Open MPI's mpiexec")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_and_delete(names: Sequence[str]) -> None:
    """Kill every process in the namespaces ``names`` (TERM, then KILL), then delete them."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = {int(p) for ns in names
                for p in _run("ip", "netns", "pids", ns, check=False).stdout.split()}
        pids.discard(os.getpid())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not pids:
            break
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
    for ns in names:
        _run("ip", "netns", "delete", ns, check=False)


def cleanup_stale() -> list[str]:
    """Delete the namespaces of earlier runs of this module whose process is gone
    (``mpicoll-<pid>-...`` with no process ``pid``); returns their names.  Nothing else is
    touched: not other runs' namespaces, not anything another program made."""
    stale = [ns for ns in _namespaces()
             if (m := _STALE.match(ns)) and not _alive(int(m.group(1)))]
    if stale:
        _kill_and_delete(stale)
    return stale


_AGENT = """#!/bin/sh
# mpicoll emulated cluster {name}: stands in for ssh.  hydra calls `AGENT -x HOST COMMAND`,
# PRRTE `AGENT HOST COMMAND`; COMMAND is a shell command line, run on node HOST.
while [ $# -gt 0 ]; do
    case $1 in
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host=$1; shift
case $host in
{cases}
    *) echo "mpicoll cluster {name}: no node named '$host'" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts --mount sh -c \\
    'mount --bind "$1" /etc/hosts && hostname "$2" && eval "$3"' sh {hosts} "$host" "$*"
"""

_MPIEXEC = """#!/bin/sh
# mpicoll emulated cluster {name}: `mpiexec ARGS` with ranks on its nodes (block placement).
exec env {env} ip netns exec {ns0} unshare --uts --mount sh -c \\
    'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \\
    sh {hosts} {host0} {mpiexec} {flags} "$@"
"""


class Cluster:
    """An emulated cluster of ``nodes`` namespaces, ``ranks_per_node`` ranks each, NICs of
    ``rate`` (a ``tc`` rate, e.g. ``"1gbit"``) in both directions (module docstring).

    Use as a context manager (or call :meth:`close`); it is also closed at interpreter exit.
    ``mpiexec`` is the real launcher (default: the one beside this interpreter, else on
    ``PATH``); its library decides the launch flags.  ``burst`` is the ``tbf`` bucket (tc's
    units; it must hold the largest segment the kernel hands the qdisc, 64 KiB with GSO): a
    message that finds the bucket full passes that much at the veth's own speed.

    Attributes:
        name: the run's prefix, ``mpicoll-<pid>-<tag>``; node i is ``<name>-n<i>``.
        hosts: the nodes' hostnames, ``node0``...
        addresses: their IPv4 addresses.
        kind: ``"mpich"`` or ``"openmpi"``.
        mpiexec: path of a script: ``mpiexec`` on this cluster (set ``$MPIEXEC`` to it).
        agent: path of the ``ssh`` stand-in script.

    Raises:
        ClusterUnavailableError: no privileges or tools (the reason of :func:`unavailable`), an
            unknown MPI library, or a command that failed while building (with its stderr).
        ValueError: ``nodes`` or ``ranks_per_node`` below 1, more than 250 nodes, a bad rate.
    """

    def __init__(self, nodes: int = 2, ranks_per_node: int = 2, rate: str = "1gbit", *,
                 mpiexec: str | None = None, burst: str = BURST) -> None:
        if nodes < 1 or ranks_per_node < 1 or nodes > 250:
            raise ValueError(f"need 1 <= nodes <= 250 and ranks_per_node >= 1, got {nodes}, "
                             f"{ranks_per_node}")
        self.rate_bps = parse_rate(rate)
        why = unavailable()
        if why:
            raise ClusterUnavailableError(why)
        exe = mpiexec or _default_mpiexec()
        self.kind = _library_of(exe)
        self.nodes, self.ranks_per_node, self.rate = nodes, ranks_per_node, rate
        self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.hosts = [f"node{i}" for i in range(nodes)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self.namespaces = [f"{self.name}-n{i}" for i in range(nodes)]
        self.switch = f"{self.name}-sw"
        self._closed = False
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        atexit.register(self.close)
        cleanup_stale()
        try:
            self._build(burst)
            self._write_scripts(exe)
        except BaseException:
            self.close()
            raise

    # ---- building ------------------------------------------------------------------------

    def _ip(self, *args: str) -> None:
        out = _run(*args, check=False)
        if out.returncode:
            raise ClusterUnavailableError(f"`{shlex.join(args)}` failed: {out.stderr.strip()}")

    def _build(self, burst: str) -> None:
        sw = self.switch
        self._ip("ip", "netns", "add", sw)
        self._ip("ip", "-n", sw, "link", "set", "lo", "up")
        self._ip("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        self._ip("ip", "-n", sw, "link", "set", "br0", "up")
        tbf = ["root", "tbf", "rate", self.rate, "burst", burst, "latency", "100ms"]
        for i, (ns, addr) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            self._ip("ip", "netns", "add", ns)
            self._ip("ip", "link", "add", "eth0", "netns", ns, "type", "veth",
                     "peer", "name", f"p{i}", "netns", sw)
            self._ip("ip", "-n", sw, "link", "set", f"p{i}", "master", "br0", "up")
            self._ip("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            self._ip("ip", "-n", ns, "link", "set", "lo", "up")
            self._ip("ip", "-n", ns, "link", "set", "eth0", "up")
            self._ip("tc", "-n", ns, "qdisc", "add", "dev", "eth0", *tbf)
            self._ip("tc", "-n", sw, "qdisc", "add", "dev", f"p{i}", *tbf)

    def _write_scripts(self, exe: str) -> None:
        hosts = self._dir / "hosts"
        hosts.write_text("127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{a} {h}\n" for a, h in zip(self.addresses, self.hosts, strict=True)))
        self.agent = str(self._dir / "agent")
        cases = "\n".join(f"    {h}) ns={ns} ;;" for h, ns in
                          zip(self.hosts, self.namespaces, strict=True))
        Path(self.agent).write_text(_AGENT.format(name=self.name, cases=cases,
                                                  hosts=shlex.quote(str(hosts))))
        flags, env = launch_args(self.kind, self.hosts, self.ranks_per_node, self.agent)
        self.env = env
        self.mpiexec = str(self._dir / "mpiexec")
        Path(self.mpiexec).write_text(_MPIEXEC.format(
            name=self.name, ns0=self.namespaces[0], hosts=shlex.quote(str(hosts)),
            host0=self.hosts[0], mpiexec=shlex.quote(exe), flags=shlex.join(flags),
            env=" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())))
        for script in (self.agent, self.mpiexec):
            os.chmod(script, 0o755)

    # ---- using ---------------------------------------------------------------------------

    def command(self, node: int, *argv: str) -> list[str]:
        """The argv that runs ``argv`` on node ``node``: in its namespace, with its hostname
        and its ``/etc/hosts``."""
        return ["ip", "netns", "exec", self.namespaces[node], "unshare", "--uts", "--mount",
                "sh", "-c", 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && '
                'exec "$@"', "sh", str(self._dir / "hosts"), self.hosts[node], *argv]

    def run(self, node: int, *argv: str, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on node ``node`` (:meth:`command`), output captured; raises
        ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
        return subprocess.run(self.command(node, *argv), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def link_bytes(self) -> dict[str, list[int]]:
        """Bytes through each node's NIC so far, from the ``tbf`` qdiscs' counters:
        ``{"sent": [node 0, node 1, ...], "received": [...]}`` (IP packets with their
        Ethernet headers; TCP's acknowledgements and the launcher's own traffic included)."""
        def sent(ns: str, dev: str) -> int:
            out = _run("tc", "-s", "-j", "-n", ns, "qdisc", "show", "dev", dev).stdout
            return sum(int(q.get("bytes", 0)) for q in json.loads(out) if q.get("root"))

        return {"sent": [sent(ns, "eth0") for ns in self.namespaces],
                "received": [sent(self.switch, f"p{i}") for i in range(self.nodes)]}

    # ---- teardown ------------------------------------------------------------------------

    def close(self) -> None:
        """Kill what still runs in the namespaces, delete them (their veths and bridge go with
        them) and the scripts; idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        mine = set(self.namespaces) | {self.switch}
        _kill_and_delete([ns for ns in _namespaces() if ns in mine])
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# ---- validation: the simulator against the emulated cluster --------------------------------


def two_level(intra: Model, inter: Model, ranks_per_node: int) -> TwoLevel:
    """The simulator's two-level model from two calibrations on the cluster: ``intra`` (ranks 0
    and 1 on one node) and ``inter`` (on two nodes).  Messages between nodes cost the inter
    calibration's exchange curve (and its alpha, beta); the rest (gamma, delta, o_call,
    o_msg: properties of a rank, not of a link) is the intra calibration's."""
    return TwoLevel(ranks_per_node, intra, replace(intra, alpha=inter.alpha, beta=inter.beta,
                                                   message_curve=inter.message_curve))


def sustained_beta(inter: Model) -> float:
    """Seconds per byte that a node's NIC carries in a long run: the slope of the inter-node
    calibration's exchange curve between its two largest sizes (0 with fewer than two
    points).  On the emulated cluster that is the ``tbf`` rate (with TCP/IP's headers): the
    qdisc passes a burst of ``burst`` bytes at the veth's own speed, then holds the rest to
    the rate, so a calibration's small exchanges (taken one at a time, the bucket refilled
    between them) never see the rate, and its largest (MiBs, past the burst) see little
    else."""
    c = inter.message_curve
    if len(c) < 2 or c[-1][0] <= c[-2][0]:
        return 0.0
    return max(0.0, (c[-1][1] - c[-2][1]) / (c[-1][0] - c[-2][0]))


def line_speed(inter: Model) -> tuple[float, float]:
    """``(alpha, beta)`` (seconds, seconds per byte) of a NIC's line, its own speed while its
    token bucket holds tokens, from the inter-node calibration's exchange curve: its sizes up
    to the largest whose time is below half what the rate (:func:`sustained_beta`) allows
    their bytes (the bucket, not the rate, carried them: calibrate goes from small to large,
    so its first exchanges find the bucket full), from an eighth of that size on, fitted by
    least squares; beta kept within 0 .. the rate's, alpha >= 0.  ``(0, 0)`` without a rate,
    and the smallest size's time and 0 where fewer than two sizes are below it.  The
    emulated cluster's MPICH calibration of 2026-12-02 (100 Mbit/s): sizes 256 B to 2 KiB,
    22.6 us + 1.2 ns/B, against 83.7 ns/B at the rate."""
    rate = sustained_beta(inter)
    c = inter.message_curve
    if not rate or not c:
        return 0.0, 0.0
    fast = [n for n, t in c if n > 0 and t < n * rate / 2]
    if not fast:
        return max(0.0, c[0][1]), 0.0
    knee = max(fast)
    pts = [(n, t) for n, t in c if knee / 8 <= n <= knee]
    if len(pts) < 2:
        return max(0.0, min(t for _, t in c)), 0.0
    mx = sum(n for n, _ in pts) / len(pts)
    my = sum(t for _, t in pts) / len(pts)
    sxx = sum((n - mx) ** 2 for n, _ in pts)
    beta = min(rate, max(0.0, sum((n - mx) * (t - my) for n, t in pts) / sxx))
    return max(0.0, my - beta * mx), beta


def nic_bucket(inter: Model, burst: str = BURST) -> TokenBucket | None:
    """The emulated cluster's NIC direction as the simulator models it (a ``tbf`` qdisc:
    :class:`~mpicoll.engines.network.TokenBucket`): ``burst`` (the one the cluster sets,
    :data:`BURST`, taken as payload bytes: the headers it also holds, about 5 % at 1500-byte
    frames, are not taken off), the rate from the inter calibration's sustained slope
    (:func:`sustained_beta`: the tbf rate with TCP/IP's headers) and the line from its
    smallest exchanges (:func:`line_speed`); None where the calibration has no rate."""
    rate = sustained_beta(inter)
    if not rate:
        return None
    alpha, beta = line_speed(inter)
    return TokenBucket(parse_size(burst), rate, beta, alpha)


def predict_bench(doc: dict[str, Any], model: TwoLevel, network: bool = True,
                  nic_beta: float = 0.0) -> list[dict[str, Any]]:
    """Measured against predicted for every blocking p2p result of a bench JSON document
    ``doc`` run on the cluster: each algorithm simulated at the bench's P and count, with
    ``network`` on ``cluster:K`` (K = ``model.ranks_per_node``, block placement, the NICs'
    contention), else with the two-level model's own node port (one inter-node send and one
    receive at a time per node).

    ``nic_beta`` (seconds per byte, :func:`sustained_beta`; 0: none) adds the NICs' rate
    floor: bench repeats a call back to back, so in its steady state no NIC can carry more
    than its rate over a call, whatever burst it passed within one; the prediction is the
    larger of the simulated time and ``nic_bytes * nic_beta``, ``nic_bytes`` the bytes of the
    busiest NIC direction of one call (the most loaded link of ``cluster:K``).  Without it,
    a call whose messages fit the burst is predicted at the veth's speed (the ring's 16 KiB
    messages at 64 KiB: 0.6 ms predicted, 8 ms measured at 100 Mbit/s).

    A ``model`` whose NICs are token buckets (``model.nic``: :func:`nic_bucket`; node port
    only, ``network`` False) models that floor as the mechanism it is: each algorithm is
    simulated call after call to its steady state (:func:`mpicoll.tools.simulate.simulate`'s
    ``steady``), where a NIC direction passes what its bucket holds at the line's speed and
    no more than its rate over a call; give it no ``nic_beta`` then.

    Returns rows ``collective, algorithm, size_bytes, P, measured_us`` (bench's median),
    ``predicted_us``, ``error`` (measured / predicted - 1), ``inter_node_bytes`` (the
    simulator's bytes between nodes per call, all ranks), ``simulated_us`` (the simulator's
    time alone) and ``nic_bytes``; native results as rows with ``predicted_us`` None.
    """
    from .simulate import predict_rows

    k = model.ranks_per_node
    p = int(doc["provenance"]["P"])
    nics = Network(f"cluster:{k}", "block", k)
    net = nics if network else None
    steady = model.nic is not None
    if steady and network:
        raise ValueError("predict_bench: a token-bucket NIC is the node port's (network=False)")
    counter = replace(model, nic=None)  # counts the NICs' bytes on cluster:K
    rows: list[dict[str, Any]] = []
    for r in doc["results"]:
        if r.get("status") != "ok" or not r.get("time_us") or r.get("persistent"):
            continue
        row = {"collective": r["collective"], "size_bytes": r["size_bytes"], "P": p,
               "ranks_per_node": k,
               "measured_us": r["time_us"]["median"], "predicted_us": None, "error": None,
               "inter_node_bytes": None, "simulated_us": None, "nic_bytes": None,
               "calls": None}
        if r["backend"] == "native":
            rows.append({**row, "algorithm": "native"})
            continue
        if r["backend"] != "p2p":
            continue
        alg = r["auto_choice"] or r["algorithm"]
        sim = predict_rows(r["collective"], p, [r["size_bytes"]], model, [alg],
                           network=net, steady=steady)[0]
        if sim["status"] == "ok":
            on_nics = sim if network else predict_rows(
                r["collective"], p, [r["size_bytes"]], counter, [alg], network=nics)[0]
            nic_bytes = int(on_nics["busiest_link_bytes"] or 0)
            t = max(sim["time_us"], nic_bytes * nic_beta * 1e6)
            row.update(predicted_us=t, inter_node_bytes=sim["inter_node_bytes"],
                       simulated_us=sim["time_us"], nic_bytes=nic_bytes,
                       error=row["measured_us"] / t - 1, calls=sim["calls"])
        rows.append({**row, "algorithm": alg})
    return rows


def round_cost(comm: Any, ks: Sequence[int] = (1, 2, 4, 8), reps: int = 15) -> float:
    """Seconds per round of a schedule on this host as it is loaded now, measured on ``comm``
    (collective; the same value on every rank): every rank sends 8 bytes to rank + 1 and
    receives 8 from rank - 1, k rounds back to back per call, each call timed as bench times
    one (a barrier, the max over the ranks), the median over ``reps`` calls per k in ``ks``
    (interleaved), and the least-squares slope against k.  Where the ranks outnumber the
    cores (the emulated cluster's nodes share the host's), a round waits for its ranks to be
    scheduled: milliseconds, set by the load of the moment, which a calibration of two ranks
    taken at another time does not see."""
    import numpy as np
    from mpi4py import MPI

    rank, p = comm.Get_rank(), comm.Get_size()
    sbuf, rbuf = np.zeros(1), np.zeros(1)
    times: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(reps):
        for k in ks:
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                MPI.Request.Waitall([comm.Irecv(rbuf, (rank - 1) % p, 5),
                                     comm.Isend(sbuf, (rank + 1) % p, 5)])
            times[k].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    med = [float(np.median(times[k])) for k in ks]
    return max(0.0, float(np.polyfit(np.array(ks, float), np.array(med), 1)[0]))


def loaded(model: TwoLevel, round_s: float) -> TwoLevel:
    """``model`` with its per-message overhead ``o_msg`` (a property of the ranks: the
    intra-node model's) raised so that a round of one 8-byte send and receive between nodes
    costs ``round_s`` (:func:`round_cost`): ``max(o_msg, (round_s - inter.message(8)) / 2)``,
    a round posting a send and a receive.  Every round of a schedule then pays what a round
    paid on the host when ``round_s`` was measured."""
    o_msg = max(model.intra.o_msg, (round_s - float(model.inter.message(8))) / 2)
    return replace(model, intra=replace(model.intra, o_msg=o_msg),
                   inter=replace(model.inter, o_msg=o_msg))


def merge_runs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of :func:`predict_bench` from repeated bench runs merged: one row per
    ``(P, ranks_per_node, collective, algorithm, size_bytes)``, in first-seen order, whose
    ``measured_us`` is the median over the runs of bench's medians (the median of an even
    count: the mean of the middle two), ``runs`` their number and ``error`` recomputed; the
    prediction is the first row's (the same in every run)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["P"], r.get("ranks_per_node"), r["collective"], r["algorithm"],
                           r["size_bytes"]), []).append(r)
    out = []
    for rs in groups.values():
        ms = sorted(r["measured_us"] for r in rs)
        h = len(ms) // 2
        med = ms[h] if len(ms) % 2 else (ms[h - 1] + ms[h]) / 2
        pred = rs[0]["predicted_us"]
        out.append({**rs[0], "measured_us": med, "runs": len(ms),
                    "error": med / pred - 1 if pred else None})
    return out


def summary(rows: Sequence[dict[str, Any]], within: float = 0.25) -> list[dict[str, Any]]:
    """Per ``(P, ranks_per_node, size_bytes, collective)`` of predicted ``rows``: ``n``
    algorithms, ``ok`` how many are predicted within ``within`` (relative error of the
    measured time against the predicted), ``median_abs_error``; in order of P, ranks per node
    (None last), size, collective as first seen."""
    groups: dict[tuple[int, int | None, int, str], list[float]] = {}
    for r in rows:
        if r.get("error") is not None:
            groups.setdefault((r["P"], r.get("ranks_per_node"), r["size_bytes"],
                               r["collective"]), []).append(abs(r["error"]))
    out = []
    for (p, k, size, coll), errs in sorted(
            groups.items(), key=lambda kv: (kv[0][0], -(kv[0][1] or 0), kv[0][2])):
        errs.sort()
        h = len(errs) // 2
        med = errs[h] if len(errs) % 2 else (errs[h - 1] + errs[h]) / 2
        out.append({"P": p, "ranks_per_node": k, "size_bytes": size, "collective": coll,
                    "n": len(errs),
                    "ok": sum(e <= within for e in errs), "median_abs_error": med})
    return out


def plot_validation(rows: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """Measured against predicted (ms, log-log), a marker per collective, a colour per size,
    the diagonal and its 25 % band, to ``path`` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in rows if r.get("predicted_us")]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))

    def kib(r: dict[str, Any]) -> int:  # the size's nearest power of two, KiB (allgather's
        return 1 << round(math.log2(max(1, r["size_bytes"]) / 1024))  # S: whole blocks of P

    sizes = sorted({kib(r) for r in pts})
    colours = plt.get_cmap("viridis")
    marks = {"allreduce": "o", "bcast": "s", "allgather": "^"}
    for i, size in enumerate(sizes):
        for coll, mk in marks.items():
            sel = [r for r in pts if kib(r) == size and r["collective"] == coll]
            if sel:
                ax.scatter([r["predicted_us"] / 1e3 for r in sel],
                           [r["measured_us"] / 1e3 for r in sel], marker=mk, s=22,
                           color=colours(i / max(1, len(sizes) - 1)), alpha=0.8,
                           label=f"{coll} {size} KiB")
    if pts:
        lo = min(min(r["predicted_us"], r["measured_us"]) for r in pts) / 1e3 / 1.5
        hi = max(max(r["predicted_us"], r["measured_us"]) for r in pts) / 1e3 * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=1)
        ax.fill_between([lo, hi], [0.75 * lo, 0.75 * hi], [1.25 * lo, 1.25 * hi],
                        color="grey", alpha=0.2, label="within 25 %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted (ms)")
    ax.set_ylabel("measured, bench's median (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tcp_bytes_sent() -> int:
    """TCP payload bytes this network namespace's sockets have sent, retransmissions left out
    (``ss -tin``: ``bytes_sent - bytes_retrans``, summed over the sockets open now): on a node
    of the cluster, what its ranks have sent to other nodes (loopback sockets carry no MPI
    data: shared memory does)."""
    out = subprocess.run(["ss", "-tinH"], capture_output=True, text=True, timeout=_TIMEOUT,
                         check=True).stdout
    sent = sum(int(m) for m in re.findall(r"\bbytes_sent:(\d+)", out))
    return sent - sum(int(m) for m in re.findall(r"\bbytes_retrans:(\d+)", out))


def _default_mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        raise ClusterUnavailableError("no mpiexec beside this Python or on PATH (--mpiexec)")
    return exe


def predict_main(argv: Sequence[str]) -> int:
    """``python -m mpicoll.tools.cluster predict --intra A.json --inter B.json [-k K]
    BENCH.json...``: the table of :func:`predict_bench` (``--json`` writes its rows); the
    benches may be of several shapes (N nodes x K ranks: each document's hosts say, or
    ``-k``), each predicted and summed up on its own."""
    from ..model import alphabeta

    ap = argparse.ArgumentParser(prog="python -m mpicoll.tools.cluster predict",
                                 description="Measured (bench on the emulated cluster) against "
                                 "the simulator's prediction from two calibrations.")
    ap.add_argument("--intra", required=True, help="calibrate's model, ranks 0, 1 on one node")
    ap.add_argument("--inter", required=True, help="calibrate's model, ranks 0, 1 on two nodes")
    ap.add_argument("-k", "--ranks-per-node", type=int, help="ranks per node (default: "
                    "each bench document's, from its hosts)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--no-network", action="store_true", help="the two-level model's node "
                    "port instead of the cluster:K network's link contention")
    ap.add_argument("--no-nic-floor", action="store_true", help="leave out the NICs' rate "
                    "floor (predict_bench's nic_beta: the inter calibration's sustained beta)")
    ap.add_argument("--no-bucket", action="store_true", help="with --no-network: the NIC "
                    "floor instead of the NICs' token buckets (nic_bucket(): the cluster's "
                    "burst, the inter calibration's rate and line) simulated call after call "
                    "to bench's steady state")
    ap.add_argument("--rounds", nargs="+", metavar="JSON", default=(),
                    help="round costs measured beside the benches (`rounds -o FILE`): one per "
                    "bench document, in order, or two (before, after: their mean), else their "
                    "median for all (see loaded())")
    ap.add_argument("--plot", metavar="PNG", help="measured against predicted, to this file")
    ap.add_argument("bench", nargs="+", help="bench --json documents from the cluster (repeated "
                    "runs of one case: their medians' median)")
    args = ap.parse_args(argv)
    intra, inter = alphabeta.load(args.intra), alphabeta.load(args.inter)
    if intra is None or inter is None:
        ap.error("no model in --intra or --inter")
    bucket = None if args.no_bucket or not args.no_network else nic_bucket(inter)
    docs = [json.loads(Path(path).read_text()) for path in args.bench]
    models = []
    for path, doc in zip(args.bench, docs, strict=True):
        k = args.ranks_per_node or _ranks_per_node(doc)
        if k is None:
            ap.error(f"{path}: its hosts do not all run the same ranks: give -k")
        models.append(replace(two_level(intra, inter, k), nic=bucket))
    nic_beta = 0.0 if args.no_nic_floor or bucket is not None else sustained_beta(inter)
    costs = [float(json.loads(Path(f).read_text())["round_s"]) for f in args.rounds]
    n = len(args.bench)
    if len(costs) == 2 * n:  # a probe before and one after each bench: their mean
        costs = [(costs[2 * i] + costs[2 * i + 1]) / 2 for i in range(n)]
    elif costs and len(costs) != n:
        costs = [sorted(costs)[len(costs) // 2]] * n
    rows = merge_runs([row for i, (doc, model) in enumerate(zip(docs, models, strict=True))
                       for row in predict_bench(doc, loaded(model, costs[i]) if costs else model,
                                                network=not args.no_network,
                                                nic_beta=nic_beta)])
    if bucket is not None:
        print(f"# NICs: token buckets of {bucket.burst:.0f} B, rate {bucket.beta * 1e9:.4g} ns/B,"
              f" line {bucket.line_alpha * 1e6:.3g} us + {bucket.line_beta * 1e9:.3g} ns/B; "
              "predicted: the steady state of calls back to back (calls: how many it took)")
    else:
        print(f"# NICs' rate floor: {nic_beta * 1e9:.4g} ns/B (predicted = max(simulated, "
              "busiest NIC direction's bytes x that))" if nic_beta else "# no NIC rate floor")
    print(f"{'collective':10s} {'algorithm':28s} {'NxK':>5s} {'size (B)':>9s} "
          f"{'measured':>10s} {'predicted':>10s} {'error':>7s} {'inter B':>10s} "
          f"{'simulated':>10s} {'NIC B':>9s} {'calls':>5s}")
    for r in rows:
        pred = r["predicted_us"]
        tail = (f"{pred / 1e3:8.2f}ms {100 * r['error']:+6.0f}% {r['inter_node_bytes']:10d} "
                f"{r['simulated_us'] / 1e3:8.2f}ms {r['nic_bytes']:9d} {r['calls'] or 1:5d}"
                if pred else "")
        print(f"{r['collective']:10s} {r['algorithm']:28s} {_shape(r):>5s} "
              f"{r['size_bytes']:9d} {r['measured_us'] / 1e3:8.2f}ms {tail}")
    print(f"\n{'NxK':>5s} {'size (B)':>9s} {'collective':10s} {'within 25 %':>11s} "
          f"{'median |error|':>14s}   (runs per case: {max(r['runs'] for r in rows)})")
    for g in summary(rows):
        print(f"{_shape(g):>5s} {g['size_bytes']:9d} {g['collective']:10s} "
              f"{g['ok']:>5d}/{g['n']:<5d} {100 * g['median_abs_error']:13.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=0) + "\n")
    if args.plot:
        shapes = ", ".join(dict.fromkeys(_shape(r).replace("x", " x ") for r in rows))
        plot_validation(rows, args.plot, f"emulated cluster, {shapes} (nodes x ranks per node)"
                        ": measured against predicted")
    return 0


def _ranks_per_node(doc: dict[str, Any]) -> int | None:
    """Ranks per node of a bench document (its provenance's hosts), None where they differ
    or are not given."""
    ranks = {int(h["ranks"]) for h in doc.get("provenance", {}).get("hosts") or ()}
    return ranks.pop() if len(ranks) == 1 else None


def _shape(r: dict[str, Any]) -> str:
    """``NxK`` (nodes x ranks per node) of a row of :func:`predict_bench` or :func:`summary`."""
    k = r.get("ranks_per_node")
    return f"{r['P'] // k}x{k}" if k else str(r["P"])


def rounds_main(argv: Sequence[str]) -> int:
    """``mpiexec -n P python -m mpicoll.tools.cluster rounds -o FILE``: :func:`round_cost` on
    all the ranks, saved by rank 0 as ``{"P", "round_s", "date"}`` (for ``predict
    --rounds``)."""
    from mpi4py import MPI

    ap = argparse.ArgumentParser(prog="python -m mpicoll.tools.cluster rounds",
                                 description="Seconds per round of a schedule on this host "
                                 "now (run it beside the bench it is for).")
    ap.add_argument("-o", "--output", required=True, metavar="JSON")
    ap.add_argument("--reps", type=int, default=15, help="calls per round count (15)")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    r = round_cost(comm, reps=args.reps)
    if comm.Get_rank() == 0:
        doc = {"P": comm.Get_size(), "round_s": r,
               "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        Path(args.output).write_text(json.dumps(doc) + "\n")
        print(f"round cost at P = {comm.Get_size()}: {r * 1e6:.1f} us")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mpicoll.tools.cluster [-N N] [-k K] [--rate R] -- COMMAND...``: COMMAND's
    exit status; :data:`SKIP` (77) where no cluster can be built here."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["predict"]:
        return predict_main(argv[1:])
    if argv[:1] == ["rounds"]:
        return rounds_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m mpicoll.tools.cluster",
                                 description="Run COMMAND with $MPIEXEC starting its ranks on "
                                 "an emulated cluster of network namespaces.")
    ap.add_argument("-N", "--nodes", type=int, default=2, help="nodes (default 2)")
    ap.add_argument("-k", "--ranks-per-node", type=int, default=2,
                    help="ranks per node, block placement (default 2)")
    ap.add_argument("--rate", default="1gbit", help="each NIC's rate, each way, as tc writes "
                    "it (default 1gbit)")
    ap.add_argument("--mpiexec", help="the real mpiexec (default: beside this Python)")
    ap.add_argument("--bytes-json", help="write the NICs' byte counters here after COMMAND")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give a COMMAND after --")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        cluster = Cluster(args.nodes, args.ranks_per_node, args.rate, mpiexec=args.mpiexec)
    except ClusterUnavailableError as exc:
        print(f"mpicoll cluster: skipped: {exc}", file=sys.stderr)
        return SKIP
    with cluster:
        print(f"mpicoll cluster {cluster.name}: {args.nodes} nodes x {args.ranks_per_node} "
              f"ranks, NICs {args.rate} each way, {cluster.kind}; MPIEXEC={cluster.mpiexec}",
              flush=True)
        env = dict(os.environ, MPIEXEC=cluster.mpiexec, MPICOLL_CLUSTER=cluster.name)
        rc = subprocess.run(command, env=env, check=False).returncode
        counts = cluster.link_bytes()
        for i, host in enumerate(cluster.hosts):
            print(f"mpicoll cluster: {host} sent {counts['sent'][i]} B, received "
                  f"{counts['received'][i]} B")
        if args.bytes_json:
            Path(args.bytes_json).write_text(json.dumps(counts) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
