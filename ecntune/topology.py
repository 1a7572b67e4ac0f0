"""One description of a fabric, shared by the emulation, the controller and the simulator.

Mininet builds hosts, switches and links from it (`ecntune.fabric`), the controller installs
routes, ECMP groups and MAC rewrites from it (`ecntune.controller`), and the simulator turns
it into link and path arrays (`ecntune.sim`). Because all three read the same object, the
policy trained in simulation sees the fabric it will run on.

Conventions (fixed here so that every consumer agrees):
- switch ports are numbered from 1 in the order links are added; port 255 is the CPU port;
- hosts attached to the i-th switch (0-based) live in 10.0.i.0/24 and get .1, .2, ...;
- a host's MAC is derived from its IP, a switch port's MAC from (device id, port);
- every switch routes by IPv4 longest prefix: /32 for hosts it reaches directly, the /24 of
  a remote switch's hosts otherwise, each with the set of equal-cost next hops (ECMP).
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

CPU_PORT = 255
# Every emulated egress queue's depth in packets (BMv2's default), and what the simulator's
# queues hold unless a scenario says otherwise: one number, so both model the same buffer.
QUEUE_PKTS = 64
# One full Ethernet payload: the unit of queue depths in packets, of the template's smallest
# α and of every bytes<->packets conversion in the emulation, the controller and the simulator.
MTU_BYTES = 1500
# The emulation applies a link's delay as a delay line in the embedded switch (this kernel
# has no netem); below this a delay line costs more than it emulates (the switch's own
# per-packet time), so shorter delays are left out there and in the simulator's model of it.
MIN_EMULATED_DELAY_S = 10e-6


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    switch: str
    switch_port: int


@dataclass(frozen=True)
class Switch:
    name: str
    device_id: int
    grpc_port: int
    thrift_port: int
    cpu_port: int = CPU_PORT


@dataclass(frozen=True)
class Link:
    """A full-duplex link. For host links `a` is the host and `a_port` is 0."""

    a: str
    a_port: int
    b: str
    b_port: int
    bw_bps: float
    delay_s: float = 1e-6


@dataclass(frozen=True)
class NextHop:
    port: int
    src_mac: str
    dst_mac: str
    neighbour: str


@dataclass(frozen=True)
class Route:
    prefix: str
    prefix_len: int
    next_hops: tuple[NextHop, ...]


def host_mac(ip: str) -> str:
    o = ipaddress.IPv4Address(ip).packed
    return "00:00:" + ":".join(f"{b:02x}" for b in o)


def port_mac(device_id: int, port: int) -> str:
    return f"02:ec:{device_id & 0xFF:02x}:00:{(port >> 8) & 0xFF:02x}:{port & 0xFF:02x}"


def mac_int(mac: str) -> int:
    """'00:00:0a:00:00:01' as the 48-bit integer a P4 action parameter carries."""
    return int(mac.replace(":", ""), 16)


@dataclass
class Topology:
    """Hosts, switches and links of one fabric; routes are derived, never stored."""

    name: str
    hosts: dict[str, Host] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    # -- construction ---------------------------------------------------------------

    def add_switch(self, name: str) -> Switch:
        if name in self.switches or name in self.hosts:
            raise ValueError(f"duplicate node name {name!r}")
        index = len(self.switches)
        sw = Switch(name, device_id=index, grpc_port=9559 + index, thrift_port=9090 + index)
        self.switches[name] = sw
        return sw

    def add_host(self, name: str, switch: str, bw_bps: float, delay_s: float = 1e-6) -> Host:
        if name in self.switches or name in self.hosts:
            raise ValueError(f"duplicate node name {name!r}")
        sw = self.switches[switch]
        n_local = sum(1 for h in self.hosts.values() if h.switch == switch)
        if n_local >= 250:
            raise ValueError(f"switch {switch!r} has no addresses left in its /24")
        ip = f"10.0.{sw.device_id}.{n_local + 1}"
        port = self._next_port(switch)
        host = Host(name, ip, host_mac(ip), switch, port)
        self.hosts[name] = host
        self.links.append(Link(name, 0, switch, port, bw_bps, delay_s))
        return host

    def add_link(self, a: str, b: str, bw_bps: float, delay_s: float = 1e-6) -> Link:
        if a not in self.switches or b not in self.switches:
            raise ValueError("add_link joins two switches; use add_host for hosts")
        link = Link(a, self._next_port(a), b, self._next_port(b), bw_bps, delay_s)
        self.links.append(link)
        return link

    def _next_port(self, switch: str) -> int:
        used = [p for _, p in self.ports(switch)]
        port = max(used, default=0) + 1
        if port >= CPU_PORT:
            raise ValueError(f"switch {switch!r} has no free ports")
        return port

    # -- queries ---------------------------------------------------------------------

    def ports(self, switch: str) -> list[tuple[Link, int]]:
        """Every (link, local port) of a switch, ordered by port number."""
        out = [(lk, lk.a_port) for lk in self.links if lk.a == switch]
        out += [(lk, lk.b_port) for lk in self.links if lk.b == switch]
        return sorted(out, key=lambda x: x[1])

    def neighbour(self, switch: str, port: int) -> tuple[str, int]:
        """The node and port at the far end of a switch port."""
        for lk in self.links:
            if lk.a == switch and lk.a_port == port:
                return lk.b, lk.b_port
            if lk.b == switch and lk.b_port == port:
                return lk.a, lk.a_port
        raise KeyError(f"{switch} has no port {port}")

    def port_bw(self, switch: str, port: int) -> float:
        return next(lk.bw_bps for lk, p in self.ports(switch) if p == port)

    def mac_of(self, node: str, port: int) -> str:
        if node in self.hosts:
            return self.hosts[node].mac
        return port_mac(self.switches[node].device_id, port)

    def _hops_to(self, target: str) -> dict[str, int]:
        """Hop count from every switch to the switch `target` (BFS over switch links)."""
        dist = {target: 0}
        todo = deque([target])
        while todo:
            node = todo.popleft()
            for lk, _ in self.ports(node):
                other = lk.b if lk.a == node else lk.a
                if other in self.switches and other not in dist:
                    dist[other] = dist[node] + 1
                    todo.append(other)
        return dist

    def next_hops(
        self, switch: str, dst_host: str, dist: dict[str, int] | None = None
    ) -> tuple[NextHop, ...]:
        """All equal-cost next hops from `switch` towards `dst_host` (`dist`: the hop counts
        to its switch, when the caller already has them)."""
        host = self.hosts[dst_host]
        dev = self.switches[switch].device_id
        if host.switch == switch:
            return (
                NextHop(host.switch_port, port_mac(dev, host.switch_port), host.mac, host.name),
            )
        dist = dist if dist is not None else self._hops_to(host.switch)
        if switch not in dist:
            raise ValueError(f"{dst_host} is unreachable from {switch}")
        hops = []
        for _lk, port in self.ports(switch):
            other, other_port = self.neighbour(switch, port)
            if other in self.switches and dist.get(other, -1) == dist[switch] - 1:
                hops.append(
                    NextHop(port, port_mac(dev, port), self.mac_of(other, other_port), other)
                )
        return tuple(hops)

    def routes(self, switch: str) -> list[Route]:
        """LPM routes for one switch: /32 per attached host, one /24 per remote switch's hosts."""
        out: list[Route] = []
        for sw in self.switches.values():
            local = [h for h in self.hosts.values() if h.switch == sw.name]
            if not local:
                continue
            if sw.name == switch:
                out += [Route(h.ip, 32, self.next_hops(switch, h.name)) for h in local]
            else:
                out.append(
                    Route(f"10.0.{sw.device_id}.0", 24, self.next_hops(switch, local[0].name))
                )
        return out

    def paths(self, src_host: str, dst_host: str) -> list[list[tuple[str, int]]]:
        """Every equal-cost path as a list of (switch, egress port), in forwarding order."""
        if src_host == dst_host:
            raise ValueError("a path needs two different hosts")

        dist = self._hops_to(self.hosts[dst_host].switch)

        def extend(switch: str) -> list[list[tuple[str, int]]]:
            out = []
            for hop in self.next_hops(switch, dst_host, dist):
                if hop.neighbour == dst_host:
                    out.append([(switch, hop.port)])
                else:
                    out += [[(switch, hop.port), *rest] for rest in extend(hop.neighbour)]
            return out

        return extend(self.hosts[src_host].switch)

    def host_neighbours(self, host: str) -> dict[str, str]:
        """Static neighbour entries for a host: every other host's IP -> its switch port's MAC.

        Hosts never ARP; the first switch rewrites MACs hop by hop.
        """
        h = self.hosts[host]
        gw = port_mac(self.switches[h.switch].device_id, h.switch_port)
        return {o.ip: gw for o in self.hosts.values() if o.name != host}

    # -- (de)serialisation -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "switches": [asdict(s) for s in self.switches.values()],
            "hosts": [asdict(h) for h in self.hosts.values()],
            "links": [asdict(lk) for lk in self.links],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Topology:
        try:
            topo = cls(d["name"])
            topo.switches = {s["name"]: Switch(**s) for s in d["switches"]}
            topo.hosts = {h["name"]: Host(**h) for h in d["hosts"]}
            topo.links = [Link(**lk) for lk in d["links"]]
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed topology description: {e}") from e
        return topo


# -- the fabrics ecntune ships --------------------------------------------------------------


def single_switch(
    n_hosts: int, bw_bps: float, name: str = "star", delay_s: float = 1e-6
) -> Topology:
    """N hosts on one switch: the incast star (N-1 senders, one receiver)."""
    topo = Topology(name)
    topo.add_switch("s1")
    for i in range(n_hosts):
        topo.add_host(f"h{i + 1}", "s1", bw_bps, delay_s)
    return topo


def dumbbell(n_left: int, n_right: int, host_bw_bps: float, core_bw_bps: float) -> Topology:
    """Two switches joined by one bottleneck link."""
    topo = Topology("dumbbell")
    topo.add_switch("s1")
    topo.add_switch("s2")
    topo.add_link("s1", "s2", core_bw_bps)
    for i in range(n_left):
        topo.add_host(f"h{i + 1}", "s1", host_bw_bps)
    for i in range(n_right):
        topo.add_host(f"h{n_left + i + 1}", "s2", host_bw_bps)
    return topo


def leaf_spine(
    n_spines: int,
    n_leaves: int,
    hosts_per_leaf: int,
    host_bw_bps: float,
    fabric_bw_bps: float,
    name: str = "leafspine",
    delay_s: float = 1e-6,
) -> Topology:
    """A two-tier Clos: every leaf connects to every spine; hosts hang off leaves; every
    link (host or fabric) has `delay_s` of propagation delay."""
    topo = Topology(name)
    for leaf in range(n_leaves):
        topo.add_switch(f"leaf{leaf + 1}")
    for spine in range(n_spines):
        topo.add_switch(f"spine{spine + 1}")
    for leaf in range(n_leaves):
        for spine in range(n_spines):
            topo.add_link(f"leaf{leaf + 1}", f"spine{spine + 1}", fabric_bw_bps, delay_s)
    for leaf in range(n_leaves):
        for h in range(hosts_per_leaf):
            topo.add_host(
                f"h{leaf * hosts_per_leaf + h + 1}", f"leaf{leaf + 1}", host_bw_bps, delay_s
            )
    return topo


MBIT = 1e6
GBIT = 1e9

PRESETS = {
    # CI's end-to-end fabric: one switch, four hosts, 10 Mbit/s.
    "tiny": lambda: single_switch(4, 10 * MBIT, name="tiny"),
    # An 8:1-capable star without propagation delay: a bandwidth-delay product of about one
    # packet, where the lowest threshold is best everywhere (docs/results, star8-heldout).
    "star8": lambda: single_switch(9, 20 * MBIT, name="star8"),
    # The demo: the same star with 5 ms per link, a ~20.5 ms RTT: 34 packets in flight at
    # 20 Mbit/s, where thresholds trade queueing against throughput and the best one
    # differs with the traffic (docs/results/star8-20ms-heldout).
    "star8-20ms": lambda: single_switch(9, 20 * MBIT, name="star8-20ms", delay_s=5e-3),
    "leafspine-2x2": lambda: leaf_spine(2, 2, 2, 20 * MBIT, 40 * MBIT, name="leafspine-2x2"),
    "leafspine-2x4": lambda: leaf_spine(2, 4, 2, 20 * MBIT, 40 * MBIT, name="leafspine-2x4"),
    # The leaf-spines with star8-20ms's 5 ms per link (as the star8-20ms mixes' held-out
    # leaf-spine scenario): ~20.5 ms RTT within a leaf, ~41 ms across the spines, 34 to 68
    # packets in flight at 20 Mbit/s.
    "leafspine-2x2-20ms": lambda: leaf_spine(
        2, 2, 2, 20 * MBIT, 40 * MBIT, name="leafspine-2x2-20ms", delay_s=5e-3
    ),
    "leafspine-2x4-20ms": lambda: leaf_spine(
        2, 4, 2, 20 * MBIT, 40 * MBIT, name="leafspine-2x4-20ms", delay_s=5e-3
    ),
    # Faster fabrics for the native data plane (issue 21): star8-20ms's ~35 packets in flight
    # at five times the rate (five times the flows per second), and the leaf-spine at 2.5
    # times. On 2 cores the traffic tools cap what a fabric carries (~250-300 Mbit/s
    # offered in all; 3 switch hops per packet on the leaf-spine), not the switch (~1
    # Gbit/s into one port, bench/bench_fabric.py): README's preset table.
    "star8-100m": lambda: single_switch(9, 100 * MBIT, name="star8-100m", delay_s=1e-3),
    "leafspine-2x4-50m": lambda: leaf_spine(
        2, 4, 2, 50 * MBIT, 100 * MBIT, name="leafspine-2x4-50m", delay_s=2e-3
    ),
    # ACC's testbed (§5.1): 4 leaves, 2 spines, 24 hosts at 25G, 100G fabric.
    "testbed24": lambda: leaf_spine(2, 4, 6, 25 * GBIT, 100 * GBIT, name="testbed24"),
    # GraphCC's topology changes (§4.5, Table 2), trained on testbed24, never trained on:
    # an extra branch (one more spine, one more leaf with its 6 hosts: the leaf-spine form
    # of the paper's extra core, two spines and six hosts), and 32 or 40 hosts on the same
    # four leaves (8 or 10 per leaf instead of 6).
    "testbed24-branch": lambda: leaf_spine(3, 5, 6, 25 * GBIT, 100 * GBIT, name="testbed24-branch"),
    "testbed32": lambda: leaf_spine(2, 4, 8, 25 * GBIT, 100 * GBIT, name="testbed32"),
    "testbed40": lambda: leaf_spine(2, 4, 10, 25 * GBIT, 100 * GBIT, name="testbed40"),
    # ACC/PET large-scale simulation: 12 leaves x 24 hosts at 25G, 6 spines at 100G.
    "fabric288": lambda: leaf_spine(6, 12, 24, 25 * GBIT, 100 * GBIT, name="fabric288"),
}


def preset(name: str) -> Topology:
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown topology {name!r}; choose one of {sorted(PRESETS)}") from None
