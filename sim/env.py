"""The simulator as an environment of pure functions (gymnax/jumanji style).

    env = Env.make(preset("star8"), EpisodeTraffic(load=0.6, duration_s=2.0), transport="reno_ecn")
    obs, state = env.reset(key)                       # obs: (ports, k * features)
    obs, state, reward, done, info = env.step(state, thresholds)   # one telemetry interval

`thresholds` is an EcnThresholds with one setting per switch egress port (the order of
env.fabric.ports; env.fabric.switch_ports groups them per switch, i.e. per agent).
info["telemetry"] is the PortTelemetry of the interval — the fields the P4 digest
carries, so agents see in simulation exactly what the controller will feed them —,
info["fct"] every flow's completion time so far (-1 while running) and info["flows"]
the schedule (for metrics). Observations and rewards come from agent/features.py and
agent/rewards.py. reset and step are jit-compiled; vmap them over keys to batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ecntune.agent.features import HISTORY, FeatureSet, observation, utilisation
from ecntune.agent.rewards import (
    LATENCY_FIRST,
    MICE_FCT,
    MICE_SLOWDOWN,
    MICE_SLOWDOWN_SCALE,
    MICE_SLOWDOWN_SQUARED,
    MICE_SLOWDOWN_SQUARED_SCALE,
    REWARDS,
    RewardKind,
    RewardWeights,
    switched,
)
from ecntune.agent.static import thresholds_of
from ecntune.sim import network, transport
from ecntune.sim.fabric import FabricArrays, build
from ecntune.sim.schedule import EpisodeTraffic, PathTable, TrafficParams, path_table, sample
from ecntune.telemetry import EcnThresholds, PortTelemetry, senders_estimate
from ecntune.topology import MTU_BYTES, Topology
from ecntune.traffic.fct import MICE_BYTES, ideal_fct

RTT_STEPS = 20  # simulator steps per (shortest) base RTT, at least


class EnvState(NamedTuple):
    net: network.NetState
    params: network.Params
    history: PortTelemetry  # (k, ports), oldest first
    interval: jnp.ndarray
    # the same flows under Env.reward_baseline's static setting (None without one)
    baseline: network.NetState | None = None


@dataclass(frozen=True, eq=False)
class Env:
    fabric: FabricArrays
    table: PathTable
    traffic: TrafficParams
    transport: str
    dt: float
    interval_s: float
    slots: int
    ring: int
    per_host: int
    incast_flows: int
    nic_marking: np.ndarray  # (links, 3): what non-port links mark with (host NICs)
    features: FeatureSet = "acc"
    reward_kind: RewardKind = "acc"
    reward_weights: RewardWeights = LATENCY_FIRST
    # a static setting (agent/static.py) run beside the agent on the same flows; the reward
    # is then the agent's minus the setting's (common random numbers: `make`)
    reward_baseline: str | None = None
    # "switch": every port gets the mean reward of its switch's ports (a team reward: `make`)
    reward_scope: Literal["port", "switch"] = "port"
    # reward a port pays in an interval whose setting differs from its last (`make`)
    switch_cost: float = 0.0
    # reward a port gains per unit of its utilisation in an interval (`make`)
    goodput_weight: float = 0.0

    @classmethod
    def make(
        cls,
        topology: Topology,
        traffic: EpisodeTraffic,
        transport: str = "dctcp",
        interval_s: float | None = None,
        dt: float | None = None,
        slots: int | None = None,
        features: FeatureSet = "acc",
        reward: RewardKind = "acc",
        reward_weights: RewardWeights = LATENCY_FIRST,
        buffer_bytes: float | None = None,
        nic_ce_s: float | None = None,
        rtt_steps: int = RTT_STEPS,
        reward_baseline: str | None = None,
        reward_scope: Literal["port", "switch"] = "port",
        switch_cost: float = 0.0,
        goodput_weight: float = 0.0,
    ) -> Env:
        """Sensible time steps for the fabric: dt = the larger of 1/4 of an MTU's time on the
        fastest link and 1/`rtt_steps` of the shortest base RTT (feedback, the fastest
        dynamics a fluid model has, then spans 20+ steps; 30 ns steps at 100 Gbit/s would
        be 10x slower for the same FCTs; 10 steps per RTT run ~1.8x faster than 20 with
        mice FCTs a few % apart: docs in sim/README.md), interval ~ 40 RTTs.

        `nic_ce_s`: host NICs mark ECT packets once their queue holds that many seconds of
        line rate (a datacenter host's fq/TSQ stack keeps its own queue that short; a
        sender with several flows out of one NIC then backs off instead of queueing
        megabytes in front of its ACKs and mice). None: host NICs never mark.

        `reward_baseline`: a static setting simulated beside the agent on the episode's
        own flows; each interval's reward is the agent's minus that setting's. Most of a
        port's reward is the traffic it happened to get (a storm's mice pile up whatever
        the thresholds), the same on both sides, so the difference keeps the part the
        thresholds caused, at twice the simulation. The setting does not depend on the
        agent's actions, so the best policy is unchanged (returns shift by a constant).

        `reward_scope`: "port", each port its own reward (the papers); "switch", each port
        the mean over its switch's ports. A port that raises its threshold can gain on its
        own mice while the senders it lets grow slow the mice of the switch's other ports
        (docs/results: "A team reward"); a per-port reward never charges it for that.

        `switch_cost`: subtracted from a port's reward in every interval but the first whose
        setting differs from the last one's (agent/rewards.py `switched`), after the
        scope: each port pays for its own changes.

        `goodput_weight`: added to a port's reward, times its utilisation in the interval
        (bytes sent over what its link could send), before the pairing with
        `reward_baseline`: the simulator's mice rewards see no elephant, and agents trained
        on them alone buy mice FCT with goodput (agent/rewards.py)."""
        if switch_cost < 0:
            raise ValueError(f"switch_cost must be >= 0, got {switch_cost}")
        if goodput_weight < 0:
            raise ValueError(f"goodput_weight must be >= 0, got {goodput_weight}")
        if reward_scope not in ("port", "switch"):
            raise ValueError(f"reward_scope is 'port' or 'switch', got {reward_scope!r}")
        if rtt_steps < 2:
            raise ValueError(f"rtt_steps must be >= 2 (steps per base RTT), got {rtt_steps}")
        if transport not in network.transport.UPDATES:
            raise ValueError(f"unknown transport {transport!r}; choose from {transport_names()}")
        fabric = build(topology, buffer_bytes)
        fastest = float(np.max(fabric.links.capacity))
        table = path_table(fabric)
        max_rtt = float(np.max(table.base_rtt))
        min_rtt = float(np.min(table.base_rtt[table.base_rtt > 0]))
        dt = dt or max(MTU_BYTES / fastest / 4, min_rtt / rtt_steps)
        interval_s = interval_s or max(40 * max_rtt, 200 * dt)
        per_host, incast_flows = traffic.max_flows(fabric)
        hosts = len(fabric.hosts)
        # flows in flight at once: 8 per host, every incast, and ~1 ms of Poisson arrivals
        # (FB Hadoop's small flows arrive at ~375/ms on the 24-host fabric); a flow finding
        # no free slot waits (its FCT counts the wait; info["waiting"] shows it)
        arrivals_per_ms = per_host * hosts / (traffic.duration_s * 1000)
        slots = slots or int(8 * hosts + incast_flows + 16 + arrivals_per_ms)
        nic_marking = np.zeros((fabric.n_links, 3), np.float32)
        if nic_ce_s is not None:
            k = nic_ce_s * fabric.links.capacity[fabric.host_uplink]
            nic_marking[fabric.host_uplink] = np.stack([k, k, np.ones_like(k)], axis=-1)
        env = cls(
            fabric=fabric, table=table, traffic=traffic.params(hosts), transport=transport,
            dt=dt, interval_s=interval_s, slots=slots,
            ring=int(np.ceil(2 * max_rtt / dt)) + 4, per_host=per_host,
            incast_flows=incast_flows, nic_marking=nic_marking, features=features,
            reward_kind=reward, reward_weights=RewardWeights(*reward_weights),
            reward_baseline=reward_baseline, reward_scope=reward_scope,
            switch_cost=float(switch_cost), goodput_weight=float(goodput_weight),
        )  # fmt: skip
        if reward_baseline is not None:  # a bad setting fails here, not inside a jitted step
            thresholds_of(reward_baseline, env.link_bps())
        return env

    @property
    def steps_per_interval(self) -> int:
        return max(1, round(self.interval_s / self.dt))

    @property
    def n_ports(self) -> int:
        return self.fabric.n_ports

    @property
    def episode_intervals(self) -> int:
        """Intervals until `done`: the traffic's arrival window (flows still running then
        carry on if the caller keeps stepping, as the evaluation's drain does)."""
        return int(np.ceil(float(self.traffic.duration_s) / self.interval_s - 1e-6))

    def link_bps(self) -> jnp.ndarray:
        return jnp.asarray(self.fabric.links.capacity[self.fabric.ports] * 8.0)

    # -- the environment API ---------------------------------------------------------------

    @functools.partial(jax.jit, static_argnums=0)
    def reset(
        self, key: jax.Array, traffic: TrafficParams | None = None
    ) -> tuple[jnp.ndarray, EnvState]:
        traffic = self.traffic if traffic is None else traffic
        params = sample(key, self.table, traffic, self.per_host, self.incast_flows)
        net = network.init(params, self.slots, self.ring)
        idle = self._telemetry(network.zero_counters(self.fabric.n_links), self._off())
        history = jax.tree.map(lambda x: jnp.stack([x] * HISTORY), idle)
        baseline = None if self.reward_baseline is None else net  # the same flows, untouched
        state = EnvState(net, params, history, jnp.int32(0), baseline)
        return observation(history, self.features), state

    @functools.partial(jax.jit, static_argnums=0)
    def step(
        self, state: EnvState, thresholds: EcnThresholds
    ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, dict[str, Any]]:
        net, tel = self._interval(state.params, state.net, thresholds)
        history = jax.tree.map(lambda h, x: jnp.concatenate([h[1:], x[None]]), state.history, tel)
        reward = self._reward(state.params, state.net, net, tel)
        baseline = state.baseline
        if baseline is not None:
            setting = thresholds_of(self.reward_baseline, self.link_bps())
            after, base_tel = self._interval(state.params, baseline, setting)
            reward = reward - self._reward(state.params, baseline, after, base_tel)
            baseline = after
        if self.reward_scope == "switch":
            reward = self._switch_mean(reward)
        if self.switch_cost:  # the first interval's setting replaces no setting of the agent's
            ran_with = jax.tree.map(lambda h: h[-1], state.history)
            charged = switched(ran_with, thresholds) * (state.interval > 0)
            reward = reward - self.switch_cost * charged
        done = net.t >= self.traffic.duration_s
        info = {
            "telemetry": tel,
            "waiting": jnp.sum(state.params.start <= net.t) - net.next_flow,  # for a slot
            "fct": net.fct,
            "dropped": net.counters.dropped_bytes[self.fabric.ports],
        }
        new = EnvState(net, state.params, history, state.interval + 1, baseline)
        return observation(history, self.features), new, reward, done, info

    # -- helpers -------------------------------------------------------------------------------

    def _interval(
        self, p: network.Params, net: network.NetState, thresholds: EcnThresholds
    ) -> tuple[network.NetState, PortTelemetry]:
        """One telemetry interval of the network from `net` under `thresholds`."""
        net = net._replace(counters=network.zero_counters(self.fabric.n_links))
        per_link = self._per_link(thresholds)
        net, _ = network.run(p, net, per_link, self.dt, self.transport, self.steps_per_interval)
        return net, self._telemetry(net.counters, thresholds)

    def _reward(
        self,
        p: network.Params,
        before: network.NetState,
        net: network.NetState,
        tel: PortTelemetry,
    ) -> jnp.ndarray:
        """Every port's reward for the interval that took the network from `before` to `net`,
        with `goodput_weight` times its utilisation added."""
        if self.reward_kind == MICE_FCT:
            reward = self._mice_fct_reward(p, before, net, tel)
        elif self.reward_kind == MICE_SLOWDOWN:
            accrued = self._mice_slowdown_accrued(p, before, net, squared=False)
            reward = -accrued / MICE_SLOWDOWN_SCALE
        elif self.reward_kind == MICE_SLOWDOWN_SQUARED:
            squares = self._mice_slowdown_accrued(p, before, net, squared=True)
            reward = -squares / MICE_SLOWDOWN_SQUARED_SCALE
        else:
            reward = REWARDS[self.reward_kind](tel, self.reward_weights)
        if self.goodput_weight:
            reward = reward + self.goodput_weight * utilisation(tel)
        return reward

    def _mice_fct_reward(
        self, p: network.Params, before: network.NetState, net: network.NetState,
        tel: PortTelemetry,
    ) -> jnp.ndarray:  # fmt: skip
        """agent/rewards.py's MICE_FCT: ω1·utilisation + ω2·(mean 1/slowdown of the mice
        that completed through the port in this interval; 1 where none did)."""
        done = (before.fct < 0) & (net.fct >= 0) & (p.size < MICE_BYTES)  # (flows,)
        ideal = ideal_fct(p.size, p.line_rate * 8.0, p.base_rtt, xp=jnp)
        score = jnp.where(done, jnp.minimum(1.0, ideal / jnp.maximum(net.fct, 1e-9)), 0.0)
        through = self._through(p)
        count = jnp.sum(through & done[:, None], axis=0)
        total = score @ through.astype(score.dtype)
        mean = jnp.where(count > 0, total / jnp.maximum(count, 1), 1.0)
        w = self.reward_weights
        return w.throughput * utilisation(tel) + w.delay * mean

    def _mice_slowdown_accrued(
        self, p: network.Params, before: network.NetState, net: network.NetState, squared: bool
    ) -> jnp.ndarray:
        """agent/rewards.py's MICE_SLOWDOWN and MICE_SLOWDOWN_SQUARED, unscaled: per port,
        the slowdown its mice accrued in this interval (each running mouse's time in it over
        its ideal FCT), or the growth of half their squared slowdowns, (s1² − s0²)/2."""
        t0, t1 = before.t, net.t
        # a flow finishing in this interval ran until start + fct (fct ends with the
        # last ACK's half RTT, so clip to the interval); one still running, to its end
        end = jnp.where(net.fct >= 0, jnp.minimum(p.start + net.fct, t1), t1)
        running = (before.fct < 0) & (p.size < MICE_BYTES)  # (flows,); unused: start inf
        began = jnp.maximum(p.start, t0)
        ran_s = jnp.where(running, jnp.maximum(end - began, 0.0), 0.0)
        ideal = ideal_fct(p.size, p.line_rate * 8.0, p.base_rtt, xp=jnp)
        share = jnp.where(ran_s > 0, ran_s / ideal, 0.0)  # padding flows: 0, never 0/0
        if squared:  # s0: the slowdown it had accrued before the interval
            before_s = jnp.where(ran_s > 0, (began - p.start) / ideal, 0.0)
            share = share * (before_s + share / 2)
        return share @ self._through(p).astype(share.dtype)

    def _switch_mean(self, per_port: jnp.ndarray) -> jnp.ndarray:
        """Every port's value replaced by the mean over its switch's ports."""
        switch_of = self.fabric.port_switch
        totals = jnp.zeros(len(self.fabric.switch_ports)).at[switch_of].add(per_port)
        return (totals / np.bincount(switch_of, minlength=len(totals)))[switch_of]

    def _through(self, p: network.Params) -> jnp.ndarray:
        """(flows, ports): whether each flow's path crosses each switch egress port."""
        ports = jnp.asarray(self.fabric.ports)
        return jnp.any(p.path[:, :, None] == ports[None, None, :], axis=1)

    def _off(self) -> EcnThresholds:
        z = jnp.zeros(self.n_ports, jnp.float32)
        return EcnThresholds(z, z, z)

    def _per_link(self, th: EcnThresholds) -> jnp.ndarray:
        """(links, 3) kmin, kmax, pmax: the ports' settings, host NICs' own (see make)."""
        out = jnp.asarray(self.nic_marking)
        cols = jnp.stack([jnp.asarray(x, jnp.float32) for x in th], axis=-1)
        return out.at[jnp.asarray(self.fabric.ports)].set(cols)

    def _telemetry(self, c: network.Counters, th: EcnThresholds) -> PortTelemetry:
        p = jnp.asarray(self.fabric.ports)
        zeros = jnp.sum(~c.senders[p], axis=1)
        senders = senders_estimate(zeros, jnp)
        return PortTelemetry(
            interval_s=jnp.full(p.shape, self.interval_s, jnp.float32),
            link_bps=self.link_bps(),
            tx_bytes=c.tx_bytes[p], tx_pkts=c.tx_bytes[p] / MTU_BYTES,
            marked_bytes=c.marked_bytes[p], marked_pkts=c.marked_bytes[p] / MTU_BYTES,
            qdepth_sum_bytes=c.qdepth_sum[p], qdepth_samples=c.qdepth_samples[p],
            qdepth_max_bytes=c.qdepth_max[p],
            kmin_bytes=jnp.asarray(th.kmin_bytes, jnp.float32),
            kmax_bytes=jnp.asarray(th.kmax_bytes, jnp.float32),
            pmax=jnp.asarray(th.pmax, jnp.float32), senders=senders,
            elephant_bytes=c.elephant_bytes[p],
        )  # fmt: skip


def transport_names() -> tuple[str, ...]:
    return transport.TRANSPORTS
