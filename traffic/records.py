"""What the traffic tools write: one JSON object per line, appended and flushed as it happens.

Receivers write a `FlowRecord` for every flow whose last byte arrived (the flow completion
time, measured as the papers do: from the sender starting the flow to the receiver holding
its last byte). Senders write a `SentRecord` for every flow they started, completed or not,
so a run can tell "every flow completed" from "every completed flow was recorded".
Both ends run on one machine, so their wall clocks (time.time()) agree. The burst listener
writes a `PacketRecord` per packet (ECN bits on arrival, one-way delay).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any, TypeVar


@dataclass(frozen=True)
class FlowRecord:
    """One completed flow, as its receiver saw it."""

    flow_id: str
    src: str  # sender IP
    dst: str  # receiver IP
    size: int  # payload bytes
    start: float  # sender's clock when it began the flow (before connecting)
    end: float  # receiver's clock when the last byte arrived
    fct: float  # end - start, seconds
    cc: str  # congestion control the sender's socket ran
    kind: str  # "workload" or "incast"


@dataclass(frozen=True)
class SentRecord:
    """One flow a sender started; `error` says why it did not complete."""

    flow_id: str
    src: str
    dst: str
    size: int
    start: float
    kind: str
    cc: str  # what the socket ran ("" if it never got one)
    completed: bool
    error: str | None = None
    # the sender socket's TCP_INFO at the end (traffic/flows.py tcp_counters): segments
    # retransmitted and retransmission timeouts; None where the kernel does not report them
    retrans: int | None = None
    rtos: int | None = None


@dataclass(frozen=True)
class PacketRecord:
    """One packet of a burst (burst.py), as the listener received it."""

    burst: int
    sender: int
    seq: int
    src: str
    length: int  # IP length, bytes
    ecn: int  # the IP ECN field on arrival: 0 not-ECT, 1/2 ECT, 3 CE
    t_send: float
    t_recv: float
    owd: float  # t_recv - t_send, seconds


R = TypeVar("R", FlowRecord, SentRecord, PacketRecord)


class JsonlWriter:
    """Appends records to a file, one line each, flushed at once: a killed tool loses nothing."""

    def __init__(self, path: Path | str) -> None:
        self._file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (closed in close())

    def write(self, record: FlowRecord | SentRecord | PacketRecord) -> None:
        self._file.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (the writer was killed mid-write) is skipped."""
    with open(path) as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                return
            raise ValueError(f"{path}:{lineno}: not a JSON object") from None


def read_records(paths: Iterable[Path | str], cls: type[R]) -> list[R]:
    """Every record of type `cls` in the given files, with a clear error on a foreign row."""
    names = {f.name for f in fields(cls)}
    out = []
    for path in paths:
        for row in iter_jsonl(path):
            if set(row) != names:
                raise ValueError(f"{path}: {sorted(row)} is not a {cls.__name__}")
            out.append(cls(**row))
    return out
