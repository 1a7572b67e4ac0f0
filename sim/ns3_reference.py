"""The packet-level reference: builds and runs sim/ns3/*.cc with Debian's ns-3.37.

Two programs: dumbbell.cc (N flows or an N:1 incast through one bottleneck) and
leafspine.cc (a leaf-spine running exactly the flows an episode of the simulator sampled,
each on the spine the simulator hashed it to). Used by tests/test_ns3.py (agreement) and
bench/bench_sim.py (speed against ns-3 on the same work). `missing()` says why ns-3 cannot
be used here, or None; `sim_twin()` is the dumbbell in ecntune.sim, `leafspine_flows()`
the simulator's flows as leafspine.cc reads them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jax.numpy as jnp

SOURCES = Path(__file__).resolve().parent / "ns3"
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


def build(directory: Path, program: str = "dumbbell") -> Path:
    """Compile sim/ns3/<program>.cc into `directory`; returns the executable."""
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", *MODULES], capture_output=True, text=True, check=True
    ).stdout.split()
    # Debian's ns3 .pc files name libgsl.so / libgslcblas.so by absolute path, which only
    # libgsl-dev installs; the ns-3 libraries already link the runtime .so.27, so drop them
    flags = [f for f in flags if not f.startswith("/") or os.path.exists(f)]
    exe = directory / program
    subprocess.run(
        ["g++", "-O2", "-std=c++17", str(SOURCES / f"{program}.cc"), "-o", str(exe), *flags],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return exe


def run(
    exe: Path, n: int, k_pkts: int, rate_bps: float, delay_s: float, duration_s: float,
    flow_bytes: int = 0, tcp: str = "ns3::TcpDctcp",
) -> dict:  # fmt: skip
    """One run; its JSON report (see dumbbell.cc)."""
    args = [
        f"--n={n}", f"--k={k_pkts}", f"--rate={rate_bps:.0f}bps",
        f"--delay={delay_s * 1e6:.0f}us", f"--duration={duration_s}", f"--bytes={flow_bytes}",
        f"--tcp={tcp}",
    ]  # fmt: skip
    out = subprocess.run(
        [str(exe), *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def sim_twin(
    n: int, k_pkts: int, rate_bps: float, delay_s: float, flow_bytes: int, buffer_bytes: float,
    transport: str = "dctcp",
):  # -> tuple[ecntune.sim.env.Env, jnp.ndarray]  # fmt: skip
    """The dumbbell as the simulator sees it: a star whose sender NICs and receiver port run
    at the bottleneck's rate and delay, n flows of `flow_bytes` starting together at
    0.5 ms, step marking at K packets (kmin = kmax, pmax 1), hosts running `transport`
    (dumbbell.cc's --tcp: `dctcp` is TcpDctcp, `cubic_ecn` TcpCubic). Returns the
    environment and its per-link thresholds for `network.trace`."""
    import dataclasses

    from ecntune.sim.env import Env
    from ecntune.sim.schedule import EpisodeTraffic
    from ecntune.telemetry import EcnThresholds
    from ecntune.topology import MTU_BYTES, single_switch

    topo = single_switch(n + 1, rate_bps)
    topo.links = [dataclasses.replace(lk, delay_s=delay_s) for lk in topo.links]
    traffic = EpisodeTraffic(
        load=0.0, duration_s=0.001, incast_degree=n,
        incast_period_s=0.001, incast_bytes=flow_bytes,
    )  # fmt: skip
    env = Env.make(topo, traffic, transport, buffer_bytes=buffer_bytes)
    k = jnp.full(env.n_ports, k_pkts * float(MTU_BYTES))
    return env, env._per_link(EcnThresholds(k, k, jnp.ones(env.n_ports)))


def leafspine_flows(env, params, until_s: float) -> list[tuple[int, int, int, int, float]]:
    """The flows of one sampled episode (`env.reset(key)[1].params`) that start before
    `until_s`, as leafspine.cc reads them: (src, dst, spine, bytes, start), hosts numbered
    from 0 in name order (h1 = 0, leaf = host // hosts per leaf), the spine the flow's
    ECMP choice crosses (0 for flows that stay under one leaf)."""
    import numpy as np

    fabric = env.fabric
    host_of_link = {int(link): i for i, link in enumerate(fabric.host_uplink)}
    number = [int(name[1:]) - 1 for name in fabric.hosts]  # "h7" -> 6
    start, size = np.asarray(params.start), np.asarray(params.size)
    src, path, hops = np.asarray(params.src), np.asarray(params.path), np.asarray(params.hops)
    flows = []
    for i in np.flatnonzero(start < until_s):
        last = int(path[i, hops[i] - 1])
        dst = host_of_link[fabric.peer(last)]
        spine = 0
        if hops[i] > 2:  # NIC, leaf -> spine, spine -> leaf, leaf -> host
            node, port = fabric.names[int(path[i, 1])]
            spine = int(fabric.topology.neighbour(node, port)[0].removeprefix("spine")) - 1
        flows.append((number[int(src[i])], number[dst], spine, int(size[i]), float(start[i])))
    return flows


def run_leafspine(
    exe: Path, flows: list[tuple[int, int, int, int, float]], topology, duration_s: float,
    setting: str, buffer_bytes: float,
) -> dict:  # fmt: skip
    """leafspine.cc on `topology` (a leaf_spine preset) with a static setting of
    agent/static.py ("secn1", "4a,4a,1", ...) on every switch port, as the simulator applies
    it: its 25 Gbit/s values, scaled with each port's rate where the setting scales. Its JSON
    report, plus the wall seconds the simulation took (`wall_s`)."""
    import tempfile
    import time

    from ecntune.agent.static import thresholds_of

    at_25g, at_100g = (thresholds_of(setting, jnp.float32(bps)) for bps in (25e9, 100e9))
    kmin_bytes, kmax_bytes, pmax = (float(x) for x in at_25g)
    scale_with_rate = bool(at_100g.kmin_bytes != at_25g.kmin_bytes)

    leaves = [s for s in topology.switches if s.startswith("leaf")]
    spines = [s for s in topology.switches if s.startswith("spine")]
    host_bw = {
        lk.bw_bps for lk in topology.links if lk.a in topology.hosts or lk.b in topology.hosts
    }
    fabric_bw = {lk.bw_bps for lk in topology.links} - host_bw
    delays = {lk.delay_s for lk in topology.links}
    if len(host_bw) != 1 or len(fabric_bw) != 1 or len(delays) != 1:
        raise ValueError("leafspine.cc needs one host rate, one fabric rate and one delay")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.writelines(f"{s} {d} {sp} {b} {t:.9f}\n" for s, d, sp, b, t in flows)
        f.flush()
        args = [
            f"--flows={f.name}", f"--spines={len(spines)}", f"--leaves={len(leaves)}",
            f"--hostsPerLeaf={len(topology.hosts) // len(leaves)}",
            f"--hostGbps={host_bw.pop() / 1e9:g}", f"--fabricGbps={fabric_bw.pop() / 1e9:g}",
            f"--delay={delays.pop() * 1e9:.0f}ns", f"--buffer={buffer_bytes:.0f}",
            f"--kmin={kmin_bytes:.0f}", f"--kmax={kmax_bytes:.0f}", f"--pmax={pmax:.6g}",
            f"--scale={str(scale_with_rate).lower()}", f"--duration={duration_s}",
        ]  # fmt: skip
        t = time.perf_counter()
        out = subprocess.run(
            [str(exe), *args], capture_output=True, text=True, check=True, timeout=3600
        ).stdout
        wall = time.perf_counter() - t
    report = json.loads(out.strip().splitlines()[-1])
    report["wall_s"] = wall
    return report
