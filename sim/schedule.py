"""An episode's flows, sampled in JAX from a key (so reset() vmaps over environments).

Each sending host starts flows as a Poisson process at a target load with sizes drawn
from a flow-size CDF (traffic/workload.py: the same CDFs and the same load -> rate rule
the emulation uses), optionally switching to a second CDF or load halfway (ACC/PET convergence
experiments); periodic synchronised N:1 incasts (16:1 in GraphCC) come on top; link
failures are (link, down, up) times. Every flow picks one of its ECMP paths uniformly,
as a 5-tuple hash would. The result is sorted by start time and padded to a fixed length
(unused flows start at +inf), as the simulator's static shapes require.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ecntune.sim.fabric import FabricArrays
from ecntune.sim.network import Params
from ecntune.traffic.spec import TrafficSpec
from ecntune.traffic.workload import load_cdf

CDF_POINTS = 32


class PathTable(NamedTuple):
    """ECMP paths of every host pair: (hosts, hosts, max paths, max hops), -1 padded."""

    links: jnp.ndarray
    count: jnp.ndarray  # (hosts, hosts)
    hops: jnp.ndarray  # (hosts, hosts, max paths)
    base_rtt: jnp.ndarray  # (hosts, hosts, max paths)
    uplink_rate: jnp.ndarray  # (hosts,) bytes/s
    capacity: jnp.ndarray  # (L,)
    buffer: jnp.ndarray


def path_table(fabric: FabricArrays) -> PathTable:
    """Built per (source switch, destination): hosts behind one switch share their paths."""
    n = len(fabric.hosts)
    host_switch = [fabric.topology.hosts[h].switch for h in fabric.hosts]
    switches = sorted(set(host_switch))
    behind = {sw: [h for h in range(n) if host_switch[h] == sw] for sw in switches}
    beyond = {  # egress ports after the source NIC, per (source switch, destination host)
        (sw, d): [p[1:] for p in fabric.paths(next(h for h in behind[sw] if h != d), d)]
        for sw in switches
        for d in range(n)
        if behind[sw] != [d]
    }
    width = max(len(p) for p in beyond.values())
    per_switch = np.full((len(switches), n, width, fabric.max_hops), -1, np.int32)
    per_count = np.ones((len(switches), n), np.int32)
    for (sw, d), paths in beyond.items():
        per_count[switches.index(sw), d] = len(paths)
        for i, p in enumerate(paths):
            per_switch[switches.index(sw), d, i, 1 : 1 + len(p)] = p
    row = np.array([switches.index(sw) for sw in host_switch])
    links = per_switch[row]  # (n, n, width, hops)
    links[..., 0] = np.where(links[..., 1] >= 0, fabric.host_uplink[:, None, None], -1)
    count = per_count[row]
    links[np.arange(n), np.arange(n)] = -1  # no path to oneself
    count[np.arange(n), np.arange(n)] = 1
    hops = np.maximum((links >= 0).sum(axis=-1), 1).astype(np.int32)
    rtt = fabric.base_rtt(links).astype(np.float32)
    up = fabric.links.capacity[fabric.host_uplink]
    return PathTable(
        jnp.asarray(links), jnp.asarray(count), jnp.asarray(hops), jnp.asarray(rtt),
        jnp.asarray(up), jnp.asarray(fabric.links.capacity), jnp.asarray(fabric.links.buffer_bytes),
    )  # fmt: skip


class CDF(NamedTuple):
    sizes: jnp.ndarray  # (CDF_POINTS,)
    probs: jnp.ndarray
    mean: jnp.ndarray


def cdf(name: str) -> CDF:
    c = load_cdf(name)
    pad = CDF_POINTS - len(c.sizes)
    sizes = np.pad(c.sizes, (0, pad), mode="edge").astype(np.float32)
    probs = np.pad(c.probs, (0, pad), mode="edge").astype(np.float32)
    return CDF(jnp.asarray(sizes), jnp.asarray(probs), jnp.float32(c.mean_bytes))


class TrafficParams(NamedTuple):
    """What an episode's traffic looks like (arrays, so it can differ per environment)."""

    first: CDF
    second: CDF  # after switch_at_s (same as first when no switch)
    switch_at_s: jnp.ndarray
    load: jnp.ndarray
    second_load: jnp.ndarray  # after switch_at_s (same as load when no load step)
    duration_s: jnp.ndarray
    senders: jnp.ndarray  # (hosts,) bool
    incast_degree: jnp.ndarray
    incast_period_s: jnp.ndarray
    incast_from_s: jnp.ndarray  # the first burst's offset (a storm that begins mid-run)
    incast_bytes: jnp.ndarray
    failures: jnp.ndarray  # (E, 3) link, down, up
    ect: jnp.ndarray  # (hosts,) bool: hosts whose flows are ECN-capable


@dataclass(frozen=True, kw_only=True)
class EpisodeTraffic(TrafficSpec):
    """One simulated episode's traffic: the shared spec, how long flows arrive, and the
    hosts and links it names by index (SimScenario.env builds it from names)."""

    duration_s: float = 0.1
    senders: tuple[int, ...] | None = None  # hosts that send Poisson flows (None: all)
    failures: tuple[tuple[int, float, float], ...] = ()  # (link id, down s, up s)
    non_ect: tuple[int, ...] = ()  # hosts that do not negotiate ECN (their packets are Not-ECT)

    def params(self, n_hosts: int) -> TrafficParams:
        senders = np.zeros(n_hosts, bool)
        senders[list(self.senders) if self.senders is not None else slice(None)] = True
        ect = np.ones(n_hosts, bool)
        ect[list(self.non_ect)] = False
        failures = np.array(self.failures or [(0, np.inf, np.inf)], np.float32).reshape(-1, 3)
        second_load = self.load if self.load_to is None else self.load_to
        return TrafficParams(
            first=cdf(self.workload),
            second=cdf(self.switch_to or self.workload),
            switch_at_s=jnp.float32(self.duration_s / 2 if self.changes_halfway else np.inf),
            load=jnp.float32(self.load),
            second_load=jnp.float32(second_load),
            duration_s=jnp.float32(self.duration_s),
            senders=jnp.asarray(senders), incast_degree=jnp.int32(self.incast_degree),
            incast_period_s=jnp.float32(self.incast_period(self.duration_s)),
            incast_from_s=jnp.float32(self.incast_from_s),
            incast_bytes=jnp.float32(self.incast_bytes), failures=jnp.asarray(failures),
            ect=jnp.asarray(ect),
        )  # fmt: skip

    def max_flows(self, fabric: FabricArrays) -> tuple[int, int]:
        """Static sizes: Poisson flows per host (mean + 6 sigma) and incast flows in total."""
        phases = self.phases(self.duration_s)
        c = min(load_cdf(workload).mean_bytes for _, _, workload, _ in phases)
        load = max(load for _, _, _, load in phases)
        rate = float(np.max(fabric.links.capacity[fabric.host_uplink])) * load / c
        mean = rate * self.duration_s
        per_host = int(mean + 6 * np.sqrt(mean) + 8)
        bursts = self.incast_bursts(self.duration_s) + 1 if self.incast_degree else 0
        return per_host, bursts * max(self.incast_degree, 1)


def _sizes(key: jax.Array, c: CDF, n: int) -> jnp.ndarray:
    u = jax.random.uniform(key, (n,), minval=c.probs[0], maxval=1.0)
    return jnp.maximum(1.0, jnp.floor(jnp.interp(u, c.probs, c.sizes)))


def sample(
    key: jax.Array, table: PathTable, traffic: TrafficParams, per_host: int, incast_flows: int
) -> Params:
    """Every flow of one episode (static shape: hosts * per_host + incast_flows)."""
    n_hosts = table.uplink_rate.shape[0]
    k_gap, k_size1, k_size2, k_dst, k_path, k_inc, k_inc_dst = jax.random.split(key, 7)

    # Poisson sources: rate = load * link / mean size, per phase (the CDF and the load may
    # both change halfway). A unit-rate process in
    # "work" time u maps to real time at rate r1 before the switch and r2 after it (the
    # time change of a Poisson process: exact, and the shapes stay static)
    r1 = traffic.load * table.uplink_rate[:, None] / traffic.first.mean  # flows/s per host
    r2 = traffic.second_load * table.uplink_rate[:, None] / traffic.second.mean
    u = jnp.cumsum(jax.random.exponential(k_gap, (n_hosts, per_host)), axis=1)
    u_switch = r1 * traffic.switch_at_s  # inf without a switch
    start = jnp.where(u < u_switch, u / r1, traffic.switch_at_s + (u - u_switch) / r2)
    ok = (start < traffic.duration_s) & traffic.senders[:, None]
    src = jnp.broadcast_to(jnp.arange(n_hosts)[:, None], (n_hosts, per_host))
    offset = jax.random.randint(k_dst, (n_hosts, per_host), 1, n_hosts)
    dst = (src + offset) % n_hosts
    n = n_hosts * per_host
    late = start.ravel() >= traffic.switch_at_s
    size = jnp.where(late, _sizes(k_size2, traffic.second, n), _sizes(k_size1, traffic.first, n))
    start, src, dst = start.ravel(), src.ravel(), dst.ravel()

    # synchronised N:1 incasts
    if incast_flows:
        bursts = incast_flows // jnp.maximum(traffic.incast_degree, 1)
        degree = jnp.maximum(traffic.incast_degree, 1)
        idx = jnp.arange(incast_flows)
        burst = idx // degree
        member = idx % degree
        k_recv, k_perm = jax.random.split(k_inc)
        receivers = jax.random.randint(k_recv, (incast_flows,), 0, n_hosts)
        receiver = receivers[burst * degree]
        perm = jax.vmap(lambda k: jax.random.permutation(k, n_hosts - 1))(
            jax.random.split(k_perm, incast_flows)
        )[burst * degree]
        # distinct senders; a degree above the other hosts' count (4:1 on leafspine-2x2's
        # four hosts) gives the last of them the extra flows
        sender = jnp.minimum(member, n_hosts - 2)
        inc_src = (receiver + 1 + perm[jnp.arange(incast_flows), sender]) % n_hosts
        inc_start = traffic.incast_from_s + traffic.incast_period_s * (burst + 0.5)
        inc_ok = (traffic.incast_degree > 0) & (inc_start < traffic.duration_s) & (burst < bursts)
        start = jnp.concatenate([start, jnp.where(inc_ok, inc_start, jnp.inf)])
        ok = jnp.concatenate([ok.ravel(), inc_ok])
        src = jnp.concatenate([src, inc_src])
        dst = jnp.concatenate([dst, receiver])
        size = jnp.concatenate([size, jnp.full(incast_flows, traffic.incast_bytes)])
        del k_inc_dst
    else:
        ok = ok.ravel()

    start = jnp.where(ok, start, jnp.inf)
    order = jnp.argsort(start)
    start, src, dst, size = start[order], src[order], dst[order], size[order]
    choice = jax.random.randint(k_path, start.shape, 0, 1 << 20) % table.count[src, dst]
    return Params(
        capacity=table.capacity,
        buffer=table.buffer,
        start=start.astype(jnp.float32),
        src=src.astype(jnp.int32),
        size=size.astype(jnp.float32),
        path=table.links[src, dst, choice],
        hops=table.hops[src, dst, choice],
        base_rtt=table.base_rtt[src, dst, choice],
        line_rate=table.uplink_rate[src],
        capacity_events=traffic.failures,
        ect=traffic.ect[src],
    )
