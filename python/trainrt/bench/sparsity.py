"""The sparse optimizers on against off, with eager beside them, on the Hugging Face models they are for:
label sparsity (TRAINRT_ENABLE_SPARSE_OPTIMIZER) alone ("labels on"), and with padding elimination
(TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER) too ("sparse on"):

- bert-mlm: BertForMaskedLM, 4 layers x 256, vocab 8192, batch 8 x 128, 15% of the tokens labelled;
- gpt2-pad: GPT2LMHeadModel, 4 layers x 256, vocab 8192, batch 8 x 128, the last 40% of each sequence
  padding (attention mask 0, labels -100);
- gpt2-dense (on request): the same without padding, every label counted but the last of each
  sequence: what the rewrite costs where there is nothing to skip.

Both return their logits beside the loss, so label sparsity still computes the full head for them; the
loss, its softmax and the head's gradients run on the valid rows (passes/label_sparsity.h). Padding
elimination runs every row-wise op on the tokens the attention mask keeps (passes/padding_elimination.h):
gpt2-pad's padding, none of bert-mlm's (its batches have no padding). Each round runs every mode for 2
untimed and `steps` timed SGD steps, the order rotating between rounds (machine load hits all alike); the
table gives the median step over all rounds, the ratios of sparse on to off, and the GFLOPs skipped per
step: the head's two gradient products (dX = dY W, dW = dY^T X) on N - R label rows, and with padding
elimination the layers' products on the dropped tokens (forward and backward, 3 x 2 x 12 H^2 a token and
layer), R and the kept tokens rounded up to a multiple of 64 as the engine plans them.

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
_MODES = ("eager", "sparse-off", "labels-on", "sparse-on")
_SWITCHES = ("TRAINRT_ENABLE_SPARSE_OPTIMIZER", "TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER")
_MODE_SWITCHES = {"sparse-off": ("0", "0"), "labels-on": ("1", "0"), "sparse-on": ("1", "1")}


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


def _kept_tokens(batch: dict) -> int:
    """The tokens padding elimination keeps as the engine plans them: the attention mask's ones and the
    rows a counted label reads, rounded up to a multiple of 64 (all of them when none is dropped)."""
    counted = torch.nn.functional.pad(batch["labels"], (0, 1), value=-100)[:, 1:] != -100
    kept = int((batch["attention_mask"].bool() | counted).sum())
    n = batch["labels"].numel()
    return n if kept == n else min(n, math.ceil(kept / 64) * 64)


def _make(mode: str, model: torch.nn.Module) -> torch.nn.Module:
    if mode == "eager":
        return model
    import trainrt

    before = {name: os.environ.get(name) for name in _SWITCHES}
    os.environ.update(zip(_SWITCHES, _MODE_SWITCHES[mode]))  # read at construction
    try:
        return trainrt.RTModule(model)
    finally:  # the caller's environment as it was
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


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
        tokens = _kept_tokens(_batch(name, 0))
        median = {mode: statistics.median(t) * 1e3 for mode, t in times.items()}
        results[name] = {"median_ms": median, "labels_vs_off": median["labels-on"] / median["sparse-off"],
                         "on_vs_off": median["sparse-on"] / median["sparse-off"],
                         "on_vs_eager": median["sparse-on"] / median["eager"], "rows": n, "valid_rows": r,
                         "kept_tokens": tokens, "head_gflop_skipped": 2 * 2 * (n - r) * _DIM * _VOCAB / 1e9,
                         "layers_gflop_skipped": 3 * 2 * 12 * (n - tokens) * _LAYERS * _DIM * _DIM / 1e9}
    return results


def markdown(results: dict) -> str:
    lines = ["| model | eager ms | sparse off ms | labels on ms | sparse on ms | labels / off | on / off | on / eager "
             "| label rows kept | tokens kept | GFLOP skipped / step: head, layers |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        m = r["median_ms"]
        lines.append(f"| {name} | {m['eager']:.1f} | {m['sparse-off']:.1f} | {m['labels-on']:.1f} | "
                     f"{m['sparse-on']:.1f} | {r['labels_vs_off']:.2f}x | {r['on_vs_off']:.2f}x | "
                     f"{r['on_vs_eager']:.2f}x | {r['valid_rows']} of {r['rows']} | {r['kept_tokens']} of {r['rows']} | "
                     f"{r['head_gflop_skipped']:.2f}, {r['layers_gflop_skipped']:.2f} |")
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
