"""torch.einsum as Transpose, Reshape, ReduceSum and MatMul (each differentiable in the engine).

    einsum("bhqd,bhkd->bhqk", q, k)   ->  MatMul(q (b, h, q, d), Transpose(k) (b, h, d, k))

The operands are contracted left to right, two at a time. For a pair A, B, each letter is one of:
- batch: in A, B and what is still needed after the pair (the output or a later operand);
- contracted: in A and B only: summed by the product;
- free: in one of them and still needed;
- summed alone: in one of them only and not needed: a ReduceSum on that operand first.
A is transposed to (batch, free A, contracted) and B to (batch, contracted, free B), the groups
flattened to one dim each, multiplied as (batch..., FA, C) @ (batch..., C, FB), and the result
reshaped to (batch..., free A..., free B...). A single operand is summed over the letters not in the
output. The last result is transposed to the output's order. An ellipsis stands for the same
leading letters in every operand; a letter repeated within one operand (a diagonal) has no
translation. Reference: torch.einsum's documentation (implicit output: the letters seen once, sorted).
"""

from __future__ import annotations

import math
import string

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import reshape_to
from trainrt.capture.registry import translates

_ELLIPSIS_LETTERS = string.ascii_uppercase  # einsum's own subscripts are letters; these stand for '...'


class _Operand:
    """A tensor (ONNX name) with one letter per dim and the dims' (possibly symbolic) sizes."""

    def __init__(self, name: str, letters: str, shape: list):
        self.name, self.letters, self.shape = name, letters, list(shape)

    def size(self, letter: str):
        return self.shape[self.letters.index(letter)]


def _parse(ctx: OpContext, equation: str, operands: list[TensorValue]) -> tuple[list[str], str]:
    """(each operand's letters, the output's letters), with '...' replaced by capital letters."""
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ctx.unsupported(f"equation '{equation}' names {len(terms)} operands, got {len(operands)}")
    ellipsis_rank = max((x.rank - len(t) + 3 for t, x in zip(terms, operands) if "..." in t), default=0)
    ellipsis = _ELLIPSIS_LETTERS[:ellipsis_rank]
    letters = []
    for term, x in zip(terms, operands):
        if "..." in term:
            term = term.replace("...", ellipsis[ellipsis_rank - (x.rank - len(term) + 3):])
        if len(term) != x.rank:
            raise ctx.unsupported(f"equation '{equation}' gives an operand of rank {x.rank} {len(term)} subscripts")
        if len(set(term)) != len(term):
            raise ctx.unsupported(f"with a repeated subscript in '{equation}' (a diagonal) has no TrainRT translation")
        letters.append(term)
    if arrow:
        output = output.replace("...", ellipsis)
    else:  # implicit: the ellipsis, then the letters that appear once, in alphabetical order
        seen = "".join(letters)
        output = ellipsis + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in ellipsis))
    return letters, output


def _sum_out(ctx: OpContext, a: _Operand, keep: set[str]) -> _Operand:
    """a summed over its letters not in `keep`."""
    gone = [i for i, c in enumerate(a.letters) if c not in keep]
    if not gone:
        return a
    name = ctx.emit("ReduceSum", [a.name, ctx.ints(gone)], keepdims=0)
    kept = [i for i in range(len(a.letters)) if i not in gone]
    return _Operand(name, "".join(a.letters[i] for i in kept), [a.shape[i] for i in kept])


def _arranged(ctx: OpContext, a: _Operand, groups: list[str]) -> str:
    """a transposed to the letters of `groups` in order, each group after the first flattened to one dim."""
    order = "".join(groups)
    name = a.name
    if order != a.letters:
        name = ctx.emit("Transpose", [name], perm=[a.letters.index(c) for c in order])
    dims = [a.size(c) for c in groups[0]] + [math.prod(a.size(c) for c in g) for g in groups[1:]]
    return reshape_to(ctx, name, dims)


def _contract(ctx: OpContext, a: _Operand, b: _Operand, needed: set[str]) -> _Operand:
    """The product of a and b, keeping the letters in `needed` (the output's and later operands')."""
    a = _sum_out(ctx, a, needed | set(b.letters))
    b = _sum_out(ctx, b, needed | set(a.letters))
    batch = "".join(c for c in a.letters if c in b.letters and c in needed)
    contracted = "".join(c for c in a.letters if c in b.letters and c not in needed)
    free_a = "".join(c for c in a.letters if c not in b.letters)
    free_b = "".join(c for c in b.letters if c not in a.letters)
    left = _arranged(ctx, a, [batch, free_a, contracted])  # (batch..., FA, C)
    right = _arranged(ctx, b, [batch, contracted, free_b])  # (batch..., C, FB)
    product = ctx.emit("MatMul", [left, right])  # (batch..., FA, FB)
    letters = batch + free_a + free_b
    shape = [_broadcast(a, b, c) for c in letters]
    return _Operand(reshape_to(ctx, product, shape), letters, shape)


def _broadcast(a: _Operand, b: _Operand, letter: str):
    """The letter's size in the product: an ellipsis dim of 1 in one operand broadcasts."""
    sizes = [o.size(letter) for o in (a, b) if letter in o.letters]
    return next((s for s in sizes if not (isinstance(s, int) and s == 1)), sizes[0])


@translates("aten.einsum.default")
def einsum(ctx: OpContext) -> str:
    tensors = list(ctx["tensors"])
    letters, output = _parse(ctx, ctx["equation"], tensors)
    operands = [_Operand(ctx.cast(x, ctx.out_dtype), t, x.shape) for x, t in zip(tensors, letters)]
    result = operands[0]
    for i, other in enumerate(operands[1:], start=1):
        later = set(output).union(*(set(o.letters) for o in operands[i + 1:]))
        result = _contract(ctx, result, other, later)
    result = _sum_out(ctx, result, set(output))
    if result.letters == output:
        return result.name
    return ctx.emit("Transpose", [result.name], perm=[result.letters.index(c) for c in output])
