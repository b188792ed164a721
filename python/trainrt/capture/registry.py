"""The registry of ATen translations: op name (e.g. 'aten.add.Tensor') -> function(OpContext).

Each op family module registers its functions with @translates; aten_ops imports them all, so
`aten_ops.ATEN_OPS` is the complete table. An op absent from it raises UnsupportedATenOp at capture.
"""

from __future__ import annotations

from collections.abc import Callable

ATEN_OPS: dict[str, Callable] = {}


def translates(*names: str) -> Callable[[Callable], Callable]:
    """Registers the decorated function as the translation of each named ATen overload."""

    def register(fn: Callable) -> Callable:
        for name in names:
            if name in ATEN_OPS:
                raise ValueError(f"{name} has two translations")
            ATEN_OPS[name] = fn
        return fn

    return register
