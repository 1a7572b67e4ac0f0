"""ECN action templates: the discrete settings an agent picks from (ACC Eq. 1, PET Eq. 5).

kmin = E(n) = α·2^n bytes, n ∈ 0..9, kmax = E(m) with m ≥ n, pmax ∈ {1%, 5%, 10%, …, 100%}.
α is 20 KB at 25 Gbit/s in the papers and scales with the port's speed; it never drops
below one MTU, because a threshold smaller than one packet cannot be told apart from zero.

The MTU floor puts the template's lowest setting (kmin = kmax = α: mark once a packet
waits behind the one leaving) one packet above the DCTCP step SECN0 on slow links
(C·RTT/7 at 20 Mbit/s is 36 bytes: mark as soon as anything waits), and that step is the
single best static setting of every star8 mix (docs/results). `zero_level` adds E = 0
below α, so an agent can choose it: a zero kmax means one byte, the lowest threshold
there is (a kmax of 0 bytes turns marking off in the P4 program, `red_probability`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ecntune.telemetry import Array, EcnThresholds
from ecntune.topology import MTU_BYTES

KB = 1000
ALPHA_AT_25G_BYTES = 20 * KB
ACC_PMAX = (0.01, *(j * 0.05 for j in range(1, 21)))


def alpha_bytes(link_bps: Array) -> Array:
    """The template's unit α for a port: 20 KB at 25 Gbit/s, proportional, at least one MTU."""
    return jnp.maximum(MTU_BYTES, ALPHA_AT_25G_BYTES * jnp.asarray(link_bps) / 25e9)


class ActionTemplate(NamedTuple):
    """Every action as (kmin, kmax) in units of α and pmax; index = action id."""

    kmin_alpha: np.ndarray
    kmax_alpha: np.ndarray
    pmax: np.ndarray

    @property
    def n_actions(self) -> int:
        return int(self.pmax.shape[0])

    def thresholds(self, action: Array, link_bps: Array) -> EcnThresholds:
        """The setting chosen by `action` (int array) on ports of speed `link_bps`."""
        a = alpha_bytes(link_bps)
        action = jnp.asarray(action)
        return EcnThresholds(
            kmin_bytes=jnp.asarray(self.kmin_alpha)[action] * a,
            kmax_bytes=kmax_in_bytes(jnp.asarray(self.kmax_alpha)[action], a),
            pmax=jnp.asarray(self.pmax)[action],
        )


def kmax_in_bytes(kmax_alpha: Array, alpha: Array) -> Array:
    """kmax in bytes from α units: the zero level is one byte (mark as soon as anything
    waits), never 0 (marking off)."""
    return jnp.maximum(kmax_alpha * alpha, 1.0)


def in_alpha(setting: str) -> tuple[float, float, float]:
    """'kmin,kmax,pmax' with kmin and kmax in units of α ('1a,32a,0.2', '0a' the zero level)
    as numbers: a setting for ports of any speed; ValueError says what is wrong."""
    parts = [f.strip() for f in setting.split(",")]
    if len(parts) != 3 or not (parts[0].endswith("a") and parts[1].endswith("a")):
        raise ValueError(f"give kmin,kmax,pmax in α units (like 1a,8a,0.2), got {setting!r}")
    try:
        kmin, kmax, pmax = float(parts[0][:-1]), float(parts[1][:-1]), float(parts[2])
    except ValueError:
        raise ValueError(f"cannot read {setting!r} as 'kmin,kmax,pmax'") from None
    if not 0 <= kmin <= kmax or not 0 <= pmax <= 1:
        raise ValueError(f"need 0 <= kmin <= kmax and 0 <= pmax <= 1, got {setting!r}")
    return kmin, kmax, pmax


def listed_template(settings: tuple[str, ...]) -> ActionTemplate:
    """Exactly these settings (α units, agent/static.py's notation), in this order: a
    template narrowed to what one question is about, e.g. whether an agent learns when to
    switch between two settings that a rule switches between (docs/results)."""
    if len(settings) < 2:
        raise ValueError(f"a listed template needs at least two settings, got {settings!r}")
    kmin, kmax, pmax = (np.array(c) for c in zip(*map(in_alpha, settings), strict=True))
    return ActionTemplate(kmin, kmax, pmax)


def acc_template(
    levels: int = 10, pmax: tuple[float, ...] = ACC_PMAX, zero_level: bool = False
) -> ActionTemplate:
    """ACC/PET: all (n, m, p) with kmin = 2^n ≤ kmax = 2^m (units of α): 55 × 21 = 1155 actions;
    with `zero_level`, 0 below 2^0 as well (kmin = 0 ramps from an empty queue)."""
    units = ([0.0] if zero_level else []) + [2.0**n for n in range(levels)]
    rows = [(n, m, p) for i, n in enumerate(units) for m in units[i:] for p in pmax]
    kmin, kmax, p = (np.array(c) for c in zip(*rows, strict=True))
    return ActionTemplate(kmin, kmax, p)


# GraphCC §4.1 in KB at 25 Gbit/s, where α is 20 KB: kmin ∈ {2..32} KB, kmax ∈ {16..256} KB
GRAPHCC_KMIN_KB = (2, 4, 8, 16, 32)
GRAPHCC_KMAX_KB = (16, 32, 64, 128, 256)
GRAPHCC_PMAX = (0.01, 0.25, 0.5, 0.75, 1.0)


def graphcc_template() -> ActionTemplate:
    """GraphCC's 120 settings (§4.1): every kmin ≤ kmax of its two KB grids × 5 pmax, in units
    of α (the paper's KB are at 25 Gbit/s, where α = 20 KB), so they scale with link speed
    as every template here does."""
    unit = ALPHA_AT_25G_BYTES / KB
    rows = [(n / unit, m / unit, p) for n in GRAPHCC_KMIN_KB for m in GRAPHCC_KMAX_KB if n <= m
            for p in GRAPHCC_PMAX]  # fmt: skip
    kmin, kmax, p = (np.array(c) for c in zip(*rows, strict=True))
    return ActionTemplate(kmin, kmax, p)
