"""Fabric and traffic-tool costs, each against a reference measured side by side in this run.

- fabric_lifecycle: bring a preset fabric up and down with `Fabric` (ECN hosts, static
  neighbours, offloads, shaping, run tagging, reaper, cleanup) vs plain Mininet with the
  same nodes and links (default hosts, no configuration, Mininet's own stop).
- flow_tools: concurrent small flows through the receiver/sender pair over loopback vs
  a minimal blocking socket client/server doing the same bytes: the tools' per-flow cost.
- fabric_link_rate_<R>mbit: what link rates an emulated fabric sustains (issues 16, 21):
  two bulk TCP senders into one host of a 3-host star at R Mbit/s per link, 1 ms per
  link, through the embedded switch's native engine and, as the reference, its Python
  engine; goodput over the link rate (1.0: line rate; TCP/IP headers alone cap it at
  ~0.96) and the switch process's CPU (1.0: one core). On a 2-core machine the senders,
  the receiver and the switch share the cores.

One JSON object per line: name, median seconds of ecntune and of the reference, their ratio
(fabric_link_rate: each engine's goodput share and CPU, native over Python).
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


LINK_RATES_MBIT = (100, 300, 1000)
LINK_DELAY_S = 1e-3
BULK_S = 6.0  # seconds each bulk sender sends
# In a host: send zeros to (ip, port) for BULK_S seconds.
BULK_SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf, end = bytes(1 << 16), time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    s.sendall(buf)
s.close()
"""
# In a host: accept n connections; print the sum of their goodputs (bits/s, each from its
# first byte to its close).
BULK_RECEIVER = """
import socket, sys, threading, time
srv = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
rates = []
def drain(c):
    buf, n, t0 = bytearray(1 << 20), 0, None
    while k := c.recv_into(buf):
        t0 = t0 or time.monotonic()
        n += k
    rates.append(8 * n / (time.monotonic() - t0))
workers = [threading.Thread(target=drain, args=(srv.accept()[0],)) for _ in range(int(sys.argv[2]))]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(sum(rates), flush=True)
"""


def link_rate(mbit: float, dataplane: str) -> dict[str, float]:
    """Goodput share and switch CPU of two bulk flows into h3 of a star at `mbit` per link."""
    from bench_switch import process_cpu_s  # bench/ is on sys.path

    from ecntune.controller import control_plane
    from ecntune.fabric.net import Fabric, FabricOptions
    from ecntune.topology import MTU_BYTES, QUEUE_PKTS, single_switch

    bps = mbit * 1e6
    topo = single_switch(3, bps, name=f"rate{mbit:g}", delay_s=LINK_DELAY_S)
    bdp_pkts = bps * 4 * LINK_DELAY_S / 8 / MTU_BYTES
    depth = max(QUEUE_PKTS, round(2 * bdp_pkts))  # room for both windows: rate, not buffer
    kmin = 0.5 * bdp_pkts * MTU_BYTES  # DCTCP-like marking at half a BDP (neither tight nor off)
    policy = f"static:{kmin:.0f},{2 * kmin:.0f},0.2"
    os.environ["ECNTUNE_DATAPLANE"] = dataplane  # the switch process reads it
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ctl.jsonl"
        with (
            Fabric(topo, FabricOptions(queue_depth_pkts=depth)) as fab,
            control_plane(fab.topology, fab.specs, policy, log, baseline_intervals=0),
        ):
            rx_ip = topo.hosts["h3"].ip
            for h in ("h1", "h2"):  # routes in and ARP done before timing
                fab.host(h).cmd(f"ping -c 2 -i 0.2 -W 2 {rx_ip}")
            rx = fab.host("h3").popen([sys.executable, "-c", BULK_RECEIVER, "5001", "2"])
            rx.stdout.readline()
            pid = fab.switch("s1").proc.pid
            cpu0, t0 = process_cpu_s(pid), time.monotonic()
            tx = [
                fab.host(h).popen([sys.executable, "-c", BULK_SENDER, rx_ip, "5001", str(BULK_S)])
                for h in ("h1", "h2")
            ]
            for p in tx:
                p.wait()
            cpu = (process_cpu_s(pid) - cpu0) / (time.monotonic() - t0)
            goodput_bps = float(rx.communicate(timeout=30)[0].split()[-1])
    return {"goodput_over_link": round(goodput_bps / bps, 3), "switch_cpu": round(cpu, 2)}


def fabric_link_rates() -> None:
    for mbit in LINK_RATES_MBIT:
        name = f"fabric_link_rate_{mbit}mbit"
        if os.geteuid() != 0:
            print(json.dumps({"bench": name, "skipped": "needs root"}))
            continue
        native, python = link_rate(mbit, "native"), link_rate(mbit, "python")
        ratio = native["goodput_over_link"] / python["goodput_over_link"]
        row = {"bench": name, "native": native, "python": python, "ratio": round(ratio, 3)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    fabric_lifecycle("tiny")
    fabric_lifecycle("star8")
    flow_tools()
    fabric_link_rates()
