"""statics.png and statics.csv: the demo's static grid in the emulation (run1/, run2/,
`ecntune demo`) beside the same settings in the simulator with cubic hosts
(`ecntune eval --transport cubic_ecn`): as they are modelled now (sim-cubic/) and as they
were, a fluid rate cut at a window's end (sim-cubic-fluid/, commit 292d764).
Run: python docs/results/demo-statics/plot.py"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
SETTINGS = ["secn0", "1a,1a,1", "2a,2a,1", "4a,4a,1", "8a,8a,1", "16a,16a,1", "32a,32a,1",
            "1a,8a,0.1", "2a,32a,0.2", "secn1"]  # fmt: skip


def emulation(run: str) -> dict[str, dict[str, float]]:
    """setting -> mice mean / p99 slowdown and goodput of one `ecntune demo` run."""
    out = {}
    for phase in json.loads((HERE / run / "summary.json").read_text()):
        mice = next(b for b in phase["buckets"] if b["bucket"] == "mice")
        setting = phase["phase"].removeprefix("static-").replace("_", ",")
        out[setting] = {"mice_mean": mice["slowdown_mean"], "mice_p99": mice["slowdown_p99"],
                        "goodput_mbps": phase["goodput_bps"] / 1e6}  # fmt: skip
    return out


def simulator(folder: str) -> dict[str, dict[str, float]]:
    rows = csv.DictReader((HERE / folder / "policies.csv").open())
    return {r["policy"].removeprefix("static:"): {k: float(r[k]) for k in
            ("mice_mean", "mice_p99", "goodput_mbps")} for r in rows}  # fmt: skip


def main() -> None:
    sources = {"emulation, run 1": emulation("run1"), "emulation, run 2": emulation("run2"),
               "simulator, cubic hosts (4 episodes)": simulator("sim-cubic"),
               "simulator before, fluid cubic hosts": simulator("sim-cubic-fluid")}  # fmt: skip
    with (HERE / "statics.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "source", "mice_mean", "mice_p99", "goodput_mbps"])
        for name, data in sources.items():
            for s in SETTINGS:
                w.writerow([s, name, *(round(data[s][k], 4) for k in
                                       ("mice_mean", "mice_p99", "goodput_mbps"))])  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharex=True)
    x = range(len(SETTINGS))
    for (name, data), marker in zip(sources.items(), "os^v", strict=True):
        for ax, key in zip(axes, ("mice_mean", "mice_p99", "goodput_mbps"), strict=True):
            values = [data[s][key] for s in SETTINGS]
            best = max(values) if key == "goodput_mbps" else min(values)
            ax.plot(x, [v / best for v in values], marker=marker, label=name)
    titles = ("mice mean FCT slowdown", "mice p99 FCT slowdown", "goodput")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(f"{title}\n(÷ each source's best static)")
        ax.set_xticks(list(x), SETTINGS, rotation=60, ha="right")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("star8-20ms, WebSearch 40 % + a 4:1 storm from halfway: static settings")
    fig.tight_layout()
    fig.savefig(HERE / "statics.png", dpi=100)


if __name__ == "__main__":
    main()
