"""The simulator against what must hold: conservation, DCTCP's analysis, the P4 marking rule,
and the environment API the agents and the controller share."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecntune.agent.features import observation_size
from ecntune.agent.telemetry import EcnThresholds, PortTelemetry
from ecntune.p4src import encoding as enc
from ecntune.sim import network
from ecntune.sim.env import Env
from ecntune.sim.fabric import MTU_BYTES
from ecntune.sim.schedule import Traffic
from ecntune.topology import preset, single_switch

BW = 10e9
DELAY = 10e-6  # per link: base RTT = 4 link delays + serialisation ≈ 45 µs
K = 30_000.0
N_FLOWS = 4
STEPS = 40_000  # 12 ms of 0.3 µs steps


def long_flows(transport: str, kmin: float, kmax: float, buffer_bytes: float = 1e6):
    """N long flows start together into one 10 Gbit/s port; the queue of every step."""
    topo = single_switch(N_FLOWS + 1, BW)
    topo.links = [dataclasses.replace(lk, delay_s=DELAY) for lk in topo.links]
    traffic = Traffic(
        "websearch", 0.0, duration_s=0.001, incast_degree=N_FLOWS,
        incast_period_s=0.001, incast_bytes=int(1e9),
    )  # fmt: skip
    env = Env.make(topo, traffic, transport, buffer_bytes=buffer_bytes)
    _, state = env.reset(jax.random.key(0))
    p = env.n_ports
    per_link = env._per_link(EcnThresholds(jnp.full(p, kmin), jnp.full(p, kmax), jnp.ones(p)))
    params = state.params

    def one(net: network.NetState, _: None):
        net = network.step(params, net, per_link, env.dt, transport)
        fid = jnp.maximum(net.slot, 0)
        on = (params.path[fid] >= 0) & (net.slot >= 0)[:, None]
        link = jnp.where(on, params.path[fid], 0)
        q = jax.ops.segment_sum(
            jnp.where(on, net.backlog, 0.0).ravel(), link.ravel(), len(per_link)
        )
        return net, q

    net, queues = jax.jit(lambda n: jax.lax.scan(one, n, None, length=STEPS))(state.net)
    queues = np.asarray(queues)
    bottleneck = int(queues.max(axis=0).argmax())
    tx = float(np.asarray(net.counters.tx_bytes)[bottleneck])
    return {
        "net": net,
        "queue": queues[STEPS // 2 :, bottleneck],  # after the start-up transient
        "utilisation": tx / (BW / 8 * (STEPS * env.dt - 0.0005)),  # flows start at 0.5 ms
        "rtt": float(np.max(np.asarray(params.base_rtt)[np.isfinite(np.asarray(params.start))])),
    }


@pytest.fixture(scope="module")
def dctcp():
    return long_flows("dctcp", K, K)


@pytest.fixture(scope="module")
def reno():
    return long_flows("reno_ecn", K, K)


def conserved(net: network.NetState) -> tuple[float, float]:
    active = np.asarray(net.slot) >= 0
    sent = float(np.sum(np.asarray(net.sent)[active]))
    where = (
        np.sum(np.asarray(net.delivered)[active])
        + np.sum(np.asarray(net.backlog)[active])
        + np.sum(np.asarray(net.counters.dropped_bytes))
    )
    return sent, float(where)


def test_bytes_are_conserved_with_and_without_drops(dctcp):
    sent, accounted = conserved(dctcp["net"])
    assert sent > 1e6
    assert accounted == pytest.approx(sent, rel=1e-4)  # float32 sums over 40k steps
    # a buffer of 10 packets and no ECN: classic TCP fills it and loses bytes, which are
    # re-sent; every injected byte is still delivered, queued or counted as dropped
    lossy = long_flows("reno_ecn", 0.0, 0.0, buffer_bytes=10 * MTU_BYTES)
    assert float(np.sum(np.asarray(lossy["net"].counters.dropped_bytes))) > 0
    sent, accounted = conserved(lossy["net"])
    assert accounted == pytest.approx(sent, rel=1e-4)


def test_dctcp_holds_the_queue_around_k_with_the_predicted_amplitude(dctcp):
    """DCTCP §3.3: the queue oscillates below K + N packets with amplitude
    A = ½·sqrt(2N(C·RTT + K)) packets. A fluid model with probabilistic marking smooths
    the sawtooth, so we allow a factor of 2 either way on A and ±40% on the mean level."""
    q = dctcp["queue"]
    bdp_pkts = BW / 8 * dctcp["rtt"] / MTU_BYTES
    amplitude = 0.5 * math.sqrt(2 * N_FLOWS * (bdp_pkts + K / MTU_BYTES)) * MTU_BYTES
    swing = np.percentile(q, 99) - np.percentile(q, 1)
    assert 0.5 * amplitude < swing < 2.0 * amplitude
    assert 0.6 * K < q.mean() < 1.2 * K
    assert q.max() < K + 2 * amplitude
    assert dctcp["utilisation"] > 0.9  # K > C·RTT/7 keeps the link busy


def test_classic_ecn_swings_further_and_loses_throughput(dctcp, reno):
    assert reno["queue"].std() > 1.2 * dctcp["queue"].std()
    assert reno["queue"].min() < 0.5 * dctcp["queue"].min()  # halving empties the queue
    assert reno["utilisation"] < dctcp["utilisation"]


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


def test_env_api_is_pure_jitted_vmappable_and_speaks_the_digests_fields():
    env = Env.make(preset("star8"), Traffic("websearch", 0.5, duration_s=0.05, incast_degree=4))
    obs, state = env.reset(jax.random.key(1))
    assert obs.shape == (env.n_ports, observation_size("acc"))
    th = EcnThresholds(*(jnp.full(env.n_ports, v) for v in (3000.0, 12000.0, 0.5)))
    obs2, state2, reward, done, info = env.step(state, th)
    assert np.all(np.isfinite(np.asarray(obs2)))
    assert reward.shape == (env.n_ports,)
    assert isinstance(info["telemetry"], PortTelemetry)  # the controller's record, field for field
    assert info["telemetry"]._fields == PortTelemetry._fields
    assert np.allclose(np.asarray(info["telemetry"].kmax_bytes), 12000.0)
    # the same key gives the same episode; vmap batches episodes
    again, _ = env.reset(jax.random.key(1))
    assert np.array_equal(np.asarray(obs), np.asarray(again))
    batch_obs, batch_state = jax.vmap(env.reset)(jax.random.split(jax.random.key(2), 3))
    assert batch_obs.shape == (3, *obs.shape)
    stepped = jax.vmap(env.step, in_axes=(0, None))(batch_state, th)
    assert stepped[2].shape == (3, env.n_ports)
    del state2, done


def test_without_ecn_nothing_is_marked():
    env = Env.make(preset("star8"), Traffic("websearch", 0.8, duration_s=0.2, incast_degree=6))
    _, state = env.reset(jax.random.key(3))
    off = EcnThresholds(*(jnp.zeros(env.n_ports) for _ in range(3)))
    on = EcnThresholds(*(jnp.full(env.n_ports, v) for v in (0.0, 1.0, 1.0)))
    marked = {}
    for name, th in (("off", off), ("on", on)):
        s, total = state, 0.0
        for _ in range(5):
            _, s, _, _, info = env.step(s, th)
            total += float(jnp.sum(info["telemetry"].marked_bytes))
        marked[name] = total
    assert marked["off"] == 0.0
    assert marked["on"] > 0.0
