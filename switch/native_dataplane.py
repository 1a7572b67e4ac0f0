"""The native loop (switch/native_loop.c) driven by a Switch: its ports, queues, rings.

switch/dataplane.py's Switch runs one of two engines on its data-plane thread: its own
Python loop, or this one, a C loop compiled with the program (switch/native.py) that
reads and writes the same port sockets. This module is the thin Python side of the
native engine: it hands the loop the program's metadata slots, learn lists, ports and
the traffic manager's settings, keeps those settings in step when the control plane
changes them, and runs a pump thread that turns the loop's two rings into what the
Python engine would have produced (DigestEngine samples, PacketIn frames).

`NativeDataplane.refusal(switch, program)` says why a program or switch cannot run
natively (no compiler, a construct compile_c refuses, clones or recirculation the loop
does not do, pcap capture); the Switch then runs the Python loop and logs why.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ecntune.switch.compiler import V1MODEL_SLOTS
from ecntune.switch.native import NativeProgram, NativeUnavailable
from ecntune.switch.program import Program
from ecntune.switch.traffic_manager import Shaping, TrafficManager

if TYPE_CHECKING:
    from ecntune.switch.dataplane import Stats, Switch

log = logging.getLogger("ecntune.switch")

MAX_PORTS = 512  # native_loop.c's ECT_MAX_PORTS
MAX_LEARN = 32  # native_loop.c's ECT_MAX_LEARN
UNSUPPORTED_PRIMITIVES = (
    "clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress", "resubmit", "recirculate",
)  # fmt: skip
PUMP_WAIT_S = 0.05  # the longest the pump sleeps between digest timeout checks
C_COUNTERS = (
    "rx", "tx", "dropped", "errors", "to_cpu", "from_cpu", "digests_lost", "packet_ins_lost",
    "unsupported", "tx_errors",
)  # fmt: skip


class CStats(ctypes.Structure):
    _fields_ = [*((name, ctypes.c_uint64) for name in C_COUNTERS),
                ("per_port_tx", ctypes.c_uint64 * MAX_PORTS)]  # fmt: skip


class CQueue(ctypes.Structure):
    _fields_ = [("head", ctypes.c_void_p), ("tail", ctypes.c_void_p), ("depth", ctypes.c_uint64),
                ("free_at_ns", ctypes.c_int64), ("enqueued", ctypes.c_uint64),
                ("dropped", ctypes.c_uint64)]  # fmt: skip


class CShaping(ctypes.Structure):
    _fields_ = [("depth_pkts", ctypes.c_int64), ("rate_pps", ctypes.c_double),
                ("rate_bps", ctypes.c_double), ("delay_ns", ctypes.c_int64)]  # fmt: skip


class CDigest(ctypes.Structure):
    _fields_ = [("learn_id", ctypes.c_uint64), ("n", ctypes.c_uint64),
                ("values", ctypes.c_uint64 * MAX_LEARN)]  # fmt: skip


class NativeTrafficManager(TrafficManager):
    """The traffic manager's settings as the control plane sees them, pushed into the C
    loop on every change; depths and counters read from the loop's queues."""

    def __init__(self, tm: TrafficManager, engine: NativeDataplane) -> None:
        super().__init__()
        self.default, self.queues = tm.default, tm.queues
        self.engine = engine

    def set_rate_pps(self, pps: float, port: int | None = None) -> None:
        super().set_rate_pps(pps, port)
        self.engine.push_shaping()

    def set_rate_bps(self, bps: float, port: int | None = None) -> None:
        super().set_rate_bps(bps, port)
        self.engine.push_shaping()

    def set_depth(self, pkts: int, port: int | None = None) -> None:
        super().set_depth(pkts, port)
        self.engine.push_shaping()

    def depth(self, port: int) -> int:
        return self.engine.queue_counts(port)[0]


class NativeDataplane:
    """One program's C loop on a Switch's ports (module docstring)."""

    @staticmethod
    def refusal(switch: Switch, program: Program) -> str | None:
        """Why this switch cannot run this program natively; None when it can."""
        if any(p.pcap_in for p in switch.ports.values()):
            return "pcap capture is done by the Python data plane"
        used = {p["op"] for a in program.json.get("actions", []) for p in a["primitives"]}
        found = sorted(used & set(UNSUPPORTED_PRIMITIVES))
        if found:
            return f"the native loop does not do {', '.join(found)}"
        if any(len(ll.fields) > MAX_LEARN for ll in program.learn_lists.values()):
            return f"a digest with more than {MAX_LEARN} fields"
        if any(not 0 <= p < MAX_PORTS for p in [*switch.ports, switch.cpu_port] if p != -1):
            return f"a port number outside 0..{MAX_PORTS - 1}"
        return None

    def __init__(self, switch: Switch, program: Program) -> None:
        why = self.refusal(switch, program)
        if why:
            raise NativeUnavailable(why)
        self.switch, self.program = switch, program
        self.native = NativeProgram(program)
        lib = self.lib = self.native.lib
        lib.ect_dp_init.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                    ctypes.c_int64, ctypes.c_int64, ctypes.c_int]  # fmt: skip
        lib.ect_dp_add_port.argtypes = [ctypes.c_int64, ctypes.c_int]
        lib.ect_dp_learn_list.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ect_dp_inject.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_uint64]
        lib.ect_dp_next_digest.argtypes = [ctypes.POINTER(CDigest)]
        lib.ect_dp_next_packet_in.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.ect_dp_next_packet_in.restype = ctypes.c_int64
        self.c_stats = CStats.in_dll(lib, "ect_dp_stats")
        self.queues = (CQueue * MAX_PORTS).in_dll(lib, "ect_queues")
        self.shaping = (CShaping * MAX_PORTS).in_dll(lib, "ect_shape")
        self.notify_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._template = np.array(program.layout.template(), dtype=np.uint64)
        self._meta = np.array([program.slots.get(n, -1) for n in V1MODEL_SLOTS], dtype=np.int64)
        start_ns = int(switch._start * 1e9)  # the Switch's clock: now_us() agrees
        rc = lib.ect_dp_init(
            self._template.ctypes.data, len(self._template), self._meta.ctypes.data,
            switch.cpu_port, start_ns, self.notify_fd,
        )  # fmt: skip
        if rc < 0:
            raise OSError(-rc, f"native data plane: {os.strerror(-rc)}")
        for port in switch.ports.values():
            rc = lib.ect_dp_add_port(port.number, port.fileno())
            if rc < 0:
                raise OSError(-rc, f"port {port.number}: {os.strerror(-rc)}")
        for ll in program.learn_lists.values():
            slots = np.array([slot for _, slot, _ in ll.fields], dtype=np.int64)
            lib.ect_dp_learn_list(ll.id, len(slots), slots.ctypes.data)
        self.tm = NativeTrafficManager(switch.tm, self)
        self.push_shaping()
        self._pump: threading.Thread | None = None
        self._stopping = False
        self.inject_errors = 0

    # -- settings: the control plane's view pushed into the loop ------------------------------

    def push_shaping(self) -> None:
        """Every port's depth, rate and delay as the TrafficManager and Switch hold them."""
        tm, delays = self.tm, self.switch.port_delay_s
        self.lib.ect_lock()
        try:
            for port in range(MAX_PORTS):
                q = tm.queues.get(port)
                write_shaping(self.shaping[port], q.shaping if q else tm.default,
                              delays.get(port, 0.0))  # fmt: skip
        finally:
            self.lib.ect_unlock()

    def inject(self, port: int, frame: bytes) -> None:
        if self.lib.ect_dp_inject(port, frame, len(frame)) < 0:  # the ring is full
            self.inject_errors += 1

    def queue_counts(self, port: int) -> tuple[int, int, int]:
        if not 0 <= port < MAX_PORTS:
            return 0, 0, 0
        q = self.queues[port]
        return int(q.depth), int(q.enqueued), int(q.dropped)

    def stats(self, into: Stats) -> Stats:
        """The loop's counters in the Python engine's Stats shape."""
        for name in ("rx", "tx", "dropped", "errors", "to_cpu", "from_cpu"):
            setattr(into, name, int(getattr(self.c_stats, name)))
        into.dropped += int(self.c_stats.unsupported)
        into.errors += self.inject_errors
        into.per_port_tx = {p: int(n) for p, n in enumerate(self.c_stats.per_port_tx) if n}
        return into

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """The loop, on the calling (data-plane) thread, until stop(); ctypes drops the GIL."""
        self._pump = threading.Thread(target=self._pump_rings, name="dataplane-pump", daemon=True)
        self._pump.start()
        rc = self.lib.ect_dp_run()
        self._stopping = True
        self._pump.join(timeout=5)
        if rc < 0:
            raise OSError(-rc, f"native data plane: {os.strerror(-rc)}")

    def stop(self) -> None:
        self._stopping = True
        self.lib.ect_dp_stop()

    def close(self) -> None:
        """Free what the loop still holds (after run() returned)."""
        self.lib.ect_dp_close()
        with contextlib.suppress(OSError):
            os.close(self.notify_fd)

    def _pump_rings(self) -> None:
        """Digest samples into the DigestEngine, frames for the CPU port to packet_in; and
        the digest timeouts the Python loop would have polled."""
        sw, digest = self.switch, CDigest()
        buf = ctypes.create_string_buffer(1 << 17)
        wake: float | None = None
        while not self._stopping:
            timeout = (
                PUMP_WAIT_S if wake is None else max(0.0, min(PUMP_WAIT_S, wake - time.monotonic()))
            )
            select.select([self.notify_fd], [], [], timeout)
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self.notify_fd)
            frames = []
            with sw.lock:
                now = time.monotonic()
                while self.lib.ect_dp_next_digest(ctypes.byref(digest)):
                    sample = tuple(int(v) for v in digest.values[: digest.n])
                    sw.digests.learn(int(digest.learn_id), sample, now)
                while (n := self.lib.ect_dp_next_packet_in(buf, len(buf))) >= 0:
                    frames.append(buf.raw[:n])
                wake = sw.digests.poll(time.monotonic())
            if sw.packet_in is not None:
                for frame in frames:
                    sw.packet_in(frame)


def write_shaping(c: CShaping, s: Shaping, delay_s: float) -> None:
    c.depth_pkts = s.depth_pkts
    c.rate_pps = s.rate_pps or 0.0
    c.rate_bps = s.rate_bps or 0.0
    c.delay_ns = int(delay_s * 1e9)
