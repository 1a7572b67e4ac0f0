"""agent/loops.py: the jitted training loops' replay takes busy ports only, and the learning
per simulated episode does not depend on how many episodes run side by side."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ecntune.agent import ddqn, ippo, loops
from ecntune.sim import regimes


def rows(values: list[float]) -> ddqn.Transition:
    v = jnp.asarray(values, jnp.float32)
    obs = jnp.stack([v, -v], axis=1)
    return ddqn.Transition(obs, v.astype(jnp.int32), v, obs, jnp.zeros_like(v))


def test_the_replay_keeps_only_the_masked_rows_in_order_and_overwrites_the_oldest():
    ring = loops.Ring.empty(jax.tree.map(lambda x: x[0], rows([0.0])), capacity=5)
    ring = ring.add(rows([1, 2, 3, 4]), jnp.array([True, False, True, True]))
    assert int(ring.size) == 3
    np.testing.assert_array_equal(np.asarray(ring.data.reward[:3]), [1, 3, 4])
    ring = ring.add(rows([5, 6, 7]), jnp.array([True, True, True]))  # wraps: 1, the oldest, goes
    assert int(ring.size) == 5
    np.testing.assert_array_equal(np.asarray(ring.data.reward), [7, 3, 4, 5, 6])
    assert int(ring.at) == 1  # the next row to overwrite holds 3, now the oldest


def test_a_sample_draws_only_filled_rows():
    ring = loops.Ring.empty(jax.tree.map(lambda x: x[0], rows([0.0])), capacity=100)
    ring = ring.add(rows([3, 4]), jnp.array([True, True]))
    got = np.asarray(ring.sample(jax.random.key(0), 64).reward)
    assert set(got.tolist()) == {3.0, 4.0}


def test_learning_per_episode_is_the_same_whatever_runs_side_by_side():
    env = regimes.RegimeEnv(features="acc", reward="acc", episode=8)
    config = dataclasses.replace(ddqn.DdqnConfig(levels=3, pmax=(1.0,)), min_buffer=8)
    for envs in (1, 4):
        loop = loops.make_acc_loop(env, config, envs)
        carry, metrics = loop.run(loop.init(jax.random.key(0)), 2)
        # ε's clock counts every copy's intervals: 2 rounds × 8 intervals × envs
        assert int(carry.step) == 2 * 8 * envs
        assert int(carry.replay.size) == 2 * 8 * envs * env.ports  # every port busy here
        assert metrics["reward"].shape == (2,)
    pet = ippo.IppoConfig(levels=3, pmax=(1.0,))
    for envs in (1, 3):
        loop = loops.make_pet_loop(regimes.RegimeEnv(episode=8), pet, envs)
        carry, metrics = loop.run(loop.init(jax.random.key(0)), 2)
        # Adam's step count: epochs × minibatches per round, minibatches scaled by envs
        adam = jax.tree.leaves(carry.learner.opt_state,
                               is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))  # fmt: skip
        steps = {int(x.count) for x in adam if isinstance(x, optax.ScaleByAdamState)}
        assert steps == {2 * pet.epochs * pet.minibatches * envs}
        assert bool(jnp.all(jnp.isfinite(metrics["reward"])))
