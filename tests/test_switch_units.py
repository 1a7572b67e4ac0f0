"""Embedded target building blocks: BMv2's hashes, tables, selectors, queues, digests."""

import pytest

from ecntune.switch import hashes
from ecntune.switch.digests import DigestConfig, DigestEngine
from ecntune.switch.tables import ActionCall, ActionProfile, EntryError, KeyField, Table, resolve
from ecntune.switch.traffic_manager import TrafficManager

CHECK = b"123456789"


def test_hashes_match_the_standard_check_values():
    assert hashes.crc32(CHECK) == 0xCBF43926
    assert hashes.crc16(CHECK) == 0xBB3D  # CRC-16/ARC, BMv2's crc16
    assert hashes.crc_ccitt(CHECK) == 0x29B1  # CRC-16/CCITT-FALSE, BMv2's crcCCITT
    assert hashes.ALGORITHMS["crc32_custom"](CHECK) == 0xCBF43926
    # RFC 1071 example IPv4 header (checksum field zeroed) -> 0xb861
    hdr = bytes.fromhex("45000073000040004011" + "0000" + "c0a80001c0a800c7")
    assert hashes.csum16(hdr) == 0xB861
    assert hashes.xor16(b"\x12\x34\x56\x78") == 0x1234 ^ 0x5678
    assert hashes.identity(b"\x01\x02") == 0x0102


def test_fields_pack_msb_first_and_pad_at_the_end():
    assert hashes.pack_bits([0xA, 0x3], [4, 2]) == bytes([0b1010_1100])
    assert hashes.pack_bits([0x0A000001], [32]) == bytes([10, 0, 0, 1])
    assert len(hashes.pack_bits([1, 2, 3, 4, 5], [32, 32, 8, 16, 16])) == 13


def make_table(*kinds: str, widths=None, kind="simple", profile=None) -> Table:
    widths = widths or [32] * len(kinds)
    key = tuple(KeyField(f"f{i}", k, w) for i, (k, w) in enumerate(zip(kinds, widths, strict=True)))
    return Table("t", 1, key, frozenset({1, 2}), 64, kind, profile, with_counters=True)


def test_exact_and_lpm_lookup():
    t = make_table("exact", "lpm")
    t.insert([7, (0x0A000000, 8)], 0, ActionCall(1, (1,)))
    t.insert([7, (0x0A010000, 16)], 0, ActionCall(1, (2,)))
    assert t.lookup((7, 0x0A010203)).call.data == (2,)
    assert t.lookup((7, 0x0A020203)).call.data == (1,)
    assert t.lookup((8, 0x0A010203)) is None
    with pytest.raises(EntryError) as e:
        t.insert([7, (0x0A010000, 16)], 0, ActionCall(1, (3,)))
    assert e.value.code == "ALREADY_EXISTS"
    with pytest.raises(EntryError, match="past the prefix"):
        t.insert([7, (0x0A010001, 16)], 0, ActionCall(1, ()))
    t.delete([7, (0x0A010000, 16)], 0)
    assert t.lookup((7, 0x0A010203)).call.data == (1,)


def test_ternary_range_priorities():
    t = make_table("ternary", "range", widths=[8, 16])
    t.insert([(0x10, 0xF0), (0, 100)], 10, ActionCall(1, (1,)))
    t.insert([(0x12, 0xFF), (0, 0xFFFF)], 20, ActionCall(1, (2,)))
    assert t.lookup((0x12, 50)).call.data == (2,)  # higher priority wins
    assert t.lookup((0x13, 50)).call.data == (1,)
    assert t.lookup((0x13, 500)) is None
    with pytest.raises(EntryError, match="priority"):
        t.insert([(0, 0), (0, 1)], 0, ActionCall(1, ()))
    with pytest.raises(EntryError, match="action not allowed"):
        t.insert([(0, 0), (0, 1)], 5, ActionCall(9, ()))


def test_selector_picks_by_hash_modulo_members_like_bmv2():
    prof = ActionProfile("sel", 1, 16, "crc16", [32, 16])
    for m in (10, 11, 12):
        prof.add_member(m, 1, (m,))
    prof.set_group(5, [12, 10, 11], create=True)
    t = make_table("exact", kind="indirect_ws", profile=prof)
    t.insert([1], 0, ActionCall(group=5))
    e = t.lookup((1,))
    picks = {resolve(t, e, lambda s=s: (0x0A000001, s))[1][0] for s in range(200)}
    assert picks == {10, 11, 12}
    h = hashes.crc16(hashes.pack_bits([0x0A000001, 7], [32, 16]))
    assert resolve(t, e, lambda: (0x0A000001, 7))[1] == ((10, 11, 12)[h % 3],)
    with pytest.raises(EntryError, match="still in a group"):
        prof.delete_member(10)
    prof.set_group(5, [], create=False)
    assert resolve(t, e, lambda: (0, 0)) is None  # an empty group runs nothing


def test_queue_rate_depth_and_tail_drop():
    tm = TrafficManager()
    tm.set_depth(3, 1)
    tm.set_rate_pps(100, 1)
    assert [tm.enqueue(1, i, 100, now=0.0) for i in range(5)] == [True, True, True, False, False]
    assert tm.queue(1).dropped == 2
    assert tm.departures(0.0) == [(1, 0, 2)]  # an idle port sends at once, two left behind
    assert tm.departures(0.0099) == []
    assert tm.departures(0.0101) == [(1, 1, 1)]  # then one packet per 10 ms
    assert [p for _, p, _ in tm.departures(1.0)] == [2]
    tm.set_rate_bps(8_000, 2)  # 1000 bytes take one second
    tm.enqueue(2, "a", 1000, now=0.0)
    tm.enqueue(2, "b", 1000, now=0.0)
    assert tm.departures(0.5) == [(2, "a", 1)]
    assert tm.next_departure() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        tm.set_rate_pps(0)


def test_digests_batch_time_out_and_suppress_duplicates_until_acked():
    sent = []
    eng = DigestEngine(lambda lid, list_id, s: sent.append((list_id, list(s))))
    eng.learn(1, (1,), 0.0)
    assert sent == []  # not configured: dropped
    eng.configure(1, DigestConfig(max_timeout_ns=10_000_000, max_list_size=3, ack_timeout_ns=0))
    eng.learn(1, (1,), 0.0)
    eng.learn(1, (2,), 0.001)
    assert sent == []
    assert eng.poll(0.005) == pytest.approx(0.01)
    eng.poll(0.011)
    assert sent == [(1, [(1,), (2,)])]
    eng.learn(1, (1,), 0.02)  # same data, not acked yet: suppressed
    eng.learn(1, (3,), 0.02)
    eng.learn(1, (4,), 0.02)
    eng.learn(1, (5,), 0.02)  # list full at 3 samples
    assert sent[-1] == (2, [(3,), (4,), (5,)])
    eng.ack(1, 1)
    eng.learn(1, (1,), 0.03)
    eng.poll(0.05)
    assert sent[-1] == (3, [(1,)])


def test_digest_lists_keep_to_the_timeouts_clock():
    """A steady stream of samples gets a list exactly every timeout (the controller ticks on
    them), not one timeout after each list's own first sample, which drifted later by the
    wait for it; after a pause, a sample waits for the clock's next tick, never longer than
    the timeout."""
    sent, now = [], [0.0]
    eng = DigestEngine(lambda lid, list_id, s: sent.append((round(now[0], 3), list(s))))
    eng.configure(1, DigestConfig(max_timeout_ns=10_000_000, max_list_size=0))

    def poll(at: float) -> float | None:
        now[0] = at
        return eng.poll(at)

    for i in range(10):  # a sample every 3 ms from 1 ms on, polled every millisecond
        for ms in range(3 * i, 3 * i + 3):
            if ms == 3 * i + 1:
                eng.learn(1, (i,), ms / 1000)
            poll(ms / 1000)
    poll(0.031)
    assert sent == [  # the clock's ticks: 11, 21, 31 ms
        (0.011, [(0,), (1,), (2,), (3,)]), (0.021, [(4,), (5,), (6,)]),
        (0.031, [(7,), (8,), (9,)]),
    ]  # fmt: skip
    eng.learn(1, (10,), 0.0555)  # after a pause: the clock's next tick, 61 ms
    assert poll(0.056) == pytest.approx(0.061)
    poll(0.061)
    assert sent[-1] == (0.061, [(10,)])


def test_digest_ack_timeout_releases_data():
    sent = []
    eng = DigestEngine(lambda lid, list_id, s: sent.append(list(s)))
    eng.configure(7, DigestConfig(max_timeout_ns=0, max_list_size=1, ack_timeout_ns=1_000_000))
    eng.learn(7, (9,), 0.0)
    eng.learn(7, (9,), 0.0005)
    assert len(sent) == 1
    eng.poll(0.0011)
    eng.learn(7, (9,), 0.0012)
    assert len(sent) == 2
