"""`trainrt.bench`: the benchmark suite, TrainRT against PyTorch eager and torch.compile, side by side.

    python -m trainrt.bench                                  # quick suite: mlp, gpt2-mini, 20 timed steps
    python -m trainrt.bench --models gpt2-mini --steps 30 --json out.json --markdown out.md

Layout: models.py (what is trained, its batches and its analytic FLOP count), modes.py (how a step runs:
eager, compile, rtmodule), measure.py (interleaved timing, first step, peak RSS), rss.py (the process's
RSS and the reset of its peak; the demo uses it too), report.py (table, JSON, markdown). Performance is
measured here, never in timed unit tests. Standalone: straggler.py (DDP's wait on the slowest rank with
torch's DistributedSampler and with trainrt.data's samplers: python -m trainrt.bench.straggler), fsdp.py
(FSDP2 with RTModule in both orders: memory per rank against DDP, step time against plain FSDP2:
python -m trainrt.bench.fsdp). In the suite after the models, standalone too: trainer.py
(transformers.Trainer with the eager model against trainrt.hf.RTTrainer, steps/s on bert-mini sequence
classification: python -m trainrt.bench.trainer).
"""
