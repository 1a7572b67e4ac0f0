"""The control loop on a live switch: digests in, thresholds applied, every interval.

The real controller (controller/app.py: finsy, gRPC, the pure loop) drives the embedded
switch on n veth pairs (n = 1, 8, 32) while a sender process keeps every port busy, so
every interval brings a digest per port. Per tick, the controller's own timings
(`SwitchRunner.timings`):

- decide: `SwitchLoop.decide` (history, the compiled decision, clamp, register encoding;
  the reward, guard and log rows follow the write, in `SwitchLoop.settle`);
- applied: from the tick's start until the switch acknowledged the RegisterEntry writes,
  i.e. the new thresholds are in the data plane (P4Runtime Write returns once applied);
- digest_to_applied: from the arrival of the newest digest list the tick saw until then.
  The switch sends a list every half interval and a tick starts when the first list at
  least 0.9 interval after the last tick arrives (controller/app.py `Ticker`; ACC §4: one
  decision per interval), so this is about `applied`. A port's sample waited for its list
  in the switch (up to half an interval) and, in the list that started no tick, half an
  interval more in the controller, which no timing here includes. Before 2026-12-08 the
  ticker kept its own clock, lists went a millisecond after each port's interval closed,
  and a sample waited up to one interval for the tick, which digest_to_applied included;
- applied without a digest during: the ticks in which no digest list arrived. The switch
  closes each port's telemetry interval on that port's own packets; lists sent as those
  closed arrived at every phase of a tick on its own clock, and one arriving mid-tick (its
  sending in the switch, its decoding in the controller) delayed the write: those ticks
  made the tail. With ticks started by lists half an interval apart, few such are left;
- ticks_per_s, lists_per_tick and idle_ticks: decisions made (a little less than one per
  interval: the switch sends no list at a tick of its half-interval clock that has no
  sample, and this bench's sender gives every port a frame at once every 5 ms, so the
  ports' intervals close in bursts), digest lists per decision (about two), and ticks
  that no list started (the ticker's idle timeout; with every port busy, none).

Policies side by side in one run: the shipped ACC agent, and as the reference a static
policy that alternates between two settings so that, like a busy agent, it writes every
port on every tick without any inference (three registers of each port's four: the two
settings share their pmax); and that static policy again on a switch that
applies a Write's updates one per hold of its lock (`--write-slice-ms 0`, as before slices:
`slices_vs_one_update_per_lock` < 1 is what the slices gain); and the static policy on a
switch running its Python data plane (`--dataplane python`) instead of the native one
(issue 21): `native_vs_python_dataplane` < 1 is what the compiled data plane gains the
control loop by leaving the cores to the controller and the P4Runtime server. The agent
writes only on the ticks where its decision changes a port (`ticks_writing`), so its
applied times are few.
Issue 20's target: applied p99 <= 5 ms at 32 ports. Also decisions per second the loop
could sustain (1 / median applied).

Needs root (veths, raw sockets). One JSON object per line; BMv2 where installed is not
measured yet (its server has no RegisterEntry writes: thresholds go by PacketOut there).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
from typing import Any

import numpy as np
from bench_switch import frame  # the switch bench's frames (bench/ is on sys.path)

from ecntune.controller.app import TickTiming, run_in_background
from ecntune.controller.config import ControllerConfig
from ecntune.testbed import Alternating, Testbed
from ecntune.topology import single_switch

PORTS = (1, 8, 32)
INTERVAL_S = 0.02
RUN_S = 6.0
SEND_PPS_PER_PORT = 200  # enough for a digest per port per interval, little load
# the switch as it was before Writes applied their updates in slices (one update per hold
# of the switch lock): the reference for the slices' gain, in the same run
ONE_UPDATE_PER_LOCK = ("--write-slice-ms", "0")
PYTHON_DATAPLANE = ("--dataplane", "python")  # the reference engine, in the same run


def send(ifaces: list[str], stop: Any) -> None:
    """SEND_PPS_PER_PORT small frames into every port, each to the next port's host."""
    n = len(ifaces)
    socks = []
    for iface in ifaces:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((iface, 0))
        socks.append(s)
    frames = [frame(i, i % n + 1, 1000) for i in range(1, n + 1)]
    gap = 1.0 / SEND_PPS_PER_PORT
    next_at = time.monotonic()
    while not stop.is_set():
        for s, f in zip(socks, frames, strict=True):
            with contextlib.suppress(OSError):  # a full buffer: the next one goes
                s.send(f)
        next_at += gap
        time.sleep(max(0.0, next_at - time.monotonic()))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


def measure(n_ports: int, policy: object, switch_args: tuple[str, ...] = ()) -> dict[str, Any]:
    rig = Testbed("embedded", n_ports, f"cl{n_ports}", switch_args=switch_args)
    try:
        rig.client.close()  # the controller becomes the primary from here
        config = ControllerConfig(
            topology=single_switch(n_ports, 1e9, name="bench"),
            policy=policy,
            switches={"s1": rig.spec.grpc_addr},
            interval_s=INTERVAL_S,
            baseline_intervals=0,
            write_path="register",
        )
        ctx = mp.get_context("spawn")  # never fork a process that runs gRPC threads
        stop = ctx.Event()
        sender = ctx.Process(target=send, args=(rig.far_ends, stop), daemon=True)
        with run_in_background(config) as controller:
            runner = controller.runners["s1"]
            sender.start()
            try:
                deadline = time.monotonic() + 30
                while np.isnan(runner.digests.last_at) and time.monotonic() < deadline:
                    time.sleep(0.05)  # until the traffic's first digest
                time.sleep(5 * INTERVAL_S)
                skip, lists_from = len(runner.timings), runner.digests.lists
                time.sleep(RUN_S)
                timings: list[TickTiming] = list(runner.timings)[skip:]
                lists = runner.digests.lists - lists_from
            finally:
                stop.set()
                sender.join(5)
            mode = runner.loop.guard.mode
    finally:
        rig.close()
    written = [t for t in timings if t.ports_written]
    applied = [t.applied_s for t in written]
    clear = [t.applied_s for t in written if not t.digest_during]
    return {
        "ticks": len(timings),
        "ticks_per_s": round(len(timings) / RUN_S, 1),
        "lists_per_tick": round(lists / len(timings), 2) if timings else None,
        "idle_ticks": sum(not t.by_list for t in timings),
        "ticks_writing": len(written),
        "ports_written_median": statistics.median([t.ports_written for t in written] or [0]),
        "decide_p50_ms": round(pct([t.decide_s for t in timings], 50), 3),
        "decide_p99_ms": round(pct([t.decide_s for t in timings], 99), 3),
        "applied_p50_ms": round(pct(applied, 50), 3),
        "applied_p99_ms": round(pct(applied, 99), 3),
        "ticks_with_a_digest_during": len(written) - len(clear),
        "applied_without_a_digest_during_p50_ms": round(pct(clear, 50), 3),
        "applied_without_a_digest_during_p99_ms": round(pct(clear, 99), 3),
        "digest_to_applied_p50_ms": round(
            pct([t.digest_age_s + t.applied_s for t in written], 50), 3
        ),
        "digest_to_applied_p99_ms": round(
            pct([t.digest_age_s + t.applied_s for t in written], 99), 3
        ),
        "decisions_per_s": round(1 / statistics.median(applied), 1) if applied else None,
        "guard_mode": mode,
    }


def main() -> int:
    if os.geteuid() != 0:
        print(json.dumps({"bench": "control_loop", "skipped": "needs root (veths)"}))
        return 0
    for n in PORTS:
        reference = measure(n, Alternating())
        agent = measure(n, "acc:default")
        per_update = measure(n, Alternating(), ONE_UPDATE_PER_LOCK)
        python_dp = measure(n, Alternating(), PYTHON_DATAPLANE)
        print(json.dumps({
            "bench": f"control_loop_{n}ports", "target": "embedded", "interval_s": INTERVAL_S,
            "acc": agent, "static_alternating": reference,
            "static_alternating_one_update_per_lock": per_update,
            "static_alternating_python_dataplane": python_dp,
            "applied_p99_ratio": round(agent["applied_p99_ms"] / reference["applied_p99_ms"], 2),
            "slices_vs_one_update_per_lock": {
                q: round(reference[f"applied_{q}_ms"] / per_update[f"applied_{q}_ms"], 2)
                for q in ("p50", "p99")
            },
            "native_vs_python_dataplane": {
                q: round(reference[f"applied_{q}_ms"] / python_dp[f"applied_{q}_ms"], 2)
                for q in ("p50", "p99")
            },
            "goal_applied_p99_ms": 5.0,
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
