"""How to start a P4 switch process, BMv2 or embedded, with the same options.

Mininet's switch nodes, the PTF runner, the controller tests and the benchmarks all start
switches through this module, so the two targets are interchangeable everywhere. The
embedded target (`python -m ecntune.switch`) takes simple_switch_grpc's command line, and
its control CLI (`python -m ecntune.switch.ctl`) takes simple_switch_CLI's commands on
stdin, so the only difference between targets is which programs run.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

TargetName = Literal["embedded", "bmv2"]


@dataclass(frozen=True)
class SwitchSpec:
    """Everything a switch process needs; mirrors simple_switch_grpc's options."""

    ports: dict[int, str]  # data-plane port -> interface name
    device_id: int = 0
    grpc_addr: str = "127.0.0.1:9559"
    thrift_port: int = 9090  # BMv2's runtime port; the embedded target's control port
    cpu_port: int = 255
    json_path: Path | None = None  # None: wait for SetForwardingPipelineConfig (--no-p4)
    log_file: Path | None = None
    log_level: str = "warn"
    pcap_dir: Path | None = None
    extra_args: list[str] = field(default_factory=list)

    @classmethod
    def on_free_ports(cls, ports: dict[int, str], **options: Any) -> SwitchSpec:
        """A switch on this host whose gRPC and control servers get two distinct free ports."""
        grpc_port, control_port = free_ports(2)
        return cls(ports, grpc_addr=f"127.0.0.1:{grpc_port}", thrift_port=control_port, **options)

    def common_args(self) -> list[str]:
        args = ["--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port)]
        for port, iface in sorted(self.ports.items()):
            args += ["-i", f"{port}@{iface}"]
        if self.log_file:
            args += ["--log-file", str(self.log_file), "--log-flush"]
        args += ["--log-level", self.log_level]
        if self.pcap_dir:
            args += ["--pcap", str(self.pcap_dir)]
        args += [str(self.json_path)] if self.json_path else ["--no-p4"]
        return args + self.extra_args

    def target_args(self) -> list[str]:
        return ["--grpc-server-addr", self.grpc_addr, "--cpu-port", str(self.cpu_port)]


@dataclass(frozen=True)
class Target:
    name: TargetName
    switch_cmd: tuple[str, ...]
    ctl_cmd: tuple[str, ...]

    def available(self) -> bool:
        return shutil.which(self.switch_cmd[0]) is not None

    def command(self, spec: SwitchSpec) -> list[str]:
        return [*self.switch_cmd, *spec.common_args(), "--", *spec.target_args()]

    def control(self, spec: SwitchSpec, *commands: str) -> str:
        """Run simple_switch_CLI-style commands (e.g. 'set_queue_rate 1000 2') on a switch."""
        out = subprocess.run(
            [*self.ctl_cmd, "--thrift-port", str(spec.thrift_port)],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0 or "Error" in out.stdout:
            raise RuntimeError(f"{self.name} control failed: {out.stdout}{out.stderr}")
        return out.stdout

    def set_queue_rate(self, spec: SwitchSpec, pps: int, port: int | None = None) -> None:
        self.control(spec, f"set_queue_rate {pps}" + (f" {port}" if port is not None else ""))

    def set_queue_depth(self, spec: SwitchSpec, pkts: int, port: int | None = None) -> None:
        self.control(spec, f"set_queue_depth {pkts}" + (f" {port}" if port is not None else ""))

    def dataplane(self, spec: SwitchSpec) -> str:
        """Which engine forwards: the embedded target's answer (native (C), or python and
        why: a fallback forwards ~13x fewer packets); BMv2's is its one program."""
        if self.name == "embedded":
            return self.control(spec, "dataplane").strip()
        return self.switch_cmd[0]

    @property
    def has_port_delay(self) -> bool:
        """Only the embedded target delays frames on a port (BMv2 has no such knob)."""
        return self.name == "embedded"

    def set_port_delay(self, spec: SwitchSpec, delay_s: float, port: int | None = None) -> None:
        if not self.has_port_delay:
            raise NotImplementedError(f"{self.name} has no per-port propagation delay")
        self.control(spec, f"set_port_delay {delay_s!r}" + (f" {port}" if port is not None else ""))


EMBEDDED = Target(
    "embedded",
    switch_cmd=(sys.executable, "-m", "ecntune.switch"),
    ctl_cmd=(sys.executable, "-m", "ecntune.switch.ctl"),
)
BMV2 = Target("bmv2", switch_cmd=("simple_switch_grpc",), ctl_cmd=("simple_switch_CLI",))
TARGETS: dict[str, Target] = {t.name: t for t in (EMBEDDED, BMV2)}


def target(name: str) -> Target:
    try:
        t = TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; choose one of {sorted(TARGETS)}") from None
    if not t.available():
        raise RuntimeError(
            f"target {name!r} needs {t.switch_cmd[0]!r} on PATH (see README: getting BMv2)"
        )
    return t


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    return free_ports(1)[0]


def free_ports(n: int) -> tuple[int, ...]:
    """n distinct TCP ports on 127.0.0.1 that nothing listens on now (a switch's gRPC and
    control), held together while chosen: two picks one after the other can give the same
    port, and a switch whose control server took its own gRPC port died at start while
    `wait_for_port` saw that control server answer."""
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in held:
            s.bind(("127.0.0.1", 0))
        return tuple(s.getsockname()[1] for s in held)


def wait_for_port(addr: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Block until `addr` (host:port) accepts TCP connections or the process exits."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"switch exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection((host, int(port)), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"switch did not listen on {addr} within {timeout_s} s")


def start(t: Target, spec: SwitchSpec, timeout_s: float = 30.0) -> subprocess.Popen:
    """Start a switch and return once its gRPC server accepts connections."""
    if spec.log_file:
        with open(spec.log_file.with_suffix(".out"), "w") as out:
            proc = subprocess.Popen(t.command(spec), stdout=out, stderr=subprocess.STDOUT)
    else:
        proc = subprocess.Popen(t.command(spec), stdout=subprocess.DEVNULL)
    try:
        wait_for_port(spec.grpc_addr, proc, timeout_s)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
