"""`RTTrainer`: transformers' Trainer whose model runs in the TrainRT engine.

What it changes from transformers.Trainer, and nothing else:
- the model (or what model_init returns) is wrapped in trainrt.RTModule once, with
  mixed_precision="bf16" when args.bf16 (matmuls in bf16, as torch.autocast gives them; the Trainer's
  autocast says the same); an RTModule given by the caller is kept as it is. RTModule keeps the
  train and eval captures, so evaluate() and predict() run the eval-mode engine;
- args.optim may name TrainRT's fused AdamW (arguments.py);
- max_grad_norm clipping, and the gradient norm it logs, come from the engine's fused passes
  (clipping.py) when the gradients are plain f32 CPU tensors and accelerate runs no DeepSpeed, FSDP or
  XLA; otherwise from accelerate, as in the Trainer;
- export_onnx() writes the trained model's eval graph in standard ONNX ops (export.py).
Saving, resuming (model, optimizer, scheduler and RNG state) and gradient accumulation are the
Trainer's own: RTModule presents the wrapped model (its save_pretrained files, state_dict names).
"""

from __future__ import annotations

import os

import torch
from accelerate.utils import DistributedType
from transformers import Trainer

from trainrt.hf import clipping
from trainrt.hf.arguments import FUSED_IN_BACKWARD, TRAINRT_OPTIMIZERS, RTTrainingArguments, \
    check_step_in_backward, optimizer_name
from trainrt.rtmodule import RTModule


class RTTrainer(Trainer):
    """transformers.Trainer over trainrt.RTModule(model) (module docstring).

    It takes transformers.Trainer's arguments; `args` defaults to `RTTrainingArguments`, whose
    `optim` is TrainRT's FusedAdam.

    Example:

        >>> trainer = RTTrainer(model=model, args=RTTrainingArguments(output_dir="out", num_train_epochs=1),
        ...                     train_dataset=train, eval_dataset=dev)
        >>> trainer.train(); print(trainer.evaluate()["eval_loss"])
        >>> trainer.export_onnx("out/model.onnx")         # onnxruntime and trainrt.Session run it
    """

    def __init__(self, model: torch.nn.Module | None = None, args=None, *more, **kwargs):
        args = RTTrainingArguments(output_dir="trainer_output") if args is None else args
        super().__init__(self._wrap_once(model, args), args, *more, **kwargs)

    @classmethod
    def _wrap_once(cls, model: torch.nn.Module | None, args) -> torch.nn.Module | None:
        if model is None or isinstance(model, RTModule):
            return model
        return RTModule(model, cls._debug_options(args), mixed_precision="bf16" if args.bf16 else None)

    @staticmethod
    def _debug_options(args):
        """The wrapped model's trainrt.DebugOptions; None: RTModule's default (ORTTrainer sets its own)."""
        return None

    def call_model_init(self, trial=None):
        return self._wrap_once(super().call_model_init(trial), self.args)

    @staticmethod
    def get_optimizer_cls_and_kwargs(args, model=None):
        name = optimizer_name(args)
        if name not in TRAINRT_OPTIMIZERS:
            return Trainer.get_optimizer_cls_and_kwargs(args, model)
        from trainrt.optim import FusedAdam

        check_step_in_backward(args)  # args may have been changed since they were made
        # Weight decay comes per parameter group from create_optimizer; torch AdamW's decoupled decay.
        kwargs = dict(lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                      step_in_backward=name == FUSED_IN_BACKWARD)
        return FusedAdam, kwargs

    def _fused_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float | None:
        """clipping.clip_grad_norm_ where accelerate would run torch's clipping on plain gradients; None
        where accelerate does more (DeepSpeed, FSDP, XLA; fp16's GradScaler unscales first) or the
        gradients are not served."""
        if self.accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.XLA) \
                or self.accelerator.scaler is not None:
            return None
        return clipping.clip_grad_norm_(model.parameters(), max_norm)

    def _clip_grad_norm(self, model):
        norm = self._fused_grad_norm(model, self.args.max_grad_norm)
        return super()._clip_grad_norm(model) if norm is None else norm

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is None:  # max_grad_norm=0: the norm alone, for the log
            grad_norm = self._fused_grad_norm(model, float("inf"))
        return super()._get_grad_norm(model, grad_norm)

    def export_onnx(self, path: str | os.PathLike, inputs: dict[str, torch.Tensor] | None = None,
                    standard_ops: bool = True) -> str:
        """Writes the trained model's eval graph with its weights to `path`, in standard ONNX ops that
        onnxruntime runs (standard_ops=False keeps TrainRT's fused ops: export.py). `inputs`: an example
        batch of model inputs; by default the first eval (else train) batch, labels left out so the
        graph computes the outputs alone. Returns the path."""
        import onnx

        from trainrt.hf.export import inference_onnx

        if inputs is None:
            loader = self.get_eval_dataloader() if self.eval_dataset is not None else self.get_train_dataloader()
            batch = next(iter(loader))
            inputs = {k: v for k, v in batch.items() if k not in self.label_names and isinstance(v, torch.Tensor)}
        module = self.accelerator.unwrap_model(self.model)
        module = module._module if isinstance(module, RTModule) else module
        path = os.fspath(path)
        onnx.save(inference_onnx(module, inputs, standard_ops), path)
        return path
