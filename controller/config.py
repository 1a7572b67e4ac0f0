"""The controller's configuration: one YAML/JSON file, validated with messages that say what to fix.

topology: leafspine-2x2          # a preset name, a path to a topology JSON, or inline
policy: static:secn1             # what tunes ECN (agent/policy.py load_policy)
fallback: static:secn1           # where it falls back to (must be static)
interval_s: 0.1                  # telemetry and decision interval (>= 10x RTT)
write_path: auto                 # auto | register | packet_out
buffer_bytes: 96000              # per-port queue capacity: kmax never exceeds it
min_write_interval_s: 0.0        # rate limit of threshold changes per port
fallback_after: 20               # busy intervals the agent is judged over (controller/safety.py)
baseline_intervals: 20           # busy intervals under the fallback preset: the baseline
reward: acc                      # acc | pet: the guard's reward for static policies and for agents
                                 # trained on a simulator-only one (others: their checkpoint's)
telemetry_log: results/telemetry.jsonl
checkpoint_dir: results/agent-checkpoints   # learning agents saved here; resumed on restart
online_learning: false           # fine-tune learned agents online (decaying exploration)
in_switch: false                 # the policy (a tree from `ecntune distill --in-switch`) runs
                                 # in the P4 program; the controller installs and supervises it
switches: {s1: 127.0.0.1:9559}   # default: 127.0.0.1:<grpc_port from the topology>
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from ecntune.topology import MTU_BYTES, QUEUE_PKTS, Topology, preset

if TYPE_CHECKING:
    from ecntune.agent.policy import Policy

WritePath = Literal["auto", "register", "packet_out"]


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ControllerConfig:
    topology: Topology
    policy: str | Policy = "static:secn1"  # a Policy object when embedding the controller
    fallback: str = "static:secn1"
    interval_s: float = 0.1
    write_path: WritePath = "auto"
    buffer_bytes: int = QUEUE_PKTS * MTU_BYTES
    min_write_interval_s: float = 0.0
    fallback_after: int = 20
    baseline_intervals: int = 20
    reward: Literal["acc", "pet"] = "acc"
    telemetry_log: Path | None = None
    checkpoint_dir: Path | None = None
    online_learning: bool = False
    in_switch: bool = False
    switches: dict[str, str] = field(default_factory=dict)
    election_id: int = 10

    def __post_init__(self) -> None:
        if not 0.001 <= self.interval_s <= 60:
            raise ConfigError(f"interval_s must be between 1 ms and 60 s, got {self.interval_s}")
        if self.write_path not in ("auto", "register", "packet_out"):
            raise ConfigError(
                f"write_path must be auto, register or packet_out: {self.write_path!r}"
            )
        if self.reward not in ("acc", "pet"):
            raise ConfigError(f"reward must be acc or pet, got {self.reward!r}")
        if not self.fallback.startswith("static:"):
            raise ConfigError(f"the fallback must be a static preset, got {self.fallback!r}")
        if self.buffer_bytes <= 0 or self.fallback_after <= 0 or self.baseline_intervals < 0:
            raise ConfigError("buffer_bytes and fallback_after must be positive")
        if self.in_switch and isinstance(self.policy, str) and not self.policy.startswith("tree:"):
            raise ConfigError(
                f"in_switch needs a tree policy (tree:PATH from `ecntune distill --in-switch`), "
                f"got {self.policy!r}"
            )
        unknown = set(self.switches) - set(self.topology.switches)
        if unknown:
            raise ConfigError(f"switches {sorted(unknown)} are not in the topology")

    def address(self, switch: str) -> str:
        return self.switches.get(switch) or f"127.0.0.1:{self.topology.switches[switch].grpc_port}"

    @classmethod
    def from_dict(cls, d: dict[str, Any], base: Path = Path()) -> ControllerConfig:
        if not isinstance(d, dict):
            raise ConfigError("the configuration must be a mapping")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown settings {sorted(unknown)}; known: {sorted(known)}")
        if "topology" not in d:
            raise ConfigError("the configuration needs a topology (preset name, file or mapping)")
        d = dict(d)
        d["topology"] = load_topology(d["topology"], base)
        for key in ("telemetry_log", "checkpoint_dir"):
            if d.get(key) is not None:
                d[key] = base / Path(d[key])
        try:
            return cls(**d)
        except TypeError as e:
            raise ConfigError(str(e)) from None

    @classmethod
    def from_file(cls, path: Path) -> ControllerConfig:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read {path}: {e}") from None
        return cls.from_dict(data, Path(path).parent)


def load_topology(spec: Any, base: Path = Path()) -> Topology:
    if isinstance(spec, dict):
        return Topology.from_dict(spec)
    if not isinstance(spec, str):
        raise ConfigError(f"topology must be a preset name, a file or a mapping, got {spec!r}")
    path = base / spec
    if path.suffix in (".json", ".yaml", ".yml") and path.exists():
        return Topology.from_dict(yaml.safe_load(path.read_text()))
    try:
        return preset(spec)
    except ValueError as e:
        raise ConfigError(str(e)) from None
