"""Does the gradient clip PET's actor and critic share starve the actor where the stakes are
high? In one training round per scenario (8 episodes, actions sampled: the round training
collects, agent/loops.py collect_pet_round), the global norms of the actor's and the
critic's gradients of ippo.ppo_loss on four minibatches, and the factor
clip_by_global_norm(0.5) over both scales the actor's step by, beside the factor a clip of
the actor's alone would.

    python docs/results/pet-own-reward/grad_norms.py star8-20ms-cubic-fresh-train \\
        CKPT ... > grad_norms.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ecntune.agent import ippo, loops
from ecntune.agent.rewards import MICE_SLOWDOWN_SQUARED
from ecntune.sim.scenario import MIXES

ENVS, MINIBATCHES = 8, 4


def round_norms(env, agent: ippo.IppoPolicy, key: jax.Array) -> tuple[np.ndarray, float]:
    """((minibatch, [actor, critic]) gradient norms, the round's return per episode)."""
    config, params, nets = agent.config, agent.params, agent.nets

    @jax.jit
    def run(key: jax.Array):
        k_reset, k_act, k_perm = jax.random.split(key, 3)
        sampled = loops.collect_pet_round(env, config, nets, params, k_reset, k_act, ENVS)
        n = sampled.busy.size
        size = n // (config.minibatches * ENVS)  # the loop's minibatch size
        order = jax.random.permutation(k_perm, n)
        norms = []
        for m in range(MINIBATCHES):
            mb = jax.tree.map(lambda x, m=m: x[order[m * size : (m + 1) * size]], sampled.batch)
            grads, _ = jax.grad(ippo.ppo_loss, has_aux=True)(
                params, nets, mb, config.clip, config.entropy
            )
            norms.append(jnp.stack([optax.global_norm(grads.actor),
                                    optax.global_norm(grads.critic)]))  # fmt: skip
        return jnp.stack(norms), jnp.sum(sampled.reward * sampled.busy) / ENVS

    norms, ret = run(key)
    return np.asarray(norms), float(ret)


def main(mix: str, checkpoints: list[str]) -> None:
    out = csv.writer(sys.stdout)
    out.writerow(["checkpoint", "scenario", "actor_norm", "critic_norm", "actor_step_shared_clip",
                  "actor_step_own_clip", "return_per_episode"])  # fmt: skip
    for path in checkpoints:
        agent = ippo.load(Path(path))
        for sc in MIXES[mix]:
            env = sc.env(agent.config.features, MICE_SLOWDOWN_SQUARED, "secn0")
            norms, ret = round_norms(env, agent, jax.random.key(3))
            shared = np.minimum(1.0, 0.5 / np.sqrt((norms**2).sum(axis=1))).mean()
            own = np.minimum(1.0, 0.5 / norms[:, 0]).mean()
            out.writerow([Path(path).name, sc.label, f"{norms[:, 0].mean():.3f}",
                          f"{norms[:, 1].mean():.3f}", f"{shared:.3f}", f"{own:.3f}",
                          f"{ret:.3f}"])  # fmt: skip
            print(f"{Path(path).name} {sc.label}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
