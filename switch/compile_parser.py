"""The parser, deparser, checksums and hash calculations of BMv2 JSON as Python functions.

Each parse state becomes `ps_<id>(f, pkt)`, returning the next state's function (None to
accept); `parse` runs them and turns a ParserError into `pkt.error`, so the packet still
reaches ingress (bmv2's parser.cpp). Extraction goes to a header, the next element of a
header stack, or a member of the next element of a union stack; `extract_VL` sizes a
header's varbit field by an expression, with bmv2's errors (ParserInvalidArgument for a
length that is not whole bytes, PacketTooShort, HeaderTooShort past the type's
max_length). `deparse` emits the valid headers in the deparser's
order, then the bytes the parser did not consume. A calculation (a hash or checksum over
fields, headers and possibly the payload) becomes `calc_<n>(f, pkt)`, compiled on first
use into its own buffer because its first use may be in the middle of another function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ecntune.switch.compile_expressions import Emitter, ExpressionCompiler, hexint
from ecntune.switch.hashes import ALGORITHMS
from ecntune.switch.layout import FieldInfo, HeaderInfo, Unsupported

# core.p4's error codes, where the program does not name its own
STACK_OUT_OF_BOUNDS, HEADER_TOO_SHORT, PARSER_INVALID_ARGUMENT = 3, 4, 6


class ParserCompiler(ExpressionCompiler):
    """Mixin of Compiler: parser, deparser, checksums, calculations. State from Compiler."""

    out: Emitter  # the program's functions
    calc_out: Emitter  # calculation functions, emitted before everything else
    errors: dict[str, int]  # error name -> code
    value_sets: dict[str, list[tuple[int, int]]]  # parser value set -> [(value, mask)]
    calc_specs: dict[str, dict[str, Any]]  # calculation name -> its JSON
    calcs: dict[str, str]  # calculation name -> generated function, once compiled
    payload_calcs: dict[str, dict[str, Any]]  # the compiled calculations that cover payload
    deparse_order: list[HeaderInfo]
    primitive: Callable[[dict[str, Any], Emitter], None]  # compile_primitives' (parser ops)

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
        em("except StackOutOfBounds:")
        em.indent()(f"pkt.error = {self.errors.get('StackOutOfBounds', STACK_OUT_OF_BOUNDS)}")
        em.dedent()
        em.dedent()

    def parser_op(self, op: dict[str, Any], em: Emitter, too_short: int) -> None:
        kind, params = op["op"], op["parameters"]
        if kind in ("extract", "extract_VL"):
            length = self.expr(params[1]) if kind == "extract_VL" else None
            target = params[0]
            if target["type"] == "regular":
                self.extract(self.header(target["value"]), em, too_short, length)
            elif target["type"] == "stack":
                stack = self.stack(target["value"])
                self.extract_next(stack.name, list(stack.headers), em, too_short, length)
            elif target["type"] == "union_stack":
                ustack = self.union_stack(target["value"][0])
                unions = [self.layout.unions[u] for u in ustack.unions]
                member = unions[0].offset(target["value"][1])
                members = [u.headers[member] for u in unions]
                self.extract_next(ustack.name, members, em, too_short, length)
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

    def extract_next(
        self, stack: str, headers: list[str], em: Emitter, too_short: int, length: str | None
    ) -> None:
        """Extract into the next element of a stack (`headers`: the element's header each)."""
        em(f"_i = stack_next(pkt, {stack!r})")
        em(f"if _i >= {len(headers)}:")
        code = self.errors.get("StackOutOfBounds", STACK_OUT_OF_BOUNDS)
        em.indent()(f"raise ParserError({code})")
        em.dedent()
        for i, h in enumerate(headers):
            em(f"{'if' if i == 0 else 'elif'} _i == {i}:")
            em.indent()
            self.extract(self.header(h), em, too_short, length)
            em.dedent()
        em(f"stack_set_next(pkt, {stack!r}, _i + 1)")

    def extract(self, h: HeaderInfo, em: Emitter, too_short: int, length: str | None) -> None:
        """Fields from the packet, MSB first; `length`: the varbit's bits (extract_VL)."""
        if h.nbits % 8:
            raise Unsupported(f"header {h.name!r} is not a whole number of bytes")
        vl = h.varbit
        if (vl is None) != (length is None):
            what = "extract_VL of a header without" if vl is None else "extract of a header with"
            raise Unsupported(f"{what} a varbit field ({h.name!r})")
        if vl is None:
            self.extract_fixed(h, em, too_short)
        else:
            self.extract_varbit(h, vl, length, em, too_short)
        self.set_valid(h, em)
        em(f"pkt.pos += {h.nbytes}" if vl is None else "pkt.pos += _n")

    def extract_fixed(self, h: HeaderInfo, em: Emitter, too_short: int) -> None:
        """Shifts and masks folded into constants: the common, fast case."""
        n = h.nbytes
        em(f"if pkt.pos + {n} > len(data):")
        em.indent()(f"raise ParserError({too_short})")
        em.dedent()
        em(f"_x = int.from_bytes(data[pkt.pos:pkt.pos + {n}], 'big')")
        shift = h.nbits
        for fi in h.fields:
            shift -= fi.width
            mask = (1 << fi.width) - 1
            value = f"(_x >> {shift}) & {mask}" if shift else f"_x & {mask}"
            em(f"f[{fi.slot}] = " + (f"two_comp_mod({value}, {fi.width})" if fi.signed else value))

    def extract_varbit(
        self, h: HeaderInfo, vl: FieldInfo, length: str, em: Emitter, too_short: int
    ) -> None:
        """The varbit's length from the expression, checked in bmv2's order; fields after
        it shift by that length at run time."""
        em(f"_vl = {length}")
        em("if _vl % 8 or _vl < 0:")
        code = self.errors.get("ParserInvalidArgument", PARSER_INVALID_ARGUMENT)
        em.indent()(f"raise ParserError({code})")
        em.dedent()
        em(f"_n = {h.nbytes} + _vl // 8")
        em("if pkt.pos + _n > len(data):")
        em.indent()(f"raise ParserError({too_short})")
        em.dedent()
        em(f"if _vl > {vl.width}:")
        em.indent()(f"raise ParserError({self.errors.get('HeaderTooShort', HEADER_TOO_SHORT)})")
        em.dedent()
        em("_x = int.from_bytes(data[pkt.pos:pkt.pos + _n], 'big')")
        em("_s = _n * 8")
        for fi in h.fields:
            width = "_vl" if fi.varbit else str(fi.width)
            em(f"_s -= {width}")
            value = f"(_x >> _s) & ((1 << {width}) - 1)"
            em(f"f[{fi.slot}] = " + (f"two_comp_mod({value}, {fi.width})" if fi.signed else value))
        em(f"f[{vl.len_slot}] = _vl")

    def set_valid(self, h: HeaderInfo, em: Emitter) -> None:
        """Mark a header valid, and invalid the other members of its union."""
        em(f"f[{h.valid_slot}] = 1")
        for sibling in self.layout.siblings(h.name):
            em(f"f[{self.header(sibling).valid_slot}] = 0")

    def transition(self, s: dict[str, Any], states: dict[str, Any], em: Emitter) -> None:
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
            elif k["type"] in ("stack_field", "union_stack_field"):
                parts.append((self.element_field(k).width, self.expr(k)))
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
                value = hexint(tr["value"])
                if tr.get("mask"):
                    mask = hexint(tr["mask"])
                    em(f"if _k & {mask} == {value & mask}:")
                else:
                    em(f"if _k == {value}:")
            elif ttype == "parse_vset":
                vset = self.bind("_VSET", self.value_sets.setdefault(tr["value"], []))
                mask = hexint(tr["mask"]) if tr.get("mask") else -1
                em(f"if any((_k & {mask} & _m) == (_v & {mask} & _m) for _v, _m in {vset}):")
            else:
                raise Unsupported(f"parser transition type {ttype!r}")
            em.indent()(f"return {target(tr['next_state'])}")
            em.dedent()
        em("return None")

    def element_field(self, k: dict[str, Any]) -> FieldInfo:
        """The field a stack_field / union_stack_field key names, in the stack's first element."""
        v = k["value"]
        if k["type"] == "stack_field":
            return self.header(self.stack(v[0]).headers[0]).field(v[1])
        union = self.layout.unions[self.union_stack(v[0]).unions[0]]
        return self.header(union.headers[union.offset(v[1])]).field(v[2])

    # -- deparser ----------------------------------------------------------------------------

    def deparser(self, d: dict[str, Any]) -> None:
        em = self.out
        self.deparse_order = [self.header(h) for h in d["order"]]
        em("def deparse(f, pkt):")
        em.indent()
        em("update_checksums(f, pkt)")
        em("out = []")
        for h in self.deparse_order:
            em(f"if f[{h.valid_slot}]:")
            em.indent()
            if h.varbit is not None:  # its size is known per packet
                em(f"out.append(header_bytes(_HT, f, {self.hidx(h.name)}))")
                em.dedent()
                continue
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

    # -- checksums ---------------------------------------------------------------------------

    def checksums(self, checksums: list[dict[str, Any]]) -> None:
        """`update_checksums` (deparse calls it first) and `verify_checksums` (after parse)."""
        em = self.out
        for fname, update in (("update_checksums", True), ("verify_checksums", False)):
            em(f"def {fname}(f, pkt):")
            em.indent()
            em("pass")
            for c in checksums:
                if c.get("update" if update else "verify", True):
                    self.checksum(c, em, update)
            em.dedent()

    def checksum(self, c: dict[str, Any], em: Emitter, update: bool) -> None:
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
        em = Emitter()
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
                em.indent()(f"_v.append(f[{fi.slot}]); _w.append({self.width_now(fi)})")
                em.dedent()
            elif t == "hexstr":
                em(f"_v.append({hexint(item['value'])}); _w.append({int(item['bitwidth'])})")
            elif t == "header":
                hd = self.header(item["value"])
                em(f"if f[{hd.valid_slot}]:")
                em.indent()
                for fi in hd.fields:
                    em(f"_v.append(f[{fi.slot}]); _w.append({self.width_now(fi)})")
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
            self.payload_calcs[name] = calc
        return fname

    @staticmethod
    def width_now(fi: FieldInfo) -> str:
        """Source for a field's width in this packet (a varbit's current length)."""
        return f"f[{fi.len_slot}]" if fi.varbit else str(fi.width)

    def payload_helper(self) -> None:
        """Bytes after the last header a calculation covers (TCP/UDP checksums over payload).

        Emitted last: it needs the deparse order and every calculation compiled so far."""
        em = self.out
        order = [self.hidx(h.name) for h in self.deparse_order]
        last_of: dict[str, int] = {}
        for name, calc in self.payload_calcs.items():
            covered = [
                self.hidx(i["value"][0] if i["type"] == "field" else i["value"])
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
        em.indent()("out.append(header_bytes(_HT, f, h))")
        em.dedent()
        em.dedent()
        em("return b''.join(out) + pkt.data[pkt.pos:]")
        em.dedent()
