"""What an agent trains and is judged on: one simulated scenario, and the named scenario mixes.

A `SimScenario` is a readable description (fabric, workload, load, incasts, transport,
events) that builds an `Env` (sim/env.py). The mixes below are the evaluation protocol's
scenarios (issue 14, DESIGN.md "Evaluation methodology"): each fabric family has a
*training* mix and a *held-out* mix, fixed here before any agent is trained on them and
never used for training or model selection; held-out episodes use seeds from
`HELD_OUT_SEED` on, training episodes seeds below `TRAIN_SEED_LIMIT`. Each held-out mix
has at least one topology its training mix never uses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ecntune.topology import MIN_EMULATED_DELAY_S, Topology, preset
from ecntune.traffic.spec import TrafficSpec

# The fabrics the emulation runs (Mbit/s links through the embedded switch) train with the
# controller's decision interval and the delays packets see there; the papers' datacenter
# fabrics (testbed24, fabric288) keep their own 1 µs wires and decide every ~40 RTTs.
EMULATED = (
    "tiny",
    "star8",
    "star8-20ms",
    "leafspine-2x2",
    "leafspine-2x4",
    "leafspine-2x2-20ms",
    "leafspine-2x4-20ms",
    "star8-100m",
    "leafspine-2x4-50m",
)
# Packets through the embedded switch see ~0.5 ms RTT across one switch (ping) besides the
# links' own delays (its delay lines): the simulator adds this to every emulated link.
EMULATION_LINK_OVERHEAD_S = 125e-6
# A datacenter switch port's share of a shared buffer (dynamic thresholds let one congested
# port hold a few MB on 12-32 MB chips): deep enough for SECN2's 400 KB·BW/25G kmax.
DATACENTER_BUFFER_BYTES = 2_000_000
# Datacenter hosts (fq + TCP small queues) keep their own NIC queue to microseconds; the
# simulator's host NICs mark past 20 µs of line rate, as sim/ns3/leafspine.cc's do.
DATACENTER_NIC_CE_S = 20e-6
# Seeds: training and judging draw episodes below TRAIN_SEED_LIMIT; held-out evaluation
# episodes are HELD_OUT_SEED + i (i < episodes), the same for every policy (paired).
TRAIN_SEED_LIMIT = 10_000
HELD_OUT_SEED = 10_000


@dataclasses.dataclass(frozen=True)
class SimScenario(TrafficSpec):
    """Which fabric and traffic (the shared `TrafficSpec`'s fields) the agent trains and is
    judged on. Only the topology is positional: SimScenario("star8", load=0.4, incast_degree=4).

    None means "what this fabric runs with": 4 s episodes, the controller's 0.1 s interval,
    the preset's link delay plus the switch's own 125 µs (`emulated_link_delay_s`) and the
    emulation's 64-packet queues on the emulated fabrics; 20 ms episodes, 40-RTT intervals,
    the preset's 1 µs links and 2 MB per port on the datacenter ones.
    """

    topology: str = "star8"
    _: dataclasses.KW_ONLY
    transport: str = "dctcp"
    episode_s: float | None = None
    interval_s: float | None = None
    # one-way delay of every link (None: emulated_link_delay_s on emulated fabrics, the
    # preset's own on datacenter ones)
    link_delay_s: float | None = None
    buffer_bytes: float | None = None
    # (directed link "node:port", down at, up at) as fractions of the episode (robustness)
    failures: tuple[tuple[str, float, float], ...] = ()
    # reward weights (throughput, delay): the papers' (0.3, 0.7) for WebSearch-like
    # latency-sensitive traffic, (0.7, 0.3) for DataMining-like throughput-bound traffic
    reward_weights: tuple[float, float] = (0.3, 0.7)
    # simulator steps per shortest base RTT (sim/env.py): 20 is what the results and the
    # ns-3 checks use; 10 trains ~1.8x faster with mice FCTs within a few % (sim/README.md)
    rtt_steps: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("episode_s", "interval_s"):
            if (value := getattr(self, name)) is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")

    @property
    def emulated(self) -> bool:
        return self.topology in EMULATED

    @property
    def label(self) -> str:
        """A short name for tables: 'star8 websearch 60%+4:1 dctcp'."""
        parts = [self.topology, self.workload]
        if self.switch_to:
            parts[-1] += f"→{self.switch_to}"
        load = f"{self.load:.0%}" + (f"→{self.load_to:.0%}" if self.load_to is not None else "")
        incast = f"+{self.incast_degree}:1" if self.incast_degree else ""
        if incast and self.incast_from_s:
            incast += f" from {self.incast_from_s:g} s"
        parts.append(load + incast)
        parts += [f"{link} down" for link, _, _ in self.failures]
        parts.append(self.transport)
        return " ".join(parts)

    def resolved(self) -> SimScenario:
        """Every None replaced by this fabric's own value (what checkpoints record)."""
        emulated = self.emulated
        return dataclasses.replace(
            self,
            episode_s=self.episode_s or (4.0 if emulated else 0.02),
            interval_s=self.interval_s or (0.1 if emulated else None),
            link_delay_s=self.link_delay_s
            or (emulated_link_delay_s(preset(self.topology)) if emulated else None),
            buffer_bytes=self.buffer_bytes or (None if emulated else DATACENTER_BUFFER_BYTES),
        )

    def simulated_topology(self) -> Topology:
        """The preset with the link delays this scenario simulates (`resolved`'s)."""
        topology = preset(self.topology)
        delay_s = self.resolved().link_delay_s
        if delay_s is not None:
            topology.links = [dataclasses.replace(lk, delay_s=delay_s) for lk in topology.links]
        return topology

    def env(
        self, features: str = "acc", reward: str = "acc", reward_baseline: str | None = None,
        reward_scope: str = "port", switch_cost: float = 0.0, goodput_weight: float = 0.0,
    ):  # -> ecntune.sim.env.Env  # fmt: skip
        from ecntune.sim.env import Env
        from ecntune.sim.fabric import build
        from ecntune.sim.schedule import EpisodeTraffic

        sc = self.resolved()
        topology = sc.simulated_topology()
        episode = float(sc.episode_s)  # resolved: never None
        traffic = EpisodeTraffic(
            **sc.traffic_fields(),
            duration_s=episode,
            failures=failed_links(build(topology), sc.failures, episode),
        )
        return Env.make(
            topology, traffic, sc.transport, interval_s=sc.interval_s,
            features=features, reward=reward, buffer_bytes=sc.buffer_bytes,
            reward_weights=sc.reward_weights,
            nic_ce_s=None if self.emulated else DATACENTER_NIC_CE_S, rtt_steps=sc.rtt_steps,
            reward_baseline=reward_baseline, reward_scope=reward_scope, switch_cost=switch_cost,
            goodput_weight=goodput_weight,
        )  # fmt: skip


def emulated_link_delay_s(topology: Topology) -> float:
    """The one-way delay a packet sees per link of an emulated fabric: the switch's own time
    plus the topology's delay where the emulation applies it (delay lines, from 10 µs on)."""
    delays = {lk.delay_s for lk in topology.links}
    if len(delays) != 1:
        raise ValueError(
            f"{topology.name!r} has links of different delays {sorted(delays)}: the "
            "simulator models one delay per emulated fabric; give link_delay_s"
        )
    (delay,) = delays
    return EMULATION_LINK_OVERHEAD_S + (delay if delay >= MIN_EMULATED_DELAY_S else 0.0)


def failed_links(
    fabric: Any, failures: tuple[tuple[str, float, float], ...], episode_s: float
) -> tuple[tuple[int, float, float], ...]:
    """("leaf1:3", 0.3, 0.6) -> both directions of that cable down from 30 % to 60 % of the
    episode, as the simulator's (link id, down s, up s). Flows hashed onto it stall until it
    is back: the window before routing reconverges, which is what ECN tuning must ride out."""
    index = {f"{node}:{port}": i for i, (node, port) in enumerate(fabric.names)}
    out = []
    for name, down, up in failures:
        if name not in index:
            raise ValueError(f"no link {name!r}; links are node:port, e.g. {next(iter(index))}")
        if not 0 <= down < up:
            raise ValueError(f"a failure needs 0 <= down < up, got {down}, {up}")
        i = index[name]
        out += [(link, down * episode_s, up * episode_s) for link in (i, fabric.peer(i))]
    return tuple(out)


# -- the evaluation protocol's scenario mixes (fixed before training; see module docstring) --


def scenario(topology: str, workload: str, load: float, incast: int, **rest: Any) -> SimScenario:
    """One row of the mixes: fabric, workload, load, incast degree, then anything else."""
    return SimScenario(topology, workload=workload, load=load, incast_degree=incast, **rest)


STAR8_EPISODE_S = 2.0  # 20 decisions of 0.1 s: what keeps a 36-setting grid laptop-sized
# testbed24 with 10 µs per link: 40 µs RTT in a rack, 80 µs across spines, what a datacenter
# RTT with its hosts' stacks looks like (DCTCP §3.4 sizes K for 100 µs). Only there is the
# template's α (20 KB at 25 Gbit/s) below C·RTT/7 (~45 KB at 25 G, 80 µs): low thresholds
# cost throughput, high ones queueing, and the best static differs by scenario (8α at
# DataMining 80 %, α elsewhere). On the 1 µs preset every threshold from α up keeps the
# link busy and the lowest wins everywhere. The room it leaves is still small (~0.5 % of
# mice slowdown over the training mix: docs/results/README.md "Room for adaptation").
# 1 ms decisions (12-25 RTTs), 50 ms episodes.
LONG_RTT: dict[str, Any] = {"link_delay_s": 10e-6, "episode_s": 0.05, "interval_s": 1e-3}
STAR8_20MS_LINK_S = emulated_link_delay_s(preset("star8-20ms"))  # its links, as simulated
STORM: dict[str, Any] = {"incast_period_s": 0.5, "incast_from_s": 2.0}  # from halfway, 2 a second
# two leaf uplinks (to different spines) down from 30 % to 60 % of the episode
UPLINKS_DOWN = (("leaf1:1", 0.3, 0.6), ("leaf3:2", 0.3, 0.6))
MIXES: dict[str, tuple[SimScenario, ...]] = {
    # star8 (9 hosts at 20 Mbit/s through one switch, no link delay; the demo's fabric until
    # star8-20ms): what can be trained and judged on a laptop in minutes.
    "star8-train": (
        scenario("star8", "websearch", 0.6, incast=4, episode_s=STAR8_EPISODE_S),
        scenario("star8", "fb_hadoop", 0.6, incast=0, episode_s=STAR8_EPISODE_S),
        scenario("star8", "datamining", 0.8, incast=0, episode_s=STAR8_EPISODE_S),
        scenario("star8", "websearch", 0.4, incast=7, transport="dcqcn", episode_s=STAR8_EPISODE_S),
    ),
    "star8-heldout": (
        scenario("star8", "websearch", 0.3, incast=4, episode_s=STAR8_EPISODE_S),
        scenario("star8", "alistorage", 0.9, incast=0, episode_s=STAR8_EPISODE_S),
        scenario(
            "star8", "fb_hadoop", 0.5, incast=4, switch_to="websearch", episode_s=STAR8_EPISODE_S
        ),
        scenario("star8", "websearch", 0.5, incast=0, load_to=0.9, episode_s=STAR8_EPISODE_S),
        scenario(
            "star8", "datamining", 0.6, incast=4, transport="dcqcn", episode_s=STAR8_EPISODE_S
        ),
        # a topology never trained on: 2 leaves x 2 spines at the same speed
        scenario("leafspine-2x2", "websearch", 0.6, incast=4, episode_s=STAR8_EPISODE_S),
    ),
    # The demo's fabric with 5 ms links (~20.5 ms RTT, 34 packets in flight at 20 Mbit/s),
    # where the best static differs with the traffic. Fixed after a statics-only look at
    # training seeds 0-3 (best: 1α-step-like SECN0 at WebSearch 70 % without incast, 16-32α
    # with 4:1 and 7:1 incasts) and before any agent trained on them. 4 s episodes (40
    # decisions); no DataMining: its few huge flows barely start in 4 s at 20 Mbit/s.
    "star8-20ms-train": (
        scenario("star8-20ms", "websearch", 0.6, incast=4),
        scenario("star8-20ms", "websearch", 0.3, incast=7),
        scenario("star8-20ms", "websearch", 0.7, incast=0),
        scenario("star8-20ms", "fb_hadoop", 0.6, incast=4),
        scenario("star8-20ms", "websearch", 0.4, incast=4, transport="dcqcn"),
    ),
    "star8-20ms-heldout": (
        scenario("star8-20ms", "websearch", 0.4, incast=4),  # the demo's own traffic
        scenario("star8-20ms", "websearch", 0.8, incast=0),
        scenario("star8-20ms", "alistorage", 0.5, incast=7),  # a workload no agent trained on
        scenario("star8-20ms", "fb_hadoop", 0.5, incast=4, switch_to="websearch"),
        scenario("star8-20ms", "websearch", 0.3, incast=4, load_to=0.8),
        scenario("star8-20ms", "websearch", 0.5, incast=7, transport="dcqcn"),
        # a topology never trained on: 2 leaves x 2 spines, every link 5 ms as star8-20ms's
        scenario("leafspine-2x2", "websearch", 0.5, incast=4, link_delay_s=STAR8_20MS_LINK_S),
    ),
    # star8-20ms with incast storms that begin mid-episode (the demo's --storm: every other
    # host into one, from some point on), where the best setting changes within an episode:
    # without incast SECN0, under 4:1-7:1 incasts 16-32α (the star8-20ms look above). A
    # single static must compromise; a policy that follows the storm need not. Fixed from
    # that look alone, before any policy ran on these scenarios. 4 s episodes.
    "star8-20ms-storm-train": (
        scenario("star8-20ms", "websearch", 0.5, 7, **STORM),
        scenario("star8-20ms", "fb_hadoop", 0.5, 7, incast_period_s=0.25, incast_from_s=2.0),
        scenario("star8-20ms", "websearch", 0.3, 5, incast_period_s=0.5, incast_from_s=1.0),
        scenario("star8-20ms", "websearch", 0.7, incast=0),
        scenario("star8-20ms", "websearch", 0.6, incast=4),
    ),
    "star8-20ms-storm-heldout": (
        scenario("star8-20ms", "websearch", 0.4, 7, **STORM),  # the demo's --storm, 4 s long
        # a workload no agent trained on
        scenario("star8-20ms", "alistorage", 0.5, 6, incast_period_s=0.3, incast_from_s=1.5),
        # late and dense
        scenario("star8-20ms", "websearch", 0.6, 7, incast_period_s=0.2, incast_from_s=3.0),
        scenario("star8-20ms", "websearch", 0.5, 4, load_to=0.8, **STORM),  # and a load step
        scenario("star8-20ms", "websearch", 0.3, incast=0),
        scenario("star8-20ms", "websearch", 0.5, 7, transport="dcqcn", **STORM),
        # a topology never trained on, with star8-20ms's 5 ms links; 3:1 is all its other hosts
        scenario("leafspine-2x2", "websearch", 0.5, 3, link_delay_s=STAR8_20MS_LINK_S, **STORM),
    ),
    # The papers' 24-host leaf-spine (25G hosts, 100G fabric, 2 MB ports): train here.
    "testbed24-train": (
        scenario("testbed24", "websearch", 0.6, incast=16),
        scenario("testbed24", "fb_hadoop", 0.6, incast=0),
        scenario("testbed24", "datamining", 0.8, incast=4),
        scenario("testbed24", "alistorage", 0.4, incast=16, transport="dcqcn"),
        scenario("testbed24", "websearch", 0.3, incast=16, load_to=0.7),
    ),
    "testbed24-heldout": (
        scenario("testbed24", "websearch", 0.9, incast=4),
        scenario("testbed24", "fb_hadoop", 0.3, incast=16, switch_to="websearch"),
        scenario("testbed24", "datamining", 0.5, incast=16, failures=(("leaf1:1", 0.3, 0.6),)),
        scenario("testbed24", "alistorage", 0.7, incast=0, transport="dcqcn"),
        scenario("fabric288", "websearch", 0.6, incast=64),  # the 288-host fabric, never trained on
        scenario(
            "leafspine-2x4", "fb_hadoop", 0.6, incast=4
        ),  # emulated-speed fabric, never trained on
    ),
    # GraphCC's setup (§4.1, §4.3): trained on testbed24 FB_Hadoop 60 % + 16:1 over DCQCN alone,
    # then judged without retraining on its unseen cases (§4.4-4.5: Table 1, Figure 5,
    # Table 2): unseen workloads with and without incasts, higher loads, link failures
    # (transient here, 30-60 % of the episode: the simulator does not reroute), an extra
    # branch, 32 and 40 hosts, and fabric288. Fixed from the paper's list before any policy
    # ran on the held-out ones.
    "graphcc-train": (scenario("testbed24", "fb_hadoop", 0.6, incast=16, transport="dcqcn"),),
    "graphcc-heldout": (
        scenario("testbed24", "websearch", 0.6, incast=16, transport="dcqcn"),
        scenario("testbed24", "websearch", 0.6, incast=0, transport="dcqcn"),
        scenario("testbed24", "alistorage", 0.6, incast=16, transport="dcqcn"),
        scenario("testbed24", "alistorage", 0.6, incast=0, transport="dcqcn"),
        scenario("testbed24", "fb_hadoop", 0.7, incast=16, transport="dcqcn"),
        scenario("testbed24", "fb_hadoop", 0.8, incast=16, transport="dcqcn"),
        scenario("testbed24", "fb_hadoop", 0.6, 16, transport="dcqcn", failures=UPLINKS_DOWN[:1]),
        scenario("testbed24", "fb_hadoop", 0.6, 16, transport="dcqcn", failures=UPLINKS_DOWN),
        scenario("testbed24-branch", "fb_hadoop", 0.6, incast=16, transport="dcqcn"),
        scenario("testbed32", "fb_hadoop", 0.6, incast=16, transport="dcqcn"),
        scenario("testbed40", "fb_hadoop", 0.6, incast=16, transport="dcqcn"),
        scenario("fabric288", "fb_hadoop", 0.6, incast=16, transport="dcqcn"),
    ),
    # The same fabric at datacenter RTTs (LONG_RTT), where the best static setting differs by
    # scenario. Fixed (after a statics-only look at training seeds) before any agent trained.
    "testbed24rtt-train": (
        scenario("testbed24", "websearch", 0.6, incast=16, **LONG_RTT),
        scenario("testbed24", "datamining", 0.8, incast=4, **LONG_RTT),
        scenario("testbed24", "fb_hadoop", 0.3, incast=0, **LONG_RTT),
        scenario("testbed24", "alistorage", 0.5, incast=16, transport="dcqcn", **LONG_RTT),
        scenario("testbed24", "websearch", 0.3, incast=4, load_to=0.8, **LONG_RTT),
    ),
    "testbed24rtt-heldout": (
        scenario("testbed24", "websearch", 0.9, incast=4, **LONG_RTT),
        scenario(
            "testbed24", "datamining", 0.5, incast=16, failures=(("leaf1:1", 0.3, 0.6),), **LONG_RTT
        ),
        scenario("testbed24", "fb_hadoop", 0.6, incast=4, switch_to="websearch", **LONG_RTT),
        scenario("testbed24", "alistorage", 0.7, incast=0, transport="dcqcn", **LONG_RTT),
        scenario("fabric288", "datamining", 0.6, incast=64, **LONG_RTT),  # never trained on
    ),
}


def _with_cubic_hosts(mix: str) -> tuple[SimScenario, ...]:
    """A star8-20ms storm mix's DCTCP scenarios with the emulation's cubic hosts instead."""
    return tuple(
        dataclasses.replace(sc, transport="cubic_ecn")
        for sc in MIXES[mix]
        if sc.transport == "dctcp"
    )


# The storm mixes with the hosts the demo's emulation really runs (cubic, classic ECN; sim/
# transport.py), where the best static differs by scenario (docs/results "Room for adaptation
# with these hosts": 4α–32α ramps under the storms, the lowest threshold without incasts).
# Fixed after that statics-only look at training seed 0, before any agent trained on them;
# the held-out mix adds the demo's own default traffic (a 4:1 storm from halfway).
MIXES["star8-20ms-cubic-train"] = _with_cubic_hosts("star8-20ms-storm-train")
MIXES["star8-20ms-cubic-heldout"] = (
    scenario("star8-20ms", "websearch", 0.4, 4, transport="cubic_ecn", **STORM),
    *_with_cubic_hosts("star8-20ms-storm-heldout"),
)
# The training mix above plus the two kinds of storm every agent trained on it lost on when
# judged (docs/results "Storms the agents had not seen"): AliStorage under a storm and a
# dense storm at a higher load, at loads, degrees, periods and starts the held-out mix does
# not use. Fixed before any agent trained on it; judged on the same held-out mix.
MIXES["star8-20ms-cubic-wide-train"] = (
    *MIXES["star8-20ms-cubic-train"],
    scenario("star8-20ms", "alistorage", 0.7, 4, transport="cubic_ecn", **STORM),
    scenario(
        "star8-20ms",
        "websearch",
        0.7,
        5,
        transport="cubic_ecn",
        incast_period_s=0.25,
        incast_from_s=2.5,
    ),
)
MIXES["star8-20ms-cubic-wide-heldout"] = MIXES["star8-20ms-cubic-heldout"]  # judged on the same
# A fresh held-out mix for the same training mix, fixed on 2026-11-29 before any policy or
# static ran on it: the cubic held-out mix above has been judged on so often (over a hundred agents,
# a hand-written rule whose failure there shaped the next rule) that choices made since are
# no longer blind to it. New loads, degrees, periods and starts; AliStorage with and
# without storms (many senders without an incast); a storm through a workload switch; a
# leaf-spine with two leaves of four hosts no agent trained on. Judged on seeds from 50 000.
MIXES["star8-20ms-cubic-fresh-train"] = MIXES["star8-20ms-cubic-wide-train"]
MIXES["star8-20ms-cubic-fresh-heldout"] = (
    scenario("star8-20ms", "websearch", 0.5, 6, transport="cubic_ecn", incast_period_s=0.4,
             incast_from_s=1.5),
    scenario("star8-20ms", "alistorage", 0.6, 5, transport="cubic_ecn", incast_period_s=0.5,
             incast_from_s=2.0),
    scenario("star8-20ms", "fb_hadoop", 0.4, 6, transport="cubic_ecn", incast_period_s=0.3,
             incast_from_s=2.5),
    scenario("star8-20ms", "websearch", 0.35, 4, transport="cubic_ecn", incast_period_s=0.25,
             incast_from_s=1.0),
    scenario("star8-20ms", "alistorage", 0.4, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "websearch", 0.4, 5, transport="cubic_ecn", switch_to="fb_hadoop",
             **STORM),
    scenario("leafspine-2x4", "websearch", 0.5, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, **STORM),
)  # fmt: skip
# A third held-out mix for the same training mix, fixed on 2026-11-29 (22:25 UTC) before
# any policy or static ran on it, after both held-out mixes above had shaped the design of
# the agents judged since (docs/results "Agents that see what the rule sees"): loads,
# degrees, periods and starts neither of them nor the training mix uses, a 3:1 storm, a
# quiet FB-Hadoop, AliStorage switching to WebSearch under a storm, FB-Hadoop on the
# leaf-spine. Judged on seeds from 70 000; its training mix is the fresh one's.
MIXES["star8-20ms-cubic-blind-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-blind-heldout"] = (
    scenario("star8-20ms", "websearch", 0.45, 6, transport="cubic_ecn", incast_period_s=0.35,
             incast_from_s=1.2),
    scenario("star8-20ms", "alistorage", 0.55, 4, transport="cubic_ecn", incast_period_s=0.4,
             incast_from_s=2.5),
    scenario("star8-20ms", "fb_hadoop", 0.5, 5, transport="cubic_ecn", incast_period_s=0.5,
             incast_from_s=1.0),
    scenario("star8-20ms", "websearch", 0.55, 3, transport="cubic_ecn", incast_period_s=0.3,
             incast_from_s=2.0),
    scenario("star8-20ms", "fb_hadoop", 0.35, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "alistorage", 0.45, 6, transport="cubic_ecn",
             switch_to="websearch", **STORM),
    scenario("leafspine-2x4", "fb_hadoop", 0.45, 5, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, **STORM),
)  # fmt: skip
# A fourth held-out mix for the same training mix, fixed on 2026-12-01 (23:30 UTC) before
# any policy or static ran on it: the blind mix above has judged three arms and its verdict
# shaped the next (docs/results "A fourth mix"). Loads, degrees, periods and starts none of
# the mixes above uses, AliStorage and FB-Hadoop storms through workload switches, a quiet
# WebSearch, AliStorage on the leaf-spine. Judged on seeds from 90 000.
MIXES["star8-20ms-cubic-fourth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-fourth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.42, 5, transport="cubic_ecn", incast_period_s=0.45,
             incast_from_s=1.8),
    scenario("star8-20ms", "alistorage", 0.5, 6, transport="cubic_ecn", incast_period_s=0.3,
             incast_from_s=1.4),
    scenario("star8-20ms", "fb_hadoop", 0.55, 4, transport="cubic_ecn", incast_period_s=0.4,
             incast_from_s=2.2),
    scenario("star8-20ms", "websearch", 0.3, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "alistorage", 0.35, 3, transport="cubic_ecn", incast_period_s=0.35,
             incast_from_s=1.0),
    scenario("star8-20ms", "fb_hadoop", 0.4, 6, transport="cubic_ecn", switch_to="websearch",
             **STORM),
    scenario("leafspine-2x4", "alistorage", 0.4, 4, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, **STORM),
)  # fmt: skip
# A fifth held-out mix for the same training mix, fixed on 2026-12-01 (23:50 UTC) after the
# fourth's verdict on the deployed seeds and before anything ran on it: does that verdict
# replicate on traffic it has not seen? Loads, degrees, periods and starts none of the mixes
# above uses, a quiet AliStorage, WebSearch switching to AliStorage under a storm, a 3:1
# storm on the leaf-spine. Judged on seeds from 110 000.
MIXES["star8-20ms-cubic-fifth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-fifth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.48, 4, transport="cubic_ecn", incast_period_s=0.55,
             incast_from_s=1.6),
    scenario("star8-20ms", "alistorage", 0.45, 5, transport="cubic_ecn", incast_period_s=0.45,
             incast_from_s=2.4),
    scenario("star8-20ms", "fb_hadoop", 0.45, 3, transport="cubic_ecn", incast_period_s=0.25,
             incast_from_s=1.2),
    scenario("star8-20ms", "alistorage", 0.3, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "websearch", 0.38, 6, transport="cubic_ecn", incast_period_s=0.3,
             incast_from_s=2.6),
    scenario("star8-20ms", "websearch", 0.45, 4, transport="cubic_ecn", switch_to="alistorage",
             **STORM),
    scenario("leafspine-2x4", "websearch", 0.4, 3, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, **STORM),
)  # fmt: skip
# A sixth held-out mix for the same training mix, fixed on 2026-12-02 (01:43 UTC) before any
# policy or static ran on it, after the three blind mixes above left the mice p99 verdict
# within its CI's width (docs/results "A sixth mix, 200 episodes"): judged on 200 episodes
# per scenario so the tail's CI is narrower than its effect. Loads, periods and starts
# none of the mixes above uses, a 2:1 storm, a quiet AliStorage at a higher load,
# FB-Hadoop switching to AliStorage under a storm, WebSearch on the leaf-spine. Judged on
# seeds from 130 000.
MIXES["star8-20ms-cubic-sixth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-sixth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.43, 5, transport="cubic_ecn", incast_period_s=0.38,
             incast_from_s=1.3),
    scenario("star8-20ms", "alistorage", 0.47, 3, transport="cubic_ecn", incast_period_s=0.28,
             incast_from_s=1.9),
    scenario("star8-20ms", "fb_hadoop", 0.37, 6, transport="cubic_ecn", incast_period_s=0.42,
             incast_from_s=1.7),
    scenario("star8-20ms", "websearch", 0.58, 2, transport="cubic_ecn", incast_period_s=0.33,
             incast_from_s=1.1),
    scenario("star8-20ms", "alistorage", 0.52, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "fb_hadoop", 0.43, 4, transport="cubic_ecn", switch_to="alistorage",
             **STORM),
    scenario("leafspine-2x4", "websearch", 0.47, 5, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.48, incast_from_s=2.3),
)  # fmt: skip
# A seventh held-out mix for the same training mix, fixed on 2026-12-02 (02:10 UTC) after the
# sixth's verdict and before anything ran on it: does PET's double win there replicate, and
# does an ACC whose low action is the sixth's single best static keep its goodput? Loads,
# periods and starts none of the mixes above uses, a quiet WebSearch at a higher
# load, AliStorage switching to FB-Hadoop under a storm, AliStorage on the leaf-spine. Judged
# on 200 episodes per scenario, seeds from 150 000.
MIXES["star8-20ms-cubic-seventh-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-seventh-heldout"] = (
    scenario("star8-20ms", "websearch", 0.46, 3, transport="cubic_ecn", incast_period_s=0.27,
             incast_from_s=2.1),
    scenario("star8-20ms", "alistorage", 0.41, 6, transport="cubic_ecn", incast_period_s=0.36,
             incast_from_s=1.45),
    scenario("star8-20ms", "fb_hadoop", 0.49, 5, transport="cubic_ecn", incast_period_s=0.32,
             incast_from_s=2.7),
    scenario("star8-20ms", "websearch", 0.36, 2, transport="cubic_ecn", incast_period_s=0.44,
             incast_from_s=0.9),
    scenario("star8-20ms", "websearch", 0.53, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "alistorage", 0.44, 5, transport="cubic_ecn", switch_to="fb_hadoop",
             **STORM),
    scenario("leafspine-2x4", "alistorage", 0.46, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.41, incast_from_s=1.75),
)  # fmt: skip
# An eighth held-out mix for the same training mix, fixed on 2026-12-02 (04:35 UTC) after the
# seventh's verdict and before anything ran on it: does PET's mean and tail win hold a third
# time at 200 episodes, and does an ACC trained to weigh goodput beside the mice (`g9l`,
# docs/results "An eighth mix") keep its goodput and its wins? Loads, periods and starts none
# of the mixes above uses, a quiet FB-Hadoop at a higher load, AliStorage switching to
# WebSearch under a storm, FB-Hadoop on the leaf-spine. Judged on 200 episodes per scenario,
# seeds from 170 000.
MIXES["star8-20ms-cubic-eighth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-eighth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.51, 6, transport="cubic_ecn", incast_period_s=0.31,
             incast_from_s=1.55),
    scenario("star8-20ms", "alistorage", 0.56, 4, transport="cubic_ecn", incast_period_s=0.46,
             incast_from_s=2.05),
    scenario("star8-20ms", "fb_hadoop", 0.34, 5, transport="cubic_ecn", incast_period_s=0.37,
             incast_from_s=1.15),
    scenario("star8-20ms", "websearch", 0.39, 3, transport="cubic_ecn", incast_period_s=0.52,
             incast_from_s=2.35),
    scenario("star8-20ms", "fb_hadoop", 0.57, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "alistorage", 0.33, 5, transport="cubic_ecn", switch_to="websearch",
             **STORM),
    scenario("leafspine-2x4", "fb_hadoop", 0.54, 4, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.29, incast_from_s=1.85),
)  # fmt: skip
# A ninth held-out mix for the same training mix, fixed on 2026-12-02 (06:55 UTC) after the
# eighth's verdict and the goodput-weight sweep on the training mix, before anything ran on
# it: does an ACC trained at the weight chosen there (0.01, `g01l`, docs/results "A ninth
# mix") keep its goodput and its wins on traffic it has not seen, and does PET's win hold a
# fourth time? Loads, periods and starts none of the mixes above uses, a quiet AliStorage at
# a higher load, WebSearch switching to FB-Hadoop under a 6:1 storm, FB-Hadoop on the
# leaf-spine. Judged on 200 episodes per scenario, seeds from 190 000.
MIXES["star8-20ms-cubic-ninth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-ninth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.59, 4, transport="cubic_ecn", incast_period_s=0.34,
             incast_from_s=1.25),
    scenario("star8-20ms", "alistorage", 0.62, 5, transport="cubic_ecn", incast_period_s=0.49,
             incast_from_s=2.15),
    scenario("star8-20ms", "fb_hadoop", 0.32, 6, transport="cubic_ecn", incast_period_s=0.26,
             incast_from_s=1.35),
    scenario("star8-20ms", "websearch", 0.61, 2, transport="cubic_ecn", incast_period_s=0.39,
             incast_from_s=2.45),
    scenario("star8-20ms", "alistorage", 0.63, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "websearch", 0.31, 6, transport="cubic_ecn", switch_to="fb_hadoop",
             **STORM),
    scenario("leafspine-2x4", "fb_hadoop", 0.64, 3, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.43, incast_from_s=1.65),
)  # fmt: skip
# A tenth held-out mix for the same training mix, fixed on 2026-12-02 (07:50 UTC) after the
# ninth's verdict and before anything ran on it: does the deployed `g01l` seed's win there,
# the first by an ACC agent on a 200-episode blind mix, replicate, and PET's a fourth time?
# (docs/results "A tenth mix"). Loads, periods and starts none of the mixes above uses, a
# quiet FB-Hadoop at a higher load, FB-Hadoop switching to AliStorage under a 5:1 storm,
# WebSearch on the leaf-spine. Judged on 200 episodes per scenario, seeds from 210 000.
MIXES["star8-20ms-cubic-tenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-tenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.65, 5, transport="cubic_ecn", incast_period_s=0.47,
             incast_from_s=1.05),
    scenario("star8-20ms", "alistorage", 0.29, 6, transport="cubic_ecn", incast_period_s=0.23,
             incast_from_s=2.25),
    scenario("star8-20ms", "fb_hadoop", 0.66, 4, transport="cubic_ecn", incast_period_s=0.53,
             incast_from_s=1.95),
    scenario("star8-20ms", "websearch", 0.28, 3, transport="cubic_ecn", incast_period_s=0.24,
             incast_from_s=2.55),
    scenario("star8-20ms", "fb_hadoop", 0.67, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "fb_hadoop", 0.27, 5, transport="cubic_ecn", switch_to="alistorage",
             **STORM),
    scenario("leafspine-2x4", "websearch", 0.68, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.51, incast_from_s=2.65),
)  # fmt: skip
# An eleventh held-out mix for the same training mix, fixed on 2026-12-02 (10:55 UTC) after the
# tenth's verdict, while PET trained at ACC's `g01l` recipe (docs/results "An eleventh mix")
# and before anything ran on it: does ACC g01l4's win replicate a third time, and does PET at
# the same recipe meet it where q9l4's tail has not? Loads none of the mixes above uses, at
# and a little above the training mix's highest (69-76 %), periods and starts none uses, a
# quiet AliStorage, WebSearch switching to AliStorage under a 5:1 storm, AliStorage on the
# leaf-spine. Judged on 200 episodes per scenario, seeds from 230 000.
MIXES["star8-20ms-cubic-eleventh-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-eleventh-heldout"] = (
    scenario("star8-20ms", "websearch", 0.69, 6, transport="cubic_ecn", incast_period_s=0.22,
             incast_from_s=0.95),
    scenario("star8-20ms", "alistorage", 0.71, 3, transport="cubic_ecn", incast_period_s=0.54,
             incast_from_s=2.75),
    scenario("star8-20ms", "fb_hadoop", 0.72, 5, transport="cubic_ecn", incast_period_s=0.21,
             incast_from_s=2.8),
    scenario("star8-20ms", "websearch", 0.73, 4, transport="cubic_ecn", incast_period_s=0.56,
             incast_from_s=0.85),
    scenario("star8-20ms", "alistorage", 0.74, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "websearch", 0.75, 5, transport="cubic_ecn", switch_to="alistorage",
             **STORM),
    scenario("leafspine-2x4", "alistorage", 0.76, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.57, incast_from_s=2.85),
)  # fmt: skip
# A training mix with the load the held-out mixes found PET weakest at (docs/results "An
# eleventh mix": at 69-76 % SECN0's zero level is what the mice want, and PET held higher
# thresholds): the training mix above plus a 6:1 storm at 80 %, a quiet AliStorage at 90 %
# and an FB-Hadoop storm at 90 %. Fixed on 2026-12-02 (13:23 UTC) with the twelfth mix below,
# before any agent trained on it.
MIXES["star8-20ms-cubic-high-train"] = (
    *MIXES["star8-20ms-cubic-fresh-train"],
    scenario("star8-20ms", "websearch", 0.8, 6, transport="cubic_ecn", **STORM),
    scenario("star8-20ms", "alistorage", 0.9, 0, transport="cubic_ecn"),
    scenario("star8-20ms", "fb_hadoop", 0.9, 5, transport="cubic_ecn", incast_period_s=0.25,
             incast_from_s=2.5),
)  # fmt: skip
# A twelfth held-out mix, fixed on 2026-12-02 (13:23 UTC) after the eleventh's verdict and
# before anything ran on it (docs/results "A twelfth mix"): the highest loads yet, 77-88 %,
# none of the mixes above uses (between the high training mix's 80 and 90 %); periods and
# starts none uses; a load step, a quiet FB-Hadoop, AliStorage switching to WebSearch under
# a storm, WebSearch on the leaf-spine. Judged on 200 episodes per scenario, seeds from 250 000.
MIXES["star8-20ms-cubic-twelfth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-twelfth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.77, 5, transport="cubic_ecn", incast_period_s=0.18,
             incast_from_s=0.65),
    scenario("star8-20ms", "fb_hadoop", 0.78, 0, transport="cubic_ecn", load_to=0.88),
    scenario("star8-20ms", "alistorage", 0.79, 4, transport="cubic_ecn", incast_period_s=0.62,
             incast_from_s=0.75),
    scenario("star8-20ms", "websearch", 0.81, 6, transport="cubic_ecn", incast_period_s=0.16,
             incast_from_s=3.1),
    scenario("star8-20ms", "fb_hadoop", 0.83, 3, transport="cubic_ecn", incast_period_s=0.66,
             incast_from_s=3.15),
    scenario("star8-20ms", "alistorage", 0.84, 5, transport="cubic_ecn", switch_to="websearch",
             incast_period_s=0.19, incast_from_s=3.2),
    scenario("leafspine-2x4", "websearch", 0.86, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.68, incast_from_s=0.8),
)  # fmt: skip
MIXES["star8-20ms-cubic-high-heldout"] = MIXES["star8-20ms-cubic-twelfth-heldout"]  # judged there
# A thirteenth held-out mix, fixed on 2026-12-02 (16:27 UTC) after the twelfth's verdict, while
# PET trained at PET's own GAE λ (docs/results "A thirteenth mix") and before anything ran on
# it: loads across the range again, 34.5-89 %, none of the mixes above uses (a load step
# 56.5 -> 82 % on a quiet AliStorage); periods and starts none uses; WebSearch switching to
# FB-Hadoop under a storm, FB-Hadoop on the leaf-spine. Judged on 200 episodes per scenario,
# seeds from 270 000.
MIXES["star8-20ms-cubic-thirteenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-thirteenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.345, 6, transport="cubic_ecn", incast_period_s=0.59,
             incast_from_s=0.7),
    scenario("star8-20ms", "fb_hadoop", 0.455, 4, transport="cubic_ecn", incast_period_s=0.17,
             incast_from_s=2.9),
    scenario("star8-20ms", "alistorage", 0.565, 0, transport="cubic_ecn", load_to=0.82),
    scenario("star8-20ms", "websearch", 0.635, 5, transport="cubic_ecn", switch_to="fb_hadoop",
             incast_period_s=0.61, incast_from_s=2.95),
    scenario("star8-20ms", "alistorage", 0.85, 6, transport="cubic_ecn", incast_period_s=0.63,
             incast_from_s=3.05),
    scenario("star8-20ms", "websearch", 0.87, 0, transport="cubic_ecn"),
    scenario("leafspine-2x4", "fb_hadoop", 0.89, 5, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.15, incast_from_s=0.6),
)  # fmt: skip
# A fourteenth held-out mix, fixed on 2026-12-02 (16:58 UTC) before the thirteenth's verdict,
# while PET trained four times as long (docs/results "A fourteenth mix"), and before anything
# ran on it: loads none of the mixes above uses, 30.5-78.5 % (a load step 58.5 -> 74.5 %
# under a storm), periods and starts none uses, FB-Hadoop switching to WebSearch with no
# incast, AliStorage on the leaf-spine. Judged on 200 episodes per scenario, seeds from
# 290 000.
MIXES["star8-20ms-cubic-fourteenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-fourteenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.305, 5, transport="cubic_ecn", incast_period_s=0.64,
             incast_from_s=3.25),
    scenario("star8-20ms", "alistorage", 0.415, 6, transport="cubic_ecn", incast_period_s=0.14,
             incast_from_s=0.55),
    scenario("star8-20ms", "fb_hadoop", 0.525, 0, transport="cubic_ecn", switch_to="websearch"),
    scenario("star8-20ms", "websearch", 0.585, 4, transport="cubic_ecn", load_to=0.745,
             incast_period_s=0.58, incast_from_s=0.5),
    scenario("star8-20ms", "fb_hadoop", 0.665, 6, transport="cubic_ecn", incast_period_s=0.13,
             incast_from_s=3.3),
    scenario("star8-20ms", "alistorage", 0.785, 5, transport="cubic_ecn", incast_period_s=0.67,
             incast_from_s=3.35),
    scenario("leafspine-2x4", "alistorage", 0.705, 4, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.65, incast_from_s=0.45),
)  # fmt: skip
# A fifteenth held-out mix, fixed on 2026-12-02 (20:25 UTC) after the fourteenth's verdict,
# while PET trained with actor and critic clipped apart (docs/results "A fifteenth mix"),
# and before anything ran on it: loads none of the mixes above uses, 33.5-83.5 % (a load
# step 47.5 -> 76.5 % on a quiet FB-Hadoop), periods and starts none uses, AliStorage
# switching to WebSearch under a storm, WebSearch on the leaf-spine. Judged on 200 episodes
# per scenario, seeds from 310 000.
MIXES["star8-20ms-cubic-fifteenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-fifteenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.335, 6, transport="cubic_ecn", incast_period_s=0.6,
             incast_from_s=3.4),
    scenario("star8-20ms", "alistorage", 0.435, 5, transport="cubic_ecn", incast_period_s=0.12,
             incast_from_s=0.4),
    scenario("star8-20ms", "fb_hadoop", 0.475, 0, transport="cubic_ecn", load_to=0.765),
    scenario("star8-20ms", "alistorage", 0.545, 4, transport="cubic_ecn", switch_to="websearch",
             incast_period_s=0.69, incast_from_s=3.375),
    scenario("star8-20ms", "websearch", 0.695, 6, transport="cubic_ecn", incast_period_s=0.145,
             incast_from_s=0.425),
    scenario("star8-20ms", "fb_hadoop", 0.835, 4, transport="cubic_ecn", incast_period_s=0.625,
             incast_from_s=0.525),
    scenario("leafspine-2x4", "websearch", 0.725, 5, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.175, incast_from_s=3.45),
)  # fmt: skip
# A sixteenth held-out mix, fixed on 2026-12-07 (16:29 UTC) after the fifteenth's verdict,
# while PET trained with ten PPO epochs per round (docs/results "A sixteenth mix"), and
# before anything ran on it: loads none of the mixes above uses, 31.5-81.5 % (a load step
# 49.5 -> 77.5 % on a quiet AliStorage), periods and starts none uses, AliStorage switching
# to FB-Hadoop under a storm, AliStorage on the leaf-spine. Judged on 200 episodes per
# scenario, seeds from 330 000.
MIXES["star8-20ms-cubic-sixteenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-sixteenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.315, 5, transport="cubic_ecn", incast_period_s=0.615,
             incast_from_s=3.425),
    scenario("star8-20ms", "fb_hadoop", 0.425, 6, transport="cubic_ecn", incast_period_s=0.155,
             incast_from_s=0.475),
    scenario("star8-20ms", "alistorage", 0.495, 0, transport="cubic_ecn", load_to=0.775),
    scenario("star8-20ms", "alistorage", 0.555, 4, transport="cubic_ecn", switch_to="fb_hadoop",
             incast_period_s=0.655, incast_from_s=3.325),
    scenario("star8-20ms", "websearch", 0.645, 6, transport="cubic_ecn", incast_period_s=0.185,
             incast_from_s=0.575),
    scenario("star8-20ms", "fb_hadoop", 0.815, 5, transport="cubic_ecn", incast_period_s=0.635,
             incast_from_s=0.625),
    scenario("leafspine-2x4", "alistorage", 0.755, 4, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.165, incast_from_s=3.475),
)  # fmt: skip
# A seventeenth held-out mix, fixed on 2026-12-07 (17:27 UTC) after the sixteenth's verdict
# and before anything ran on it, for the deployed agents alone (docs/results "A seventeenth
# mix"): one more blind mix declared before the pooled estimate over every blind mix sees it.
# Loads none of the mixes above uses, 32.5-84.5 % (a load step 51.5 -> 79.5 % on a quiet
# FB-Hadoop), periods and starts none uses, WebSearch switching to AliStorage under a storm,
# WebSearch on the leaf-spine. Judged on 200 episodes per scenario, seeds from 350 000.
MIXES["star8-20ms-cubic-seventeenth-train"] = MIXES["star8-20ms-cubic-fresh-train"]
MIXES["star8-20ms-cubic-seventeenth-heldout"] = (
    scenario("star8-20ms", "websearch", 0.325, 4, transport="cubic_ecn", incast_period_s=0.645,
             incast_from_s=3.275),
    scenario("star8-20ms", "alistorage", 0.465, 6, transport="cubic_ecn", incast_period_s=0.135,
             incast_from_s=0.675),
    scenario("star8-20ms", "fb_hadoop", 0.515, 0, transport="cubic_ecn", load_to=0.795),
    scenario("star8-20ms", "websearch", 0.575, 5, transport="cubic_ecn", switch_to="alistorage",
             incast_period_s=0.665, incast_from_s=3.225),
    scenario("star8-20ms", "fb_hadoop", 0.655, 4, transport="cubic_ecn", incast_period_s=0.195,
             incast_from_s=0.725),
    scenario("star8-20ms", "alistorage", 0.845, 6, transport="cubic_ecn", incast_period_s=0.685,
             incast_from_s=0.775),
    scenario("leafspine-2x4", "websearch", 0.715, 6, transport="cubic_ecn",
             link_delay_s=STAR8_20MS_LINK_S, incast_period_s=0.125, incast_from_s=3.175),
)  # fmt: skip
