"""Malformed and truncated packets neither crash the switch nor get forwarded wrongly."""

from __future__ import annotations

import random

import ptf.testutils as tu
from base import EcnTest


class MalformedPacketsAreDropped(EcnTest):
    def runTest(self) -> None:
        self.route_hosts()
        good = self.tcp(1, 2)
        rng = random.Random(7)
        junk = [good[: 14 + 10], good[:14], good[:20], bytes(60)]
        junk += [bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 200))) for _ in range(50)]
        wrong_version = bytearray(good)
        wrong_version[14] = 0x65  # IPv6 version nibble in an IPv4 ethertype frame
        junk.append(bytes(wrong_version))
        for frame in junk:
            tu.send_packet(self, 1, frame)
        # The switch is alive and still forwards correctly.
        tu.send_packet(self, 1, good)
        tu.verify_packet(self, self.forwarded(good, 2), 2)
        tu.verify_no_other_packets(self)
        self.assertGreaterEqual(self.drops("malformed"), 4)
