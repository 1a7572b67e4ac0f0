"""The simulator against what must hold: conservation, DCTCP's analysis, the P4 marking rule,
and the environment API the agents and the controller share."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecntune.agent.features import observation_size
from ecntune.p4src import encoding as enc
from ecntune.sim import dcqcn_fluid, network
from ecntune.sim.env import Env
from ecntune.sim.schedule import EpisodeTraffic
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import MTU_BYTES, preset, single_switch

BW = 10e9
DELAY = 10e-6  # per link: base RTT = 4 link delays + serialisation ≈ 45 µs
K = 30_000.0
STEPS = 24_000  # 54 ms of 2.24 µs steps (base RTT / 20); the long flows start at 0.5 ms
PORT = 1  # hop index of the switch egress port on a host-switch-host path


def long_env(transport: str, n_flows: int, buffer_bytes: float = 1e6, non_ect=()) -> Env:
    """n_flows hosts each start one endless flow at 0.5 ms towards one receiver (10 Gbit/s)."""
    topo = single_switch(n_flows + 1, BW)
    topo.links = [dataclasses.replace(lk, delay_s=DELAY) for lk in topo.links]
    traffic = EpisodeTraffic(
        load=0.0, duration_s=0.001, incast_degree=n_flows,
        incast_period_s=0.001, incast_bytes=int(1e9), non_ect=tuple(non_ect),
    )  # fmt: skip
    return Env.make(topo, traffic, transport, buffer_bytes=buffer_bytes)


def long_flows(
    transport: str,
    kmin: float,
    kmax: float,
    n_flows: int = 4,
    buffer_bytes: float = 1e6,
    non_ect=(),
    steps: int = STEPS,
    pmax: float = 1.0,
):
    env = long_env(transport, n_flows, buffer_bytes, non_ect)
    _, state = env.reset(jax.random.key(0))
    p = env.n_ports
    per_link = env._per_link(EcnThresholds(jnp.full(p, kmin), jnp.full(p, kmax), jnp.full(p, pmax)))
    params = state.params
    net, (queues, tx) = network.trace(params, state.net, per_link, env.dt, transport, steps)
    queues, tx = np.asarray(queues), np.asarray(tx)
    bottleneck = int(queues.max(axis=0).argmax())
    half = steps // 2  # after the start-up transient (slow start ends well before)
    window = (steps - 1 - half) * env.dt
    return {
        "env": env,
        "net": net,
        "params": params,
        "bottleneck": bottleneck,
        "queue": queues[half:, bottleneck],
        "utilisation": (tx[-1, bottleneck] - tx[half, bottleneck]) / (BW / 8 * window),
        "rtt": float(np.max(np.asarray(params.base_rtt)[np.isfinite(np.asarray(params.start))])),
    }


@functools.cache
def dctcp_run(n: int) -> dict:
    return {"n": n, **long_flows("dctcp", K, K, n_flows=n)}


@pytest.fixture(params=[2, 10], ids=lambda n: f"N={n}")
def dctcp(request):
    return dctcp_run(request.param)


@pytest.fixture(scope="module")
def reno2():
    return long_flows("reno_ecn", K, K, n_flows=2)


DCQCN_KMIN, DCQCN_KMAX = 5_000.0, 200_000.0
# 121 ms of 2.24 µs steps: DCQCN's α (g = 1/256 every 55 µs) takes ~60 ms to forget its
# start at 1; the second half is what is measured
DCQCN_STEPS = 54_000


@functools.cache
def dcqcn_run(pmax: float, n: int = 4) -> dict:
    return long_flows("dcqcn", DCQCN_KMIN, DCQCN_KMAX, n_flows=n, pmax=pmax, steps=DCQCN_STEPS)


def dcqcn_bottleneck(n: int, pmax: float) -> dcqcn_fluid.Bottleneck:
    """dcqcn_run's port as the published fluid model sees it."""
    return dcqcn_fluid.Bottleneck(n, BW / 8, BW / 8, DCQCN_KMIN, DCQCN_KMAX, pmax)


def ledger_balance(net: network.NetState) -> tuple[float, float]:
    """(bytes injected by hosts, delivered + still queued on a hop + dropped) over the episode."""
    lg = net.ledger
    queued = float(np.sum(np.asarray(net.backlog)[np.asarray(net.slot) >= 0]))
    return float(lg.injected), float(lg.delivered) + queued + float(lg.dropped)


def test_bytes_are_conserved_without_drops(dctcp):
    # float32 sums over 30k steps: a relative error of 1e-4 is rounding, a lost hop is not
    sent, accounted = ledger_balance(dctcp["net"])
    assert sent > 1e6
    assert accounted == pytest.approx(sent, rel=1e-4)
    assert float(dctcp["net"].ledger.dropped) == 0.0  # 1 MB buffer, queue held near K


def test_bytes_are_conserved_with_drops():
    # a buffer of 10 packets and no ECN: classic TCP fills it and loses bytes, which are
    # re-sent; every injected byte is still delivered, queued or counted as dropped
    lossy = long_flows("reno_ecn", 0.0, 0.0, n_flows=2, buffer_bytes=10 * MTU_BYTES, steps=8000)
    net = lossy["net"]
    assert float(net.ledger.dropped) > 0
    assert float(np.sum(np.asarray(net.counters.dropped_bytes))) == pytest.approx(
        float(net.ledger.dropped), rel=1e-4
    )
    sent, accounted = ledger_balance(net)
    assert accounted == pytest.approx(sent, rel=1e-4)


def test_dctcp_holds_the_queue_around_k_with_the_predicted_amplitude(dctcp):
    """DCTCP §3.3 with N synchronised flows: Q_max = K + N packets, amplitude
    A = ½·sqrt(2N(C·RTT + K)) packets, so the queue averages about Q_max − A/2.

    Tolerances: the analysis assumes one window cut per sawtooth; here (as in packet-level
    DCTCP) marks keep arriving for the RTT after the first cut and a second, smaller cut
    follows, and the fluid senders pace cwnd/RTT instead of bursting, so the swing
    (1st..99th percentile) comes out 1.0–1.6×A across N=2..10. We allow a factor 2 either
    way on A and ±25 % on the mean level — far tighter than the gap to classic ECN below.
    """
    n, q = dctcp["n"], dctcp["queue"]
    bdp_pkts = BW / 8 * dctcp["rtt"] / MTU_BYTES
    amplitude = 0.5 * math.sqrt(2 * n * (bdp_pkts + K / MTU_BYTES)) * MTU_BYTES
    q_max = K + n * MTU_BYTES
    swing = np.percentile(q, 99) - np.percentile(q, 1)
    assert 0.5 * amplitude < swing < 2.0 * amplitude
    assert 0.75 * (q_max - amplitude / 2) < q.mean() < 1.25 * (q_max - amplitude / 2)
    assert q.max() < q_max + amplitude
    assert dctcp["utilisation"] > 0.95  # K ≈ C·RTT/2 here


def test_dctcp_keeps_the_link_busy_down_to_k_of_a_seventh_of_the_bdp():
    """DCTCP §3.3: K > C·RTT/7 suffices for full throughput. With the fewest flows (N=2,
    the largest per-flow sawtooth) and K at that bound the bottleneck stays > 90 % busy
    (the analysis idealises; the margin covers the fluid model's smoothing)."""
    rtt = long_env("dctcp", 2).fabric.base_rtt([0, 1])  # host NIC + switch port, as every path
    k = BW / 8 * rtt / 7
    run = long_flows("dctcp", k, k, n_flows=2)
    assert k < 10_000  # the bound really is small here (≈ 5 packets)
    assert run["utilisation"] > 0.9


def test_classic_ecn_swings_further_than_dctcp(reno2):
    """At N=2, where halving hurts most (the largest per-flow sawtooth)."""
    dctcp = dctcp_run(2)
    assert reno2["queue"].std() > 1.5 * dctcp["queue"].std()
    assert reno2["queue"].min() < 0.2 * dctcp["queue"].min()  # halving drains the queue
    # K < C·RTT: two synchronised halvings leave the pipe part-empty, DCTCP's gentle cuts don't
    assert reno2["utilisation"] < 0.95 < dctcp["utilisation"]


def test_classic_ecn_hosts_feel_the_red_ramp():
    """A classic-ECN window is cut with the probability that one of its packets was marked.
    Before, any fraction of a mark cut it: a ramp from K behaved as a step at K whatever
    its pmax (identical queues, checked). Now the ramp's mean queue exceeds the step's,
    and a gentle ramp (pmax 0.05) holds it higher still, above K where marks begin."""
    step = long_flows("reno_ecn", K, K, n_flows=2)["queue"].mean()
    steep = long_flows("reno_ecn", K, 4 * K, n_flows=2, pmax=1.0)["queue"].mean()
    gentle = long_flows("reno_ecn", K, 4 * K, n_flows=2, pmax=0.05)["queue"].mean()
    assert step < 0.8 * steep
    assert gentle > K
    assert steep < 0.8 * gentle


def test_cubic_cuts_gentler_than_reno(reno2):
    """cubic's β = 0.7 against Reno's 0.5 at the same step threshold (K < C·RTT): a
    shallower sawtooth that keeps more of the link and more queue in its troughs (both
    empty the queue at times; measured: 10th percentile 5.4 against 3.0 KB, utilisation
    0.99 against 0.94)."""
    cubic = long_flows("cubic_ecn", K, K, n_flows=2)
    assert np.percentile(cubic["queue"], 10) > 1.5 * np.percentile(reno2["queue"], 10)
    assert cubic["utilisation"] > reno2["utilisation"] + 0.03


def test_marking_is_the_p4_programs_rule():
    q = jnp.array([0.0, 1000.0, 1500.0, 2000.0, 2999.0, 3000.0, 9000.0])
    p = network.red_probability(q, 1000.0, 3000.0, 0.5)
    expected = [0.0, 0.0, 0.125, 0.25, 0.5 * 1999 / 2000, 1.0, 1.0]
    assert np.allclose(np.asarray(p), expected, atol=1e-6)
    assert float(jnp.max(network.red_probability(q, 0.0, 0.0, 1.0))) == 0.0  # kmax 0: off
    # the data plane's integer slope gives the same probability
    regs = enc.encode_thresholds(1000, 3000, 0.5)
    for depth in (1500, 2000, 2999):
        p4 = regs.slope * (depth - regs.kmin) / 2**32
        assert p4 == pytest.approx(
            float(network.red_probability(depth, 1000.0, 3000.0, 0.5)), abs=1e-6
        )


def test_a_step_marks_departures_with_the_red_probability_of_the_queue_left():
    """One network step on a port holding B bytes of one flow: it sends C·dt and marks
    exactly pmax·(q−kmin)/(kmax−kmin) of them, q = B − C·dt the bytes left (as the P4
    egress does); a Not-ECT flow gets no marks at all."""
    env = long_env("dctcp", 1)
    _, state = env.reset(jax.random.key(0))
    kmin, kmax, pmax = 10_000.0, 50_000.0, 0.4
    per_link = env._per_link(EcnThresholds(*(jnp.full(env.n_ports, v) for v in (kmin, kmax, pmax))))
    params = state.params
    port = int(params.path[0, PORT])
    served = BW / 8 * env.dt
    backlogs = jnp.array([5_000.0, 20_000.0, 30_000.0, 45_000.0, 80_000.0]) + served

    def marked_fraction(b: jnp.ndarray, ect: jnp.ndarray) -> jnp.ndarray:
        p = params._replace(ect=params.ect.at[0].set(ect))
        net = network.occupy(p, state.net, slot=0, flow=0)._replace(
            next_flow=jnp.int32(1),  # flow 0 already admitted by hand, idle at its NIC
            to_send=state.net.to_send.at[0].set(0.0),
            backlog=state.net.backlog.at[0, PORT].set(b),
        )
        out = network.step(p, net, per_link, env.dt, "dctcp").counters
        return out.marked_bytes[port] / out.tx_bytes[port]

    fractions = jax.jit(jax.vmap(marked_fraction, in_axes=(0, None)))
    want = [0.0, 0.1, 0.2, 0.35, 1.0]
    assert np.allclose(np.asarray(fractions(backlogs, True)), want, atol=1e-3)
    assert float(jnp.max(fractions(backlogs, False))) == 0.0


def test_not_ect_packets_are_never_marked_in_a_shared_queue():
    """One ECT and one Not-ECT sender share the port at K: the port marks (the ECT flow's
    bytes), the Not-ECT flow hears no echoes and never backs off for the queue, so its
    window runs away; the one-step test above shows Not-ECT bytes get no marks at all."""
    mixed = long_flows("dctcp", K, K, n_flows=2, non_ect=(1,), steps=8000)
    assert float(np.asarray(mixed["net"].counters.marked_bytes)[mixed["bottleneck"]]) > 0
    cwnd = np.asarray(mixed["net"].cc.cwnd)
    src = np.asarray(mixed["params"].src)[np.maximum(np.asarray(mixed["net"].slot), 0)]
    active = np.asarray(mixed["net"].slot) >= 0
    assert mixed["queue"].max() > 2 * K
    assert cwnd[active & (src == 1)].min() > 3 * cwnd[active & (src != 1)].max()


@pytest.fixture(scope="module")
def star8() -> Env:
    """Poisson WebSearch flows plus 6:1 incasts on star8 with a 20-packet buffer."""
    traffic = EpisodeTraffic(load=0.8, duration_s=0.2, incast_degree=6, incast_period_s=0.02)
    return Env.make(preset("star8"), traffic, buffer_bytes=20 * MTU_BYTES)


def test_env_api_is_pure_jitted_vmappable_and_speaks_the_digests_fields(star8):
    env = star8
    obs, state = env.reset(jax.random.key(1))
    assert obs.shape == (env.n_ports, observation_size("acc"))
    th = EcnThresholds(*(jnp.full(env.n_ports, v) for v in (3000.0, 12000.0, 0.5)))
    obs2, _, reward, _, info = env.step(state, th)
    assert np.all(np.isfinite(np.asarray(obs2)))
    assert reward.shape == (env.n_ports,)
    assert isinstance(info["telemetry"], PortTelemetry)  # the controller's record, field for field
    assert info["telemetry"]._fields == PortTelemetry._fields
    assert all(np.shape(x) == (env.n_ports,) for x in info["telemetry"])
    assert np.allclose(np.asarray(info["telemetry"].kmax_bytes), 12000.0)
    # the same key gives the same episode; vmap batches episodes
    again, _ = env.reset(jax.random.key(1))
    assert np.array_equal(np.asarray(obs), np.asarray(again))
    batch_obs, batch_state = jax.vmap(env.reset)(jax.random.split(jax.random.key(2), 3))
    assert batch_obs.shape == (3, *obs.shape)
    b_obs, _, b_reward, b_done, _ = jax.vmap(env.step, in_axes=(0, None))(batch_state, th)
    assert b_obs.shape == (3, *obs.shape)
    assert np.all(np.isfinite(np.asarray(b_obs)))
    assert b_reward.shape == (3, env.n_ports)
    assert b_done.shape == (3,)


def test_a_workload_episode_conserves_bytes_and_marks_only_with_ecn_on(star8):
    """A real workload: flows finish, some bytes drop, and every byte a host injected is
    delivered, queued or dropped; a flow that finished delivered exactly its size.
    kmax = 0 (the P4 reset value) marks nothing."""
    env = star8
    _, state = env.reset(jax.random.key(3))
    off = EcnThresholds(*(jnp.zeros(env.n_ports) for _ in range(3)))
    on = EcnThresholds(*(jnp.full(env.n_ports, v) for v in (0.0, 1.0, 1.0)))
    marked, dropped = {}, {}
    for name, th in (("off", off), ("on", on)):
        s, total = state, 0.0
        for _ in range(3):
            _, s, _, _, info = env.step(s, th)
            total += float(jnp.sum(info["telemetry"].marked_bytes))
        marked[name] = total
        dropped[name] = float(s.net.ledger.dropped)
        net, params = s.net, s.params
        sent, accounted = ledger_balance(net)
        assert accounted == pytest.approx(sent, rel=1e-4)
        finished = np.asarray(net.fct) >= 0
        active = np.asarray(net.slot) >= 0
        assert finished.sum() > 5
        delivered = np.sum(np.asarray(params.size)[finished]) + np.sum(
            np.asarray(net.delivered)[active]
        )
        assert float(net.ledger.delivered) == pytest.approx(delivered, rel=1e-4)
    assert dropped["off"] > 0  # incasts overflow 20 packets
    assert marked["off"] == 0.0
    assert marked["on"] > 0.0


def test_dcqcn_settles_where_the_red_slope_puts_it():
    """DCQCN reacts to the marking probability, not merely to marks (CNPs at p·R/MTU, at most
    one per 50 µs): with the same kmin/kmax a steeper slope (pmax 20 % vs 1 %) holds the
    queue lower, both between kmin and kmax, and the link stays busy in both."""
    soft, steep = dcqcn_run(0.01), dcqcn_run(0.2)
    for run in (soft, steep):
        assert run["utilisation"] > 0.9
        assert 5_000 < np.mean(run["queue"]) < 200_000
    assert np.mean(steep["queue"]) < 0.5 * np.mean(soft["queue"])


@pytest.mark.parametrize("pmax", [0.05, 0.2, 1.0])
@pytest.mark.parametrize("n", [4, 8], ids=lambda n: f"N={n}")
def test_dcqcn_settles_at_the_fluid_models_fixed_point(n: int, pmax: float):
    """The settled mean queue and α against the fixed point of the DCQCN fluid model
    (sim/dcqcn_fluid.py, the simulator's own constants, with its hyper increase; e.g.
    pmax 20 %: 8.0 KB for N = 4, 11.8 KB for N = 8). Measured: queue 0.88–1.32× q*, α
    0.78–0.92× α* over N = 4, 8 and pmax 5–100 %; ±40 % and ±35 % allowed: the simulator's
    identical flows cut in step, so its queue cycles around q* (dipping below kmin between
    CNPs) where the mean-field model sits still. A model whose CNPs ignored p, or whose
    timers were off, lands far outside (pmax alone moves q* 3-5×)."""
    run = dcqcn_run(pmax, n)
    fixed = dcqcn_fluid.fixed_point(dcqcn_bottleneck(n, pmax))
    measured = float(np.mean(run["queue"]))
    assert 0.6 * fixed.queue < measured < 1.4 * fixed.queue, (measured, fixed)
    alpha = float(np.mean(np.asarray(run["net"].cc.alpha)[np.asarray(run["net"].slot) >= 0]))
    assert alpha == pytest.approx(fixed.alpha, rel=0.35), (alpha, fixed)
    assert run["utilisation"] > 0.95


@pytest.mark.parametrize("n", [4, 8], ids=lambda n: f"N={n}")
def test_the_published_dcqcn_fluid_model_settles_at_its_fixed_point(n: int):
    """The reference itself, as published (no hyper increase): integrated as
    delay-differential equations (feedback one base RTT late) it settles where
    fixed_point's root finding says — the queue within 2 %, the link full, α at the CNP
    probability per alpha interval. (With the hyper-increase term the fixed point is not
    always stable: the model then cycles around it.)"""
    link = dcqcn_bottleneck(n, 0.2)._replace(hyper_increase=False)
    fixed = dcqcn_fluid.fixed_point(link)
    trace = dcqcn_fluid.integrate(link, feedback_delay_s=45e-6, duration_s=0.3)
    settled = slice(len(trace.t) // 2, None)
    assert float(jnp.mean(trace.queue[settled])) == pytest.approx(fixed.queue, rel=0.02)
    assert float(jnp.mean(trace.rate[settled])) * n == pytest.approx(BW / 8, rel=0.01)
    assert float(trace.alpha[-1]) == pytest.approx(fixed.alpha, rel=0.05)
    assert DCQCN_KMIN < fixed.queue < DCQCN_KMAX
    assert fixed.target > fixed.rate
    # hyper increase only ever adds to Rt's growth: it settles higher on the RED line
    assert dcqcn_fluid.fixed_point(dcqcn_bottleneck(n, 0.2)).queue > fixed.queue


@pytest.mark.parametrize(
    "bad",
    [{"n_flows": 0}, {"capacity": 0.0}, {"kmin": 9e5}, {"pmax": 0.0}, {"pmax": 1.5}],
    ids=str,
)
def test_the_dcqcn_fluid_model_refuses_a_meaningless_bottleneck(bad: dict):
    link = dcqcn_bottleneck(4, 0.2)._replace(**bad)
    with pytest.raises(ValueError, match="need"):
        dcqcn_fluid.fixed_point(link)
    with pytest.raises(ValueError, match="need"):
        dcqcn_fluid.integrate(link, feedback_delay_s=45e-6, duration_s=0.01)


def nic_run(nic_ce_s: float | None) -> dict:
    """One host sends WebSearch at four times its NIC's rate to four others; the switch
    never marks. The NIC's queue and utilisation over the second half."""
    topo = single_switch(5, BW)
    topo.links = [dataclasses.replace(lk, delay_s=DELAY) for lk in topo.links]
    traffic = EpisodeTraffic(load=4.0, duration_s=0.01, senders=(0,))
    env = Env.make(topo, traffic, "dctcp", buffer_bytes=4e6, nic_ce_s=nic_ce_s)
    _, state = env.reset(jax.random.key(0))
    off = jnp.zeros(env.n_ports)
    per_link = env._per_link(EcnThresholds(off, off, off))
    steps = int(0.01 / env.dt)
    net, (queues, tx) = network.trace(state.params, state.net, per_link, env.dt, "dctcp", steps)
    nic, half = int(env.fabric.host_uplink[0]), steps // 2
    sent = float(np.asarray(tx)[-1, nic] - np.asarray(tx)[half, nic])
    return {
        "queue": float(np.asarray(queues)[half:, nic].mean()),
        "busy": sent / (BW / 8 * (steps - 1 - half) * env.dt),
        "marked": float(net.counters.marked_bytes[nic]),
    }


def test_a_host_nic_marks_past_its_ce_threshold_when_told():
    """A datacenter host's NIC (nic_ce_s = 20 µs: what fq/TSQ keep it to) holds its queue
    near 20 µs of line rate and stays as busy; an unmarked one lets DCTCP's windows pile
    hundreds of KB into it (the emulated fabrics' default: their hosts are real Linux)."""
    unmarked, marked = nic_run(None), nic_run(20e-6)
    report = f"unmarked {unmarked}, marked at 20 µs {marked}"
    k = 20e-6 * BW / 8  # 25 KB
    assert unmarked["marked"] == 0.0, report
    assert unmarked["queue"] > 10 * k, report
    assert marked["marked"] > 0.0, report
    assert marked["queue"] < 2 * k, report
    assert marked["busy"] > 0.95 * unmarked["busy"] > 0.5, report


def test_a_flow_with_nothing_left_to_send_or_queued_is_complete_even_a_byte_short():
    """float32 sums of fractional deliveries can leave a flow a byte short of its size
    (float32's spacing is 2 bytes past 16 MB) with nothing left to send or queued; such a
    flow completes (it used to stay "running" for ever, holding its slot). A flow still a
    byte short with that byte queued on its path is not complete yet."""
    env = long_env("dctcp", 1)
    _, state = env.reset(jax.random.key(0))
    per_link = env._per_link(EcnThresholds(*(jnp.full(env.n_ports, v) for v in (K, K, 1.0))))
    size = 20e6  # float32 spacing 2 bytes: size − 0.5 rounds to size
    params = state.params._replace(size=state.params.size.at[0].set(size))

    def fct_after_one_step(queued: float) -> float:
        """Flow 0 admitted by hand: all sent, `queued` bytes at the switch port, the rest
        delivered but for 2 bytes (lost to rounding)."""
        net = network.occupy(params, state.net, slot=0, flow=0)._replace(
            next_flow=jnp.int32(1),
            to_send=state.net.to_send.at[0].set(0.0),
            delivered=state.net.delivered.at[0].set(size - 2.0 - queued),
            backlog=state.net.backlog.at[0, PORT].set(queued),
            t=jnp.float32(0.001),
        )
        return float(network.step(params, net, per_link, env.dt, "dctcp").fct[0])

    assert fct_after_one_step(0.0) > 0
    # an MTU more than one step serves still queued after the step: not complete yet
    assert fct_after_one_step(BW / 8 * env.dt + MTU_BYTES) == -1.0


def test_a_raw_trace_vmaps_over_episodes_like_one_at_a_time():
    """network.trace under vmap (the ns-3 incast bench runs 16 at once): each episode's
    queue trace is the one it gives alone. A record closing over the batched params used
    to trip the slot-prefix batching rule (AssertionError)."""
    env = long_env("dctcp", 4, 1e6, ())
    p = env.n_ports
    per_link = env._per_link(EcnThresholds(jnp.full(p, 20e3), jnp.full(p, 20e3), jnp.ones(p)))

    def queues(key: jax.Array) -> jax.Array:
        _, state = env.reset(key)
        return network.trace(state.params, state.net, per_link, env.dt, "dctcp", 400)[1][0]

    keys = jax.random.split(jax.random.key(3), 2)
    together = np.asarray(jax.jit(jax.vmap(queues))(keys))
    alone = np.stack([np.asarray(queues(k)) for k in keys])
    assert together.max() > 0
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1.0)
