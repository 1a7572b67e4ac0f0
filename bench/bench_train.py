"""Wall-clock training time until an agent beats the single best static setting (issue 14).

Each algorithm trains on a family's training mix (sim/scenario.py `<family>-train`) for at
most --episodes episodes, once per seed; every --every episodes its checkpoint is judged
on --judge-episodes episodes of every scenario of the family's held-out mix (judge seeds,
never the held-out evaluation seeds) against the single best static setting of SECN0-2
and the 36-setting grid on those same episodes (mice mean FCT slowdown, the flows both
completed), the judging time left out of the clock. The reference, that static setting,
is chosen once in the same run. One JSON object per line and seed; `wall_s_to_beat` is
null when the budget ran out first. Long: `--family star8` takes ~10 min per seed and
algorithm on 2 cores, `--family testbed24` (the papers' fabric) hours.

`--recipe deployed` trains each algorithm with the recipe of the seed docs/results deploys
(two settings, the incast features, γ 0.9, squared mice slowdowns paired with SECN0; ACC's
`g01l` adds a goodput weight of 0.01, whose seed beat the single best static on four blind
held-out mixes; PET's `q9l` does not); with `--family star8-20ms-cubic-fresh --episodes
1024 --every 128`, their own mixes. `--algo pet` times one algorithm alone.

`python bench/bench_train.py speed`: training throughput alone (train_speed_<algo>_<scenario>:
episodes per wall hour of agent/loops.py's jitted loop, `--envs` copies side by side
against one in the same run, after a compile round; a few minutes; `--scenario testbed24`
times that one alone).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ecntune.agent.ddqn import DdqnConfig
from ecntune.agent.evaluate import Judge
from ecntune.agent.ippo import IppoConfig
from ecntune.agent.rewards import MICE_SLOWDOWN_SQUARED
from ecntune.agent.train import first_beat, train
from ecntune.sim.scenario import LONG_RTT, MIXES, SimScenario

# Per recipe and algorithm: the agent's config fields and train()'s reward options. "grid":
# the papers' template at six levels, each algorithm's own reward; "deployed": the recipe of
# the seed docs/results deploys, ACC's `g01l` and PET's `q9l` (the same without the goodput
# term, which made PET a goodput seeker: docs/results "An eleventh mix").
DEPLOYED_FIELDS = {"settings": ("0a,0a,1", "8a,32a,1"), "features": "incast", "gamma": 0.9}
PAIRED_SQUARED = {"reward_kind": MICE_SLOWDOWN_SQUARED, "reward_baseline": "secn0"}
GRID_FIELDS = {"levels": 6, "pmax": (0.1, 0.5, 1.0), "gamma": 0.5}
RECIPES: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "grid": {"acc": (GRID_FIELDS, {}), "pet": (GRID_FIELDS, {})},
    "deployed": {
        "acc": (DEPLOYED_FIELDS, {**PAIRED_SQUARED, "goodput_weight": 0.01}),
        "pet": (DEPLOYED_FIELDS, PAIRED_SQUARED),
    },
}
SPEED_SCENARIOS = {
    "star8": SimScenario("star8", load=0.6, incast_degree=4, episode_s=2.0),
    "testbed24": SimScenario("testbed24", load=0.6, incast_degree=16),
    "testbed24rtt": SimScenario("testbed24", workload="datamining", load=0.8, incast_degree=4,
                                **LONG_RTT),
}  # fmt: skip


def speed(envs: int, names: list[str] | None = None, rounds: int = 2) -> None:
    """Episodes per wall hour with `envs` copies side by side against one, same run (on the
    scenarios named, every one by default: an accelerator's lease fits one or two)."""
    import jax

    from ecntune.agent import loops

    for name in names or SPEED_SCENARIOS:
        sc = SPEED_SCENARIOS[name]
        for algo, make, config in (("acc", loops.make_acc_loop, DdqnConfig(levels=6)),
                                   ("pet", loops.make_pet_loop, IppoConfig(levels=6))):  # fmt: skip
            env = sc.env(features=config.features, reward=algo)
            per_hour = {}
            for n in (1, envs):
                loop = make(env, config, n)
                carry, _ = loop.run(loop.init(jax.random.key(0)), rounds)  # compiles
                jax.block_until_ready(carry)
                t = time.perf_counter()
                carry, _ = loop.run(carry, rounds)
                jax.block_until_ready(carry)
                per_hour[n] = rounds * n / (time.perf_counter() - t) * 3600
            print(json.dumps({
                "bench": f"train_speed_{algo}_{name}", "scenario": sc.label,
                "intervals_per_episode": env.episode_intervals, "envs": envs,
                "episodes_per_hour": round(per_hour[envs]),
                "reference_episodes_per_hour_1_env": round(per_hour[1]),
                "ratio": round(per_hour[envs] / per_hour[1], 2),
                "platform": jax.devices()[0].device_kind,
            }), flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    families = sorted({m.rsplit("-", 1)[0] for m in MIXES})
    ap.add_argument("--family", default="star8", choices=families)
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--judge-episodes", type=int, default=2)
    ap.add_argument("--envs", type=int, default=8, help="episodes side by side per round")
    ap.add_argument("--recipe", choices=list(RECIPES), default="grid")
    ap.add_argument("--algo", action="append", choices=["acc", "pet"],
                    help="time this algorithm only (repeatable; default: both)")  # fmt: skip
    ap.add_argument(
        "--scenario",
        action="append",
        choices=list(SPEED_SCENARIOS),
        help="speed lines for this scenario only (repeatable; default: all)",
    )
    ap.add_argument("mode", nargs="?", choices=["all", "speed"], default="all",
                    help="speed: the throughput lines only")  # fmt: skip
    args = ap.parse_args()
    speed(args.envs, args.scenario)
    if args.mode == "speed":
        return
    train_mix, held_out = MIXES[f"{args.family}-train"], MIXES[f"{args.family}-heldout"]
    judge = Judge(held_out, episodes=args.judge_episodes)
    for algo in args.algo or ["acc", "pet"]:
        fields, reward = RECIPES[args.recipe][algo]
        for seed in range(args.seeds):
            config = DdqnConfig(**fields) if algo == "acc" else IppoConfig(**fields)
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                train(algo, train_mix, args.episodes, out, seed, config, args.every, False, judge,
                      envs=args.envs, **reward)  # fmt: skip
                beat = first_beat(out)
                last = list(csv.DictReader((out / "learning_curve.csv").open()))[-1]
            print(json.dumps({
                "bench": f"train_time_to_beat_best_static_{algo}", "family": args.family,
                "recipe": args.recipe,
                "seed": seed, "wall_s_to_beat": float(beat["wall_s"]) if beat else None,
                "episodes_to_beat": int(beat["episode"]) + 1 if beat else None,
                "budget_episodes": args.episodes, "trained_wall_s": float(last["wall_s"]),
                "agent_mice_mean": float(last["judge_mice_mean"]),
                "reference": last["best_static"],
                "reference_mice_mean": float(last["best_static_mice_mean"]),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
