"""The embedded switch's per-port propagation delay (`set_port_delay`) on real veths: what
gives an emulated fabric a datacenter-like RTT where this kernel has no netem (issue 16)."""

from __future__ import annotations

import select
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ecntune.testbed import Testbed
from ecntune.topology import host_mac, port_mac

pytestmark = [pytest.mark.root]

DELAY_S = 0.2


def frame(dst: int, seq: int) -> bytes:
    p = Ether(dst=port_mac(0, 1), src=host_mac("10.0.0.1"))
    return bytes(p / IP(src="10.0.0.1", dst=f"10.0.0.{dst}") / UDP(dport=5000 + seq) / (b"x" * 20))


def arrivals(tb: Testbed, expect: int, timeout_s: float = 5.0) -> list[tuple[int, int, float]]:
    """(port, UDP dport, arrival time) of the next `expect` frames out of the switch."""
    socks = {s.fileno(): (port, s) for port, s in tb.sockets.items() if port != 1}
    out: list[tuple[int, int, float]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expect and time.monotonic() < deadline:
        ready, _, _ = select.select(list(socks), [], [], 0.05)
        for fd in ready:
            port, s = socks[fd]
            data = s.recv(65536)
            p = Ether(data)
            if UDP in p:
                out.append((port, p[UDP].dport, time.monotonic()))
    return out


def test_a_port_delay_holds_frames_for_that_long_in_order_and_others_not_at_all():
    with Testbed("embedded", 3, "dly") as tb:
        tb.collect(quiet_s=0.2)  # opens the far ends' sockets
        tb.target.set_port_delay(tb.spec, DELAY_S, 2)
        sent = time.monotonic()
        for seq in range(5):
            tb.send(1, frame(2, seq))  # delayed port
        tb.send(1, frame(3, 9))  # an undelayed port
        got = arrivals(tb, 6)
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
