"""What keeps a learning agent from hurting the fabric.

- `check_telemetry`: a digest that cannot be real (zero or negative interval, more bytes
  than the link can carry — a wrapped or corrupted counter —, more marks than packets, a
  port the topology does not have) is rejected with the reason.
- `clamp`: 0 <= kmin <= kmax <= buffer and pmax in [0, 1]; NaN or inf raises.
- `Guard`: the fallback state machine. The agent is benched — thresholds go back to the
  static preset and the log says why — when its output is unusable, when telemetry is
  bogus, or when its reward stays below the static baseline's for `fallback_after`
  consecutive intervals. The baseline is the reward measured while the static preset
  ran (the first `baseline_intervals` intervals run the preset for exactly that).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from ecntune.agent.telemetry import EcnThresholds, PortTelemetry

log = logging.getLogger("ecntune.controller")

LINE_RATE_SLACK = 1.5  # a port may report up to 1.5x line rate (interval jitter) before it is bogus


def check_telemetry(t: PortTelemetry, ports: set[int], port: int) -> str | None:
    """Why this interval's counters cannot be real, or None when they can."""
    if port not in ports:
        return f"digest for port {port}, which the topology does not have"
    if not t.interval_s > 0:
        return f"port {port}: interval of {t.interval_s} s"
    capacity = t.link_bps / 8 * t.interval_s * LINE_RATE_SLACK + 10_000
    if t.tx_bytes > capacity:
        return f"port {port}: {t.tx_bytes:.0f} B in {t.interval_s:.4f} s exceeds the link"
    if t.marked_pkts > t.tx_pkts or t.marked_bytes > t.tx_bytes:
        return f"port {port}: more marked than sent"
    if t.qdepth_samples > t.tx_pkts:
        return f"port {port}: more queue samples than packets"
    return None


def clamp(th: EcnThresholds, buffer_bytes: float) -> EcnThresholds:
    """Make any setting safe to write; raises ValueError on NaN/inf (a diverged agent)."""
    arrays = [np.asarray(x, dtype=np.float64) for x in th]
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("the agent produced non-finite thresholds")
    kmax = np.clip(arrays[1], 1, buffer_bytes)
    kmin = np.clip(arrays[0], 0, kmax)
    pmax = np.clip(arrays[2], 0, 1)
    return EcnThresholds(kmin, kmax, pmax)


@dataclass
class Guard:
    fallback_after: int
    baseline_intervals: int
    mode: str = "baseline"  # baseline -> agent -> fallback (sticky)
    reason: str = ""
    intervals: int = 0
    baseline_sum: float = 0.0
    baseline_n: int = 0
    below: int = 0
    history: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.baseline_intervals == 0 and self.mode == "baseline":
            self.mode = "agent"

    @property
    def agent_active(self) -> bool:
        return self.mode == "agent"

    @property
    def baseline(self) -> float:
        return self.baseline_sum / self.baseline_n if self.baseline_n else math.nan

    def fall_back(self, reason: str) -> None:
        if self.mode != "fallback":
            log.warning("falling back to the static preset: %s", reason)
            self.history.append(("fallback", reason))
        self.mode, self.reason = "fallback", reason

    def record(self, reward: float | None) -> None:
        """One interval's mean reward over active ports (None when every port was idle)."""
        self.intervals += 1
        if self.mode == "baseline":
            if reward is not None:
                self.baseline_sum += reward
                self.baseline_n += 1
            if self.intervals >= self.baseline_intervals:
                self.mode = "agent"
                self.history.append(("agent", f"baseline reward {self.baseline:.3f}"))
            return
        if self.mode != "agent" or reward is None or not self.baseline_n:
            return
        self.below = self.below + 1 if reward < self.baseline else 0
        if self.below >= self.fallback_after:
            self.fall_back(
                f"reward below the static baseline ({self.baseline:.3f}) "
                f"for {self.below} consecutive intervals"
            )
