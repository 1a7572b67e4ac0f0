"""Expressions of BMv2 JSON as Python source: operands, operators, header references, stores.

Every other part of the compiler builds on these (bmv2's expressions.cpp): an rvalue
becomes a Python expression over the field vector `f`, action data `d` and the packet
`pkt`; an lvalue becomes a statement that truncates to the destination field's width.
Objects the code needs at run time (tables, registers, stack index lists) are bound into
the generated module's globals under fresh names (`bind`).
"""

from __future__ import annotations

from typing import Any

from ecntune.switch.layout import FieldInfo, HeaderInfo, Layout, Unsupported


def hexint(value: str) -> int:
    """A BMv2 JSON hex string ("0x0a", "-0x01") as an int."""
    return -int(value[1:], 16) if value.startswith("-") else int(value, 16)


class Emitter:
    """Lines of Python source at an indentation level."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def indent(self) -> Emitter:
        self.level += 1
        return self

    def dedent(self) -> None:
        self.level -= 1


INFIX = {
    "+": "+", "-": "-", "*": "*", "<<": "<<", ">>": ">>", "&": "&", "|": "|", "^": "^",
    "==": "==", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<=", "and": "and", "or": "or",
}  # fmt: skip
PREFIX = {"not": "(not {})", "~": "(~{})", "d2b": "({} != 0)", "b2d": "(1 if {} else 0)"}
CASTS = ("two_comp_mod", "sat_cast", "usat_cast")  # runtime.py has a helper of each name


class ExpressionCompiler:
    """Mixin of Compiler: names, bindings and expressions. State is created by Compiler."""

    layout: Layout
    ns: dict[str, Any]  # the generated module's globals
    regs: dict[str, str]  # register array name -> its global's name
    _unique: int

    # -- names and bindings ----------------------------------------------------------------

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

    def register(self, name: str) -> str:
        return self.regs[name]

    # -- rvalues ---------------------------------------------------------------------------

    def expr(self, node: dict[str, Any]) -> str:
        """Python source for an rvalue (int or bool)."""
        t, v = node["type"], node.get("value")
        if t == "field":
            return f"f[{self.fieldref(v).slot}]"
        if t == "hexstr":
            return str(hexint(v))
        if t == "bool":
            return "True" if v else "False"
        if t in ("runtime_data", "local"):
            return f"d[{int(v)}]"
        if t == "expression":  # actions wrap an expression in one more type-value layer
            return self.op(v) if "op" in v else self.expr(v)
        if t == "lookahead":
            offset, width = v
            return f"lookahead(pkt, {offset}, {width})"
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
        if op in INFIX:
            if left is None:  # unary minus
                return f"(-{self.expr(right)})"
            return f"({self.expr(left)} {INFIX[op]} {self.expr(right)})"
        if op in PREFIX:
            return PREFIX[op].format(self.expr(right))
        if op == "valid":
            return f"(f[{self.header_valid_slot(right)}] == 1)"
        if op == "valid_union":
            union = self.layout.unions[right["value"]]
            slots = [self.header(h).valid_slot for h in union.headers]
            return "(" + " or ".join(f"f[{s}] == 1" for s in slots) + ")"
        if op in CASTS:
            return f"{op}({self.expr(left)}, {self.expr(right)})"
        if op == "?":
            return f"({self.expr(left)} if {self.expr(e['cond'])} else {self.expr(right)})"
        if op == "access_field":
            base = self.header_base(left)
            return f"f[{base} + {int(right)}]"
        if op in ("last_stack_index", "size_stack"):
            stack = self.layout.stacks[right["value"]]
            nxt = f"stack_next(pkt, {stack.name!r})"
            return f"({nxt} - 1)" if op == "last_stack_index" else nxt
        raise Unsupported(f"expression operator {op!r}")

    # -- header references -------------------------------------------------------------------

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
            ids = self.bind("_STACK", [self.hidx(h) for h in stack.headers])
            return f"{ids}[{self.expr(node['value']['right'])}]"
        if node["type"] == "header":
            return str(self.hidx(node["value"]))
        raise Unsupported(f"header expression {node!r}")

    def hidx(self, name: str) -> int:
        """A header instance's position (its index in runtime.HeaderTable)."""
        return list(self.layout.headers).index(name)

    # -- lvalues -----------------------------------------------------------------------------

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
            return f"two_comp_mod({value}, {fi.width})"
        return f"({value}) & {(1 << fi.width) - 1}"
