"""BMv2's hash algorithms, bit for bit, and its way of packing fields into the hashed bytes.

ECMP member selection, sketch indices and checksums must agree with simple_switch exactly,
or the differential test against BMv2 (and any PTF test that predicts a path) would fail.
The references are behavioral-model's src/bm_sim/calculations.cpp and crc_tables.h.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Sequence

HashFn = Callable[[bytes], int]


def _reflect(value: int, bits: int) -> int:
    out = 0
    for _ in range(bits):
        out = (out << 1) | (value & 1)
        value >>= 1
    return out


def _crc_table(poly: int, width: int) -> list[int]:
    top, mask = 1 << (width - 1), (1 << width) - 1
    table = []
    for dividend in range(256):
        rem = dividend << (width - 8)
        for _ in range(8):
            rem = ((rem << 1) ^ poly) if rem & top else (rem << 1)
        table.append(rem & mask)
    return table


def make_crc(
    width: int, poly: int, init: int, xor_out: int, reflect_in: bool, reflect_out: bool
) -> HashFn:
    """A table-driven CRC with BMv2's crc_custom parameters."""
    table, mask, shift = _crc_table(poly, width), (1 << width) - 1, width - 8
    refl8 = [_reflect(b, 8) for b in range(256)]

    def crc(data: bytes) -> int:
        rem = init
        for byte in data:
            idx = (refl8[byte] if reflect_in else byte) ^ (rem >> shift)
            rem = (table[idx & 0xFF] ^ (rem << 8)) & mask
        return (_reflect(rem, width) if reflect_out else rem) ^ xor_out

    return crc


def crc32(data: bytes) -> int:
    return binascii.crc32(data)  # BMv2's crc32 is the standard (zlib) CRC-32


crc16 = make_crc(16, 0x8005, 0x0000, 0x0000, True, True)  # CRC-16/ARC
crc_ccitt = make_crc(16, 0x1021, 0xFFFF, 0x0000, False, False)  # CRC-16/CCITT-FALSE


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071), as BMv2's csum16/cksum16."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def xor16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    out = 0
    for i in range(0, len(data), 2):
        out ^= int.from_bytes(data[i : i + 2], "big")
    return out


def identity(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


ALGORITHMS: dict[str, HashFn] = {
    "crc16": crc16,
    "crc32": crc32,
    "crcCCITT": crc_ccitt,
    "csum16": csum16,
    "cksum16": csum16,
    "xor16": xor16,
    "identity": identity,
    # BMv2's *_custom hashes start with these parameters (changeable only over Thrift).
    "crc8_custom": make_crc(8, 0x07, 0x00, 0x00, False, False),
    "crc16_custom": make_crc(16, 0x8005, 0x0000, 0x0000, True, True),
    "crc32_custom": make_crc(32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True),
}


def pack_bits(values: Sequence[int], widths: Sequence[int]) -> bytes:
    """Fields concatenated MSB first, the whole padded with zero bits to a byte boundary."""
    acc, nbits = 0, 0
    for value, width in zip(values, widths, strict=True):
        acc = (acc << width) | (value & ((1 << width) - 1))
        nbits += width
    pad = -nbits % 8
    return (acc << pad).to_bytes((nbits + pad) // 8, "big")
