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

import struct
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


# -- a whole program -------------------------------------------------------------------------


@dataclass
class Builder:
    """Header types and instances, parser states, actions and ingress nodes, in p4c's shapes."""

    types: list[JSON]
    headers: list[JSON]
    states: list[JSON]
    order: list[str]
    actions: list[JSON]
    nodes: list[tuple[str, Any]]  # ("act", action name) or ("if", (expr, [then...], [else...]))
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
        self.states, self.order, self.actions, self.nodes = [], [], [], []
        self.extra = {
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
    ) -> None:
        """transitions: (value or None for default, next state or None to accept)."""
        self.states.append(
            {
                "name": name,
                "id": len(self.states),
                "parser_ops": ops,
                "transition_key": key,
                "transitions": [
                    {"type": "default", "value": None, "mask": None, "next_state": nxt}
                    if v is None
                    else {"type": "hexstr", "value": hex(v), "mask": None, "next_state": nxt}
                    for v, nxt in transitions
                ],
            }
        )

    def action(self, name: str, *primitives: JSON) -> str:
        self.actions.append(
            {
                "name": name,
                "id": len(self.actions),
                "runtime_data": [],
                "primitives": list(primitives),
            }
        )
        return name

    def run(self, *nodes: tuple[str, Any]) -> None:
        self.nodes = list(nodes)

    def build(self) -> JSON:
        tables: list[JSON] = []
        conditionals: list[JSON] = []

        def chain(nodes: list[tuple[str, Any]], after: str | None) -> str | None:
            """Names of the nodes in order, each continuing to the next; the first's name."""
            nxt = after
            for kind, what in reversed(nodes):
                if kind == "act":
                    aid = next(a["id"] for a in self.actions if a["name"] == what)
                    name = f"tbl_{what}_{len(tables)}"
                    tables.append(
                        {
                            "name": name,
                            "id": len(tables),
                            "key": [],
                            "match_type": "exact",
                            "type": "simple",
                            "max_size": 1024,
                            "with_counters": False,
                            "support_timeout": False,
                            "direct_meters": None,
                            "action_ids": [aid],
                            "actions": [what],
                            "base_default_next": nxt,
                            "next_tables": {what: nxt},
                            "default_entry": {
                                "action_id": aid,
                                "action_const": True,
                                "action_data": [],
                                "action_entry_const": True,
                            },
                        }
                    )
                    nxt = name
                else:
                    cond, then, other = what
                    true_next, false_next = chain(then, nxt), chain(other, nxt)
                    name = f"node_{len(conditionals)}"
                    conditionals.append(
                        {
                            "name": name,
                            "id": len(conditionals),
                            "expression": cond,
                            "true_next": true_next,
                            "false_next": false_next,
                        }
                    )
                    nxt = name
            return nxt

        init = chain(self.nodes, None)
        return {
            "header_types": self.types,
            "headers": self.headers,
            **self.extra,
            "field_lists": [],
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
            "pipelines": [
                {
                    "name": "ingress",
                    "id": 0,
                    "init_table": init,
                    "tables": tables,
                    "action_profiles": [],
                    "conditionals": conditionals,
                },
                {
                    "name": "egress",
                    "id": 1,
                    "init_table": None,
                    "tables": [],
                    "action_profiles": [],
                    "conditionals": [],
                },
            ],
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
    parser_error = ex("!=", field("standard_metadata", "parser_error"), hexstr(0))
    b.run(
        ("act", "forward"),
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
    decapsulated by pop_front.

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
        b.state(member, [op], [key], [(4, "v4"), (41, "v6"), (None, None)])
    inner_v4 = valid("ip[0].v4")
    b.action("forward", to_port(2))
    b.action(
        "decap",
        prim("pop", {"type": "header_union_stack", "value": "ip"}, hexstr(1)),
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
        state ipv4 {  // p4c: extract_VL, the length from IHL looked ahead
            packet.extract(hdr.ipv4, ((bit<32>) packet.lookahead<bit<8>>()[3:0] << 5) - 160);
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
    ihl = {"type": "lookahead", "value": [4, 4]}  # IHL, before the header is extracted
    length = ex("&", ex("-", ex("<<", ihl, hexstr(5)), hexstr(160)), hexstr(0xFFFFFFFF))
    b.state(
        "ipv4",
        [{"op": "extract_VL", "parameters": [{"type": "regular", "value": "ipv4"}, length]}],
        [],
        [(None, None)],
    )
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


PROGRAMS = {
    "vlan_stack": vlan_stack,
    "union_rewrite": union_rewrite,
    "union_stack_decap": union_stack_decap,
    "ipv4_options": ipv4_options,
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
    inner4 = bytes(_v4()) + PAYLOAD
    inner6 = bytes(_v6()) + PAYLOAD
    cases = []
    for outer_name, outer, ether_type in (
        ("4", bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=4, ttl=9)), 0x0800),
        ("6", bytes(IPv6(src="2001:db8::a", dst="2001:db8::b", nh=4, hlim=9)), 0x86DD),
    ):
        frame = bytes(_eth(ether_type)) + outer + inner4
        cases.append(
            Case(f"4-in-{outer_name}: decapsulated", 1, frame, ((2, bytes(_eth(0x0800)) + inner4),))
        )
    outer6 = bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=41, ttl=9))
    cases.append(
        Case(
            "6-in-4: decapsulated",
            1,
            bytes(_eth(0x0800)) + outer6 + inner6,
            ((2, bytes(_eth(0x86DD)) + inner6),),
        )
    )
    plain = bytes(_eth(0x0800)) + inner4
    cases.append(Case("plain IPv4: untouched", 1, plain, ((2, plain),)))
    return cases


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


CASES = {
    "vlan_stack": _vlan_cases,
    "union_rewrite": _union_cases,
    "union_stack_decap": _decap_cases,
    "ipv4_options": _options_cases,
}
