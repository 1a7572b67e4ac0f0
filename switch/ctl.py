"""Run-time control of the embedded switch, the way simple_switch_CLI controls BMv2.

The switch listens on its "thrift port" (127.0.0.1 only) for one command per line; this
module is both that server and the client (`python -m ecntune.switch.ctl --thrift-port N`
reads commands on stdin, like `simple_switch_CLI`). The port changes queues and registers,
so only the switch's owner may use it: the switch writes a random token to a file only
its user can read (`token_path`: a 0700 directory of that user's, the file 0600), and a
connection's first line must be `auth <token>`; anything else is refused and closed. The
client reads the token itself, so the owner's usage is unchanged. Commands:

    set_queue_rate <pkt/s> [port]       as BMv2 (all ports when no port is given)
    set_queue_rate_bps <bit/s> [port]   the same in bits per second (an extension)
    set_queue_depth <packets> [port]    as BMv2
    set_port_delay <seconds> [port]     propagation delay after the queue (an extension:
                                        BMv2 has none, and this kernel has no netem)
    show_queues                         depth, rate, delay, enqueued and dropped per port
    register_read <name> [index]        as BMv2
    register_write <name> <index> <value>
    stats                               packet counters of the switch
    dataplane                           which engine forwards: native (C), or python and why
"""

from __future__ import annotations

import argparse
import hmac
import os
import secrets
import socket
import socketserver
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

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
                depth, enqueued, dropped = switch.queue_counts(port)
                rows.append(
                    f"port {port}: depth {depth}/{s.depth_pkts} rate {rate} "
                    f"delay {switch.port_delay_s.get(port, 0.0) * 1e6:.0f} us "
                    f"enqueued {enqueued} dropped {dropped}"
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
        if cmd == "dataplane":
            return switch.engine_note
    raise ValueError(f"unknown command {cmd!r}")


def token_path(port: int) -> Path:
    """Where the switch on `port` keeps its control token: a directory only this user may
    enter (the same path for the switch and its owner's clients, whatever their HOME)."""
    return Path(tempfile.gettempdir()) / f"ecntune-{os.getuid()}" / f"ctl-{port}.token"


def _private_dir(path: Path) -> None:
    """Create `path` 0700, or check an existing one is ours and private (refuse otherwise:
    another user could read or replace the token)."""
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of this user: refusing to keep the "
                      "control token there")  # fmt: skip


def write_token(port: int) -> str:
    path = token_path(port)
    _private_dir(path.parent)
    token = secrets.token_hex(16)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(tmp, path)
    return token


class ControlServer(socketserver.ThreadingTCPServer):
    """The control port: commands from connections that proved they hold the token."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, switch: Switch, port: int) -> None:
        self.switch = switch
        super().__init__(("127.0.0.1", port), _Handler)
        try:
            self.token = write_token(self.server_address[1])
        except OSError:
            self.server_close()
            raise

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        token_path(self.server_address[1]).unlink(missing_ok=True)


class _Handler(socketserver.StreamRequestHandler):
    server: ControlServer

    def handle(self) -> None:
        first = self.rfile.readline(256).decode(errors="replace").split()
        if (
            len(first) != 2
            or first[0] != "auth"
            or not hmac.compare_digest(first[1].encode(), self.server.token.encode())
        ):
            self.wfile.write(b"Error: not authorised (the first line must be auth <token>)\n.\n")
            return
        self.wfile.write(b"OK\n.\n")
        for raw in self.rfile:
            try:
                out = execute(self.server.switch, raw.decode(errors="replace").strip())
                reply = out.replace("\n", "\n  ") + "\n" if out else ""
                self.wfile.write(("OK\n" + reply).encode())
            except (ValueError, IndexError, OverflowError) as e:
                self.wfile.write(f"Error: {e}\n".encode())
            self.wfile.write(b".\n")


def serve(switch: Switch, port: int) -> ControlServer:
    """Listen for commands on 127.0.0.1:port in a background thread (`stop()` ends it and
    removes the token)."""
    server = ControlServer(switch, port)
    threading.Thread(target=server.serve_forever, name="ctl", daemon=True).start()
    return server


def run_commands(port: int, lines: list[str], write: Callable[[str], object]) -> bool:
    """Send commands to a switch (authenticating with its token); echo replies; False if
    any command failed."""
    try:
        token = token_path(port).read_text().strip()
    except OSError as e:
        raise OSError(f"no control token for port {port} ({e}): is the switch this "
                      "user's?") from None  # fmt: skip
    ok = True
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rw")
        for line in [f"auth {token}", *lines]:
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
