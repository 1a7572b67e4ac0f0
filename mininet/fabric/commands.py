"""`ecntune fabric …`: emulate a fabric interactively, run traffic on it, compare runs.

    ecntune fabric cli --topology tiny --switch bmv2      # Mininet's CLI on a fabric
    ecntune fabric run --topology tiny --switch bridge --incast 2 --probe-from h3 --out r/x
    ecntune fabric report r/static r/agent --out r/compare

P4 switches forward only once routes are installed (by the controller, or a pipeline
loaded with --json and entries written over the control port); `run` checks that hosts
reach each other before it starts traffic and says so if they do not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ecntune.topology import PRESETS, QUEUE_PKTS, preset
from ecntune.traffic.spec import TrafficSpec
from ecntune.traffic.workload import WORKLOADS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fabric", help="emulate a fabric in Mininet, run traffic, compare runs")
    cmds = p.add_subparsers(dest="fabric_command", required=True, metavar="FABRIC_COMMAND")

    cli = cmds.add_parser("cli", help="start a fabric and open Mininet's CLI on it")
    _fabric_args(cli)
    cli.set_defaults(func=run_cli)

    run = cmds.add_parser("run", help="run a traffic scenario on a fresh fabric and report it")
    _fabric_args(run)
    run.add_argument("--duration", type=float, default=10.0, help="seconds of flow arrivals")
    run.add_argument("--workload", choices=WORKLOADS, default="websearch")
    run.add_argument("--load", type=float, default=0.4, help="per sender, of its link")
    run.add_argument("--max-flow-bytes", type=float, default=1e6)
    run.add_argument("--incast", type=int, default=0, metavar="N", help="N:1 incast senders")
    run.add_argument("--incast-bytes", type=int, default=TrafficSpec.incast_bytes)
    run.add_argument("--switch-to", choices=WORKLOADS, default=None, help="this workload halfway")
    run.add_argument("--load-to", type=float, default=None, help="step to this load halfway")
    run.add_argument("--receiver", default=None, help="incast target (default: last host)")
    run.add_argument("--probe-from", default=None, help="a host that probes the receiver")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--out", type=Path, required=True, help="directory for records and plots")
    run.set_defaults(func=run_traffic)

    rep = cmds.add_parser("report", help="compare runs: FCT slowdown, throughput, queues")
    rep.add_argument("runs", nargs="+", type=Path, help="directories written by `fabric run`")
    rep.add_argument("--out", type=Path, required=True)
    rep.set_defaults(func=run_report)


def _fabric_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--switch", choices=["embedded", "bmv2", "bridge"], default="embedded")
    p.add_argument("--json", type=Path, default=None, help="P4 pipeline to load at start")
    p.add_argument("--no-ecn", action="store_true", help="hosts are not ECN-capable")
    p.add_argument("--queue-depth", type=int, default=QUEUE_PKTS, help="egress buffer, packets")
    p.add_argument("--shaper", choices=["htb", "tbf", "none"], default="htb", help="host NICs")
    p.add_argument("--port-offset", type=int, default=0, help="added to gRPC/Thrift ports")


def _fabric(args: argparse.Namespace):
    from ecntune.fabric.net import Fabric, FabricOptions

    if os.geteuid() != 0:
        raise SystemExit("ecntune fabric needs root (network namespaces, veths, qdiscs)")

    options = FabricOptions(
        switch=args.switch,
        json_path=args.json,
        ecn=not args.no_ecn,
        queue_depth_pkts=args.queue_depth,
        host_shaper=None if args.shaper == "none" else args.shaper,
        port_offset=args.port_offset,
        workdir=getattr(args, "out", None),
    )
    return Fabric(preset(args.topology), options)


def run_cli(args: argparse.Namespace) -> int:
    from mininet.cli import CLI

    with _fabric(args) as fab:
        for name, spec in fab.specs.items():
            print(f"{name}: gRPC {spec.grpc_addr}, device {spec.device_id}, ports {spec.ports}")
        print(f"hosts run {fab.cc} with ECN {'on' if fab.options.ecn else 'off'}")
        CLI(fab.net)
    return 0


def run_traffic(args: argparse.Namespace) -> int:
    from ecntune.fabric.report import load_phase, write_report
    from ecntune.fabric.scenario import Scenario, run_scenario

    try:
        scenario = Scenario(
            duration_s=args.duration,
            workload=args.workload,
            load=args.load,
            max_flow_bytes=args.max_flow_bytes,
            receiver=args.receiver,
            incast_degree=args.incast,
            incast_bytes=args.incast_bytes,
            switch_to=args.switch_to,
            load_to=args.load_to,
            probe_src=args.probe_from,
            seed=args.seed,
        )
    except ValueError as e:  # unknown hosts or workload, bad load
        print(f"ecntune fabric run: {e}", file=sys.stderr)
        return 2
    try:
        with _fabric(args) as fab:
            result = run_scenario(fab, scenario, args.out)
    except (RuntimeError, TimeoutError, ValueError) as e:  # no switch, no forwarding, no host
        print(f"ecntune fabric run: {e}", file=sys.stderr)
        return 1
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in vars(result).items()}))
    print(write_report([load_phase(args.out.name, args.out)], args.out / "report"))
    return 0 if result.completed == result.sent == result.recorded else 1


def run_report(args: argparse.Namespace) -> int:
    from ecntune.fabric.report import load_phase, write_report

    try:
        phases = [load_phase(d.name, d) for d in args.runs]
    except (FileNotFoundError, ValueError) as e:
        print(f"ecntune fabric report: {e}", file=sys.stderr)
        return 2
    print(write_report(phases, args.out))
    print(f"report: {args.out / 'report.md'}")
    return 0
