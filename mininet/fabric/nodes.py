"""Mininet node classes: ECN hosts, P4 switches on either target, and a plain kernel bridge.

They are ordinary `mininet.node.Host`/`Switch` subclasses, so they work in any Mininet
script. The P4 switches follow the p4lang tutorials' layout: the switch process runs in the
root namespace and owns the switch-side veth ends, which it reads and writes itself. The
bottleneck queue therefore forms inside the switch's traffic manager, where marking happens;
tc shapes only host NICs (and the bridge's ports, which have no traffic manager).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import ClassVar, Literal

from mininet.node import Host, Node, Switch

from ecntune import targets
from ecntune.doctor import tcp_congestion_controls
from ecntune.targets import SwitchSpec, TargetName

log = logging.getLogger(__name__)

# Everything a software switch cannot handle: segmentation/receive offloads hand it
# 64 KB super-packets, checksum offloads hand it packets with unfinished checksums.
OFFLOADS = ("rx", "tx", "sg", "tso", "gso", "gro")
SHAPER_BURST = "15k"  # Mininet's TCIntf value: about 10 full packets at any rate
TBF_LATENCY = "100ms"  # longest a packet may wait in a tbf NIC queue before it is dropped
Shaper = Literal["htb", "tbf"]


def run_checked(node: Node | None, *argv: str) -> str:
    """Run a command in `node`'s namespace (root when None); raise with its output on failure."""
    if node is None:
        out = subprocess.run(list(argv), capture_output=True, text=True)
        stdout, stderr, rc = out.stdout, out.stderr, out.returncode
    else:
        stdout, stderr, rc = node.pexec(list(argv))
    if rc != 0:
        where = node.name if node is not None else "root namespace"
        raise RuntimeError(f"{' '.join(argv)} failed in {where}: {stderr or stdout}".strip())
    return stdout


def prepare_intf(node: Node | None, intf: str) -> None:
    """Offloads off and no IPv6 chatter (router solicitations, MLD) on a fabric interface."""
    # Not every veth driver offers every feature; ethtool reports those it cannot change.
    argv = ["ethtool", "-K", intf]
    for feature in OFFLOADS:
        argv += [feature, "off"]
    if node is None:
        subprocess.run(argv, capture_output=True)
    else:
        node.pexec(argv)
    run_checked(node, "sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1")


def shape(
    node: Node | None,
    intf: str,
    bps: float,
    limit_pkts: int | None = None,
    qdisc: Shaper = "htb",
) -> None:
    """Egress rate limit with htb or tbf (this kernel has no netem), as a NIC of `bps`.

    With `limit_pkts`, packets wait in a tail-drop FIFO of that many packets.
    """
    root = f"tc qdisc replace dev {intf} root handle 5:"
    if qdisc == "htb":
        run_checked(node, *f"{root} htb default 1".split())
        run_checked(
            node,
            *f"tc class add dev {intf} parent 5: classid 5:1 htb rate {int(bps)}bit".split(),
            *f"burst {SHAPER_BURST}".split(),
        )
    elif qdisc == "tbf":
        run_checked(
            node,
            *f"{root} tbf rate {int(bps)}bit burst {SHAPER_BURST}".split(),
            *f"latency {TBF_LATENCY}".split(),
        )
    else:
        raise ValueError(f"unknown shaper {qdisc!r}; choose htb or tbf")
    if limit_pkts is not None:
        run_checked(
            node, *f"tc qdisc add dev {intf} parent 5:1 handle 10: pfifo limit {limit_pkts}".split()
        )


def default_congestion_control() -> str:
    """DCTCP where the kernel offers it (the papers' host stack), otherwise cubic."""
    return "dctcp" if "dctcp" in tcp_congestion_controls() else "cubic"


class EcnHost(Host):
    """A host with kernel TCP and ECN that never ARPs: every peer is a static neighbour entry.

    Extra parameters (Mininet passes addHost's keyword arguments to `config`):
    neighbours: ip -> MAC for every peer; routes: on-link prefixes; ecn: net.ipv4.tcp_ecn;
    cc: congestion control; nic_bps: rate of the host's NIC (None: unshaped), shaped by
    nic_qdisc (htb or tbf).
    """

    cc: str = "cubic"
    ecn: bool = True

    def config(
        self,
        neighbours: dict[str, str] | None = None,
        routes: tuple[str, ...] = (),
        ecn: bool = True,
        cc: str = "cubic",
        nic_bps: float | None = None,
        nic_qdisc: Shaper = "htb",
        **params,
    ) -> dict:
        result = super().config(**params)
        intf = self.defaultIntf().name
        run_checked(self, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        run_checked(self, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        prepare_intf(self, intf)
        run_checked(self, "sysctl", "-qw", f"net.ipv4.tcp_ecn={int(ecn)}")
        self.ecn, self.cc = ecn, cc
        _, err, rc = self.pexec(["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}"])
        if rc != 0:
            # A namespace may only default to what the root namespace lists in
            # tcp_allowed_congestion_control; ecntune's traffic tools pick `cc` per socket
            # (root may pick any), so only other programs run with the kernel's default.
            log.info("%s: %s stays per-socket only (%s)", self.name, cc, err.strip())
        for prefix in routes:
            run_checked(self, "ip", "route", "replace", prefix, "dev", intf, "scope", "link")
        for ip, mac in (neighbours or {}).items():
            run_checked(
                self, *f"ip neigh replace {ip} lladdr {mac} dev {intf} nud permanent".split()
            )
        if nic_bps is not None:
            shape(self, intf, nic_bps, qdisc=nic_qdisc)
        return result


class P4Switch(Switch):
    """A P4 switch process (see ecntune.targets) in the root namespace, owning its ports.

    port_pps: egress queue rate per port in packets/s (BMv2 has no byte rate);
    port_delay_s: propagation delay per egress port (the embedded target's delay lines;
    a target without them logs that it runs without);
    queue_depth_pkts: every egress queue's capacity, the buffer limit;
    json_path: a pipeline to load at start (None: wait for the controller's pipeline).
    """

    target_name: ClassVar[TargetName]

    def __init__(
        self,
        name: str,
        device_id: int,
        grpc_port: int,
        thrift_port: int,
        cpu_port: int = 255,
        port_pps: dict[int, int] | None = None,
        port_delay_s: dict[int, float] | None = None,
        queue_depth_pkts: int | None = None,
        json_path: Path | None = None,
        log_file: Path | None = None,
        log_level: str = "warn",
        **params,
    ) -> None:
        self.target = targets.target(self.target_name)  # fails early if it is not installed
        super().__init__(name, dpid=f"{device_id + 1:x}", **params)
        self.device_id, self.grpc_port, self.thrift_port = device_id, grpc_port, thrift_port
        self.cpu_port = cpu_port
        self.port_pps = dict(port_pps or {})
        self.port_delay_s = dict(port_delay_s or {})
        self.queue_depth_pkts = queue_depth_pkts
        self.json_path, self.log_file, self.log_level = json_path, log_file, log_level
        self.proc: subprocess.Popen | None = None

    def spec(self) -> SwitchSpec:
        """What the controller and the control CLI need to reach this switch."""
        return SwitchSpec(
            ports={port: intf.name for port, intf in self.intfs.items() if port > 0},
            device_id=self.device_id,
            grpc_addr=f"127.0.0.1:{self.grpc_port}",
            thrift_port=self.thrift_port,
            cpu_port=self.cpu_port,
            json_path=self.json_path,
            log_file=self.log_file,
            log_level=self.log_level,
        )

    def start(self, controllers: list) -> None:
        spec = self.spec()
        for intf in spec.ports.values():
            prepare_intf(None, intf)
        self.proc = targets.start(self.target, spec)
        self.configure_queues()

    def restart(self) -> None:
        """Kill the switch process and start a bare one on the same ports and addresses.

        To the controller this is a switch that crashed and came back: no pipeline, no
        entries, no registers; it must reprogram everything.
        """
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = targets.start(self.target, self.spec())
        self.configure_queues()

    def configure_queues(self) -> None:
        """Egress rate and buffer limit per port, over the control port.

        Called at start; call it again if a pipeline change resets the traffic manager.
        """
        spec = self.spec()
        for port, pps in sorted(self.port_pps.items()):
            self.target.set_queue_rate(spec, pps, port)
        if self.queue_depth_pkts is not None:
            for port in spec.ports:
                self.target.set_queue_depth(spec, self.queue_depth_pkts, port)
        if self.port_delay_s and not self.target.has_port_delay:
            log.warning("%s: %s has no port delays; links run without their delay", self.name,
                        self.target.name)  # fmt: skip
            return
        for port, delay in sorted(self.port_delay_s.items()):
            self.target.set_port_delay(spec, delay, port)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        if self.proc is not None:
            targets.stop(self.proc)
            self.proc = None
        super().stop(deleteIntfs)


class Bmv2Switch(P4Switch):
    target_name = "bmv2"


class EmbeddedSwitch(P4Switch):
    target_name = "embedded"


class KernelBridge(Switch):
    """A Linux bridge whose ports are tail-drop FIFOs at link rate: no P4, no ECN marking.

    It exercises hosts and traffic tools where no P4 target is installed, and is the
    drop-tail reference. Hosts must then hold their peers' real MACs (no switch rewrites them).
    """

    def __init__(
        self,
        name: str,
        bridge_name: str,
        port_bps: dict[int, float] | None = None,
        queue_depth_pkts: int | None = None,
        device_id: int = 0,
        **params,
    ) -> None:
        super().__init__(name, dpid=f"{device_id + 1:x}", **params)
        self.bridge_name = bridge_name
        self.port_bps = dict(port_bps or {})
        self.queue_depth_pkts = queue_depth_pkts

    def start(self, controllers: list) -> None:
        br = self.bridge_name
        run_checked(None, "ip", "link", "add", "name", br, "type", "bridge", "stp_state", "0")
        run_checked(None, "ip", "link", "set", br, "up")
        for port, intf in sorted(self.intfs.items()):
            if port == 0:
                continue
            prepare_intf(None, intf.name)
            run_checked(None, "ip", "link", "set", intf.name, "master", br, "up")
            if port in self.port_bps:
                shape(None, intf.name, self.port_bps[port], self.queue_depth_pkts)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        subprocess.run(["ip", "link", "del", self.bridge_name], capture_output=True)
        super().stop(deleteIntfs)
