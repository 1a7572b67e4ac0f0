"""The fluid simulator against ns-3 (packet level) on two scenarios through one RED/ECN
step-marking bottleneck (sim/ns3/dumbbell.cc): N long DCTCP flows, and an N:1 incast (of
DCTCP hosts, and of cubic hosts with classic ECN on the demo's 20 Mbit/s fabric); and on
the 24-host leaf-spine (sim/ns3/leafspine.cc).

ns-3: each sender on its own access link (the bottleneck's rate and delay) into a left
router, the bottleneck link to a right router, a fast zero-delay link to the receiver.
Sim: the same path as `single_switch` sees it: sender NIC (rate, delay) into the switch,
the switch port (rate, delay) to the receiver. Both: TcpDctcp / `dctcp`, marking at
K = MinTh = MaxTh packets on the instantaneous queue, a buffer far above K (no drops),
1500-byte packets, no delayed acks; the second half of the run is measured.

Measured (ns-3.37 / ecntune.sim; mean and 99th-percentile queue in KB):
  1 Gbit/s, K=5:   N=2  mean 7.1 / 7.4,  p99 12.0 / 10.1;  N=4  mean 8.2 / 8.7,  p99 15.0 / 11.9
  10 Gbit/s, K=20: N=2  mean 23.7 / 25.0, p99 34.5 / 34.0; N=4  mean 24.1 / 25.0, p99 37.5 / 37.7
  the bottleneck is 100 % busy in both (ns-3 goodput 96.4 % of the line: 52 B of TCP/IP
  headers per 1500 B packet, which the sim does not model, so wire bytes are compared).
Incast, 10 Gbit/s, K=20, 64 KB per sender (FCT in µs, ns-3 min/median/mean/max, sim):
  N=8:  293 / 374 / 452 / 628, sim 465 (every flow);  N=16: 311 / 742 / 710 / 896, sim 846
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from ecntune.sim import network, ns3_reference

pytestmark = pytest.mark.slow

DELAY = 10e-6  # one-way, every link
BUFFER = 1e6  # bytes in the sim (ns-3: 10000 packets); far above K, nothing is dropped
# (rate, K packets, ns-3 seconds, sim seconds): at 1 Gbit/s K=5 sits below the
# bandwidth-delay product (~7 packets), at 10 Gbit/s K=20 well below it (~37 packets), so
# the queue's sawtooth, not a standing queue, decides both throughput and queue level.
# The sim runs a shorter time (steps cost ~100 µs of CPU) but well past slow start.
SCENARIOS = {"1G-K5": (1e9, 5, 0.2, 0.1), "10G-K20": (10e9, 20, 0.05, 0.01)}
# the demo's fabric: 20 Mbit/s, 5.125 ms a link (20.5 ms RTT), K of one and sixteen packets
DEMO_FABRIC = {f"20M-K{k}": (20e6, k, 1.0, 0.6) for k in (1, 16)}


def link_setup(scenario: str) -> tuple[float, int, float, float, float]:
    """(rate, K packets, ns-3 seconds, sim seconds, one-way delay of every link)."""
    if scenario in DEMO_FABRIC:
        return (*DEMO_FABRIC[scenario], 5.125e-3)
    return (*SCENARIOS[scenario], DELAY)


@pytest.fixture(scope="module")
def dumbbell(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = ns3_reference.missing()
    if reason:
        pytest.skip(reason)
    return ns3_reference.build(tmp_path_factory.mktemp("ns3"))


def run_ns3(
    exe: Path, n: int, scenario: str, flow_bytes: int = 0, tcp: str = "ns3::TcpDctcp"
) -> dict:
    rate, k, seconds, _, delay = link_setup(scenario)
    return ns3_reference.run(exe, n, k, rate, delay, seconds, flow_bytes, tcp)


def run_sim(n: int, scenario: str, flow_bytes: int = int(1e9), transport: str = "dctcp") -> dict:
    """The same scenario in ecntune.sim: n flows start together at 0.5 ms into one port."""
    rate, k_pkts, _, seconds, delay = link_setup(scenario)
    env, per_link = ns3_reference.sim_twin(n, k_pkts, rate, delay, flow_bytes, BUFFER, transport)
    _, state = env.reset(jax.random.key(0))
    steps = int(seconds / env.dt)
    net, (queues, tx) = network.trace(state.params, state.net, per_link, env.dt, transport, steps)
    queues, tx = np.asarray(queues), np.asarray(tx)
    port = int(queues.max(axis=0).argmax())
    half = steps // 2
    q = queues[half:, port]
    return {
        "wire_bps": 8 * float(tx[-1, port] - tx[half, port]) / ((steps - 1 - half) * env.dt),
        "queue_mean_bytes": float(q.mean()),
        "queue_p99_bytes": float(np.percentile(q, 99)),
        "queue_p1_bytes": float(np.percentile(q, 1)),
        "dropped": float(net.ledger.dropped),
        "fct_s": np.asarray(net.fct)[np.isfinite(np.asarray(state.params.start))].tolist(),
    }


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("n", [2, 4], ids=lambda n: f"N={n}")
def test_sim_agrees_with_ns3_on_a_dctcp_bottleneck(dumbbell: Path, n: int, scenario: str):
    rate = SCENARIOS[scenario][0]
    ref = run_ns3(dumbbell, n, scenario)
    sim = run_sim(n, scenario)
    report = f"{scenario} N={n}: ns-3 {ref} / sim {sim}"
    assert ref["dropped_packets"] == 0, report
    assert sim["dropped"] == 0.0, report

    # Throughput: wire bytes on the bottleneck (ns-3 counts its 2-byte PPP header too;
    # the sim has no headers at all). DCTCP keeps the link busy in both (measured 100.0 %
    # in each); 5 % is tighter than the suggested 10 % and still > 10 packets' worth of
    # slack per RTT, while a sim that let the queue drain every sawtooth would miss it.
    assert sim["wire_bps"] == pytest.approx(ref["bottleneck_wire_bps"], rel=0.05), report
    assert ref["throughput_bps"] > 0.95 * rate * 1448 / 1502, report  # goodput, headers off

    # Mean queue: both hold it around K; measured within 6 %. ±25 % leaves room for the
    # packet quantisation (one packet is 20 % of K = 5) and the ns-3 sample noise (1000 or
    # 250 samples at 100 µs of a sawtooth a few RTTs long), far tighter than the factor
    # 1.5–2 one might expect: the fluid model's averaged marking lands on the same level.
    ratio = sim["queue_mean_bytes"] / ref["queue_mean_bytes"]
    assert 0.75 < ratio < 1.25, report
    # Peaks: the fluid senders pace cwnd/RTT instead of sending window bursts, so the sim's
    # p99 is at most the packet world's (measured 0.79–1.01×); allow down to 2/3 and 10 % over.
    ratio = sim["queue_p99_bytes"] / ref["queue_p99_bytes"]
    assert 2 / 3 < ratio < 1.1, report
    # Swing (p1..p99): smoother in the fluid model (measured 0.44–0.81× ns-3's), never wider.
    swing = sim["queue_p99_bytes"] - sim["queue_p1_bytes"]
    ref_swing = ref["queue_p99_bytes"] - ref["queue_p1_bytes"]
    assert 0.3 * ref_swing < swing < 1.1 * ref_swing, report


INCAST_BYTES = 64_000


@pytest.mark.parametrize("n", [8, 16], ids=lambda n: f"N={n}")
def test_sim_agrees_with_ns3_on_an_incast(dumbbell: Path, n: int):
    """N senders start 64 KB each at once into one 10 Gbit/s port (K = 20 packets).

    ns-3's FIFO serves the synchronised flows unevenly (the first finish after ~300 µs,
    the last after N·64 KB/C and a few RTTs); the fluid model shares the port in
    proportion to backlog, so its flows all finish together. What must agree is what the
    papers measure for an incast, the mean flow's and the whole request's completion: the
    mean within 25 % (measured 3 % at N=8, 19 % at N=16) and the sim's common finish
    between ns-3's median and last flow."""
    ref = run_ns3(dumbbell, n, "10G-K20", INCAST_BYTES)
    sim = run_sim(n, "10G-K20", INCAST_BYTES)
    ns3_fct, sim_fct = np.array(ref["fct_s"]), np.array(sim["fct_s"])
    report = f"N={n}: ns-3 FCTs {np.round(ns3_fct * 1e6)} µs / sim {np.round(sim_fct * 1e6)} µs"
    assert (ns3_fct > 0).all(), report  # every flow finished
    assert (sim_fct > 0).all(), report
    assert sim["dropped"] == 0.0, report
    assert ref["dropped_packets"] == 0, report
    floor = n * INCAST_BYTES * 8 / 10e9  # the bottleneck cannot finish the request sooner
    assert ns3_fct.max() > floor, report
    assert sim_fct.max() > floor, report
    assert sim_fct.mean() == pytest.approx(ns3_fct.mean(), rel=0.25), report
    assert np.median(ns3_fct) <= sim_fct.max() <= ns3_fct.max(), report


# -- the 24-host leaf-spine, the same flows in both (sim/ns3/leafspine.cc) --------------------

LEAFSPINE_S = 0.005  # simulated seconds: ~300 flows (WebSearch 60 % + 16:1 incasts every 0.5 ms)


@pytest.fixture(scope="module")
def leafspine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = ns3_reference.missing()
    if reason:
        pytest.skip(reason)
    return ns3_reference.build(tmp_path_factory.mktemp("ns3"), "leafspine")


@pytest.mark.parametrize("setting", ["secn1", "secn2"])
def test_sim_agrees_with_ns3_on_the_24_host_leaf_spine(leafspine: Path, setting: str):
    """ACC's testbed (4 leaves × 6 hosts at 25G, 2 spines at 100G, 1 µs links, 2 MB ports)
    running one episode's flows in both simulators, each flow on the same spine, SECN1 or
    SECN2 on every port. ns-3's FCT starts at the SYN, the sim's at the first byte: one
    base RTT (the handshake) comes off ns-3's. Compared over the flows both completed.

    Measured (sim / ns-3), flows completed within the 5 ms both ran: 257 / 260
    (SECN1), 257 / 260 (SECN2) of 296 (the sim used to count flows finishing in its
    last, longer interval, and to leave elephants a byte short "running": 267 and 270);
    mice slowdown median 10.4 / 9.4 and 10.4 / 9.0, mean 8.5 / 8.1 and 8.5 / 7.9, p99
    16.2 / 21.7 and 16.8 / 22.6. The sim's tail is shorter: its fluid queues serve an
    incast's flows together where ns-3's FIFO lets the first finish early and the last
    late (the dumbbell incast above), and a 5 ms run's p99 is a handful of incast flows.
    Hence the bounds: completed flows within 5 %, median and mean within 20 %, p99 within
    35 % — a sim that lost the incasts' queueing (p99 ~ 2) or let windows balloon (p99 ~
    60, as before windows stopped growing past what the NIC can put in flight) fails."""
    import jax

    from ecntune.agent.evaluate import run_policies
    from ecntune.agent.policy import load_policy
    from ecntune.sim.scenario import SimScenario
    from ecntune.traffic.fct import ideal_fct, slowdown

    scenario = SimScenario("testbed24", incast_degree=16, episode_s=LEAFSPINE_S)
    env = scenario.env()
    params = env.reset(jax.random.key(1000))[1].params
    flows = ns3_reference.leafspine_flows(env, params, LEAFSPINE_S)
    ref = ns3_reference.run_leafspine(
        leafspine, flows, env.fabric.topology, LEAFSPINE_S, setting, 2e6
    )
    policy = {setting: load_policy(f"static:{setting}")}
    sim = run_policies(scenario, policy, 1, seed=1000, drain_factor=0.0)[setting]

    n = len(flows)
    size = np.asarray(params.size)[:n]
    rtt = np.asarray(params.base_rtt)[:n]
    ideal = ideal_fct(size, np.asarray(params.line_rate)[:n] * 8, rtt)  # traffic/fct.py's
    ns3_fct = np.array(ref["fct_s"])
    ns3_done = ns3_fct > 0
    ns3_slow = np.where(ns3_done, slowdown(ns3_fct - rtt, ideal), np.nan)
    # the sim steps whole telemetry intervals (13 of 0.416 ms: 5.41 ms), ns-3 exactly 5 ms:
    # a flow counts as done in the sim only if it finished within ns-3's window too
    sim_end = np.asarray(params.start)[:n] + sim.fct_s[0][:n]
    sim_done = sim_end <= LEAFSPINE_S
    sim_slow = np.where(sim_done, sim.slowdown[0][:n], np.nan)
    mice = ns3_done & sim_done & (size < 100_000)
    a, b = sim_slow[mice], ns3_slow[mice]
    stats = {
        f: (round(float(g(a)), 2), round(float(g(b)), 2))
        for f, g in (
            ("median", np.median),
            ("mean", np.mean),
            ("p99", lambda x: np.percentile(x, 99)),
        )
    }
    report = f"{setting}: {n} flows, done sim/ns-3 {sim_done.sum()}/{ns3_done.sum()}, mice {stats}"
    assert ref["dropped_packets"] == 0, report
    assert mice.sum() > 150, report
    assert sim_done.sum() == pytest.approx(ns3_done.sum(), rel=0.05), report
    for stat, rel in (("median", 0.2), ("mean", 0.2), ("p99", 0.35)):
        ours, theirs = stats[stat]
        assert ours == pytest.approx(theirs, rel=rel), report


def test_classic_ecn_incast_is_slower_under_a_lower_threshold_in_both(dumbbell: Path):
    """4 × 64 KB at once into one 20 Mbit/s port at 20.5 ms RTT (the demo's fabric), cubic
    hosts with classic ECN, marking from 1 packet against from 16. A lower threshold cuts
    the flows' windows earlier and more often, so the request takes longer: ns-3's TcpCubic
    took 193–206 ms against 141–146 (its FCTs include the handshake's RTT), ecntune's
    `cubic_ecn` 142 ms against 123. Before `cubic_ecn` sent its windows ack-clocked and cut
    at the first echo it took 117 ms under either (docs/results "The emulation
    disagrees"): both must be at least 10 % slower at K = 1."""
    mean = {}
    for k in (1, 16):
        ref = run_ns3(dumbbell, 4, f"20M-K{k}", INCAST_BYTES, tcp="ns3::TcpCubic")
        sim = run_sim(4, f"20M-K{k}", INCAST_BYTES, transport="cubic_ecn")
        assert all(x > 0 for x in ref["fct_s"] + sim["fct_s"]), (ref, sim)  # all finished
        mean[k] = (float(np.mean(ref["fct_s"])), float(np.mean(sim["fct_s"])))
    report = f"mean FCT s (ns-3, sim): K=1 {mean[1]}, K=16 {mean[16]}"
    assert mean[1][0] > 1.1 * mean[16][0], report
    assert mean[1][1] > 1.1 * mean[16][1], report
