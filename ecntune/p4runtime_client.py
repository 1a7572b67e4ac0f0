"""A small synchronous P4Runtime client that speaks in P4Info names, for tests and tools.

PTF tests, the PTF runner and command-line tools want "insert this entry into
EcnIngress.ipv4_lpm" in one blocking call, not an asyncio application; the controller
uses finsy for that. Values are ints (or (value, prefix_len) for LPM, (value, mask) for
ternary, (low, high) for range); the client encodes them with the P4Info bit widths.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status
from google.protobuf import text_format


class P4RuntimeClientError(Exception):
    """A failed RPC; `errors` holds (code name, message) per update for Write."""

    def __init__(self, message: str, code: str = "", errors: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.code = code
        self.errors = errors or []


def load_p4info(path: Path) -> Any:
    return text_format.Parse(Path(path).read_text(), p4i.P4Info())


def canonical_bytes(value: int) -> bytes:
    """An unsigned value as P4Runtime's canonical bytestring: big-endian, no leading zero
    bytes, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def bytestring(value: int | bytes, bitwidth: int) -> bytes:
    """A caller's value as a canonical bytestring, checked against its width."""
    if isinstance(value, bytes):
        return value
    if value < 0 or value >> bitwidth:
        raise ValueError(f"{value} does not fit {bitwidth} bits")
    return canonical_bytes(value)


@dataclass(frozen=True)
class PacketIn:
    payload: bytes
    metadata: dict[str, int]


class P4Names:
    """Name -> P4Info object lookups."""

    def __init__(self, p4info: Any) -> None:
        self.p4info = p4info
        self._by = {}
        for kind in ("tables", "actions", "registers", "counters", "meters", "digests",
                     "action_profiles", "controller_packet_metadata", "value_sets"):  # fmt: skip
            self._by[kind] = {o.preamble.name: o for o in getattr(p4info, kind)}

    def get(self, kind: str, name: str) -> Any:
        try:
            return self._by[kind][name]
        except KeyError:
            known = ", ".join(sorted(self._by[kind]))
            raise KeyError(f"no {kind[:-1]} {name!r} in P4Info (known: {known})") from None

    def name_of(self, kind: str, id_: int) -> str:
        return next(o.preamble.name for o in self._by[kind].values() if o.preamble.id == id_)


class P4RuntimeClient:
    def __init__(
        self, address: str, device_id: int = 0, election_id: int = 1, timeout_s: float = 10.0
    ) -> None:
        self.address, self.device_id = address, device_id
        self.election_id = p4r.Uint128(high=0, low=election_id)
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=timeout_s)
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self.names: P4Names | None = None
        self.arbitration: queue.Queue = queue.Queue()
        self.packets: queue.Queue = queue.Queue()
        self.digests: queue.Queue = queue.Queue()
        self.stream_errors: queue.Queue = queue.Queue()
        self._requests: queue.Queue = queue.Queue()
        self._stream = self.stub.StreamChannel(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read_stream, daemon=True)
        self._reader.start()

    # -- stream ------------------------------------------------------------------------------

    def _read_stream(self) -> None:
        try:
            for msg in self._stream:
                kind = msg.WhichOneof("update")
                if kind == "arbitration":
                    self.arbitration.put(msg.arbitration)
                elif kind == "packet":
                    self.packets.put(msg.packet)
                elif kind == "digest":
                    self.digests.put(msg.digest)
                elif kind == "error":
                    self.stream_errors.put(msg.error)
        except grpc.RpcError as e:
            self.arbitration.put(e)

    def become_primary(self, timeout_s: float = 10.0) -> bool:
        """Send arbitration; True if this client is primary."""
        req = p4r.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.CopyFrom(self.election_id)
        self._requests.put(req)
        reply = self.arbitration.get(timeout=timeout_s)
        if isinstance(reply, grpc.RpcError):
            raise P4RuntimeClientError(f"stream closed: {reply.details()}", reply.code().name)
        return reply.status.code == 0

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()

    def __enter__(self) -> P4RuntimeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pipeline ------------------------------------------------------------------------------

    def set_pipeline(self, p4info: Any, device_config: bytes, cookie: int = 0) -> None:
        req = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=self.election_id,
            action=p4r.SetForwardingPipelineConfigRequest.Action.VERIFY_AND_COMMIT,
        )
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        req.config.cookie.cookie = cookie
        self._call(self.stub.SetForwardingPipelineConfig, req)
        self.names = P4Names(p4info)

    def use_p4info(self, p4info: Any) -> None:
        """Talk to a switch whose pipeline someone else set."""
        self.names = P4Names(p4info)

    @property
    def n(self) -> P4Names:
        if self.names is None:
            raise P4RuntimeClientError("no P4Info: call set_pipeline or use_p4info first")
        return self.names

    # -- building entities ---------------------------------------------------------------------

    def action(self, name: str, params: Mapping[str, int | bytes] | None = None) -> Any:
        a = self.n.get("actions", name)
        params = dict(params or {})
        unknown = set(params) - {p.name for p in a.params}
        if unknown:
            raise KeyError(f"action {name} has no parameters {sorted(unknown)}")
        return p4r.Action(
            action_id=a.preamble.id,
            params=[
                p4r.Action.Param(param_id=p.id, value=bytestring(params[p.name], p.bitwidth))
                for p in a.params
                if p.name in params
            ],
        )

    def table_entry(
        self,
        table: str,
        match: Mapping[str, Any] | None = None,
        action: str | None = None,
        params: Mapping[str, int | bytes] | None = None,
        priority: int = 0,
        member: int | None = None,
        group: int | None = None,
        default: bool = False,
    ) -> Any:
        t = self.n.get("tables", table)
        te = p4r.TableEntry(table_id=t.preamble.id, priority=priority, is_default_action=default)
        fields = {f.name: f for f in t.match_fields}
        for name, value in (match or {}).items():
            f = fields.get(name)
            if f is None:
                raise KeyError(f"table {table} has no match field {name!r} (has {sorted(fields)})")
            fm = p4r.FieldMatch(field_id=f.id)
            kind = p4i.MatchField.MatchType.Name(f.match_type)
            w = f.bitwidth
            if kind == "EXACT":
                fm.exact.value = bytestring(value, w)
            elif kind == "LPM":
                fm.lpm.value, fm.lpm.prefix_len = bytestring(value[0], w), value[1]
            elif kind == "TERNARY":
                fm.ternary.value, fm.ternary.mask = bytestring(value[0], w), bytestring(value[1], w)
            elif kind == "RANGE":
                fm.range.low, fm.range.high = bytestring(value[0], w), bytestring(value[1], w)
            elif kind == "OPTIONAL":
                fm.optional.value = bytestring(value, w)
            te.match.append(fm)
        if action is not None:
            te.action.action.CopyFrom(self.action(action, params))
        elif member is not None:
            te.action.action_profile_member_id = member
        elif group is not None:
            te.action.action_profile_group_id = group
        return te

    # -- write / read ----------------------------------------------------------------------------

    def write(self, *updates: tuple[str, Any]) -> None:
        """Write (update type, Entity-or-entry) pairs, e.g. ("INSERT", table_entry)."""
        req = p4r.WriteRequest(device_id=self.device_id, election_id=self.election_id)
        for kind, obj in updates:
            entity = as_entity(obj)
            req.updates.append(p4r.Update(type=p4r.Update.Type.Value(kind), entity=entity))
        self._call(self.stub.Write, req)

    def insert(self, *objs: Any) -> None:
        self.write(*(("INSERT", o) for o in objs))

    def modify(self, *objs: Any) -> None:
        self.write(*(("MODIFY", o) for o in objs))

    def delete(self, *objs: Any) -> None:
        self.write(*(("DELETE", o) for o in objs))

    def read(self, *entities: Any) -> list[Any]:
        req = p4r.ReadRequest(device_id=self.device_id)
        req.entities.extend(as_entity(e) for e in entities)
        try:
            return [e for resp in self.stub.Read(req) for e in resp.entities]
        except grpc.RpcError as e:
            raise P4RuntimeClientError(e.details() or "", e.code().name) from None

    def member(self, profile: str, member_id: int, action: str, params: Mapping[str, int]) -> Any:
        p = self.n.get("action_profiles", profile)
        return p4r.ActionProfileMember(
            action_profile_id=p.preamble.id, member_id=member_id, action=self.action(action, params)
        )

    def group(self, profile: str, group_id: int, members: list[int], max_size: int = 0) -> Any:
        p = self.n.get("action_profiles", profile)
        g = p4r.ActionProfileGroup(action_profile_id=p.preamble.id, group_id=group_id)
        g.max_size = max_size
        g.members.extend(p4r.ActionProfileGroup.Member(member_id=m, weight=1) for m in members)
        return g

    def register_entry(self, name: str, index: int | None, value: int | None = None) -> Any:
        r = self.n.get("registers", name)
        e = p4r.RegisterEntry(register_id=r.preamble.id)
        if index is not None:
            e.index.index = index
        if value is not None:
            e.data.bitstring = bytestring(value, r.type_spec.bitstring.bit.bitwidth)
        return e

    def write_registers(self, values: Mapping[str, int], index: int) -> None:
        """Write several registers at one index in one request."""
        self.modify(*(self.register_entry(n, index, v) for n, v in values.items()))

    def read_register(self, name: str, index: int) -> int:
        (e,) = self.read(self.register_entry(name, index))
        return int.from_bytes(e.register_entry.data.bitstring, "big")

    def read_counter(self, name: str, index: int) -> tuple[int, int]:
        c = self.n.get("counters", name)
        (e,) = self.read(p4r.CounterEntry(counter_id=c.preamble.id, index=p4r.Index(index=index)))
        return e.counter_entry.data.packet_count, e.counter_entry.data.byte_count

    def enable_digest(
        self, name: str, max_timeout_ns: int = 0, max_list_size: int = 1, ack_timeout_ns: int = 0
    ) -> None:
        d = self.n.get("digests", name)
        entry = p4r.DigestEntry(digest_id=d.preamble.id)
        entry.config.max_timeout_ns = max_timeout_ns
        entry.config.max_list_size = max_list_size
        entry.config.ack_timeout_ns = ack_timeout_ns
        self.insert(entry)

    def digest_fields(self, name: str) -> list[str]:
        d = self.n.get("digests", name)
        struct = d.type_spec.struct.name
        return [m.name for m in self.n.p4info.type_info.structs[struct].members]

    def next_digest(
        self, timeout_s: float = 5.0, ack: bool = True
    ) -> tuple[int, list[dict[str, int]]]:
        """The next DigestList as (list id, samples as {field: value}); acked by default."""
        dl = self.digests.get(timeout=timeout_s)
        names = self.digest_fields(self.n.name_of("digests", dl.digest_id))
        samples = [
            {
                n: int.from_bytes(m.bitstring, "big")
                for n, m in zip(names, d.struct.members, strict=True)
            }
            for d in dl.data
        ]
        if ack:
            req = p4r.StreamMessageRequest()
            req.digest_ack.digest_id, req.digest_ack.list_id = dl.digest_id, dl.list_id
            self._requests.put(req)
        return dl.list_id, samples

    def drain_digests(self, wait_s: float = 0.3) -> Iterator[dict[str, int]]:
        """Every digest sample that arrives until the stream is quiet for `wait_s`."""
        while True:
            try:
                _, samples = self.next_digest(wait_s)
            except queue.Empty:
                return
            yield from samples

    # -- packet I/O ---------------------------------------------------------------------------

    def packet_out(self, payload: bytes, **metadata: int) -> None:
        cpm = self.n.get("controller_packet_metadata", "packet_out")
        widths = {m.name: m for m in cpm.metadata}
        msg = p4r.StreamMessageRequest()
        msg.packet.payload = payload
        for name, value in metadata.items():
            m = widths[name]
            msg.packet.metadata.append(
                p4r.PacketMetadata(metadata_id=m.id, value=bytestring(value, m.bitwidth))
            )
        self._requests.put(msg)

    def packet_in(self, timeout_s: float = 5.0) -> PacketIn:
        pkt = self.packets.get(timeout=timeout_s)
        cpm = self.n.get("controller_packet_metadata", "packet_in")
        names = {m.id: m.name for m in cpm.metadata}
        return PacketIn(
            pkt.payload,
            {names[m.metadata_id]: int.from_bytes(m.value, "big") for m in pkt.metadata},
        )

    # -- errors ----------------------------------------------------------------------------------

    def _call(self, rpc: Any, req: Any) -> Any:
        try:
            return rpc(req)
        except grpc.RpcError as e:
            errors = []
            for key, value in e.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    status = rpc_status.Status.FromString(value)
                    for d in status.details:
                        err = p4r.Error()
                        d.Unpack(err)
                        errors.append(
                            (grpc.StatusCode(_by_value(err.canonical_code)).name, err.message)
                        )
            raise P4RuntimeClientError(e.details() or "", e.code().name, errors) from None


def _by_value(code: int) -> tuple[int, str]:
    return next(c.value for c in grpc.StatusCode if c.value[0] == code)


def as_entity(obj: Any) -> Any:
    """`obj` (a TableEntry, RegisterEntry, ...) wrapped in the Entity that carries it."""
    if isinstance(obj, p4r.Entity):
        return obj
    field = {
        "TableEntry": "table_entry",
        "ActionProfileMember": "action_profile_member",
        "ActionProfileGroup": "action_profile_group",
        "RegisterEntry": "register_entry",
        "CounterEntry": "counter_entry",
        "DirectCounterEntry": "direct_counter_entry",
        "MeterEntry": "meter_entry",
        "DigestEntry": "digest_entry",
        "ValueSetEntry": "value_set_entry",
        "PacketReplicationEngineEntry": "packet_replication_engine_entry",
    }[type(obj).__name__]
    return p4r.Entity(**{field: obj})
