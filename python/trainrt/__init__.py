"""TrainRT: a C++ training engine for PyTorch and ONNX models.

Keep the PyTorch training loop; forward and backward run in the engine:

    >>> import torch, trainrt
    >>> model = trainrt.RTModule(torch.nn.Linear(8, 2))           # or trainrt.ortmodule.ORTModule
    >>> optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4)
    >>> loss = model(torch.randn(4, 8)).square().mean()
    >>> loss.backward(); optimizer.step(); optimizer.zero_grad()

Or run and train ONNX models in the engine, without torch:

    >>> session = trainrt.Session("model.onnx")        # run an ONNX model in the engine
    >>> outputs = session.run([x])                      # numpy / DLPack arrays in, numpy out (zero-copy)
    >>> trainer = trainrt.TrainingSession("mlp.onnx", append_loss="cross_entropy", output="logits",
    ...                                   label="y", optimizer="adamw", lr=1e-3)
    >>> loss = trainer.train_step([x, y]); trainer.optimizer_step()

The public modules are this one, `trainrt.optim`, `trainrt.hf`, `trainrt.optimum`,
`trainrt.ortmodule` and `trainrt.options` (docs/architecture.md says what the others hold).
"""

import os

from trainrt import _C
from trainrt._C import (  # noqa: F401  (re-exported API)
    Error,
    InternalError,
    InvalidModel,
    OutOfMemory,
    ShapeError,
    UnsupportedOp,
)
from trainrt.session import Session, TrainingSession  # noqa: F401

__version__ = "0.2.0"

__all__ = [
    "RTModule", "register_shape_inference",
    "DebugOptions", "FallbackPolicy", "LogLevel", "enable_custom_autograd_support",
    "Session", "TrainingSession", "supported_ops", "reexport_onnx", "set_log_level",
    "Error", "InvalidModel", "UnsupportedOp", "ShapeError", "OutOfMemory", "InternalError",
]

# Names loaded on first use: RTModule and trainrt.optim import torch, so the engine API works without
# it; the options module is not imported with the package, so `python -m trainrt.options` runs it once.
_SUBMODULES = ("optim", "options", "hf", "optimum", "ortmodule", "data")
_LAZY = {"RTModule": ("trainrt.rtmodule", "RTModule"),
         "register_shape_inference": ("trainrt.capture.autograd_function", "register_shape_inference"),
         "DebugOptions": ("trainrt.options", "DebugOptions"),
         "FallbackPolicy": ("trainrt.options", "FallbackPolicy"),
         "LogLevel": ("trainrt.options", "LogLevel"),
         "enable_custom_autograd_support": ("trainrt.options", "enable_custom_autograd_support")}


def __getattr__(name):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        value = globals()[name] = getattr(importlib.import_module(module), attr)  # loaded once
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"trainrt.{name}")
    raise AttributeError(f"module 'trainrt' has no attribute {name!r}")


def supported_ops() -> list[tuple[str, str]]:
    """The (domain, op) pairs the engine has a schema and a CPU kernel for; "" is the ONNX domain,
    "com.trainrt" TrainRT's own fused and gradient ops. `python -m trainrt.conformance` runs the ONNX
    backend node tests of each.

    Example:

        >>> ("", "MatMul") in trainrt.supported_ops()
        True
    """
    return _C.supported_ops()


def reexport_onnx(model: str | os.PathLike | bytes) -> bytes:
    """Imports an ONNX model (a path or serialized ModelProto bytes) with TrainRT's importer, verifies
    the graph and exports it again as bytes: the round trip `tests/python/test_onnx_roundtrip.py`
    checks against onnx.checker and onnxruntime.

    Example:

        >>> data = trainrt.reexport_onnx(open("model.onnx", "rb").read())
        >>> onnx.checker.check_model(onnx.load_from_string(data))
    """
    return _C.reexport_onnx(model)


def set_log_level(level: int) -> None:
    """Sets the C++ engine's log level for the process (0 VERBOSE .. 4 FATAL, `trainrt.LogLevel`'s
    values; the engine logs to stderr). RTModule's own messages go through the `trainrt` Python logger,
    whose level `DebugOptions(log_level=...)` and `TRAINRT_LOG_LEVEL` set.

    Example:

        >>> trainrt.set_log_level(trainrt.LogLevel.VERBOSE)   # e.g. which bf16 ops run in f32
    """
    _C.set_log_level(int(level))


TrainingSession.__doc__ = """Trains an ONNX model in the engine from Python alone: forward and backward as one planned
program, a fused optimizer in place, an LR schedule, checkpoints and inference export (the C++
`trainrt::TrainingSession`, src/trainrt/train/training_session.h; `trainrt train` on the command line).

`append_loss` ("cross_entropy" or "mse") adds a loss over `output` and a new `label` input to a model
that has none; every floating-point initializer is trained unless frozen.

Example:

    >>> trainer = trainrt.TrainingSession("mlp.onnx", append_loss="cross_entropy", output="logits",
    ...                                   label="y", optimizer="adamw", lr=1e-2)
    >>> for x, y in batches:                      # numpy arrays
    ...     loss = trainer.train_step([x, y])
    ...     trainer.optimizer_step()
    >>> trainer.export_inference_model("trained.onnx", ["logits"])
"""

Error.__doc__ = """Base class of the engine's errors, which mirror the C++ hierarchy (src/trainrt/core/error.h): each
message says what was wrong and where (file, node, op, input, shapes).

Example:

    >>> try:
    ...     trainrt.Session(b"not a model")
    ... except trainrt.Error as e:
    ...     print(type(e).__name__)
    InvalidModel
"""

InvalidModel.__doc__ = """The model is malformed: bytes that do not decode, undefined or twice-produced values, a graph
that fails verification, a checkpoint file that is truncated or foreign.

Example:

    >>> trainrt.Session(b"not a model")
    Traceback (most recent call last):
    trainrt.InvalidModel: ...
"""

UnsupportedOp.__doc__ = """The engine has no schema, kernel (for that dtype) or gradient rule for an op the model uses; the
message names the op and the node. A Session plans at its first run, so that is where it is raised;
RTModule falls back to PyTorch on it under `FALLBACK_UNSUPPORTED_ONNX_MODEL` (in the default policy).

Example:

    >>> session = trainrt.Session("hann.onnx")               # one HannWindow node
    >>> session.run([np.array(4)])
    Traceback (most recent call last):
    trainrt.UnsupportedOp: node 'HannWindow_0' (HannWindow): op is not supported by TrainRT
"""

ShapeError.__doc__ = """Shapes or dtypes that do not fit: an input of the wrong rank, size or type, or an op whose inputs
disagree; the message names the node or input and the shapes.

Example:

    >>> session = trainrt.Session("linear.onnx")             # y = MatMul(x: (batch, 4), w: (4, 3))
    >>> session.run([np.zeros((2, 5), np.float32), w])
    Traceback (most recent call last):
    trainrt.ShapeError: input 'x' has shape (2, 5), expected (batch, 4)
"""

OutOfMemory.__doc__ = """An allocation the engine needed failed (a tensor, arena or output storage larger than the memory
left); the message gives the bytes asked for.

Example:

    >>> try:
    ...     outputs = session.run([batch])
    ... except trainrt.OutOfMemory as e:
    ...     print(e)                         # could not allocate ... bytes for a tensor
"""

InternalError.__doc__ = """A broken invariant inside the engine (a failed TRAINRT_CHECK: a bug of TrainRT, not of the model);
the message gives the file and line. Please report it with the message and, if you can, the model
(`DebugOptions(save_onnx=True)` saves the graphs).

Example:

    >>> try:
    ...     loss = model(x)
    ... except trainrt.InternalError as e:
    ...     print("TrainRT bug:", e)
"""
