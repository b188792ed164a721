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
        self.reason = reason if reason else "has no TrainRT translation"
        super().__init__(f"{op} ({self._where()}) {self.reason}")

    def _where(self) -> str:
        return f"node '{self.node_name}'" + (f", from {self.source}" if self.source else "")


class UnsupportedATenOps(UnsupportedATenOp):
    """Every untranslated op of one graph, so one capture names all the gaps (a model with several
    of them needs no round per op). `errors` holds them in graph order; op, node_name, source and
    reason are the first one's. The message has one line per (op, reason), with its node count:

        2 ATen ops of the graph have no TrainRT translation (3 nodes):
          aten.cumprod.default (node 'cumprod', from model.py:42 `y = x.cumprod(0)`) has no TrainRT translation
          aten.erfinv.default x2 (node 'erfinv', from model.py:43 `...`; also 'erfinv_1') has no TrainRT translation
    """

    def __init__(self, errors: list[UnsupportedATenOp]):
        super().__init__(errors[0].op, errors[0].node_name, errors[0].source, errors[0].reason)
        self.errors = list(errors)
        groups: dict[tuple[str, str], list[UnsupportedATenOp]] = {}
        for e in self.errors:
            groups.setdefault((e.op, e.reason), []).append(e)
        lines = []
        for (op, reason), group in groups.items():
            count = f" x{len(group)}" if len(group) > 1 else ""
            others = [f"'{e.node_name}'" for e in group[1:4]] + ([f"{len(group) - 4} more"] if len(group) > 4 else [])
            also = "; also " + ", ".join(others) if others else ""
            lines.append(f"  {op}{count} ({group[0]._where()}{also}) {reason}")
        ops = len({op for op, _ in groups})
        head = f"{ops} ATen op{'s' if ops > 1 else ''} of the graph cannot be translated ({len(self.errors)} nodes):"
        self.args = ("\n".join([head, *lines]),)


def unsupported_ops(errors: list[UnsupportedATenOp]) -> UnsupportedATenOp:
    """The error naming every gap in `errors` (non-empty): the error itself when there is one."""
    return errors[0] if len(errors) == 1 else UnsupportedATenOps(errors)
