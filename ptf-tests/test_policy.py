"""The in-switch policy (issue 20): at the end of each telemetry interval ecn.p4 picks the
port's next thresholds from `policy_tree`, keyed on the interval it just closed; the
controller installs the tree (controller/switch_policy.py). Each digest reports the
thresholds in force during its interval, so the decision taken at the end of interval i
is what digest i + 1 reports, and it must be what the simulator's table
(agent/distill.py `TreePolicy`) answers for digest i's counters.
"""

from __future__ import annotations

import itertools
import time

import jax.numpy as jnp
import numpy as np
import ptf.testutils as tu
from base import EcnTest

from ecntune.agent.distill import QUANT_LEVELS, Tree, TreeConfig, TreePolicy
from ecntune.agent.rewards import Reward
from ecntune.controller.switch_policy import clear, install, policy_plan
from ecntune.p4src import encoding as enc
from ecntune.telemetry import PortTelemetry

INTERVAL_S = 0.2
LINK_BPS = 10e6  # the speed the tree's keys are normalised by (the class of ports 1..4)
START = (3000.0, 3000.0, 0.5)  # kmin = kmax: no coin flips
# 8 levels x 2 pmax: 72 actions, so each of the grid's 64 boxes answers its own (with 42,
# boxes 42 apart answered alike: a burst and a lone pair could look like one decision)
CONFIG = TreeConfig("switch", levels=8, pmax=(0.1, 1.0), hold_idle=True)
BANDS = 8  # the grid tree: 8 bands of the queue key x 8 bands of the rate key


def grid_policy(shift: int) -> TreePolicy:
    """64 boxes over (queue, tx rate), each answering a different action (cycled by
    `shift`): the next thresholds tell which box the switch's keys fell into."""
    width = QUANT_LEVELS // BANDS
    lo, hi, action = [], [], []
    for i in range(BANDS):
        for j in range(BANDS):
            lo.append([i * width, j * width, 0, 0, 0, 0])
            hi.append([(i + 1) * width, (j + 1) * width, *[QUANT_LEVELS] * 4])
            action.append((i * BANDS + j + shift) % CONFIG.template.n_actions)
    assert len(set(action)) == len(action), "two boxes would answer the same action"
    tree = Tree(*(jnp.asarray(np.array(x), jnp.int32) for x in (lo, hi, action)))
    return TreePolicy(CONFIG, tree, Reward("acc"), name=f"grid+{shift}")


def setting(d: dict[str, int]) -> tuple[int, int, int]:
    return d["kmin"], d["kmax"], d["pmax"]


def decided(policy: TreePolicy, d: dict[str, int]) -> tuple[int, int, int]:
    """What the simulator's table sets after the interval of digest `d`."""
    _, t = enc.decode_digest(d, LINK_BPS)
    history = PortTelemetry(*(np.full((1, 1), x, np.float32) for x in t))
    regs = enc.encode_thresholds(*(float(x[0]) for x in policy.act(history)))
    return regs.kmin, regs.kmax, regs.pmax_bp


class PolicyTest(EcnTest):
    def setUp(self) -> None:
        super().setUp()
        self.route_hosts()
        self.set_interval(INTERVAL_S)
        self.client.enable_digest(enc.DIGEST, max_timeout_ns=0, max_list_size=1)
        self.set_ecn(2, *START)
        self.slow_queue(2, 400)
        self.start = enc.encode_thresholds(*START)

    def interval(self, heavy: bool) -> None:
        """One interval's traffic towards port 2: a burst that queues behind the 400 pps
        port, or two lone packets; then wait the interval out."""
        n = 40 if heavy else 2
        began = self.send_burst([self.tcp(1, 2, ecn=2, pktlen=200 + 20 * i, sport=3000 + i)
                                 for i in range(n)])  # fmt: skip
        self.receive(2, n, timeout=3)
        time.sleep(max(0.0, INTERVAL_S * 1.1 - (time.monotonic() - began)))

    def send_burst(self, packets: list[bytes]) -> float:
        """Send packets built beforehand back to back from port 1; returns when it began.
        (On a busy machine building them one by one took longer than an interval and
        spread a burst over two.)"""
        began = time.monotonic()
        for pkt in packets:
            tu.send_packet(self, 1, pkt)
        return began

    def digests(self) -> list[dict[str, int]]:
        return [d for d in self.client.drain_digests(0.5) if d["port"] == 2]

    def run_intervals(self, pattern: list[bool]) -> list[dict[str, int]]:
        for heavy in pattern:
            self.interval(heavy)
        self.interval(False)  # its first packet closes the last patterned interval
        return self.digests()


class DecidesFromTheIntervalItClosed(PolicyTest):
    def runTest(self) -> None:
        policy = grid_policy(0)
        install(self.client, policy_plan(policy, {p: LINK_BPS for p in (1, 2, 3, 4)}))
        ds = self.run_intervals([True, False, True, True, False, True])
        self.assertGreaterEqual(len(ds), 5)
        for before, after in itertools.pairwise(ds):
            self.assertEqual(setting(after), decided(policy, before), (before, after))
        chosen = {setting(d) for d in ds[1:]}
        start = (self.start.kmin, self.start.kmax, self.start.pmax_bp)
        self.assertGreaterEqual(len(chosen - {start}), 2, (chosen, ds))  # the traffic steers it


class EmptyTablesKeepTheThresholds(PolicyTest):
    def runTest(self) -> None:
        ds = self.run_intervals([True, False, True])
        self.assertGreaterEqual(len(ds), 3)
        want = (self.start.kmin, self.start.kmax, self.start.pmax_bp)
        self.assertEqual({setting(d) for d in ds}, {want})


class UpdatesWhileTrafficFlows(PolicyTest):
    """The tree replaced (cleared, then the other written) while a burst is still queued,
    then cleared for good: every decision is the old tree's, the new one's, or none (a
    port between the two keeps its setting); after the clear the setting stays put."""

    def runTest(self) -> None:
        ports = {p: LINK_BPS for p in (1, 2, 3, 4)}
        old, new = grid_policy(0), grid_policy(17)
        install(self.client, policy_plan(old, ports))
        ds = self.run_intervals([True, False])
        for heavy in (True, False, True):
            n = 40 if heavy else 2
            self.send_burst([self.tcp(1, 2, ecn=2, pktlen=300, sport=4000 + i) for i in range(n)])
            clear(self.client, policy_plan(old, ports))  # while the packets are queued
            install(self.client, policy_plan(new, ports))
            old, new = new, old
            self.receive(2, n, timeout=3)
            time.sleep(INTERVAL_S * 1.1)
        clear(self.client, policy_plan(old, ports))
        ds += self.run_intervals([True, False, True])
        self.assertGreaterEqual(len(ds), 8)
        policies = (grid_policy(0), grid_policy(17))
        for before, after in itertools.pairwise(ds):
            allowed = {setting(before), *(decided(p, before) for p in policies)}
            self.assertIn(setting(after), allowed, (before, after))
        self.assertEqual(len({setting(d) for d in ds[-3:]}), 1)  # cleared: nothing changes
