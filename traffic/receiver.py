"""Flow receiver: accepts ecntune flows and records each one's completion time as it finishes.

    python -m ecntune.traffic.receiver --out h4.fct.jsonl [--port 5001]

Runs until SIGTERM or SIGINT. A connection that does not speak the flow protocol is logged
and dropped; it never stops the receiver or costs another flow its record.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

from ecntune.traffic.flows import CHUNK, DEFAULT_PORT, DONE, FlowHeader, ProtocolError
from ecntune.traffic.records import FlowRecord, JsonlWriter

log = logging.getLogger("ecntune.traffic.receiver")


async def handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, out: JsonlWriter
) -> None:
    src, _ = writer.get_extra_info("peername")[:2]
    dst, _ = writer.get_extra_info("sockname")[:2]
    try:
        header = await FlowHeader.read(reader)
        left = header.size
        while left > 0:
            data = await reader.read(min(left, CHUNK))
            if not data:
                raise ConnectionError(f"{header.flow_id}: sender closed with {left} bytes left")
            left -= len(data)
        end = time.time()
        out.write(
            FlowRecord(
                header.flow_id,
                src,
                dst,
                header.size,
                header.start,
                end,
                end - header.start,
                header.cc,
                header.kind,
            )
        )
        writer.write(DONE)
        await writer.drain()
    except (ProtocolError, ConnectionError, asyncio.IncompleteReadError, OSError) as e:
        log.warning("dropped a flow from %s: %s", src, e)
    finally:
        writer.close()


async def serve(port: int, out: JsonlWriter) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, out), "0.0.0.0", port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        print(f"listening on {port}", flush=True)  # the fabric waits for this line
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--out", required=True, help="JSONL file of FlowRecords (appended)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s receiver: %(message)s")
    with JsonlWriter(args.out) as out:
        asyncio.run(serve(args.port, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
