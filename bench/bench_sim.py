"""The simulator's speed: simulated seconds per wall second, and what batching buys.

- sim_speed_<preset>: one environment stepping telemetry intervals (jit, lax.scan inside
  a step), in simulated seconds per wall-clock second — the reference is real time (1.0);
- sim_vmap_<preset>: 16 environments vmapped against 1, both measured here, in
  environment-intervals per second; the ratio is the batching gain.

One JSON object per line; medians of REPEATS timed runs after a compile run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ecntune.agent.telemetry import EcnThresholds
from ecntune.sim.env import Env
from ecntune.sim.schedule import Traffic
from ecntune.topology import preset

REPEATS = 3
INTERVALS = 5
BATCH = 16


def median_s(fn: Callable[[], object]) -> float:
    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(name: str) -> None:
    env = Env.make(preset(name), Traffic("websearch", 0.6, duration_s=1.0, incast_degree=4))
    p = env.n_ports
    th = EcnThresholds(jnp.full(p, 5000.0), jnp.full(p, 20000.0), jnp.full(p, 0.2))

    def episode(key: jax.Array) -> jax.Array:
        _, state = env.reset(key)

        def one(s, _):
            _, s, r, _, _ = env.step(s, th)
            return s, r

        _, rewards = jax.lax.scan(one, state, None, length=INTERVALS)
        return rewards

    single = jax.jit(episode)
    batched = jax.jit(jax.vmap(episode))
    keys = jax.random.split(jax.random.key(0), BATCH)
    one_s = median_s(lambda: single(keys[0]))
    batch_s = median_s(lambda: batched(keys))
    simulated = INTERVALS * env.interval_s
    print(json.dumps({
        "bench": f"sim_speed_{name}", "sim_s_per_wall_s": round(simulated / one_s, 4),
        "reference": "real time = 1.0", "dt_s": env.dt, "interval_s": env.interval_s,
        "steps_per_interval": env.steps_per_interval, "ports": p,
    }), flush=True)  # fmt: skip
    print(json.dumps({
        "bench": f"sim_vmap_{name}",
        "batch_1_intervals_per_s": round(INTERVALS / one_s, 2),
        f"batch_{BATCH}_intervals_per_s": round(BATCH * INTERVALS / batch_s, 2),
        "ratio": round((BATCH * INTERVALS / batch_s) / (INTERVALS / one_s), 3),
    }), flush=True)  # fmt: skip


def main() -> None:
    for name in ("star8", "leafspine-2x2"):
        bench(name)


if __name__ == "__main__":
    main()
