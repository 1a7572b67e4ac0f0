"""The static ECN baselines the papers compare against (ACC §5.1, GraphCC §4.2).

    SECN1  DCQCN paper:            kmin = 5 KB, kmax = 200 KB, pmax = 1%
    SECN2  HPCC / Alibaba:         kmin = 100 KB·BW/25G, kmax = 400 KB·BW/25G, pmax = 20%
    SECN0  DCTCP:                  kmin = kmax = C·RTT·λ (a step at K), λ = 1/7 (DCTCP §3.4:
                                   K > C·RTT/7 keeps the link busy), pmax = 100%

"static:<kmin>,<kmax>,<pmax>" fixes explicit values instead: kmin and kmax in bytes (or
with a KB/MB suffix; the same on every port) or in units of the action template's α with
an `a` suffix ("static:1a,8a,0.2": kmin = α, kmax = 8α of each port's own speed, as the
agents' actions scale).

`GRID` is the evaluation protocol's static grid (issue 14): the settings an operator could
deploy, drawn from the action template, that every learned policy is compared against as
"the best static setting in hindsight". It is fixed here, before any evaluation:
kmin = α·2^n < kmax = α·2^m for 0 <= n < m <= 5 at pmax 0.2 and 1.0 (30 RED ramps) and the
six DCTCP-style steps kmin = kmax = α·2^n, n <= 5 (pmax is irrelevant for a step): 36
settings, from 1α to 32α (20 KB to 640 KB at 25 Gbit/s).

`GRID_BELOW_ALPHA` extends it downwards (added 2026-11-27, before it ran on any held-out
episode): on testbed24's held-out mix GraphCC held settings below α that, run as statics,
beat every setting of `GRID` (docs/results, "GraphCC on testbed24's held-out mix"), so the
grid's best was not the strongest static an operator could pick. Steps at α/8, α/4, α/2,
ramps from each of those to twice and four times it at pmax 0.2 and 1.0, and the
template's zero level (mark as soon as a byte waits): 16 settings, from 1 byte to 2α. It is
a separate group so that outcomes cached for `GRID` stay valid (agent/evaluate.py).

`GRID_LOW_PMAX` adds `GRID`'s 15 ramps at pmax 0.1 (added 2026-11-27, before it ran as a
grid on any episode): the pmax of ACC's and PET's action template (`--pmax 0.1,1.0`) that
`GRID` lacks. On GraphCC's unseen cases ACC's frozen settings `1a,8a,0.1`, `1a,16a,0.1`
(WebSearch 60 % + 16:1) and `16a,32a,0.1` (one uplink down) delivered every preset's
goodput (within 0.01 %) at lower mice slowdowns than SECN1 and SECN2 (docs/results):
gentle ramps are where the statics' frontier is at high goodput, and a grid without them
flatters an agent there.

`PROTOCOL_GRID` is the three together, what the protocol runs beside SECN0-2.

They are policies like any learned one (see agent/policy.py), so the controller and the
simulator treat "static" and "learned" the same way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ecntune.agent.actions import KB, alpha_bytes, in_alpha, kmax_in_bytes
from ecntune.telemetry import Array, EcnThresholds, PortTelemetry

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
GRID_LEVELS = 6
GRID_PMAX = (0.2, 1.0)


def _ramps(pmaxes: tuple[float, ...]) -> list[str]:
    """Every ramp kmin < kmax over the grid's power-of-two levels, each pmax in turn."""
    return [f"{2**n}a,{2**m}a,{p:g}" for n in range(GRID_LEVELS)
            for m in range(n + 1, GRID_LEVELS) for p in pmaxes]  # fmt: skip


GRID = tuple(_ramps(GRID_PMAX) + [f"{2**n}a,{2**n}a,1" for n in range(GRID_LEVELS)])
GRID_BELOW_ALPHA = tuple(
    ["0a,0a,1"]
    + [f"{2.0**-n:g}a,{2.0**-n:g}a,1" for n in (3, 2, 1)]
    + [f"{2.0**-n:g}a,{2.0 ** (k - n):g}a,{p:g}"
       for n in (3, 2, 1) for k in (1, 2) for p in GRID_PMAX]
)  # fmt: skip
GRID_LOW_PMAX = tuple(_ramps((0.1,)))
# the extensions by the name `ecntune eval --extend-grid` gives them
GRID_EXTENSIONS = {"below-alpha": GRID_BELOW_ALPHA, "low-pmax": GRID_LOW_PMAX}
# derived, so an extension added above is in the protocol grid too
PROTOCOL_GRID = (*GRID, *(s for group in GRID_EXTENSIONS.values() for s in group))


def parse_bytes(text: str) -> float:
    """'20KB' -> 20000.0 (KB as the papers use it, 1000 bytes), '1.5MB', '3000'."""
    t = text.strip().upper()
    for suffix, scale in (("MB", 1000 * KB), ("KB", KB), ("B", 1)):
        if t.endswith(suffix):
            return float(t[: -len(suffix)]) * scale
    return float(t)


def explicit(setting: str, link_bps: Array = 25e9) -> EcnThresholds:
    """'kmin,kmax,pmax' for ports of speed `link_bps` (α units scale with it, and 0a is the
    template's zero level; byte values do not scale, and a kmax of 0 bytes turns marking
    off); ValueError with what is wrong."""
    parts = setting.split(",")
    if len(parts) != 3:
        raise ValueError(f"an explicit setting is 'kmin,kmax,pmax', got {setting!r}")
    alpha_units = parts[0].strip().endswith("a")
    if alpha_units != parts[1].strip().endswith("a"):
        raise ValueError(f"give kmin and kmax both in α units or both in bytes, got {setting!r}")
    if alpha_units:
        kmin, kmax, pmax = in_alpha(setting)  # read and checked as a rule's or template's are
        scale = alpha_bytes(link_bps)
        high = kmax_in_bytes(kmax, scale)
    else:
        try:
            kmin, kmax, pmax = parse_bytes(parts[0]), parse_bytes(parts[1]), float(parts[2])
        except ValueError:
            raise ValueError(f"cannot read {setting!r} as 'kmin,kmax,pmax'") from None
        if not 0 <= kmin <= kmax or not 0 <= pmax <= 1:
            raise ValueError(f"need 0 <= kmin <= kmax and 0 <= pmax <= 1, got {setting!r}")
        scale, high = 1.0, kmax
    ones = jnp.ones_like(jnp.asarray(link_bps, jnp.float32))
    return EcnThresholds(kmin * scale * ones, high * ones, pmax * ones)


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
        return _settings(self.preset, history.link_bps)


@functools.partial(jax.jit, static_argnums=0)
def _settings(preset: str, link_bps_history: Array) -> EcnThresholds:
    """A static policy's answer for the ports' latest speeds, compiled once per preset and
    port count: the controller calls it every interval (no op-by-op JAX there)."""
    return thresholds_of(preset, jnp.asarray(link_bps_history)[-1])


def thresholds_of(setting: str, link_bps: Array) -> EcnThresholds:
    """A static setting (a preset's name or 'kmin,kmax,pmax') for ports of speed `link_bps`."""
    return PRESETS[setting](link_bps) if setting in PRESETS else explicit(setting, link_bps)
