"""One model for a whole fabric, served to each switch's own control loop (GraphCC live).

GraphCC (graphcc.txt §3.3) decides every egress port of the fabric from a port graph whose
messages cross switches. The controller keeps one SwitchLoop per switch (telemetry, safety,
writes, fallback: loop.py), so the fabric-wide model sits behind them: each switch's loop
gets a `SwitchShare` whose act(history) hands its k intervals to the `FabricPolicy` and
answers with this switch's slice of one decision over the whole fabric, made from the
freshest history of every switch — its own from this interval, the others' from their last
tick (at most one interval old, as in a deployment where switches exchange messages with
their neighbours asynchronously). A switch not heard from yet counts as idle.

Each switch's loop still judges, clamps and falls back on its own: a model that fails or
diverges benches that switch's share, not the others. A benched switch no longer calls its
share, so until it returns to the model its neighbours' decisions see its last telemetry
from before it fell back (stated, not hidden: the rows say which switch ran what).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecntune.sim.fabric import build
from ecntune.telemetry import EcnThresholds, PortTelemetry
from ecntune.topology import Topology


class FabricPolicy:
    """A fabric-wide policy (one with `for_fabric`) bound to `topology`, and the latest
    history each switch gave it."""

    def __init__(self, policy: Any, topology: Topology, interval_s: float) -> None:
        fabric = build(topology)
        self.bound = policy.for_fabric(fabric)
        self.name = policy.name
        self.reward = getattr(policy, "reward", None)
        ports = [fabric.names[link] for link in fabric.ports]  # (switch, port) per node
        # per switch: the graph node of each of its ports, in the loop's (port number) order
        self.nodes = {
            s: np.array([ports.index((s, p)) for p in sorted(p for n, p in ports if n == s)])
            for s in topology.switches
        }
        self.link_bps = np.array([topology.port_bw(s, p) for s, p in ports], np.float64)
        self.interval_s = interval_s
        self.histories: dict[str, PortTelemetry] = {}

    def share(self, switch: str) -> SwitchShare:
        return SwitchShare(self, switch)

    def act(self, switch: str, history: PortTelemetry) -> EcnThresholds:
        """This switch's ports' settings from one decision over the whole fabric."""
        width = np.shape(history.tx_bytes)[-1]
        if width != len(self.nodes[switch]):
            raise ValueError(
                f"{self.name}: telemetry of {width} ports for {switch}'s "
                f"{len(self.nodes[switch])} in the fabric"
            )
        self.histories[switch] = history
        chosen = self.bound.act(self.fabric_history(np.shape(history.tx_bytes)[0]))
        return EcnThresholds(*(np.asarray(x)[self.nodes[switch]] for x in chosen))

    def fabric_history(self, k: int) -> PortTelemetry:
        """(k, fabric ports) per field: every switch's latest history in its graph nodes,
        idle intervals (nothing sent, thresholds unset) where a switch was not heard from."""
        zeros = np.zeros((k, len(self.link_bps)))
        fields = {f: zeros.copy() for f in PortTelemetry._fields}
        fields["interval_s"] += self.interval_s
        fields["link_bps"] += self.link_bps
        for switch, history in self.histories.items():
            for f, column in history._asdict().items():
                fields[f][:, self.nodes[switch]] = np.asarray(column, np.float64)[-k:]
        return PortTelemetry(**fields)


class SwitchShare:
    """One switch's view of a FabricPolicy: a Policy for its SwitchLoop."""

    def __init__(self, fabric: FabricPolicy, switch: str) -> None:
        self.fabric, self.switch = fabric, switch
        self.name, self.reward = fabric.name, fabric.reward

    def act(self, history: PortTelemetry) -> EcnThresholds:
        return self.fabric.act(self.switch, history)
