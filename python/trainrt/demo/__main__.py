"""The demo's command line: prepare the shared weights and batches, run PyTorch then RTModule, report."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

import torch

import trainrt.demo
from trainrt.demo.gpt2 import gpt2_config, gpt2_model
from trainrt.demo.plot import write_plot
from trainrt.demo.report import summary
from trainrt.demo.run import MAX_GRAD_NORM, WARMUP_STEPS, WEIGHT_DECAY, RunSpec, run_in_fresh_process
from trainrt.demo.text import TEXT, load_tokens, random_windows

PROMPT = b"MENENIUS:\n"
SAMPLE_LENGTH = 300


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainrt.demo", description=trainrt.demo.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500, help="training steps of each run (>= 2)")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks")
    parser.add_argument("--hidden", type=int, default=256, help="model width (n_embd)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (divide --hidden)")
    parser.add_argument("--seq", type=int, default=128, help="bytes per training window (= n_positions)")
    parser.add_argument("--batch", type=int, default=8, help="windows per step")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (after a linear warm-up)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the initial weights, the windows and the sample")
    parser.add_argument("--plot", default="demo_gpt2.png", help="where to write the PNG")
    parser.add_argument("--text", default=str(TEXT), help="the training text (any file: its bytes are the tokens)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the median step time leaves out the first)")
    if args.hidden % args.heads:
        parser.error(f"--heads {args.heads} does not divide --hidden {args.hidden}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    tokens = load_tokens(pathlib.Path(args.text))
    windows = random_windows(tokens, args.steps, args.batch, args.seq, args.seed)  # (steps, B, T)
    config = gpt2_config(args.layers, args.hidden, args.heads, args.seq)
    torch.manual_seed(args.seed)
    model = gpt2_model(config)
    parameters = sum(p.numel() for p in model.parameters())
    title = (f"GPT-2 (transformers GPT2LMHeadModel): {args.layers} layers, {args.hidden} hidden, {args.heads} heads, "
             f"{parameters / 1e6:.2f} M parameters; {args.steps} steps of {args.batch} x {args.seq} bytes")
    print(title)
    print(f"text: {args.text} ({len(tokens):,} bytes, byte-level tokens, vocab 256); windows drawn with seed {args.seed}")
    print(f"a step: zero_grad, forward and loss, backward, gradient norm clipped to {MAX_GRAD_NORM:g}, AdamW step "
          f"(lr {args.lr:g} after a {WARMUP_STEPS}-step linear warm-up, weight decay {WEIGHT_DECAY:g}); dropout off")
    print("both runs start from the same initial weights and see the same batches; each runs in a fresh process\n")

    with tempfile.TemporaryDirectory(prefix="trainrt-demo-") as tmp:
        tensors_path = os.path.join(tmp, "tensors.pt")
        torch.save({"init": model.state_dict(), "windows": windows}, tensors_path)
        shared = dict(config=config.to_dict(), tensors_path=tensors_path, lr=args.lr, prompt=PROMPT, seed=args.seed)
        pytorch = run_in_fresh_process(RunSpec("pytorch", sample_length=0, **shared))
        rtmodule = run_in_fresh_process(RunSpec("rtmodule", sample_length=SAMPLE_LENGTH, **shared))

    text, ok = summary(pytorch, rtmodule)
    print(text)
    write_plot(args.plot, title, pytorch, rtmodule)
    print(f"\nplot: {os.path.abspath(args.plot)}")
    print(f"\nsample from the RTModule-trained weights (temperature 0.8, after {PROMPT.decode()!r}):\n")
    print(PROMPT.decode() + rtmodule.sample)
    print(f"\ndemo took {time.perf_counter() - began:.0f} s")
    if not ok:
        print("demo: RTModule did not show what the demo claims (see above)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
