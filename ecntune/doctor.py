"""`ecntune doctor`: what this machine can run, so a user knows which targets and tests apply.

Every later failure mode users hit first (no BMv2, no root, no DCTCP in the kernel) is
reported here in one place instead of as a confusing error deep inside a run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def tcp_congestion_controls() -> list[str]:
    """Congestion control algorithms this kernel offers (DCTCP only if its module is loaded)."""
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    return path.read_text().split() if path.exists() else []


def bmv2_path() -> str | None:
    return shutil.which("simple_switch_grpc")


def p4c_path() -> str | None:
    return shutil.which("p4c")


def native_dataplane() -> Check:
    """Whether the embedded switch runs ecn.p4 compiled to C here, or its Python loop."""
    from ecntune.p4src import PROGRAM
    from ecntune.switch.compiler import compile_program
    from ecntune.switch.native import NativeProgram, NativeUnavailable, c_compiler

    try:
        NativeProgram(compile_program(json.loads(PROGRAM.json_path.read_text())))
    except (NativeUnavailable, OSError) as e:  # OSError: the build cache is not writable
        return Check("native-dp", False, f"the embedded switch runs its Python loop: {e}")
    return Check("native-dp", True, f"embedded switch runs ecn.p4 compiled to C ({c_compiler()})")


def checks() -> list[Check]:
    ccs = tcp_congestion_controls()
    mininet_ok = importlib.util.find_spec("mininet") is not None
    return [
        Check("python", sys.version_info >= (3, 11), sys.version.split()[0]),
        Check("root", os.geteuid() == 0, "network namespaces, veths and raw sockets need root"),
        Check("mininet", mininet_ok and bool(shutil.which("mnexec")), "Mininet library + mnexec"),
        Check("tcp-ecn-cc", bool(ccs), "available: " + (" ".join(ccs) or "none")),
        Check(
            "dctcp",
            "dctcp" in ccs,
            "kernel DCTCP" if "dctcp" in ccs else "no dctcp module: hosts run cubic/reno + ECN",
        ),
        Check("bmv2", bmv2_path() is not None, bmv2_path() or "simple_switch_grpc not on PATH"),
        Check("p4c", p4c_path() is not None, p4c_path() or "p4c not on PATH (make p4 needs it)"),
        native_dataplane(),
    ]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="report what this machine can run (targets, kernel, tools)")
    p.add_argument("--json", action="store_true", help="one JSON object per check")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for c in checks():
        if args.json:
            print(json.dumps(asdict(c)))
        else:
            print(f"{'ok ' if c.ok else 'no '} {c.name:<11} {c.detail}")
    return 0
