"""`ecntune train`: ACC and PET agents trained offline in the JAX simulator.

    ecntune train --algo acc --scenario star8 --workload websearch --load 0.6 --incast 4
    ecntune train --algo pet --scenario star8 --episodes 200

Training (ACC §4): every switch's agent acts ε-greedily on all of its ports each telemetry
interval, stores the per-port transitions in its local replay, shares them with the
others through the global replay, and takes one double-DQN step per interval. PET (§4):
each switch's independent PPO samples its ports' actions for a whole episode, then takes
its clipped-surrogate epochs on it. Episodes are independent traffic samples (new seed
each, below sim/scenario.py's TRAIN_SEED_LIMIT). The run writes the checkpoint (atomic,
also every `--save-every` episodes), learning_curve.csv and learning_curve.png; with a
judge (agent/evaluate.py `Judge`) every saved checkpoint is scored on fixed unseen
episodes against the single best static setting of the grid.
"""

from __future__ import annotations

import csv
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ecntune.agent.evaluate import Judge
from ecntune.sim.scenario import SimScenario


def _ports_of_switches(env: Any) -> list[np.ndarray]:
    return [row[row >= 0] for row in np.asarray(env.fabric.switch_ports)]


def _scenarios(scenario: SimScenario | Sequence[SimScenario]) -> list[SimScenario]:
    """One scenario or a training mix (episode i runs scenario i mod n): one fabric, so every
    switch keeps its agent across the mix."""
    scenarios = [scenario] if isinstance(scenario, SimScenario) else list(scenario)
    if not scenarios:
        raise ValueError("no scenario to train on")
    if len({sc.topology for sc in scenarios}) > 1:
        raise ValueError("a training mix must keep one topology (one agent per switch)")
    return scenarios


def train_acc(
    scenario: SimScenario | Sequence[SimScenario],
    episodes: int,
    out: Path,
    seed: int = 0,
    config: Any = None,
    save_every: int = 10,
    progress: bool = True,
    judge: Judge | None = None,
) -> Path:
    """Train one ACC agent per switch; returns the checkpoint path."""
    import jax
    import jax.numpy as jnp
    from tqdm import tqdm

    from ecntune.agent import ddqn

    config = config or ddqn.DdqnConfig()
    scenarios = _scenarios(scenario)
    envs = [sc.env() for sc in scenarios]
    env = envs[0]
    switches = _ports_of_switches(env)
    key = jax.random.key(seed)
    key, k_init = jax.random.split(key)
    graph, params = ddqn.build_network(config, k_init)
    learners = [ddqn.init_learner(config, params) for _ in switches]
    template = config.template
    link_bps = env.link_bps()
    select = jax.jit(lambda p, o, k, e: ddqn.select_actions(graph, p, o, k, e))
    learn = jax.jit(lambda lr, b: ddqn.update(config, graph, lr, b))

    obs, _ = env.reset(jax.random.key(0))
    example = ddqn.Transition(obs[0], jnp.int32(0), jnp.float32(0), obs[0], jnp.float32(0))
    replay = ddqn.Replay(config, len(switches), example)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "acc.msgpack"
    log = TrainingLog(out, f"acc:{checkpoint}", scenarios, episodes, save_every, judge)
    step, recent = 0, []
    bar = tqdm(range(episodes), desc="train acc", unit="ep", disable=not progress)
    for episode in bar:
        env = envs[episode % len(envs)]
        key, k_reset = jax.random.split(key)
        obs, state = env.reset(k_reset)
        rewards, losses, done = [], [], False
        while not done:
            key, k_act, k_learn = jax.random.split(key, 3)
            eps = ddqn.epsilon(config, step)
            actions = jnp.zeros(env.n_ports, jnp.int32)
            for s, ports in enumerate(switches):
                chosen = select(learners[s].params, obs[ports], jax.random.fold_in(k_act, s), eps)
                actions = actions.at[ports].set(chosen)
            thresholds = template.thresholds(actions, link_bps)
            next_obs, state, reward, done, info = env.step(state, thresholds)
            busy = np.asarray(info["telemetry"].tx_bytes) > 0
            for s, ports in enumerate(switches):
                # ACC §4.3: idle queues skip inference, so they teach nothing either
                active = ports[busy[ports]]
                if active.size == 0:
                    continue
                batch = ddqn.Transition(
                    obs[active], actions[active], reward[active], next_obs[active],
                    jnp.zeros(len(active)),  # time limits truncate, they do not terminate
                )  # fmt: skip
                replay.add(s, batch)
                recent.append(batch)
            if step % config.exchange_every == 0:
                replay.exchange(recent)
                recent = []
            for s in range(len(switches)):
                if replay.ready(s):
                    sample = replay.sample(s, jax.random.fold_in(k_learn, s))
                    learners[s], loss = learn(learners[s], sample)
                    losses.append(float(loss))
            if busy.any():
                rewards.append(float(jnp.mean(reward[busy])))
            obs, done, step = next_obs, bool(done), step + 1
        row = {
            "episode": episode,
            "steps": step,
            "epsilon": float(ddqn.epsilon(config, step)),
            "reward": float(np.mean(rewards)) if rewards else float("nan"),
            "loss": float(np.mean(losses)) if losses else float("nan"),
        }
        # one network serves every switch of the fabric it was trained for: the first
        # switch's (leaf-spines train them alike through the global replay)
        log.end_episode(row, lambda meta: ddqn.save(checkpoint, config, learners[0].params, meta))
        bar.set_postfix(reward=f"{row['reward']:.3f}", eps=f"{row['epsilon']:.2f}")
    log.write("ACC (double DQN)", "epsilon")
    return checkpoint


def train_pet(
    scenario: SimScenario | Sequence[SimScenario],
    episodes: int,
    out: Path,
    seed: int = 0,
    config: Any = None,
    save_every: int = 10,
    progress: bool = True,
    judge: Judge | None = None,
) -> Path:
    """Train one PET agent per switch (independent PPO); returns the checkpoint path."""
    import jax
    import jax.numpy as jnp
    from tqdm import tqdm

    from ecntune.agent import ippo

    config = config or ippo.IppoConfig()
    scenarios = _scenarios(scenario)
    envs = [sc.env(features=config.features, reward="pet") for sc in scenarios]
    env = envs[0]
    switches = _ports_of_switches(env)
    key = jax.random.key(seed)
    key, k_init = jax.random.split(key)
    nets, params = ippo.build_networks(config, k_init)
    learners = [ippo.init_learner(config, params) for _ in switches]
    template, link_bps = config.template, env.link_bps()

    @jax.jit
    def sample(p: ippo.Params, obs: jax.Array, k: jax.Array):
        pi = ippo.policy(nets, p, obs)
        action = pi.sample(seed=k)
        return action, pi.log_prob(action), ippo.value(nets, p, obs), pi.entropy().mean()

    learn = jax.jit(lambda lr, b, k: ippo.update(config, nets, lr, b, k))
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "pet.msgpack"
    log = TrainingLog(out, f"pet:{checkpoint}", scenarios, episodes, save_every, judge)
    bar = tqdm(range(episodes), desc="train pet", unit="ep", disable=not progress)
    for episode in bar:
        env = envs[episode % len(envs)]
        key, k_reset = jax.random.split(key)
        obs, state = env.reset(k_reset)
        rollout: list[list[tuple]] = [[] for _ in switches]
        rewards, entropies, done = [], [], False
        while not done:
            key, k_act = jax.random.split(key)
            actions = jnp.zeros(env.n_ports, jnp.int32)
            for s, ports in enumerate(switches):
                a, lp, v, ent = sample(learners[s].params, obs[ports], jax.random.fold_in(k_act, s))
                actions = actions.at[ports].set(a)
                rollout[s].append((obs[ports], a, lp, v))
                entropies.append(float(ent))
            thresholds = template.thresholds(actions, link_bps)
            obs, state, reward, done, info = env.step(state, thresholds)
            for s, ports in enumerate(switches):
                rollout[s][-1] += (reward[ports],)
            busy = np.asarray(info["telemetry"].tx_bytes) > 0
            if busy.any():
                rewards.append(float(jnp.mean(reward[busy])))
            done = bool(done)
        losses = []
        for s, ports in enumerate(switches):
            o, a, lp, v, r = (jnp.stack(x) for x in zip(*rollout[s], strict=True))
            last = ippo.value(nets, learners[s].params, obs[ports])
            adv, target = ippo.gae(r, v, jnp.zeros_like(r), last, config.gamma, config.gae_lambda)
            batch = ippo.Batch(*(x.reshape(-1, *x.shape[2:]) for x in (o, a, lp, adv, target)))
            key, k_learn = jax.random.split(key)
            learners[s], info = learn(learners[s], batch, k_learn)
            losses.append(float(info["actor"] + info["critic"]))
        row = {
            "episode": episode,
            "entropy": float(np.mean(entropies)),
            "reward": float(np.mean(rewards)) if rewards else float("nan"),
            "loss": float(np.mean(losses)),
        }
        log.end_episode(row, lambda meta: ippo.save(checkpoint, config, learners[0].params, meta))
        bar.set_postfix(reward=f"{row['reward']:.3f}", entropy=f"{row['entropy']:.2f}")
    log.write("PET (independent PPO)", "entropy")
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

    def end_episode(self, row: dict[str, Any], save: Any) -> None:
        """Record the episode; `save(meta)` writes the checkpoint when one is due."""
        row["wall_s"] = round(time.monotonic() - self.start - self.judging, 2)
        done = row["episode"] + 1
        if done % self.save_every == 0 or done == self.episodes:
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
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

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
        fig.tight_layout()
        fig.savefig(self.out / "learning_curve.png", dpi=120)
        plt.close(fig)


def first_beat(out: Path) -> dict[str, str] | None:
    """The first judged checkpoint of a training run that beat the best static baseline."""
    curve = list(csv.DictReader((out / "learning_curve.csv").open()))
    return next((r for r in curve if r.get("beats_static") == "True"), None)
