"""The interface between agents and whoever runs them (the controller, the simulator).

A policy sees, for one switch, the last k intervals of every port's telemetry (fields of
shape (k, ports), oldest first) and answers one ECN setting per port. Learning policies
additionally accept the outcome of their last decision (`observe`) and can be saved and
restored, so a restarted controller resumes where it stopped.

    load_policy("static:secn1")          a static baseline (agent/static.py)
    load_policy("static:20KB,80KB,0.1")  explicit kmin, kmax (bytes, or KB/MB), pmax
    load_policy("acc:path/to/ckpt")      a DDQN agent (agent/ddqn.py)
    load_policy("pet:path/to/ckpt")      an IPPO agent (agent/ippo.py), greedy
    load_policy("pet-sampled:path")      the same agent drawing from its policy as in training
    load_policy("tree:path/tree.json")   a distilled agent: one table lookup (agent/distill.py)
    load_policy("rule:senders>=4:1a,32a,0.2:0a,0a,1")
                                         a hand-written rule: one setting while a port sees
                                         an incast, another otherwise (agent/rule.py)
    load_policy("graphcc:path/to/ckpt")  GraphCC (agent/graphcc.py): decides for a whole
                                         fabric at once, once bound to its port graph
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ecntune.agent.static import StaticPolicy
from ecntune.telemetry import EcnThresholds, PortTelemetry, stacked, unstacked


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


LEARNED_KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "acc": ("ecntune.agent.ddqn", {}),
    "pet": ("ecntune.agent.ippo", {}),
    "pet-sampled": ("ecntune.agent.ippo", {"sampled": True}),  # PET drawing as it trained
    "tree": ("ecntune.agent.distill", {}),  # a distilled ACC/PET agent (ecntune distill)
    "graphcc": ("ecntune.agent.graphcc", {}),  # one model for a whole fabric (its port graph)
}  # kind -> (module that provides load(path, **options), those options)


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
    if kind == "rule":
        from ecntune.agent.rule import RulePolicy

        return RulePolicy(arg)
    if kind in LEARNED_KINDS:
        import importlib

        module, options = LEARNED_KINDS[kind]
        return importlib.import_module(module).load(Path(arg), **options)
    known = ", ".join(("static", "rule", *LEARNED_KINDS))
    raise ValueError(f"unknown policy kind {kind!r} (known: {known})")


def greedy_function(policy: Policy) -> tuple[Callable[[Any, PortTelemetry], EcnThresholds], Any]:
    """`(act, params)`: the policy's greedy decision as a pure JAX function of its parameters
    and the telemetry history, so the simulator can run it inside jit/vmap/scan (the
    evaluator runs every policy this way). The very function `policy.act` compiles
    (its `decide`, without exploration), so the same decisions."""
    if isinstance(policy, StaticPolicy):
        return (lambda _params, history: policy.act(history)), None
    if not hasattr(policy, "decide"):
        raise TypeError(f"{policy.name}: no pure JAX form for a {type(policy).__name__}")
    return (lambda params, history: policy.decide(params, history)[-1]), policy.acting_params


def compiled(fn: Callable[..., Any], params: Any) -> Callable[..., Any]:
    """`fn(params, history, *rest)` as one compiled call for the controller's every interval
    (compiled once per port count). Called as `fn` is; underneath, the parameters go in as
    a flat list of device arrays, flattened once per parameter object, and the telemetry
    `stacked` into one array: jit's dispatch of a Flax state (flattened, and its NumPy
    leaves copied, on every call) and of 14 separate fields cost more than the decision."""
    import jax

    treedef = jax.tree.structure(params)

    def flat(leaves: list[Any], history: Any, *rest: Any) -> Any:
        return fn(jax.tree.unflatten(treedef, leaves), unstacked(history), *rest)

    run = jax.jit(flat)
    last: list[Any] = [object(), None]  # the parameter object last seen, its device leaves

    def call(p: Any, history: PortTelemetry, *rest: Any) -> Any:
        if last[0] is not p:
            last[:] = [p, [jax.device_put(x) for x in jax.tree.leaves(p)]]
        return run(last[1], stacked(history), *rest)

    return call
