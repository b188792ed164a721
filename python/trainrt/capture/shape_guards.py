"""Shape guards: the conditions on input sizes that a capture's graph was traced under.

torch.export records a condition on a symbolic size that the model's Python code branched on
(`if seq % 2 == 0`, `for i in range(ceil(seq / chunk))`) as a guard. Where the condition is a range
it also lands in `range_constraints` (capture checks those as `dim_ranges`), but `s1 % 2 == 0`,
`(s1 + 63) // 64 == 1` or `s0 <= s1` do not: the exported program is only right for sizes that
satisfy them, and nothing else would say so. Every guard is kept here as Python text over the
input dims' symbols and checked whenever a call's shapes differ from the last call's (the steady
state's fast path skips it):

    guards = shape_guards(ep, {"s27", "s77"})      # ["(s27 % 2) == 0"]
    failed_guard(guards, {"s27": 33, "s77": 2})     # "(s27 % 2) == 0": capture again for these shapes

A guard is arithmetic and comparisons over size symbols, and it is stored as text in the export
cache, so it is parsed, not evaluated as it stands: an expression with anything but numbers, the
symbols, arithmetic, comparisons, `and` / `or` / `not`, and the few size functions export prints
(max, min, abs, math.floor / ceil / trunc / sqrt) is refused, so no cache file can run code.
"""

from __future__ import annotations

import ast
import logging
import math

import sympy
from torch.export import ExportedProgram
from torch.export.exported_program import _get_shape_env
from torch.utils._sympy.printers import PythonPrinter
from torch.utils._sympy.value_ranges import bound_sympy

_log = logging.getLogger("trainrt")
_FUNCTIONS = {"max": max, "min": min, "abs": abs}
_MATH = {"floor", "ceil", "trunc", "sqrt"}
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Name, ast.Constant,
          ast.Attribute, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
_compiled: dict[str, object] = {}  # guard text -> code object, shared by every capture in the process


def shape_guards(ep: ExportedProgram, bound: set[str]) -> list[str]:
    """The guards export's trace recorded that its range constraints do not already imply, as Python
    expressions over the symbols in `bound` (the input dims that are plain symbols). A guard over a
    symbol no input dim binds cannot be checked from shapes alone; then every bound symbol is pinned
    to the size it had when traced, which makes the capture serve those shapes only (correct, if
    it recaptures more often)."""
    shape_env = _get_shape_env(ep.graph_module)
    if shape_env is None:
        return []
    printer = PythonPrinter()
    guards: list[str] = []
    unbound: set[str] = set()
    for guard in shape_env.guards:
        expr = shape_env.replace(guard.expr)  # symbols export unified (s72 == s43) by their kept name
        if expr.is_number or _implied(expr, ep.range_constraints):
            continue  # a constant, or implied by the ranges that dim_ranges checks
        names = {str(s) for s in expr.free_symbols}
        if not names <= bound:
            unbound |= names - bound
            continue
        text = printer.doprint(expr)
        if text not in guards:
            guards.append(text)
    if unbound:
        hints = {str(s): int(v) for s, v in shape_env.var_to_val.items() if str(s) in bound}
        _log.info("trainrt: a shape guard of the capture reads sizes no input dim gives (%s); the capture serves "
                  "the traced sizes only", ", ".join(sorted(unbound)))
        guards = [f"{name} == {hints[name]}" for name in sorted(hints)]
    return guards


def _implied(expr, ranges: dict) -> bool:
    """Whether the symbols' ranges alone make `expr` true (`s1 <= 64` where s1 is in [2, 64])."""
    try:
        bound = bound_sympy(expr, {s: r for s, r in ranges.items() if s in expr.free_symbols})
    except Exception:  # noqa: BLE001  (an expression value ranges cannot bound is simply kept)
        return False
    return bool(bound.is_singleton() and bound.lower == sympy.true)


def failed_guard(guards: list[str], values: dict[str, int]) -> str | None:
    """The first guard that the symbols' `values` break, or that they cannot decide (a symbol without
    a value); None when all hold."""
    for text in guards:
        code = _compiled.get(text) or _compile(text)
        try:
            if not eval(code, {"__builtins__": {}, "math": math, **_FUNCTIONS}, values):  # noqa: S307  (_compile checked it)
                return text
        except (NameError, ZeroDivisionError, ValueError):
            return text
    return None


def _compile(text: str):
    """The code of a guard's text after checking it is only size arithmetic (see the module doc)."""
    code = _compiled[text] = compile(check_size_expression(text, set(_FUNCTIONS), _MATH), "<shape guard>", "eval")
    return code


def check_size_expression(text: str, functions: set[str], math_functions: set[str] = frozenset()) -> ast.Expression:
    """The parsed `text` when it is only numbers, names, arithmetic, comparisons and calls of
    `functions` (or math.<one of math_functions>); ValueError naming what else it holds. Size text
    read from an export cache entry passes here before anything evaluates it."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        allowed = isinstance(node, _NODES)
        if isinstance(node, ast.Constant):
            allowed = type(node.value) in (int, float, bool)
        elif isinstance(node, ast.Attribute):
            allowed = isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in math_functions
        elif isinstance(node, ast.Call):
            func = node.func
            allowed = not node.keywords and (isinstance(func, ast.Attribute) or
                                             (isinstance(func, ast.Name) and func.id in functions))
        elif isinstance(node, ast.Name):
            allowed = not node.id.startswith("_") and isinstance(node.ctx, ast.Load)
        if not allowed:
            raise ValueError(f"size expression {text!r} is not size arithmetic ({type(node).__name__})")
    return tree
