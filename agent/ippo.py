"""PET's agent (PET §4): independent PPO, one actor-critic per switch, over the ECN template.

Read top to bottom, PureJaxRL-style:

    build_networks      actor (logits over template actions) and critic (a value), two
                        MLPs over one port's PET observation (ACC's features plus incast
                        degree and the elephant share)
    gae                 generalised advantage estimation, a reverse lax.scan over time
    ppo_loss            clipped surrogate (ε = 0.2) + entropy bonus for the actor, squared
                        error for the critic
    update              epochs × minibatches of Adam steps; actor lr 4e-4, critic lr 1e-3
    decide              one switch's whole decision (features, actor, greedy or sampled
                        action, template) as one pure function: jitted once per port count
                        for the controller, run inside the simulator by the evaluator
    IppoPolicy          the trained agent behind agent/policy.py's interface: greedy when
                        deployed (or `sampled`: the stochastic policy it trained as, each
                        interval's draw keyed by that interval's telemetry), sampling with a
                        decaying temperature when fine-tuning online (PET's exploration decay)

Every switch learns only from its own ports (no global replay, unlike ACC); a switch's
ports share its parameters. Training in the simulator is agent/train.py.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Literal, NamedTuple

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ecntune.agent.actions import ACC_PMAX, ActionTemplate, acc_template, listed_template
from ecntune.agent.features import FeatureSet, observation, observation_size
from ecntune.agent.nets import apply, load_checkpoint, mlp, restore, save_checkpoint
from ecntune.agent.policy import compiled
from ecntune.agent.rewards import Reward, trained_reward
from ecntune.telemetry import EcnThresholds, PortTelemetry

FORMAT = "ecntune-ippo/1"
GRAD_NORM = 0.5  # PureJaxRL's max_grad_norm
GradClip = Literal["joint", "per_network"]  # make_optimizer


@dataclasses.dataclass(frozen=True)
class IppoConfig:
    features: FeatureSet = "pet"
    hidden: tuple[int, ...] = (64, 64)
    levels: int = 10
    zero_level: bool = False  # agent/actions.py
    pmax: tuple[float, ...] = ACC_PMAX
    settings: tuple[str, ...] = ()  # a listed template in place of the grid (agent/actions.py)
    actor_lr: float = 4e-4  # PET §5.1
    critic_lr: float = 1e-3
    gamma: float = 0.9
    gae_lambda: float = 0.95  # PureJaxRL's; PET §5.1 sets "the coefficient of GAE" to 0.01
    clip: float = 0.2  # PET §4.2
    grad_clip: GradClip = "joint"  # make_optimizer
    entropy: float = 0.01
    epochs: int = 4
    minibatches: int = 4
    temperature_start: float = 1.0  # online exploration: logits / T, T decays to ...
    temperature_end: float = 0.1
    temperature_decay: float = 1000.0  # ... exponentially, in intervals

    @property
    def template(self) -> ActionTemplate:
        if self.settings:
            return listed_template(self.settings)
        return acc_template(self.levels, self.pmax, self.zero_level)


class Nets(NamedTuple):
    actor: nnx.GraphDef
    critic: nnx.GraphDef


class Params(NamedTuple):
    actor: nnx.State
    critic: nnx.State


def build_networks(config: IppoConfig, key: jax.Array) -> tuple[Nets, Params]:
    obs = observation_size(config.features)
    k_actor, k_critic = jax.random.split(key)
    actor_graph, actor = mlp((obs, *config.hidden, config.template.n_actions), k_actor)
    critic_graph, critic = mlp((obs, *config.hidden, 1), k_critic)
    return Nets(actor_graph, critic_graph), Params(actor, critic)


def policy(nets: Nets, params: Params, obs: jax.Array) -> distrax.Categorical:
    return distrax.Categorical(logits=apply(nets.actor, params.actor, obs))


def value(nets: Nets, params: Params, obs: jax.Array) -> jax.Array:
    return apply(nets.critic, params.critic, obs)[..., 0]


def gae(
    rewards: jax.Array,
    values: jax.Array,
    dones: jax.Array,
    last_value: jax.Array,
    gamma: float,
    lam: float,
) -> tuple[jax.Array, jax.Array]:
    """Advantages and returns; arrays are (time, ...), `dones[t]` ends the episode after t."""

    def back(carry: tuple[jax.Array, jax.Array], x: tuple[jax.Array, ...]):
        advantage, next_value = carry
        reward, v, done = x
        delta = reward + gamma * next_value * (1.0 - done) - v
        advantage = delta + gamma * lam * (1.0 - done) * advantage
        return (advantage, v), advantage

    init = (jnp.zeros_like(last_value), last_value)
    _, advantages = jax.lax.scan(back, init, (rewards, values, dones), reverse=True)
    return advantages, advantages + values


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array


def clipped_surrogate(ratio: jax.Array, advantage: jax.Array, clip: float) -> jax.Array:
    """PPO's objective: min(r·A, clip(r, 1−ε, 1+ε)·A) — no incentive beyond the trust region."""
    return jnp.minimum(ratio * advantage, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * advantage)


def ppo_loss(
    params: Params, nets: Nets, batch: Batch, clip: float, entropy: float
) -> tuple[jax.Array, dict[str, jax.Array]]:
    pi = policy(nets, params, batch.obs)
    ratio = jnp.exp(pi.log_prob(batch.action) - batch.log_prob)
    adv = (batch.advantage - batch.advantage.mean()) / (batch.advantage.std() + 1e-8)
    actor_loss = -clipped_surrogate(ratio, adv, clip).mean() - entropy * pi.entropy().mean()
    critic_loss = jnp.mean((value(nets, params, batch.obs) - batch.target) ** 2)
    return actor_loss + critic_loss, {"actor": actor_loss, "critic": critic_loss}


def make_optimizer(config: IppoConfig) -> optax.GradientTransformation:
    """Separate learning rates for actor and critic (PET §5.1), gradients clipped to norm
    GRAD_NORM either over both networks together ("joint", PureJaxRL's) or each by its own
    ("per_network": PET's Algorithm 1 updates them apart, lines 8 and 10, so a large critic
    gradient cannot shrink the actor's step; docs/results/pet-own-reward/grad_norms.py)."""
    adam = {"actor": optax.adam(config.actor_lr), "critic": optax.adam(config.critic_lr)}
    labels = Params("actor", "critic")
    if config.grad_clip == "joint":
        return optax.chain(
            optax.clip_by_global_norm(GRAD_NORM), optax.multi_transform(adam, labels)
        )
    clipped = {
        net: optax.chain(optax.clip_by_global_norm(GRAD_NORM), tx) for net, tx in adam.items()
    }
    return optax.multi_transform(clipped, labels)


class Learner(NamedTuple):
    params: Params
    opt_state: optax.OptState


def init_learner(config: IppoConfig, params: Params) -> Learner:
    return Learner(params, make_optimizer(config).init(params))


def update(
    config: IppoConfig, nets: Nets, learner: Learner, batch: Batch, key: jax.Array
) -> tuple[Learner, dict[str, jax.Array]]:
    """`epochs` passes over `batch` (flat: samples first) in shuffled minibatches."""
    opt = make_optimizer(config)
    n = batch.obs.shape[0]
    size = max(1, n // config.minibatches)

    def epoch(carry: tuple[Learner, jax.Array], _: None):
        lr, k = carry
        k, k_perm = jax.random.split(k)
        order = jax.random.permutation(k_perm, n)[: size * config.minibatches]
        shards = jax.tree.map(
            lambda x: x[order].reshape(config.minibatches, size, *x.shape[1:]), batch
        )

        def minibatch(lr: Learner, mb: Batch):
            grads, info = jax.grad(ppo_loss, has_aux=True)(
                lr.params, nets, mb, config.clip, config.entropy
            )
            step, opt_state = opt.update(grads, lr.opt_state, lr.params)
            return Learner(optax.apply_updates(lr.params, step), opt_state), info

        lr, info = jax.lax.scan(minibatch, lr, shards)
        return (lr, k), info

    (learner, _), info = jax.lax.scan(epoch, (learner, key), None, length=config.epochs)
    return learner, jax.tree.map(jnp.mean, info)


def temperature(config: IppoConfig, step: jax.Array | int) -> jax.Array:
    decay = jnp.exp(-jnp.asarray(step, jnp.float32) / config.temperature_decay)
    return config.temperature_end + (config.temperature_start - config.temperature_end) * decay


def decide(
    actor: nnx.GraphDef,
    template: ActionTemplate,
    features: FeatureSet,
    params: nnx.State,
    history: PortTelemetry,
    key: jax.Array | None = None,
    temp: jax.Array | float = 1.0,
) -> tuple[jax.Array, jax.Array, jax.Array, EcnThresholds]:
    """One switch's decision from k intervals of its ports' telemetry with the actor's
    parameters: (observation, action and its log-probability per port, setting per port).
    Greedy without a key, sampled at temperature `temp` with one. One pure function so the
    controller runs it as one compiled call and the simulator runs the same decision."""
    obs = observation(history, features)
    logits = apply(actor, params, obs)
    if key is None:
        actions = jnp.argmax(logits, axis=-1)
    else:
        actions = jax.random.categorical(key, logits / temp)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], axis=-1)[:, 0]
    chosen = template.thresholds(actions, jnp.asarray(history.link_bps)[-1])
    return obs, actions, log_prob, chosen


def telemetry_key(history: PortTelemetry) -> jax.Array:
    """A sampling key drawn from the telemetry itself, so a sampled decision stays a pure
    function of the history as the evaluator's rollouts and the controller's call want it
    (neither passes a key): another draw every interval that sees other counters, the same
    draw for the same counters (a rerun of an episode repeats it)."""
    counters = jnp.stack([jnp.sum(jnp.asarray(x, jnp.float32))
                          for x in (history.tx_bytes, history.qdepth_sum_bytes,
                                    history.marked_bytes, history.elephant_bytes)])  # fmt: skip
    bits = jax.lax.bitcast_convert_type(counters, jnp.uint32)
    key = jax.random.key(0)
    for i in range(bits.shape[0]):
        key = jax.random.fold_in(key, bits[i])
    return key


# -- the trained agent, as the controller and the simulator use it ----------------------------


class IppoPolicy:
    """A trained PET agent for one switch: act() every interval, optionally learn online."""

    def __init__(
        self,
        config: IppoConfig,
        params: Params,
        online: bool = False,
        name: str = "pet",
        sampled: bool = False,
    ) -> None:
        self.config, self.online, self.name, self.sampled = config, online, name, sampled
        self.reward = Reward("pet")  # what it was trained with: load() reads the checkpoint's
        self.nets, _ = build_networks(config, jax.random.key(0))
        self.template = config.template
        self.learner = init_learner(config, params)
        self.key = jax.random.key(0)
        self.steps = 0
        self._rollout: list[tuple[np.ndarray, ...]] = []
        self._last: tuple[jax.Array, jax.Array, jax.Array] | None = None
        self.decide = functools.partial(decide, self.nets.actor, self.template, config.features)
        if sampled:  # PPO trains a stochastic policy; its argmax is a policy it never ran
            base = self.decide
            self.decide = lambda params, history, *rest: base(
                params, history, *(rest or (telemetry_key(history),))
            )
        self._greedy = compiled(self.decide, self.acting_params)
        self._explore = compiled(self._explore_step, self.acting_params)
        self._observe = compiled(lambda _, h: observation(h, config.features), None)
        self._update = jax.jit(lambda lr, b, k: update(config, self.nets, lr, b, k))
        self._values = jax.jit(lambda p, o: value(self.nets, p, o))

    @property
    def params(self) -> Params:
        return self.learner.params

    @property
    def acting_params(self) -> nnx.State:
        """The parameters `decide` takes (what the evaluator runs in the simulator)."""
        return self.learner.params.actor

    def act(self, history: PortTelemetry) -> EcnThresholds:
        if self.online:
            self.key, (obs, actions, log_prob, chosen) = self._explore(
                self.acting_params, history, self.key, self.steps
            )
        else:
            obs, actions, log_prob, chosen = self._greedy(self.acting_params, history)
        self._last = (obs, actions, log_prob)
        return EcnThresholds(*(np.asarray(x, np.float64) for x in chosen))

    def _explore_step(
        self, actor: nnx.State, history: PortTelemetry, key: jax.Array, step: jax.Array
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, EcnThresholds]]:
        """A decision sampled at the decaying temperature, with the key for the next one."""
        key, k = jax.random.split(key)
        return key, self.decide(actor, history, k, temperature(self.config, step))

    def observe(self, history: PortTelemetry, reward: Any) -> None:
        """Online fine-tuning: collect `rollout` intervals, then one PPO update on them."""
        if not self.online or self._last is None:
            return
        obs, actions, log_prob = self._last
        rewards = np.asarray(reward, np.float32).reshape(-1)
        self._rollout.append((obs, actions, log_prob, rewards))
        self.steps += 1
        if len(self._rollout) < 32:
            return
        o, a, lp, r = (np.stack(x) for x in zip(*self._rollout, strict=True))  # (T, ports, ...)
        next_obs = self._observe(None, history)
        values = self._values(self.params, o)
        adv, target = gae(
            jnp.asarray(r), values, jnp.zeros_like(values), self._values(self.params, next_obs),
            self.config.gamma, self.config.gae_lambda,
        )  # fmt: skip
        flat = Batch(*(jnp.asarray(x).reshape(-1, *x.shape[2:]) for x in (o, a, lp, adv, target)))
        self.key, k = jax.random.split(self.key)
        self.learner, _ = self._update(self.learner, flat, k)
        self._rollout = []

    def save(self, path: Path) -> None:
        meta = {"online_steps": self.steps, "reward": self.reward.to_meta()}
        save(path, self.config, self.params, meta)


def save(path: Path, config: IppoConfig, params: Params, meta: dict[str, Any]) -> None:
    save_checkpoint(path, FORMAT, config, {"actor": params.actor, "critic": params.critic}, meta)


def load(path: Path, online: bool = False, sampled: bool = False) -> IppoPolicy:
    """A PET checkpoint as a policy: greedy, or with `sampled` its stochastic policy."""
    fields, raw, meta = load_checkpoint(path, FORMAT, "PET")
    config = IppoConfig(**fields)
    _, template = build_networks(config, jax.random.key(0))
    params = Params(
        restore(template.actor, raw["actor"], path), restore(template.critic, raw["critic"], path)
    )
    kind = "pet-sampled" if sampled else "pet"
    policy = IppoPolicy(config, params, online=online, name=f"{kind}:{path}", sampled=sampled)
    policy.reward = trained_reward(meta, "pet")
    return policy
