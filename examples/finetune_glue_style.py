"""Fine-tune a small BERT classifier with transformers' Trainer, forward and backward in TrainRT.

    python examples/finetune_glue_style.py [--steps 60] [--bf16] [--optimum]
    torchrun --nproc_per_node 2 examples/finetune_glue_style.py      # or: accelerate launch --cpu --num_processes 2

A GLUE-style sentence-pair task made on the fly (nothing is downloaded): two token sequences of
varying length, padded; the label says whether the second one's tokens come from the upper half of
the vocabulary (a bag-of-words signal a small model learns in a few dozen steps).
The model is a 2-layer BERT from a tiny config. The script trains, evaluates (accuracy), saves the
model as save_pretrained files, reloads it with AutoModelForSequenceClassification and exports the
eval graph as ONNX. --optimum runs the same through Optimum's names (trainrt.optimum).
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

VOCAB, MAX_LEN = 64, 24
CLS, SEP, PAD = 1, 2, 0


def make_pairs(n: int, seed: int) -> list[dict]:
    """[CLS] a [SEP] b [SEP], padded to MAX_LEN; label 1 when b's tokens are from the vocabulary's upper half."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        a = torch.randint(3, VOCAB, (int(torch.randint(3, 9, (), generator=g)),), generator=g)
        label = int(torch.randint(0, 2, (), generator=g))
        low, high = (VOCAB // 2, VOCAB) if label else (3, VOCAB // 2)
        b = torch.randint(low, high, (int(torch.randint(3, 9, (), generator=g)),), generator=g)
        ids = torch.cat([torch.tensor([CLS]), a, torch.tensor([SEP]), b, torch.tensor([SEP])])
        types = torch.cat([torch.zeros(len(a) + 2, dtype=torch.long), torch.ones(len(b) + 1, dtype=torch.long)])
        pad = MAX_LEN - len(ids)
        rows.append(dict(input_ids=torch.nn.functional.pad(ids, (0, pad), value=PAD),
                         token_type_ids=torch.nn.functional.pad(types, (0, pad)),
                         attention_mask=torch.nn.functional.pad(torch.ones(len(ids), dtype=torch.long), (0, pad)),
                         labels=label))
    return rows


def accuracy(prediction) -> dict:
    return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--bf16", action="store_true", help="the engine's bf16 mixed precision")
    parser.add_argument("--optimum", action="store_true", help="through trainrt.optimum's ORTTrainer names")
    parser.add_argument("--output-dir", default=None, help="default: a temporary folder")
    options = parser.parse_args()
    if options.optimum:
        from trainrt.optimum import ORTTrainer as Trainer, ORTTrainingArguments as Arguments

        optim = "adamw_ort_fused"
    else:
        from trainrt.hf import RTTrainer as Trainer, RTTrainingArguments as Arguments

        optim = "adamw_trainrt_fused"

    output_dir = options.output_dir or tempfile.mkdtemp(prefix="trainrt_glue_")
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=MAX_LEN, num_labels=2))
    args = Arguments(output_dir=output_dir, optim=optim, learning_rate=1e-3, weight_decay=0.01, max_steps=options.steps,
                     per_device_train_batch_size=16, per_device_eval_batch_size=32, logging_steps=10,
                     eval_strategy="no", save_strategy="no", bf16=options.bf16, use_cpu=True, report_to=[],
                     dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=make_pairs(2048, 1), eval_dataset=make_pairs(256, 2),
                      compute_metrics=accuracy)
    trainer.train()
    metrics = trainer.evaluate()
    print(f"eval loss {metrics['eval_loss']:.4f}  accuracy {metrics['eval_accuracy']:.3f}  "
          f"(engine: {trainer.model.num_captures} captures, fallback: {trainer.model.fallback_reason})")
    saved = os.path.join(output_dir, "final")
    trainer.save_model(saved)  # the main process writes (torchrun / accelerate launch: the others wait)
    if trainer.is_world_process_zero():
        reloaded = AutoModelForSequenceClassification.from_pretrained(saved)
        print(f"saved to {saved}; reloaded as {type(reloaded).__name__}")
        print(f"eval graph written to {trainer.export_onnx(os.path.join(output_dir, 'model.onnx'))}")


if __name__ == "__main__":
    main()
