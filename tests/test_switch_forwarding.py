"""The embedded switch forwarding on real veths while other things happen: per-port
propagation delay (`set_port_delay`, what gives an emulated fabric a datacenter-like RTT
where this kernel has no netem, issue 16), and a huge P4Runtime Read (issue 18 (3)).

The switch runs its native engine wherever a C compiler exists (issue 21), so every live
test exercises that one; the delay test runs once on each engine, and one test checks
which engine a started switch says it runs."""

from __future__ import annotations

import shutil
import statistics
import threading
import time

import pytest
from finsy.proto import p4r
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ecntune.testbed import Testbed
from ecntune.topology import host_mac, port_mac

pytestmark = [pytest.mark.root]

DELAY_S = 0.2


def frame(dst: int, seq: int) -> bytes:
    p = Ether(dst=port_mac(0, 1), src=host_mac("10.0.0.1"))
    return bytes(p / IP(src="10.0.0.1", dst=f"10.0.0.{dst}") / UDP(dport=5000 + seq) / (b"x" * 20))


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_port_delay_holds_frames_for_that_long_in_order_and_others_not_at_all(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "native" and shutil.which("cc") is None:
        pytest.skip("no C compiler: the native engine cannot run")
    monkeypatch.setenv("ECNTUNE_DATAPLANE", engine)  # the switch process reads it
    with Testbed("embedded", 3, f"dl{engine[0]}") as tb:
        assert tb.target.control(tb.spec, "dataplane").startswith(engine)
        tb.collect(quiet_s=0.2)  # opens the far ends' sockets
        tb.listen()
        tb.target.set_port_delay(tb.spec, DELAY_S, 2)
        sent = time.time()
        for seq in range(5):
            tb.send(1, frame(2, seq))  # delayed port
        tb.send(1, frame(3, 9))  # an undelayed port
        got = tb.arrivals(6)
    assert len(got) == 6, got
    fast = [t - sent for port, _, t in got if port == 3]
    slow = [(seq, t - sent) for port, seq, t in got if port == 2]
    # the undelayed frame is out long before the delayed ones; those are held at least the
    # delay (a loaded machine only adds), and leave in the order they came
    assert fast[0] < DELAY_S
    assert all(dt >= DELAY_S for _, dt in slow), slow
    assert [seq for seq, _ in slow] == [5000 + i for i in range(5)]


def test_the_control_port_refuses_delays_that_cannot_be():
    with Testbed("embedded", 1, "dlz") as tb:
        for bad in (
            "set_port_delay -1",
            "set_port_delay nan",
            "set_port_delay 5",
            "set_port_delay 0.1 9",
        ):
            with pytest.raises(RuntimeError, match="Error"):
                tb.target.control(tb.spec, bad)
        tb.target.set_port_delay(tb.spec, 0.0)  # all ports, no delay: fine


def test_a_huge_read_does_not_stop_forwarding():
    """Issue 18 (3): Read held the switch lock while it built the whole response; 50 reads of
    every register in one request delayed packets by seconds. Frames sent while such a read
    runs must come out long before it ends."""
    with Testbed("embedded", 2, "rdl") as tb:
        tb.collect(quiet_s=0.2)
        tb.listen()
        every_register = p4r.Entity(register_entry=p4r.RegisterEntry())  # id 0: all of them
        took: list[float] = []

        def read() -> None:
            t = time.monotonic()
            entities = tb.client.read(*[every_register] * 50)
            took.append(time.monotonic() - t)
            assert len(entities) > 50 * 1000

        reader = threading.Thread(target=read)
        sent: dict[int, float] = {}
        reader.start()
        seq = 0
        while reader.is_alive() and seq < 1000:
            sent[5000 + seq] = time.time()
            tb.send(1, frame(2, seq))
            seq += 1
            time.sleep(0.01)
        reader.join()
        got = tb.arrivals(len(sent), timeout_s=10)
    delays = [t - sent[dport] for _, dport, t in got if dport in sent]
    assert len(delays) == len(sent) >= 5, (len(delays), len(sent), took)
    # the read took took[0] s; without batching every frame sent during it waited for its
    # end: delays spread from 0 to took[0], half of them past took[0] / 2. With batching a
    # frame waits one batch at most, though a starved machine may stall a few a while
    assert statistics.median(delays) < took[0] / 10, (statistics.median(delays), took)
    assert max(delays) < took[0] / 2, (max(delays), took)


def test_an_8021q_tag_reaches_the_program_as_it_was_on_the_wire():
    """Issue 18 (5): the kernel moves VLAN tags out of received frames; without putting them
    back the program parsed a tagged frame as plain IPv4 and forwarded it, where BMv2 sees
    the tag (and this program, which parses no VLANs, drops it as not IPv4)."""
    from scapy.layers.l2 import Dot1Q

    from ecntune.p4src import encoding as enc

    not_ipv4 = enc.DROP_REASONS.index("not_ipv4")
    with Testbed("embedded", 2, "vln") as tb:
        tb.collect(quiet_s=0.2)
        tb.listen()
        before = tb.client.read_counter(enc.DROP_COUNTER, not_ipv4)[0]
        eth = Ether(dst=port_mac(0, 1), src=host_mac("10.0.0.1"))
        ip = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=5000) / (b"x" * 20)
        tb.send(1, bytes(eth / Dot1Q(vlan=5) / ip))
        tb.send(1, bytes(eth / ip))  # untagged: forwarded
        got = tb.arrivals(2, timeout_s=2)
        after = tb.client.read_counter(enc.DROP_COUNTER, not_ipv4)[0]
    assert len(got) == 1, got  # only the untagged frame came out
    assert after == before + 1
