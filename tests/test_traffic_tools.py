"""Traffic tools over real loopback TCP and real frames: schedules, the flow protocol, records."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ecntune.targets import free_port
from ecntune.traffic import burst
from ecntune.traffic.fct import ideal_fct, slowdown, summarize
from ecntune.traffic.flows import (
    HEADER,
    MAGIC,
    Flow,
    FlowHeader,
    ProtocolError,
    run_schedule,
    tcp_counters,
)
from ecntune.traffic.incast import incast_schedule
from ecntune.traffic.records import (
    FlowRecord,
    JsonlWriter,
    SentRecord,
    iter_jsonl,
    read_records,
)
from ecntune.traffic.sender import poisson_schedule
from ecntune.traffic.workload import arrival_rate, load_cdf

# Unprivileged sockets may only pick congestion controls the kernel allows for everyone.
CC = "cubic" if os.geteuid() == 0 else "reno"


def test_poisson_schedule_fills_the_load_with_the_cdf():
    cdf = load_cdf("websearch").capped(1e6)
    rng = np.random.default_rng(3)
    flows = poisson_schedule(cdf, 0.5, 10e6, 2000.0, ["a", "b"], rng, "h1-w")
    offered_bps = sum(f.size for f in flows) * 8 / 2000.0
    assert offered_bps == pytest.approx(0.5 * 10e6, rel=0.1)
    assert max(f.size for f in flows) == 1_000_000
    assert {f.dst for f in flows} == {"a", "b"}
    assert len({f.flow_id for f in flows}) == len(flows)
    again = poisson_schedule(cdf, 0.5, 10e6, 2000.0, ["a", "b"], np.random.default_rng(3), "h1-w")
    assert again == flows  # same seed, same traffic: static and agent phases see one workload


def test_capped_cdf_keeps_the_shape_below_the_cap_and_an_exact_mean():
    cdf = load_cdf("websearch")
    capped = cdf.capped(1e6)
    sizes = capped.sample(np.random.default_rng(0), 200_000)
    assert sizes.max() == 1_000_000
    assert (
        abs(
            np.mean(sizes <= 100_000)
            - np.mean(cdf.sample(np.random.default_rng(1), 200_000) <= 100_000)
        )
        < 0.01
    )
    assert sizes.mean() == pytest.approx(capped.mean_bytes, rel=0.02)
    assert arrival_rate(capped, 0.5, 10e6) > arrival_rate(cdf, 0.5, 10e6)
    assert cdf.capped(1e9) is cdf
    with pytest.raises(ValueError, match="below the smallest"):
        load_cdf("datamining").capped(10)


def test_incast_schedule_is_synchronised_bursts():
    flows = incast_schedule("10.0.0.4", 50_000, 3, 0.5, "10.0.0.1")
    assert [f.at for f in flows] == [0.0, 0.5, 1.0]
    assert all(f.kind == "incast" and f.size == 50_000 for f in flows)
    with pytest.raises(ValueError, match="positive"):
        incast_schedule("10.0.0.4", 0, 3, 0.5, "x")


def test_receiver_records_every_flow_and_survives_garbage(tmp_path: Path):
    port = free_port()
    out = tmp_path / "rx.jsonl"
    rx = subprocess.Popen(
        [sys.executable, "-m", "ecntune.traffic.receiver", "--port", str(port), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rx.stdout.readline().startswith("listening")
        # garbage and a lying header first: logged and dropped, nothing recorded
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(HEADER.pack(MAGIC, 5) + b"{oops")
        sizes = {"f0": 0, "f1": 1, "f2": 70_000, "f3": 300_000}
        flows = [
            Flow(fid, 0.01 * i, "127.0.0.1", size) for i, (fid, size) in enumerate(sizes.items())
        ]
        sent_path = tmp_path / "sent.jsonl"
        with JsonlWriter(sent_path) as w:
            sent = asyncio.run(run_schedule(flows, time.time(), "127.0.0.1", port, CC, w, 10.0))
        assert all(s.completed for s in sent), sent
        # the senders' TCP_INFO: nothing is lost on loopback
        assert {(s.retrans, s.rtos) for s in sent} == {(0, 0)}
        assert {s.flow_id for s in read_records([sent_path], SentRecord)} == {
            "f0",
            "f1",
            "f2",
            "f3",
        }
    finally:
        rx.terminate()
        _, err = rx.communicate(timeout=10)
    assert rx.returncode == 0
    assert err.count("dropped a flow") == 2
    records = {r.flow_id: r for r in read_records([out], FlowRecord)}
    assert {fid: r.size for fid, r in records.items()} == sizes
    for r in records.values():
        assert r.fct == pytest.approx(r.end - r.start)
        assert 0 < r.fct < 10
        assert r.cc == CC
        assert r.kind == "workload"


def test_retransmission_timeouts_are_counted_from_tcp_info():
    """A connection whose SYN is dropped (the listener's accept queue is full) retransmits it
    after the 1 s initial RTO: tcp_counters must see that timeout, on this kernel's layout."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        with socket.create_connection(srv.getsockname()):  # fills the queue of a backlog of 0
            c = socket.socket()
            c.settimeout(1.5)
            with pytest.raises(TimeoutError):
                c.connect(srv.getsockname())
            retrans, rtos = tcp_counters(c)
            c.close()
    assert retrans >= 1
    assert rtos == retrans  # each SYN retransmission was a timeout
    assert tcp_counters(c) == (None, None)  # a closed socket has none


def wait_until_catching(pid: int, sig: int, timeout_s: float = 20.0) -> None:
    """Block until a process has installed a handler for `sig` (/proc/pid/status SigCgt)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)
        if caught & (1 << (sig - 1)):
            return
        time.sleep(0.02)
    raise TimeoutError(f"process {pid} never caught signal {sig}")


def incast_argv(out: Path, port: int, *args: str) -> list[str]:
    """An incast sender towards 127.0.0.1:port, 1000-byte flows."""
    common = f"--src 127.0.0.1 --dst 127.0.0.1 --port {port} --size 1000 --cc {CC} --out {out}"
    return [sys.executable, "-m", "ecntune.traffic.incast", *common.split(), *args]


def test_a_sender_without_receiver_records_the_failure(tmp_path: Path):
    out = tmp_path / "sent.jsonl"
    argv = incast_argv(out, free_port(), "--bursts", "2", "--period", "0.1")  # nobody listens
    assert subprocess.run(argv, capture_output=True).returncode == 1
    sent = read_records([out], SentRecord)
    assert len(sent) == 2
    assert all(not s.completed and "Connection" in s.error for s in sent)


def test_a_stopped_sender_records_its_unfinished_flows(tmp_path: Path):
    out = tmp_path / "sent.jsonl"
    later = str(time.time() + 60)
    argv = incast_argv(out, free_port(), "--bursts", "3", "--period", "60", "--start-at", later)
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    wait_until_catching(proc.pid, signal.SIGTERM)
    proc.terminate()
    assert proc.wait(10) == 1
    sent = read_records([out], SentRecord)
    assert [s.error for s in sent] == ["stopped before it started"] * 3


def test_flow_header_rejects_malformed_input():
    async def parse(data: bytes) -> FlowHeader:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await FlowHeader.read(reader)

    good = FlowHeader("x", 10, 1.0, "cubic", "workload")
    assert asyncio.run(parse(good.encode())) == good
    with pytest.raises(ProtocolError, match="magic"):
        asyncio.run(parse(b"NOPE\x00\x02{}"))
    with pytest.raises(ProtocolError, match="too long"):
        asyncio.run(parse(HEADER.pack(MAGIC, 60000)))
    with pytest.raises(ProtocolError, match="malformed"):
        asyncio.run(parse(HEADER.pack(MAGIC, 2) + b"{}"))
    body = json.dumps({**good.__dict__, "size": -1}).encode()
    with pytest.raises(ProtocolError, match="negative"):
        asyncio.run(parse(HEADER.pack(MAGIC, len(body)) + body))


def test_jsonl_tolerates_a_torn_last_line_only(tmp_path: Path):
    path = tmp_path / "x.jsonl"
    rec = SentRecord("a", "1", "2", 3, 4.0, "workload", "cubic", True)
    with JsonlWriter(path) as w:
        w.write(rec)
    with open(path, "a") as f:
        f.write('{"flow_id": "b", "src"')  # the writer was killed mid-line
    assert read_records([path], SentRecord) == [rec]
    path.write_text('{"broken"\n' + json.dumps(rec.__dict__) + "\n")
    with pytest.raises(ValueError, match="not a JSON object"):
        list(iter_jsonl(path))
    path.write_text(json.dumps(rec.__dict__) + "\n")
    with pytest.raises(ValueError, match="is not a FlowRecord"):
        read_records([path], FlowRecord)


def test_burst_frames_round_trip_and_foreign_frames_are_ignored():
    frame = burst.frame_template(
        "00:00:0a:00:00:01", "02:ec:00:00:00:01", "10.0.0.1", "10.0.0.4", 5002, 64, burst.ECT0
    )
    patched = bytearray(frame)
    offset = len(frame) - 64
    patched[offset : offset + burst.PAYLOAD.size] = burst.PAYLOAD.pack(burst.MAGIC, 7, 2, 9, 100.0)
    rec = burst.parse(bytes(patched), 5002, 100.25)
    assert (rec.burst, rec.sender, rec.seq, rec.src, rec.ecn) == (7, 2, 9, "10.0.0.1", burst.ECT0)
    assert rec.owd == pytest.approx(0.25)
    assert burst.parse(bytes(patched), 5003, 100.25) is None  # another port
    assert burst.parse(frame, 5002, 1.0) is None  # no magic
    assert burst.parse(b"\x00" * 20, 5002, 1.0) is None  # not even IP
    with pytest.raises(ValueError, match="at least"):
        burst.frame_template(
            "00:00:0a:00:00:01", "02:ec:00:00:00:01", "10.0.0.1", "10.0.0.4", 5002, 4, 2
        )


def test_fct_slowdown_summary_by_bucket():
    size = np.array([1_000, 50_000, 500_000, 2_000_000, 5_000_000])
    ideal = ideal_fct(size, 10e6, 1e-3)
    # a 1448-byte-MSS flow of 1000 B is one packet: 1 ms + 1066 B at 10 Mb/s
    assert ideal[0] == pytest.approx(1e-3 + 1066 * 8 / 10e6)
    fct = ideal * np.array([2.0, 4.0, 1.5, 0.5, 3.0])
    assert slowdown(fct, ideal).tolist() == [2.0, 4.0, 1.5, 1.0, 3.0]
    rows = {r.bucket: r for r in summarize(size, fct, ideal)}
    assert rows["mice"].flows == 2
    assert rows["mice"].slowdown_mean == pytest.approx(3.0)
    assert rows["medium"].flows == 1
    assert rows["medium"].slowdown_p99 == pytest.approx(1.5)
    assert rows["elephant"].slowdown_p50 == pytest.approx(2.0)
    assert rows["all"].flows == 5
    empty = {r.bucket: r for r in summarize(size[:1], fct[:1], ideal[:1])}
    assert empty["elephant"].flows == 0
    assert np.isnan(empty["elephant"].slowdown_mean)
