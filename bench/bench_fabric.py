"""Fabric and traffic-tool costs, each against a reference measured side by side in this run.

- fabric_lifecycle: bring a preset fabric up and down with `Fabric` (ECN hosts, static
  neighbours, offloads, shaping, run tagging, reaper, cleanup) vs plain Mininet with the
  same nodes and links (default hosts, no configuration, Mininet's own stop).
- flow_tools: concurrent small flows through the receiver/sender pair over loopback vs
  a minimal blocking socket client/server doing the same bytes: the tools' per-flow cost.

One JSON object per line: name, median seconds of ecntune and of the reference, their ratio.
Runs needing root print a skipped line without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPEATS = 3


def median_s(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def emit(name: str, ecntune_s: float, reference_s: float, **extra: object) -> None:
    row = {
        "bench": name,
        "ecntune_median_s": round(ecntune_s, 4),
        "reference_median_s": round(reference_s, 4),
        "ratio": round(ecntune_s / reference_s, 3),
        **extra,
    }
    print(json.dumps(row), flush=True)


def fabric_lifecycle(preset_name: str) -> None:
    if os.geteuid() != 0:
        print(json.dumps({"bench": f"fabric_lifecycle_{preset_name}", "skipped": "needs root"}))
        return
    from mininet.net import Mininet
    from mininet.node import Host

    from ecntune.fabric.cleanup import begin_run, clean
    from ecntune.fabric.net import Fabric, FabricOptions, FabricTopo
    from ecntune.fabric.nodes import KernelBridge
    from ecntune.topology import preset

    topo = preset(preset_name)

    def ecntune_fabric() -> None:
        with Fabric(topo, FabricOptions(switch="bridge")):
            pass

    def plain_mininet() -> None:
        run = begin_run()  # only for unique interface names; nothing else of ecntune runs
        mn_topo = FabricTopo(topo, run, FabricOptions(switch="bridge", host_shaper=None), "")
        for h in mn_topo.hosts():  # plain hosts: keep only Mininet's own ip/mac parameters
            info = mn_topo.nodeInfo(h)
            mn_topo.setNodeInfo(h, {"ip": info["ip"], "mac": info["mac"]})
        net = Mininet(topo=mn_topo, switch=KernelBridge, host=Host, controller=None)
        net.start()
        net.stop()
        clean([run.rid])

    emit(
        f"fabric_lifecycle_{preset_name}",
        median_s(ecntune_fabric),
        median_s(plain_mininet),
        hosts=len(topo.hosts),
    )


def flow_tools(n_flows: int = 200, size: int = 20_000) -> None:
    from ecntune.targets import free_port
    from ecntune.traffic.flows import Flow, run_schedule
    from ecntune.traffic.records import JsonlWriter

    cc = "cubic" if os.geteuid() == 0 else "reno"
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        argv = [sys.executable, "-m", "ecntune.traffic.receiver", "--port", str(port)]
        argv += ["--out", str(Path(tmp) / "rx.jsonl")]
        rx = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            rx.stdout.readline()
            flows = [Flow(f"f{i}", 0.0, "127.0.0.1", size) for i in range(n_flows)]

            def ecntune_flows() -> None:
                with JsonlWriter(Path(tmp) / "sent.jsonl") as out:
                    records = asyncio.run(
                        run_schedule(flows, time.time(), "127.0.0.1", port, cc, out, 60.0)
                    )
                assert all(r.completed for r in records)

            ecntune_s = median_s(ecntune_flows)
        finally:
            rx.terminate()
            rx.wait()
    emit("flow_tools", ecntune_s, median_s(lambda: _plain_flows(n_flows, size)), flows=n_flows)


def _plain_flows(n_flows: int, size: int) -> None:
    """The same bytes with blocking sockets: one thread per flow, server acks each one."""
    server = socket.create_server(("127.0.0.1", 0), backlog=n_flows)
    port = server.getsockname()[1]

    def serve() -> None:
        for _ in range(n_flows):
            conn, _ = server.accept()
            threading.Thread(target=_drain, args=(conn, size)).start()

    def client() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(bytes(size))
            s.recv(1)

    acceptor = threading.Thread(target=serve)
    acceptor.start()
    clients = [threading.Thread(target=client) for _ in range(n_flows)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    acceptor.join()
    server.close()


def _drain(conn: socket.socket, size: int) -> None:
    with conn:
        left = size
        while left > 0:
            left -= len(conn.recv(65536))
        conn.sendall(b"\x01")


if __name__ == "__main__":
    fabric_lifecycle("tiny")
    fabric_lifecycle("star8")
    flow_tools()
