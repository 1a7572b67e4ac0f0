"""The static SECN1 phase's share of mice that waited out a retransmission timeout, pooled
over demo runs (issue 16: under 2 %), with a 95 % CI from a bootstrap over runs: a storm's
timeouts come together, so runs, not flows, are the independent samples.

Runs whose records are gone are read back from an earlier `runs.csv` (`--kept`); new runs'
directories are added under a batch name. Beside the pooled share per batch,
`summary.csv` gives the dispersion test (are the runs' counts more scattered than binomial
draws at the pooled rate, i.e. do some runs differ in kind?) and the chance that a single
run of that many mice reaches 2 % by chance alone at the pooled rate.

    python docs/results/demo-rto-secn1/pool_rto.py --kept docs/results/demo-rto-secn1/runs.csv \
        --batch 2026-12-07 results/rto-secn1-2026-12-07-run* --out docs/results/demo-rto-secn1
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np
from scipy import stats

from ecntune.fabric.report import load_phase, mice_timeouts

TARGET_SHARE = 0.02  # issue 16
Run = tuple[str, str, int, int]  # name, batch, mice, mice with an RTO


def kept_runs(path: Path) -> list[Run]:
    """The rows of an earlier runs.csv."""
    with path.open() as f:
        return [
            (r["run"], r["batch"], int(r["mice"]), int(r["mice_with_rto"]))
            for r in csv.DictReader(f)
        ]


def new_runs(dirs: list[Path], batch: str) -> list[Run]:
    return [
        (d.name, batch, *mice_timeouts(load_phase("static-secn1", d / "static-secn1")))
        for d in dirs
    ]


def counts(runs: list[Run]) -> tuple[np.ndarray, np.ndarray]:
    """(mice, mice with an RTO) per run."""
    return np.array([r[2] for r in runs], float), np.array([r[3] for r in runs], float)


def pooled(runs: list[Run], draws: int = 10_000) -> tuple[float, float, float]:
    """Pooled share and its bootstrap-over-runs 95 % interval."""
    n, k = counts(runs)
    pick = np.random.default_rng(0).integers(0, len(runs), (draws, len(runs)))
    low, high = np.percentile(k[pick].sum(1) / n[pick].sum(1), [2.5, 97.5])
    return float(k.sum() / n.sum()), float(low), float(high)


def dispersion(runs: list[Run]) -> tuple[float, int, float]:
    """Pearson's χ² of the runs' counts against binomial draws at the pooled rate:
    (statistic, degrees of freedom, p that chance alone scatters them this much or more)."""
    n, k = counts(runs)
    p = k.sum() / n.sum()
    chi2 = float(((k - n * p) ** 2 / (n * p * (1 - p))).sum())
    return chi2, len(runs) - 1, float(stats.chi2.sf(chi2, len(runs) - 1))


def chance_at_target(mice: int, rate: float) -> float:
    """P(a run of `mice` mice has a share >= TARGET_SHARE) if each mouse times out at `rate`."""
    return float(stats.binom.sf(math.ceil(TARGET_SHARE * mice) - 1, mice, rate))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, help="demo runs with a static-secn1 phase")
    p.add_argument("--kept", type=Path, default=None, help="an earlier runs.csv")
    p.add_argument("--batch", default="new", help="the new runs' batch name")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    runs = (kept_runs(args.kept) if args.kept else []) + new_runs(args.dirs, args.batch)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "runs.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", "batch", "mice", "mice_with_rto", "share"])
        out.writerows([*r, f"{r[3] / r[2]:.4f}"] for r in runs)
    # per batch only: a batch is one program and one way of running it
    batches = {r[1]: [s for s in runs if s[1] == r[1]] for r in runs}
    with (args.out / "summary.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(
            ["batch", "runs", "mice", "mice_with_rto", "share", "ci95_low", "ci95_high",
             "runs_at_target", "expected_runs_at_target", "dispersion_chi2", "df", "dispersion_p"]
        )  # fmt: skip
        for name, group in batches.items():
            share, low, high = pooled(group)
            at_target = sum(r[3] / r[2] >= TARGET_SHARE for r in group)
            expected = sum(chance_at_target(r[2], share) for r in group)
            chi2, df, p_value = dispersion(group)
            out.writerow(
                [name, len(group), sum(r[2] for r in group), sum(r[3] for r in group),
                 f"{share:.4f}", f"{low:.4f}", f"{high:.4f}", at_target, f"{expected:.2f}",
                 f"{chi2:.2f}", df, f"{p_value:.3f}"]
            )  # fmt: skip
    print((args.out / "summary.csv").read_text(), end="")


if __name__ == "__main__":
    main()
