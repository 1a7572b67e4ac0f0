"""A P4Runtime client that is not ours (finsy) against the embedded target: pipeline push,
writes, wildcard reads, registers, and the arbitration rules — no root needed (no ports)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import finsy as fy
import pytest

from ecntune.controller.forwarding import forwarding_entities
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.targets import EMBEDDED, SwitchSpec, start, stop
from ecntune.topology import preset


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def switch_addr() -> Iterator[str]:
    spec = SwitchSpec(ports={}, grpc_addr=f"127.0.0.1:{free_port()}", thrift_port=free_port())
    proc = start(EMBEDDED, spec)
    try:
        yield spec.grpc_addr
    finally:
        stop(proc)


def options(**kw) -> fy.SwitchOptions:
    return fy.SwitchOptions(p4info=PROGRAM.p4info_path, p4blob=PROGRAM.json_path, device_id=0, **kw)


def test_finsy_pushes_writes_and_reads_back(switch_addr: str):
    topo = preset("tiny")
    expected = forwarding_entities(topo, "s1")

    async def main() -> dict:
        async with fy.Switch("s1", switch_addr, options()) as sw:
            await sw.insert(expected)
            entries = [e async for e in sw.read(fy.P4TableEntry(enc.TABLE_IPV4))]
            members = [m async for m in sw.read(fy.P4ActionProfileMember(enc.ECMP_SELECTOR))]
            regs = enc.encode_thresholds(3000, 9000, 0.25)
            await sw.modify(
                [fy.P4RegisterEntry(n, index=2, data=v) for n, v in regs.as_dict().items()]
            )
            kmax = [r async for r in sw.read(fy.P4RegisterEntry("ecn_kmax", index=2))]
            # a duplicate insert is refused per update, as the spec says
            with pytest.raises(fy.P4ClientError) as dup:
                await sw.insert(expected[:1])
            return {"entries": entries, "members": members, "kmax": kmax, "dup": dup.value}

    got = asyncio.run(main())
    routes = [e for e in expected if isinstance(e, fy.P4TableEntry)]
    assert len(got["entries"]) == len(routes) == len(topo.hosts)
    assert len(got["members"]) == len(topo.hosts)
    assert [r.data for r in got["kmax"]] == [9000]
    assert "ALREADY_EXISTS" in str(got["dup"])


def test_a_backup_client_is_refused_writes(switch_addr: str):
    async def main() -> str:
        async with fy.Switch("primary", switch_addr, options(initial_election_id=20)):
            backup = fy.Switch("backup", switch_addr, options(initial_election_id=10))
            async with backup:
                assert not backup.is_primary
                with pytest.raises(fy.P4ClientError) as e:
                    await backup.modify([fy.P4RegisterEntry("ecn_kmin", index=1, data=5)])
                return str(e.value)

    assert "PERMISSION_DENIED" in asyncio.run(main())
