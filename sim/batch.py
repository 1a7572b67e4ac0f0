"""Run a batch of episodes over every local device (both CPU cores, or several GPUs).

JAX runs one vmapped computation on one device, and on CPU one device is one core. With
`XLA_FLAGS=--xla_force_host_platform_device_count=N` set before jax is imported, the host
shows N devices; `over_devices(fn)` then splits the batch axis of `fn`'s arguments and
results over them (`shard_map`: each device steps its own share of the episodes, no
communication). With one device, or a batch that does not divide evenly, it is plain
`jax.jit(fn)`. The same code runs unchanged on CPU and GPU.

    step = over_devices(jax.vmap(lambda s: env.step(s, th)[1]))
    state = step(state)            # state: a batch of EnvStates, leading axis = episodes
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "episodes"


def host_devices_flag(n: int) -> str:
    """The XLA_FLAGS entry that makes the CPU show `n` devices (set before importing jax)."""
    return f"--xla_force_host_platform_device_count={n}"


def over_devices(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (batched: every argument and result has the episodes on axis 0), jitted, with the
    batch split over the local devices when it divides evenly; else on one device."""
    devices = jax.local_devices()
    plain = jax.jit(fn)
    if len(devices) == 1:
        return plain
    mesh = Mesh(np.array(devices), (AXIS,))
    spec = PartitionSpec(AXIS)
    split = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    sharding = NamedSharding(mesh, spec)

    def run(*args: Any) -> Any:
        sizes = {x.shape[0] for x in jax.tree.leaves(args)}
        if len(sizes) != 1 or next(iter(sizes)) % len(devices):
            return plain(*args)
        return split(*jax.device_put(args, sharding))

    return run
