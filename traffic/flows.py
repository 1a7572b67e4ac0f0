"""One TCP flow on the wire, and a sender that starts flows on a schedule.

A flow is one connection: a header (magic, length, JSON with the flow's id, size, start time
and congestion control), then `size` payload bytes; the receiver answers one byte once the
last one arrived, and both ends close. The Poisson workload (sender.py) and the TCP incast
(incast.py) differ only in their schedules, so both hand `run_schedule` a list of `Flow`s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ecntune.traffic.records import JsonlWriter, SentRecord

MAGIC = b"ECNT"
HEADER = struct.Struct("!4sH")  # magic, length of the JSON that follows
MAX_HEADER_JSON = 4096
DONE = b"\x01"
CHUNK = 64 * 1024
ZEROS = memoryview(bytes(CHUNK))
DEFAULT_PORT = 5001


# struct tcp_info (linux/tcp.h): byte offsets of the counters a flow's report needs
TCPI_TOTAL_RETRANS = 100  # __u32, segments retransmitted over the connection's life
TCPI_TOTAL_RTO = 240  # __u16, retransmission timeouts (Linux >= 6.7)


def tcp_counters(sock: socket.socket) -> tuple[int | None, int | None]:
    """(segments retransmitted, retransmission timeouts) over the socket's life, from
    TCP_INFO; None for what this kernel does not report. Why: a mouse's FCT that includes a
    200 ms timeout says nothing about ECN thresholds, and reports must say how many did."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None, None
    retrans = struct.unpack_from("I", info, TCPI_TOTAL_RETRANS)[0] if len(info) >= 104 else None
    rtos = struct.unpack_from("H", info, TCPI_TOTAL_RTO)[0] if len(info) >= 242 else None
    return retrans, rtos


class ProtocolError(ValueError):
    """A peer sent something that is not an ecntune flow."""


@dataclass(frozen=True)
class FlowHeader:
    flow_id: str
    size: int
    start: float
    cc: str
    kind: str

    def encode(self) -> bytes:
        body = json.dumps(self.__dict__, separators=(",", ":")).encode()
        return HEADER.pack(MAGIC, len(body)) + body

    @classmethod
    async def read(cls, reader: asyncio.StreamReader) -> FlowHeader:
        magic, length = HEADER.unpack(await reader.readexactly(HEADER.size))
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}")
        if length > MAX_HEADER_JSON:
            raise ProtocolError(f"header of {length} bytes is too long")
        try:
            d = json.loads(await reader.readexactly(length))
            header = cls(
                flow_id=str(d["flow_id"]),
                size=int(d["size"]),
                start=float(d["start"]),
                cc=str(d["cc"]),
                kind=str(d["kind"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"malformed header: {e}") from None
        if header.size < 0:
            raise ProtocolError(f"negative flow size {header.size}")
        return header


@dataclass(frozen=True)
class Flow:
    """One flow to start: when (seconds after the schedule's start), where, how big."""

    flow_id: str
    at: float
    dst: str
    size: int
    kind: str = "workload"


def tcp_socket(cc: str) -> socket.socket:
    """A non-blocking TCP socket running `cc` (root may choose any the kernel has)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    sock.setblocking(False)
    return sock


def socket_cc(sock: socket.socket) -> str:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()


async def send_flow(flow: Flow, src: str, port: int, cc: str, timeout_s: float) -> SentRecord:
    """Send one flow, wait for the receiver's answer; any failure becomes the record's error."""
    start = time.time()
    sock = tcp_socket(cc)
    used_cc = socket_cc(sock)
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.get_running_loop().sock_connect(sock, (flow.dst, port))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(FlowHeader(flow.flow_id, flow.size, start, used_cc, flow.kind).encode())
            left = flow.size
            while left > 0:
                n = min(left, CHUNK)
                writer.write(ZEROS[:n])
                left -= n
                await writer.drain()
            if await reader.read(1) != DONE:
                raise ConnectionError("receiver closed without confirming")
        error = None
    except (OSError, TimeoutError, ConnectionError) as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        retrans, rtos = tcp_counters(sock)
        if writer is not None:
            writer.close()
        else:
            sock.close()
    return SentRecord(
        flow.flow_id, src, flow.dst, flow.size, start, flow.kind, used_cc, error is None, error,
        retrans, rtos,
    )  # fmt: skip


async def run_schedule(
    flows: Sequence[Flow],
    t0: float,
    src: str,
    port: int,
    cc: str,
    out: JsonlWriter,
    timeout_s: float,
) -> list[SentRecord]:
    """Start every flow at t0 + flow.at (wall clock, so hosts synchronise); record each result.

    Cancelled (the sender was stopped), every flow not yet finished still gets its record.
    """

    async def one(flow: Flow) -> SentRecord:
        try:
            await asyncio.sleep(max(0.0, t0 + flow.at - time.time()))
            record = await send_flow(flow, src, port, cc, timeout_s)
        except asyncio.CancelledError:
            stopped = "stopped before it started" if time.time() < t0 + flow.at else "stopped"
            out.write(
                SentRecord(
                    flow.flow_id,
                    src,
                    flow.dst,
                    flow.size,
                    t0 + flow.at,
                    flow.kind,
                    cc="",
                    completed=False,
                    error=stopped,
                )
            )
            raise
        out.write(record)
        return record

    return list(await asyncio.gather(*(one(f) for f in flows)))


def add_sender_args(p: argparse.ArgumentParser) -> None:
    """Options every flow-sending tool shares."""
    p.add_argument("--src", required=True, help="this host's IP (for the records)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the receivers' port")
    p.add_argument("--cc", default="cubic", help="congestion control for every socket")
    p.add_argument("--out", required=True, help="JSONL file of SentRecords (appended)")
    p.add_argument(
        "--start-at", type=float, default=None, help="wall-clock time of t=0 (default: now)"
    )
    p.add_argument("--timeout-s", type=float, default=120.0, help="give up on a flow after")


def run_sender(args: argparse.Namespace, flows: Sequence[Flow]) -> int:
    """Run a schedule from the shared options; the exit status says whether all flows completed."""
    t0 = args.start_at if args.start_at is not None else time.time()

    async def until_stopped(out: JsonlWriter) -> list[SentRecord]:
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
        return await run_schedule(flows, t0, args.src, args.port, args.cc, out, args.timeout_s)

    with JsonlWriter(args.out) as out:
        try:
            records = asyncio.run(until_stopped(out))
        except asyncio.CancelledError:
            print("stopped; unfinished flows are recorded as such", file=sys.stderr)
            return 1
    failed = [r for r in records if not r.completed]
    for r in failed[:5]:
        print(f"flow {r.flow_id} to {r.dst} failed: {r.error}", file=sys.stderr)
    return 1 if failed else 0
