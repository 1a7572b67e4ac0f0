"""Stateful externs of v1model as simple_switch keeps them: registers, counters, meters."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


class ExternIndexError(IndexError):
    """An index past the end of an extern array (reported by P4Runtime as OUT_OF_RANGE)."""


def _check(name: str, index: int, size: int) -> None:
    if not 0 <= index < size:
        raise ExternIndexError(f"{name}: index {index} out of range 0..{size - 1}")


class RegisterArray:
    """`values` is a list, or the native data plane's array (switch/native.py) in its place."""

    def __init__(self, name: str, id_: int, size: int, width: int) -> None:
        self.name, self.id, self.size, self.width = name, id_, size, width
        self.mask = (1 << width) - 1
        self.values = [0] * size

    def read(self, index: int) -> int:
        _check(self.name, index, self.size)
        return int(self.values[index])

    def write(self, index: int, value: int) -> None:
        _check(self.name, index, self.size)
        self.values[index] = value & self.mask

    def reset(self) -> None:
        self.values[:] = [0] * self.size  # in place: the native data plane may hold it


class CounterArray:
    """BMv2 counters always count both packets and bytes (lists, or the native data plane's
    arrays in their place)."""

    def __init__(self, name: str, id_: int, size: int) -> None:
        self.name, self.id, self.size = name, id_, size
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, index: int, length: int) -> None:
        if 0 <= index < self.size:  # BMv2 ignores (and logs) out-of-range indices
            self.packets[index] += 1
            self.bytes[index] += length

    def read(self, index: int) -> tuple[int, int]:
        _check(self.name, index, self.size)
        return int(self.packets[index]), int(self.bytes[index])

    def write(self, index: int, packets: int, bytes_: int) -> None:
        _check(self.name, index, self.size)
        self.packets[index], self.bytes[index] = packets, bytes_


GREEN, YELLOW, RED = 0, 1, 2


@dataclass
class MeterState:
    """A two-rate three-colour meter (RFC 2698), rates in units per second."""

    cir: float = 0.0
    cburst: float = 0.0
    pir: float = 0.0
    pburst: float = 0.0
    configured: bool = False
    c_tokens: float = 0.0
    p_tokens: float = 0.0
    last: float = field(default_factory=time.monotonic)

    def execute(self, units: int, now: float) -> int:
        if not self.configured:
            return GREEN
        dt = max(0.0, now - self.last)
        self.last = now
        self.c_tokens = min(self.cburst, self.c_tokens + dt * self.cir)
        self.p_tokens = min(self.pburst, self.p_tokens + dt * self.pir)
        if self.p_tokens < units:
            return RED
        self.p_tokens -= units
        if self.c_tokens < units:
            return YELLOW
        self.c_tokens -= units
        return GREEN


class MeterArray:
    def __init__(self, name: str, id_: int, size: int, unit: str) -> None:
        self.name, self.id, self.size = name, id_, size
        self.bytes = unit == "bytes"
        self.meters = [MeterState() for _ in range(size)]

    def execute(self, index: int, length: int) -> int:
        if not 0 <= index < self.size:
            return GREEN
        return self.meters[index].execute(length if self.bytes else 1, time.monotonic())

    def configure(self, index: int, cir: float, cburst: float, pir: float, pburst: float) -> None:
        _check(self.name, index, self.size)
        self.meters[index] = MeterState(cir, cburst, pir, pburst, True, cburst, pburst)

    def unconfigure(self, index: int) -> None:
        _check(self.name, index, self.size)
        self.meters[index] = MeterState()
