"""Run-time control of the embedded switch, the way simple_switch_CLI controls BMv2.

The switch listens on its "thrift port" (127.0.0.1 only) for one command per line; this
module is both that server and the client (`python -m ecntune.switch.ctl --thrift-port N`
reads commands on stdin, like `simple_switch_CLI`). Commands:

    set_queue_rate <pkt/s> [port]       as BMv2 (all ports when no port is given)
    set_queue_rate_bps <bit/s> [port]   the same in bits per second (an extension)
    set_queue_depth <packets> [port]    as BMv2
    set_port_delay <seconds> [port]     propagation delay after the queue (an extension:
                                        BMv2 has none, and this kernel has no netem)
    show_queues                         depth, rate, delay, enqueued and dropped per port
    register_read <name> [index]        as BMv2
    register_write <name> <index> <value>
    stats                               packet counters of the switch
"""

from __future__ import annotations

import argparse
import socket
import socketserver
import sys
import threading
from collections.abc import Callable

from ecntune.switch.dataplane import Switch


def _port(args: list[str], i: int) -> int | None:
    if len(args) <= i:
        return None
    port = int(args[i])
    if port < 0:
        raise ValueError(f"no port {port}: ports are 0 or more")
    return port


def execute(switch: Switch, line: str) -> str:
    """Run one command; returns its output, or raises ValueError with a message."""
    parts = line.split()
    if not parts:
        return ""
    cmd, args = parts[0], parts[1:]
    tm = switch.tm
    with switch.lock:
        if cmd == "set_queue_rate":
            tm.set_rate_pps(float(args[0]), _port(args, 1))
            return ""
        if cmd == "set_queue_rate_bps":
            tm.set_rate_bps(float(args[0]), _port(args, 1))
            return ""
        if cmd == "set_queue_depth":
            tm.set_depth(int(args[0]), _port(args, 1))
            return ""
        if cmd == "set_port_delay":
            switch.set_port_delay(float(args[0]), _port(args, 1))
            return ""
        if cmd == "show_queues":
            rows = []
            for port, q in sorted(tm.queues.items()):
                s = q.shaping
                rate = f"{s.rate_bps:.0f} bit/s" if s.rate_bps else f"{s.rate_pps or 0:.0f} pkt/s"
                rows.append(
                    f"port {port}: depth {len(q.items)}/{s.depth_pkts} rate {rate} "
                    f"delay {switch.port_delay_s.get(port, 0.0) * 1e6:.0f} us "
                    f"enqueued {q.enqueued} dropped {q.dropped}"
                )
            return "\n".join(rows)
        if cmd in ("register_read", "register_write"):
            prog = switch.program
            if prog is None or args[0] not in prog.registers:
                raise ValueError(f"no register {args[0] if args else ''!r}")
            reg = prog.registers[args[0]]
            if cmd == "register_write":
                reg.write(int(args[1], 0), int(args[2], 0))
                return ""
            if len(args) > 1:
                return f"{reg.name}[{args[1]}]= {reg.read(int(args[1], 0))}"
            return f"{reg.name}= " + ", ".join(map(str, reg.values))
        if cmd == "stats":
            return " ".join(f"{k}={v}" for k, v in vars(switch.stats).items())
    raise ValueError(f"unknown command {cmd!r}")


def serve(switch: Switch, port: int) -> socketserver.ThreadingTCPServer:
    """Listen for commands on 127.0.0.1:port in a background thread."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for raw in self.rfile:
                try:
                    out = execute(switch, raw.decode(errors="replace").strip())
                    reply = out.replace("\n", "\n  ") + "\n" if out else ""
                    self.wfile.write(("OK\n" + reply).encode())
                except (ValueError, IndexError, OverflowError) as e:
                    self.wfile.write(f"Error: {e}\n".encode())
                self.wfile.write(b".\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="ctl", daemon=True).start()
    return server


def run_commands(port: int, lines: list[str], write: Callable[[str], object]) -> bool:
    """Send commands to a switch; echo replies; False if any command failed."""
    ok = True
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rw")
        for line in lines:
            if not line.strip():
                continue
            f.write(line.strip() + "\n")
            f.flush()
            for reply in iter(f.readline, ""):
                if reply == ".\n":
                    break
                if reply.startswith("Error"):
                    ok = False
                if reply != "OK\n":
                    write(reply)
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ecntune-switch-ctl", description=__doc__.split("\n\n")[0])
    p.add_argument("--thrift-port", type=int, default=9090)
    args = p.parse_args(argv)
    try:
        ok = run_commands(args.thrift_port, sys.stdin.read().splitlines(), sys.stdout.write)
    except OSError as e:
        print(f"Error: cannot reach the switch on port {args.thrift_port}: {e}")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
