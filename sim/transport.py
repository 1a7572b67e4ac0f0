"""Congestion control of the simulated hosts: how each flow reacts to acks, marks and losses.

All run on per-flow arrays, one call per simulator step, with the acknowledged and
ECN-echoed bytes that arrived in that step (one base RTT after delivery).

- `reno_ecn` and `cubic_ecn`: classic ECN (RFC 3168), what Mininet hosts run here (no DCTCP
  module; Linux's default is cubic): slow start, then additive increase; a window is cut
  once, by half (Reno) or to 0.7 (cubic's β, with its TCP-friendly growth of 3(1−β)/(1+β)
  MSS per RTT: at these RTTs cubic's own curve, K = ∛(W·(1−β)/0.4) seconds to regain W,
  grows slower, so the friendly one governs). Modelled as packets behave, not as a fluid
  rate, because at thresholds of a few packets the difference decides which threshold is
  best (docs/results "The emulation disagrees"):
  * ack-clocked: a flow puts on its NIC, at line rate, what its window lets into flight
    (sent − acked − lost), so a window leaves as a burst and bursts from several senders
    queue, as an incast's first windows do; the other transports send cwnd per RTT;
  * cut at the first echo: each step's feedback holds an echo (a mark or a loss) with
    probability 1 − exp(−m), m its expected marked or lost packets (each packet is marked
    with the RED probability); a window not yet cut (probability `uncut`) is cut then, in
    expectation, and does not grow after (Linux's CWR: once per window, reducing at the
    first ECE, not when the window ends). Slow start ends once a cut is the likelier.
  Both found on a 4 × 64 KB incast through a 20 Mbit/s port at 20.5 ms RTT: ns-3's
  TcpCubic takes 193–206 ms with a 1-packet threshold and 141–146 ms with 16 packets;
  the fluid version took 117 ms at every threshold (it spread each window over the RTT,
  so the first windows never queued, and cut only when a window's acks were all in, after
  these flows had sent everything), this one 142 and 123 ms.
- `dctcp`: DCTCP (Alizadeh et al.): alpha <- (1-g) alpha + g F once per window, F the
  fraction of marked bytes, g = 1/16; cwnd <- cwnd (1 - alpha/2) when the window saw marks.
- `dcqcn`: DCQCN (Zhu et al.) rate control with the HPCC simulator's defaults scaled to the
  line rate: the receiver returns a CNP once a whole marked packet has arrived since the
  last one, at most one per 50 us per flow (the deterministic mean of "a CNP per 50 us
  window with a marked packet": CNPs come at p·R/MTU per second, saturating at 1/50 us,
  so pmax matters as it does for packets); on a CNP Rt = Rc, Rc *= 1 - alpha/2 and
  alpha moves towards 1; alpha decays every 55 us without CNP; every rate-increase period
  Rc moves half-way to Rt (fast recovery, 5 rounds), then Rt grows by R_AI (additive) and
  after 5 more rounds by R_HAI (hyper).

Windows grow only while they limit the flow (`cwnd_limited`, as Linux's
tcp_is_cwnd_limited): a flow held back by its own NIC's line rate does not keep growing.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from ecntune.topology import MTU_BYTES

MSS = 1448.0
INIT_CWND = 10 * MSS  # RFC 6928
DCTCP_G = 1 / 16
DCQCN_G = 1 / 256
DCQCN_CNP_INTERVAL_S = 50e-6
DCQCN_ALPHA_INTERVAL_S = 55e-6
DCQCN_INCREASE_INTERVAL_S = 300e-6
DCQCN_FAST_RECOVERY = 5
DCQCN_AI_OF_LINE = 1 / 5000  # R_AI: 5 Mbit/s at 25 Gbit/s
DCQCN_HAI_OF_LINE = 1 / 500  # R_HAI: 50 Mbit/s
CUBIC_BETA = 717 / 1024  # Linux tcp_cubic.c's beta
TRANSPORTS = ("reno_ecn", "cubic_ecn", "dctcp", "dcqcn")
ACK_CLOCKED = ("reno_ecn", "cubic_ecn")


class CCState(NamedTuple):
    cwnd: jnp.ndarray  # bytes (window transports)
    ssthresh: jnp.ndarray
    alpha: jnp.ndarray
    wnd_size: jnp.ndarray  # cwnd when the current window (one RTT of data) began
    wnd_acked: jnp.ndarray  # bytes acked in the current window
    wnd_marked: jnp.ndarray
    wnd_lost: jnp.ndarray
    rate: jnp.ndarray  # bytes/s (DCQCN current rate Rc)
    target: jnp.ndarray  # bytes/s (DCQCN target rate Rt)
    since_cnp: jnp.ndarray  # seconds since the last CNP (DCQCN)
    since_alpha: jnp.ndarray
    since_increase: jnp.ndarray
    stage: jnp.ndarray  # rate-increase rounds since the last CNP
    marked_since_cnp: jnp.ndarray  # marked (or lost) packets echoed since the last CNP
    resolved: jnp.ndarray  # bytes acked or reported lost (ack-clocked: in flight = sent − this)
    uncut: jnp.ndarray  # classic ECN: probability that the current window was not cut yet


def fresh(line_rate: jnp.ndarray) -> CCState:
    """State of flows that just started (per-flow line rate in bytes/s)."""
    z = jnp.zeros_like(line_rate)
    return CCState(
        cwnd=z + INIT_CWND, ssthresh=z + jnp.inf, alpha=z + 1.0, wnd_size=z + INIT_CWND,
        wnd_acked=z, wnd_marked=z,
        wnd_lost=z, rate=line_rate, target=line_rate, since_cnp=z + 1.0, since_alpha=z,
        since_increase=z, stage=z, marked_since_cnp=z, resolved=z, uncut=z + 1.0,
    )  # fmt: skip


def injectable(
    kind: str, s: CCState, sent: jnp.ndarray, rtt: jnp.ndarray, line_rate: jnp.ndarray, dt: float
) -> jnp.ndarray:
    """Bytes a flow may put on its NIC this step: what its window lets into flight, at line
    rate (ack-clocked transports), or cwnd per RTT (window CC) or Rc (DCQCN) for dt."""
    if kind in ACK_CLOCKED:
        return jnp.minimum(line_rate * dt, jnp.maximum(0.0, s.cwnd - (sent - s.resolved)))
    if kind == "dcqcn":
        return jnp.minimum(s.rate, line_rate) * dt
    return jnp.minimum(s.cwnd / rtt, line_rate) * dt


def cwnd_limited(before: CCState, after: CCState, nic_bdp: jnp.ndarray) -> CCState:
    """A window grows only while it limits the flow (Linux's tcp_is_cwnd_limited): past
    twice what the NIC's line rate lets into flight in one RTT (`nic_bdp`, line rate × the
    flow's current RTT) it stops growing; it is never cut here. Without this, a lone flow
    whose bottleneck is its own NIC slow-starts without a mark to a multi-MB window, then
    floods the first port it shares."""
    cap = jnp.maximum(before.cwnd, 2 * nic_bdp)
    return after._replace(cwnd=jnp.minimum(after.cwnd, cap))


def _window(s: CCState, acked: jnp.ndarray, marked: jnp.ndarray, lost: jnp.ndarray):
    """Accumulate one step of feedback; which flows just completed a window of data."""
    wa, wm, wl = s.wnd_acked + acked, s.wnd_marked + marked, s.wnd_lost + lost
    done = wa >= s.wnd_size
    return wa, wm, wl, done


def _next_window(s: CCState, done, wa, wm, wl, cwnd, **changes) -> CCState:
    """Start a new window where one ended (counters reset, its size the current cwnd)."""
    return s._replace(
        cwnd=cwnd,
        wnd_size=jnp.where(done, cwnd, s.wnd_size),
        wnd_acked=jnp.where(done, 0.0, wa),
        wnd_marked=jnp.where(done, 0.0, wm),
        wnd_lost=jnp.where(done, 0.0, wl),
        **changes,
    )


def _grow(s: CCState, cwnd: jnp.ndarray, acked: jnp.ndarray, mss_per_rtt: float = 1.0):
    """Slow start below ssthresh, `mss_per_rtt` MSS per window above."""
    avoid = cwnd + mss_per_rtt * MSS * acked / jnp.maximum(cwnd, MSS)
    return jnp.where(cwnd < s.ssthresh, cwnd + acked, avoid)


def _classic_ecn(beta: float, mss_per_rtt: float):
    """RFC 3168 window CC cutting to `beta` of its window at the first echo, in expectation
    (the module docstring)."""

    def update(s: CCState, acked, marked, lost, dt, line_rate) -> CCState:
        wa, wm, wl, done = _window(s, acked, marked, lost)
        echo = -jnp.expm1(-(marked + lost) / MTU_BYTES)  # P(this step's feedback has one)
        cut_now = s.uncut * echo
        grown = _grow(s, s.cwnd, acked * s.uncut, mss_per_rtt)  # no growth once cut
        cwnd = jnp.maximum(2 * MSS, grown - cut_now * (1 - beta) * s.cwnd)
        left = s.uncut * (1 - echo)
        ssthresh = jnp.where((s.uncut >= 0.5) & (left < 0.5), cwnd, s.ssthresh)
        return _next_window(
            s, done, wa, wm, wl, cwnd, ssthresh=ssthresh, uncut=jnp.where(done, 1.0, left),
            resolved=s.resolved + acked + lost,
        )  # fmt: skip

    return update


reno_ecn = _classic_ecn(beta=0.5, mss_per_rtt=1.0)
cubic_ecn = _classic_ecn(beta=CUBIC_BETA, mss_per_rtt=3 * (1 - CUBIC_BETA) / (1 + CUBIC_BETA))


def dctcp(s: CCState, acked, marked, lost, dt, line_rate) -> CCState:
    wa, wm, wl, done = _window(s, acked, marked, lost)
    frac = wm / jnp.maximum(wa, 1.0)
    alpha = jnp.where(done, (1 - DCTCP_G) * s.alpha + DCTCP_G * frac, s.alpha)
    cwnd = _grow(s, s.cwnd, acked)
    cut = done & (wm > 0)
    cwnd = jnp.where(cut, jnp.maximum(2 * MSS, s.cwnd * (1 - alpha / 2)), cwnd)
    cwnd = jnp.where(done & (wl > 0), jnp.maximum(2 * MSS, s.cwnd / 2), cwnd)
    ssthresh = jnp.where(cut | (done & (wl > 0)), cwnd, s.ssthresh)
    return _next_window(s, done, wa, wm, wl, cwnd, ssthresh=ssthresh, alpha=alpha)


def dcqcn(s: CCState, acked, marked, lost, dt, line_rate) -> CCState:
    since_cnp = s.since_cnp + dt
    echoed = s.marked_since_cnp + (marked + lost) / MTU_BYTES
    cnp = (echoed >= 1.0) & (since_cnp >= DCQCN_CNP_INTERVAL_S)
    # rate decrease on CNP
    alpha = jnp.where(cnp, (1 - DCQCN_G) * s.alpha + DCQCN_G, s.alpha)
    target = jnp.where(cnp, s.rate, s.target)
    rate = jnp.where(cnp, s.rate * (1 - alpha / 2), s.rate)
    # alpha decays without CNPs
    since_alpha = jnp.where(cnp, 0.0, s.since_alpha + dt)
    decay = since_alpha >= DCQCN_ALPHA_INTERVAL_S
    alpha = jnp.where(decay, (1 - DCQCN_G) * alpha, alpha)
    since_alpha = jnp.where(decay, 0.0, since_alpha)
    # rate increase: fast recovery, additive, hyper
    since_inc = jnp.where(cnp, 0.0, s.since_increase + dt)
    inc = since_inc >= DCQCN_INCREASE_INTERVAL_S
    stage = jnp.where(cnp, 0.0, s.stage + inc)
    r_ai, r_hai = line_rate * DCQCN_AI_OF_LINE, line_rate * DCQCN_HAI_OF_LINE
    target = jnp.where(inc & (stage > DCQCN_FAST_RECOVERY), target + r_ai, target)
    target = jnp.where(inc & (stage > 2 * DCQCN_FAST_RECOVERY), target + r_hai, target)
    target = jnp.minimum(target, line_rate)
    rate = jnp.where(inc, (rate + target) / 2, rate)
    rate = jnp.clip(rate, line_rate / 1000, line_rate)
    return s._replace(
        alpha=alpha, target=target, rate=rate, since_cnp=jnp.where(cnp, 0.0, since_cnp),
        since_alpha=since_alpha, since_increase=jnp.where(inc, 0.0, since_inc), stage=stage,
        marked_since_cnp=jnp.where(cnp, 0.0, echoed),
    )  # fmt: skip


UPDATES = {"reno_ecn": reno_ecn, "cubic_ecn": cubic_ecn, "dctcp": dctcp, "dcqcn": dcqcn}
