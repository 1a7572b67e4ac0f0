"""IPv4 forwarding: LPM, MAC rewrite, TTL, checksums, drops by reason, ECMP."""

from __future__ import annotations

import ptf.testutils as tu
from base import EcnTest, host_ip
from scapy.layers.inet import IP
from scapy.layers.l2 import ARP, Ether


class Forward(EcnTest):
    """A routed packet leaves on its port with MACs rewritten, TTL - 1 and a valid checksum."""

    def runTest(self) -> None:
        self.route_hosts()
        for src, dst in ((1, 2), (3, 4), (4, 1)):
            pkt = self.tcp(src, dst, ttl=64)
            tu.send_packet(self, src, pkt)
            tu.verify_packet(self, self.forwarded(pkt, dst), dst)
        tu.verify_no_other_packets(self)


class TtlExpiry(EcnTest):
    """TTL 1 is dropped and counted; TTL 2 leaves with TTL 1."""

    def runTest(self) -> None:
        self.route_hosts()
        tu.send_packet(self, 1, self.tcp(1, 2, ttl=1))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("ttl_expired"), 1)
        pkt = self.tcp(1, 2, ttl=2)
        tu.send_packet(self, 1, pkt)
        out = self.receive(2, 1)
        self.assertEqual(out[0][IP].ttl, 1)


class BadChecksumDropped(EcnTest):
    """A corrupted IPv4 header checksum is never forwarded."""

    def runTest(self) -> None:
        self.route_hosts()
        p = Ether(self.tcp(1, 2))
        p[IP].chksum ^= 0x1234
        tu.send_packet(self, 1, bytes(p))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("malformed"), 1)


class UnknownDestinationDropped(EcnTest):
    """No route: dropped and counted; non-IPv4 frames are dropped and counted apart."""

    def runTest(self) -> None:
        self.route_hosts()
        tu.send_packet(self, 1, tu.simple_tcp_packet(ip_dst="192.168.9.9"))
        arp = Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=host_ip(2))
        tu.send_packet(self, 1, bytes(arp))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("unknown_dst"), 1)
        self.assertEqual(self.drops("not_ipv4"), 1)


class LongestPrefixWins(EcnTest):
    """A /32 inside a /24 wins over the /24."""

    def runTest(self) -> None:
        self.route("10.0.0.0", 24, [3])
        self.route(host_ip(2), 32, [2])
        tu.send_packet(self, 1, self.tcp(1, 2))
        self.assertEqual(len(self.receive(2, 1)), 1)
        tu.send_packet(self, 1, self.tcp(1, 4))
        self.assertEqual(len(self.receive(3, 1)), 1)
        tu.verify_no_other_packets(self)


class EcmpSpreadsFlowsAndKeepsEachOnOnePath(EcnTest):
    """One flow always takes one member; 64 flows use every member."""

    def runTest(self) -> None:
        self.route(host_ip(1), 32, [1])
        self.route("10.0.0.0", 24, [2, 3, 4])
        # one flow, 20 packets: one port only
        for _ in range(20):
            tu.send_packet(self, 1, self.tcp(1, 9, sport=4242))
        seen = {p for p in (2, 3, 4) for _ in self.receive(p, 20, timeout=0.5)}
        self.assertEqual(len(seen), 1, f"one flow went out of ports {seen}")
        # many flows: every port carries some
        counts = {2: 0, 3: 0, 4: 0}
        for sport in range(1000, 1064):
            tu.send_packet(self, 1, self.tcp(1, 9, sport=sport))
        for port in counts:
            counts[port] = len(self.receive(port, 64, timeout=0.5))
        self.assertEqual(sum(counts.values()), 64)
        self.assertTrue(all(c >= 5 for c in counts.values()), f"uneven spread {counts}")
