"""Malformed and out-of-order P4Runtime requests against the embedded target, with our raw
client: each gets the canonical code the spec names, and the server goes on serving
(issue 18 (9): wrong codes; (8): errors that leaked as UNKNOWN)."""

from __future__ import annotations

import functools
import queue
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from finsy.proto import p4r
from google.protobuf.descriptor import FieldDescriptor

from ecntune.p4runtime_client import (
    P4RuntimeClient,
    P4RuntimeClientError,
    as_entity,
    load_p4info,
)
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.switch.p4runtime_server import MAX_STREAMS
from ecntune.targets import EMBEDDED, SwitchSpec, start, stop

A = p4r.SetForwardingPipelineConfigRequest.Action


@pytest.fixture
def client() -> Iterator[P4RuntimeClient]:
    spec = SwitchSpec.on_free_ports({})
    proc = start(EMBEDDED, spec)
    try:
        with P4RuntimeClient(spec.grpc_addr, election_id=5) as c:
            assert c.become_primary()
            c.set_pipeline(load_p4info(PROGRAM.p4info_path), PROGRAM.json_path.read_bytes())
            yield c
            # whatever was sent, the server still answers
            assert c.read_register("ecn_kmin", 0) == 0
    finally:
        stop(proc)


def pipeline(c: P4RuntimeClient, action: int, config: bool) -> str:
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=0, election_id=c.election_id, action=action
    )
    if config:
        req.config.p4info.CopyFrom(load_p4info(PROGRAM.p4info_path))
        req.config.p4_device_config = PROGRAM.json_path.read_bytes()
    with pytest.raises(P4RuntimeClientError) as e:
        c._call(c.stub.SetForwardingPipelineConfig, req)
    return e.value.code


def test_commit_without_a_saved_config_or_with_one_of_its_own(client: P4RuntimeClient):
    assert pipeline(client, A.COMMIT, config=False) == "NOT_FOUND"
    assert pipeline(client, A.COMMIT, config=True) == "INVALID_ARGUMENT"


def test_negative_extern_indices_are_malformed_not_out_of_range(client: P4RuntimeClient):
    with pytest.raises(P4RuntimeClientError) as write:
        client.modify(client.register_entry("ecn_kmin", -1, 5))
    assert [code for code, _ in write.value.errors] == ["INVALID_ARGUMENT"]
    with pytest.raises(P4RuntimeClientError) as read:
        client.read(client.register_entry("ecn_kmin", -1))
    assert read.value.code == "INVALID_ARGUMENT"
    with pytest.raises(P4RuntimeClientError) as past:
        client.read(client.register_entry("ecn_kmin", 1 << 20))
    assert past.value.code == "OUT_OF_RANGE"


def test_an_empty_entity_is_the_clients_error(client: P4RuntimeClient):
    with pytest.raises(P4RuntimeClientError) as write:
        client.write(("MODIFY", p4r.Entity()))
    assert [code for code, _ in write.value.errors] == ["INVALID_ARGUMENT"]
    with pytest.raises(P4RuntimeClientError) as read:
        client.read(p4r.Entity())
    assert read.value.code == "INVALID_ARGUMENT"


def test_reading_a_meter_that_does_not_exist(client: P4RuntimeClient):
    with pytest.raises(P4RuntimeClientError) as read:
        client.read(p4r.Entity(meter_entry=p4r.MeterEntry(meter_id=12345)))
    assert read.value.code == "NOT_FOUND"


def test_re_arbitration_for_another_device_is_a_failed_precondition(client: P4RuntimeClient):
    client.device_id = 7
    with pytest.raises(P4RuntimeClientError) as e:
        client.become_primary()
    assert e.value.code == "FAILED_PRECONDITION"
    client.device_id = 0
    with P4RuntimeClient(client.address, device_id=7, election_id=6) as other:
        with pytest.raises(P4RuntimeClientError) as first:
            other.become_primary()
        assert first.value.code == "NOT_FOUND"  # a first arbitration for no such device


def codes(c: P4RuntimeClient, kind: str, *objs: object) -> list[str]:
    """The per-update codes of one Write (OK where it succeeded)."""
    try:
        c.write(*((kind, o) for o in objs))
    except P4RuntimeClientError as e:
        return [code for code, _ in e.errors]
    return ["OK"] * len(objs)


@pytest.mark.parametrize("slice_ms", ["0", "1", "1000"])
def test_a_writes_updates_apply_in_order_however_they_are_sliced(slice_ms: str):
    """A Write applies its updates in slices under the switch lock (`--write-slice-ms`: one
    update per slice, the default, all in one): every update gets its own code, in order,
    and each good one applies, those after a failed one too."""
    spec = SwitchSpec.on_free_ports({}, extra_args=["--write-slice-ms", slice_ms])
    proc = start(EMBEDDED, spec)
    try:
        with P4RuntimeClient(spec.grpc_addr, election_id=5) as c:
            assert c.become_primary()
            c.set_pipeline(load_p4info(PROGRAM.p4info_path), PROGRAM.json_path.read_bytes())
            size = c.n.get("registers", "ecn_kmin").size
            bad = {7, 40, 41}  # past the register's end
            indices = [size + i if i in bad else i % size for i in range(300)]
            updates = [c.register_entry("ecn_kmin", i, 1000 + n) for n, i in enumerate(indices)]
            got = codes(c, "MODIFY", *updates)
            assert got == ["OUT_OF_RANGE" if n in bad else "OK" for n in range(300)]
            last = {i: 1000 + n for n, i in enumerate(indices) if n not in bad}
            assert all(c.read_register("ecn_kmin", i) == v for i, v in last.items())
    finally:
        stop(proc)


def test_members_and_groups_in_use_cannot_be_deleted(client: P4RuntimeClient):
    """Issue 18 (6): deleting what a table entry points at returned OK (spec §9.2.2)."""
    sel = enc.ECMP_SELECTOR
    hop = {"port": 1, "src_mac": 1, "dst_mac": 2}
    client.insert(*(client.member(sel, m, enc.ACTION_FORWARD, hop) for m in (1, 2, 3)))
    client.insert(client.group(sel, 10, [1, 2]))
    by_group = client.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (0x0A000000, 8)}, group=10)
    by_member = client.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (0x0B000000, 8)}, member=3)
    client.insert(by_group, by_member)
    assert codes(client, "DELETE", client.group(sel, 10, [])) == ["FAILED_PRECONDITION"]
    assert codes(client, "DELETE", client.member(sel, 3, enc.ACTION_FORWARD, hop)) == [
        "FAILED_PRECONDITION"
    ]
    client.delete(by_group, by_member)  # once nothing points at them, they go
    client.delete(client.group(sel, 10, []))
    client.delete(*(client.member(sel, m, enc.ACTION_FORWARD, hop) for m in (1, 2, 3)))


def test_invalid_members_and_groups_are_refused(client: P4RuntimeClient):
    """Issue 18 (7): a member whose action its table cannot run, weights <= 0, repeats."""
    sel = enc.ECMP_SELECTOR
    assert codes(client, "INSERT", client.member(sel, 1, "EcnIngress.drop", {})) == [
        "INVALID_ARGUMENT"
    ]
    hop = {"port": 1, "src_mac": 1, "dst_mac": 2}
    client.insert(client.member(sel, 1, enc.ACTION_FORWARD, hop))
    zero = client.group(sel, 10, [1])
    zero.members[0].weight = 0
    assert codes(client, "INSERT", zero) == ["INVALID_ARGUMENT"]
    assert codes(client, "INSERT", client.group(sel, 11, [1, 1])) == ["INVALID_ARGUMENT"]
    assert codes(client, "INSERT", client.group(sel, 12, [1])) == ["OK"]


def test_idle_streams_cannot_starve_the_server(client: P4RuntimeClient):
    """Issue 18 (2): 16 open StreamChannels held all 16 worker threads; Capabilities, Write and
    new arbitrations hung. Streams past the limit are refused, the rest keeps answering."""
    import queue

    import grpc

    held: list[queue.Queue] = []
    calls = []
    for _ in range(16):
        requests: queue.Queue = queue.Queue()
        held.append(requests)
        calls.append(client.stub.StreamChannel(iter(requests.get, None)))
    try:
        caps = client.stub.Capabilities(p4r.CapabilitiesRequest(), timeout=10)
        assert caps.p4runtime_api_version
        client.modify(client.register_entry("ecn_kmin", 1, 5))  # writes go through too
        over = 16 - (MAX_STREAMS - 1)  # the fixture's client holds one stream already
        deadline = time.monotonic() + 10  # refused streams end at once; admitted ones wait
        while sum(c.done() for c in calls) < over and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = [c.code() for c in calls if c.done()]
        assert ended == [grpc.StatusCode.RESOURCE_EXHAUSTED] * over
    finally:
        for requests in held:
            requests.put(None)
        for call in calls:
            call.cancel()


def test_a_pipeline_larger_than_grpcs_default_4_mb_is_accepted(client: P4RuntimeClient):
    """Issue 18 (12): BMv2 takes messages up to 256 MB; a 6 MB device config must load."""
    big = PROGRAM.json_path.read_bytes() + b" " * (6 << 20)  # still the same JSON
    client.set_pipeline(load_p4info(PROGRAM.p4info_path), big)


def pre(**entry: object) -> p4r.Entity:
    return p4r.Entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(**entry))


def group(gid: int, *replicas: tuple[int, int]) -> p4r.Entity:
    reps = [p4r.Replica(egress_port=port, instance=inst) for port, inst in replicas]
    return pre(multicast_group_entry=p4r.MulticastGroupEntry(multicast_group_id=gid, replicas=reps))


def test_multicast_groups_and_clone_sessions_read_back_one_at_a_time(client: P4RuntimeClient):
    """Issue 18 (10): reading one group returned every group, and replicas came back in the
    `port` bytes (p4runtime-shell, reading `egress_port` as BMv2 fills it, saw port 0)."""
    client.insert(group(5, (1, 0), (2, 0)), group(6, (3, 1)))
    client.insert(pre(clone_session_entry=p4r.CloneSessionEntry(
        session_id=9, replicas=[p4r.Replica(egress_port=4, instance=0)])))  # fmt: skip
    one = client.read(group(6))
    assert len(one) == 1
    g = one[0].packet_replication_engine_entry.multicast_group_entry
    assert g.multicast_group_id == 6
    assert [(r.egress_port, r.instance) for r in g.replicas] == [(3, 1)]
    assert len(client.read(group(0))) == 2  # id 0 reads them all
    session = client.read(pre(clone_session_entry=p4r.CloneSessionEntry(session_id=9)))
    assert [
        r.egress_port
        for r in session[0].packet_replication_engine_entry.clone_session_entry.replicas
    ] == [4]


def test_reserved_ids_and_repeated_replicas_are_refused(client: P4RuntimeClient):
    """Issue 18 (7): multicast group 0, clone session 0, a (port, instance) twice."""
    assert codes(client, "INSERT", group(0, (1, 0))) == ["INVALID_ARGUMENT"]
    assert codes(client, "INSERT", group(7, (1, 0), (1, 0))) == ["INVALID_ARGUMENT"]
    assert codes(client, "INSERT", group(7, (1, 0), (1, 1))) == ["OK"]
    zero = pre(clone_session_entry=p4r.CloneSessionEntry(
        session_id=0, replicas=[p4r.Replica(egress_port=4, instance=0)]))  # fmt: skip
    assert codes(client, "INSERT", zero) == ["INVALID_ARGUMENT"]


def test_no_pipeline_is_a_failed_precondition(client: P4RuntimeClient):
    """Issue 18 (10): GetForwardingPipelineConfig before any pipeline answered an empty OK;
    BMv2 says FAILED_PRECONDITION, in words clients such as finsy recognise."""
    spec = SwitchSpec.on_free_ports({})
    proc = start(EMBEDDED, spec)
    try:
        with P4RuntimeClient(spec.grpc_addr, election_id=5) as bare:
            with pytest.raises(P4RuntimeClientError) as e:
                bare._call(bare.stub.GetForwardingPipelineConfig,
                           p4r.GetForwardingPipelineConfigRequest(device_id=0))  # fmt: skip
            assert e.value.code == "FAILED_PRECONDITION"
            assert "No forwarding pipeline config" in str(e.value)
    finally:
        stop(proc)


@pytest.mark.parametrize(
    "device_config", [b"[]", b"1", b"null", b'"x"', b"[" * 100_000 + b"]" * 100_000]
)
def test_device_configs_that_are_not_programs_are_invalid_arguments(client, device_config):
    """Issue 18 (8): these leaked as UNKNOWN/INTERNAL (AttributeError, RecursionError)."""
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=0, election_id=client.election_id, action=A.VERIFY_AND_COMMIT
    )
    req.config.p4info.CopyFrom(load_p4info(PROGRAM.p4info_path))
    req.config.p4_device_config = device_config
    with pytest.raises(P4RuntimeClientError) as e:
        client._call(client.stub.SetForwardingPipelineConfig, req)
    assert e.value.code == "INVALID_ARGUMENT"


def test_a_p4info_that_does_not_fit_the_program_and_unknown_update_types(client):
    """Issue 18 (8): a P4Info table naming an action id nobody has; an Update.type 99."""
    p4info = load_p4info(PROGRAM.p4info_path)
    p4info.tables[0].action_refs.add(id=0x7FFFFFFF)
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=0, election_id=client.election_id, action=A.VERIFY_AND_COMMIT
    )
    req.config.p4info.CopyFrom(p4info)
    req.config.p4_device_config = PROGRAM.json_path.read_bytes()
    with pytest.raises(P4RuntimeClientError) as e:
        client._call(client.stub.SetForwardingPipelineConfig, req)
    assert e.value.code == "INVALID_ARGUMENT"
    write = p4r.WriteRequest(device_id=0, election_id=client.election_id)
    entity = p4r.Entity(register_entry=client.register_entry("ecn_kmin", 1, 5))
    write.updates.add(type=99, entity=entity)
    with pytest.raises(P4RuntimeClientError) as bad:
        client._call(client.stub.Write, write)
    assert [code for code, _ in bad.value.errors] == ["INVALID_ARGUMENT"]


def test_deleting_a_digest_that_was_never_configured_is_not_found(client: P4RuntimeClient):
    """Issue 18 (7): the DELETE used to answer OK for a digest nobody had configured."""
    digest_id = client.n.get("digests", enc.DIGEST).preamble.id
    entry = p4r.Entity(digest_entry=p4r.DigestEntry(digest_id=digest_id))
    with pytest.raises(P4RuntimeClientError) as e:
        client.write(("DELETE", entry))
    assert [code for code, _ in e.value.errors] == ["NOT_FOUND"]
    client.enable_digest(enc.DIGEST)
    client.write(("DELETE", entry))  # configured: deleted


def test_a_request_for_a_role_the_switch_does_not_have_is_not_found(client: P4RuntimeClient):
    """Issue 18 (7): a Write, Read or pipeline push naming a role other than the default
    one was served as the default role's; the spec answers NOT_FOUND for an unknown role."""
    write = p4r.WriteRequest(device_id=0, election_id=client.election_id, role="backup")
    write.updates.add(
        type=p4r.Update.MODIFY,
        entity=p4r.Entity(register_entry=client.register_entry("ecn_kmin", 1, 5)),
    )
    with pytest.raises(P4RuntimeClientError) as w:
        client._call(client.stub.Write, write)
    assert w.value.code == "NOT_FOUND"
    assert client.read_register("ecn_kmin", 1) == 0  # nothing written
    read = p4r.ReadRequest(device_id=0, role="backup")
    read.entities.add(register_entry=client.register_entry("ecn_kmin", 1))
    with pytest.raises(grpc.RpcError) as r:
        list(client.stub.Read(read))  # a server stream: the error comes with the first read
    assert r.value.code() == grpc.StatusCode.NOT_FOUND


def _push(client: P4RuntimeClient, p4info: object, device_config: bytes) -> str:
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=0, election_id=client.election_id, action=A.VERIFY_AND_COMMIT
    )
    req.config.p4info.CopyFrom(p4info)
    req.config.p4_device_config = device_config
    with pytest.raises(P4RuntimeClientError) as e:
        client._call(client.stub.SetForwardingPipelineConfig, req)
    return f"{e.value.code}: {e.value}"


def _widen_a_match_field(p4info) -> None:
    p4info.tables[0].match_fields[0].bitwidth += 1


def _resize_a_register(p4info) -> None:
    p4info.registers[0].size += 1


def _repeat_an_id(p4info) -> None:
    p4info.registers[1].preamble.id = p4info.registers[0].preamble.id


def _drop_a_digest_field(p4info) -> None:
    struct = p4info.type_info.structs[p4info.digests[0].type_spec.struct.name]
    del struct.members[-1]


@pytest.mark.parametrize(
    "mutate", [_widen_a_match_field, _resize_a_register, _repeat_an_id, _drop_a_digest_field]
)
def test_a_p4info_that_disagrees_with_the_program_is_refused(client, mutate):
    """Issue 18 (7): a P4Info whose widths, sizes, ids or digest fields do not match the JSON
    was accepted (and entries written through it then matched or indexed something else;
    digests would carry more members than the P4Info declares)."""
    p4info = load_p4info(PROGRAM.p4info_path)
    mutate(p4info)
    assert _push(client, p4info, PROGRAM.json_path.read_bytes()).startswith("INVALID_ARGUMENT")


def test_a_json_with_an_unknown_match_type_is_refused(client):
    """Issue 18 (7): `match_type: "bogus"` loaded, and its table matched as a range."""
    import json

    doc = json.loads(PROGRAM.json_path.read_bytes())
    table = next(t for p in doc["pipelines"] for t in p["tables"] if t["key"])
    table["key"][0]["match_type"] = "bogus"
    got = _push(client, load_p4info(PROGRAM.p4info_path), json.dumps(doc).encode())
    assert got.startswith("INVALID_ARGUMENT")
    assert "bogus" in got


def test_reads_follow_every_change_of_an_entry(client: P4RuntimeClient):
    """Read encodes an entry once and sends that encoding again (issue 21): a modify, new
    controller metadata, a delete and a re-insert with other parameters each show in the
    very next read, for one entry and for the wildcard."""

    def entry(port_class: int, metadata: int = 0) -> Any:
        params = {"port_class": port_class, "log2_alpha": 3, "rate_offset": 0}
        te = client.table_entry(
            enc.TABLE_POLICY_PORT, {enc.POLICY_PORT_KEY: 5}, enc.ACTION_POLICY_CLASS, params
        )
        te.controller_metadata = metadata
        return te

    def read() -> list[tuple[bytes, int]]:
        one = client.read(client.table_entry(enc.TABLE_POLICY_PORT, {enc.POLICY_PORT_KEY: 5}))
        every = client.read(client.table_entry(enc.TABLE_POLICY_PORT))
        assert [e.SerializeToString() for e in one] == [e.SerializeToString() for e in every]
        return [
            (e.table_entry.action.action.params[0].value, e.table_entry.controller_metadata)
            for e in every
        ]

    client.insert(entry(1))
    assert read() == read() == [(b"\x01", 0)]  # the second read sends the cached encoding
    client.modify(entry(2))
    assert read() == [(b"\x02", 0)]
    client.modify(entry(2, metadata=77))
    assert read() == [(b"\x02", 77)]
    client.delete(entry(2))
    assert read() == []
    client.insert(entry(9))
    assert read() == [(b"\x09", 0)]


def test_an_lpm_entry_with_a_priority_is_refused(client: P4RuntimeClient):
    """Issue 18 (7): a non-zero priority on a table without ternary/range/optional fields
    was dropped silently (the spec: INVALID_ARGUMENT)."""
    client.insert(client.member(enc.ECMP_SELECTOR, 1, enc.ACTION_FORWARD,
                                {"port": 1, "src_mac": 1, "dst_mac": 2}))  # fmt: skip
    entry = client.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (0x0A000001, 32)}, member=1)
    entry.priority = 10
    with pytest.raises(P4RuntimeClientError) as e:
        client.insert(entry)
    assert [code for code, _ in e.value.errors] == ["INVALID_ARGUMENT"]
    entry.priority = 0
    client.insert(entry)
    assert len(client.read(client.table_entry(enc.TABLE_IPV4, {}))) == 1


# -- a seeded, bounded fuzz of Write, Read and the stream (issue 18's acceptance) -------------

INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1),
    FieldDescriptor.TYPE_ENUM: (-(1 << 31), (1 << 31) - 1),
}
# what may come back: a canonical code for the client's mistake, never a crash or a hang
CLIENT_ERRORS = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "OUT_OF_RANGE",
                 "FAILED_PRECONDITION", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                 "UNIMPLEMENTED"}  # fmt: skip
CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
FUZZ_DEADLINE_S = 10.0  # no single small request may take longer, even on a busy machine


def mutate(msg: Any, rng: random.Random, depth: int = 0) -> None:
    """Change one field somewhere in `msg`, in place: a scalar to an edge or random value
    of its type, a sub-message recursed into, cleared or set empty, a repeated field
    grown, emptied or one element mutated."""
    fields = msg.DESCRIPTOR.fields
    if not fields:
        return
    f = rng.choice(fields)
    value = getattr(msg, f.name)
    repeated = f.is_repeated
    if f.message_type is not None:
        if repeated:
            choice = rng.random()
            if value and choice < 0.6 and depth < 8:
                mutate(rng.choice(value), rng, depth + 1)
            elif choice < 0.85:
                mutate(value.add(), rng, depth + 1)
            else:
                msg.ClearField(f.name)
        elif rng.random() < 0.8 and depth < 8:
            mutate(value, rng, depth + 1)
        elif rng.random() < 0.5:
            msg.ClearField(f.name)
        else:
            value.SetInParent()
        return
    new = scalar(f, rng)
    if repeated:
        value.append(new)
    else:
        setattr(msg, f.name, new)


def scalar(f: Any, rng: random.Random) -> Any:
    if f.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if f.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(["", "x", "ecn_kmin", enc.TABLE_IPV4, "\u00e9" * rng.randint(1, 40)])
    if f.type == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 2, 3, 4, 6, 8, 9, 17, 300]))
    lo, hi = INT_RANGES.get(f.type, (0, 1 << 16))
    small = rng.randint(-2, 300)
    return min(hi, max(lo, rng.choice([lo, hi, hi - 1, 0, 1, small, rng.randint(lo, hi)])))


def valid_entities(c: P4RuntimeClient) -> list[p4r.Entity]:
    """One well-formed entity of each kind the program has, to mutate from."""
    sel = enc.ECMP_SELECTOR
    hop = {"port": 1, "src_mac": 1, "dst_mac": 2}
    counter = c.n.get("counters", enc.DROP_COUNTER).preamble.id
    digest = c.n.get("digests", enc.DIGEST).preamble.id
    objs = [
        c.member(sel, 1, enc.ACTION_FORWARD, hop),
        c.group(sel, 10, [1]),
        c.table_entry(enc.TABLE_IPV4, {"hdr.ipv4.dst_addr": (0x0A000001, 32)}, member=1),
        c.register_entry("ecn_kmin", 1, 5),
        p4r.CounterEntry(counter_id=counter, index=p4r.Index(index=1)),
        p4r.DigestEntry(digest_id=digest, config=p4r.DigestEntry.Config(max_list_size=4)),
    ]
    return [as_entity(o) for o in objs] + [group(5, (1, 0))]


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_writes_reads_and_stream_messages_get_canonical_codes(
    client: P4RuntimeClient, seed: int
):
    """300 mutated Writes and Reads and 100 mutated stream messages: every answer is OK or
    a canonical client-error code, within the deadline; the fixture then checks the server
    still answers, and here the data plane still takes a control packet."""
    rng = random.Random(seed)
    bases = valid_entities(client)
    client.write(*(("INSERT", e) for e in bases[:3]))  # so MODIFY/DELETE find something
    seen: Counter[str] = Counter()
    for i in range(300):
        entity = p4r.Entity()
        entity.CopyFrom(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            mutate(entity, rng)
        if i % 3:
            req = p4r.WriteRequest(device_id=0, election_id=client.election_id)
            kind = rng.choice([1, 2, 3, rng.randint(0, 9)])  # INSERT, MODIFY, DELETE, other
            req.updates.add(type=kind, entity=entity)
            if rng.random() < 0.1:
                mutate(req, rng)
            rpc = functools.partial(client.stub.Write, timeout=FUZZ_DEADLINE_S)
        else:
            req = p4r.ReadRequest(device_id=0, entities=[entity])
            rpc = functools.partial(
                lambda r, **kw: list(client.stub.Read(r, **kw)), timeout=FUZZ_DEADLINE_S
            )
        got, why = ["OK"], ""
        try:
            client._call(rpc, req)
        except P4RuntimeClientError as e:
            got, why = [code for code, _ in e.errors] or [e.code], str(e)
        assert set(got) <= CLIENT_ERRORS, (i, got, why, req)
        seen.update(got)
    print(f"seed {seed}: {dict(seen)}")
    assert seen["OK"] > 0
    assert seen["INVALID_ARGUMENT"] + seen["NOT_FOUND"] > 50  # the fuzz reached the checks

    packet_out = p4r.StreamMessageRequest()
    packet_out.packet.payload = enc.interval_payload(0.1)
    client.packet_out(enc.interval_payload(0.1), opcode=enc.OP_SET_INTERVAL)
    for _ in range(100):
        msg = p4r.StreamMessageRequest()
        msg.CopyFrom(packet_out if rng.random() < 0.7 else p4r.StreamMessageRequest(
            digest_ack=p4r.DigestListAck(digest_id=1, list_id=1)))  # fmt: skip
        mutate(msg, rng)
        if msg.WhichOneof("update") == "arbitration":
            continue  # arbitration has its own tests; a new election id would demote us
        client._requests.put(msg)
    answered = Counter()
    deadline = time.monotonic() + FUZZ_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            err = client.stream_errors.get(timeout=0.5)
        except queue.Empty:
            break
        answered[CODE_NAMES[err.canonical_code]] += 1
    print(f"seed {seed}: stream errors {dict(answered)}")
    assert set(answered) <= CLIENT_ERRORS, answered
    assert client.become_primary()  # the stream is still open and we are still primary
