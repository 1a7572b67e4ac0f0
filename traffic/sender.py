"""Poisson workload sender: flows drawn from a CDF, arriving at a target load of this host's link.

    python -m ecntune.traffic.sender --src 10.0.0.1 --dst 10.0.0.4 --dst 10.0.0.3 \
        --workload websearch --load 0.5 --link-bps 10e6 --duration 20 --seed 1 --out h1.sent.jsonl

Each flow goes to one of the --dst hosts, picked uniformly. The same seed gives the same
flows, so two runs (static thresholds, then an agent) carry identical traffic.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ecntune.traffic.flows import Flow, add_sender_args, run_sender
from ecntune.traffic.workload import (
    WORKLOADS,
    FlowSizeCDF,
    arrival_rate,
    load_cdf,
    poisson_arrivals,
)


def poisson_schedule(
    cdf: FlowSizeCDF,
    load: float,
    link_bps: float,
    duration_s: float,
    dsts: list[str],
    rng: np.random.Generator,
    flow_prefix: str,
) -> list[Flow]:
    """Flows whose sizes follow `cdf` and whose Poisson arrivals fill `load` of `link_bps`."""
    if not dsts:
        raise ValueError("a sender needs at least one destination")
    starts = poisson_arrivals(rng, arrival_rate(cdf, load, link_bps), duration_s)
    sizes = cdf.sample(rng, len(starts))
    picks = rng.integers(0, len(dsts), size=len(starts))
    return [
        Flow(f"{flow_prefix}-{i}", float(t), dsts[d], int(s))
        for i, (t, s, d) in enumerate(zip(starts, sizes, picks, strict=True))
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_sender_args(p)
    p.add_argument("--dst", action="append", required=True, help="a receiver IP (repeatable)")
    p.add_argument("--workload", choices=WORKLOADS, default="websearch")
    p.add_argument("--load", type=float, required=True, help="fraction of --link-bps, (0, 1]")
    p.add_argument("--link-bps", type=float, required=True, help="this host's link rate")
    p.add_argument("--duration", type=float, required=True, help="seconds of arrivals")
    p.add_argument("--max-bytes", type=float, default=None, help="cap flow sizes (keeps load)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--id-prefix", default=None, help="flow ids' prefix (default <src>-w; unique per sender)"
    )
    args = p.parse_args(argv)
    cdf = load_cdf(args.workload)
    if args.max_bytes is not None:
        cdf = cdf.capped(args.max_bytes)
    rng = np.random.default_rng(args.seed)
    flows = poisson_schedule(
        cdf,
        args.load,
        args.link_bps,
        args.duration,
        args.dst,
        rng,
        args.id_prefix or f"{args.src}-w",
    )
    return run_sender(args, flows)


if __name__ == "__main__":
    sys.exit(main())
