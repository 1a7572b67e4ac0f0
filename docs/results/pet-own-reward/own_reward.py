"""Does PET optimise its own training reward? Each policy's return on that reward (squared mice
slowdowns, paired with SECN0 on the same flows, no goodput weight: agent/rewards.py) over a
training mix, every policy greedy on the same episodes, paired with the first policy named.
If ACC's policy earns more of PET's reward than PET's own policies do, PET's optimiser falls
short of its objective; if PET's policies earn more but lose the judge, the reward is wrong.

    python docs/results/pet-own-reward/own_reward.py star8-20ms-cubic-fresh-train 16 \\
        zero=static:0a,0a,1 high=static:8a,32a,1 acc=acc:CKPT pet=pet:CKPT ... > returns.csv

Every agent must share one listed template and the `incast` features (the deployed recipes'),
and a static must be one of the template's settings. Progress goes to stderr.
"""

from __future__ import annotations

import csv
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from ecntune.agent import loops
from ecntune.agent.policy import load_policy
from ecntune.agent.rewards import MICE_SLOWDOWN_SQUARED
from ecntune.sim.scenario import MIXES


def policies(specs: list[str]) -> tuple[list[str], list, object]:
    """(names, one act(obs) per policy, the shared template)."""
    names, agents, statics = [], {}, {}
    for spec in specs:
        name, _, policy = spec.partition("=")
        names.append(name)
        if policy.startswith("static:"):
            statics[name] = policy.removeprefix("static:")
        else:
            agents[name] = load_policy(policy)
    configs = [a.config for a in agents.values()]
    template = configs[0].template
    assert all(c.settings == configs[0].settings and c.features == "incast" for c in configs)
    acts = []
    for name in names:
        if name in statics:
            action = configs[0].settings.index(statics[name])
            acts.append(lambda obs, a=action: jnp.full(obs.shape[:-1], a, jnp.int32))
        else:
            agent = agents[name]
            greedy = (loops.greedy_pet if agent.name.startswith("pet") else loops.greedy_acc)(
                agent.config
            )
            acts.append(lambda obs, g=greedy, p=agent.params: g(p, obs).astype(jnp.int32))
    return names, acts, template


def main(mix: str, episodes: int, specs: list[str]) -> None:
    names, acts, template = policies(specs)
    out = csv.writer(sys.stdout)
    out.writerow(["scenario", "policy", "return", "vs_first", "ci95_low", "ci95_high",
                  "high_share"])  # fmt: skip
    pooled = []
    for sc in MIXES[mix]:
        env = sc.env("incast", MICE_SLOWDOWN_SQUARED, "secn0")
        link = env.link_bps()

        def rollout(i: jax.Array, key: jax.Array, env=env, link=link):
            def step(carry, _):
                obs, state = carry
                action = jax.lax.switch(i, acts, obs)
                obs, state, reward, _, info = env.step(state, template.thresholds(action, link))
                busy = info["telemetry"].tx_bytes > 0
                return (obs, state), (jnp.sum(reward), jnp.sum((action > 0) & busy),
                                      jnp.sum(busy))  # fmt: skip

            _, (r, high, busy) = jax.lax.scan(step, env.reset(key), None, env.episode_intervals)
            return jnp.sum(r), jnp.sum(high) / jnp.maximum(jnp.sum(busy), 1)

        start = time.time()
        keys = jax.random.split(jax.random.key(12345), episodes)
        every = jax.jit(jax.vmap(jax.vmap(rollout, (None, 0)), (0, None)))
        ret, high = (np.asarray(x) for x in every(jnp.arange(len(names)), keys))
        pooled.append(ret)
        print(f"{sc.label}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
        for name, r, h in zip(names, ret, high, strict=True):
            out.writerow([sc.label, name, *_paired(r, ret[0]), f"{h.mean():.3f}"])
    ret = np.concatenate(pooled, axis=1)
    for name, r in zip(names, ret, strict=True):
        out.writerow(["the whole mix", name, *_paired(r, ret[0]), ""])


def _paired(r: np.ndarray, first: np.ndarray) -> list[str]:
    """Mean return, its mean paired difference with the first policy, a normal 95 % CI."""
    d = r - first
    half = 1.96 * d.std(ddof=1) / np.sqrt(d.size)
    return [f"{x:.4f}" for x in (r.mean(), d.mean(), d.mean() - half, d.mean() + half)]


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
