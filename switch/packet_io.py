"""Packet I/O on real interfaces: one AF_PACKET raw socket per switch port, plus pcap dumps.

Sockets ignore the frames the switch itself transmits (PACKET_IGNORE_OUTGOING) and put the
interface in promiscuous mode, as BMv2's pcap-based interfaces do. Reads are non-blocking
so one thread can serve every port from one epoll set. The kernel takes 802.1Q tags out of
received frames (VLAN offload) and reports them beside the frame (PACKET_AUXDATA); they are
put back, so the program parses the frame that was on the wire, as BMv2 does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from pathlib import Path

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_AUXDATA = 8
AUXDATA = struct.Struct("IIIHHHH")  # tpacket_auxdata: status, len, snaplen, mac, net, tci, tpid
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
ETH_P_8021Q = 0x8100
MAX_FRAME = 65536 + 64


class PcapWriter:
    """A minimal pcap (microsecond, Ethernet) writer, flushed per packet."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "wb")  # noqa: SIM115 - lives as long as the port
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, MAX_FRAME, 1))

    def write(self, frame: bytes) -> None:
        t = time.time()
        sec, usec = int(t), int((t % 1) * 1e6)
        self.f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def with_vlan_tag(frame: bytes, ancdata: list[tuple[int, int, bytes]]) -> bytes:
    """The frame as it was on the wire: its 802.1Q tag back after the MACs, if it had one."""
    for level, kind, data in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= AUXDATA.size:
            status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(data)
            if status & TP_STATUS_VLAN_VALID:
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else ETH_P_8021Q
                return frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
    return frame


class Port:
    def __init__(self, number: int, iface: str, pcap_dir: Path | None = None) -> None:
        self.number, self.iface = number, iface
        try:
            ifindex = socket.if_nametoindex(iface)
        except OSError:
            raise OSError(f"port {number}: no interface named {iface!r}") from None
        # protocol 0 until bind(): no frames from other interfaces queue up in between
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
            s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.bind((iface, ETH_P_ALL))
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        self.sock = s
        self.rx = self.tx = self.tx_errors = 0
        self.pcap_in = PcapWriter(pcap_dir / f"port{number}_in.pcap") if pcap_dir else None
        self.pcap_out = PcapWriter(pcap_dir / f"port{number}_out.pcap") if pcap_dir else None

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self, limit: int) -> list[bytes]:
        """Up to `limit` frames that are waiting (never blocks)."""
        frames = []
        recvmsg, space = self.sock.recvmsg, socket.CMSG_SPACE(AUXDATA.size)
        for _ in range(limit):
            try:
                frame, ancdata, _, _ = recvmsg(MAX_FRAME, space)
            except (BlockingIOError, InterruptedError):
                break
            frames.append(with_vlan_tag(frame, ancdata))
        self.rx += len(frames)
        if self.pcap_in:
            for fr in frames:
                self.pcap_in.write(fr)
        return frames

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
            self.tx += 1
        except OSError:  # ENOBUFS, ENETDOWN, EMSGSIZE: the frame is lost, like on a wire
            self.tx_errors += 1
            return
        if self.pcap_out:
            self.pcap_out.write(frame)

    def close(self) -> None:
        self.sock.close()
        for w in (self.pcap_in, self.pcap_out):
            if w:
                w.close()


class Waker:
    """An eventfd-like pipe other threads write to so the data-plane loop wakes up."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)

    def fileno(self) -> int:
        return self.r

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self.w, b"\0")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.r, 4096):
                pass

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)
