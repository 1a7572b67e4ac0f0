"""ACC's and PET's training loops, each one jitted function (PureJaxRL's `make_train` style).

    loop = make_acc_loop(env, DdqnConfig(), envs=8)
    carry = loop.init(jax.random.key(0))
    carry, rewards = loop.run(carry, 4)  # 4 rounds: 4 episodes on each of 8 copies, one call
    params = loop.params(carry)

A round is one episode on each of `envs` copies of the environment side by side (vmap), its
intervals under `lax.scan`: acting, stepping the simulator and learning never leave the
device, and many copies amortise one step of the fabric model (sim/README.md: batched
steps cost a fraction of single ones). `env` is anything with the simulator's API:
sim/env.py `Env` or sim/regimes.py `RegimeEnv` — reset(key) -> (obs, state),
step(state, thresholds) -> (obs, state, reward, done, info), n_ports, link_bps(),
episode_intervals.

**Parameter sharing.** One network is trained by every port of every switch of every copy
(ACC §4 and PET §4 train one model per switch; ecntune's checkpoints have always deployed
one network, trained by all switches through ACC's global replay, to every switch). Each
busy port is one agent sample per interval, as in the papers; idle ports (nothing sent in
the interval) are left out of the learning, as ACC §4.3 skips their inference.

ACC (§4.3): ε-greedy actions (ddqn.select_actions), where a port idle in the last interval
keeps its setting as deployed (ddqn.hold_idle_ports; its transition is left out: its action
was not applied), busy ports' transitions into one replay (the global replay), one
double-DQN update (ddqn.update) per interval of each copy once the buffer holds
`min_buffer` samples, ε decaying per interval of each copy: the same learning per episode
simulated whatever `envs` is.

PET (§4.2): actions sampled from the actor for a whole round, GAE bootstrapped from the
last value (the episode end is a time limit; collect_pet_round), then ippo.update's
clipped-surrogate epochs on every busy port's samples, in `envs` times the configured
minibatches (their size, and the gradient steps per episode, as with one copy).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ecntune.agent import ddqn, graphcc, ippo


class Loop(NamedTuple):
    """A training loop: `init(key) -> carry`, `run(carry, rounds) -> (carry, per-round
    metrics)` (jitted; `rounds` is static), `params(carry)` the deployable parameters."""

    init: Callable[[jax.Array], Any]
    run: Callable[[Any, int], tuple[Any, dict[str, jax.Array]]]
    params: Callable[[Any], Any]


def _flat(x: jax.Array) -> jax.Array:
    """(envs, ports, ...) -> (envs·ports, ...): every port of every copy is one sample."""
    return x.reshape(-1, *x.shape[2:])


def _busy_mean(x: jax.Array, busy: jax.Array) -> jax.Array:
    return jnp.sum(jnp.where(busy, x, 0.0)) / jnp.maximum(jnp.sum(busy), 1)


# -- ACC: double DQN with a replay -----------------------------------------------------------


class Ring(NamedTuple):
    """The replay: a ring of transitions that takes a masked batch (only busy ports' rows)."""

    data: ddqn.Transition  # (capacity, ...) each
    size: jax.Array
    at: jax.Array  # the next row to write

    @staticmethod
    def empty(example: ddqn.Transition, capacity: int) -> Ring:
        rows = jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype),
                            example)  # fmt: skip
        return Ring(rows, jnp.int32(0), jnp.int32(0))

    def add(self, rows: ddqn.Transition, keep: jax.Array) -> Ring:
        """Append the rows where `keep`, in order, overwriting the oldest when full."""
        capacity = self.data.reward.shape[0]
        rank = jnp.cumsum(keep) - 1
        where = jnp.where(keep, (self.at + rank) % capacity, capacity)  # capacity: dropped
        data = jax.tree.map(lambda d, r: d.at[where].set(r, mode="drop"), self.data, rows)
        n = jnp.sum(keep, dtype=jnp.int32)
        return Ring(data, jnp.minimum(self.size + n, capacity), (self.at + n) % capacity)

    def sample(self, key: jax.Array, batch: int) -> ddqn.Transition:
        rows = jax.random.randint(key, (batch,), 0, jnp.maximum(self.size, 1))
        return jax.tree.map(lambda d: d[rows], self.data)


Array = jax.Array
Acted = tuple[Array, Any, Array]  # action, thresholds, applied (per copy and port)
Rows = tuple[Any, Array]  # replay rows, which to keep
Learnt = tuple[ddqn.Learner, Array]  # learner, loss


class DqnCarry(NamedTuple):
    learner: ddqn.Learner
    replay: Ring
    key: jax.Array
    step: jax.Array  # intervals so far (ε's schedule)


def _dqn_rounds(
    env: Any, config: Any, envs: int, act: Callable, rows: Callable, learn_step: Callable
) -> Callable[[DqnCarry, int], tuple[DqnCarry, dict[str, jax.Array]]]:
    """The jitted `run(carry, rounds)` both DQN agents share: per interval of `envs` copies,
    `act(params, obs, history, key, eps) -> (action, thresholds, applied)` (`applied`: the
    ports whose action took effect), one simulator step, `rows(obs, action, reward,
    next_obs, learn) -> (replay rows, keep)` into the replay and, once it holds
    `min_buffer`, `envs` updates `learn_step(learner, batch)`: one per episode-interval,
    as one environment per interval would take."""

    def interval(c: tuple, _: None) -> tuple[tuple, dict[str, jax.Array]]:
        learner, replay, obs, state, key, step = c
        key, k_act, k_sample = jax.random.split(key, 3)
        eps = ddqn.epsilon(config, step)  # `step` counts episode-intervals: envs per interval
        action, th, applied = act(learner.params, obs, state.history, k_act, eps)
        next_obs, state, reward, _, info = jax.vmap(env.step)(state, th)
        busy = info["telemetry"].tx_bytes > 0
        replay = replay.add(*rows(obs, action, reward, next_obs, busy & applied))

        def learn(lr: ddqn.Learner) -> ddqn.Learner:
            def one(lr: ddqn.Learner, k: jax.Array) -> tuple[ddqn.Learner, None]:
                return learn_step(lr, replay.sample(k, config.batch_size))[0], None

            return jax.lax.scan(one, lr, jax.random.split(k_sample, envs))[0]

        learner = jax.lax.cond(replay.size >= config.min_buffer, learn, lambda lr: lr, learner)
        metrics = {"reward": _busy_mean(reward, busy), "epsilon": eps}
        return (learner, replay, next_obs, state, key, step + envs), metrics

    def one_round(carry: DqnCarry, _: None) -> tuple[DqnCarry, dict[str, jax.Array]]:
        learner, replay, key, step = carry
        key, k_reset = jax.random.split(key)
        obs, state = jax.vmap(env.reset)(jax.random.split(k_reset, envs))
        start = (learner, replay, obs, state, key, step)
        (learner, replay, _, _, key, step), m = jax.lax.scan(
            interval, start, None, env.episode_intervals
        )
        return DqnCarry(learner, replay, key, step), jax.tree.map(jnp.mean, m)

    @functools.partial(jax.jit, static_argnums=1)
    def run(carry: DqnCarry, rounds: int) -> tuple[DqnCarry, dict[str, jax.Array]]:
        return jax.lax.scan(one_round, carry, None, rounds)

    return run


def make_acc_loop(env: Any, config: ddqn.DdqnConfig, envs: int = 8) -> Loop:
    template, link_bps = config.template, env.link_bps()
    graph, _ = ddqn.build_network(config, jax.random.key(0))  # the structure only

    def init(key: jax.Array) -> DqnCarry:
        k_init, key = jax.random.split(key)
        _, params = ddqn.build_network(config, k_init)
        obs, _ = env.reset(key)
        example = ddqn.Transition(obs[0], jnp.int32(0), jnp.float32(0), obs[0], jnp.float32(0))
        replay = Ring.empty(example, config.buffer_size)
        return DqnCarry(ddqn.init_learner(config, params), replay, key, jnp.int32(0))

    def act(params: Any, obs: Array, history: Any, key: Array, eps: Array) -> Acted:
        action = ddqn.select_actions(graph, params, _flat(obs), key, eps).reshape(obs.shape[:2])
        # ACC §4.3 as deployed (ddqn.decide): a port idle last interval keeps its setting,
        # so its chosen action is not applied and its transition is not learnt from
        held = jax.vmap(ddqn.held_ports)(history)
        th = jax.vmap(ddqn.hold_idle_ports)(template.thresholds(action, link_bps), history)
        return action, th, ~held

    def rows(obs: Array, action: Array, reward: Array, next_obs: Array, learn: Array) -> Rows:
        batch = ddqn.Transition(
            _flat(obs), _flat(action), _flat(reward), _flat(next_obs),
            jnp.zeros(learn.size),  # a time limit truncates, it does not terminate
        )  # fmt: skip
        return batch, _flat(learn)

    def learn_step(learner: ddqn.Learner, batch: ddqn.Transition) -> Learnt:
        return ddqn.update(config, graph, learner, batch)

    run = _dqn_rounds(env, config, envs, act, rows, learn_step)
    return Loop(init, run, lambda c: c.learner.params)


def make_graphcc_loop(env: Any, config: graphcc.GraphccConfig, envs: int = 8) -> Loop:
    """GraphCC (§3.3): ε-greedy Q-values from the GNN over the fabric's port graph for every
    port (no idle rule), one fabric-wide sample per copy and interval into the replay (kept
    if any port was busy), double-DQN updates on batches of fabric samples as ACC's."""
    template, link_bps = config.template, env.link_bps()
    neighbours = jnp.asarray(graphcc.port_graph(env.fabric))
    graph, _ = graphcc.build_network(config, jax.random.key(0))  # the structure only

    def init(key: jax.Array) -> DqnCarry:
        k_init, key = jax.random.split(key)
        _, params = graphcc.build_network(config, k_init)
        obs, _ = env.reset(key)
        a = jnp.zeros(obs.shape[0], jnp.int32)
        example = graphcc.FabricTransition(obs, a, a.astype(jnp.float32), obs, a > 0)
        replay = Ring.empty(example, config.buffer_size)
        return DqnCarry(ddqn.init_learner(config, params), replay, key, jnp.int32(0))

    def act(params: Any, obs: Array, _history: Any, key: Array, eps: Array) -> Acted:
        q = graphcc.q_values(graph, params, obs, neighbours)
        action = ddqn.epsilon_greedy(q, key, eps)
        return action, template.thresholds(action, link_bps), jnp.ones(action.shape, bool)

    def rows(obs: Array, action: Array, reward: Array, next_obs: Array, learn: Array) -> Rows:
        batch = graphcc.FabricTransition(obs, action, reward, next_obs, learn)
        return batch, jnp.any(learn, axis=-1)

    def learn_step(learner: ddqn.Learner, batch: graphcc.FabricTransition) -> Learnt:
        return graphcc.update(config, graph, neighbours, learner, batch)

    run = _dqn_rounds(env, config, envs, act, rows, learn_step)
    return Loop(init, run, lambda c: c.learner.params)


# -- PET: independent PPO ---------------------------------------------------------------------


class PetCarry(NamedTuple):
    learner: ippo.Learner
    key: jax.Array


class PetRound(NamedTuple):
    batch: ippo.Batch  # every busy (interval, copy, port) sample, flat
    reward: jax.Array  # (interval, copy, port)
    busy: jax.Array
    entropy: jax.Array


def collect_pet_round(
    env: Any,
    config: ippo.IppoConfig,
    nets: ippo.Nets,
    params: ippo.Params,
    k_reset: jax.Array,
    k_act: jax.Array,
    envs: int,
) -> PetRound:
    """One round of PET's on-policy samples, what ippo.update learns from: an episode on each
    of `envs` copies with actions sampled from the actor, GAE bootstrapped from the last
    value; idle samples are replaced by copies of busy ones so the batch keeps its size
    (PPO's minibatches are static shapes)."""
    template, link_bps = config.template, env.link_bps()
    obs, state = jax.vmap(env.reset)(jax.random.split(k_reset, envs))

    def interval(c: tuple, k: jax.Array) -> tuple[tuple, tuple]:
        obs, state = c
        pi = ippo.policy(nets, params, obs)
        action = pi.sample(seed=k)
        v = ippo.value(nets, params, obs)
        th = template.thresholds(action, link_bps)
        next_obs, state, reward, _, info = jax.vmap(env.step)(state, th)
        busy = info["telemetry"].tx_bytes > 0
        step = (obs, action, pi.log_prob(action), v, reward, busy, pi.entropy())
        return (next_obs, state), step

    keys = jax.random.split(k_act, env.episode_intervals)
    (last_obs, _), (o, a, lp, v, r, busy, ent) = jax.lax.scan(interval, (obs, state), keys)
    last = ippo.value(nets, params, last_obs)
    adv, target = ippo.gae(r, v, jnp.zeros_like(r), last, config.gamma, config.gae_lambda)
    flat = ippo.Batch(*(x.reshape(-1, *x.shape[3:]) for x in (o, a, lp, adv, target)))
    b = busy.reshape(-1)
    order = jnp.argsort(~b)
    pick = order[jnp.arange(b.size) % jnp.maximum(jnp.sum(b), 1)]
    return PetRound(jax.tree.map(lambda x: x[pick], flat), r, busy, ent)


def make_pet_loop(env: Any, config: ippo.IppoConfig, envs: int = 8) -> Loop:
    nets, _ = ippo.build_networks(config, jax.random.key(0))  # the structure only
    # a round's batch is `envs` episodes: as many minibatches of the same size per episode
    # as one episode per update would give (the same gradient steps per episode simulated)
    per_round = dataclasses.replace(config, minibatches=config.minibatches * envs)

    def init(key: jax.Array) -> PetCarry:
        k_init, key = jax.random.split(key)
        _, params = ippo.build_networks(config, k_init)
        return PetCarry(ippo.init_learner(config, params), key)

    def one_round(carry: PetCarry, _: None) -> tuple[PetCarry, dict[str, jax.Array]]:
        learner, key = carry
        key, k_reset, k_act, k_learn = jax.random.split(key, 4)
        sampled = collect_pet_round(env, config, nets, learner.params, k_reset, k_act, envs)
        learner, info = ippo.update(per_round, nets, learner, sampled.batch, k_learn)
        r, busy = sampled.reward, sampled.busy
        metrics = {"reward": _busy_mean(r, busy), "entropy": _busy_mean(sampled.entropy, busy)}
        return PetCarry(learner, key), metrics | info

    @functools.partial(jax.jit, static_argnums=1)
    def run(carry: PetCarry, rounds: int) -> tuple[PetCarry, dict[str, jax.Array]]:
        return jax.lax.scan(one_round, carry, None, rounds)

    return Loop(init, run, lambda c: c.learner.params)


def greedy_acc(config: ddqn.DdqnConfig) -> Callable[[Any, jax.Array], jax.Array]:
    """`act(params, obs) -> action ids`: the Q-network's argmax per port (DdqnPolicy.act)."""
    graph, _ = ddqn.build_network(config, jax.random.key(0))
    return lambda params, obs: jnp.argmax(ddqn.q_values(graph, params, obs), axis=-1)


def greedy_pet(config: ippo.IppoConfig) -> Callable[[Any, jax.Array], jax.Array]:
    """`act(params, obs) -> action ids`: the actor's most likely action (IppoPolicy.act)."""
    nets, _ = ippo.build_networks(config, jax.random.key(0))
    return lambda params, obs: jnp.argmax(ippo.policy(nets, params, obs).logits, axis=-1)
