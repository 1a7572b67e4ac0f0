"""GraphCC (graphcc.txt): one agent per switch egress port, all replicas of one
message-passing network that exchange hidden states with neighbouring ports.

Read top to bottom:

    port_graph          the fabric as GraphCC sees it (§3.3): every switch egress port is a
                        node; a port's neighbours are the ports that can inject traffic into
                        it (B_i: ports whose link ends at its switch) and the ports its
                        traffic goes on to (B_e: the far end's egress ports). §3.3 sends
                        messages along B_i; §3.1.2's MPNN takes B(v) = B_i ∪ B_e, which we
                        use, so a port hears both who feeds it and who it feeds
    PortGnn             h⁰ = the port's features zero-padded to `hidden` (24); K = 2 steps
                        of h ← update(h, [min, max] over neighbours of message(h, h_u));
                        Q-values = readout(h^K); message, update and readout are 2-layer
                        MLPs shared by every port (§4.1). A port with no switch neighbour
                        (a single switch: star8) aggregates zeros: GraphCC is then one
                        shared per-port network, as ACC's agents are
    decide              the whole fabric's decision (features → GNN → ε-greedy → template)
    td_loss             double-Q targets per port of whole-fabric samples, busy ports only:
                        the replay holds one fabric-wide (x, a, r, x') per interval, as §3.3
                        stores "a single sample" per step
    message_bytes       what one decision would send between switches, run distributed
    GraphccPolicy       the trained model bound to a fabric's port graph (`for_fabric`)
    save / load         one msgpack file; the metadata records the graph conventions

Features (agent/features.py "graphcc"): utilisation, queue and marking rate now and p = 2
intervals before (§3.3). Actions (agent/actions.py `graphcc_template`): §4.1's 120 settings.
Reward: w1·f(q) + w2·u with (0.7, 0.3) and f ACC's decreasing step of the queue (§3.3 cites
ACC for it): agent/rewards.py's ACC reward with the latency-first weights. Learning reuses
ACC's double DQN (agent/ddqn.py: optimiser, target copies, ε schedule); training is
agent/loops.py `make_graphcc_loop`.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ecntune.agent import ddqn
from ecntune.agent.actions import ActionTemplate, graphcc_template
from ecntune.agent.features import FeatureSet, observation, observation_size
from ecntune.agent.nets import MLP, load_checkpoint, restore, save_checkpoint
from ecntune.agent.policy import compiled
from ecntune.agent.rewards import LATENCY_FIRST, Reward, trained_reward
from ecntune.telemetry import EcnThresholds, PortTelemetry

FORMAT = "ecntune-graphcc/1"
# What a checkpoint's numbers mean about the graph; load() refuses other conventions.
GRAPH_CONVENTION = {
    "nodes": "switch egress ports, in the fabric's telemetry order (sim/fabric.py ports)",
    "neighbours": "B_i ∪ B_e (GraphCC §3.1.2, §3.3): ports feeding the port's switch, "
    "ports of the switch its link reaches",
    "h0": "features zero-padded to hidden",
    "aggregation": "concat(min, max) of messages; zeros without neighbours",
}
REWARD = Reward("acc", LATENCY_FIRST)  # w1·f(q) + w2·u, (w1, w2) = (0.7, 0.3), §3.3


@dataclasses.dataclass(frozen=True)
class GraphccConfig:
    features: FeatureSet = "graphcc"
    hidden: int = 24  # §4.1
    steps: int = 2  # K message-passing steps, §4.1
    lr: float = 1e-3
    gamma: float = 0.5  # as ACC's (agent/ddqn.py explains why not 0.9)
    batch_size: int = 16  # whole-fabric samples per update (each holds every port)
    buffer_size: int = 4_000  # whole-fabric samples
    min_buffer: int = 64
    target_every: int = 200
    eps_start: float = 1.0
    eps_end: float = 0.02
    eps_decay: float = 1000.0  # in intervals, as ACC's

    @property
    def template(self) -> ActionTemplate:
        return graphcc_template()


# -- the port graph ------------------------------------------------------------------------


def neighbour_array(neighbours: list[list[int]]) -> np.ndarray:
    """Neighbour lists as a (nodes, max degree ≥ 1) int32 array padded with -1."""
    width = max([1, *map(len, neighbours)])
    out = np.full((len(neighbours), width), -1, np.int32)
    for i, nb in enumerate(neighbours):
        out[i, : len(nb)] = sorted(nb)
    return out


def port_graph(fabric: Any) -> np.ndarray:
    """B(v) = B_i(v) ∪ B_e(v) for every port of a sim/fabric.py FabricArrays (§3.3): u feeds
    v when u's link ends where v's starts; v feeds u when v's ends where u's starts."""
    src = [fabric.names[link][0] for link in fabric.ports]
    dst = [fabric.names[fabric.peer(int(link))][0] for link in fabric.ports]
    n = len(src)
    return neighbour_array(
        [[u for u in range(n) if u != v and (dst[u] == src[v] or src[u] == dst[v])]
         for v in range(n)]
    )  # fmt: skip


def message_bytes(fabric: Any, neighbours: np.ndarray, config: GraphccConfig) -> int:
    """Bytes that cross switches for one decision if every switch runs its ports' replicas
    (§3.1.2): at each of the K steps a switch needs, once, the float32 hidden state of every
    port on another switch that neighbours one of its ports. Ports on one switch share
    their states in memory."""
    switch = fabric.port_switch
    remote = {(int(u), int(switch[v])) for v, row in enumerate(neighbours) for u in row
              if u >= 0 and switch[u] != switch[v]}  # fmt: skip
    return config.steps * len(remote) * config.hidden * 4


# -- the network ---------------------------------------------------------------------------


class PortGnn(nnx.Module):
    """GraphCC's Q_θ: K message-passing steps over the port graph, then a readout per port."""

    def __init__(self, n_in: int, hidden: int, steps: int, n_actions: int, rngs: nnx.Rngs):
        if n_in > hidden:
            raise ValueError(f"{n_in} features do not fit a hidden state of {hidden}")
        self.pad, self.steps = hidden - n_in, steps
        self.message = MLP((2 * hidden, hidden, hidden), rngs)
        self.update = MLP((3 * hidden, hidden, hidden), rngs)
        self.readout = MLP((hidden, hidden, n_actions), rngs)

    def __call__(self, x: jax.Array, neighbours: jax.Array) -> jax.Array:
        """x: (..., ports, features); neighbours: (ports, degree), -1 padded -> (..., ports,
        actions)."""
        h = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, self.pad)])
        has = (neighbours >= 0)[..., None]  # (ports, degree, 1)
        idx = jnp.maximum(neighbours, 0)
        for _ in range(self.steps):
            theirs = jnp.take(h, idx, axis=-2)  # (..., ports, degree, hidden)
            mine = jnp.broadcast_to(h[..., :, None, :], theirs.shape)
            m = self.message(jnp.concatenate([mine, theirs], axis=-1))
            low = jnp.min(jnp.where(has, m, jnp.inf), axis=-2)
            high = jnp.max(jnp.where(has, m, -jnp.inf), axis=-2)
            agg = jnp.where(jnp.any(has, axis=-2), jnp.concatenate([low, high], -1), 0.0)
            h = self.update(jnp.concatenate([h, agg], axis=-1))
        return self.readout(h)


def build_network(config: GraphccConfig, key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    net = PortGnn(observation_size(config.features), config.hidden, config.steps,
                  config.template.n_actions, nnx.Rngs(params=key))  # fmt: skip
    return nnx.split(net)


def q_values(
    graph: nnx.GraphDef, params: nnx.State, obs: jax.Array, neighbours: jax.Array
) -> jax.Array:
    return nnx.merge(graph, params)(obs, jnp.asarray(neighbours))


def decide(
    graph: nnx.GraphDef,
    template: ActionTemplate,
    neighbours: np.ndarray,
    params: nnx.State,
    history: PortTelemetry,
    key: jax.Array | None = None,
    eps: jax.Array | float = 0.0,
) -> tuple[jax.Array, jax.Array, EcnThresholds]:
    """The whole fabric's decision from k intervals of every port's telemetry (fields of
    shape (k, ports), ports in the graph's order): (observation, action, setting) per
    port; greedy without a key, ε-greedy with one. No idle rule: GraphCC sets every port."""
    obs = observation(history, "graphcc")
    q = q_values(graph, params, obs, neighbours)
    actions = jnp.argmax(q, axis=-1) if key is None else ddqn.epsilon_greedy(q, key, eps)
    return obs, actions, template.thresholds(actions, jnp.asarray(history.link_bps)[-1])


# -- learning --------------------------------------------------------------------------------


class FabricTransition(NamedTuple):
    """One interval of the whole fabric: per port (leading axis) x, a, r, x', and whether
    the port sent anything (idle ports' rewards say nothing about their action)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    busy: jax.Array


def td_loss(
    params: nnx.State,
    target_params: nnx.State,
    graph: tuple[nnx.GraphDef, jax.Array],
    batch: FabricTransition,
    gamma: float,
) -> jax.Array:
    """ddqn's double-Q error for every port of a batch of fabric samples, averaged over
    busy ports."""
    net, nb = graph
    errors = ddqn.double_q_errors(
        q_values(net, params, batch.obs, nb), q_values(net, params, batch.next_obs, nb),
        q_values(net, target_params, batch.next_obs, nb), batch.action, batch.reward, gamma,
    )  # fmt: skip
    busy = batch.busy.astype(jnp.float32)
    return jnp.sum(errors * busy) / jnp.maximum(jnp.sum(busy), 1.0)


def update(
    config: GraphccConfig, graph: nnx.GraphDef, neighbours: jax.Array,
    learner: ddqn.Learner, batch: FabricTransition,
) -> tuple[ddqn.Learner, jax.Array]:  # fmt: skip
    """One Adam step on td_loss (ACC's optimiser and target copies)."""
    return ddqn.update(config, (graph, neighbours), learner, batch, loss_fn=td_loss)


# -- the trained agent -----------------------------------------------------------------------


class GraphccPolicy:
    """A trained GraphCC model. It decides for a whole fabric at once, so it must know the
    fabric's port graph: `for_fabric(fabric)` binds one (the evaluator does)."""

    def __init__(
        self, config: GraphccConfig, params: nnx.State, name: str = "graphcc",
        neighbours: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        self.config, self.name, self.neighbours = config, name, neighbours
        self.reward = REWARD
        self.graph, _ = build_network(config, jax.random.key(0))
        self.template = config.template
        self.params = params
        if neighbours is not None:
            self.decide = functools.partial(decide, self.graph, self.template, neighbours)
            self._greedy = compiled(self.decide, params)

    @property
    def acting_params(self) -> nnx.State:
        return self.params

    def for_fabric(self, fabric: Any) -> GraphccPolicy:
        """The same model on a fabric's port graph (the same parameters for any fabric:
        GraphCC's generalisation to topologies never trained on, §4.5)."""
        return GraphccPolicy(self.config, self.params, self.name, port_graph(fabric))

    def act(self, history: PortTelemetry) -> EcnThresholds:
        if self.neighbours is None:
            raise ValueError(
                f"{self.name} decides for a whole fabric at once: bind its port graph "
                "with for_fabric() (it cannot run as one switch's agent)"
            )
        ports = np.shape(history.tx_bytes)[-1]
        if ports != len(self.neighbours):
            raise ValueError(f"{self.name}: telemetry of {ports} ports for a graph of "
                             f"{len(self.neighbours)}")  # fmt: skip
        _, _, chosen = self._greedy(self.params, history)
        return EcnThresholds(*(np.asarray(x, np.float64) for x in chosen))

    def save(self, path: Path) -> None:
        save(path, self.config, self.params, {"reward": self.reward.to_meta()})


def save(path: Path, config: GraphccConfig, params: nnx.State, meta: dict[str, Any]) -> None:
    save_checkpoint(path, FORMAT, config, {"q": params}, meta | {"graph": GRAPH_CONVENTION})


def load(path: Path) -> GraphccPolicy:
    fields, raw, meta = load_checkpoint(Path(path), FORMAT, "GraphCC")
    if meta.get("graph") != GRAPH_CONVENTION:
        raise ValueError(f"{path}: written for other graph conventions: {meta.get('graph')}")
    config = GraphccConfig(**fields)
    params = restore(build_network(config, jax.random.key(0))[1], raw["q"], Path(path))
    policy = GraphccPolicy(config, params, name=f"graphcc:{path}")
    policy.reward = trained_reward(meta, "acc")
    return policy
