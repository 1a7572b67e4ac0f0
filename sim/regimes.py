"""Two regimes whose best ECN settings differ: can an agent learn to adapt at all?

Why this exists (issue 14). The shipped PET agent picked kmin = kmax = α in every one of
20,000 random states, and ACC, which does vary its action, lost to one static setting. On
the fabric simulator that cannot tell "the algorithm cannot learn a state-dependent policy"
apart from "one static setting is simply the best there is". This environment is built so
that the answer is known: adapting wins by a clear, exactly computable margin, and a
learner that collapses to one action provably loses. It is the sanity check the learners
must pass before their fabric results mean anything; tests/test_adaptation.py runs it.

The model, one egress port per row, one telemetry interval per step (all queues in units
of the template's α; 20 KB at the default 25 Gbit/s):

- Each port is in one of two regimes, a Markov chain that switches with probability
  `switch_prob` per interval (independently per port); both are equally likely overall.

  BULK (regime 0): a few long flows (1-4 senders, ≥ 70 % elephant bytes) offering
  85-100 % of the link. Their windows are large, so DCTCP needs few marks (a fraction
  p* of 2-6 % of the bytes) and the queue swings ±8-14 α around its operating point:
  a low threshold empties the queue every sawtooth and the link idles. Best: holding the
  queue about as high as the swing (kmin = kmax = 16 α), i.e. throughput first.
  INCAST (regime 1): 16-64 senders of mice (≤ 20 % elephant bytes) saturating the link.
  Small windows need many marks (p* of 30-60 %) and the swing is ±1 α, so the link stays
  busy at any threshold and only the queue differs. Best: the lowest threshold, α.

- The queue settles where the RED ramp marks the fraction the senders need,
  q* = kmin + (kmax − kmin)·min(1, p*/pmax), and swings uniformly in q* ± a. The link idles
  while the swing would go below zero: utilisation = load·(1 − max(0, a − q*)/(2a)), mean
  queue = E[max(0, q* + a·U)], U ~ U(−1, 1). Marked bytes are the fraction p* of the sent
  bytes (what the senders need, whatever the ramp), queue samples one per packet.

- All of it is written as real `PortTelemetry` records, so the agents see it through their
  own agent/features.py observation (k = 3 intervals: queue, rate, marked rate, setting,
  and PET's incast degree and elephant share) and are paid by the unchanged
  agent/rewards.py acc_reward / pet_reward. The regime is visible in the telemetry whatever
  the action: the marked rate (p*·utilisation ≤ 6 % vs ≥ 27 %), senders, elephant share.

- Reward weights default to (throughput 0.7, delay 0.3), the papers' DataMining weights:
  under the latency-first weights the queue term dominates so much that the lowest
  threshold wins in both regimes, and there is nothing to adapt to.

With the defaults the best action in BULK is kmin = kmax = 16 α and in INCAST kmin = kmax
= α, and the best single action (16 α) is ~0.06 reward (7-8 %) below the regime oracle
(ACC's reward: 0.849 vs 0.904, PET's: 0.689 vs 0.750 on 16 episodes; `static_rewards` and
`baselines` compute both exactly on given seeds). Under the latency-first weights (0.3,
0.7) kmin = kmax = α is the best action in both regimes for ACC's reward, and within
0.005 of the oracle for PET's: a learner that collapses to α there is right.

The action never changes the regime or the noise (iid per interval): this is a contextual
bandit with a Markov context, on purpose, so that "the best static action" and "the
regime oracle" (the best action for each regime, told the regime) are exact numbers on the
same seeds, not estimates. A learned policy sees the regime only through the last
intervals' telemetry, so it pays at switches: the oracle is a bound it cannot quite reach.

API (gymnax-like, pure, jit- and vmap-able like sim/env.py):

    env = RegimeEnv(reward="pet", features="pet")
    obs, state = env.reset(key)                     # obs: (ports, k * features)
    obs, state, reward, done, info = env.step(state, thresholds)   # EcnThresholds per port

info["telemetry"] is the interval's PortTelemetry and info["regime"] the regime each port
was in. The agents train on it with the same jitted loops as on the fabric
(agent/loops.py); evaluate() runs a policy (loops.greedy_acc / greedy_pet) on fixed seeds.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from ecntune.agent.actions import ActionTemplate, alpha_bytes
from ecntune.agent.features import HISTORY, observation
from ecntune.agent.rewards import REWARDS, THROUGHPUT_FIRST, RewardWeights
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import MTU_BYTES

BULK, INCAST = 0, 1


class Regime(NamedTuple):
    """One regime's traffic, as ranges drawn uniformly every interval (lo, hi)."""

    senders: tuple[float, float]
    load: tuple[float, float]  # offered load, fraction of the link
    marks: tuple[float, float]  # p*: fraction of bytes the senders need marked
    swing: tuple[float, float]  # a: the queue's sawtooth half-amplitude, units of α
    elephant: tuple[float, float]  # share of bytes from flows past 1 MB


BULK_TRAFFIC = Regime((1, 4), (0.85, 1.0), (0.02, 0.06), (8.0, 14.0), (0.7, 1.0))
INCAST_TRAFFIC = Regime((16, 64), (1.0, 1.0), (0.3, 0.6), (1.0, 1.0), (0.0, 0.2))


class RegimeState(NamedTuple):
    key: jax.Array
    regime: jax.Array  # (ports,) int32, the regime of the coming interval
    history: PortTelemetry  # (k, ports), oldest first
    t: jax.Array


@dataclasses.dataclass(frozen=True)
class RegimeEnv:
    ports: int = 4
    speed_bps: float = 25e9
    interval_s: float = 100e-6  # ~40 RTTs of a 25G datacenter fabric
    switch_prob: float = 0.05  # per interval: regimes last 20 intervals on average
    episode: int = 64  # intervals; `done` after that many (a time limit, not a terminal)
    features: Literal["acc", "pet"] = "pet"
    reward: Literal["acc", "pet"] = "pet"
    reward_weights: RewardWeights = THROUGHPUT_FIRST
    regimes: tuple[Regime, Regime] = (BULK_TRAFFIC, INCAST_TRAFFIC)

    # -- the environment API (sim/env.py's: what agent/loops.py trains on) ---------------

    @property
    def n_ports(self) -> int:
        return self.ports

    @property
    def episode_intervals(self) -> int:
        return self.episode

    def link_bps(self) -> jax.Array:
        return jnp.full(self.ports, self.speed_bps, jnp.float32)

    @functools.partial(jax.jit, static_argnums=0)
    def reset(self, key: jax.Array) -> tuple[jax.Array, RegimeState]:
        k_regime, k_next = jax.random.split(key)
        regime = jax.random.randint(k_regime, (self.ports,), 0, 2)
        idle = self._idle()
        history = jax.tree.map(lambda x: jnp.stack([x] * HISTORY), idle)
        state = RegimeState(k_next, regime, history, jnp.int32(0))
        return observation(history, self.features), state

    @functools.partial(jax.jit, static_argnums=0)
    def step(
        self, state: RegimeState, thresholds: EcnThresholds
    ) -> tuple[jax.Array, RegimeState, jax.Array, jax.Array, dict[str, Any]]:
        key, k_traffic, k_switch = jax.random.split(state.key, 3)
        tel = self.telemetry(k_traffic, state.regime, thresholds)
        reward = REWARDS[self.reward](tel, self.reward_weights)
        history = jax.tree.map(lambda h, x: jnp.concatenate([h[1:], x[None]]), state.history, tel)
        flip = jax.random.uniform(k_switch, (self.ports,)) < self.switch_prob
        regime = jnp.where(flip, 1 - state.regime, state.regime)
        t = state.t + 1
        info = {"telemetry": tel, "regime": state.regime}
        new = RegimeState(key, regime, history, t)
        return observation(history, self.features), new, reward, t >= self.episode, info

    # -- the model -------------------------------------------------------------------------

    def telemetry(self, key: jax.Array, regime: jax.Array, th: EcnThresholds) -> PortTelemetry:
        """One interval of every port under `th`, its traffic drawn from `key` (the same
        key gives the same traffic whatever the setting: static policies compare exactly)."""
        draws = jax.random.uniform(key, (5, self.ports))

        def pick(field: int) -> jax.Array:
            lo = jnp.array([r[field][0] for r in self.regimes])[regime]
            hi = jnp.array([r[field][1] for r in self.regimes])[regime]
            return lo + (hi - lo) * draws[field]

        senders, load, marks, swing, elephant = (pick(i) for i in range(5))
        senders = jnp.round(senders)
        alpha = alpha_bytes(self.speed_bps)
        kmin = jnp.asarray(th.kmin_bytes, jnp.float32) / alpha
        kmax = jnp.maximum(jnp.asarray(th.kmax_bytes, jnp.float32) / alpha, kmin)
        pmax = jnp.clip(jnp.asarray(th.pmax, jnp.float32), 1e-6, 1.0)
        q_star = kmin + (kmax - kmin) * jnp.minimum(1.0, marks / pmax)
        # queue q* + a·U, U ~ U(-1, 1), floored at zero: idle share and mean queue
        idle = jnp.clip((swing - q_star) / (2.0 * swing), 0.0, 1.0)
        lo = jnp.maximum(q_star - swing, 0.0)
        hi = q_star + swing
        mean_q = (hi**2 - lo**2) / (4.0 * swing)  # ∫ max(0, q) over the swing / (2a)
        util = load * (1.0 - idle)
        tx = util * self.speed_bps * self.interval_s / 8.0
        pkts = tx / MTU_BYTES
        f = jnp.ones(self.ports, jnp.float32)
        return PortTelemetry(
            interval_s=self.interval_s * f, link_bps=self.speed_bps * f,
            tx_bytes=tx, tx_pkts=pkts, marked_bytes=marks * tx, marked_pkts=marks * pkts,
            qdepth_sum_bytes=mean_q * alpha * pkts, qdepth_samples=pkts,
            qdepth_max_bytes=hi * alpha, kmin_bytes=kmin * alpha, kmax_bytes=kmax * alpha,
            pmax=jnp.asarray(th.pmax, jnp.float32) * f, senders=senders,
            elephant_bytes=elephant * tx,
        )  # fmt: skip

    def _idle(self) -> PortTelemetry:
        z = jnp.zeros(self.ports, jnp.float32)
        f = jnp.ones(self.ports, jnp.float32)
        return PortTelemetry(
            self.interval_s * f, self.speed_bps * f, z, z, z, z, z, z, z, z, z, z, z, z
        )


# -- exact baselines on fixed seeds ------------------------------------------------------------


def rollout(
    env: RegimeEnv, template: ActionTemplate, act: Any, params: Any, key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One episode under `act(params, obs) -> action ids` (one per port): the rewards, the
    actions and the regimes, each (intervals, ports)."""
    obs, state = env.reset(key)

    def one(carry: tuple[jax.Array, RegimeState], _: None):
        obs, state = carry
        action = act(params, obs)
        th = template.thresholds(action, env.link_bps())
        obs, state, reward, _, info = env.step(state, th)
        return (obs, state), (reward, action, info["regime"])

    _, out = jax.lax.scan(one, (obs, state), None, length=env.episode)
    return out


@functools.partial(jax.jit, static_argnums=(0, 2))
def evaluate(
    env: RegimeEnv, template: ActionTemplate, act: Any, params: Any, keys: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`rollout` on every key: rewards, actions, regimes (episodes, intervals, ports)."""
    return jax.vmap(lambda k: rollout(env, template, act, params, k))(keys)


def static_rewards(env: RegimeEnv, template: ActionTemplate, keys: jax.Array) -> jax.Array:
    """Every template action held fixed on every key: rewards (actions, episodes, T, ports).
    The traffic depends only on the key, so these are the very intervals a learned policy
    is judged on."""

    def fixed(a: jax.Array, obs: jax.Array) -> jax.Array:
        return jnp.full(obs.shape[:-1], a, jnp.int32)

    actions = jnp.arange(template.n_actions, dtype=jnp.int32)
    return jax.jit(jax.vmap(lambda a: evaluate(env, template, fixed, a, keys)[0]))(actions)


class Baselines(NamedTuple):
    """What a learned policy is judged against, on the same intervals."""

    best_static: float  # the mean reward of the best single action
    best_static_action: int
    oracle: float  # the best action per regime, told the regime
    oracle_actions: tuple[int, int]  # (BULK, INCAST)
    per_regime_best: tuple[float, float]  # the oracle's mean reward within each regime


def baselines(rewards: jax.Array, regimes: jax.Array) -> Baselines:
    """From static_rewards' (actions, ...) and the regimes (...) of the same intervals."""
    r = rewards.reshape(rewards.shape[0], -1)
    g = regimes.reshape(-1)
    mean = r.mean(axis=1)
    best = int(jnp.argmax(mean))
    per = [jnp.where(g == k, r, 0.0).sum(axis=1) for k in (BULK, INCAST)]
    picks = tuple(int(jnp.argmax(p)) for p in per)
    counts = [jnp.maximum(jnp.sum(g == k), 1) for k in (BULK, INCAST)]
    oracle = float((per[0][picks[0]] + per[1][picks[1]]) / g.size)
    within = tuple(float(per[k][picks[k]] / counts[k]) for k in (BULK, INCAST))
    return Baselines(float(mean[best]), best, oracle, picks, within)  # type: ignore[arg-type]
