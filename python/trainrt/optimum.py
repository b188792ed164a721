"""`trainrt.optimum`: Optimum's ORTTrainer names over trainrt.hf, so an Optimum script migrates by one import.

    -from optimum.onnxruntime import ORTTrainer, ORTTrainingArguments
    +from trainrt.optimum import ORTTrainer, ORTTrainingArguments

Example:

    >>> from trainrt.optimum import ORTTrainer, ORTTrainingArguments
    >>> args = ORTTrainingArguments(output_dir="out", optim="adamw_ort_fused")
    >>> trainer = ORTTrainer(model=model, args=args, train_dataset=train, feature="text-classification",
    ...                      onnx_model_path="out/model.onnx")
    >>> trainer.train(); trainer.export_onnx()          # writes out/model.onnx

- `optim="adamw_ort_fused"` is trainrt.optim.FusedAdam (RTTrainingArguments' adamw_trainrt_fused);
  the other choices are RTTrainingArguments' (its default, adamw_trainrt_fused, included).
- `feature=` (ORTTrainer): the task Optimum named to export the model for ONNX Runtime. Accepted and
  kept as `trainer.feature`; training does not need it (the engine captures the model's own forward,
  loss included).
- `onnx_model_path=` (ORTTrainer): where Optimum wrote the exported model; here the path
  `trainer.export_onnx()` writes to when given none (trainrt/hf/export.py says what runs that file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trainrt.hf.arguments import FUSED, RTTrainingArguments, optimizer_name
from trainrt.hf.trainer import RTTrainer

__all__ = ["ORTTrainer", "ORTTrainingArguments"]

ORT_FUSED = "adamw_ort_fused"


@dataclass
class ORTTrainingArguments(RTTrainingArguments):
    """RTTrainingArguments that also take optim="adamw_ort_fused" (Optimum's name for ORT's fused AdamW,
    here trainrt.optim.FusedAdam).

    Example:

        >>> ORTTrainingArguments(output_dir="out", optim="adamw_ort_fused").optim
        'adamw_trainrt_fused'
    """

    def __post_init__(self):
        if optimizer_name(self) == ORT_FUSED:
            self.optim = FUSED
        super().__post_init__()


class ORTTrainer(RTTrainer):
    """RTTrainer with Optimum's `feature` and `onnx_model_path` arguments (module docstring).

    Example:

        >>> trainer = ORTTrainer(model=model, args=ORTTrainingArguments(output_dir="out"), train_dataset=train,
        ...                      feature="text-classification", onnx_model_path="out/model.onnx")
        >>> trainer.feature
        'text-classification'
    """

    def __init__(self, model: torch.nn.Module | None = None, args=None, *more, feature: str = "default",
                 onnx_model_path: str | os.PathLike | None = None, **kwargs):
        super().__init__(model, ORTTrainingArguments(output_dir="trainer_output") if args is None else args,
                         *more, **kwargs)
        self.feature = feature
        self.onnx_model_path = onnx_model_path

    def export_onnx(self, path: str | os.PathLike | None = None, inputs: dict[str, torch.Tensor] | None = None) -> str:
        if path is None and self.onnx_model_path is None:
            raise ValueError("export_onnx: give a path, or onnx_model_path= to ORTTrainer")
        return super().export_onnx(self.onnx_model_path if path is None else path, inputs)
