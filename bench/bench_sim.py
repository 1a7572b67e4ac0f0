"""The simulator's speed: simulated seconds per wall second, and what batching buys.

- sim_speed_<preset>: one environment stepping telemetry intervals (jit, lax.scan inside
  a step), in simulated seconds per wall-clock second — the reference is real time (1.0);
- sim_vmap_<preset>: 16 environments vmapped against 1 (the reference), both measured here,
  interleaved, in simulator steps per second summed over the batch; the ratio is the
  batching gain (about 1 on a CPU with few cores, where a batch only adds work).

One JSON object per line; medians of REPEATS timed runs after a compile run. An episode is
reset + INTERVALS telemetry intervals (each interval is steps_per_interval network steps).
Runs in under 2 minutes on 2 CPU cores.
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
INTERVALS = 1
BATCH = 16


def medians_s(*fns: Callable[[], object]) -> list[float]:
    """Median wall time of each function, compiled first, then timed in turn REPEATS times."""
    for fn in fns:
        jax.block_until_ready(fn())  # compile
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(REPEATS):
        for fn, ts in zip(fns, times, strict=True):
            t = time.perf_counter()
            jax.block_until_ready(fn())
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


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
    one_s, batch_s = medians_s(lambda: single(keys[0]), lambda: batched(keys))
    simulated = INTERVALS * env.interval_s
    steps = INTERVALS * env.steps_per_interval
    print(json.dumps({
        "bench": f"sim_speed_{name}", "sim_s_per_wall_s": round(simulated / one_s, 4),
        "reference": "real time = 1.0", "dt_s": env.dt, "interval_s": env.interval_s,
        "steps_per_interval": env.steps_per_interval, "ports": p, "median_s": round(one_s, 4),
        "repeats": REPEATS,
    }), flush=True)  # fmt: skip
    print(json.dumps({
        "bench": f"sim_vmap_{name}", "reference": "batch 1",
        "batch_1_steps_per_s": round(steps / one_s, 1),
        f"batch_{BATCH}_steps_per_s": round(BATCH * steps / batch_s, 1),
        "ratio": round((BATCH * steps / batch_s) / (steps / one_s), 3),
        "batch_1_median_s": round(one_s, 4), f"batch_{BATCH}_median_s": round(batch_s, 4),
        "repeats": REPEATS,
    }), flush=True)  # fmt: skip


def main() -> None:
    for name in ("star8", "leafspine-2x2"):
        bench(name)


if __name__ == "__main__":
    main()
