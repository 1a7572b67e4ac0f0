"""A running emulation of one `ecntune.topology.Topology`, torn down whatever ends it.

`FabricTopo` turns the shared Topology into a Mininet topology (ports numbered as the
Topology numbers them, addresses and static neighbours it assigns), and `Fabric` runs it:

    with Fabric(preset("tiny"), FabricOptions(target="embedded")) as fab:
        fab.host("h1").cmd("ping -c1 10.0.0.2")
        fab.specs["s1"].grpc_addr   # where the controller connects

Everything a Fabric starts is tagged with its run id (see cleanup.py), so stop(), Ctrl-C,
SIGTERM, an exception or the reaper (after SIGKILL) leave nothing behind.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mininet.link import Link
from mininet.net import Mininet
from mininet.topo import Topo

from ecntune.fabric.cleanup import ENV_VAR, Run, begin_run, clean, start_reaper
from ecntune.fabric.nodes import (
    Bmv2Switch,
    EcnHost,
    EmbeddedSwitch,
    KernelBridge,
    P4Switch,
    Shaper,
    default_congestion_control,
)
from ecntune.targets import SwitchSpec
from ecntune.topology import MIN_EMULATED_DELAY_S, MTU_BYTES, QUEUE_PKTS, Topology

log = logging.getLogger(__name__)

SwitchKind = Literal["embedded", "bmv2", "bridge"]
SWITCH_CLASSES = {"embedded": EmbeddedSwitch, "bmv2": Bmv2Switch, "bridge": KernelBridge}
FABRIC_PREFIX = "10.0.0.0/16"  # every host address Topology assigns (10.0.<switch>.<host>)


@dataclass(frozen=True)
class FabricOptions:
    """How to emulate a Topology; the defaults give the demo's fabric."""

    switch: SwitchKind = "embedded"
    json_path: Path | None = None  # pipeline loaded at start; None: the controller pushes it
    ecn: bool = True  # hosts' net.ipv4.tcp_ecn (False: hosts are not ECN-capable)
    cc: str | None = None  # None: DCTCP where the kernel has it, else cubic
    queue_depth_pkts: int = QUEUE_PKTS  # every egress queue's buffer limit (the sim's too)
    host_shaper: Shaper | None = "htb"  # host NICs at their link's rate (None: unshaped)
    port_offset: int = 0  # added to every gRPC/Thrift port, so fabrics can run side by side
    workdir: Path | None = None  # switch logs go here when set
    log_level: str = "warn"
    # the topology's link delays, as the embedded switch's per-port delay lines (this kernel
    # has no netem; BMv2 has no such knob and runs without them, saying so)
    link_delays: bool = True


def port_delays(topology: Topology, switch: str) -> dict[int, float]:
    """Propagation delay per egress port of `switch` that gives every path the topology's
    RTT: a switch-to-switch link is delayed at both ends' egress; a host link only at the
    switch's (the host's NIC sends straight into the veth), so there it counts twice."""
    out = {}
    for lk, port in topology.ports(switch):
        far, _ = topology.neighbour(switch, port)
        delay = lk.delay_s * (2 if far in topology.hosts else 1)
        if delay >= MIN_EMULATED_DELAY_S:
            out[port] = delay
    return out


def port_pps(bw_bps: float) -> int:
    """A port's rate in full-size packets per second (BMv2 queues are rated in packets)."""
    return max(1, round(bw_bps / (8 * MTU_BYTES)))


class FabricTopo(Topo):
    """The Mininet topology of a Topology, with interface names tagged by the run."""

    def build(self, topology: Topology, run: Run, options: FabricOptions, cc: str) -> None:
        bridged = options.switch == "bridge"
        if bridged and len(topology.links) - len(topology.hosts) != len(topology.switches) - 1:
            raise ValueError(
                "the bridge fabric floods unknown MACs, so it needs a loop-free topology; "
                f"{topology.name!r} has loops (use a P4 target)"
            )
        for sw in topology.switches.values():
            bw = {port: lk.bw_bps for lk, port in topology.ports(sw.name)}
            if bridged:
                opts = {
                    "bridge_name": run.ifname(f"br{sw.device_id}"),
                    "port_bps": bw,
                    "device_id": sw.device_id,
                }
            else:
                opts = {
                    "device_id": sw.device_id,
                    "grpc_port": sw.grpc_port + options.port_offset,
                    "thrift_port": sw.thrift_port + options.port_offset,
                    "cpu_port": sw.cpu_port,
                    "port_pps": {port: port_pps(b) for port, b in bw.items()},
                    "port_delay_s": port_delays(topology, sw.name) if options.link_delays else {},
                    "json_path": options.json_path,
                    "log_file": options.workdir / f"{sw.name}.log" if options.workdir else None,
                    "log_level": options.log_level,
                }
            self.addSwitch(sw.name, queue_depth_pkts=options.queue_depth_pkts, **opts)
        for h in topology.hosts.values():
            if bridged:  # no switch rewrites MACs: peers are reached at their own MACs
                neighbours = {o.ip: o.mac for o in topology.hosts.values() if o.name != h.name}
            else:
                neighbours = topology.host_neighbours(h.name)
            link_bw = topology.port_bw(h.switch, h.switch_port)
            self.addHost(
                h.name,
                ip=f"{h.ip}/24",
                mac=h.mac,
                neighbours=neighbours,
                routes=(FABRIC_PREFIX,),
                ecn=options.ecn,
                cc=cc,
                nic_bps=link_bw if options.host_shaper else None,
                nic_qdisc=options.host_shaper or "htb",
            )
        for lk in topology.links:
            a_sw = topology.switches.get(lk.a)
            b_sw = topology.switches[lk.b]
            self.addLink(
                lk.a,
                lk.b,
                port1=lk.a_port,
                port2=lk.b_port,
                intfName1=run.ifname(f"s{a_sw.device_id}p{lk.a_port}") if a_sw else f"{lk.a}-eth0",
                intfName2=run.ifname(f"s{b_sw.device_id}p{lk.b_port}"),
                addr1=topology.mac_of(lk.a, lk.a_port),
                addr2=topology.mac_of(lk.b, lk.b_port),
            )


class Fabric:
    """Mininet hosts and switches for a Topology; a context manager that always cleans up."""

    def __init__(self, topology: Topology, options: FabricOptions | None = None) -> None:
        self.topology = topology
        self.options = options or FabricOptions()
        self.cc = self.options.cc or default_congestion_control()
        self.run: Run | None = None
        self.net: Mininet | None = None
        self._reaper: subprocess.Popen | None = None
        self._saved_env: str | None = None
        self._saved_handlers: dict[int, object] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Fabric:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if os.geteuid() != 0:
            raise PermissionError("an emulated fabric needs root (network namespaces, veths)")
        self.run = begin_run()
        self._saved_env = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = self.run.rid  # inherited by every process started from here on
        try:
            self._reaper = start_reaper(self.run)
            self._trap_signals()
            if self.options.workdir:
                self.options.workdir.mkdir(parents=True, exist_ok=True)
            topo = FabricTopo(self.topology, self.run, self.options, self.cc)
            switch_cls = SWITCH_CLASSES[self.options.switch]
            self.net = Mininet(
                topo=topo,
                switch=switch_cls,
                host=EcnHost,
                link=Link,
                controller=None,
                build=False,
                autoSetMacs=False,
            )
            self.net.build()
            self.net.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop switches, then Mininet, then remove whatever the run still has (idempotent)."""
        if self.run is None:
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._ignore(sig)  # a second Ctrl-C must not cut the teardown short
        try:
            if self.net is not None:
                for sw in self.net.switches:
                    sw.stop(deleteIntfs=False)  # processes first: their ports vanish next
                self.net.stop()
        except Exception:
            log.exception("Mininet teardown failed; removing the run's leftovers directly")
        finally:
            self.net = None
            left = clean([self.run.rid])  # also ends the reaper
            if left.processes or left.links:
                log.debug("cleanup removed %s", left)
            if self._reaper is not None:
                self._reaper.wait()
            self.run = None
            if self._saved_env is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = self._saved_env
            self._restore_signals()

    def _trap_signals(self) -> None:
        """SIGTERM and SIGHUP unwind like Ctrl-C, so `finally` blocks and __exit__ run."""
        if not _in_main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._saved_handlers[sig] = signal.signal(sig, _raise_keyboard_interrupt)
        self._saved_handlers.setdefault(signal.SIGINT, signal.getsignal(signal.SIGINT))

    def _ignore(self, sig: int) -> None:
        if _in_main_thread():
            self._saved_handlers.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, signal.SIG_IGN)

    def _restore_signals(self) -> None:
        if _in_main_thread():
            for sig, handler in self._saved_handlers.items():
                signal.signal(sig, handler)
        self._saved_handlers.clear()

    # -- what users of a running fabric need ---------------------------------------------------

    def host(self, name: str) -> EcnHost:
        return self._node(name, EcnHost)

    def switch(self, name: str) -> P4Switch:
        return self._node(name, P4Switch)

    @property
    def specs(self) -> dict[str, SwitchSpec]:
        """Each P4 switch's SwitchSpec: ports, gRPC address, device id, control port."""
        if self.net is None:
            raise RuntimeError("the fabric is not running")
        return {s.name: s.spec() for s in self.net.switches if isinstance(s, P4Switch)}

    def dataplanes(self) -> dict[str, str]:
        """Which engine forwards in each P4 switch (Target.dataplane: a run's numbers depend
        on it); the kernel bridge has none here."""
        return {name: self.switch(name).target.dataplane(spec) for name, spec in self.specs.items()}

    def _node(self, name: str, cls: type):
        if self.net is None:
            raise RuntimeError("the fabric is not running")
        node = self.net[name]
        if not isinstance(node, cls):
            raise KeyError(f"{name!r} is not a {cls.__name__}")
        return node


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
