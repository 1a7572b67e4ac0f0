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
from typing import Any

import numpy as np

from ecntune.telemetry import ELEPHANT_BYTES  # elephants: above 1 MB, as PET counts them

MSS_BYTES = 1448  # TCP payload per 1500-byte packet (with the timestamp option)
HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP 32 per packet
MICE_BYTES = 100e3  # mice: below 100 KB (ACC, PET, GraphCC)


@dataclass(frozen=True)
class SizeBucket:
    name: str
    min_bytes: float  # inclusive
    max_bytes: float  # exclusive


SIZE_BUCKETS = (
    SizeBucket("mice", 0, MICE_BYTES),
    SizeBucket("medium", MICE_BYTES, ELEPHANT_BYTES),
    SizeBucket("elephant", ELEPHANT_BYTES, math.inf),
)
ALL = SizeBucket("all", 0, math.inf)


def ideal_fct(
    size_bytes: np.ndarray, link_bps: np.ndarray | float, base_rtt_s: float, xp: Any = np
) -> np.ndarray:
    """The FCT of each flow alone at line rate: base RTT + wire bytes / bottleneck rate
    (`xp`: numpy, or jax.numpy inside the simulator's jitted reward)."""
    size = xp.asarray(size_bytes, dtype=xp.float64 if xp is np else xp.float32)
    packets = xp.maximum(1.0, xp.ceil(size / MSS_BYTES))
    return base_rtt_s + (size + packets * HEADER_BYTES) * 8.0 / xp.asarray(link_bps)


def slowdown(fct_s: np.ndarray, ideal_s: np.ndarray) -> np.ndarray:
    """FCT / ideal FCT, at least 1 (a flow cannot beat its own line-rate transfer)."""
    return np.maximum(1.0, np.asarray(fct_s, dtype=np.float64) / np.asarray(ideal_s))


def slowdown_stats(x: np.ndarray) -> dict[str, float]:
    """Mean, p50, p95 and p99 as the papers report FCT slowdown (NaN for no flows)."""
    x = np.asarray(x, dtype=np.float64)
    if not x.size:
        return {k: math.nan for k in ("mean", "p50", "p95", "p99")}
    p50, p95, p99 = np.percentile(x, [50, 95, 99])
    return {"mean": float(x.mean()), "p50": float(p50), "p95": float(p95), "p99": float(p99)}


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
        st = slowdown_stats(sd[sel])
        fct_mean = float(fct[sel].mean()) if n else math.nan
        rows.append(BucketSummary(b.name, n, fct_mean, st["mean"], st["p50"], st["p95"], st["p99"]))
    return rows
