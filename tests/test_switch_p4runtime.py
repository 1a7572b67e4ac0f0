"""Malformed and out-of-order P4Runtime requests against the embedded target, with our raw
client: each gets the canonical code the spec names, and the server goes on serving
(issue 18 (9): wrong codes; (8): errors that leaked as UNKNOWN)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from finsy.proto import p4r

from ecntune.p4runtime_client import P4RuntimeClient, P4RuntimeClientError, load_p4info
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.switch.p4runtime_server import MAX_STREAMS
from ecntune.targets import EMBEDDED, SwitchSpec, free_port, start, stop

A = p4r.SetForwardingPipelineConfigRequest.Action


@pytest.fixture
def client() -> Iterator[P4RuntimeClient]:
    spec = SwitchSpec(ports={}, grpc_addr=f"127.0.0.1:{free_port()}", thrift_port=free_port())
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
    spec = SwitchSpec(ports={}, grpc_addr=f"127.0.0.1:{free_port()}", thrift_port=free_port())
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


@pytest.mark.parametrize("mutate", [_widen_a_match_field, _resize_a_register, _repeat_an_id])
def test_a_p4info_that_disagrees_with_the_program_is_refused(client, mutate):
    """Issue 18 (7): a P4Info whose widths, sizes or ids do not match the JSON was accepted
    (and entries written through it then matched or indexed something else)."""
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
