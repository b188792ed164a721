"""ORTModule compatibility: an ORTModule script migrates by changing one import.

    -from onnxruntime.training.ortmodule import ORTModule, DebugOptions, LogLevel
    +from trainrt.ortmodule import ORTModule, DebugOptions, LogLevel

`ORTModule` is `trainrt.RTModule`; the `ORTMODULE_*` environment variables of the options ORTModule
had are read too (docs/options.md).

Example:

    >>> from trainrt.ortmodule import ORTModule, DebugOptions, LogLevel
    >>> model = ORTModule(model, DebugOptions(save_onnx=True, log_level=LogLevel.INFO, onnx_prefix="model_name"))
"""

from trainrt.options import DebugOptions, LogLevel  # noqa: F401
from trainrt.rtmodule import RTModule

__all__ = ["ORTModule", "DebugOptions", "LogLevel"]

ORTModule = RTModule
"""ORTModule's name for `trainrt.RTModule`: the same class.

Example:

    >>> model = ORTModule(model)                 # as onnxruntime.training.ortmodule.ORTModule(model)
    >>> loss = model(x, y); loss.backward()
    >>> isinstance(model, trainrt.RTModule)
    True
"""
