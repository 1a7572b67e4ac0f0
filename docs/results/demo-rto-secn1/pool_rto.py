"""The static SECN1 phase's share of mice that waited out a retransmission timeout, pooled
over demo runs (issue 16: under 2 %), with a 95 % CI from a bootstrap over runs: a storm's
timeouts come together, so runs, not flows, are the independent samples.

    python docs/results/demo-rto-secn1/pool_rto.py results/demo-a results/demo-b ... > runs.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from ecntune.fabric.report import load_phase, mice_timeouts


def main(runs: list[str]) -> None:
    rows = []
    for run in runs:
        phase = load_phase("static-secn1", Path(run) / "static-secn1")
        rows.append((Path(run).name, *mice_timeouts(phase)))
    n = np.array([r[1] for r in rows])
    k = np.array([r[2] for r in rows])
    pick = np.random.default_rng(0).integers(0, len(rows), (10_000, len(rows)))
    low, high = np.percentile(k[pick].sum(1) / n[pick].sum(1), [2.5, 97.5])
    out = csv.writer(sys.stdout)
    out.writerow(["run", "mice", "mice_with_rto", "share"])
    for name, mice, with_rto in rows:
        out.writerow([name, mice, with_rto, f"{with_rto / mice:.4f}"])
    out.writerow(["pooled", n.sum(), k.sum(), f"{k.sum() / n.sum():.4f}"])
    out.writerow(["ci95_over_runs", "", "", f"{low:.4f}-{high:.4f}"])


if __name__ == "__main__":
    main(sys.argv[1:])
