"""Flow completion time metrics as the papers report them, for emulation and simulation alike.

FCT slowdown is a flow's FCT divided by the FCT the same flow would have alone on an idle
path at line rate: one base RTT plus its bytes on the wire (payload and per-packet headers)
at the path's bottleneck rate, as HPCC's and ACC's analysis scripts compute it. Slowdowns are
reported as mean, median, p95 and p99 per flow-size bucket (mice below 100 KB, elephants
above 1 MB). Everything here takes NumPy arrays (or anything np.asarray accepts, such as JAX
arrays), so the simulator and the emulation summarise their flows with the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MSS_BYTES = 1448  # TCP payload per 1500-byte packet (with the timestamp option)
HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP 32 per packet


@dataclass(frozen=True)
class SizeBucket:
    name: str
    min_bytes: float  # inclusive
    max_bytes: float  # exclusive


SIZE_BUCKETS = (
    SizeBucket("mice", 0, 100e3),
    SizeBucket("medium", 100e3, 1e6),
    SizeBucket("elephant", 1e6, math.inf),
)
ALL = SizeBucket("all", 0, math.inf)


def ideal_fct(
    size_bytes: np.ndarray, link_bps: np.ndarray | float, base_rtt_s: float
) -> np.ndarray:
    """The FCT of each flow alone at line rate: base RTT + wire bytes / bottleneck rate."""
    size = np.asarray(size_bytes, dtype=np.float64)
    packets = np.maximum(1.0, np.ceil(size / MSS_BYTES))
    return base_rtt_s + (size + packets * HEADER_BYTES) * 8.0 / np.asarray(link_bps)


def slowdown(fct_s: np.ndarray, ideal_s: np.ndarray) -> np.ndarray:
    """FCT / ideal FCT, at least 1 (a flow cannot beat its own line-rate transfer)."""
    return np.maximum(1.0, np.asarray(fct_s, dtype=np.float64) / np.asarray(ideal_s))


@dataclass(frozen=True)
class BucketSummary:
    bucket: str
    flows: int
    fct_mean_s: float
    slowdown_mean: float
    slowdown_p50: float
    slowdown_p95: float
    slowdown_p99: float


def summarize(
    size_bytes: np.ndarray,
    fct_s: np.ndarray,
    ideal_s: np.ndarray,
    buckets: tuple[SizeBucket, ...] = (*SIZE_BUCKETS, ALL),
) -> list[BucketSummary]:
    """One row per bucket (NaN statistics where a bucket holds no flow)."""
    size = np.asarray(size_bytes, dtype=np.float64)
    fct = np.asarray(fct_s, dtype=np.float64)
    sd = slowdown(fct, ideal_s)
    rows = []
    for b in buckets:
        sel = (size >= b.min_bytes) & (size < b.max_bytes)
        n = int(sel.sum())
        if n == 0:
            rows.append(BucketSummary(b.name, 0, *([math.nan] * 5)))
            continue
        p50, p95, p99 = np.percentile(sd[sel], [50, 95, 99])
        rows.append(
            BucketSummary(
                b.name,
                n,
                float(fct[sel].mean()),
                float(sd[sel].mean()),
                float(p50),
                float(p95),
                float(p99),
            )
        )
    return rows
