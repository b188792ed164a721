"""`RTTrainingArguments`: transformers' TrainingArguments with TrainRT's optimizers among the `optim` choices.

    optim="adamw_trainrt_fused"              trainrt.optim.FusedAdam (torch.optim.AdamW's update, one fused
                                             multi-tensor step per parameter group); the default here
    optim="adamw_trainrt_fused_in_backward"  FusedAdam(step_in_backward=True): each parameter is stepped in
                                             the engine's backward as soon as its gradient is final, and no
                                             gradient is kept; needs max_grad_norm=0 and
                                             gradient_accumulation_steps=1 (refused otherwise)

Every other `optim` is transformers' own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

FUSED = "adamw_trainrt_fused"
FUSED_IN_BACKWARD = "adamw_trainrt_fused_in_backward"
TRAINRT_OPTIMIZERS = (FUSED, FUSED_IN_BACKWARD)


def optimizer_name(args: TrainingArguments) -> str:
    """args.optim as a plain string (transformers keeps its own names as an enum)."""
    return getattr(args.optim, "value", args.optim)


def check_step_in_backward(args: TrainingArguments) -> None:
    """Refuses what a step inside the backward cannot do: the whole gradient never exists at once."""
    if optimizer_name(args) != FUSED_IN_BACKWARD:
        return
    if args.max_grad_norm is not None and args.max_grad_norm > 0:
        raise ValueError(f"optim={FUSED_IN_BACKWARD!r} steps each parameter during the backward, before the other "
                         f"gradients exist, so the gradient norm cannot be clipped: set max_grad_norm=0 "
                         f"(TrainingArguments' default is 1.0) or use optim={FUSED!r}")
    if args.gradient_accumulation_steps > 1:
        raise ValueError(f"optim={FUSED_IN_BACKWARD!r} steps the parameters in every backward and keeps no "
                         f"gradient, so gradients cannot be accumulated: set gradient_accumulation_steps=1 "
                         f"or use optim={FUSED!r}")


@dataclass
class RTTrainingArguments(TrainingArguments):
    """TrainingArguments whose `optim` also takes adamw_trainrt_fused (the default) and
    adamw_trainrt_fused_in_backward (module docstring).

    Example:

        >>> args = RTTrainingArguments(output_dir="out", optim="adamw_trainrt_fused_in_backward",
        ...                            max_grad_norm=0.0, bf16=True, use_cpu=True)   # bf16: the engine's
        >>> args.optim
        'adamw_trainrt_fused_in_backward'
    """

    optim: str = field(default=FUSED, metadata={
        "help": f"The optimizer: {', '.join(TRAINRT_OPTIMIZERS)}, or one of transformers' OptimizerNames."})

    def __post_init__(self):
        name = optimizer_name(self)
        if name not in TRAINRT_OPTIMIZERS:
            super().__post_init__()
            return
        self.optim = "adamw_torch"  # TrainingArguments checks the name against transformers' own list
        super().__post_init__()
        self.optim = name
        check_step_in_backward(self)
