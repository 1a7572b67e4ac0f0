"""What one egress port reports per telemetry interval, and the ECN setting written back.

This is the contract between the data plane and everything that learns from it:
- the controller decodes each P4 telemetry digest into a `PortTelemetry`;
- the simulator emits `PortTelemetry` for every port every interval;
- agent/features.py turns a history of them into observations, agent/rewards.py into rewards.

Both records are NamedTuples of arrays, hence JAX pytrees: a field may be a scalar (one port,
one interval) or an array with leading batch axes (ports, intervals, environments), and the
same code serves NumPy in the controller and jax.numpy in the simulator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

Array = Any  # numpy or jax array (or a Python scalar)

# What the P4 program's digest counts (p4src/headers.p4), shared by the simulator's model of it
SENDER_BITS = 64  # the per-port sketch of distinct source hosts, one bit per hashed source
ELEPHANT_BYTES = 1_000_000  # a flow's bytes past this count as elephant bytes (PET §3.1)


class PortTelemetry(NamedTuple):
    """Counters of one egress port over one interval, as the P4 digest carries them."""

    interval_s: Array  # length of the interval the counters cover (from digest timestamps)
    link_bps: Array  # the port's capacity (from the topology, not the digest)
    tx_bytes: Array  # bytes dequeued towards the port
    tx_pkts: Array
    marked_bytes: Array  # bytes of packets this switch marked CE on this port
    marked_pkts: Array
    qdepth_sum_bytes: Array  # sum of the queue depth (bytes) sampled at every dequeue
    qdepth_samples: Array  # number of samples in that sum (0 on an idle port)
    qdepth_max_bytes: Array
    kmin_bytes: Array  # the ECN setting in force during the interval
    kmax_bytes: Array
    pmax: Array  # marking probability at kmax, in [0, 1]
    senders: Array  # estimated distinct senders towards the port (PET's incast degree)
    elephant_bytes: Array  # bytes from flows already past 1 MB (PET's mice/elephant ratio)


class EcnThresholds(NamedTuple):
    """One RED/ECN setting per port: never mark below kmin, always at or above kmax."""

    kmin_bytes: Array
    kmax_bytes: Array
    pmax: Array


def senders_estimate(zero_bits: Array, xp: Any = np) -> Array:
    """Distinct senders from the sketch's unset bits by linear counting: n = -m ln(zeros/m).

    Standard error ≈ sqrt(m (e^t - t - 1)) / n with t = n/m: about 3% at 4 senders, 8% at 16;
    a full bitmap saturates at m ln m ≈ 266. `xp`: numpy (the controller) or jax.numpy (the
    simulator, which keeps the same sketch)."""
    return SENDER_BITS * xp.log(SENDER_BITS / xp.maximum(zero_bits, 1))


def stacked(t: PortTelemetry) -> np.ndarray:
    """Every field in one float32 array of shape (fields, ...): a compiled policy takes it
    as one argument (one host-to-device copy instead of one per field, which cost more than
    the decision itself). `unstacked` is the inverse, inside or outside jit."""
    try:
        return np.asarray(t, np.float32)  # fields of one shape: the common, fast case
    except ValueError:  # scalars beside arrays
        return np.stack(np.broadcast_arrays(*(np.asarray(x, np.float32) for x in t)))


def unstacked(a: Array) -> PortTelemetry:
    return PortTelemetry(*(a[i] for i in range(len(PortTelemetry._fields))))
