"""The packet-level reference: builds and runs sim/ns3/dumbbell.cc with Debian's ns-3.37.

Used by tests/test_ns3.py (agreement) and bench/bench_sim.py (speed against ns-3 on the
same scenario). `missing()` says why ns-3 cannot be used here, or None; `sim_twin()` is
the same scenario in ecntune.sim.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jax.numpy as jnp

SOURCE = Path(__file__).resolve().parent / "ns3" / "dumbbell.cc"
MODULES = [
    "ns3-core", "ns3-network", "ns3-internet", "ns3-point-to-point",
    "ns3-traffic-control", "ns3-applications",
]  # fmt: skip


def missing() -> str | None:
    if shutil.which("g++") is None:
        return "g++ is not on PATH"
    if shutil.which("pkg-config") is None:
        return "pkg-config is not on PATH"
    if subprocess.run(["pkg-config", "--exists", "ns3-core"]).returncode != 0:
        return "ns-3 not found (`pkg-config --exists ns3-core` fails; install libns3-dev)"
    return None


def build(directory: Path) -> Path:
    """Compile the dumbbell into `directory`; returns the executable."""
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", *MODULES], capture_output=True, text=True, check=True
    ).stdout.split()
    # Debian's ns3 .pc files name libgsl.so / libgslcblas.so by absolute path, which only
    # libgsl-dev installs; the ns-3 libraries already link the runtime .so.27, so drop them
    flags = [f for f in flags if not f.startswith("/") or os.path.exists(f)]
    exe = directory / "dumbbell"
    subprocess.run(
        ["g++", "-O2", "-std=c++17", str(SOURCE), "-o", str(exe), *flags],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return exe


def run(
    exe: Path, n: int, k_pkts: int, rate_bps: float, delay_s: float, duration_s: float,
    flow_bytes: int = 0,
) -> dict:  # fmt: skip
    """One run; its JSON report (see dumbbell.cc)."""
    args = [
        f"--n={n}", f"--k={k_pkts}", f"--rate={rate_bps:.0f}bps",
        f"--delay={delay_s * 1e6:.0f}us", f"--duration={duration_s}", f"--bytes={flow_bytes}",
    ]  # fmt: skip
    out = subprocess.run(
        [str(exe), *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def sim_twin(
    n: int, k_pkts: int, rate_bps: float, delay_s: float, flow_bytes: int, buffer_bytes: float
):  # -> tuple[ecntune.sim.env.Env, jnp.ndarray]
    """The dumbbell as the simulator sees it: a star whose sender NICs and receiver port run
    at the bottleneck's rate and delay, n flows of `flow_bytes` starting together at
    0.5 ms, step marking at K packets (kmin = kmax, pmax 1). Returns the environment and
    its per-link thresholds for `network.trace`."""
    import dataclasses

    from ecntune.agent.telemetry import EcnThresholds
    from ecntune.sim.env import Env
    from ecntune.sim.fabric import MTU_BYTES
    from ecntune.sim.schedule import Traffic
    from ecntune.topology import single_switch

    topo = single_switch(n + 1, rate_bps)
    topo.links = [dataclasses.replace(lk, delay_s=delay_s) for lk in topo.links]
    traffic = Traffic(
        "websearch", 0.0, duration_s=0.001, incast_degree=n,
        incast_period_s=0.001, incast_bytes=flow_bytes,
    )  # fmt: skip
    env = Env.make(topo, traffic, "dctcp", buffer_bytes=buffer_bytes)
    k = jnp.full(env.n_ports, k_pkts * float(MTU_BYTES))
    return env, env._per_link(EcnThresholds(k, k, jnp.ones(env.n_ports)))
