"""What a per-op translation sees: the node's bound arguments as translated values, and emit helpers.

Argument values are the translator's values: a TensorValue (an ONNX name with the FakeTensor's dtype
and shape), a SymInt (a symbolic size), or a plain Python value (int, float, bool, list, None, dtype).
A translation reads arguments by their ATen schema names (`ctx["self"]`, `ctx["dim"]`), emits ONNX
nodes and returns the name(s) of its output(s):

    @translates("aten.relu.default")
    def relu(ctx: OpContext) -> str:
        return ctx.emit("Relu", [ctx["self"]])
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trainrt.capture.errors import CaptureError, UnsupportedATenOp
from trainrt.capture.onnx_builder import GraphBuilder, onnx_type
from trainrt.capture.symbolic import SymbolTable, is_static

_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


@dataclass(frozen=True)
class TensorValue:
    """A tensor of the translated graph: its ONNX name, torch dtype and (possibly symbolic) shape."""

    name: str
    dtype: torch.dtype
    shape: tuple

    @property
    def rank(self) -> int:
        return len(self.shape)


def source_line(node: torch.fx.Node) -> str:
    """Where the user's code made the node, as 'file:line `code`': the innermost frame of the node's
    stack trace outside torch itself (torch records module forward frames)."""
    lines = (node.meta.get("stack_trace") or "").splitlines()
    frames = []
    for i, line in enumerate(lines):
        if m := _FRAME.search(line):
            follows = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else ""
            frames.append((m[1], m[2], follows))
    frames = [f for f in frames if not f[0].startswith((_TORCH_DIR, "torch/"))] or frames
    if not frames:
        return ""
    file, lineno, code = frames[-1]
    return f"{file}:{lineno}" + (f" `{code}`" if code else "")


def op_name(node: torch.fx.Node) -> str:
    """The op's qualified name as the registry keys it, e.g. 'aten.add.Tensor'."""
    return str(node.target) if hasattr(node.target, "_schema") else getattr(node.target, "__name__", str(node.target))


def bind_args(node: torch.fx.Node, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in (positional and keyword uses alike)."""
    schema = node.target._schema
    bound: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            raise CaptureError(f"{op_name(node)} (node '{node.name}') lacks argument '{a.name}'")
    return bound


class OpContext:
    """One ATen node being translated: bound arguments, output metadata, emit helpers."""

    def __init__(self, node: torch.fx.Node, builder: GraphBuilder, symbols: SymbolTable, args: dict[str, Any],
                 compute_dtype: torch.dtype | None = None):
        self.node = node
        self.b = builder
        self.symbols = symbols
        self.args = args
        self.out = node.meta.get("val")  # FakeTensor, or a tuple of them for multi-output ops
        # The dtype the translation computes in when it differs from the FX output's (autocast.py).
        self.compute_dtype = compute_dtype

    def __getitem__(self, name: str) -> Any:
        return self.args[name]

    @property
    def out_dtype(self) -> torch.dtype:
        return self.compute_dtype or self.out.dtype

    def unsupported(self, reason: str) -> UnsupportedATenOp:
        """The error to raise for a form of this op the engine cannot run (the caller raises it)."""
        return UnsupportedATenOp(op_name(self.node), self.node.name, source_line(self.node), reason)

    def used_outputs(self) -> set[int]:
        """Indices of a multi-output op's outputs that some node reads (export also leaves getitems
        of unused outputs, with no users)."""
        return {int(u.args[1]) for u in self.node.users if u.target.__name__ == "getitem" and u.users}

    def emit(self, op: str, inputs, num_outputs: int = 1, **attrs) -> str | list[str]:
        """Emits one ONNX-domain node; returns its output name (a list for num_outputs > 1)."""
        names = [x.name if isinstance(x, TensorValue) else x for x in inputs]
        outs = self.b.add_node(op, names, num_outputs, **attrs)
        return outs[0] if num_outputs == 1 else outs

    def const(self, value, dtype: torch.dtype) -> str:
        """A 0-d constant of `dtype`."""
        return self.b.const(value, dtype)

    def ints(self, values) -> str:
        """A 1-D int64 tensor of a list of ints and SymInts (Concat of constants and size tensors)."""
        values = list(values)
        if all(is_static(v) for v in values):
            return self.b.const([int(v) for v in values], torch.int64)
        pieces, run = [], []
        for v in values:
            if is_static(v):
                run.append(int(v))
                continue
            if run:
                pieces.append(self.b.const(run, torch.int64))
                run = []
            pieces.append(self.symbols.lower(v))
        if run:
            pieces.append(self.b.const(run, torch.int64))
        return self.emit("Concat", pieces, axis=0)

    def scalar_int(self, value) -> str:
        """A 0-d int64 tensor of an int or SymInt (Range and Gather take scalars)."""
        if is_static(value):
            return self.const(int(value), torch.int64)
        return self.emit("Reshape", [self.symbols.lower(value), self.b.const([], torch.int64)])

    def cast(self, x: TensorValue, dtype: torch.dtype) -> str:
        """x converted to dtype (no node when it already has it)."""
        return self.cast_to(x.name, x.dtype, dtype)

    def cast_to(self, name: str, from_dtype: torch.dtype, dtype: torch.dtype) -> str:
        """The tensor `name` of from_dtype converted to dtype (no node when they are equal)."""
        if from_dtype == dtype:
            return name
        return self.emit("Cast", [name], to=onnx_type(dtype))

    def operand(self, value, dtype: torch.dtype) -> str:
        """A tensor, Python number or SymInt argument as a tensor of `dtype` (torch's promotion
        result, which the caller takes from the output or from promote())."""
        if isinstance(value, TensorValue):
            return self.cast(value, dtype)
        if isinstance(value, torch.SymInt):
            if not is_static(value):
                return self.cast_to(self.scalar_int(value), torch.int64, dtype)
            value = int(value)
        if isinstance(value, (bool, int, float)):
            return self.const(value, dtype)
        raise self.unsupported(f"has an operand of type {type(value).__name__}")

    def tensor(self, name: str) -> TensorValue:
        """A TensorValue for a tensor argument (CaptureError when it is something else)."""
        value = self.args[name]
        if not isinstance(value, TensorValue):
            raise self.unsupported(f"expects a tensor for '{name}', got {type(value).__name__}")
        return value


def promote(a, b) -> torch.dtype:
    """torch's result dtype of a binary op on tensors (TensorValue), Python numbers or SymInts."""

    def sample(v):
        if isinstance(v, TensorValue):  # 0-d tensors promote like scalars of their category
            return torch.empty((1,) * min(v.rank, 1), dtype=v.dtype)
        return 0 if isinstance(v, torch.SymInt) else v

    sa, sb = sample(a), sample(b)
    if not isinstance(sa, torch.Tensor) and not isinstance(sb, torch.Tensor):
        sa = torch.tensor(sa)
    return torch.result_type(sa, sb)
