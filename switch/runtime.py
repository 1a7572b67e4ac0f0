"""What a compiled program runs per packet, besides the code generated for it.

Generated code (switch/compiler.py) inlines everything that is fast and common: field
reads and writes, extracts, table lookups. What is rare or long — signed and saturating
arithmetic, lookahead, header copies, header stacks, log formatting — calls the helpers
here, and the data plane (switch/dataplane.py) hands packets to the program as a field
vector plus a `Pkt`. `namespace()` is everything the generated source may name.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ecntune.switch.hashes import pack_bits
from ecntune.switch.layout import Layout
from ecntune.switch.tables import resolve

log = logging.getLogger("ecntune.switch.pipeline")

DROP_PORT = 511  # simple_switch's default drop port (mark_to_drop sets egress_spec to it)
PACKET_TOO_SHORT = 1  # the error code a lookahead past the end raises (core.p4's numbering)


class AssertionFailure(Exception):
    """A P4 assert/assume failed: the packet is dropped (simple_switch would abort)."""


class ParserError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class Pkt:
    """Per-packet state besides the field vector (BMv2 keeps these in packet registers)."""

    __slots__ = (
        "cksum_error",
        "clone_fl",
        "clone_session",
        "data",
        "error",
        "exit",
        "learn_id",
        "length",
        "pos",
        "recirculate",
        "resubmit",
        "stack_next",
        "truncate",
    )

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.length = len(data)
        self.exit = False
        self.learn_id = 0
        self.clone_session = 0
        self.clone_fl = 0
        self.resubmit = 0
        self.recirculate = 0
        self.truncate = 0
        self.error = 0
        self.cksum_error = 0
        self.stack_next: dict[str, int] | None = None


@dataclass(frozen=True)
class HeaderTable:
    """Per header instance (by position): validity slot, field slots, widths, byte size."""

    valid: list[int]
    base: list[int]
    slots: list[list[int]]
    widths: list[list[int]]
    nbytes: list[int]

    @classmethod
    def of(cls, layout: Layout) -> HeaderTable:
        hs = list(layout.headers.values())
        return cls(
            valid=[h.valid_slot for h in hs],
            base=[h.fields[0].slot if h.fields else h.valid_slot for h in hs],
            slots=[[fi.slot for fi in h.fields] for h in hs],
            widths=[[fi.width for fi in h.fields] for h in hs],
            nbytes=[h.nbytes for h in hs],
        )


# -- arithmetic and formatting (named after the BMv2 JSON operators they implement) ----------


def two_comp_mod(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def sat_cast(value: int, width: int) -> int:
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return max(lo, min(hi, value))


def usat_cast(value: int, width: int) -> int:
    return max(0, min((1 << width) - 1, value))


def format_log(fmt: str, args: list[int]) -> str:
    for a in args:
        fmt = fmt.replace("{}", str(a), 1)
    return fmt


def lookahead(pkt: Pkt, offset: int, width: int) -> int:
    start = pkt.pos * 8 + offset
    nbytes = (start % 8 + width + 7) // 8
    chunk = pkt.data[start // 8 : start // 8 + nbytes]
    if len(chunk) < nbytes:
        raise ParserError(PACKET_TOO_SHORT)
    value = int.from_bytes(chunk, "big")
    return (value >> (nbytes * 8 - start % 8 - width)) & ((1 << width) - 1)


# -- headers by position in the HeaderTable (named after the primitives they implement) ------


def copy_header(ht: HeaderTable, f: list[int], dst: int, src: int) -> None:
    if not f[ht.valid[src]]:
        f[ht.valid[dst]] = 0
        return
    for a, b in zip(ht.slots[dst], ht.slots[src], strict=True):
        f[a] = f[b]
    f[ht.valid[dst]] = 1


def add_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if not f[ht.valid[h]]:
        for s in ht.slots[h]:
            f[s] = 0
        f[ht.valid[h]] = 1
        pkt.length += ht.nbytes[h]


def add_header_fast(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    f[ht.valid[h]] = 1


def remove_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if f[ht.valid[h]]:
        pkt.length -= ht.nbytes[h]
        f[ht.valid[h]] = 0


def header_bytes(ht: HeaderTable, f: list[int], h: int) -> bytes:
    return pack_bits([f[s] for s in ht.slots[h]], ht.widths[h])


# -- header stacks: the next index to extract lives in the Pkt --------------------------------


def stack_next(pkt: Pkt, stack: str) -> int:
    return (pkt.stack_next or {}).get(stack, 0)


def stack_set_next(pkt: Pkt, stack: str, value: int) -> None:
    if pkt.stack_next is None:
        pkt.stack_next = {}
    pkt.stack_next[stack] = value


def stack_push(ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[int], n: int) -> None:
    """push_front(n): shift elements towards the end; the first n become invalid."""
    for i in range(len(ids) - 1, -1, -1):
        if i >= n:
            copy_header(ht, f, ids[i], ids[i - n])
        else:
            f[ht.valid[ids[i]]] = 0
    stack_set_next(pkt, stack, min(len(ids), stack_next(pkt, stack) + n))


def stack_pop(ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[int], n: int) -> None:
    """pop_front(n): shift elements towards the front; the last n become invalid."""
    for i in range(len(ids)):
        if i + n < len(ids):
            copy_header(ht, f, ids[i], ids[i + n])
        else:
            f[ht.valid[ids[i]]] = 0
    stack_set_next(pkt, stack, max(0, stack_next(pkt, stack) - n))


HELPERS: tuple[Callable[..., Any], ...] = (
    two_comp_mod, sat_cast, usat_cast, format_log, lookahead, copy_header, add_header,
    add_header_fast, remove_header, header_bytes, stack_next, stack_set_next, stack_push,
    stack_pop,
)  # fmt: skip


def namespace() -> dict[str, Any]:
    """The globals generated code starts from (the compiler adds its tables, externs...)."""
    return {
        "ParserError": ParserError,
        "AssertionFailure": AssertionFailure,
        "DROP_PORT": DROP_PORT,
        "resolve": resolve,
        "pack_bits": pack_bits,
        "log": log,
        "rng": random.Random(),
        **{fn.__name__: fn for fn in HELPERS},
    }
