"""Malformed and out-of-order P4Runtime requests against the embedded target, with our raw
client: each gets the canonical code the spec names, and the server goes on serving
(issue 18 (9): wrong codes; (8): errors that leaked as UNKNOWN)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from finsy.proto import p4r

from ecntune.p4runtime_client import P4RuntimeClient, P4RuntimeClientError, load_p4info
from ecntune.p4src import PROGRAM
from ecntune.targets import EMBEDDED, SwitchSpec, start, stop

A = p4r.SetForwardingPipelineConfigRequest.Action


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
