"""`trainrt.Session`: run an ONNX model in the engine from Python; `trainrt.TrainingSession`: train one.

    session = trainrt.Session("model.onnx")            # or serialized ModelProto bytes
    (y,) = session.run([x])                            # numpy (or any DLPack CPU) arrays in, numpy out

Inputs are read in place when they are C-contiguous (no copy); outputs are numpy arrays that own
engine memory (no copy). numpy has no bfloat16: bfloat16 arrays (ml_dtypes.bfloat16, as the onnx
package uses) cross as uint16 bits and come back as ml_dtypes.bfloat16.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from trainrt import _C

try:
    import ml_dtypes

    _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # ml_dtypes comes with onnx; without it bf16 is simply not offered
    _BFLOAT16 = None


def _is_bf16(a: np.ndarray) -> bool:
    return _BFLOAT16 is not None and a.dtype == _BFLOAT16


class Session:
    """An engine session over an ONNX model (a path, or serialized ModelProto bytes): plans once per
    input signature (dtypes and dims), then runs the cached plan with no per-run copies. `profile`
    records per-node timings (`profile_summary`, `write_profile`); `seed` seeds the random ops.

    Example:

        >>> session = trainrt.Session("model.onnx")
        >>> session.input_names
        ['x']
        >>> (y,) = session.run([np.random.rand(32, 784).astype(np.float32)])
        >>> session.memory_stats()["planned_arena_bytes"]
    """

    def __init__(self, model: str | os.PathLike | bytes, seed: int = 0, profile: bool = False):
        self._session = _C.Session(model if isinstance(model, bytes) else os.fspath(model), seed, profile)

    @property
    def input_names(self) -> list[str]:
        return self._session.input_names

    @property
    def output_names(self) -> list[str]:
        return self._session.output_names

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Runs the model on one array per graph input (in order); returns one array per output."""
        arrays, bf16 = [], []
        for x in inputs:
            a = x if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray) else np.asarray(x, order="C")
            if isinstance(a, np.ndarray) and _is_bf16(a):
                arrays.append(a.view(np.uint16))
                bf16.append(True)
            else:
                arrays.append(a)
                bf16.append(False)
        outputs = self._session.run(arrays, bf16)
        dtypes = self._session.output_dtypes
        return [o.view(_BFLOAT16) if dt == "bf16" and _BFLOAT16 is not None else o for o, dt in zip(outputs, dtypes)]

    def memory_stats(self) -> dict:
        """Planned arena bytes, its lower bound, run-time sized bytes, and plan counts."""
        return self._session.memory_stats()

    def profile_summary(self, top: int = 0) -> str:
        """Op types by total time over the profiled runs (Session(profile=True))."""
        return self._session.profile_summary(top)

    def write_profile(self, path: str | os.PathLike) -> None:
        """Writes the profiled runs as a Chrome trace (chrome://tracing, Perfetto)."""
        self._session.write_profile(os.fspath(path))


def _from_engine(array):
    """An engine array as numpy gives it back: bf16 arrives as its uint16 bits (numpy has no bfloat16)
    and becomes ml_dtypes.bfloat16; floating-point parameters and gradients are never uint16 otherwise."""
    if _BFLOAT16 is not None and isinstance(array, np.ndarray) and array.dtype == np.uint16:
        return array.view(_BFLOAT16)
    return array


class TrainingSession(_C.TrainingSession):
    __doc__ = _C.TrainingSession.__doc__

    def parameter(self, name: str) -> np.ndarray:
        """A copy of a trainable parameter's current value (bf16 as ml_dtypes.bfloat16)."""
        return _from_engine(super().parameter(name))

    def gradient(self, name: str) -> np.ndarray:
        """A copy of a parameter's gradient accumulated since the last optimizer step (bf16 as
        ml_dtypes.bfloat16)."""
        return _from_engine(super().gradient(name))
