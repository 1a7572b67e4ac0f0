"""The report's arithmetic on phases with known contents (telemetry rows, probes, flows)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ecntune.agent.rewards import MICE_SLOWDOWN_SQUARED, Reward
from ecntune.agent.static import StaticPolicy
from ecntune.controller.loop import SwitchLoop
from ecntune.controller.safety import Guard
from ecntune.fabric.report import (
    Phase,
    check_marking,
    load_phase,
    port_queues,
    summarize_phase,
    switch_decisions,
    telemetry_row,
    write_report,
)
from ecntune.fabric.watch import parse_register_reads
from ecntune.p4src import encoding as enc
from ecntune.telemetry import PortTelemetry
from ecntune.topology import preset
from ecntune.traffic.records import FlowRecord, JsonlWriter, PacketRecord, SentRecord

T0 = 1000.0
RATE = 10e6  # tiny's links
PKT_S = 1500 * 8 / RATE


def meta(**extra: object) -> dict:
    return {
        "topology": preset("tiny").to_dict(),
        "roles": {"receiver": "h4"},
        "t0": T0,
        "t_end": T0 + 10,
        "base_rtt_s": 1e-3,
        "cc": "cubic",
        "ecn": True,
        "switch": "embedded",
        **extra,
    }


def probe(i: int, queue_pkts: float, ecn: int) -> PacketRecord:
    owd = 1e-4 + queue_pkts * PKT_S  # base delay + time spent behind `queue_pkts` packets
    return PacketRecord(0, 0, i, "10.0.0.3", 92, ecn, T0 + i, T0 + i + owd, owd)


def telemetry(t: float, port: int, q: float, marked: int, kmin: float, kmax: float) -> dict:
    tel = PortTelemetry(
        interval_s=0.1, link_bps=RATE, tx_bytes=100 * 1500, tx_pkts=100,
        marked_bytes=marked * 1500, marked_pkts=marked, qdepth_sum_bytes=q * 100,
        qdepth_samples=100, qdepth_max_bytes=q * 2, kmin_bytes=kmin, kmax_bytes=kmax,
        pmax=0.2, senders=2, elephant_bytes=0,
    )  # fmt: skip
    return telemetry_row(T0 + t, "s1", port, tel)


def test_marking_check_counts_marks_against_the_red_rule():
    kmin, kmax = 15_000, 30_000  # 10 and 20 packets
    probes = [probe(0, 0, 2), probe(1, 5, 2), probe(2, 15, 3), probe(3, 18, 2), probe(4, 30, 3)]
    phase = Phase("p", Path("."), meta(), flows=[], sent=[], probes=probes)
    good = check_marking(phase, kmin, kmax)
    assert (good.probes, good.marked) == (5, 2)
    assert good.marked_below_kmin == 0
    assert good.unmarked_above_kmax == 0
    assert good.queue_max_bytes == pytest.approx(30 * 1500)
    # a mark at an empty queue and no mark far above kmax are both violations
    bad = Phase("p", Path("."), meta(), [], [], probes=[probe(0, 0, 3), probe(1, 40, 2)])
    check = check_marking(bad, kmin, kmax)
    assert (check.marked_below_kmin, check.unmarked_above_kmax) == (1, 1)
    with pytest.raises(ValueError, match="no probes"):
        check_marking(Phase("p", Path("."), meta(), [], []), kmin, kmax)


def test_marks_below_kmin_after_a_full_buffer_count_apart_until_the_queue_runs_empty():
    kmin, kmax, buffer = 15_000, 30_000, 100 * 1500
    # tail drops at 1 s inflate the switch's byte estimate: the mark at 2 s (5 packets ahead)
    # is the estimate's, until a probe finds the queue empty (3 s); the mark at 4 s counts
    probes = [probe(0, 0, 2), probe(1, 100, 3), probe(2, 5, 3), probe(3, 0, 2), probe(4, 5, 3)]
    phase = Phase("p", Path("."), meta(), [], [], probes=probes)
    check = check_marking(phase, kmin, kmax, buffer_bytes=buffer)
    assert (check.marked_below_kmin, check.marked_below_kmin_after_tail_drop) == (1, 1)
    # a queue short of the buffer (by more than the slack) drops nothing: both marks count
    short = [probe(1, 90, 3) if p.seq == 1 else p for p in probes]
    check = check_marking(Phase("p", Path("."), meta(), [], [], probes=short), kmin, kmax,
                          buffer_bytes=buffer)  # fmt: skip
    assert (check.marked_below_kmin, check.marked_below_kmin_after_tail_drop) == (2, 0)
    # without the buffer given, nothing is set apart
    assert check_marking(phase, kmin, kmax).marked_below_kmin == 2


def test_a_probe_delayed_outside_the_switch_is_told_apart_by_the_switchs_telemetry():
    kmin, kmax = 15_000, 30_000
    # two probes each say "40 packets ahead of me, and no mark": at t=1 s the port itself
    # never held more than 2 KB (its telemetry), at t=5 s it held 80 KB
    probes = [probe(0, 0, 2), probe(1, 40, 2), probe(5, 40, 2)]
    rows = [telemetry(i + 0.5, 4, 1000.0 if i < 3 else 40_000.0, 0, kmin, kmax) for i in range(8)]
    rows += [telemetry(i + 0.5, 1, 90_000.0, 0, kmin, kmax) for i in range(8)]  # another port
    phase = Phase("p", Path("."), meta(), [], [], probes=probes, telemetry=rows)
    check = check_marking(phase, kmin, kmax)
    assert check.unmarked_above_kmax == 1  # the probe at 5 s: the switch really held it
    assert check.delayed_outside_switch == 1  # the probe at 1 s
    assert check.switch_queue_max_bytes == 80_000  # the receiver's port only
    # the probes at 0 s and 1 s came while the port held 2 KB: one of the two was delayed
    assert check.probes_switch_at_kmax == 1
    assert check.outside_delay_rate == pytest.approx(1 / 2)
    # without telemetry both count
    bare = check_marking(Phase("p", Path("."), meta(), [], [], probes=probes), kmin, kmax)
    assert (bare.unmarked_above_kmax, bare.delayed_outside_switch) == (2, 0)
    assert math.isnan(bare.switch_queue_max_bytes)


def test_summary_prefers_telemetry_and_reads_marks_and_queues_from_it():
    rows = [telemetry(0.1 * i, 4, 20_000.0, 10, 15_000, 30_000) for i in range(10)]
    rows += [telemetry(0.1 * i, 1, 0.0, 0, 15_000, 30_000) for i in range(10)]
    flows = [
        FlowRecord("a", "10.0.0.1", "10.0.0.4", 10_000, T0, T0 + 0.5, 0.5, "cubic", "workload"),
        FlowRecord("b", "10.0.0.2", "10.0.0.4", 2_000_000, T0, T0 + 4, 4.0, "cubic", "workload"),
    ]
    sent = [SentRecord(f.flow_id, f.src, f.dst, f.size, f.start, f.kind, f.cc, True) for f in flows]
    phase = Phase("agent", Path("."), meta(), flows, sent, probes=[probe(0, 50, 3)], telemetry=rows)
    queues = port_queues(phase)
    assert set(queues) == {"s1:1", "s1:4"}
    assert queues["s1:4"]["queue"].tolist() == [20_000.0] * 10
    assert queues["s1:4"]["t"][0] == pytest.approx(0.0)
    s = summarize_phase(phase)
    assert s.queue_source == "telemetry"
    assert s.queue_mean_bytes == pytest.approx(10_000)  # both ports carried packets
    assert s.marked_fraction == pytest.approx(100 / 2000)
    assert s.goodput_bps == pytest.approx(2_010_000 * 8 / 10)
    buckets = {b.bucket: b for b in s.buckets}
    assert buckets["mice"].flows == 1
    assert buckets["elephant"].flows == 1
    assert buckets["medium"].flows == 0
    assert math.isnan(buckets["medium"].slowdown_mean)
    # 10 KB alone at 10 Mb/s: 1 ms RTT + 10 KB and 7 packet headers at line rate
    ideal = 1e-3 + (10_000 + 7 * 66) * 8 / RATE
    assert buckets["mice"].slowdown_mean == pytest.approx(0.5 / ideal)


def test_phases_load_from_disk_and_reject_foreign_telemetry(tmp_path: Path):
    run = tmp_path / "static"
    run.mkdir()
    (run / "scenario.json").write_text(json.dumps(meta()))
    flow = FlowRecord("a", "10.0.0.1", "10.0.0.4", 10_000, T0, T0 + 0.5, 0.5, "cubic", "workload")
    with JsonlWriter(run / "h4.fct.jsonl") as w:
        w.write(flow)
    with JsonlWriter(run / "h1.workload.jsonl") as w:
        w.write(SentRecord("a", flow.src, flow.dst, flow.size, T0, "workload", "cubic", True))
    with open(run / "telemetry.jsonl", "w") as f:
        f.write(json.dumps(telemetry(0.1, 4, 3000.0, 1, 15_000, 30_000)) + "\n")
    phase = load_phase("static", run)
    assert phase.flows == [flow]
    assert len(phase.telemetry) == 1
    table = write_report([phase], tmp_path / "out")
    assert "static" in table
    assert "1/1" in table
    with open(run / "telemetry.jsonl", "a") as f:
        f.write(json.dumps({"t": 1.0, "switch": "s1"}) + "\n")
    with pytest.raises(ValueError, match="missing"):
        load_phase("static", run)


def test_a_phase_whose_agent_fell_back_is_labelled_with_when_and_why(tmp_path: Path):
    """Rows from a real control loop (a script that diverges halfway) through the report;
    the script was trained on a simulator reward, so the guard judges it by the paper's."""

    class Diverges:
        name = "acc:test"
        reward = Reward(MICE_SLOWDOWN_SQUARED)
        calls = 0

        def act(self, history: PortTelemetry) -> object:
            self.calls += 1  # the first is the controller's warm-up call, before any tick
            if self.calls > 6:
                raise FloatingPointError("Q-values are NaN")
            return StaticPolicy("secn0").act(history)

    loop = SwitchLoop(
        "s1", {1: RATE, 4: RATE}, Diverges(), StaticPolicy("secn1"), interval_s=0.1,
        buffer_bytes=96_000, guard=Guard(fallback_after=20, baseline_intervals=2),
    )  # fmt: skip
    busy = dict.fromkeys(enc.DIGEST_FIELDS, 0) | {
        "port": 4, "interval_us": 100_000, "tx_bytes": 60_000, "tx_pkts": 40,  # 48 % of 10 Mb/s
        "qdepth_sum_bytes": 40 * 3000, "qdepth_samples": 40,
    }  # fmt: skip
    rows = []
    for i in range(12):
        loop.on_digest(busy)
        rows += loop.tick(T0 + 0.1 * (i + 1)).rows
    phase = Phase("acc-test", tmp_path, meta(), [], [], telemetry=rows)
    control = summarize_phase(phase).control
    assert control is not None
    assert control.intervals == 12  # decisions, not rows (two ports per decision)
    # 2 baseline intervals, 5 agent decisions, then the agent raised: 5 of 12 fell back
    assert control.shares == pytest.approx(
        {"baseline": 2 / 12, "agent": 5 / 12, "fallback": 5 / 12}
    )
    assert control.policies == pytest.approx({"static:secn1": 7 / 12, "acc:test": 5 / 12})
    assert control.fell_back
    fall = [c for c in control.changes if "fallback" in c["change"]]
    assert len(fall) == 1
    assert fall[0]["t_s"] == pytest.approx(0.8)
    assert "Q-values are NaN" in fall[0]["change"]

    static = Phase("static", tmp_path, meta(), [], [], telemetry=[
        r | {"mode": "agent", "policy": "static:secn1", "mode_change": None, "judged_by": "acc"}
        for r in rows
    ])  # fmt: skip
    static.telemetry[-1]["rewrites"] = 2  # cumulative per port: the last row counts
    flow = FlowRecord("a", "10.0.0.1", "10.0.0.4", 10_000, T0, T0 + 0.5, 0.5, "cubic", "workload")
    sent = [SentRecord("a", flow.src, flow.dst, flow.size, T0, "workload", "cubic", True)]
    for p in (phase, static):
        p.flows, p.sent = [flow], sent
    table = write_report([static, phase], tmp_path / "out")
    # the printed table labels the phase in every section and says when and why
    assert table.count("acc-test [fell back]") >= 3
    assert "static [fell back]" not in table
    assert "static:secn1 100%; 2 threshold writes not seen in telemetry, resent" in table
    assert "FELL BACK at 0.8 s on s1: acc:test failed: FloatingPointError: Q-values" in table
    assert control.judged_by == (f"acc (trained on {MICE_SLOWDOWN_SQUARED})",)
    assert (
        f"the guard judged the agent by the acc reward, not by its own {MICE_SLOWDOWN_SQUARED}"
    ) in table
    assert summarize_phase(static).control.judged_by == ()
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.index("did not run its agent throughout") < report.index("```")
    assert "for 42% of its intervals" in report
    csv_rows = (tmp_path / "out" / "comparison.csv").read_text().splitlines()
    assert csv_rows[0].startswith("phase,fell_back,")
    assert {line.split(",")[1] for line in csv_rows[1:]} == {"False", "True"}


def test_the_share_of_mice_that_timed_out_is_reported(tmp_path: Path):
    flows = [
        FlowRecord(f"m{i}", "10.0.0.1", "10.0.0.4", 10_000, T0, T0 + 0.5, 0.5, "cubic", "workload")
        for i in range(4)
    ]
    sent = [
        SentRecord(f.flow_id, f.src, f.dst, f.size, f.start, f.kind, f.cc, True, None, r, r)
        for f, r in zip(flows, (0, 1, 0, 0), strict=True)
    ]
    sent.append(SentRecord("e", "10.0.0.2", "10.0.0.4", 5_000_000, T0, "workload", "cubic",
                           True, None, 9, 2))  # fmt: skip
    s = summarize_phase(Phase("p", tmp_path, meta(), flows, sent))
    assert s.mice_rto_share == pytest.approx(1 / 4)  # the elephant's timeouts are not a mouse's
    assert s.flows_with_rto == 2
    table = write_report([Phase("p", tmp_path, meta(), flows, sent)], tmp_path / "out")
    assert "mice RTO" in table
    assert "25.0%" in table
    assert (
        "25.0% of mice saw a retransmission timeout (2 flows in all)"
        in (tmp_path / "out" / "report.md").read_text()
    )
    # a kernel without the counters: no share, not a share of zero
    old = [dataclasses.replace(r, retrans=None, rtos=None) for r in sent]
    assert math.isnan(summarize_phase(Phase("p", tmp_path, meta(), flows, old)).mice_rto_share)


def test_the_report_names_the_engine_that_forwarded_per_switch_where_they_differ(tmp_path):
    same = {"s1": "native (C)", "s2": "native (C)"}
    mixed = {"s1": "native (C)", "s2": "python (native data plane: header stacks)"}
    runs = {"same": meta(dataplane=same), "mixed": meta(dataplane=mixed), "old": meta()}
    for name, m in runs.items():
        write_report([Phase(name, tmp_path, m, [], [])], tmp_path / name)
    text = {name: (tmp_path / name / "report.md").read_text() for name in runs}
    assert "switch `embedded` (data plane: native (C))," in text["same"]
    assert (
        "(data plane: s1 native (C); s2 python (native data plane: header stacks))" in text["mixed"]
    )
    assert "data plane" not in text["old"]  # recorded before engines were: nothing claimed


def test_thresholds_around_a_mid_run_change_are_compared_on_the_policys_own_intervals(
    tmp_path: Path,
):
    """A storm from 5 s: port 4's thresholds rise with it, port 1 holds still; the baseline
    preset's intervals and the drain after the last arrival count for neither side."""
    storm = {"duration_s": 10.0, "incast_degree": 4, "incast_from_s": 5.0, "incast_period_s": 0.5}
    rows = []
    for i in range(1, 121):  # intervals of 0.1 s ending at 0.1 .. 12.0 s; arrivals end at 10
        t = round(0.1 * i, 6)
        storming = t - 0.1 >= 5.0 - 1e-9
        mode = "baseline" if i <= 10 else "agent"  # the first second: the preset's baseline
        k4 = (60e3, 80e3) if mode == "baseline" else ((20e3, 40e3) if storming else (10e3, 20e3))
        q4 = (30e3 if storming else 5e3) if t <= 10.0 else 0.0  # draining: not counted
        for port, (kmin, kmax), q in ((4, k4, q4), (1, (8e3, 16e3), 2e3)):
            row = telemetry(t, port, q, 5, kmin, kmax)
            rows.append(row | {"mode": mode, "policy": "acc:test", "mode_change": None})
    phase = Phase("acc-test", tmp_path, meta(scenario=storm), [], [], telemetry=rows)
    s = summarize_phase(phase)
    assert s.change_at_s == 5.0
    assert s.change == "4:1 incasts begin"
    shifts = {x.port: x for x in s.shifts}
    assert set(shifts) == {"s1:1", "s1:4"}
    assert shifts["s1:4"].intervals == (40, 50)  # 1.1 .. 5.0 s, then 5.1 .. 10.0 s
    assert shifts["s1:4"].kmin_bytes == pytest.approx((10e3, 20e3))
    assert shifts["s1:4"].kmax_bytes == pytest.approx((20e3, 40e3))
    assert shifts["s1:4"].queue_bytes == pytest.approx((5e3, 30e3))
    assert shifts["s1:1"].kmax_bytes == pytest.approx((16e3, 16e3))
    flow = FlowRecord("a", "10.0.0.1", "10.0.0.4", 10_000, T0, T0 + 0.5, 0.5, "cubic", "workload")
    sent = [SentRecord("a", flow.src, flow.dst, flow.size, T0, "workload", "cubic", True)]
    phase.flows, phase.sent = [flow], sent
    table = write_report([phase], tmp_path / "out")
    assert "At the traffic change (4:1 incasts begin at 5 s)" in table
    assert (
        "s1:4 (queue rose most): kmin 10.0 → 20.0 KB, kmax 20.0 → 40.0 KB, queue 5.0 → 30.0 KB; "
        "the other 1 ports: kmin 8.0 → 8.0 KB, kmax 16.0 → 16.0 KB, queue 2.0 → 2.0 KB"
    ) in table
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| acc-test | s1:4 | 40 / 50 | 10.0 → 20.0 | 20.0 → 40.0 | 5.0 → 30.0 |" in report
    # without a change mid-run there is nothing to compare
    flat = Phase("p", tmp_path, meta(scenario={"duration_s": 10.0, "incast_degree": 4}), [], [],
                 telemetry=rows)  # fmt: skip
    assert summarize_phase(flat).shifts == []


def test_thresholds_the_switch_set_after_its_controller_was_killed_are_counted(tmp_path: Path):
    """An --in-switch phase: registers read over the control port (fabric/watch.py, both
    targets' reply formats), changes counted on each side of the kill, drawn and written."""
    embedded = "ecn_kmin= 0, 1500, 3000\necn_kmax= 0, 3000, 6000\n"
    bmv2 = "RuntimeCmd: ecn_kmin= 0, 1500, 3000\nRuntimeCmd: ecn_kmax= 0, 3000, 6000\nRuntimeCmd: "
    want = {"ecn_kmin": [0, 1500, 3000], "ecn_kmax": [0, 3000, 6000]}
    assert parse_register_reads(embedded) == want
    assert parse_register_reads(bmv2) == want

    def read(t: float, port: int, kmin: int) -> dict:
        return {"t": T0 + t, "switch": "s1", "port": port, "kmin": kmin, "kmax": 2 * kmin,
                "pmax_bp": 10_000}  # fmt: skip

    low, high = 1500, 12_000
    rows = [read(t, 4, k) for t, k in ((1, low), (2, high), (3, low))]  # 2 changes with it
    rows += [read(t, 1, low) for t in (1, 2, 3, 6, 7)]  # port 1 never changes
    rows.append({"t": T0 + 4, "event": "controller killed"})
    rows += [read(t, 4, k) for t, k in ((5, low), (6, high), (7, high), (8, low))]  # 2 after
    phase = Phase("tree-t", tmp_path, meta(), [], [], switch_thresholds=rows)
    kill, ports = switch_decisions(phase)
    assert kill == 4
    assert [(d.port, d.changes_with_controller, d.changes_after_kill) for d in ports] == [(4, 2, 2)]
    assert ports[0].settings_after_kill == 2
    write_report([phase], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "controller killed at 4.0 s; s1 port 4: 2 changes with it, **2 after**" in text
    assert (tmp_path / "out" / "switch_thresholds.png").stat().st_size > 0


def test_a_warning_after_mininet_is_imported_is_printed_once_on_its_own_line():
    """Mininet sets its Logger class for every logger made after its import; the demo's
    controller warnings came out twice, the first copy run into the next line."""
    code = (
        "import logging; logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')\n"
        "import ecntune.fabric, mininet.net\n"
        "logging.getLogger('ecntune.controller').warning('guard note')\n"
        "logging.getLogger('after').warning('second')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    assert run.stderr.splitlines() == [
        "WARNING ecntune.controller: guard note",
        "WARNING after: second",
    ]
