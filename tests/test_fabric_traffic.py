"""Real kernel TCP through an emulated fabric: workload and incast flows, probes, the report.

The kernel-bridge fabric stands in for a P4 switch here (tail-drop queues, no marking); the
same scenario runs unchanged on the P4 targets (tests/test_fabric_p4.py).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from ecntune.fabric.net import Fabric, FabricOptions
from ecntune.fabric.report import load_phase, probe_queue, summarize_phase, write_report
from ecntune.fabric.scenario import Scenario, run_phases
from ecntune.topology import preset
from ecntune.traffic.records import FlowRecord, SentRecord, read_records

pytestmark = [pytest.mark.root, pytest.mark.slow]

SCENARIO = Scenario(
    duration_s=5.0,
    load=0.3,
    max_flow_bytes=300e3,
    workload_hosts=("h1", "h2"),
    switch_to="fb_hadoop",  # the second half runs another workload (fabric/scenario.py)
    receiver="h4",
    incast_degree=2,
    incast_bytes=40_000,
    incast_period_s=1.5,
    probe_src="h3",
    probe_period_s=0.02,
    drain_s=30.0,
)


@contextmanager
def no_control(fab: Fabric, telemetry: Path) -> Iterator[None]:
    """The bridge has no control plane; record that the phase ran under this one."""
    telemetry.with_name("control-entered").write_text(str(fab.run.rid))
    yield


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The scenario twice on one fabric, as the demo runs static thresholds and an agent."""
    out = tmp_path_factory.mktemp("bridge")
    with Fabric(preset("tiny"), FabricOptions(switch="bridge", queue_depth_pkts=64)) as fab:
        results = run_phases(fab, SCENARIO, {"first": no_control, "again": no_control}, out)
    assert all(r.sent > 0 for r in results.values())
    return {name: out / name for name in results}


@pytest.fixture(scope="module")
def bridge_run(phases: dict[str, Path]) -> Path:
    return phases["first"]


def test_phases_carry_identical_traffic(phases: dict[str, Path]):
    def flows(run: Path) -> list[tuple]:
        sent = read_records(run.glob("*.workload.jsonl"), SentRecord)
        sent += read_records(run.glob("*.incast.jsonl"), SentRecord)
        return sorted((s.flow_id, s.src, s.dst, s.size) for s in sent)

    assert flows(phases["first"]) == flows(phases["again"])
    assert len(flows(phases["first"])) > 5
    for run in phases.values():
        assert (run / "control-entered").exists()


def test_every_completed_flow_has_an_fct_record(bridge_run: Path):
    sent = read_records(bridge_run.glob("*.workload.jsonl"), SentRecord)
    sent += read_records(bridge_run.glob("*.incast.jsonl"), SentRecord)
    flows = {r.flow_id: r for r in read_records(bridge_run.glob("*.fct.jsonl"), FlowRecord)}
    assert all(s.completed for s in sent), [s for s in sent if not s.completed]
    assert {s.flow_id for s in sent} == set(flows)
    for s in sent:
        f = flows[s.flow_id]
        assert (f.src, f.dst, f.size, f.kind) == (s.src, s.dst, s.size, s.kind)
        assert f.start == s.start
        assert f.fct > 0
        assert f.cc == s.cc != ""
    # the workload only went where the scenario said
    assert {s.src for s in sent if s.kind == "workload"} <= {"10.0.0.1", "10.0.0.2"}


def test_a_workload_switch_halfway_hands_over_to_the_second_workloads_senders(bridge_run: Path):
    """Each workload host runs one sender per half: the first's flows are due before half
    time, the second's after it, with flow ids of their own (the receivers key on them)."""
    t0 = json.loads((bridge_run / "scenario.json").read_text())["t0"]
    half = SCENARIO.duration_s / 2
    first = read_records(bridge_run.glob("h[12].workload.jsonl"), SentRecord)
    second = read_records(bridge_run.glob("h[12].after-switch.workload.jsonl"), SentRecord)
    assert first
    assert second
    # a flow's recorded start is when its connect() began: at or after its due time
    assert min(s.start for s in second) - t0 >= half
    assert all((bridge_run / "logs" / f"h{i}.after-switch.sender.log").exists() for i in (1, 2))
    assert len({s.flow_id for s in first + second}) == len(first) + len(second)


def test_incast_bursts_complete_and_fill_the_receivers_queue(bridge_run: Path):
    incast = read_records(bridge_run.glob("*.incast.jsonl"), SentRecord)
    bursts = int(SCENARIO.duration_s / SCENARIO.incast_period_s)
    assert len(incast) == SCENARIO.incast_degree * bursts
    assert all(s.completed and s.dst == "10.0.0.4" for s in incast)
    flows = read_records(bridge_run.glob("h4.fct.jsonl"), FlowRecord)
    by_burst: dict[str, list[FlowRecord]] = {}
    for f in flows:
        if f.kind == "incast":
            by_burst.setdefault(f.flow_id.rsplit("-", 1)[1], []).append(f)
    assert len(by_burst) == bursts
    for group in by_burst.values():  # the senders of one burst started together
        starts = [f.start for f in group]
        assert max(starts) - min(starts) < 0.05


def test_probes_see_the_queue(bridge_run: Path):
    phase = load_phase("bridge", bridge_run)
    assert len(phase.probes) > 0.9 * SCENARIO.duration_s / SCENARIO.probe_period_s
    assert all(p.ecn == 2 for p in phase.probes)  # ECT(0) and a bridge never marks
    summary = summarize_phase(phase)
    assert summary.queue_source == "probes"
    assert summary.marked_fraction == 0.0
    # 2 incast senders at line rate into one port build a queue while their burst lasts:
    # the probes sent then see it, against the probes of the same run at other times (a
    # fixed floor failed under stress-ng, where the senders' bursts are less tight: issue 16)
    probe = probe_queue(phase)
    t0 = phase.meta["t0"]
    during = np.zeros(probe["t"].size, bool)
    for f in phase.flows:
        if f.kind == "incast":
            during |= (probe["t"] >= f.start - t0) & (probe["t"] <= f.start - t0 + f.fct)
    assert during.sum() >= 3, "too few probes during the bursts to judge"
    queued, quiet = probe["queue"][during].mean(), probe["queue"][~during].mean()
    assert queued > 2 * 1500, (queued, quiet)  # more than a packet's worth of estimate error
    assert queued > 2 * quiet, (queued, quiet)


def test_report_compares_phases(bridge_run: Path, tmp_path: Path):
    phases = [load_phase("first", bridge_run), load_phase("second", bridge_run)]
    table = write_report(phases, tmp_path, title="bridge twice")
    assert "mice" in table
    assert "first" in table
    assert "second" in table
    for name in ("comparison.csv", "summary.json", "fct_cdf.png", "queues.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    rows = list(csv.DictReader((tmp_path / "comparison.csv").read_text().splitlines()))
    assert {r["phase"] for r in rows} == {"first", "second"}
    all_rows = [r for r in rows if r["bucket"] == "all"]
    assert all_rows[0]["flows"] == str(len(phases[0].flows))
    meta = json.loads((bridge_run / "scenario.json").read_text())
    assert meta["cc"] in (s["cc"] for s in json.loads((tmp_path / "summary.json").read_text()))
    assert "hosts' TCP" in (tmp_path / "report.md").read_text()


def test_report_command(bridge_run: Path, tmp_path: Path):
    ecntune = Path(sys.executable).with_name("ecntune")
    out = subprocess.run(
        [ecntune, "fabric", "report", bridge_run, bridge_run, "--out", tmp_path],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "FCT slowdown" in out.stdout
    assert (tmp_path / "report.md").exists()
    bad = subprocess.run(
        [ecntune, "fabric", "report", tmp_path / "nothing", "--out", tmp_path],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "no scenario.json" in bad.stderr
