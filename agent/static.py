"""The static ECN baselines the papers compare against (ACC §5.1, GraphCC §4.2).

    SECN1  DCQCN paper:            kmin = 5 KB, kmax = 200 KB, pmax = 1%
    SECN2  HPCC / Alibaba:         kmin = 100 KB·BW/25G, kmax = 400 KB·BW/25G, pmax = 20%
    SECN0  DCTCP:                  kmin = kmax = C·RTT·λ (a step at K), λ = 1/7 (DCTCP §3.4:
                                   K > C·RTT/7 keeps the link busy), pmax = 100%

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


@dataclass(frozen=True)
class StaticPolicy:
    """Always the same preset, scaled to each port's speed."""

    preset: str

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(
                f"unknown static preset {self.preset!r}; choose from {sorted(PRESETS)}"
            )

    @property
    def name(self) -> str:
        return f"static:{self.preset}"

    def act(self, history: PortTelemetry) -> EcnThresholds:
        return PRESETS[self.preset](jnp.asarray(history.link_bps)[-1])
