"""A distilled tree installed in the P4 program, so the switch decides every interval itself
(issue 20 part 3; RL-CC §V: the policy distilled into something the device runs).

ecn.p4 closes a port's telemetry interval, computes six one-byte keys from the counters of
that interval (agent/features.py `switch_keys`, the same numbers) and looks them up in
`policy_tree`: one entry per tree leaf, a range per key, answering the port's next
(kmin, kmax, pmax). The keys are normalised per port speed by two numbers `policy_port`
gives each port (16·log2 of α and of the link rate), so one tree serves every port, with
its settings in bytes written once per distinct speed (a "class"): a 24-port switch with
25 and 100 Gbit/s ports holds two copies of the tree.

`policy_plan` is the one place that turns a tree into table entries; the controller
renders them as finsy entities, tests and the PTF suite write them with ecntune's own
client (`install`). Emptying both tables (`clear`) leaves every port's thresholds as they
are: the controller's own writes take over again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import finsy as fy
import numpy as np

from ecntune.agent.distill import QUANT_LEVELS, TreePolicy
from ecntune.agent.features import FEATURE_NAMES, switch_port_class
from ecntune.controller.safety import clamp
from ecntune.p4runtime_client import P4RuntimeClient
from ecntune.p4src import encoding as enc

MAX_CLASSES = 255  # port_class is a byte and 0 means "no in-switch policy"
TREE_ENTRIES = 1024  # ecn.p4's policy_tree size


@dataclass(frozen=True)
class PolicyEntry:
    """One table entry of either policy table: match field -> value (exact) or (lo, hi)."""

    table: str
    match: dict[str, int | tuple[int, int]]
    action: str
    params: dict[str, int]
    priority: int = 0


def policy_plan(
    policy: TreePolicy, link_bps: Mapping[int, float], buffer_bytes: float = enc.MAX_BYTES
) -> list[PolicyEntry]:
    """Every entry the tree needs on a switch whose ports (port -> link speed) it tunes:
    the ports' classes first, then the tree once per class, each setting clamped as the
    controller clamps its own writes (controller/safety.py: kmax within the buffer)."""
    if not isinstance(policy, TreePolicy):
        raise ValueError(f"{policy.name} is not a distilled tree: a switch table cannot hold it")
    if policy.config.features != "switch":
        raise ValueError(
            f"{policy.name} keys on the agent's features ({policy.config.features}), which "
            "the data plane cannot compute: distill with --in-switch"
        )
    speeds = sorted(set(link_bps.values()))
    if len(speeds) > MAX_CLASSES:
        raise ValueError(f"{len(speeds)} port speeds; the program tells {MAX_CLASSES} apart")
    leaves = int(policy.tree.action.shape[0])
    if leaves * len(speeds) > TREE_ENTRIES:
        raise ValueError(
            f"{leaves} leaves x {len(speeds)} port speeds exceed policy_tree's {TREE_ENTRIES}"
        )
    names = FEATURE_NAMES["switch"]
    lo, hi = np.asarray(policy.tree.lo), np.asarray(policy.tree.hi)
    actions = np.asarray(policy.tree.action)
    template = policy.config.template
    entries = []
    for cls, bps in enumerate(speeds, start=1):
        log2_alpha, rate_offset = (int(v) for v in switch_port_class(np.float32(bps)))
        params = {"port_class": cls, "log2_alpha": log2_alpha, "rate_offset": rate_offset}
        entries += [
            PolicyEntry(
                enc.TABLE_POLICY_PORT, {enc.POLICY_PORT_KEY: port}, enc.ACTION_POLICY_CLASS, params
            )
            for port, speed in sorted(link_bps.items())
            if speed == bps
        ]
    for cls, bps in enumerate(speeds, start=1):
        settings = clamp(template.thresholds(actions, np.float32(bps)), buffer_bytes)
        for i in range(leaves):
            regs = enc.encode_thresholds(*(float(np.asarray(s)[i]) for s in settings))
            match: dict[str, int | tuple[int, int]] = {enc.POLICY_CLASS_KEY: cls}
            for f, name in enumerate(names):
                if lo[i, f] > 0 or hi[i, f] < QUANT_LEVELS:  # a full range is "don't care"
                    match[enc.POLICY_KEY_PREFIX + name] = (int(lo[i, f]), int(hi[i, f]) - 1)
            # the leaves' boxes are disjoint: any one priority works, P4Runtime wants one
            params = {"kmin": regs.kmin, "kmax": regs.kmax, "slope": regs.slope,
                      "pmax": regs.pmax_bp}  # fmt: skip
            entries.append(PolicyEntry(enc.TABLE_POLICY_TREE, match, enc.ACTION_DECIDE,
                                       params, priority=1))  # fmt: skip
    return entries


def policy_entities(plan: list[PolicyEntry]) -> list[fy.P4Entity]:
    """The plan as finsy entities (the controller's writes)."""
    return [
        fy.P4TableEntry(
            e.table,
            match=fy.P4TableMatch(e.match),
            action=fy.P4TableAction(e.action, **e.params),
            priority=e.priority,
        )
        for e in plan
    ]


def cleared() -> list[fy.P4Entity]:
    """Wildcard deletes of both tables (the switch goes back to the controller's writes)."""
    return [fy.P4TableEntry(enc.TABLE_POLICY_TREE), fy.P4TableEntry(enc.TABLE_POLICY_PORT)]


def install(client: P4RuntimeClient, plan: list[PolicyEntry]) -> None:
    """Write the plan with ecntune's own client, in one write (atomic per entry)."""
    client.insert(
        *(
            client.table_entry(e.table, e.match, e.action, e.params, priority=e.priority)
            for e in plan
        )
    )


def clear(client: P4RuntimeClient, plan: list[PolicyEntry]) -> None:
    """Delete the plan's entries, tree first (a port never keys into a half-empty class)."""
    tree = [e for e in plan if e.table == enc.TABLE_POLICY_TREE]
    ports = [e for e in plan if e.table == enc.TABLE_POLICY_PORT]
    for part in (tree, ports):
        if part:
            client.delete(
                *(client.table_entry(e.table, e.match, priority=e.priority) for e in part)
            )
