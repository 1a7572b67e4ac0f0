"""The hand-written incast rule (agent/rule.py): what it decides from telemetry, what it refuses,
and that the evaluator runs rules as one batch with the same outcomes as alone."""

from __future__ import annotations

import numpy as np
import pytest

from ecntune.agent import evaluate
from ecntune.agent.actions import alpha_bytes
from ecntune.agent.policy import load_policy
from ecntune.sim.scenario import SimScenario
from ecntune.telemetry import PortTelemetry

RULE = "rule:senders>=4:2a,16a,0.2:0a,0a,1"


def history(
    senders: list[list[float]], qmax_bytes: float = 9e4, link_bps: float = 20e6
) -> PortTelemetry:
    """k intervals (rows) of ports (columns) that counted these senders and saw this deepest
    queue; the rest plausible."""
    s = np.asarray(senders, np.float32)
    one = np.ones_like(s)
    values = (0.1, link_bps, 1e5, 70, 1e4, 7, 5e6, 70)
    return PortTelemetry(
        *(one * v for v in values), qdepth_max_bytes=qmax_bytes * one, kmin_bytes=2e4 * one,
        kmax_bytes=8e4 * one, pmax=0.1 * one, senders=s, elephant_bytes=0 * one,
    )  # fmt: skip


def test_a_port_that_saw_an_incast_in_its_window_gets_the_incast_setting():
    rule = load_policy(RULE)
    # port 0 never reaches 4 senders; port 1 did two intervals ago; port 2 now
    th = rule.act(history([[1, 4.2, 1], [2, 1, 2], [3, 1, 5]]))
    alpha = float(alpha_bytes(20e6))
    np.testing.assert_allclose(th.kmin_bytes, [0, 2 * alpha, 2 * alpha], rtol=1e-6)
    np.testing.assert_allclose(th.kmax_bytes, [1, 16 * alpha, 16 * alpha], rtol=1e-6)
    np.testing.assert_allclose(th.pmax, [1, 0.2, 0.2], rtol=1e-6)
    assert rule.name == RULE


def test_a_queue_condition_leaves_many_senders_without_a_queue_alone():
    """qmax>=8a: the senders count fires only where the deepest queue reached 8 α too."""
    rule = load_policy("rule:senders>=4,qmax>=8a:2a,16a,0.2:0a,0a,1")
    alpha = float(alpha_bytes(20e6))
    many = [[1, 6, 5]] * 3
    shallow = rule.act(history(many, qmax_bytes=7.5 * alpha))
    deep = rule.act(history(many, qmax_bytes=8 * alpha))
    np.testing.assert_allclose(shallow.kmax_bytes, [1, 1, 1])
    np.testing.assert_allclose(deep.kmax_bytes, [1, 16 * alpha, 16 * alpha], rtol=1e-6)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rule:qlen>=4:1a,2a,1:0a,0a,1", "senders>="),
        ("rule:senders>=many:1a,2a,1:0a,0a,1", "must be numbers"),
        ("rule:senders>=4,qmax>=9000:1a,2a,1:0a,0a,1", "α units"),
        ("rule:senders>=4,qlen>=2a:1a,2a,1:0a,0a,1", "qmax>=Qa"),
        ("rule:senders>=4:20KB,80KB,1:0a,0a,1", "α units"),
        ("rule:senders>=4:8a,2a,1:0a,0a,1", "kmin <= kmax"),
        ("rule:senders>=4:1a,2a,1", "senders>=N"),
    ],
)
def test_a_malformed_rule_is_refused_with_what_is_wrong(spec: str, message: str):
    with pytest.raises(ValueError, match=message):
        load_policy(spec)


def test_rules_run_as_one_batch_and_one_that_never_fires_is_its_static_setting():
    """Two rules share one compiled simulation; a rule whose trigger no port reaches
    decides exactly as its second setting run as a static."""
    sc = SimScenario("tiny", load=0.7, incast_degree=2, episode_s=0.2)
    rules = {"fires": load_policy(RULE), "never": load_policy("rule:senders>=1e9:8a,8a,1:1a,4a,1")}
    together = evaluate.run_policies(sc, rules, episodes=2, seed=3, drain_factor=0.5)
    signature = evaluate.policy_signature(rules["fires"])
    batched = evaluate._rollout(
        evaluate.scenario_env(sc), signature, None, 0.5, batched_params=True
    )
    assert evaluate._BATCHES[batched] == {4}  # 2 rules x 2 episodes in one call
    static = evaluate.run_policies(
        sc, {"s": load_policy("static:1a,4a,1")}, episodes=2, seed=3, drain_factor=0.5
    )["s"]
    np.testing.assert_array_equal(together["never"].fct_s, static.fct_s)
    np.testing.assert_array_equal(together["never"].settings, static.settings)
    assert not np.array_equal(together["fires"].settings, together["never"].settings)


def test_the_controller_runs_a_rule_from_its_digests():
    """The controller's pure loop with a rule: the port whose digest shows eight senders and a
    deep queue gets the incast setting, the one with a single sender keeps the other."""
    from ecntune.controller.loop import SwitchLoop
    from ecntune.controller.safety import Guard
    from ecntune.p4src import encoding as enc

    link_bps, interval_s = 20e6, 0.1
    rule = load_policy("rule:senders>=4,qmax>=16a:8a,32a,1:0a,0a,1")
    loop = SwitchLoop(
        "s1", {1: link_bps, 2: link_bps}, rule, load_policy("static:secn1"),
        interval_s=interval_s, buffer_bytes=96_000,
        guard=Guard(fallback_after=10**9, baseline_intervals=0),
    )  # fmt: skip

    def digest(port: int, bitmap: int) -> dict[str, int]:
        d = dict.fromkeys(enc.DIGEST_FIELDS, 0)
        d.update(port=port, interval_us=int(interval_s * 1e6), tx_bytes=200_000, tx_pkts=133,
                 qdepth_sum_bytes=133 * 20_000, qdepth_samples=133, qdepth_max_bytes=40_000,
                 sender_bitmap=bitmap)  # fmt: skip
        return d

    loop.on_digest(digest(1, 0xFF))  # eight senders in the sketch
    loop.on_digest(digest(2, 0x1))
    writes = dict(loop.tick(1.0).writes)
    alpha = float(alpha_bytes(link_bps))
    incast, calm = writes[1].thresholds, writes[2].thresholds
    assert float(incast.kmax_bytes) == pytest.approx(32 * alpha, rel=0.01)
    assert float(incast.kmin_bytes) == pytest.approx(8 * alpha, rel=0.01)
    assert float(calm.kmax_bytes) <= 1.0 + 1e-6
