"""What an evaluation (agent/evaluate.py) writes for people and for scripts.

report.md        the verdict first: each agent against the single best static over the
                 mix, then per scenario against that scenario's best static in hindsight
                 and the SECN presets, every number with its 95 % CI, unfinished flows;
                 where the traffic changes mid-episode, whether each agent's thresholds
                 follow the change
comparisons.csv  one row per (agent, scope, baseline, metric): values, relative
                 difference and CI (scope: "mix" or a scenario)
policies.csv     every policy on every scenario: mice/all FCT slowdown, mice p99 FCT,
                 elephants, goodput, queue, marking, unfinished flows
comparison.png   relative differences with their CIs, per scenario and over the mix
frontier.png     mice slowdown against goodput over the mix: every static, every agent
settings.png     what the agents chose: kmin/kmax of busy ports against their queue
actions.png      what the agents chose per scenario (load, incast, workload), in units of α
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ecntune import plots
from ecntune.agent.evaluate import (
    COMPARED,
    Comparison,
    MixResult,
    Outcome,
    around_change,
    busy_settings_alpha,
    statistic,
)
from ecntune.traffic import fct as metrics

LABELS = {
    "mice_mean": "mice mean slowdown",
    "mice_p99_fct": "mice p99 FCT",
    "all_mean": "all-flow mean slowdown",
    "goodput": "goodput",
}


def formatted(c: Comparison) -> str:
    star = "**" if c.significant else ""
    return f"{star}{c.rel:+.1%}{star} [{c.lo:+.1%}, {c.hi:+.1%}]"


def verdict(cs: list[Comparison], baseline: str = "the single best static") -> str:
    """Issue 14's acceptance, read off the comparisons against the single best static (or
    another baseline, named in the text): lower mice mean and p99 (CIs exclude zero),
    all-flow mean not worse, and goodput within 2 % -- of losing it: an agent that also
    delivers more than the static is no worse for it."""
    if meets(cs):
        return f"beats {baseline} (mice mean and p99, CIs exclude zero)"
    if wins_mice(cs):
        return "lower mice FCT, but overall slowdown or goodput does not hold"
    return f"does NOT beat {baseline}"


def wins_mice(cs: list[Comparison]) -> bool:
    """Lower mice mean and mice p99, each CI excluding zero: the acceptance's first half."""
    by = {c.metric: c for c in cs}
    return by["mice_mean"].hi < 0 and by["mice_p99_fct"].hi < 0


def meets(cs: list[Comparison]) -> bool:
    """The acceptance as a yes or no: `verdict`'s first case."""
    by = {c.metric: c for c in cs}
    return wins_mice(cs) and by["all_mean"].rel <= 0 and by["goodput"].rel >= -0.02


def frontier_verdict(cs: list[Comparison]) -> str:
    """Against the best static at the agent's goodput: ahead on mice, and at what cost."""
    by = {c.metric: c for c in cs}
    if by["mice_mean"].hi >= 0:
        return "not ahead on mice (on or behind the statics' frontier)"
    if by["goodput"].hi < 0:
        return "ahead on mice, with less goodput (CI)"
    return "**ahead on mice at no goodput cost: beyond the statics' frontier**"


def policy_row(scenario: str, name: str, o: Outcome) -> dict[str, Any]:
    done = ~np.isnan(o.fct_s)
    sd = o.slowdown
    mice = done & (o.size_bytes < metrics.MICE_BYTES)
    big = done & (o.size_bytes > metrics.ELEPHANT_BYTES)
    q = o.queue_bytes[~np.isnan(o.queue_bytes)]
    return {
        "scenario": scenario,
        "policy": name,
        "flows_done": int(done.sum()),
        "unfinished": o.unfinished,
        "mice_mean": float(np.mean(sd[mice])) if mice.any() else float("nan"),
        "mice_p99": float(np.percentile(sd[mice], 99)) if mice.any() else float("nan"),
        "mice_p99_fct_us": statistic(o, done, "mice_p99_fct") * 1e6,
        "all_mean": float(np.mean(sd[done])) if done.any() else float("nan"),
        "elephant_mean": float(np.mean(sd[big])) if big.any() else float("nan"),
        "goodput_mbps": float(np.mean(o.goodput_bps)) / 1e6,
        "queue_mean_kb": float(np.mean(q)) / 1e3 if q.size else 0.0,
        "marked": float(np.mean(o.marked)),
    }


def write(result: MixResult, out: Path, title: str) -> str:
    """Every file above; returns report.md's text."""
    out.mkdir(parents=True, exist_ok=True)
    comps: list[dict[str, Any]] = []

    def record(agent: str, scope: str, base: str, cs: list[Comparison]) -> list[Comparison]:
        comps.extend({"agent": agent, "scope": scope, "baseline": base, **c._asdict()} for c in cs)
        return cs

    labels = [sc.label for sc in result.scenarios]
    lines = [
        f"# {title}\n",
        f"{len(result.scenarios)} scenarios × {result.episodes} episodes (seeds {result.seed}–"
        f"{result.seed + result.episodes - 1}, the same for every policy), "
        f"{len(result.statics)} static settings (SECN0-2 and the grid of agent/static.py). "
        "Relative differences are agent / baseline − 1 on the flows both completed in the same "
        "episodes (negative: the agent is better, except goodput), with bootstrap 95 % CIs "
        "over episodes; **bold** where the CI excludes zero. Over the mix they are geometric "
        "means over scenarios.\n",
        f"Single best static over the mix (what an operator would deploy): "
        f"`{result.single_best}`.\n",
        _room(result),
        "## Against the single best static, over the whole mix\n",
        "| agent | " + " | ".join(LABELS[m] for m in COMPARED) + " | verdict |",
        "|---" * (len(COMPARED) + 2) + "|",
    ]
    for agent in result.agents:
        cs = record(agent, "mix", result.single_best, result.comparisons(agent))
        lines.append(f"| {agent} | " + " | ".join(formatted(c) for c in cs) + f" | {verdict(cs)} |")
    if result.agents and result.tied_with_best:
        lines += _against_ties(result, record)
    if result.frozen:
        lines += [
            "\n## Does changing the setting help? Each agent against itself frozen\n",
            "The agent's most frequent setting on busy ports over the whole mix, run as a "
            "static setting on the same episodes. An agent no better than its frozen self is "
            "one static setting in disguise.\n",
            "| agent | frozen to | " + " | ".join(LABELS[m] for m in COMPARED) + " |",
            "|---" * (len(COMPARED) + 2) + "|",
        ]
        for agent in result.agents:
            frozen = result.frozen[agent]
            cs = record(agent, "mix", frozen, result.against_frozen(agent))
            lines.append(f"| {agent} | `{frozen}` | " + " | ".join(formatted(c) for c in cs) + " |")
    matches = {agent: result.at_goodput(agent) for agent in result.agents}
    if result.agents:
        lines += [
            "\n## At the agent's goodput: the best static that delivers as much\n",
            "The single best static is chosen for mice alone. An operator who needs the "
            "agent's goodput would pick, of the statics whose goodput over the mix is at least "
            "the agent's, the one with the lowest mice mean slowdown (chosen like the single "
            "best, without the agent). An agent ahead of it on mice is beyond the statics' "
            "frontier (`frontier.png`), not just at another point of it.\n",
            "| agent | static at its goodput | "
            + " | ".join(LABELS[m] for m in COMPARED)
            + " | verdict |",
            "|---" * (len(COMPARED) + 3) + "|",
        ]
        for agent, match in matches.items():
            if match is None:
                lines.append(f"| {agent} | none delivers as much |" + " |" * len(COMPARED)
                             + " more goodput than every static |")  # fmt: skip
                continue
            cs = record(agent, "mix", match, result.comparisons(agent, match))
            lines.append(f"| {agent} | `{match}` | " + " | ".join(formatted(c) for c in cs)
                         + f" | {frontier_verdict(cs)} |")  # fmt: skip
    lines += [
        "\n## Per scenario, against that scenario's best static in hindsight\n",
        "How close one learned policy gets to every scenario's oracle setting.\n",
        "| scenario | best static | agent | " + " | ".join(LABELS[m] for m in COMPARED) + " |",
        "|---" * (len(COMPARED) + 3) + "|",
    ]
    for i, label in enumerate(labels):
        best = result.best_per_scenario[i]
        for agent in result.agents:
            cs = record(agent, label, best, result.per_scenario(agent, i, best))
            lines.append(
                f"| {label} | `{best}` | {agent} | " + " | ".join(formatted(c) for c in cs) + " |"
            )
    lines += [
        "\n## Per scenario, against the presets and the single best static (mice mean slowdown)\n",
        "| scenario | agent | vs SECN0 | vs SECN1 | vs SECN2 | vs single best static |",
        "|---" * (len(_presets(result)) + 2) + "|",
    ]  # fmt: skip
    for i, label in enumerate(labels):
        for agent in result.agents:
            cells = []
            for base in _presets(result):
                c = record(agent, label, base, result.per_scenario(agent, i, base))[0]
                cells.append(formatted(c))
            lines.append(f"| {label} | {agent} | " + " | ".join(cells) + " |")
    lines += _around_changes(result)
    rows = [
        policy_row(label, name, o)
        for label, runs in zip(labels, result.runs, strict=True)
        for name, o in runs.items()
    ]
    lines += [
        "\n## Every policy (flows each completed; `unfinished`: started, not done after the "
        "drain)\n",
        "| scenario | policy | mice mean | mice p99 | mice p99 FCT µs | all mean | elephants "
        "| goodput Mbit/s | queue KB | unfinished |",
        "|---" * 10 + "|",
    ]
    shown = {*result.agents, *_presets(result), *result.best_per_scenario, *result.frozen.values()}
    for r in rows:
        if r["policy"] in shown:
            lines.append(
                f"| {r['scenario']} | {r['policy']} | {r['mice_mean']:.2f} | {r['mice_p99']:.1f}"
                f" | {r['mice_p99_fct_us']:.0f} | {r['all_mean']:.2f} | {r['elephant_mean']:.2f}"
                f" | {r['goodput_mbps']:.1f} | {r['queue_mean_kb']:.1f} | {r['unfinished']} |"
            )
    lines.append(
        "\nThe other grid settings are in `policies.csv`; each comparison with its values in "
        "`comparisons.csv`."
        + (" Plots: `comparison.png`, `frontier.png`, `settings.png`, `actions.png`.\n"
           if result.agents else " No agents: the statics only (no plots).\n")
    )  # fmt: skip
    _csv(out / "comparisons.csv", comps, ["agent", "scope", "baseline", *Comparison._fields])
    _csv(out / "policies.csv", rows)
    if result.agents:
        _plot_comparisons(result, comps, out / "comparison.png")
        _plot_frontier(result, rows, [m for m in matches.values() if m], out / "frontier.png")
        _plot_settings(result, out / "settings.png")
        _plot_actions(result, out / "actions.png")
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def _against_ties(
    result: MixResult, record: Callable[[str, str, str, list[Comparison]], list[Comparison]]
) -> list[str]:
    """The verdict against each static tied with the single best on the mice mean, and
    which agents meet it against all of them: a verdict the name of the best decides (the
    tied statics' goodput can differ by several per cent) is not the agent's."""
    ties = result.tied_with_best
    lines = [
        "\n## Against the statics tied with the single best\n",
        f"The single best static is named on these episodes' mice mean; {len(ties)} other "
        f"static{'s' if len(ties) > 1 else ''} ({', '.join(f'`{s}`' for s in ties)}) "
        f"{'are' if len(ties) > 1 else 'is'} within its CI (the paired difference's 95 % CI "
        "includes zero) and could have been named instead, each with its own goodput. A "
        "verdict that holds against every one of them does not depend on the name.\n",
        "| agent | tied static | " + " | ".join(LABELS[m] for m in COMPARED) + " | verdict |",
        "|---" * (len(COMPARED) + 3) + "|",
    ]
    robust = []
    for agent in result.agents:
        held = meets(result.comparisons(agent))
        for static in ties:
            cs = record(agent, "mix", static, result.comparisons(agent, static))
            held = held and meets(cs)
            lines.append(f"| {agent} | `{static}` | " + " | ".join(formatted(c) for c in cs)
                         + f" | {verdict(cs, 'it')} |")  # fmt: skip
        if held:
            robust.append(agent)
    lines.append(
        "\nMeets the acceptance against the single best and every tied static: "
        + (", ".join(robust) if robust else "no agent")
        + "."
    )
    return lines


def _room(result: MixResult) -> str:
    """The oracle gap, said in words: how much any adaptation could gain at most per
    scenario, on the mice mean and on their tail."""

    def gap(metric: str) -> str:
        whole = result.oracle_gap(metric=metric)
        per = [
            f"{sc.label}: `{b}` {result.oracle_gap(i, metric).rel:+.2%}"
            for i, (sc, b) in enumerate(zip(result.scenarios, result.best_for(metric),
                                            strict=True))
        ]  # fmt: skip
        ci = f"{whole.rel:+.2%} [{whole.lo:+.2%}, {whole.hi:+.2%}]"
        return f"{ci} over the mix; " + "; ".join(per)

    return (
        "**Room for adaptation** (each scenario's own best static against the single best, "
        f"mice mean slowdown): {gap('mice_mean')}. "
        "A policy that chose the right static setting for every scenario would gain this "
        "much; near zero, only changing the setting within an episode can beat the single "
        "best static.\n\n"
        "**Room on the tail** (each scenario's static with the lowest mice p99 FCT against "
        f"the single best, mice p99 FCT): {gap('mice_p99_fct')}. "
        "Chosen after seeing every static's p99, which a few flows set, this overstates "
        "what a choice per scenario could gain on the tail.\n"
    )


def _around_changes(result: MixResult) -> list[str]:
    """Adaptation seen directly: in every scenario whose traffic changes mid-episode (a storm
    begins, the load or workload switches), the thresholds each agent held before and after,
    on the port whose queue rose most and on the others. A policy that follows the change
    moves there; a static one, or an agent in disguise, shows the same on both sides."""
    if not result.agents:  # statics alone (no α per scenario either): the same both sides
        return []
    rows = []
    for sc, runs, alpha in zip(result.scenarios, result.runs, result.alpha_bytes, strict=True):
        episode_s = sc.resolved().episode_s
        at_s = sc.change_at_s(episode_s)
        for agent in result.agents if at_s is not None else ():
            intervals = runs[agent].settings.shape[1]
            change = round(at_s / episode_s * intervals)
            if not 0 < change < intervals:
                continue
            (kmin_r, kmax_r), (kmin_o, kmax_o) = (
                [f"{before:.2g} → {after:.2g}" for before, after in port.T]
                for port in around_change(runs[agent], alpha, change)
            )
            rows.append(f"| {sc.label} | {sc.describe_change()} at {at_s:g} s | {agent} | "
                        f"{kmin_r} | {kmax_r} | {kmin_o} | {kmax_o} |")  # fmt: skip
    if not rows:
        return []
    return [
        "\n## Around the traffic change: do the agents follow it?\n",
        "Mean kmin and kmax (units of α; 0: the zero level) each agent held on busy ports "
        "before the change and after it, on the port whose queue rose most in each episode "
        "(a storm's target) and on the other ports, averaged over the episodes.\n",
        "| scenario | change | agent | risen port: kmin | kmax | other ports: kmin | kmax |",
        "|---" * 7 + "|",
        *rows,
    ]


def _presets(result: MixResult) -> list[str]:
    return [*(f"static:{p}" for p in ("secn0", "secn1", "secn2")), result.single_best]


def _csv(path: Path, rows: list[dict[str, Any]], fields: list[str] | None = None) -> None:
    """Rows under their keys' header (or `fields`: a header even with no rows)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields or list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _plot_comparisons(result: MixResult, comps: list[dict[str, Any]], path: Path) -> None:
    """Forest plot: per metric, each agent's relative difference with its CI, per scenario
    (against its best static) and over the mix (against the single best static)."""
    plt = plots.pyplot()

    scopes = ["mix", *(sc.label for sc in result.scenarios)]
    tall = 0.5 * len(scopes) * max(1.0, len(result.agents) / 4) + 2
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED), tall))
    for ax, metric in zip(axes, COMPARED, strict=True):
        for j, agent in enumerate(result.agents):
            ys, xs, lo, hi = [], [], [], []
            for k, scope in enumerate(scopes):
                base = result.single_best if scope == "mix" else result.best_per_scenario[k - 1]
                c = next(
                    c for c in comps
                    if c["agent"] == agent and c["scope"] == scope and c["baseline"] == base
                    and c["metric"] == metric
                )  # fmt: skip
                ys.append(k + 0.8 * j / max(1, len(result.agents)))
                xs.append(c["rel"] * 100)
                lo.append((c["rel"] - c["lo"]) * 100)
                hi.append((c["hi"] - c["rel"]) * 100)
            ax.errorbar(xs, ys, xerr=[lo, hi], fmt="o", capsize=3, label=agent)
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_yticks(range(len(scopes)), scopes if ax is axes[0] else [""] * len(scopes))
        ax.invert_yaxis()
        ax.set_xlabel("% vs best static (95 % CI)")
        ax.set_title(LABELS[metric] + (" (higher better)" if metric == "goodput" else ""))
    axes[0].legend(fontsize=7)
    fig.suptitle("Learned policy vs the best static setting in hindsight (mix: single best)")
    plots.save(fig, path, dpi=110)


def _plot_frontier(
    result: MixResult, rows: list[dict[str, Any]], matches: list[str], path: Path
) -> None:
    """Where every policy lands on (goodput, mice mean slowdown) over the mix, against the
    single best static: the statics trace the frontier an operator can choose from, an
    agent below it gets faster mice at the same goodput. Unpaired means (each policy's own
    completed flows, geometric over scenarios): a picture; the paired tables judge."""
    plt = plots.pyplot()

    def mice(name: str) -> float:
        return float(np.exp(np.mean([np.log(r["mice_mean"]) for r in rows if r["policy"] == name])))

    def point(name: str) -> tuple[float, float]:
        goodput = result.mix_goodput
        x = goodput[name] / goodput[result.single_best] - 1
        return 100 * x, 100 * (mice(name) / mice(result.single_best) - 1)

    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    xy = np.array([point(n) for n in result.statics])
    ax.scatter(xy[:, 0], xy[:, 1], color="lightgrey", edgecolor="grey", label="static settings")
    for name in {*_presets(result), *matches}:
        x, y = point(name)
        ax.annotate(name.removeprefix("static:"), (x, y), fontsize=7, color="dimgrey",
                    xytext=(3, 3), textcoords="offset points")  # fmt: skip
    for kind, marker in (("acc", "o"), ("pet", "s"), ("graphcc", "^"), ("tree", "D")):
        mine = [a for a in result.agents if a.startswith(kind + ":")]
        if mine:
            pts = np.array([point(a) for a in mine])
            ax.scatter(pts[:, 0], pts[:, 1], marker=marker, s=45, label=kind.upper())
    ax.axhline(0, color="grey", linewidth=0.6)
    ax.axvline(0, color="grey", linewidth=0.6)
    ax.set_xlabel(f"goodput, % vs {result.single_best} (higher better)")
    ax.set_ylabel(f"mice mean slowdown, % vs {result.single_best} (lower better)")
    ax.set_title("Over the mix: the statics' frontier and the agents (unpaired means)")
    ax.legend(fontsize=8)
    plots.save(fig, path, dpi=110)


def _plot_settings(result: MixResult, path: Path) -> None:
    """Adaptation, directly: the kmin/kmax each agent set on busy ports against the queue it
    saw, over every held-out scenario (one colour per scenario). A flat band is a static
    policy in disguise."""
    plt = plots.pyplot()

    cols = min(4, max(1, len(result.agents)))
    rows = -(-max(1, len(result.agents)) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(result.agents) :]:
        ax.axis("off")
    for ax, agent in zip(axes.flat, result.agents, strict=False):
        for sc, runs in zip(result.scenarios, result.runs, strict=True):
            o = runs[agent]
            busy = ~np.isnan(o.queue_bytes)
            # the setting chosen after seeing an interval acts on the next one
            q = o.queue_bytes[:, :-1][busy[:, :-1]] / 1e3
            kmin = o.settings[:, 1:, :, 0][busy[:, :-1]] / 1e3
            kmax = o.settings[:, 1:, :, 1][busy[:, :-1]] / 1e3
            (line,) = ax.plot(q, kmin, ".", markersize=2, alpha=0.4, label=sc.label)
            ax.plot(q, kmax, "x", markersize=2, alpha=0.2, color=line.get_color())
        ax.set_xscale("symlog", linthresh=1)
        ax.set_yscale("symlog", linthresh=1)  # linear below 1 KB: the zero level shows
        ax.set_xlabel("mean queue in the interval seen, KB")
        ax.set_ylabel("kmin (dots) / kmax (crosses) chosen, KB")
        ax.set_title(agent)
        ax.legend(fontsize=6, markerscale=4)
    plots.save(fig, path, dpi=110)


def _plot_actions(result: MixResult, path: Path) -> None:
    """Adaptation across scenarios: the kmin and kmax each agent held on busy ports in every
    scenario (load, incast degree, workload), in units of the port's α (0: the zero level),
    sized by how often. One dot per agent at the same height in every column is a static policy."""
    plt = plots.pyplot()

    n = max(1, len(result.agents))
    fig, axes = plt.subplots(n, 1, figsize=(1.6 * len(result.scenarios) + 3, 2.6 * n),
                             squeeze=False, sharex=True)  # fmt: skip
    for ax, agent in zip(axes[:, 0], result.agents, strict=False):
        for i, (runs, alpha) in enumerate(zip(result.runs, result.alpha_bytes, strict=True)):
            held = busy_settings_alpha(runs[agent], alpha)
            for col, dx, marker, name in ((0, -0.12, "o", "kmin"), (1, 0.12, "x", "kmax")):
                vals, counts = np.unique(held[:, col], return_counts=True)
                ax.scatter(np.full(vals.shape, i + dx), vals, s=200 * counts / counts.sum() + 4,
                           marker=marker, color="C0" if col == 0 else "C3",
                           label=name if i == 0 else None)  # fmt: skip
        # linear below α: the zero level (SECN0's step, `--zero-level`) at 0, not dropped
        ax.set_yscale("symlog", base=2, linthresh=1, linscale=0.5)
        ax.set_ylabel("α units")
        ax.set_title(f"{agent} (frozen ablation: {result.frozen[agent]})", fontsize=9)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xticks(range(len(result.scenarios)),
                           [sc.label.replace(" ", "\n", 2) for sc in result.scenarios],
                           fontsize=7)  # fmt: skip
    fig.suptitle("Settings held on busy ports per scenario (marker area: share of intervals)")
    plots.save(fig, path, dpi=110, rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
