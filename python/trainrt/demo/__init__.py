"""`make demo` / `python -m trainrt.demo`: a small GPT-2 trained on Shakespeare, once with plain PyTorch
and once with trainrt.RTModule, from the same initial weights on the same batches.

    python -m trainrt.demo [--steps 500] [--layers 4] [--hidden 256] [--heads 4] [--seq 128] [--batch 8]
                           [--lr 1e-3] [--seed 0] [--plot demo_gpt2.png] [--text data/shakespeare.txt]

The model is transformers' GPT2LMHeadModel built from a small GPT2Config over bytes (vocab 256: no
tokenizer, nothing downloaded), dropout off. Each run trains in a fresh process of its own (its peak
memory is its own) behind a progress bar; then the summary: both loss curves and how far apart they
are, the median step times and their ratio, the first step (RTModule captures and builds there), the
peak memory of each run, a sample of text from the trained model; and a PNG of the curves and
timings. The exit status is non-zero when the curves disagree or RTModule fell back to PyTorch.

Layout: text.py (bytes, random windows), gpt2.py (config, sampling), run.py (one training run in a
fresh process), report.py (agreement and summary), plot.py (the PNG), __main__.py (the command line).
"""
