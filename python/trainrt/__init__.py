"""TrainRT: a C++ training engine for PyTorch and ONNX models.

    import trainrt
    session = trainrt.Session("model.onnx")        # run an ONNX model in the engine
    outputs = session.run([x])                      # numpy / DLPack arrays in, numpy out (zero-copy)

    trainer = trainrt.TrainingSession("mlp.onnx", append_loss="cross_entropy", output="logits",
                                      label="y", optimizer="adamw", lr=1e-3)
    loss = trainer.train_step([x, y]); trainer.optimizer_step()
"""

from trainrt._C import (  # noqa: F401  (re-exported API)
    Error,
    InternalError,
    InvalidModel,
    OutOfMemory,
    ShapeError,
    TrainingSession,
    UnsupportedOp,
    reexport_onnx,
    set_log_level,
    supported_ops,
)
from trainrt.options import DebugOptions, FallbackPolicy, LogLevel, enable_custom_autograd_support  # noqa: F401
from trainrt.session import Session  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    """RTModule, trainrt.optim and trainrt.data import torch; load them on first use so the engine API works
    without torch."""
    if name == "RTModule":
        from trainrt.rtmodule import RTModule

        return RTModule
    if name == "register_shape_inference":
        from trainrt.capture.autograd_function import register_shape_inference

        return register_shape_inference
    if name == "optim":
        import trainrt.optim

        return trainrt.optim
    if name == "data":
        import trainrt.data

        return trainrt.data
    raise AttributeError(f"module 'trainrt' has no attribute {name!r}")
