"""The controller's memory over a long run of PacketOut writes (issue 17's acceptance).

Why: the controller once put every PacketIn that acknowledged a PacketOut threshold write
into a queue nothing read (`SwitchRunner.acks`), so its memory grew for as long as it ran,
by one entry per write. The queue is gone (controller/app.py `PacketReader` only counts the
acks); this bench shows that memory now stays flat over a 10-minute run.

What runs: the embedded switch on `--ports` veth pairs (ecntune/testbed.py), the real
controller (controller/app.py `run_in_background`: finsy, gRPC, the pure loop) in a
process of its own with `write_path: packet_out`, so every threshold goes as an OP_SET_ECN
PacketOut and comes back as a config-ack PacketIn (the path BMv2 uses), and
bench_control_loop.py's sender keeping every port busy so a digest per port arrives every
20 ms interval. The policy is by default bench_control_loop.py's `static:alternating` (two
settings in turn: every port written on every tick, no inference); `--policy acc:default`
runs the shipped ACC agent instead (it writes only the ports whose setting changed).

What is measured: every SAMPLE_S the resident memory (VmRSS, /proc/<pid>/status) of the
controller's process and of the switch's, and the controller's own counters at that moment:
ticks and PacketOut writes from its per-tick timings (`SwitchRunner.timings`), config acks
received (`PacketReader.config_acks`), the write path in use, the guard's mode and
fallbacks, rewrites of writes that never took effect, ticks whose newest digest was older
than two intervals. The controller's process keeps only those counters besides the
controller, so nothing the bench keeps grows with the run.

Warm-up, left out: the first WARMUP_SHARE of the run (at least MIN_WARMUP_S: gRPC buffers
and allocator arenas settling; the agent compiles before the controller reports ready),
and in any case until the controller has ticked TIMINGS_KEPT times. It keeps its last
TIMINGS_KEPT tick timings (controller/app.py), ~170 B each: until that record is full
(200 s at 20 ms) its memory grows by ~1.7 MB by design, and a run too short to fill it
gets no verdict. Over the steady rest, per process:

- the least-squares slope of RSS over time (KB/min), and the growth: the median RSS of the
  last SETTLE_SAMPLES samples minus that of the first SETTLE_SAMPLES after the warm-up
  (medians, so one sample caught mid-allocation does not decide);
- for comparison, what the removed queue's kind of leak would add over the same steady
  part: LEAK_BYTES_PER_WRITE (a PacketOut is 45 B serialised, an ack time kept in a queue
  33 B; 100 B is a small Python object holding either) once per tick, and once per write.

Verdict, per process: flat when the growth and the slope's projection over the steady part
are both below the smaller of GROWTH_SHARE of the warm RSS and half of what one leaked
write per tick would add. The first bound is the issue's "flat" for a Python process whose
RSS wobbles by allocator noise; it alone would miss a leak of 100 B per write (8 ports x
50 ticks/s: ~23 MB in 10 minutes, within 5 % of a ~230 MB controller), so the second makes
the bench catch a leak sixteen times smaller than one entry per write, as the removed
queue's was (at 8 ports; the allocator's noise measured here: tens of KB). No verdict
(flat: null, not_measured says why) when the controller stopped ticking, wrote otherwise
than by PacketOut, had its writes unacknowledged, or the run was too short: `--duration-s
60` is a quick try of the rig, the 10-minute default is the measurement.

Output: one JSON object per process (bench controller_memory), the samples as CSV
(time_s, controller_rss_kb, switch_rss_kb and the counters) and a PNG plot of RSS over
time in `--out` (default results/bench-controller-memory/).

Needs root (veths, raw sockets):
    .venv/bin/python bench/bench_controller_memory.py                   # 10 minutes
    .venv/bin/python bench/bench_controller_memory.py --duration-s 60   # a quick try
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from bench_control_loop import INTERVAL_S, send  # its rig (bench/ is on sys.path)

from ecntune import plots
from ecntune.controller.app import TIMINGS_KEPT, SwitchRunner, run_in_background
from ecntune.controller.config import ControllerConfig
from ecntune.testbed import Alternating, Testbed
from ecntune.topology import single_switch

DURATION_S = 600.0
PORTS = 8
SAMPLE_S = 2.0
WARMUP_SHARE = 0.1
MIN_WARMUP_S = 10.0
SETTLE_SAMPLES = 5
LEAK_BYTES_PER_WRITE = 100
GROWTH_SHARE = 0.05
MIN_TICK_SHARE = 0.5  # of the steady part's intervals: fewer, and the controller stalled
ACKED_SHARE = 0.9  # of the PacketOut writes acknowledged by config-ack PacketIns
OUT = Path("results/bench-controller-memory")


class Counters:
    """What the controller did so far, from its own records, in constant memory: its
    timings keep only the last TIMINGS_KEPT ticks, so new ones are summed as they come."""

    def __init__(self, runner: SwitchRunner) -> None:
        self.runner = runner
        self.ticks = self.writes = self.stale = 0
        self.last: object = None  # the newest timing already counted

    def poll(self) -> dict[str, Any]:
        r = self.runner
        timings = list(r.timings)
        i = len(timings)
        while i and timings[i - 1] is not self.last:
            i -= 1
        new = timings[i:]
        if new:
            self.last = new[-1]
        self.ticks += len(new)
        self.writes += sum(t.ports_written for t in new)
        self.stale += sum(1 for t in new if not t.digest_age_s < 2 * INTERVAL_S)
        guard = r.loop.guard
        return {
            "ticks": self.ticks,
            "writes": self.writes,
            "config_acks": r.packets.config_acks,
            "write_path": r.write_path,
            "guard_mode": guard.mode,
            "fallbacks": [why for mode, why in guard.transitions if mode == "fallback"],
            "rewrites": sum(s.rewrites for s in r.loop.ports.values()),
            "stale_digest_ticks": self.stale,
        }


def control(n_ports: int, grpc_addr: str, policy: str, stop: Any, outbox: Any) -> None:
    """The controller's process: the controller, and its counters sent every SAMPLE_S."""
    config = ControllerConfig(
        topology=single_switch(n_ports, 1e9, name="bench"),
        policy=Alternating() if policy == Alternating.name else policy,
        switches={"s1": grpc_addr},
        interval_s=INTERVAL_S,
        baseline_intervals=0,
        write_path="packet_out",
    )
    try:
        with run_in_background(config) as controller:
            counters = Counters(controller.runners["s1"])
            outbox.send(counters.poll())
            while not stop.wait(SAMPLE_S):
                outbox.send(counters.poll())
    except Exception as e:
        outbox.send({"error": f"{type(e).__name__}: {e}"})


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


class Sample(NamedTuple):
    time_s: float
    controller_rss_kb: int
    switch_rss_kb: int
    ticks: int
    writes: int
    config_acks: int


def receive(inbox: Any, timeout_s: float) -> dict[str, Any]:
    if not inbox.poll(timeout_s):
        raise RuntimeError(f"the controller's process sent nothing for {timeout_s:.0f} s")
    message = inbox.recv()
    if "error" in message:
        raise RuntimeError(f"controller: {message['error']}")
    return message


def run(n_ports: int, policy: str, duration_s: float) -> tuple[list[Sample], dict[str, Any]]:
    """Switch, controller and traffic for `duration_s` from the controller being ready."""
    ctx = mp.get_context("spawn")  # never fork a process that runs gRPC threads
    stop, quiet = ctx.Event(), ctx.Event()
    inbox, outbox = ctx.Pipe(duplex=False)
    samples: list[Sample] = []
    with Testbed("embedded", n_ports, f"mem{n_ports}") as rig:
        rig.client.close()  # the controller becomes the primary from here
        args = (n_ports, rig.spec.grpc_addr, policy, stop, outbox)
        controller = ctx.Process(target=control, args=args, daemon=True)
        sender = ctx.Process(target=send, args=(rig.far_ends, quiet), daemon=True)
        controller.start()
        try:
            counters = receive(inbox, 120)  # ready: programmed, first thresholds written
            sender.start()
            t0 = time.monotonic()
            while True:
                now = time.monotonic() - t0
                samples.append(
                    Sample(
                        round(now, 2), rss_kb(controller.pid), rss_kb(rig.pid),
                        counters["ticks"], counters["writes"], counters["config_acks"],
                    )
                )  # fmt: skip
                if now >= duration_s:
                    break
                counters = receive(inbox, 10 * SAMPLE_S)
        finally:
            quiet.set()
            stop.set()
            sender.join(5)
            controller.join(30)
            if controller.is_alive():
                controller.terminate()
    return samples, counters


def judge(t: np.ndarray, rss: np.ndarray, warm_s: float, leak_kb: float) -> dict[str, Any]:
    """Slope and growth of one process's RSS after the warm-up, and the verdict."""
    steady = t >= warm_s
    ts, rs = t[steady], rss[steady]
    slope = float(np.polyfit(ts / 60, rs, 1)[0]) if len(ts) > 2 else float("nan")
    warm = float(np.median(rs[:SETTLE_SAMPLES]))
    end = float(np.median(rs[-SETTLE_SAMPLES:]))
    limit = min(GROWTH_SHARE * warm, leak_kb / 2)
    minutes = (ts[-1] - ts[0]) / 60
    return {
        "rss_start_kb": int(rss[0]),
        "rss_warm_kb": round(warm),
        "rss_end_kb": round(end),
        "rss_max_kb": int(rss.max()),
        "growth_kb": round(end - warm),
        "growth_pct": round(100 * (end - warm) / warm, 2),
        "slope_kb_per_min": round(slope, 1),
        "slope_limit_kb_per_min": round(limit / minutes, 1) if minutes else None,
        "limit_kb": round(limit),
        "flat": bool(end - warm < limit and slope * minutes < limit),
    }


def warm_up(samples: list[Sample], duration_s: float) -> tuple[float, str]:
    """When the steady part begins (the module's docstring), and why there is no verdict
    when the run was too short for one ("" when it was not)."""
    share = max(MIN_WARMUP_S, WARMUP_SHARE * duration_s)
    full = next((s.time_s for s in samples if s.ticks >= TIMINGS_KEPT), None)
    if full is None:
        return share, (
            f"the run ended before the controller had ticked {TIMINGS_KEPT} times: its "
            "record of tick timings was still growing by design (run the default 600 s)"
        )
    start = max(share, full)
    if sum(s.time_s >= start for s in samples) < 2 * SETTLE_SAMPLES:
        return start, f"fewer than {2 * SETTLE_SAMPLES} samples after the warm-up"
    return start, ""


def ran_problem(ticks: int, writes: int, steady_s: float, counters: dict[str, Any]) -> str:
    """Why the steady part did not exercise what the bench is about, or "" when it did."""
    intervals = steady_s / INTERVAL_S
    if ticks < MIN_TICK_SHARE * intervals:
        return (
            f"the controller ticked {ticks} times in {intervals:.0f} intervals after the "
            "warm-up: it stopped or stalled (its log on stderr says why)"
        )
    if counters["write_path"] != "packet_out" or writes < ticks:
        return f"{writes} writes in {ticks} ticks by {counters['write_path']}, not PacketOut"
    if counters["config_acks"] < ACKED_SHARE * counters["writes"]:
        return f"the switch acknowledged {counters['config_acks']} of {counters['writes']} writes"
    return ""


def plot(samples: list[Sample], warm_s: float, path: Path) -> None:
    plt = plots.pyplot()

    t = np.array([s.time_s for s in samples])
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for ax, field in zip(axes, ("controller_rss_kb", "switch_rss_kb"), strict=True):
        ax.plot(t, np.array([getattr(s, field) for s in samples]) / 1024)
        ax.axvspan(0, warm_s, color="0.9", label="warm-up (left out)")
        ax.set_ylabel(f"{field.split('_')[0]} RSS (MiB)")
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("time since the controller was ready (s)")
    fig.suptitle("controller and switch memory under PacketOut threshold writes")
    plots.save(fig, path, dpi=100)


def report(
    samples: list[Sample], counters: dict[str, Any], warm_s: float, short: str,
    args: argparse.Namespace,
) -> None:  # fmt: skip
    t = np.array([s.time_s for s in samples])
    first, last = samples[int(np.argmax(t >= warm_s))], samples[-1]
    ticks, writes = last.ticks - first.ticks, last.writes - first.writes
    leak_per_tick_kb = ticks * LEAK_BYTES_PER_WRITE / 1024
    ran = {
        "policy": args.policy, "ports": args.ports, "interval_s": INTERVAL_S,
        "duration_s": last.time_s, "warmup_s": warm_s, "samples": len(samples),
        "ticks": last.ticks, "ticks_expected": round(last.time_s / INTERVAL_S),
        "packet_out_writes": last.writes, "ticks_steady": ticks, "writes_steady": writes,
        **{k: v for k, v in counters.items() if k not in ("ticks", "writes")},
        "leak_one_write_per_tick_kb": round(leak_per_tick_kb),
        "leak_every_write_kb": round(writes * LEAK_BYTES_PER_WRITE / 1024),
    }  # fmt: skip
    problem = ran_problem(ticks, writes, last.time_s - first.time_s, counters) or short
    for process in ("controller", "switch"):
        rss = np.array([getattr(s, f"{process}_rss_kb") for s in samples], np.float64)
        verdict = judge(t, rss, warm_s, leak_per_tick_kb)
        if problem:  # the memory of a run that did not do what is asked says nothing
            verdict.update(flat=None, not_measured=problem)
        print(json.dumps({
            "bench": "controller_memory", "process": process, **verdict, **ran,
        }), flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=DURATION_S)
    parser.add_argument("--ports", type=int, default=PORTS)
    parser.add_argument("--policy", default=Alternating.name, help="or e.g. acc:default")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(json.dumps({"bench": "controller_memory", "skipped": "needs root (veths)"}))
        return 0
    samples, counters = run(args.ports, args.policy, args.duration_s)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "samples.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(Sample._fields)
        writer.writerows(samples)
    warm_s, short = warm_up(samples, args.duration_s)
    plot(samples, warm_s, args.out / "rss.png")
    report(samples, counters, warm_s, short, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
