"""The parser, deparser, checksums and hash calculations of BMv2 JSON as Python functions.

Each parse state becomes `ps_<id>(f, pkt)`, returning the next state's function (None to
accept); `parse` runs them and turns a ParserError into `pkt.error`, so the packet still
reaches ingress (bmv2's parser.cpp). `deparse` emits the valid headers in the deparser's
order, then the bytes the parser did not consume. A calculation (a hash or checksum over
fields, headers and possibly the payload) becomes `calc_<n>(f, pkt)`, compiled on first
use into its own buffer because its first use may be in the middle of another function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ecntune.switch.compile_expressions import Emitter, ExpressionCompiler, hexint
from ecntune.switch.hashes import ALGORITHMS
from ecntune.switch.layout import HeaderInfo, Unsupported

STACK_OUT_OF_BOUNDS = 3  # core.p4's error code, where the program does not name its own


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
        em.dedent()

    def parser_op(self, op: dict[str, Any], em: Emitter, too_short: int) -> None:
        kind, params = op["op"], op["parameters"]
        if kind == "extract":
            target = params[0]
            if target["type"] == "regular":
                self.extract(self.header(target["value"]), em, too_short)
            elif target["type"] == "stack":
                stack = self.layout.stacks[target["value"]]
                ids = [self.hidx(h) for h in stack.headers]
                em(f"_i = stack_next(pkt, {stack.name!r})")
                em(f"if _i >= {len(ids)}:")
                code = self.errors.get("StackOutOfBounds", STACK_OUT_OF_BOUNDS)
                em.indent()(f"raise ParserError({code})")
                em.dedent()
                for i, h in enumerate(stack.headers):
                    em(f"{'if' if i == 0 else 'elif'} _i == {i}:")
                    em.indent()
                    self.extract(self.header(h), em, too_short)
                    em.dedent()
                em(f"stack_set_next(pkt, {stack.name!r}, _i + 1)")
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

    def extract(self, h: HeaderInfo, em: Emitter, too_short: int) -> None:
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
            em(f"f[{fi.slot}] = " + (f"two_comp_mod({value}, {fi.width})" if fi.signed else value))
        em(f"f[{h.valid_slot}] = 1")
        em(f"pkt.pos += {n}")

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
                em.indent()(f"_v.append(f[{fi.slot}]); _w.append({fi.width})")
                em.dedent()
            elif t == "hexstr":
                em(f"_v.append({hexint(item['value'])}); _w.append({int(item['bitwidth'])})")
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
            self.payload_calcs[name] = calc
        return fname

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
