"""Where every header field of a BMv2 JSON program lives in a packet's field vector.

The embedded target keeps a packet's headers and metadata in one flat Python list of ints
(the "PHV"): one slot per field of every header instance, plus one validity slot per
header. Generated code indexes that list with constants, which is what makes the
pipeline fast enough in Python. This module computes the slots once per program.

A variable-length field (varbit, `["options", "*"]` in the JSON) holds its value in its
slot like any field, and its current length in bits in one more slot after the header's
validity slot, so that field offsets (`access_field`) stay the field's position. Header
unions and union stacks are lists of header instances: making one member valid makes
its siblings invalid (bmv2's UnionMembership).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Unsupported(ValueError):
    """The JSON uses a construct the embedded target does not implement (named in the text)."""


@dataclass(frozen=True)
class FieldInfo:
    name: str
    width: int
    signed: bool
    slot: int
    len_slot: int = -1  # varbit only: the slot holding the field's current length in bits

    @property
    def varbit(self) -> bool:
        return self.len_slot >= 0


@dataclass(frozen=True)
class HeaderInfo:
    name: str
    id: int
    type_name: str
    metadata: bool
    fields: tuple[FieldInfo, ...]
    valid_slot: int

    @property
    def nbits(self) -> int:
        """The header's size on the wire in bits, a varbit field counting as empty."""
        return sum(f.width for f in self.fields if not f.varbit)

    @property
    def nbytes(self) -> int:
        return (self.nbits + 7) // 8

    @property
    def varbit(self) -> FieldInfo | None:
        return next((f for f in self.fields if f.varbit), None)

    def field(self, name: str) -> FieldInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise Unsupported(f"header {self.name!r} has no field {name!r}")


@dataclass(frozen=True)
class StackInfo:
    name: str
    id: int
    headers: tuple[str, ...]


@dataclass(frozen=True)
class UnionInfo:
    name: str
    headers: tuple[str, ...]  # header instances, in the union type's member order
    members: tuple[str, ...]  # the union type's member names

    def offset(self, member: str) -> int:
        """A member's position by its name in the union type."""
        if member not in self.members:
            raise Unsupported(f"header union {self.name!r} has no member {member!r}")
        return self.members.index(member)


@dataclass(frozen=True)
class UnionStackInfo:
    name: str
    unions: tuple[str, ...]


class Layout:
    """Slots of every header instance, stacks and unions, and the field aliases."""

    def __init__(self, program: dict[str, Any]) -> None:
        types = {t["name"]: t for t in program.get("header_types", [])}
        self.headers: dict[str, HeaderInfo] = {}
        slot = 0
        for h in program.get("headers", []):
            htype = types.get(h["header_type"])
            if htype is None:
                raise Unsupported(f"header {h['name']!r} has unknown type {h['header_type']!r}")
            fields, base = [], slot
            len_slot = base + len(htype["fields"]) + 1  # after the validity slot
            varbits = [spec for spec in htype["fields"] if spec[1] == "*"]
            if len(varbits) > 1:
                raise Unsupported(f"header type {htype['name']!r} has more than one varbit field")
            for spec in htype["fields"]:
                name, width, signed = spec[0], spec[1], bool(len(spec) > 2 and spec[2])
                if width == "*":
                    fixed = sum(int(x[1]) for x in htype["fields"] if x[1] != "*")
                    max_bits = int(htype.get("max_length", 0)) * 8 - fixed
                    if max_bits <= 0:
                        raise Unsupported(f"varbit {h['name']}.{name} has no max_length")
                    # the length slot sits after the validity slot (module docstring)
                    fields.append(FieldInfo(name, max_bits, False, slot, len_slot))
                else:
                    fields.append(FieldInfo(name, int(width), signed, slot))
                slot += 1
            self.headers[h["name"]] = HeaderInfo(
                h["name"], h["id"], htype["name"], bool(h["metadata"]), tuple(fields), slot
            )
            slot += 1 + len(varbits)
        self.n_slots = slot
        self.by_id = {h.id: h for h in self.headers.values()}
        self.stacks = {
            s["name"]: StackInfo(
                s["name"], s["id"], tuple(self.by_id[i].name for i in s["header_ids"])
            )
            for s in program.get("header_stacks", [])
        }
        unions_by_id = {u["id"]: u["name"] for u in program.get("header_unions", [])}
        union_types = {
            t["name"]: tuple(m[0] for m in t["headers"])
            for t in program.get("header_union_types", [])
        }
        self.unions = {}
        for u in program.get("header_unions", []):
            headers = tuple(self.by_id[i].name for i in u["header_ids"])
            members = union_types.get(u.get("union_type"), headers)
            if len(members) != len(headers):
                raise Unsupported(f"header union {u['name']!r} disagrees with its type")
            self.unions[u["name"]] = UnionInfo(u["name"], headers, members)
        self.union_stacks = {
            s["name"]: UnionStackInfo(
                s["name"], tuple(unions_by_id[i] for i in s["header_union_ids"])
            )
            for s in program.get("header_union_stacks", [])
        }
        self.aliases = {alias: tuple(target) for alias, target in program.get("field_aliases", [])}

    def resolve(self, header: str, field: str) -> FieldInfo:
        """A field by (header, field), following BMv2's field aliases and `$valid$`."""
        alias = self.aliases.get(f"{header}.{field}")
        if alias:
            header, field = alias
        h = self.headers.get(header)
        if h is None:
            raise Unsupported(f"unknown header instance {header!r}")
        if field == "$valid$":
            return FieldInfo("$valid$", 1, False, h.valid_slot)
        return h.field(field)

    def find(self, dotted: str) -> FieldInfo | None:
        """A field by BMv2's dotted name (e.g. 'standard_metadata.egress_spec'), if present."""
        header, _, field = dotted.partition(".")
        try:
            return self.resolve(header, field)
        except Unsupported:
            return None

    def siblings(self, header: str) -> tuple[str, ...]:
        """The other members of the union `header` belongs to (none if it is in no union)."""
        for u in self.unions.values():
            if header in u.headers:
                return tuple(h for h in u.headers if h != header)
        return ()

    def template(self) -> list[int]:
        """A fresh field vector: everything zero, metadata headers valid."""
        f = [0] * self.n_slots
        for h in self.headers.values():
            if h.metadata:
                f[h.valid_slot] = 1
        return f
