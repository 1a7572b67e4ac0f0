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


class StackOutOfBounds(AssertionFailure):
    """A header stack index past its depth (or `.last` of an empty stack). In the parser
    it is error.StackOutOfBounds; in a control the packet is dropped and logged, where
    simple_switch would abort on its std::out_of_range."""


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
    """Per header instance (by position): validity slot, field slots (a varbit's length
    slot last), widths, byte size without the varbit, its union siblings' validity slots,
    and the varbit's (field index, length slot) or None."""

    valid: list[int]
    base: list[int]
    slots: list[list[int]]
    widths: list[list[int]]
    nbytes: list[int]
    siblings: list[list[int]]
    varbit: list[tuple[int, int] | None]

    @classmethod
    def of(cls, layout: Layout) -> HeaderTable:
        hs = list(layout.headers.values())
        return cls(
            valid=[h.valid_slot for h in hs],
            base=[h.fields[0].slot if h.fields else h.valid_slot for h in hs],
            slots=[
                [fi.slot for fi in h.fields] + [fi.len_slot for fi in h.fields if fi.varbit]
                for h in hs
            ],
            widths=[[fi.width for fi in h.fields] for h in hs],
            nbytes=[h.nbytes for h in hs],
            siblings=[[layout.headers[s].valid_slot for s in layout.siblings(h.name)] for h in hs],
            varbit=[
                next(((i, fi.len_slot) for i, fi in enumerate(h.fields) if fi.varbit), None)
                for h in hs
            ],
        )

    def widths_now(self, f: list[int], h: int) -> list[int]:
        """The header's field widths, its varbit at its current length."""
        vl = self.varbit[h]
        if vl is None:
            return self.widths[h]
        widths = list(self.widths[h])
        widths[vl[0]] = f[vl[1]]
        return widths

    def make_valid(self, f: list[int], h: int) -> None:
        """Valid, and its union's other members invalid (bmv2's UnionMembership)."""
        f[self.valid[h]] = 1
        for s in self.siblings[h]:
            f[s] = 0


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
    """assign_header: an invalid source makes the destination invalid and copies nothing."""
    if not f[ht.valid[src]]:
        f[ht.valid[dst]] = 0
        return
    for a, b in zip(ht.slots[dst], ht.slots[src], strict=True):
        f[a] = f[b]
    ht.make_valid(f, dst)


def add_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if not f[ht.valid[h]]:
        for s in ht.slots[h]:
            f[s] = 0
        ht.make_valid(f, h)
        pkt.length += ht.nbytes[h]


def add_header_fast(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    ht.make_valid(f, h)


def remove_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if f[ht.valid[h]]:
        vl = ht.varbit[h]
        pkt.length -= ht.nbytes[h] + (f[vl[1]] // 8 if vl else 0)
        f[ht.valid[h]] = 0


def headers_equal(ht: HeaderTable, f: list[int], a: int, b: int) -> bool:
    """bmv2's Header::cmp: both valid and every field equal (two invalid ones differ)."""
    n = len(ht.widths[a])
    return bool(
        f[ht.valid[a]]
        and f[ht.valid[b]]
        and all(f[x] == f[y] for x, y in zip(ht.slots[a][:n], ht.slots[b][:n], strict=True))
    )


def unions_equal(ht: HeaderTable, f: list[int], a: list[int], b: list[int]) -> bool:
    """bmv2's HeaderUnion::cmp: the same member valid in both, and those members equal."""
    valid_a = [i for i, h in enumerate(a) if f[ht.valid[h]]]
    valid_b = [i for i, h in enumerate(b) if f[ht.valid[h]]]
    if not valid_a or valid_a != valid_b:
        return False
    return headers_equal(ht, f, a[valid_a[0]], b[valid_a[0]])


def header_bytes(ht: HeaderTable, f: list[int], h: int) -> bytes:
    return pack_bits([f[s] for s in ht.slots[h][: len(ht.widths[h])]], ht.widths_now(f, h))


# -- header stacks: the next index to extract lives in the Pkt --------------------------------
# A stack's element is a list of header positions: one header, or a union's members.


def stack_next(pkt: Pkt, stack: str) -> int:
    return (pkt.stack_next or {}).get(stack, 0)


def stack_at(ids: list[int], i: int) -> int:
    """ids[i] for a run-time index, refusing what is past the stack (negative included)."""
    if not 0 <= i < len(ids):
        raise StackOutOfBounds(f"header stack index {i} outside [0, {len(ids)})")
    return ids[i]


def stack_last(pkt: Pkt, stack: str) -> int:
    """The index of `.last`: the element extracted last."""
    i = stack_next(pkt, stack) - 1
    if i < 0:
        raise StackOutOfBounds(f"{stack}.last of an empty stack")
    return i


def stack_set_next(pkt: Pkt, stack: str, value: int) -> None:
    if pkt.stack_next is None:
        pkt.stack_next = {}
    pkt.stack_next[stack] = value


def _swap(ht: HeaderTable, f: list[int], a: list[int], b: list[int]) -> None:
    """Exchange two stack elements' headers, fields and validity (bmv2's swap_values)."""
    for ha, hb in zip(a, b, strict=True):
        for x, y in zip([*ht.slots[ha], ht.valid[ha]], [*ht.slots[hb], ht.valid[hb]], strict=True):
            f[x], f[y] = f[y], f[x]


def _invalidate(ht: HeaderTable, f: list[int], element: list[int], union: bool) -> None:
    """A vacated element becomes invalid; a union's does not: bmv2's HeaderUnion::mark_invalid
    is a no-op on purpose, so it keeps what the shift swapped into it."""
    if not union:
        for h in element:
            f[ht.valid[h]] = 0


def stack_push(
    ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[list[int]], n: int,
    union: bool = False,
) -> None:  # fmt: skip
    """push_front(n) as bmv2's StackP4_16: swap elements towards the end, then the first n
    become invalid (header stacks only, see _invalidate)."""
    if n <= 0:
        return
    size = len(ids)
    stack_set_next(pkt, stack, min(size, stack_next(pkt, stack) + n))
    for i in range(size - 1, n - 1, -1):
        _swap(ht, f, ids[i], ids[i - n])
    for i in range(min(size, n)):
        _invalidate(ht, f, ids[i], union)


def stack_pop(
    ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[list[int]], n: int,
    union: bool = False,
) -> None:  # fmt: skip
    """pop_front(n) as bmv2's StackP4_16: swap elements towards the front, then the last n
    become invalid (header stacks only, see _invalidate)."""
    if n <= 0:
        return
    size = len(ids)
    stack_set_next(pkt, stack, stack_next(pkt, stack) - min(stack_next(pkt, stack), n))
    kept = max(0, size - n)
    for i in range(kept):
        _swap(ht, f, ids[i], ids[i + n])
    for i in range(kept, size):
        _invalidate(ht, f, ids[i], union)


HELPERS: tuple[Callable[..., Any], ...] = (
    two_comp_mod, sat_cast, usat_cast, format_log, lookahead, copy_header, add_header,
    add_header_fast, remove_header, headers_equal, unions_equal, header_bytes, stack_next,
    stack_set_next, stack_at, stack_last, stack_push, stack_pop,
)  # fmt: skip


def namespace() -> dict[str, Any]:
    """The globals generated code starts from (the compiler adds its tables, externs...)."""
    return {
        "ParserError": ParserError,
        "AssertionFailure": AssertionFailure,
        "StackOutOfBounds": StackOutOfBounds,
        "DROP_PORT": DROP_PORT,
        "resolve": resolve,
        "pack_bits": pack_bits,
        "log": log,
        "rng": random.Random(),
        **{fn.__name__: fn for fn in HELPERS},
    }
