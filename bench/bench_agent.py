"""One decision for a 32-port switch: ACC and PET agents against the static preset.

The controller calls `policy.act(history)` once per interval with k intervals of every
port's telemetry; this is that call's wall time (features, network, template lookup,
idle skipping) for the shipped checkpoints, with the static SECN1 policy — which does no
inference — as the reference in the same run. One JSON object per line, medians.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from ecntune.agent.policy import load_policy
from ecntune.agent.telemetry import PortTelemetry

PORTS = 32
REPEATS = 200


def history(rng: np.random.Generator) -> PortTelemetry:
    f = np.ones((3, PORTS))
    tx = rng.uniform(0, 1.25e6, (3, PORTS))
    return PortTelemetry(
        interval_s=0.1 * f, link_bps=100e6 * f, tx_bytes=tx, tx_pkts=tx / 1500,
        marked_bytes=0.1 * tx, marked_pkts=0.1 * tx / 1500,
        qdepth_sum_bytes=rng.uniform(0, 5e5, (3, PORTS)), qdepth_samples=tx / 1500 + 1,
        qdepth_max_bytes=rng.uniform(0, 1e5, (3, PORTS)), kmin_bytes=5000 * f,
        kmax_bytes=2e5 * f, pmax=0.01 * f, senders=rng.uniform(1, 16, (3, PORTS)),
        elephant_bytes=0.5 * tx,
    )  # fmt: skip


def median_ms(policy, rng: np.random.Generator) -> float:
    policy.act(history(rng))  # compile
    times = []
    for _ in range(REPEATS):
        h = history(rng)
        t = time.perf_counter()
        policy.act(h)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    rng = np.random.default_rng(0)
    reference = median_ms(load_policy("static:secn1"), rng)
    for spec in ("acc:default", "pet:agent/checkpoints/pet-star8.msgpack"):
        ms = median_ms(load_policy(spec), rng)
        print(json.dumps({
            "bench": f"decision_{spec.split(':')[0]}_{PORTS}ports", "median_ms": round(ms, 3),
            "static_secn1_median_ms": round(reference, 3), "ratio": round(ms / reference, 2),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
