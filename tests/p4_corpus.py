"""A corpus of small v1model programs, as BMv2 JSON, for the constructs issue 18 names.

Each program is written in the JSON p4c 1.2.4 emits for the P4 source in its docstring
(p4c is not installed where this corpus was written, so the JSON is built here by hand in
p4c's conventions: keyless `tbl_*` tables running each action, operands of primitives
wrapped in one more `{"type": "expression"}` layer, `& 0xffffffff` masks on unsigned
arithmetic, union members named `<union>.<member>`). Every program forwards what it
parses from port 1 to port 2 unless it says otherwise, so a frame's output is its
deparsed headers plus the payload.

`CASES[name]` are frames and the frames the program must send, computed here from P4's
semantics (scapy builds the bytes); tests/test_switch_corpus.py runs them on the embedded
target in memory and, on veths, on each installed target (BMv2 as the reference).
"""

from __future__ import annotations

import binascii
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

JSON = dict[str, Any]


def fields(spec: str) -> list[list[Any]]:
    """'name:width ...' as p4c's [name, width, signed] triples (width '*': a varbit)."""
    out: list[list[Any]] = []
    for item in spec.split():
        name, width = item.split(":")
        out.append([name, width if width == "*" else int(width), False])
    return out


STANDARD_METADATA = fields(
    "ingress_port:9 egress_spec:9 egress_port:9 instance_type:32 packet_length:32 "
    "enq_timestamp:32 enq_qdepth:19 deq_timedelta:32 deq_qdepth:19 "
    "ingress_global_timestamp:48 egress_global_timestamp:48 mcast_grp:16 egress_rid:16 "
    "checksum_error:1 parser_error:32 priority:3 _padding:3"
)
ERRORS = [
    [name, code]
    for code, name in enumerate(
        [
            "NoError",
            "PacketTooShort",
            "NoMatch",
            "StackOutOfBounds",
            "HeaderTooShort",
            "ParserTimeout",
            "ParserInvalidArgument",
        ]
    )
]
ETHERNET = ["ethernet_t", fields("dst:48 src:48 etherType:16")]
VLAN = ["vlan_t", fields("pcp:3 dei:1 vid:12 etherType:16")]
IPV4_FIELDS = fields(
    "version:4 ihl:4 tos:8 totalLen:16 identification:16 flags:3 fragOffset:13 ttl:8 "
    "protocol:8 hdrChecksum:16 srcAddr:32 dstAddr:32"
)
IPV4 = ["ipv4_t", IPV4_FIELDS]
IPV6 = [
    "ipv6_t",
    fields(
        "version:4 trafficClass:8 flowLabel:20 payloadLen:16 nextHdr:8 hopLimit:8 "
        "srcAddr:128 dstAddr:128"
    ),
]


# -- type-value nodes as p4c writes them ------------------------------------------------------


def field(header: str, name: str) -> JSON:
    return {"type": "field", "value": [header, name]}


def hexstr(value: int) -> JSON:
    return {"type": "hexstr", "value": hex(value)}


def hexbytes(value: int, bits: int) -> str:
    """A value as bmv2 reads match keys and select values: exactly the field's bytes."""
    return "0x" + value.to_bytes((bits + 7) // 8, "big").hex()


def ex(op: str, left: JSON | None, right: JSON, **more: JSON) -> JSON:
    """An expression node (inside an expression, or a conditional's expression)."""
    return {"type": "expression", "value": {"op": op, "left": left, "right": right, **more}}


def param(node: JSON) -> JSON:
    """A primitive's operand that is an expression: p4c wraps it once more."""
    return {"type": "expression", "value": node} if node["type"] == "expression" else node


def prim(op: str, *params: JSON) -> JSON:
    return {"op": op, "parameters": [param(p) for p in params]}


def assign(dst: JSON, src: JSON) -> JSON:
    return prim("assign", dst, src)


def to_port(port: int) -> JSON:
    return assign(field("standard_metadata", "egress_spec"), hexstr(port))


def stack_elem(stack: str, index: JSON) -> JSON:
    return ex("dereference_header_stack", {"type": "header_stack", "value": stack}, index)


def valid(header: str) -> JSON:
    return ex("d2b", None, field(header, "$valid$"))


# A control-flow node: ("act", action name), ("table", table spec: Builder._table) or
# ("if", (expression, [then nodes], [else nodes])).
Node = tuple[str, Any]


# -- a whole program -------------------------------------------------------------------------


@dataclass
class Builder:
    """Header types and instances, parser states, actions and ingress nodes, in p4c's shapes."""

    types: list[JSON]
    headers: list[JSON]
    states: list[JSON]
    order: list[str]
    actions: list[JSON]
    nodes: dict[str, list[Node]]  # per pipeline
    extra: JSON

    def __init__(self, scalars: list[list[Any]] | None = None) -> None:
        self.types = [
            {"name": "scalars_0", "id": 0, "fields": scalars or [["tmp", 32, False]]},
            {"name": "standard_metadata", "id": 1, "fields": STANDARD_METADATA},
        ]
        self.headers = [
            {"name": "scalars", "id": 0, "header_type": "scalars_0", "metadata": True},
            {
                "name": "standard_metadata",
                "id": 1,
                "header_type": "standard_metadata",
                "metadata": True,
            },
        ]
        self.states, self.order, self.actions = [], [], []
        self.nodes: dict[str, list[Node]] = {"ingress": [], "egress": []}
        self.extra = {
            "field_lists": [],
            "header_stacks": [],
            "header_union_types": [],
            "header_unions": [],
            "header_union_stacks": [],
            "checksums": [],
            "calculations": [],
        }

    def header_type(self, name: str, fields: list[list[Any]], max_length: int = 0) -> None:
        t: JSON = {"name": name, "id": len(self.types), "fields": fields}
        if max_length:
            t["max_length"] = max_length
        self.types.append(t)

    def header(self, name: str, type_name: str) -> int:
        self.headers.append(
            {"name": name, "id": len(self.headers), "header_type": type_name, "metadata": False}
        )
        return len(self.headers) - 1

    def stack(self, name: str, type_name: str, depth: int) -> None:
        ids = [self.header(f"{name}[{i}]", type_name) for i in range(depth)]
        stacks = self.extra["header_stacks"]
        stacks.append(
            {
                "name": name,
                "id": len(stacks),
                "header_type": type_name,
                "size": depth,
                "header_ids": ids,
            }
        )

    def union(self, name: str, union_type: str, members: list[tuple[str, str]]) -> int:
        types = self.extra["header_union_types"]
        if not any(t["name"] == union_type for t in types):
            types.append(
                {"name": union_type, "id": len(types), "headers": [list(m) for m in members]}
            )
        ids = [self.header(f"{name}.{m}", t) for m, t in members]
        unions = self.extra["header_unions"]
        unions.append(
            {"name": name, "id": len(unions), "union_type": union_type, "header_ids": ids}
        )
        return unions[-1]["id"]

    def union_stack(
        self, name: str, union_type: str, members: list[tuple[str, str]], depth: int
    ) -> None:
        ids = [self.union(f"{name}[{i}]", union_type, members) for i in range(depth)]
        stacks = self.extra["header_union_stacks"]
        stacks.append(
            {
                "name": name,
                "id": len(stacks),
                "union_type": union_type,
                "size": depth,
                "header_union_ids": ids,
            }
        )

    def state(
        self,
        name: str,
        ops: list[JSON],
        key: list[JSON],
        transitions: list[tuple[int | None, str | None]],
        key_bits: int = 16,
    ) -> None:
        """transitions: (value or None for default, next state or None to accept); values
        padded to the key's bytes (`key_bits`)."""
        self.states.append(
            {
                "name": name,
                "id": len(self.states),
                "parser_ops": ops,
                "transition_key": key,
                "transitions": [
                    {"type": "default", "value": None, "mask": None, "next_state": nxt}
                    if v is None
                    else {
                        "type": "hexstr",
                        "value": hexbytes(v, key_bits),
                        "mask": None,
                        "next_state": nxt,
                    }
                    for v, nxt in transitions
                ],
            }
        )

    def action(self, name: str, *primitives: JSON, params: tuple[tuple[str, int], ...] = ()) -> str:
        """An action; `params` are its (name, bit width) action data (`runtime_data` i)."""
        data = [{"name": n, "bitwidth": w} for n, w in params]
        self.actions.append(
            {
                "name": name,
                "id": len(self.actions),
                "runtime_data": data,
                "primitives": list(primitives),
            }
        )
        return name

    def run(self, *nodes: Node) -> None:
        self.nodes["ingress"] = list(nodes)

    def run_egress(self, *nodes: Node) -> None:
        self.nodes["egress"] = list(nodes)

    def _aid(self, action: str) -> int:
        return next(a["id"] for a in self.actions if a["name"] == action)

    def _table(self, tables: list[JSON], spec: JSON, nxt: str | None) -> str:
        """A table node: `spec` has name, key, actions, entries, default (action, data)."""
        default, data = spec.get("default", (spec["actions"][-1], []))
        aids = [self._aid(a) for a in spec["actions"]]
        entries = [
            {
                "match_key": keys,
                "priority": i + 1,
                "action_entry": {"action_id": self._aid(a), "action_data": [hex(v) for v in d]},
            }
            for i, (keys, a, d) in enumerate(spec.get("entries", []))
        ]
        table = {
            "name": spec["name"],
            "id": self._ids["table"],
            "key": spec.get("key", []),
            "match_type": spec.get("match_type", "exact"),
            "type": "simple",
            "max_size": 1024,
            "with_counters": False,
            "support_timeout": False,
            "direct_meters": None,
            "action_ids": aids,
            "actions": spec["actions"],
            "base_default_next": nxt,
            "next_tables": {a: nxt for a in spec["actions"]},
            "default_entry": {
                "action_id": self._aid(default),
                "action_const": True,
                "action_data": [hex(v) for v in data],
                "action_entry_const": True,
            },
        }
        if entries:
            table["entries"] = entries
        self._ids["table"] += 1
        tables.append(table)
        return spec["name"]

    def _chain(
        self, nodes: list[Node], after: str | None, tables: list[JSON], conditionals: list[JSON]
    ) -> str | None:
        """Nodes in order, each continuing to the next; returns the first's name."""
        nxt = after
        for kind, what in reversed(nodes):
            if kind == "act":  # p4c: a keyless table whose const default is the action
                name = f"tbl_{what}_{self._ids['table']}"
                nxt = self._table(tables, {"name": name, "actions": [what]}, nxt)
            elif kind == "table":
                nxt = self._table(tables, what, nxt)
            else:
                cond, then, other = what
                true_next = self._chain(then, nxt, tables, conditionals)
                false_next = self._chain(other, nxt, tables, conditionals)
                name = f"node_{self._ids['conditional']}"
                conditionals.append(
                    {
                        "name": name,
                        "id": self._ids["conditional"],
                        "expression": cond,
                        "true_next": true_next,
                        "false_next": false_next,
                    }
                )
                self._ids["conditional"] += 1
                nxt = name
        return nxt

    def build(self) -> JSON:
        self._ids = {"table": 0, "conditional": 0}  # unique over both pipelines, as p4c's
        pipelines = []
        for i, name in enumerate(("ingress", "egress")):
            tables: list[JSON] = []
            conditionals: list[JSON] = []
            init = self._chain(self.nodes[name], None, tables, conditionals)
            pipelines.append(
                {
                    "name": name,
                    "id": i,
                    "init_table": init,
                    "tables": tables,
                    "action_profiles": [],
                    "conditionals": conditionals,
                }
            )
        return {
            "header_types": self.types,
            "headers": self.headers,
            **self.extra,
            "errors": ERRORS,
            "enums": [],
            "parsers": [
                {"name": "parser", "id": 0, "init_state": "start", "parse_states": self.states}
            ],
            "parse_vsets": [],
            "deparsers": [{"name": "deparser", "id": 0, "order": self.order, "primitives": []}],
            "meter_arrays": [],
            "counter_arrays": [],
            "register_arrays": [],
            "learn_lists": [],
            "actions": self.actions,
            "pipelines": pipelines,
            "force_arith": [],
            "extern_instances": [],
            "field_aliases": [],
            "program": "corpus.p4",
            "__meta__": {"version": [2, 23], "compiler": "https://github.com/p4lang/p4c"},
        }


def ethernet_then_ip(b: Builder) -> None:
    """The start state: Ethernet, then state "v4" or "v6" by EtherType."""
    extract = {"op": "extract", "parameters": [{"type": "regular", "value": "ethernet"}]}
    key = [field("ethernet", "etherType")]
    b.state("start", [extract], key, [(0x0800, "v4"), (0x86DD, "v6"), (None, None)])


# -- the programs ----------------------------------------------------------------------------


SAME_TAGS_SRC = 0xEEEEEEEEEEEE  # the vlan program's mark of two equal first tags


def vlan_stack() -> JSON:
    """Header stack: parse up to 3 VLAN tags, selecting on `.last`; a run-time index.

    header vlan_t { bit<3> pcp; bit<1> dei; bit<12> vid; bit<16> etherType; }
    struct headers { ethernet_t ethernet; vlan_t[3] vlan; }
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 0x8100: parse_vlan; default: accept; }
    }
    state parse_vlan {
        packet.extract(hdr.vlan.next);
        transition select(hdr.vlan.last.etherType) { 0x8100: parse_vlan; default: accept; }
    }
    apply {
        standard_metadata.egress_spec = 2;
        if (hdr.vlan[0] == hdr.vlan[1]) {           // bmv2: both valid, every field equal
            hdr.ethernet.src = 0xeeeeeeeeeeee;
        }
        if (hdr.vlan[0].isValid()) {
            tmp = (bit<32>) hdr.ethernet.dst[7:0];   // the index comes from the packet
            hdr.vlan[tmp].vid = 12w7;                // past the stack: out of bounds
            hdr.vlan[tmp].pcp = (hdr.vlan.lastIndex == tmp) ? 3w5 : 3w1;
        }
        if (standard_metadata.parser_error != error.NoError) {
            standard_metadata.egress_spec = 3;
        }
    }
    """
    b = Builder()
    b.header_type(*ETHERNET)
    b.header_type(*VLAN)
    b.header("ethernet", "ethernet_t")
    b.stack("vlan", "vlan_t", 3)
    b.order = ["ethernet", "vlan[0]", "vlan[1]", "vlan[2]"]
    b.state(
        "start",
        [{"op": "extract", "parameters": [{"type": "regular", "value": "ethernet"}]}],
        [field("ethernet", "etherType")],
        [(0x8100, "parse_vlan"), (None, None)],
    )
    b.state(
        "parse_vlan",
        [{"op": "extract", "parameters": [{"type": "stack", "value": "vlan"}]}],
        [{"type": "stack_field", "value": ["vlan", "etherType"]}],
        [(0x8100, "parse_vlan"), (None, None)],
    )
    tmp = field("scalars", "tmp")
    index = ex("&", field("ethernet", "dst"), hexstr(0xFF))
    elem = stack_elem("vlan", tmp)
    last = ex("last_stack_index", None, {"type": "header_stack", "value": "vlan"})
    b.action("forward", to_port(2))
    b.action("set_index", assign(tmp, ex("&", index, hexstr(0xFFFFFFFF))))
    b.action(
        "rewrite",
        assign(ex("access_field", elem, 2), hexstr(7)),
        assign(
            ex("access_field", elem, 0), ex("?", hexstr(5), hexstr(1), cond=ex("==", last, tmp))
        ),
    )
    b.action("to_error_port", to_port(3))
    b.action("same_tags", assign(field("ethernet", "src"), hexstr(SAME_TAGS_SRC)))
    parser_error = ex("!=", field("standard_metadata", "parser_error"), hexstr(0))
    same = ex("==", *({"type": "header", "value": f"vlan[{i}]"} for i in (0, 1)))
    b.run(
        ("act", "forward"),
        ("if", (same, [("act", "same_tags")], [])),
        ("if", (valid("vlan[0]"), [("act", "set_index"), ("act", "rewrite")], [])),
        ("if", (parser_error, [("act", "to_error_port")], [])),
    )
    return b.build()


def union_rewrite() -> JSON:
    """Header union: IPv4 or IPv6 in one union; setValid on the other member replaces it.

    header_union ip_t { ipv4_t v4; ipv6_t v6; }
    struct headers { ethernet_t ethernet; ip_t ip; }
    state start { packet.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) {
                  0x0800: v4; 0x86dd: v6; default: accept; } }
    state v4 { packet.extract(hdr.ip.v4); transition accept; }
    state v6 { packet.extract(hdr.ip.v6); transition accept; }
    apply {
        if (!hdr.ip.isValid()) { standard_metadata.egress_spec = 3; }
        else if (hdr.ip.v4.isValid()) {          // 4 -> 6: v6 valid makes v4 invalid
            hdr.ip.v6.setValid();
            hdr.ip.v6.version = 6; hdr.ip.v6.hopLimit = hdr.ip.v4.ttl;
            hdr.ip.v6.nextHdr = hdr.ip.v4.protocol;
            hdr.ethernet.etherType = 0x86dd;
            standard_metadata.egress_spec = 2;
        } else { standard_metadata.egress_spec = 4; }
    }
    """
    b = Builder()
    b.header_type(*ETHERNET)
    b.header_type(*IPV4)
    b.header_type(*IPV6)
    b.header("ethernet", "ethernet_t")
    b.union("ip", "ip_t", [("v4", "ipv4_t"), ("v6", "ipv6_t")])
    b.order = ["ethernet", "ip.v4", "ip.v6"]
    ethernet_then_ip(b)
    for member in ("v4", "v6"):
        op = {"op": "extract", "parameters": [{"type": "regular", "value": f"ip.{member}"}]}
        b.state(member, [op], [], [(None, None)])
    b.action("no_ip", to_port(3))
    b.action(
        "four_to_six",
        prim("add_header", {"type": "header", "value": "ip.v6"}),
        assign(field("ip.v6", "version"), hexstr(6)),
        assign(field("ip.v6", "hopLimit"), field("ip.v4", "ttl")),
        assign(field("ip.v6", "nextHdr"), field("ip.v4", "protocol")),
        assign(field("ethernet", "etherType"), hexstr(0x86DD)),
        to_port(2),
    )
    b.action("six", to_port(4))
    union_valid = ex("valid_union", None, {"type": "header_union", "value": "ip"})
    b.run(
        (
            "if",
            (
                ex("not", None, union_valid),
                [("act", "no_ip")],
                [
                    ("if", (valid("ip.v4"), [("act", "four_to_six")], [("act", "six")])),
                ],
            ),
        ),
    )
    return b.build()


def union_stack_decap() -> JSON:
    """Header union stack: IP-in-IP of either family, parsed by `.last` of a union stack,
    decapsulated by pop_front. bmv2 leaves a union that pop_front vacates as the shift left
    it (its HeaderUnion::mark_invalid is a no-op on purpose, unlike P4's spec): the outer
    header moves to ip[1] and stays valid unless the program invalidates it, as this one
    does for IPv4 only, so an IPv6 outer header is still emitted after the inner one.

        header_union ip_t { ipv4_t v4; ipv6_t v6; }
        struct headers { ethernet_t ethernet; ip_t[2] ip; }
        state start { packet.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) {
                      0x0800: v4; 0x86dd: v6; default: accept; } }
        state v4 { packet.extract(hdr.ip.next.v4);
                   transition select(hdr.ip.last.v4.protocol) { 4: v4; 41: v6; default: accept; } }
        state v6 { packet.extract(hdr.ip.next.v6);
                   transition select(hdr.ip.last.v6.nextHdr) { 4: v4; 41: v6; default: accept; } }
        apply {
            standard_metadata.egress_spec = 2;
            if (hdr.ip[1].isValid()) {                  // tunnelled: drop the outer header
                hdr.ip.pop_front(1);
                hdr.ip[1].v4.setInvalid();              // not .v6: see above
                hdr.ethernet.etherType = hdr.ip[0].v4.isValid() ? 16w0x0800 : 16w0x86dd;
            }
        }
    """
    b = Builder()
    b.header_type(*ETHERNET)
    b.header_type(*IPV4)
    b.header_type(*IPV6)
    b.header("ethernet", "ethernet_t")
    members = [("v4", "ipv4_t"), ("v6", "ipv6_t")]
    b.union_stack("ip", "ip_t", members, 2)
    b.order = ["ethernet", "ip[0].v4", "ip[0].v6", "ip[1].v4", "ip[1].v6"]
    ethernet_then_ip(b)
    for member, next_field in (("v4", "protocol"), ("v6", "nextHdr")):
        op = {"op": "extract", "parameters": [{"type": "union_stack", "value": ["ip", member]}]}
        key = {"type": "union_stack_field", "value": ["ip", member, next_field]}
        b.state(member, [op], [key], [(4, "v4"), (41, "v6"), (None, None)], key_bits=8)
    inner_v4 = valid("ip[0].v4")
    b.action("forward", to_port(2))
    b.action(
        "decap",
        prim("pop", {"type": "header_union_stack", "value": "ip"}, hexstr(1)),
        prim("remove_header", {"type": "header", "value": "ip[1].v4"}),
        assign(
            field("ethernet", "etherType"), ex("?", hexstr(0x0800), hexstr(0x86DD), cond=inner_v4)
        ),
    )
    outer_union = ex(
        "valid_union",
        None,
        ex("dereference_union_stack", {"type": "header_union_stack", "value": "ip"}, hexstr(1)),
    )
    b.run(("act", "forward"), ("if", (outer_union, [("act", "decap")], [])))
    return b.build()


def ipv4_options() -> JSON:
    """Varbit: IPv4 options sized by IHL (extract with a length), TTL decremented, the
    checksum recomputed over the options too.

        header ipv4_t { ...; bit<32> dstAddr; varbit<320> options; }
        state ipv4 {  // p4c: a `set` of the lookahead, then extract_VL
            tmp = (bit<32>) packet.lookahead<bit<8>>()[3:0];
            packet.extract(hdr.ipv4, (tmp << 5) - 160);
            transition accept;
        }
        apply { standard_metadata.egress_spec = 2; hdr.ipv4.ttl = hdr.ipv4.ttl - 1; }
        update_checksum(hdr.ipv4.isValid(), { hdr.ipv4.version, ..., hdr.ipv4.dstAddr,
                        hdr.ipv4.options }, hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    """
    b = Builder()
    b.header_type(*ETHERNET)
    b.header_type("ipv4_t", [*IPV4_FIELDS, *fields("options:*")], max_length=60)
    b.header("ethernet", "ethernet_t")
    b.header("ipv4", "ipv4_t")
    b.order = ["ethernet", "ipv4"]
    extract = {"op": "extract", "parameters": [{"type": "regular", "value": "ethernet"}]}
    b.state("start", [extract], [field("ethernet", "etherType")], [(0x0800, "ipv4"), (None, None)])
    ihl = field("scalars", "tmp")  # IHL looked ahead: bmv2 expressions have no lookahead
    look = {"op": "set", "parameters": [ihl, {"type": "lookahead", "value": [4, 4]}]}
    length = ex("&", ex("-", ex("<<", ihl, hexstr(5)), hexstr(160)), hexstr(0xFFFFFFFF))
    extract_vl = {
        "op": "extract_VL",
        "parameters": [{"type": "regular", "value": "ipv4"}, param(length)],
    }
    b.state("ipv4", [look, extract_vl], [], [(None, None)])
    ttl = field("ipv4", "ttl")
    b.action("forward", to_port(2), assign(ttl, ex("&", ex("-", ttl, hexstr(1)), hexstr(0xFF))))
    b.run(("act", "forward"))
    inputs = [field("ipv4", name) for name, *_ in IPV4_FIELDS if name != "hdrChecksum"]
    inputs.append(field("ipv4", "options"))
    b.extra["calculations"] = [{"name": "calc", "id": 0, "algo": "csum16", "input": inputs}]
    b.extra["checksums"] = [
        {
            "name": "cksum",
            "id": 0,
            "target": ["ipv4", "hdrChecksum"],
            "type": "generic",
            "calculation": "calc",
            "verify": False,
            "update": True,
            "if_cond": valid("ipv4"),
        }
    ]
    return b.build()


CALC = [
    "calc_t",
    [
        *fields("a:8 b:8"),
        ["sa", 8, True],
        ["sb", 8, True],
        *fields("w:16 r_add:8 r_sub:8 r_mul:8 r_shl:8 r_shr:8 r_not:8 r_usat_add:8"),
        *fields("r_usat_sub:8"),
        ["r_ssat_add", 8, True],
        ["r_sadd", 8, True],
        ["r_sshr", 8, True],
        *fields("r_slt:8 r_cat:16 r_slice:8 r_tern:8 r_bool:8"),
    ],
]
CALC_ETHERTYPE = 0x88B5  # IEEE's local experimental EtherType


def ethernet_then_calc(b: Builder) -> None:
    """Ethernet, then the calc header when the EtherType says so; egress port 2."""
    b.header_type(*ETHERNET)
    b.header_type(*CALC)
    b.header("ethernet", "ethernet_t")
    b.header("calc", "calc_t")
    b.order = ["ethernet", "calc"]
    extract = {"op": "extract", "parameters": [{"type": "regular", "value": "ethernet"}]}
    key = [field("ethernet", "etherType")]
    b.state("start", [extract], key, [(CALC_ETHERTYPE, "calc"), (None, None)])
    op = {"op": "extract", "parameters": [{"type": "regular", "value": "calc"}]}
    b.state("calc", [op], [], [(None, None)])


def arith() -> JSON:
    """Expressions with bmv2's bit-width semantics, results written into the packet.

    header calc_t { bit<8> a; bit<8> b; int<8> sa; int<8> sb; bit<16> w;
                    bit<8> r_add; ...; int<8> r_ssat_add; ...; bit<8> r_bool; }
    apply {
        standard_metadata.egress_spec = 2;
        c.r_add = c.a + c.b;  c.r_sub = c.a - c.b;  c.r_mul = c.a * c.b;   // wrap at 8 bits
        c.r_shl = c.a << 3;   c.r_shr = c.a >> (c.b & 7);  c.r_not = ~c.a;
        c.r_usat_add = c.a |+| c.b;  c.r_usat_sub = c.a |-| c.b;           // saturate
        c.r_ssat_add = c.sa |+| c.sb;  c.r_sadd = c.sa + c.sb;  c.r_sshr = c.sa >> 2;
        c.r_slt = (bit<8>) (bit<1>) (c.sa < c.sb);     // a signed comparison
        c.r_cat = c.a ++ c.b;  c.r_slice = c.w[11:4];
        c.r_tern = c.a > c.b ? (c.a == 0 ? 8w1 : 8w2) : (c.sb < 0 ? 8w3 : 8w4);
        c.r_bool = (bit<8>) (bit<1>) ((bool) c.a && !((bool) c.b));
    }
    """
    b = Builder()
    ethernet_then_calc(b)

    def c(name: str) -> JSON:
        return field("calc", name)

    def m8(e: JSON) -> JSON:
        return ex("&", e, hexstr(0xFF))

    a, bb, sa, sb = c("a"), c("b"), c("sa"), c("sb")
    width8 = hexstr(8)
    inner = ex("?", hexstr(1), hexstr(2), cond=ex("==", a, hexstr(0)))
    other = ex("?", hexstr(3), hexstr(4), cond=ex("<", sb, hexstr(0)))
    both = ex("and", ex("d2b", None, a), ex("not", None, ex("d2b", None, bb)))
    b.action(
        "compute",
        to_port(2),
        assign(c("r_add"), m8(ex("+", a, bb))),
        assign(c("r_sub"), m8(ex("-", a, bb))),
        assign(c("r_mul"), m8(ex("*", a, bb))),
        assign(c("r_shl"), m8(ex("<<", a, hexstr(3)))),
        assign(c("r_shr"), ex(">>", a, ex("&", bb, hexstr(7)))),
        assign(c("r_not"), m8(ex("~", None, a))),
        assign(c("r_usat_add"), ex("usat_cast", ex("+", a, bb), width8)),
        assign(c("r_usat_sub"), ex("usat_cast", ex("-", a, bb), width8)),
        assign(c("r_ssat_add"), ex("sat_cast", ex("+", sa, sb), width8)),
        assign(c("r_sadd"), ex("two_comp_mod", ex("+", sa, sb), width8)),
        assign(c("r_sshr"), ex(">>", sa, hexstr(2))),
        assign(c("r_slt"), ex("b2d", None, ex("<", sa, sb))),
        assign(
            c("r_cat"),
            ex(
                "|",
                ex("&", ex("<<", ex("&", a, hexstr(0xFFFF)), hexstr(8)), hexstr(0xFFFF)),
                ex("&", bb, hexstr(0xFFFF)),
            ),
        ),
        assign(c("r_slice"), m8(ex(">>", c("w"), hexstr(4)))),
        assign(c("r_tern"), ex("?", inner, other, cond=ex(">", a, bb))),
        assign(c("r_bool"), ex("b2d", None, both)),
    )
    b.run(("if", (valid("calc"), [("act", "compute")], [("act", "to_3")])))
    b.action("to_3", to_port(3))
    return b.build()


def match_kinds() -> JSON:
    """Const entries of every match kind, with priorities and default action data.

    table exact_lpm { key = { c.a: exact; c.w: lpm; }
        actions = { set_r; }  default_action = set_r(0xee);
        const entries = { (1, 0x1200 &&& 0xff00): set_r(10);     // written as /8
                          (1, 0x1234): set_r(11);                // /16: longer wins
                          (2, _): set_r(12); } }                 // /0
    table ternary_range { key = { c.b: ternary; c.a: range; c.sa: optional; }  // p4c: ternary
        actions = { set_r2; }  default_action = set_r2(0x99);
        const entries = { (0x0f &&& 0x0f, 0 .. 100, _): set_r2(1);   // first listed wins
                          (_, 50 .. 200, _): set_r2(2);
                          (_, _, 5): set_r2(3); } }
    apply { standard_metadata.egress_spec = 2; exact_lpm.apply(); ternary_range.apply(); }
    """
    b = Builder()
    ethernet_then_calc(b)
    b.action(
        "set_r",
        assign(field("calc", "r_add"), {"type": "runtime_data", "value": 0}),
        params=(("v", 8),),
    )
    b.action(
        "set_r2",
        assign(field("calc", "r_sub"), {"type": "runtime_data", "value": 0}),
        params=(("v", 8),),
    )
    b.action("forward", to_port(2))

    def key(mt: str, name: str) -> JSON:
        return {
            "match_type": mt,
            "name": f"hdr.calc.{name}",
            "target": ["calc", name],
            "mask": None,
        }

    def k_exact(v: int) -> JSON:
        return {"match_type": "exact", "key": hexbytes(v, 8)}

    def k_lpm(v: int, plen: int) -> JSON:
        return {"match_type": "lpm", "key": hexbytes(v, 16), "prefix_length": plen}

    def k_ternary(v: int, mask: int) -> JSON:
        return {"match_type": "ternary", "key": hexbytes(v, 8), "mask": hexbytes(mask, 8)}

    def k_range(lo: int, hi: int) -> JSON:
        return {"match_type": "range", "start": hexbytes(lo, 8), "end": hexbytes(hi, 8)}

    exact_lpm = {
        "name": "exact_lpm",
        "match_type": "lpm",
        "actions": ["set_r"],
        "key": [key("exact", "a"), key("lpm", "w")],
        "default": ("set_r", [0xEE]),
        "entries": [
            ([k_exact(1), k_lpm(0x1200, 8)], "set_r", [10]),
            ([k_exact(1), k_lpm(0x1234, 16)], "set_r", [11]),
            ([k_exact(2), k_lpm(0, 0)], "set_r", [12]),
        ],
    }
    ternary_range = {
        "name": "ternary_range",
        "match_type": "range",
        "actions": ["set_r2"],
        "key": [key("ternary", "b"), key("range", "a"), key("ternary", "sa")],
        "default": ("set_r2", [0x99]),
        "entries": [
            ([k_ternary(0x0F, 0x0F), k_range(0, 100), k_ternary(0, 0)], "set_r2", [1]),
            ([k_ternary(0, 0), k_range(50, 200), k_ternary(0, 0)], "set_r2", [2]),
            ([k_ternary(0, 0), k_range(0, 255), k_ternary(5, 0xFF)], "set_r2", [3]),
        ],
    }
    b.run(("act", "forward"), ("table", exact_lpm), ("table", ternary_range))
    return b.build()


def hashes() -> JSON:
    """hash() with each of v1model's algorithms over the same fields, into the packet.

    apply { standard_metadata.egress_spec = 2;
            hash(c.r_cat, HashAlgorithm.crc16, 16w0, { c.a, c.b, c.w }, 32w65536);
            ... crcCCITT into (r_add ++ r_sub) ..., csum16, xor16, identity into r_slice
                (base 3, max 200), crc32's low 16 bits into (r_shl ++ r_shr) ... }
    """
    b = Builder(scalars=fields("h16:16 h32:32"))
    ethernet_then_calc(b)
    inputs = [field("calc", n) for n in ("a", "b", "w")]
    algos = ("crc16", "crcCCITT", "csum16", "xor16", "crc32", "identity")
    b.extra["calculations"] = [
        {"name": f"calc_{algo}", "id": i, "algo": algo, "input": inputs}
        for i, algo in enumerate(algos)
    ]

    def hash_into(dst: JSON, algo: str, base: int, size: int) -> JSON:
        return prim(
            "modify_field_with_hash_based_offset",
            dst,
            hexstr(base),
            {"type": "calculation", "value": f"calc_{algo}"},
            hexstr(size),
        )

    h16, h32 = field("scalars", "h16"), field("scalars", "h32")
    b.action(
        "hash_all",
        to_port(2),
        hash_into(field("calc", "r_cat"), "crc16", 0, 1 << 16),
        hash_into(h16, "crcCCITT", 0, 1 << 16),
        assign(field("calc", "r_add"), ex("&", ex(">>", h16, hexstr(8)), hexstr(0xFF))),
        assign(field("calc", "r_sub"), ex("&", h16, hexstr(0xFF))),
        hash_into(h16, "csum16", 0, 1 << 16),
        assign(field("calc", "r_mul"), ex("&", ex(">>", h16, hexstr(8)), hexstr(0xFF))),
        assign(field("calc", "r_not"), ex("&", h16, hexstr(0xFF))),
        hash_into(h16, "xor16", 0, 1 << 16),
        assign(field("calc", "r_usat_add"), ex("&", ex(">>", h16, hexstr(8)), hexstr(0xFF))),
        assign(field("calc", "r_usat_sub"), ex("&", h16, hexstr(0xFF))),
        hash_into(h32, "crc32", 0, 0xFFFFFFFF),
        assign(field("calc", "r_shl"), ex("&", ex(">>", h32, hexstr(8)), hexstr(0xFF))),
        assign(field("calc", "r_shr"), ex("&", h32, hexstr(0xFF))),
        hash_into(field("calc", "r_slice"), "identity", 3, 200),
    )
    b.run(("act", "hash_all"))
    return b.build()


def recirculate_resubmit() -> JSON:
    """Recirculation and resubmission: each packet is sent once, after its second pass.

    apply {  // ingress
        if (standard_metadata.instance_type == 6) {          // resubmitted
            c.r_sub = 0x66; standard_metadata.egress_spec = 4;
        } else if (c.a == 2) { resubmit_preserving_field_list(0); }  // p4c: field list 1
        else { standard_metadata.egress_spec = c.r_add == 0x55 ? 9w3 : 9w2; }
    }
    apply {  // egress
        if (c.a == 1 && c.r_add == 0) { c.r_add = 0x55; recirculate_preserving_field_list(0); }
    }
    """
    b = Builder()
    ethernet_then_calc(b)
    r_add = field("calc", "r_add")
    b.action("resubmitted", assign(field("calc", "r_sub"), hexstr(0x66)), to_port(4))
    b.action("resubmit", prim("resubmit", hexstr(1)))
    b.action(
        "route",
        assign(
            field("standard_metadata", "egress_spec"),
            ex("?", hexstr(3), hexstr(2), cond=ex("==", r_add, hexstr(0x55))),
        ),
    )
    b.action("recirculate", assign(r_add, hexstr(0x55)), prim("recirculate", hexstr(1)))
    instance = field("standard_metadata", "instance_type")
    b.run(
        (
            "if",
            (
                ex("==", instance, hexstr(6)),
                [("act", "resubmitted")],
                [
                    (
                        "if",
                        (
                            ex("==", field("calc", "a"), hexstr(2)),
                            [("act", "resubmit")],
                            [("act", "route")],
                        ),
                    ),
                ],
            ),
        )
    )
    first_pass = ex("and", ex("==", field("calc", "a"), hexstr(1)), ex("==", r_add, hexstr(0)))
    b.run_egress(("if", (first_pass, [("act", "recirculate")], [])))
    # p4c numbers field lists from 1: simple_switch reads 0 as "not resubmitted"
    b.extra["field_lists"] = [{"id": 1, "name": "empty", "elements": []}]
    return b.build()


def truncate() -> JSON:
    """truncate(): the frame leaves cut to the shortest length asked for.

    apply { standard_metadata.egress_spec = 2;
            if (c.a == 1) { truncate(30); truncate(20); }   // 20 bytes leave
            else if (c.a == 2) { truncate(1000); } }       // longer than the frame
    """
    b = Builder()
    ethernet_then_calc(b)
    b.action("forward", to_port(2))
    b.action("cut_twice", prim("truncate", hexstr(20)), prim("truncate", hexstr(30)))
    b.action("cut_long", prim("truncate", hexstr(1000)))
    a = field("calc", "a")
    b.run(
        ("act", "forward"),
        ("if", (ex("==", a, hexstr(1)), [("act", "cut_twice")], [
            ("if", (ex("==", a, hexstr(2)), [("act", "cut_long")], [])),
        ])),
    )  # fmt: skip
    return b.build()


PROGRAMS = {
    "vlan_stack": vlan_stack,
    "union_rewrite": union_rewrite,
    "union_stack_decap": union_stack_decap,
    "ipv4_options": ipv4_options,
    "arith": arith,
    "match_kinds": match_kinds,
    "hashes": hashes,
    "recirculate_resubmit": recirculate_resubmit,
    "truncate": truncate,
}


# -- cases: (ingress port, frame) -> [(egress port, frame)] ------------------------------------


@dataclass(frozen=True)
class Case:
    what: str
    port: int
    frame: bytes
    out: tuple[tuple[int, bytes], ...]  # what leaves, port by port
    bmv2: bool = True  # False where simple_switch aborts (the embedded target drops instead)


PAYLOAD = bytes(range(40))


def _eth(ether_type: int, dst: str = "00:00:00:00:00:01") -> Ether:
    return Ether(dst=dst, src="00:00:00:00:00:aa", type=ether_type)


def _vlan_cases() -> list[Case]:
    cases = []
    for index, tags in ((0, 1), (1, 2), (2, 3), (1, 3)):
        p = _eth(0x8100, dst=f"00:00:00:00:00:{index:02x}")
        for i in range(tags):
            p = p / Dot1Q(prio=0, vlan=100 + i, type=0x8100 if i < tags - 1 else 0x0800)
        p = p / PAYLOAD
        out = p.copy()
        tag = out.getlayer(Dot1Q, index + 1)
        tag.vlan, tag.prio = 7, 5 if index == tags - 1 else 1
        if index < tags:
            cases.append(Case(f"{tags} tags, index {index}", 1, bytes(p), ((2, bytes(out)),)))
    untagged = _eth(0x0800) / PAYLOAD
    cases.append(Case("no tag", 1, bytes(untagged), ((2, bytes(untagged)),)))
    # a 4th tag overflows the 3-deep stack: error.StackOutOfBounds, the rest is payload
    p = _eth(0x8100, dst="00:00:00:00:00:00")
    for i in range(4):
        p = p / Dot1Q(vlan=100 + i, type=0x8100 if i < 3 else 0x0800)
    p = p / PAYLOAD
    out = p.copy()
    out.getlayer(Dot1Q, 1).vlan, out.getlayer(Dot1Q, 1).prio = 7, 1
    cases.append(Case("4 tags: stack out of bounds", 1, bytes(p), ((3, bytes(out)),)))
    # an index from the packet past the parsed tags but inside the stack rewrites an
    # invalid element (not emitted); past the stack's depth the packet is dropped
    p = _eth(0x8100, dst="00:00:00:00:00:02") / Dot1Q(vlan=100, type=0x0800) / PAYLOAD
    cases.append(Case("index 2 of 1 tag: invalid element", 1, bytes(p), ((2, bytes(p)),)))
    p = _eth(0x8100, dst="00:00:00:00:00:09") / Dot1Q(vlan=100, type=0x0800) / PAYLOAD
    cases.append(Case("index 9: out of bounds", 1, bytes(p), (), bmv2=False))
    # header equality: two equal tags, compared before the index rewrites one of them
    p = _eth(0x8100, dst="00:00:00:00:00:02")
    for vid, ether_type in ((100, 0x8100), (100, 0x8100), (200, 0x0800)):
        p = p / Dot1Q(vlan=vid, type=ether_type)
    p = p / PAYLOAD
    out = p.copy()
    out[Ether].src = ":".join(["ee"] * 6)
    out.getlayer(Dot1Q, 3).vlan, out.getlayer(Dot1Q, 3).prio = 7, 5
    cases.append(Case("tags 0 and 1 equal", 1, bytes(p), ((2, bytes(out)),)))
    return cases


def _v4(**kw: Any) -> IP:
    return IP(src="10.0.0.1", dst="10.0.0.2", ttl=33, proto=6, **kw)


def _v6(**kw: Any) -> IPv6:
    return IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=44, nh=6, **kw)


def _union_cases() -> list[Case]:
    v4 = _eth(0x0800) / _v4() / PAYLOAD
    six = bytes(IPv6(tc=0, fl=0, plen=0, nh=6, hlim=33, src="::", dst="::"))
    v4_out = bytes(_eth(0x86DD)) + six + PAYLOAD
    v6 = _eth(0x86DD) / _v6() / PAYLOAD
    other = _eth(0x0806) / PAYLOAD
    return [
        Case("IPv4 becomes IPv6 (v6 setValid invalidates v4)", 1, bytes(v4), ((2, v4_out),)),
        Case("IPv6 stays", 1, bytes(v6), ((4, bytes(v6)),)),
        Case("no IP: the union is invalid", 1, bytes(other), ((3, bytes(other)),)),
    ]


def _decap_cases() -> list[Case]:
    inner4, inner6 = bytes(_v4()), bytes(_v6())
    outer4 = bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=4, ttl=9))
    outer6 = bytes(IPv6(src="2001:db8::a", dst="2001:db8::b", nh=4, hlim=9))
    outer4_of_6 = bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=41, ttl=9))
    eth4, eth6 = bytes(_eth(0x0800)), bytes(_eth(0x86DD))
    return [
        Case("4-in-4: decapsulated", 1, eth4 + outer4 + inner4 + PAYLOAD,
             ((2, eth4 + inner4 + PAYLOAD),)),
        # the vacated union keeps the outer IPv6 header, valid (bmv2): emitted after
        Case("4-in-6: the outer IPv6 header stays in ip[1]", 1, eth6 + outer6 + inner4 + PAYLOAD,
             ((2, eth4 + inner4 + outer6 + PAYLOAD),)),
        Case("6-in-4: decapsulated", 1, eth4 + outer4_of_6 + inner6 + PAYLOAD,
             ((2, eth6 + inner6 + PAYLOAD),)),
        Case("plain IPv4: untouched", 1, eth4 + inner4 + PAYLOAD, ((2, eth4 + inner4 + PAYLOAD),)),
    ]  # fmt: skip


def _options_cases() -> list[Case]:
    cases = []
    for n_words in (0, 1, 3, 10):
        options = bytes((i * 7) & 0xFF for i in range(4 * n_words))
        ip = IP(
            bytes(
                IP(src="10.0.0.1", dst="10.0.0.2", ttl=20, ihl=5 + n_words, options=[], proto=6)
                / TCP()
            )
        )
        raw = bytearray(bytes(ip)[:20]) + options + bytes(ip)[20:]
        raw[0] = 0x40 | (5 + n_words)
        struct.pack_into("!H", raw, 2, len(raw))
        frame = bytes(_eth(0x0800)) + bytes(raw)
        expected = IP(bytes(raw))
        expected.ttl -= 1
        del expected.chksum
        out = bytes(_eth(0x0800)) + bytes(IP(bytes(expected)))
        cases.append(Case(f"{4 * n_words} bytes of options", 1, frame, ((2, out),)))
    # IHL 4: the length wraps to 2^32 - 32 bits: more than the packet (PacketTooShort), so
    # ipv4 stays invalid and everything after Ethernet is payload, untouched
    bad = bytearray(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP()))
    bad[0] = 0x44
    frame = bytes(_eth(0x0800)) + bytes(bad)
    cases.append(Case("IHL 4: packet too short", 1, frame, ((2, frame),)))
    # options claimed past the frame's end: PacketTooShort too
    short = bytearray(bytes(IP(src="10.0.0.1", dst="10.0.0.2")))
    short[0] = 0x4F
    frame = bytes(_eth(0x0800)) + bytes(short)
    cases.append(Case("IHL 15 in a 20-byte header: too short", 1, frame, ((2, frame),)))
    return cases


CALC_RESULTS = [
    "r_add", "r_sub", "r_mul", "r_shl", "r_shr", "r_not", "r_usat_add", "r_usat_sub",
    "r_ssat_add", "r_sadd", "r_sshr", "r_slt", "r_cat", "r_slice", "r_tern", "r_bool",
]  # fmt: skip


def calc_frame(a: int, b: int, sa: int, sb: int, w: int, **results: int) -> bytes:
    """Ethernet + calc header; result fields not given are 0."""
    r = {name: results.get(name, 0) for name in CALC_RESULTS}
    header = struct.pack("!BBbbH", a, b, sa, sb, w)
    for name in CALC_RESULTS:
        fmt = "!H" if name == "r_cat" else ("!b" if name in SIGNED_RESULTS else "!B")
        header += struct.pack(fmt, r[name])
    return bytes(_eth(CALC_ETHERTYPE)) + header + PAYLOAD


SIGNED_RESULTS = ("r_ssat_add", "r_sadd", "r_sshr")


def _arith_cases() -> list[Case]:
    rng = random.Random(18)
    inputs = [
        (0, 0, 0, 0, 0),
        (255, 1, 127, 1, 0xFFFF),
        (1, 255, -128, -1, 0x0FF0),
        (200, 100, -100, -100, 0x1234),
        (7, 7, 5, -5, 0xABCD),
    ]
    inputs += [
        (
            rng.randrange(256),
            rng.randrange(256),
            rng.randrange(-128, 128),
            rng.randrange(-128, 128),
            rng.randrange(1 << 16),
        )
        for _ in range(8)
    ]
    cases = []
    for a, b, sa, sb, w in inputs:
        wrapped = (sa + sb + 128) % 256 - 128
        expected = calc_frame(
            a,
            b,
            sa,
            sb,
            w,
            r_add=(a + b) & 0xFF,
            r_sub=(a - b) & 0xFF,
            r_mul=(a * b) & 0xFF,
            r_shl=(a << 3) & 0xFF,
            r_shr=a >> (b & 7),
            r_not=~a & 0xFF,
            r_usat_add=min(a + b, 255),
            r_usat_sub=max(a - b, 0),
            r_ssat_add=max(-128, min(127, sa + sb)),
            r_sadd=wrapped,
            r_sshr=sa >> 2,
            r_slt=int(sa < sb),
            r_cat=(a << 8) | b,
            r_slice=(w >> 4) & 0xFF,
            r_tern=(1 if a == 0 else 2) if a > b else (3 if sb < 0 else 4),
            r_bool=int(bool(a) and not b),
        )
        what = f"a={a} b={b} sa={sa} sb={sb} w={w:#x}"
        cases.append(Case(what, 1, calc_frame(a, b, sa, sb, w), ((2, expected),)))
    other = bytes(_eth(0x0800)) + PAYLOAD
    cases.append(Case("no calc header", 1, other, ((3, other),)))
    return cases


def _match_cases() -> list[Case]:
    def exact_lpm(a: int, w: int) -> int:
        if a == 1 and w == 0x1234:
            return 11  # the /16 entry: the longest prefix
        if a == 1 and w >> 8 == 0x12:
            return 10
        return 12 if a == 2 else 0xEE

    def ternary_range(b: int, a: int, sa: int) -> int:
        if b & 0x0F == 0x0F and a <= 100:
            return 1  # listed first: the highest priority
        if 50 <= a <= 200:
            return 2
        return 3 if sa == 5 else 0x99

    cases = []
    for a, b, sa, w in (
        (1, 0, 0, 0x1234),
        (1, 0, 0, 0x12FF),
        (1, 0, 0, 0x1334),
        (2, 0, 0, 0xBEEF),
        (3, 0, 0, 0x1234),
        (60, 0x1F, 0, 0),
        (60, 0x10, 0, 0),
        (220, 0, 5, 0),
        (220, 0, -3, 0),
        (100, 0xFF, 5, 0),
        (101, 0xFF, 5, 0),
        (201, 0x0F, 5, 0),
        (201, 0x0F, 6, 0),
    ):
        r_add, r_sub = exact_lpm(a, w), ternary_range(b, a, sa)
        frame = calc_frame(a, b, sa, 0, w)
        out = calc_frame(a, b, sa, 0, w, r_add=r_add, r_sub=r_sub)
        what = f"a={a} b={b:#x} sa={sa} w={w:#x} -> {r_add}, {r_sub}"
        cases.append(Case(what, 1, frame, ((2, out),)))
    return cases


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC (bmv2's crc16): poly 0x8005 reflected, init 0, no final xor."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def words16(data: bytes) -> list[int]:
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def _hash_cases() -> list[Case]:
    cases = []
    for a, b, w in ((0, 0, 0), (1, 2, 0x0304), (0xFF, 0xFF, 0xFFFF), (0x12, 0x34, 0x5678)):
        data = bytes([a, b, w >> 8, w & 0xFF])
        ccitt = binascii.crc_hqx(data, 0xFFFF)  # CRC-16/CCITT-FALSE
        total = sum(words16(data))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        csum = ~total & 0xFFFF
        xor = 0
        for word in words16(data):
            xor ^= word
        crc32 = zlib.crc32(data) % 0xFFFFFFFF
        out = calc_frame(
            a,
            b,
            0,
            0,
            w,
            r_cat=crc16_arc(data),
            r_add=ccitt >> 8,
            r_sub=ccitt & 0xFF,
            r_mul=csum >> 8,
            r_not=csum & 0xFF,
            r_usat_add=xor >> 8,
            r_usat_sub=xor & 0xFF,
            r_shl=(crc32 >> 8) & 0xFF,
            r_shr=crc32 & 0xFF,
            r_slice=3 + int.from_bytes(data, "big") % 200,
        )
        cases.append(Case(f"a={a} b={b} w={w:#x}", 1, calc_frame(a, b, 0, 0, w), ((2, out),)))
    return cases


def _recirculation_cases() -> list[Case]:
    return [
        Case(
            "recirculated once, sent after its second pass",
            1,
            calc_frame(1, 0, 0, 0, 0),
            ((3, calc_frame(1, 0, 0, 0, 0, r_add=0x55)),),
        ),
        Case(
            "resubmitted once, sent after its second pass",
            1,
            calc_frame(2, 0, 0, 0, 0),
            ((4, calc_frame(2, 0, 0, 0, 0, r_sub=0x66)),),
        ),
        Case("neither", 1, calc_frame(3, 0, 0, 0, 0), ((2, calc_frame(3, 0, 0, 0, 0)),)),
    ]


def _truncate_cases() -> list[Case]:
    frames = {a: calc_frame(a, 0, 0, 0, 0) for a in (1, 2, 3)}
    return [
        Case("truncate(20) then truncate(30): 20 bytes", 1, frames[1], ((2, frames[1][:20]),)),
        Case("truncate(1000): the whole frame", 1, frames[2], ((2, frames[2]),)),
        Case("no truncate", 1, frames[3], ((2, frames[3]),)),
    ]


CASES = {
    "vlan_stack": _vlan_cases,
    "union_rewrite": _union_cases,
    "union_stack_decap": _decap_cases,
    "ipv4_options": _options_cases,
    "arith": _arith_cases,
    "match_kinds": _match_cases,
    "hashes": _hash_cases,
    "recirculate_resubmit": _recirculation_cases,
    "truncate": _truncate_cases,
}
