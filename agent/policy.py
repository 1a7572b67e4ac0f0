"""The interface between agents and whoever runs them (the controller, the simulator).

A policy sees, for one switch, the last k intervals of every port's telemetry (fields of
shape (k, ports), oldest first) and answers one ECN setting per port. Learning policies
additionally accept the outcome of their last decision (`observe`) and can be saved and
restored, so a restarted controller resumes where it stopped.

    load_policy("static:secn1")          a static baseline (agent/static.py)
    load_policy("static:20KB,80KB,0.1")  explicit kmin, kmax (bytes, or KB/MB), pmax
    load_policy("acc:path/to/ckpt")      a DDQN agent (agent/ddqn.py)
    load_policy("pet:path/to/ckpt")      an IPPO agent (agent/ippo.py)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ecntune.agent.static import StaticPolicy
from ecntune.agent.telemetry import EcnThresholds, PortTelemetry


@runtime_checkable
class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def act(self, history: PortTelemetry) -> EcnThresholds: ...


@runtime_checkable
class LearningPolicy(Policy, Protocol):
    def observe(self, history: PortTelemetry, reward: object) -> None:
        """The telemetry (and reward) that followed the last act(): one learning step."""

    def save(self, path: Path) -> None: ...


LEARNED_KINDS = {
    "acc": "ecntune.agent.ddqn",
    "pet": "ecntune.agent.ippo",
}  # kind -> module that provides load(path)


def load_policy(spec: str | Policy) -> Policy:
    """A policy from 'kind:argument' (see the module docstring); a Policy is used as it is."""
    if not isinstance(spec, str):
        if not isinstance(spec, Policy):
            raise TypeError(f"not a policy: {spec!r} (needs .name and .act(history))")
        return spec
    kind, sep, arg = spec.partition(":")
    if not sep or not arg:
        raise ValueError(
            f"policy must look like 'static:secn1' or 'acc:<checkpoint>', got {spec!r}"
        )
    if kind == "static":
        return StaticPolicy(arg)
    if kind in LEARNED_KINDS:
        import importlib

        return importlib.import_module(LEARNED_KINDS[kind]).load(Path(arg))
    raise ValueError(f"unknown policy kind {kind!r} (known: static, {', '.join(LEARNED_KINDS)})")


def hold_idle_ports(chosen: EcnThresholds, history: PortTelemetry) -> EcnThresholds:
    """ACC §4.3: a port that sent nothing in the last interval keeps its setting (no
    inference needed, no churn), unless it has none yet (kmax 0, the register's reset)."""
    import jax.numpy as jnp

    idle = jnp.asarray(history.tx_bytes)[-1] <= 0
    current = (history.kmin_bytes, history.kmax_bytes, history.pmax)
    keep = idle & (jnp.asarray(history.kmax_bytes)[-1] > 0)
    return EcnThresholds(
        *(
            jnp.where(keep, jnp.asarray(c, jnp.float32)[-1], jnp.asarray(x, jnp.float32))
            for x, c in zip(chosen, current, strict=True)
        )
    )


def greedy_function(policy: Policy) -> tuple[Callable[[Any, PortTelemetry], EcnThresholds], Any]:
    """`(act, params)`: the policy's greedy decision as a pure JAX function of its parameters
    and the telemetry history, so the simulator can run it inside jit/vmap/scan (the
    evaluator runs every policy this way). Same decisions as `policy.act` without learning."""
    import jax.numpy as jnp

    from ecntune.agent.features import observation
    from ecntune.agent.nets import apply

    if isinstance(policy, StaticPolicy):
        return (lambda _params, history: policy.act(history)), None
    kind = type(policy).__name__
    if kind == "DdqnPolicy":
        graph, template, feats = policy.graph, policy.template, policy.config.features

        def acc(params: Any, history: PortTelemetry) -> EcnThresholds:
            action = jnp.argmax(apply(graph, params, observation(history, feats)), axis=-1)
            chosen = template.thresholds(action, jnp.asarray(history.link_bps)[-1])
            return hold_idle_ports(chosen, history)

        return acc, policy.params
    if kind == "IppoPolicy":
        actor, template, feats = policy.nets.actor, policy.template, policy.config.features

        def pet(params: Any, history: PortTelemetry) -> EcnThresholds:
            action = jnp.argmax(apply(actor, params, observation(history, feats)), axis=-1)
            return template.thresholds(action, jnp.asarray(history.link_bps)[-1])

        return pet, policy.params.actor
    raise TypeError(f"{policy.name}: no pure JAX form for a {kind}")
