"""Mixed precision at capture: the matmul family and convolutions compute in bf16, the rest in f32.

torch.export records no autocast casts: a module exported under `torch.autocast("cpu")` gives the
plain f32 graph (torch 2.13; autocast in the exported forward itself becomes a wrap_with_autocast
higher-order op instead, which the translator does not take). So the translator applies autocast's
policy itself, op by op, from torch's CPU list of ops that run in the lower precision
(aten/src/ATen/autocast_mode.cpp, `lower_precision_fp` for the CPU): their f32 tensor inputs are cast
to bf16, the op is translated in bf16 (the engine's bf16 products and convolutions sum in f32, as
oneDNN does for torch; a convolution's bias is cast to bf16 too, as autocast casts it), and its f32 outputs are cast back to f32 right away. f64 inputs are left alone, as autocast
leaves them.

One difference from eager autocast, on purpose: eager hands the bf16 result on, so the softmax,
LayerNorm, GELU and residual adds after a matmul also run in bf16; here they run in f32 on the
widened result (what the issue asks: normalizations, softmax, reductions and losses in f32; so the
BatchNorm after a convolution stays f32), and the
captured graph's outputs keep their f32 dtypes. The casts back cost one pass over each product's
output; a bf16 value widened to f32 and cast to bf16 again for the next product is taken from the
first cast (bf16 -> f32 -> bf16 is exact), so a product feeding a product casts nothing twice.

scaled_dot_product_attention is on the list, as in torch: the fused ScaledDotProductAttention takes
bf16 Q, K, V and a bf16 float mask (autocast casts the mask too; a bool mask stays bool) and computes
in f32, like torch's CPU flash kernel, so the attention stays fused; its output is widened like a
product's. Not on the list although torch's is: prelu, and transposed convolutions (not translated
at all).

    policy = Autocast(builder, torch.bfloat16)
    if policy.applies(name):
        args = policy.lower_inputs(args)                 # Cast(to=bf16) per f32 tensor argument
        out = fn(OpContext(node, builder, symbols, args, compute_dtype=torch.bfloat16))
        out = policy.widen_output(out)                   # Cast(to=f32) back
"""

from __future__ import annotations

import torch

from trainrt.capture.context import TensorValue
from trainrt.capture.onnx_builder import GraphBuilder, onnx_type

# ATen overloads of torch's CPU lower-precision list that TrainRT translates (see the docstring).
LOWER_PRECISION_OPS = frozenset({
    "aten.linear.default", "aten.addmm.default", "aten.mm.default", "aten.bmm.default", "aten.matmul.default",
    "aten.baddbmm.default", "aten.scaled_dot_product_attention.default",
    "aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default",
    "aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding", "aten.convolution.default",
})

# Autocast dtypes the engine runs (bf16 products and convolutions on oneDNN with f32 sums, bf16
# attention with f32 softmax and sums).
SUPPORTED_DTYPES = (torch.bfloat16,)


class Autocast:
    """The casts of one translation under mixed precision in `dtype`."""

    def __init__(self, builder: GraphBuilder, dtype: torch.dtype):
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"mixed precision in {dtype}: TrainRT supports {', '.join(map(str, SUPPORTED_DTYPES))}")
        self.b = builder
        self.dtype = dtype
        self._lowered: dict[str, str] = {}  # f32 tensor name -> its `dtype` copy (a Cast, or the value widened)

    @staticmethod
    def applies(op_name: str) -> bool:
        return op_name in LOWER_PRECISION_OPS

    def lower_inputs(self, args: dict) -> dict:
        """The op's arguments with every f32 tensor cast to the low dtype (once per tensor)."""
        return {name: self._lower(v) if isinstance(v, TensorValue) and v.dtype == torch.float32 else v
                for name, v in args.items()}

    def widen_output(self, name: str) -> str:
        """The op's low-precision output cast back to f32; remembered for the next product."""
        wide = self.b.add_node("Cast", [name], to=onnx_type(torch.float32))[0]
        self._lowered[wide] = name
        return wide

    def _lower(self, v: TensorValue) -> TensorValue:
        low = self._lowered.get(v.name)
        if low is None:
            low = self._lowered[v.name] = self.b.add_node("Cast", [v.name], to=onnx_type(self.dtype))[0]
        return TensorValue(low, self.dtype, v.shape)
