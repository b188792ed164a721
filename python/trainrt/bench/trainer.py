"""transformers.Trainer steps/s: the eager model against trainrt.hf.RTTrainer, on bert-mini sequence classification.

bert-mini is the suite's (bench/models.py): BertForSequenceClassification, 4 layers, 256 hidden, 4 heads,
vocab 8192, sequence 128, batch 8, 2 labels, random initialization (nothing is downloaded), dropout off;
the second half of every batch is padded over its last eighth. Each variant trains a copy of one model
with the arguments a user would write, everything else the Trainer's default (max_grad_norm 1.0 clipping,
a linear LR schedule, the default optimizer of each trainer):
- "Trainer + eager": transformers.Trainer(model), its default optim (adamw_torch_fused);
- "Trainer(RTModule)": transformers.Trainer(trainrt.RTModule(model)), the same optim;
- "RTTrainer": trainrt.hf.RTTrainer(model), its default optim (adamw_trainrt_fused) and the engine's
  fused gradient-norm clipping.
A step is the time from one optimizer step's end to the next one's (a TrainerCallback's on_step_end): the
Trainer's whole loop iteration, data loading and collation included. Every round trains each variant for
`warmup` untimed and `steps` timed steps (trainer.train() again on the same trainer: the RTModule keeps
its captures, so only the first round pays for them, and inside the warm-up), the order of the variants
rotating from round to round so that load from other work on the machine hits all alike. The table shows
the median over all timed steps of all rounds; steps/s is 1 / median. A second table times the clipping
alone on the model's gradients (f32, one per parameter): accelerate's path (torch.nn.utils.clip_grad_norm_)
against RTTrainer's (trainrt.hf.clipping: the engine's norm pass, then its rescale), alternating, every
call clipping (max_norm below the norm).

    python -m trainrt.bench.trainer                         # 3 rounds x (2 warm-up + 10 timed) steps
    python -m trainrt.bench.trainer --rounds 1 --steps 3    # a quick look
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import tempfile
import time

import torch
from transformers import TrainerCallback

LAYERS, DIM, HEADS, VOCAB, SEQ, BATCH, LABELS = 4, 256, 4, 8192, 128, 8, 2
VARIANTS = ("Trainer + eager", "Trainer(RTModule)", "RTTrainer")


def make_model(layers: int = LAYERS, seq: int = SEQ) -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=DIM, num_hidden_layers=layers, num_attention_heads=HEADS,
        intermediate_size=4 * DIM, max_position_embeddings=seq, pad_token_id=0, num_labels=LABELS,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def make_dataset(rows: int, seq: int = SEQ, batch: int = BATCH) -> list[dict]:
    """`rows` examples; in every batch of `batch`, the second half is padded (id 0, mask 0) over its last eighth."""
    g = torch.Generator().manual_seed(0)
    data = []
    for i in range(rows):
        ids = torch.randint(5, VOCAB, (seq,), generator=g)
        mask = torch.ones(seq, dtype=torch.long)
        if i % batch >= batch // 2:
            mask[seq - seq // 8:] = 0
        data.append(dict(input_ids=ids * mask, attention_mask=mask,
                         labels=int(torch.randint(0, LABELS, (), generator=g))))
    return data


class _StepClock(TrainerCallback):
    """Records the time of every optimizer step's end, anew at each trainer.train()."""

    def __init__(self):
        self.ends: list[float] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def _trainers(model: torch.nn.Module, dataset: list[dict], steps_per_round: int, out: str) -> dict:
    from transformers import PrinterCallback, Trainer, TrainingArguments

    import trainrt
    from trainrt.hf import RTTrainer, RTTrainingArguments

    common = dict(report_to=[], use_cpu=True, per_device_train_batch_size=BATCH, max_steps=steps_per_round,
                  logging_first_step=True, logging_steps=10**6, save_strategy="no", dataloader_num_workers=0,
                  learning_rate=1e-4, weight_decay=0.01, seed=0, disable_tqdm=True)
    made = {
        "Trainer + eager": (Trainer, copy.deepcopy(model), TrainingArguments),
        "Trainer(RTModule)": (Trainer, trainrt.RTModule(copy.deepcopy(model)), TrainingArguments),
        "RTTrainer": (RTTrainer, copy.deepcopy(model), RTTrainingArguments),
    }
    trainers = {}
    for name, (cls, m, args_cls) in made.items():
        clock = _StepClock()
        trainer = cls(model=m, args=args_cls(output_dir=f"{out}/{len(trainers)}", **common), train_dataset=dataset,
                      callbacks=[clock])
        trainer.remove_callback(PrinterCallback)  # the first step's log line, not printed
        trainers[name] = (trainer, clock)
    return trainers


def clip_times(model: torch.nn.Module, calls: int = 30) -> dict:
    """Median and best ms of clip_grad_norm_ (torch's, the engine's) over `calls` alternating calls each,
    on random gradients of model's parameters; and both norms of those gradients before any clipping."""
    from trainrt.hf import clipping

    g = torch.Generator().manual_seed(0)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    norms = {"torch": float(torch.nn.utils.clip_grad_norm_(params, math.inf)),
             "engine": clipping.clip_grad_norm_(params, math.inf)}  # the same gradients, not clipped
    # Every timed call clips: the first to 0.5, each later one by 0.5 / (0.5 + 1e-6), so nothing
    # shrinks towards denormals.
    times = {"torch": [], "engine": []}
    for i in range(calls):
        for name in (("torch", "engine") if i % 2 == 0 else ("engine", "torch")):
            start = time.perf_counter()
            if name == "torch":
                torch.nn.utils.clip_grad_norm_(params, 0.5)
            else:
                clipping.clip_grad_norm_(params, 0.5)
            times[name].append(time.perf_counter() - start)
    for p in params:
        p.grad = None
    out = {name: {"median_ms": statistics.median(ts) * 1e3, "best_ms": min(ts) * 1e3} for name, ts in times.items()}
    out["calls"], out["bytes"] = calls, 4 * sum(p.numel() for p in params)
    out["speedup"] = out["torch"]["median_ms"] / out["engine"]["median_ms"]
    out["first_norms"] = norms
    return out


def run(rounds: int = 3, warmup: int = 2, steps: int = 10, layers: int = LAYERS, seq: int = SEQ) -> dict:
    """Per variant: median, best and p90 step (ms), steps/s, the first round's first logged loss, and
    whether the model ran in the engine; plus steps/s ratios to "Trainer + eager"."""
    import trainrt

    model = make_model(layers, seq)
    per_round = warmup + 1 + steps  # intervals between step ends: one step more than timed ones
    times = {name: [] for name in VARIANTS}
    first_loss, first_round_s = {}, {}
    with tempfile.TemporaryDirectory(prefix="trainrt-bench-trainer-") as out:
        trainers = _trainers(model, make_dataset(per_round * BATCH, seq), per_round, out)
        for r in range(rounds):
            for name in VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]:
                trainer, clock = trainers[name]
                start = time.perf_counter()
                trainer.train()
                if r == 0:
                    first_round_s[name] = time.perf_counter() - start
                    first_loss[name] = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
                intervals = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
                times[name] += intervals[warmup:]
        in_engine = {name: isinstance(t.model, trainrt.RTModule) and t.model.fallback_reason is None
                     for name, (t, _) in trainers.items() if name != "Trainer + eager"}
    results = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        results[name] = {"median_ms": median * 1e3, "best_ms": min(ts) * 1e3,
                         "p90_ms": statistics.quantiles(ts, n=10)[-1] * 1e3 if len(ts) > 1 else median * 1e3,
                         "steps_per_s": 1.0 / median, "timed_steps": len(ts), "first_loss": first_loss[name],
                         "first_round_s": first_round_s[name]}
    clip = clip_times(model)
    base = results["Trainer + eager"]["steps_per_s"]
    for v in results.values():
        v["speedup"] = v["steps_per_s"] / base
    return {"model": f"BertForSequenceClassification {layers} x {DIM}, {HEADS} heads, vocab {VOCAB}, "
                     f"sequence {seq}, batch {BATCH}, half padded",
            "rounds": rounds, "warmup": warmup, "steps": steps, "torch_threads": torch.get_num_threads(),
            "in_engine": in_engine, "results": results, "clip": clip}


def markdown(figures: dict) -> str:
    lines = [f"transformers.Trainer, {figures['model']}; median of {figures['rounds']} rounds x "
             f"{figures['steps']} steps (after {figures['warmup']} warm-up steps a round)", "",
             "| trainer | median ms | best ms | p90 ms | steps/s | steps/s / Trainer + eager | first round s | first loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, v in figures["results"].items():
        lines.append(f"| {name} | {v['median_ms']:.1f} | {v['best_ms']:.1f} | {v['p90_ms']:.1f} | "
                     f"{v['steps_per_s']:.2f} | {v['speedup']:.2f}x | {v['first_round_s']:.1f} | {v['first_loss']:.4f} |")
    lines.append("first round s: the first trainer.train() of the variant, capture included for the engine's")
    c = figures["clip"]
    lines += ["", f"clip_grad_norm_ on the model's gradients ({c['bytes'] / 1e6:.1f} MB f32), median of {c['calls']} calls, "
              "every call clipping", "", "| clipping | median ms | best ms |", "|---|---:|---:|",
              f"| accelerate's: torch.nn.utils.clip_grad_norm_ | {c['torch']['median_ms']:.2f} | {c['torch']['best_ms']:.2f} |",
              f"| RTTrainer's: the engine's norm + rescale | {c['engine']['median_ms']:.2f} | {c['engine']['best_ms']:.2f} |",
              f"engine / torch speed-up: {c['speedup']:.2f}x"]
    fell_back = [name for name, ok in figures["in_engine"].items() if not ok]
    if fell_back:
        lines.append(f"\n{', '.join(fell_back)} did not run in the engine: those figures are not the engine's.")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant and round")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant and round")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.rounds, args.warmup, args.steps)
    print(f"torch {torch.__version__}, {figures['torch_threads']} torch threads")
    print(markdown(figures))
    if args.json:
        print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
