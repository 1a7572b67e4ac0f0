"""The data plane's number formats, on the Python side, in one place.

ecn.p4 keeps per-port thresholds in registers and never divides: the controller writes
kmin and kmax in bytes and a fixed-point slope, and the data plane marks a packet that
leaves q bytes behind it when

    q >= kmax                                     (always), or
    q > kmin  and  coin < slope * (q - kmin)      with coin uniform in [0, 2^32),

where slope = floor(pmax * 2^32 / (kmax - kmin)). The marking probability is therefore
pmax * (q - kmin) / (kmax - kmin) up to an absolute error below (q - kmin) / 2^32, i.e.
under 1e-3 even for a 4 MB gap. kmax == 0 means "marking disabled" (it is the registers'
reset value, so a switch nobody configured never marks); hence a configured kmax is at
least 1 byte. pmax itself travels in basis points (1/10000) for telemetry only.

Thresholds reach the data plane by one of two paths, both described here:
- P4Runtime RegisterEntry writes to the four `ecn_*` registers (index = port), on targets
  that implement RegisterEntry (the embedded target; BMv2's P4Runtime server does not);
- a PacketOut with opcode OP_SET_ECN whose payload is one `ecn_config` header: the data
  plane applies the whole setting in one pipeline pass and reflects the packet back as a
  PacketIn with reason REASON_CONFIG_ACK.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ecntune.telemetry import (
    SENDER_BITS,
    EcnThresholds,
    PortTelemetry,
    senders_estimate,
)

N_PORTS = 256
SLOPE_ONE = 1 << 32  # probability 1.0 in the slope's fixed point
PMAX_SCALE = 10_000  # basis points
MAX_BYTES = (1 << 32) - 1

OP_SET_ECN = 1
OP_SET_INTERVAL = 2
REASON_CONFIG_ACK = 1

# P4Info names (top-level registers carry no control prefix).
TABLE_IPV4 = "EcnIngress.ipv4_lpm"
ACTION_FORWARD = "EcnIngress.forward"
ECMP_SELECTOR = "EcnIngress.ecmp_selector"
DROP_COUNTER = "EcnIngress.drops"
DROP_REASONS = ("unknown_dst", "ttl_expired", "not_ipv4", "malformed")
TABLE_POLICY_PORT = "EcnIngress.policy_port"  # the in-switch policy (controller/switch_policy.py)
POLICY_PORT_KEY = "meta.telemetry.port"
ACTION_POLICY_CLASS = "EcnIngress.set_policy_class"
TABLE_POLICY_TREE = "EcnIngress.policy_tree"
POLICY_CLASS_KEY = "meta.policy.port_class"
POLICY_KEY_PREFIX = "meta.policy."  # + a name of agent/features.py FEATURE_NAMES["switch"]
ACTION_DECIDE = "EcnIngress.decide"
REGISTER_KMIN = "ecn_kmin"
REGISTER_KMAX = "ecn_kmax"
REGISTER_SLOPE = "ecn_slope"
REGISTER_PMAX = "ecn_pmax"
DIGEST = "telemetry_digest_t"
DIGEST_FIELDS = (
    "port",
    "interval_us",
    "tx_bytes",
    "tx_pkts",
    "marked_bytes",
    "marked_pkts",
    "qdepth_sum_bytes",
    "qdepth_samples",
    "qdepth_max_bytes",
    "kmin",
    "kmax",
    "pmax",
    "sender_bitmap",
    "elephant_bytes",
)

_ECN_CONFIG = struct.Struct("!HIIQH")  # port, kmin, kmax, slope, pmax: the ecn_config header


@dataclass(frozen=True)
class EcnRegisters:
    """One port's threshold registers, exactly as the data plane holds them."""

    kmin: int
    kmax: int
    slope: int
    pmax_bp: int

    @property
    def thresholds(self) -> EcnThresholds:
        """The setting these registers hold (what a digest reports while they are in force)."""
        return decode_thresholds(self.kmin, self.kmax, self.pmax_bp)

    def as_dict(self) -> dict[str, int]:
        return {
            REGISTER_KMIN: self.kmin,
            REGISTER_KMAX: self.kmax,
            REGISTER_SLOPE: self.slope,
            REGISTER_PMAX: self.pmax_bp,
        }


def encode_thresholds(kmin_bytes: float, kmax_bytes: float, pmax: float) -> EcnRegisters:
    """Register values for one setting; raises ValueError for a setting that makes no sense."""
    if not all(math.isfinite(x) for x in (kmin_bytes, kmax_bytes, pmax)):
        raise ValueError(f"thresholds must be finite: {kmin_bytes}, {kmax_bytes}, {pmax}")
    if not 0 <= pmax <= 1:
        raise ValueError(f"pmax must be in [0, 1], got {pmax}")
    kmin, kmax = round(kmin_bytes), max(1, round(kmax_bytes))
    if not 0 <= kmin <= kmax <= MAX_BYTES:
        raise ValueError(f"need 0 <= kmin <= kmax < 4 GiB, got kmin={kmin} kmax={kmax}")
    slope = (round(pmax * SLOPE_ONE) // (kmax - kmin)) if kmax > kmin else 0
    return EcnRegisters(kmin, kmax, slope, round(pmax * PMAX_SCALE))


def decode_thresholds(kmin: int, kmax: int, pmax_bp: int) -> EcnThresholds:
    return EcnThresholds(float(kmin), float(kmax), pmax_bp / PMAX_SCALE)


def marking_probability(queued_bytes: int, regs: EcnRegisters) -> float:
    """The exact probability with which the data plane marks an ECN-capable packet."""
    if regs.kmax == 0:
        return 0.0
    if queued_bytes >= regs.kmax:
        return 1.0
    if queued_bytes <= regs.kmin:
        return 0.0
    return min(1.0, regs.slope * (queued_bytes - regs.kmin) / SLOPE_ONE)


def ecn_config_payload(port: int, regs: EcnRegisters) -> bytes:
    """PacketOut payload (opcode OP_SET_ECN) that sets one port's thresholds atomically."""
    _check_port(port)
    return _ECN_CONFIG.pack(port, regs.kmin, regs.kmax, regs.slope, regs.pmax_bp)


def interval_payload(interval_s: float) -> bytes:
    """PacketOut payload (opcode OP_SET_INTERVAL) that sets the telemetry interval."""
    us = round(interval_s * 1e6)
    if not 100 <= us <= MAX_BYTES:
        raise ValueError(f"telemetry interval must be between 100 us and ~71 min, got {interval_s}")
    return _ECN_CONFIG.pack(0, us, 0, 0, 0)


def parse_ecn_config(payload: bytes) -> tuple[int, EcnRegisters]:
    """Inverse of ecn_config_payload (for acks read back from PacketIn)."""
    if len(payload) < _ECN_CONFIG.size:
        raise ValueError(f"ecn_config needs {_ECN_CONFIG.size} bytes, got {len(payload)}")
    port, kmin, kmax, slope, pmax = _ECN_CONFIG.unpack_from(payload)
    return port, EcnRegisters(kmin, kmax, slope, pmax)


def senders_from_bitmap(bitmap: int) -> float:
    """The digest's 64-bit sender sketch as a count (ecntune/telemetry.py's estimate)."""
    zeros = SENDER_BITS - bin(bitmap & ((1 << SENDER_BITS) - 1)).count("1")
    return float(senders_estimate(zeros))


def decode_digest(fields: Mapping[str, int], link_bps: float) -> tuple[int, PortTelemetry]:
    """A telemetry digest (field name -> value) as (port, PortTelemetry)."""
    missing = [f for f in DIGEST_FIELDS if f not in fields]
    if missing:
        raise ValueError(f"telemetry digest lacks fields {missing}")
    f: dict[str, Any] = {k: int(fields[k]) for k in DIGEST_FIELDS}
    return f["port"], PortTelemetry(
        interval_s=f["interval_us"] / 1e6,
        link_bps=float(link_bps),
        tx_bytes=float(f["tx_bytes"]),
        tx_pkts=float(f["tx_pkts"]),
        marked_bytes=float(f["marked_bytes"]),
        marked_pkts=float(f["marked_pkts"]),
        qdepth_sum_bytes=float(f["qdepth_sum_bytes"]),
        qdepth_samples=float(f["qdepth_samples"]),
        qdepth_max_bytes=float(f["qdepth_max_bytes"]),
        **decode_thresholds(f["kmin"], f["kmax"], f["pmax"])._asdict(),
        senders=senders_from_bitmap(f["sender_bitmap"]),
        elephant_bytes=float(f["elephant_bytes"]),
    )


def _check_port(port: int) -> None:
    if not 0 <= port < N_PORTS:
        raise ValueError(f"port must be in 0..{N_PORTS - 1}, got {port}")
