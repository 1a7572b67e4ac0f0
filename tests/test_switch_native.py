"""The native data plane against the Python one: same program, same packets, same tables.

switch/compile_c.py emits C with the meaning switch/compiler.py gives the BMv2 JSON; these
tests run both on randomised packets, table contents and register values and compare
every slot of the field vector, the packet's state (parse position, length, errors,
digest, clone and truncate requests), every register and counter, and the deparsed bytes
(issue 21's differential test native-vs-Python). The random source of
modify_field_rng_uniform is xorshift64* on both sides here (`XorShift`), so RED marking
decisions compare too. Needs a C compiler (build-essential, installed by `make install`).
"""

from __future__ import annotations

import contextlib
import json
import queue
import random
import struct
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.switch.compiler import compile_program
from ecntune.switch.dataplane import Switch
from ecntune.switch.native import (
    Batch,
    NativePkt,
    NativeProgram,
    NativeUnavailable,
    c_compiler,
    packet,
)
from ecntune.switch.program import Program
from ecntune.switch.runtime import AssertionFailure, Pkt
from ecntune.switch.tables import ActionCall, Entry, EntryError, Table
from tests.p4_corpus import CASES, PROGRAMS

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler (build-essential)")
M64 = (1 << 64) - 1
PKT_FIELDS = (
    "pos", "length", "error", "cksum_error", "learn_id", "clone_session", "clone_fl",
    "resubmit", "recirculate", "truncate", "exit",
)  # fmt: skip


class XorShift:
    """native_runtime.h's ect_rand, for the Python pipeline's `rng.randint`."""

    def __init__(self, seed: int) -> None:
        self.state = seed or 0x9E3779B97F4A7C15

    def randint(self, lo: int, hi: int) -> int:
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & M64
        x ^= x >> 27
        self.state = x
        return lo + ((x * 0x2545F4914F6CDD1D) & M64) % (hi - lo + 1)


@dataclass
class Pair:
    """One program compiled twice: run in Python, and natively."""

    py: Program
    nat_prog: Program
    nat: NativeProgram
    last: np.ndarray | None = None  # the native field vector of the last packet run

    @classmethod
    def of(cls, doc: dict[str, Any], seed: int = 1) -> Pair:
        py, nat_prog = compile_program(json.loads(json.dumps(doc))), compile_program(doc)
        nat = NativeProgram(nat_prog)
        py.ingress.__globals__["rng"] = XorShift(seed)
        nat.seed(seed)
        return cls(py, nat_prog, nat)

    def both_tables(self) -> list[tuple[Table, Table]]:
        return [(self.py.tables[n], self.nat_prog.tables[n]) for n in self.py.tables]


def fill_tables(pair: Pair, rng: random.Random, per_table: int) -> int:
    """The same random entries, members and groups in both programs' tables; returns how
    many entries went in."""
    done = 0
    for name, profile in pair.py.profiles.items():
        nat_profile = pair.nat_prog.profiles[name]
        table = next(t for t in pair.py.tables.values() if t.profile is profile)
        for m in range(1, 9):
            aid = rng.choice(sorted(table.action_ids))
            data = random_data(pair.py, aid, rng)
            for p in (profile, nat_profile):
                p.add_member(m, aid, data)
        if profile.has_selector:
            for g in range(1, 5):
                members = rng.sample(range(1, 9), rng.randint(0, 4))  # an empty group too
                for p in (profile, nat_profile):
                    p.set_group(g, members, create=True)
    for py_t, nat_t in pair.both_tables():
        if not py_t.key or py_t.const_entries:
            continue
        for _ in range(per_table):
            key = [random_match(k.match_type, k.width, rng) for k in py_t.key]
            priority = rng.randint(1, 1000) if py_t.needs_priority else 0
            call = random_call(pair, py_t, rng)
            try:
                py_t.insert(key, priority, call)
            except EntryError:
                continue  # a duplicate match: the same in both, so skip both
            nat_t.insert(key, priority, call)
            done += 1
        if py_t.kind == "simple" and not py_t.default_const and rng.random() < 0.5:
            aid = rng.choice(sorted(py_t.action_ids))
            default = ActionCall(aid, random_data(pair.py, aid, rng))
            py_t.set_default(default)
            nat_t.set_default(default)
    return done


def random_call(pair: Pair, table: Table, rng: random.Random) -> ActionCall:
    """An action with data, or (indirect tables) one of fill_tables' members or groups."""
    if table.profile is None:
        aid = rng.choice(sorted(table.action_ids))
        return ActionCall(aid, random_data(pair.py, aid, rng))
    if table.profile.has_selector and rng.random() < 0.7:
        return ActionCall(group=rng.randint(1, 4))
    return ActionCall(member=rng.randint(1, 8))


def random_data(prog: Program, aid: int, rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.getrandbits(w) for _, w in prog.actions[aid].params)


def random_match(match_type: str, width: int, rng: random.Random) -> Any:
    value = rng.getrandbits(width)
    if match_type in ("exact", "valid"):
        return value & 1 if match_type == "valid" else value
    if match_type == "lpm":
        plen = rng.randint(0, width)
        return value & (((1 << width) - 1) ^ ((1 << (width - plen)) - 1)), plen
    if match_type in ("ternary", "optional"):
        mask = rng.getrandbits(width)
        return value & mask, mask
    low, high = sorted((value, rng.getrandbits(width)))
    return low, high


def run_both(pair: Pair, frame: bytes, port: int, meta: dict[str, int]) -> list[str]:
    """Parse, ingress, egress and deparse `frame` in both; the differences, as text."""
    py, nat = pair.py, pair.nat
    s = py.slots
    f = py.layout.template()
    f[s["standard_metadata.ingress_port"]] = port
    f[s["standard_metadata.packet_length"]] = len(frame)
    for name, value in meta.items():
        if name in s:
            f[s[name]] = value
    g = pair.last = nat.fields(f)
    p = Pkt(frame)
    q = packet(frame)
    diffs: list[str] = []
    for stage in ("parse", "ingress", "egress"):
        py_fault = False
        try:
            getattr(py, stage)(f, p)
        except AssertionFailure:
            py_fault = True
        getattr(nat, stage)(g, q)
        diffs += compare(pair, stage, f, p, py_fault, g, q)
        if diffs or py_fault:
            return diffs
        if stage == "parse":
            for name, attr in (("parser_error", "error"), ("checksum_error", "cksum_error")):
                if f"standard_metadata.{name}" in s:
                    f[s[f"standard_metadata.{name}"]] = getattr(p, attr)
                    g[s[f"standard_metadata.{name}"]] = getattr(q, attr)
        if stage == "ingress":  # what the data plane does between the two pipelines
            p.exit = False
            q.exit = 0
            f[s["standard_metadata.egress_port"]] = f[s["standard_metadata.egress_spec"]]
            g[s["standard_metadata.egress_port"]] = g[s["standard_metadata.egress_spec"]]
    py_out, nat_out = py.deparse(f, p), nat.deparse(g, q)
    if py_out != nat_out:
        diffs.append(f"deparsed:\n python {py_out.hex()}\n native {nat_out.hex()}")
    return diffs


def compare(
    pair: Pair, stage: str, f: list[int], p: Pkt, py_fault: bool, g: np.ndarray, q: NativePkt
) -> list[str]:
    out = []
    if py_fault != bool(q.fault):
        out.append(f"{stage}: assertion failure python {py_fault}, native {bool(q.fault)}")
    names = {
        fi.slot: f"{h.name}.{fi.name}" for h in pair.py.layout.headers.values() for fi in h.fields
    }
    names |= {h.valid_slot: f"{h.name}.$valid$" for h in pair.py.layout.headers.values()}
    for slot, (a, b) in enumerate(zip(f, g.tolist(), strict=True)):
        if a != b:
            out.append(f"{stage}: slot {slot} ({names.get(slot)}) python {a} native {b}")
    for attr in PKT_FIELDS:
        a, b = int(getattr(p, attr)), getattr(q, attr)
        if attr == "pos" and p.error:
            continue  # where a failed extract leaves the position is not observable
        if a != b:
            out.append(f"{stage}: pkt.{attr} python {a} native {b}")
    for name, reg in pair.py.registers.items():
        nat_values = pair.nat_prog.registers[name].values.tolist()
        if reg.values != nat_values:
            i = next(
                i for i, (x, y) in enumerate(zip(reg.values, nat_values, strict=True)) if x != y
            )
            out.append(
                f"{stage}: register {name}[{i}] python {reg.values[i]} native {nat_values[i]}"
            )
    for name, c in pair.py.counters.items():
        nc = pair.nat_prog.counters[name]
        if c.packets != nc.packets.tolist() or c.bytes != nc.bytes.tolist():
            out.append(f"{stage}: counter {name} differs")
    return out


def ecn_frames(rng: random.Random, n: int) -> list[tuple[int, bytes]]:
    """Frames ecn.p4 meets: TCP and UDP over IPv4 with every ECN codepoint, bad checksums,
    options, fragments, truncations, PacketOuts (its config header) and noise."""
    frames = []
    for _ in range(n):
        kind = rng.random()
        dst = f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 4)}"
        ip = IP(src=f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 4)}", dst=dst,
                tos=rng.randint(0, 255), ttl=rng.randint(0, 3) if rng.random() < 0.1 else 64,
                flags=rng.choice([0, 2, 1]), frag=rng.choice([0, 0, 0, 5]))  # fmt: skip
        l4 = (
            TCP(sport=rng.randint(1, 65535), dport=rng.randint(1, 65535), flags="PA")
            if rng.random() < 0.7
            else UDP(sport=rng.randint(1, 65535), dport=rng.randint(1, 65535))
        )
        frame = bytes(
            Ether() / ip / l4 / bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 1400)))
        )
        port = rng.choice([1, 2, 3, 4])
        if kind < 0.1:  # a wrong IPv4 checksum
            frame = frame[:24] + bytes([frame[24] ^ 0xFF]) + frame[25:]
        elif kind < 0.2:  # cut anywhere
            frame = frame[: rng.randint(0, 60)]
        elif kind < 0.3:  # from the controller: ecn.p4's packet_out header, then anything
            opcode = rng.choice([0, 0, 1, 2, 255])
            header = struct.pack("!HBB", rng.randint(0, 300), opcode, rng.randint(0, 255))
            frame = header + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) + frame
            port = 255
        elif kind < 0.35:
            frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80)))
        frames.append((port, frame))
    return frames


def randomise_registers(pair: Pair, rng: random.Random) -> None:
    for name, reg in pair.py.registers.items():
        for i in range(reg.size):
            value = rng.getrandbits(reg.width) if rng.random() < 0.5 else rng.randint(0, 20000)
            reg.write(i, value)
            pair.nat_prog.registers[name].write(i, value)


def test_ecn_p4_runs_the_same_natively_on_randomised_packets_tables_and_registers() -> None:
    rng = random.Random(21)
    doc = json.loads(PROGRAM.json_path.read_text())
    pair = Pair.of(doc, seed=7)
    entries = fill_tables(pair, rng, per_table=40)
    assert entries > 60  # LPM routes over groups and members, port policies, tree leaves
    for i in range(4):  # and routes the frames' destinations (10.0.0-3.x) do hit, via groups
        for prog in (pair.py, pair.nat_prog):
            lpm = prog.tables["EcnIngress.ipv4_lpm"]
            with contextlib.suppress(EntryError):
                lpm.insert([(0x0A000000 | i << 8, 24)], 0, ActionCall(group=i + 1))
    randomise_registers(pair, rng)
    wrong, now_us = [], 1000
    for port, frame in ecn_frames(rng, 1500):
        now_us += rng.randint(1, 500)
        meta = {
            "intrinsic_metadata.ingress_global_timestamp": now_us,
            "intrinsic_metadata.egress_global_timestamp": now_us + rng.randint(0, 100),
            "queueing_metadata.enq_qdepth": rng.randint(0, 64),
            "queueing_metadata.deq_qdepth": rng.randint(0, 64),
            "queueing_metadata.deq_timedelta": rng.randint(0, 5000),
            "queueing_metadata.enq_timestamp": now_us,
        }
        diffs = run_both(pair, frame, port, meta)
        if diffs:
            wrong.append(f"frame {frame.hex()} on port {port}:\n" + "\n".join(diffs[:8]))
            if len(wrong) >= 3:
                break
    regs = pair.py.registers
    counted = sum(regs["tel_tx_pkts"].values)
    marked = sum(regs["tel_marked_pkts"].values)
    assert not wrong, "\n\n".join(wrong)
    assert counted > 0  # the comparison reached the telemetry ...
    assert marked > 0  # ... and RED marking


def unsigned(doc: dict[str, Any]) -> dict[str, Any]:
    """The program with its signed fields made unsigned (the corpus's arithmetic header is
    signed, which the native path refuses); both sides run this same program."""
    for t in doc["header_types"]:
        t["fields"] = [[name, width, False, *rest[1:]] for name, width, *rest in t["fields"]]
    return doc


@pytest.mark.parametrize("name", ["match_kinds", "hashes", "recirculate_resubmit", "truncate"])
def test_corpus_programs_run_the_same_natively(name: str) -> None:
    rng = random.Random(name)
    doc = unsigned(PROGRAMS[name]())
    try:
        pair = Pair.of(doc)
    except NativeUnavailable as e:
        pytest.fail(f"{name}: {e}")
    fill_tables(pair, rng, per_table=20)
    wrong = []
    cases = CASES[name]()
    for case in cases:
        for frame in (case.frame, case.frame[: rng.randint(0, len(case.frame))]):
            diffs = run_both(pair, frame, case.port, {})
            if diffs:
                wrong.append(f"{case.what} ({frame.hex()}):\n" + "\n".join(diffs[:8]))
    assert cases
    assert not wrong, "\n\n".join(wrong)


@pytest.mark.parametrize(
    ("name", "why"),
    [("vlan_stack", "header stacks"), ("union_rewrite", "header unions"),
     ("ipv4_options", "a varbit"), ("arith", "signed")],
)  # fmt: skip
def test_what_the_native_path_does_not_implement_is_refused_by_name(name: str, why: str) -> None:
    with pytest.raises(NativeUnavailable, match=why):
        NativeProgram(compile_program(PROGRAMS[name]()))


def test_a_table_change_reaches_the_native_lookup_at_once() -> None:
    """A route inserted, pointed at another member and deleted: each change is mirrored
    into the C arrays before the next packet, in step with the Python tables."""
    pair = Pair.of(json.loads(PROGRAM.json_path.read_text()))
    frame = bytes(Ether() / IP(dst="10.0.9.9") / TCP())
    egress_port = pair.py.slots["standard_metadata.egress_port"]
    forward = pair.py.action_by_name("EcnIngress.forward")

    def native_port() -> int:
        assert not run_both(pair, frame, 1, {})
        assert pair.last is not None
        return int(pair.last[egress_port])

    dropped = native_port()
    py_t, nat_t = (p.tables["EcnIngress.ipv4_lpm"] for p in (pair.py, pair.nat_prog))
    for port, member in ((3, 1), (5, 2)):
        for prog in (pair.py, pair.nat_prog):
            prog.profiles[py_t.profile.name].add_member(member, forward.id, (port, 0, 0))
    for t in (py_t, nat_t):
        t.insert([(0x0A000900, 24)], 0, ActionCall(member=1))
    assert native_port() == 3
    for t in (py_t, nat_t):
        t.modify([(0x0A000900, 24)], 0, ActionCall(member=2))
    assert native_port() == 5
    for t in (py_t, nat_t):
        t.delete([(0x0A000900, 24)], 0)
    assert native_port() == dropped != 5


def test_changes_in_a_batch_reach_the_native_lookup_together_when_it_ends() -> None:
    """What a P4Runtime Write's slice does (Switch.editing): a route inserted and pointed
    elsewhere inside batched() is not seen natively until the batch ends, then all at once."""
    prog = compile_program(json.loads(PROGRAM.json_path.read_text()))
    nat = NativeProgram(prog)
    frame = bytes(Ether() / IP(dst="10.0.9.9") / TCP())
    forward = prog.action_by_name("EcnIngress.forward")
    table = prog.tables["EcnIngress.ipv4_lpm"]

    def egress_spec() -> int:  # ingress alone, natively
        f = prog.layout.template()
        f[prog.slots["standard_metadata.ingress_port"]] = 1
        f[prog.slots["standard_metadata.packet_length"]] = len(frame)
        g, pkt = nat.fields(f), packet(frame)
        nat.parse(g, pkt)
        nat.ingress(g, pkt)
        return int(g[prog.slots["standard_metadata.egress_spec"]])

    for port, member in ((3, 1), (5, 2)):
        prog.profiles[table.profile.name].add_member(member, forward.id, (port, 0, 0))
    dropped = egress_spec()
    with nat.batched():
        table.insert([(0x0A000900, 24)], 0, ActionCall(member=1))
        table.modify([(0x0A000900, 24)], 0, ActionCall(member=2))
        with nat.batched():  # nested: the outer batch still holds the changes
            pass
        assert egress_spec() == dropped != 5
    assert egress_spec() == 5


def test_a_started_switch_runs_ecn_p4_natively_and_answers_a_packet_out() -> None:
    """The native engine end to end without root: a PacketOut from the controller goes
    through the C loop's inject ring, ecn.p4 writes the port's thresholds into the
    registers P4Runtime reads, and its acknowledgement comes back through the PacketIn
    ring, as the Python engine does it (tests/test_switch_golden.py's set_thresholds)."""
    program = compile_program(json.loads(PROGRAM.json_path.read_text()))
    switch = Switch({}, cpu_port=255)  # as tests/test_switch_golden.py
    acks: queue.Queue[bytes] = queue.Queue()
    switch.packet_in = acks.put
    switch.load(program)
    switch.start()
    try:
        assert switch.engine_note == "native (C)"
        regs = enc.encode_thresholds(3000, 9000, 0.2)
        payload = enc.ecn_config_payload(3, regs)
        switch.inject(struct.pack("!HBB", 0, enc.OP_SET_ECN, 0) + payload)
        ack = acks.get(timeout=10)
        assert ack == struct.pack("!HBB", 3, enc.REASON_CONFIG_ACK, 0) + payload
        got = {name: program.registers[name].read(3) for name in regs.as_dict()}
        assert got == regs.as_dict()
        assert switch.stats.from_cpu == 1
        assert switch.stats.to_cpu == 1
    finally:
        switch.stop()


def test_what_cannot_run_natively_runs_in_python_and_says_why() -> None:
    switch = Switch({})
    switch.load(compile_program(PROGRAMS["vlan_stack"]()))
    switch.start()
    try:
        assert switch.engine is None
        assert switch.engine_note.startswith("python (")
        assert "header stacks" in switch.engine_note
    finally:
        switch.stop()
    forced = Switch({}, dataplane="native")
    forced.load(compile_program(PROGRAMS["vlan_stack"]()))
    with pytest.raises(NativeUnavailable, match="header stacks"):
        forced.start()
    forced.stop()


def matching_values(table: Table, entry: Entry, rng: random.Random) -> tuple[int, ...]:
    """Key values that `entry` matches (others may match them too)."""
    out = []
    for kf, want in zip(table.key, entry.key, strict=True):
        if kf.match_type in ("exact", "valid"):
            out.append(want)
        elif kf.match_type == "lpm":
            value, plen = want
            out.append(value | rng.getrandbits(kf.width - plen) if plen < kf.width else value)
        elif kf.match_type in ("ternary", "optional"):
            value, mask = want
            out.append(value | (rng.getrandbits(kf.width) & ~mask))
        else:
            out.append(rng.randint(*want))
    return tuple(out)


def first_match(table: Table, values: tuple[int, ...]) -> Entry | None:
    """What a lookup must return, by brute force over every entry: the highest priority
    (the oldest among equals) where the table takes priorities, else the longest prefix."""

    def hit(kf: Any, want: Any, got: int) -> bool:
        if kf.match_type in ("exact", "valid"):
            return got == want
        if kf.match_type == "lpm":
            shift = kf.width - want[1]
            return got >> shift == want[0] >> shift
        if kf.match_type in ("ternary", "optional"):
            return got & want[1] == want[0]
        return want[0] <= got <= want[1]

    hits = [
        e
        for e in table.entries.values()
        if all(hit(kf, w, g) for kf, w, g in zip(table.key, e.key, values, strict=True))
    ]
    if table.needs_priority:
        return max(hits, key=lambda e: (e.priority, -e.seq), default=None)
    lpm = [i for i, kf in enumerate(table.key) if kf.match_type == "lpm"]
    return max(hits, key=lambda e: e.key[lpm[0]][1] if lpm else 0, default=None)


def churn(
    pair: Pair, tables: list[tuple[Table, Table]], rng: random.Random, done: Counter[str], n: int
) -> None:
    """n random changes, the same in both programs: entries inserted, modified and deleted;
    where the table is indirect, members and groups changed under the entries too."""
    for _ in range(n):
        py_t, nat_t = rng.choice(tables)
        ops = ["insert", "insert", "modify", "delete"] if py_t.entries else ["insert"]
        profile = py_t.profile
        if profile is not None:
            ops += ["new member", "member"] + (["group"] if profile.has_selector else [])
        op = rng.choice(ops)
        if op in ("new member", "member", "group"):
            assert profile is not None
            nat_profile = pair.nat_prog.profiles[profile.name]
            aid = rng.choice(sorted(py_t.action_ids))
            data = random_data(pair.py, aid, rng)
            if op == "group":  # 1-4 stay groups, their members drawn anew
                group, members = rng.randint(1, 4), rng.sample(range(1, 9), rng.randint(0, 4))
                for p in (profile, nat_profile):
                    p.set_group(group, members, create=False)
            elif op == "member":  # 1-8 stay members
                member = rng.randint(1, 8)
                for p in (profile, nat_profile):
                    p.modify_member(member, aid, data)
            else:  # told to nobody until an entry names it
                member = 9 + done[op]
                key = [random_match(k.match_type, k.width, rng) for k in py_t.key]
                for p in (profile, nat_profile):
                    p.add_member(member, aid, data)
                with contextlib.suppress(EntryError):
                    py_t.insert(key, 0, ActionCall(member=member))
                    nat_t.insert(key, 0, ActionCall(member=member))
            done[op] += 1
            continue
        if op == "insert":
            key = [random_match(k.match_type, k.width, rng) for k in py_t.key]
            priority = rng.choice([1, 2, 500]) if py_t.needs_priority else 0  # ties too
            call = random_call(pair, py_t, rng)
            with contextlib.suppress(EntryError):  # a duplicate match: skip both
                py_t.insert(key, priority, call)
                nat_t.insert(key, priority, call)
                done[op] += 1
            continue
        entry = rng.choice(list(py_t.entries.values()))
        if op == "modify":
            call = random_call(pair, py_t, rng)
            for t in (py_t, nat_t):
                t.modify(list(entry.key), entry.priority, call)
        else:
            for t in (py_t, nat_t):
                t.delete(list(entry.key), entry.priority)
        done[op] += 1


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("name", ["ecn", "match_kinds"])
def test_entries_changed_one_at_a_time_leave_the_lookups_a_rebuild_would_make(
    name: str, batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inserts, modifies and deletes in random order, and members and groups changed under
    the entries that name them (issue 21: an entry costs one entry's work, not the
    table's): the Python lookup finds what a brute-force search finds, the native arrays
    equal those a rebuild from every entry makes, and packets run the same; each round's
    changes applied as they come or, as a P4Runtime Write's slice does, in one batch
    (spliced in, or past a few changes to one table rebuilt at the batch's end)."""
    rng = random.Random(f"churn-{name}")
    ecn = name == "ecn"
    if ecn:  # LPM over members and groups, exact, and exact + range (priorities)
        doc = json.loads(PROGRAM.json_path.read_text())
    else:  # ternary + range + ternary and exact + LPM, their const entries taken out
        doc = unsigned(PROGRAMS[name]())
        for pipe in doc["pipelines"]:
            for t in pipe["tables"]:
                t.pop("entries", None)
    pair = Pair.of(doc)
    fill_tables(pair, rng, per_table=10)
    tables = [(p, n) for p, n in pair.both_tables() if p.key and not p.const_entries]
    done: Counter[str] = Counter()
    crowded: Counter[bool] = Counter()  # Batch.crowded's answers: splice it, or rebuild
    judge = Batch.crowded

    def counted(batch: Batch, i: int, mirror: Any) -> bool:
        answer = judge(batch, i, mirror)
        crowded[answer] += 1
        return answer

    monkeypatch.setattr(Batch, "crowded", counted)
    for round_ in range(24):
        batch = pair.nat.batched() if batched else contextlib.nullcontext()
        with batch:
            churn(pair, tables, rng, done, rng.randint(5, 40))
        for py_t, _ in tables:
            for entry in py_t.entries.values():
                values = matching_values(py_t, entry, rng)
                assert py_t.lookup(values) is first_match(py_t, values), (py_t.name, values)
        frames = ecn_frames(rng, 25) if ecn else [(c.port, c.frame) for c in CASES[name]()]
        for port, frame in frames:
            diffs = run_both(pair, frame, port, {})
            assert not diffs, f"round {round_}, frame {frame.hex()}:\n" + "\n".join(diffs[:8])
        for i in range(len(pair.nat._tables)):
            churned = pair.nat._entries[i][1]
            pair.nat.sync_table(i)
            rebuilt = pair.nat._entries[i][1]
            for array, a in churned.items():
                np.testing.assert_array_equal(a, rebuilt[array], err_msg=f"{i} {array}")
    assert min(done[op] for op in ("insert", "modify", "delete")) > 40, done
    assert not ecn or min(done[op] for op in ("new member", "member", "group")) > 5, done
    assert (crowded[False] > 20 and crowded[True] > 20) if batched else not crowded, crowded
