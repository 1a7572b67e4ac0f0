"""The fabric on real P4 targets: switch processes, and ECN marking with static thresholds.

Each test runs once per target: the embedded switch (python -m ecntune.switch) and BMv2
(simple_switch_grpc), skipping with the reason where a target is not there.

The acceptance tests run the whole stack: the controller pushes the pipeline, routes and
an ECN setting (a static policy with explicit values), and for the mid-run change a policy
that switches its setting halfway, as an agent would; the change must show in the
telemetry the controller logs and in the marking the receiver's probe sees.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ecntune.controller import control_plane
from ecntune.fabric.cleanup import leftovers
from ecntune.fabric.net import Fabric, FabricOptions
from ecntune.fabric.report import Phase, check_marking, load_phase, probe_queue
from ecntune.fabric.scenario import Scenario, run_scenario
from ecntune.sim.scenario import emulated_link_delay_s
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import Topology, preset

EMBEDDED_MISSING = importlib.util.find_spec("ecntune.switch.__main__") is None
TARGETS = [
    pytest.param(
        "embedded",
        marks=pytest.mark.skipif(
            EMBEDDED_MISSING, reason="the embedded target (python -m ecntune.switch) is not here"
        ),
    ),
    pytest.param("bmv2", marks=pytest.mark.bmv2),
]
pytestmark = [pytest.mark.root, pytest.mark.parametrize("switch", TARGETS)]

MTU = 1500
QUEUE_PKTS = 100  # the buffer limit the no-ECN run must reach


def port_offset() -> int:
    """gRPC/Thrift ports away from the defaults, so parallel fabrics on one machine coexist."""
    return random.randrange(1000, 20000, 10)


def test_switch_processes_own_their_ports_and_leave_nothing(switch: str):
    topo = preset("tiny")
    with Fabric(topo, FabricOptions(switch=switch, port_offset=port_offset())) as fab:
        rid = fab.run.rid
        spec = fab.specs["s1"]
        assert spec.ports == {p: f"ec{rid}s0p{p}" for p in (1, 2, 3, 4)}
        assert spec.cpu_port == 255
        node = fab.switch("s1")
        proc = node.proc
        assert proc.poll() is None
        # its control port answers (queue rates and depths were set through it at start)
        node.target.set_queue_depth(spec, QUEUE_PKTS, 1)
    assert proc.poll() is not None
    assert not leftovers([rid])


# -- acceptance with static thresholds -----------------------------------------------------


def fixed(t: EcnThresholds) -> str:
    return f"static:{t.kmin_bytes:.0f},{t.kmax_bytes:.0f},{t.pmax}"


@dataclass
class SwitchesHalfway:
    """A policy that moves every port from one setting to another at a given time."""

    before: EcnThresholds
    after: EcnThresholds
    at: float = float("inf")
    name: str = "switches-halfway"

    def act(self, history: PortTelemetry) -> EcnThresholds:
        t = self.before if time.time() < self.at else self.after
        ones = np.ones_like(np.asarray(history.link_bps)[-1])
        return EcnThresholds(t.kmin_bytes * ones, t.kmax_bytes * ones, t.pmax * ones)


def controlled(fab: Fabric, policy: object, log: Path):
    # baseline_intervals=0: the test policy is judged by the test, not by the reward guard
    return control_plane(fab.topology, fab.specs, policy, log, baseline_intervals=0)


# The probes alone before the senders start: a probe's queue is its delay over the least
# delay any probe saw (report.probe_queue), which must be an empty port's. With senders and
# probes starting together the queue may never empty again (2:1 with ECN-capable senders
# holds it near kmin), and if the senders' first packets beat the first probe, every probe's queue
# reads a standing queue too short: marks above kmin then look like marks below it (10 of
# 30 in one CI run on a loaded machine; an idle run's only empty-port probe was its first).
PROBES_ALONE_S = 0.5


def congest(fab: Fabric, outdir: Path, duration_s: float = 8.0) -> Phase:
    """Two long TCP senders into h4's port (2:1 at line rate) from PROBES_ALONE_S on, h3
    probing that port from the start."""
    scenario = Scenario(
        duration_s=duration_s,
        workload_hosts=(),
        receiver="h4",
        incast_degree=2,
        incast_bytes=int(duration_s * 10e6 / 8 / 2),  # together, the whole run at line rate
        incast_period_s=duration_s,
        incast_from_s=PROBES_ALONE_S,
        probe_src="h3",
        probe_period_s=0.01,
        drain_s=30.0,
    )
    result = run_scenario(fab, scenario, outdir)
    assert result.sent == result.completed == result.recorded  # every flow has its record
    phase = load_phase(outdir.name, outdir)
    alone = probe_queue(phase)["t"] < PROBES_ALONE_S - 0.1
    assert alone.sum() >= 10, f"only {alone.sum()} probes before the senders started"
    return phase


def start(switch: str, ecn: bool) -> Fabric:
    options = FabricOptions(
        switch=switch, ecn=ecn, queue_depth_pkts=QUEUE_PKTS, port_offset=port_offset()
    )
    return Fabric(preset("tiny"), options)


SETTING = EcnThresholds(kmin_bytes=10 * MTU, kmax_bytes=20 * MTU, pmax=0.2)


def congest_with_static_setting(switch: str, ecn: bool, outdir: Path) -> Phase:
    # the controller's log goes where the phase reads telemetry: the switch's own queue
    with start(switch, ecn=ecn) as fab, controlled(fab, fixed(SETTING), outdir / "telemetry.jsonl"):
        return congest(fab, outdir)


@pytest.mark.slow
def test_marks_only_above_kmin_and_the_queue_stays_near_the_thresholds(switch, tmp_path):
    phase = congest_with_static_setting(switch, True, tmp_path / "ecn")
    buffer_bytes = QUEUE_PKTS * MTU
    check = check_marking(phase, SETTING.kmin_bytes, SETTING.kmax_bytes, buffer_bytes=buffer_bytes)
    assert check.marked > 0
    # A probe's delay measures the queue ahead of it on arrival; the P4 program marks on the
    # bytes behind it when it leaves. A burst that arrives while a probe waits can therefore
    # get a probe marked that saw less than kmin ahead: 1 of 24 marks in one CI run out of
    # many with none. Allowed in 1% of the probes and a tenth of the marks; a program that
    # ignored kmin would mark the many probes that see short queues. The program's byte
    # estimate also keeps tail-dropped bytes until the queue next runs empty, each departure
    # seeing at most a full frame per packet left behind it (ecn.p4 `leave_queue`): a queue
    # of small frames can still look longer than it is. Under stress-ng beside a 2-core job
    # the probe sender, stalled, once sent 60 probes at once, the queue reached the buffer,
    # and the 12 probes marked below kmin in the next 2 s all came before the queue ran empty
    # (before 2026-12-07, when the estimate was not bounded at all). Those are counted apart
    # (check_marking with the buffer): none in a run that never fills the buffer.
    assert check.marked_below_kmin <= min(0.01 * check.probes, 0.1 * check.marked)
    # A probe delayed outside the switch (sender qdisc, a descheduled switch process on a
    # busy CPU) looks like a deep queue it never joined. The switch's own telemetry tells
    # most apart: only probes whose delay says "above kmax" while the port itself held more
    # than kmax (+ the slack) around then count. Outside delays at the rate measured where
    # the switch held less say how many of those to expect; on top, 1% for the estimate's
    # error. But under stress-ng the port exceeds kmax only for moments of a 0.1 s interval,
    # the busiest ones, and there nearly every probe can be such a delay (11 of 12 in one run
    # where the rate predicted 8). So the teeth: a program that marked above kmax only with
    # pmax's probability would leave (1 - pmax) of those probes unmarked, a correct one only
    # the outside delays; the count must be nearer the correct program's. (A program that
    # never marked above kmax lets the queue sit there: hundreds of such probes.)
    expected = check.outside_delay_rate * check.probes_switch_at_kmax + 0.01 * check.probes
    capped_at_pmax = (1 - SETTING.pmax) * check.probes_switch_at_kmax
    assert check.unmarked_above_kmax <= expected + capped_at_pmax / 2, check
    # DCTCP/cubic+ECN backs off on marks: the queue, as the switch measured it, hovers
    # around the thresholds, far below the buffer
    assert check.switch_queue_max_bytes < 0.6 * QUEUE_PKTS * MTU, check


@pytest.mark.slow
def test_without_ecn_capable_hosts_the_queue_grows_to_the_buffer_limit(switch, tmp_path):
    phase = congest_with_static_setting(switch, False, tmp_path / "no-ecn")
    queue = probe_queue(phase)["queue"]
    assert queue.max() > 0.8 * QUEUE_PKTS * MTU  # Not-ECT packets are never marked: tail drop


@pytest.mark.slow
def test_a_threshold_change_mid_run_shows_in_the_marking(switch, tmp_path):
    high = EcnThresholds(kmin_bytes=40 * MTU, kmax_bytes=60 * MTU, pmax=1.0)
    low = EcnThresholds(kmin_bytes=5 * MTU, kmax_bytes=10 * MTU, pmax=1.0)
    policy = SwitchesHalfway(high, low)
    log = tmp_path / "ctl.jsonl"
    with start(switch, ecn=True) as fab, controlled(fab, policy, log):
        policy.at = time.time() + 2.0 + 4.0  # scenario start-up, then half the run
        phase = congest(fab, tmp_path / "change")
    probe = probe_queue(phase)
    t_change = policy.at - phase.meta["t0"]
    # a probe sent just before the change may leave the queue after it (≤ 100 ms queued)
    settled = (probe["t"] > PROBES_ALONE_S + 1.0) & (probe["t"] < t_change - 0.2)
    before = probe["queue"][settled]
    after = probe["queue"][probe["t"] > t_change + 1.0]
    marked_before = probe["ce"][settled]
    # A probe's delay measures the queue ahead of it on arrival, the program marks on the
    # queue when it leaves: a queue that grows while the probe waits, or a probe delayed
    # outside the switch, can show a mark below kmin (1 of ~220 probes, the only mark
    # before the change, in 2 of 3 runs under stress-ng). At most 1 % of the probes.
    below = before < high.kmin_bytes - 3000
    wrongly, allowed = int(marked_before[below].sum()), max(1.0, 0.01 * len(before))
    assert wrongly <= allowed, f"{wrongly} of {len(before)} probes marked below kmin"
    # Teeth, wherever the queue settles (often above high's kmin, leaving few probes below
    # it): the low setting in force too early would mark every probe that saw more than its
    # kmax; the high one marks those below its own kmax with RED's probability. The marks
    # seen must be nearer high's expectation than low's (all of them).
    mid = (before > low.kmax_bytes + 3000) & (before < high.kmax_bytes - 3000)
    ramp = (before[mid] - high.kmin_bytes) / (high.kmax_bytes - high.kmin_bytes)
    expected_high = float(np.sum(np.clip(ramp, 0, 1) * high.pmax))
    assert mid.sum() >= 20, f"only {mid.sum()} probes between low's kmax and high's"
    assert marked_before[mid].sum() < (expected_high + mid.sum()) / 2
    assert after.mean() < 0.5 * before.mean()  # marking from 5 packets on pulls the queue down
    # the controller's telemetry shows the new thresholds on h4's port after the change
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    port4 = [r for r in rows if r["port"] == 4 and r["tx_pkts"] > 0]
    seen = {r["kmin_bytes"] for r in port4 if r["t"] > policy.at + 1.0}
    assert seen == {low.kmin_bytes}
    assert {r["kmin_bytes"] for r in port4 if r["t"] < policy.at} == {high.kmin_bytes}


def _tiny_at_5ms() -> Topology:
    topo = preset("tiny")
    topo.links = [dataclasses.replace(lk, delay_s=5e-3) for lk in topo.links]
    return topo


@pytest.mark.parametrize(
    ("make", "dst", "links"),
    [(_tiny_at_5ms, "h2", 2), (lambda: preset("leafspine-2x2-20ms"), "h3", 4)],
    ids=["tiny-5ms", "leafspine-2x2-20ms"],
)
def test_link_delays_give_the_topologys_rtt(switch, tmp_path, make, dst, links):
    """The embedded switch's delay lines put each link's delay on the path (issue 16: this
    kernel has no netem): a ping's RTT grows by twice the delay of each link it crosses
    (h1 -> s1 -> h2 on the star; h1 -> leaf1 -> spine -> leaf2 -> h3 on the leaf-spine)."""
    if switch != "embedded":
        pytest.skip("only the embedded target has per-port delay lines (BMv2 runs without)")
    topo = make()
    delay_s = 5e-3
    assert {lk.delay_s for lk in topo.links} == {delay_s}
    options = FabricOptions(switch=switch, port_offset=port_offset())

    def min_rtt_s(fab: Fabric) -> float:
        # the least of 30: what the path adds, without a busy machine's scheduling delays
        out = fab.host("h1").cmd(f"ping -c 30 -i 0.05 -W 2 {topo.hosts[dst].ip}")
        rtts = [float(x.split("time=")[1].split()[0]) for x in out.splitlines() if "time=" in x]
        assert len(rtts) >= 25, out
        return min(rtts) / 1e3

    with Fabric(topo, options) as fab, controlled(fab, fixed(SETTING), tmp_path / "ctl.jsonl"):
        fab.host("h1").cmd(f"ping -c 3 -i 0.2 -W 2 {topo.hosts[dst].ip}")  # routes and ARP
        delayed = min_rtt_s(fab)
        for name in topo.switches:  # the same fabric without: its base
            fab.switch(name).target.set_port_delay(fab.specs[name], 0.0)
        base = min_rtt_s(fab)
    # every link's delay both ways. Each of the 2·links delay lines a ping crosses releases
    # it on a thread's wake-up, late by about what a hop costs without them on this machine
    # now (~0.35 ms per line measured on a busy one): the margin is half a link's delay plus
    # the whole base RTT
    slack = delay_s / 2 + base
    assert delayed - base == pytest.approx(2 * links * delay_s, abs=slack), (delayed, base)
    # and the simulator trains on that RTT (its model of the emulation: the delay lines plus
    # the switch's own time per link)
    assert delayed == pytest.approx(2 * links * emulated_link_delay_s(topo), abs=slack)
