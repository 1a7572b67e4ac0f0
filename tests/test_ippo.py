"""PET's independent PPO: GAE and clipping as the papers define them, a problem with a known
answer, and checkpoints the controller loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecntune.agent import ippo
from ecntune.agent.features import observation_size
from ecntune.agent.policy import load_policy
from ecntune.telemetry import PortTelemetry

OBS = observation_size("pet")
SMALL = ippo.IppoConfig(levels=1, pmax=(0.5, 1.0), hidden=(32,))  # two actions


def test_gae_matches_the_recursion_by_hand():
    r = jnp.array([1.0, 0.0, 2.0])
    v = jnp.array([0.5, 0.2, 1.0])
    done = jnp.array([0.0, 0.0, 0.0])
    gamma, lam, last = 0.9, 0.8, jnp.array(3.0)
    adv, ret = ippo.gae(r, v, done, last, gamma, lam)
    d2 = 2.0 + 0.9 * 3.0 - 1.0
    d1 = 0.0 + 0.9 * 1.0 - 0.2
    d0 = 1.0 + 0.9 * 0.2 - 0.5
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    assert np.allclose(adv, [a0, a1, a2], atol=1e-6)
    assert np.allclose(ret, np.array([a0, a1, a2]) + np.array(v), atol=1e-6)
    # an episode end cuts both bootstrap and trace
    adv_cut, _ = ippo.gae(r, v, jnp.array([0.0, 1.0, 0.0]), last, gamma, lam)
    assert float(adv_cut[1]) == pytest.approx(0.0 - 0.2)
    assert float(adv_cut[0]) == pytest.approx(d0 + 0.72 * (0.0 - 0.2), abs=1e-6)


def test_the_surrogate_is_clipped_at_one_plus_minus_epsilon():
    ratio = jnp.array([1.5, 1.5, 0.5, 0.5, 1.1])
    adv = jnp.array([1.0, -1.0, 1.0, -1.0, 2.0])
    value, grad = jax.value_and_grad(lambda r: ippo.clipped_surrogate(r, adv, 0.2).sum())(ratio)
    parts = ippo.clipped_surrogate(ratio, adv, 0.2)
    # A > 0 beyond 1+ε: capped at 1.2·A, no gradient; A < 0 beyond 1+ε: the unclipped,
    # worse term, full gradient; mirrored below 1−ε; inside the region: plain r·A
    assert np.allclose(parts, [1.2, -1.5, 0.5, -0.8, 2.2])
    assert np.allclose(grad, [0.0, -1.0, 1.0, 0.0, 2.0])
    assert float(value) == pytest.approx(sum([1.2, -1.5, 0.5, -0.8, 2.2]))


@pytest.mark.parametrize("grad_clip", ["joint", "per_network"])
def test_only_a_per_network_clip_keeps_the_critics_gradient_out_of_the_actors_step(grad_clip):
    """The same actor gradient twice, the second time beside a critic gradient 100x the clip
    norm. Clipped jointly, the actor's second gradient reaches Adam 100x smaller than its
    first and its step shrinks (what docs/results/pet-own-reward/grad_norms.py found on the
    storms); clipped per network, the actor steps exactly as beside a quiet critic."""
    config = dataclasses.replace(ippo.IppoConfig(), grad_clip=grad_clip)
    opt = ippo.make_optimizer(config)
    params = ippo.Params(jnp.zeros(2), jnp.zeros(2))
    actor_grad = jnp.array([0.3, -0.1])

    def second_actor_step(critic_norm: float) -> np.ndarray:
        state = opt.init(params)
        quiet = ippo.Params(actor_grad, jnp.array([0.1, 0.0]))
        _, state = opt.update(quiet, state, params)
        loud = ippo.Params(actor_grad, jnp.array([critic_norm, 0.0]))
        step, _ = opt.update(loud, state, params)
        return np.asarray(step.actor)

    beside_quiet, beside_loud = second_actor_step(0.1), second_actor_step(100 * ippo.GRAD_NORM)
    if grad_clip == "per_network":
        np.testing.assert_array_equal(beside_loud, beside_quiet)
    else:
        assert np.all(np.abs(beside_loud) < 0.8 * np.abs(beside_quiet)), (beside_loud, beside_quiet)


def test_solves_a_contextual_bandit():
    """State 0 pays for action 1, state 1 for action 0: the policy must learn both."""
    config = dataclasses.replace(SMALL, gamma=0.0, entropy=0.0, actor_lr=3e-3, critic_lr=3e-3)
    nets, params = ippo.build_networks(config, jax.random.key(0))
    learner = ippo.init_learner(config, params)
    learn = jax.jit(lambda lr, b, k: ippo.update(config, nets, lr, b, k))
    key = jax.random.key(1)
    states = jnp.array([0, 1] * 32)
    obs = jax.nn.one_hot(states, OBS)
    for _ in range(60):
        key, k_act, k_learn = jax.random.split(key, 3)
        pi = ippo.policy(nets, learner.params, obs)
        actions = pi.sample(seed=k_act)
        rewards = (actions == 1 - states).astype(jnp.float32)
        values = ippo.value(nets, learner.params, obs)
        adv, target = ippo.gae(rewards[None], values[None], jnp.ones((1, 64)), values, 0.0, 0.95)
        batch = ippo.Batch(obs, actions, pi.log_prob(actions), adv[0], target[0])
        learner, _ = learn(learner, batch, k_learn)
    probs = ippo.policy(nets, learner.params, jax.nn.one_hot(jnp.array([0, 1]), OBS)).probs
    assert float(probs[0, 1]) > 0.9
    assert float(probs[1, 0]) > 0.9


def history(ports: int) -> PortTelemetry:
    f = np.ones((3, ports))
    return PortTelemetry(
        interval_s=0.1 * f, link_bps=20e6 * f, tx_bytes=1e5 * f, tx_pkts=70 * f,
        marked_bytes=0 * f, marked_pkts=0 * f, qdepth_sum_bytes=5000 * f, qdepth_samples=f,
        qdepth_max_bytes=9000 * f, kmin_bytes=3000 * f, kmax_bytes=6000 * f, pmax=0.5 * f,
        senders=4 * f, elephant_bytes=5e4 * f,
    )  # fmt: skip


def test_checkpoints_load_as_controller_policies_and_fine_tune_online(tmp_path: Path):
    config = dataclasses.replace(SMALL, levels=3)
    _, params = ippo.build_networks(config, jax.random.key(4))
    path = tmp_path / "pet.msgpack"
    ippo.save(path, config, params, {})
    policy = load_policy(f"pet:{path}")
    th = policy.act(history(4))
    assert np.all(np.asarray(th.kmin_bytes) <= np.asarray(th.kmax_bytes))
    policy.online = True
    before = jax.tree.map(np.asarray, policy.params)
    for _ in range(32):  # one rollout, then a PPO update
        policy.act(history(4))
        policy.observe(history(4), np.array([0.1, 0.5, 0.9, 0.3]))
    changed = jax.tree.map(lambda a, b: not np.allclose(a, b), before, policy.params)
    assert any(jax.tree.leaves(changed))
    policy.save(tmp_path / "again.msgpack")
    assert ippo.load(tmp_path / "again.msgpack").config == config
    with pytest.raises(ValueError, match="PET checkpoint"):
        load_policy(f"pet:{tmp_path / 'missing.msgpack'}")


def _indifferent_agent(tmp_path: Path) -> tuple[ippo.IppoPolicy, ippo.IppoPolicy]:
    """SMALL with its actor's last layer zeroed (both actions equally likely): greedy, sampled."""
    _, params = ippo.build_networks(SMALL, jax.random.key(1))
    actor = jax.tree.map(lambda x: np.asarray(x), params.actor)
    last = sorted(k for k in actor)[-1]  # the output layer's parameters
    actor[last] = jax.tree.map(np.zeros_like, actor[last])
    path = tmp_path / "pet.msgpack"
    ippo.save(path, SMALL, ippo.Params(actor, params.critic), {})
    return load_policy(f"pet:{path}"), load_policy(f"pet-sampled:{path}")


def test_a_sampled_agent_draws_from_its_policy_and_repeats_a_draw_for_the_same_telemetry(
    tmp_path: Path,
):
    """PPO trains a stochastic policy; `pet-sampled:` deploys it as trained. With the actor's
    last layer zeroed both actions are equally likely: greedy always answers the first (the
    argmax of a tie), sampled answers each about half the time over varied telemetry, and
    the same counters give the same answer (a rerun of an episode repeats its draws)."""
    greedy, sampled = _indifferent_agent(tmp_path)
    assert sampled.name.startswith("pet-sampled:")
    rng = np.random.default_rng(0)
    pmax_greedy, pmax_sampled = [], []
    for _ in range(50):
        h = history(8)._replace(tx_bytes=rng.uniform(1e4, 1e6, (3, 8)))
        pmax_greedy.append(np.asarray(greedy.act(h).pmax))
        pmax_sampled.append(np.asarray(sampled.act(h).pmax))
        again = np.asarray(sampled.act(h).pmax)
        assert np.array_equal(again, pmax_sampled[-1])
    pmax_greedy, pmax_sampled = np.concatenate(pmax_greedy), np.concatenate(pmax_sampled)
    assert len(np.unique(pmax_greedy)) == 1  # 400 decisions, one action
    settings = np.unique(pmax_sampled)
    assert len(settings) == 2
    share = float(np.mean(pmax_sampled == settings[0]))
    assert 0.4 < share < 0.6  # 400 fair draws: the standard deviation is 0.025
    assert np.array_equal(settings, [0.5, 1.0])  # SMALL's two actions differ in pmax only


def test_the_evaluator_runs_a_sampled_agent_apart_from_its_greedy_twin(tmp_path: Path):
    """The same parameters, two functions: evaluated together they must not share one
    compiled rollout (the evaluator batches policies of one class and config)."""
    from ecntune.agent.evaluate import run_policies
    from ecntune.sim.scenario import SimScenario

    greedy, sampled = _indifferent_agent(tmp_path)
    sc = SimScenario("tiny", load=0.7, incast_degree=2, episode_s=0.2)
    out = run_policies(sc, {"g": greedy, "s": sampled}, episodes=2, seed=5, drain_factor=0.5)
    pmax_greedy, pmax_sampled = out["g"].settings[..., 2], out["s"].settings[..., 2]
    assert set(np.unique(pmax_greedy[np.isfinite(pmax_greedy)])) == {0.5}
    assert set(np.unique(pmax_sampled[np.isfinite(pmax_sampled)])) == {0.5, 1.0}
