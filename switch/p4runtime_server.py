"""The embedded target's P4Runtime server (gRPC), speaking to any P4Runtime client.

Arbitration follows the specification: controllers open a StreamChannel and announce an
election id; the highest is primary and alone may Write, set the pipeline and send
PacketOut; every controller is told who is primary whenever that changes; a duplicate
election id is refused. PacketIn and DigestList go to the primary. Write applies each
update in order under the switch lock (CONTINUE_ON_ERROR, as PI does) and reports every
failure in the status details as p4.v1.Error, one per update.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from finsy.proto import p4d, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf import any_pb2

from ecntune.p4runtime_client import canonical_bytes
from ecntune.switch.compiler import compile_program
from ecntune.switch.dataplane import MirrorSession, Switch
from ecntune.switch.digests import DigestConfig
from ecntune.switch.layout import Unsupported
from ecntune.switch.p4info import P4InfoIndex, P4RuntimeError, decode, entity_bytes
from ecntune.switch.program import Program
from ecntune.switch.tables import ActionCall, EntryError

log = logging.getLogger("ecntune.switch.p4runtime")
API_VERSION = "1.4.0"
READ_BATCH = 256
# How long a Write holds the switch lock for its updates before packets get their turn: a
# batch of hundreds under one lock held packets for its whole length (issue 18: forwarding
# p99 11 ms), one update per lock waited behind a receive batch of the data plane each
# time (issue 20: 32 ports' thresholds, 128 register updates, took 2-7 ms). A millisecond
# is less than one receive batch (RX_BATCH frames) costs the data plane under load.
WRITE_SLICE_S = 0.001
MAX_STREAMS = 8  # open StreamChannels (controllers); each holds a worker thread
UNARY_WORKERS = 8  # threads left for Write, Read, pipeline and capability RPCs
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # as BMv2
# Update.Type's names by value, looked up once: asking the enum wrapper per update (its
# values() builds a list each time) was a third of a register write's cost (issue 20)
UPDATE_TYPES = {value: name for name, value in p4r.Update.Type.items()}
# BMv2's words: clients (finsy) recognise "no pipeline yet" by them
NO_PIPELINE = "No forwarding pipeline config set for this device"


def _code(name: str) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, name, grpc.StatusCode.UNKNOWN)


def _refuse_if_used(pipe: Pipeline, profile: Any, what: str, id_: int) -> None:
    """A member or group that a table entry still points at cannot go (spec §9.2.2)."""
    for table in pipe.program.tables.values():
        if table.profile is not profile:
            continue
        for e in table.entries.values():
            if getattr(e.call, what) == id_:
                raise P4RuntimeError(
                    "FAILED_PRECONDITION", f"{what} {id_} is used by an entry of {table.name}"
                )


def _check_member_action(pipe: Pipeline, profile: Any, action_id: int) -> None:
    """A member's action must be one the profile's tables can run."""
    allowed = [t.action_ids for t in pipe.program.tables.values() if t.profile is profile]
    if allowed and not any(action_id in ids for ids in allowed):
        raise P4RuntimeError(
            "INVALID_ARGUMENT", f"action {action_id} is not in the action set of {profile.name}"
        )


def _replica(port: int, instance: int) -> Any:
    """A replica as BMv2 reads it back: in `egress_port` (the 1.4 `port` bytes share its
    oneof), which p4runtime-shell shows (it showed every replica as port 0 otherwise)."""
    return p4r.Replica(egress_port=port, instance=instance)


def _unsupported(doing: str, which: str | None) -> tuple[str, str]:
    """An entity with nothing set is the client's error; a kind this target lacks is ours."""
    if which is None:
        return "INVALID_ARGUMENT", f"{doing} an empty Entity (no entity set)"
    return "UNIMPLEMENTED", f"{doing} {which}"


@dataclass
class Stream:
    id: int
    out: queue.Queue = field(default_factory=queue.Queue)
    election_id: tuple[int, int] | None = None
    role: str = ""
    open: bool = True

    def send(self, msg: Any) -> None:
        if self.open:
            self.out.put(msg)

    def close(self) -> None:
        self.open = False
        self.out.put(None)


@dataclass
class Pipeline:
    p4info: Any
    device_config: bytes
    cookie: int
    program: Program
    index: P4InfoIndex


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    def __init__(
        self, switch: Switch, device_id: int, write_slice_s: float = WRITE_SLICE_S
    ) -> None:
        self.switch, self.device_id, self.write_slice_s = switch, device_id, write_slice_s
        self.pipeline: Pipeline | None = None
        self.saved: Pipeline | None = None
        self.streams: dict[int, Stream] = {}
        self.arbitration = threading.Lock()
        # the primary the controllers were last told of: a closing stream is no longer open,
        # so "was it primary?" cannot be asked of primary() once it is going away
        self.announced_primary: Stream | None = None
        self._ids = itertools.count(1)
        switch.packet_in = self._on_packet_in
        switch.digests.sink = self._on_digest

    # -- arbitration ------------------------------------------------------------------------

    def primary(self) -> Stream | None:
        with self.arbitration:
            live = [s for s in self.streams.values() if s.open and s.election_id is not None]
            return max(live, key=lambda s: s.election_id, default=None)

    def _announce(self) -> None:
        """Tell every controller who the primary is (spec §5: on every change)."""
        primary = self.primary()
        with self.arbitration:
            streams = [s for s in self.streams.values() if s.open and s.election_id is not None]
            self.announced_primary = primary
        for s in streams:
            upd = p4r.MasterArbitrationUpdate(device_id=self.device_id)
            if primary is not None:
                upd.election_id.high, upd.election_id.low = primary.election_id
            if s is primary:
                upd.status.code = rpc_code.OK
                upd.status.message = "is primary"
            else:
                upd.status.code = rpc_code.ALREADY_EXISTS
                upd.status.message = "is backup"
            s.send(p4r.StreamMessageResponse(arbitration=upd))

    def _check_device(self, request: Any) -> None:
        """The request is for this device and its default role, the only one it has: any
        other is NOT_FOUND, as the spec says for a device or role the server does not know."""
        if request.device_id != self.device_id:
            raise P4RuntimeError(
                "NOT_FOUND", f"no device {request.device_id} (this is {self.device_id})"
            )
        role = request.role or getattr(request, "role_id", 0)  # ReadRequest has no role_id
        if role:
            raise P4RuntimeError("NOT_FOUND", f"no role {role!r}: only the default role exists")

    def _check_primary(self, request: Any) -> None:
        self._check_device(request)
        primary = self.primary()
        eid = (request.election_id.high, request.election_id.low)
        if primary is None or primary.election_id != eid:
            raise P4RuntimeError("PERMISSION_DENIED", "not the primary controller")

    def StreamChannel(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        stream = Stream(next(self._ids))
        with self.arbitration:
            full = len(self.streams) >= MAX_STREAMS
            if not full:
                self.streams[stream.id] = stream
        if full:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"{MAX_STREAMS} streams are open already"
            )
        context.add_callback(stream.close)

        def read() -> None:
            try:
                for req in request_iterator:
                    self._stream_request(stream, req, context)
            except grpc.RpcError:
                pass
            except Exception:
                log.exception("stream %d: request handling failed", stream.id)
            finally:
                stream.close()

        threading.Thread(target=read, name=f"p4rt-stream-{stream.id}", daemon=True).start()
        try:
            while True:
                msg = stream.out.get()
                if msg is None:
                    break
                yield msg
        finally:
            was_primary = self.announced_primary is stream
            with self.arbitration:
                self.streams.pop(stream.id, None)
            if was_primary:
                self.switch.digests.forget_unacked()
                self._announce()

    def _stream_request(self, stream: Stream, req: Any, context: Any) -> None:
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            arb = req.arbitration
            if arb.device_id != self.device_id:
                # a stream that already arbitrated for this device cannot move to another
                code = grpc.StatusCode.NOT_FOUND
                if stream.election_id is not None:
                    code = grpc.StatusCode.FAILED_PRECONDITION
                context.abort(code, f"no device {arb.device_id} (this is {self.device_id})")
            if arb.role.name:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
            eid = (arb.election_id.high, arb.election_id.low)
            with self.arbitration:
                taken = any(
                    s is not stream and s.open and s.election_id == eid
                    for s in self.streams.values()
                )
            if taken:
                stream.close()
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"election id {eid} is in use")
            stream.election_id = eid
            self._announce()
        elif kind == "packet":
            try:
                if stream.election_id is None or self.primary() is not stream:
                    raise P4RuntimeError("PERMISSION_DENIED", "PacketOut from a non-primary")
                pipe = self._pipeline()
                frame = pipe.index.join_packet_out(req.packet.metadata, req.packet.payload)
                self.switch.inject(frame)
            except P4RuntimeError as e:
                err = p4r.StreamError(canonical_code=_code(e.code).value[0], message=str(e))
                err.packet_out.packet_out.CopyFrom(req.packet)
                stream.send(p4r.StreamMessageResponse(error=err))
        elif kind == "digest_ack":
            pipe = self.pipeline
            if pipe is not None and req.digest_ack.digest_id in pipe.index.digests:
                _, ll = pipe.index.digests[req.digest_ack.digest_id]
                with self.switch.lock:
                    self.switch.digests.ack(ll.id, req.digest_ack.list_id)

    # -- data-plane notifications (called by the data-plane thread) ---------------------------

    def _on_packet_in(self, frame: bytes) -> None:
        pipe, primary = self.pipeline, self.primary()
        if pipe is None or primary is None:
            return
        metadata, payload = pipe.index.split_packet_in(frame)
        primary.send(
            p4r.StreamMessageResponse(packet=p4r.PacketIn(payload=payload, metadata=metadata))
        )

    def _on_digest(self, learn_id: int, list_id: int, samples: list[tuple[int, ...]]) -> None:
        pipe, primary = self.pipeline, self.primary()
        if pipe is None or primary is None:
            return
        digest_id = pipe.index.digest_id_of(learn_id)
        if digest_id is None:
            return
        dl = p4r.DigestList(digest_id=digest_id, list_id=list_id)
        for sample in samples:
            struct = p4d.P4StructLike(
                members=[p4d.P4Data(bitstring=canonical_bytes(v)) for v in sample]
            )
            dl.data.append(p4d.P4Data(struct=struct))
        primary.send(p4r.StreamMessageResponse(digest=dl))

    # -- pipeline config -----------------------------------------------------------------------

    def _pipeline(self) -> Pipeline:
        if self.pipeline is None:
            raise P4RuntimeError("FAILED_PRECONDITION", NO_PIPELINE)
        return self.pipeline

    def _build(self, config: Any) -> Pipeline:
        try:
            doc = json.loads(config.p4_device_config)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise P4RuntimeError(
                "INVALID_ARGUMENT", f"p4_device_config is not BMv2 JSON: {type(e).__name__}: {e}"
            ) from None
        try:
            program = compile_program(doc)
        except Unsupported as e:
            raise P4RuntimeError("INVALID_ARGUMENT", f"cannot run this program: {e}") from None
        try:
            index = P4InfoIndex(config.p4info, program)
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise P4RuntimeError(
                "INVALID_ARGUMENT", f"the P4Info does not fit the program: {type(e).__name__}: {e}"
            ) from None
        return Pipeline(
            config.p4info, bytes(config.p4_device_config), config.cookie.cookie, program, index
        )

    def _commit(self, pipe: Pipeline) -> None:
        self.switch.load(pipe.program)
        self.switch.mirrors.clear()
        self.switch.mcast.clear()
        self.pipeline = pipe

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        A = p4r.SetForwardingPipelineConfigRequest.Action  # noqa: N806
        try:
            self._check_primary(request)
            action = request.action
            if action == A.COMMIT:
                if request.HasField("config"):
                    raise P4RuntimeError("INVALID_ARGUMENT", "COMMIT takes no config")
                if self.saved is None:
                    raise P4RuntimeError("NOT_FOUND", "nothing saved to commit")
                self._commit(self.saved)
                self.saved = None
            elif action in (
                A.VERIFY,
                A.VERIFY_AND_SAVE,
                A.VERIFY_AND_COMMIT,
                A.RECONCILE_AND_COMMIT,
            ):
                pipe = self._build(request.config)
                if action == A.VERIFY_AND_SAVE:
                    self.saved = pipe
                elif action == A.VERIFY_AND_COMMIT:
                    self._commit(pipe)
                elif action == A.RECONCILE_AND_COMMIT:
                    current = self.pipeline
                    if current is not None and current.device_config == pipe.device_config:
                        current.cookie, current.p4info = pipe.cookie, pipe.p4info
                    else:
                        self._commit(pipe)
            else:
                raise P4RuntimeError("INVALID_ARGUMENT", f"unknown action {action}")
        except P4RuntimeError as e:
            context.abort(_code(e.code), str(e))
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        R = p4r.GetForwardingPipelineConfigRequest.ResponseType  # noqa: N806
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id}")
        resp = p4r.GetForwardingPipelineConfigResponse()
        pipe = self.pipeline
        if pipe is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        cfg = resp.config
        cfg.cookie.cookie = pipe.cookie
        if request.response_type in (R.ALL, R.P4INFO_AND_COOKIE):
            cfg.p4info.CopyFrom(pipe.p4info)
        if request.response_type in (R.ALL, R.DEVICE_CONFIG_AND_COOKIE):
            cfg.p4_device_config = pipe.device_config
        return resp

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- Write ---------------------------------------------------------------------------------

    def Write(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self._check_primary(request)
            pipe = self._pipeline()
            if request.atomicity != p4r.WriteRequest.Atomicity.CONTINUE_ON_ERROR:
                raise P4RuntimeError("UNIMPLEMENTED", "only CONTINUE_ON_ERROR atomicity")
        except P4RuntimeError as e:
            context.abort(_code(e.code), str(e))
        # CONTINUE_ON_ERROR promises no atomicity across updates: they are applied in
        # slices of write_slice_s under the switch lock, the GIL handed on after each (the
        # native engine's lookup takes each slice's table changes at once, at its end)
        errors: list[tuple[str, str]] = []
        pending = iter(request.updates)  # each slice resumes where the last one stopped
        while True:
            with self.switch.editing():
                until = time.perf_counter() + self.write_slice_s
                for update in pending:
                    errors.append(self._apply(pipe, update))
                    if time.perf_counter() >= until:
                        break
            if len(errors) == len(request.updates):
                break
            time.sleep(0)
        failed = [e for e in errors if e[0] != "OK"]
        if failed:
            status = rpc_status.Status(code=rpc_code.UNKNOWN, message=failed[0][1])
            for code, message in errors:
                detail = any_pb2.Any()
                detail.Pack(p4r.Error(canonical_code=_code(code).value[0], message=message))
                status.details.append(detail)
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),)
            )
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"{len(failed)} of {len(errors)} updates failed: {failed[0][1]}",
            )
        return p4r.WriteResponse()

    def _apply(self, pipe: Pipeline, update: Any) -> tuple[str, str]:
        """One update of a Write: its (code, message), ("OK", "") when it applied."""
        try:
            kind = UPDATE_TYPES.get(update.type)
            if kind is None:
                raise P4RuntimeError("INVALID_ARGUMENT", f"unknown update type {update.type}")
            self._update(pipe, kind, update.entity)
        except (P4RuntimeError, EntryError) as e:
            return e.code, str(e)
        except Exception as e:  # a malformed request must never take the server down
            log.exception("write update failed")
            return "INTERNAL", f"{type(e).__name__}: {e}"
        return "OK", ""

    def _update(self, pipe: Pipeline, kind: str, entity: Any) -> None:
        if kind == "UNSPECIFIED":
            raise P4RuntimeError("INVALID_ARGUMENT", "update type unspecified")
        index = pipe.index
        which = entity.WhichOneof("entity")
        if which == "table_entry":
            index.write_table_entry(kind, entity.table_entry)
        elif which == "action_profile_member":
            m = entity.action_profile_member
            profile = self._profile(index, m.action_profile_id)
            if kind == "DELETE":
                _refuse_if_used(pipe, profile, "member", m.member_id)
                profile.delete_member(m.member_id)
                return
            call = index.action_call(None, m.action, False)
            _check_member_action(pipe, profile, call.action_id)
            if kind == "INSERT":
                profile.add_member(m.member_id, call.action_id, call.data)
            else:
                profile.modify_member(m.member_id, call.action_id, call.data)
        elif which == "action_profile_group":
            g = entity.action_profile_group
            profile = self._profile(index, g.action_profile_id)
            if kind == "DELETE":
                _refuse_if_used(pipe, profile, "group", g.group_id)
                profile.delete_group(g.group_id)
                return
            if any(m.weight <= 0 for m in g.members):
                raise P4RuntimeError("INVALID_ARGUMENT", "member weights must be 1 or more")
            if any(m.weight > 1 for m in g.members):
                raise P4RuntimeError("UNIMPLEMENTED", "member weights above 1")
            ids = [m.member_id for m in g.members]
            if len(set(ids)) != len(ids):
                raise P4RuntimeError("INVALID_ARGUMENT", f"group {g.group_id} repeats a member")
            if g.max_size and len(g.members) > g.max_size:
                raise P4RuntimeError("RESOURCE_EXHAUSTED", "more members than the group's max_size")
            profile.set_group(g.group_id, [m.member_id for m in g.members], create=kind == "INSERT")
        elif which in ("counter_entry", "register_entry", "meter_entry", "direct_counter_entry",
                       "value_set_entry"):  # fmt: skip
            if kind != "MODIFY":
                raise P4RuntimeError("INVALID_ARGUMENT", f"{which} only supports MODIFY")
            if which == "counter_entry":
                index.write_counter(entity.counter_entry)
            elif which == "register_entry":
                index.write_register(entity.register_entry)
            elif which == "meter_entry":
                index.write_meter(entity.meter_entry)
            elif which == "direct_counter_entry":
                _, entry = index.direct_counter_table(entity.direct_counter_entry)
                d = entity.direct_counter_entry.data
                entry.bytes, entry.packets = d.byte_count, d.packet_count
            else:
                self._write_value_set(pipe, entity.value_set_entry)
        elif which == "digest_entry":
            d = entity.digest_entry
            _, ll = index.digest(d.digest_id)
            exists = self.switch.digests.config(ll.id) is not None
            if kind == "DELETE":
                if not exists:
                    raise P4RuntimeError("NOT_FOUND", f"digest {d.digest_id} is not configured")
                self.switch.digests.configure(ll.id, None)
                return
            if kind == "INSERT" and exists:
                raise P4RuntimeError("ALREADY_EXISTS", f"digest {d.digest_id} is configured")
            if kind == "MODIFY" and not exists:
                raise P4RuntimeError("NOT_FOUND", f"digest {d.digest_id} is not configured")
            c = d.config
            self.switch.digests.configure(
                ll.id, DigestConfig(c.max_timeout_ns, c.max_list_size, c.ack_timeout_ns)
            )
        elif which == "packet_replication_engine_entry":
            self._write_pre(kind, entity.packet_replication_engine_entry)
        else:
            raise P4RuntimeError(*_unsupported("writing", which))

    @staticmethod
    def _profile(index: P4InfoIndex, profile_id: int) -> Any:
        try:
            return index.profiles[profile_id]
        except KeyError:
            raise P4RuntimeError("NOT_FOUND", f"no action profile with id {profile_id}") from None

    @staticmethod
    def _replica_port(r: Any) -> int:
        return decode(r.port, 32, "replica port") if r.port else r.egress_port

    def _write_pre(self, kind: str, pre: Any) -> None:
        which = pre.WhichOneof("type")
        if which == "multicast_group_entry":
            g = pre.multicast_group_entry
            if g.multicast_group_id == 0:
                raise P4RuntimeError("INVALID_ARGUMENT", "multicast group id 0 is reserved")
            replicas = [(self._replica_port(r), r.instance) for r in g.replicas]
            if len(set(replicas)) != len(replicas):
                raise P4RuntimeError("INVALID_ARGUMENT", "a replica (port, instance) repeats")
            exists = g.multicast_group_id in self.switch.mcast
            self._check_exists(kind, exists, f"multicast group {g.multicast_group_id}")
            if kind == "DELETE":
                del self.switch.mcast[g.multicast_group_id]
            else:
                self.switch.mcast[g.multicast_group_id] = replicas
        elif which == "clone_session_entry":
            c = pre.clone_session_entry
            if c.session_id == 0:
                raise P4RuntimeError("INVALID_ARGUMENT", "clone session id 0 is reserved")
            exists = c.session_id in self.switch.mirrors
            self._check_exists(kind, exists, f"clone session {c.session_id}")
            if kind == "DELETE":
                del self.switch.mirrors[c.session_id]
            else:
                if len(c.replicas) != 1:
                    raise P4RuntimeError(
                        "UNIMPLEMENTED", "clone sessions with other than 1 replica"
                    )
                port = self._replica_port(c.replicas[0])
                self.switch.mirrors[c.session_id] = MirrorSession(port, c.packet_length_bytes)
        else:
            raise P4RuntimeError("INVALID_ARGUMENT", "empty packet replication entry")

    @staticmethod
    def _check_exists(kind: str, exists: bool, what: str) -> None:
        if kind == "INSERT" and exists:
            raise P4RuntimeError("ALREADY_EXISTS", f"{what} exists")
        if kind in ("MODIFY", "DELETE") and not exists:
            raise P4RuntimeError("NOT_FOUND", f"{what} does not exist")

    def _write_value_set(self, pipe: Pipeline, vse: Any) -> None:
        vs = pipe.index.value_sets.get(vse.value_set_id)
        if vs is None:
            raise P4RuntimeError("NOT_FOUND", f"no value set with id {vse.value_set_id}")
        if vs.size and len(vse.members) > vs.size:
            raise P4RuntimeError("RESOURCE_EXHAUSTED", f"value set {vs.preamble.name} is full")
        members = []
        for member in vse.members:
            value = mask = 0
            by_id = {m.field_id: m for m in member.match}
            for fdef in vs.match:
                w = fdef.bitwidth
                pad = (w + 7) // 8 * 8
                m = by_id.get(fdef.id)
                v, k = 0, 0
                if m is not None and m.HasField("exact"):
                    v, k = decode(m.exact.value, w, fdef.name), (1 << w) - 1
                elif m is not None and m.HasField("ternary"):
                    v, k = (
                        decode(m.ternary.value, w, fdef.name),
                        decode(m.ternary.mask, w, fdef.name),
                    )
                value, mask = (value << pad) | v, (mask << pad) | k
            members.append((value, mask))
        target = pipe.program.value_sets.get(vs.preamble.name)
        if target is None:
            raise P4RuntimeError("NOT_FOUND", f"value set {vs.preamble.name} not in the program")
        target[:] = members

    # -- Read ------------------------------------------------------------------------------------

    def Read(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        try:
            self._check_device(request)
            pipe = self._pipeline()
            # READ_BATCH entities per response, the switch lock held per batch only: a read
            # of every register 50 times once held it for seconds (and the whole response
            # in memory) while no packet moved. Each batch is consistent; the whole read is
            # not atomic, which P4Runtime does not promise either.
            found = (e for entity in request.entities for e in self._read(pipe, entity))
            while True:
                with self.switch.lock:
                    batch = list(itertools.islice(found, READ_BATCH))
                response = p4r.ReadResponse()
                for entity in batch:  # serialized (table entries' encodings are cached)
                    response.entities.add().MergeFromString(entity)
                yield response
                if len(batch) < READ_BATCH:
                    break
        except (P4RuntimeError, EntryError) as e:
            context.abort(_code(e.code), str(e))

    def _read(self, pipe: Pipeline, entity: Any) -> Iterator[bytes]:
        """What `entity` asks for, as serialized Entities."""
        index = pipe.index
        which = entity.WhichOneof("entity")
        if which == "table_entry":
            yield from index.read_table_entries(entity.table_entry)
        elif which == "action_profile_member":
            q = entity.action_profile_member
            for pid, profile in index.profiles.items():
                if q.action_profile_id and pid != q.action_profile_id:
                    continue
                for mid, (aid, data, _) in list(profile.members.items()):
                    if q.member_id and mid != q.member_id:
                        continue
                    m = p4r.ActionProfileMember(action_profile_id=pid, member_id=mid)
                    m.action.CopyFrom(index.action(ActionCall(aid, data)))
                    yield entity_bytes(action_profile_member=m)
        elif which == "action_profile_group":
            q = entity.action_profile_group
            for pid, profile in index.profiles.items():
                if q.action_profile_id and pid != q.action_profile_id:
                    continue
                for gid, members in list(profile.groups.items()):
                    if q.group_id and gid != q.group_id:
                        continue
                    g = p4r.ActionProfileGroup(action_profile_id=pid, group_id=gid)
                    g.members.extend(
                        p4r.ActionProfileGroup.Member(member_id=m, weight=1) for m in members
                    )
                    yield entity_bytes(action_profile_group=g)
        elif which == "counter_entry":
            for ce in index.read_counters(entity.counter_entry):
                yield entity_bytes(counter_entry=ce)
        elif which == "register_entry":
            for re in index.read_registers(entity.register_entry):
                yield entity_bytes(register_entry=re)
        elif which == "meter_entry":
            for me in index.read_meters(entity.meter_entry):
                yield entity_bytes(meter_entry=me)
        elif which == "direct_counter_entry":
            tm, entry = index.direct_counter_table(entity.direct_counter_entry)
            dce = p4r.DirectCounterEntry(table_entry=index.table_entry(tm, entry))
            dce.data.byte_count, dce.data.packet_count = entry.bytes, entry.packets
            yield entity_bytes(direct_counter_entry=dce)
        elif which == "digest_entry":
            q = entity.digest_entry
            for did, (_, ll) in index.digests.items():
                cfg = self.switch.digests.config(ll.id)
                if cfg is None or (q.digest_id and did != q.digest_id):
                    continue
                d = p4r.DigestEntry(digest_id=did)
                d.config.max_timeout_ns = cfg.max_timeout_ns
                d.config.max_list_size = cfg.max_list_size
                d.config.ack_timeout_ns = cfg.ack_timeout_ns
                yield entity_bytes(digest_entry=d)
        elif which == "packet_replication_engine_entry":
            pre = entity.packet_replication_engine_entry
            # one session or group when its id is given (0: all), as BMv2 answers
            if pre.WhichOneof("type") == "clone_session_entry":
                want = pre.clone_session_entry.session_id
                for sid, s in list(self.switch.mirrors.items()):
                    if want and sid != want:
                        continue
                    c = p4r.CloneSessionEntry(session_id=sid, packet_length_bytes=s.truncate)
                    c.replicas.append(_replica(s.port, 0))
                    yield entity_bytes(packet_replication_engine_entry={"clone_session_entry": c})
            else:
                want = pre.multicast_group_entry.multicast_group_id
                for gid, replicas in list(self.switch.mcast.items()):
                    if want and gid != want:
                        continue
                    g = p4r.MulticastGroupEntry(multicast_group_id=gid)
                    g.replicas.extend(_replica(p, r) for p, r in replicas)
                    yield entity_bytes(packet_replication_engine_entry={"multicast_group_entry": g})
        else:
            raise P4RuntimeError(*_unsupported("reading", which))


def serve(
    switch: Switch,
    device_id: int,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
    write_slice_s: float = WRITE_SLICE_S,
) -> grpc.Server:
    """Start the gRPC server (the caller keeps the returned server alive and stops it).

    Every open StreamChannel holds a worker thread for as long as it lives, so streams
    beyond MAX_STREAMS are refused (RESOURCE_EXHAUSTED, as BMv2 does) and the pool keeps
    UNARY_WORKERS for Write, Read and the rest: 16 idle streams once hung every other RPC.
    Messages up to MAX_MESSAGE_BYTES (BMv2's 256 MB), so large pipelines fit. With
    `credentials`, TLS (mutual where they require client certificates), as BMv2 offers."""
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=MAX_STREAMS + UNARY_WORKERS, thread_name_prefix="p4rt"
        ),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    service = P4RuntimeService(switch, device_id, write_slice_s)
    p4r_grpc.add_P4RuntimeServicer_to_server(service, server)
    bound = (
        server.add_secure_port(address, credentials)
        if credentials is not None
        else server.add_insecure_port(address)
    )
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    return server
