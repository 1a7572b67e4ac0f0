"""The embedded target against BMv2: the same packets, the same entries, the same outputs.

Both targets get identical routes and thresholds; a sequence of packets — valid TCP/UDP
with every ECN codepoint, TTL expiry, a bad checksum, IPv4 options, non-IPv4, truncated
frames, unknown destinations, an ECMP group — goes through each, one packet at a time,
and every output (port and exact bytes) must match. Then a burst towards one port is
summarised by a telemetry digest on each target, and the digests' counters must match.
Marking is configured deterministic (always at kmax = 1 byte, or never) so that random
numbers cannot differ. Each packet is followed by a barrier packet from the same port, and
its outputs are collected until the barrier comes out, so a slow switch (BMv2's first
packet, a loaded machine) cannot shift one packet's outputs into the next one's.
"""

from __future__ import annotations

import time

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from ecntune.p4src import encoding as enc
from ecntune.testbed import Testbed
from ecntune.topology import host_mac, port_mac

pytestmark = [pytest.mark.root, pytest.mark.bmv2, pytest.mark.slow]

PORTS = 4
INTERVAL_S = 1.0
BARRIER_PORT = 4242
BARRIER_TIMEOUT_S = 10.0


def eth(src: int, dst_ip: str = "10.0.0.2") -> Ether:
    return Ether(dst=port_mac(0, src), src=host_mac(f"10.0.0.{src}"))


def packets() -> list[tuple[int, bytes]]:
    """(ingress port, frame): what both targets receive, in order."""
    out: list[tuple[int, bytes]] = []
    for ecn in range(4):
        for dst in (2, 3, 4):
            p = eth(1) / IP(src="10.0.0.1", dst=f"10.0.0.{dst}", tos=ecn) / TCP(sport=1000 + dst)
            out.append((1, bytes(p / bytes(40))))
    out.append((2, bytes(eth(2) / IP(src="10.0.0.2", dst="10.0.0.1", tos=2) / UDP() / bytes(300))))
    out.append((1, bytes(eth(1) / IP(src="10.0.0.1", dst="10.0.0.2", ttl=1) / TCP())))
    out.append((1, bytes(eth(1) / IP(src="10.0.0.1", dst="10.0.0.2", ttl=2) / TCP())))
    bad = IP(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP()))
    bad.chksum ^= 0xFFFF
    out.append((1, bytes(eth(1) / bad)))
    out.append((1, bytes(eth(1) / IP(src="10.0.0.1", dst="10.0.0.2", options=b"\x01" * 4) / TCP())))
    out.append((1, bytes(eth(1) / ARP(pdst="10.0.0.2"))))
    out.append((1, bytes(eth(1) / IP(src="10.0.0.1", dst="10.9.9.9") / UDP())))  # no route
    whole = bytes(eth(1) / IP(src="10.0.0.1", dst="10.0.0.2") / TCP() / bytes(20))
    out += [(1, whole[:n]) for n in (14, 20, 34, 40)]  # truncated headers
    for sport in range(8):  # an ECMP group: the selector's hash must agree too
        p = eth(3) / IP(src="10.0.0.3", dst="10.7.0.1", tos=1) / UDP(sport=2000 + sport)
        out.append((3, bytes(p / bytes(20))))
    return out


def barrier(port: int) -> bytes:
    dst = 4 if port != 4 else 1
    p = eth(port) / IP(src=f"10.0.0.{port}", dst=f"10.0.0.{dst}") / UDP(dport=BARRIER_PORT)
    return bytes(p / b"barrier")


def is_barrier(frame: bytes) -> bool:
    p = Ether(frame)
    return UDP in p and p[UDP].dport == BARRIER_PORT and bytes(p[UDP].payload) == b"barrier"


def exchange(tb: Testbed, port: int, frame: bytes) -> list[tuple[int, bytes]]:
    """Send `frame` into `port`; every frame it produced, once a barrier behind it is out."""
    tb.send(port, frame)
    tb.send(port, barrier(port))
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while not any(is_barrier(f) for _, f in out):
        assert time.monotonic() < deadline, f"the barrier behind a packet into {port} was lost"
        out += tb.collect(quiet_s=0.05)
    out += tb.collect(quiet_s=0.1)  # stragglers on other egress ports
    return [(p, f) for p, f in out if not is_barrier(f)]


def program(tb: Testbed) -> None:
    c = tb.client
    c.insert(c.group(enc.ECMP_SELECTOR, 500, [1, 2, 4]))
    prefix = int.from_bytes(bytes([10, 7, 0, 0]), "big")
    c.insert(c.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (prefix, 16)}, group=500))
    always = enc.encode_thresholds(0, 1, 1.0)
    for port in (2, 3):  # ports 2 and 3 mark whatever waits; 1 and 4 never mark
        c.packet_out(enc.ecn_config_payload(port, always), opcode=enc.OP_SET_ECN)
        assert c.packet_in(timeout_s=5).metadata["reason"] == enc.REASON_CONFIG_ACK
    c.packet_out(enc.interval_payload(INTERVAL_S), opcode=enc.OP_SET_INTERVAL)
    assert c.packet_in(timeout_s=5).metadata["reason"] == enc.REASON_CONFIG_ACK
    c.enable_digest(enc.DIGEST)


def run(target: str) -> dict:
    with Testbed(target, PORTS, f"df{target[0]}") as tb:
        program(tb)
        tb.collect(quiet_s=0.2)  # opens the far ends' sockets; nothing may be waiting yet
        outputs = [exchange(tb, port, frame) for port, frame in packets()]
        # telemetry: close the interval the packets above opened, then 30 packets from two
        # senders to port 4 within one interval, then one more packet to close it
        closer = bytes(eth(1) / IP(src="10.0.0.1", dst="10.0.0.4") / UDP())
        time.sleep(INTERVAL_S + 0.05)
        tb.send(1, closer)
        tb.collect(quiet_s=0.1)
        list(tb.client.drain_digests(wait_s=0.3))
        for i in range(30):
            src = 1 + i % 2
            p = eth(src) / IP(src=f"10.0.0.{src}", dst="10.0.0.4", tos=2) / UDP() / bytes(200)
            tb.send(src, bytes(p))
        tb.collect(quiet_s=0.1)
        time.sleep(INTERVAL_S)
        tb.send(1, closer)
        tb.collect(quiet_s=0.1)
        digests = [d for d in tb.client.drain_digests(wait_s=1.0) if d["port"] == 4]
        drops = [tb.client.read_counter(enc.DROP_COUNTER, i)[0] for i in range(4)]
    return {"outputs": outputs, "digests": digests, "drops": drops}


@pytest.fixture(scope="module")
def both() -> dict[str, dict]:
    return {t: run(t) for t in ("embedded", "bmv2")}


def test_every_packet_leaves_the_same_way_on_both_targets(both):
    sent = packets()
    emb, ref = both["embedded"]["outputs"], both["bmv2"]["outputs"]
    assert len(emb) == len(ref) == len(sent)
    for (port, frame), e, r in zip(sent, emb, ref, strict=True):
        assert sorted(e) == sorted(r), f"packet into port {port}: {Ether(frame).summary()}"
    assert sum(len(o) for o in ref) >= 12  # the valid packets did come out
    # drops by reason (unknown_dst, ttl_expired, not_ipv4, malformed) agree
    assert both["embedded"]["drops"] == both["bmv2"]["drops"]
    assert all(n > 0 for n in both["bmv2"]["drops"])


def test_digests_agree_on_every_counter(both):
    emb, ref = both["embedded"]["digests"], both["bmv2"]["digests"]
    assert len(emb) == len(ref) == 1
    timing = {"interval_us", "qdepth_sum_bytes", "qdepth_samples", "qdepth_max_bytes"}
    assert {k: v for k, v in emb[0].items() if k not in timing} == {
        k: v for k, v in ref[0].items() if k not in timing
    }
    assert emb[0]["tx_pkts"] == 31  # the first closer and the 30
