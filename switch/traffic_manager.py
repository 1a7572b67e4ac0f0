"""simple_switch's traffic manager: one FIFO per egress port with a depth and a drain rate.

Queues only build in a software switch when a port drains slower than packets arrive, so
the rate is what makes ECN marking observable: BMv2 sets it in packets per second over
Thrift (`set_queue_rate`); here it can also be bits per second, which keeps the emulated
link speed right whatever the packet sizes. A packet's departure time is fixed when it is
enqueued, as BMv2's rate-limited queueing logic does: max(now, the time the previous
packet's service ends) — a packet reaching an idle port leaves at once. Depth counts
packets, like BMv2; arrivals to a full queue are dropped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

DEFAULT_DEPTH_PKTS = 64  # simple_switch's default queue depth


@dataclass
class Shaping:
    depth_pkts: int = DEFAULT_DEPTH_PKTS
    rate_pps: float | None = None  # None: unlimited
    rate_bps: float | None = None

    def service_time(self, length: int) -> float:
        if self.rate_bps:
            return length * 8.0 / self.rate_bps
        if self.rate_pps:
            return 1.0 / self.rate_pps
        return 0.0


@dataclass
class PortQueue:
    shaping: Shaping
    items: deque[tuple[float, Any]] = field(default_factory=deque)  # (departure time, packet)
    free_at: float = 0.0  # when the port finishes serving the last packet queued
    enqueued: int = 0
    dropped: int = 0


class TrafficManager:
    def __init__(self) -> None:
        self.default = Shaping()
        self.queues: dict[int, PortQueue] = {}

    def queue(self, port: int) -> PortQueue:
        q = self.queues.get(port)
        if q is None:
            q = self.queues[port] = PortQueue(Shaping(**vars(self.default)))
        return q

    def depth(self, port: int) -> int:
        q = self.queues.get(port)
        return len(q.items) if q else 0

    def enqueue(self, port: int, packet: Any, length: int, now: float) -> bool:
        """Queue a packet; False (and a tail drop counted) when the queue is full."""
        q = self.queue(port)
        if len(q.items) >= q.shaping.depth_pkts:
            q.dropped += 1
            return False
        departure = max(now, q.free_at)
        q.free_at = departure + q.shaping.service_time(length)
        q.items.append((departure, packet))
        q.enqueued += 1
        return True

    def next_departure(self) -> float | None:
        """The earliest time any queued packet may leave (None when every queue is empty)."""
        heads = [q.items[0][0] for q in self.queues.values() if q.items]
        return min(heads) if heads else None

    def departures(self, now: float) -> list[tuple[int, Any, int]]:
        """Packets whose time has come, in departure order: (port, packet, depth left)."""
        out = []
        for port, q in self.queues.items():
            while q.items and q.items[0][0] <= now:
                departure, packet = q.items.popleft()
                out.append((departure, port, packet, len(q.items)))
        out.sort(key=lambda x: x[0])
        return [(port, pkt, left) for _, port, pkt, left in out]

    # -- the runtime control API (set_queue_rate / set_queue_depth) --------------------------

    def _targets(self, port: int | None) -> list[Shaping]:
        if port is None:
            return [self.default, *(q.shaping for q in self.queues.values())]
        return [self.queue(port).shaping]

    def set_rate_pps(self, pps: float, port: int | None = None) -> None:
        if not 0 < pps < math.inf:
            raise ValueError(f"queue rate must be a positive number, got {pps}")
        for s in self._targets(port):
            s.rate_pps, s.rate_bps = pps, None

    def set_rate_bps(self, bps: float, port: int | None = None) -> None:
        if not 0 < bps < math.inf:
            raise ValueError(f"queue rate must be a positive number, got {bps}")
        for s in self._targets(port):
            s.rate_bps, s.rate_pps = bps, None

    def set_depth(self, pkts: int, port: int | None = None) -> None:
        if pkts <= 0:
            raise ValueError(f"queue depth must be positive, got {pkts}")
        for s in self._targets(port):
            s.depth_pkts = pkts
