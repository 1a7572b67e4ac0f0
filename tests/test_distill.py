"""Distilling an agent into a switch table (agent/distill.py, issue 20): the table decides
exactly as the fitted tree does, its boxes partition the feature space, it round-trips
through its file, and `ecntune distill` / `ecntune eval` run it in the simulator."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from ecntune.agent import ddqn, distill
from ecntune.agent.distill import QUANT_LEVELS, Tree, TreeConfig, TreePolicy, quantise
from ecntune.agent.features import FEATURE_NAMES, observation, observation_size, switch_keys
from ecntune.agent.policy import greedy_function, load_policy
from ecntune.agent.rewards import Reward
from ecntune.controller.switch_policy import policy_plan
from ecntune.sim.scenario import SimScenario
from ecntune.telemetry import PortTelemetry

TINY = SimScenario("tiny", load=0.7, incast_degree=2, episode_s=0.4, interval_s=0.02)


def _states(n: int, features: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (n, features)).astype(np.float32)


def test_the_table_decides_exactly_as_the_fitted_tree_and_its_entries_partition_the_space():
    from sklearn.tree import DecisionTreeClassifier

    obs = _states(3000, 18)
    # a teacher whose action depends on two features, as a policy's does on queue and rate
    actions = (obs[:, 0] > 0.3).astype(np.int32) * 2 + (obs[:, 16] > 0.7).astype(np.int32)
    tree, depth = distill.fit_tree(obs, actions, max_leaves=16)
    assert 2 <= tree.action.shape[0] <= 16
    assert depth >= 2
    assert distill.agreement(tree, obs, actions) > 0.99  # the rule is axis-aligned
    q = np.asarray(quantise(jnp.asarray(obs)))
    reference = DecisionTreeClassifier(max_leaf_nodes=16, random_state=0).fit(q, actions)
    probe = _states(5000, 18, seed=1)
    probe[:50] = 0.0  # the corners of the space too
    probe[50:100] = 1.0
    ours = np.asarray(distill.lookup(tree, jnp.asarray(probe)))
    np.testing.assert_array_equal(ours, reference.predict(np.asarray(quantise(probe))))
    fast = np.asarray(distill.match(distill.table_of(tree), jnp.asarray(probe)))
    np.testing.assert_array_equal(fast, ours)  # the bit vectors answer as the boxes do
    noise = np.random.default_rng(3).integers(0, 20, len(obs))  # a tree that uses every leaf
    big, _ = distill.fit_tree(obs, noise, max_leaves=100)
    assert big.action.shape[0] == 100  # four 32-bit words per feature value
    np.testing.assert_array_equal(
        distill.match(distill.table_of(big), jnp.asarray(probe)),
        distill.lookup(big, jnp.asarray(probe)),
    )
    qp = np.asarray(quantise(jnp.asarray(probe)))[:, None, :]
    inside = np.all((qp >= np.asarray(tree.lo)) & (qp < np.asarray(tree.hi)), axis=-1)
    assert np.all(inside.sum(axis=1) == 1)  # exactly one entry matches every key
    assert np.asarray(tree.lo).min() >= 0
    assert np.asarray(tree.hi).max() <= QUANT_LEVELS


def test_a_saved_table_loads_back_to_the_same_decisions_and_bad_files_are_refused(
    tmp_path: Path,
):
    config = TreeConfig("acc", levels=6, pmax=(0.1, 1.0), hold_idle=True)
    obs = _states(2000, observation_size("acc"))
    actions = np.where(obs[:, 12] > 0.5, 5, 20).astype(np.int32)  # by the last interval's qlen
    tree, _ = distill.fit_tree(obs, actions, max_leaves=8)
    path = tmp_path / "tree.json"
    distill.save(path, config, tree, Reward("pet"), {"teacher": "synthetic"})
    doc = json.loads(path.read_text())
    assert len(doc["entries"]) == tree.action.shape[0]
    assert {n for e in doc["entries"] for n in e["match"]} == {"qlen@t"}  # only what splits
    loaded = load_policy(f"tree:{path}")
    assert isinstance(loaded, TreePolicy)
    assert loaded.reward == Reward("pet")
    assert loaded.config == config
    zero = dataclasses.replace(config, zero_level=True)  # a teacher with the zero level
    distill.save(tmp_path / "zero.json", zero, tree, Reward("pet"), {})
    assert load_policy(f"tree:{tmp_path / 'zero.json'}").config.template.n_actions == 28 * 2
    probe = jnp.asarray(_states(500, observation_size("acc"), seed=2))
    np.testing.assert_array_equal(distill.lookup(loaded.tree, probe), distill.lookup(tree, probe))
    for bad, message in [
        ("not json", "cannot read"),
        (json.dumps({"format": "other"}), "not an ecntune distilled tree"),
        (json.dumps({**doc, "entries": []}), "no entries"),
        (json.dumps({**doc, "entries": [{**doc["entries"][0], "action": 999}]}), "outside"),
        (json.dumps({**doc, "entries": [{"match": {"nope@t": [0, 1]}, "action": 1}]}),
         "malformed"),
    ]:  # fmt: skip
        path.write_text(bad)
        with pytest.raises(ValueError, match=message):
            distill.load(path)


def _history(ports: int, tx: np.ndarray, queue: np.ndarray) -> PortTelemetry:
    one = np.ones((3, ports), np.float32)
    h = PortTelemetry(*(one * v for v in (
        0.001, 25e9, 1e5, 70, 1e4, 7, 5e6, 70, 9e4, 2e4, 8e4, 0.1, 4, 0,
    )))  # fmt: skip
    # a setting in force that no template action has, so a held port is told apart
    return h._replace(tx_bytes=one * tx, qdepth_sum_bytes=one * queue, kmin_bytes=one * 3e4,
                      kmax_bytes=one * 9e4, pmax=one * 0.3)  # fmt: skip


def _two_entry_table() -> tuple[TreePolicy, int]:
    """A table split on qlen@t at 128: below → action 0 (α, α, 0.1), above → the last one
    (32α, 32α, 1); and that last action's index."""
    config = TreeConfig("acc", levels=6, pmax=(0.1, 1.0), hold_idle=True)
    lo = np.zeros((2, observation_size("acc")), np.int32)
    hi = np.full_like(lo, QUANT_LEVELS)
    hi[0, 12], lo[1, 12] = 128, 128
    last = config.template.n_actions - 1
    tree = Tree(jnp.asarray(lo), jnp.asarray(hi), jnp.asarray([0, last]))
    return TreePolicy(config, tree, Reward()), last


def test_the_tree_policy_acts_through_the_template_and_keeps_acc_idle_ports():
    policy, last = _two_entry_table()
    config = policy.config
    tx = np.array([5e6, 5e6, 0.0])  # the third port idle last interval: ACC keeps its setting
    queue = np.array([0.0, 1e12, 1e12])  # qlen feature 0 and ~1 (clipped)
    h = _history(3, tx, queue)
    assert [int(q) for q in np.asarray(quantise(observation(h, "acc")))[:, 12]] == [0, 255, 255]
    kmin, kmax, pmax = (np.asarray(x) for x in policy.act(h))
    t = config.template
    alpha = 20_000.0
    np.testing.assert_allclose(kmin[:2], [t.kmin_alpha[0] * alpha, t.kmin_alpha[last] * alpha])
    np.testing.assert_allclose(kmax[:2], [t.kmax_alpha[0] * alpha, t.kmax_alpha[last] * alpha])
    np.testing.assert_allclose(pmax[:2], [t.pmax[0], t.pmax[last]], rtol=1e-6)
    np.testing.assert_allclose([kmin[2], kmax[2], pmax[2]], [3e4, 9e4, 0.3], rtol=1e-6)  # held
    act, params = greedy_function(policy)  # the evaluator's form decides the same
    for x, y in zip(act(params, h), policy.act(h), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y))


def test_the_controller_runs_a_table_each_port_by_its_own_queue():
    from ecntune.agent.static import StaticPolicy
    from ecntune.controller.loop import SwitchLoop
    from ecntune.controller.safety import Guard
    from ecntune.p4src import encoding as enc

    policy, last = _two_entry_table()
    loop = SwitchLoop("s1", {1: 20e6, 2: 20e6}, policy, StaticPolicy("secn1"), interval_s=0.1,
                      buffer_bytes=96_000, guard=Guard(3, 0))  # fmt: skip
    for port, mean_queue_bytes in ((1, 3_000), (2, 90_000)):  # qlen@t quantised 40 and 151
        d = dict.fromkeys(enc.DIGEST_FIELDS, 0)
        d.update(port=port, interval_us=100_000, tx_bytes=100_000, tx_pkts=70,
                 qdepth_sum_bytes=70 * mean_queue_bytes, qdepth_samples=70)  # fmt: skip
        loop.on_digest(d)
    writes = dict(loop.tick(0.0).writes)
    t, alpha = policy.config.template, 1500.0  # α is one MTU at 20 Mbit/s
    assert writes[1] == enc.encode_thresholds(alpha, alpha, float(t.pmax[0]))  # entry 0
    k = float(t.kmax_alpha[last]) * alpha
    assert writes[2] == enc.encode_thresholds(k, k, float(t.pmax[last]))  # entry 1


def test_states_come_from_busy_ports_and_a_large_table_imitates_a_shipped_agent():
    teacher = load_policy("acc:agent/checkpoints/acc-star8.msgpack")
    obs, actions = distill.sample_states(teacher, [TINY], episodes=2)
    assert obs.shape == (len(actions), observation_size("acc"))
    assert len(actions) > 20
    assert np.all(obs[:, 13] > 0)  # tx_rate@t: every sampled port sent last interval
    q = ddqn.q_values(teacher.graph, teacher.acting_params, jnp.asarray(obs))
    np.testing.assert_array_equal(np.argmax(np.asarray(q), axis=-1), actions)  # its choices
    tree, _ = distill.fit_tree(obs, actions, max_leaves=256)
    assert distill.agreement(tree, obs, actions) >= 0.9


def test_a_tree_on_the_switchs_keys_becomes_entries_for_every_port_speed(tmp_path: Path):
    """The switch's keys are the sampled states' last interval in whole 8-bit steps, and
    the controller's plan holds the tree once per port speed with settings in that speed's
    bytes (α scales with the link), one class entry per port."""
    teacher = load_policy("acc:agent/checkpoints/acc-star8.msgpack")
    obs, actions = distill.sample_states(teacher, [TINY], episodes=2, features="switch")
    assert obs.shape == (len(actions), len(FEATURE_NAMES["switch"]))
    keys = obs * 255
    np.testing.assert_allclose(keys, np.round(keys), atol=1e-3)  # whole steps
    assert np.all(keys[:, 1] > 0)  # tx_rate: every sampled port sent
    tree, _ = distill.fit_tree(obs, actions, max_leaves=16)
    config = distill.tree_config(teacher, "switch")
    path = tmp_path / "tree.json"
    distill.save(path, config, tree, teacher.reward, {})
    policy = distill.load(path)
    leaves = int(policy.tree.action.shape[0])
    plan = policy_plan(policy, {1: 25e9, 2: 25e9, 3: 100e9})
    ports = {e.match["meta.telemetry.port"]: e.params for e in plan if "port" in e.table}
    assert [ports[p]["port_class"] for p in (1, 2, 3)] == [1, 1, 2]
    tree_entries = [e for e in plan if "tree" in e.table]
    assert len(tree_entries) == 2 * leaves
    slow, fast = tree_entries[:leaves], tree_entries[leaves:]
    for a, b in zip(slow, fast, strict=True):
        assert {k: v for k, v in a.match.items() if "class" not in k} == {
            k: v for k, v in b.match.items() if "class" not in k
        }
        assert b.params["kmax"] == pytest.approx(4 * a.params["kmax"], rel=1e-6)
    # the keys the simulator's table decides on are the switch's, port by port
    history = PortTelemetry(*(np.full((1, 3), 1.0, np.float32) for _ in PortTelemetry._fields))
    history = history._replace(link_bps=np.array([[25e9, 25e9, 100e9]], np.float32))
    np.testing.assert_allclose(observation(history, "switch") * 255, switch_keys(
        PortTelemetry(*(np.asarray(f)[-1] for f in history))), atol=1e-3)  # fmt: skip
    with pytest.raises(ValueError, match="--in-switch"):
        policy_plan(TreePolicy(TreeConfig(), tree, teacher.reward), {1: 25e9})
    with pytest.raises(ValueError, match="exceed"):
        policy_plan(policy, {p: 1e9 * (p + 1) for p in range(1024 // leaves + 1)})


@pytest.mark.slow
def test_distill_writes_a_table_that_eval_judges_as_a_policy(tmp_path: Path, ecntune_cli):
    scenario = ["--scenario", "tiny", "--episode-s", "0.4", "--interval-s", "0.02",
                "--incast", "2", "--load", "0.7"]  # fmt: skip
    out = tmp_path / "d"
    teacher = ["--checkpoint", "agent/checkpoints/pet-star8.msgpack"]
    code, stdout, stderr = ecntune_cli(
        "distill", *teacher, *scenario, "--episodes", "2", "--max-leaves", "8", "--out", str(out),
        "--in-switch",
    )  # fmt: skip
    assert code == 0, stderr[-2000:]
    assert "held-out states" in stdout
    curve = list(csv.DictReader((out / "agreement.csv").open()))
    assert [int(r["max_leaves"]) for r in curve] == [4, 8]
    assert all(0 <= float(r["test_agreement"]) <= 1 for r in curve)
    assert (out / "agreement.png").stat().st_size > 0
    doc = json.loads((out / "tree.json").read_text())
    assert doc["features"] == [f"{n}@t" for n in FEATURE_NAMES["switch"]]  # ecn.p4's keys
    assert doc["config"]["hold_idle"] is True  # the switch holds idle ports, PET or not
    assert 2 <= len(doc["entries"]) <= 8
    code, _, stderr = ecntune_cli(
        "eval", *scenario, "--grid", "1a,1a,1;4a,16a,1", "--episodes", "2",
        "--checkpoint", str(out / "tree.json"), "--out", str(tmp_path / "e"),
    )  # fmt: skip
    assert code == 0, stderr[-2000:]
    rows = {r["policy"] for r in csv.DictReader((tmp_path / "e" / "policies.csv").open())}
    assert "tree:tree" in rows
    code, _, stderr = ecntune_cli(
        "distill", *teacher, "--max-leaves", "1000", "--out", str(tmp_path / "x")
    )
    assert code == 2
    assert "--max-leaves" in stderr
