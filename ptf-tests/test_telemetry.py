"""Telemetry digests: one per active port per interval, exact counts, incast sketch, elephants."""

from __future__ import annotations

import functools
import operator
import time

import ptf.testutils as tu
from base import EcnTest
from scapy.layers.inet import IP

from ecntune.p4src import encoding as enc
from ecntune.telemetry import ELEPHANT_BYTES

INTERVAL_S = 0.2
FLUSH_BYTES = 100  # the packet that closes an interval opens the next one, and is counted there


class TelemetryTest(EcnTest):
    def setUp(self) -> None:
        super().setUp()
        self.route_hosts()
        self.set_interval(INTERVAL_S)
        self.client.enable_digest(enc.DIGEST, max_timeout_ns=0, max_list_size=1)

    def flush(self, port: int = 2) -> None:
        """Close the current interval: wait it out, then one packet makes ingress report it."""
        time.sleep(INTERVAL_S * 1.2)
        tu.send_packet(self, 1, self.tcp(1, port, sport=9, pktlen=FLUSH_BYTES))
        self.receive(port, 1)

    def digests(self, port: int = 2) -> list[dict[str, int]]:
        return [d for d in self.client.drain_digests(0.5) if d["port"] == port]


class CountsAreExact(TelemetryTest):
    def runTest(self) -> None:
        self.flush()
        self.digests()
        sizes = [100 + 37 * i for i in range(40)]
        pps = 50  # 20 ms a packet: the burst outpaces the drain unless every send stalls
        self.set_ecn(2, kmin=0, kmax=1, pmax=1.0)
        self.slow_queue(2, pps)
        sent_at = self.burst(
            1, [self.tcp(1, 2, ecn=2, pktlen=size, sport=2000 + i) for i, size in enumerate(sizes)]
        )
        out = self.receive(2, len(sizes), timeout=3)
        marked = sum((p[IP].tos & 3) == 3 for p in out)
        self.flush()
        ds = self.digests()
        self.assertGreaterEqual(len(ds), 1)
        self.assertEqual(sum(d["tx_pkts"] for d in ds), len(sizes) + 1)
        self.assertEqual(sum(d["tx_bytes"] for d in ds), sum(sizes) + FLUSH_BYTES)
        self.assertEqual(sum(d["marked_pkts"] for d in ds), marked)
        # kmax = 1 byte: a packet is marked exactly when something queued behind it, which
        # is when the interval's deepest queue is above zero (under stress-ng a sender once
        # fell behind a 5 ms drain on every packet, and nothing queued at all).
        self.assertEqual(max(d["qdepth_max_bytes"] for d in ds) > 0, marked > 0)
        if any(self.queued_behind(sent_at, pps)):
            self.assertGreater(marked, 0, "a packet was sent before the one ahead could leave")
        self.assertTrue(all(d["interval_us"] >= INTERVAL_S * 1e6 for d in ds))
        self.assertEqual((ds[-1]["kmin"], ds[-1]["kmax"]), (0, 1))


class OneDigestPerInterval(TelemetryTest):
    def runTest(self) -> None:
        self.flush()
        self.digests()
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < 5 * INTERVAL_S:
            tu.send_packet(self, 1, self.tcp(1, 2))
            sent += 1
            time.sleep(0.01)
        self.receive(2, sent)
        elapsed = time.monotonic() - start
        ds = self.digests()
        self.assertLessEqual(len(ds), elapsed / INTERVAL_S + 1)
        self.assertGreaterEqual(len(ds), 3)


class IncastDegree(TelemetryTest):
    def runTest(self) -> None:
        for senders in (1, 4, 16):
            self.flush()
            self.digests()  # waits out the interval the flush packet opened (0.5 s quiet)
            for s in range(senders):
                tu.send_packet(self, 1, self.tcp(1, 2, src_ip=f"10.0.1.{s + 1}"))
            self.receive(2, senders)
            self.flush()
            # The first digest is that interval (the flush packet alone), closed by the
            # first sender's packet; the senders' are in the rest: one interval, or more
            # where sending took longer than one (a busy machine), whose sketches OR into
            # the sketch of them all.
            first, *rest = self.digests()
            self.assertEqual(first["tx_pkts"], 1)
            est = enc.senders_from_bitmap(
                functools.reduce(operator.or_, (d["sender_bitmap"] for d in rest))
            )
            tolerance = 0.5 + 0.25 * senders  # well beyond linear counting's error at m = 64
            self.assertLessEqual(
                abs(est - senders), tolerance, f"{senders} senders, estimate {est}"
            )


class ElephantBytesOnlyPastOneMegabyte(TelemetryTest):
    def runTest(self) -> None:
        size, n = 9000, 130  # the flow passes 1 MB at its 112th packet
        self.flush()
        self.digests()
        for _ in range(n):
            tu.send_packet(self, 1, self.tcp(1, 2, pktlen=size, sport=7777))
        self.assertEqual(len(self.receive(2, n, timeout=5)), n)
        self.flush()
        ds = self.digests()
        past = sum(1 for k in range(1, n + 1) if k * size > ELEPHANT_BYTES)
        self.assertEqual(sum(d["elephant_bytes"] for d in ds), past * size)
