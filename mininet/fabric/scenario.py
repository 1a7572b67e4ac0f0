"""Traffic for one run on a live fabric: the Poisson workload, incast bursts and queue probes.

    result = run_scenario(fabric, Scenario(duration_s=20, load=0.4), Path("results/static"))

Every tool runs inside its Mininet host (`host.popen` of `python -m ecntune.traffic.<tool>`)
and writes JSONL into the run's directory:
    <host>.fct.jsonl             FlowRecords of the flows <host> received
    <host>.workload.jsonl        SentRecords of <host>'s Poisson flows (after a switch or
                                 step halfway: <host>.after-switch.workload.jsonl)
    <host>.incast.jsonl          SentRecords of <host>'s incast flows
    probe.jsonl                  PacketRecords of the queue probes (ECN bits, one-way delay)
    scenario.json                the scenario, topology, hosts' ECN/cc, base RTT, start/end
    logs/<host>.<tool>.log       each tool's output
All senders start from one wall-clock t0, so incast senders fire together, and a scenario
with the same seed sends the same flows again (static thresholds vs an agent).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from ecntune.traffic.records import SentRecord, read_records
from ecntune.traffic.spec import TrafficSpec

if TYPE_CHECKING:
    from ecntune.fabric.net import Fabric

STARTUP_S = 2.0  # between launching the senders and t0: Python start-up on a busy machine
PROBE_BYTES = 64


@dataclass(frozen=True, kw_only=True)
class Scenario(TrafficSpec):
    """What traffic a run carries: the shared `TrafficSpec` (workload, load, incasts, a
    switch or step halfway) on named hosts, with probes and a seed. Host names default
    from the topology (see `resolve`)."""

    duration_s: float = 20.0
    max_flow_bytes: float | None = 1e6  # cap (a 30 MB WebSearch flow outlasts a short run)
    workload_hosts: tuple[str, ...] | None = None  # senders (None: every host)
    workload_dsts: tuple[str, ...] | None = None  # receivers (None: every other host)
    receiver: str | None = None  # incast target and probed host (None: the last host)
    probe_src: str | None = None  # a host that probes the receiver's port (None: no probes)
    probe_period_s: float = 0.01
    seed: int = 1
    drain_s: float = 30.0  # how long flows may run on after the last arrival

    def __post_init__(self) -> None:
        super().__post_init__()
        loads = [load for _, _, _, load in self.phases(max(self.duration_s, 0.0))]
        if self.duration_s <= 0 or not all(0 < load <= 1 for load in loads):
            raise ValueError("a scenario needs a positive duration and loads in (0, 1]")
        if not 0 <= self.incast_from_s < self.duration_s:
            raise ValueError("incast_from_s must fall within the scenario's duration")


@dataclass(frozen=True)
class Roles:
    """Which host does what, resolved against a topology."""

    workload: dict[str, list[str]]  # sender -> its destinations
    receiver: str
    incast_senders: list[str]
    probe_src: str | None


def resolve(scenario: Scenario, hosts: list[str]) -> Roles:
    """Fill in the defaults and reject host names the topology does not have."""
    named = [
        *(scenario.workload_hosts or ()),
        *(scenario.workload_dsts or ()),
        *([scenario.receiver] if scenario.receiver else []),
        *([scenario.probe_src] if scenario.probe_src else []),
    ]
    unknown = sorted(set(named) - set(hosts))
    if unknown:
        raise ValueError(f"the topology has no hosts {unknown}")
    receiver = scenario.receiver or hosts[-1]
    senders = list(scenario.workload_hosts) if scenario.workload_hosts is not None else hosts
    dsts = scenario.workload_dsts or hosts
    workload = {s: [d for d in dsts if d != s] for s in senders}
    others = [h for h in hosts if h not in (receiver, scenario.probe_src)]
    if scenario.incast_degree > len(others):
        raise ValueError(f"an incast of {scenario.incast_degree} needs as many other hosts")
    return Roles(
        workload={s: d for s, d in workload.items() if d},  # a sender needs somewhere to send
        receiver=receiver,
        incast_senders=others[: scenario.incast_degree],
        probe_src=scenario.probe_src,
    )


@dataclass(frozen=True)
class ScenarioResult:
    outdir: Path
    t0: float
    t_end: float
    base_rtt_s: float
    sent: int  # flows the senders started
    completed: int  # flows the senders saw confirmed
    recorded: int  # FlowRecords the receivers wrote


class _Tools:
    """Traffic processes of one scenario; whatever happens, stop() leaves none running."""

    def __init__(self, fabric: Fabric, logdir: Path) -> None:
        self.fabric, self.logdir = fabric, logdir
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, host: str, tool: str, *args: str, tag: str = "") -> subprocess.Popen:
        """Start `tool` on `host`, logging to logs/<host><tag>.<tool>.log."""
        log = self.logdir / f"{host}{tag}.{tool.replace(' ', '-')}.log"
        with open(log, "w") as out:
            argv = [sys.executable, "-m", f"ecntune.traffic.{tool.split()[0]}"]
            argv += [*tool.split()[1:], *args]
            proc = self.fabric.host(host).popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs[log.stem] = proc
        return proc

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        """Block until every started listener printed its 'listening' line."""
        deadline = time.monotonic() + timeout_s
        for name, proc in self.procs.items():
            log = self.logdir / f"{name}.log"
            while "listening on" not in log.read_text():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: {log.read_text()[-500:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not start listening within {timeout_s} s")
                time.sleep(0.05)

    def stop(self, grace_s: float = 3.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def base_rtt(fabric: Fabric, src: str, dst: str) -> float:
    """Minimum ping RTT (seconds) between two hosts; a clear error if the fabric drops it."""
    ip = fabric.topology.hosts[dst].ip
    out = fabric.host(src).cmd(f"ping -n -q -c 5 -i 0.05 -W 2 {ip}")
    m = re.search(r"= ([\d.]+)/", out)
    if not m:
        raise RuntimeError(
            f"{src} cannot reach {dst} ({ip}); does the fabric forward (routes installed)?\n{out}"
        )
    return float(m.group(1)) / 1e3


def run_scenario(fabric: Fabric, scenario: Scenario, outdir: Path) -> ScenarioResult:
    """Run the scenario's traffic to completion (or its drain deadline) with progress shown."""
    topo = fabric.topology
    roles = resolve(scenario, list(topo.hosts))
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "logs").mkdir(exist_ok=True)
    ip = {name: h.ip for name, h in topo.hosts.items()}
    rtt = base_rtt(fabric, next(h for h in topo.hosts if h != roles.receiver), roles.receiver)

    tools = _Tools(fabric, outdir / "logs")
    try:
        for h in topo.hosts:
            tools.spawn(h, "receiver", "--out", str(outdir / f"{h}.fct.jsonl"))
        if roles.probe_src:
            tools.spawn(roles.receiver, "burst listen", "--out", str(outdir / "probe.jsonl"))
        tools.wait_listening()
        t0 = time.time() + STARTUP_S

        def timing(start: float) -> list[str]:
            return ["--start-at", repr(start), "--cc", fabric.cc]

        senders = []
        # one sender per host and traffic phase (two around a switch or step halfway)
        phases = scenario.phases(scenario.duration_s)
        for p, (start_s, length_s, workload, load) in enumerate(phases):
            tag = "" if p == 0 else ".after-switch"
            for i, (h, dsts) in enumerate(roles.workload.items()):
                args = [*timing(t0 + start_s), "--src", ip[h], "--workload", workload]
                args += ["--load", str(load), "--duration", str(length_s)]
                args += [
                    "--link-bps",
                    str(topo.port_bw(topo.hosts[h].switch, topo.hosts[h].switch_port)),
                ]
                args += ["--seed", str(scenario.seed * 1000 + i + 100 * p)]
                args += ["--out", str(outdir / f"{h}{tag}.workload.jsonl")]
                args += ["--id-prefix", f"{ip[h]}-w{tag}"]  # unique across the phases
                args += [a for d in dsts for a in ("--dst", ip[d])]
                if scenario.max_flow_bytes:
                    args += ["--max-bytes", str(scenario.max_flow_bytes)]
                senders.append(tools.spawn(h, "sender", *args, tag=tag))
        incast_start = timing(t0 + scenario.incast_from_s)
        for h in roles.incast_senders:
            args = [*incast_start, "--src", ip[h], "--dst", ip[roles.receiver]]
            args += ["--size", str(scenario.incast_bytes)]
            args += ["--bursts", str(scenario.incast_bursts(scenario.duration_s))]
            args += ["--period", str(scenario.incast_period(scenario.duration_s))]
            args += ["--out", str(outdir / f"{h}.incast.jsonl")]
            senders.append(tools.spawn(h, "incast", *args))
        if roles.probe_src:
            args = ["--dst", ip[roles.receiver], "--sender", "0", "--start-at", repr(t0)]
            args += ["--bursts", str(int(scenario.duration_s / scenario.probe_period_s))]
            args += ["--period", str(scenario.probe_period_s), "--size", str(PROBE_BYTES)]
            senders.append(tools.spawn(roles.probe_src, "burst send", *args))
        _wait(senders, outdir, t0, scenario)
        time.sleep(0.5)  # the probe listener's last packets
        t_end = time.time()
    finally:
        tools.stop()
    result = _collect(outdir, t0, t_end, rtt)
    meta = {
        "scenario": asdict(scenario),
        "roles": asdict(roles),
        "topology": topo.to_dict(),
        "switch": fabric.options.switch,
        "dataplane": fabric.dataplanes(),
        "ecn": fabric.options.ecn,
        "cc": fabric.cc,
        "queue_depth_pkts": fabric.options.queue_depth_pkts,
        "base_rtt_s": rtt,
        "t0": t0,
        "t_end": t_end,
        "sent": result.sent,
        "completed": result.completed,
        "recorded": result.recorded,
    }
    (outdir / "scenario.json").write_text(json.dumps(meta, indent=1))
    return result


ControlPlane = Callable[["Fabric", Path], AbstractContextManager[object]]


def run_phases(
    fabric: Fabric, scenario: Scenario, phases: dict[str, ControlPlane], outdir: Path
) -> dict[str, ScenarioResult]:
    """The same scenario once per control plane (static thresholds, an agent, …).

    A control plane is entered with the fabric and the path its telemetry log should take
    (outdir/<phase>/telemetry.jsonl, see report.py) and holds for the phase's traffic. The
    scenario's seed fixes the flows, so every phase carries identical traffic.
    """
    results = {}
    for name, control in phases.items():
        phase_dir = outdir / name
        phase_dir.mkdir(parents=True, exist_ok=True)
        with control(fabric, phase_dir / "telemetry.jsonl"):
            results[name] = run_scenario(fabric, scenario, phase_dir)
    return results


def _wait(senders: list[subprocess.Popen], outdir: Path, t0: float, sc: Scenario) -> None:
    """Wait for every sender, showing time and completed flows; stop at the drain deadline."""
    deadline = t0 + sc.duration_s + sc.drain_s
    total = sc.duration_s + sc.drain_s
    layout = "{desc}: {n}/{total} s |{bar}|"
    with tqdm(total=round(total), desc="traffic", bar_format=layout, leave=False) as bar:
        while any(p.poll() is None for p in senders) and time.time() < deadline:
            time.sleep(0.5)
            bar.n = min(round(total), max(0, round(time.time() - t0)))
            done = _count_lines(outdir.glob("*.fct.jsonl"))
            bar.set_description_str(f"traffic, {done} flows done", refresh=False)
            bar.refresh()


def sent_files(outdir: Path) -> list[Path]:
    return sorted([*outdir.glob("*.workload.jsonl"), *outdir.glob("*.incast.jsonl")])


def _count_lines(paths: Iterable[Path]) -> int:
    return sum(p.read_bytes().count(b"\n") for p in paths)


def _collect(outdir: Path, t0: float, t_end: float, rtt: float) -> ScenarioResult:
    sent = read_records(sent_files(outdir), SentRecord)
    return ScenarioResult(
        outdir=outdir,
        t0=t0,
        t_end=t_end,
        base_rtt_s=rtt,
        sent=len(sent),
        completed=sum(r.completed for r in sent),
        recorded=_count_lines(outdir.glob("*.fct.jsonl")),
    )
