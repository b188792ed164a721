"""Activation checkpointing as a memory request: capture marks each checkpointed region's nodes.

`torch.utils.checkpoint.checkpoint` (both modes, and HF's gradient_checkpointing_enable, which calls
it through a functools.partial) asks for a block's activations to be recomputed in the backward
instead of kept. Under `capture_checkpoints()`, while torch.export traces:
- the non-reentrant mode's generator (torch.utils.checkpoint._checkpoint_without_reentrant_generator,
  looked up at each call) is replaced by one that runs the block plainly inside `region()`;
- the reentrant mode (CheckpointFunction.apply, routed here by autograd_function._apply) calls the
  block inside `region()` instead of running it under no_grad to recompute it later.
`region()` annotates the FX nodes the block makes (torch.fx.traceback.annotate, kept by
preserve_node_meta) with RECOMPUTE_KEY: a region id. The translator lists the ONNX nodes made from
them (CapturedGraph.recompute_regions); the engine's saved-value planner recomputes their outputs in
the backward from the region's inputs (plan/saved_values.h, rule 0). Nothing of the block is handed
back to PyTorch.

    with capture_checkpoints():
        ep = torch.export.export(model, args, strict=False)
    ep.graph.nodes[i].meta["custom"][RECOMPUTE_KEY]   # the region of a node inside a checkpoint
"""

from __future__ import annotations

import contextlib
import itertools

import torch.fx.traceback as fx_traceback
import torch.utils.checkpoint as torch_checkpoint

RECOMPUTE_KEY = "trainrt_recompute"
_region_ids = itertools.count(1)


@contextlib.contextmanager
def region():
    """Inside: the nodes traced belong to a fresh checkpoint region."""
    with fx_traceback.annotate({RECOMPUTE_KEY: next(_region_ids)}):
        yield


def run_reentrant(args: tuple):
    """CheckpointFunction.apply(run, preserve_rng_state, *inputs) while capturing: run(*inputs) in a region."""
    with region():
        return args[0](*args[2:])


def _plain_region(*args, **kwargs):
    """The non-reentrant mode's generator (fn, preserve_rng_state, context_fn, ..., *inputs) while
    capturing: checkpoint() runs the block once between its two next() calls, here in a region and
    with no saved-tensor hooks (the engine's planner does the recomputing)."""
    with region():
        yield


@contextlib.contextmanager
def capture_checkpoints():
    """Inside: checkpointed blocks trace as marked regions, and node annotations are kept."""
    original = torch_checkpoint._checkpoint_without_reentrant_generator
    torch_checkpoint._checkpoint_without_reentrant_generator = _plain_region
    try:
        with fx_traceback.preserve_node_meta():
            yield
    finally:
        torch_checkpoint._checkpoint_without_reentrant_generator = original
