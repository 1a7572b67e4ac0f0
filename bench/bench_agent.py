"""One decision for a 32-port switch, and the controller's whole interval around it.

- decision_<policy>_32ports: the wall time of `policy.act(history)` (k intervals of every
  port's telemetry in, one setting per port out: features, network, template lookup,
  ACC's idle rule) for the shipped ACC and PET checkpoints and the static SECN1 preset.
  Each policy's decision is one compiled call; the reference, in the same run, is the same
  decision op by op (`jax.disable_jit()`: how the controller ran it before, 3.1 ms for ACC).
  Issue 20's target: ≤ 100 µs median for the agents.
- decision_tree_32ports: the same for the shipped ACC agent distilled into a 256-entry
  table (agent/distill.py; fitted here on random feature vectors labelled by the network,
  so the table has the full 256 entries), against the network it imitates, same run.
- decision_graphcc_<fabric>: one GraphCC decision (agent/graphcc.py) for every port of
  testbed24 and fabric288 at once (K = 2 message-passing steps over the port graph),
  median and p99, against the shipped ACC agent deciding the same ports one compiled
  call per switch, same run (issue 19); and the bytes one decision would send between
  switches if each switch ran its own ports' replicas (`graphcc.message_bytes`).
- controller_tick_32ports: `SwitchLoop.tick` with the shipped ACC agent, one digest per
  port decoded and checked before each tick (`on_digest`), then history, decision, clamp,
  reward, guard and register encoding: what the controller spends per interval apart from
  the P4Runtime I/O, against the same loop with the static SECN1 policy.

One JSON object per line; medians over REPEATS calls after WARMUP calls (the first compiles).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import jax
import numpy as np

from ecntune.agent import distill, graphcc
from ecntune.agent.ddqn import DdqnPolicy, q_values
from ecntune.agent.features import observation_size
from ecntune.agent.policy import Policy, load_policy
from ecntune.controller.loop import SwitchLoop
from ecntune.controller.safety import Guard
from ecntune.p4src import encoding as enc
from ecntune.sim.fabric import build
from ecntune.telemetry import PortTelemetry
from ecntune.topology import MTU_BYTES, preset

PORTS = 32
REPEATS = 1000
WARMUP = 50  # calls before timing: the first few hundred microsecond calls run slow
LINK_BPS = 100e6
INTERVAL_S = 0.1
AGENTS = ("acc:default", "pet:agent/checkpoints/pet-star8.msgpack")


def history(rng: np.random.Generator, ports: int = PORTS) -> PortTelemetry:
    f = np.ones((3, ports))
    tx = rng.uniform(0, 1.25e6, (3, ports))
    return PortTelemetry(
        interval_s=INTERVAL_S * f, link_bps=LINK_BPS * f, tx_bytes=tx, tx_pkts=tx / MTU_BYTES,
        marked_bytes=0.1 * tx, marked_pkts=0.1 * tx / MTU_BYTES,
        qdepth_sum_bytes=rng.uniform(0, 5e5, (3, ports)), qdepth_samples=tx / MTU_BYTES + 1,
        qdepth_max_bytes=rng.uniform(0, 1e5, (3, ports)), kmin_bytes=5000 * f,
        kmax_bytes=2e5 * f, pmax=0.01 * f, senders=rng.uniform(1, 16, (3, ports)),
        elephant_bytes=0.5 * tx,
    )  # fmt: skip


def timings_us(call: Callable[[], object], repeats: int = REPEATS) -> list[float]:
    for _ in range(WARMUP):
        call()  # the first compiles
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1e6)
    return times


def median_us(call: Callable[[], object], repeats: int = REPEATS) -> float:
    return statistics.median(timings_us(call, repeats))


def p99(times: list[float]) -> float:
    return float(np.percentile(times, 99))


def fabric_decisions(name: str, rng: np.random.Generator) -> dict:
    """One GraphCC decision for every port of a fabric (K = 2 message-passing steps over the
    port graph; an untrained model: the cost does not depend on the weights) against ACC's
    per-switch decisions for the same ports, one call per switch as the controller runs
    them, in the same run."""
    fabric = build(preset(name))
    _, params = graphcc.build_network(graphcc.GraphccConfig(), jax.random.key(0))
    gnn = graphcc.GraphccPolicy(graphcc.GraphccConfig(), params).for_fabric(fabric)
    feed = iter([history(rng, fabric.n_ports) for _ in range(16)] * (REPEATS + WARMUP))
    gnn_times = timings_us(lambda: gnn.act(next(feed)), REPEATS // 4)
    acc = load_policy("acc:default")
    sizes = [int(np.sum(row >= 0)) for row in fabric.switch_ports]
    per_switch = [history(rng, n) for n in sizes]
    acc_times = timings_us(lambda: [acc.act(h) for h in per_switch], REPEATS // 4)
    return {
        "bench": f"decision_graphcc_{name}", "ports": fabric.n_ports,
        "switches": len(sizes), "max_degree": int(gnn.neighbours.shape[1]),
        "message_bytes_per_decision": graphcc.message_bytes(fabric, gnn.neighbours, gnn.config),
        "median_us": round(statistics.median(gnn_times), 1), "p99_us": round(p99(gnn_times), 1),
        "acc_all_switches_median_us": round(statistics.median(acc_times), 1),
        "acc_all_switches_p99_us": round(p99(acc_times), 1),
        "ratio_to_acc": round(statistics.median(gnn_times) / statistics.median(acc_times), 2),
        "reference": "ACC, one compiled decision per switch for the same ports, same run",
    }  # fmt: skip


def decision(policy: Policy, rng: np.random.Generator) -> tuple[float, float]:
    """(compiled, op by op) median µs of one decision on fresh telemetry each call."""
    inputs = [history(rng) for _ in range(64)]
    feed = iter(inputs * (REPEATS + WARMUP))
    compiled = median_us(lambda: policy.act(next(feed)))
    with jax.disable_jit():
        eager = median_us(lambda: policy.act(next(feed)), repeats=REPEATS // 50)
    return compiled, eager


def distilled_on_random_states(teacher: DdqnPolicy, rng: np.random.Generator) -> distill.TreePolicy:
    """`teacher` distilled into a full 256-entry table on random feature vectors."""
    obs = rng.uniform(0, 1, (20_000, observation_size(teacher.config.features)))
    actions = np.argmax(np.asarray(q_values(teacher.graph, teacher.params, obs)), axis=-1)
    tree, _ = distill.fit_tree(obs.astype(np.float32), actions, max_leaves=256)
    return distill.TreePolicy(distill.tree_config(teacher), tree, teacher.reward)


def digest(port: int, regs: enc.EcnRegisters | None, rng: np.random.Generator) -> dict[str, int]:
    """One port's interval, with the registers the controller wrote (as the switch reports)."""
    regs = regs or enc.EcnRegisters(0, 0, 0, 0)
    tx = int(rng.uniform(1e5, LINK_BPS / 8 * INTERVAL_S))
    d = dict.fromkeys(enc.DIGEST_FIELDS, 0)
    d.update(kmin=regs.kmin, kmax=regs.kmax, pmax=regs.pmax_bp)
    d.update(port=port, interval_us=int(INTERVAL_S * 1e6), tx_bytes=tx, tx_pkts=tx // MTU_BYTES,
             marked_bytes=tx // 10, marked_pkts=tx // (10 * MTU_BYTES),
             qdepth_sum_bytes=(tx // MTU_BYTES) * int(rng.uniform(0, 60_000)),
             qdepth_samples=tx // MTU_BYTES, qdepth_max_bytes=80_000)  # fmt: skip
    return d


def tick_us(policy: Policy, rng: np.random.Generator) -> float:
    ports = dict.fromkeys(range(1, PORTS + 1), LINK_BPS)
    guard = Guard(fallback_after=10**9, baseline_intervals=0)
    loop = SwitchLoop(
        "bench", ports, policy, load_policy("static:secn1"), interval_s=INTERVAL_S,
        buffer_bytes=1e6, guard=guard,
    )  # fmt: skip
    now = iter(range(10**9))

    def one() -> None:
        for port in range(1, PORTS + 1):
            loop.on_digest(digest(port, loop.ports[port].written, rng))
        loop.tick(next(now) * INTERVAL_S)

    return median_us(one)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    rng = np.random.default_rng(0)
    static_us, static_eager_us = decision(load_policy("static:secn1"), rng)
    emit({
        "bench": f"decision_static_{PORTS}ports", "median_us": round(static_us, 1),
        "op_by_op_median_us": round(static_eager_us, 1),
        "speedup": round(static_eager_us / static_us, 1), "reference": "the same, op by op",
    })  # fmt: skip
    for spec in AGENTS:
        us, eager_us = decision(load_policy(spec), rng)
        emit({
            "bench": f"decision_{spec.split(':')[0]}_{PORTS}ports", "median_us": round(us, 1),
            "op_by_op_median_us": round(eager_us, 1), "speedup": round(eager_us / us, 1),
            "static_secn1_median_us": round(static_us, 1),
            "ratio_to_static": round(us / static_us, 2),
            "goal_us": 100, "reference": "the same decision op by op; static SECN1",
        })  # fmt: skip
    teacher = load_policy("acc:default")
    assert isinstance(teacher, DdqnPolicy)
    table = distilled_on_random_states(teacher, rng)
    tree_us, tree_eager_us = decision(table, rng)
    net_us, _ = decision(teacher, rng)
    emit({
        "bench": f"decision_tree_{PORTS}ports", "entries": int(table.tree.action.shape[0]),
        "median_us": round(tree_us, 1), "op_by_op_median_us": round(tree_eager_us, 1),
        "acc_network_median_us": round(net_us, 1), "ratio_to_network": round(tree_us / net_us, 2),
        "reference": "the ACC network it imitates, same run",
    })  # fmt: skip
    for fabric in ("testbed24", "fabric288"):
        emit(fabric_decisions(fabric, rng))
    static_tick = tick_us(load_policy("static:secn1"), rng)
    acc_tick = tick_us(load_policy("acc:default"), rng)
    emit({
        "bench": f"controller_tick_{PORTS}ports", "policy": "acc:default",
        "median_us": round(acc_tick, 1), "static_secn1_median_us": round(static_tick, 1),
        "ratio_to_static": round(acc_tick / static_tick, 2),
        "includes": "32 digests decoded and checked, history, decision, clamp, reward, guard, "
        "register encoding (no P4Runtime I/O)",
    })  # fmt: skip


if __name__ == "__main__":
    main()
