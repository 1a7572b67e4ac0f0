"""The embedded switch, native and Python engines, against BMv2's simple_switch_grpc, one run.

Three columns per row: `embedded` (the program compiled to C with its own loop,
switch/native_dataplane.py, issue 21), `embedded_python` (the reference Python loop) and
`bmv2`; `ratio` is embedded / BMv2 (issue 21's target: >= 10x packets/s) and
`ratio_vs_python` embedded / embedded_python.

- switch_pps_<n>ports_<64|1518>B: packets per second forwarded through the project's
  pipeline (LPM + ECMP selector + ECN marking + telemetry) with n ports, each port sending
  to the next, frames of Ethernet's smallest size (64 B with FCS) and of a full 1500-byte
  packet; bench/blast.c (sendmmsg, its own process) offers frames, and the rate is what
  arrives on the far ends of the egress veths (kernel counters), median of several
  windows (min, max and the offered rate alongside: on a machine with few cores the
  sender and the switch share them, so compare targets, not absolute rates);
- switch_idle_cpu_percent: the switch process's CPU use with nothing to forward (no busy
  polling: a fabric's switches must not take a core each when idle);
- p4runtime_insert / p4runtime_read / threshold_write_*: P4Runtime latency, median and p99
  of single table-entry inserts, wildcard reads of the routing table (~200 entries), and
  threshold writes by PacketOut (until the ack) and by RegisterEntry (embedded only: BMv2
  has none); p4runtime_insert_900_routes: the same insert once the routing table holds
  ~900 routes (a target whose work per insert grows with the table shows it there);
  p4runtime_noop_unary / p4runtime_noop_read: a Capabilities call and a Read
  that finds nothing, what the gRPC server costs before any work (the embedded target's
  is Python's grpc; a request cannot be answered faster than that);
- forwarding_latency_{idle,during_maximal_read,during_write_burst}: a probe frame every
  5 ms through the switch while nothing else runs / while 50 wildcard reads of every
  register in one request run back to back / while Writes of 100 table entries (inserted,
  then deleted) do; send to kernel arrival, median, p99 and max, and whether p99 meets
  the 10 ms target (issue 18);
- switch_pps_2ports_in_switch_policy: 64-byte forwarding with a 64-leaf tree installed in
  policy_tree (ecn.p4 decides each port's thresholds at the end of every 10 ms interval,
  issue 20), windows alternating with and without it in one run: `with_over_without` is
  the in-switch decision's share of the per-packet cost (target: >= 0.95);
- queue_pacing_deviation: 60 frames queued at once behind a port limited to 300 pps: how far
  each gap between departures is from 3.33 ms (median, p90); timers that count whole
  milliseconds release such a queue in bursts;
- switch_rss: peak resident memory of the switch process after all of the above.

One JSON object per line ("bmv2": null and a reason when simple_switch_grpc is not on
PATH or BMv2 cannot do it). Needs root (veths, raw sockets) and cc (bench/blast.c).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ecntune.testbed import UNLIMITED_PPS, Testbed

WINDOW_S = 1.0
WINDOWS = 5
LATENCY_SAMPLES = 200
PROBE_GAP_S = 0.005  # forwarding-latency probes: one every 5 ms ...
LOAD_S = 3.0  # ... for 3 s per condition
WRITE_BATCH = 100  # table entries per Write in the write burst (inserted, then deleted)
LARGE_TABLE_FILL = 700  # routes added (to the ~200 there) before p4runtime_insert_900_routes
LATENCY_TARGET_MS = 10.0  # issue 18: forwarding latency under a maximal Read or write burst
PACED_PPS, PACED_FRAMES = 300, 60  # queue pacing: a burst drained at a rate (3.33 ms apart)


def if_packets(iface: str, direction: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/{direction}_packets").read_text())


def frame(src: int, dst: int, sport: int, dport: int = 5000, size: int = 106) -> bytes:
    """A UDP frame of `size` bytes (no FCS; 60 is Ethernet's minimum) from host src to dst."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ecntune.topology import host_mac, port_mac

    src_ip, dst_ip = f"10.0.0.{src}", f"10.0.0.{dst}"
    pkt = (
        Ether(dst=port_mac(0, src), src=host_mac(src_ip))
        / IP(src=src_ip, dst=dst_ip, tos=2)
        / UDP(sport=sport, dport=dport)
    )
    return bytes(pkt / bytes(max(0, size - len(pkt))))


def blaster(tmp: Path) -> Path:
    """bench/blast.c built with cc (a sender faster than any switch here)."""
    exe = tmp / "blast"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(Path(__file__).with_name("blast.c"))],
                   check=True)  # fmt: skip
    return exe


def forwarding_pps(rig: Testbed, n_ports: int, size: int = 106) -> dict[str, float]:
    """Frames of `size` bytes, port i to port i+1, offered by bench/blast.c: what arrives."""
    far = [p for _, p in rig.pairs]
    with tempfile.TemporaryDirectory(prefix="ecntune-blast-") as tmp:
        frames_file = Path(tmp) / "frames"
        with frames_file.open("wb") as out:
            for i in range(1, n_ports + 1):
                fs = [frame(i, i % n_ports + 1, 1000 + k, size=size) for k in range(32)]
                out.write(struct.pack("<I", len(fs)))
                for f in fs:
                    out.write(struct.pack("<I", len(f)) + f)
        sender = subprocess.Popen([str(blaster(Path(tmp))), str(frames_file), *far])
        try:
            time.sleep(0.5)  # warm up
            rates, offered = [], []
            for _ in range(WINDOWS):
                rx0 = sum(if_packets(p, "rx") for p in far)
                tx0 = sum(if_packets(p, "tx") for p in far)
                t0 = time.monotonic()
                time.sleep(WINDOW_S)
                dt = time.monotonic() - t0
                rates.append((sum(if_packets(p, "rx") for p in far) - rx0) / dt)
                offered.append((sum(if_packets(p, "tx") for p in far) - tx0) / dt)
        finally:
            sender.kill()
            sender.wait()
    return {
        "pps": round(statistics.median(rates)),
        "min": round(min(rates)),
        "max": round(max(rates)),
        "offered": round(statistics.median(offered)),
        "frame_bytes": size,
    }


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu_percent(rig: Testbed, window_s: float = 3.0) -> float:
    """The switch process's CPU use while no frame arrives (no busy polling: ~0)."""
    time.sleep(0.5)
    c0, t0 = process_cpu_s(rig.pid), time.monotonic()
    time.sleep(window_s)
    return round(100 * (process_cpu_s(rig.pid) - c0) / (time.monotonic() - t0), 2)


def latency_ms(fn: Callable[[int], object], n: int = LATENCY_SAMPLES) -> dict[str, float]:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[int(0.99 * (n - 1))], 3),
    }


def control_latencies(rig: Testbed) -> dict[str, dict[str, float] | None]:
    from finsy.proto import p4r

    from ecntune.p4runtime_client import P4RuntimeClientError
    from ecntune.p4src import encoding as enc

    c = rig.client
    out: dict[str, dict[str, float] | None] = {}
    out["p4runtime_noop_unary"] = latency_ms(
        lambda _: c.stub.Capabilities(p4r.CapabilitiesRequest())
    )
    out["p4runtime_noop_read"] = latency_ms(lambda _: c.read(c.table_entry(enc.TABLE_POLICY_PORT)))
    out["p4runtime_insert"] = latency_ms(lambda i: rig.route(f"10.1.{i // 250}.{i % 250}", 32, [1]))
    out["p4runtime_read"] = latency_ms(lambda _: c.read(c.table_entry(enc.TABLE_IPV4, {})), 50)
    out["p4runtime_insert_900_routes"] = insert_among_900_routes(rig)
    regs = enc.encode_thresholds(3000, 9000, 0.2)

    def by_packet_out(_: int) -> None:
        c.packet_out(enc.ecn_config_payload(1, regs), opcode=enc.OP_SET_ECN)
        c.packet_in(timeout_s=5)

    out["threshold_write_packet_out"] = latency_ms(by_packet_out, 100)
    try:
        out["threshold_write_register"] = latency_ms(
            lambda _: c.write_registers(regs.as_dict(), 1), 100
        )
    except P4RuntimeClientError as e:  # BMv2's P4Runtime server: RegisterEntry UNIMPLEMENTED
        out["threshold_write_register"] = None
        errors = dict.fromkeys(f"{code} {msg}".strip() for code, msg in e.errors)  # one of each
        detail = "; ".join(errors) or str(e)
        out["threshold_write_register_error"] = f"{e.code}: {detail}"[:200]
    return out


def host_routes(rig: Testbed, first: int, n: int) -> list:
    """n /32 routes from address `first` up, to the rig's first next hop (table entries to
    insert and delete directly, without the rig's forwarding plan)."""
    from ecntune.p4src import encoding as enc

    c = rig.client
    member = next(iter(rig.forwarding.members.values()))
    return [
        c.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (first + i, 32)}, member=member)
        for i in range(n)
    ]


def insert_among_900_routes(rig: Testbed) -> dict[str, float]:
    """Single inserts into the routing table once it holds ~900 routes (its size is 1024):
    a target whose work per insert grows with the table shows it here, against
    p4runtime_insert's ~100. The routes are taken out again afterwards."""
    c = rig.client
    filler = host_routes(rig, 0x0C000000, LARGE_TABLE_FILL)
    measured = host_routes(rig, 0x0D000000, 100)
    c.insert(*filler)
    try:
        return latency_ms(lambda i: c.insert(measured[i]), len(measured))
    finally:
        c.delete(*filler, *measured)


def probe_latency_ms(rig: Testbed, load: Callable[[], object] | None) -> dict[str, Any]:
    """Frames from port 1 to port 2 every PROBE_GAP_S for LOAD_S while `load` runs over
    and over in another thread (nothing when None): send to kernel arrival, p50/p99/max."""
    rig.collect(quiet_s=0.2)  # opens the far ends' sockets, drains what was left
    rig.listen()
    stop, done, failure = threading.Event(), [0], []

    def loop() -> None:
        while not stop.is_set():
            try:
                load()  # type: ignore[misc]
            except Exception as e:  # what the target refuses is reported, not raised
                failure.append(f"{type(e).__name__}: {e}"[:200])
                return
            done[0] += 1

    worker = threading.Thread(target=loop, daemon=True)
    if load is not None:
        worker.start()
    probes = [frame(1, 2, 4000, 10_000 + i) for i in range(int(LOAD_S / PROBE_GAP_S))]
    sent: dict[int, float] = {}
    start = time.monotonic()
    for i, probe in enumerate(probes):
        time.sleep(max(0.0, start + i * PROBE_GAP_S - time.monotonic()))
        sent[10_000 + i] = time.time()
        rig.send(1, probe)
    stop.set()
    got = rig.arrivals(len(sent), timeout_s=10)
    if load is not None:
        worker.join(60)
    delays = sorted((t - sent[d]) * 1e3 for port, d, t in got if port == 2 and d in sent)
    if failure or not delays:
        return {"error": failure[0] if failure else f"none of {len(sent)} probes came out"}
    return {
        "median_ms": round(statistics.median(delays), 3),
        "p99_ms": round(delays[int(0.99 * (len(delays) - 1))], 3),
        "max_ms": round(delays[-1], 3),
        "probes": len(sent),
        "lost": len(sent) - len(delays),
        "load_calls": done[0],
    }


def latency_under_control_load(rig: Testbed) -> dict[str, dict[str, Any]]:
    """Forwarding latency while the control plane works the switch hardest (issue 18:
    under 10 ms while a maximal Read or a burst of writes runs), idle in the same run."""
    from finsy.proto import p4r

    c = rig.client
    every_register = p4r.Entity(register_entry=p4r.RegisterEntry())  # id 0: all of them
    batch = host_routes(rig, 0x0B000000, WRITE_BATCH)

    def write_burst() -> None:
        c.insert(*batch)
        c.delete(*batch)

    return {
        "forwarding_latency_idle": probe_latency_ms(rig, None),
        "forwarding_latency_during_maximal_read": probe_latency_ms(
            rig, lambda: c.read(*[every_register] * 50)
        ),
        "forwarding_latency_during_write_burst": probe_latency_ms(rig, write_burst),
    }


def queue_pacing(rig: Testbed) -> dict[str, float | int]:
    """PACED_FRAMES frames queued at once behind a port limited to PACED_PPS: how far each
    gap between departures (kernel arrival times) is from 1 / PACED_PPS, median and p90.
    A target whose timers count whole milliseconds releases such a queue in bursts."""
    rig.collect(quiet_s=0.2)
    rig.listen()
    rig.target.set_queue_rate(rig.spec, PACED_PPS, 2)
    try:
        for i in range(PACED_FRAMES):
            rig.send(1, frame(1, 2, 4000, 20_000 + i))
        got = sorted(t for port, _, t in rig.arrivals(PACED_FRAMES, timeout_s=10) if port == 2)
    finally:
        rig.target.set_queue_rate(rig.spec, UNLIMITED_PPS, 2)
    errors = sorted(abs(b - a - 1 / PACED_PPS) * 1e3 for a, b in itertools.pairwise(got))
    if not errors:
        return {"error": f"{len(got)} of {PACED_FRAMES} frames came out"}
    return {
        "median_ms": round(statistics.median(errors), 3),
        "p90_ms": round(errors[int(0.9 * (len(errors) - 1))], 3),
        "frames": len(got),
    }


def grid_policy() -> Any:
    """A 64-leaf tree over the queue and rate keys (8 x 8 boxes, 64 actions): a table of
    the size distillation keeps, entries the data plane must search every interval."""
    import jax.numpy as jnp

    from ecntune.agent.distill import QUANT_LEVELS, Tree, TreeConfig, TreePolicy
    from ecntune.agent.rewards import Reward

    config = TreeConfig("switch", levels=10, pmax=(0.1, 1.0))
    width, lo, hi = QUANT_LEVELS // 8, [], []
    for i in range(8):
        for j in range(8):
            lo.append([i * width, j * width, 0, 0, 0, 0])
            hi.append([(i + 1) * width, (j + 1) * width, *[QUANT_LEVELS] * 4])
    tree = Tree(
        jnp.asarray(lo, jnp.int32),
        jnp.asarray(hi, jnp.int32),
        jnp.arange(64) % config.template.n_actions,
    )
    return TreePolicy(config, tree, Reward("acc"))


def in_switch_policy_pps(rig: Testbed) -> dict[str, Any]:
    """Forwarding pps without and with the in-switch policy installed, alternating twice."""
    from ecntune.controller.switch_policy import clear, install, policy_plan

    plan = policy_plan(grid_policy(), {p: 10e9 for p in range(1, 3)})
    without, with_ = [], []
    for _ in range(2):
        without.append(forwarding_pps(rig, 2, FRAME_SIZES[0])["pps"])
        install(rig.client, plan)
        with_.append(forwarding_pps(rig, 2, FRAME_SIZES[0])["pps"])
        clear(rig.client, plan)
    a, b = statistics.median(without), statistics.median(with_)
    return {"pps": round(b), "without": round(a), "with_over_without": round(b / a, 3),
            "entries": len(plan)}  # fmt: skip


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


ENGINES = {  # column -> (target, the embedded switch's --dataplane)
    "embedded": ("embedded", "native"),
    "embedded_python": ("embedded", "python"),
    "bmv2": ("bmv2", None),
}
FRAME_SIZES = (60, 1514)  # Ethernet's smallest frame (64 B with FCS) and a full 1500 B packet


def measure(column: str) -> dict[str, Any]:
    target_name, dataplane = ENGINES[column]
    if dataplane:
        os.environ["ECNTUNE_DATAPLANE"] = dataplane  # the switch process reads it
    results: dict[str, Any] = {}
    for n_ports in (2, 8):
        rig = Testbed(target_name, n_ports, f"bs{column[0]}{column[-1]}{n_ports}")
        try:
            if n_ports == 2 and target_name == "embedded":
                results["switch_idle_cpu_percent"] = idle_cpu_percent(rig)
            for size in FRAME_SIZES:
                rate = forwarding_pps(rig, n_ports, size)
                name = f"switch_pps_{n_ports}ports_{size + 4}B"
                results[name] = rate.pop("pps")
                results[f"{name}_detail"] = rate
            if n_ports == 2:
                policy = in_switch_policy_pps(rig)
                results["switch_pps_2ports_in_switch_policy"] = policy.pop("pps")
                results["switch_pps_2ports_in_switch_policy_detail"] = policy
                results.update(control_latencies(rig))
                rows = latency_under_control_load(rig)
                rows["queue_pacing_deviation"] = queue_pacing(rig)
                for name, row in rows.items():
                    error = row.pop("error", None)
                    results[name] = row or None
                    if error:
                        results[f"{name}_error"] = error
            results[f"switch_rss_mb_{n_ports}ports"] = round(peak_rss_mb(rig.pid), 1)
        finally:
            rig.close()
    return results


def ratio(value: Any, ref: Any) -> float | None:
    if isinstance(value, dict) and isinstance(ref, dict):
        return round(value["median_ms"] / ref["median_ms"], 3)
    if isinstance(value, float | int) and isinstance(ref, float | int) and ref:
        return round(value / ref, 3)
    return None


def main() -> int:
    if os.geteuid() != 0:
        print(json.dumps({"bench": "switch", "skipped": "needs root (veths, raw sockets)"}))
        return 0
    t0 = time.monotonic()
    have_bmv2 = shutil.which("simple_switch_grpc") is not None
    runs = {c: measure(c) for c in ENGINES if have_bmv2 or ENGINES[c][0] != "bmv2"}
    embedded = runs["embedded"]
    for name, value in embedded.items():
        if name.endswith(("_detail", "_error")):
            continue
        row: dict[str, Any] = {"bench": name}
        for column, res in runs.items():
            row[column] = res.get(name)
            for suffix in ("_detail", "_error"):
                if name + suffix in res:
                    row[f"{column}{suffix}"] = res[name + suffix]
        if not have_bmv2:
            row["bmv2"] = None
            row["bmv2_missing"] = "simple_switch_grpc is not on PATH"
        row["ratio"] = ratio(value, row["bmv2"])  # native / BMv2 (issue 21: >= 10x pps)
        row["ratio_vs_python"] = ratio(value, row["embedded_python"])
        if name.startswith("forwarding_latency_") and isinstance(value, dict):
            row["target_p99_ms"] = LATENCY_TARGET_MS
            row["meets_target"] = value["p99_ms"] <= LATENCY_TARGET_MS
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "switch_total_s", "value": round(time.monotonic() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
