"""Wall-clock training time until an agent beats the best static baseline (issue: ACC/PET
acceptance scenario): the 24-host leaf-spine, WebSearch 60 % + 16:1 incasts.

Each algorithm trains for at most --episodes episodes; every --every episodes its
checkpoint is judged on 2 unseen episodes against the better of SECN1 and SECN2 (mice
mean FCT slowdown, the same flows), the judging time left out of the clock. The
reference is that static baseline, judged in the same run. One JSON object per line;
`wall_s_to_beat` is null when the budget ran out first. Long: ~17 min per algorithm on
2 cores at the defaults (`--episodes 10` for a quick look).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path

from ecntune.agent.ddqn import DdqnConfig
from ecntune.agent.ippo import IppoConfig
from ecntune.agent.train import Judge, SimScenario, first_beat, train_acc, train_pet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--scenario", default="testbed24")
    args = ap.parse_args()
    scenario = SimScenario(args.scenario, incast=16)
    judge = Judge(scenario, episodes=2)
    for algo, train in (("acc", train_acc), ("pet", train_pet)):
        template = {"levels": 6, "pmax": (0.1, 0.5, 1.0), "gamma": 0.5}
        config = DdqnConfig(**template) if algo == "acc" else IppoConfig(**template)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            train(scenario, args.episodes, out, 0, config, args.every, False, judge)
            beat = first_beat(out)
            last = list(csv.DictReader((out / "learning_curve.csv").open()))[-1]
        print(json.dumps({
            "bench": f"train_time_to_beat_static_{algo}", "scenario": args.scenario,
            "wall_s_to_beat": float(beat["wall_s"]) if beat else None,
            "episodes_to_beat": int(beat["episode"]) + 1 if beat else None,
            "budget_episodes": args.episodes, "trained_wall_s": float(last["wall_s"]),
            "agent_mice_mean": float(last["judge_mice_mean"]),
            "reference": last["best_static"],
            "reference_mice_mean": float(last["best_static_mice_mean"]),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
