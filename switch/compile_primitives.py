"""Actions of BMv2 JSON as Python functions, one primitive call at a time (bmv2's actions).

An action becomes `a_<id>(f, d, pkt)` where `d` is its action data. Primitives that only
move fields are inlined; header copies and stacks call runtime.py's helper of the same
name; externs (registers, counters, meters) are bound objects whose methods the code
calls. A register index out of range is ignored, as in behavioral-model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ecntune.switch.compile_expressions import Emitter, ExpressionCompiler
from ecntune.switch.layout import Unsupported

JUMPS = ("_jump", "_jump_if_zero")  # p4c's encoding of if/else inside an action body


class PrimitiveCompiler(ExpressionCompiler):
    """Mixin of Compiler: primitives and action bodies. State is created by Compiler."""

    out: Emitter
    slots: dict[str, int]  # standard/intrinsic/queueing metadata slots by dotted name
    counters_ns: dict[str, str]  # indirect counter name -> its global's name
    meters_ns: dict[str, str]  # meter name -> its global's name
    calculation: Callable[[str], str]  # compile_parser.ParserCompiler's

    def action(self, a: dict[str, Any]) -> None:
        em = self.out
        prims = a.get("primitives", [])
        em(f"def a_{a['id']}(f, d, pkt):")
        em.indent()
        if any(p["op"] in JUMPS for p in prims):
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

    def primitive(self, p: dict[str, Any], em: Emitter) -> None:
        op, params = p["op"], p.get("parameters", [])
        x = self.expr
        if op in ("assign", "modify_field"):
            em(self.store(params[0], x(params[1])))
        elif op == "assign_VL":  # a varbit: its value and its length
            dst, src = (self.fieldref(q["value"]) for q in params)
            em(f"f[{dst.slot}], f[{dst.len_slot}] = f[{src.slot}], f[{src.len_slot}]")
        elif op in ("assign_header", "copy_header"):
            dst, src = (self.header_index(q) for q in params[:2])
            em(f"copy_header(_HT, f, {dst}, {src})")
        elif op == "assign_union":
            dst, src = (self.union_ref(q) for q in params)
            em(f"for _a, _b in zip({dst}, {src}):")
            em.indent()("copy_header(_HT, f, _a, _b)")
            em.dedent()
        elif op in ("assign_header_stack", "assign_union_stack"):
            (dst, dst_ids), (src, src_ids) = (self.stack_elements(q) for q in params)
            for a, b in zip(dst_ids, src_ids, strict=True):
                for ha, hb in zip(a, b, strict=True):
                    em(f"copy_header(_HT, f, {ha}, {hb})")
            em(f"stack_set_next(pkt, {dst!r}, stack_next(pkt, {src!r}))")
        elif op in ("push", "pop"):
            stack, ids = self.stack_elements(params[0])
            union = params[0]["type"] == "header_union_stack"
            em(f"stack_{op}(_HT, f, pkt, {stack!r}, {ids}, {x(params[1])}, {union})")
        elif op in ("add_header", "add_header_fast", "remove_header"):
            idx = self.header_index(params[0])
            em(f"{op}(_HT, f, pkt, {idx})")
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
            em.indent()(f"log.debug(format_log({fmt!r}, [{args}]))")
            em.dedent()
        elif op == "generate_digest":
            em(f"pkt.learn_id = {x(params[1])}")
        elif op in ("clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress"):
            em(f"pkt.clone_session = {x(params[0])}")
            em(f"pkt.clone_fl = {x(params[1])}")
        elif op in ("resubmit", "recirculate"):  # field list 0: none (simple_switch's flag)
            em(f"pkt.{op} = {x(params[0])}")
        elif op == "truncate":  # several calls: the shortest length holds (bmv2's Packet)
            em(f"_t = {x(params[0])}")
            em("pkt.truncate = min(pkt.truncate, _t) if pkt.truncate else _t")
        else:
            self.extern_primitive(op, params, em)

    def stack_elements(self, node: dict[str, Any]) -> tuple[str, list[list[int]]]:
        """A header stack's or union stack's name and its elements' header positions."""
        if node["type"] == "header_union_stack":
            ustack = self.union_stack(node["value"])
            return ustack.name, [self.union_members(u) for u in ustack.unions]
        stack = self.stack(node["value"])
        return stack.name, [[self.hidx(h)] for h in stack.headers]

    def extern_primitive(self, op: str, params: list[dict[str, Any]], em: Emitter) -> None:
        """Primitives on counters, meters, registers, hashes and the random source."""
        x = self.expr
        if op == "count":
            counter = self.counters_ns[params[0]["value"]]
            em(f"{counter}.count({x(params[1])}, pkt.length)")
        elif op == "execute_meter":
            meter = self.meters_ns[params[0]["value"]]
            em(self.store(params[2], f"{meter}.execute({x(params[1])}, pkt.length)"))
        elif op == "register_read":
            reg = self.register(params[1]["value"])
            em(f"_i = {x(params[2])}")
            em(f"if 0 <= _i < {reg}.size:")
            em.indent()(self.store(params[0], f"{reg}.values[_i]"))
            em.dedent()
        elif op == "register_write":
            reg = self.register(params[0]["value"])
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
