"""Distilling a trained agent into a decision tree a switch table can hold (issue 20;
RL-CC, "Deploying RL-CC", §V-B/§V-C: collect trajectories of the converged policy, record
its input features and chosen actions, fit trees to imitate it).

    ecntune distill --checkpoint results/loops-acc-star8mix-s0/acc.msgpack --mix star8-train

Why a single tree rather than RL-CC's boosted ensemble (CatBoost, up to 10 trees of depth
4): a switch decides with one match-action lookup, and one tree is exactly one
range-match table, one entry per leaf. Each leaf is a box in the space of the agent's own
features (agent/features.py, every one in [0, 1]) quantised to QUANT_LEVELS integer steps
per feature: the entry matches `lo <= q < hi` on every feature and returns the action
the leaf votes for. The boxes partition the space, so exactly one entry matches.

`TreePolicy` runs that table as a pure JAX function (`decide`, like the networks'), so
the simulator judges the distilled policy with the evaluation protocol
(agent/evaluate.py) beside its teacher, and the controller can run it
(`--policy tree:path/tree.json`). ACC's idle-port rule (§4.3) stays outside the table,
as it stays outside ACC's network.

With `features="switch"` the tree keys on what ecn.p4 itself computes at the end of an
interval (agent/features.py `switch_keys`: the last interval's six values in 8-bit log
steps, no division), so the same table runs in the P4 program (controller/switch_policy.py
installs it) and in the simulator with the same answer for the same counters.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ecntune import plots
from ecntune.agent.actions import ActionTemplate, acc_template
from ecntune.agent.ddqn import hold_idle_ports
from ecntune.agent.features import FEATURE_NAMES, HISTORY, FeatureSet, observation
from ecntune.agent.policy import compiled
from ecntune.agent.rewards import Reward, trained_reward
from ecntune.telemetry import EcnThresholds, PortTelemetry

FORMAT = "ecntune-tree-1"
QUANT_LEVELS = 256  # each feature as an 8-bit integer: what a switch's range match keys on
LEAF_BUDGETS = (4, 8, 16, 32, 64, 128, 256)  # the agreement-vs-table-size curve
DISTILL_SEED = 3000  # sampled episodes: training seeds, apart from the judge's (2000..)


def quantise(obs: jax.Array) -> jax.Array:
    """Features in [0, 1] as integers 0..QUANT_LEVELS-1 (values outside are clipped)."""
    return jnp.round(jnp.clip(obs, 0.0, 1.0) * (QUANT_LEVELS - 1)).astype(jnp.int32)


class Tree(NamedTuple):
    """The table: one row per leaf. Feature f of entry i matches lo[i, f] <= q < hi[i, f]."""

    lo: jax.Array  # (leaves, features) int32
    hi: jax.Array  # (leaves, features) int32
    action: jax.Array  # (leaves,) int32: index into the teacher's action template


@dataclasses.dataclass(frozen=True)
class TreeConfig:
    """What the table's keys and actions mean (hashable: the evaluator compiles per config)."""

    features: FeatureSet = "acc"
    levels: int = 10  # the teacher's action template (agent/actions.py)
    pmax: tuple[float, ...] = (0.1, 1.0)
    hold_idle: bool = True  # ACC's idle-port rule (its teacher is ACC)
    zero_level: bool = False  # the teacher's template has 0 below α

    @property
    def template(self) -> ActionTemplate:
        return acc_template(self.levels, self.pmax, self.zero_level)

    @property
    def feature_names(self) -> list[str]:
        """One name per key of the table: `qlen@t-2` ... `pmax@t` (oldest interval first)."""
        k = 1 if self.features == "switch" else HISTORY
        ages = [f"t-{k - 1 - i}" if i < k - 1 else "t" for i in range(k)]
        return [f"{n}@{a}" for a in ages for n in FEATURE_NAMES[self.features]]


def lookup(tree: Tree, obs: jax.Array) -> jax.Array:
    """The action of the one entry whose box holds each row of `obs` (..., features): the
    table's meaning, box by box (`match` computes the same faster)."""
    q = quantise(obs)[..., None, :]  # (..., 1, F)
    inside = jnp.all((q >= tree.lo) & (q < tree.hi), axis=-1)  # (..., leaves)
    return tree.action[jnp.argmax(inside, axis=-1)]


class Table(NamedTuple):
    """The table as bit vectors, as hardware classifiers match ranges (Lakshman and
    Stiliadis, SIGCOMM '98): bit i of masks[f, v] says entry i admits value v of feature f;
    an entry matches where every feature's word has its bit."""

    masks: jax.Array  # (features, QUANT_LEVELS, ceil(leaves / 32)) uint32
    action: jax.Array  # (leaves,) int32


def table_of(tree: Tree) -> Table:
    lo, hi = np.asarray(tree.lo), np.asarray(tree.hi)
    leaves, features = lo.shape
    words = -(-leaves // 32)
    v = np.arange(QUANT_LEVELS)[None, :, None]
    admits = np.zeros((features, QUANT_LEVELS, words * 32), bool)
    admits[..., :leaves] = (v >= lo.T[:, None, :]) & (v < hi.T[:, None, :])
    bits = admits.reshape(features, QUANT_LEVELS, words, 32).astype(np.uint64)
    masks = (bits << np.arange(32, dtype=np.uint64)).sum(axis=-1).astype(np.uint32)
    return Table(jnp.asarray(masks), jnp.asarray(tree.action))


def match(table: Table, obs: jax.Array) -> jax.Array:
    """`lookup`'s answer from the bit vectors: one AND over features per 32 entries, then
    the lowest set bit (the boxes are disjoint: exactly one bit is set)."""
    q = quantise(obs)  # (P, F)
    words = table.masks[jnp.arange(q.shape[-1]), q]  # (P, F, W)
    hits = jax.lax.reduce(words, np.uint32(0xFFFFFFFF), jax.lax.bitwise_and, (1,))  # (P, W)
    w = jnp.argmax(hits != 0, axis=-1)
    word = jnp.take_along_axis(hits, w[:, None], axis=-1)[:, 0]
    bit = 31 - jax.lax.clz(word & (~word + np.uint32(1)))  # index of the lowest set bit
    return table.action[w * 32 + bit.astype(jnp.int32)]


def decide(
    config: TreeConfig, table: Table, history: PortTelemetry
) -> tuple[jax.Array, jax.Array, EcnThresholds]:
    """One switch's decision from the table: (observation, action, setting) per port, the
    shape of ddqn.decide's answer, so the evaluator and the controller run it the same way."""
    obs = observation(history, config.features)
    actions = match(table, obs)
    chosen = config.template.thresholds(actions, jnp.asarray(history.link_bps)[-1])
    return obs, actions, hold_idle_ports(chosen, history) if config.hold_idle else chosen


class TreePolicy:
    """A distilled policy: act() every interval from one table lookup per port."""

    def __init__(self, config: TreeConfig, tree: Tree, reward: Reward, name: str = "tree") -> None:
        self.config, self.tree, self.reward, self.name = config, tree, reward, name
        self.table = table_of(tree)
        self.decide = functools.partial(decide, config)
        self._greedy = compiled(self.decide, self.table)

    @property
    def acting_params(self) -> Table:
        """The parameters `decide` takes (what the evaluator runs in the simulator)."""
        return self.table

    def act(self, history: PortTelemetry) -> EcnThresholds:
        return self._greedy(self.table, history)[-1]


# -- from a trained agent to a tree ---------------------------------------------------------


def sample_states(
    teacher: Any, scenarios: Sequence[Any], episodes: int, seed: int = DISTILL_SEED,
    features: FeatureSet | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(observations, actions) of the teacher's greedy decisions on busy ports (ports that
    sent in the last interval: idle ones keep their setting under ACC's rule) over
    `episodes` episodes of each scenario, the teacher driving the fabric (RL-CC §V-C:
    "trajectories using a convergent policy"). The observations are the teacher's own, or
    `features` of the same states (the tree may key on other values than the network)."""
    from ecntune.agent.evaluate import scenario_env

    obs_all, act_all = [], []
    for sc in scenarios:
        env = scenario_env(sc)

        def episode(key: jax.Array, params: Any, env: Any = env) -> tuple[jax.Array, ...]:
            _, state = env.reset(key)

            def body(s: Any, _: None) -> tuple[Any, tuple[jax.Array, ...]]:
                out = teacher.decide(params, s.history)
                busy = jnp.asarray(s.history.tx_bytes)[-1] > 0
                obs = out[0] if features is None else observation(s.history, features)
                _, s, _, _, _ = env.step(s, out[-1])
                return s, (obs, out[1], busy)

            return jax.lax.scan(body, state, None, length=env.episode_intervals)[1]

        keys = jnp.stack([jax.random.key(seed + i) for i in range(episodes)])
        obs, actions, busy = jax.tree.map(
            np.asarray, jax.jit(jax.vmap(episode, in_axes=(0, None)))(keys, teacher.acting_params)
        )
        obs_all.append(obs[busy])
        act_all.append(actions[busy])
    return np.concatenate(obs_all), np.concatenate(act_all).astype(np.int32)


def fit_tree(
    obs: np.ndarray, actions: np.ndarray, max_leaves: int, max_depth: int | None = None,
    seed: int = 0,
) -> tuple[Tree, int]:  # fmt: skip
    """A classification tree on the quantised features (at most `max_leaves` leaves and
    `max_depth` levels), turned into its table (the box of every leaf), and its depth."""
    from sklearn.tree import DecisionTreeClassifier

    if len(actions) == 0:
        raise ValueError("no busy-port states to learn from (did traffic run?)")
    q = np.asarray(quantise(jnp.asarray(obs)))
    model = DecisionTreeClassifier(max_leaf_nodes=max(2, max_leaves), max_depth=max_depth,
                                   random_state=seed).fit(q, actions)  # fmt: skip
    t = model.tree_
    lo, hi, action = [], [], []

    def walk(node: int, low: np.ndarray, high: np.ndarray) -> None:
        if t.children_left[node] < 0:  # a leaf: its box and its majority action
            lo.append(low)
            hi.append(high)
            action.append(model.classes_[int(np.argmax(t.value[node]))])
            return
        f, cut = t.feature[node], int(np.floor(t.threshold[node])) + 1  # q <= thr <=> q < cut
        left_high, right_low = high.copy(), low.copy()
        left_high[f], right_low[f] = min(high[f], cut), max(low[f], cut)
        walk(t.children_left[node], low, left_high)
        walk(t.children_right[node], right_low, high)

    features = q.shape[1]
    walk(0, np.zeros(features, np.int32), np.full(features, QUANT_LEVELS, np.int32))
    tree = Tree(jnp.asarray(np.stack(lo), jnp.int32), jnp.asarray(np.stack(hi), jnp.int32),
                jnp.asarray(np.array(action), jnp.int32))  # fmt: skip
    return tree, int(model.get_depth())


def agreement(tree: Tree, obs: np.ndarray, actions: np.ndarray) -> float:
    """Share of states where the table picks the teacher's action."""
    return float(np.mean(np.asarray(lookup(tree, jnp.asarray(obs))) == actions))


def tree_config(teacher: Any, features: FeatureSet | None = None) -> TreeConfig:
    """The table's conventions from the teacher (its features unless `features` is given,
    template, idle rule; the switch's keys hold idle ports as ecn.p4 does)."""
    from ecntune.agent.ddqn import DdqnPolicy

    c = teacher.config
    hold_idle = isinstance(teacher, DdqnPolicy) or features == "switch"
    return TreeConfig(features or c.features, c.levels, tuple(c.pmax), hold_idle,
                      c.zero_level)  # fmt: skip


# -- the file: readable, one entry per leaf -------------------------------------------------


def save(path: Path, config: TreeConfig, tree: Tree, reward: Reward, meta: dict) -> None:
    """The table as JSON, atomically: every entry's ranges (inclusive, as P4Runtime's
    range match writes them) per named feature, and the setting it answers in α units."""
    t = config.template
    entries = [
        {
            "match": {
                name: [int(low), int(high) - 1]
                for name, low, high in zip(config.feature_names, lo, hi, strict=True)
                if low > 0 or high < QUANT_LEVELS
            },
            "action": int(a),
            "setting": {
                "kmin_alpha": float(t.kmin_alpha[a]),
                "kmax_alpha": float(t.kmax_alpha[a]),
                "pmax": float(t.pmax[a]),
            },
        }
        for lo, hi, a in zip(
            np.asarray(tree.lo), np.asarray(tree.hi), np.asarray(tree.action), strict=True
        )
    ]
    doc = {
        "format": FORMAT, "config": dataclasses.asdict(config), "quant_levels": QUANT_LEVELS,
        "features": config.feature_names, "reward": reward.to_meta(), "meta": meta,
        "entries": entries,
    }  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def load(path: Path) -> TreePolicy:
    """A TreePolicy from a file save() wrote; ValueError says what is wrong with it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the distilled tree {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not an ecntune distilled tree ({FORMAT})")
    try:
        c = doc["config"]
        config = TreeConfig(c["features"], int(c["levels"]), tuple(map(float, c["pmax"])),
                            bool(c["hold_idle"]), bool(c.get("zero_level", False)))  # fmt: skip
        index = {n: i for i, n in enumerate(config.feature_names)}
        n = len(doc["entries"])
        lo = np.zeros((n, len(index)), np.int32)
        hi = np.full((n, len(index)), QUANT_LEVELS, np.int32)
        action = np.zeros(n, np.int32)
        for i, e in enumerate(doc["entries"]):
            for name, (a, b) in e["match"].items():
                lo[i, index[name]], hi[i, index[name]] = a, b + 1
            action[i] = e["action"]
        reward = trained_reward({"reward": doc["reward"]}, "acc")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: malformed distilled tree ({e!r})") from None
    if n == 0 or not np.all((action >= 0) & (action < config.template.n_actions)):
        raise ValueError(f"{path}: no entries, or an action outside the template")
    tree = Tree(jnp.asarray(lo), jnp.asarray(hi), jnp.asarray(action))
    return TreePolicy(config, tree, reward, name=f"tree:{path}")


# -- the whole job: sample, fit every budget, keep one ------------------------------------------


@dataclasses.dataclass
class Distilled:
    policy: TreePolicy
    curve: list[dict[str, float]]  # per leaf budget: leaves, train and test agreement
    train_states: int
    test_states: int
    test_agreement: float


def distill(
    teacher: Any,
    scenarios: Sequence[Any],
    episodes: int,
    max_leaves: int = 64,
    max_depth: int | None = None,
    seed: int = DISTILL_SEED,
    progress: Callable[[str], None] = lambda _: None,
    features: FeatureSet | None = None,
) -> Distilled:
    """Fit trees of every LEAF_BUDGETS size up to `max_leaves` on the teacher's states of
    `episodes` episodes per scenario, and measure agreement on as many further episodes
    (other seeds, so held-out states); keep the `max_leaves` one. `features`: what the
    tree keys on (None: the teacher's observation; "switch": ecn.p4's keys)."""
    progress(f"sampling {episodes} episodes per scenario ({len(scenarios)} scenarios)")
    x_train, y_train = sample_states(teacher, scenarios, episodes, seed, features)
    x_test, y_test = sample_states(teacher, scenarios, episodes, seed + episodes, features)
    budgets = sorted({b for b in LEAF_BUDGETS if b < max_leaves} | {max_leaves})
    curve, kept = [], None
    for b in budgets:
        tree, levels = fit_tree(x_train, y_train, b, max_depth)
        row = {"max_leaves": b, "leaves": int(tree.action.shape[0]), "depth": levels,
               "train_agreement": round(agreement(tree, x_train, y_train), 4),
               "test_agreement": round(agreement(tree, x_test, y_test), 4)}  # fmt: skip
        progress(f"{b} leaves: {row['test_agreement']:.1%} of held-out states agree")
        curve.append(row)
        kept = tree
    assert kept is not None
    config = tree_config(teacher, features)
    policy = TreePolicy(config, kept, teacher.reward)
    return Distilled(policy, curve, len(y_train), len(y_test), curve[-1]["test_agreement"])


# -- what it writes -------------------------------------------------------------------------


def write_curve(curve: list[dict[str, float]], out: Path) -> None:
    """agreement.csv and agreement.png: how much of the agent a table of each size keeps."""
    import csv

    plt = plots.pyplot()

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "agreement.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(curve[0]))
        w.writeheader()
        w.writerows(curve)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    leaves = [r["leaves"] for r in curve]
    ax.plot(leaves, [100 * r["train_agreement"] for r in curve], "o--", label="sampled states")
    ax.plot(leaves, [100 * r["test_agreement"] for r in curve], "o-", label="further episodes")
    ax.set_xscale("log", base=2)
    ax.set_xticks(leaves, [str(n) for n in leaves])
    ax.set_xlabel("table entries (tree leaves)")
    ax.set_ylabel("same action as the agent (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend()
    plots.save(fig, out / "agreement.png")


def write_judgement(result: Any, agent: str, tree: str, distilled: Distilled, out: Path) -> str:
    """distill.md: the table's size and agreement, then tree vs its agent vs the single best
    static over the held-out mix (the evaluation protocol's paired CIs); returns the text."""
    from ecntune.agent.evaluate import COMPARED
    from ecntune.agent.report import LABELS, formatted

    best = result.single_best
    pairs = [(tree, agent), (tree, best), (agent, best)]
    lines = [
        f"# Distilled tree vs its agent ({agent}), held-out mix\n",
        f"{int(distilled.policy.tree.action.shape[0])} table entries; the tree picks the "
        f"agent's action on {distilled.test_agreement:.1%} of {distilled.test_states} busy-port "
        f"states of episodes it was not fitted on. Single best static over the mix: {best}. "
        f"{result.episodes} episodes per scenario; relative differences, 95 % bootstrap CIs "
        "(bold: the CI excludes zero).\n",
        "| comparison | " + " | ".join(LABELS[m] for m in COMPARED) + " |",
        "|---" * (len(COMPARED) + 1) + "|",
    ]
    for a, b in pairs:
        cs = result.comparisons(a, b)
        lines.append(f"| {a} vs {b} | " + " | ".join(formatted(c) for c in cs) + " |")
    lines += ["\nPer scenario, mice mean slowdown, tree vs agent:\n"]
    lines += ["| scenario | tree vs agent |", "|---|---|"]
    for i, sc in enumerate(result.scenarios):
        lines.append(f"| {sc.label} | {formatted(result.per_scenario(tree, i, agent)[0])} |")
    lines.append("\nAgreement by table size (agreement.csv, agreement.png):\n")
    lines += ["| entries | depth | sampled states | further episodes |", "|---|---|---|---|"]
    for r in distilled.curve:
        lines.append(f"| {r['leaves']} | {r['depth']} | {r['train_agreement']:.1%} | "
                     f"{r['test_agreement']:.1%} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    (out / "distill.md").write_text(text)
    return text
