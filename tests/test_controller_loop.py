"""The control loop's logic without a switch: decisions, confirmation, safety, fallback, config."""

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import numpy as np
import pytest

from ecntune.agent.static import StaticPolicy
from ecntune.controller.config import ConfigError, ControllerConfig
from ecntune.controller.loop import SwitchLoop
from ecntune.controller.safety import Guard, clamp
from ecntune.p4src import encoding as enc
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import preset

if TYPE_CHECKING:  # finsy is imported late, as the controller does
    from ecntune.controller.app import SwitchRunner

BW = 20e6
INTERVAL = 0.1


def digest(port: int = 1, regs: enc.EcnRegisters | None = None, **kw: int) -> dict[str, int]:
    regs = regs or enc.EcnRegisters(0, 0, 0, 0)
    d = dict.fromkeys(enc.DIGEST_FIELDS, 0)
    d.update(port=port, interval_us=int(INTERVAL * 1e6), tx_bytes=100_000, tx_pkts=70,
             qdepth_sum_bytes=70 * 3000, qdepth_samples=70, kmin=regs.kmin, kmax=regs.kmax,
             pmax=regs.pmax_bp)  # fmt: skip
    d.update(kw)
    return d


@dataclass
class Scripted:
    """A test policy: returns what it is told, or raises."""

    out: EcnThresholds | Exception
    name: str = "scripted"

    def act(self, history: PortTelemetry) -> EcnThresholds:
        assert history.tx_bytes.shape == (3, 2)  # k intervals x ports, oldest first
        if isinstance(self.out, Exception):
            raise self.out
        return self.out


def make_loop(policy, baseline_intervals=0, fallback_after=3) -> SwitchLoop:
    return SwitchLoop(
        "s1", {1: BW, 2: BW}, policy, StaticPolicy("secn1"), interval_s=INTERVAL,
        buffer_bytes=96_000, guard=Guard(fallback_after, baseline_intervals),
    )  # fmt: skip


def agent_out(kmin=3000.0, kmax=30000.0, pmax=0.1) -> EcnThresholds:
    return EcnThresholds(np.array([kmin] * 2), np.array([kmax] * 2), np.array([pmax] * 2))


def test_first_tick_writes_every_port_then_only_changes():
    loop = make_loop(Scripted(agent_out()))
    d = loop.tick(0.0)
    assert [p for p, _ in d.writes] == [1, 2]
    assert d.writes[0][1] == enc.encode_thresholds(3000, 30000, 0.1)
    assert loop.tick(0.1).writes == []
    assert len(d.rows) == 2
    assert d.rows[0]["policy"] == "scripted"


def test_telemetry_feeds_the_history_and_idle_ports_get_zero_intervals():
    loop = make_loop(Scripted(agent_out()))
    loop.on_digest(digest(1))
    loop.on_digest(digest(1))  # two digests in one decision interval add up
    rows = loop.tick(0.0).rows
    assert rows[0]["tx_bytes"] == 200_000
    assert rows[0]["interval_s"] == pytest.approx(2 * INTERVAL)
    assert rows[1]["tx_bytes"] == 0
    assert rows[1]["interval_s"] == INTERVAL


@pytest.mark.parametrize(
    ("bad", "reason"),
    [(dict(interval_us=0), "interval"), (dict(tx_bytes=2**32 - 1), "exceeds the link"),
     (dict(port=9), "does not have"), (dict(marked_pkts=1000), "more marked")],
)  # fmt: skip
def test_bogus_telemetry_benches_the_agent_not_the_controller(bad, reason):
    loop = make_loop(Scripted(agent_out()))
    loop.on_digest(digest(**{"port": 1, **bad}))
    assert loop.guard.mode == "fallback"
    assert reason in loop.guard.reason
    d = loop.tick(0.0)
    assert d.writes[0][1] == enc.encode_thresholds(5000, 96_000, 0.01)  # SECN1, clamped to buffer
    # the rows of the interval after say so, with the reason; later rows only the mode
    assert {r["mode"] for r in d.rows} == {"fallback"}
    assert all(reason in r["mode_change"] for r in d.rows)
    assert {r["mode_change"] for r in loop.tick(INTERVAL).rows} == {None}


@pytest.mark.parametrize(
    "out", [RuntimeError("boom"), agent_out(kmin=float("nan")), agent_out(pmax=float("inf"))]
)
def test_an_agent_that_raises_or_diverges_falls_back_loudly(out, caplog):
    loop = make_loop(Scripted(out))
    d = loop.tick(0.0)
    assert loop.guard.mode == "fallback"
    assert d.rows[0]["policy"] == "static:secn1"
    assert "falling back" in caplog.text


def test_reward_below_the_static_baseline_for_n_intervals_falls_back():
    # Baseline phase: SECN1 with short queues. Then an agent that lets the queue grow.
    loop = make_loop(Scripted(agent_out(kmin=90_000, kmax=96_000)), baseline_intervals=3)
    rows = []
    for i in range(3):
        loop.on_digest(digest(1, qdepth_sum_bytes=0))
        rows += loop.tick(i * INTERVAL).rows
    assert loop.guard.mode == "agent"
    for i in range(4):
        loop.on_digest(digest(1, qdepth_sum_bytes=70 * 90_000))
        rows += loop.tick((3 + i) * INTERVAL).rows
    assert loop.guard.mode == "fallback"
    assert "below the static baseline" in loop.guard.reason
    # every row says who chose its interval's setting; a change shows on the first interval
    # decided in the new mode, with its reason (the guard judges an interval's reward after
    # that interval decided, so the third agent interval is the last one the agent chose)
    port1 = [r for r in rows if r["port"] == 1]
    assert [r["mode"] for r in port1] == ["baseline"] * 3 + ["agent"] * 3 + ["fallback"]
    assert [r["policy"] for r in port1] == ["static:secn1"] * 3 + ["scripted"] * 3 + [
        "static:secn1"
    ]
    changes = {i: r["mode_change"] for i, r in enumerate(port1) if r["mode_change"]}
    assert list(changes) == [3, 6]
    assert changes[3].startswith("agent: baseline reward")
    assert changes[6].startswith("fallback: mean reward 0.400 over the last 3 busy intervals")


def test_the_baseline_counts_only_busy_intervals():
    # before the traffic starts a port sends only chatter: an idle fabric's reward (no queue)
    # is no baseline for a loaded one, so the preset runs on until it has busy intervals
    loop = make_loop(Scripted(agent_out()), baseline_intervals=3)
    for i in range(10):
        loop.on_digest(digest(1, tx_bytes=300, tx_pkts=3, qdepth_sum_bytes=0, qdepth_samples=3))
        loop.tick(i * INTERVAL)
    assert loop.guard.mode == "baseline"
    assert loop.guard.baseline_rewards == []
    for i in range(3):
        loop.on_digest(digest(1))  # 100 KB in 0.1 s: 40 % of the link
        loop.tick((10 + i) * INTERVAL)
    assert loop.guard.mode == "agent"
    assert len(loop.guard.baseline_rewards) == 3


def test_an_agent_within_the_baselines_own_spread_keeps_running():
    """The preset's reward varies with the traffic; the agent is judged against that spread."""
    rng = np.random.default_rng(0)
    baseline = 0.65 + 0.03 * rng.standard_normal(20)  # SECN1's rewards under the demo's load
    guard = Guard(fallback_after=20, baseline_intervals=20)
    for r in baseline:
        guard.record(float(r))
    assert guard.mode == "agent"
    assert guard.margin == pytest.approx(2 * np.std(baseline))
    spread = float(np.std(baseline))
    for r in guard.baseline - spread + 0.03 * rng.standard_normal(200):  # a bit worse
        guard.record(float(r))
    assert guard.mode == "agent"
    for _ in range(5):
        guard.record(guard.baseline - 3 * spread)  # clearly worse, but a few intervals only
    assert guard.mode == "agent"
    for _ in range(15):
        guard.record(guard.baseline - 3 * spread)
    assert guard.mode == "fallback"
    assert "below the static baseline" in guard.reason


def test_the_policy_is_called_once_before_any_traffic():
    """A jitted agent compiles on its first call; done in the loop, that stalled a short demo's
    agent phase on a busy machine. One that cannot even start is benched at once."""
    calls = []

    @dataclass
    class Counting(Scripted):
        def act(self, history: PortTelemetry) -> EcnThresholds:
            calls.append(history.tx_bytes.copy())
            return super().act(history)

    make_loop(Counting(agent_out()), baseline_intervals=20)
    assert len(calls) == 1
    assert not calls[0].any()  # an idle history
    broken = make_loop(Scripted(RuntimeError("no such checkpoint")), baseline_intervals=20)
    assert broken.guard.mode == "fallback"
    assert "failed at start" in broken.guard.reason


def test_a_write_that_never_shows_in_telemetry_is_rewritten(caplog):
    loop = make_loop(Scripted(agent_out()))
    port, regs = loop.tick(0.0).writes[0]
    for _ in range(4):
        loop.on_digest(digest(port))  # still the old (zero) setting
    pending = loop.decide(0.1)
    assert port not in pending.held  # what the switch holds is unknown: every register
    d = loop.settle(pending)
    assert d.writes[0] == (port, regs)
    assert "not in effect" in caplog.text
    assert [r["rewrites"] for r in d.rows] == [1, 0]  # rows count them per port, for reports
    loop.on_digest(digest(port, regs))
    assert loop.ports[port].confirmed


def test_clamp_keeps_settings_writable():
    raw = EcnThresholds(np.array([-5.0, 50e3]), np.array([1e9, 10e3]), np.array([2.0, -1.0]))
    th = clamp(raw, 96e3)
    assert th.kmax_bytes.tolist() == [96e3, 10e3]
    assert th.kmin_bytes.tolist() == [0, 10e3]
    assert th.pmax.tolist() == [1.0, 0.0]


def test_config_is_validated_with_useful_messages(tmp_path):
    cfg = ControllerConfig.from_dict({"topology": "tiny", "policy": "static:secn2"})
    assert cfg.address("s1") == "127.0.0.1:9559"
    with pytest.raises(ConfigError, match="unknown settings"):
        ControllerConfig.from_dict({"topology": "tiny", "polcy": "x"})
    with pytest.raises(ConfigError, match="unknown topology"):
        ControllerConfig.from_dict({"topology": "nope"})
    with pytest.raises(ConfigError, match="static preset"):
        ControllerConfig.from_dict({"topology": "tiny", "fallback": "acc:x"})
    with pytest.raises(ConfigError, match="interval_s"):
        ControllerConfig(topology=preset("tiny"), interval_s=0)
    bad = tmp_path / "c.yaml"
    bad.write_text("topology: [unclosed")
    with pytest.raises(ConfigError, match="cannot read"):
        ControllerConfig.from_file(bad)


def test_a_restarted_controller_resumes_from_the_switch_checkpoint(tmp_path):
    import jax

    from ecntune.agent import ddqn

    config = ddqn.DdqnConfig(pmax=(0.1, 1.0), levels=3)
    graph, shipped = ddqn.build_network(config, jax.random.key(0))
    _, tuned = ddqn.build_network(config, jax.random.key(1))
    ddqn.save(tmp_path / "shipped.msgpack", config, shipped, {})
    ckpts = tmp_path / "ckpts"
    settings = {
        "topology": preset("tiny"),
        "policy": f"acc:{tmp_path / 'shipped.msgpack'}",
        "checkpoint_dir": ckpts,
        "online_learning": True,
    }
    first = runner(ControllerConfig(**settings))
    assert first.policy.online
    obs = np.eye(18, dtype=np.float32)[:3]
    assert np.allclose(
        ddqn.q_values(graph, first.policy.params, obs), ddqn.q_values(graph, shipped, obs)
    )
    # what the running controller saved (atomically) for s1 is what a restart picks up
    ddqn.save(ckpts / "s1.msgpack", config, tuned, {"online_steps": 500})
    again = runner(ControllerConfig(**settings))
    assert np.allclose(
        ddqn.q_values(graph, again.policy.params, obs), ddqn.q_values(graph, tuned, obs)
    )


def test_the_controller_judges_an_agent_by_the_reward_it_was_trained_with(tmp_path):
    """The guard compares the agent's reward with the fallback's: both by the agent's own
    reward (kind and weights from its checkpoint), whatever the config's `reward` says,
    which serves static policies."""
    from ecntune.agent import ippo
    from ecntune.agent.rewards import SIMULATOR_REWARDS, THROUGHPUT_FIRST, Reward

    config = ippo.IppoConfig(pmax=(0.1, 1.0), levels=3)
    _, params = ippo.build_networks(config, jax.random.key(0))
    ckpt = tmp_path / "pet.msgpack"
    ippo.save(ckpt, config, params, {"reward": Reward("pet", THROUGHPUT_FIRST).to_meta()})
    settings = {"topology": preset("tiny"), "reward": "acc"}
    agent = runner(ControllerConfig(policy=f"pet:{ckpt}", **settings))
    assert agent.loop.reward == Reward("pet", THROUGHPUT_FIRST)
    static = runner(ControllerConfig(policy="static:secn1", **settings))
    assert static.loop.reward == Reward("acc")
    # the rows' rewards are the agent's formula: PET's 1/(1 + q/α) delay term, weighted 0.3
    rows = agent.loop.tick(0.0).rows
    assert rows[0]["reward"] == pytest.approx(0.3 * 1.0)  # idle: no throughput, empty queue
    assert rows[0]["judged_by"] == "pet"  # its own: nothing for the report to flag
    # an agent trained on a simulator-only reward: the guard judges it by the config's
    # paper reward, which telemetry carries (the loop itself takes no other), and it does
    # not learn online on an objective it was not trained for
    for kind in SIMULATOR_REWARDS:
        ippo.save(ckpt, config, params, {"reward": Reward(kind).to_meta()})
        for live in ("acc", "pet"):
            judged = runner(ControllerConfig(policy=f"pet:{ckpt}", **{**settings, "reward": live}))
            assert judged.loop.reward == Reward(live)
            rows = judged.loop.tick(0.0).rows  # and its rows say so, for the demo's report
            assert {r["judged_by"] for r in rows} == {f"{live} (trained on {kind})"}
        with pytest.raises(ConfigError, match=f"{kind} reward.*cannot learn online"):
            runner(ControllerConfig(policy=f"pet:{ckpt}", online_learning=True, **settings))
        with pytest.raises(ValueError, match=f"{kind}.*cannot be computed from telemetry"):
            SwitchLoop(
                "s1", {1: 1e9}, StaticPolicy("secn1"), StaticPolicy("secn1"), interval_s=0.1,
                buffer_bytes=1e5, guard=Guard(20, 20), reward=kind,
            )  # fmt: skip


def runner(config: ControllerConfig) -> "SwitchRunner":
    """s1's SwitchRunner as the controller makes it (its policy from switch_policies)."""
    from ecntune.controller.app import SwitchRunner, TelemetryLog, switch_policies

    return SwitchRunner("s1", config, TelemetryLog(None), switch_policies(config)["s1"])


def test_an_in_switch_policy_writes_nothing_while_it_decides_and_a_fallback_rewrites_all():
    """--in-switch: the baseline preset is written as always; once the agent is in charge the
    switch's table decides (no writes, the rows report the setting the switch holds); on a
    fallback the tables are to go (in_switch False) and every port gets the preset again,
    whatever the switch set last."""
    agent = Scripted(agent_out())
    loop = SwitchLoop(
        "s1", {1: BW, 2: BW}, agent, StaticPolicy("secn1"), interval_s=INTERVAL,
        buffer_bytes=96_000, guard=Guard(3, 1), in_switch=True,
    )  # fmt: skip
    first = loop.tick(0.0)
    assert not first.in_switch
    assert [p for p, _ in first.writes] == [1, 2]  # the baseline
    preset = dict(first.writes)
    loop.on_digest(digest(1, preset[1]))
    assert not loop.tick(0.1).in_switch  # the baseline's busy interval: the agent takes over
    assert loop.guard.mode == "agent"
    chosen = enc.encode_thresholds(6000, 12000, 1.0)  # what the switch's table picked
    loop.on_digest(digest(1, chosen))
    d = loop.tick(0.2)
    assert d.in_switch
    assert d.writes == []
    row = next(r for r in d.rows if r["port"] == 1)
    assert row["policy"] == "scripted (in the switch)"
    assert (row["set_kmin"], row["set_kmax"]) == (6000, 12000)
    loop.guard.fall_back("test: the agent is benched")
    d = loop.tick(0.3)
    assert not d.in_switch
    assert dict(d.writes) == preset  # port 2 too, though the preset was its last write
    assert next(r for r in d.rows if r["port"] == 1)["policy"] == "static:secn1"


class PollerCompletionQueue:
    """Shaped like grpc.aio's poller: a callback that hands an event to another loop."""

    def __init__(self, other: asyncio.AbstractEventLoop) -> None:
        self.other = other

    def _handle_events(self) -> None:
        self.other.call_soon_threadsafe(print)


def test_the_controllers_loop_drops_only_grpcs_event_for_a_closed_loop(caplog):
    from ecntune.controller.app import quiet_grpc_poller

    closed = asyncio.new_event_loop()
    closed.close()
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(quiet_grpc_poller)

    def other_failure() -> None:
        raise RuntimeError("Event loop is closed")  # the same error, not from the poller

    try:
        with caplog.at_level(logging.DEBUG):
            loop.call_soon(PollerCompletionQueue(closed)._handle_events)
            loop.call_soon(other_failure)
            loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        loop.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "other_failure" in errors[0].getMessage()
    assert any("ignored" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def test_register_updates_are_the_messages_finsy_would_build():
    """The controller builds its threshold writes as P4Runtime messages itself (issue 20:
    finsy's encoding cost three times as much); they must be exactly finsy's messages."""
    import finsy as fy
    from finsy.proto import p4r

    from ecntune.controller.app import register_updates
    from ecntune.p4src import PROGRAM

    schema = fy.P4Schema(PROGRAM.p4info_path)
    writes = [
        (1, enc.encode_thresholds(20_000, 80_000, 0.1)),
        (31, enc.encode_thresholds(0, 1, 0.0)),  # zeros are one byte, not empty
        (7, enc.encode_thresholds(2**32 - 2, 2**32 - 1, 1.0)),  # the widest values
    ]
    finsys = [
        p4r.Update(
            type=p4r.Update.MODIFY,
            entity=fy.P4RegisterEntry(name, index=port, data=value).encode(schema),
        )
        for port, regs in writes
        for name, value in regs.as_dict().items()
    ]
    ours = register_updates(schema, writes)
    assert len(ours) == 4 * len(writes)
    assert [u.SerializeToString() for u in ours] == [u.SerializeToString() for u in finsys]


def test_a_port_whose_setting_is_known_gets_only_its_changed_registers():
    """decide says what each written port held before (from the last write, never after a
    rewrite), and register_updates leaves the registers that keep their value be."""
    import finsy as fy

    from ecntune.controller.app import register_updates
    from ecntune.p4src import PROGRAM

    policy = Scripted(agent_out(3000, 30000, 0.1))
    loop = make_loop(policy)
    first = loop.decide(0.0)
    assert first.held == {}  # nothing written yet: every register of every port
    loop.settle(first)
    policy.out = agent_out(6000, 60000, 0.1)
    second = loop.decide(0.1)
    old, new = first.writes[0][1], second.writes[0][1]
    assert second.held == {1: old, 2: old}
    schema = fy.P4Schema(PROGRAM.p4info_path)
    pmax_id = schema.registers[enc.REGISTER_PMAX].id
    diffed = register_updates(schema, second.writes, second.held)
    assert old.pmax_bp == new.pmax_bp
    assert len(diffed) == 3 * 2  # kmin, kmax, slope of both ports
    assert pmax_id not in {u.entity.register_entry.register_id for u in diffed}
    full = register_updates(schema, second.writes)
    assert [u for u in full if u.entity.register_entry.register_id != pmax_id] == diffed


def test_a_tick_waits_for_the_first_digest_list_an_interval_after_the_last():
    """controller/app.py Ticker: the switch sends a list every half interval; one arriving
    sooner than TICK_SPACING_INTERVALS after the last tick began leaves its samples for the
    tick the next list starts. Without lists the ticker decides after two list periods: the
    interval's, or a slower switch's (BMv2's server sends one per 100-200 ms), never more
    than MAX_LIST_PERIOD_INTERVALS (a pause in the traffic is not the switch's period). Only
    lower bounds on time: a busy machine runs timers late, never early."""
    from ecntune.controller import app

    def wait(interval_s: float, lists_at: tuple[float, ...], gap_s: float) -> tuple[bool, float]:
        config = ControllerConfig(
            topology=preset("tiny"), policy="static:secn1", interval_s=interval_s
        )
        r = runner(config)
        r.digests.gap_s = gap_s

        async def next_tick() -> tuple[bool, float]:
            start = time.perf_counter()
            for at in lists_at:
                asyncio.get_running_loop().call_later(at, r.digests.arrived.set)
            by_list = await r.ticker._next_interval(start)
            return by_list, time.perf_counter() - start

        return asyncio.run(next_tick())

    # lists at half an interval and at one: the first starts no tick, the second does
    by_list, took_s = wait(1.0, (0.5, 1.0), math.nan)
    assert by_list
    assert took_s >= 1.0
    # no list: two intervals (no list period known yet)
    by_list, took_s = wait(0.2, (), math.nan)
    assert not by_list
    assert took_s >= 2 * 0.2
    # no list from a switch whose lists came 0.6 s apart: two of its periods
    by_list, took_s = wait(0.2, (), 0.6)
    assert not by_list
    assert took_s >= 2 * 0.6
    # a gap of minutes is a pause in the traffic: ten intervals count as the period
    by_list, took_s = wait(0.05, (), 300.0)
    assert not by_list
    assert 2 * app.MAX_LIST_PERIOD_INTERVALS * 0.05 <= took_s < 10.0
