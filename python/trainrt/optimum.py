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
- `save_onnx=True, onnx_prefix=NAME` (ORTTrainingArguments): the model ORTTrainer wraps saves its
  captured graphs as ONNX, as ORTModule's did: `<dir>/<NAME>_forward.onnx` (the capture),
  `_training.onnx` (forward + backward), `_optimized_forward.onnx` and `_optimized_backward.onnx` (the
  programs the engine runs), written when a capture is built; <dir> is args.output_dir unless
  TRAINRT_SAVE_ONNX_PATH (or Optimum's ORTMODULE_SAVE_ONNX_PATH) names one. onnx_prefix is required
  with save_onnx, as in Optimum. The files hold the last capture built: evaluate() builds the eval-mode
  capture, whose graphs then replace the training ones.
- `onnx_log_level=` (ORTTrainingArguments, default WARNING): the level of RTModule's `trainrt` logger
  (VERBOSE, INFO, WARNING, ERROR, FATAL; INFO prints the start-up table of each capture).
  TRAINRT_LOG_LEVEL, if set, wins. Both apply to a model ORTTrainer wraps, not to an RTModule given to it.
- `use_module_with_loss=` (ORTTrainingArguments): Optimum's wrapper that put the loss inside ORTModule's
  graph. Here the loss is always in the engine's graph when the model computes it (labels go to the
  model, the Trainer's default), so True and False train alike. Where the Trainer computes the loss
  itself, on the engine's outputs (label_smoothing_factor > 0, compute_loss_func=, a compute_loss
  override), it stays outside the engine either way; use_module_with_loss=True then warns.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import torch
from transformers import Trainer

from trainrt.hf.arguments import FUSED, RTTrainingArguments, optimizer_name
from trainrt.hf.trainer import RTTrainer
from trainrt.options import DebugOptions, LogLevel

__all__ = ["ORTTrainer", "ORTTrainingArguments"]

ORT_FUSED = "adamw_ort_fused"


@dataclass
class ORTTrainingArguments(RTTrainingArguments):
    """RTTrainingArguments that also take optim="adamw_ort_fused" (Optimum's name for ORT's fused AdamW,
    here trainrt.optim.FusedAdam) and Optimum's save_onnx, onnx_prefix, onnx_log_level and
    use_module_with_loss (module docstring).

    Example:

        >>> ORTTrainingArguments(output_dir="out", optim="adamw_ort_fused").optim
        'adamw_trainrt_fused'
    """

    use_module_with_loss: bool = field(default=False, metadata={
        "help": "Optimum's: compute the loss inside the graph. The engine's graph holds the loss whenever the "
                "model computes it, so this changes nothing (trainrt.optimum's docstring)."})
    save_onnx: bool = field(default=False, metadata={
        "help": "Save the captured graphs as ONNX into output_dir (or TRAINRT_SAVE_ONNX_PATH); needs onnx_prefix."})
    onnx_prefix: str | None = field(default=None, metadata={
        "help": "Prefix of the saved ONNX files' names; required when save_onnx is True."})
    onnx_log_level: str = field(default="WARNING", metadata={
        "help": "Level of RTModule's log: VERBOSE, INFO, WARNING, ERROR or FATAL."})

    def __post_init__(self):
        if optimizer_name(self) == ORT_FUSED:
            self.optim = FUSED
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("ORTTrainingArguments: onnx_prefix must be given when save_onnx is True "
                             "(the saved files are <output_dir>/<onnx_prefix>_forward.onnx, ...)")
        if str(self.onnx_log_level).upper() not in LogLevel.__members__:
            raise ValueError(f"ORTTrainingArguments: onnx_log_level={self.onnx_log_level!r}; choose one of "
                             f"{', '.join(LogLevel.__members__)}")
        super().__post_init__()


class ORTTrainer(RTTrainer):
    """RTTrainer with Optimum's `feature` and `onnx_model_path` arguments, and ORTTrainingArguments'
    save_onnx, onnx_prefix, onnx_log_level and use_module_with_loss (module docstring).

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
        if getattr(self.args, "use_module_with_loss", False) and self._loss_outside_model():
            warnings.warn("ORTTrainer: use_module_with_loss=True, but the Trainer computes this loss itself "
                          "(label_smoothing_factor, compute_loss_func or a compute_loss override), on the "
                          "engine's outputs: it stays outside the engine's graph", stacklevel=2)

    def _loss_outside_model(self) -> bool:
        return (self.label_smoother is not None or self.compute_loss_func is not None
                or type(self).compute_loss is not Trainer.compute_loss)

    @staticmethod
    def _debug_options(args):
        """save_onnx, onnx_prefix and onnx_log_level as RTModule's DebugOptions (the environment wins)."""
        level = LogLevel[str(getattr(args, "onnx_log_level", "WARNING")).upper()]
        if not getattr(args, "save_onnx", False):
            return DebugOptions(log_level=level)
        return DebugOptions(save_onnx=True, onnx_prefix=args.onnx_prefix, save_path=args.output_dir, log_level=level)

    def export_onnx(self, path: str | os.PathLike | None = None, inputs: dict[str, torch.Tensor] | None = None,
                    standard_ops: bool = True) -> str:
        if path is None and self.onnx_model_path is None:
            raise ValueError("export_onnx: give a path, or onnx_model_path= to ORTTrainer")
        return super().export_onnx(self.onnx_model_path if path is None else path, inputs, standard_ops)
