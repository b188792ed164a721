"""The coverage sweep: which Hugging Face architectures train through RTModule as they do in eager.

    python -m trainrt.coverage [--task causal-lm,masked-lm,seq-cls,image-cls,seq2seq,audio-cls]
                               [--only NAMES] [--json F] [--markdown F] [--timeout S] [--log F]

The pieces, in the order a run uses them:
- architectures.py: the model classes the installed transformers registers per task;
- shrink.py: each one's own config made tiny and consistent, dropout off, by attribute names;
- batches.py: synthetic batches of the task's input kind, with padding and ignored labels;
- run.py: 3 SGD steps in eager and through RTModule (fallback disabled), compared;
- outcome.py: what a run came to (ok, mismatch, untranslated ops, export failure, ...);
- isolation.py: the runs in a worker process with a time limit each;
- report.py: the table, the summary, JSON and the backlog markdown (docs/coverage_backlog.md).
"""
