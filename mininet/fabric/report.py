"""Compare runs (phases) of the same traffic: FCT slowdown by size bucket, throughput, queues.

A phase is a directory written by `run_scenario` (flow records, sent records, probes,
scenario.json), plus, when a controller ran, `telemetry.jsonl`: one row per port and
interval, `{"t": <wall clock at the interval's end>, "switch": <name>, "port": <int>}` and
every field of ecntune.telemetry.PortTelemetry (the controller adds its guard's `mode`, the
`policy` in control, `judged_by`: the reward the guard judges it by, and on the interval a
mode changed, `mode_change`: why). `write_report`
turns phases into

    comparison.csv   phase × size bucket: flows, FCT and slowdown statistics
    summary.json     per phase: completion counts, goodput, queue and marking statistics
    fct_cdf.png      FCT slowdown CDF per size bucket, one line per phase
    queues.png       queue depth and ECN thresholds over time per port, one row per phase,
                     a dashed line where the traffic changes mid-run
    report.md        the table and the facts a reader needs (hosts' cc, ECN, target, and
                     who was in control: the share of intervals the agent, its baseline
                     preset and its fallback ran, and when and why the controller fell back;
                     where the traffic changes mid-run, every busy port's thresholds before
                     and after it: does the policy follow the change?)
    switch_thresholds.png  for phases whose policy ran in the switch (`switch_thresholds.jsonl`,
                     fabric/watch.py): the registers over time, the controller's end marked,
                     and in report.md how often each port's setting changed with and without
                     a controller

and prints the table. A phase whose agent was benched is labelled so wherever its numbers
appear: its FCTs are part agent, part static preset, and must not be read as the agent's.
Where no telemetry exists, the receiver port's queue is estimated from the probes' one-way
delays (delay above the minimum × the port's rate).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ecntune import plots
from ecntune.fabric.scenario import sent_files
from ecntune.telemetry import PortTelemetry
from ecntune.topology import MTU_BYTES, Topology
from ecntune.traffic.fct import (
    MICE_BYTES,
    SIZE_BUCKETS,
    BucketSummary,
    ideal_fct,
    slowdown,
    summarize,
)
from ecntune.traffic.records import (
    FlowRecord,
    PacketRecord,
    SentRecord,
    iter_jsonl,
    read_records,
)
from ecntune.traffic.spec import TrafficSpec

TELEMETRY_KEYS = frozenset({"t", "switch", "port", *PortTelemetry._fields})
# a probe delayed by less than half a full frame found the queue empty
EMPTY_QUEUE_BYTES = MTU_BYTES / 2


def telemetry_row(t: float, switch: str, port: int, tel: PortTelemetry) -> dict[str, Any]:
    """One line of telemetry.jsonl (write it with json.dumps): what the controller logs."""
    fields = {k: float(v) for k, v in tel._asdict().items()}
    return {"t": t, "switch": switch, "port": port, **fields}


@dataclass
class Phase:
    """Everything one run left in its directory."""

    name: str
    outdir: Path
    meta: dict[str, Any]
    flows: list[FlowRecord]
    sent: list[SentRecord]
    probes: list[PacketRecord] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    switch_thresholds: list[dict[str, Any]] = field(default_factory=list)  # fabric/watch.py

    @property
    def topology(self) -> Topology:
        return Topology.from_dict(self.meta["topology"])


def load_phase(name: str, outdir: Path) -> Phase:
    meta_path = outdir / "scenario.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{outdir} holds no run (no scenario.json)")
    probes = outdir / "probe.jsonl"
    telemetry = outdir / "telemetry.jsonl"
    watched = outdir / "switch_thresholds.jsonl"
    rows = list(iter_jsonl(telemetry)) if telemetry.exists() else []
    for row in rows:
        if not set(row) >= TELEMETRY_KEYS:
            raise ValueError(f"{telemetry}: missing {sorted(TELEMETRY_KEYS - set(row))}")
    return Phase(
        name=name,
        outdir=outdir,
        meta=json.loads(meta_path.read_text()),
        flows=read_records(sorted(outdir.glob("*.fct.jsonl")), FlowRecord),
        sent=read_records(sent_files(outdir), SentRecord),
        probes=read_records([probes], PacketRecord) if probes.exists() else [],
        telemetry=rows,
        switch_thresholds=list(iter_jsonl(watched)) if watched.exists() else [],
    )


def flow_slowdowns(phase: Phase) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sizes, FCTs and ideal FCTs of the phase's completed flows (bottleneck: the host links)."""
    topo = phase.topology
    by_ip = {h.ip: h for h in topo.hosts.values()}

    def host_bw(ip: str) -> float:
        h = by_ip[ip]
        return topo.port_bw(h.switch, h.switch_port)

    size = np.array([f.size for f in phase.flows], dtype=np.float64)
    fct = np.array([f.fct for f in phase.flows], dtype=np.float64)
    bw = np.array([min(host_bw(f.src), host_bw(f.dst)) for f in phase.flows])
    return size, fct, ideal_fct(size, bw, phase.meta["base_rtt_s"])


def port_queues(phase: Phase) -> dict[str, dict[str, np.ndarray]]:
    """Per port ("switch:port"): interval end time, mean queue bytes, kmin and kmax, from
    telemetry; `decided` marks the intervals the phase's own policy set (not its baseline
    preset or a fallback)."""
    out: dict[str, dict[str, list[float]]] = {}
    for row in phase.telemetry:
        series = out.setdefault(f"{row['switch']}:{row['port']}", {})
        q = row["qdepth_sum_bytes"] / row["qdepth_samples"] if row["qdepth_samples"] else 0.0
        for key, value in (
            ("t", row["t"] - phase.meta["t0"]),
            ("interval", row["interval_s"]),
            ("decided", row.get("mode", "agent") == "agent"),
            ("queue", q),
            ("kmin", row["kmin_bytes"]),
            ("kmax", row["kmax_bytes"]),
            ("marked", row["marked_pkts"]),
            ("tx", row["tx_pkts"]),
        ):
            series.setdefault(key, []).append(value)
    return {port: {k: np.array(v) for k, v in s.items()} for port, s in sorted(out.items())}


class TrafficChange(NamedTuple):
    at_s: float  # since the traffic began
    what: str  # in words: "load 40% → 70%"
    end_s: float  # the last arrival


def traffic_change(phase: Phase) -> TrafficChange | None:
    """When and how the phase's traffic changed mid-run (from the scenario in
    scenario.json: a storm's start, a workload switch or load step) and when its arrivals
    ended, None if it did not change."""
    scenario = phase.meta.get("scenario", {})
    if "duration_s" not in scenario:
        return None
    known = {f.name for f in fields(TrafficSpec)}
    traffic = TrafficSpec(**{k: v for k, v in scenario.items() if k in known})
    at_s = traffic.change_at_s(scenario["duration_s"])
    if at_s is None:
        return None
    return TrafficChange(at_s, traffic.describe_change(), scenario["duration_s"])


@dataclass(frozen=True)
class ThresholdShift:
    """One busy port's mean thresholds and queue over the intervals its phase's policy set,
    before and after the traffic changed mid-run: does the policy follow the change? (A
    static setting shows the same thresholds on both sides.)"""

    port: str
    intervals: tuple[int, int]  # before, after
    kmin_bytes: tuple[float, float]
    kmax_bytes: tuple[float, float]
    queue_bytes: tuple[float, float]


def threshold_shifts(phase: Phase, change_s: float, end_s: float) -> list[ThresholdShift]:
    """Per port that sent anything: the intervals within the traffic (from its start to
    `end_s`, its last arrival) that ended by the change against those that began after it;
    one that straddles the change, the start or the end counts for neither side."""
    shifts = []
    for port, s in port_queues(phase).items():
        start = s["t"] - s["interval"]
        before = s["decided"] & (start >= 0) & (s["t"] <= change_s)
        after = s["decided"] & (start >= change_s) & (s["t"] <= end_s)
        if s["tx"].sum() == 0 or not before.any() or not after.any():
            continue
        kmin, kmax, queue = (
            (float(s[key][before].mean()), float(s[key][after].mean()))
            for key in ("kmin", "kmax", "queue")
        )
        counts = (int(before.sum()), int(after.sum()))
        shifts.append(ThresholdShift(port, counts, kmin, kmax, queue))
    return shifts


def probe_queue(phase: Phase) -> dict[str, np.ndarray]:
    """The receiver port's queue as the probes saw it: (delay − min delay) × port rate."""
    if not phase.probes:
        return {}
    topo = phase.topology
    rx = topo.hosts[phase.meta["roles"]["receiver"]]
    rate_bps = topo.port_bw(rx.switch, rx.switch_port)
    owd = np.array([p.owd for p in phase.probes])
    return {
        "t": np.array([p.t_send for p in phase.probes]) - phase.meta["t0"],
        "queue": (owd - owd.min()) * rate_bps / 8,
        "ce": np.array([p.ecn == 3 for p in phase.probes]),
    }


@dataclass(frozen=True)
class MarkingCheck:
    """How the probes' CE marks relate to the queue they joined, against one ECN setting."""

    probes: int
    marked: int
    marked_below_kmin: int  # CE although the queue was clearly below kmin: must be 0
    unmarked_above_kmax: int  # not CE although the queue was clearly above kmax: must be 0
    queue_max_bytes: float  # the probes' estimate
    # probes whose delay said "above kmax" while the switch's own telemetry never held more
    # than kmax + slack around then: delayed outside the queue (a descheduled switch
    # process, the sender's qdisc), not counted as unmarked above kmax. 0 without telemetry.
    delayed_outside_switch: int = 0
    # probes sent while the switch's telemetry showed the port above kmax + slack (the rest
    # could only have been delayed outside): what the outside delays' rate applies to
    probes_switch_at_kmax: int = 0
    switch_queue_max_bytes: float = math.nan  # the receiver port's telemetry, when logged
    # CE below kmin between a probe that saw the buffer full and the next that saw the
    # queue empty: not counted in marked_below_kmin (see check_marking). 0 without a buffer.
    marked_below_kmin_after_tail_drop: int = 0

    @property
    def outside_delay_rate(self) -> float:
        """The share of probes delayed outside the switch, measured where the switch held
        less than kmax; 0 without telemetry."""
        below = self.probes - self.probes_switch_at_kmax
        return self.delayed_outside_switch / below if below and self.delayed_outside_switch else 0.0


def check_marking(
    phase: Phase,
    kmin_bytes: float,
    kmax_bytes: float,
    slack_bytes: float = 3000,
    buffer_bytes: float | None = None,
) -> MarkingCheck:
    """Compare probe marks with RED's rule; `slack_bytes` absorbs the estimate's error
    (about one packet of delay either way, and enqueue- vs dequeue-time depth). Where the
    controller logged the receiver port's telemetry, a probe only counts as having seen a
    queue above kmax if the switch itself held more than kmax + slack around then.

    With `buffer_bytes` (the port's buffer limit), a probe that saw the buffer full (within
    the slack) means tail drops, whose bytes ecn.p4's estimate keeps until the queue next
    runs empty, each departure seeing at most a full frame per packet behind it (p4src/ecn.p4
    `leave_queue`, BMv2 alike: small frames can look larger): marks below kmin from then
    until a probe sees the queue empty are counted apart, not as violations."""
    probe = probe_queue(phase)
    if not probe:
        raise ValueError(f"{phase.name} has no probes to check marking with")
    q, ce = probe["queue"], probe["ce"]
    below_kmin = ce & (q < kmin_bytes - slack_bytes)
    inflated = (
        after_tail_drop(probe["t"], q, buffer_bytes - slack_bytes)
        if buffer_bytes is not None
        else np.zeros_like(ce)
    )
    above = ~ce & (q > kmax_bytes + slack_bytes)
    held = receiver_queue_max(phase, probe["t"])
    # the switch itself must have held more than kmax by the same slack: a probe cannot have
    # queued behind more than the port ever held, the rest of its delay was outside it (on a
    # CPU-starved machine a port that touched kmax once in an interval told apart nothing)
    at_kmax = held >= kmax_bytes + slack_bytes if held is not None else np.zeros_like(above)
    outside = above & ~at_kmax if held is not None else np.zeros_like(above)
    return MarkingCheck(
        probes=int(q.size),
        marked=int(ce.sum()),
        marked_below_kmin=int((below_kmin & ~inflated).sum()),
        unmarked_above_kmax=int((above & ~outside).sum()),
        queue_max_bytes=float(q.max()),
        delayed_outside_switch=int(outside.sum()),
        probes_switch_at_kmax=int(at_kmax.sum()),
        switch_queue_max_bytes=float(held.max()) if held is not None else math.nan,
        marked_below_kmin_after_tail_drop=int((below_kmin & inflated).sum()),
    )


def after_tail_drop(t: np.ndarray, queue: np.ndarray, full_bytes: float) -> np.ndarray:
    """Which probes were sent between one that saw a queue of `full_bytes` or more and the
    next one (in send order) that saw it empty: less than half a frame ahead
    (EMPTY_QUEUE_BYTES), so the packet before it left nothing behind."""
    inflated = np.zeros(queue.size, dtype=bool)
    dropping = False
    for i in np.argsort(t, kind="stable"):
        if queue[i] >= full_bytes:
            dropping = True
        elif queue[i] < EMPTY_QUEUE_BYTES:
            dropping = False
        inflated[i] = dropping
    return inflated


def receiver_queue_max(phase: Phase, t: np.ndarray) -> np.ndarray | None:
    """The receiver port's own largest queue (telemetry `qdepth_max_bytes`) in the interval
    around each time t (s from t0), or None without telemetry. The interval before and after
    count too: a digest's interval and the controller's tick that logged it are not aligned."""
    rx = phase.topology.hosts[phase.meta["roles"]["receiver"]]
    rows = sorted(
        (r["t"] - phase.meta["t0"], r["qdepth_max_bytes"])
        for r in phase.telemetry
        if r["switch"] == rx.switch and r["port"] == rx.switch_port
    )
    if not rows:
        return None
    end, most = (np.array(col) for col in zip(*rows, strict=True))
    i = np.searchsorted(end, t)  # the first interval ending at or after t
    near = [most[np.clip(i + k, 0, end.size - 1)] for k in (-1, 0, 1)]
    return np.maximum.reduce(near)


@dataclass(frozen=True)
class ControlSummary:
    """Who set the thresholds during a phase, from the controller's telemetry rows.

    Shares count decision intervals (one per switch and tick, not per port). Modes are the
    guard's (controller/safety.py): "baseline" (the static preset measured before the agent
    starts), "agent" (the configured policy; a static one is always here) and "fallback"."""

    intervals: int
    shares: dict[str, float]  # mode -> share of intervals
    policies: dict[str, float]  # policy in control -> share of intervals
    changes: list[dict[str, Any]]  # {"t_s", "switch", "change"} in order
    rewrites: int = 0  # threshold writes the telemetry never showed (the controller resent them)
    judged_by: tuple[str, ...] = ()  # the guard's reward, where not the agent's own

    @property
    def fell_back(self) -> bool:
        return self.shares.get("fallback", 0.0) > 0

    def fallbacks(self) -> list[str]:
        """Each fall back as 'at 15.2 s on s1: why'."""
        out = []
        for c in self.changes:
            for change in c["change"].split("; "):
                if change.startswith("fallback: "):
                    why = change.removeprefix("fallback: ").removeprefix(f"{c['switch']}: ")
                    out.append(f"at {c['t_s']:.1f} s on {c['switch']}: {why}")
        return out

    def describe(self) -> str:
        """'in control: acc:default 54%, static:secn1 46%; FELL BACK at 15.2 s on s1: why'."""
        parts = ", ".join(f"{p} {share:.0%}" for p, share in self.policies.items())
        notes = [f"in control: {parts}"]
        if self.shares.get("baseline"):
            notes[0] += f" (the preset's baseline: {self.shares['baseline']:.0%})"
        notes += [f"FELL BACK {fall}" for fall in self.fallbacks()[:1]]
        for why in self.judged_by:  # "acc (trained on mice_slowdown)"
            judged, trained = why.removesuffix(")").split(" (trained on ")
            notes.append(
                f"the guard judged the agent by the {judged} reward, not by its own {trained}, "
                "which no telemetry carries"
            )
        if self.rewrites:
            notes.append(f"{self.rewrites} threshold writes not seen in telemetry, resent")
        return "; ".join(notes)


def summarize_control(phase: Phase) -> ControlSummary | None:
    """None for phases without controller rows (no controller, or a log without modes)."""
    rows = [r for r in phase.telemetry if "mode" in r]
    if not rows:
        return None
    ticks: dict[tuple[str, float], dict[str, Any]] = {}
    for r in rows:
        ticks.setdefault((r["switch"], r["t"]), r)
    n = len(ticks)
    shares: dict[str, float] = {}
    policies: dict[str, float] = {}
    for r in ticks.values():
        shares[r["mode"]] = shares.get(r["mode"], 0.0) + 1 / n
        policies[r["policy"]] = policies.get(r["policy"], 0.0) + 1 / n
    t0 = phase.meta["t0"]
    changes = [
        {"t_s": t - t0, "switch": sw, "change": r["mode_change"]}
        for (sw, t), r in sorted(ticks.items(), key=lambda kv: kv[0][1])
        if r.get("mode_change")
    ]
    last: dict[tuple[str, int], int] = {}  # cumulative per port: the last row holds the count
    for r in rows:
        last[(r["switch"], r["port"])] = r.get("rewrites", 0)
    judged_by = sorted({r["judged_by"] for r in rows if "trained on" in r.get("judged_by", "")})
    return ControlSummary(n, shares, policies, changes, sum(last.values()), tuple(judged_by))


@dataclass(frozen=True)
class SwitchDecisions:
    """One port's thresholds as read from the switch's registers (fabric/watch.py): how
    often they changed while the controller ran and after it was killed."""

    switch: str
    port: int
    changes_with_controller: int
    changes_after_kill: int
    settings_after_kill: int  # distinct (kmin, kmax, pmax) held after the kill


def switch_decisions(phase: Phase) -> tuple[float | None, list[SwitchDecisions]]:
    """(when the controller was killed, s into the phase, or None; every port whose
    registers changed), from the phase's switch_thresholds.jsonl."""
    t0 = phase.meta["t0"]
    kill = next((r["t"] - t0 for r in phase.switch_thresholds
                 if r.get("event") == "controller killed"), None)  # fmt: skip
    series: dict[tuple[str, int], list[tuple[float, tuple[int, int, int]]]] = {}
    for r in phase.switch_thresholds:
        if "port" in r:
            key = (r["switch"], r["port"])
            series.setdefault(key, []).append((r["t"] - t0, (r["kmin"], r["kmax"], r["pmax_bp"])))
    out = []
    for (sw, port), reads in sorted(series.items()):
        flips = [t for (_, a), (t, b) in itertools.pairwise(reads) if a != b]
        if not flips:
            continue
        after = {v for t, v in reads if kill is not None and t >= kill}
        late = sum(kill is not None and t >= kill for t in flips)
        out.append(SwitchDecisions(sw, port, len(flips) - late, late, len(after)))
    return kill, out


def _switch_section(phases: list[Phase]) -> str:
    """report.md's account of thresholds the switches set themselves (in-switch phases)."""
    lines = []
    for phase in phases:
        if not phase.switch_thresholds:
            continue
        kill, ports = switch_decisions(phase)
        when = f"killed at {kill:.1f} s" if kill is not None else "never killed"
        counts = ", ".join(
            f"{d.switch} port {d.port}: {d.changes_with_controller} changes with it, "
            f"**{d.changes_after_kill} after** ({d.settings_after_kill} settings)"
            for d in ports
        )
        lines.append(f"- {phase.name}: controller {when}; {counts or 'no thresholds changed'}")
    if not lines:
        return ""
    return (
        "## Thresholds the switches set themselves\n\n"
        "The policy ran in the P4 program (`--in-switch`). Once the controller is gone no "
        "digest is read and no telemetry row written, so these counts come from the "
        "threshold registers, read over each switch's control port every 0.5 s "
        "(`switch_thresholds.jsonl`, `switch_thresholds.png`): changes of a port's "
        "(kmin, kmax, pmax) between two reads.\n\n"
        + "\n".join(lines)
        + "\n\n![thresholds read from the switches](switch_thresholds.png)\n\n"
    )


def plot_switch_thresholds(phases: list[Phase], path: Path) -> None:
    """kmin and kmax of every port whose registers changed, per in-switch phase."""
    plt = plots.pyplot()

    shown = [p for p in phases if p.switch_thresholds]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 3 * len(shown)), squeeze=False)
    for ax, phase in zip(axes[:, 0], shown, strict=True):
        kill, ports = switch_decisions(phase)
        t0 = phase.meta["t0"]
        for i, d in enumerate(ports):
            rows = [r for r in phase.switch_thresholds
                    if r.get("switch") == d.switch and r.get("port") == d.port]  # fmt: skip
            t = [r["t"] - t0 for r in rows]
            color = f"C{i % 10}"
            ax.step(t, [r["kmin"] / 1e3 for r in rows], where="post", color=color, ls="--",
                    lw=0.8, label=f"{d.switch}:{d.port} kmin")  # fmt: skip
            ax.step(t, [r["kmax"] / 1e3 for r in rows], where="post", color=color,
                    label=f"{d.switch}:{d.port} kmax")  # fmt: skip
        if kill is not None:
            ax.axvline(kill, color="k", ls="--", lw=1, label="controller killed")
        ax.set(title=phase.name, xlabel="time (s)", ylabel="threshold (KB)")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=6, ncol=3, loc="upper right")
    plots.save(fig, path)


@dataclass(frozen=True)
class PhaseSummary:
    phase: str
    buckets: list[BucketSummary]
    flows_sent: int
    flows_completed: int
    flows_recorded: int
    goodput_bps: float  # completed payload bytes × 8 / run length
    queue_mean_bytes: float
    queue_p99_bytes: float
    queue_source: str  # "telemetry", "probes" or "none"
    marked_fraction: float  # of packets (telemetry) or of probes (probes)
    cc: str
    ecn: bool
    switch: str
    control: ControlSummary | None = None
    # switch -> the engine that forwarded (Fabric.dataplanes; empty in runs recorded before)
    dataplane: dict[str, str] = field(default_factory=dict)
    # of the mice sent (< 100 KB), the share whose sender saw a retransmission timeout: their
    # FCTs hold a >= 200 ms timer, not the queue (NaN where the kernel does not report RTOs)
    mice_rto_share: float = math.nan
    flows_with_rto: int = 0
    # the traffic's mid-run change (None: none) and, per busy port, the thresholds around it
    change_at_s: float | None = None
    change: str = ""
    shifts: list[ThresholdShift] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The phase's name in tables, marked where its agent was benched."""
        return self.phase + (" [fell back]" if self.control and self.control.fell_back else "")


def summarize_phase(phase: Phase) -> PhaseSummary:
    size, fct, ideal = flow_slowdowns(phase)
    span = phase.meta["t_end"] - phase.meta["t0"]
    queues, probe = port_queues(phase), probe_queue(phase)
    if queues:
        busy = np.concatenate([s["queue"][s["tx"] > 0] for s in queues.values()])
        tx = sum(float(s["tx"].sum()) for s in queues.values())
        marked = sum(float(s["marked"].sum()) for s in queues.values())
        q_mean, q_p99 = _mean_p99(busy)
        source, marked_fraction = "telemetry", marked / tx if tx else math.nan
    elif probe:
        q_mean, q_p99 = _mean_p99(probe["queue"])
        source, marked_fraction = "probes", float(probe["ce"].mean())
    else:
        q_mean = q_p99 = marked_fraction = math.nan
        source = "none"
    change = traffic_change(phase)
    return PhaseSummary(
        phase=phase.name,
        buckets=summarize(size, fct, ideal),
        flows_sent=len(phase.sent),
        flows_completed=sum(s.completed for s in phase.sent),
        flows_recorded=len(phase.flows),
        goodput_bps=float(size.sum()) * 8 / span if span > 0 else math.nan,
        queue_mean_bytes=q_mean,
        queue_p99_bytes=q_p99,
        queue_source=source,
        marked_fraction=marked_fraction,
        cc=phase.meta["cc"],
        ecn=phase.meta["ecn"],
        switch=phase.meta["switch"],
        control=summarize_control(phase),
        dataplane=phase.meta.get("dataplane", {}),
        **_timeouts(phase),
        change_at_s=change.at_s if change else None,
        change=change.what if change else "",
        shifts=threshold_shifts(phase, change.at_s, change.end_s) if change else [],
    )


def mice_timeouts(phase: Phase) -> tuple[int, int]:
    """(mice sent whose sender reported its RTOs, those of them that saw one)."""
    mice = [r for r in phase.sent if r.rtos is not None and r.size < MICE_BYTES]
    return len(mice), sum(r.rtos > 0 for r in mice)


def _timeouts(phase: Phase) -> dict[str, Any]:
    mice, with_rto = mice_timeouts(phase)
    return {
        "mice_rto_share": with_rto / mice if mice else math.nan,
        "flows_with_rto": sum(r.rtos > 0 for r in phase.sent if r.rtos is not None),
    }


def _mean_p99(x: np.ndarray) -> tuple[float, float]:
    return (float(x.mean()), float(np.percentile(x, 99))) if x.size else (math.nan, math.nan)


# -- output ------------------------------------------------------------------------------------


def comparison_rows(summaries: list[PhaseSummary]) -> list[dict[str, Any]]:
    return [
        {"phase": s.phase, "fell_back": bool(s.control and s.control.fell_back), **asdict(b)}
        for s in summaries
        for b in s.buckets
    ]


def format_table(summaries: list[PhaseSummary]) -> str:
    """The comparison as fixed-width text: slowdown per bucket, throughput and queue, and who
    was in control (a phase whose agent fell back is labelled in every section)."""
    w = max(len("phase"), *(len(s.label) for s in summaries)) + 2
    head = f"{'phase':<{w}}{'bucket':<10}{'flows':>6}{'mean':>8}{'p50':>8}{'p95':>8}{'p99':>8}"
    lines = ["FCT slowdown", head, "-" * len(head)]
    for s in summaries:
        for b in s.buckets:
            lines.append(
                f"{s.label:<{w}}{b.bucket:<10}{b.flows:>6}{_f(b.slowdown_mean):>8}"
                f"{_f(b.slowdown_p50):>8}{_f(b.slowdown_p95):>8}{_f(b.slowdown_p99):>8}"
            )
    head = f"{'phase':<{w}}{'flows done':>12}{'goodput':>12}{'queue mean':>12}{'queue p99':>11}"
    head += f"{'marked':>8}{'mice RTO':>10}"
    lines += ["", "Throughput and queue", head, "-" * len(head)]
    for s in summaries:
        lines.append(
            f"{s.label:<{w}}{f'{s.flows_recorded}/{s.flows_sent}':>12}"
            f"{f'{s.goodput_bps / 1e6:.2f} Mb/s':>12}{_kb(s.queue_mean_bytes):>12}"
            f"{_kb(s.queue_p99_bytes):>11}{_pct(s.marked_fraction):>8}"
            f"{_pct(s.mice_rto_share):>10}"
        )
    controlled = [s for s in summaries if s.control]
    if controlled:
        lines += ["", "Control (share of decision intervals)"]
        lines += [f"{s.label:<{w}}{s.control.describe()}" for s in controlled if s.control]
    changed = [s for s in summaries if s.shifts]
    if changed:
        first = changed[0]
        head = f"At the traffic change ({first.change} at {first.change_at_s:g} s)"
        lines += ["", head + ", mean before → after"]
        lines += [f"{s.label:<{w}}{_shift_line(s.shifts)}" for s in changed]
    return "\n".join(lines)


def _shift_line(shifts: list[ThresholdShift]) -> str:
    """The port the change hit hardest (its queue rose most) against the others, as
    'kmin a → b KB, kmax c → d KB, queue e → f KB': a policy that follows the change moves
    that port's thresholds apart from the rest (the rest show any drift the change did not
    cause, such as an agent settling after its baseline)."""

    def arrows(group: list[ThresholdShift]) -> str:
        parts = []
        for key in ("kmin_bytes", "kmax_bytes", "queue_bytes"):
            before, after = np.mean([getattr(x, key) for x in group], axis=0) / 1e3
            parts.append(f"{key.removesuffix('_bytes')} {before:.1f} → {after:.1f} KB")
        return ", ".join(parts)

    hit = max(shifts, key=lambda x: x.queue_bytes[1] - x.queue_bytes[0])
    rest = [x for x in shifts if x is not hit]
    line = f"{hit.port} (queue rose most): {arrows([hit])}"
    return line + (f"; the other {len(rest)} ports: {arrows(rest)}" if rest else "")


def _shift_section(summaries: list[PhaseSummary]) -> str:
    """report.md's table of every busy port's thresholds around the traffic change."""
    changed = [s for s in summaries if s.shifts]
    if not changed:
        return ""
    first = changed[0]
    rows = [
        f"| {s.label} | {x.port} | {x.intervals[0]} / {x.intervals[1]} | "
        + " | ".join(
            f"{getattr(x, k)[0] / 1e3:.1f} → {getattr(x, k)[1] / 1e3:.1f}"
            for k in ("kmin_bytes", "kmax_bytes", "queue_bytes")
        )
        + " |"
        for s in changed
        for x in s.shifts
    ]
    return (
        f"## Thresholds around the traffic change ({first.change} at {first.change_at_s:g} s)\n\n"
        "Mean over the intervals each phase's own policy set (its baseline preset's and any "
        "fallback's intervals left out), those that ended by the change against those that "
        "began after it; a static phase shows the same thresholds on both sides. The dashed "
        "line in queues.png marks the change.\n\n"
        "| phase | port | intervals before / after | kmin KB | kmax KB | queue KB |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
    )


def _f(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _kb(x: float) -> str:
    return "-" if math.isnan(x) else f"{x / 1e3:.1f} KB"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def plot_fct_cdfs(phases: list[Phase], path: Path) -> None:
    plt = plots.pyplot()

    fig, axes = plt.subplots(1, len(SIZE_BUCKETS), figsize=(4 * len(SIZE_BUCKETS), 3.2))
    for phase in phases:
        size, fct, ideal = flow_slowdowns(phase)
        sd = slowdown(fct, ideal)
        for ax, b in zip(axes, SIZE_BUCKETS, strict=True):
            x = np.sort(sd[(size >= b.min_bytes) & (size < b.max_bytes)])
            if x.size:
                ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=phase.name)
    for ax, b in zip(axes, SIZE_BUCKETS, strict=True):
        ax.set(title=f"{b.name} flows", xlabel="FCT slowdown", xscale="log", ylim=(0, 1.01))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CDF")
    axes[0].legend()
    plots.save(fig, path)


def plot_queues(phases: list[Phase], path: Path) -> None:
    """Queue and kmin/kmax over time per busy port (the probes' estimate without telemetry)."""
    plt = plots.pyplot()

    fig, axes = plt.subplots(len(phases), 1, figsize=(9, 3 * len(phases)), squeeze=False)
    for ax, phase in zip(axes[:, 0], phases, strict=True):
        queues = {p: s for p, s in port_queues(phase).items() if s["tx"].sum() > 0}
        for i, (port, s) in enumerate(queues.items()):
            color = f"C{i % 10}"
            ax.plot(s["t"], s["queue"] / 1e3, color=color, label=f"{port} queue")
            ax.plot(s["t"], s["kmin"] / 1e3, color=color, ls="--", lw=0.8, label=f"{port} kmin")
            ax.plot(s["t"], s["kmax"] / 1e3, color=color, ls=":", lw=0.8, label=f"{port} kmax")
        probe = probe_queue(phase)
        if not queues and probe:
            ax.plot(probe["t"], probe["queue"] / 1e3, lw=0.7, label="receiver port (probes)")
            ce = probe["ce"]
            ax.scatter(probe["t"][ce], probe["queue"][ce] / 1e3, s=4, c="red", label="CE-marked")
        change = traffic_change(phase)
        if change:
            ax.axvline(change.at_s, color="k", ls="--", lw=1, label=change.what)
        ax.set(title=phase.name, xlabel="time (s)", ylabel="queue (KB)")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=6, ncol=3, loc="upper right")
    plots.save(fig, path)


def _fallback_warnings(summaries: list[PhaseSummary]) -> str:
    """What a reader must see first: phases whose numbers are not the agent's alone."""
    lines = []
    for s in summaries:
        if s.control and s.control.fell_back:
            lines.append(
                f"> **{s.phase} did not run its agent throughout**: the controller fell back "
                f"to the static preset for {s.control.shares['fallback']:.0%} of its intervals "
                f"({'; '.join(s.control.fallbacks())}). Its numbers mix agent and preset.\n"
            )
    return "\n".join(lines) + ("\n" if lines else "")


def _engines(dataplane: dict[str, str]) -> str:
    """' (data plane: native (C))', or each switch's where they differ ('' if unknown)."""
    engines = set(dataplane.values())
    if not engines:
        return ""
    if len(engines) == 1:
        return f" (data plane: {engines.pop()})"
    return " (data plane: " + "; ".join(f"{k} {v}" for k, v in sorted(dataplane.items())) + ")"


def write_report(phases: list[Phase], outdir: Path, title: str = "ecntune run") -> str:
    """Write every output named in the module docstring; return the table."""
    outdir.mkdir(parents=True, exist_ok=True)
    summaries = [summarize_phase(p) for p in phases]
    rows = comparison_rows(summaries)
    with open(outdir / "comparison.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (outdir / "summary.json").write_text(
        json.dumps([asdict(s) for s in summaries], indent=1, allow_nan=True)
    )
    plot_fct_cdfs(phases, outdir / "fct_cdf.png")
    plot_queues(phases, outdir / "queues.png")
    if any(p.switch_thresholds for p in phases):
        plot_switch_thresholds(phases, outdir / "switch_thresholds.png")
    table = format_table(summaries)
    facts = [
        f"- {s.label}: switch `{s.switch}`{_engines(s.dataplane)}, hosts' TCP `{s.cc}` with ECN "
        f"{'on' if s.ecn else 'off'}; {s.flows_completed}/{s.flows_sent} flows completed, "
        f"{s.flows_recorded} FCT records; queue from {s.queue_source}"
        + (f"; {s.control.describe()}" if s.control else "")
        + (
            f"; {s.mice_rto_share:.1%} of mice saw a retransmission timeout "
            f"({s.flows_with_rto} flows in all)"
            if not math.isnan(s.mice_rto_share)
            else ""
        )
        for s in summaries
    ]
    (outdir / "report.md").write_text(
        f"# {title}\n\n"
        + _fallback_warnings(summaries)
        + "\n".join(facts)
        + f"\n\n```\n{table}\n```\n\n"
        + _shift_section(summaries)
        + _switch_section(phases)
        + "![FCT slowdown CDFs](fct_cdf.png)\n\n![queues and thresholds](queues.png)\n"
    )
    return table
