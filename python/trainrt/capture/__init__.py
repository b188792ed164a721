"""Capture: torch.nn.Module -> torch.export (training IR) -> ONNX ModelProto the engine runs.

    from trainrt.capture import capture
    captured = capture(model, (x,), {})
    captured.model              # onnx.ModelProto: params, buffers, user inputs -> mutations, outputs

Files: export.py (torch.export, symbolic dims), translator.py (the FX walker; torch.cond as an If), context.py (what a
per-op translation sees), symbolic.py (SymInt sizes as shape tensors), ops_*.py (ATen translations
by family, table in aten_ops.py), onnx_builder.py (ONNX graph assembly), api.py (capture and
CapturedGraph), shape_guards.py (the size conditions a capture holds for), branch_checks.py (captures
specialized on branches over tensor values, checked per call), errors.py.
"""

from trainrt.capture.api import CapturedGraph, capture
from trainrt.capture.errors import CaptureError, UnsupportedATenOp, UnsupportedATenOps

__all__ = ["CaptureError", "CapturedGraph", "UnsupportedATenOp", "UnsupportedATenOps", "capture"]
