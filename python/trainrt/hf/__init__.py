"""`trainrt.hf`: transformers' Trainer with forward and backward in the TrainRT engine.

Example:

    >>> from trainrt.hf import RTTrainer, RTTrainingArguments
    >>> args = RTTrainingArguments(output_dir="out", optim="adamw_trainrt_fused", bf16=True, use_cpu=True)
    >>> trainer = RTTrainer(model=model, args=args, train_dataset=train, eval_dataset=dev)
    >>> trainer.train()                       # the model runs as trainrt.RTModule(model), wrapped once
    >>> trainer.evaluate(); trainer.predict(test)
    >>> trainer.save_model("out/final")       # save_pretrained files: AutoModel*.from_pretrained loads them
    >>> trainer.export_onnx("out/model.onnx") # the eval graph, trained weights, standard ONNX (export.py)

A plain `transformers.Trainer(model=trainrt.RTModule(model))` works too (RTModule presents the
wrapped model's forward signature, class and attributes); RTTrainer adds the fused optimizers, bf16
as the engine's mixed precision, and export_onnx.
"""

from trainrt.hf.arguments import RTTrainingArguments  # noqa: F401
from trainrt.hf.trainer import RTTrainer  # noqa: F401

__all__ = ["RTTrainer", "RTTrainingArguments"]
