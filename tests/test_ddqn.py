"""ACC's double DQN on problems whose answer is known, and its pieces against the paper."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ecntune.agent import ddqn
from ecntune.agent.features import observation_size
from ecntune.agent.policy import load_policy
from ecntune.telemetry import PortTelemetry

OBS = observation_size("acc")
TWO_ACTIONS = ddqn.DdqnConfig(levels=1, pmax=(0.5, 1.0), hidden=(32,), lr=3e-3, min_buffer=32)


def one_hot(i: np.ndarray | int, n: int = OBS) -> jnp.ndarray:
    return jax.nn.one_hot(jnp.asarray(i), n)


def test_the_target_is_double_q_online_picks_target_values():
    # a plain linear Q (no dueling head), so the kernel below is all of it
    config = ddqn.DdqnConfig(levels=1, pmax=(0.5, 1.0), hidden=(), gamma=0.5, dueling=False)
    graph, params = ddqn.build_network(config, jax.random.key(0))
    # a linear Q: Q(s, a) = s · W[:, a]; online prefers action 0 in s', target action 1
    w_online = np.zeros((OBS, 2), np.float32)
    w_online[1] = (2.0, 1.0)
    w_target = np.zeros((OBS, 2), np.float32)
    w_target[1] = (10.0, 30.0)
    w_online[0] = (0.25, 0.0)

    def with_kernel(w: np.ndarray) -> nnx.State:
        p = jax.tree.map(jnp.zeros_like, params)
        p["head"]["kernel"] = nnx.Param(jnp.asarray(w))  # type: ignore[index]
        return p

    online, target = with_kernel(w_online), with_kernel(w_target)
    batch = ddqn.Transition(
        obs=one_hot(np.array([0])),
        action=jnp.array([0]),
        reward=jnp.array([1.0]),
        next_obs=one_hot(np.array([1])),
        done=jnp.array([0.0]),
    )
    loss = float(ddqn.td_loss(online, target, graph, batch, config.gamma))
    # a* = argmax online(s') = 0; y = 1 + 0.5 * target(s', 0) = 6; Q(s, 0) = 0.25
    # (DQN would use max target = 30 and y = 16); Huber(0.25 - 6) with delta 1
    error = 6.0 - 0.25
    assert loss == pytest.approx(error - 0.5)
    # and `done` cuts the bootstrap: y = 1
    done = batch._replace(done=jnp.array([1.0]))
    assert float(ddqn.td_loss(online, target, graph, done, config.gamma)) == pytest.approx(
        0.5 * 0.75**2
    )


def test_epsilon_decays_exponentially():
    c = ddqn.DdqnConfig(eps_start=1.0, eps_end=0.1, eps_decay=100.0)
    assert float(ddqn.epsilon(c, 0)) == pytest.approx(1.0)
    assert float(ddqn.epsilon(c, 100)) == pytest.approx(0.1 + 0.9 / math.e, rel=1e-5)
    assert float(ddqn.epsilon(c, 10_000)) == pytest.approx(0.1, abs=1e-6)


def train_on(env_step, states: int, steps: int, config: ddqn.DdqnConfig, seed: int = 0):
    """ε-greedy DDQN with the real replay (local + global) on a tiny environment."""
    graph, params = ddqn.build_network(config, jax.random.key(seed))
    learner = ddqn.init_learner(config, params)
    example = ddqn.Transition(one_hot(0), jnp.int32(0), jnp.float32(0), one_hot(0), jnp.float32(0))
    replay = ddqn.Replay(config, 1, example)
    learn = jax.jit(lambda lr, b: ddqn.update(config, graph, lr, b))
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    s = np.zeros(8, int)  # 8 parallel copies of the environment
    for step in range(steps):
        key, k_act, k_learn = jax.random.split(key, 3)
        eps = ddqn.epsilon(config, step)
        a = np.asarray(ddqn.select_actions(graph, learner.params, one_hot(s), k_act, eps))
        s2, r, done = env_step(s, a, rng)
        batch = ddqn.Transition(
            one_hot(s), jnp.asarray(a), jnp.asarray(r, jnp.float32), one_hot(s2),
            jnp.asarray(done, jnp.float32),
        )  # fmt: skip
        replay.add(0, batch)
        if step % config.exchange_every == 0:
            replay.exchange([batch])
        if replay.ready(0):
            learner, _ = learn(learner, replay.sample(0, k_learn))
        s = np.where(done, rng.integers(0, states, s.shape), s2)
    q = ddqn.q_values(graph, learner.params, one_hot(np.arange(states)))
    return np.asarray(q)


def test_solves_a_contextual_bandit():
    """State 0 pays for action 1, state 1 for action 0: the greedy policy must know."""
    config = dataclasses.replace(TWO_ACTIONS, gamma=0.0, eps_decay=100.0)

    def step(s, a, rng):
        r = np.where(a == 1 - s, 1.0, 0.0) + rng.normal(0, 0.1, s.shape)
        return rng.integers(0, 2, s.shape), r, np.ones_like(s, bool)

    q = train_on(step, states=2, steps=400, config=config)
    assert list(q.argmax(axis=1)) == [1, 0]
    assert q[0, 1] == pytest.approx(1.0, abs=0.25)


def test_solves_a_chain_that_needs_lookahead():
    """Five states; only the right end pays (1), every move left of it pays nothing, so
    going right from state 0 is worth γ^4 — reachable only by bootstrapping through Q."""
    n, gamma = 5, 0.9
    config = dataclasses.replace(TWO_ACTIONS, gamma=gamma, eps_decay=300.0)

    def step(s, a, rng):
        s2 = np.clip(s + np.where(a == 1, 1, -1), 0, n - 1)
        done = s2 == n - 1
        return s2, done.astype(float), done

    q = train_on(step, states=n, steps=1500, config=config)
    assert all(q[i].argmax() == 1 for i in range(n - 1))
    # the values follow the discounting: Q(3, right) ≈ 1, Q(0, right) ≈ γ^3
    assert q[3, 1] == pytest.approx(1.0, abs=0.2)
    assert q[0, 1] == pytest.approx(gamma**3, abs=0.25)


def history(ports: int, tx: list[float], kmin: float = 3000.0) -> PortTelemetry:
    f = np.ones((3, ports))
    return PortTelemetry(
        interval_s=0.1 * f, link_bps=20e6 * f, tx_bytes=np.array(tx) * f,
        tx_pkts=np.array(tx) / 1500 * f, marked_bytes=0 * f, marked_pkts=0 * f,
        qdepth_sum_bytes=5000 * f, qdepth_samples=f, qdepth_max_bytes=9000 * f,
        kmin_bytes=kmin * f, kmax_bytes=2 * kmin * f, pmax=0.5 * f, senders=2 * f,
        elephant_bytes=0 * f,
    )  # fmt: skip


def test_checkpoints_round_trip_and_load_as_controller_policies(tmp_path: Path):
    config = ddqn.DdqnConfig(pmax=(0.01, 0.2, 1.0))
    graph, params = ddqn.build_network(config, jax.random.key(3))
    path = tmp_path / "agent.msgpack"
    ddqn.save(path, config, params, {"note": "test"})
    assert not list(tmp_path.glob("*.tmp"))  # written atomically
    policy = load_policy(f"acc:{path}")
    obs = one_hot(np.arange(4))
    assert np.allclose(ddqn.q_values(graph, policy.params, obs), ddqn.q_values(graph, params, obs))
    th = policy.act(history(4, [1e5, 1e5, 0.0, 5e4]))
    kmin, kmax, pmax = (np.asarray(x) for x in th)
    assert kmin.shape == (4,)
    assert np.all(kmin <= kmax)
    assert set(np.round(pmax, 3)) <= {0.01, 0.2, 1.0, 0.5}
    # ACC §4.3: the idle port (no bytes sent) keeps its setting, no inference
    assert (kmin[2], kmax[2], pmax[2]) == (3000.0, 6000.0, 0.5)


def test_a_broken_checkpoint_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"\x00not msgpack")
    with pytest.raises(ValueError, match="ACC checkpoint"):
        load_policy(f"acc:{bad}")
    with pytest.raises(ValueError, match="cannot read"):
        load_policy(f"acc:{tmp_path / 'missing.msgpack'}")


def test_online_fine_tuning_learns_and_saves(tmp_path: Path):
    config = ddqn.DdqnConfig(pmax=(0.1, 1.0), levels=3, min_buffer=8, batch_size=8)
    _, params = ddqn.build_network(config, jax.random.key(0))
    policy = ddqn.DdqnPolicy(config, params, online=True)
    before = jax.tree.map(np.asarray, policy.params)
    for _ in range(20):
        h = history(4, [1e5, 2e5, 3e4, 5e4])
        policy.act(h)
        policy.observe(h, np.array([0.5, 0.6, 0.7, 0.8]))
    changed = jax.tree.map(lambda a, b: not np.allclose(a, b), before, policy.params)
    assert any(jax.tree.leaves(changed))
    policy.save(tmp_path / "online.msgpack")
    assert ddqn.load(tmp_path / "online.msgpack").config == config


def test_checkpoints_from_before_dueling_heads_load_as_plain_networks(tmp_path: Path):
    """New agents get a dueling Q head; the shipped checkpoints (no `dueling` field) and
    any plain network saved with dueling=False still load and act as they were trained."""
    shipped = ddqn.load(ddqn.DEFAULT_CHECKPOINT.with_name("acc-star8.msgpack"))
    assert shipped.config.dueling is False
    assert shipped.config.zero_level is False  # nor a zero level (agent/actions.py)
    assert shipped.act(history(4, [1e5, 1e5, 0.0, 5e4])).kmin_bytes.shape == (4,)
    config = ddqn.DdqnConfig(pmax=(0.1, 1.0), levels=3, zero_level=True)
    assert config.dueling
    assert config.template.n_actions == 10 * 2
    graph, params = ddqn.build_network(config, jax.random.key(5))
    ddqn.save(tmp_path / "dueling.msgpack", config, params, {})
    again = ddqn.load(tmp_path / "dueling.msgpack")
    assert again.config == config
    obs = one_hot(np.arange(3))
    assert np.allclose(ddqn.q_values(graph, again.params, obs), ddqn.q_values(graph, params, obs))
