"""Golden test of the embedded target with no root, no namespaces and no sockets.

ecn.p4's committed BMv2 JSON is compiled and loaded into a `Switch` whose ports are
in-memory wires; frames go in through `Switch.receive` (what the data-plane loop calls for
every frame a port reads) and leave through `run_departures`. Nothing departs until the
test drains the queues, so a burst of frames stands in the egress queue exactly as it
would behind a slow port, and the switch's clock is the test's. The switch is programmed
as the controller programs it: an action-selector member per next hop (forward: port and
MACs) and an LPM entry per destination (controller/forwarding.py), thresholds and the
telemetry interval by PacketOut control packets (p4src/encoding.py). Every expected frame,
mark and counter is computed here, from scapy and the encodings, never read back from
the switch.
"""

from __future__ import annotations

import ipaddress
import json
import random
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from ecntune.agent.distill import Tree, TreeConfig, TreePolicy
from ecntune.agent.features import switch_keys
from ecntune.agent.rewards import Reward
from ecntune.controller.switch_policy import PolicyEntry, policy_plan
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.switch.compiler import compile_program
from ecntune.switch.dataplane import Switch
from ecntune.switch.digests import DigestConfig
from ecntune.switch.tables import ActionCall
from ecntune.telemetry import PortTelemetry
from ecntune.topology import host_mac, mac_int, port_mac
from tests.wires import Wire

CPU_PORT = 255
HOSTS = {1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"}  # port -> the host behind it
START_US = 1_000_000
INTERVAL_US = 2_000
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
DROPS = {reason: i for i, reason in enumerate(enc.DROP_REASONS)}  # drops counter index
MAX_FRAME_BYTES = PROGRAM.constants()["MAX_FRAME_BYTES"]


@dataclass
class Rig:
    switch: Switch
    wires: dict[int, Wire]
    packet_in: list[bytes]
    digests: list[dict[str, int]]
    now_us: int = START_US

    def send(self, port: int, frame: bytes) -> None:
        self.switch.receive(port, frame)

    def drain(self) -> dict[int, list[bytes]]:
        """Egress everything queued; what each port sent since the last drain."""
        self.switch.run_departures(time.monotonic() + 3600)
        out = {n: w.sent[:] for n, w in self.wires.items() if w.sent}
        for w in self.wires.values():
            w.sent.clear()
        return out

    def control(self, opcode: int, payload: bytes) -> bytes:
        """A PacketOut control packet; returns the PacketIn that acknowledges it."""
        before = len(self.packet_in)
        self.send(CPU_PORT, struct.pack("!HBB", 0, opcode, 0) + payload)
        self.drain()
        assert len(self.packet_in) == before + 1, "the control packet was not acknowledged"
        return self.packet_in[-1]


@pytest.fixture
def rig() -> Iterator[Rig]:
    program = compile_program(json.loads(PROGRAM.json_path.read_text()))
    switch = Switch({}, cpu_port=CPU_PORT)
    wires = {n: Wire(n) for n in HOSTS}
    switch.ports = wires  # in place of raw sockets: Switch only calls send() (and close())
    switch.load(program)
    r = Rig(switch, wires, [], [])
    switch.now_us = lambda: r.now_us
    switch.packet_in = r.packet_in.append
    learn_id = next(i for i, ll in program.learn_lists.items() if ll.name == enc.DIGEST)
    switch.digests.configure(learn_id, DigestConfig(max_timeout_ns=0, max_list_size=1))
    switch.digests.sink = lambda _lid, _list, samples: r.digests.extend(
        dict(zip(enc.DIGEST_FIELDS, s, strict=True)) for s in samples
    )
    # Forwarding as controller/forwarding.py writes it: one member per next hop, one entry
    # per destination prefix pointing at its member.
    forward = program.action_by_name(enc.ACTION_FORWARD).id
    selector = program.profiles[enc.ECMP_SELECTOR]
    table = program.tables[enc.TABLE_IPV4]
    for port, ip in HOSTS.items():
        selector.add_member(
            port, forward, (port, mac_int(port_mac(0, port)), mac_int(host_mac(ip)))
        )
        prefix = int(ipaddress.IPv4Address(ip))
        table.insert([(prefix, 32)], 0, ActionCall(member=port))
    yield r
    switch.stop()


def frame(
    src: int, dst: int, ecn: int = NOT_ECT, ttl: int = 64, udp: bool = False, payload: int = 60
) -> bytes:
    l4 = UDP(sport=4000 + src, dport=5000) if udp else TCP(sport=4000 + src, dport=80)
    ip = IP(src=HOSTS[src], dst=HOSTS.get(dst, f"10.9.9.{dst}"), tos=0x28 | ecn, ttl=ttl)
    return bytes(Ether(src=host_mac(HOSTS[src]), dst=port_mac(0, src)) / ip / l4 / bytes(payload))


def forwarded(original: bytes, port: int, mark: bool = False) -> bytes:
    """What ecn.p4 must send: MACs of the next hop, TTL - 1, CE if marked, IPv4 checksum
    recomputed (the TCP/UDP checksum covers neither TTL nor ECN, so it stays)."""
    p = Ether(original)
    p[Ether].src, p[Ether].dst = port_mac(0, port), host_mac(HOSTS[port])
    p[IP].ttl -= 1
    if mark:
        p[IP].tos |= CE
    del p[IP].chksum
    return bytes(p)


def set_thresholds(rig: Rig, port: int, regs: enc.EcnRegisters) -> None:
    payload = enc.ecn_config_payload(port, regs)
    ack = rig.control(enc.OP_SET_ECN, payload)
    assert ack == struct.pack("!HBB", port, enc.REASON_CONFIG_ACK, 0) + payload
    program = rig.switch.program
    assert {name: program.registers[name].values[port] for name in regs.as_dict()} == (
        regs.as_dict()
    )


@pytest.mark.parametrize("udp", [False, True], ids=["tcp", "udp"])
@pytest.mark.parametrize("ecn", [NOT_ECT, ECT1, ECT0, CE])
def test_a_routed_frame_leaves_its_port_with_next_hop_macs_ttl_and_checksum(rig, ecn, udp):
    for src, dst in ((1, 2), (2, 3), (3, 1)):
        sent = frame(src, dst, ecn, ttl=17, udp=udp)
        rig.send(src, sent)
        assert rig.drain() == {dst: [forwarded(sent, dst)]}  # unmarked: marking is off
    assert rig.switch.stats.dropped == 0


def test_frames_the_program_refuses_are_dropped_and_counted_by_reason(rig):
    rig.send(1, frame(1, 99))  # no route to 10.9.9.99
    rig.send(1, frame(1, 2, ttl=1))
    bad = bytearray(frame(1, 2))
    bad[24] ^= 0xFF  # the IPv4 header checksum
    rig.send(1, bytes(bad))
    rig.send(1, frame(1, 2)[:20])  # truncated in the IPv4 header
    rig.send(1, bytes(Ether(src=host_mac(HOSTS[1]), type=0x86DD) / bytes(60)))
    assert rig.drain() == {}
    drops = rig.switch.program.counters[enc.DROP_COUNTER].packets
    want = [0] * len(drops)
    want[DROPS["unknown_dst"]] = 1
    want[DROPS["ttl_expired"]] = 1
    want[DROPS["malformed"]] = 2
    want[DROPS["not_ipv4"]] = 1
    assert drops == want
    assert rig.switch.stats.dropped == sum(want)


def queue_model(lengths: list[int]) -> list[int]:
    """Bytes left behind each packet of a burst as it departs (what ecn.p4 marks on)."""
    return [sum(lengths[i + 1 :]) for i in range(len(lengths))]


def test_ecn_capable_packets_are_marked_ce_at_kmax_and_never_at_kmin(rig):
    codepoints = [ECT0, NOT_ECT, CE, ECT1, ECT0, ECT0, ECT1, ECT0]
    burst = [frame(1, 2, ecn) for ecn in codepoints]
    size = len(burst[0])
    # The first four departures leave kmax bytes or more behind them, the last four kmin
    # or less; pmax = 0 makes the ramp between flat, so a queue of exactly kmax must mark.
    regs = enc.encode_thresholds(kmin_bytes=3 * size, kmax_bytes=4 * size, pmax=0.0)
    set_thresholds(rig, 2, regs)
    for f in burst:
        rig.send(1, f)
    got = rig.drain()[2]

    queued = queue_model([len(f) for f in burst])
    certain = [enc.marking_probability(q, regs) for q in queued]
    assert set(certain) == {0.0, 1.0}  # both sides of the thresholds are exercised
    marks = [p == 1.0 and ecn != NOT_ECT for p, ecn in zip(certain, codepoints, strict=True)]
    assert got == [forwarded(f, 2, mark) for f, mark in zip(burst, marks, strict=True)]
    ce = [Ether(g)[IP].tos & 3 == CE for g in got]
    assert ce == [m or ecn == CE for m, ecn in zip(marks, codepoints, strict=True)]


def test_tail_drops_inflate_the_queue_estimate_only_until_the_queue_next_drains(rig):
    """ecn.p4 counts a packet's bytes into `queue_bytes` at ingress, so a tail drop in the
    traffic manager adds bytes that never leave. A packet leaving an empty queue
    resynchronises the estimate: exactly to zero when nothing was counted after it, else
    keeping a frame for each packet counted after it, which on BMv2 may still be in the
    ingress thread (p4src/README.md, "Queue occupancy in bytes")."""
    set_thresholds(rig, 2, enc.encode_thresholds(kmin_bytes=0, kmax_bytes=1, pmax=1.0))
    estimate = rig.switch.program.registers["queue_bytes"].values
    size = len(frame(1, 2, ECT0))
    rig.switch.tm.set_depth(4, 2)
    for _ in range(10):
        rig.send(1, frame(1, 2, ECT0))
    assert len(rig.drain()[2]) == 4  # six tail-dropped
    # the last to leave left an empty queue, but six were counted after it
    assert estimate[2] == 6 * size
    rig.send(1, frame(1, 2, ECT0))
    (alone,) = rig.drain()[2]
    assert Ether(alone)[IP].tos & 3 == ECT0  # nothing behind it
    assert estimate[2] == 0  # nothing counted after it: resynchronised exactly
    for _ in range(3):
        rig.send(1, frame(1, 2, ECT0))
    marks = [Ether(g)[IP].tos & 3 for g in rig.drain()[2]]
    assert marks == [CE, CE, ECT0]  # what is really behind each, nothing stale
    assert estimate[2] == 0


def test_a_queue_kept_full_marks_and_reports_only_the_frames_left_behind(rig):
    """Tail-dropped bytes stay in `queue_bytes` until the queue drains, and a storm can keep
    a queue full for seconds: every departure bounds what it sees behind it by deq_qdepth
    frames, so neither the marking nor the telemetry ever sees more than the buffer holds
    (p4src/README.md, "Queue occupancy in bytes")."""
    big = frame(1, 2, ECT0, payload=1400)
    size = len(big)
    set_thresholds(
        rig, 2, enc.encode_thresholds(kmin_bytes=4 * size, kmax_bytes=4 * size, pmax=1.0)
    )
    rig.switch.tm.set_depth(4, 2)
    for _ in range(10):
        rig.send(1, big)
    out = rig.drain()[2]
    assert len(out) == 4  # six tail-dropped, still counted in the estimate (9 frames at first)
    # 3, 2, 1 and 0 frames were really behind them: all under the 4-frame step
    assert [Ether(g)[IP].tos & 3 for g in out] == [ECT0] * 4
    registers = rig.switch.program.registers
    assert 3 * size <= registers["tel_qdepth_max"].values[2] <= 3 * MAX_FRAME_BYTES
    assert registers["queue_bytes"].values[2] == 6 * size  # kept: BMv2 may not have enqueued them


def test_the_telemetry_digest_counts_packets_marks_and_bytes_per_port(rig):
    regs = enc.encode_thresholds(kmin_bytes=0, kmax_bytes=1, pmax=1.0)  # mark whenever queued
    set_thresholds(rig, 2, regs)
    rig.control(enc.OP_SET_INTERVAL, enc.interval_payload(INTERVAL_US / 1e6))
    to_2 = [(1, frame(1, 2, ECT0)), (3, frame(3, 2, ECT1, udp=True)), (1, frame(1, 2)),
            (3, frame(3, 2))]  # fmt: skip
    to_3 = [(1, frame(1, 3, ECT0, udp=True)), (2, frame(2, 3, ECT0))]
    for port, f in to_2 + to_3:
        rig.send(port, f)
    out = rig.drain()
    assert [len(out[2]), len(out[3])] == [len(to_2), len(to_3)]
    assert rig.digests == []  # the interval has not run its length yet

    rig.now_us += INTERVAL_US + 5
    rig.send(1, frame(1, 2))  # the first packet after the interval closes it, per port
    rig.send(2, frame(2, 3))
    rig.drain()
    by_port = {d["port"]: d for d in rig.digests}
    assert sorted(by_port) == [2, 3]
    assert len(rig.digests) == 2

    for port, pairs, kmax in ((2, to_2, regs.kmax), (3, to_3, 0)):
        sent = [f for _, f in pairs]
        ecn = [Ether(f)[IP].tos & 3 for f in sent]
        queued = queue_model([len(f) for f in sent])
        marked = [e != NOT_ECT and 0 < kmax <= q for e, q in zip(ecn, queued, strict=True)]
        senders = 0  # one bit per source address: crc32(src) % 64
        for src, _ in pairs:
            senders |= 1 << (zlib.crc32(ipaddress.IPv4Address(HOSTS[src]).packed) % 64)
        want = {
            "port": port,
            "interval_us": INTERVAL_US + 5,
            "tx_pkts": len(sent),
            "tx_bytes": sum(len(f) for f in sent),
            "marked_pkts": sum(marked),
            "marked_bytes": sum(len(f) for f, m in zip(sent, marked, strict=True) if m),
            "qdepth_sum_bytes": sum(queued),
            "qdepth_samples": len(sent),
            "qdepth_max_bytes": max(queued),
            "kmin": regs.kmin if port == 2 else 0,
            "kmax": kmax,
            "pmax": regs.pmax_bp if port == 2 else 0,
            "sender_bitmap": senders,
            "elephant_bytes": 0,
        }
        assert by_port[port] == want
    assert by_port[2]["marked_pkts"] > 0
    assert by_port[3]["marked_pkts"] == 0


def fuzzed_frames(seed: int, n: int) -> list[tuple[int, bytes]]:
    """(ingress port, frame): well-formed frames of every kind the program meets, then
    bytes flipped, headers cut short or padded, ether types and IPv4 lengths randomised,
    and plain garbage — seeded, so a failure replays."""
    rng = random.Random(seed)
    tagged = Ether(src=host_mac(HOSTS[1]), dst=port_mac(0, 1)) / Dot1Q(vlan=7)
    bases = [
        frame(1, 2, ECT0), frame(2, 3, udp=True), frame(3, 1, CE), frame(1, 99), frame(2, 1, ttl=1),
        bytes(tagged / IP(src=HOSTS[1], dst=HOSTS[2]) / TCP()),
        bytes(Ether(src=host_mac(HOSTS[1]), type=0x86DD) / bytes(60)),
        bytes(Ether(src=host_mac(HOSTS[2]), type=0x0806) / bytes(28)),
    ]  # fmt: skip
    out = []
    for _ in range(n):
        f = bytearray(rng.choice(bases))
        kind = rng.randrange(6)
        if kind == 0:
            for _ in range(rng.randint(1, 6)):
                f[rng.randrange(len(f))] = rng.randrange(256)
        elif kind == 1:
            f = f[: rng.randrange(len(f))]
        elif kind == 2:
            f += rng.randbytes(rng.randint(1, 1500))
        elif kind == 3:
            f[12:14] = rng.choice([b"\x08\x00", b"\x81\x00", rng.randbytes(2)])
        elif kind == 4 and len(f) >= 34:
            f[14] = 0x40 | rng.randrange(16)  # IHL: any, options or not, shorter than legal
            f[16:18] = rng.randrange(1 << 16).to_bytes(2, "big")  # total length: any
        elif kind == 5:
            f = bytearray(rng.randbytes(rng.randint(0, 1600)))
        out.append((rng.choice(list(HOSTS)), bytes(f)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fuzzed_frames_never_crash_and_every_frame_is_accounted_for(rig, seed):
    """Whatever arrives, the program handles it: nothing raises in processing, every frame
    leaves by a port or is dropped, and what leaves is a routed IPv4 packet with a correct
    header checksum out of the port its destination is routed to."""
    frames = fuzzed_frames(seed, 600)
    for port, f in frames:
        rig.send(port, f)
    out = rig.drain()
    stats = rig.switch.stats
    assert stats.errors == 0
    left = sum(len(fs) for fs in out.values())
    assert left + stats.dropped == len(frames)
    assert rig.packet_in == []  # only the CPU port speaks to the controller
    assert 0 < left < len(frames)  # the fuzz reached both the forwarding and the drop paths
    for port, sent in out.items():
        for f in sent:
            p = Ether(f)
            ip = p[IP]
            assert p[Ether].dst == host_mac(HOSTS[port])
            assert ip.dst == HOSTS[port]
            header = bytes(ip)[:20]
            assert ip.ihl == 5
            assert sum(struct.unpack("!10H", header)) % 0xFFFF == 0  # ones'-complement sum


# -- the in-switch policy (issue 20 part 3) ---------------------------------------------------

POLICY_LINK_BPS = 20e6  # port 2's speed as the policy's class sees it
POLICY_START = enc.encode_thresholds(kmin_bytes=300, kmax_bytes=300, pmax=0.5)  # no coin flips


def install_policy(rig: Rig, plan: list[PolicyEntry]) -> None:
    """Write the controller's plan straight into the tables (ranges left out: 0..255)."""
    program = rig.switch.program
    for name in (enc.TABLE_POLICY_PORT, enc.TABLE_POLICY_TREE):
        program.tables[name].clear()
    for e in plan:
        table = program.tables[e.table]
        key = [e.match.get(kf.name, (0, 255)) for kf in table.key]
        action = program.action_by_name(e.action)
        data = tuple(e.params[name] for name, _ in action.params)
        table.insert(key, e.priority, ActionCall(action.id, data))


def singleton_tree(keys: list[int], hit: int, miss: int) -> Tree:
    """Boxes that partition the key space, one of them exactly `keys` (answering `hit`), all
    others `miss`: a key off by one anywhere lands in a `miss` box."""
    lo, hi, action = [], [], []
    box_lo, box_hi = [0] * len(keys), [256] * len(keys)
    for f, k in enumerate(keys):
        for a, b in ((0, k), (k + 1, 256)):
            if a < b:
                lo.append([*box_lo[:f], a, *box_lo[f + 1 :]])
                hi.append([*box_hi[:f], b, *box_hi[f + 1 :]])
                action.append(miss)
        box_lo[f], box_hi[f] = k, k + 1
    lo.append(box_lo)
    hi.append(box_hi)
    action.append(hit)
    return Tree(*(jnp.asarray(np.array(x), jnp.int32) for x in (lo, hi, action)))


def policy_interval(rig: Rig, burst: list[bytes]) -> tuple[dict[str, int], enc.EcnRegisters]:
    """Close port 2's running interval with a frame; return its digest and the thresholds
    in force right after (the in-switch decision, if any). Then put POLICY_START back and
    queue `burst`: every interval from the second on holds the same frames, queue depths
    and marks."""
    before = len(rig.digests)
    rig.switch.digests.forget_unacked()  # as if acked: an equal digest is not suppressed
    rig.now_us += INTERVAL_US + 5
    rig.send(1, frame(1, 2, ECT0))
    decided = registers(rig, 2)
    set_thresholds(rig, 2, POLICY_START)
    for f in burst:
        rig.send(1, f)
    rig.drain()
    closed = rig.digests[before:]
    return (closed[0] if closed else {}), decided


def registers(rig: Rig, port: int) -> enc.EcnRegisters:
    v = {n: rig.switch.program.registers[n].values[port] for n in POLICY_START.as_dict()}
    return enc.EcnRegisters(*v.values())


def test_the_switch_computes_the_simulators_keys_and_applies_the_tree_at_interval_end(rig):
    """ecn.p4's six keys are agent/features.py's `switch_keys` of the digest, to the unit:
    a tree whose only `hit` box is those keys sets the next thresholds, the same box moved
    by one step along any key does not, and an empty table leaves the thresholds alone."""
    config = TreeConfig("switch", levels=6, pmax=(0.1, 1.0), hold_idle=True)
    hit, miss = 9, 30  # two template actions with different settings at 20 Mbit/s
    want = {
        a: enc.encode_thresholds(*(float(x[a]) for x in config.template.thresholds(
            np.arange(config.template.n_actions), POLICY_LINK_BPS)))
        for a in (hit, miss)
    }  # fmt: skip
    assert len({want[hit], want[miss], POLICY_START}) == 3
    set_thresholds(rig, 2, POLICY_START)
    rig.control(enc.OP_SET_INTERVAL, enc.interval_payload(INTERVAL_US / 1e6))
    burst = [frame(1, 2, ECT0 if i % 3 else NOT_ECT) for i in range(12)]
    rig.send(1, frame(1, 2, ECT0))  # opens the interval
    rig.drain()
    policy_interval(rig, burst)
    reference, decided = policy_interval(rig, burst)
    assert decided == POLICY_START  # tables empty: nothing changes
    assert reference["marked_pkts"] > 0
    assert reference["qdepth_sum_bytes"] > 0
    _, telemetry = enc.decode_digest(reference, POLICY_LINK_BPS)
    keys = [int(k) for k in np.asarray(switch_keys(telemetry))]
    assert all(0 < k < 255 for k in keys), keys  # every key inside its range: all are tested

    cases = [(keys, hit)] + [
        ([k + d if i == f else k for i, k in enumerate(keys)], miss)
        for f in range(len(keys))
        for d in (-1, 1)
    ]
    for box, answer in cases:
        policy = TreePolicy(config, singleton_tree(box, hit, miss), Reward("acc"))
        install_policy(rig, policy_plan(policy, {2: POLICY_LINK_BPS, 3: 1e9}))
        closed, decided = policy_interval(rig, burst)
        assert closed == reference  # the same interval again, now decided in the switch
        assert decided == want[answer], (box, keys)
        # the simulator's table gives the same answer from the same counters
        history = PortTelemetry(*(np.full((1, 1), x, np.float32) for x in telemetry))
        setting = policy.act(history)  # one interval of one port
        assert enc.encode_thresholds(*(float(x[0]) for x in setting)) == want[answer]
