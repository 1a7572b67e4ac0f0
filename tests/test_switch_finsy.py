"""A P4Runtime client that is not ours (finsy) against the embedded target: pipeline push,
writes, wildcard reads, registers, and the arbitration rules — no root needed (no ports)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator

import finsy as fy
import pytest
from finsy.proto import p4r

from ecntune.controller.forwarding import ForwardingPlan, forwarding_entities, install
from ecntune.p4runtime_client import P4RuntimeClient, load_p4info
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.targets import EMBEDDED, SwitchSpec, start, stop
from ecntune.topology import preset


@pytest.fixture
def switch_proc() -> Iterator[tuple[SwitchSpec, subprocess.Popen]]:
    spec = SwitchSpec.on_free_ports({})
    proc = start(EMBEDDED, spec)
    try:
        yield spec, proc
    finally:
        stop(proc)


@pytest.fixture
def switch_addr(switch_proc: tuple[SwitchSpec, subprocess.Popen]) -> str:
    return switch_proc[0].grpc_addr


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


def test_finsy_and_our_own_client_install_the_same_forwarding_state(switch_addr: str):
    """controller/forwarding.py renders one plan two ways; a leaf of a leaf-spine (members,
    an ECMP group, /32 and /24 entries) written each way reads back identically."""
    topo = preset("leafspine-2x2")

    async def by_finsy() -> None:
        async with fy.Switch("leaf1", switch_addr, options()) as sw:
            await sw.insert(forwarding_entities(topo, "leaf1"))

    asyncio.run(by_finsy())
    other = SwitchSpec.on_free_ports({})
    other_proc = start(EMBEDDED, other)
    try:
        with P4RuntimeClient(other.grpc_addr, 0, 1) as client:
            assert client.become_primary()
            client.set_pipeline(load_p4info(PROGRAM.p4info_path), PROGRAM.json_path.read_bytes())
            plan = ForwardingPlan()
            for route in topo.routes("leaf1"):
                install(client, plan.add(route))
        states = []
        for addr in (switch_addr, other.grpc_addr):
            with P4RuntimeClient(addr, 0, 2) as reader:
                reader.use_p4info(load_p4info(PROGRAM.p4info_path))
                profile = reader.n.get("action_profiles", enc.ECMP_SELECTOR).preamble.id
                wildcards = [
                    reader.table_entry(enc.TABLE_IPV4),
                    p4r.ActionProfileMember(action_profile_id=profile),
                    p4r.ActionProfileGroup(action_profile_id=profile),
                ]
                read = [e for w in wildcards for e in reader.read(w)]
                states.append(sorted(e.SerializeToString(deterministic=True) for e in read))
    finally:
        stop(other_proc)
    kinds = {r.prefix_len: len(r.next_hops) for r in topo.routes("leaf1")}
    assert kinds == {32: 1, 24: 2}  # the plan met both a member and an ECMP group
    assert len(states[0]) == len(topo.routes("leaf1")) + 4 + 1  # entries, members, group
    assert states[0] == states[1]


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


def from_cpu(spec: SwitchSpec) -> int:
    """Packets the data-plane thread has taken from the CPU port (the control port's stats)."""
    stats = EMBEDDED.control(spec, "stats")
    return int(stats.split("from_cpu=")[1].split()[0])


def test_timers_no_clock_can_reach_keep_the_data_plane_running(switch_proc):
    """Issue 18 (1): a digest timeout of 2^63-1 ns or a queue rate of 1e-9 pkt/s made the
    data-plane thread's epoll wait overflow; it died while gRPC kept answering."""
    spec, proc = switch_proc
    forever = 2**63 - 1

    async def main() -> None:
        async with fy.Switch("s1", spec.grpc_addr, options()) as sw:
            await sw.insert(
                [fy.P4DigestEntry(enc.DIGEST, max_list_size=64, max_timeout_ns=forever,
                                  ack_timeout_ns=forever)]
            )  # fmt: skip
            EMBEDDED.control(spec, "set_queue_rate 1e-9 2")
            before = from_cpu(spec)
            payload = enc.interval_payload(0.1)
            for _ in range(3):
                await sw.write([fy.P4PacketOut(payload, egress_port=0, opcode=enc.OP_SET_INTERVAL,
                                               reserved=0)])  # fmt: skip
            deadline = time.monotonic() + 10
            while from_cpu(spec) < before + 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert from_cpu(spec) == before + 3  # the data plane took every one of them

    asyncio.run(main())
    assert proc.poll() is None


@pytest.mark.parametrize("command", ["set_queue_rate nan", "set_queue_rate inf 1",
                                     "set_queue_rate_bps -5", "set_queue_depth 10 -1"])  # fmt: skip
def test_the_control_port_refuses_rates_and_ports_that_cannot_be(switch_proc, command):
    spec, proc = switch_proc
    with pytest.raises(RuntimeError, match="Error"):
        EMBEDDED.control(spec, command)
    assert "from_cpu=" in EMBEDDED.control(spec, "stats")  # and it goes on serving
    assert proc.poll() is None


def test_a_data_plane_that_dies_takes_the_switch_process_down_loudly():
    """Whatever kills the data-plane thread, the process must not linger as a zombie that
    answers gRPC and forwards nothing: it exits non-zero, saying why."""
    import threading

    from ecntune.switch.dataplane import Switch

    sw = Switch({})
    died = threading.Event()
    sw.on_failure = lambda _: died.set()

    def broken() -> float:
        raise OverflowError("timeout value is too large")  # what epoll raised in issue 18

    sw.tm.next_departure = broken  # a fault injected into the real loop
    sw.start()
    try:
        assert died.wait(5)
        assert isinstance(sw.failure, OverflowError)
    finally:
        sw.stop()


def test_a_departing_primary_is_announced_to_the_backups(switch_addr: str):
    """Issue 18 (4): the closing stream was marked closed before the server asked whether
    it had been primary, so the backup never heard that it had become primary."""

    async def main() -> tuple[bool, bool]:
        backup = fy.Switch("backup", switch_addr, options(initial_election_id=10))
        async with backup:
            async with fy.Switch("primary", switch_addr, options(initial_election_id=20)):
                await asyncio.sleep(0.3)
                before = backup.is_primary
            deadline = time.monotonic() + 5
            while not backup.is_primary and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return before, backup.is_primary

    before, after = asyncio.run(main())
    assert not before
    assert after  # told, without reconnecting
