"""Symbolic sizes: torch.export's SymInts as ONNX int64 tensors computed from input shapes.

A dim export kept dynamic (a batch, a sequence length) is a sympy symbol in every FakeTensor shape and SymInt of the graph
(`s0`, `5*s0`, `s0 // 2`). Each symbol has a source, a dim of a graph input, read with
Shape(x, start=d, end=d+1), or, for an unbacked u<k> read with `.item()`, the graph tensor holding
it; any expression over the symbols is then built from Add / Mul / Div / Max / Min on 1-element
int64 tensors. This is how view / reshape / expand / full with a symbolic batch
become shape tensors the engine evaluates per run. Lowered expressions are cached, so `s0` is read
once however many views use it.
"""

from __future__ import annotations

import sympy
import torch
from torch.utils._sympy import functions as symfn

from trainrt.capture.errors import CaptureError
from trainrt.capture.onnx_builder import GraphBuilder

# sympy / torch size functions of any arity and the ONNX op folding them pairwise.
_VARIADIC = {sympy.Add: "Add", sympy.Mul: "Mul", sympy.Max: "Max", sympy.Min: "Min", symfn.Max: "Max", symfn.Min: "Min"}


# sympy relations and the ONNX comparison computing them (NotEqual: Not of Equal)
_RELATIONS = {sympy.GreaterThan: "GreaterOrEqual", sympy.StrictGreaterThan: "Greater", sympy.LessThan: "LessOrEqual",
              sympy.StrictLessThan: "Less", sympy.Equality: "Equal", sympy.Unequality: "NotEqual"}


def sym_expr(value) -> sympy.Expr:
    """The sympy expression of an int, SymInt or sympy expression (an int gives a sympy Integer)."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return sympy.Integer(int(value))


def is_static(value) -> bool:
    """True when an int or SymInt has one known value."""
    return sym_expr(value).is_number


class SymbolTable:
    """Lowers size expressions to 1-element int64 ONNX tensors; names dims for graph I/O types."""

    def __init__(self, builder: GraphBuilder) -> None:
        self._b = builder
        self._sources: dict[sympy.Symbol, tuple[str, int]] = {}
        self._names: dict[sympy.Symbol, str] = {}
        self._lowered: dict[sympy.Expr, str] = {}

    def add_source(self, value: str, shape, name_dim0: str | None = None) -> None:
        """Records the symbols among a graph input's dims; `name_dim0` names the first symbolic dim 0
        seen (the batch), other symbols keep export's names (s0, s1, ...)."""
        for d, size in enumerate(shape):
            expr = sym_expr(size)
            if isinstance(expr, sympy.Symbol) and expr not in self._sources:
                self._sources[expr] = (value, d)
                first_dim0 = d == 0 and name_dim0 and name_dim0 not in self._names.values()
                self._names[expr] = name_dim0 if first_dim0 else str(expr)

    def add_value(self, symbol, value: str) -> None:
        """Records a symbol whose value a graph tensor holds: an unbacked u<k> of `.item()` /
        `.tolist()` (ops_factory.item), `value` its [1]-shaped int64 tensor, which lowering then
        reads directly (JetMoE splits its tokens by per-expert counts read this way)."""
        expr = sym_expr(symbol)
        self._lowered[expr] = value
        self._names.setdefault(expr, str(expr))

    def dims(self, shape) -> list[int | str | None]:
        """ONNX dims of a shape: ints, dim_param names for symbols, None for compound expressions."""
        out: list[int | str | None] = []
        for size in shape:
            expr = sym_expr(size)
            if expr.is_number:
                out.append(int(expr))
            else:
                out.append(self._names.get(expr) if isinstance(expr, sympy.Symbol) else None)
        return out

    def declared_dims(self, shape) -> list[int | str]:
        """The dims a value_info declares for a shape: ints, dim_param names for symbols, and for a
        compound expression a name that equal expressions share: a product of symbols is its factors'
        names sorted and joined by '*' ("batch*s53", which passes/padding_elimination.h reads as
        the flattened tokens), anything else its sympy text over the names ("(s53 + 1)//2")."""
        out: list[int | str] = []
        for size in shape:
            expr = sym_expr(size)
            if expr.is_number:
                out.append(int(expr))
            elif isinstance(expr, sympy.Symbol):
                out.append(self._names.get(expr, str(expr)))
            elif isinstance(expr, sympy.Mul) and all(isinstance(f, sympy.Symbol) for f in expr.args):
                out.append("*".join(sorted(self._names.get(f, str(f)) for f in expr.args)))
            else:
                named = expr.xreplace({s: sympy.Symbol(self._names.get(s, str(s))) for s in expr.free_symbols})
                out.append(f"({named})")
        return out

    def lower(self, value) -> str:
        """A [1]-shaped int64 tensor holding an int, SymInt or sympy size expression."""
        return self._lower(sym_expr(value))

    def lower_condition(self, value) -> str:
        """A [1]-shaped bool tensor holding a bool, SymBool or sympy condition: a relation of size
        expressions, or and / or / not of such (a branch condition, branch_checks.py)."""
        if isinstance(value, torch.SymBool):
            value = value.node.expr
        elif isinstance(value, bool):
            value = sympy.true if value else sympy.false
        return self._condition(value)

    def _condition(self, expr) -> str:
        if expr in (sympy.true, sympy.false):
            return self._b.const([bool(expr)], torch.bool)
        if isinstance(expr, (sympy.And, sympy.Or)):
            op = "And" if isinstance(expr, sympy.And) else "Or"
            terms = [self._condition(a) for a in expr.args]
            acc = terms[0]
            for t in terms[1:]:
                acc = self._b.add_node(op, [acc, t], hint=f"cond/{op}")[0]
            return acc
        if isinstance(expr, sympy.Not):
            return self._b.add_node("Not", [self._condition(expr.args[0])], hint="cond/Not")[0]
        op = _RELATIONS.get(type(expr))
        if op is None:
            raise CaptureError(f"condition {expr} ({type(expr).__name__}) cannot be computed in the graph")
        lhs, rhs = self._lower(expr.lhs), self._lower(expr.rhs)
        if op == "NotEqual":
            return self._b.add_node("Not", [self._b.add_node("Equal", [lhs, rhs], hint="cond/Equal")[0]],
                                    hint="cond/Not")[0]
        return self._b.add_node(op, [lhs, rhs], hint=f"cond/{op}")[0]

    def _lower(self, expr: sympy.Expr) -> str:
        if expr not in self._lowered:
            self._lowered[expr] = self._emit(expr)
        return self._lowered[expr]

    def _emit(self, expr: sympy.Expr) -> str:
        if expr.is_Integer:
            return self._b.const([int(expr)], torch.int64)
        if isinstance(expr, sympy.Symbol):
            if expr not in self._sources:
                raise CaptureError(f"size symbol {expr} has no graph input dim to read it from")
            value, d = self._sources[expr]
            return self._b.add_node("Shape", [value], start=d, end=d + 1, hint=f"{value}/dim{d}")[0]
        if expr.func in _VARIADIC:
            op = _VARIADIC[expr.func]
            terms = [self._lower(a) for a in expr.args]
            acc = terms[0]
            for t in terms[1:]:
                acc = self._b.add_node(op, [acc, t], hint=f"sym/{op}")[0]
            return acc
        if isinstance(expr, (symfn.FloorDiv, symfn.CleanDiv)):
            # Sizes are non-negative, so the engine's integer Div (truncation) is floor division.
            return self._b.add_node("Div", [self._lower(expr.args[0]), self._lower(expr.args[1])], hint="sym/Div")[0]
        if isinstance(expr, (sympy.Pow, symfn.PowByNatural)) and expr.args[1].is_Integer and int(expr.args[1]) >= 1:
            base = self._lower(expr.args[0])
            acc = base
            for _ in range(int(expr.args[1]) - 1):
                acc = self._b.add_node("Mul", [acc, base], hint="sym/Mul")[0]
            return acc
        raise CaptureError(f"symbolic size {expr} ({type(expr).__name__}) cannot be computed in the graph")
