"""Several evaluations in one table: `ecntune eval-table DIR...`; and which training seed to
deploy, judged on one of them: `ecntune pick-seed DIR --arm NAME`.

A mix too costly for one run is judged a part at a time (`ecntune eval --part`), each part
into its own folder; readers want the verdicts side by side (docs/results, "The paper's
unseen cases"). This reads only what each folder's evaluation wrote (report.md names the
single best static and each agent's frozen setting; comparisons.csv and policies.csv hold
the numbers), so the table regenerates from committed folders without rerunning anything,
and each verdict is recomputed by the report's own rule (`report.verdict`).

An operator trains several seeds and deploys one; choosing it on the held-out mix would
make that mix no longer held out. `pick_seed` chooses on another evaluation (the training
mix's own episodes, docs/results "Which seed an operator would deploy"): the seed whose
worse relative difference against that folder's single best static, mice mean or mice
p99, is lowest, so a seed that wins the mean by losing the tail is not chosen.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ecntune.agent.evaluate import Comparison
from ecntune.agent.report import verdict

SINGLE_BEST = re.compile(r"^Single best static over the mix[^`]*`([^`]+)`", re.M)
FROZEN_SECTION = re.compile(r"^## Does changing the setting help\?.*?(?=^## |\Z)", re.M | re.S)
FROZEN_ROW = re.compile(r"^\| (\S+) \| `(static:[^`]+)` \|", re.M)
NO_WIN = "does NOT beat the single best static"


@dataclass(frozen=True)
class Judged:
    """One evaluation folder, as its report judged it."""

    folder: Path
    scenarios: list[str]
    single_best: str
    mice_rel: dict[str, float]  # agent -> mice mean slowdown vs the single best static
    p99_rel: dict[str, float]  # agent -> mice p99 FCT vs the single best static
    verdicts: dict[str, str]  # agent -> report.verdict against the single best static
    vs_frozen: dict[str, float]  # agent -> mice mean slowdown vs its own frozen setting
    all_mean: dict[str, float]  # agent -> all-flow mean slowdown (mean over scenarios)

    def families(self) -> list[str]:
        """Agent kinds in order of appearance."""
        return list(dict.fromkeys(map(family_of, self.mice_rel)))

    def of(self, family: str) -> list[str]:
        return [a for a in self.mice_rel if family_of(a) == family]


def family_of(agent: str) -> str:
    """`graphcc:s0` -> `graphcc`: the kind of agent, as `ecntune eval` names it."""
    return agent.partition(":")[0]


def read(folder: Path) -> Judged:
    """One `ecntune eval --out` folder; a clear error if it is not one."""
    report = folder / "report.md"
    if not report.is_file():
        raise FileNotFoundError(f"{folder}: no report.md (not an `ecntune eval` output folder)")
    text = report.read_text()
    best = SINGLE_BEST.search(text)
    if best is None:
        raise ValueError(f"{report}: no 'Single best static over the mix' line")
    single_best = best.group(1)
    section = FROZEN_SECTION.search(text)
    frozen = dict(FROZEN_ROW.findall(section.group(0))) if section else {}
    comparisons: dict[tuple[str, str], dict[str, Comparison]] = {}
    with (folder / "comparisons.csv").open() as f:
        for row in csv.DictReader(f):
            if row["scope"] != "mix":
                continue
            c = Comparison(row["metric"], *(float(row[k]) for k in Comparison._fields[1:]))
            comparisons.setdefault((row["agent"], row["baseline"]), {})[c.metric] = c
    agents = list(dict.fromkeys(a for a, b in comparisons if b == single_best))
    all_mean: dict[str, list[float]] = {}
    with (folder / "policies.csv").open() as f:
        policies = list(csv.DictReader(f))
    scenarios = list(dict.fromkeys(row["scenario"] for row in policies))
    for row in policies:
        if row["policy"] in agents:
            all_mean.setdefault(row["policy"], []).append(float(row["all_mean"]))
    return Judged(
        folder=folder,
        scenarios=scenarios,
        single_best=single_best,
        mice_rel={a: comparisons[a, single_best]["mice_mean"].rel for a in agents},
        p99_rel={a: comparisons[a, single_best]["mice_p99_fct"].rel for a in agents},
        verdicts={a: verdict(list(comparisons[a, single_best].values())) for a in agents},
        vs_frozen={
            a: comparisons[a, frozen[a]]["mice_mean"].rel
            for a in agents
            if (a, frozen.get(a, "")) in comparisons
        },
        all_mean={a: float(np.mean(v)) for a, v in all_mean.items()},
    )


def pick_seed(j: Judged, arm: str) -> tuple[str, dict[str, float]]:
    """The agent of `arm` (its seeds are named arm + digits, as `--checkpoint q90=...` makes
    `acc:q90`) with the lowest worse-of-two (mice mean, mice p99) against the single best
    static, and every seed's worse-of-two."""
    seeds = [a for a in j.mice_rel if re.fullmatch(re.escape(arm) + r"\d+", a)]
    if not seeds:
        named = ", ".join(j.mice_rel)
        raise ValueError(f"{j.folder}: no agent named {arm} + a seed number (it has {named})")
    worse = {a: max(j.mice_rel[a], j.p99_rel[a]) for a in seeds}
    return min(worse, key=worse.__getitem__), worse


def signed(x: float) -> str:
    """A relative difference in % as docs/results writes it (a true minus sign)."""
    return f"{100 * x:+.1f}".replace("-", "−")


def _range(values: Sequence[float]) -> str:
    return f"{signed(min(values))} … {signed(max(values))} %" if values else "—"


def table(judged: Sequence[Judged]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per folder the single best static, each family's seed range against
    it, every verdict other than 'does NOT beat', the first family's all-flow mean against
    the second's (means over seeds), and how far each family's seeds are from their frozen
    selves (a family within ~0 % is one static setting in disguise)."""
    families = list(dict.fromkeys(f for j in judged for f in j.families()))
    header = ["folder", "scenario", "single best static"]
    header += [f"{f} seeds, mice mean vs it" for f in families]
    header += ["verdicts other than does NOT beat"]
    if len(families) == 2:
        header += [f"{families[0]} vs {families[1]}, all-flow mean slowdown (seed means)"]
    header += [f"{f} vs its frozen static, mice mean (largest gap)" for f in families]
    rows = []
    for j in judged:
        row = [j.folder.name, "; ".join(j.scenarios), f"`{j.single_best}`"]
        row += [_range([j.mice_rel[a] for a in j.of(f)]) for f in families]
        wins = [f'{a}: "{v}"' for a, v in j.verdicts.items() if v != NO_WIN]
        row += ["; ".join(wins) or "none"]
        if len(families) == 2:
            means = [[j.all_mean[a] for a in j.of(f) if a in j.all_mean] for f in families]
            ratio = np.mean(means[0]) / np.mean(means[1]) - 1 if all(means) else None
            row += [f"{signed(ratio)} %" if ratio is not None else "—"]
        for f in families:
            gaps = [abs(j.vs_frozen[a]) for a in j.of(f) if a in j.vs_frozen]
            row += [f"within {100 * max(gaps):.1f} %" if gaps else "—"]
        rows.append(row)
    return header, rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def write_csv(path: Path, judged: Sequence[Judged]) -> None:
    """One row per (folder, agent): what the markdown table summarises, unrounded."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["folder", "single_best", "agent", "mice_mean_rel", "verdict",
                    "mice_mean_rel_vs_frozen", "all_mean"])  # fmt: skip
        for j in judged:
            for a in j.mice_rel:
                w.writerow([j.folder.name, j.single_best, a, j.mice_rel[a], j.verdicts[a],
                            j.vs_frozen.get(a, ""), j.all_mean.get(a, "")])  # fmt: skip
