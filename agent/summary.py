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

One agent deployed on several held-out mixes gets a verdict per mix; each verdict is a
coin with a few hundred mice behind its p99. `pool` (`ecntune eval-table --pool AGENT`)
combines the mixes' paired differences against each mix's own single best static into one
estimate: a random-effects meta-analysis (DerSimonian–Laird τ², Hartung–Knapp–Sidik–Jonkman
interval, which holds its coverage with few mixes) on log ratios, each mix's standard error
read off its bootstrap CI. `forest` draws it.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ecntune.agent.evaluate import Comparison
from ecntune.agent.report import verdict
from ecntune.plots import pyplot, save

SINGLE_BEST = re.compile(r"^Single best static over the mix[^`]*`([^`]+)`", re.M)
FROZEN_SECTION = re.compile(r"^## Does changing the setting help\?.*?(?=^## |\Z)", re.M | re.S)
FROZEN_ROW = re.compile(r"^\| (\S+) \| `(static:[^`]+)` \|", re.M)
NO_WIN = "does NOT beat the single best static"
POOLED_METRICS = {  # metric -> what a reader calls it (comparisons.csv's names)
    "mice_mean": "mice mean slowdown",
    "mice_p99_fct": "mice p99 FCT",
    "all_mean": "all-flow mean slowdown",
    "goodput": "goodput",
}


@dataclass(frozen=True)
class Judged:
    """One evaluation folder, as its report judged it."""

    folder: Path
    scenarios: list[str]
    single_best: str
    vs_best: dict[str, dict[str, Comparison]]  # agent -> metric -> against the single best
    vs_frozen: dict[str, float]  # agent -> mice mean slowdown vs its own frozen setting
    all_mean: dict[str, float]  # agent -> all-flow mean slowdown (mean over scenarios)

    @functools.cached_property
    def mice_rel(self) -> dict[str, float]:
        """agent -> mice mean slowdown against the single best static."""
        return {a: c["mice_mean"].rel for a, c in self.vs_best.items()}

    @functools.cached_property
    def p99_rel(self) -> dict[str, float]:
        """agent -> mice p99 FCT against the single best static."""
        return {a: c["mice_p99_fct"].rel for a, c in self.vs_best.items()}

    @functools.cached_property
    def verdicts(self) -> dict[str, str]:
        """agent -> report.verdict against the single best static."""
        return {a: verdict(list(c.values())) for a, c in self.vs_best.items()}

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
        vs_best={a: comparisons[a, single_best] for a in agents},
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


@dataclass(frozen=True)
class Pooled:
    """One agent's relative difference on one metric over several mixes, each against its
    own single best static: the pooled estimate, its 95 % interval, and τ, how much the
    true difference varies between mixes (as a log ratio)."""

    agent: str
    metric: str
    rel: float
    lo: float
    hi: float
    tau: float
    mixes: int


def pool(agent: str, metric: str, per_mix: Sequence[Comparison]) -> Pooled:
    """Random effects on log(1 + rel): DerSimonian–Laird τ², then the Hartung–Knapp–
    Sidik–Jonkman interval (a t with k − 1 degrees of freedom on a variance rescaled by the
    mixes' own scatter), so a handful of mixes that disagree give a wide interval instead of
    the over-confident one a fixed-effect pool would; never narrower than the random-effects
    variance itself (mixes that happen to agree closely do not shrink it to nothing)."""
    from scipy.stats import t as student_t

    k = len(per_mix)
    if k < 2:
        raise ValueError(f"{agent}: pooling needs two mixes or more, it ran on {k}")
    y = np.log1p([c.rel for c in per_mix])
    se = (np.log1p([c.hi for c in per_mix]) - np.log1p([c.lo for c in per_mix])) / (2 * 1.96)
    w = 1 / np.maximum(se, 1e-12) ** 2
    fixed = np.sum(w * y) / np.sum(w)
    q = np.sum(w * (y - fixed) ** 2)
    tau2 = max(0.0, (q - (k - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    w_star = 1 / (se**2 + tau2)
    mu = np.sum(w_star * y) / np.sum(w_star)
    scatter = np.sum(w_star * (y - mu) ** 2) / (k - 1)
    half = student_t.ppf(0.975, k - 1) * np.sqrt(max(scatter, 1.0) / np.sum(w_star))
    return Pooled(agent, metric, *np.expm1([mu, mu - half, mu + half]).tolist(),
                  tau=float(np.sqrt(tau2)), mixes=k)  # fmt: skip


def pooled(judged: Sequence[Judged], agents: Sequence[str]) -> list[Pooled]:
    """Every metric of POOLED_METRICS, per agent, over the folders it ran in."""
    out = []
    for agent in agents:
        runs = [j.vs_best[agent] for j in judged if agent in j.vs_best]
        out += [pool(agent, m, [r[m] for r in runs]) for m in POOLED_METRICS]
    return out


def pooled_markdown(pools: Sequence[Pooled]) -> str:
    """One row per agent: its pooled difference and interval on every metric, as docs/results
    quotes them."""
    header = ["agent", "mixes", *POOLED_METRICS.values()]
    rows = []
    for agent in dict.fromkeys(p.agent for p in pools):
        mine = {p.metric: p for p in pools if p.agent == agent}
        cells = [f"{signed(p.rel)} % [{signed(p.lo)}, {signed(p.hi)}]" for p in mine.values()]
        rows.append([agent, str(next(iter(mine.values())).mixes), *cells])
    return markdown(header, rows)


def write_pooled_csv(path: Path, pools: Sequence[Pooled]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["agent", "metric", "mixes", "rel", "lo", "hi", "tau"])
        for p in pools:
            w.writerow([p.agent, p.metric, p.mixes, p.rel, p.lo, p.hi, p.tau])


def forest(path: Path, judged: Sequence[Judged], pools: Sequence[Pooled]) -> None:
    """One panel per metric: each mix's difference and CI against its single best static,
    a row per (agent, mix), the pooled estimate as a diamond under each agent's mixes."""
    plt = pyplot()
    agents = list(dict.fromkeys(p.agent for p in pools))
    words = [j.folder.name.split("-") for j in judged]
    same = 0  # the words every folder's name starts with ("star8-20ms-cubic-") say nothing
    while len(words) > 1 and all(len(w) > same + 1 and w[same] == words[0][same] for w in words):
        same += 1
    short = {j.folder: "-".join(w[same:]) for j, w in zip(judged, words, strict=True)}
    rows: list[tuple[str, int, Judged | None]] = []  # label, agent's colour, mix (None: pool)
    for i, agent in enumerate(agents):
        mixes = [j for j in judged if agent in j.vs_best]
        rows += [(f"{agent} {short[j.folder]}", i, j) for j in mixes]
        rows.append((f"{agent} pooled ({len(mixes)} mixes)", i, None))
    n = len(POOLED_METRICS)
    fig, axes = plt.subplots(1, n, sharey=True, figsize=(3.2 * n, 0.9 + 0.26 * len(rows)))
    for ax, (metric, title) in zip(axes, POOLED_METRICS.items(), strict=True):
        for y, (_, i, j) in enumerate(rows):
            agent = agents[i]
            if j is not None:
                c = j.vs_best[agent][metric]
                err = [[100 * (c.rel - c.lo)], [100 * (c.hi - c.rel)]]
                ax.errorbar(100 * c.rel, -y, xerr=err, fmt="o", color=f"C{i}", ms=3)
                continue
            p = next(p for p in pools if p.agent == agent and p.metric == metric)
            xs = [100 * p.lo, 100 * p.rel, 100 * p.hi, 100 * p.rel]
            ax.fill(xs, [-y, -y + 0.35, -y, -y - 0.35], color=f"C{i}")
        ax.axvline(0, color="grey", lw=0.8)
        if metric == "goodput":
            ax.axvspan(-2, 2, color="grey", alpha=0.12, lw=0)  # the acceptance's 2 %
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("vs the mix's single best static, %", fontsize=8)
    axes[0].set_yticks([-y for y in range(len(rows))], [r[0] for r in rows], fontsize=7)
    save(fig, path)
