"""The published DCQCN fluid model, the reference the simulator's DCQCN is checked against.

The fluid model of Zhu et al., "Congestion Control for Large-Scale RDMA Deployments"
(SIGCOMM 2015), as analysed in Zhu et al., "ECN or Delay" (CoNEXT 2016): N flows share
one bottleneck of capacity C whose RED line marks with probability p(q). Per flow, rates
in packets/s, p and Rc seen one feedback delay τ* late:

    a  = 1 − (1−p)^(τ·Rc)                       a CNP within a CNP interval τ
    a' = 1 − (1−p)^(τ'·Rc)                      a CNP within an alpha interval τ'
    d  = p / ((1−p)^(−T·Rc) − 1)                rate-increase timer rounds, per packet
    e  = d · (1−p)^(F·T·Rc)                     ... those past F rounds of fast recovery
    h  = d · (1−p)^(2F·T·Rc)                    ... those past 2F rounds (hyper increase)
    dα/dt  = g/τ' · (a' − α)
    dRt/dt = −(Rt − Rc)·a/τ + R_AI·Rc·e + R_HAI·Rc·h
    dRc/dt = −Rc·α·a/(2τ) + (Rt − Rc)/2 · Rc·d
    dq/dt  = N·Rc − C        (q ≥ 0)

The paper's byte counter adds b, c terms like d, e with B packets in place of T·Rc; the
simulator's DCQCN (sim/transport.py) has none (B = ∞, so they vanish). The published
equations have no hyper increase either; the simulator's DCQCN adds R_HAI from its 2F-th
timer round, which the h term models (`Bottleneck(hyper_increase=False)` drops it: the
equations as published). Every constant is taken from sim/transport.py, so the two are
one algorithm at two levels of detail.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ecntune.sim import transport
from ecntune.sim.network import red_probability
from ecntune.topology import MTU_BYTES

TAU = transport.DCQCN_CNP_INTERVAL_S
TAU_ALPHA = transport.DCQCN_ALPHA_INTERVAL_S
TIMER = transport.DCQCN_INCREASE_INTERVAL_S
F = transport.DCQCN_FAST_RECOVERY
G = transport.DCQCN_G


class Bottleneck(NamedTuple):
    """N long DCQCN flows into one RED-marked port (bytes and bytes/s, as the simulator)."""

    n_flows: int
    capacity: float
    line_rate: float  # each sender's NIC: sets R_AI and the starting rate
    kmin: float
    kmax: float
    pmax: float
    hyper_increase: bool = True  # the h term (the simulator's; not in the published model)

    def checked(self) -> Bottleneck:
        """Itself, or a ValueError naming what makes the model meaningless."""
        if self.n_flows < 1 or self.capacity <= 0 or self.line_rate <= 0:
            raise ValueError(f"need flows, capacity and line rate > 0: {self}")
        if not 0 <= self.kmin < self.kmax or not 0 < self.pmax <= 1:
            raise ValueError(f"need 0 <= kmin < kmax and 0 < pmax <= 1: {self}")
        return self


class FixedPoint(NamedTuple):
    p: float  # marking probability
    alpha: float
    rate: float  # Rc = C/N, bytes/s
    target: float  # Rt, bytes/s
    queue: float  # where the RED line gives p, bytes


class Trace(NamedTuple):
    t: jnp.ndarray  # seconds
    queue: jnp.ndarray  # bytes
    rate: jnp.ndarray  # Rc per flow, bytes/s
    alpha: jnp.ndarray


def _rounds(p: jnp.ndarray, rc: jnp.ndarray):
    """(a, a', d, e, h) for marking probability p and rate rc (packets/s); exact at p = 0."""
    log1m = jnp.log1p(-jnp.minimum(p, 1 - 1e-6))
    a = -jnp.expm1(TAU * rc * log1m)
    a_alpha = -jnp.expm1(TAU_ALPHA * rc * log1m)
    d_unmarked = 1 / jnp.maximum(TIMER * rc, 1e-12)  # p → 0: one round per T·Rc packets
    d = jnp.where(p > 0, p / jnp.expm1(-TIMER * rc * log1m), d_unmarked)
    e = d * jnp.exp(F * TIMER * rc * log1m)
    h = d * jnp.exp(2 * F * TIMER * rc * log1m)
    return a, a_alpha, d, e, h


def _increase(link: Bottleneck, rc_late: jnp.ndarray, e: jnp.ndarray, h: jnp.ndarray):
    """Rt's growth per second (packets/s²): additive, and hyper past 2F rounds if modelled."""
    r_ai = link.line_rate * transport.DCQCN_AI_OF_LINE / MTU_BYTES
    r_hai = link.line_rate * transport.DCQCN_HAI_OF_LINE / MTU_BYTES
    return rc_late * (r_ai * e + link.hyper_increase * r_hai * h)


def fixed_point(link: Bottleneck) -> FixedPoint:
    """Set every derivative to zero at Rc = C/N: dα = 0 gives α = a'; dRt = 0 gives
    Rt − Rc = τ·I/a, I Rt's growth (R_AI·Rc·e + R_HAI·Rc·h); with that, dRc = 0 leaves
    α·a² = τ²·d·I, whose left side grows and right side shrinks with p — one root, found
    by bisection on log p."""
    rc = link.checked().capacity / link.n_flows / MTU_BYTES

    def excess(log_p: float) -> float:
        a, a_alpha, d, e, h = _rounds(jnp.exp(log_p), rc)
        return float(a_alpha * a * a - TAU**2 * d * _increase(link, rc, e, h))

    lo, hi = jnp.log(1e-12), 0.0  # p from 1e-12 to 1
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    p = float(jnp.exp((lo + hi) / 2))
    a, a_alpha, _, e, h = _rounds(jnp.asarray(p), rc)
    target = rc + TAU * float(_increase(link, rc, e, h)) / float(a)
    on_slope = min(p / link.pmax, 1.0)
    return FixedPoint(
        p=p,
        alpha=float(a_alpha),
        rate=rc * MTU_BYTES,
        target=target * MTU_BYTES,
        queue=link.kmin + (link.kmax - link.kmin) * on_slope,
    )


@functools.partial(jax.jit, static_argnames=("link", "steps", "delay_steps"))
def _integrate(link: Bottleneck, steps: int, delay_steps: int, dt: float) -> Trace:
    c = link.capacity / MTU_BYTES
    line = link.line_rate / MTU_BYTES

    def step(carry, i):
        rc, rt, alpha, q, p_hist, rc_hist = carry
        slot = i % delay_steps
        p_late, rc_late = p_hist[slot], rc_hist[slot]  # written delay_steps steps ago
        a, a_alpha, d, e, h = _rounds(p_late, rc_late)
        d_alpha = G / TAU_ALPHA * (a_alpha - alpha)
        d_rt = -(rt - rc) * a / TAU + _increase(link, rc_late, e, h)
        d_rc = -rc * alpha * a / (2 * TAU) + (rt - rc) / 2 * rc_late * d
        rc = jnp.clip(rc + dt * d_rc, 0.0, line)
        rt = jnp.clip(rt + dt * d_rt, rc, line)
        alpha = jnp.clip(alpha + dt * d_alpha, 0.0, 1.0)
        q = jnp.maximum(q + dt * (link.n_flows * rc - c), 0.0)
        p_now = red_probability(q * MTU_BYTES, link.kmin, link.kmax, link.pmax)
        carry = (rc, rt, alpha, q, p_hist.at[slot].set(p_now), rc_hist.at[slot].set(rc))
        return carry, (q * MTU_BYTES, rc * MTU_BYTES, alpha)

    fair = jnp.asarray(c / link.n_flows)
    history = jnp.zeros(delay_steps)
    start = (fair, fair, jnp.asarray(1.0), jnp.asarray(0.0))
    _, (queue, rate, alpha) = jax.lax.scan(
        step, (*start, history, history + fair), jnp.arange(steps)
    )
    return Trace(t=(jnp.arange(steps) + 1) * dt, queue=queue, rate=rate, alpha=alpha)


def integrate(
    link: Bottleneck, feedback_delay_s: float, duration_s: float, dt: float = 1e-6
) -> Trace:
    """The delay-differential equations above by explicit Euler steps of `dt`; the feedback
    delay is the flows' base RTT (marks reach the sender one RTT late). Every flow starts
    at its fair share C/N with Rt = Rc, α = 1 and an empty queue: what is compared is the
    settled regime, and from line rate the published equations (no hyper increase) would
    take ~0.4 s at 10 Gbit/s to climb back from the first cuts by additive increase alone."""
    if not 0 < dt <= min(feedback_delay_s, duration_s):
        raise ValueError(f"need 0 < dt <= feedback delay and duration, got dt={dt}")
    delay_steps = max(1, round(feedback_delay_s / dt))
    return _integrate(link.checked(), round(duration_s / dt), delay_steps, dt)
