"""A switch on veth pairs with the program loaded and host routes installed.

The smallest rig that puts real packets through a target: n veth pairs in the root
namespace (near ends owned by the switch, far ends free for raw sockets), the switch
started through ecntune/targets.py, the pipeline pushed over P4Runtime, and 10.0.0.i/32
routed to port i. Benchmarks and the differential test use it; PTF has its own runner.
`Alternating` is the policy that loads a controller's write path most: every port, every tick.

    with Testbed("embedded", 4, "tb") as tb:
        tb.send(1, frame); tb.client.read_register("ecn_kmax", 2)
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import time
from collections.abc import Iterator
from typing import Self

import numpy as np

from ecntune.p4runtime_client import P4RuntimeClient, load_p4info
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.ptf_runner import veth_pairs
from ecntune.targets import SwitchSpec, free_port, start, stop, target
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import host_mac, mac_int, port_mac

UNLIMITED_PPS = 10_000_000


class Alternating:
    """Two static settings in turn: every tick writes every port, with no inference."""

    name = "static:alternating"

    def __init__(self) -> None:
        self.calls = 0

    def act(self, history: PortTelemetry) -> EcnThresholds:
        self.calls += 1
        ones = np.ones_like(np.asarray(history.link_bps, np.float64)[-1])
        kmin = 10_000.0 if self.calls % 2 else 20_000.0
        return EcnThresholds(kmin * ones, 4 * kmin * ones, 0.1 * ones)


def host_ip(port: int) -> str:
    """The address of the host behind `port` on a single-switch rig (device 0)."""
    return f"10.0.0.{port}"


def install_route(
    client: P4RuntimeClient, prefix: str, plen: int, ports: list[int], ids: Iterator[int]
) -> None:
    """prefix/plen -> one port (an action-profile member) or several (an ECMP group, `ids`
    numbering members and groups), each next hop rewriting the MACs as the fabric's
    forwarding does towards the host behind that port (controller/forwarding.py derives
    the same entries from a topology, through finsy). The testbed's and the PTF tests'."""
    members = []
    for port in ports:
        mid = next(ids)
        params = {
            "port": port,
            "src_mac": mac_int(port_mac(0, port)),
            "dst_mac": mac_int(host_mac(host_ip(port))),
        }
        client.insert(client.member(enc.ECMP_SELECTOR, mid, enc.ACTION_FORWARD, params))
        members.append(mid)
    match = {"hdr.ipv4.dst_addr": (int.from_bytes(socket.inet_aton(prefix), "big"), plen)}
    if len(members) == 1:
        client.insert(client.table_entry(enc.TABLE_IPV4, match, member=members[0]))
        return
    gid = next(ids)
    client.insert(client.group(enc.ECMP_SELECTOR, gid, members))
    client.insert(client.table_entry(enc.TABLE_IPV4, match, group=gid))


class Testbed:
    """n veth pairs, a switch of one target on their near ends, routes to every far end."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, target_name: str, n_ports: int, tag: str) -> None:
        self.stack = contextlib.ExitStack()
        try:
            self.pairs = self.stack.enter_context(veth_pairs(n_ports, tag))
            self.target = target(target_name)
            self.spec = SwitchSpec(
                ports={i: sw for i, (sw, _) in enumerate(self.pairs, 1)},
                grpc_addr=f"127.0.0.1:{free_port()}",
                thrift_port=free_port(),
            )
            self.proc = start(self.target, self.spec)
            self.stack.callback(stop, self.proc)
            self.client = P4RuntimeClient(self.spec.grpc_addr, 0, 10)
            self.stack.callback(self.client.close)
            if not self.client.become_primary():
                raise RuntimeError("could not become the primary controller")
            self.client.set_pipeline(
                load_p4info(PROGRAM.p4info_path), PROGRAM.json_path.read_bytes()
            )
            self.target.set_queue_rate(self.spec, UNLIMITED_PPS)
            self.target.set_queue_depth(self.spec, 1024)
            self._ids = itertools.count(1)
            for port in range(1, n_ports + 1):
                self.route(host_ip(port), 32, [port])
            self._sockets: dict[int, socket.socket] = {}
        except BaseException:
            self.stack.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stack.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def far_ends(self) -> list[str]:
        return [far for _, far in self.pairs]

    def route(self, prefix: str, plen: int, ports: list[int]) -> None:
        """prefix/plen -> `ports` (install_route)."""
        install_route(self.client, prefix, plen, ports, self._ids)

    @property
    def sockets(self) -> dict[int, socket.socket]:
        """Raw sockets on the far ends (opened on first use: benchmarks blast without them)."""
        if not self._sockets:
            for port, (_, far) in enumerate(self.pairs, 1):
                self._sockets[port] = self.stack.enter_context(_raw_socket(far))
        return self._sockets

    def send(self, port: int, frame: bytes) -> None:
        """A frame entering the switch on `port` (sent from that port's far end)."""
        self.sockets[port].send(frame)

    def collect(self, quiet_s: float = 0.3) -> list[tuple[int, bytes]]:
        """Every frame the switch sent, as (port, bytes), until nothing came for `quiet_s`."""
        by_fd = {s.fileno(): port for port, s in self.sockets.items()}
        out = []
        deadline = time.monotonic() + quiet_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(by_fd), [], [], left)
            for fd in ready:
                port = by_fd[fd]
                data, addr = self.sockets[port].recvfrom(65536)
                if addr[2] != socket.PACKET_OUTGOING:  # not our own sends echoed back
                    out.append((port, data))
                deadline = time.monotonic() + quiet_s
        return out


@contextlib.contextmanager
def _raw_socket(iface: str):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing queues before bind
    try:
        s.bind((iface, 0x0003))  # ETH_P_ALL, from this interface only
        yield s
    finally:
        s.close()
