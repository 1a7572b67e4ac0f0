"""Observations from telemetry: ACC's (qlen, txRate, marked txRate, ECN setting) per interval,
PET's adds incast degree and the elephant share, GraphCC's keeps only the first three, over
the last k intervals. "incast" is PET's and the interval's deepest queue: the two signals the
hand-written incast rule reads (agent/rule.py), so an agent can tell an incast (many senders,
a deep queue) from many small flows (many senders, a shallow one), which the mean queue of
a bursty interval hides (issue 14, docs/results "Agents that see what the rule sees").
The "switch" set is ACC's six of the last interval alone, computed as ecn.p4 computes its
in-switch policy's keys (issue 20): without division, in 8-bit log steps.

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

FeatureSet = Literal["acc", "pet", "incast", "graphcc", "switch"]
HISTORY = 3  # k in ACC §3.3 / PET Eq. 3
MAX_SENDERS = 64  # incast degree saturates here (ACC trains with 2..64 senders)

FEATURE_NAMES = {
    "acc": ("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax"),
    "pet": ("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax", "incast", "elephant"),
    "incast": (
        *("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax", "incast", "elephant"),
        "qmax",
    ),
    # GraphCC §3.3: utilisation, queue length and ECN marking rate, now and p = 2 before
    "graphcc": ("qlen", "tx_rate", "marked_rate"),
    # the keys of ecn.p4's policy_tree, from the interval that just closed
    "switch": ("qlen", "tx_rate", "marked_rate", "kmin", "kmax", "pmax"),
}
KEY_LEVELS = 256  # a switch key is one byte
QLEN_KEY_AT_ALPHA = 128  # p4src/headers.p4: a queue (or threshold) of α bytes keys as 128
FULL_KEY = 255  # a fully used link, or pmax 1.0, keys as 255
PMAX_BP_ONE = 10_000  # pmax 1.0 in the basis points ecn.p4 holds


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


def log2_16(x: Array) -> Array:
    """16·log2(x) rounded down to a sixteenth from x's leading one and the 4 bits below it,
    0 for x < 2: ecn.p4's `log2_16` of the integer round(x), exactly (float32 holds every
    integer below 2^24, and above it float32 values are integers already)."""
    x = jnp.round(jnp.maximum(jnp.asarray(x, jnp.float32), 0.0))
    m, e = jnp.frexp(x)  # x = m·2^e, m in [0.5, 1)
    value = 16 * (e - 1) + jnp.floor((2 * m - 1) * 16).astype(e.dtype)
    return jnp.where(x >= 2, value, 0).astype(jnp.int32)


def log_key(base: int, num: Array, den: Array, offset: Array) -> Array:
    """ecn.p4's `log_key`: base + log2_16(num) - log2_16(den) - offset in 0..255, 0 for num 0."""
    up = base + log2_16(num)
    down = log2_16(den) + jnp.asarray(offset, jnp.int32)
    key = jnp.clip(up - down, 0, KEY_LEVELS - 1)
    return jnp.where(jnp.round(jnp.asarray(num, jnp.float32)) >= 1, key, 0)


def switch_port_class(link_bps: Array) -> tuple[Array, Array]:
    """(log2_alpha, rate_offset): what the controller installs per port speed in ecn.p4's
    policy_port table, 16·log2 of α in bytes and of the link over 8 Mbit/s (0 below)."""
    alpha = jnp.round(alpha_bytes(link_bps))
    rate = jnp.round(16 * jnp.log2(jnp.maximum(jnp.asarray(link_bps, jnp.float32), 8e6) / 8e6))
    return log2_16(alpha), rate.astype(jnp.int32)


def switch_keys(t: PortTelemetry) -> Array:
    """ecn.p4's policy_tree keys for one interval, shape (..., 6), integers 0..255."""
    log2_alpha, rate_offset = switch_port_class(t.link_bps)
    interval_us = jnp.round(jnp.asarray(t.interval_s, jnp.float32) * 1e6)
    keys = [
        jnp.where(
            jnp.asarray(t.qdepth_samples) > 0,
            log_key(QLEN_KEY_AT_ALPHA, t.qdepth_sum_bytes, t.qdepth_samples, log2_alpha),
            0,
        ),
        log_key(FULL_KEY, t.tx_bytes, interval_us, rate_offset),
        log_key(FULL_KEY, t.marked_bytes, interval_us, rate_offset),
        log_key(QLEN_KEY_AT_ALPHA, t.kmin_bytes, 1, log2_alpha),
        log_key(QLEN_KEY_AT_ALPHA, t.kmax_bytes, 1, log2_alpha),
        log_key(FULL_KEY, jnp.asarray(t.pmax, jnp.float32) * PMAX_BP_ONE, 1, log2_16(PMAX_BP_ONE)),
    ]
    return jnp.stack(jnp.broadcast_arrays(*keys), axis=-1)


def port_state(t: PortTelemetry, features: FeatureSet = "acc") -> Array:
    """One interval's state vector per port: shape (..., len(FEATURE_NAMES[features]))."""
    if features == "switch":  # the keys as fractions: distill.quantise gives them back
        return switch_keys(t).astype(jnp.float32) / (KEY_LEVELS - 1)
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
    elif features in ("pet", "incast"):
        cols += [
            jnp.log2(1.0 + jnp.clip(t.senders, 0, MAX_SENDERS)) / jnp.log2(1.0 + MAX_SENDERS),
            jnp.clip(_safe_div(t.elephant_bytes, t.tx_bytes), 0, 1),
        ]
    if features == "incast":
        cols.append(_log_bytes(t.qdepth_max_bytes, alpha))
    return jnp.stack(jnp.broadcast_arrays(*cols), axis=-1)


def observation(history: PortTelemetry, features: FeatureSet = "acc") -> Array:
    """The agent's input from the last k intervals (leading axis k, oldest first).

    Fields have shape (k, ...); the result has shape (..., k * n_features). The switch's
    keys see the last interval alone (ecn.p4 keeps no history).
    """
    if features == "switch":
        return port_state(PortTelemetry(*(jnp.asarray(f)[-1] for f in history)), features)
    states = port_state(history, features)  # (k, ..., F)
    states = jnp.moveaxis(states, 0, -2)  # (..., k, F)
    return states.reshape(*states.shape[:-2], -1)


def observation_size(features: FeatureSet = "acc", k: int = HISTORY) -> int:
    return (1 if features == "switch" else k) * len(FEATURE_NAMES[features])
