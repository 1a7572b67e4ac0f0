"""The static ECN baselines the papers compare against (ACC §5.1, GraphCC §4.2).

    SECN1  DCQCN paper:            kmin = 5 KB, kmax = 200 KB, pmax = 1%
    SECN2  HPCC / Alibaba:         kmin = 100 KB·BW/25G, kmax = 400 KB·BW/25G, pmax = 20%
    SECN0  DCTCP:                  kmin = kmax = C·RTT·λ (a step at K), λ = 1/7 (DCTCP §3.4:
                                   K > C·RTT/7 keeps the link busy), pmax = 100%

"static:<kmin>,<kmax>,<pmax>" fixes explicit values instead (kmin and kmax in bytes, or
with a KB/MB suffix; the same on every port).

They are policies like any learned one (see agent/policy.py), so the controller and the
simulator treat "static" and "learned" the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from ecntune.agent.actions import KB
from ecntune.agent.telemetry import Array, EcnThresholds, PortTelemetry

DCTCP_LAMBDA = 1 / 7


def secn1(link_bps: Array) -> EcnThresholds:
    ones = jnp.ones_like(jnp.asarray(link_bps, jnp.float32))
    return EcnThresholds(5 * KB * ones, 200 * KB * ones, 0.01 * ones)


def secn2(link_bps: Array) -> EcnThresholds:
    scale = jnp.asarray(link_bps, jnp.float32) / 25e9
    return EcnThresholds(100 * KB * scale, 400 * KB * scale, 0.2 * jnp.ones_like(scale))


def secn0(link_bps: Array, rtt_s: float = 100e-6) -> EcnThresholds:
    k = jnp.asarray(link_bps, jnp.float32) / 8 * rtt_s * DCTCP_LAMBDA
    return EcnThresholds(k, k, jnp.ones_like(k))


PRESETS = {"secn0": secn0, "secn1": secn1, "secn2": secn2}


def parse_bytes(text: str) -> float:
    """'20KB' -> 20000.0 (KB as the papers use it, 1000 bytes), '1.5MB', '3000'."""
    t = text.strip().upper()
    for suffix, scale in (("MB", 1000 * KB), ("KB", KB), ("B", 1)):
        if t.endswith(suffix):
            return float(t[: -len(suffix)]) * scale
    return float(t)


def explicit(setting: str) -> EcnThresholds:
    """'kmin,kmax,pmax' as scalars; ValueError with what is wrong."""
    parts = setting.split(",")
    if len(parts) != 3:
        raise ValueError(f"an explicit setting is 'kmin,kmax,pmax', got {setting!r}")
    try:
        kmin, kmax, pmax = parse_bytes(parts[0]), parse_bytes(parts[1]), float(parts[2])
    except ValueError:
        raise ValueError(f"cannot read {setting!r} as 'kmin,kmax,pmax'") from None
    if not 0 <= kmin <= kmax or not 0 <= pmax <= 1:
        raise ValueError(f"need 0 <= kmin <= kmax and 0 <= pmax <= 1, got {setting!r}")
    return EcnThresholds(kmin, kmax, pmax)


@dataclass(frozen=True)
class StaticPolicy:
    """Always the same setting: a preset scaled to each port's speed, or explicit values."""

    preset: str

    def __post_init__(self) -> None:
        if self.preset not in PRESETS and "," not in self.preset:
            raise ValueError(
                f"unknown static preset {self.preset!r}; choose from {sorted(PRESETS)} "
                "or give 'kmin,kmax,pmax'"
            )
        if "," in self.preset:
            explicit(self.preset)

    @property
    def name(self) -> str:
        return f"static:{self.preset}"

    def act(self, history: PortTelemetry) -> EcnThresholds:
        link_bps = jnp.asarray(history.link_bps)[-1]
        if self.preset in PRESETS:
            return PRESETS[self.preset](link_bps)
        ones = jnp.ones_like(jnp.asarray(link_bps, jnp.float32))
        return EcnThresholds(*(v * ones for v in explicit(self.preset)))
