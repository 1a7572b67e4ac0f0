"""`ecntune demo` end to end on the tiny fabric: static ECN, then the shipped agent."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecntune.fabric.cleanup import leftovers

ECNTUNE = str(Path(sys.executable).with_name("ecntune"))
pytestmark = [pytest.mark.root, pytest.mark.slow]


def demo(out: Path, *extra: str) -> list[str]:
    return [ECNTUNE, "demo", "--topology", "tiny", "--duration", "6", "--out", str(out), *extra]


@pytest.mark.timeout(600)
def test_demo_compares_static_ecn_with_the_agent(tmp_path: Path):
    out = tmp_path / "demo"
    run = subprocess.run(demo(out), capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "FCT slowdown" in run.stdout
    for name in ("report.md", "comparison.csv", "summary.json", "fct_cdf.png", "queues.png"):
        assert (out / name).stat().st_size > 0, name
    summary = {s["phase"]: s for s in json.loads((out / "summary.json").read_text())}
    assert set(summary) == {"static-secn1", "acc-default"}
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
