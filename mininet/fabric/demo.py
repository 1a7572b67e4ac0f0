"""`ecntune demo`: one fabric, the same traffic per phase — static ECN thresholds, then an agent.

    ecntune demo                         # embedded target, star8-20ms, ~2 minutes on 2 cores
    ecntune demo --target bmv2 --out results/demo-bmv2
    ecntune demo --serve                 # and watch it live on http://127.0.0.1:8080/
    ecntune demo --storm                 # every other host's incast storm begins halfway
    ecntune demo --steady                # the same traffic all along (default: a 4:1 storm)
    ecntune demo --policy static:secn0 --policy tree:TREE.json --in-switch --kill-controller-at 10
                                         # the tree runs in the P4 program; the controller is
                                         # killed 10 s into its phase and the switch goes on

It builds the fabric, runs the scenario (Poisson WebSearch flows between all hosts, and
from halfway an incast storm into one host so that the thresholds have a change to follow;
queue probes) under each control plane, and writes the comparison: a table on stdout,
comparison.csv, summary.json, fct_cdf.png, queues.png and report.md in --out, the
thresholds before and after the change included. Everything underneath is ecntune.fabric
(fabric, scenario, report); the control planes come from the controller, which installs
the pipeline and routes from the same Topology and logs telemetry (report.telemetry_row)
while it runs a policy:
`ecntune.controller.control_plane(topology, specs, policy, telemetry_log)`, a context
manager; policy "static:<baseline>" or "acc:<checkpoint>" ("acc:default" is the agent
trained in the simulator for this fabric and shipped with ecntune).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ecntune.topology import MTU_BYTES, PRESETS, QUEUE_PKTS
from ecntune.traffic.workload import WORKLOADS

# SECN1: the papers' preset; 2α..32α at pmax 0.2: the best static in hindsight for the demo's
# own traffic in this emulation (lowest mice mean slowdown of a 10-setting grid, two runs;
# docs/results "The emulation disagrees"), the strongest static to compare with. SECN0, the
# simulator's single best for this fabric, is the emulation's worst there.
DEFAULT_POLICIES = ("static:secn1", "static:2a,32a,0.2", "acc:default")
STORM_PERIOD_S = 0.5  # --storm: an incast burst every half second from halfway on


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: static ECN vs a learned agent on a fabric")
    p.add_argument("--target", choices=["embedded", "bmv2"], default="embedded")
    p.add_argument("--topology", choices=sorted(PRESETS), default="star8-20ms")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of traffic per phase")
    p.add_argument("--load", type=float, default=0.4)
    p.add_argument("--incast", type=int, default=4, metavar="N", help="N:1 incast senders")
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        help=f"a phase's control policy, repeatable (default: {' then '.join(DEFAULT_POLICIES)})",
    )
    p.add_argument("--workload", choices=WORKLOADS, default="websearch")
    p.add_argument(
        "--queue-depth", type=int, default=QUEUE_PKTS, metavar="PKTS",
        help=f"every egress buffer, packets (default {QUEUE_PKTS}: BMv2's, and the buffer the "
        "simulator trained the shipped agents with); thresholds above it are clamped to it",
    )  # fmt: skip
    change = p.add_argument_group(
        "traffic that changes halfway through each phase (default: --storm N with N from "
        "--incast; the report compares every port's thresholds before and after it)"
    )
    change.add_argument(
        "--storm", type=int, nargs="?", const=0, default=None, metavar="N",
        help="an incast storm begins: N:1 bursts (without N: every other host into one) "
        "every 0.5 s, instead of --incast's bursts every tenth of the run all along",
    )  # fmt: skip
    change.add_argument("--load-to", type=float, default=None, help="step to this load")
    change.add_argument("--switch-to", choices=WORKLOADS, default=None, help="this workload")
    change.add_argument("--steady", action="store_true", help="no change: the same all along")
    p.add_argument(
        "--in-switch", action="store_true",
        help="phases whose policy is a tree (tree:PATH from `ecntune distill --in-switch`) run "
        "it in the P4 program (ecntune controller --in-switch); every switch's thresholds are "
        "read over its control port into the phase's switch_thresholds.jsonl",
    )  # fmt: skip
    p.add_argument(
        "--kill-controller-at", type=float, default=None, metavar="S",
        help="with --in-switch: stop the controller S seconds into each in-switch phase; the "
        "switches go on deciding (report.md: what they set after it was gone)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="default: results/demo-<time>")
    p.add_argument(
        "--serve", type=int, nargs="?", const=8080, default=None, metavar="PORT",
        help="serve a live page of the run on 127.0.0.1:PORT (default 8080) while it runs "
        "(ecntune.fabric.dashboard; `ecntune dashboard OUT` serves it afterwards)",
    )  # fmt: skip
    p.set_defaults(func=run_demo)


def phase_name(policy: str) -> str:
    """A phase's directory and label: 'acc:default' -> acc-default, 'pet:a/b/x.msgpack' -> pet-x."""
    kind, _, arg = policy.partition(":")
    if "/" in arg or arg.endswith(".msgpack"):
        arg = Path(arg).stem
    return f"{kind}-{arg}".replace(",", "_")


@contextlib.contextmanager
def in_switch_plane(fab: Any, telemetry: Path, policy: str, kill_at_s: float | None,
                    **settings: Any) -> Iterator[None]:  # fmt: skip
    """A controller running `policy` in the switches, every switch's thresholds watched
    (watch.py), and, `kill_at_s` into the phase, the controller stopped for good."""
    from ecntune.controller import control_plane
    from ecntune.fabric.watch import ThresholdWatch

    watch = ThresholdWatch(fab, telemetry.with_name("switch_thresholds.jsonl")).start()
    controller = contextlib.ExitStack()
    controller.enter_context(
        control_plane(fab.topology, fab.specs, policy, telemetry, in_switch=True, **settings)
    )
    watch.event("controller started")

    def kill() -> None:
        controller.close()
        watch.event("controller killed")
        print(f"controller killed {kill_at_s:g} s into the phase; the switches go on", flush=True)

    killer = threading.Timer(kill_at_s, kill) if kill_at_s is not None else None
    try:
        if killer:
            killer.start()
        yield
    finally:
        if killer:
            killer.cancel()
            killer.join()
        controller.close()
        watch.stop()


def run_demo(args: argparse.Namespace) -> int:
    try:
        from ecntune.controller import control_plane
    except ImportError:
        print(
            "ecntune demo needs the controller (ecntune.controller.control_plane), "
            "which this installation does not have yet",
            file=sys.stderr,
        )
        return 2
    from ecntune.fabric.net import Fabric, FabricOptions
    from ecntune.fabric.report import load_phase, write_report
    from ecntune.fabric.scenario import Scenario, run_phases
    from ecntune.topology import preset

    topo = preset(args.topology)
    hosts = list(topo.hosts)
    out = args.out or Path("results") / time.strftime("demo-%Y%m%d-%H%M%S")
    prober = hosts[-2]
    named = args.storm is not None or args.load_to is not None or args.switch_to is not None
    if args.steady and named:
        print("ecntune demo: --steady names no change; drop it or the change", file=sys.stderr)
        return 2
    if args.queue_depth < 1:
        print("ecntune demo: --queue-depth is a number of packets, 1 or more", file=sys.stderr)
        return 2
    others = len(hosts) - 2  # every host but the receiver and the prober
    storm = args.storm if named or args.steady else args.incast  # the default change
    degree = min((storm or others) if storm is not None else args.incast, others)
    try:
        scenario = Scenario(
            duration_s=args.duration,
            workload=args.workload,
            load=args.load,
            load_to=args.load_to,
            switch_to=args.switch_to,
            workload_hosts=tuple(h for h in hosts if h != prober),  # it sends nothing else
            receiver=hosts[-1],
            incast_degree=degree,
            incast_period_s=STORM_PERIOD_S if storm is not None else None,  # None: a tenth
            incast_from_s=args.duration / 2 if storm is not None else 0.0,
            probe_src=prober,
        )
    except ValueError as e:  # a load outside (0, 1], an unknown workload
        print(f"ecntune demo: {e}", file=sys.stderr)
        return 2
    policies = args.policy or list(DEFAULT_POLICIES)
    in_switch = [p for p in policies if args.in_switch and p.startswith("tree:")]
    if args.in_switch and not in_switch:
        print("ecntune demo: --in-switch runs tree:PATH policies; name one with --policy",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.kill_controller_at is not None and not in_switch:
        print("ecntune demo: --kill-controller-at needs --in-switch (without it the "
              "thresholds would freeze)", file=sys.stderr)  # fmt: skip
        return 2

    options = FabricOptions(
        switch=args.target, workdir=out / "switches", queue_depth_pkts=args.queue_depth
    )
    buffer_bytes = options.queue_depth_pkts * MTU_BYTES  # kmax never beyond what a queue holds

    def plane(policy: str):
        if policy in in_switch:
            return lambda fab, telemetry: in_switch_plane(
                fab, telemetry, policy, args.kill_controller_at, buffer_bytes=buffer_bytes
            )
        return lambda fab, telemetry: control_plane(
            fab.topology, fab.specs, policy, telemetry, buffer_bytes=buffer_bytes
        )

    phases = {phase_name(policy): plane(policy) for policy in policies}
    server = None
    if args.serve is not None:
        from ecntune.fabric.dashboard import serve_in_background

        out.mkdir(parents=True, exist_ok=True)
        server = serve_in_background(out, args.serve)
        print(f"live view: http://127.0.0.1:{server.server_address[1]}/", flush=True)
    try:
        with Fabric(topo, options) as fab:
            run_phases(fab, scenario, phases, out)
    finally:
        if server is not None:
            server.shutdown()
    table = write_report(
        [load_phase(name, out / name) for name in phases], out, title=f"ecntune demo ({topo.name})"
    )
    print(table)
    print(f"report: {out / 'report.md'}")
    return 0
