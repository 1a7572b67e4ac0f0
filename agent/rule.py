"""A hand-written adaptive baseline: one setting while a port sees an incast, another otherwise.

    load_policy("rule:senders>=4:1a,32a,0.2:0a,0a,1")
    load_policy("rule:senders>=4,qmax>=8a:1a,32a,0.2:0a,0a,1")

Per port: if any of the last k intervals the policy sees (agent/features.py HISTORY) counted
at least N distinct senders towards the port (the digest's sketch, telemetry.py
`senders_estimate`, PET's incast degree) and, where the rule asks, a deepest queue of at
least Q·α, the first setting, else the second. The queue condition is there because many
senders alone are no incast: a port under AliStorage's small flows counts four to six of
them with a queue of a few packets (docs/results, "A hand-written incast rule"). Settings
are kmin, kmax in units of the port's α and pmax, as agent/static.py writes them ("0a" is
the zero level).

Why it exists (issue 14): before asking an agent to find an adaptive policy that beats the
best static setting, ask whether a simple one exists on a mix at all, from the telemetry
every agent sees. Its parameters are arrays, so the evaluator simulates many rules in one
compiled batch as it does the statics, and the controller runs it as any policy.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from ecntune.agent.actions import alpha_bytes, in_alpha, kmax_in_bytes
from ecntune.agent.policy import compiled
from ecntune.telemetry import Array, EcnThresholds, PortTelemetry


class RuleParams(NamedTuple):
    min_senders: Array  # () the incast trigger N
    min_qmax_alpha: Array  # () and Q: the deepest queue it needs, in α (0: any)
    incast: Array  # (3,) kmin α, kmax α, pmax while triggered
    otherwise: Array  # (3,) the same otherwise


def parse(spec: str) -> RuleParams:
    """'senders>=N[,qmax>=Qa]:SETTING:SETTING' -> RuleParams; ValueError says what is wrong."""
    parts = spec.split(":")
    conditions = dict(c.partition(">=")[::2] for c in parts[0].split(","))
    if len(parts) != 3 or "senders" not in conditions or set(conditions) - {"senders", "qmax"}:
        raise ValueError(
            f"a rule is 'senders>=N[,qmax>=Qa]:kmin,kmax,pmax:kmin,kmax,pmax', got {spec!r}"
        )
    qmax = conditions.get("qmax", "0a")
    if not qmax.endswith("a"):
        raise ValueError(f"qmax>={qmax}: give the queue in α units, like qmax>=8a")
    try:
        n, q = float(conditions["senders"]), float(qmax[:-1])
    except ValueError:
        raise ValueError(f"{parts[0]!r}: N and Q must be numbers") from None
    settings = (jnp.asarray(in_alpha(s), jnp.float32) for s in parts[1:])
    return RuleParams(jnp.float32(n), jnp.float32(q), *settings)


def decide(params: RuleParams, history: PortTelemetry) -> tuple[Array, EcnThresholds]:
    """(triggered per port, the settings): pure, so it runs under jit and vmap."""
    alpha = alpha_bytes(jnp.asarray(history.link_bps)[-1])
    incast = (jnp.asarray(history.senders) >= params.min_senders) & (
        jnp.asarray(history.qdepth_max_bytes) >= params.min_qmax_alpha * alpha
    )  # (k, ports)
    triggered = jnp.any(incast, axis=0)
    chosen = jnp.where(triggered[:, None], params.incast, params.otherwise)  # (ports, 3)
    kmin, kmax, pmax = chosen[:, 0], chosen[:, 1], chosen[:, 2]
    return triggered, EcnThresholds(kmin * alpha, kmax_in_bytes(kmax, alpha), pmax)


class RulePolicy:
    # every rule is the same function of different parameters: one compiled simulation for
    # all of them (agent/evaluate.py batches policies by type and config)
    config = "rule"

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.acting_params = parse(spec)
        self._decide = compiled(decide, self.acting_params)

    @property
    def name(self) -> str:
        return f"rule:{self.spec}"

    def decide(self, params: RuleParams, history: PortTelemetry) -> tuple[Array, EcnThresholds]:
        return decide(params, history)

    def act(self, history: PortTelemetry) -> EcnThresholds:
        return self._decide(self.acting_params, history)[-1]
