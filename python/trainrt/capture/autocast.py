"""Mixed precision at capture: each op computes in the dtype eager `torch.autocast("cpu")` gives it.

torch.export records no autocast casts: a module exported under `torch.autocast("cpu")` gives the
plain f32 graph (torch 2.13; autocast in the exported forward itself becomes a wrap_with_autocast
higher-order op instead, which the translator does not take). So the translator applies autocast's
CPU policy itself, op by op (aten/src/ATen/autocast_mode.cpp, the KERNEL_CPU lists):

- `lower_precision_fp` (the matmul family, convolutions, scaled_dot_product_attention): f32 tensor
  inputs are cast to bf16 and the op computes in bf16 (the engine's bf16 products and
  convolutions sum in f32, as oneDNN does for torch; a convolution's bias is cast too, as autocast
  casts it). The bf16 result is handed on, not widened.
- `fp32` (the losses, 3-D pools, ...): bf16 inputs are cast to f32.
- `promote` (cat, stack, index_copy): inputs are cast to the widest float dtype among them.
- normalizations of a bf16 input with f32 weights (MIXED_OPS) run in f32 on the widened input and
  their outputs are cast to bf16: torch's mixed-dtype kernels compute the same in f32 inside.
- every other op runs on the dtypes it is given, with torch's type promotion: a LayerNorm, softmax,
  GELU or dropout of a bf16 product's output runs in bf16 (the engine's bf16 kernels compute in f32
  inside and round once on store, as torch's CPU kernels do), and a residual add of an f32 stream
  and a bf16 branch runs in f32.

The dtype an op gives is torch's own: the op is rerun on FakeTensors of the translated dtypes
(only when some input's dtype differs from the f32 graph's), so promotion and per-op dtype rules
come from torch and not from a table here. f64 inputs are left alone, as autocast leaves them.
A f32 value cast to bf16 is cast once however many products read it.

scaled_dot_product_attention: the fused ScaledDotProductAttention takes bf16 Q, K, V and a bf16
float mask (autocast casts the mask too; a bool mask stays bool) and computes in f32, like torch's
CPU flash kernel. Not on the list although torch's is: prelu, transposed convolutions and the RNN
layers (they compute in f32).

    policy = Autocast(builder, torch.bfloat16)
    dtypes = policy.output_dtypes(node, name, current_dtype)   # what eager autocast gives
    args = policy.cast_inputs(name, args)                      # the policy's casts
    out = fn(OpContext(node, builder, symbols, args, compute_dtype=dtypes))
"""

from __future__ import annotations

import logging

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode

from trainrt.capture.context import TensorValue
from trainrt.capture.onnx_builder import GraphBuilder, onnx_type

_log = logging.getLogger("trainrt")

# ATen overloads of torch's CPU lower-precision list that TrainRT translates (see the docstring).
LOWER_PRECISION_OPS = frozenset({
    "aten.linear.default", "aten.addmm.default", "aten.mm.default", "aten.bmm.default", "aten.matmul.default",
    "aten.baddbmm.default", "aten.scaled_dot_product_attention.default",
    "aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default",
    "aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding", "aten.convolution.default",
})

# ATen ops (overload packets) of torch's CPU fp32 list that TrainRT translates; nll_loss_nd and
# the nll_loss*_forward ops are what nll_loss becomes in the training IR.
FP32_OPS = frozenset({
    "cross_entropy_loss", "nll_loss", "nll_loss2d", "nll_loss_nd", "nll_loss_forward", "nll_loss2d_forward",
    "mse_loss", "avg_pool3d", "max_pool3d", "max_pool3d_with_indices",
})

# torch's CPU promote list (the widest float dtype among the inputs).
PROMOTE_OPS = frozenset({"cat", "stack", "index_copy"})

# Normalizations torch runs on a bf16 input with f32 weights and statistics (mixed dtypes, f32 math
# inside, the output rounded once to bf16). Their ONNX ops take one dtype for all, so TrainRT runs
# them in f32 on the widened input and casts the outputs to torch's dtypes: the same arithmetic.
MIXED_OPS = frozenset({
    "layer_norm", "native_layer_norm", "batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
})

# Autocast dtypes the engine runs.
SUPPORTED_DTYPES = (torch.bfloat16,)


def _packet(op_name: str) -> str:
    """'aten.nll_loss_nd.default' -> 'nll_loss_nd'."""
    return op_name.split(".")[1]


class Autocast:
    """The casts and dtypes of one translation under mixed precision in `dtype`."""

    def __init__(self, builder: GraphBuilder, dtype: torch.dtype):
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"mixed precision in {dtype}: TrainRT supports {', '.join(map(str, SUPPORTED_DTYPES))}")
        self.b = builder
        self.dtype = dtype
        self._lowered: dict[str, str] = {}  # f32 tensor name -> its Cast to `dtype`

    def cast_inputs(self, op_name: str, args: dict, widen: bool = False) -> dict:
        """The op's bound arguments after the policy's casts (tensors inside lists included);
        `widen`: every bf16 input cast to f32 (an op torch cannot rerun on the new dtypes)."""
        target = torch.float32 if widen else self._target_dtype(op_name, [v.dtype for v in _tensors(args)])
        if target is None:
            return args
        return pytree.tree_map(lambda v: self._cast(v, target), args, is_leaf=lambda v: isinstance(v, TensorValue))

    def widened_inputs(self, node: torch.fx.Node, op_name: str, args: dict) -> dict:
        """The arguments of an op that computes in f32 between casts (a MIXED_OPS op, or one torch
        cannot rerun on bf16): every bf16 tensor cast to f32. Logged at debug level."""
        _log.debug("autocast: %s (node '%s') computes in f32 between casts", op_name, node.name)
        return self.cast_inputs(op_name, args, widen=True)

    def widens(self, op_name: str, args: dict) -> bool:
        """True for a MIXED_OPS op given both bf16 and f32 tensors: it runs in f32 between casts."""
        dtypes = {v.dtype for v in _tensors(args)}
        return _packet(op_name) in MIXED_OPS and {self.dtype, torch.float32} <= dtypes

    def narrow(self, outputs, wide, dtypes):
        """A widened op's output name(s) (of the f32 graph's dtypes `wide`) cast to `dtypes`."""
        if isinstance(outputs, str):
            if wide == dtypes:
                return outputs
            return self.b.add_node("Cast", [outputs], to=onnx_type(dtypes))[0]
        return [o if o is None else self.narrow(o, w, d) for o, w, d in zip(outputs, wide, dtypes)]

    def output_dtypes(self, node: torch.fx.Node, op_name: str, dtype_of) -> object:
        """The dtype of each of the node's outputs under eager autocast, shaped like its value (a
        dtype, or a list of dtypes / None); `dtype_of(fx_node)` is the translated dtype of an input.
        None when torch cannot rerun the op on those dtypes: the caller widens its inputs to f32."""
        val = node.meta["val"]
        inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)
                  and isinstance(a.meta.get("val"), torch.Tensor)]
        target = self._target_dtype(op_name, [dtype_of(a) for a in inputs])
        if target is None and all(dtype_of(a) == a.meta["val"].dtype for a in inputs):
            return dtypes_of(val)  # the f32 graph's dtypes hold

        def fake(a):
            if isinstance(a, (list, tuple)):  # FX's immutable lists, which ATen schemas refuse
                return type(a)(fake(x) for x in a) if isinstance(a, tuple) else [fake(x) for x in a]
            if not isinstance(a, torch.fx.Node):
                return a
            if not isinstance(a.meta.get("val"), torch.Tensor):
                return a.meta["val"]  # a SymInt
            t = a.meta["val"].to(dtype_of(a))
            return t.to(target) if target is not None and t.dtype.is_floating_point and t.dtype != torch.float64 \
                else t

        mode = detect_fake_mode([a.meta["val"] for a in inputs])
        try:
            with mode, torch.autocast("cpu", enabled=False):
                args, kwargs = fake(node.args), {k: fake(v) for k, v in node.kwargs.items()}
                return dtypes_of(node.target(*args, **kwargs))
        except Exception as err:  # noqa: BLE001  (torch refuses the dtypes: the op runs in f32)
            _log.debug("autocast: torch refuses %s (node '%s') on the new dtypes: %s", op_name, node.name, err)
            return None

    def _target_dtype(self, op_name: str, dtypes: list[torch.dtype]) -> torch.dtype | None:
        """The dtype the policy casts the op's float inputs to (None: no casts)."""
        if op_name in LOWER_PRECISION_OPS:
            return self.dtype if torch.float32 in dtypes else None
        if _packet(op_name) in FP32_OPS:
            return torch.float32 if self.dtype in dtypes else None
        if _packet(op_name) in PROMOTE_OPS and torch.float32 in dtypes and self.dtype in dtypes:
            return torch.float32
        return None

    def _cast(self, v, dtype: torch.dtype):
        if not isinstance(v, TensorValue) or v.dtype not in (torch.float32, self.dtype) or v.dtype == dtype:
            return v
        if dtype == self.dtype:
            low = self._lowered.get(v.name)
            if low is None:
                low = self._lowered[v.name] = self.b.add_node("Cast", [v.name], to=onnx_type(dtype))[0]
            return TensorValue(low, dtype, v.shape)
        return TensorValue(self.b.add_node("Cast", [v.name], to=onnx_type(dtype))[0], dtype, v.shape)


def _tensors(args) -> list[TensorValue]:
    return [v for v in pytree.tree_leaves(args, is_leaf=lambda v: isinstance(v, TensorValue))
            if isinstance(v, TensorValue)]


def dtypes_of(val):
    """The dtype(s) of an op's value: a tensor's dtype, a list for a tuple or list of outputs."""
    if isinstance(val, torch.Tensor):
        return val.dtype
    if isinstance(val, (list, tuple)):
        return [dtypes_of(v) for v in val]
    return None
