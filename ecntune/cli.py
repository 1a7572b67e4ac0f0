"""The `ecntune` command. Each subsystem contributes its subcommands through `add_parser`.

Those modules keep heavy imports (JAX, gRPC) inside their run functions so that
`ecntune --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ecntune.cache import use_jax_compilation_cache

# Modules that define `add_parser(subparsers)`; a subcommand exists only once its feature does.
SUBCOMMAND_MODULES = [
    "ecntune.doctor",
    "ecntune.switch.main",
    "ecntune.ptf_runner",
    "ecntune.controller.cli",
    "ecntune.fabric.cleanup",
    "ecntune.fabric.commands",
    "ecntune.fabric.demo",
    "ecntune.fabric.dashboard",
    "ecntune.agent.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ecntune", description="In-network ECN tuning with reinforcement learning."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "takes_rest", False):  # a subcommand with options of its own (switch)
        args.rest = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    use_jax_compilation_cache()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
