"""The shared feature, action and reward definitions (used by both sim/ and controller/)."""

import dataclasses
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from ecntune.agent.actions import acc_template, alpha_bytes, listed_template
from ecntune.agent.features import FEATURE_NAMES, observation, observation_size, port_state
from ecntune.agent.nets import load_checkpoint
from ecntune.agent.policy import load_policy
from ecntune.agent.rewards import (
    LATENCY_FIRST,
    THROUGHPUT_FIRST,
    Reward,
    RewardWeights,
    acc_reward,
    pet_reward,
    queue_step,
    trained_reward,
)
from ecntune.telemetry import PortTelemetry
from ecntune.topology import MTU_BYTES


def telemetry(**kw) -> PortTelemetry:
    base = dict(
        interval_s=0.01, link_bps=25e9, tx_bytes=0, tx_pkts=0, marked_bytes=0, marked_pkts=0,
        qdepth_sum_bytes=0, qdepth_samples=0, qdepth_max_bytes=0, kmin_bytes=5e3,
        kmax_bytes=200e3, pmax=0.01, senders=0, elephant_bytes=0,
    )  # fmt: skip
    base.update(kw)
    return PortTelemetry(**{k: jnp.asarray(v, jnp.float32) for k, v in base.items()})


def test_acc_template_matches_the_paper():
    t = acc_template()
    assert t.n_actions == 55 * 21
    assert np.all(t.kmin_alpha <= t.kmax_alpha)
    assert sorted(set(t.kmin_alpha)) == [2.0**n for n in range(10)]
    assert sorted(set(np.round(t.pmax, 2))) == [0.01] + [round(0.05 * j, 2) for j in range(1, 21)]
    th = t.thresholds(jnp.array([0, t.n_actions - 1]), 25e9)
    assert th.kmin_bytes.tolist() == [20e3, 20e3 * 512]
    assert th.pmax.tolist() == pytest.approx([0.01, 1.0])


def test_the_zero_level_is_secn0s_step_on_slow_links():
    """At 20 Mbit/s the template's floor (kmin = kmax = α = one MTU) marks from a queue of one
    packet, SECN0's step (C·RTT/7 = 36 bytes) as soon as anything waits. The zero level is
    that step: in the simulator's rule on a fluid queue and in the data plane's on the bytes
    behind a packet (a 64-byte ACK, say); a kmax of 0 bytes would turn marking off."""
    from ecntune.agent.static import secn0
    from ecntune.p4src.encoding import encode_thresholds, marking_probability
    from ecntune.sim.network import red_probability

    plain, zero = acc_template(6, (0.1, 1.0)), acc_template(6, (0.1, 1.0), zero_level=True)
    assert (plain.n_actions, zero.n_actions) == (21 * 2, 28 * 2)
    assert sorted(set(zero.kmin_alpha)) == [0.0] + [2.0**n for n in range(6)]
    assert np.all(zero.kmin_alpha <= zero.kmax_alpha)
    step = zero.thresholds(jnp.array([0, 1]), 20e6)  # kmin = kmax = 0 at pmax 0.1 and 1
    assert step.kmin_bytes.tolist() == [0.0, 0.0]
    assert step.kmax_bytes.tolist() == [1.0, 1.0]
    ramp = zero.thresholds(jnp.array([2]), 20e6)  # kmin = 0, kmax = α: a ramp from empty
    assert (float(ramp.kmin_bytes[0]), float(ramp.kmax_bytes[0])) == (0.0, MTU_BYTES)
    floor = plain.thresholds(jnp.array([1]), 20e6)  # kmin = kmax = α, pmax 1
    settings = {"zero": step, "secn0": secn0(jnp.array([20e6, 20e6])), "alpha": floor}
    for queue in (750.0, 64.0):  # under one packet: marked by the step at 0 and by SECN0 only
        marked = {
            name: float(red_probability(queue, t.kmin_bytes[0], t.kmax_bytes[0], t.pmax[0]))
            for name, t in settings.items()
        }
        assert marked == {"zero": 1.0, "secn0": 1.0, "alpha": 0.0}
        regs = {n: encode_thresholds(*(float(x[0]) for x in t)) for n, t in settings.items()}
        assert {n: marking_probability(int(queue), r) for n, r in regs.items()} == marked
    assert all(marking_probability(0, r) == 0.0 for r in regs.values())  # nothing waits


def test_alpha_scales_with_link_speed_but_not_below_one_packet():
    assert float(alpha_bytes(100e9)) == pytest.approx(80e3)
    assert float(alpha_bytes(10e6)) == MTU_BYTES


def test_acc_queue_step_is_figure_4():
    alpha = 20e3
    q = jnp.array([0, 20e3, 20e3 + 1, 40e3, 10.3e6, 20e6])
    assert queue_step(q, alpha).tolist() == pytest.approx([1, 1, 0.9, 0.9, 0.0, 0.0])


def test_rewards_prefer_full_links_and_short_queues():
    busy_short = telemetry(tx_bytes=25e9 / 8 * 0.01, qdepth_sum_bytes=0, qdepth_samples=10)
    busy_long = telemetry(tx_bytes=25e9 / 8 * 0.01, qdepth_sum_bytes=4e6, qdepth_samples=10)
    idle = telemetry()
    for reward in (acc_reward, pet_reward):
        assert float(reward(busy_short)) == pytest.approx(1.0)
        assert float(reward(busy_short)) > float(reward(busy_long)) > float(reward(idle)) - 0.7
    assert float(acc_reward(idle, LATENCY_FIRST)) == pytest.approx(0.7)


def test_features_are_bounded_and_finite_even_for_bogus_intervals():
    bogus = telemetry(interval_s=0.0, tx_bytes=-5, qdepth_samples=0, qdepth_sum_bytes=7)
    for fs in ("acc", "pet", "incast"):
        s = port_state(bogus, fs)
        assert s.shape == (len(FEATURE_NAMES[fs]),)
        assert bool(jnp.all(jnp.isfinite(s)))


def test_the_incast_features_tell_a_storm_from_many_small_flows_by_the_deepest_queue():
    """Same senders, same mean queue: PET's features cannot tell the two ports apart, the
    incast set's deepest queue can (one α is one tenth, as every byte feature)."""
    alpha = float(alpha_bytes(25e9))
    common = dict(senders=6, qdepth_sum_bytes=2 * alpha * 10, qdepth_samples=10, tx_bytes=1e6)
    storm = telemetry(qdepth_max_bytes=31 * alpha, **common)
    small_flows = telemetry(qdepth_max_bytes=3 * alpha, **common)
    np.testing.assert_array_equal(port_state(storm, "pet"), port_state(small_flows, "pet"))
    np.testing.assert_array_equal(port_state(storm, "incast")[:8], port_state(storm, "pet"))
    assert FEATURE_NAMES["incast"][-1] == "qmax"
    assert float(port_state(storm, "incast")[-1]) == pytest.approx(0.5)  # log2(32) / 10
    assert float(port_state(small_flows, "incast")[-1]) == pytest.approx(0.2)  # log2(4) / 10


def test_a_listed_template_holds_exactly_its_settings_in_order():
    t = listed_template(("0a,0a,1", "8a,32a,0.2"))
    assert t.n_actions == 2
    th = t.thresholds(jnp.array([0, 1]), 25e9)
    alpha = float(alpha_bytes(25e9))
    np.testing.assert_allclose(th.kmin_bytes, [0, 8 * alpha])
    np.testing.assert_allclose(th.kmax_bytes, [1, 32 * alpha])  # the zero level: one byte
    np.testing.assert_allclose(th.pmax, [1, 0.2])
    for bad, message in ((("0a,0a,1",), "at least two"), (("0a,0a,1", "8a,2a,1"), "kmin <= kmax"),
                         (("0a,0a,1", "20KB,80KB,1"), "α units")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            listed_template(bad)


def test_observation_stacks_k_intervals_per_port():
    ports, k = 32, 3
    hist = telemetry(tx_bytes=jnp.ones((k, ports)) * 1e6, senders=jnp.full((k, ports), 16))
    obs = observation(hist, "pet")
    assert obs.shape == (ports, observation_size("pet", k))
    assert bool(jnp.all((obs >= 0) & (obs <= 1.0001)))


def test_a_checkpoint_says_which_reward_its_agent_was_trained_with():
    recorded = {"reward": {"kind": "pet", "weights": [0.7, 0.3]}}
    assert trained_reward(recorded, "acc") == Reward("pet", THROUGHPUT_FIRST)
    # written before rewards were recorded: the algorithm's formula, the scenario's weights
    assert trained_reward({"scenarios": [{"reward_weights": [0.7, 0.3]}]}, "acc") == Reward(
        "acc", THROUGHPUT_FIRST
    )
    assert trained_reward({"scenario": {"name": "star8"}}, "pet") == Reward("pet", LATENCY_FIRST)
    with pytest.raises(ValueError, match="unknown reward"):
        trained_reward({"reward": {"kind": "fct", "weights": [1, 0]}}, "acc")
    # the shipped checkpoints: the demo's ACC (trained on the simulator's squared mice
    # slowdowns, so the controller's guard judges it by its config's reward) and testbed24's PET
    assert load_policy("acc:default").reward.kind == "mice_slowdown_squared"
    pet = load_policy("pet:agent/checkpoints/pet-testbed24.msgpack")
    assert pet.reward == Reward("pet", RewardWeights(0.3, 0.7))


def test_the_mice_fct_reward_scores_the_mice_that_completed_through_each_port():
    """The simulator's privileged reward against its definition, recomputed here in numpy
    from the flows' completions (traffic/fct.py's slowdown) and each flow's path."""
    import jax

    from ecntune.agent.features import utilisation
    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario
    from ecntune.traffic.fct import MICE_BYTES, ideal_fct, slowdown

    env = SimScenario("star8", load=0.6, incast_degree=4, episode_s=0.5).env(reward="mice_fct")
    _, state = env.reset(jax.random.key(3))
    th = thresholds_of("1a,8a,1", env.link_bps())
    p = jax.tree.map(np.asarray, state.params)
    ports = np.asarray(env.fabric.ports)
    scored = 0
    for _ in range(env.episode_intervals):
        before = np.asarray(state.net.fct)
        _, state, reward, _, info = env.step(state, th)
        after = np.asarray(info["fct"])
        done = (before < 0) & (after >= 0) & (p.size < MICE_BYTES)
        inverse = 1 / slowdown(after, ideal_fct(p.size, p.line_rate * 8, p.base_rtt))
        expected = []
        for port in ports:
            through = done & np.any(p.path == port, axis=1)
            expected.append(inverse[through].mean() if through.any() else 1.0)
            scored += through.sum()
        util = np.asarray(utilisation(info["telemetry"]))
        np.testing.assert_allclose(reward, 0.3 * util + 0.7 * np.array(expected), rtol=1e-4)
    assert scored > 20  # mice did complete through the ports: the mean was exercised
    # no telemetry carries it: the controller refuses such an agent, saying why
    with pytest.raises(ValueError, match="simulator"):
        Reward("mice_fct")(telemetry())
    assert trained_reward({"reward": {"kind": "mice_fct", "weights": [0.3, 0.7]}}, "acc") == (
        Reward("mice_fct", LATENCY_FIRST)
    )


@pytest.mark.parametrize("squared", [False, True], ids=["slowdown", "squared"])
def test_the_mice_slowdown_rewards_charge_each_interval_what_its_mice_accrued(squared: bool):
    """MICE_SLOWDOWN and MICE_SLOWDOWN_SQUARED against their definitions, recomputed in numpy
    interval by interval from the flows' start times and completions, and their point: a
    port's rewards over an episode and its drain add up to minus its mice's slowdowns (or
    half their squares) as traffic/fct.py judges them."""
    import jax

    from ecntune.agent.rewards import MICE_SLOWDOWN_SCALE, MICE_SLOWDOWN_SQUARED_SCALE
    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario
    from ecntune.traffic.fct import MICE_BYTES, ideal_fct, slowdown

    kind = "mice_slowdown_squared" if squared else "mice_slowdown"
    scale = MICE_SLOWDOWN_SQUARED_SCALE if squared else MICE_SLOWDOWN_SCALE
    sc = SimScenario("star8", load=0.6, incast_degree=4, episode_s=0.5)
    env = sc.env(reward=kind)
    _, state = env.reset(jax.random.key(3))
    th = thresholds_of("1a,8a,1", env.link_bps())
    p = jax.tree.map(np.asarray, state.params)
    mice = np.isfinite(p.start) & (p.size < MICE_BYTES)
    ideal = ideal_fct(p.size, p.line_rate * 8, p.base_rtt)
    through = np.stack([np.any(p.path == port, axis=1) for port in env.fabric.ports], axis=1)
    total = np.zeros(env.n_ports)
    for _ in range(env.episode_intervals * 3):  # the episode, then a drain
        t0, before = float(state.net.t), np.asarray(state.net.fct)
        _, state, reward, _, info = env.step(state, th)
        t1, after = float(state.net.t), np.asarray(info["fct"])
        end = np.where(after >= 0, np.minimum(p.start + after, t1), t1)
        began = np.maximum(p.start, t0)
        ran = np.where(mice & (before < 0), np.clip(end - began, 0, None), 0)
        grew = ran / ideal
        if squared:  # (s1² - s0²) / 2 with s0 the slowdown it had at the interval's start
            s0 = np.where(ran > 0, began - np.where(ran > 0, p.start, 0), 0) / ideal
            grew = ((s0 + grew) ** 2 - s0**2) / 2
        np.testing.assert_allclose(reward, -grew @ through / scale, rtol=1e-4, atol=1e-6)
        total += np.asarray(reward)
    fct = np.asarray(state.net.fct)
    assert np.all(fct[mice] >= 0), "the drain was long enough for every mouse to finish"
    each = slowdown(fct, ideal) * mice
    judged = (each**2 / 2 if squared else each) @ through
    assert judged.sum() > 50  # mice ran through the ports: the sums were exercised
    # equal up to what the judge adds: a slowdown below 1 counts as 1, and an FCT's last
    # half RTT (the final ACK's way back) falls after the flow's last interval
    np.testing.assert_allclose(-total * scale, judged, rtol=0.2 if squared else 0.1)
    assert np.all(-total * scale <= judged + 1e-3)
    with pytest.raises(ValueError, match="simulator"):
        Reward(kind)(telemetry())


def test_a_reward_baseline_subtracts_its_settings_reward_on_the_same_flows():
    """`reward_baseline`: the agent's reward minus the baseline setting's, both simulated on
    the episode's own flows; zero when the agent plays the baseline itself."""
    import jax

    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario

    sc = SimScenario("star8", load=0.6, incast_degree=4, episode_s=0.3)
    paired = sc.env(reward="mice_slowdown", reward_baseline="secn0")
    alone = sc.env(reward="mice_slowdown")

    def rewards(env, setting: str) -> np.ndarray:
        _, state = env.reset(jax.random.key(5))
        th = thresholds_of(setting, env.link_bps())
        out = []
        for _ in range(env.episode_intervals):
            _, state, reward, _, _ = env.step(state, th)
            out.append(np.asarray(reward))
        return np.array(out)

    assert np.all(rewards(paired, "secn0") == 0)
    high, low = rewards(alone, "8a,32a,1"), rewards(alone, "secn0")
    assert np.abs(high - low).max() > 1e-3  # the settings do differ on these flows
    np.testing.assert_allclose(rewards(paired, "8a,32a,1"), high - low, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="kmin,kmax,pmax"):
        sc.env(reward_baseline="SECN9")


def test_a_switch_cost_charges_each_port_for_its_own_changes_only():
    """`switch_cost`: a port whose setting differs from its last interval's pays the cost,
    one that holds pays nothing, and nobody pays for the first interval's setting."""
    import jax

    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario

    sc = SimScenario("star8", load=0.6, incast_degree=4, episode_s=0.3)
    free, charged = sc.env(reward="acc"), sc.env(reward="acc", switch_cost=0.25)
    low, high = (
        thresholds_of("1a,1a,1", free.link_bps()),
        thresholds_of("8a,32a,1", free.link_bps()),
    )
    mixed = jax.tree.map(lambda a, b: a.at[::2].set(b[::2]), low, high)  # even ports high
    _, a = free.reset(jax.random.key(4))
    _, b = charged.reset(jax.random.key(4))
    even = np.arange(free.n_ports) % 2 == 0
    for setting, cost in [
        (low, 0.0), (low, 0.0), (mixed, 0.25 * even), (mixed, 0.0), (low, 0.25 * even)
    ]:  # fmt: skip
        _, a, reward, _, _ = free.step(a, setting)
        _, b, shaped, _, _ = charged.step(b, setting)
        np.testing.assert_allclose(np.asarray(reward) - np.asarray(shaped), cost, atol=1e-6)
    with pytest.raises(ValueError, match="switch_cost"):
        sc.env(switch_cost=-0.1)


def test_a_goodput_weight_credits_each_port_its_utilisation_beyond_the_baselines():
    """`goodput_weight`: a port's reward gains the weight times its utilisation in the
    interval (from the interval's own telemetry); paired with a baseline setting, an agent
    running that very setting gets exactly zero, goodput term included."""
    import jax

    from ecntune.agent.features import utilisation
    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario

    sc = SimScenario("star8", load=0.6, incast_degree=4, episode_s=0.3)
    kind = "mice_slowdown_squared"
    plain, weighted = sc.env(reward=kind), sc.env(reward=kind, goodput_weight=2.0)
    paired = sc.env(reward=kind, reward_baseline="secn0", goodput_weight=2.0)
    secn0 = thresholds_of("secn0", plain.link_bps())
    _, a = plain.reset(jax.random.key(5))
    _, b = weighted.reset(jax.random.key(5))
    _, c = paired.reset(jax.random.key(5))
    busy = 0.0
    for _ in range(4):
        _, a, reward, _, _ = plain.step(a, secn0)
        _, b, shaped, _, info = weighted.step(b, secn0)
        _, c, against, _, _ = paired.step(c, secn0)
        used = np.asarray(utilisation(info["telemetry"]))
        np.testing.assert_allclose(np.asarray(shaped) - np.asarray(reward), 2.0 * used, atol=1e-5)
        np.testing.assert_allclose(np.asarray(against), 0.0, atol=1e-6)
        busy = max(busy, float(used.max()))
    assert busy > 0.1  # the term was there to see: some port carried traffic
    with pytest.raises(ValueError, match="goodput_weight"):
        sc.env(goodput_weight=-1.0)


def test_a_switch_scoped_reward_gives_every_port_its_switchs_mean():
    """`reward_scope="switch"`: each port's reward is the mean over its own switch's ports
    (a leaf-spine, so that switches differ), the per-port rewards being the papers'."""
    import jax

    from ecntune.agent.static import thresholds_of
    from ecntune.sim.scenario import SimScenario

    sc = SimScenario("leafspine-2x2", load=0.6, incast_degree=3, episode_s=0.05)
    per_port, shared = sc.env(reward="acc"), sc.env(reward="acc", reward_scope="switch")
    th = thresholds_of("1a,8a,1", per_port.link_bps())
    _, a = per_port.reset(jax.random.key(2))
    _, b = shared.reset(jax.random.key(2))
    groups = [row[row >= 0] for row in per_port.fabric.switch_ports]
    assert len(groups) > 1
    for _ in range(3):
        _, a, own, _, _ = per_port.step(a, th)
        _, b, mean, _, _ = shared.step(b, th)
        own, mean = np.asarray(own), np.asarray(mean)
        for ports in groups:
            np.testing.assert_allclose(mean[ports], own[ports].mean(), rtol=1e-5)
        assert len({round(float(own[g].mean()), 6) for g in groups}) > 1  # switches differ
    with pytest.raises(ValueError, match="reward_scope"):
        sc.env(reward_scope="fabric")


def test_the_training_benchmarks_deployed_recipes_are_the_deployed_agents():
    """bench/bench_train.py --recipe deployed times, per algorithm, the recipe of the seed
    docs/results deploys (ACC's is `acc:default`, the demo's agent); if either changes
    alone, the benchmark would time an agent nobody deploys."""
    import importlib.util

    from ecntune.agent import ddqn, ippo

    path = Path(__file__).resolve().parents[1] / "bench" / "bench_train.py"
    spec = importlib.util.spec_from_file_location("bench_train", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    pet_q9l4 = results / "star8-20ms-cubic-blind-heldout" / "checkpoints" / "pet-q9l-s4.msgpack"
    deployed = {
        "acc": (ddqn.load("default"), ddqn.DEFAULT_CHECKPOINT, ddqn.FORMAT, "ACC"),
        "pet": (ippo.load(pet_q9l4), pet_q9l4, ippo.FORMAT, "PET"),
    }
    for algo, (agent, path, fmt, name) in deployed.items():
        fields, reward = bench.RECIPES["deployed"][algo]
        assert dataclasses.replace(agent.config, **fields) == agent.config, algo
        assert agent.reward.kind == reward["reward_kind"], algo
        _, _, meta = load_checkpoint(path, fmt, name)
        assert meta["reward"]["paired_with"] == reward["reward_baseline"], algo
        assert meta["reward"].get("goodput_weight", 0.0) == reward.get("goodput_weight", 0.0)
