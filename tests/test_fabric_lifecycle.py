"""Fabrics come up as the Topology describes them and leave nothing behind, however they end.

These use the kernel-bridge fabric (no P4 target needed); the P4 switch nodes share every
piece checked here (run tagging, interface names, hosts, cleanup).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ecntune.fabric.cleanup import RUN_DIR, leftovers, process_start_time, tagged_processes
from ecntune.fabric.net import Fabric, FabricOptions
from ecntune.topology import dumbbell, preset, single_switch
from ecntune.traffic.records import FlowRecord, read_records

pytestmark = pytest.mark.root
ECNTUNE = Path(sys.executable).with_name("ecntune")


def ip_links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout


def assert_gone(rid: str) -> None:
    left = leftovers([rid])
    assert not left, f"run {rid} left {left}"
    assert f"ec{rid}" not in ip_links()
    assert not (RUN_DIR / f"{rid}.json").exists()
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout == ""


def test_hosts_get_the_topologys_addresses_neighbours_and_tcp_settings():
    topo = preset("tiny")
    with Fabric(topo, FabricOptions(switch="bridge")) as fab:
        rid = fab.run.rid
        h1 = fab.host("h1")
        intf = h1.defaultIntf().name
        assert h1.IP() == topo.hosts["h1"].ip
        assert h1.MAC() == topo.hosts["h1"].mac
        neigh = h1.cmd(f"ip neigh show dev {intf}")
        for other in ("h2", "h3", "h4"):
            assert f"{topo.hosts[other].ip} lladdr {topo.hosts[other].mac} PERMANENT" in neigh
        assert h1.cmd("sysctl -n net.ipv4.tcp_ecn").strip() == "1"
        assert h1.cmd("sysctl -n net.ipv6.conf.all.disable_ipv6").strip() == "1"
        offloads = h1.cmd(f"ethtool -k {intf}")
        for feature in ("tcp-segmentation-offload", "generic-receive-offload", "tx-checksumming"):
            assert f"{feature}: off" in offloads
        assert "htb" in h1.cmd(f"tc qdisc show dev {intf}")  # the host NIC runs at link rate
        # switch ports carry the run's tag and the Topology's port numbers
        ports = {p: i.name for p, i in fab.net["s1"].intfs.items() if p > 0}
        assert ports == {p: f"ec{rid}s0p{p}" for p in (1, 2, 3, 4)}
        assert " 0% packet loss" in h1.cmd("ping -c2 -i0.1 -W1 " + topo.hosts["h4"].ip)
        assert len([r for r in tagged_processes().values() if r == rid]) >= 6  # shells + reaper
        assert fab.cc in ("dctcp", "cubic")
    assert_gone(rid)


def test_switch_to_switch_links_are_tagged_and_removed():
    topo = dumbbell(1, 1, 10e6, 10e6)  # h1 - s1 == s2 - h2, both ends of s1-s2 in root
    with Fabric(topo, FabricOptions(switch="bridge")) as fab:
        rid = fab.run.rid
        links = ip_links()
        assert f"ec{rid}s0p1" in links  # s1's port 1: the trunk, added first
        assert f"ec{rid}s1p1" in links  # s2's end of it
        assert " 0% packet loss" in fab.host("h1").cmd("ping -c2 -i0.1 -W1 10.0.1.1")
    assert_gone(rid)


@pytest.mark.parametrize("shaper", ["htb", "tbf"])
def test_host_nics_run_at_link_rate(shaper: str, tmp_path: Path):
    options = FabricOptions(switch="bridge", host_shaper=shaper)
    with Fabric(single_switch(2, 10e6), options) as fab:
        h1, h2 = fab.host("h1"), fab.host("h2")
        assert f"qdisc {shaper} 5: root" in h1.cmd("tc qdisc show dev h1-eth0")
        py = [sys.executable, "-m"]
        rx_out = tmp_path / "rx.jsonl"
        rx = h2.popen([*py, "ecntune.traffic.receiver", "--out", str(rx_out)], stderr=None)
        assert rx.stdout.readline().startswith(b"listening")
        args = "--src 10.0.0.1 --dst 10.0.0.2 --size 1000000 --cc cubic --out"
        tx = h1.popen([*py, "ecntune.traffic.incast", *args.split(), str(tmp_path / "tx.jsonl")])
        assert tx.wait(30) == 0
        sent_through_shaper = h1.cmd("tc -s qdisc show dev h1-eth0")
        rid = fab.run.rid
    assert_gone(rid)
    (flow,) = read_records([rx_out], FlowRecord)
    # 1 MB at 10 Mb/s is 0.83 s on the wire, more with headers and slow start
    assert 0.8 < flow.fct < 2.5
    assert int(re.search(r"Sent (\d+) bytes", sent_through_shaper).group(1)) > 1_000_000


def test_hosts_without_ecn():
    with Fabric(single_switch(2, 10e6), FabricOptions(switch="bridge", ecn=False)) as fab:
        assert fab.host("h1").cmd("sysctl -n net.ipv4.tcp_ecn").strip() == "0"
        rid = fab.run.rid
    assert_gone(rid)


def test_a_failed_start_removes_what_it_built():
    before = set(os.listdir(RUN_DIR)) if RUN_DIR.exists() else set()
    fab = Fabric(preset("leafspine-2x2"), FabricOptions(switch="bridge"))
    with pytest.raises(ValueError, match="loop-free"):
        fab.start()
    assert fab.run is None
    after = set(os.listdir(RUN_DIR))
    assert after <= before
    assert os.environ.get("ECNTUNE_RUN") is None


OWNER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    from ecntune.fabric.net import Fabric, FabricOptions
    from ecntune.topology import preset
    # Ctrl-C as a terminal delivers it: a non-interactive shell starts background jobs
    # (`ci & ...`) with SIGINT ignored, and children inherit that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with Fabric(preset("tiny"), FabricOptions(switch="bridge")) as fab:
        # a receiver too, so the test sees tools die with the fabric; the rid is printed
        # only once its one line ("listening") is read, as before that it may still be
        # mnexec joining h4's namespace
        argv = [sys.executable, "-m", "ecntune.traffic.receiver", "--out", "/dev/null"]
        rx = fab.host("h4").popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert rx.stdout.readline().startswith(b"listening")
        print(fab.run.rid, flush=True)
        time.sleep(600)
    """
)


def start_owner() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    rid = proc.stdout.readline().strip()
    assert len(rid) == 4, "the owner did not start its fabric"
    deadline = time.monotonic() + 20
    while not any("receiver" in _cmdline(p) for p, r in tagged_processes().items() if r == rid):
        assert time.monotonic() < deadline, "the receiver never started"
        time.sleep(0.05)
    return proc, rid


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_gone(rid: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while leftovers([rid]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert_gone(rid)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_owner_cleans_up(sig):
    proc, rid = start_owner()
    assert f"ec{rid}" in ip_links()
    proc.send_signal(sig)
    proc.wait(30)
    assert_gone(rid)  # the owner itself, before exiting


def test_the_reaper_cleans_up_after_a_killed_owner():
    proc, rid = start_owner()
    proc.kill()
    proc.wait()
    wait_gone(rid)


def test_cleanup_command_removes_orphans_and_spares_live_runs():
    live, live_rid = start_owner()
    dead, dead_rid = start_owner()
    try:
        procs = tagged_processes()
        reaper = next(p for p, r in procs.items() if r == dead_rid and "--reap" in _cmdline(p))
        os.kill(reaper, signal.SIGKILL)  # nobody is left to clean up after the owner
        dead.kill()
        dead.wait()
        while process_start_time(reaper) is not None:
            time.sleep(0.05)
        assert leftovers([dead_rid]).links  # the orphan really is there
        dry = subprocess.run([ECNTUNE, "cleanup", "--dry-run"], capture_output=True, text=True)
        # host shells die with their pty; the receiver keeps h4's namespace and veth alive
        assert f"link ec{dead_rid}br0" in dry.stdout
        assert f"link ec{dead_rid}s0p4" in dry.stdout
        assert f"(run {dead_rid})" in dry.stdout
        assert leftovers([dead_rid]).links
        out = subprocess.run([ECNTUNE, "cleanup"], capture_output=True, text=True, check=True)
        assert "removed:" in out.stdout
        assert_gone(dead_rid)
        assert leftovers([live_rid]).links  # the live run was not touched
        state = json.loads((RUN_DIR / f"{live_rid}.json").read_text())
        assert state["owner_pid"] == live.pid
    finally:
        live.terminate()
        live.wait(30)
    assert_gone(live_rid)


def test_cleanup_treats_an_unreadable_run_record_as_an_orphan():
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    record = RUN_DIR / "fffe.json"
    record.write_text("{not json")
    dry = subprocess.run([ECNTUNE, "cleanup", "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0
    assert record.exists()
    subprocess.run([ECNTUNE, "cleanup"], capture_output=True, check=True)
    assert not record.exists()
