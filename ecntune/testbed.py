"""A switch on veth pairs with the program loaded and host routes installed.

The smallest rig that puts real packets through a target: n veth pairs in the root
namespace (near ends owned by the switch, far ends free for raw sockets), the switch
started through ecntune/targets.py, the pipeline pushed over P4Runtime, and 10.0.0.i/32
routed to port i. Benchmarks and the differential test use it; PTF has its own runner.
`Alternating` is the policy that loads a controller's write path most: every port, every tick.

    with Testbed("embedded", 4, "tb") as tb:
        tb.send(1, frame); tb.client.read_register("ecn_kmax", 2)

With `program=` another BMv2 JSON runs instead, loaded at start as `simple_switch prog.json`
would (no P4Runtime pipeline, no routes): the program corpus's rig.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

import numpy as np

from ecntune.controller.forwarding import ForwardingPlan, install
from ecntune.p4runtime_client import P4RuntimeClient, load_p4info
from ecntune.p4src import PROGRAM
from ecntune.ptf_runner import veth_pairs
from ecntune.switch.packet_io import AUXDATA, PACKET_AUXDATA, SOL_PACKET, with_vlan_tag
from ecntune.targets import SwitchSpec, start, stop, target
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import NextHop, Route, host_mac, port_mac
from ecntune.traffic.burst import (
    IP_PROTO_UDP,
    SO_TIMESTAMPNS,
    await_kernel_timestamps,
    kernel_time,
)

UNLIMITED_PPS = 10_000_000
AUX_SPACE = socket.CMSG_SPACE(AUXDATA.size)


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


def single_switch_route(prefix: str, plen: int, ports: list[int]) -> Route:
    """prefix/plen -> `ports` on a single-switch rig, each next hop rewriting the MACs as the
    fabric's forwarding does towards the host behind that port (ECMP over several)."""
    hops = tuple(NextHop(p, port_mac(0, p), host_mac(host_ip(p)), f"h{p}") for p in ports)
    return Route(prefix, plen, hops)


class Testbed:
    """n veth pairs, a switch of one target on their near ends, routes to every far end
    (`switch_args`: more options for the switch process, as `ecntune switch` takes them)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        target_name: str,
        n_ports: int,
        tag: str,
        program: Path | None = None,
        switch_args: Sequence[str] = (),
    ) -> None:
        self.stack = contextlib.ExitStack()
        try:
            self.pairs = self.stack.enter_context(veth_pairs(n_ports, tag))
            self.target = target(target_name)
            self.spec = SwitchSpec.on_free_ports(
                {i: sw for i, (sw, _) in enumerate(self.pairs, 1)},
                json_path=program,
                extra_args=list(switch_args),
            )
            self.proc = start(self.target, self.spec)
            self.stack.callback(stop, self.proc)
            self._sockets: dict[int, socket.socket] = {}
            if program is not None:
                return
            self.client = P4RuntimeClient(self.spec.grpc_addr, 0, 10)
            self.stack.callback(self.client.close)
            if not self.client.become_primary():
                raise RuntimeError("could not become the primary controller")
            self.client.set_pipeline(
                load_p4info(PROGRAM.p4info_path), PROGRAM.json_path.read_bytes()
            )
            self.target.set_queue_rate(self.spec, UNLIMITED_PPS)
            self.target.set_queue_depth(self.spec, 1024)
            self.forwarding = ForwardingPlan()
            for port in range(1, n_ports + 1):
                self.route(host_ip(port), 32, [port])
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
        """prefix/plen -> `ports` (single_switch_route)."""
        install(self.client, self.forwarding.add(single_switch_route(prefix, plen, ports)))

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
        """Every frame the switch sent, as (port, bytes), until nothing came for `quiet_s`;
        an 802.1Q tag the kernel took out of a frame is put back where it was. A switch
        that has exited is an error, not an empty answer."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"the {self.target.name} switch exited ({self.proc.returncode})")
        by_fd = {s.fileno(): port for port, s in self.sockets.items()}
        out = []
        deadline = time.monotonic() + quiet_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(by_fd), [], [], left)
            for fd in ready:
                port = by_fd[fd]
                data, anc, _, addr = self.sockets[port].recvmsg(65536, AUX_SPACE)
                if addr[2] != socket.PACKET_OUTGOING:  # not our own sends echoed back
                    out.append((port, with_vlan_tag(data, anc)))
                deadline = time.monotonic() + quiet_s
        return out

    def listen(self) -> None:
        """Kernel receive timestamps on the far ends' sockets (a busy reader's own clock
        would add its delays) and room for every frame of a run."""
        for s in self.sockets.values():
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        await_kernel_timestamps()

    def arrivals(self, expect: int, timeout_s: float = 5.0) -> list[tuple[int, int, float]]:
        """(port, UDP destination port, kernel arrival time.time()) of the next `expect` UDP
        frames the switch sent (after `listen`); fewer when `timeout_s` passes first."""
        socks = {s.fileno(): (port, s) for port, s in self.sockets.items()}
        out: list[tuple[int, int, float]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expect and time.monotonic() < deadline:
            ready, _, _ = select.select(list(socks), [], [], 0.05)
            for fd in ready:
                port, s = socks[fd]
                data, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(16))
                dport = udp_dport(data)
                if addr[2] != socket.PACKET_OUTGOING and dport is not None:
                    out.append((port, dport, kernel_time(anc)))
        return out


def udp_dport(frame: bytes) -> int | None:
    """The UDP destination port of an IPv4 frame, 802.1Q-tagged or not; else None."""
    l3 = 18 if frame[12:14] == b"\x81\x00" else 14
    if len(frame) < l3 + 20 or frame[l3 - 2 : l3] != b"\x08\x00" or frame[l3 + 9] != IP_PROTO_UDP:
        return None
    l4 = l3 + 4 * (frame[l3] & 0x0F)
    return int.from_bytes(frame[l4 + 2 : l4 + 4], "big") if len(frame) >= l4 + 4 else None


@contextlib.contextmanager
def _raw_socket(iface: str):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing queues before bind
    try:
        s.bind((iface, 0x0003))  # ETH_P_ALL, from this interface only
        s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)  # where the kernel put a VLAN tag
        yield s
    finally:
        s.close()
