"""TCP incast sender: synchronised bursts of one flow each from many hosts to one receiver.

    python -m ecntune.traffic.incast --src 10.0.0.1 --dst 10.0.0.4 --size 64000 \
        --bursts 5 --period 2 --start-at 1700000000.0 --out h1.sent.jsonl

Run it on N senders with the same --start-at and --dst: every --period seconds the N flows
start together and converge on the receiver's port (the partition/aggregate pattern that
fills a switch buffer at once). Each flow's completion time is recorded by the receiver.
"""

from __future__ import annotations

import argparse
import sys

from ecntune.traffic.flows import Flow, add_sender_args, run_sender


def incast_schedule(dst: str, size: int, bursts: int, period_s: float, src: str) -> list[Flow]:
    if size <= 0 or bursts <= 0 or period_s <= 0:
        raise ValueError("size, bursts and period must be positive")
    return [Flow(f"{src}-i{k}", k * period_s, dst, size, "incast") for k in range(bursts)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_sender_args(p)
    p.add_argument("--dst", required=True, help="the receiver every sender converges on")
    p.add_argument("--size", type=int, required=True, help="bytes per sender per burst")
    p.add_argument("--bursts", type=int, default=1)
    p.add_argument("--period", type=float, default=1.0, help="seconds between bursts")
    args = p.parse_args(argv)
    flows = incast_schedule(args.dst, args.size, args.bursts, args.period, args.src)
    return run_sender(args, flows)


if __name__ == "__main__":
    sys.exit(main())
