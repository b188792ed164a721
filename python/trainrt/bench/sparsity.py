"""Label sparsity on against off (TRAINRT_ENABLE_SPARSE_OPTIMIZER), with eager beside them, on the
Hugging Face models it is for:

- bert-mlm: BertForMaskedLM, 4 layers x 256, vocab 8192, batch 8 x 128, 15% of the tokens labelled;
- gpt2-pad: GPT2LMHeadModel, 4 layers x 256, vocab 8192, batch 8 x 128, the last 40% of each sequence
  padding (attention mask 0, labels -100);
- gpt2-dense (on request): the same without padding, every label counted but the last of each
  sequence: what the rewrite costs where there is nothing to skip.

Both return their logits beside the loss, so the engine still computes the full head for them; the
loss, its softmax and the head's gradients run on the valid rows (passes/label_sparsity.h). Each
round runs every mode for 2 untimed and `steps` timed SGD steps, the order rotating between rounds
(machine load hits all alike); the table gives the median step over all rounds, the ratio of sparse
on to off, and the head's FLOPs skipped per step: the two gradient products (dX = dY W, dW = dY^T X)
on N - R rows, R being the valid rows rounded up to a multiple of 64 as the engine plans them.

    python -m trainrt.bench.sparsity                  # both models, 3 rounds of 10 steps
    python -m trainrt.bench.sparsity --models bert-mlm --rounds 1 --steps 3
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import time

import torch

_VOCAB, _DIM, _LAYERS, _HEADS, _BATCH, _SEQ = 8192, 256, 4, 4, 8, 128
_MODES = ("eager", "sparse-off", "sparse-on")


def _bert():
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=_VOCAB, hidden_size=_DIM, num_hidden_layers=_LAYERS, num_attention_heads=_HEADS,
                        intermediate_size=4 * _DIM, max_position_embeddings=_SEQ, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return BertForMaskedLM(config)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=_VOCAB, n_embd=_DIM, n_layer=_LAYERS, n_head=_HEADS, n_positions=_SEQ,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    return GPT2LMHeadModel(config)


def _batch(model_name: str, step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, _VOCAB, (_BATCH, _SEQ), generator=g)
    mask = torch.ones_like(ids)
    labels = ids.clone()
    if model_name == "bert-mlm":
        labels[torch.rand(ids.shape, generator=g) >= 0.15] = -100
    elif model_name == "gpt2-pad":
        pad = int(_SEQ * 0.4)
        mask[:, -pad:] = 0
        labels[:, -pad:] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _rows(model_name: str, batch: dict) -> tuple[int, int]:
    """(N, R): the loss's rows, and the valid ones as the engine plans them (ops/valid_rows.h)."""
    labels = batch["labels"]
    if model_name.startswith("gpt2"):  # the causal LM loss shifts: position t predicts t + 1
        labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    n = labels.numel()
    valid = int((labels != -100).sum())
    return n, n if valid == n else min(n, max(1, math.ceil(valid / 64)) * 64)


def _make(mode: str, model: torch.nn.Module) -> torch.nn.Module:
    if mode == "eager":
        return model
    import trainrt

    before = os.environ.get("TRAINRT_ENABLE_SPARSE_OPTIMIZER")
    os.environ["TRAINRT_ENABLE_SPARSE_OPTIMIZER"] = "1" if mode == "sparse-on" else "0"  # read at construction
    try:
        return trainrt.RTModule(model)
    finally:  # the caller's environment as it was
        if before is None:
            del os.environ["TRAINRT_ENABLE_SPARSE_OPTIMIZER"]
        else:
            os.environ["TRAINRT_ENABLE_SPARSE_OPTIMIZER"] = before


def run(models=("bert-mlm", "gpt2-pad"), rounds: int = 3, steps: int = 10) -> dict:
    results = {}
    for name in models:
        torch.manual_seed(0)
        base = {"bert-mlm": _bert, "gpt2-pad": _gpt2, "gpt2-dense": _gpt2}[name]()
        runs = {}
        for mode in _MODES:
            model = _make(mode, copy.deepcopy(base))
            runs[mode] = (model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
        times = {mode: [] for mode in _MODES}
        losses = {mode: [] for mode in _MODES}
        step = 0
        for r in range(rounds):
            order = _MODES[r % len(_MODES):] + _MODES[:r % len(_MODES)]
            for mode in order:
                model, optimizer = runs[mode]
                for s in range(2 + steps):
                    batch = _batch(name, step + s)
                    start = time.perf_counter()
                    optimizer.zero_grad(set_to_none=True)
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    if s >= 2:
                        times[mode].append(time.perf_counter() - start)
                        losses[mode].append(float(loss))
            step += 2 + steps
        for mode in _MODES[1:]:
            problem = getattr(runs[mode][0], "fallback_reason", None)
            if problem is not None:
                raise RuntimeError(f"{name} {mode} fell back to PyTorch: {problem}")
        n, r = _rows(name, _batch(name, 0))
        median = {mode: statistics.median(t) * 1e3 for mode, t in times.items()}
        results[name] = {"median_ms": median, "on_vs_off": median["sparse-on"] / median["sparse-off"],
                         "on_vs_eager": median["sparse-on"] / median["eager"], "rows": n, "valid_rows": r,
                         "head_gflop_skipped": 2 * 2 * (n - r) * _DIM * _VOCAB / 1e9}
    return results


def markdown(results: dict) -> str:
    lines = ["| model | eager ms | sparse off ms | sparse on ms | on / off | on / eager | rows kept | "
             "head GFLOP skipped / step |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        m = r["median_ms"]
        lines.append(f"| {name} | {m['eager']:.1f} | {m['sparse-off']:.1f} | {m['sparse-on']:.1f} | "
                     f"{r['on_vs_off']:.2f}x | {r['on_vs_eager']:.2f}x | {r['valid_rows']} of {r['rows']} | "
                     f"{r['head_gflop_skipped']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bert-mlm,gpt2-pad")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", help="also write the results there")
    args = parser.parse_args()
    results = run(tuple(args.models.split(",")), args.rounds, args.steps)
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
