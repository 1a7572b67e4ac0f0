"""`python -m ecntune.switch` / `ecntune switch`: simple_switch_grpc's command line, embedded.

    ecntune switch [--device-id N] [-i PORT@IFACE ...] [--thrift-port N] [--log-file F]
                   [--log-level L] [--log-console] [--pcap [DIR]] (--no-p4 | PROGRAM.json)
                   [-- --grpc-server-addr HOST:PORT --cpu-port N]

The gRPC server binds 127.0.0.1:9559 unless told otherwise (BMv2 binds all interfaces; a
switch anyone on the network can reprogram is a poor default on a laptop).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"


def _interface(spec: str) -> tuple[int, str]:
    port, sep, iface = spec.partition("@")
    if not sep or not port.isdigit() or not iface:
        raise argparse.ArgumentTypeError(f"expected PORT@IFACE, got {spec!r}")
    return int(port), iface


def parser() -> argparse.ArgumentParser:
    from ecntune.switch.dataplane import DATAPLANES

    p = argparse.ArgumentParser(
        prog="ecntune switch", description="The embedded P4 target (simple_switch_grpc-compatible)."
    )
    p.add_argument(
        "-i",
        "--interface",
        type=_interface,
        action="append",
        default=[],
        metavar="PORT@IFACE",
        help="attach an interface as a port (repeatable)",
    )
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument(
        "--thrift-port",
        type=int,
        default=9090,
        help="control port for `python -m ecntune.switch.ctl` (queue rate/depth)",
    )
    p.add_argument("--log-file", type=Path)
    p.add_argument("--log-flush", action="store_true", help="accepted for BMv2 compatibility")
    p.add_argument("--log-console", action="store_true")
    p.add_argument(
        "-L",
        "--log-level",
        default="warn",
        choices=["trace", "debug", "info", "warn", "error", "off"],
    )
    p.add_argument(
        "--pcap",
        nargs="?",
        const=".",
        type=Path,
        metavar="DIR",
        help="write portN_in.pcap / portN_out.pcap per port",
    )
    p.add_argument(
        "--write-slice-ms", type=float, default=None,
        help="how long a P4Runtime Write applies updates before packets get their turn "
        "(default: 1; 0: one update at a time)",
    )  # fmt: skip
    p.add_argument(
        "--dataplane", choices=DATAPLANES, default=os.environ.get("ECNTUNE_DATAPLANE", "auto"),
        help="native: the program compiled to C (needs cc); python: the reference loop; "
        "auto (default, or $ECNTUNE_DATAPLANE): native where the program allows it",
    )  # fmt: skip
    p.add_argument("--no-p4", action="store_true", help="wait for SetForwardingPipelineConfig")
    p.add_argument("program", nargs="?", type=Path, help="BMv2 JSON to run at start")
    p.add_argument("--grpc-server-addr", default=DEFAULT_GRPC_ADDR)
    p.add_argument("--cpu-port", type=int, default=0, help="0: no packet I/O with the controller")
    # TLS as simple_switch_grpc offers it (same option names)
    p.add_argument("--grpc-server-ssl", action="store_true", help="serve P4Runtime over TLS")
    p.add_argument("--grpc-server-cacert", type=Path, help="CA that signs client certificates")
    p.add_argument("--grpc-server-cert", type=Path, help="the server's certificate (PEM)")
    p.add_argument("--grpc-server-key", type=Path, help="the server's private key (PEM)")
    p.add_argument(
        "--grpc-server-with-client-auth", action="store_true",
        help="mutual TLS: refuse clients without a certificate signed by --grpc-server-cacert",
    )  # fmt: skip
    return p


def server_credentials(args: argparse.Namespace) -> grpc.ServerCredentials | None:
    """TLS credentials from the --grpc-server-* options (None: plaintext); ValueError says
    what is missing or unreadable."""
    import grpc

    if not args.grpc_server_ssl:
        if args.grpc_server_with_client_auth:
            raise ValueError("--grpc-server-with-client-auth needs --grpc-server-ssl")
        return None
    if not (args.grpc_server_cert and args.grpc_server_key):
        raise ValueError("--grpc-server-ssl needs --grpc-server-cert and --grpc-server-key")
    if args.grpc_server_with_client_auth and not args.grpc_server_cacert:
        raise ValueError("--grpc-server-with-client-auth needs --grpc-server-cacert")
    try:
        key, cert = args.grpc_server_key.read_bytes(), args.grpc_server_cert.read_bytes()
        ca = args.grpc_server_cacert.read_bytes() if args.grpc_server_cacert else None
    except OSError as e:
        raise ValueError(f"cannot read a TLS file: {e}") from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=args.grpc_server_with_client_auth
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """simple_switch_grpc puts target options after `--`; accept them on either side."""
    argv = [a for a in argv if a != "--"]
    args = parser().parse_args(argv)
    if args.no_p4 == (args.program is not None):
        parser().error("give exactly one of --no-p4 or a program JSON")
    ports = [p for p, _ in args.interface]
    if len(set(ports)) != len(ports):
        parser().error("a port number appears twice")
    if args.cpu_port and args.cpu_port in ports:
        parser().error(f"the CPU port {args.cpu_port} cannot also be an interface")
    return args


LEVELS = {"trace": 5, "debug": 10, "info": 20, "warn": 30, "error": 40, "off": 100}


# A thread waiting for the GIL gets it only when the holder has run this long: Python's 5 ms
# default held the data-plane thread, woken for a delay line's release or a packet, behind
# the gRPC threads' digest and Read work for up to 5 ms per hop on a busy machine.
GIL_SWITCH_INTERVAL_S = 2e-4


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    handlers: list[logging.Handler] = []
    if args.log_file:
        handlers.append(logging.FileHandler(args.log_file))
    if args.log_console or not handlers:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=LEVELS[args.log_level], handlers=handlers,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )  # fmt: skip
    log = logging.getLogger("ecntune.switch")

    from ecntune.switch import ctl, p4runtime_server

    try:
        credentials = server_credentials(args)
    except ValueError as e:
        log.error("%s", e)
        return 2
    if args.write_slice_ms is not None and args.write_slice_ms < 0:
        log.error("--write-slice-ms must be 0 or more, not %s", args.write_slice_ms)
        return 2
    from ecntune.switch.compiler import compile_program
    from ecntune.switch.dataplane import Switch
    from ecntune.switch.layout import Unsupported
    from ecntune.switch.native import NativeUnavailable

    try:
        program = compile_program(json.loads(args.program.read_text())) if args.program else None
    except (OSError, ValueError) as e:
        if isinstance(e, Unsupported):
            log.error("cannot run %s: %s", args.program, e)
        else:
            log.error("cannot read %s: %s", args.program, e)
        return 2
    if args.pcap:
        args.pcap.mkdir(parents=True, exist_ok=True)
    try:
        switch = Switch(
            dict(args.interface), args.cpu_port or -1, args.device_id, args.pcap, args.dataplane
        )
    except OSError as e:
        log.error("%s", e)
        return 2
    if program is not None:
        switch.load(program)
    control = None
    try:
        control = ctl.serve(switch, args.thrift_port)
        slice_s = p4runtime_server.WRITE_SLICE_S
        if args.write_slice_ms is not None:
            slice_s = args.write_slice_ms / 1e3
        grpc_server = p4runtime_server.serve(
            switch, args.device_id, args.grpc_server_addr, credentials, slice_s
        )
    except OSError as e:
        log.error("cannot start: %s", e)
        if control is not None:
            control.stop()
        switch.stop()
        return 2
    done = threading.Event()
    switch.on_failure = lambda _: done.set()  # nothing forwards: take the process down
    try:
        switch.start()
    except NativeUnavailable as e:  # --dataplane native, and it cannot run here
        log.error("cannot run the native data plane: %s", e)
        grpc_server.stop(grace=0).wait()
        control.stop()
        switch.stop()
        return 2
    log.warning(
        "embedded switch %d up: data plane %s, ports %s, P4Runtime on %s (%s), "
        "control on 127.0.0.1:%d",
        args.device_id, switch.engine_note, dict(args.interface), args.grpc_server_addr,
        "mutual TLS" if args.grpc_server_with_client_auth else
        "TLS" if args.grpc_server_ssl else "plaintext", args.thrift_port,
    )  # fmt: skip

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    grpc_server.stop(grace=0.5).wait()
    control.stop()
    switch.stop()
    if switch.failure is not None:
        log.critical("exiting: the data plane died (%s)", switch.failure)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`ecntune switch -i 1@veth1 ...`: every argument after `switch` is simple_switch_grpc's,
    handed over as it is (ecntune/cli.py passes the rest through), so options come first."""
    p = sub.add_parser(
        "switch", help="run the embedded P4 switch (simple_switch_grpc options)", add_help=False
    )
    p.set_defaults(func=lambda a: main(a.rest), takes_rest=True)
