"""`ecntune train`: ACC and PET agents trained offline in the JAX simulator.

    ecntune train --algo acc --mix star8-train --episodes 120 --envs 8
    ecntune train --algo pet --scenario testbed24 --incast 16 --episodes 64
    ecntune train --algo graphcc --scenario testbed24 --workload fb_hadoop --incast 16

Training runs agent/loops.py's jitted loops: a round is one episode on each of `envs`
copies of the fabric side by side, acting, simulating and learning without leaving the
device (ACC §4: ε-greedy double DQN with a replay; PET §4: PPO on a round of sampled
actions). One network is trained by every busy port of every switch and deployed to every
switch (parameter sharing; see agent/loops.py). On a training mix, round r runs scenario
r mod n (one fabric, so the network carries over; each scenario compiles once). Episodes
are fresh traffic samples (seeds below sim/scenario.py's TRAIN_SEED_LIMIT by construction:
they come from the training key, never from the held-out seed list). The run writes the
checkpoint (atomic, also every `--save-every` episodes), learning_curve.csv and
learning_curve.png; with a judge (agent/evaluate.py `Judge`) every saved checkpoint is
scored on fixed unseen episodes against the single best static setting of the grid.
"""

from __future__ import annotations

import csv
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecntune import plots
from ecntune.agent.evaluate import Judge
from ecntune.agent.rewards import Reward, RewardWeights
from ecntune.sim.scenario import SimScenario


def _scenarios(scenario: SimScenario | Sequence[SimScenario]) -> list[SimScenario]:
    """One scenario or a training mix: one fabric, so one network serves every switch."""
    scenarios = [scenario] if isinstance(scenario, SimScenario) else list(scenario)
    if not scenarios:
        raise ValueError("no scenario to train on")
    if len({sc.topology for sc in scenarios}) > 1:
        raise ValueError("a training mix must keep one topology (one agent per switch)")
    return scenarios


def train(
    algo: str,
    scenario: SimScenario | Sequence[SimScenario],
    episodes: int,
    out: Path,
    seed: int = 0,
    config: Any = None,
    save_every: int = 10,
    progress: bool = True,
    judge: Judge | None = None,
    envs: int = 8,
    reward_kind: str | None = None,
    reward_baseline: str | None = None,
    reward_scope: str = "port",
    switch_cost: float = 0.0,
    goodput_weight: float = 0.0,
) -> Path:
    """Train an ACC ("acc"), PET ("pet") or GraphCC ("graphcc") agent for at least
    `episodes` episodes (whole rounds of `envs`); returns the checkpoint path.
    `reward_kind`: the algorithm's own paper's reward unless given (agent/rewards.py:
    "mice_fct" or "mice_slowdown", the simulator's privileged ones, for ablations);
    `reward_baseline`: a static setting whose reward on the same flows is subtracted from
    the agent's; `reward_scope` "switch": each port rewarded with its switch's mean;
    `switch_cost`: charged to a port for each change of its setting; `goodput_weight`: a
    port's utilisation times it added to its reward (all four: sim/env.py Env.make)."""
    import jax
    from tqdm import tqdm

    from ecntune.agent import ddqn, graphcc, ippo, loops

    algorithms: dict[str, tuple[Any, Any, Any, str]] = {  # module, config, loop, reward
        "acc": (ddqn, ddqn.DdqnConfig, loops.make_acc_loop, "acc"),
        "pet": (ippo, ippo.IppoConfig, loops.make_pet_loop, "pet"),
        "graphcc": (graphcc, graphcc.GraphccConfig, loops.make_graphcc_loop, "acc"),  # §3.3
    }
    if algo not in algorithms:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(algorithms)}")
    if envs < 1:
        raise ValueError(f"envs must be >= 1, got {envs}")
    module, default_config, make, paper_reward = algorithms[algo]
    reward_kind = reward_kind or paper_reward
    config = config or default_config()
    scenarios = _scenarios(scenario)
    if len({sc.reward_weights for sc in scenarios}) > 1:
        raise ValueError("the scenarios of one training run must share their reward weights")
    reward = Reward(reward_kind, RewardWeights(*scenarios[0].reward_weights))
    feats = config.features
    fabric_loops = [
        make(
            sc.env(feats, reward_kind, reward_baseline, reward_scope, switch_cost, goodput_weight),
            config,
            envs,
        )
        for sc in scenarios
    ]
    reward_meta = reward.to_meta()  # and how the simulator shaped it, where it did
    if reward_baseline:
        reward_meta["paired_with"] = reward_baseline
    if reward_scope != "port":
        reward_meta["scope"] = reward_scope
    if switch_cost:
        reward_meta["switch_cost"] = switch_cost
    if goodput_weight:
        reward_meta["goodput_weight"] = goodput_weight
    carry = fabric_loops[0].init(jax.random.key(seed))
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / f"{algo}.msgpack"
    rounds = -(-episodes // envs)
    log = TrainingLog(out, f"{algo}:{checkpoint}", scenarios, rounds * envs, save_every, judge)
    bar = tqdm(total=rounds * envs, desc=f"train {algo}", unit="ep", disable=not progress)
    for r in range(rounds):
        loop = fabric_loops[r % len(fabric_loops)]
        carry, metrics = loop.run(carry, 1)
        row = {"episode": (r + 1) * envs - 1, "scenario": scenarios[r % len(scenarios)].label}
        row |= {k: round(float(v[0]), 5) for k, v in metrics.items()}
        params = loop.params(carry)
        log.end_round(
            row,
            lambda meta, p=params: module.save(
                checkpoint, config, p, meta | {"reward": reward_meta}
            ),
        )
        bar.update(envs)
        bar.set_postfix(reward=f"{row['reward']:.3f}")
    bar.close()
    titles = {"acc": "ACC (double DQN)", "pet": "PET (PPO)", "graphcc": "GraphCC (GNN, DQN)"}
    log.write(titles[algo], "entropy" if algo == "pet" else "epsilon")
    return checkpoint


class TrainingLog:
    """What every training loop shares: the learning curve, a checkpoint every `save_every`
    episodes (and at the end), the optional judge of each checkpoint, and the training
    wall time with judging left out (what "time until it beats static" means)."""

    def __init__(
        self, out: Path, policy: str, scenarios: list[SimScenario], episodes: int,
        save_every: int,
        judge: Judge | None,
    ) -> None:  # fmt: skip
        self.out, self.policy, self.scenarios = out, policy, scenarios
        self.episodes, self.save_every, self.judge = episodes, save_every, judge
        self.curve: list[dict[str, Any]] = []
        self.start, self.judging = time.monotonic(), 0.0

    def end_round(self, row: dict[str, Any], save: Any) -> None:
        """Record a round (`row["episode"]`: the last episode it finished); `save(meta)`
        writes the checkpoint when one is due (every `save_every` episodes, and at the end)."""
        row["wall_s"] = round(time.monotonic() - self.start - self.judging, 2)
        done = row["episode"] + 1
        before = self.curve[-1]["episode"] + 1 if self.curve else 0
        if done // self.save_every > before // self.save_every or done >= self.episodes:
            trained_on = [dataclasses.asdict(sc.resolved()) for sc in self.scenarios]
            save({"scenarios": trained_on, "episodes": done})
            if self.judge is not None:
                t = time.monotonic()
                row.update(self.judge(self.policy))
                self.judging += time.monotonic() - t
                from tqdm import tqdm

                tqdm.write(
                    f"episode {done}: mice mean slowdown {row['judge_mice_mean']:.3f}, "
                    f"best static {row['best_static_mice_mean']:.3f} ({row['best_static']})"
                )
        self.curve.append(row)
        self._write_csv()

    def _write_csv(self) -> None:
        fields = list(dict.fromkeys(k for r in self.curve for k in r))
        with open(self.out / "learning_curve.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, restval="")
            w.writeheader()
            w.writerows(self.curve)

    def write(self, title: str, explore: str) -> None:
        """learning_curve.png (reward, exploration and, if judged, mice FCT over time)."""
        plt = plots.pyplot()

        judged = [r for r in self.curve if "judge_mice_mean" in r]
        fig, axes = plt.subplots(1, 2 if judged else 1, figsize=(11 if judged else 6, 3.5))
        ax = axes[0] if judged else axes
        ep = [r["episode"] for r in self.curve]
        ax.plot(ep, [r["reward"] for r in self.curve], label="mean reward of busy ports")
        ax.set_xlabel("episode")
        ax.set_ylabel("reward")
        ax2 = ax.twinx()
        ax2.plot(ep, [r[explore] for r in self.curve], color="grey", linestyle="--", label=explore)
        ax2.set_ylabel(explore)
        ax.set_title(f"{title} training in the simulator")
        ax.legend(loc="lower left")
        ax2.legend(loc="lower right")
        if judged:
            ax = axes[1]
            x = [r["wall_s"] for r in judged]
            ax.plot(x, [r["judge_mice_mean"] for r in judged], marker="o", label="agent (greedy)")
            ax.axhline(judged[-1]["best_static_mice_mean"], color="red", linestyle=":",
                       label=f"best static ({judged[-1]['best_static']})")  # fmt: skip
            ax.set_xlabel("training wall time, s (judging excluded)")
            ax.set_ylabel("mice (< 100 KB) mean FCT slowdown")
            ax.set_title("unseen episodes")
            ax.legend()
        plots.save(fig, self.out / "learning_curve.png")


def first_beat(out: Path) -> dict[str, str] | None:
    """The first judged checkpoint of a training run that beat the best static baseline."""
    curve = list(csv.DictReader((out / "learning_curve.csv").open()))
    return next((r for r in curve if r.get("beats_static") == "True"), None)
