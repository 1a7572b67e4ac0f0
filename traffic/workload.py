"""Flow-size CDFs (WebSearch, DataMining, FB_Hadoop, AliStorage) and Poisson arrivals at a load.

The simulator and the emulated hosts both draw flows from here, so a "60% WebSearch" run
means the same flow sizes and arrival rate in sim/ and in Mininet. Sampling interpolates
linearly between CDF points, as the HPCC simulator's traffic generator does.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

WORKLOADS = ("websearch", "datamining", "fb_hadoop", "alistorage")


@dataclass(frozen=True)
class FlowSizeCDF:
    name: str
    sizes: np.ndarray  # bytes, non-decreasing
    probs: np.ndarray  # cumulative probability in [0, 1], non-decreasing, ends at 1

    @classmethod
    def parse(cls, name: str, text: str) -> FlowSizeCDF:
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                size, pct = (float(x) for x in line.split())
            except ValueError:
                raise ValueError(f"{name}:{lineno}: expected 'size_bytes cdf_percent'") from None
            rows.append((size, pct / 100.0))
        if len(rows) < 2:
            raise ValueError(f"{name}: a CDF needs at least two points")
        sizes, probs = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
        if np.any(np.diff(sizes) < 0) or np.any(np.diff(probs) < 0):
            raise ValueError(f"{name}: sizes and probabilities must be non-decreasing")
        if not np.isclose(probs[-1], 1.0) or probs[0] < 0:
            raise ValueError(f"{name}: the CDF must end at 100%")
        return cls(name, sizes, probs)

    @property
    def mean_bytes(self) -> float:
        """Mean of the piecewise-linear distribution (each segment is uniform)."""
        mids = (self.sizes[1:] + self.sizes[:-1]) / 2
        return float(np.sum(mids * np.diff(self.probs)))

    def capped(self, max_bytes: float) -> FlowSizeCDF:
        """The same distribution with every flow larger than `max_bytes` cut to `max_bytes`.

        Slow emulated links cannot carry WebSearch's 30 MB flows within a short run; the cap
        keeps the shape below it and turns the tail into a point mass, so `mean_bytes` (and
        with it the arrival rate for a load) stays exact.
        """
        if max_bytes >= self.sizes[-1]:
            return self
        if max_bytes <= self.sizes[0]:
            raise ValueError(f"a cap of {max_bytes} bytes is below the smallest flow")
        keep = self.sizes < max_bytes
        p_cap = float(np.interp(max_bytes, self.sizes, self.probs))
        sizes = np.concatenate([self.sizes[keep], [max_bytes, max_bytes]])
        probs = np.concatenate([self.probs[keep], [p_cap, 1.0]])
        return FlowSizeCDF(f"{self.name}<={int(max_bytes)}", sizes, probs)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` flow sizes in bytes (at least 1) by inverse-transform sampling."""
        u = rng.uniform(self.probs[0], 1.0, size=n)
        return np.maximum(1, np.interp(u, self.probs, self.sizes)).astype(np.int64)


def load_cdf(name: str) -> FlowSizeCDF:
    """One of the CDFs shipped in traffic/cdf/ (see WORKLOADS)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {WORKLOADS}")
    text = resources.files("ecntune.traffic").joinpath(f"cdf/{name}.cdf").read_text()
    return FlowSizeCDF.parse(name, text)


def arrival_rate(cdf: FlowSizeCDF, load: float, link_bps: float) -> float:
    """Flows per second one sender must start so its flows fill `load` of its link."""
    if not 0 < load <= 1:
        raise ValueError(f"load must be in (0, 1], got {load}")
    return load * link_bps / 8 / cdf.mean_bytes


def poisson_arrivals(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    """Start times (seconds) of a Poisson process of `rate` per second over `duration_s`."""
    n = rng.poisson(rate * duration_s)
    return np.sort(rng.uniform(0.0, duration_s, size=n))
