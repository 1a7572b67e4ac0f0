"""What keeps a learning agent from hurting the fabric.

- `check_telemetry`: a digest that cannot be real (zero or negative interval, more bytes
  than the link can carry — a wrapped or corrupted counter —, more marks than packets, a
  port the topology does not have) is rejected with the reason.
- `clamp`: 0 <= kmin <= kmax <= buffer and pmax in [0, 1]; NaN or inf raises.
- `Guard`: the fallback state machine. The agent is benched — thresholds go back to the
  static preset and the log says why — when its output is unusable, when telemetry is
  bogus, or when its reward over the last `fallback_after` busy intervals falls clearly
  below the static baseline's. The baseline is the reward the preset earned over the
  first `baseline_intervals` *busy* intervals (the preset runs until it has them).

Why busy intervals, and why a margin: a reward depends on the traffic as much as on the
setting. An idle fabric (no queue, no throughput: before the traffic starts) earns the
latency term in full, a loaded one never does; a baseline measured while idle benched a
shipped agent that beat the preset on the same traffic (issue 16: from 15 s of a 20 s
demo phase, against a baseline of 0.700 that SECN1 itself never reached under load). So
only intervals where some port carries `BUSY_UTILIZATION` of its link count, and the
agent must be worse than the baseline by more than the baseline's own interval-to-interval
spread (`SPREAD_MARGIN` standard deviations, at least `MIN_MARGIN` of its mean), averaged
over a window: what a broken agent (queues at the buffer, a starved link) does at once,
and a working one under a little more load does not.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ecntune.telemetry import EcnThresholds, PortTelemetry

log = logging.getLogger("ecntune.controller")

LINE_RATE_SLACK = 1.5  # a port may report up to 1.5x line rate (interval jitter) before it is bogus
BUSY_UTILIZATION = 0.1  # a port below this share of its link says nothing about the setting
SPREAD_MARGIN = 2.0  # standard deviations of the baseline's per-interval reward
MIN_MARGIN = 0.05  # of the baseline's mean reward, when the baseline hardly varied


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
    fallback_after: int  # busy intervals in the window the agent is judged over
    baseline_intervals: int  # busy intervals under the preset that measure the baseline
    mode: str = "baseline"  # baseline -> agent -> fallback (sticky)
    reason: str = ""
    intervals: int = 0
    baseline_rewards: list[float] = field(default_factory=list)
    recent: deque[float] = field(init=False)
    # every change of mode, in order: (mode entered, why), what telemetry rows and reports show
    transitions: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.fallback_after)
        if self.baseline_intervals == 0 and self.mode == "baseline":
            self.mode = "agent"

    @property
    def agent_active(self) -> bool:
        return self.mode == "agent"

    @property
    def baseline(self) -> float:
        return float(np.mean(self.baseline_rewards)) if self.baseline_rewards else math.nan

    @property
    def margin(self) -> float:
        """How far below the baseline the agent's windowed mean may go before it is benched."""
        spread = float(np.std(self.baseline_rewards)) if self.baseline_rewards else 0.0
        return max(SPREAD_MARGIN * spread, MIN_MARGIN * abs(self.baseline))

    def fall_back(self, reason: str) -> None:
        if self.mode != "fallback":
            log.warning("falling back to the static preset: %s", reason)
            self.transitions.append(("fallback", reason))
        self.mode, self.reason = "fallback", reason

    def record(self, reward: float | None) -> None:
        """One interval's mean reward over busy ports (None when no port was busy)."""
        self.intervals += 1
        if reward is None:
            return
        if self.mode == "baseline":
            self.baseline_rewards.append(reward)
            if len(self.baseline_rewards) >= self.baseline_intervals:
                self.mode = "agent"
                self.transitions.append(
                    ("agent", f"baseline reward {self.baseline:.3f} ± {self.margin:.3f}")
                )
            return
        if self.mode != "agent" or not self.baseline_rewards:
            return
        self.recent.append(reward)
        mean = float(np.mean(self.recent))
        if len(self.recent) == self.fallback_after and mean < self.baseline - self.margin:
            self.fall_back(
                f"mean reward {mean:.3f} over the last {self.fallback_after} busy intervals, "
                f"below the static baseline ({self.baseline:.3f}) by more than {self.margin:.3f}"
            )
