"""Synchronised N:1 packet bursts built with scapy, and a listener that sees what the fabric did.

    python -m ecntune.traffic.burst send --dst 10.0.0.4 --sender 1 --packets 30 \
        --bursts 5 --period 1 --start-at 1700000000.0
    python -m ecntune.traffic.burst listen --out h4.pkts.jsonl

Started on N hosts with one --start-at, the senders emit their bursts at the same instants
through their (shaped) NICs, so the receiver's switch port sees N× its rate at once. Every
packet is UDP carrying (burst, sender, seq, send time) and, by default, ECT(0). The listener
records each packet's ECN bits and one-way delay (kernel receive timestamp minus send time;
both ends share the machine's clock); above the path's minimum, that delay is the time the
packet waited in queues, i.e. the queue it joined. Sent with one packet per burst, the same
tool is a probe of queue depth and marking.

Hosts never ARP: the sender takes the destination MAC from the host's static neighbour
table, where the fabric put the switch port's MAC.
"""

from __future__ import annotations

import argparse
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from ecntune.traffic.records import JsonlWriter, PacketRecord

MAGIC = b"ECNB"
PAYLOAD = struct.Struct("!4sIIId")  # magic, burst, sender, seq, send time
DEFAULT_PORT = 5002
ECT0, CE = 0b10, 0b11
SO_TIMESTAMPNS = 35  # Linux; Python's socket module does not export it
PROBE_WAIT_S = 0.02  # how long a timestamp probe lies unread (await_kernel_timestamps)
ETH_P_IP = 0x0800
IP_PROTO_UDP = 17


def default_iface() -> str:
    """The host's fabric interface: its only one besides lo."""
    ifaces = [p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo"]
    if len(ifaces) != 1:
        raise ValueError(f"pick one of {ifaces} with --iface")
    return ifaces[0]


def neighbour_mac(ip: str, iface: str) -> str:
    """The MAC the kernel's neighbour table holds for `ip` on `iface` (/proc/net/arp)."""
    for line in Path("/proc/net/arp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[0] == ip and cols[5] == iface and cols[3] != "00:00:00:00:00:00":
            return cols[3]
    raise ValueError(f"no neighbour entry for {ip} on {iface}; pass --dst-mac")


def frame_template(
    src_mac: str, dst_mac: str, src: str, dst: str, port: int, size: int, ecn: int
) -> bytes:
    """An Ethernet/IPv4/UDP frame with a zero UDP checksum, so the payload can be patched."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    if size < PAYLOAD.size:
        raise ValueError(f"packets carry at least {PAYLOAD.size} payload bytes")
    pkt = (
        Ether(src=src_mac, dst=dst_mac)
        / IP(src=src, dst=dst, tos=ecn & 0b11)
        / UDP(sport=port, dport=port, chksum=0)
        / Raw(bytes(size))
    )
    return bytes(pkt)


def send_bursts(args: argparse.Namespace) -> int:
    from scapy.config import conf

    iface = args.iface or default_iface()
    src_mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    src = args.src or _iface_ip(iface)
    dst_mac = args.dst_mac or neighbour_mac(args.dst, iface)
    frame = bytearray(
        frame_template(src_mac, dst_mac, src, args.dst, args.port, args.size, args.ecn)
    )
    offset = len(frame) - args.size
    sock = conf.L2socket(iface=iface)
    t0 = args.start_at if args.start_at is not None else time.time()
    try:
        for burst in range(args.bursts):
            time.sleep(max(0.0, t0 + burst * args.period - time.time()))
            for seq in range(args.packets):
                frame[offset : offset + PAYLOAD.size] = PAYLOAD.pack(
                    MAGIC, burst, args.sender, seq, time.time()
                )
                sock.send(bytes(frame))
    finally:
        sock.close()
    return 0


def _iface_ip(iface: str) -> str:
    import fcntl

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", iface.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifaddr, req)[20:24])


def parse(frame: bytes, port: int, t_recv: float) -> PacketRecord | None:
    """The record of one received frame, or None if it is not a burst packet (or malformed)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    if IP not in pkt or UDP not in pkt or pkt[UDP].dport != port:
        return None
    payload = bytes(pkt[UDP].payload)
    if len(payload) < PAYLOAD.size:
        return None
    magic, burst, sender, seq, t_send = PAYLOAD.unpack_from(payload)
    if magic != MAGIC:
        return None
    ip = pkt[IP]
    return PacketRecord(
        burst, sender, seq, ip.src, ip.len, ip.tos & 0b11, t_send, t_recv, t_recv - t_send
    )


def listen(args: argparse.Namespace) -> int:
    iface = args.iface or default_iface()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing queues before bind
    sock.bind((iface, ETH_P_IP))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    await_kernel_timestamps()
    sock.settimeout(0.2)
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(f"listening on {iface}", flush=True)
    deadline = time.time() + args.duration if args.duration else float("inf")
    with JsonlWriter(args.out) as out:
        while not stop and time.time() < deadline:
            try:
                frame, ancdata, _, addr = sock.recvmsg(65535, socket.CMSG_SPACE(16))
            except TimeoutError:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            t_recv = kernel_time(ancdata)
            record = parse(frame, args.port, t_recv)
            if record is not None:
                out.write(record)
    return 0


def await_kernel_timestamps(timeout_s: float = 5.0) -> None:
    """Return once the kernel stamps frames when they arrive. SO_TIMESTAMPNS turns stamping
    on through deferred kernel work; until that has run, a frame is stamped when it is read,
    so the first frames after `listen` looked as late as the reader was slow (a frame read
    after a 4 s wait came out 4 s late). Probed with a datagram over loopback, which the
    same switch stamps."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        probe.bind(("127.0.0.1", 0))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            probe.sendto(b"t", probe.getsockname())
            time.sleep(PROBE_WAIT_S)
            _, ancdata, _, _ = probe.recvmsg(16, socket.CMSG_SPACE(16))
            if time.time() - kernel_time(ancdata) >= PROBE_WAIT_S / 2:  # stamped on arrival
                return
    raise RuntimeError(f"the kernel does not stamp arriving frames after {timeout_s} s")


def kernel_time(ancdata: list[tuple[int, int, bytes]]) -> float:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec * 1e-9
    return time.time()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send", help="emit synchronised bursts towards one receiver")
    s.add_argument("--dst", required=True)
    s.add_argument("--sender", type=int, required=True, help="this sender's number (records)")
    s.add_argument("--packets", type=int, default=1, help="packets per burst")
    s.add_argument("--bursts", type=int, default=1)
    s.add_argument("--period", type=float, default=1.0, help="seconds between bursts")
    s.add_argument("--size", type=int, default=1400, help="UDP payload bytes")
    s.add_argument("--ecn", type=int, default=ECT0, choices=range(4), help="IP ECN field")
    s.add_argument("--start-at", type=float, default=None, help="wall-clock time of burst 0")
    s.add_argument("--src", default=None, help="source IP (default: the interface's)")
    s.add_argument("--dst-mac", default=None, help="(default: the neighbour table's)")
    lst = sub.add_parser("listen", help="record every burst packet that arrives")
    lst.add_argument("--out", required=True, help="JSONL file of PacketRecords (appended)")
    lst.add_argument("--duration", type=float, default=None, help="stop after (default: signal)")
    for q in (s, lst):
        q.add_argument("--iface", default=None, help="(default: the host's one interface)")
        q.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = p.parse_args(argv)
    return send_bursts(args) if args.mode == "send" else listen(args)


if __name__ == "__main__":
    sys.exit(main())
