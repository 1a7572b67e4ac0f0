"""`ecntune controller`: run the controller against running switches until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("controller", help="run the P4Runtime controller (config file, see docs)")
    p.add_argument("--config", type=Path, help="YAML/JSON configuration (controller/config.py)")
    p.add_argument("--topology", help="override: a topology preset or file")
    p.add_argument("--policy", help="override: static:secn1, acc:<checkpoint>, ...")
    p.add_argument("--telemetry-log", type=Path, help="override: JSONL telemetry path")
    p.add_argument(
        "--in-switch", action="store_true",
        help="run the policy (a tree from `ecntune distill --in-switch`) in the P4 program",
    )  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ecntune.controller.app import Controller
    from ecntune.controller.config import ConfigError, ControllerConfig

    try:
        data: dict = {}
        base = Path()
        if args.config:
            import yaml

            data = yaml.safe_load(args.config.read_text()) or {}
            base = args.config.parent
        for key in ("topology", "policy", "telemetry_log"):
            if getattr(args, key) is not None:
                data[key] = str(getattr(args, key))
        if args.in_switch:
            data["in_switch"] = True
        config = ControllerConfig.from_dict(data, base)
    except (ConfigError, OSError) as e:
        print(f"ecntune controller: {e}", file=sys.stderr)
        return 2
    try:
        controller = Controller(config)
    except ValueError as e:  # a policy that cannot run as configured (e.g. --in-switch)
        print(f"ecntune controller: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(controller.run())
    except KeyboardInterrupt:
        pass
    finally:
        controller.close()
    return 0
