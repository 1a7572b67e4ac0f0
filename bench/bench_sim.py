"""The simulator's speed, batched and against ns-3 on the same work.

- sim_speed_<scenario>: B episodes vmapped (B in BATCHES), each from its reset through
  WINDOW_S simulated seconds (whole episodes of that length: flows start, queues fill and
  drain as in training and evaluation, not one chosen interval), for the demo's fabric
  (star8 as emulated) and the papers' 24-host and 288-host leaf-spines (WebSearch 60 % +
  16:1 incasts): simulated seconds per wall second summed over the batch, network steps
  per second, and agent-steps per second (one agent-step = one switch's decision, what
  training consumes); the reference is batch 1 in the same run (the ratio is what
  batching buys);
- sim_vs_ns3_incast: the 16:1 incast of tests/test_ns3.py (10 Gbit/s, K = 20, 64 KB each,
  4 ms) in ns-3.37 and in the sim, wall time for the same simulated time, as a ratio
  (> 1: the sim is faster), also with 16 incasts vmapped against 16 ns-3 runs;
- sim_vs_ns3_<scenario>: the 24- and 288-host leaf-spines in ns-3.37 (sim/ns3/leafspine.cc)
  running exactly the flows one sim episode sampled (each on the same spine, SECN2 on every
  port), against the sim stepping the same simulated time: wall seconds per simulated
  second of each, as a ratio (> 1: the sim is faster): at batch 1 (ns-3's own episode),
  at every batch size of sim_speed_<scenario> (the same scenario and window, key 0 being
  ns-3's episode; each batch timed in turn with ns-3, not taken from an earlier line) and
  the best (issue 15's goal is 100x), and with 10 and 5 simulator steps per base RTT
  instead of 20 (`--rtt-steps`: faster, coarser).

The batch runs over every local device (sim/batch.py): on CPU the host is split into one
device per core (XLA_FLAGS, set below before jax is imported), each stepping its share of
the episodes; "devices" in each line says how many ran.

One JSON object per line; medians of REPEATS timed runs after a compile run, the runs of a
comparison interleaved. ns-3 parts are skipped (with a line saying why) without libns3-dev.
`python bench/bench_sim.py speed [SCENARIO ...] [--batches 1,256,1024]` runs only the
sim_speed_* part, for those scenarios and batch sizes (an accelerator wants wider batches
than a 2-core CPU: sim/README.md, "Speed", has a GPU run); `python bench/bench_sim.py
vs-ns3 [testbed24|fabric288]` only the leaf-spines against ns-3.
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # one host device per core (sim/batch.py): before jax is imported
    flag = f"--xla_force_host_platform_device_count={os.cpu_count()}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()

import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ecntune.agent.static import secn2
from ecntune.sim import network, ns3_reference
from ecntune.sim.batch import over_devices
from ecntune.sim.scenario import SimScenario

REPEATS = 3
BATCHES = {"star8": (1, 4, 16), "testbed24": (1, 4, 8, 16, 64), "fabric288": (1, 4, 8, 16, 64)}
# simulated seconds per episode: the leaf-spines' are what ns-3 runs (~8 s and ~20 s of
# ns-3 wall time per run)
WINDOW_S = {"star8": 1.0, "testbed24": 0.005, "fabric288": 0.001}
LEAFSPINE = ("testbed24", "fabric288")
INCAST = {"n": 16, "bytes": 64_000, "rate": 10e9, "k": 20, "delay": 10e-6, "seconds": 0.004}


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


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


def scenario(name: str) -> SimScenario:
    return SimScenario(name, incast_degree=4 if name == "star8" else 16, episode_s=WINDOW_S[name])


def windows(env: Any, th: Any) -> Callable[[jax.Array], jax.Array]:
    """Batched episodes from their reset through the env's episode (the window), split over
    the devices: keys (B,) -> (B, 2) flows done and the most flows in flight at once."""
    intervals = env.episode_intervals

    def episode(key: jax.Array) -> jax.Array:
        _, state = env.reset(key)

        def interval(_: int, c: tuple) -> tuple:
            s, peak = c
            s = env.step(s, th)[1]
            return s, jnp.maximum(peak, jnp.sum(s.net.slot >= 0))

        state, peak = jax.lax.fori_loop(0, intervals, interval, (state, jnp.int32(0)))
        return jnp.stack([jnp.sum(state.net.fct > 0), peak])

    return over_devices(jax.vmap(episode))


def batch_keys(b: int) -> jax.Array:
    """Episode keys 0.. of a batch: key 0 is the episode ns-3 runs."""
    return jax.random.split(jax.random.key(0), b)


def bench_speed(name: str, batches: tuple[int, ...]) -> None:
    env = scenario(name).env()
    switches = int(env.fabric.switch_ports.shape[0])
    intervals = env.episode_intervals
    run = windows(env, secn2(env.link_bps()))
    keys = {b: batch_keys(b) for b in batches}
    walls = medians_s(*(lambda b=b: run(keys[b]) for b in batches))
    base = None
    for b, wall in zip(batches, walls, strict=True):
        sim_s = b * intervals * env.interval_s / wall
        base = base or sim_s
        done, peak = np.asarray(run(keys[b])).T
        emit({
            "bench": f"sim_speed_{name}", "batch": b, "sim_s_per_wall_s": round(sim_s, 6),
            "steps_per_s": round(b * intervals * env.steps_per_interval / wall, 1),
            "agent_steps_per_s": round(b * intervals * switches / wall, 2),
            "ratio_to_batch_1": round(sim_s / base, 3), "reference": "batch 1",
            "dt_s": env.dt, "interval_s": env.interval_s, "window_s": intervals * env.interval_s,
            "hosts": len(env.fabric.hosts), "ports": env.n_ports, "flow_slots": env.slots,
            "flows_done_per_episode": float(np.mean(done)), "peak_flows_in_flight": int(peak.max()),
            "devices": jax.local_device_count(), "platform": jax.devices()[0].device_kind,
            "median_s": round(wall, 4), "repeats": REPEATS,
        })  # fmt: skip


def incast_trace(batch: int) -> Callable[[], object]:
    """The ns-3 incast in the sim: `batch` independent copies, vmapped."""
    env, per_link = ns3_reference.sim_twin(
        INCAST["n"], INCAST["k"], INCAST["rate"], INCAST["delay"], INCAST["bytes"], 1e6
    )
    steps = int(INCAST["seconds"] / env.dt)

    def one(key: jax.Array) -> jax.Array:
        _, state = env.reset(key)
        net, _ = network.trace(state.params, state.net, per_link, env.dt, "dctcp", steps)
        return net.fct

    run = jax.jit(jax.vmap(one))
    keys = jax.random.split(jax.random.key(0), batch)
    return lambda: run(keys)


def bench_ns3(leafspines: tuple[str, ...] = LEAFSPINE, incast: bool = True) -> None:
    missing = ns3_reference.missing()
    if missing:
        emit({"bench": "sim_vs_ns3_incast", "skipped": missing})
        return
    with tempfile.TemporaryDirectory() as tmp:
        if incast:
            bench_ns3_incast(ns3_reference.build(Path(tmp)))
        leafspine = ns3_reference.build(Path(tmp), "leafspine")
        for name in leafspines:
            bench_ns3_leafspine(leafspine, name)


def bench_ns3_incast(exe: Path) -> None:
    """The 16:1 incast of tests/test_ns3.py in ns-3 and in the sim, 1 and 16 of them."""
    args = (INCAST["n"], INCAST["k"], INCAST["rate"], INCAST["delay"], INCAST["seconds"])

    def ns3_runs(count: int) -> Callable[[], None]:
        return lambda: [ns3_reference.run(exe, *args, INCAST["bytes"]) for _ in range(count)]

    for batch in (1, 16):
        ns3_s, sim_s = medians_s(ns3_runs(batch), incast_trace(batch))
        emit({
            "bench": "sim_vs_ns3_incast", "batch": batch, "ns3_median_s": round(ns3_s, 4),
            "sim_median_s": round(sim_s, 4), "ratio": round(ns3_s / sim_s, 3),
            "reference": "ns-3.37 on the same incast (ratio > 1: sim faster)",
            "simulated_s": INCAST["seconds"], "repeats": REPEATS,
        })  # fmt: skip


RTT_STEPS = (20, 10, 5)  # the simulator's steps per base RTT: default, and the speed knob


def bench_ns3_leafspine(exe: Path, name: str) -> None:
    base = scenario(name)
    seconds = WINDOW_S[name]
    env = base.env()
    _, state = env.reset(jax.random.key(0))
    intervals = int(np.ceil(seconds / env.interval_s))
    seconds = intervals * env.interval_s  # the sim steps whole intervals: ns-3 runs as long
    flows = ns3_reference.leafspine_flows(env, state.params, seconds)
    th = secn2(env.link_bps())

    def sim(rtt_steps: int) -> Callable[[], jax.Array]:
        """The same episode (same key: the same flows) at rtt_steps steps per base RTT."""
        coarse = dataclasses.replace(base, rtt_steps=rtt_steps).env()
        _, start = coarse.reset(jax.random.key(0))

        def run() -> jax.Array:
            s = start
            for _ in range(intervals):
                s = coarse.step(s, th)[1]
            return s.net.fct

        return run

    def ns3() -> None:
        buffer = float(env.fabric.links.buffer_bytes[0])
        ns3_reference.run_leafspine(exe, flows, env.fabric.topology, seconds, "secn2", buffer)

    # every batch size timed in turn with ns-3 (a noisy machine drifts between separate runs)
    run, batches = windows(env, th), BATCHES[name]
    keys = [batch_keys(b) for b in batches]
    ns3_s, *sim_s = medians_s(ns3, *(sim(steps) for steps in RTT_STEPS),
                              *(lambda k=k: run(k) for k in keys))  # fmt: skip
    per_batch = dict(zip(batches, sim_s[len(RTT_STEPS) :], strict=True))
    ratios = {b: ns3_s / (wall / b) for b, wall in per_batch.items()}
    best_batch = max(ratios, key=ratios.get)
    emit({
        "bench": f"sim_vs_ns3_{name}", "simulated_s": round(seconds, 6), "flows": len(flows),
        "ns3_wall_s_per_sim_s": round(ns3_s / seconds, 1),
        "sim_wall_s_per_sim_s": round(sim_s[0] / seconds, 1),
        "ratio": round(ns3_s / sim_s[0], 3),
        "ratio_at_best_batch": round(ratios[best_batch], 3), "best_batch": best_batch,
        "ratio_at_batch": {b: round(r, 3) for b, r in ratios.items()},
        **{f"ratio_at_{steps}_steps_per_rtt": round(ns3_s / s, 3)
           for steps, s in zip(RTT_STEPS[1:], sim_s[1 : len(RTT_STEPS)], strict=True)},
        "goal_ratio": 100, "reference": "ns-3.37 on the same flows (ratio > 1: sim faster)",
        "repeats": REPEATS,
    })  # fmt: skip


def main(argv: list[str]) -> None:
    if argv[:1] not in (["speed"], ["vs-ns3"]):
        for name, batches in BATCHES.items():
            bench_speed(name, batches)
        bench_ns3()
        return
    names, batches = argv[1:], None
    if "--batches" in names:
        at = names.index("--batches")
        batches = tuple(int(b) for b in names[at + 1].split(","))
        del names[at : at + 2]
    known = BATCHES if argv[0] == "speed" else LEAFSPINE
    for name in names:
        if name not in known:
            sys.exit(f"bench_sim: no scenario {name!r} (one of {', '.join(known)})")
    if argv[0] == "vs-ns3":
        if batches:
            sys.exit("bench_sim: vs-ns3 times BATCHES (no --batches)")
        bench_ns3(tuple(names) or LEAFSPINE, incast=False)
        return
    for name in names or list(BATCHES):
        bench_speed(name, batches or BATCHES[name])


if __name__ == "__main__":
    main(sys.argv[1:])
