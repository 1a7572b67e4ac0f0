"""A compiled Program's per-packet functions as C source: the native backend (issue 21).

The Python compiler (switch/compiler.py) stays the reference: this module walks the same
BMv2 JSON the same way, kind by kind (expressions, parser, deparser, checksums,
primitives, control flow), and emits C with the same meaning over a field vector of
uint64 slots laid out exactly as the Python one (switch/layout.py), so the two can be
compared slot for slot (tests/test_switch_native.py). Control flow becomes labels and
gotos inside one function per pipeline; tables are looked up in entry arrays the Python
side keeps in sync (switch/native.py); registers and counters are arrays it binds.

What the C path does not implement it refuses here with `Unsupported`, naming the
construct, and the switch runs the Python path instead (and says so): fields, action
parameters or registers wider than 64 bits, signed fields, header stacks, unions and
varbits, lookahead, parser value sets, meters, direct counters, calculations over the
payload, saturating casts, header equality. None of these is in p4src/ecn.p4.
"""

from __future__ import annotations

from typing import Any

from ecntune.switch.compile_expressions import Emitter, hexint, op_of, unwrap
from ecntune.switch.compile_primitives import JUMPS
from ecntune.switch.layout import FieldInfo, HeaderInfo, Unsupported
from ecntune.switch.program import Program
from ecntune.switch.runtime import DROP_PORT

MAX_BITS = 64  # a slot is a uint64
HASHES = {  # BMv2 algorithm -> native_runtime.h function (as switch/hashes.py's ALGORITHMS)
    "crc16": "ect_crc16",
    "crc16_custom": "ect_crc16",
    "crc32": "ect_crc32",
    "crc32_custom": "ect_crc32",
    "crcCCITT": "ect_crc_ccitt",
    "crc8_custom": "ect_crc8",
    "csum16": "ect_csum16",
    "cksum16": "ect_csum16",
    "xor16": "ect_xor16",
    "identity": "ect_identity",
}
INFIX = {
    "+": "+", "-": "-", "*": "*", "&": "&", "|": "|", "^": "^", "==": "==", "!=": "!=",
    ">": ">", ">=": ">=", "<": "<", "<=": "<=", "and": "&&", "or": "||",
}  # fmt: skip
PREFIX = {"not": "(!{})", "~": "(~{})", "d2b": "({} != 0)", "b2d": "({} ? 1 : 0)"}
ABORT = "if (pkt->exit || pkt->fault) return;"


def refuse(what: str) -> Unsupported:
    return Unsupported(f"native data plane: {what}")


def const(value: int) -> str:
    """A C u128 constant (negative values in two's complement, as Python masks them)."""
    value &= (1 << 128) - 1
    if value < 1 << 64:
        return f"((u128){value}ULL)"
    return f"(((u128){value >> 64}ULL << 64) | {value & ((1 << 64) - 1)}ULL)"


def bit_offsets(h: HeaderInfo) -> list[tuple[FieldInfo, int]]:
    """Each field of a header with its offset in bits from the header's first bit."""
    out, offset = [], 0
    for fi in h.fields:
        out.append((fi, offset))
        offset += fi.width
    return out


class CCompiler:
    """One-shot translation of a compiled Program's JSON into C (module docstring)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.doc = program.json
        self.layout = program.layout
        self.slots = program.slots
        self.check_supported()
        self.out = Emitter()
        self.calc_out = Emitter()
        self.calcs: dict[str, str] = {}
        self.action_names = {a["id"]: a["name"] for a in self.doc.get("actions", [])}
        self.tables = [t["name"] for p in self.doc["pipelines"] for t in p.get("tables", [])]
        self.registers = list(program.registers)
        self.counters = list(program.counters)
        self.data_stride = max(
            [len(a.params) for a in program.actions.values()] + [1]
        )  # action data values per call in a table's call array

    # -- what the C path refuses, before emitting anything ---------------------------------

    def check_supported(self) -> None:
        lay = self.layout
        for kind, objs in (("header stacks", lay.stacks), ("header unions", lay.unions)):
            if objs:
                raise refuse(f"{kind} ({', '.join(objs)})")
        for h in lay.headers.values():
            for fi in h.fields:
                if fi.varbit or fi.signed or fi.width > MAX_BITS:
                    what = (
                        "a varbit" if fi.varbit else "signed" if fi.signed else f"{fi.width} bits"
                    )
                    raise refuse(f"field {h.name}.{fi.name} is {what}")
        for a in self.program.actions.values():
            for name, width in a.params:
                if width > MAX_BITS:
                    raise refuse(f"action {a.name} parameter {name} is {width} bits")
        for r in self.program.registers.values():
            if r.width > MAX_BITS:
                raise refuse(f"register {r.name} is {r.width} bits wide")
        for t in self.program.tables.values():
            if t.with_counters:
                raise refuse(f"direct counters (table {t.name})")
        if self.program.value_sets:
            raise refuse("parser value sets")

    # -- expressions -------------------------------------------------------------------------

    def fieldref(self, ref: list[str]) -> FieldInfo:
        return self.layout.resolve(ref[0], ref[1])

    def header(self, node: dict[str, Any]) -> HeaderInfo:
        node = unwrap(node)
        if node["type"] != "header":
            raise refuse(f"header expression {node['type']!r} (stacks and unions)")
        return self.layout.headers[node["value"]]

    def expr(self, node: dict[str, Any]) -> str:
        """C source for an rvalue: a u128 (or an int truth value)."""
        t, v = node["type"], node.get("value")
        if t == "field":
            return f"((u128)f[{self.fieldref(v).slot}])"
        if t == "hexstr":
            return const(hexint(v))
        if t == "bool":
            return "1" if v else "0"
        if t in ("runtime_data", "local"):
            return f"((u128)d[{int(v)}])"
        if t == "expression":
            return self.op(v) if "op" in v else self.expr(v)
        raise refuse(f"operand type {t!r}")

    def op(self, e: dict[str, Any]) -> str:
        op = e["op"]
        left, right = e.get("left"), e.get("right")
        header_ops = ("dereference_header_stack", "access_union_header", "dereference_union_stack")
        if (
            op in ("==", "!=")
            and left is not None
            and (unwrap(left)["type"] in ("header", "header_union") or op_of(left) in header_ops)
        ):
            raise refuse("header equality")
        if op in INFIX:
            if left is None:  # unary minus
                return f"(-{self.expr(right)})"
            return f"({self.expr(left)} {INFIX[op]} {self.expr(right)})"
        if op in ("<<", ">>"):
            amount = unwrap(right)
            if amount["type"] == "hexstr":
                n = hexint(amount["value"])
                return f"({self.expr(left)} {op} {n})" if 0 <= n < 128 else const(0)
            fn = "ect_shl" if op == "<<" else "ect_shr"
            return f"{fn}({self.expr(left)}, {self.expr(right)})"
        if op in PREFIX:
            return PREFIX[op].format(self.expr(right))
        if op == "valid":
            return f"(f[{self.header(right).valid_slot}] == 1)"
        if op == "?":
            return f"({self.expr(e['cond'])} ? {self.expr(left)} : {self.expr(right)})"
        if op == "access_field":
            h = self.header(left)
            return f"((u128)f[{h.fields[int(right)].slot}])"
        raise refuse(f"expression operator {op!r}")

    def store(self, dst: dict[str, Any], value: str) -> str:
        """A statement writing `value` to an lvalue, truncated to the field's width."""
        dst = unwrap(dst)
        if dst["type"] == "field":
            fi = self.fieldref(dst["value"])
        elif op_of(dst) == "access_field":
            fi = self.header(dst["value"]["left"]).fields[int(dst["value"]["right"])]
        else:
            raise refuse(f"assignment target {dst['type']!r}")
        return f"f[{fi.slot}] = (u64)(({value}) & {const((1 << fi.width) - 1)});"

    # -- calculations (hashes over fields, checksums) ----------------------------------------

    def calculation(self, name: str) -> str:
        """Name of a C function computing a named calculation (compile_parser's rules: a
        header's fields count only while the header is valid)."""
        if name in self.calcs:
            return self.calcs[name]
        calc = next(c for c in self.doc.get("calculations", []) if c["name"] == name)
        if calc["algo"] not in HASHES:
            raise refuse(f"hash algorithm {calc['algo']!r} (calculation {name!r})")
        em, bits = Emitter(), 0
        fname = f"calc_{len(self.calcs)}"
        em(f"static u64 {fname}(const u64 *f) {{")
        em.indent()
        body = Emitter()
        body.level = em.level
        for item in calc["input"]:
            t = item["type"]
            if t == "field":
                fi = self.fieldref(item["value"])
                valid = self.layout.resolve(item["value"][0], "$valid$").slot
                body(f"if (f[{valid}]) ect_pack(&pk, f[{fi.slot}], {fi.width});")
                bits += fi.width
            elif t == "hexstr":
                width = int(item["bitwidth"])
                if width > 128:
                    raise refuse(f"a {width}-bit constant in calculation {name!r}")
                body(f"ect_pack(&pk, {const(hexint(item['value']))}, {width});")
                bits += width
            elif t == "header":
                h = self.layout.headers[item["value"]]
                packs = " ".join(f"ect_pack(&pk, f[{fi.slot}], {fi.width});" for fi in h.fields)
                body(f"if (f[{h.valid_slot}]) {{ {packs} }}")
                bits += h.nbits
            else:
                raise refuse(f"calculation input {t!r} in {name!r} (the payload)")
        em(f"uint8_t buf[{bits // 8 + 2}] = {{0}};")
        em("ect_packer pk = {buf, 0};")
        em.lines += body.lines
        em(f"return {HASHES[calc['algo']]}(buf, (pk.nbits + 7) / 8);")
        em.dedent()
        em("}")
        self.calc_out.lines += em.lines
        self.calcs[name] = fname
        return fname

    # -- parser ------------------------------------------------------------------------------

    def parser(self, p: dict[str, Any]) -> None:
        em = self.out
        states = {s["name"]: s for s in p["parse_states"]}
        too_short = self.program.errors["PacketTooShort"]
        em("static void parse_states(u64 *f, ect_pkt *pkt) {")
        em.indent()
        em("const uint8_t *data = pkt->data;")
        em("u128 _k;")
        em("(void)data; (void)_k;")
        init = p.get("init_state")
        em(f"goto ps_{states[init]['id']};" if init else "return;")
        for s in p["parse_states"]:
            em(f"ps_{s['id']}:")
            for op in s["parser_ops"]:
                self.parser_op(op, too_short)
            self.transition(s, states)
        em.dedent()
        em("}")

    def parser_op(self, op: dict[str, Any], too_short: int) -> None:
        em = self.out
        kind, params = op["op"], op["parameters"]
        if kind == "extract":
            if params[0]["type"] != "regular":
                raise refuse(f"extract into {params[0]['type']!r}")
            h = self.layout.headers[params[0]["value"]]
            if h.nbits % 8:
                raise Unsupported(f"header {h.name!r} is not a whole number of bytes")
            em(f"if (pkt->pos + {h.nbytes} > pkt->len) {{ pkt->error = {too_short}; return; }}")
            for fi, offset in bit_offsets(h):
                em(f"f[{fi.slot}] = ect_get_bits(data + pkt->pos, {offset}, {fi.width});")
            em(f"f[{h.valid_slot}] = 1;")
            em(f"pkt->pos += {h.nbytes};")
        elif kind == "set":
            em(self.store(params[0], self.expr(params[1])))
        elif kind == "verify":
            cond, code = self.expr(params[0]), self.expr(params[1])
            em(f"if (!{cond}) {{ pkt->error = (u64){code}; return; }}")
        elif kind in ("advance", "shift"):
            amount = self.expr(params[0])
            em(f"{{ u128 _n = {amount}{' / 8' if kind == 'advance' else ''};")
            em(f"  if (pkt->pos + _n > pkt->len) {{ pkt->error = {too_short}; return; }}")
            em("  pkt->pos += (u64)_n; }")
        elif kind == "primitive":
            self.primitive(params[0])
        else:
            raise refuse(f"parser operation {kind!r}")

    def transition(self, s: dict[str, Any], states: dict[str, Any]) -> None:
        em = self.out

        def goto(name: str | None) -> str:
            return "return;" if name is None else f"goto ps_{states[name]['id']};"

        parts: list[tuple[int, str]] = []
        for k in s.get("transition_key", []):
            if k["type"] != "field":
                raise refuse(f"transition key type {k['type']!r}")
            fi = self.fieldref(k["value"])
            parts.append((fi.width, f"((u128)f[{fi.slot}])"))
        total, key_parts = 0, []
        for width, code in reversed(parts):
            key_parts.append(f"({code} << {total})" if total else code)
            total += (width + 7) // 8 * 8
        if total > 128:
            raise refuse(f"a {total}-bit select key in parse state {s['name']!r}")
        em(f"_k = {' | '.join(reversed(key_parts)) or '0'};")
        for tr in s["transitions"]:
            ttype = tr.get(
                "type", "hexstr" if tr.get("value") not in (None, "default") else "default"
            )
            if ttype == "default":
                em(goto(tr["next_state"]))
                return
            if ttype != "hexstr":
                raise refuse(f"parser transition type {ttype!r}")
            value = hexint(tr["value"])
            if tr.get("mask"):
                mask = hexint(tr["mask"])
                em(f"if ((_k & {const(mask)}) == {const(value & mask)}) {goto(tr['next_state'])}")
            else:
                em(f"if (_k == {const(value)}) {goto(tr['next_state'])}")
        em("return;")

    # -- deparser and checksums -------------------------------------------------------------

    def deparser(self, d: dict[str, Any]) -> None:
        em = self.out
        em("int64_t ect_deparse(u64 *f, ect_pkt *pkt, uint8_t *out, u64 cap) {")
        em.indent()
        em("update_checksums(f, pkt);")
        em("u64 n = 0;")
        for name in d["order"]:
            h = self.layout.headers[name]
            em(f"if (f[{h.valid_slot}]) {{")
            em.indent()
            em(f"if (n + {h.nbytes} > cap) return -1;")
            em(f"memset(out + n, 0, {h.nbytes});")
            for fi, offset in bit_offsets(h):
                em(f"ect_put_bits(out + n, {offset}, {fi.width}, f[{fi.slot}]);")
            em(f"n += {h.nbytes};")
            em.dedent()
            em("}")
        em("u64 rest = pkt->len > pkt->pos ? pkt->len - pkt->pos : 0;")
        em("if (n + rest > cap) return -1;")
        em("memcpy(out + n, pkt->data + pkt->pos, rest);")
        em("return (int64_t)(n + rest);")
        em.dedent()
        em("}")

    def checksums(self, checksums: list[dict[str, Any]]) -> None:
        em = self.out
        for fname, update in (("update_checksums", True), ("verify_checksums", False)):
            em(f"static void {fname}(u64 *f, ect_pkt *pkt) {{")
            em.indent()
            em("(void)f; (void)pkt;")
            for c in checksums:
                if not c.get("update" if update else "verify", True):
                    continue
                if c.get("type", "generic") not in ("generic", "ipv4"):
                    raise refuse(f"checksum type {c.get('type')!r}")
                target = self.fieldref(c["target"])
                calc = self.calculation(c["calculation"])
                cond = self.expr(c["if_cond"]) if c.get("if_cond") else "1"
                if update:
                    mask = (1 << target.width) - 1
                    em(f"if ({cond}) f[{target.slot}] = {calc}(f) & {mask}ULL;")
                else:
                    em(f"if ({cond} && {calc}(f) != f[{target.slot}]) pkt->cksum_error = 1;")
            em.dedent()
            em("}")

    # -- actions and their primitives --------------------------------------------------------

    def action(self, a: dict[str, Any]) -> None:
        em = self.out
        prims = a.get("primitives", [])
        em(f"static void a_{a['id']}(u64 *f, const u64 *d, ect_pkt *pkt) {{")
        em.indent()
        em("(void)f; (void)d; (void)pkt;")
        jumps = any(p["op"] in JUMPS for p in prims)
        for i, p in enumerate(prims):
            if jumps:
                em(f"L{i}:;")
            if p["op"] == "_jump":
                em(f"goto L{self.jump_target(p['parameters'][0], len(prims))};")
            elif p["op"] == "_jump_if_zero":
                target = self.jump_target(p["parameters"][1], len(prims))
                em(f"if (!{self.expr(p['parameters'][0])}) goto L{target};")
            else:
                self.primitive(p)
        if jumps:
            em(f"L{len(prims)}:;")
        em.dedent()
        em("}")

    def jump_target(self, node: dict[str, Any], n: int) -> int:
        node = unwrap(node)
        if node["type"] != "hexstr" or not 0 <= hexint(node["value"]) <= n:
            raise refuse("a jump to a computed or missing offset inside an action")
        return hexint(node["value"])

    def primitive(self, p: dict[str, Any]) -> None:
        em = self.out
        op, params = p["op"], p.get("parameters", [])
        x = self.expr
        if op in ("assign", "modify_field"):
            em(self.store(params[0], x(params[1])))
        elif op in ("assign_header", "copy_header"):
            dst, src = (self.header(q) for q in params[:2])
            copies = " ".join(
                f"f[{a.slot}] = f[{b.slot}];" for a, b in zip(dst.fields, src.fields, strict=True)
            )
            em(f"if (!f[{src.valid_slot}]) f[{dst.valid_slot}] = 0;")
            em(f"else {{ {copies} f[{dst.valid_slot}] = 1; }}")
        elif op == "add_header":
            h = self.header(params[0])
            zero = " ".join(f"f[{fi.slot}] = 0;" for fi in h.fields)
            grow = f"f[{h.valid_slot}] = 1; pkt->length += {h.nbytes};"
            em(f"if (!f[{h.valid_slot}]) {{ {zero} {grow} }}")
        elif op == "add_header_fast":
            em(f"f[{self.header(params[0]).valid_slot}] = 1;")
        elif op == "remove_header":
            h = self.header(params[0])
            em(f"if (f[{h.valid_slot}]) {{ pkt->length -= {h.nbytes}; f[{h.valid_slot}] = 0; }}")
        elif op in ("mark_to_drop", "drop"):
            em(f"f[{self.slots['standard_metadata.egress_spec']}] = {DROP_PORT};")
            if "standard_metadata.mcast_grp" in self.slots:
                em(f"f[{self.slots['standard_metadata.mcast_grp']}] = 0;")
        elif op == "exit":
            em("pkt->exit = 1; return;")
        elif op in ("no_op", "log_msg"):  # log_msg: Python logs it at debug level only
            pass
        elif op in ("assert", "assume"):
            em(f"if (!{x(params[0])}) {{ pkt->fault = 1; return; }}")
        elif op == "generate_digest":
            em(f"pkt->learn_id = (u64){x(params[1])};")
        elif op in ("clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress"):
            em(f"pkt->clone_session = (u64){x(params[0])};")
            em(f"pkt->clone_fl = (u64){x(params[1])};")
        elif op in ("resubmit", "recirculate"):
            em(f"pkt->{op} = (u64){x(params[0])};")
        elif op == "truncate":
            em(f"{{ u64 _t = (u64){x(params[0])};")
            em("  pkt->truncate = pkt->truncate && pkt->truncate < _t ? pkt->truncate : _t; }")
        else:
            self.extern_primitive(op, params)

    def extern_primitive(self, op: str, params: list[dict[str, Any]]) -> None:
        em = self.out
        x = self.expr
        if op == "count":
            i = self.counters.index(params[0]["value"])
            size = self.program.counters[params[0]["value"]].size
            em(f"{{ u128 _i = {x(params[1])};")
            em(f"  if (_i < {size}) {{ ect_cnt_pkts[{i}][_i] += 1; "
               f"ect_cnt_bytes[{i}][_i] += pkt->length; }} }}")  # fmt: skip
        elif op == "register_read":
            i = self.registers.index(params[1]["value"])
            size = self.program.registers[params[1]["value"]].size
            em(f"{{ u128 _i = {x(params[2])};")
            em(f"  if (_i < {size}) {{ {self.store(params[0], f'ect_reg[{i}][_i]')} }} }}")
        elif op == "register_write":
            reg = self.program.registers[params[0]["value"]]
            i = self.registers.index(reg.name)
            em(f"{{ u128 _i = {x(params[1])};")
            value = f"(u64)({x(params[2])} & {const(reg.mask)})"
            em(f"  if (_i < {reg.size}) ect_reg[{i}][_i] = {value}; }}")
        elif op == "modify_field_with_hash_based_offset":
            calc = self.calculation(params[2]["value"])
            em(f"{{ u128 _size = {x(params[3])}; if (!_size) _size = 1;")
            em(f"  {self.store(params[0], f'{x(params[1])} + (u128){calc}(f) % _size')} }}")
        elif op == "modify_field_rng_uniform":
            em(f"{{ u128 _lo = {x(params[1])}, _hi = {x(params[2])};")
            draw = self.store(params[0], "_lo + (u128)ect_rand() % (_hi - _lo + 1)")
            em(f"  if (_lo <= _hi) {{ {draw} }} }}")
        else:
            raise refuse(f"primitive {op!r}")

    # -- control flow ------------------------------------------------------------------------

    def pipeline(self, p: dict[str, Any]) -> None:
        em = self.out
        labels = {t["name"]: f"n_{t['id']}" for t in p.get("tables", [])}
        labels |= {c["name"]: f"c_{c['id']}" for c in p.get("conditionals", [])}
        labels |= {a["name"]: f"ac_{a['id']}" for a in p.get("action_calls", [])}

        def goto(name: str | None) -> str:
            return "return;" if name is None else f"goto {labels[name]};"

        em(f"void ect_{p['name']}(u64 *f, ect_pkt *pkt) {{")
        em.indent()
        em(goto(p.get("init_table")))
        for t in p.get("tables", []):
            self.table(t, goto)
        for c in p.get("conditionals", []):
            em(f"c_{c['id']}:")
            em(f"if ({self.expr(c['expression'])}) {goto(c.get('true_next'))}")
            em(goto(c.get("false_next")))
        for a in p.get("action_calls", []):
            em(f"ac_{a['id']}:")
            em(f"a_{a['action_id']}(f, ECT_NO_DATA, pkt); {ABORT}")
            em(goto(a.get("next_node")))
        em.dedent()
        em("}")

    def table(self, t: dict[str, Any], goto: Any) -> None:
        em = self.out
        i = self.tables.index(t["name"])
        em(f"n_{t['id']}: {{")
        em.indent()
        em(f"const ect_table *T = ect_tab[{i}];")
        keys = []
        for k in t["key"]:
            if k["match_type"] == "valid":
                hdr = k["target"] if isinstance(k["target"], str) else k["target"][0]
                code = f"f[{self.layout.headers[hdr].valid_slot}]"
            else:
                code = f"f[{self.fieldref(k['target']).slot}]"
            if k.get("mask"):
                code = f"({code} & {hexint(k['mask'])}ULL)"
            keys.append(code)
        if keys:
            em(f"const u64 key[{len(keys)}] = {{{', '.join(keys)}}};")
            em("int64_t e = ect_lookup(T, key);")
        else:
            em("int64_t e = T->n_entries ? 0 : -1;")
        em(f"int64_t c = ect_call(T, e, {self.selector_hash(t)});")
        em("int64_t a = c >= 0 ? T->action[c] : -1;")
        em(f"if (c >= 0) {{ ect_run(a, f, T->data + c * {self.data_stride}, pkt); {ABORT} }}")
        nt = t.get("next_tables", {})
        if "__HIT__" in nt:
            em(f"if (e >= 0) {goto(nt['__HIT__'])}")
            em(goto(nt["__MISS__"]))
        else:
            base = t.get("base_default_next")
            cases = [
                f"case {aid}: {goto(nt[self.action_names[aid]])}"
                for aid in t.get("action_ids", [])
                if nt.get(self.action_names[aid], base) != base
            ]
            if cases:
                em(f"switch (a) {{ {' '.join(cases)} default: break; }}")
            em(goto(base))
        em.dedent()
        em("}")

    def selector_hash(self, t: dict[str, Any]) -> str:
        """The selector's hash over its fields (no validity test, as ActionProfile.select)."""
        if t.get("type") != "indirect_ws":
            return "0"
        prof = next(
            a
            for p in self.doc["pipelines"]
            for a in p.get("action_profiles", [])
            if a["name"] == t["action_profile"]
        )
        sel = prof["selector"]
        if sel["algo"] not in HASHES:
            raise refuse(f"selector hash {sel['algo']!r}")
        fields = [self.fieldref(i["value"]) for i in sel["input"]]
        packs = " ".join(f"ect_pack(&pk, f[{fi.slot}], {fi.width});" for fi in fields)
        nbytes = sum(fi.width for fi in fields) // 8 + 2
        return (
            f"({{ uint8_t buf[{nbytes}] = {{0}}; ect_packer pk = {{buf, 0}}; {packs} "
            f"{HASHES[sel['algo']]}(buf, (pk.nbits + 7) / 8); }})"
        )

    # -- the whole translation unit ---------------------------------------------------------

    def source(self, runtime_h: str) -> str:
        """The C translation unit: runtime, state, calculations, functions, entry points."""
        doc = self.doc
        self.parser(doc["parsers"][0])
        self.checksums(doc.get("checksums", []))
        self.deparser(doc["deparsers"][0])
        for a in doc.get("actions", []):
            self.action(a)
        em = self.out
        em("static void ect_run(int64_t aid, u64 *f, const u64 *d, ect_pkt *pkt) {")
        em.indent()
        em("switch (aid) {")
        for aid in self.action_names:
            em(f"case {aid}: a_{aid}(f, d, pkt); break;")
        em("default: break;")
        em("}")
        em.dedent()
        em("}")
        for p in doc["pipelines"]:
            self.pipeline(p)
        em("void ect_parse(u64 *f, ect_pkt *pkt) {")
        em.indent()("parse_states(f, pkt);")
        em("if (!pkt->fault) verify_checksums(f, pkt);")
        em.dedent()
        em("}")
        n = max(len(self.tables), 1), max(len(self.registers), 1), max(len(self.counters), 1)
        state = [
            f"const ect_table *ect_tab[{n[0]}];",
            f"u64 *ect_reg[{n[1]}];",
            f"u64 *ect_cnt_pkts[{n[2]}];",
            f"u64 *ect_cnt_bytes[{n[2]}];",
            f"static const u64 ECT_NO_DATA[{self.data_stride}];",
            f"const int64_t ect_n_slots = {self.layout.n_slots};",
            f"const int64_t ect_data_stride = {self.data_stride};",
        ]
        prototypes = [
            f"static void a_{aid}(u64 *f, const u64 *d, ect_pkt *pkt);" for aid in self.action_names
        ] + ["static void update_checksums(u64 *f, ect_pkt *pkt);"]
        return "\n".join([runtime_h, *state, *prototypes, *self.calc_out.lines, *em.lines, ""])
