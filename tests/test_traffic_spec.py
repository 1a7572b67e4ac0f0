"""One traffic spec for simulator and emulation: shared defaults, one validation, one timing.

The simulator trains on what the emulation runs (DESIGN.md), so a SimScenario and a fabric
Scenario built from the same traffic fields must describe the same traffic, and a field
one side accepts the other must not silently read differently.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from ecntune.fabric.scenario import Scenario
from ecntune.sim.scenario import SimScenario
from ecntune.traffic.spec import TrafficSpec


def test_simulated_and_emulated_scenarios_share_the_traffic_defaults():
    shared = TrafficSpec().traffic_fields()
    assert SimScenario("star8").traffic_fields() == shared
    assert Scenario().traffic_fields() == shared
    storm = {"load": 0.4, "incast_degree": 6, "incast_from_s": 10.0, "switch_to": "fb_hadoop"}
    sim, emu = SimScenario("star8-20ms", **storm), Scenario(duration_s=20.0, **storm)
    assert sim.traffic_fields() == emu.traffic_fields()
    # the same run length gives the same incast rhythm on both sides
    assert sim.incast_period(20.0) == emu.incast_period(emu.duration_s) == 2.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workload": "nope"}, "unknown workload"),
        ({"switch_to": "nope"}, "unknown workload"),
        ({"load": -0.1}, "load"),
        ({"load_to": -1.0}, "load"),
        ({"incast_degree": -1}, "incast"),
        ({"incast_bytes": 0}, "incast"),
        ({"incast_period_s": 0.0}, "incast_period_s"),
        ({"incast_from_s": -1.0}, "incast_from_s"),
    ],
)
def test_bad_traffic_is_refused_the_same_way_on_both_sides(fields: dict, message: str):
    for make in (TrafficSpec, lambda **f: SimScenario("star8", **f), Scenario):
        with pytest.raises(ValueError, match=message):
            make(**fields)


def test_the_emulation_refuses_loads_its_senders_cannot_offer():
    with pytest.raises(ValueError, match=r"loads in \(0, 1\]"):
        Scenario(load=0.5, load_to=1.5)
    assert SimScenario("star8", load=1.5).load == 1.5  # the simulator may overload a link


def test_a_switch_or_step_halfway_splits_the_run_into_two_phases():
    assert TrafficSpec(load=0.3).phases(4.0) == [(0.0, 4.0, "websearch", 0.3)]
    step = TrafficSpec(load=0.3, load_to=0.8).phases(4.0)
    assert step == [(0.0, 2.0, "websearch", 0.3), (2.0, 2.0, "websearch", 0.8)]
    switch = TrafficSpec(workload="fb_hadoop", switch_to="websearch").phases(4.0)
    assert switch == [(0.0, 2.0, "fb_hadoop", 0.6), (2.0, 2.0, "websearch", 0.6)]


def test_incast_bursts_count_from_their_first_one():
    assert TrafficSpec().incast_bursts(4.0) == 0  # no incast
    assert TrafficSpec(incast_degree=4).incast_bursts(4.0) == 10  # a tenth of the run apart
    storm = TrafficSpec(incast_degree=4, incast_period_s=0.5, incast_from_s=2.0)
    assert storm.incast_bursts(4.0) == 4
    assert TrafficSpec(incast_degree=4, incast_from_s=5.0).incast_bursts(4.0) == 0


def test_the_simulator_starts_an_incast_storm_where_the_spec_says():
    """An incast storm from halfway (the demo's --storm) in the simulator: no burst before
    it, then one every period, each from `incast_degree` senders into one receiver."""
    sc = SimScenario(
        "star8", load=0.0, incast_degree=4, incast_period_s=0.5, incast_from_s=2.0, episode_s=4.0
    )
    assert "+4:1 from 2 s" in sc.label
    params = sc.env().reset(jax.random.key(0))[1].params
    started = np.isfinite(np.asarray(params.start))
    start, size = np.asarray(params.start)[started], np.asarray(params.size)[started]
    bursts = sorted(set(np.round(start, 6)))
    assert len(start) == 4 * sc.incast_bursts(4.0) == 16
    assert bursts == pytest.approx([2.25, 2.75, 3.25, 3.75])  # half a period into each
    assert set(size) == {sc.incast_bytes}


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_commands_refuse_bad_traffic_before_simulating(command: str, tmp_path: Path):
    ecntune = str(Path(sys.executable).with_name("ecntune"))
    bad = [ecntune, command, "--switch-to", "nope", "--out", str(tmp_path / "out")]
    run = subprocess.run(bad, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "unknown workload 'nope'" in run.stderr
    assert not (tmp_path / "out").exists()


def test_an_incast_wider_than_the_fabric_gives_its_last_sender_the_extra_flows():
    """leafspine-2x2 has four hosts: a 4:1 incast (in the star8 held-out mixes) is four
    flows from the three other hosts, one of which opens two."""
    sc = SimScenario("leafspine-2x2", load=0.0, incast_degree=4, episode_s=1.0)
    params = sc.env().reset(jax.random.key(1))[1].params
    start, src = np.asarray(params.start), np.asarray(params.src)
    bursts = sorted(set(start[np.isfinite(start)]))
    assert len(bursts) == sc.incast_bursts(1.0)
    for t in bursts:
        senders = src[start == t]
        assert len(senders) == 4
        assert len(set(senders)) == 3


def test_the_moment_traffic_changes_is_the_storms_start_or_halfway():
    """What a report marks as "the change" and compares thresholds around."""
    assert TrafficSpec(incast_degree=4).change_at_s(20.0) is None  # incasts from the start
    assert TrafficSpec(incast_degree=4).describe_change() == "nothing"
    storm = TrafficSpec(incast_degree=6, incast_from_s=10.0, incast_period_s=0.5)
    assert storm.change_at_s(20.0) == 10.0
    assert storm.change_at_s(8.0) is None  # the storm would begin after the run
    step = TrafficSpec(load=0.4, load_to=0.7)
    assert step.change_at_s(20.0) == 10.0
    assert step.describe_change() == "load 40% → 70%"
    both = TrafficSpec(incast_degree=6, incast_from_s=4.0, switch_to="fb_hadoop")
    assert both.change_at_s(20.0) == 4.0  # the first of the two
    assert both.describe_change() == "6:1 incasts begin; workload websearch → fb_hadoop"
