"""Compile a BMv2 JSON program (v1model, as p4c emits it) into Python functions, once.

The JSON is never walked per packet: every parser state, action, control-flow node,
checksum and deparser becomes Python source operating on the flat field vector of
switch/layout.py (`f`), with field slots, masks and shifts folded in as constants. The
source is exec'd once; tables, externs and learn lists are objects the generated code
closes over, so the P4Runtime server changes them without recompiling anything.

Semantics follow behavioral-model: arithmetic is exact and truncated to the destination
field's width on assignment (p4c inserts the masks that make intermediate results wrap);
a parser error stops parsing, records `parser_error` and the packet still runs ingress;
add_header zeroes a header it makes valid; register/counter indices out of range are
ignored. One deliberate difference: a failing assert/assume drops the packet and logs,
where simple_switch aborts the whole process.

Like bmv2's bm_sim, the translation is split by kind: expressions (compile_expressions),
parser, deparser and checksums (compile_parser), actions and their primitives
(compile_primitives), control flow and tables (compile_pipeline). This module is the
loader: `Compiler.__init__` checks the document's shape and creates every object the
program will hold; `compile()` emits its parts, execs them and returns the Program
(switch/program.py) whose functions call switch/runtime.py.
"""

from __future__ import annotations

from typing import Any

from ecntune.switch import runtime
from ecntune.switch.compile_expressions import Emitter
from ecntune.switch.compile_parser import ParserCompiler
from ecntune.switch.compile_pipeline import PipelineCompiler
from ecntune.switch.compile_primitives import PrimitiveCompiler
from ecntune.switch.externs import CounterArray, MeterArray, RegisterArray
from ecntune.switch.layout import HeaderInfo, Layout, Unsupported
from ecntune.switch.program import ActionInfo, LearnList, Program
from ecntune.switch.tables import ActionProfile, Table

MAX_JSON_MAJOR = 2
V1MODEL_SLOTS = (  # the metadata the data plane reads or writes around the program
    "standard_metadata.ingress_port",
    "standard_metadata.egress_spec",
    "standard_metadata.egress_port",
    "standard_metadata.instance_type",
    "standard_metadata.packet_length",
    "standard_metadata.mcast_grp",
    "standard_metadata.egress_rid",
    "standard_metadata.checksum_error",
    "standard_metadata.parser_error",
    "standard_metadata.priority",
    "intrinsic_metadata.ingress_global_timestamp",
    "intrinsic_metadata.egress_global_timestamp",
    "intrinsic_metadata.mcast_grp",
    "intrinsic_metadata.egress_rid",
    "queueing_metadata.enq_timestamp",
    "queueing_metadata.enq_qdepth",
    "queueing_metadata.deq_timedelta",
    "queueing_metadata.deq_qdepth",
    "queueing_metadata.qid",
)


class Compiler(ParserCompiler, PrimitiveCompiler, PipelineCompiler):
    """One-shot translation of a BMv2 JSON document into a Program."""

    def __init__(self, doc: dict[str, Any]) -> None:
        check_shape(doc)
        self.doc = doc
        self.layout = Layout(doc)
        self.errors: dict[str, int] = {name: value for name, value in doc.get("errors", [])}
        self.errors.setdefault("NoError", 0)
        self.errors.setdefault("PacketTooShort", runtime.PACKET_TOO_SHORT)
        self.slots = metadata_slots(self.layout)

        # The generated module: its globals, its source, and fresh names for what it binds.
        self.ns: dict[str, Any] = runtime.namespace()
        self.out = Emitter()
        self.calc_out = Emitter()
        self._unique = 0
        ht = runtime.HeaderTable.of(self.layout)
        self.ns.update(_HT=ht, _H_VALID=ht.valid, _H_BASE=ht.base)

        # Externs, bound as globals of the generated code (name -> the global's name).
        self.regs = {
            r["name"]: self.bind("R_", RegisterArray(r["name"], r["id"], r["size"], r["bitwidth"]))
            for r in doc.get("register_arrays", [])
        }
        counters = doc.get("counter_arrays", [])
        self.counters_ns = {
            c["name"]: self.bind("C_", CounterArray(c["name"], c["id"], c["size"]))
            for c in counters
            if not c.get("is_direct")
        }
        self.direct_counters = {c["name"]: c["binding"] for c in counters if c.get("is_direct")}
        self.meters_ns = {
            m["name"]: self.bind(
                "M_", MeterArray(m["name"], m["id"], m["size"], m.get("type", "bytes"))
            )
            for m in doc.get("meter_arrays", [])
        }

        # Filled in while compiling: calculations on first use, tables and action profiles
        # per pipeline, parser value sets by the runtime.
        self.calc_specs = {c["name"]: c for c in doc.get("calculations", [])}
        self.calcs: dict[str, str] = {}
        self.payload_calcs: dict[str, dict[str, Any]] = {}
        self.deparse_order: list[HeaderInfo] = []
        self.tables: dict[str, Table] = {}
        self.profiles: dict[str, ActionProfile] = {}
        self.profile_specs: dict[str, dict[str, Any]] = {}
        self.value_sets: dict[str, list[tuple[int, int]]] = {
            v["name"]: [] for v in doc.get("parse_vsets", [])
        }
        self.action_names = {a["id"]: a["name"] for a in doc.get("actions", [])}
        self.late_next: dict[str, dict[int, str]] = {}
        name_table_actions(doc, self.action_names)

    def compile(self) -> Program:
        doc = self.doc
        self.parser(doc["parsers"][0])
        self.deparser(doc["deparsers"][0])
        self.checksums(doc.get("checksums", []))
        for a in doc.get("actions", []):
            self.action(a)
        for p in doc["pipelines"]:
            self.pipeline(p)
        self.payload_helper()
        source = "\n".join(self.calc_out.lines + self.out.lines) + "\n"
        ns = self.link(source)
        verify, parse = ns["verify_checksums"], ns["parse"]

        def parse_and_verify(f: list[int], pkt: runtime.Pkt) -> None:
            parse(f, pkt)
            verify(f, pkt)

        return Program(
            json=doc,
            layout=self.layout,
            actions=self.action_infos(),
            tables=self.tables,
            profiles=self.profiles,
            registers=self.bound(self.regs),
            counters=self.bound(self.counters_ns),
            direct_counters=self.direct_counters,
            meters=self.bound(self.meters_ns),
            learn_lists=self.learn_lists(),
            field_lists=self.field_lists(),
            value_sets=self.value_sets,
            errors=self.errors,
            parse=parse_and_verify,
            ingress=ns["ingress"],
            egress=ns["egress"],
            deparse=ns["deparse"],
            source=source,
            slots=self.slots,
        )

    def link(self, source: str) -> dict[str, Any]:
        """Exec the source; then point action ids and tables' next nodes at functions."""
        ns = self.ns
        exec(compile(source, "<p4 program>", "exec"), ns)
        ns["_ACTIONS"] = {aid: ns[f"a_{aid}"] for aid in self.action_names}
        for nmap, by_id in self.late_next.items():
            ns[nmap].update({aid: ns[n] if n != "None" else None for aid, n in by_id.items()})
        return ns

    def bound(self, globals_by_name: dict[str, str]) -> dict[str, Any]:
        """The extern objects behind a name -> global map, by their own names."""
        objs = [self.ns[g] for g in globals_by_name.values()]
        return {o.name: o for o in objs}

    def action_infos(self) -> dict[int, ActionInfo]:
        return {
            a["id"]: ActionInfo(
                a["name"], a["id"], tuple((r["name"], r["bitwidth"]) for r in a["runtime_data"])
            )
            for a in self.doc.get("actions", [])
        }

    def learn_lists(self) -> dict[int, LearnList]:
        lists = {}
        for ll in self.doc.get("learn_lists", []):
            fields = []
            for el in ll["elements"]:
                fi = self.fieldref(el["value"])
                fields.append((el["value"][1], fi.slot, fi.width))
            lists[ll["id"]] = LearnList(ll["name"], ll["id"], tuple(fields))
        return lists

    def field_lists(self) -> dict[int, tuple[int, ...]]:
        return {
            fl["id"]: tuple(
                self.fieldref(el["value"]).slot for el in fl["elements"] if el["type"] == "field"
            )
            for fl in self.doc.get("field_lists", [])
        }


def check_shape(doc: dict[str, Any]) -> None:
    """Refuse what is not a v1model program this target runs, before compiling any of it."""
    version = doc.get("__meta__", {}).get("version", [2, 0])
    if version[0] > MAX_JSON_MAJOR:
        raise Unsupported(f"BMv2 JSON format version {version} (this target reads 2.x)")
    if doc.get("extern_instances"):
        names = [x["name"] for x in doc["extern_instances"]]
        raise Unsupported(f"extern instances {names}")
    for m in doc.get("meter_arrays", []):
        if m.get("is_direct"):
            raise Unsupported(f"direct meter {m['name']!r}")
    for kind in ("parsers", "deparsers"):
        if len(doc.get(kind, [])) != 1:
            raise Unsupported(f"{len(doc.get(kind, []))} {kind} (v1model has exactly one)")
    names = {p["name"] for p in doc.get("pipelines", [])}
    if names != {"ingress", "egress"}:
        raise Unsupported(f"pipelines {sorted(names)} (v1model has ingress and egress)")
    check_unique_ids(doc)


def check_unique_ids(doc: dict[str, Any]) -> None:
    """Ids name the generated functions: a duplicate would silently replace one node of the
    control flow with another (a loop that never ends), so it is refused, as bmv2 does."""
    pipelines = doc["pipelines"]
    kinds = {
        "header": doc.get("headers", []),
        "action": doc.get("actions", []),
        "parse state": doc["parsers"][0].get("parse_states", []),
        "table": [t for p in pipelines for t in p.get("tables", [])],
        "conditional": [c for p in pipelines for c in p.get("conditionals", [])],
        "action call": [a for p in pipelines for a in p.get("action_calls", [])],
    }
    for kind, objs in kinds.items():
        ids = [o["id"] for o in objs]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise Unsupported(f"malformed BMv2 JSON: duplicate {kind} id {dup[0]}")


def metadata_slots(layout: Layout) -> dict[str, int]:
    """Slots of the v1model metadata the program has (intrinsic aliases under standard)."""
    slots = {name: fi.slot for name in V1MODEL_SLOTS if (fi := layout.find(name)) is not None}
    if "standard_metadata.egress_spec" not in slots:
        raise Unsupported("program has no standard_metadata.egress_spec (not v1model?)")
    for alias in ("mcast_grp", "egress_rid"):
        if f"intrinsic_metadata.{alias}" in slots:
            slots.setdefault(f"standard_metadata.{alias}", slots[f"intrinsic_metadata.{alias}"])
    return slots


def name_table_actions(doc: dict[str, Any], action_names: dict[int, str]) -> None:
    """p4c lists a table's actions by name; give each table its `action_ids` (in place:
    the runtime reads them from Program.json too)."""
    ids = {v: k for k, v in action_names.items()}
    for p in doc.get("pipelines", []):
        for t in p.get("tables", []):
            t["action_ids"] = list(t.get("action_ids") or [])
            if not t["action_ids"]:
                t["action_ids"] = [ids[n] for n in t.get("actions", [])]


def compile_program(doc: dict[str, Any]) -> Program:
    """Compile BMv2 JSON; raises Unsupported naming the first construct it cannot run."""
    if not isinstance(doc, dict):
        raise Unsupported(f"malformed BMv2 JSON: an object is needed, got {type(doc).__name__}")
    try:
        return Compiler(doc).compile()
    except Unsupported:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as e:
        raise Unsupported(f"malformed BMv2 JSON: {type(e).__name__}: {e}") from e
