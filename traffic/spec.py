"""What traffic a run carries, in the terms both the simulator and the emulation use.

One spec, one set of defaults: a scenario trained in the simulator (`sim/scenario.py
SimScenario`) and a run on the emulated fabric (`fabric/scenario.py Scenario`) both extend
`TrafficSpec`, so "WebSearch at 60 % with 4:1 incasts of 64 KB" means the same flows' shape
on both sides (DESIGN.md: the simulator trains what the emulation runs). Each side adds
only what it alone knows: the simulator its fabric, transport and episode; the emulation
host names, probes and a seed. Fields are keyword-only, so a spec reads as what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ecntune.traffic.workload import WORKLOADS

INCASTS_PER_RUN = 10  # incast_period_s None: ten bursts over the run, as every mix trains with


@dataclass(frozen=True, kw_only=True)
class TrafficSpec:
    """Poisson flows from a workload CDF at a load, with synchronised N:1 incasts on top.

    `switch_to` / `load_to` change the workload / load halfway through (the papers'
    convergence experiments); incast bursts start `incast_from_s` into the run (an incast
    storm that begins mid-run) and recur every `incast_period_s` (None: a tenth of the run).
    """

    workload: str = "websearch"
    load: float = 0.6  # of each sender's link
    incast_degree: int = 0  # N synchronised senders (0: no incast)
    incast_bytes: int = 64_000  # per sender per burst
    incast_period_s: float | None = None
    incast_from_s: float = 0.0
    switch_to: str | None = None
    load_to: float | None = None

    def __post_init__(self) -> None:
        for name in (self.workload, self.switch_to or self.workload):
            if name not in WORKLOADS:
                raise ValueError(f"unknown workload {name!r}; choose one of {WORKLOADS}")
        if self.load < 0 or (self.load_to is not None and self.load_to < 0):
            raise ValueError(f"a load is a share of the link, >= 0; got {self.load}")
        if self.incast_degree < 0 or self.incast_bytes <= 0:
            raise ValueError("an incast needs a degree >= 0 and a positive size per sender")
        if self.incast_period_s is not None and self.incast_period_s <= 0:
            raise ValueError(f"incast_period_s must be positive, got {self.incast_period_s}")
        if self.incast_from_s < 0:
            raise ValueError(f"incast_from_s must be >= 0, got {self.incast_from_s}")

    def traffic_fields(self) -> dict[str, Any]:
        """The spec's own fields, without what a subclass adds: one side's spec becomes
        the other's (a SimScenario's traffic as the simulator's EpisodeTraffic)."""
        return {f.name: getattr(self, f.name) for f in fields(TrafficSpec)}

    @property
    def changes_halfway(self) -> bool:
        """A workload switch or a load step at half the run."""
        return self.switch_to is not None or self.load_to is not None

    def change_at_s(self, duration_s: float) -> float | None:
        """When the traffic changes within a run of `duration_s` (a storm begins, the
        workload or load switches halfway): the first such moment, None if none."""
        times = [duration_s / 2] if self.changes_halfway else []
        if self.incast_bursts(duration_s) and self.incast_from_s > 0:
            times.append(self.incast_from_s)
        return min(times, default=None)

    def describe_change(self) -> str:
        """What changes mid-run, in words: 'an incast storm begins; load 40% → 70%'."""
        parts = []
        if self.incast_degree and self.incast_from_s > 0:
            parts.append(f"{self.incast_degree}:1 incasts begin")
        if self.switch_to is not None:
            parts.append(f"workload {self.workload} → {self.switch_to}")
        if self.load_to is not None:
            parts.append(f"load {self.load:.0%} → {self.load_to:.0%}")
        return "; ".join(parts) or "nothing"

    def incast_period(self, duration_s: float) -> float:
        """Seconds between incast bursts in a run of `duration_s`."""
        return self.incast_period_s or duration_s / INCASTS_PER_RUN

    def incast_bursts(self, duration_s: float) -> int:
        """Bursts that start within the run (the first at `incast_from_s`)."""
        if not self.incast_degree or self.incast_from_s >= duration_s:
            return 0
        return max(1, int((duration_s - self.incast_from_s) / self.incast_period(duration_s)))

    def phases(self, duration_s: float) -> list[tuple[float, float, str, float]]:
        """(start s, length s, workload, load) of the Poisson traffic: one phase, or two
        around the halfway switch."""
        if not self.changes_halfway:
            return [(0.0, duration_s, self.workload, self.load)]
        half = duration_s / 2
        second_load = self.load if self.load_to is None else self.load_to
        second = (half, half, self.switch_to or self.workload, second_load)
        return [(0.0, half, self.workload, self.load), second]
