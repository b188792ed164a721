"""Elementwise ATen ops: arithmetic with torch's type promotion, activations, compare and logic.

Operands are converted to the dtype torch computes in (the output's dtype, or for compares the
promotion of both sides), and Python scalars become 0-d constants of that dtype, so ONNX's
same-dtype rule holds. References: torch type promotion (torch.result_type), ONNX operator specs.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext, TensorValue, promote
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _arith(ctx: OpContext, op: str, a, b, alpha=1) -> str:
    """a <op> alpha * b in the output dtype (torch.add / torch.sub semantics of alpha)."""
    t = ctx.out_dtype
    bn = ctx.operand(b, t)
    if alpha != 1:
        bn = ctx.emit("Mul", [bn, ctx.const(alpha, t)])
    return ctx.emit(op, [ctx.operand(a, t), bn])


@translates("aten.add.Tensor", "aten.add.Scalar")
def add(ctx: OpContext) -> str:
    return _arith(ctx, "Add", ctx["self"], ctx["other"], ctx["alpha"])


@translates("aten.sub.Tensor", "aten.sub.Scalar")
def sub(ctx: OpContext) -> str:
    return _arith(ctx, "Sub", ctx["self"], ctx["other"], ctx["alpha"])


@translates("aten.rsub.Tensor", "aten.rsub.Scalar")
def rsub(ctx: OpContext) -> str:
    """other - alpha * self (what `1 - x` traces to)."""
    return _arith(ctx, "Sub", ctx["other"], ctx["self"], ctx["alpha"])


@translates("aten.mul.Tensor", "aten.mul.Scalar", "aten.multiply.Tensor")
def mul(ctx: OpContext) -> str:
    return _arith(ctx, "Mul", ctx["self"], ctx["other"])


@translates("aten.outer.default", "aten.ger.default")
def outer(ctx: OpContext) -> str:
    """torch.outer(a, b) of vectors (n,) and (m,): a[:, None] * b[None, :], (n, m), in the promoted dtype."""
    t = ctx.out_dtype
    column = ctx.emit("Unsqueeze", [ctx.operand(ctx["self"], t), ctx.ints([1])])
    row = ctx.emit("Unsqueeze", [ctx.operand(ctx["vec2"], t), ctx.ints([0])])
    return ctx.emit("Mul", [column, row])


@translates("aten.div.Tensor", "aten.div.Scalar")
def div(ctx: OpContext) -> str:
    """True division: integer operands are converted to the float output dtype first."""
    return _arith(ctx, "Div", ctx["self"], ctx["other"])


def _floor_div(ctx: OpContext, a, b) -> str:
    """Python's a // b: Floor(a / b) for floats; for integers the engine's Div truncates toward
    zero, so the quotient is one less where the remainder is nonzero and its sign differs from b's."""
    t = ctx.out_dtype
    an, bn = ctx.operand(a, t), ctx.operand(b, t)
    q = ctx.emit("Div", [an, bn])
    if t.is_floating_point:
        return ctx.emit("Floor", [q])
    zero = ctx.const(0, t)
    r = ctx.emit("Sub", [an, ctx.emit("Mul", [q, bn])])
    signs_differ = ctx.emit("Xor", [ctx.emit("Less", [r, zero]), ctx.emit("Less", [bn, zero])])
    fix = ctx.emit("And", [ctx.emit("Not", [ctx.emit("Equal", [r, zero])]), signs_differ])
    return ctx.emit("Sub", [q, ctx.cast_to(fix, torch.bool, t)])


def _trunc_div(ctx: OpContext, a, b) -> str:
    """a / b rounded toward zero: the engine's integer Div, or Sign * Floor(Abs) of float Div."""
    q = _arith(ctx, "Div", a, b)
    if not ctx.out_dtype.is_floating_point:
        return q
    return ctx.emit("Mul", [ctx.emit("Sign", [q]), ctx.emit("Floor", [ctx.emit("Abs", [q])])])


@translates("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(ctx: OpContext) -> str:
    mode = ctx["rounding_mode"]
    if mode == "floor":
        return _floor_div(ctx, ctx["self"], ctx["other"])
    if mode == "trunc":
        return _trunc_div(ctx, ctx["self"], ctx["other"])
    return _arith(ctx, "Div", ctx["self"], ctx["other"])


@translates("aten.floor_divide.default", "aten.floor_divide.Scalar")
def floor_divide(ctx: OpContext) -> str:
    return _floor_div(ctx, ctx["self"], ctx["other"])


@translates("aten.remainder.Scalar", "aten.remainder.Tensor")
def remainder(ctx: OpContext) -> str:
    """Python's a % b (the sign of b): a - (a // b) * b, with _floor_div's floor."""
    t = ctx.out_dtype
    a, b = ctx.operand(ctx["self"], t), ctx.operand(ctx["other"], t)
    return ctx.emit("Sub", [a, ctx.emit("Mul", [_floor_div(ctx, ctx["self"], ctx["other"]), b])])


@translates("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def pow_(ctx: OpContext) -> str:
    t = ctx.out_dtype
    return ctx.emit("Pow", [ctx.operand(ctx["self"], t), ctx.operand(ctx["exponent"], t)])


# ATen unary ops that are one ONNX op on the input converted to the output dtype (torch computes
# sqrt/exp/... of integer tensors in the default float dtype).
_UNARY = {
    "aten.neg.default": "Neg",
    "aten.abs.default": "Abs",
    "aten.exp.default": "Exp",
    "aten.log.default": "Log",
    "aten.sqrt.default": "Sqrt",
    "aten.reciprocal.default": "Reciprocal",
    "aten.tanh.default": "Tanh",
    "aten.sigmoid.default": "Sigmoid",
    "aten.relu.default": "Relu",
    "aten.erf.default": "Erf",
    "aten.sin.default": "Sin",
    "aten.cos.default": "Cos",
    "aten.floor.default": "Floor",
    "aten.ceil.default": "Ceil",
    "aten.round.default": "Round",
    "aten.sign.default": "Sign",
}


def _unary(op: str):
    def translate(ctx: OpContext) -> str:
        return ctx.emit(op, [ctx.operand(ctx["self"], ctx.out_dtype)])

    translate.__doc__ = f"y = {op}(x)"
    return translate


for _name, _op in _UNARY.items():
    translates(_name)(_unary(_op))


@translates("aten.round.decimals")
def round_decimals(ctx: OpContext) -> str:
    """torch.round(x, decimals=d) as torch's kernel: Round(x * 10^d) / 10^d, for d < 0 Round(x /
    10^-d) * 10^-d (halves to even)."""
    t, d = ctx.out_dtype, int(ctx["decimals"])
    x = ctx.operand(ctx["self"], t)
    scale = ctx.const(10.0 ** abs(d), t)
    if d >= 0:
        return ctx.emit("Div", [ctx.emit("Round", [ctx.emit("Mul", [x, scale])]), scale])
    return ctx.emit("Mul", [ctx.emit("Round", [ctx.emit("Div", [x, scale])]), scale])


@translates("aten.expm1.default")
def expm1(ctx: OpContext) -> str:
    """exp(x) - 1: the engine has no expm1, so for |x| below ~1e-3 this keeps f32's absolute error
    (~6e-8), not expm1's relative one (Apertus's xIELU activation)."""
    x = ctx.operand(ctx["self"], ctx.out_dtype)
    return ctx.emit("Sub", [ctx.emit("Exp", [x]), ctx.const(1.0, ctx.out_dtype)])


@translates("aten.log1p.default")
def log1p(ctx: OpContext) -> str:
    """log(1 + x), with the same caveat for tiny |x| as expm1."""
    x = ctx.operand(ctx["self"], ctx.out_dtype)
    return ctx.emit("Log", [ctx.emit("Add", [x, ctx.const(1.0, ctx.out_dtype)])])


@translates("aten.rsqrt.default")
def rsqrt(ctx: OpContext) -> str:
    return ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.operand(ctx["self"], ctx.out_dtype)])])


@translates("aten.silu.default")
def silu(ctx: OpContext) -> str:
    """x * sigmoid(x) (torch.nn.SiLU)."""
    x = ctx.tensor("self")
    return ctx.emit("Mul", [x, ctx.emit("Sigmoid", [x])])


@translates("aten.log_sigmoid.default", "aten.log_sigmoid_forward.default")
def log_sigmoid(ctx: OpContext) -> str | list:
    """log(sigmoid(x)) = -softplus(-x), stable for large |x| (torch.nn.LogSigmoid); the forward
    form's second output (a buffer for torch's backward) is not produced."""
    x = ctx.tensor("self")
    y = ctx.emit("Neg", [ctx.emit("Softplus", [ctx.emit("Neg", [x])])])
    return [y, None] if "forward" in str(ctx.node.target) else y


@translates("aten.square.default")
def square(ctx: OpContext) -> str:
    x = ctx.operand(ctx["self"], ctx.out_dtype)
    return ctx.emit("Mul", [x, x])


def _clip(ctx: OpContext, low: float, high: float) -> str:
    """x clipped to [low, high] with torch's hardtanh gradient, 0 at the bounds themselves
    (hardtanh_backward passes dY where low < x < high only; Clip's gradient, like clamp's,
    includes them): Where(x <= low, low, Where(x >= high, high, x))."""
    x = ctx.tensor("self")
    lo, hi = ctx.const(low, x.dtype), ctx.const(high, x.dtype)
    upper = ctx.emit("Where", [ctx.emit("GreaterOrEqual", [x, hi]), hi, x])
    return ctx.emit("Where", [ctx.emit("LessOrEqual", [x, lo]), lo, upper])


@translates("aten.hardtanh.default")
def hardtanh(ctx: OpContext) -> str:
    """torch.nn.Hardtanh (MobileNet's ReLU6 is hardtanh(x, 0, 6))."""
    return _clip(ctx, float(ctx["min_val"]), float(ctx["max_val"]))


@translates("aten.relu6.default")
def relu6(ctx: OpContext) -> str:
    return _clip(ctx, 0.0, 6.0)


@translates("aten.hardsigmoid.default")
def hardsigmoid(ctx: OpContext) -> str:
    """relu6(x + 3) / 6 (torch.nn.Hardsigmoid) is ONNX HardSigmoid with alpha 1/6, beta 1/2."""
    return ctx.emit("HardSigmoid", [ctx.tensor("self")], alpha=1 / 6, beta=0.5)


@translates("aten.hardswish.default")
def hardswish(ctx: OpContext) -> str:
    """x * relu6(x + 3) / 6 (torch.nn.Hardswish, Howard et al. 2019): x * HardSigmoid(x)."""
    x = ctx.tensor("self")
    return ctx.emit("Mul", [x, ctx.emit("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])


@translates("aten.glu.default")
def glu(ctx: OpContext) -> str:
    """a * sigmoid(b) for the halves a, b of x along dim (torch.nn.GLU, Dauphin et al. 2017)."""
    x = ctx.tensor("self")
    dim = ctx["dim"]
    axis = dim + x.rank if dim < 0 else dim
    half = x.shape[axis] // 2
    a, b = ctx.emit("Split", [x, ctx.ints([half, half])], 2, axis=axis)
    return ctx.emit("Mul", [a, ctx.emit("Sigmoid", [b])])


@translates("aten.gelu.default")
def gelu(ctx: OpContext) -> str:
    """ONNX Gelu-20 has torch's two forms: exact ('none') and 'tanh'."""
    return ctx.emit("Gelu", [ctx.tensor("self")], approximate=ctx["approximate"])


@translates("aten.leaky_relu.default")
def leaky_relu(ctx: OpContext) -> str:
    return ctx.emit("LeakyRelu", [ctx.tensor("self")], alpha=float(ctx["negative_slope"]))


@translates("aten.softplus.default")
def softplus(ctx: OpContext) -> str:
    """ONNX Softplus is log(1 + exp(x)): torch's beta=1 (its threshold only guards overflow)."""
    if ctx["beta"] != 1:
        raise ctx.unsupported(f"with beta={ctx['beta']} has no TrainRT translation")
    return ctx.emit("Softplus", [ctx.tensor("self")])


@translates("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default", "aten.clamp_max.default",
            "aten.clamp_min.Tensor", "aten.clamp_max.Tensor")
def clamp(ctx: OpContext) -> str:
    """Clip with optional bounds of the output dtype; bounds that are tensors of more than one
    element (PhiMoE's per-token threshold) broadcast: Max then Min, as torch's min(max(x, lo), hi)."""
    t = ctx.out_dtype
    lo, hi = ctx.args.get("min"), ctx.args.get("max")
    x = ctx.operand(ctx["self"], t)
    if any(isinstance(b, TensorValue) and not all(is_static(d) and int(d) == 1 for d in b.shape) for b in (lo, hi)):
        if lo is not None:
            x = ctx.emit("Max", [x, ctx.operand(lo, t)])
        return x if hi is None else ctx.emit("Min", [x, ctx.operand(hi, t)])
    return ctx.emit("Clip", [x, None if lo is None else ctx.operand(lo, t), None if hi is None else ctx.operand(hi, t)])


@translates("aten.minimum.default", "aten.min.other")
def minimum(ctx: OpContext) -> str:
    """Elementwise min of both operands in the output dtype (torch.min(a, b), T5's bucket clamp)."""
    return _arith(ctx, "Min", ctx["self"], ctx["other"])


@translates("aten.maximum.default", "aten.max.other")
def maximum(ctx: OpContext) -> str:
    return _arith(ctx, "Max", ctx["self"], ctx["other"])


def _compare(op: str, negate: bool = False):
    def translate(ctx: OpContext) -> str:
        a, b = ctx["self"], ctx["other"]
        t = promote(a, b)
        y = ctx.emit(op, [ctx.operand(a, t), ctx.operand(b, t)])
        return ctx.emit("Not", [y]) if negate else y

    translate.__doc__ = f"bool = {'Not ' if negate else ''}{op}(a, b) in the promoted dtype of a and b"
    return translate


for _aten, (_op, _negate) in {"eq": ("Equal", False), "ne": ("Equal", True), "lt": ("Less", False),
                              "gt": ("Greater", False), "le": ("LessOrEqual", False),
                              "ge": ("GreaterOrEqual", False)}.items():
    translates(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_compare(_op, _negate))


def _logical(op: str, bitwise: bool):
    def translate(ctx: OpContext) -> str:
        if bitwise and ctx.out_dtype != torch.bool:  # integers: ONNX BitwiseAnd / BitwiseOr / BitwiseXor
            return ctx.emit(f"Bitwise{op}", [ctx.operand(ctx["self"], ctx.out_dtype),
                                             ctx.operand(ctx["other"], ctx.out_dtype)])
        return ctx.emit(op, [ctx.operand(ctx["self"], torch.bool), ctx.operand(ctx["other"], torch.bool)])

    translate.__doc__ = (f"{op} of both operands read as bool" +
                         (f"; on integers, Bitwise{op} in the result's dtype" if bitwise else ""))
    return translate


for _aten, _op in {"and": "And", "or": "Or", "xor": "Xor"}.items():
    translates(f"aten.logical_{_aten}.default")(_logical(_op, bitwise=False))
    translates(f"aten.bitwise_{_aten}.Tensor", f"aten.bitwise_{_aten}.Scalar", f"aten.__{_aten}__.Tensor",
               f"aten.__{_aten}__.Scalar")(_logical(_op, bitwise=True))


@translates("aten.logical_not.default")
def logical_not(ctx: OpContext) -> str:
    return ctx.emit("Not", [ctx.operand(ctx["self"], torch.bool)])


@translates("aten.bitwise_not.default")
def bitwise_not(ctx: OpContext) -> str:
    """~mask on bool tensors (Not), ~x on integers (BitwiseNot)."""
    x = ctx.tensor("self")
    return ctx.emit("Not" if x.dtype == torch.bool else "BitwiseNot", [x])


@translates("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(ctx: OpContext) -> str:
    t = ctx.out_dtype
    return ctx.emit("Where", [ctx.operand(ctx["condition"], torch.bool), ctx.operand(ctx["self"], t),
                              ctx.operand(ctx["other"], t)])


@translates("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def masked_fill(ctx: OpContext) -> str:
    """Where(mask, value, x)."""
    x = ctx.tensor("self")
    return ctx.emit("Where", [ctx.operand(ctx["mask"], torch.bool), ctx.operand(ctx["value"], x.dtype), x])

