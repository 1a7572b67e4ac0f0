"""Expressions of BMv2 JSON as Python source: operands, operators, header references, stores.

Every other part of the compiler builds on these (bmv2's expressions.cpp): an rvalue
becomes a Python expression over the field vector `f`, action data `d` and the packet
`pkt`; an lvalue becomes a statement that truncates to the destination field's width.
Objects the code needs at run time (tables, registers, stack index lists) are bound into
the generated module's globals under fresh names (`bind`).

A header operand is either static (`{"type": "header"}`) or found at run time: a stack
element by index (`dereference_header_stack`), a union's member (`access_union_header`)
of a static union or of a union-stack element (`dereference_union_stack`). Run-time ones
compile to the header's position in runtime.HeaderTable, checked against the stack's
depth (`stack_at`). p4c wraps an expression operand of a primitive in one more
`{"type": "expression", "value": ...}` layer than an operand inside an expression;
`unwrap` removes such layers wherever a node's kind is inspected.
"""

from __future__ import annotations

from typing import Any

from ecntune.switch.layout import FieldInfo, HeaderInfo, Layout, Unsupported


def unwrap(node: dict[str, Any]) -> dict[str, Any]:
    """The type-value node under any `{"type": "expression", "value": <type-value>}` layers."""
    while node["type"] == "expression" and "op" not in node["value"]:
        node = node["value"]
    return node


def op_of(node: dict[str, Any]) -> str | None:
    """The operator of an expression node (after unwrapping), None for any other node."""
    node = unwrap(node)
    return node["value"]["op"] if node["type"] == "expression" else None


HEADER_OPS = ("dereference_header_stack", "access_union_header")


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
        if t == "stack_field":  # [stack, field]: the field of the element extracted last
            stack = self.stack(v[0])
            elements = [[self.hidx(h)] for h in stack.headers]
            return self.field_of_element(stack.name, elements, 0, v[1])
        if t == "union_stack_field":  # [union stack, member, field]
            ustack = self.union_stack(v[0])
            elements = [self.union_members(u) for u in ustack.unions]
            member = self.layout.unions[ustack.unions[0]].offset(v[1])
            return self.field_of_element(ustack.name, elements, member, v[2])
        if t == "header":
            raise Unsupported(f"header {v!r} used as a value")
        raise Unsupported(f"operand type {t!r}")

    def field_of_element(
        self, stack: str, elements: list[list[int]], member: int, field: str
    ) -> str:
        """f[...] of `field` in member `member` of the stack element extracted last."""
        first = self.layout.headers[list(self.layout.headers)[elements[0][member]]]
        offset = [fi.name for fi in first.fields].index(field)
        bases = self.bind("_LAST", [self.ns["_H_BASE"][e[member]] for e in elements])
        return f"f[{bases}[stack_last(pkt, {stack!r})] + {offset}]"

    def op(self, e: dict[str, Any]) -> str:
        op = e["op"]
        left, right = e.get("left"), e.get("right")
        if op in ("==", "!=") and left is not None and self.is_header_like(left):
            eq = self.equal(left, right)
            return eq if op == "==" else f"(not {eq})"
        if op in INFIX:
            if left is None:  # unary minus
                return f"(-{self.expr(right)})"
            return f"({self.expr(left)} {INFIX[op]} {self.expr(right)})"
        if op in PREFIX:
            return PREFIX[op].format(self.expr(right))
        if op == "valid":
            return f"(f[{self.header_valid_slot(right)}] == 1)"
        if op == "valid_union":
            return f"any(f[_H_VALID[_h]] for _h in {self.union_ref(right)})"
        if op in CASTS:
            return f"{op}({self.expr(left)}, {self.expr(right)})"
        if op == "?":
            return f"({self.expr(left)} if {self.expr(e['cond'])} else {self.expr(right)})"
        if op == "access_field":
            base = self.header_base(left)
            return f"f[{base} + {int(right)}]"
        if op in ("last_stack_index", "size_stack"):
            stack = self.stack(unwrap(right)["value"])
            nxt = f"stack_next(pkt, {stack.name!r})"
            return f"({nxt} - 1)" if op == "last_stack_index" else nxt
        raise Unsupported(f"expression operator {op!r}")

    # -- header references -------------------------------------------------------------------

    def stack(self, name: str) -> Any:
        try:
            return self.layout.stacks[name]
        except KeyError:
            raise Unsupported(f"unknown header stack {name!r}") from None

    def union_stack(self, name: str) -> Any:
        try:
            return self.layout.union_stacks[name]
        except KeyError:
            raise Unsupported(f"unknown header union stack {name!r}") from None

    def union_members(self, union: str) -> list[int]:
        return [self.hidx(h) for h in self.layout.unions[union].headers]

    def union_ref(self, node: dict[str, Any]) -> str:
        """Source for the list of a union's member positions (static or a union-stack element)."""
        node = unwrap(node)
        if node["type"] == "header_union":
            return str(self.union_members(node["value"]))
        if op_of(node) == "dereference_union_stack":
            e = node["value"]
            ustack = self.union_stack(unwrap(e["left"])["value"])
            elements = self.bind("_USTACK", [self.union_members(u) for u in ustack.unions])
            return f"stack_at({elements}, {self.expr(e['right'])})"
        raise Unsupported(f"header union expression {node!r}")

    def is_header_like(self, node: dict[str, Any]) -> bool:
        node = unwrap(node)
        return node["type"] in ("header", "header_union") or op_of(node) in (
            *HEADER_OPS,
            "dereference_union_stack",
        )

    def equal(self, left: dict[str, Any], right: dict[str, Any]) -> str:
        """Header (or union) equality as bmv2 compares them: the same member valid in both
        with equal fields (two invalid headers are unequal)."""
        if unwrap(left)["type"] == "header_union" or op_of(left) == "dereference_union_stack":
            return f"unions_equal(_HT, f, {self.union_ref(left)}, {self.union_ref(right)})"
        return f"headers_equal(_HT, f, {self.header_index(left)}, {self.header_index(right)})"

    def header_valid_slot(self, node: dict[str, Any]) -> str:
        """Slot expression of a header's validity (static or found at run time)."""
        node = unwrap(node)
        if node["type"] == "header":
            return str(self.header(node["value"]).valid_slot)
        return f"_H_VALID[{self.header_index(node)}]"

    def header_base(self, node: dict[str, Any]) -> str:
        node = unwrap(node)
        if node["type"] == "header":
            return str(self.header(node["value"]).fields[0].slot)
        return f"_H_BASE[{self.header_index(node)}]"

    def header_index(self, node: dict[str, Any]) -> str:
        """Source for a header's position in runtime.HeaderTable (module docstring)."""
        node = unwrap(node)
        if node["type"] == "header":
            return str(self.hidx(node["value"]))
        op = op_of(node)
        e = node["value"] if op else {}
        if op == "dereference_header_stack":
            stack = self.stack(unwrap(e["left"])["value"])
            ids = self.bind("_STACK", [self.hidx(h) for h in stack.headers])
            return f"stack_at({ids}, {self.expr(e['right'])})"
        if op == "access_union_header":
            member = int(e["right"])
            union = unwrap(e["left"])
            if union["type"] == "header_union":
                return str(self.union_members(union["value"])[member])
            return f"{self.union_ref(union)}[{member}]"
        raise Unsupported(f"header expression {node!r}")

    def header_type_of(self, node: dict[str, Any]) -> HeaderInfo:
        """A header instance of the type a header operand has (for field widths)."""
        node = unwrap(node)
        if node["type"] == "header":
            return self.header(node["value"])
        e = node["value"]
        if op_of(node) == "dereference_header_stack":
            return self.header(self.stack(unwrap(e["left"])["value"]).headers[0])
        if op_of(node) == "access_union_header":
            union = unwrap(e["left"])
            if union["type"] != "header_union":
                union_e = union["value"]
                union = {"value": self.union_stack(unwrap(union_e["left"])["value"]).unions[0]}
            return self.header(self.layout.unions[union["value"]].headers[int(e["right"])])
        raise Unsupported(f"header expression {node!r}")

    def hidx(self, name: str) -> int:
        """A header instance's position (its index in runtime.HeaderTable)."""
        return list(self.layout.headers).index(name)

    # -- lvalues -----------------------------------------------------------------------------

    def store(self, dst: dict[str, Any], value: str) -> str:
        """A statement writing `value` to an lvalue, truncated to the field's width."""
        dst = unwrap(dst)
        if dst["type"] == "field":
            fi = self.fieldref(dst["value"])
            return f"f[{fi.slot}] = {self.fit(value, fi)}"
        if op_of(dst) == "access_field":
            e = dst["value"]
            offset = int(e["right"])
            fi = self.header_type_of(e["left"]).fields[offset]
            return f"f[{self.header_base(e['left'])} + {offset}] = {self.fit(value, fi)}"
        raise Unsupported(f"assignment target {dst['type']!r}")

    @staticmethod
    def fit(value: str, fi: FieldInfo) -> str:
        if fi.signed:
            return f"two_comp_mod({value}, {fi.width})"
        return f"({value}) & {(1 << fi.width) - 1}"
