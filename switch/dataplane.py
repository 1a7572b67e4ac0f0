"""The embedded switch: ports -> parser + ingress -> traffic manager -> egress + deparser -> ports.

Like simple_switch, packets carry their field vector from ingress through the queue to
egress, and the v1model metadata means what it means there: timestamps in microseconds
since the switch started, enq_qdepth/deq_qdepth in packets (deq_qdepth counts the packets
left behind), deq_timedelta in microseconds, packet_length in bytes.

One thread runs the whole data plane (BMv2's "one core"); the Python engine below waits on
every port socket, the wake-up pipe and the next queue departure, so no packet ever
crosses threads. Control threads (P4Runtime, ctl) take `lock` while they change tables,
registers or the program.
A port may also have a propagation delay (`set_port_delay`, an extension BMv2 lacks: this
kernel has no netem): a frame that leaves the queue and the egress pipeline is held on the
port's "wire" for that long before it is sent, so the fabric's RTT is what the topology
says while the queue, the marking and the telemetry see only the queue.
If that thread ever dies, `failure` says why and `on_failure` is called (the process
exits non-zero): a switch whose gRPC server answers while nothing forwards is the one
state it must never be in.

That thread runs one of two engines: the loop below (Python, the reference), or the
program compiled to C with a loop of its own (switch/native_dataplane.py, issue 21),
~13x the Python loop's packet rate. `dataplane="auto"` runs the native one wherever the
program and this machine allow it, and `engine_note` says which runs and, for Python, why.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ecntune.switch.digests import DigestEngine
from ecntune.switch.native import NativeUnavailable
from ecntune.switch.native_dataplane import NativeDataplane
from ecntune.switch.packet_io import Port, Waker
from ecntune.switch.program import Program
from ecntune.switch.runtime import DROP_PORT, AssertionFailure, Pkt
from ecntune.switch.traffic_manager import TrafficManager

log = logging.getLogger("ecntune.switch")

NORMAL, INGRESS_CLONE, EGRESS_CLONE, RECIRC, REPLICATION, RESUBMIT = 0, 1, 2, 4, 5, 6
RX_BATCH = 64  # frames read from one port before the loop looks at the others
# The longest the loop sleeps: whatever a client asks for (a digest timeout of 2^63 ns, a
# queue rate of 1e-9 pkt/s puts the next event centuries away), epoll gets a bounded wait.
MAX_WAIT_S = 0.05
MAX_PORT_DELAY_S = 1.0  # a propagation delay beyond this is a typo, not a fabric
DATAPLANE_NICE = -10  # the data-plane thread's priority where the switch runs as root
MAX_PASSES = 16  # resubmit/recirculate loops longer than this are cut (and counted)

PacketInSink = Callable[[bytes], None]
DATAPLANES = ("auto", "native", "python")


@dataclass
class Stats:
    rx: int = 0
    tx: int = 0
    dropped: int = 0  # by the program (mark_to_drop), or to a port with no interface
    errors: int = 0  # packets whose processing raised (dropped, logged)
    to_cpu: int = 0
    from_cpu: int = 0
    per_port_tx: dict[int, int] = field(default_factory=dict)


@dataclass
class MirrorSession:
    port: int
    truncate: int = 0  # 0 = whole packet


class Switch:
    def __init__(
        self,
        ports: dict[int, str],
        cpu_port: int = 255,
        device_id: int = 0,
        pcap_dir: Path | None = None,
        dataplane: str = "auto",
    ) -> None:
        if dataplane not in DATAPLANES:
            raise ValueError(f"dataplane must be one of {DATAPLANES}, got {dataplane!r}")
        self.device_id, self.cpu_port = device_id, cpu_port
        self.dataplane = dataplane
        self.engine: NativeDataplane | None = None  # None: the Python loop runs
        self.engine_note = "chosen when the switch starts with a program"
        self.ports = {n: Port(n, iface, pcap_dir) for n, iface in sorted(ports.items())}
        self.program: Program | None = None
        self.lock = threading.RLock()
        self.tm = self._python_tm = TrafficManager()
        self.digests = DigestEngine()
        self.mirrors: dict[int, MirrorSession] = {}
        self.mcast: dict[int, list[tuple[int, int]]] = {}  # group -> [(port, rid)]
        self.packet_in: PacketInSink | None = None
        self._stats = Stats()
        self._injected: deque[tuple[int, bytes]] = deque()
        self._waker = Waker()
        self._start = time.monotonic()
        self._running = False
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None  # why the data-plane thread died
        self.on_failure: Callable[[BaseException], None] | None = None
        self.port_delay_s: dict[int, float] = {}  # propagation delay per egress port
        self._wire: list[tuple[float, int, int, bytes]] = []  # heap: (due, seq, port, frame)
        self._wire_seq = 0
        self._template: list[int] = []
        self._metadata_slots: list[int] = []

    @contextlib.contextmanager
    def editing(self) -> Iterator[None]:
        """The switch lock for a batch of control-plane changes; the native engine's table
        changes made under it reach its lookup together when it is released."""
        with self.lock:
            batched = self.engine.native.batched() if self.engine else contextlib.nullcontext()
            with batched:
                yield

    @property
    def stats(self) -> Stats:
        """Counters of whichever engine runs (the native one keeps its own in C)."""
        return self.engine.stats(self._stats) if self.engine is not None else self._stats

    def queue_counts(self, port: int) -> tuple[int, int, int]:
        """A port queue's (depth now, packets enqueued, packets tail-dropped) so far."""
        if self.engine is not None:
            return self.engine.queue_counts(port)
        q = self.tm.queues.get(port)
        return (len(q.items), q.enqueued, q.dropped) if q else (0, 0, 0)

    # -- configuration (control threads) -------------------------------------------------

    def load(self, program: Program) -> None:
        """Swap in a compiled program; queued packets of the old one are discarded."""
        with self.lock:
            if self._running:  # first: a program the forced native engine refuses loads not
                self._choose_engine(program)
            self.program = program
            self._template = program.layout.template()
            self._metadata_slots = [
                fi.slot for h in program.layout.headers.values() if h.metadata for fi in h.fields
            ]
            for q in self.tm.queues.values():
                q.items.clear()
            self.digests.pending.clear()

    def _choose_engine(self, program: Program) -> None:
        """The native engine for `program` where it can run, else the Python loop (and why);
        a running engine of an older program stops and the data-plane thread takes the new."""
        engine, why = None, "as asked: --dataplane python"
        if self.dataplane != "python":
            try:
                engine = NativeDataplane(self, program)
            except (NativeUnavailable, OSError) as e:
                if self.dataplane == "native":
                    raise
                why = str(e)
        old, self.engine = self.engine, engine
        self.tm = engine.tm if engine is not None else self._python_tm
        self.engine_note = "native (C)" if engine is not None else f"python ({why})"
        log.warning("data plane: %s", self.engine_note)
        if old is not None:
            old.stop()
        self._waker.wake()  # a Python loop notices the native engine and hands over

    def inject(self, frame: bytes, port: int | None = None) -> None:
        """A frame entering ingress on `port` (the CPU port by default): PacketOut."""
        port = self.cpu_port if port is None else port
        if self.engine is not None:
            self.engine.inject(port, frame)
            return
        self._injected.append((port, frame))
        self._waker.wake()

    def now_us(self) -> int:
        return int((time.monotonic() - self._start) * 1e6)

    # -- the pipeline (data-plane thread, or synchronously in tests) -----------------------

    def receive(self, port: int, frame: bytes) -> None:
        """Ingress processing of one frame, then enqueue (or clone/replicate/learn)."""
        prog = self.program
        if prog is None:
            return
        try:
            self._ingress(prog, port, frame, None, NORMAL, 0)
        except Exception as e:
            self._error(e, port)

    def _ingress(
        self,
        prog: Program,
        port: int,
        frame: bytes,
        preserved: list[int] | None,
        instance: int,
        passes: int,
    ) -> None:
        s = prog.slots
        f = self._template[:]
        if preserved is not None:
            f = preserved
        pkt = Pkt(frame)
        f[s["standard_metadata.ingress_port"]] = port
        f[s["standard_metadata.instance_type"]] = instance
        f[s["standard_metadata.packet_length"]] = len(frame)
        if "intrinsic_metadata.ingress_global_timestamp" in s:
            f[s["intrinsic_metadata.ingress_global_timestamp"]] = self.now_us()
        prog.parse(f, pkt)
        if "standard_metadata.parser_error" in s:
            f[s["standard_metadata.parser_error"]] = pkt.error
        if "standard_metadata.checksum_error" in s:
            f[s["standard_metadata.checksum_error"]] = pkt.cksum_error
        try:
            prog.ingress(f, pkt)
        except AssertionFailure as e:
            self._error(e, port)
            return
        pkt.exit = False

        if pkt.clone_session:
            session = self.mirrors.get(pkt.clone_session & 0xFFFF)
            if session is not None:
                g = self._copy_preserving(prog, f, pkt.clone_fl)
                cp = Pkt(frame)
                prog.parse(g, cp)
                g[s["standard_metadata.instance_type"]] = INGRESS_CLONE
                cp.truncate = session.truncate
                self._enqueue(prog, session.port, g, cp)
        if pkt.learn_id:
            ll = prog.learn_lists.get(pkt.learn_id)
            if ll is not None:
                sample = tuple(f[slot] for _, slot, _ in ll.fields)
                self.digests.learn(pkt.learn_id, sample, time.monotonic())
        if pkt.resubmit:
            if passes >= MAX_PASSES:
                self.stats.errors += 1
                return
            g = self._copy_preserving(prog, f, pkt.resubmit)
            self._ingress(prog, port, frame, g, RESUBMIT, passes + 1)
            return
        mgid = f[s["standard_metadata.mcast_grp"]] if "standard_metadata.mcast_grp" in s else 0
        if mgid:
            self._replicate(prog, mgid, f, pkt)
            return
        egress_spec = f[s["standard_metadata.egress_spec"]]
        if egress_spec == DROP_PORT:
            self.stats.dropped += 1
            return
        f[s["standard_metadata.instance_type"]] = NORMAL
        self._enqueue(prog, egress_spec, f, pkt)

    def _copy_preserving(self, prog: Program, f: list[int], field_list: int) -> list[int]:
        """A fresh field vector keeping only the fields of a clone/resubmit field list."""
        g = self._template[:]
        for slot in prog.field_lists.get(field_list, ()):
            g[slot] = f[slot]
        return g

    def _replicate(self, prog: Program, mgid: int, f: list[int], pkt: Pkt) -> None:
        s = prog.slots
        for port, rid in self.mcast.get(mgid, []):
            g = f[:]
            g[s["standard_metadata.instance_type"]] = REPLICATION
            if "standard_metadata.egress_rid" in s:
                g[s["standard_metadata.egress_rid"]] = rid
            cp = Pkt(pkt.data)
            cp.pos, cp.length, cp.truncate = pkt.pos, pkt.length, pkt.truncate
            self._enqueue(prog, port, g, cp)

    def _enqueue(self, prog: Program, port: int, f: list[int], pkt: Pkt) -> None:
        s = prog.slots
        if "queueing_metadata.enq_timestamp" in s:
            f[s["queueing_metadata.enq_timestamp"]] = self.now_us() & 0xFFFFFFFF
            f[s["queueing_metadata.enq_qdepth"]] = self.tm.depth(port)
        if not self.tm.enqueue(port, (f, pkt), pkt.length, time.monotonic()):
            self.stats.dropped += 1

    def _egress(self, prog: Program, port: int, f: list[int], pkt: Pkt, left: int) -> None:
        s = prog.slots
        now = self.now_us()
        if "intrinsic_metadata.egress_global_timestamp" in s:
            f[s["intrinsic_metadata.egress_global_timestamp"]] = now
        if "queueing_metadata.deq_qdepth" in s:
            enq = f[s["queueing_metadata.enq_timestamp"]]
            f[s["queueing_metadata.deq_timedelta"]] = ((now & 0xFFFFFFFF) - enq) & 0xFFFFFFFF
            f[s["queueing_metadata.deq_qdepth"]] = left
        f[s["standard_metadata.egress_port"]] = port
        f[s["standard_metadata.egress_spec"]] = 0
        f[s["standard_metadata.packet_length"]] = pkt.length
        try:
            prog.egress(f, pkt)
        except AssertionFailure as e:
            self._error(e, port)
            return
        if pkt.clone_session:
            session = self.mirrors.get(pkt.clone_session & 0xFFFF)
            if session is not None:
                # An egress clone keeps the headers; metadata restarts but for the field list.
                g = f[:]
                for slot in self._metadata_slots:
                    g[slot] = self._template[slot]
                for slot in prog.field_lists.get(pkt.clone_fl, ()):
                    g[slot] = f[slot]
                cp = Pkt(pkt.data)
                cp.pos, cp.length, cp.truncate = pkt.pos, pkt.length, session.truncate
                g[s["standard_metadata.instance_type"]] = EGRESS_CLONE
                self._enqueue(prog, session.port, g, cp)
        if f[s["standard_metadata.egress_spec"]] == DROP_PORT:
            self.stats.dropped += 1
            return
        frame = prog.deparse(f, pkt)
        if pkt.recirculate:
            g = self._copy_preserving(prog, f, pkt.recirculate)
            self._ingress(prog, port, frame, g, RECIRC, 1)
            return
        if pkt.truncate and len(frame) > pkt.truncate:
            frame = frame[: pkt.truncate]
        self._transmit(port, frame)

    def _transmit(self, port: int, frame: bytes) -> None:
        if port == self.cpu_port:
            self.stats.to_cpu += 1
            if self.packet_in is not None:
                self.packet_in(frame)
            return
        if port not in self.ports:
            self.stats.dropped += 1
            return
        delay = self.port_delay_s.get(port, 0.0)
        if delay > 0:
            self._wire_seq += 1
            heapq.heappush(self._wire, (time.monotonic() + delay, self._wire_seq, port, frame))
            return
        self._send(port, frame)

    def _send(self, port: int, frame: bytes) -> None:
        self.ports[port].send(frame)
        self.stats.tx += 1
        self.stats.per_port_tx[port] = self.stats.per_port_tx.get(port, 0) + 1

    def _release_wire(self, now: float) -> None:
        """Send the frames whose propagation delay has passed (in the order they are due)."""
        wire = self._wire
        while wire and wire[0][0] <= now:
            _, _, port, frame = heapq.heappop(wire)
            self._send(port, frame)

    def set_port_delay(self, delay_s: float, port: int | None = None) -> None:
        """A port's propagation delay (all ports when None); frames already on the wire keep
        theirs."""
        if not 0 <= delay_s <= MAX_PORT_DELAY_S:
            raise ValueError(f"delay must be within 0..{MAX_PORT_DELAY_S} s, got {delay_s}")
        for p in self.ports if port is None else [port]:
            if p not in self.ports:
                raise ValueError(f"no port {p}")
            self.port_delay_s[p] = delay_s
        if self.engine is not None:
            self.engine.push_shaping()

    def _error(self, e: BaseException, port: int) -> None:
        self.stats.errors += 1
        if self.stats.errors <= 20 or self.stats.errors % 1000 == 0:
            log.warning("packet from port %d dropped: %s: %s", port, type(e).__name__, e)

    def run_departures(self, now: float) -> None:
        """Egress every packet whose departure time has come."""
        prog = self.program
        for port, (f, pkt), left in self.tm.departures(now):
            if prog is None:
                continue
            try:
                self._egress(prog, port, f, pkt, left)
            except Exception as e:
                self._error(e, port)

    # -- the data-plane loop ------------------------------------------------------------------

    def start(self) -> None:
        """Start the data-plane thread, with the native engine where it can run."""
        self._running = True
        if self.program is not None:
            self._choose_engine(self.program)
        self._thread = threading.Thread(target=self._run, name="dataplane", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        engine = self.engine
        if engine is not None:
            engine.stop()
        self._waker.wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for p in self.ports.values():
            p.close()
        self._waker.close()

    def _run(self) -> None:
        """The engine of the moment until stop(); a program load may change it under us."""
        with contextlib.suppress(PermissionError):  # only root may raise a thread's priority
            # the emulated hardware: its timed releases must not wait behind the hosts'
            # traffic generators and the server's threads on a busy machine
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DATAPLANE_NICE)
        try:
            while self._running:
                engine = self.engine
                if engine is None:
                    self._loop()
                    continue
                try:
                    engine.run()
                finally:
                    if engine is not self.engine or not self._running:
                        engine.close()
        except BaseException as e:
            self.failure = e
            log.critical("the data plane stopped: %s: %s", type(e).__name__, e, exc_info=True)
            if self.on_failure is not None:
                self.on_failure(e)

    def _loop(self) -> None:
        """The Python engine: until stop() or a native engine takes over."""
        ep = select.epoll()
        by_fd = {p.fileno(): p for p in self.ports.values()}
        for fd in by_fd:
            ep.register(fd, select.EPOLLIN)
        ep.register(self._waker.fileno(), select.EPOLLIN)
        ep_fd = ep.fileno()
        lock, injected = self.lock, self._injected
        try:
            while self._running and self.engine is None:
                now = time.monotonic()
                wire = self._wire[0][0] if self._wire else None
                deadlines = [self.tm.next_departure(), self.digests.poll(now), wire]
                due = min((d for d in deadlines if d is not None), default=now + MAX_WAIT_S)
                events = ep.poll(0)
                if not events and due > now:
                    # epoll_wait counts whole milliseconds (Python rounds up): a timed
                    # release due a fraction of a millisecond away (a rate-limited queue's
                    # next departure, a delay line's next frame) came up to 1 ms late (a
                    # 300 pps queue's gaps off by 0.1 ms median, 0.03 ms now). select's
                    # timeout is in microseconds; the epoll fd is readable when any port is.
                    select.select([ep_fd], [], [], min(due - now, MAX_WAIT_S))
                    events = ep.poll(0)
                with lock:
                    for fd, _ in events:
                        port = by_fd.get(fd)
                        if port is None:
                            self._waker.drain()
                            continue
                        for frame in port.receive(RX_BATCH):
                            self.stats.rx += 1
                            self.receive(port.number, frame)
                            # Egress what is due before the next ingress, as BMv2's egress
                            # thread would: a packet reaching an idle port leaves it empty.
                            self.run_departures(time.monotonic())
                    while injected:
                        in_port, frame = injected.popleft()
                        self.stats.from_cpu += 1
                        self.receive(in_port, frame)
                    self.run_departures(time.monotonic())
                    self._release_wire(time.monotonic())
        finally:
            ep.close()
