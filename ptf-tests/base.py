"""Shared setup of the ecntune PTF suite: a fresh pipeline per test, routes, thresholds.

Test parameters (passed by `ecntune ptf`, or by hand with `ptf --test-params`):
grpc_addr, device_id, cpu_port, target (embedded|bmv2), thrift_port, p4info, json.
Ports 1..4 of the switch face PTF ports 1..4; host i is 10.0.0.i behind port i.
"""

from __future__ import annotations

import itertools
import socket
import time
from pathlib import Path

import ptf
import ptf.testutils as tu
from ptf.base_tests import BaseTest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from ecntune.controller.forwarding import ForwardingPlan, install
from ecntune.p4runtime_client import P4RuntimeClient, P4RuntimeClientError, load_p4info
from ecntune.p4src import encoding as enc
from ecntune.targets import TARGETS, SwitchSpec
from ecntune.testbed import host_ip, single_switch_route
from ecntune.topology import host_mac, port_mac

PORTS = (1, 2, 3, 4)
UNLIMITED_PPS = 1_000_000
# What PTF holds per port before a test polls: its defaults (100 frames, the kernel's
# ~208 KB socket buffer, ~20 jumbo frames) drop the tail of a burst that a switch forwarding
# at line rate (the native data plane) delivers before the test starts receiving.
RX_QUEUE_FRAMES = 4096
RX_SOCKET_BYTES = 8 << 20
_election = itertools.count(int(time.time() * 1000) % (1 << 40))


class EcnTest(BaseTest):
    """Connects as primary controller and pushes the program: every test starts clean."""

    def setUp(self) -> None:
        super().setUp()
        self.dataplane = ptf.dataplane_instance
        self.dataplane.set_qlen(RX_QUEUE_FRAMES)
        for port in self.dataplane.ports.values():
            port.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RX_SOCKET_BYTES)
        self.dataplane.flush()
        p = tu.test_params_get()
        self.params = p
        self.client = P4RuntimeClient(p["grpc_addr"], int(p["device_id"]), next(_election))
        self.assertTrue(self.client.become_primary(), "could not become primary controller")
        self.client.set_pipeline(load_p4info(Path(p["p4info"])), Path(p["json"]).read_bytes())
        self.target = TARGETS[p["target"]]
        self.spec = SwitchSpec(ports={}, thrift_port=int(p["thrift_port"]))
        self.target.set_queue_rate(self.spec, UNLIMITED_PPS)
        self.target.set_queue_depth(self.spec, 64)
        self.forwarding = ForwardingPlan()

    def tearDown(self) -> None:
        self.target.set_queue_rate(self.spec, UNLIMITED_PPS)
        self.client.close()
        super().tearDown()

    # -- forwarding ----------------------------------------------------------------------

    def route(self, prefix: str, plen: int, ports: list[int]) -> None:
        """prefix/plen -> one port (a member) or several (an ECMP group)."""
        install(self.client, self.forwarding.add(single_switch_route(prefix, plen, ports)))

    def route_hosts(self) -> None:
        for port in PORTS:
            self.route(host_ip(port), 32, [port])

    # -- packets --------------------------------------------------------------------------

    @staticmethod
    def tcp(src_port: int, dst_port: int, ecn: int = 0, pktlen: int = 100, ttl: int = 64,
            sport: int = 1234, dport: int = 80, src_ip: str | None = None) -> bytes:  # fmt: skip
        pkt = tu.simple_tcp_packet(
            eth_dst=port_mac(0, src_port), eth_src=host_mac(src_ip or host_ip(src_port)),
            ip_src=src_ip or host_ip(src_port), ip_dst=host_ip(dst_port), ip_tos=ecn,
            ip_ttl=ttl, tcp_sport=sport, tcp_dport=dport, pktlen=pktlen,
        )  # fmt: skip
        return bytes(pkt)

    @staticmethod
    def forwarded(pkt: bytes, out_port: int) -> bytes:
        """What the switch sends out of `out_port` for `pkt` (MACs rewritten, TTL - 1)."""
        p = Ether(bytes(pkt))
        p[Ether].src = port_mac(0, out_port)
        p[Ether].dst = host_mac(p[IP].dst)
        p[IP].ttl -= 1
        del p[IP].chksum
        return bytes(Ether(bytes(p)))

    def receive(self, port: int, count: int, timeout: float = 2.0) -> list[Ether]:
        """Up to `count` packets arriving on a PTF port (fewer if none for `timeout`)."""
        out = []
        while len(out) < count:
            r = tu.dp_poll(self, device_number=0, port_number=port, timeout=timeout)
            if not isinstance(r, self.dataplane.PollSuccess):
                break
            out.append(Ether(r.packet))
        return out

    def burst(self, in_port: int, pkts: list[bytes]) -> list[float]:
        """Send `pkts` back to back. Returns time.monotonic() before the first send, then as
        each send returned (that frame was on the wire by then): a test can tell a sender
        that fell behind from a switch bug."""
        sent = [time.monotonic()]
        for pkt in pkts:
            tu.send_packet(self, in_port, pkt)
            sent.append(time.monotonic())
        return sent

    @staticmethod
    def queued_behind(sent_at: list[float], pps: float) -> list[bool]:
        """For packets 1 .. n-2 of a burst into a queue draining `pps` packets a second:
        whether the next packet stood behind it. Packet i leaves no earlier than i service
        times after the first send (sent_at[0], from `burst`), so if packet i + 1 was on the
        wire before that (its send returned at sent_at[i + 2]) it queued behind packet i.
        A sender descheduled mid-burst (a loaded machine) leaves those packets free."""
        n = len(sent_at) - 1
        return [sent_at[i + 2] < sent_at[0] + i / pps for i in range(1, n - 1)]

    # -- ECN settings ----------------------------------------------------------------------

    def slow_queue(self, port: int, pps: int, depth: int = 2000) -> None:
        self.target.set_queue_depth(self.spec, depth, port)
        self.target.set_queue_rate(self.spec, pps, port)

    def set_ecn(self, port: int, kmin: float, kmax: float, pmax: float) -> None:
        """Thresholds over the PacketOut control path (works on every target); waits for the ack."""
        regs = enc.encode_thresholds(kmin, kmax, pmax)
        self.client.packet_out(enc.ecn_config_payload(port, regs), opcode=enc.OP_SET_ECN)
        ack = self.client.packet_in(timeout_s=5)
        self.assertEqual(ack.metadata["reason"], enc.REASON_CONFIG_ACK)
        self.assertEqual(enc.parse_ecn_config(ack.payload), (port, regs))

    def set_ecn_registers(self, port: int, kmin: float, kmax: float, pmax: float) -> bool:
        """Thresholds over RegisterEntry; False where the target does not implement it (BMv2)."""
        regs = enc.encode_thresholds(kmin, kmax, pmax)
        try:
            self.client.write_registers(regs.as_dict(), index=port)
        except P4RuntimeClientError as e:
            if e.code == "UNIMPLEMENTED" or any(c == "UNIMPLEMENTED" for c, _ in e.errors):
                return False
            raise
        return True

    def set_interval(self, seconds: float) -> None:
        self.client.packet_out(enc.interval_payload(seconds), opcode=enc.OP_SET_INTERVAL)
        self.client.packet_in(timeout_s=5)

    def drops(self, reason: str) -> int:
        return self.client.read_counter(enc.DROP_COUNTER, enc.DROP_REASONS.index(reason))[0]
