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
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path

from ecntune.agent.ddqn import DdqnConfig
from ecntune.agent.evaluate import Judge
from ecntune.agent.ippo import IppoConfig
from ecntune.agent.train import first_beat, train_acc, train_pet
from ecntune.sim.scenario import MIXES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="star8", choices=["star8", "testbed24"])
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--judge-episodes", type=int, default=2)
    args = ap.parse_args()
    train_mix, held_out = MIXES[f"{args.family}-train"], MIXES[f"{args.family}-heldout"]
    judge = Judge(held_out, episodes=args.judge_episodes)
    for algo, train in (("acc", train_acc), ("pet", train_pet)):
        for seed in range(args.seeds):
            template = {"levels": 6, "pmax": (0.1, 0.5, 1.0), "gamma": 0.5}
            config = DdqnConfig(**template) if algo == "acc" else IppoConfig(**template)
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                train(train_mix, args.episodes, out, seed, config, args.every, False, judge)
                beat = first_beat(out)
                last = list(csv.DictReader((out / "learning_curve.csv").open()))[-1]
            print(json.dumps({
                "bench": f"train_time_to_beat_best_static_{algo}", "family": args.family,
                "seed": seed, "wall_s_to_beat": float(beat["wall_s"]) if beat else None,
                "episodes_to_beat": int(beat["episode"]) + 1 if beat else None,
                "budget_episodes": args.episodes, "trained_wall_s": float(last["wall_s"]),
                "agent_mice_mean": float(last["judge_mice_mean"]),
                "reference": last["best_static"],
                "reference_mice_mean": float(last["best_static_mice_mean"]),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
