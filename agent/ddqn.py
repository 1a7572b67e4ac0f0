"""ACC's agent (SIGCOMM'21 §3-4): double DQN over the ECN action template, one per switch.

Read top to bottom, CleanRL-style:

    QNetwork            an MLP from one port's observation (k intervals of features) to
                        one Q-value per template action; every port of a switch shares it
    epsilon(step)       exploration, decaying exponentially (ACC §4.2)
    select_actions      ε-greedy per port (epsilon_greedy, shared with GraphCC)
    decide              one switch's whole decision (features, network, ε-greedy, template,
                        the idle rule) as one pure function: jitted once per port count
                        for the controller, run inside the simulator by the evaluator
    td_loss             the double-Q target: a* = argmax_a Q_online(s', a),
                        y = r + γ·Q_target(s', a*), Huber loss on Q_online(s, a) − y
    update              one Adam step; the target network is a periodic hard copy
    Replay              per-switch local buffers plus a global buffer that every switch's
                        experience is copied into every `exchange_every` intervals (ACC's
                        "global replay"); batches are half local, half global
    DdqnPolicy          the trained agent behind agent/policy.py's interface: the controller
                        calls act() every interval, observe() for online fine-tuning, save()
    save / load         one msgpack file with the parameters and the config (atomic write)

Idle queues skip inference (ACC §4.3): a port that sent nothing in the last interval keeps
its setting. Training in the simulator is in agent/train.py.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ecntune.agent.actions import ACC_PMAX, ActionTemplate, acc_template, listed_template
from ecntune.agent.features import FeatureSet, observation, observation_size
from ecntune.agent.nets import (
    apply,
    dueling_mlp,
    load_checkpoint,
    mlp,
    restore,
    save_checkpoint,
)
from ecntune.agent.policy import compiled
from ecntune.agent.rewards import Reward, trained_reward
from ecntune.telemetry import EcnThresholds, PortTelemetry

FORMAT = "ecntune-ddqn/1"
# The ACC seed the project deploys: `g01l4` of docs/results ("A ninth mix"), trained for the
# demo's fabric (star8-20ms: 20 Mbit/s, 20.5 ms RTT) with the hosts its emulation runs
# (cubic, classic ECN), chosen among five seeds on the training mix, and the agent that beat
# the simulator's single best static on eight of nine blind mixes; "acc:default" names it.
# The one before it (seed 0 of "Agents trained with the emulation's hosts") is
# acc-star8-20ms-cubic.
DEFAULT_CHECKPOINT = (
    Path(__file__).resolve().parent / "checkpoints" / "acc-star8-20ms-cubic-g01l4.msgpack"
)


@dataclasses.dataclass(frozen=True)
class DdqnConfig:
    features: FeatureSet = "acc"
    hidden: tuple[int, ...] = (64, 64)
    levels: int = 10  # kmin, kmax = α·2^n, n < levels
    zero_level: bool = False  # and 0 below α (agent/actions.py: SECN0's step on slow links)
    pmax: tuple[float, ...] = ACC_PMAX
    settings: tuple[str, ...] = ()  # a listed template in place of the grid (agent/actions.py)
    lr: float = 1e-3
    # A setting acts within the interval it is in force (intervals are ≥ 10 RTTs, ACC
    # §4.3), so one or two intervals of lookahead is all there is to see; 0.5 (what the
    # shipped checkpoints were trained with) rather than 0.9. With γ = 0.9 every Q-value is
    # ~10 intervals of reward while two ECN settings differ by a few % of one interval's:
    # the action gap is ~0.3 % of Q, below what the network resolves, and the greedy action
    # follows estimation noise (sim/regimes.py, training seeds 0 and 1: at γ = 0.9 ACC
    # closed 12 % and −56 % of the best-static-to-oracle gap, at γ = 0.5 60 % and 47 %,
    # at γ = 0.5 with `dueling` 60 % and 67 %; tests/test_adaptation.py).
    gamma: float = 0.5
    batch_size: int = 64
    buffer_size: int = 50_000
    min_buffer: int = 256
    target_every: int = 200  # updates between hard copies to the target network
    exchange_every: int = 20  # intervals between copies of local experience to global
    eps_start: float = 1.0
    eps_end: float = 0.02
    eps_decay: float = 1000.0  # ε = end + (start − end)·exp(−step / decay), in intervals
    # Q = V(s) + A(s, a) − mean A (agent/nets.py DuelingMLP): the state's value is learned
    # from every sample, the per-action head only holds the small differences between the
    # template's many near-equal settings. Checkpoints written before this field existed
    # are plain MLPs: load() reads them with dueling=False.
    dueling: bool = True

    @property
    def template(self) -> ActionTemplate:
        if self.settings:
            return listed_template(self.settings)
        return acc_template(self.levels, self.pmax, self.zero_level)


def build_network(config: DdqnConfig, key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    """The Q-network: one port's observation -> one Q-value per template action."""
    sizes = (observation_size(config.features), *config.hidden, config.template.n_actions)
    return (dueling_mlp if config.dueling else mlp)(sizes, key)


def q_values(graph: nnx.GraphDef, params: nnx.State, obs: jax.Array) -> jax.Array:
    return apply(graph, params, obs)


def epsilon(config: DdqnConfig, step: jax.Array | int) -> jax.Array:
    decay = jnp.exp(-jnp.asarray(step, jnp.float32) / config.eps_decay)
    return config.eps_end + (config.eps_start - config.eps_end) * decay


def epsilon_greedy(q: jax.Array, key: jax.Array, eps: jax.Array | float) -> jax.Array:
    """Per row of `q` (the last axis: actions): the argmax, or with probability ε any action."""
    greedy = jnp.argmax(q, axis=-1)
    k_explore, k_action = jax.random.split(key)
    random = jax.random.randint(k_action, greedy.shape, 0, q.shape[-1])
    explore = jax.random.uniform(k_explore, greedy.shape) < eps
    return jnp.where(explore, random, greedy)


def select_actions(
    graph: nnx.GraphDef, params: nnx.State, obs: jax.Array, key: jax.Array, eps: jax.Array
) -> jax.Array:
    """ε-greedy per row of `obs` (one row per port)."""
    return epsilon_greedy(q_values(graph, params, obs), key, eps)


def held_ports(history: PortTelemetry) -> jax.Array:
    """ACC §4.3: the ports that keep their setting: they sent nothing in the last interval
    (no inference needed, no churn) and have a setting (kmax 0 is the register's reset)."""
    return (jnp.asarray(history.tx_bytes)[-1] <= 0) & (jnp.asarray(history.kmax_bytes)[-1] > 0)


def hold_idle_ports(chosen: EcnThresholds, history: PortTelemetry) -> EcnThresholds:
    """`chosen` where the port is not held (held_ports), its current setting where it is."""
    keep = held_ports(history)
    current = (history.kmin_bytes, history.kmax_bytes, history.pmax)
    return EcnThresholds(
        *(
            jnp.where(keep, jnp.asarray(c, jnp.float32)[-1], jnp.asarray(x, jnp.float32))
            for x, c in zip(chosen, current, strict=True)
        )
    )


def decide(
    graph: nnx.GraphDef,
    template: ActionTemplate,
    features: FeatureSet,
    params: nnx.State,
    history: PortTelemetry,
    key: jax.Array | None = None,
    eps: jax.Array | float = 0.0,
) -> tuple[jax.Array, jax.Array, EcnThresholds]:
    """One switch's decision from k intervals of its ports' telemetry: (observation,
    action per port, setting per port). Greedy without a key, ε-greedy with one. One pure
    function so the controller runs it as one compiled call (no op-by-op JAX per interval)
    and the simulator runs exactly the same decision inside its scan."""
    obs = observation(history, features)
    if key is None:
        actions = jnp.argmax(q_values(graph, params, obs), axis=-1)
    else:
        actions = select_actions(graph, params, obs, key, eps)
    chosen = template.thresholds(actions, jnp.asarray(history.link_bps)[-1])
    return obs, actions, hold_idle_ports(chosen, history)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    done: jax.Array


def double_q_errors(
    q: jax.Array, q_next_online: jax.Array, q_next_target: jax.Array, action: jax.Array,
    reward: jax.Array, gamma: float, done: jax.Array | float = 0.0,
) -> jax.Array:  # fmt: skip
    """Double DQN (van Hasselt et al.): the online network picks a*, the target values it;
    the Huber error of Q(s, a) against r + γ·Q_target(s', a*), per sample (any leading
    axes: ports, fabric samples)."""
    q_taken = jnp.take_along_axis(q, action[..., None], axis=-1)[..., 0]
    best_next = jnp.argmax(q_next_online, axis=-1)
    bootstrap = jnp.take_along_axis(q_next_target, best_next[..., None], axis=-1)[..., 0]
    target = reward + gamma * (1.0 - done) * bootstrap
    return optax.huber_loss(q_taken, jax.lax.stop_gradient(target))


def td_loss(
    params: nnx.State,
    target_params: nnx.State,
    graph: nnx.GraphDef,
    batch: Transition,
    gamma: float,
) -> jax.Array:
    """The mean double-Q error over a batch of port transitions."""
    return jnp.mean(
        double_q_errors(
            q_values(graph, params, batch.obs), q_values(graph, params, batch.next_obs),
            q_values(graph, target_params, batch.next_obs), batch.action, batch.reward, gamma,
            batch.done,
        )
    )  # fmt: skip


class Learner(NamedTuple):
    """Everything one switch's agent learns with: a pytree, so updates are pure functions."""

    params: nnx.State
    target_params: nnx.State
    opt_state: optax.OptState
    updates: jax.Array


def make_optimizer(config: DdqnConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(10.0), optax.adam(config.lr))


def init_learner(config: DdqnConfig, params: nnx.State) -> Learner:
    return Learner(params, params, make_optimizer(config).init(params), jnp.int32(0))


def update(
    config: DdqnConfig, graph: Any, learner: Learner, batch: Any, loss_fn: Any = td_loss
) -> tuple[Learner, jax.Array]:
    """One gradient step on the TD loss (`loss_fn(params, target_params, graph, batch,
    gamma)`: ACC's per-port one, or GraphCC's over whole fabrics); copy to the target
    network every `target_every`."""
    loss, grads = jax.value_and_grad(loss_fn)(
        learner.params, learner.target_params, graph, batch, config.gamma
    )
    step, opt_state = make_optimizer(config).update(grads, learner.opt_state, learner.params)
    params = optax.apply_updates(learner.params, step)
    updates = learner.updates + 1
    copy = updates % config.target_every == 0
    target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, learner.target_params)
    return Learner(params, target, opt_state, updates), loss


class Replay:
    """Per-switch local buffers and one global buffer (flashbax item buffers)."""

    def __init__(self, config: DdqnConfig, switches: int, example: Transition) -> None:
        half = max(1, config.batch_size // 2)
        self.buffer = fbx.make_item_buffer(
            max_length=config.buffer_size,
            min_length=config.min_buffer,
            sample_batch_size=half,
            add_batches=True,
        )
        self.local = [self.buffer.init(example) for _ in range(switches)]
        self.glob = self.buffer.init(example)
        self._add = jax.jit(self.buffer.add, donate_argnums=0)
        self._sample = jax.jit(self.buffer.sample)

    def add(self, switch: int, batch: Transition) -> None:
        self.local[switch] = self._add(self.local[switch], batch)

    def exchange(self, recent: list[Transition]) -> None:
        """ACC's global replay: every switch's recent experience, seen by all."""
        for batch in recent:
            self.glob = self._add(self.glob, batch)

    def ready(self, switch: int) -> bool:
        return bool(self.buffer.can_sample(self.local[switch]))

    def sample(self, switch: int, key: jax.Array) -> Transition:
        """Half local, half global (all local until the global buffer has enough)."""
        k1, k2 = jax.random.split(key)
        glob = self.glob if self.buffer.can_sample(self.glob) else self.local[switch]
        a = self._sample(self.local[switch], k1).experience
        b = self._sample(glob, k2).experience
        return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)


# -- the trained agent, as the controller and the simulator use it ----------------------------


class DdqnPolicy:
    """A trained ACC agent for one switch: act() every interval, optionally learn online."""

    def __init__(
        self,
        config: DdqnConfig,
        params: nnx.State,
        online: bool = False,
        seed: int = 0,
        name: str = "acc",
    ) -> None:
        self.config, self.online, self.name = config, online, name
        self.reward = Reward("acc")  # what it was trained with: load() reads the checkpoint's
        self.graph, _ = build_network(config, jax.random.key(0))
        self.template = config.template
        self.learner = init_learner(config, params)
        self.key = jax.random.key(seed)
        self.steps = 0
        self._last: tuple[jax.Array, jax.Array] | None = None
        self._replay: Replay | None = None
        self.decide = functools.partial(decide, self.graph, self.template, config.features)
        self._greedy = compiled(self.decide, self.acting_params)
        self._explore = compiled(self._explore_step, self.acting_params)
        self._observe = compiled(lambda _, h: observation(h, config.features), None)
        self._update = jax.jit(lambda lr, b: update(self.config, self.graph, lr, b))

    @property
    def params(self) -> nnx.State:
        return self.learner.params

    @property
    def acting_params(self) -> nnx.State:
        """The parameters `decide` takes (what the evaluator runs in the simulator)."""
        return self.learner.params

    def act(self, history: PortTelemetry) -> EcnThresholds:
        if self.online:
            self.key, (obs, actions, chosen) = self._explore(
                self.params, history, self.key, self.steps
            )
        else:
            obs, actions, chosen = self._greedy(self.params, history)
        self._last = (obs, actions)
        return EcnThresholds(*(np.asarray(x, np.float64) for x in chosen))

    def _explore_step(
        self, params: nnx.State, history: PortTelemetry, key: jax.Array, step: jax.Array
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array, EcnThresholds]]:
        """ε-greedy decision, with the key for the next one."""
        key, k = jax.random.split(key)
        return key, self.decide(params, history, k, epsilon(self.config, step))

    def observe(self, history: PortTelemetry, reward: Any) -> None:
        """Online fine-tuning: the interval after the last act() is its outcome."""
        if not self.online or self._last is None:
            return
        obs, actions = self._last
        next_obs = self._observe(None, history)
        batch = Transition(
            jnp.asarray(obs),
            jnp.asarray(actions, jnp.int32),
            jnp.asarray(np.asarray(reward, np.float32).reshape(-1)),
            jnp.asarray(next_obs),
            jnp.zeros(len(obs), jnp.float32),
        )
        if self._replay is None:
            self._replay = Replay(self.config, 1, jax.tree.map(lambda x: x[0], batch))
        self._replay.add(0, batch)
        if self.steps % self.config.exchange_every == 0:
            self._replay.exchange([batch])
        self.steps += 1
        if self._replay.ready(0):
            self.key, k = jax.random.split(self.key)
            self.learner, _ = self._update(self.learner, self._replay.sample(0, k))

    def save(self, path: Path) -> None:
        meta = {"online_steps": self.steps, "reward": self.reward.to_meta()}
        save(path, self.config, self.params, meta)


def save(path: Path, config: DdqnConfig, params: nnx.State, meta: dict[str, Any]) -> None:
    save_checkpoint(path, FORMAT, config, {"q": params}, meta)


def load(path: Path, online: bool = False) -> DdqnPolicy:
    """A policy from a checkpoint written by save() ("default": the shipped one)."""
    path = DEFAULT_CHECKPOINT if str(path) == "default" else Path(path)
    fields, raw, meta = load_checkpoint(path, FORMAT, "ACC")
    fields.setdefault("dueling", False)  # written before dueling heads: a plain MLP
    config = DdqnConfig(**fields)
    params = restore(build_network(config, jax.random.key(0))[1], raw["q"], path)
    name = "acc:default" if path == DEFAULT_CHECKPOINT else f"acc:{path}"
    policy = DdqnPolicy(config, params, online=online, name=name)
    policy.reward = trained_reward(meta, "acc")
    return policy
