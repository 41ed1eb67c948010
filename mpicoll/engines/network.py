"""Network models of the simulator: topologies, rank placement, link contention, LogGP's gap.

A :class:`Network` is what both simulator engines (:mod:`mpicoll.engines.sim`) consult on top
of the alpha-beta(-gamma) model when one is given; without one the simulator is the flat (or
two-level) model, unchanged.  The algorithms never see it.

**Topologies** (``parse_topology``): every topology has N endpoints ("nodes"), each with one
NIC: an injection link (node -> network) and an ejection link (network -> node), of width 1
(the model's bandwidth 1/beta).  Between them:

* ``torus:AxB[xC...]``: a 1-, 2- or 3-D (any) torus of routers, one node per router, links
  of width 1 in both directions of every dimension; dimension-order routing, the shorter way
  round each dimension (the + way on a tie), as on Blue Gene and Cray's Gemini.
* ``fattree:H[:R]``: a two-level fat tree (leaf-spine): leaf switches of H nodes each, as many
  as the ranks need, under a non-blocking spine; each leaf's up and down links to the spine
  together have width H / R (R: the oversubscription ratio, default 1, full bisection).
  Messages within a leaf do not climb.
* ``dragonfly:G:A:H[:W]``: Kim, Dally, Scott and Abts's dragonfly (ISCA 2008): G groups of
  A routers, H nodes per router; the routers of a group all-to-all by local links (width 1),
  each pair of groups by one global link (width W, default 1) that leaves group g for group
  h at router ``(h - g - 1) mod G mod A``; minimal routing (local, global, local).
* ``cluster:K``: K ranks per node (block placement), one NIC per node, a non-blocking
  crossbar between the NICs: the two-level model with its NICs as links.

A file name in the place of a spec reads the spec from the file's first line that is not a
comment (``#``).

**Placement** (``placement``): ``block`` (ranks ``r // k`` share node ``r // k``, k ranks per
node), ``round-robin`` (rank r on node ``r mod N``) or a file with one node id per rank.

**Contention** (LogGOPSim's congestion model, Hoefler, Schneider and Lumsdaine, HPDC 2010):
a message of round i (the i-th round its sender posts) shares each link of its route with the
other messages of round i on that link; its bandwidth is set by the most loaded link of its
route, ``beta * max over its links (load / width)``.  The load of a link in a round is the
number of messages that cross it *at once*: as a rank sends one message at a time and
receives one at a time (its port serialises them already), ``min(distinct senders, distinct
receivers)`` of that round's messages on the link.  So two messages between four different
ranks over one link take twice as long; a rank's own sends of a round are not charged twice;
a node's k ranks sending off-node at once share its injection link (its NIC) k ways.
Chosen over SimGrid's max-min fair sharing because its cost is one pass over each round's
routes (vectorised per round; P = 4096 log-depth and ring runs stay within seconds), its
answer does not depend on the order in which the engines match messages (both engines give the
same result bit for bit), and on the bulk-synchronous rounds of collectives it gives what
max-min gives when the flows of a round are equal (they mostly are); max-min would need an
event-driven re-solve at each flow's start and end.  Its limits: a message's load is its
round's, not the time it actually overlaps others (a slow round does not slow the next), and a
lightly loaded link gives no bandwidth back to a message bottlenecked elsewhere.

**Gap** (LogGP's g, Alexandrov et al., SPAA 1995): with ``gap`` set, a rank's port is busy
``max(g, n beta f)`` per message (f: the contention factor) instead of the message's whole
time, so a rank's k - 1 sends of one round pipeline behind one another at the NIC's rate while
their latencies overlap (the last ends at ``(k - 2) max(g, n beta) + alpha + n beta``), and a
node's NIC starts its ranks' off-node messages at least g apart.  ``gap=None`` (the default)
keeps the single-port model: a port busy for the whole message.

**Hop latency**: ``hop`` seconds per link a message crosses (default 0), so a route's length
matters even without contention.

**Token-bucket NICs** (:class:`TokenBucket`, Linux's ``tbf`` qdisc, the emulated cluster's
NICs: :mod:`mpicoll.tools.cluster`): each direction of a node's NIC holds a bucket of
``burst`` bytes of tokens that fills at the rate R = 1 / ``beta`` bytes per second.  A message
takes the line's time for the bytes that find tokens and the rate's for the rest, so a burst
passes at the link's own speed and a long stream at the rate.  It is a term of the two-level
model's node port (:class:`~mpicoll.engines.sim.TwoLevel`'s ``nic``), run by the per-rank
engine; see :meth:`TokenBucket.time` for the formula.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Cluster", "Dragonfly", "FatTree", "Fabric", "Network", "TokenBucket", "Topology", "Torus",
    "parse_topology", "placement",
]

PLACEMENTS = ("block", "round-robin")


class Topology:
    """A network of ``nodes`` endpoints and ``n_links`` directed links, ``width`` (bandwidth
    in units of 1/beta, per link) and minimal routes.  Links 0..N-1 are the nodes' injection
    links, N..2N-1 their ejection links; the subclasses add theirs from 2N."""

    spec: str
    nodes: int
    n_links: int
    width: np.ndarray

    def _init_links(self, extra: int, extra_width: float | np.ndarray = 1.0) -> None:
        n = self.nodes
        self.n_links = 2 * n + extra
        self.width = np.ones(self.n_links)
        self.width[2 * n:] = extra_width

    def routes(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Links of the route from node ``a[i]`` to node ``b[i]`` (``a != b``), as an int64
        array (len(a), H) padded with -1; injection first, ejection last."""
        inner = self._inner(np.asarray(a, np.int64), np.asarray(b, np.int64))
        m = len(a)
        return np.concatenate([np.asarray(a, np.int64).reshape(m, 1), inner,
                               (np.asarray(b, np.int64) + self.nodes).reshape(m, 1)], axis=1)

    def _inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def route(self, a: int, b: int) -> list[int]:
        """The links from node a to node b (empty where a == b)."""
        if a == b:
            return []
        r = self.routes(np.array([a]), np.array([b]))[0]
        return [int(x) for x in r if x >= 0]

    def link_name(self, link: int) -> str:
        n = self.nodes
        if link < n:
            return f"node{link}->net"
        if link < 2 * n:
            return f"net->node{link - n}"
        return self._link_name(link - 2 * n)

    def _link_name(self, i: int) -> str:
        return f"link{i}"


class Torus(Topology):
    """``torus:AxBxC``: one node per router, dimension-order routing (module docstring)."""

    def __init__(self, dims: Sequence[int]) -> None:
        if not dims or any(d < 1 for d in dims):
            raise ValueError(f"torus: dimensions must be >= 1, got {dims}")
        self.dims = tuple(int(d) for d in dims)
        self.spec = "torus:" + "x".join(map(str, self.dims))
        self.nodes = math.prod(self.dims)
        self._init_links(2 * len(self.dims) * self.nodes)
        self.strides = np.cumprod((1, *self.dims[:-1])).astype(np.int64)

    def coords(self, u: Any) -> list[Any]:
        """Coordinates of node(s) u, x fastest."""
        return [(u // s) % d for s, d in zip(self.strides, self.dims, strict=True)]

    def hops(self, a: int, b: int) -> int:
        """Router-to-router links on the route from a to b."""
        return sum(min((y - x) % d, (x - y) % d) for x, y, d in zip(
            self.coords(np.int64(a)), self.coords(np.int64(b)), self.dims, strict=True))

    def _inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nd, n = len(self.dims), self.nodes
        cols: list[np.ndarray] = []
        cur = a.copy()
        ca, cb = self.coords(a), self.coords(b)
        for k, (d, s) in enumerate(zip(self.dims, self.strides, strict=True)):
            delta = (cb[k] - ca[k]) % d
            plus = 2 * delta <= d  # the + way on a tie
            steps = np.where(plus, delta, d - delta)
            x = ca[k].copy()
            for j in range(d // 2):
                active = steps > j
                link = 2 * n + (cur * nd + k) * 2 + np.where(plus, 0, 1)
                cols.append(np.where(active, link, -1))
                nx = np.where(plus, (x + 1) % d, (x - 1) % d)
                cur = np.where(active, cur + (nx - x) * s, cur)
                x = np.where(active, nx, x)
        if not cols:
            return np.empty((len(a), 0), np.int64)
        return np.stack(cols, axis=1)

    def _link_name(self, i: int) -> str:
        nd = len(self.dims)
        u, rest = divmod(i, 2 * nd)
        k, sign = divmod(rest, 2)
        c = [int(x) for x in self.coords(np.int64(u))]
        return f"({','.join(map(str, c))}){'+-'[sign]}{'xyzuvw'[k] if k < 6 else k}"


class FatTree(Topology):
    """``fattree:H:R``: leaves of H nodes, up/down links to the spine of width H / R."""

    def __init__(self, per_leaf: int, ratio: float, nodes: int) -> None:
        if per_leaf < 1 or not (ratio > 0 and math.isfinite(ratio)):
            raise ValueError(f"fattree: need H >= 1 and a ratio > 0, got {per_leaf}, {ratio}")
        self.per_leaf, self.ratio = per_leaf, ratio
        self.leaves = -(-max(nodes, 1) // per_leaf)
        self.nodes = self.leaves * per_leaf
        self.spec = f"fattree:{per_leaf}:{ratio:g}"
        self._init_links(2 * self.leaves, per_leaf / ratio)

    def _inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        la, lb = a // self.per_leaf, b // self.per_leaf
        base = 2 * self.nodes
        climb = la != lb
        return np.stack([np.where(climb, base + la, -1),
                         np.where(climb, base + self.leaves + lb, -1)], axis=1)

    def _link_name(self, i: int) -> str:
        return f"leaf{i}->spine" if i < self.leaves else f"spine->leaf{i - self.leaves}"


class Cluster(Topology):
    """``cluster:K``: nodes of K ranks, a NIC each, a non-blocking crossbar."""

    def __init__(self, ranks_per_node: int, nodes: int) -> None:
        if ranks_per_node < 1:
            raise ValueError(f"cluster: need K >= 1 ranks per node, got {ranks_per_node}")
        self.ranks_per_node = ranks_per_node
        self.nodes = max(nodes, 1)
        self.spec = f"cluster:{ranks_per_node}"
        self._init_links(0)

    def _inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.empty((len(a), 0), np.int64)


class Dragonfly(Topology):
    """``dragonfly:G:A:H[:W]``: G groups of A routers of H nodes (module docstring)."""

    def __init__(self, groups: int, routers: int, per_router: int, global_width: float = 1.0
                 ) -> None:
        if min(groups, routers, per_router) < 1 or not global_width > 0:
            raise ValueError("dragonfly: need G, A, H >= 1 and a global width > 0")
        self.g, self.a, self.h = groups, routers, per_router
        self.nodes = groups * routers * per_router
        self.spec = f"dragonfly:{groups}:{routers}:{per_router}:{global_width:g}"
        self.n_local = groups * routers * routers
        widths = np.ones(self.n_local + groups * groups)
        widths[self.n_local:] = global_width
        self._init_links(len(widths), widths)

    def gateway(self, g: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Router (within group g) holding the global link from group g to group h."""
        return ((h - g - 1) % self.g) % self.a

    def _inner(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ra, rb = a // self.h, b // self.h  # global router ids
        ga, gb = ra // self.a, rb // self.a
        ia, ib = ra % self.a, rb % self.a
        base = 2 * self.nodes

        def local(g: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
            return np.where(i != j, base + (g * self.a + i) * self.a + j, -1)

        same = ga == gb
        out_gw, in_gw = self.gateway(ga, gb), self.gateway(gb, ga)
        first = np.where(same, local(ga, ia, ib), local(ga, ia, out_gw))
        glob = np.where(same, -1, base + self.n_local + ga * self.g + gb)
        last = np.where(same, -1, local(gb, in_gw, ib))
        return np.stack([first, glob, last], axis=1)

    def _link_name(self, i: int) -> str:
        if i < self.n_local:
            r, j = divmod(i, self.a)
            g, k = divmod(r, self.a)
            return f"g{g}r{k}->g{g}r{j}"
        g, h = divmod(i - self.n_local, self.g)
        return f"g{g}=>g{h}"


def parse_topology(spec: str, nodes: int) -> Topology:
    """The topology of ``spec`` (module docstring; or a file holding it) for at least
    ``nodes`` endpoints where its size grows with them (fat tree, cluster).

    Raises:
        ValueError: an unknown or malformed spec.
    """
    text = spec.strip()
    if ":" not in text and Path(text).is_file():
        lines = [ln.strip() for ln in Path(text).read_text().splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
        if not lines:
            raise ValueError(f"topology file {spec}: no topology in it")
        text = lines[0]
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind == "torus" and len(parts) == 1:
            return Torus([int(x) for x in parts[0].lower().split("x")])
        if kind == "fattree" and len(parts) in (1, 2):
            return FatTree(int(parts[0]), float(parts[1]) if len(parts) > 1 else 1.0, nodes)
        if kind == "dragonfly" and len(parts) in (3, 4):
            g, a, h = (int(x) for x in parts[:3])
            return Dragonfly(g, a, h, float(parts[3]) if len(parts) > 3 else 1.0)
        if kind == "cluster" and len(parts) == 1:
            return Cluster(int(parts[0]), nodes)
    except ValueError as exc:
        raise ValueError(f"topology {text!r}: {exc}") from None
    raise ValueError(f"topology {text!r}: expected torus:AxB[xC], fattree:H[:RATIO], "
                     "dragonfly:G:A:H[:W] or cluster:K (or a file holding one)")


def placement(kind: str | Sequence[int], p: int, nodes: int, ranks_per_node: int = 1
              ) -> tuple[int, ...]:
    """Node id of each of p ranks: ``block`` (k = ranks_per_node consecutive ranks per node),
    ``round-robin`` (rank r on node r mod nodes), a file with one node id per line, or the ids.

    Raises:
        ValueError: more ranks than the nodes hold, or a node id out of range.
    """
    if isinstance(kind, str):
        if kind == "block":
            out = tuple(r // ranks_per_node for r in range(p))
        elif kind == "round-robin":
            out = tuple(r % nodes for r in range(p))
        elif Path(kind).is_file():
            ids = [ln.split("#")[0].strip() for ln in Path(kind).read_text().splitlines()]
            out = tuple(int(x) for x in ids if x)
        else:
            raise ValueError(f"placement {kind!r}: expected block, round-robin or a file")
    else:
        out = tuple(int(x) for x in kind)
    if len(out) != p:
        raise ValueError(f"placement: {len(out)} node ids for {p} ranks")
    if out and not 0 <= min(out) <= max(out) < nodes:
        raise ValueError(f"placement: {p} ranks need node ids 0..{nodes - 1} (the topology "
                         f"has {nodes} nodes), got {min(out)}..{max(out)}")
    return out


@dataclass(frozen=True)
class TokenBucket:
    """One direction of a NIC shaped by a token bucket (Linux's ``tbf`` qdisc: Linux
    ``net/sched/sch_tbf.c``; the token-bucket filter of Turner, "New directions in
    communications", IEEE Communications Magazine 24(10), 1986).

    The bucket holds up to ``burst`` bytes of tokens and gains one byte of tokens every
    ``beta`` seconds (the rate R = 1 / beta bytes/s); a byte that finds a token passes at the
    line's speed (``line_beta`` seconds per byte), the others wait for theirs.  A message of n
    bytes that finds T tokens at its start (:meth:`tokens`) spends n of them (the bucket may go
    below zero: the debt of bytes still held to the rate, repaid at R before the bucket gives
    tokens again) and takes (:meth:`time`)::

        max(message(n) - min(n, T+) (beta - line_beta),  min(message(n), line_alpha + n line_beta))

    where ``message(n)`` is the model's time of the message at the rate (the calibrated
    inter-node exchange curve, measured back to back with the bucket empty) and T+ =
    max(T, 0): the bytes that find tokens go at the line instead of the rate.  So a message
    within the tokens takes the line's time, ``line_alpha + n line_beta`` (where the rate's
    curve is ``alpha + n beta`` with ``alpha = line_alpha``); one of n > T bytes takes
    ``alpha + T line_beta + (n - T) beta``; with no tokens (T <= 0, a zero burst) it takes
    ``message(n)`` exactly, today's model.  The second term is the line's floor, for sizes
    whose measured time is already below the rate's (a calibration's smallest exchanges,
    taken while its bucket still held tokens): a bucket never makes a message slower than
    ``message(n)`` nor faster than the line.

    Attributes:
        burst: bytes of tokens the bucket holds (tc's ``burst``), >= 0.
        beta: seconds per byte at the rate, > 0 (:func:`mpicoll.tools.cluster.sustained_beta`).
        line_beta: seconds per byte at the line's own speed, 0 <= line_beta <= beta.
        line_alpha: seconds, the line's latency (its floor's intercept), >= 0.
    """

    burst: float
    beta: float
    line_beta: float = 0.0
    line_alpha: float = 0.0

    def __post_init__(self) -> None:
        for name in ("burst", "beta", "line_beta", "line_alpha"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"token bucket: {name} must be a number >= 0, got {v}")
        if not self.beta > 0 or self.line_beta > self.beta:
            raise ValueError(f"token bucket: need 0 <= line_beta <= beta and beta > 0, got "
                             f"line_beta {self.line_beta}, beta {self.beta}")

    def tokens(self, left: float, since: float, now: float) -> float:
        """Tokens (bytes) at time ``now`` (s) of a bucket that held ``left`` (bytes, < 0: a
        debt) at time ``since``: ``min(burst, left + (now - since) / beta)``."""
        return min(self.burst, left + (now - since) / self.beta)

    def time(self, message: float, n: int, tokens: float) -> float:
        """Seconds a message of ``n`` bytes takes through the bucket when it finds ``tokens``
        bytes of tokens at its start; ``message``: its time at the rate (the class docstring's
        formula)."""
        if tokens <= 0 or n <= 0:
            return message
        fast = message - min(n, tokens) * (self.beta - self.line_beta)
        return max(fast, min(message, self.line_alpha + n * self.line_beta))


@dataclass(frozen=True)
class Network:
    """A topology with its rank placement and the terms it adds (module docstring).

    Attributes:
        topology: a spec (``torus:8x8x8``, ...) or a file holding one.
        placement: ``block``, ``round-robin``, a file of node ids, or the node id per rank.
        ranks_per_node: ranks per node for block placement (``cluster:K`` sets K).
        contention: charge link contention (False: routes only count bytes and hops).
        gap: LogGP's g in seconds (None: single-port, a port busy for the whole message).
        hop: seconds per link crossed.
    """

    topology: str
    placement: str | tuple[int, ...] = "block"
    ranks_per_node: int = 1
    contention: bool = True
    gap: float | None = None
    hop: float = 0.0

    def __post_init__(self) -> None:
        for name in ("gap", "hop"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name}: must be a number >= 0 (seconds), got {v}")
        if self.ranks_per_node < 1:
            raise ValueError(f"ranks_per_node: must be >= 1, got {self.ranks_per_node}")

    def fabric(self, p: int) -> Fabric:
        """The network laid out for p ranks (nodes, routes, per-link counters)."""
        k = self.ranks_per_node
        if self.topology.startswith("cluster:"):
            k = parse_topology(self.topology, 1).ranks_per_node  # type: ignore[attr-defined]
        topo = parse_topology(self.topology, -(-p // k))
        return Fabric(self, topo, placement(self.placement, p, topo.nodes, k))


@dataclass
class Fabric:
    """A :class:`Network` for p ranks: ``nodes[r]`` is rank r's node; ``link_bytes`` counts
    the bytes each link carried; :meth:`round` gives a round's contention."""

    network: Network
    topology: Topology
    nodes: tuple[int, ...]
    _cache: dict[bytes, list[Any]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._link_bytes = np.zeros(self.topology.n_links, np.int64)
        self.node_of = np.asarray(self.nodes, np.int64)
        #: the last round's senders, receivers (copies) and pattern: a run's rounds mostly
        #: repeat one pattern (a ring's every step), found without hashing the ranks
        self._last: tuple[np.ndarray, np.ndarray, list[Any]] | None = None
        #: patterns whose bytes per (message, link) have been summed since the last flush
        self._dirty: list[list[Any]] = []

    @property
    def link_bytes(self) -> np.ndarray:
        """The bytes each link carried (int64, one per link of the topology); writable."""
        self._flush()
        return self._link_bytes

    def _flush(self) -> None:
        """Add what :meth:`round` summed per pattern to the per-link counters (integer
        sums, so the same totals as adding each round's at once)."""
        for hit in self._dirty:
            np.add.at(self._link_bytes, hit[2], hit[4])
            hit[4] = None
        self._dirty.clear()

    def round(self, s: np.ndarray, d: np.ndarray, n: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """The messages of one round (sender ranks s, receiver ranks d, bytes n; any order):
        each one's bandwidth factor (>= 1 off-node, 1 on-node: ``max (load / width)`` over
        its route, or 1 without contention) and the number of links it crosses; adds their
        bytes to ``link_bytes``."""
        s = np.asarray(s, np.int64)
        d = np.asarray(d, np.int64)
        last = self._last
        if (last is not None and len(last[0]) == len(s) and np.array_equal(last[0], s)
                and np.array_equal(last[1], d)):
            hit = last[2]
        else:
            key = s.tobytes() + d.tobytes()
            got = self._cache.get(key)
            if got is None:
                got = self._cache[key] = [*self._pattern(s, d), None]
                if len(self._cache) > 4096:
                    self._flush()  # the pattern dropped may hold bytes not yet counted
                    self._cache.pop(next(iter(self._cache)))
            hit = got
            self._last = (s.copy(), d.copy(), hit)
        factor, hops, flat_links, flat_msg = hit[:4]
        if len(flat_links):
            nb = np.asarray(n)
            if nb.dtype.kind == "i":  # summed per pattern, counted at the next read
                if hit[4] is None:
                    hit[4] = np.zeros(len(flat_links), np.int64)
                    self._dirty.append(hit)
                hit[4] += nb[flat_msg]
            else:
                self._flush()
                self._link_bytes += np.bincount(flat_links, weights=nb[flat_msg],
                                                minlength=len(self._link_bytes)
                                                ).astype(np.int64)
        return factor, hops

    def _pattern(self, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, ...]:
        m = len(s)
        factor, hops = np.ones(m), np.zeros(m, np.int64)
        a, b = self.node_of[s], self.node_of[d]
        cross = np.flatnonzero(a != b)
        if not len(cross):
            empty = np.empty(0, np.int64)
            return factor, hops, empty, empty
        r = self.topology.routes(a[cross], b[cross])
        used = r >= 0
        hops[cross] = used.sum(axis=1)
        rows = np.broadcast_to(cross[:, None], r.shape)[used]
        links = r[used]
        if self.network.contention:
            nl = self.topology.n_links
            senders = np.bincount(np.unique(links * len(self.nodes) + s[rows]) // len(self.nodes),
                                  minlength=nl)
            receivers = np.bincount(
                np.unique(links * len(self.nodes) + d[rows]) // len(self.nodes), minlength=nl)
            load = np.minimum(senders, receivers) / self.topology.width
            per = np.where(used, load[np.where(used, r, 0)], 0.0)
            factor[cross] = per.max(axis=1)
        return factor, hops, links, rows

    def trace_factors(self, trace: array[int]) -> tuple[list[float], list[int]]:
        """:meth:`round` of each round of a traced run (``sender's round, source, dest,
        bytes`` of each message, flat): each message's factor and links crossed, in the
        trace's order."""
        t = np.array(trace, np.int64).reshape(-1, 4)
        order = np.argsort(t[:, 0], kind="stable")
        cuts = np.flatnonzero(np.diff(t[order, 0])) + 1
        factor, hops = np.ones(len(t)), np.zeros(len(t), np.int64)
        for idx in np.split(order, cuts):
            if len(idx):
                factor[idx], hops[idx] = self.round(t[idx, 1], t[idx, 2], t[idx, 3])
        return factor.tolist(), hops.tolist()

    def busiest(self) -> tuple[str, int]:
        """The link that carried the most bytes (its name) and its bytes."""
        i = int(np.argmax(self.link_bytes))
        return self.topology.link_name(i), int(self.link_bytes[i])

    def describe(self) -> dict[str, Any]:
        net = self.network
        return {"topology": self.topology.spec, "nodes": self.topology.nodes,
                "links": self.topology.n_links, "ranks_per_node": net.ranks_per_node,
                "placement": net.placement if isinstance(net.placement, str) else "given",
                "contention": net.contention, "gap_s": net.gap, "hop_s": net.hop}
