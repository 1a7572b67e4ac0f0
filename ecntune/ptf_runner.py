"""`ecntune ptf`: run the PTF suite (ptf-tests/) against BMv2 or the embedded target.

It does what PTF users otherwise script by hand: veth pairs (switch end, PTF end) with
offloads and IPv6 off so no kernel chatter reaches the tests, the switch started through
ecntune/targets.py with the pipeline pushed by the tests themselves, `ptf` run with the
target's parameters, and everything torn down again — also on Ctrl-C or a failing test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ecntune.p4src import PROGRAM
from ecntune.targets import SwitchSpec, start, stop, target

REPO = Path(__file__).resolve().parents[1]
PTF_DIR = REPO / "ptf-tests"
N_PORTS = 4
MTU = 9500  # the suite sends jumbo frames to pass the 1 MB elephant threshold quickly


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def quiet_interface(name: str) -> None:
    """No offloads (checksums stay real on AF_PACKET), no IPv6 chatter, jumbo MTU, up."""
    with contextlib.suppress(FileNotFoundError, subprocess.CalledProcessError):
        _run(
            "ethtool",
            "-K",
            name,
            "tx",
            "off",
            "rx",
            "off",
            "tso",
            "off",
            "gso",
            "off",
            "gro",
            "off",
        )
    Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1")
    _run("ip", "link", "set", name, "mtu", str(MTU), "up")


@contextlib.contextmanager
def veth_pairs(n: int, tag: str) -> Iterator[list[tuple[str, str]]]:
    """n veth pairs (switch side, PTF side) in the root namespace, always removed."""
    pairs = [(f"{tag}s{i}", f"{tag}p{i}") for i in range(1, n + 1)]
    try:
        for sw, ptf in pairs:
            _run("ip", "link", "add", sw, "type", "veth", "peer", "name", ptf)
            quiet_interface(sw)
            quiet_interface(ptf)
        yield pairs
    finally:
        for sw, _ in pairs:
            subprocess.run(["ip", "link", "del", sw], capture_output=True)


def run_suite(target_name: str, tests: list[str], verbose: bool = False) -> int:
    """Run the PTF suite against a fresh switch; returns ptf's exit status."""
    t = target(target_name)
    tag = f"pt{os.getpid() % 10000}"
    with (
        tempfile.TemporaryDirectory(prefix="ecntune-ptf-") as tmp,
        veth_pairs(N_PORTS, tag) as pairs,
    ):
        spec = SwitchSpec.on_free_ports(
            {i: sw for i, (sw, _) in enumerate(pairs, 1)},
            log_file=Path(tmp) / "switch.log",
        )
        proc = start(t, spec)
        try:
            params = ";".join(
                f"{k}={v!r}"
                for k, v in {
                    "grpc_addr": spec.grpc_addr,
                    "device_id": spec.device_id,
                    "cpu_port": spec.cpu_port,
                    "target": target_name,
                    "thrift_port": spec.thrift_port,
                    "p4info": str(PROGRAM.p4info_path),
                    "json": str(PROGRAM.json_path),
                }.items()
            )
            cmd = [
                str(Path(sys.executable).with_name("ptf")),
                "--test-dir", str(PTF_DIR),
                "--test-params", params,
                "--log-file", str(Path(tmp) / "ptf.log"),
                "--qlen", "5000",  # packets PTF buffers per port (bursts of jumbo frames)
                "--socket-recv-size", str(MTU + 100),
                *(a for i, (_, p) in enumerate(pairs, 1) for a in ("-i", f"{i}@{p}")),
                *(["--verbose"] if verbose else []),
                *tests,
            ]  # fmt: skip
            result = subprocess.run(cmd, cwd=tmp)
            if result.returncode != 0:
                print(f"--- ptf log: {Path(tmp) / 'ptf.log'} (kept below) ---", file=sys.stderr)
                print((Path(tmp) / "ptf.log").read_text()[-20000:], file=sys.stderr)
            return result.returncode
        finally:
            stop(proc)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ptf", help="run the PTF data-plane suite against a target")
    p.add_argument("--target", default="embedded", choices=["embedded", "bmv2"])
    p.add_argument("--verbose", action="store_true")
    p.add_argument("tests", nargs="*", help="test names or groups (default: all)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("ecntune ptf needs root (veth pairs, raw sockets)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return run_suite(args.target, args.tests, args.verbose)
