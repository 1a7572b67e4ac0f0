"""Observations from telemetry: ACC's (qlen, txRate, marked txRate, ECN setting) per interval,
PET's adds incast degree and the elephant share, GraphCC's keeps only the first three, over
the last k intervals.

Every value is normalised to roughly [0, 1] so one policy serves ports of any speed:
rates are fractions of the link, byte quantities are log2(1 + x/α)/10 with α the action
template's unit (so each template step E(n) is one tenth), counts are log-scaled too.
A bogus interval (zero length, negative counters) yields zeros, never NaN or inf.
"""

from __future__ import annotations

from typing import Literal

import jax.numpy as jnp

from ecntune.agent.actions import alpha_bytes
from ecntune.telemetry import Array, PortTelemetry

FeatureSet = Literal["acc", "pet", "graphcc"]
HISTORY = 3  # k in ACC §3.3 / PET Eq. 3
MAX_SENDERS = 64  # incast degree saturates here (ACC trains with 2..64 senders)

FEATURE_NAMES = {
    "acc": ("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax"),
    "pet": ("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax", "incast", "elephant"),
    # GraphCC §3.3: utilisation, queue length and ECN marking rate, now and p = 2 before
    "graphcc": ("qlen", "tx_rate", "marked_rate"),
}


def _safe_div(num: Array, den: Array) -> Array:
    den = jnp.asarray(den, dtype=jnp.float32)
    return jnp.where(den > 0, jnp.asarray(num, jnp.float32) / jnp.where(den > 0, den, 1.0), 0.0)


def _log_bytes(x: Array, alpha: Array) -> Array:
    return jnp.log2(1.0 + jnp.maximum(x, 0.0) / alpha) / 10.0


def mean_queue_bytes(t: PortTelemetry) -> Array:
    return _safe_div(t.qdepth_sum_bytes, t.qdepth_samples)


def utilisation(t: PortTelemetry, field: Array | None = None) -> Array:
    """Bits sent (or `field` bytes) over the interval as a fraction of the link, in [0, 1]."""
    bits = 8.0 * jnp.asarray(t.tx_bytes if field is None else field, jnp.float32)
    return jnp.clip(_safe_div(bits, t.interval_s * t.link_bps), 0, 1)


def port_state(t: PortTelemetry, features: FeatureSet = "acc") -> Array:
    """One interval's state vector per port: shape (..., len(FEATURE_NAMES[features]))."""
    alpha = alpha_bytes(t.link_bps)
    cols = [
        _log_bytes(mean_queue_bytes(t), alpha),
        utilisation(t),
        utilisation(t, t.marked_bytes),
        _log_bytes(t.kmin_bytes, alpha),
        _log_bytes(t.kmax_bytes, alpha),
        jnp.clip(jnp.asarray(t.pmax, jnp.float32), 0, 1),
    ]
    if features == "graphcc":
        cols = cols[:3]
    elif features == "pet":
        cols += [
            jnp.log2(1.0 + jnp.clip(t.senders, 0, MAX_SENDERS)) / jnp.log2(1.0 + MAX_SENDERS),
            jnp.clip(_safe_div(t.elephant_bytes, t.tx_bytes), 0, 1),
        ]
    return jnp.stack(jnp.broadcast_arrays(*cols), axis=-1)


def observation(history: PortTelemetry, features: FeatureSet = "acc") -> Array:
    """The agent's input from the last k intervals (leading axis k, oldest first).

    Fields have shape (k, ...); the result has shape (..., k * n_features).
    """
    states = port_state(history, features)  # (k, ..., F)
    states = jnp.moveaxis(states, 0, -2)  # (..., k, F)
    return states.reshape(*states.shape[:-2], -1)


def observation_size(features: FeatureSet = "acc", k: int = HISTORY) -> int:
    return k * len(FEATURE_NAMES[features])
