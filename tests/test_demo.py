"""`ecntune demo` end to end on the tiny fabric: static ECN, then the shipped agent."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ecntune.fabric.cleanup import leftovers
from ecntune.targets import free_port
from ecntune.topology import MTU_BYTES
from ecntune.traffic.records import SentRecord, read_records

ECNTUNE = str(Path(sys.executable).with_name("ecntune"))
pytestmark = [pytest.mark.root, pytest.mark.slow]


def demo(out: Path, *extra: str) -> list[str]:
    return [ECNTUNE, "demo", "--topology", "tiny", "--duration", "6", "--out", str(out), *extra]


@pytest.mark.timeout(600)
def test_demo_compares_static_ecn_with_the_agent(tmp_path: Path):
    out = tmp_path / "demo"
    port = free_port()
    proc = subprocess.Popen(demo(out, "--serve", str(port)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen = []  # telemetry rows the live view served, polled while the demo runs
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data", timeout=5) as r:
                phases = json.loads(r.read())["phases"]
            seen.append(sum(len(p["rows"]) for p in phases.values()))
        except OSError:
            pass  # not serving yet, or the run just ended
        time.sleep(1.0)
    stdout, stderr = proc.communicate(timeout=60)
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "FCT slowdown" in run.stdout
    assert f"live view: http://127.0.0.1:{port}/" in run.stdout
    # the live view grew with the run: both phases' rows, seen at many different counts
    assert len(set(seen)) >= 5, seen
    assert seen == sorted(seen)
    for name in ("report.md", "comparison.csv", "summary.json", "fct_cdf.png", "queues.png"):
        assert (out / name).stat().st_size > 0, name
    summary = {s["phase"]: s for s in json.loads((out / "summary.json").read_text())}
    assert set(summary) == {"static-secn1", "static-2a_32a_0.2", "acc-default"}
    for s in summary.values():
        assert s["flows_sent"] > 0
        assert s["flows_completed"] == s["flows_sent"]  # incast bursts and flows complete
        assert s["flows_recorded"] == s["flows_completed"]  # every flow has its FCT record
    table = (out / "comparison.csv").read_text().splitlines()
    phases = {r["phase"] for r in csv.DictReader(table)}
    assert phases == set(summary)
    # the agent phase ran the agent throughout, after the preset's baseline (issue 16: an
    # idle-fabric baseline once benched it halfway, and nothing said so)
    rows = [json.loads(x) for x in (out / "acc-default" / "telemetry.jsonl").open()]
    assert {r["mode"] for r in rows} == {"baseline", "agent"}
    assert {r["policy"] for r in rows if r["mode"] == "agent"} == {"acc:default"}
    assert "[fell back]" not in run.stdout
    first_agent = next(i for i, r in enumerate(rows) if r["mode"] == "agent")
    assert all(r["mode"] == "agent" for r in rows[first_agent:])
    assert "fallback" not in summary["acc-default"]["control"]["shares"]
    assert "acc:default" in (out / "report.md").read_text().split("acc-default:", 1)[1]
    # the report says which engine forwarded (issue 21: a Python fallback forwards ~13x less)
    engines = json.loads((out / "static-secn1" / "scenario.json").read_text())["dataplane"]
    assert set(engines) == {"s1"}
    assert engines["s1"].startswith(("native (C)", "python ("))
    assert f"switch `embedded` (data plane: {engines['s1']})" in (out / "report.md").read_text()
    # the default traffic changes halfway (a 2:1 storm on tiny) and the report compares
    # every port's thresholds around it
    assert "At the traffic change (2:1 incasts begin at 3 s)" in run.stdout
    assert summary["static-secn1"]["shifts"]  # (the agent's baseline may outlast 3 s here)
    assert "## Thresholds around the traffic change" in (out / "report.md").read_text()
    assert not leftovers()


@pytest.mark.timeout(300)
def test_a_storm_demo_changes_the_traffic_halfway(tmp_path: Path):
    out = tmp_path / "storm"
    run = subprocess.run(demo(out, "--storm", "--policy", "static:secn1", "--queue-depth", "100"),
                         capture_output=True, text=True, timeout=240)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    meta = json.loads((out / "static-secn1" / "scenario.json").read_text())
    assert meta["queue_depth_pkts"] == 100  # the buffer the switches were given
    thresholds = [json.loads(r) for r in (out / "static-secn1" / "telemetry.jsonl").open()]
    assert {r["set_kmax"] for r in thresholds} == {100 * MTU_BYTES}  # SECN1's 200 KB, clamped
    incast = read_records((out / "static-secn1").glob("*.incast.jsonl"), SentRecord)
    senders = meta["roles"]["incast_senders"]
    assert len(senders) == len(meta["topology"]["hosts"]) - 2  # every other host
    assert len(incast) == len(senders) * int(3.0 / 0.5)  # bursts every 0.5 s from 3 s on
    assert min(r.start for r in incast) >= meta["t0"] + 3.0  # nothing before halfway
    assert all(r.completed for r in incast)
    assert not leftovers()


@pytest.mark.timeout(300)
def test_an_interrupted_demo_leaves_nothing_behind(tmp_path: Path):
    proc = subprocess.Popen(
        demo(tmp_path / "demo"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    time.sleep(12)  # fabric up, switches and controller running, traffic flowing
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    proc.wait(120)
    deadline = time.time() + 30
    while leftovers() and time.time() < deadline:
        time.sleep(1)
    assert not leftovers()
