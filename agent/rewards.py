"""Rewards from one interval of a port's telemetry (ACC Eq. 2 with Fig. 4, PET Eq. 6-8).

ACC:  r = ω1·T + ω2·D(L),  T = txRate/BW,  D(L) = 1 - n/10, n = min{n ∈ 0..9 : E(n) ≥ L}
      (D = 0 when L exceeds E(9)), L the mean queue, E(n) = α·2^n the action template.
PET:  r = β1·T + β2·L_a with L_a the reciprocal of the mean queue. The paper's 1/avg_q is
      unbounded on an empty queue; we use L_a = 1/(1 + avg_q/α), equal to 1 when empty and
      ∝ 1/avg_q once the queue is several α deep.
Both papers use weights (0.3, 0.7) for WebSearch and (0.7, 0.3) for DataMining.

MICE_FCT is not a paper's: ω1·T + ω2·S with S the mean of 1/slowdown over the mice
(< 100 KB) that completed in the interval through the port (1 when none did), from the
simulator's own flow completions. No switch telemetry carries it, so it exists in the
simulator alone (sim/env.py): an ablation that asks whether the agents lose to the best
static because the papers' queue-based rewards do not see what the judge measures.

MICE_SLOWDOWN is the judge's own metric split over the intervals: each interval a port is
charged, for every mouse through it that is running, the time it ran in the interval over
its ideal FCT (traffic/fct.py), r = -(that sum) / MICE_SLOWDOWN_SCALE. Over an episode a
port's rewards add up to minus the sum of its mice's slowdowns (a mouse's slowdown is its
FCT over its ideal one, and its FCT is the sum of its time in every interval, Little's law
by flow), so a return maximiser minimises what the judge measures, and every interval a
mouse spends waiting is charged to that interval, not to the one in which it happened to
finish (MICE_FCT's credit problem). Simulator-only, like MICE_FCT.

MICE_SLOWDOWN_SQUARED charges the same intervals the growth of half each mouse's squared
slowdown: a mouse whose slowdown grows from s0 to s1 in an interval costs (s1² − s0²)/2, so
over an episode a port's rewards add up to minus half the sum of its mice's squared
slowdowns (scaled by MICE_SLOWDOWN_SQUARED_SCALE). An interval of waiting costs a mouse
that has already waited long more than a fresh one: the charge leans on the slow mice, the
tail that a mean (MICE_SLOWDOWN) weighs no more than any other, and that the judge's p99
measures. Simulator-only, like the others.

A switching cost (`switched`, sim/env.py Env.switch_cost) is not a reward of its own but a
charge on top of any of them: a port pays it in every interval whose setting differs from
the one it ran the interval before. Agents trained on the papers' rewards change their
setting from one interval to the next, and those changes alone cost a few % of mice
slowdown against holding their most frequent setting (docs/results "One storm alone");
with the charge a change must pay for itself in the rewards that follow (hysteresis,
learnt). Training shapes with it; the controller judges the agent by its reward alone.

A goodput weight (sim/env.py Env.goodput_weight) is the other charge on top: a port's reward
gains the weight times its utilisation in the interval (bits sent over what the link could
send, `features.utilisation`, the papers' T). The mice rewards see no elephant, and agents
trained on them alone deliver mice FCTs below the best static's with 2.6–3.8 % less goodput
(docs/results "A sixth mix", "A seventh mix"); with the weight a lower threshold must pay
for the goodput it costs. Paired with a baseline, the weight applies to both sides, so the
port is credited with the goodput it delivers beyond the baseline setting's.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax.numpy as jnp

from ecntune.agent.actions import alpha_bytes
from ecntune.agent.features import mean_queue_bytes, utilisation
from ecntune.telemetry import Array, EcnThresholds, PortTelemetry


class RewardWeights(NamedTuple):
    throughput: float
    delay: float


LATENCY_FIRST = RewardWeights(throughput=0.3, delay=0.7)  # the papers' WebSearch weights
THROUGHPUT_FIRST = RewardWeights(throughput=0.7, delay=0.3)  # the papers' DataMining weights


def queue_step(mean_queue: Array, alpha: Array, levels: int = 10) -> Array:
    """ACC's D(L): 1 for L ≤ α, then one tenth less per doubling of L, 0 past E(levels-1)."""
    edges = jnp.asarray(alpha)[..., None] * 2.0 ** jnp.arange(levels)  # E(0..9) per port
    n = jnp.sum(jnp.asarray(mean_queue)[..., None] > edges, axis=-1)
    return 1.0 - n / levels


def acc_reward(t: PortTelemetry, w: RewardWeights = LATENCY_FIRST) -> Array:
    alpha = alpha_bytes(t.link_bps)
    return w.throughput * utilisation(t) + w.delay * queue_step(mean_queue_bytes(t), alpha)


def pet_reward(t: PortTelemetry, w: RewardWeights = LATENCY_FIRST) -> Array:
    alpha = alpha_bytes(t.link_bps)
    return w.throughput * utilisation(t) + w.delay / (1.0 + mean_queue_bytes(t) / alpha)


REWARDS = {"acc": acc_reward, "pet": pet_reward}  # by the algorithm whose paper defines it
MICE_FCT = "mice_fct"  # the simulator's privileged rewards (module docstring; sim/env.py)
MICE_SLOWDOWN = "mice_slowdown"
MICE_SLOWDOWN_SQUARED = "mice_slowdown_squared"
SIMULATOR_REWARDS = (MICE_FCT, MICE_SLOWDOWN, MICE_SLOWDOWN_SQUARED)
RewardKind = Literal["acc", "pet", "mice_fct", "mice_slowdown", "mice_slowdown_squared"]
MICE_SLOWDOWN_SCALE = 10.0  # mouse-slowdowns per interval that make one unit of reward
MICE_SLOWDOWN_SQUARED_SCALE = 100.0  # half squared slowdowns per unit of reward


def switched(ran_with: PortTelemetry, setting: EcnThresholds) -> Array:
    """1.0 for every port whose `setting` differs from the one its last interval ran with
    (telemetry carries it), else 0.0: what a switching cost charges."""
    changed = (
        (jnp.abs(setting.kmin_bytes - ran_with.kmin_bytes) > 0.5)
        | (jnp.abs(setting.kmax_bytes - ran_with.kmax_bytes) > 0.5)
        | (jnp.abs(setting.pmax - ran_with.pmax) > 1e-6)
    )
    return changed.astype(jnp.float32)


class Reward(NamedTuple):
    """A reward definition: which paper's formula and its weights. A checkpoint records the
    one its agent was trained with, so the controller judges the agent by it (hashable: a
    static argument of jitted code)."""

    kind: str = "acc"
    weights: RewardWeights = LATENCY_FIRST

    def __call__(self, t: PortTelemetry) -> Array:
        if self.kind in SIMULATOR_REWARDS:
            raise ValueError(
                f"this agent was trained with the simulator's {self.kind} reward, which no switch "
                "telemetry carries: judge it in the simulator (ecntune eval), not live"
            )
        return REWARDS[self.kind](t, self.weights)

    def to_meta(self) -> dict[str, object]:
        return {"kind": self.kind, "weights": list(self.weights)}


def trained_reward(meta: dict, algorithm: str) -> Reward:
    """The reward a checkpoint's agent was trained with: recorded in its metadata, or for
    checkpoints written before it was, the algorithm's own formula with the weights of the
    scenario it trained on (the papers' latency-first weights where none were recorded)."""
    if "reward" in meta:
        kind, weights = meta["reward"]["kind"], meta["reward"]["weights"]
    else:  # "scenarios" (a list) or, older still, one "scenario"
        trained_on = meta.get("scenarios") or [meta.get("scenario")]
        first = trained_on[0] if isinstance(trained_on[0], dict) else {}
        kind, weights = algorithm, first.get("reward_weights") or LATENCY_FIRST
    if kind not in (*REWARDS, *SIMULATOR_REWARDS) or len(weights) != 2:
        raise ValueError(f"checkpoint records an unknown reward {kind!r} {weights!r}")
    return Reward(kind, RewardWeights(*map(float, weights)))
