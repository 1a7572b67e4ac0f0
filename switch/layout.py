"""Where every header field of a BMv2 JSON program lives in a packet's field vector.

The embedded target keeps a packet's headers and metadata in one flat Python list of ints
(the "PHV"): one slot per field of every header instance, plus one validity slot per
header. Generated code indexes that list with constants, which is what makes the
pipeline fast enough in Python. This module computes the slots once per program.
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
        return sum(f.width for f in self.fields)

    @property
    def nbytes(self) -> int:
        return (self.nbits + 7) // 8

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
    headers: tuple[str, ...]


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
            fields = []
            for spec in htype["fields"]:
                name, width = spec[0], spec[1]
                if width == "*":
                    raise Unsupported(f"variable-length field {h['name']}.{name} (varbit)")
                fields.append(FieldInfo(name, int(width), bool(len(spec) > 2 and spec[2]), slot))
                slot += 1
            self.headers[h["name"]] = HeaderInfo(
                h["name"], h["id"], htype["name"], bool(h["metadata"]), tuple(fields), slot
            )
            slot += 1
        self.n_slots = slot
        self.by_id = {h.id: h for h in self.headers.values()}
        self.stacks = {
            s["name"]: StackInfo(
                s["name"], s["id"], tuple(self.by_id[i].name for i in s["header_ids"])
            )
            for s in program.get("header_stacks", [])
        }
        self.unions = {
            u["name"]: UnionInfo(u["name"], tuple(self.by_id[i].name for i in u["header_ids"]))
            for u in program.get("header_unions", [])
        }
        if program.get("header_union_stacks"):
            raise Unsupported("header union stacks")
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

    def template(self) -> list[int]:
        """A fresh field vector: everything zero, metadata headers valid."""
        f = [0] * self.n_slots
        for h in self.headers.values():
            if h.metadata:
                f[h.valid_slot] = 1
        return f
