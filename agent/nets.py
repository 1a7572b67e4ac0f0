"""What every learned agent is built from: an MLP over one port's observation, and
checkpoints (one msgpack file: format, config, metadata, parameters; atomic writes)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import Any

import jax
from flax import nnx, serialization


class MLP(nnx.Module):
    """ReLU hidden layers, a linear head: Q-values, policy logits or a value."""

    def __init__(self, sizes: tuple[int, ...], rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes[:-1])]
        )
        self.head = nnx.Linear(sizes[-2], sizes[-1], rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = jax.nn.relu(layer(x))
        return self.head(x)


class DuelingMLP(nnx.Module):
    """Q(s, a) = V(s) + A(s, a) − mean_a A(s, a) over a shared ReLU trunk (Wang et al.
    2016, "Dueling network architectures"). With hundreds of actions of nearly equal value,
    as ECN templates have, the state's value is learned once, from every sample, by V, and
    the per-action head only carries the small differences between actions."""

    def __init__(self, sizes: tuple[int, ...], rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes[:-1])]
        )
        self.value = nnx.Linear(sizes[-2], 1, rngs=rngs)
        self.advantage = nnx.Linear(sizes[-2], sizes[-1], rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = jax.nn.relu(layer(x))
        a = self.advantage(x)
        return self.value(x) + a - a.mean(axis=-1, keepdims=True)


def dueling_mlp(sizes: tuple[int, ...], key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    return nnx.split(DuelingMLP(sizes, nnx.Rngs(params=key)))


def mlp(sizes: tuple[int, ...], key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    """An MLP's structure (static) and its parameters (a pytree)."""
    return nnx.split(MLP(sizes, nnx.Rngs(params=key)))


def apply(graph: nnx.GraphDef, params: nnx.State, x: jax.Array) -> jax.Array:
    return nnx.merge(graph, params)(x)


def save_checkpoint(
    path: Path, fmt: str, config: Any, params: dict[str, nnx.State], meta: dict[str, Any]
) -> None:
    """Config (a dataclass), metadata and named parameter sets in one file, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = serialization.msgpack_serialize(
        {
            "format": fmt,
            "config": json.dumps(dataclasses.asdict(config)),
            "meta": json.dumps(meta),
            "params": {k: jax.device_get(nnx.to_pure_dict(v)) for k, v in params.items()},
        }
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)


def load_checkpoint(path: Path, fmt: str, what: str) -> tuple[dict[str, Any], dict, dict]:
    """(config fields, raw parameter sets, metadata); ValueError says what is wrong."""
    try:
        raw = serialization.msgpack_restore(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the {what} checkpoint {path}: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise ValueError(f"{path} is not an ecntune {what} checkpoint ({fmt})")
    fields = json.loads(raw["config"])
    for key, value in fields.items():
        if isinstance(value, list):
            fields[key] = tuple(value)
    return fields, raw["params"], json.loads(raw["meta"])


def restore(template: nnx.State, raw: dict, path: Path) -> nnx.State:
    """Parameters from a checkpoint into the shape `template` has."""
    try:
        nnx.replace_by_pure_dict(template, raw)
    except (KeyError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: parameters do not fit its config ({e})") from None
    return template
