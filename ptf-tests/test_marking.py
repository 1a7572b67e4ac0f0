"""RED/ECN marking against the per-port thresholds, and both threshold write paths.

A standing queue needs a port that drains slower than packets arrive: each test slows the
egress queue (set_queue_rate) and sends a burst. The first packet reaches an idle port and
leaves at once, alone (BMv2's queueing: an idle port does not wait); after it, the i-th of
n equal packets leaves (n - 1 - i) packets, i.e. (n - 1 - i) * size bytes, behind it.
"""

from __future__ import annotations

import math

from base import EcnTest
from scapy.layers.inet import IP

ECT0, ECT1, CE, NOT_ECT = 2, 1, 3, 0
SIZE = 100


class MarkingTest(EcnTest):
    def burst_marks(self, n: int, ecn: int = ECT0, pps: int = 50) -> list[int]:
        """ECN bits of a burst of n packets from port 1 to port 2 through a slow queue."""
        self.pps = pps
        self.slow_queue(2, pps)
        self.sent_at = self.burst(1, [self.tcp(1, 2, ecn=ecn, pktlen=SIZE) for _ in range(n)])
        out = self.receive(2, n, timeout=2 + n / pps)
        self.assertEqual(len(out), n, "every packet of the burst must come out")
        return [p[IP].tos & 3 for p in out]

    def assert_marked_where_queued(self, marks: list[int], ecn: int = ECT0) -> None:
        """kmax = 1 byte: every packet of the last burst with anything queued behind it is
        marked; the last one, with nothing behind it, keeps its `ecn` bits.

        The first packet may or may not see the second behind it, depending on when the
        target's egress runs; the packets after it are judged by `queued_behind`. On an
        idle machine the burst is sent in a few ms: that is every packet in the middle."""
        queued_behind = self.queued_behind(self.sent_at, self.pps)
        for i, behind in enumerate(queued_behind, 1):
            if behind:
                self.assertEqual(marks[i], CE, f"packet {i} had packet {i + 1} behind it")
        self.assertEqual(marks[-1], ecn)
        # the burst must have outpaced the drain for most of it, or nothing was tested
        self.assertGreaterEqual(
            sum(queued_behind), 2 * len(queued_behind) // 3, "the sender fell behind the drain"
        )


class NoMarkBelowKmin(MarkingTest):
    def runTest(self) -> None:
        self.route_hosts()
        self.set_ecn(2, kmin=100 * SIZE, kmax=200 * SIZE, pmax=1.0)
        self.assertEqual(self.burst_marks(30), [ECT0] * 30)


class AlwaysMarkAtKmax(MarkingTest):
    """kmax = 1 byte: every packet with anything queued behind it is marked, the last not."""

    def runTest(self) -> None:
        self.route_hosts()
        self.set_ecn(2, kmin=0, kmax=1, pmax=0.0)
        self.assert_marked_where_queued(self.burst_marks(30))


class ProbabilityBetweenThresholds(MarkingTest):
    """Between kmin and kmax a packet is marked with probability pmax*(q-kmin)/(kmax-kmin).

    With kmin = 0 and kmax beyond the deepest queue, the i-th packet of an n-packet burst
    (q = (n-1-i)*SIZE bytes behind it) is marked with probability pmax*q/kmax: the count of
    marks must fall within 4 standard deviations of the sum of those probabilities, and
    the front of each burst (deep queue) must be marked more often than the back.
    """

    def runTest(self) -> None:
        self.route_hosts()
        n, bursts, pmax = 40, 5, 0.8
        kmax = n * SIZE
        self.set_ecn(2, kmin=0, kmax=kmax, pmax=pmax)
        probs = [pmax * (n - 1 - i) * SIZE / kmax for i in range(1, n)]
        expected = bursts * sum(probs)
        sigma = math.sqrt(bursts * sum(p * (1 - p) for p in probs))
        front = back = marked = 0
        for _ in range(bursts):
            marks = [m == CE for m in self.burst_marks(n, pps=25)]
            marked += sum(marks)
            front += sum(marks[1 : n // 2])
            back += sum(marks[n // 2 :])
        self.assertLessEqual(
            abs(marked - expected), 4 * sigma, f"{marked} marked, expected {expected:.1f}"
        )
        self.assertGreater(front, back, "a deeper queue must be marked more often")


class NonEctNeverMarkedAndCePreserved(MarkingTest):
    def runTest(self) -> None:
        self.route_hosts()
        self.set_ecn(2, kmin=0, kmax=1, pmax=1.0)
        self.assertEqual(self.burst_marks(20, ecn=NOT_ECT), [NOT_ECT] * 20)
        self.assert_marked_where_queued(self.burst_marks(20, ecn=ECT1), ecn=ECT1)
        self.set_ecn(2, kmin=10**6, kmax=2 * 10**6, pmax=1.0)
        self.assertEqual(self.burst_marks(20, ecn=CE), [CE] * 20)


class ThresholdUpdateByPacketOut(MarkingTest):
    def runTest(self) -> None:
        self.route_hosts()
        self.set_ecn(2, kmin=10**6, kmax=2 * 10**6, pmax=1.0)
        self.assertNotIn(CE, self.burst_marks(20))
        self.set_ecn(2, kmin=0, kmax=1, pmax=1.0)
        self.assert_marked_where_queued(self.burst_marks(20))


class ThresholdUpdateByRegisterEntry(MarkingTest):
    """RegisterEntry writes (skipped on BMv2, whose P4Runtime server lacks them)."""

    def runTest(self) -> None:
        self.route_hosts()
        if not self.set_ecn_registers(2, kmin=10**6, kmax=2 * 10**6, pmax=1.0):
            self.skipTest("this target's P4Runtime server does not implement RegisterEntry")
        self.assertNotIn(CE, self.burst_marks(20))
        self.assertTrue(self.set_ecn_registers(2, kmin=0, kmax=1, pmax=1.0))
        self.assert_marked_where_queued(self.burst_marks(20))
        self.assertEqual(self.client.read_register("ecn_kmax", 2), 1)
