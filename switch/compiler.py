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
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecntune.switch.externs import CounterArray, MeterArray, RegisterArray
from ecntune.switch.hashes import ALGORITHMS, csum16, pack_bits
from ecntune.switch.layout import FieldInfo, HeaderInfo, Layout, Unsupported
from ecntune.switch.tables import ActionCall, ActionProfile, Entry, KeyField, Table, resolve

log = logging.getLogger("ecntune.switch.pipeline")

DROP_PORT = 511  # simple_switch's default drop port (mark_to_drop sets egress_spec to it)
MAX_JSON_MAJOR = 2


MATCH_TYPES = ("exact", "lpm", "ternary", "range", "optional", "valid")  # what tables.py matches


class AssertionFailure(Exception):
    """A P4 assert/assume failed: the packet is dropped (simple_switch would abort)."""


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


class ParserError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@dataclass
class ActionInfo:
    name: str
    id: int
    params: tuple[tuple[str, int], ...]  # (name, bitwidth)


@dataclass
class LearnList:
    name: str
    id: int
    fields: tuple[tuple[str, int, int], ...]  # (name, slot, width)


@dataclass
class Program:
    """A compiled program: the functions the switch runs and the state the runtime edits."""

    json: dict[str, Any]
    layout: Layout
    actions: dict[int, ActionInfo]
    tables: dict[str, Table]
    profiles: dict[str, ActionProfile]
    registers: dict[str, RegisterArray]
    counters: dict[str, CounterArray]
    direct_counters: dict[str, str]  # counter name -> table name
    meters: dict[str, MeterArray]
    learn_lists: dict[int, LearnList]
    field_lists: dict[int, tuple[int, ...]]  # id -> slots preserved by clone/resubmit
    value_sets: dict[str, list[tuple[int, int]]]
    errors: dict[str, int]
    parse: Callable[[list[int], Pkt], None]
    ingress: Callable[[list[int], Pkt], None]
    egress: Callable[[list[int], Pkt], None]
    deparse: Callable[[list[int], Pkt], bytes]
    source: str = ""
    slots: dict[str, int] = field(default_factory=dict)  # standard_metadata etc. by dotted name

    def action_by_name(self, name: str) -> ActionInfo:
        for a in self.actions.values():
            if a.name == name:
                return a
        raise KeyError(name)


def _hexint(value: str) -> int:
    return -int(value[1:], 16) if value.startswith("-") else int(value, 16)


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def indent(self) -> _Emitter:
        self.level += 1
        return self

    def dedent(self) -> None:
        self.level -= 1


class Compiler:
    """One-shot translation of a BMv2 JSON document into a Program."""

    def __init__(self, doc: dict[str, Any]) -> None:
        version = doc.get("__meta__", {}).get("version", [2, 0])
        if version[0] > MAX_JSON_MAJOR:
            raise Unsupported(f"BMv2 JSON format version {version} (this target reads 2.x)")
        self.doc = doc
        self.layout = Layout(doc)
        self.ns: dict[str, Any] = {
            "ParserError": ParserError,
            "AssertionFailure": AssertionFailure,
            "resolve": resolve,
            "pack_bits": pack_bits,
            "csum16": csum16,
            "log": log,
            "rng": random.Random(),
            "DROP_PORT": DROP_PORT,
        }
        self.out = _Emitter()
        self.calc_out = _Emitter()
        self.errors = {name: value for name, value in doc.get("errors", [])}
        self.errors.setdefault("NoError", 0)
        self.errors.setdefault("PacketTooShort", 1)
        self._unique = 0

    # -- helpers -------------------------------------------------------------------------

    def name(self, prefix: str) -> str:
        self._unique += 1
        return f"{prefix}{self._unique}"

    def bind(self, prefix: str, obj: Any) -> str:
        n = self.name(prefix)
        self.ns[n] = obj
        return n

    def fieldref(self, ref: list[str]) -> FieldInfo:
        return self.layout.resolve(ref[0], ref[1])

    def header(self, name: str) -> HeaderInfo:
        try:
            return self.layout.headers[name]
        except KeyError:
            raise Unsupported(f"unknown header instance {name!r}") from None

    # -- expressions -----------------------------------------------------------------------

    def expr(self, node: dict[str, Any]) -> str:
        """Python source for an rvalue (int or bool)."""
        t, v = node["type"], node.get("value")
        if t == "field":
            return f"f[{self.fieldref(v).slot}]"
        if t == "hexstr":
            return str(_hexint(v))
        if t == "bool":
            return "True" if v else "False"
        if t in ("runtime_data", "local"):
            return f"d[{int(v)}]"
        if t == "expression":  # actions wrap an expression in one more type-value layer
            return self.op(v) if "op" in v else self.expr(v)
        if t == "lookahead":
            offset, width = v
            return f"_lookahead(pkt, {offset}, {width})"
        if t == "register":
            reg = self.register(v[0])
            return f"{reg}.values[{self.expr(v[1])}]"
        if t == "stack_field":
            raise Unsupported("stack_field operands (last extracted element of a stack)")
        if t == "header":
            raise Unsupported(f"header {v!r} used as a value")
        raise Unsupported(f"operand type {t!r}")

    def op(self, e: dict[str, Any]) -> str:
        op = e["op"]
        left, right = e.get("left"), e.get("right")
        binary = {
            "+": "+", "-": "-", "*": "*", "<<": "<<", ">>": ">>", "&": "&", "|": "|", "^": "^",
            "==": "==", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<=",
        }  # fmt: skip
        if op in binary:
            if left is None:  # unary minus
                return f"(-{self.expr(right)})"
            return f"({self.expr(left)} {binary[op]} {self.expr(right)})"
        if op == "and":
            return f"({self.expr(left)} and {self.expr(right)})"
        if op == "or":
            return f"({self.expr(left)} or {self.expr(right)})"
        if op == "not":
            return f"(not {self.expr(right)})"
        if op == "~":
            return f"(~{self.expr(right)})"
        if op == "d2b":
            return f"({self.expr(right)} != 0)"
        if op == "b2d":
            return f"(1 if {self.expr(right)} else 0)"
        if op == "valid":
            return f"(f[{self.header_valid_slot(right)}] == 1)"
        if op == "valid_union":
            union = self.layout.unions[right["value"]]
            slots = [self.header(h).valid_slot for h in union.headers]
            return "(" + " or ".join(f"f[{s}] == 1" for s in slots) + ")"
        if op == "two_comp_mod":
            return f"_tcm({self.expr(left)}, {self.expr(right)})"
        if op == "sat_cast":
            return f"_sat({self.expr(left)}, {self.expr(right)})"
        if op == "usat_cast":
            return f"_usat({self.expr(left)}, {self.expr(right)})"
        if op == "?":
            return f"({self.expr(left)} if {self.expr(e['cond'])} else {self.expr(right)})"
        if op == "access_field":
            base = self.header_base(left)
            return f"f[{base} + {int(right)}]"
        if op in ("last_stack_index", "size_stack"):
            stack = self.layout.stacks[right["value"]]
            nxt = f"_stack_next(pkt, {stack.name!r})"
            return f"({nxt} - 1)" if op == "last_stack_index" else nxt
        raise Unsupported(f"expression operator {op!r}")

    def header_valid_slot(self, node: dict[str, Any]) -> str:
        """Slot expression of a header's validity (static or through a stack index)."""
        if node["type"] == "header":
            return str(self.header(node["value"]).valid_slot)
        return f"_H_VALID[{self.header_index(node)}]"

    def header_base(self, node: dict[str, Any]) -> str:
        if node["type"] == "header":
            return str(self.header(node["value"]).fields[0].slot)
        return f"_H_BASE[{self.header_index(node)}]"

    def header_index(self, node: dict[str, Any]) -> str:
        """A runtime header reference: index into _H_VALID/_H_BASE (stack dereference)."""
        if node["type"] == "expression" and node["value"]["op"] == "dereference_header_stack":
            stack = self.layout.stacks[node["value"]["left"]["value"]]
            ids = self.bind("_STACK", [self._hidx(h) for h in stack.headers])
            return f"{ids}[{self.expr(node['value']['right'])}]"
        if node["type"] == "header":
            return str(self._hidx(node["value"]))
        raise Unsupported(f"header expression {node!r}")

    def _hidx(self, name: str) -> int:
        return list(self.layout.headers).index(name)

    # -- assignment -----------------------------------------------------------------------

    def store(self, dst: dict[str, Any], value: str) -> str:
        """A statement writing `value` to an lvalue, truncated to the field's width."""
        if dst["type"] == "field":
            fi = self.fieldref(dst["value"])
            return f"f[{fi.slot}] = {self.fit(value, fi)}"
        if dst["type"] == "expression" and dst["value"]["op"] == "access_field":
            e = dst["value"]
            width = self._field_width_at(e["left"], int(e["right"]))
            fi = FieldInfo("", width[0], width[1], -1)
            return f"f[{self.header_base(e['left'])} + {int(e['right'])}] = {self.fit(value, fi)}"
        raise Unsupported(f"assignment target {dst['type']!r}")

    def _field_width_at(self, node: dict[str, Any], offset: int) -> tuple[int, bool]:
        if node["type"] == "header":
            fi = self.header(node["value"]).fields[offset]
        else:
            stack = self.layout.stacks[node["value"]["left"]["value"]]
            fi = self.header(stack.headers[0]).fields[offset]
        return fi.width, fi.signed

    @staticmethod
    def fit(value: str, fi: FieldInfo) -> str:
        if fi.signed:
            return f"_tcm({value}, {fi.width})"
        return f"({value}) & {(1 << fi.width) - 1}"

    def register(self, name: str) -> str:
        return self.regs[name]

    # -- primitives -------------------------------------------------------------------------

    def primitive(self, p: dict[str, Any], em: _Emitter) -> None:
        op, params = p["op"], p.get("parameters", [])
        x = self.expr
        if op in ("assign", "modify_field"):
            em(self.store(params[0], x(params[1])))
        elif op in ("assign_header", "copy_header"):
            dst, src = (self.header_index(q) for q in params[:2])
            em(f"_copy_header(_HT, f, {dst}, {src})")
        elif op == "assign_union":
            dst, src = (self.layout.unions[q["value"]] for q in params)
            for a, b in zip(dst.headers, src.headers, strict=True):
                em(f"_copy_header(_HT, f, {self._hidx(a)}, {self._hidx(b)})")
        elif op == "assign_header_stack":
            dst, src = (self.layout.stacks[q["value"]] for q in params)
            for a, b in zip(dst.headers, src.headers, strict=True):
                em(f"_copy_header(_HT, f, {self._hidx(a)}, {self._hidx(b)})")
            em(f"_stack_set_next(pkt, {dst.name!r}, _stack_next(pkt, {src.name!r}))")
        elif op in ("push", "pop"):
            stack = self.layout.stacks[params[0]["value"]]
            ids = [self._hidx(h) for h in stack.headers]
            em(f"_stack_{op}(_HT, f, pkt, {stack.name!r}, {ids}, {x(params[1])})")
        elif op in ("add_header", "add_header_fast", "remove_header"):
            idx = self.header_index(params[0])
            em(f"_{op}(_HT, f, pkt, {idx})")
        elif op in ("mark_to_drop", "drop"):
            em(f"f[{self.slots['standard_metadata.egress_spec']}] = DROP_PORT")
            if "standard_metadata.mcast_grp" in self.slots:
                em(f"f[{self.slots['standard_metadata.mcast_grp']}] = 0")
        elif op == "exit":
            em("pkt.exit = True")
            em("return")
        elif op == "no_op":
            em("pass")
        elif op in ("assert", "assume"):
            em(f"if not {x(params[0])}:")
            em.indent()(f"raise AssertionFailure({op!r})")
            em.dedent()
        elif op == "log_msg":
            fmt = params[0]["value"]
            args = ", ".join(x(a) for a in params[1]["value"])
            em("if log.isEnabledFor(10):")
            em.indent()(f"log.debug(_fmt({fmt!r}, [{args}]))")
            em.dedent()
        elif op == "generate_digest":
            em(f"pkt.learn_id = {x(params[1])}")
        elif op in ("clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress"):
            em(f"pkt.clone_session = {x(params[0])}")
            em(f"pkt.clone_fl = {x(params[1])}")
        elif op in ("resubmit", "recirculate"):
            em(f"pkt.{op} = {x(params[0])} or -1")
        elif op == "truncate":
            em(f"pkt.truncate = {x(params[0])}")
        elif op == "count":
            counter = self.counters_ns[params[0]["value"]]
            em(f"{counter}.count({x(params[1])}, pkt.length)")
        elif op == "execute_meter":
            meter = self.meters_ns[params[0]["value"]]
            em(self.store(params[2], f"{meter}.execute({x(params[1])}, pkt.length)"))
        elif op == "register_read":
            reg = self.regs[params[1]["value"]]
            em(f"_i = {x(params[2])}")
            em(f"if 0 <= _i < {reg}.size:")
            em.indent()(self.store(params[0], f"{reg}.values[_i]"))
            em.dedent()
        elif op == "register_write":
            reg = self.regs[params[0]["value"]]
            em(f"_i = {x(params[1])}")
            em(f"if 0 <= _i < {reg}.size:")
            em.indent()(f"{reg}.values[_i] = ({x(params[2])}) & {reg}.mask")
            em.dedent()
        elif op == "modify_field_with_hash_based_offset":
            calc = self.calculation(params[2]["value"])
            size = f"(({x(params[3])}) or 1)"
            em(self.store(params[0], f"{x(params[1])} + {calc}(f, pkt) % {size}"))
        elif op == "modify_field_rng_uniform":
            em(f"_lo, _hi = {x(params[1])}, {x(params[2])}")
            em("if _lo <= _hi:")
            em.indent()(self.store(params[0], "rng.randint(_lo, _hi)"))
            em.dedent()
        else:
            raise Unsupported(f"primitive {op!r}")

    # -- calculations (hashes over fields, checksums) ----------------------------------------

    def calculation(self, name: str) -> str:
        """Name of a generated function computing a named calculation for a packet."""
        if name in self.calcs:
            return self.calcs[name]
        calc = self.calc_specs[name]
        algo = calc["algo"]
        if algo not in ALGORITHMS:
            raise Unsupported(f"hash algorithm {algo!r} (calculation {name!r})")
        fn = self.bind("_calc_", ALGORITHMS[algo])
        em = _Emitter()
        fname = self.name("calc_")
        em(f"def {fname}(f, pkt):")
        em.indent()
        em("_v = []")
        em("_w = []")
        payload = False
        for item in calc["input"]:
            t = item["type"]
            if t == "field":
                fi = self.fieldref(item["value"])
                h = self.layout.resolve(item["value"][0], "$valid$").slot
                em(f"if f[{h}]:")
                em.indent()(f"_v.append(f[{fi.slot}]); _w.append({fi.width})")
                em.dedent()
            elif t == "hexstr":
                em(f"_v.append({_hexint(item['value'])}); _w.append({int(item['bitwidth'])})")
            elif t == "header":
                hd = self.header(item["value"])
                em(f"if f[{hd.valid_slot}]:")
                em.indent()
                for fi in hd.fields:
                    em(f"_v.append(f[{fi.slot}]); _w.append({fi.width})")
                em.dedent()
            elif t == "payload":
                payload = True
            else:
                raise Unsupported(f"calculation input {t!r} in {name!r}")
        if payload:
            em(f"return {fn}(pack_bits(_v, _w) + _after_payload(f, pkt, {name!r}))")
        else:
            em(f"return {fn}(pack_bits(_v, _w))")
        self.calc_out.lines += em.lines  # its own buffer: we may be mid-function in self.out
        self.calcs[name] = fname
        if payload:
            self._payload_calcs[name] = calc
        return fname

    # -- parser ----------------------------------------------------------------------------

    def parser(self, p: dict[str, Any]) -> None:
        states = {s["name"]: s for s in p["parse_states"]}
        em = self.out
        too_short = self.errors["PacketTooShort"]
        for s in p["parse_states"]:
            em(f"def ps_{s['id']}(f, pkt):")
            em.indent()
            em("data = pkt.data")
            for op in s["parser_ops"]:
                self.parser_op(op, em, too_short)
            self.transition(s, states, em)
            em.dedent()
        init = states[p["init_state"]]["id"] if p.get("init_state") else None
        em("def parse(f, pkt):")
        em.indent()
        em(f"state = {'ps_' + str(init) if init is not None else 'None'}")
        em("try:")
        em.indent()
        em("while state is not None:")
        em.indent()("state = state(f, pkt)")
        em.dedent()
        em.dedent()
        em("except ParserError as e:")
        em.indent()("pkt.error = e.code")
        em.dedent()
        em.dedent()

    def parser_op(self, op: dict[str, Any], em: _Emitter, too_short: int) -> None:
        kind, params = op["op"], op["parameters"]
        if kind == "extract":
            target = params[0]
            if target["type"] == "regular":
                self.extract(self.header(target["value"]), em, too_short)
            elif target["type"] == "stack":
                stack = self.layout.stacks[target["value"]]
                ids = [self._hidx(h) for h in stack.headers]
                em(f"_i = _stack_next(pkt, {stack.name!r})")
                em(f"if _i >= {len(ids)}:")
                em.indent()(f"raise ParserError({self.errors.get('StackOutOfBounds', 3)})")
                em.dedent()
                for i, h in enumerate(stack.headers):
                    em(f"{'if' if i == 0 else 'elif'} _i == {i}:")
                    em.indent()
                    self.extract(self.header(h), em, too_short)
                    em.dedent()
                em(f"_stack_set_next(pkt, {stack.name!r}, _i + 1)")
            else:
                raise Unsupported(f"extract into {target['type']!r}")
        elif kind == "set":
            em(self.store(params[0], self.expr(params[1])))
        elif kind == "verify":
            em(f"if not {self.expr(params[0])}:")
            em.indent()(f"raise ParserError({self.expr(params[1])})")
            em.dedent()
        elif kind in ("advance", "shift"):
            amount = self.expr(params[0])
            em(f"_n = ({amount}) // 8" if kind == "advance" else f"_n = {amount}")
            em("if pkt.pos + _n > len(data):")
            em.indent()(f"raise ParserError({too_short})")
            em.dedent()
            em("pkt.pos += _n")
        elif kind == "primitive":
            self.primitive(params[0], em)
        else:
            raise Unsupported(f"parser operation {kind!r}")

    def extract(self, h: HeaderInfo, em: _Emitter, too_short: int) -> None:
        n = h.nbytes
        if h.nbits % 8:
            raise Unsupported(f"header {h.name!r} is not a whole number of bytes")
        em(f"if pkt.pos + {n} > len(data):")
        em.indent()(f"raise ParserError({too_short})")
        em.dedent()
        em(f"_x = int.from_bytes(data[pkt.pos:pkt.pos + {n}], 'big')")
        shift = h.nbits
        for fi in h.fields:
            shift -= fi.width
            value = (
                f"(_x >> {shift}) & {(1 << fi.width) - 1}"
                if shift
                else f"_x & {(1 << fi.width) - 1}"
            )
            em(f"f[{fi.slot}] = " + (f"_tcm({value}, {fi.width})" if fi.signed else value))
        em(f"f[{h.valid_slot}] = 1")
        em(f"pkt.pos += {n}")

    def transition(self, s: dict[str, Any], states: dict[str, Any], em: _Emitter) -> None:
        def target(name: str | None) -> str:
            return "None" if name is None else f"ps_{states[name]['id']}"

        keys = s.get("transition_key", [])
        parts: list[tuple[int, str]] = []
        for k in keys:
            if k["type"] == "field":
                fi = self.fieldref(k["value"])
                parts.append((fi.width, f"f[{fi.slot}]"))
            elif k["type"] == "lookahead":
                parts.append((k["value"][1], self.expr(k)))
            else:
                raise Unsupported(f"transition key type {k['type']!r}")
        total, key_parts = 0, []
        for width, code in reversed(parts):
            key_parts.append(f"({code} << {total})" if total else code)
            total += (width + 7) // 8 * 8
        key = " | ".join(reversed(key_parts)) or "0"
        em(f"_k = {key}")
        for tr in s["transitions"]:
            ttype = tr.get(
                "type", "hexstr" if tr.get("value") not in (None, "default") else "default"
            )
            if ttype == "default":
                em(f"return {target(tr['next_state'])}")
                return
            if ttype == "hexstr":
                value = _hexint(tr["value"])
                if tr.get("mask"):
                    mask = _hexint(tr["mask"])
                    em(f"if _k & {mask} == {value & mask}:")
                else:
                    em(f"if _k == {value}:")
            elif ttype == "parse_vset":
                vset = self.bind("_VSET", self.value_sets.setdefault(tr["value"], []))
                mask = _hexint(tr["mask"]) if tr.get("mask") else -1
                em(f"if any((_k & {mask} & _m) == (_v & {mask} & _m) for _v, _m in {vset}):")
            else:
                raise Unsupported(f"parser transition type {ttype!r}")
            em.indent()(f"return {target(tr['next_state'])}")
            em.dedent()
        em("return None")

    # -- deparser and checksums ------------------------------------------------------------

    def deparser(self, d: dict[str, Any], checksums: list[dict[str, Any]]) -> None:
        em = self.out
        order = [self.header(h) for h in d["order"]]
        self.deparse_order = order
        em("def update_checksums(f, pkt):")
        em.indent()
        em("pass")
        for c in checksums:
            if c.get("update", True):
                self.checksum(c, em, update=True)
        em.dedent()
        em("def deparse(f, pkt):")
        em.indent()
        em("update_checksums(f, pkt)")
        em("out = []")
        for h in order:
            em(f"if f[{h.valid_slot}]:")
            em.indent()
            terms, shift = [], h.nbits
            for fi in h.fields:
                shift -= fi.width
                v = f"(f[{fi.slot}] & {(1 << fi.width) - 1})"
                terms.append(f"({v} << {shift})" if shift else v)
            em(f"out.append(({' | '.join(terms)}).to_bytes({h.nbytes}, 'big'))")
            em.dedent()
        em("out.append(pkt.data[pkt.pos:])")
        em("return b''.join(out)")
        em.dedent()
        em("def verify_checksums(f, pkt):")
        em.indent()
        em("pass")
        for c in checksums:
            if c.get("verify", True):
                self.checksum(c, em, update=False)
        em.dedent()

    def checksum(self, c: dict[str, Any], em: _Emitter, update: bool) -> None:
        if c.get("type", "generic") not in ("generic", "ipv4"):
            raise Unsupported(f"checksum type {c.get('type')!r}")
        target = self.fieldref(c["target"])
        calc = self.calculation(c["calculation"])
        cond = self.expr(c["if_cond"]) if c.get("if_cond") else "True"
        em(f"if {cond}:")
        em.indent()
        if update:
            em(f"f[{target.slot}] = {calc}(f, pkt) & {(1 << target.width) - 1}")
        else:
            em(f"if {calc}(f, pkt) != f[{target.slot}]:")
            em.indent()("pkt.cksum_error = 1")
            em.dedent()
        em.dedent()

    # -- control flow ------------------------------------------------------------------------

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

    def table(self, t: dict[str, Any], em: _Emitter, nxt: Callable[[str | None], str]) -> None:
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
                code = f"({code} & {_hexint(k['mask'])})"
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
            data = tuple(_hexint(v) for v in default.get("action_data", []))
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
        self._late_next[nmap] = by_id
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
        for kf, m in zip(table.key, e["match_key"], strict=True):
            mt = m["match_type"]
            if mt in ("exact", "valid"):
                key.append(int(m["key"]) if mt == "valid" else _hexint(m["key"]))
            elif mt == "lpm":
                key.append((_hexint(m["key"]), m["prefix_length"]))
            elif mt in ("ternary", "optional"):
                key.append((_hexint(m["key"]) & _hexint(m["mask"]), _hexint(m["mask"])))
            elif mt == "range":
                key.append((_hexint(m["start"]), _hexint(m["end"])))
            else:
                raise Unsupported(f"const entry match type {mt!r} in {table.name}")
            del kf
        priority = -int(e.get("priority", 0)) if table.needs_priority else 0
        return tuple(key), priority

    def const_entry(self, table: Table, e: dict[str, Any]) -> Entry:
        key, priority = self.const_key(table, e)
        ae = e["action_entry"]
        data = tuple(_hexint(v) for v in ae.get("action_data", []))
        return Entry(key, priority, ActionCall(ae["action_id"], data), seq=len(table.entries))

    # -- actions -----------------------------------------------------------------------------

    def action(self, a: dict[str, Any]) -> None:
        em = self.out
        prims = a.get("primitives", [])
        em(f"def a_{a['id']}(f, d, pkt):")
        em.indent()
        if any(p["op"] in ("_jump", "_jump_if_zero") for p in prims):
            em("pc = 0")
            em(f"while pc < {len(prims)}:")
            em.indent()
            for i, p in enumerate(prims):
                em(f"{'if' if i == 0 else 'elif'} pc == {i}:")
                em.indent()
                if p["op"] == "_jump":
                    em(f"pc = {self.expr(p['parameters'][0])}")
                    em("continue")
                elif p["op"] == "_jump_if_zero":
                    em(f"if not {self.expr(p['parameters'][0])}:")
                    em.indent()(f"pc = {self.expr(p['parameters'][1])}")
                    em("continue")
                    em.dedent()
                else:
                    self.primitive(p, em)
                em.dedent()
            em("pc += 1")
            em.dedent()
        else:
            em("pass")
            for p in prims:
                self.primitive(p, em)
        em.dedent()

    # -- whole program -----------------------------------------------------------------------

    def compile(self) -> Program:
        doc = self.doc
        for unsupported in ("extern_instances",):
            if doc.get(unsupported):
                names = [x["name"] for x in doc[unsupported]]
                raise Unsupported(f"extern instances {names}")
        self.slots = {
            name: fi.slot
            for name in (
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
            if (fi := self.layout.find(name)) is not None
        }
        if "standard_metadata.egress_spec" not in self.slots:
            raise Unsupported("program has no standard_metadata.egress_spec (not v1model?)")
        for alias in ("mcast_grp", "egress_rid"):
            if f"intrinsic_metadata.{alias}" in self.slots:
                self.slots.setdefault(
                    f"standard_metadata.{alias}", self.slots[f"intrinsic_metadata.{alias}"]
                )
        self.regs = {
            r["name"]: self.bind("R_", RegisterArray(r["name"], r["id"], r["size"], r["bitwidth"]))
            for r in doc.get("register_arrays", [])
        }
        self.registers = {self.ns[v].name: self.ns[v] for v in self.regs.values()}
        counters = [c for c in doc.get("counter_arrays", [])]
        self.counters_ns = {
            c["name"]: self.bind("C_", CounterArray(c["name"], c["id"], c["size"]))
            for c in counters
            if not c.get("is_direct")
        }
        self.direct_counters = {c["name"]: c["binding"] for c in counters if c.get("is_direct")}
        self.meters_ns = {}
        for m in doc.get("meter_arrays", []):
            if m.get("is_direct"):
                raise Unsupported(f"direct meter {m['name']!r}")
            self.meters_ns[m["name"]] = self.bind(
                "M_", MeterArray(m["name"], m["id"], m["size"], m.get("type", "bytes"))
            )
        self.calc_specs = {c["name"]: c for c in doc.get("calculations", [])}
        self.calcs: dict[str, str] = {}
        self._payload_calcs: dict[str, Any] = {}
        self.tables: dict[str, Table] = {}
        self.profiles: dict[str, ActionProfile] = {}
        self.profile_specs: dict[str, Any] = {}
        self.value_sets: dict[str, list[tuple[int, int]]] = {
            v["name"]: [] for v in doc.get("parse_vsets", [])
        }
        self._late_next: dict[str, dict[int, str]] = {}
        self.action_names = {a["id"]: a["name"] for a in doc.get("actions", [])}
        # p4c lists a table's actions by name; give Table the ids.
        for p in doc.get("pipelines", []):
            for t in p.get("tables", []):
                t["action_ids"] = list(t.get("action_ids") or [])
                if not t["action_ids"]:
                    ids = {v: k for k, v in self.action_names.items()}
                    t["action_ids"] = [ids[n] for n in t.get("actions", [])]

        ht = HeaderTable.of(self.layout)
        self.ns["_HT"] = ht
        self.ns["_H_VALID"] = ht.valid
        self.ns["_H_BASE"] = ht.base
        self.ns.update(_RUNTIME_HELPERS)

        for a in doc.get("actions", []):
            self.action(a)
        self.ns["_ACTIONS_IDS"] = [a["id"] for a in doc.get("actions", [])]
        parsers = doc.get("parsers", [])
        if len(parsers) != 1:
            raise Unsupported(f"{len(parsers)} parsers (v1model has exactly one)")
        self.parser(parsers[0])
        names = {p["name"] for p in doc.get("pipelines", [])}
        if names != {"ingress", "egress"}:
            raise Unsupported(f"pipelines {sorted(names)} (v1model has ingress and egress)")
        for p in doc["pipelines"]:
            self.pipeline(p)
        deparsers = doc.get("deparsers", [])
        if len(deparsers) != 1:
            raise Unsupported(f"{len(deparsers)} deparsers (v1model has exactly one)")
        self.deparser(deparsers[0], doc.get("checksums", []))
        self.payload_helper()

        source = "\n".join(self.calc_out.lines + self.out.lines) + "\n"
        code = compile(source, "<p4 program>", "exec")
        exec(code, self.ns)
        self.ns["_ACTIONS"] = {aid: self.ns[f"a_{aid}"] for aid in self.ns["_ACTIONS_IDS"]}
        for nmap, by_id in self._late_next.items():
            self.ns[nmap].update(
                {aid: self.ns[n] if n != "None" else None for aid, n in by_id.items()}
            )

        verify = self.ns["verify_checksums"]
        parse = self.ns["parse"]

        def parse_and_verify(f: list[int], pkt: Pkt) -> None:
            parse(f, pkt)
            verify(f, pkt)

        learn = {
            ll["id"]: LearnList(
                ll["name"],
                ll["id"],
                tuple(
                    (
                        el["value"][1],
                        self.fieldref(el["value"]).slot,
                        self.fieldref(el["value"]).width,
                    )
                    for el in ll["elements"]
                ),
            )
            for ll in doc.get("learn_lists", [])
        }
        field_lists = {
            fl["id"]: tuple(
                self.fieldref(el["value"]).slot for el in fl["elements"] if el["type"] == "field"
            )
            for fl in doc.get("field_lists", [])
        }
        return Program(
            json=doc,
            layout=self.layout,
            actions={
                a["id"]: ActionInfo(
                    a["name"], a["id"], tuple((r["name"], r["bitwidth"]) for r in a["runtime_data"])
                )
                for a in doc.get("actions", [])
            },
            tables=self.tables,
            profiles=self.profiles,
            registers=self.registers,
            counters={self.ns[v].name: self.ns[v] for v in self.counters_ns.values()},
            direct_counters=self.direct_counters,
            meters={self.ns[v].name: self.ns[v] for v in self.meters_ns.values()},
            learn_lists=learn,
            field_lists=field_lists,
            value_sets=self.value_sets,
            errors=self.errors,
            parse=parse_and_verify,
            ingress=self.ns["ingress"],
            egress=self.ns["egress"],
            deparse=self.ns["deparse"],
            source=source,
            slots=self.slots,
        )

    def payload_helper(self) -> None:
        """Bytes after the last header a calculation covers (TCP/UDP checksums over payload)."""
        em = self.out
        order = [self._hidx(h.name) for h in self.deparse_order]
        last_of: dict[str, int] = {}
        for name, calc in self._payload_calcs.items():
            covered = [
                self._hidx(i["value"][0] if i["type"] == "field" else i["value"])
                for i in calc["input"]
                if i["type"] in ("field", "header")
            ]
            last = max((order.index(h) for h in covered if h in order), default=-1)
            last_of[name] = last
        self.ns["_PAYLOAD_AFTER"] = last_of
        self.ns["_DEPARSE_ORDER"] = order
        em("def _after_payload(f, pkt, name):")
        em.indent()
        em("out = []")
        em("for h in _DEPARSE_ORDER[_PAYLOAD_AFTER[name] + 1:]:")
        em.indent()
        em("if f[_H_VALID[h]]:")
        em.indent()("out.append(_header_bytes(_HT, f, h))")
        em.dedent()
        em.dedent()
        em("return b''.join(out) + pkt.data[pkt.pos:]")
        em.dedent()


# -- helpers the generated code calls (slow paths only) ----------------------------------------


def _tcm(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def _sat(value: int, width: int) -> int:
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return max(lo, min(hi, value))


def _usat(value: int, width: int) -> int:
    return max(0, min((1 << width) - 1, value))


def _fmt(fmt: str, args: list[int]) -> str:
    for a in args:
        fmt = fmt.replace("{}", str(a), 1)
    return fmt


def _lookahead(pkt: Pkt, offset: int, width: int) -> int:
    start = pkt.pos * 8 + offset
    nbytes = (start % 8 + width + 7) // 8
    chunk = pkt.data[start // 8 : start // 8 + nbytes]
    if len(chunk) < nbytes:
        raise ParserError(1)
    value = int.from_bytes(chunk, "big")
    return (value >> (nbytes * 8 - start % 8 - width)) & ((1 << width) - 1)


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


def _copy_header(ht: HeaderTable, f: list[int], dst: int, src: int) -> None:
    if not f[ht.valid[src]]:
        f[ht.valid[dst]] = 0
        return
    for a, b in zip(ht.slots[dst], ht.slots[src], strict=True):
        f[a] = f[b]
    f[ht.valid[dst]] = 1


def _add_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if not f[ht.valid[h]]:
        for s in ht.slots[h]:
            f[s] = 0
        f[ht.valid[h]] = 1
        pkt.length += ht.nbytes[h]


def _add_header_fast(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    f[ht.valid[h]] = 1


def _remove_header(ht: HeaderTable, f: list[int], pkt: Pkt, h: int) -> None:
    if f[ht.valid[h]]:
        pkt.length -= ht.nbytes[h]
        f[ht.valid[h]] = 0


def _stack_next(pkt: Pkt, stack: str) -> int:
    return (pkt.stack_next or {}).get(stack, 0)


def _stack_set_next(pkt: Pkt, stack: str, value: int) -> None:
    if pkt.stack_next is None:
        pkt.stack_next = {}
    pkt.stack_next[stack] = value


def _stack_push(
    ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[int], n: int
) -> None:
    """push_front(n): shift elements towards the end; the first n become invalid."""
    for i in range(len(ids) - 1, -1, -1):
        if i >= n:
            _copy_header(ht, f, ids[i], ids[i - n])
        else:
            f[ht.valid[ids[i]]] = 0
    _stack_set_next(pkt, stack, min(len(ids), _stack_next(pkt, stack) + n))


def _stack_pop(ht: HeaderTable, f: list[int], pkt: Pkt, stack: str, ids: list[int], n: int) -> None:
    """pop_front(n): shift elements towards the front; the last n become invalid."""
    for i in range(len(ids)):
        if i + n < len(ids):
            _copy_header(ht, f, ids[i], ids[i + n])
        else:
            f[ht.valid[ids[i]]] = 0
    _stack_set_next(pkt, stack, max(0, _stack_next(pkt, stack) - n))


def _header_bytes(ht: HeaderTable, f: list[int], h: int) -> bytes:
    return pack_bits([f[s] for s in ht.slots[h]], ht.widths[h])


_RUNTIME_HELPERS: dict[str, Any] = {
    fn.__name__: fn
    for fn in (
        _tcm, _sat, _usat, _fmt, _lookahead, _copy_header, _add_header, _add_header_fast,
        _remove_header, _stack_next, _stack_set_next, _stack_push, _stack_pop, _header_bytes,
    )
}  # fmt: skip


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
