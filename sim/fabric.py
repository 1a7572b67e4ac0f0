"""A Topology (ecntune/topology.py) as the arrays the simulator steps over.

Every full-duplex link becomes two directed links; a directed link leaving a switch is a
switch egress port (where queues build and ECN marks happen, as in the P4 program), one
leaving a host is that host's NIC. A flow's path is the list of directed links it crosses,
first the source's NIC, then one egress port per switch; ECMP paths are those of
Topology.paths, so the simulator and the P4 switches agree on how many ways there are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ecntune.topology import MTU_BYTES, QUEUE_PKTS, Topology


class LinkArrays(NamedTuple):
    """Per directed link (JAX-ready)."""

    capacity: np.ndarray  # bytes per second
    delay_s: np.ndarray  # propagation delay
    buffer_bytes: np.ndarray  # tail-drop limit of the egress queue
    is_port: np.ndarray  # bool: a switch egress port (marks, reports telemetry)


@dataclass(frozen=True)
class FabricArrays:
    """A topology as the simulator's arrays: directed links, ports, hosts, paths' depth
    (not the emulated fabric, mininet/fabric/net.py's `Fabric`)."""

    topology: Topology
    links: LinkArrays
    names: list[tuple[str, int]]  # directed link i leaves node names[i][0] by port names[i][1]
    ports: np.ndarray  # link ids of the switch egress ports, in telemetry order
    port_switch: np.ndarray  # switch index of each telemetry port
    switch_ports: np.ndarray  # (switches, max ports) indices into `ports`, -1 padded
    hosts: list[str]
    host_uplink: np.ndarray  # directed link id of each host's NIC
    max_hops: int
    index: dict[tuple[str, int], int] = field(default_factory=dict)  # names[i] -> i

    @property
    def n_links(self) -> int:
        return len(self.names)

    @property
    def n_ports(self) -> int:
        return len(self.ports)

    def peer(self, link: int) -> int:
        """The other direction of the same cable (build() adds both directions in turn)."""
        return link ^ 1

    def paths(self, src: int, dst: int) -> list[list[int]]:
        """Every ECMP path between two hosts (host indices) as directed link ids."""
        hops = self.topology.paths(self.hosts[src], self.hosts[dst])
        return [[int(self.host_uplink[src]), *(self.index[h] for h in p)] for p in hops]

    def base_rtt(self, path: list[int] | np.ndarray) -> np.ndarray:
        """Twice the propagation delay plus one MTU's serialisation per hop, both ways.

        `path`: directed link ids, or any array of paths along its last axis padded with -1.
        """
        links = np.asarray(path)
        on = links >= 0
        lk = np.where(on, links, 0)
        per_hop = self.links.delay_s[lk] + MTU_BYTES / self.links.capacity[lk]
        return 2 * np.sum(np.where(on, per_hop, 0.0), axis=-1)

    def bottleneck(self, path: list[int]) -> float:
        return float(np.min(self.links.capacity[path]))


def build(topology: Topology, buffer_bytes: float | None = None) -> FabricArrays:
    """Directed links of a topology.

    Queues hold `buffer_bytes` (default: QUEUE_PKTS MTUs, the emulation's queue depth).
    """
    names: list[tuple[str, int]] = []
    cap, delay = [], []
    for lk in topology.links:
        for node, port in ((lk.a, lk.a_port), (lk.b, lk.b_port)):
            names.append((node, port))
            cap.append(lk.bw_bps / 8)
            delay.append(lk.delay_s)
    is_port = np.array([n in topology.switches for n, _ in names])
    buffer = float(buffer_bytes if buffer_bytes is not None else QUEUE_PKTS * MTU_BYTES)
    links = LinkArrays(
        capacity=np.array(cap, dtype=np.float32),
        delay_s=np.array(delay, dtype=np.float32),
        buffer_bytes=np.full(len(names), buffer, dtype=np.float32),
        is_port=is_port,
    )
    switches = list(topology.switches)
    ports = np.flatnonzero(is_port)
    port_switch = np.array([switches.index(names[i][0]) for i in ports])
    width = max(np.bincount(port_switch, minlength=len(switches)))
    switch_ports = np.full((len(switches), width), -1)
    for s in range(len(switches)):
        mine = np.flatnonzero(port_switch == s)
        switch_ports[s, : len(mine)] = mine
    hosts = list(topology.hosts)
    host_uplink = np.array([names.index((h, 0)) for h in hosts])
    hop_counts = [len(topology.paths(hosts[0], h)[0]) + 1 for h in hosts[1:]] or [1]
    return FabricArrays(
        topology,
        links,
        names,
        ports,
        port_switch,
        switch_ports,
        hosts,
        host_uplink,
        max(hop_counts),
        index={name: i for i, name in enumerate(names)},
    )
