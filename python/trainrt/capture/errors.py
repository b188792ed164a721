"""Errors of the capture front end: what failed, and where in the user's model.

The engine's exception classes are C++ types bound by nanobind and cannot be subclassed from Python,
so capture has its own small hierarchy rooted at RuntimeError.
"""

from __future__ import annotations


class CaptureError(RuntimeError):
    """torch.export failed, or its graph cannot be expressed as a TrainRT ONNX model."""


class UnsupportedATenOp(CaptureError):
    """An ATen op (or a form of it) that has no TrainRT translation.

    The message names the op, the FX node and the user's source line, e.g.
    "aten.foo.default (node 'foo_1', from model.py:42 `y = foo(x)`) has no TrainRT translation".
    """

    def __init__(self, op: str, node_name: str, source: str = "", reason: str = ""):
        self.op = op
        self.node_name = node_name
        self.source = source
        where = f"node '{node_name}'" + (f", from {source}" if source else "")
        what = reason if reason else "has no TrainRT translation"
        super().__init__(f"{op} ({where}) {what}")
