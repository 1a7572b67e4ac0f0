"""The control flow of BMv2 JSON (ingress, egress) as Python functions over its nodes.

Every table, conditional and action call is a node function `(f, pkt) -> next node`;
a pipeline function runs nodes until there is none (or the program called exit). A table
node looks the key up in a tables.Table (which the runtime edits), runs the action it
resolves to, and picks the next node by action or by hit/miss. Which action is which
function is filled in after the source is exec'd (`late_next`, `_ACTIONS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ecntune.switch.compile_expressions import Emitter, ExpressionCompiler, hexint
from ecntune.switch.layout import Unsupported
from ecntune.switch.tables import ActionCall, ActionProfile, Entry, KeyField, Table

MATCH_TYPES = ("exact", "lpm", "ternary", "range", "optional", "valid")  # what tables.py matches


class PipelineCompiler(ExpressionCompiler):
    """Mixin of Compiler: pipelines, tables, const entries. State is created by Compiler."""

    out: Emitter
    tables: dict[str, Table]
    profiles: dict[str, ActionProfile]
    profile_specs: dict[str, dict[str, Any]]  # action profile name -> its JSON
    action_names: dict[int, str]
    late_next: dict[str, dict[int, str]]  # a table's NEXT_ map -> {action id: node name}

    def pipeline(self, p: dict[str, Any]) -> None:
        em = self.out
        nodes: dict[str, str] = {}
        for t in p.get("tables", []):
            nodes[t["name"]] = f"n_{t['id']}"
        for c in p.get("conditionals", []):
            nodes[c["name"]] = f"c_{c['id']}"
        for a in p.get("action_calls", []):
            nodes[a["name"]] = f"ac_{a['id']}"

        def nxt(name: str | None) -> str:
            return "None" if name is None else nodes[name]

        for prof in p.get("action_profiles", []):
            self.action_profile(prof)
        for t in p.get("tables", []):
            self.table(t, em, nxt)
        for c in p.get("conditionals", []):
            em(f"def c_{c['id']}(f, pkt):")
            em.indent()(
                f"return {nxt(c.get('true_next'))} if {self.expr(c['expression'])} "
                f"else {nxt(c.get('false_next'))}"
            )
            em.dedent()
        for a in p.get("action_calls", []):
            em(f"def ac_{a['id']}(f, pkt):")
            em.indent()
            em(f"a_{a['action_id']}(f, (), pkt)")
            em(f"return {nxt(a.get('next_node'))}")
            em.dedent()
        em(f"def {p['name']}(f, pkt):")
        em.indent()
        em(f"node = {nxt(p.get('init_table'))}")
        em("while node is not None and not pkt.exit:")
        em.indent()("node = node(f, pkt)")
        em.dedent()
        em.dedent()

    def action_profile(self, prof: dict[str, Any]) -> None:
        sel = prof.get("selector")
        widths = []
        if sel:
            for item in sel["input"]:
                if item["type"] != "field":
                    raise Unsupported(f"selector input {item['type']!r} in {prof['name']}")
                widths.append(self.fieldref(item["value"]).width)
        self.profiles[prof["name"]] = ActionProfile(
            prof["name"], prof["id"], prof.get("max_size", 1024),
            sel["algo"] if sel else None, widths,
        )  # fmt: skip
        self.profile_specs[prof["name"]] = prof

    def table(self, t: dict[str, Any], em: Emitter, nxt: Callable[[str | None], str]) -> None:
        keys, codes = [], []
        for k in t["key"]:
            mt = k["match_type"]
            if mt not in MATCH_TYPES:
                raise Unsupported(f"table {t['name']!r}: match type {mt!r}")
            if mt == "valid":
                hdr = k["target"] if isinstance(k["target"], str) else k["target"][0]
                width, code = 1, f"f[{self.header(hdr).valid_slot}]"
            else:
                fi = self.fieldref(k["target"])
                width, code = fi.width, f"f[{fi.slot}]"
            if k.get("mask"):
                code = f"({code} & {hexint(k['mask'])})"
            keys.append(KeyField(k.get("name") or ".".join(k["target"]), mt, width))
            codes.append(code)
        kind = t.get("type", "simple")
        profile = None
        if kind in ("indirect", "indirect_ws"):
            profile = self.profiles[t["action_profile"]]
        action_ids = frozenset(t.get("action_ids", []))
        table = Table(
            name=t["name"], id=t["id"], key=tuple(keys), action_ids=action_ids,
            max_size=t.get("max_size", 1024), kind=kind, profile=profile,
            with_counters=bool(t.get("with_counters")),
        )  # fmt: skip
        default = t.get("default_entry")
        if default:
            data = tuple(hexint(v) for v in default.get("action_data", []))
            table.default = ActionCall(default["action_id"], data)
            table.default_const = bool(default.get("action_const"))
        for e in t.get("entries", []):
            table.entries[self.const_key(table, e)] = self.const_entry(table, e)
        if t.get("entries"):
            table.const_entries = True
            table._rebuild()
        if t.get("direct_meters"):
            raise Unsupported(f"direct meters (table {t['name']!r})")
        self.tables[t["name"]] = table
        tname = self.bind("T_", table)
        next_by_action = {
            a: nxt(n)
            for a, n in t.get("next_tables", {}).items()
            if a not in ("__HIT__", "__MISS__")
        }
        hit_miss = "__HIT__" in t.get("next_tables", {})
        base = nxt(t.get("base_default_next"))
        by_id = {aid: next_by_action.get(self.action_names[aid], base) for aid in action_ids}
        nmap = self.bind("NEXT_", {})
        self.late_next[nmap] = by_id
        key = "(" + ", ".join(codes) + ("," if len(codes) == 1 else "") + ")"
        em(f"def n_{t['id']}(f, pkt):")
        em.indent()
        em(f"e = {tname}.lookup({key})")
        if table.with_counters:
            em("if e is not None:")
            em.indent()("e.count(pkt.length)")
            em.dedent()
        if kind == "indirect_ws":
            prof = self.profile_specs[t["action_profile"]]
            sel = ", ".join(
                f"f[{self.fieldref(i['value']).slot}]" for i in prof["selector"]["input"]
            )
            em(f"r = resolve({tname}, e, lambda: ({sel},))")
        else:
            em(f"r = resolve({tname}, e, None)")
        em("if r is not None:")
        em.indent()
        em("_ACTIONS[r[0]](f, r[1], pkt)")
        em.dedent()
        if hit_miss:
            nt = t["next_tables"]
            em(f"return {nxt(nt['__HIT__'])} if e is not None else {nxt(nt['__MISS__'])}")
        else:
            em(f"return {nmap}.get(r[0], {base}) if r is not None else {base}")
        em.dedent()

    def const_key(self, table: Table, e: dict[str, Any]) -> tuple:
        key = []
        for _, m in zip(table.key, e["match_key"], strict=True):
            mt = m["match_type"]
            if mt in ("exact", "valid"):
                key.append(int(m["key"]) if mt == "valid" else hexint(m["key"]))
            elif mt == "lpm":
                key.append((hexint(m["key"]), m["prefix_length"]))
            elif mt in ("ternary", "optional"):
                key.append((hexint(m["key"]) & hexint(m["mask"]), hexint(m["mask"])))
            elif mt == "range":
                key.append((hexint(m["start"]), hexint(m["end"])))
            else:
                raise Unsupported(f"const entry match type {mt!r} in {table.name}")
        priority = -int(e.get("priority", 0)) if table.needs_priority else 0
        return tuple(key), priority

    def const_entry(self, table: Table, e: dict[str, Any]) -> Entry:
        key, priority = self.const_key(table, e)
        ae = e["action_entry"]
        data = tuple(hexint(v) for v in ae.get("action_data", []))
        return Entry(key, priority, ActionCall(ae["action_id"], data), seq=len(table.entries))
