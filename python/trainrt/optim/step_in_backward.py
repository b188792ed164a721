"""Optimizer step in the backward: `FusedAdam(..., step_in_backward=True)` and `FusedSGD(...)` alike.

    optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4, step_in_backward=True)
    loss.backward()             # every parameter is stepped during the backward; p.grad stays None
    scheduler.step()            # optimizer.step() / zero_grad() may stay in the loop: no-ops here

Each parameter is updated as soon as its gradient is final, with the same math and state as a step
after the backward (the state_dict is the same, and loads into torch.optim.AdamW). Two paths, one
result:

- Parameters whose backward runs in the engine (RTModule): the engine hands each gradient to the
  optimizer right after the backward's last read of that parameter, while it is still in cache, and
  reuses its bytes for the next value (consumer_for, _C.OptimizerInBackward): the gradients are
  never all in memory and never written to fresh storage (torch's fused step reads 28 bytes per
  parameter after the backward; this one reads the gradient from cache).
- Every other parameter (a plain torch module, RTModule in fallback, parameters used outside the
  captured module): torch's Tensor.register_post_accumulate_grad_hook steps it once autograd has
  accumulated its gradient, and sets p.grad back to None (torch's "optimizer in backward" pattern).

What cannot work, since every backward steps: gradient accumulation over several backwards per
step, gradient clipping or unscaling between backward and step (FP16_Optimizer refuses such an
optimizer), closures that re-evaluate the loss (LBFGS-style), an all-reduce of the gradients
between backward and step (refused under torch.distributed with more than one process). A parameter
whose gradient comes from two places in one backward (an RTModule called twice before it, or a
parameter used inside an RTModule and outside it) would be stepped twice: the second step is refused
with an error (after the first has been taken).

A parameter belongs to the step_in_backward optimizer that was given it last (an optimizer made
again after loading a checkpoint takes over from the old one, which no longer steps it). The
registry is weak on both sides: a dropped optimizer steps nothing, a dropped parameter is forgotten.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils.weak import WeakIdKeyDictionary

from trainrt import _C

# parameter -> weakref to the step_in_backward optimizer that owns it
_owners: WeakIdKeyDictionary = WeakIdKeyDictionary()
# parameter -> its torch hook (one per parameter, whichever optimizer owns it)
_hooks: WeakIdKeyDictionary = WeakIdKeyDictionary()
# parameter -> (autograd graph task, "engine" or "torch"): which path stepped it in which backward
_stepped_in: WeakIdKeyDictionary = WeakIdKeyDictionary()


def owner_of(p: torch.Tensor):
    """The live step_in_backward optimizer that owns p, or None."""
    ref = _owners.get(p)
    return ref() if ref is not None else None


def register(optimizer, params) -> None:
    """Makes `optimizer` step `params` in the backward, taking them over from any earlier one."""
    for p in params:
        _owners[p] = weakref.ref(optimizer)
        if p not in _hooks:
            _hooks[p] = p.register_post_accumulate_grad_hook(_torch_hook)


def awaits_gradient(p: torch.Tensor) -> bool:
    """Whether a post-accumulate-grad hook wants p's gradient as soon as it is accumulated: a live
    step_in_backward optimizer's, or anyone else's (the hook this module leaves on a parameter
    whose optimizer was dropped waits for nothing)."""
    hooks = p._post_accumulate_grad_hooks
    if not hooks:
        return False
    own = _hooks.get(p)
    return owner_of(p) is not None or any(own is None or key != own.id for key in hooks)


def _mark(p: torch.Tensor, path: str) -> None:
    """Records that `path` stepped p in the current backward; refuses a second step in it."""
    task = torch._C._current_graph_task_id()
    previous = _stepped_in.get(p)
    if previous is not None and previous[0] == task and task >= 0:
        raise RuntimeError(f"step_in_backward: a parameter of shape {tuple(p.shape)} would be stepped twice in one "
                           f"backward ({previous[1]} stepped it, now {path}): its gradient comes from more than one "
                           f"place (an RTModule called twice before the backward, or a parameter used inside and "
                           f"outside it). Drop step_in_backward for such a model.")
    _stepped_in[p] = (task, path)


def _torch_hook(p: torch.Tensor) -> None:
    """After autograd accumulated p.grad: one step of p, then p.grad = None."""
    optimizer = owner_of(p)
    if optimizer is None or p.grad is None:
        return
    _mark(p, "torch")
    with torch.no_grad():
        optimizer._step_one(p)
    p.grad = None


def consumer_for(wrt_tensors: list[torch.Tensor]):
    """An engine consumer that steps those of `wrt_tensors` (one per wrt entry of an engine backward,
    None for entries that are not parameters) that a step_in_backward optimizer owns and the engine
    can update in place; None when there is none. The others get their gradient as usual."""
    if not _owners:  # no step_in_backward optimizer: nothing to look up per parameter
        return None
    consumer = None
    for index, p in enumerate(wrt_tensors):
        optimizer = owner_of(p) if p is not None else None
        if optimizer is None or not optimizer._engine_can_step(p) or not accumulates(p):
            continue
        if consumer is None:
            consumer = _C.OptimizerInBackward()
        _mark(p, "engine")
        optimizer._add_to_consumer(consumer, index, p)
    return consumer


def accumulates(p: torch.Tensor) -> bool:
    """Whether the running backward accumulates into p.grad (loss.backward()), so that p is to be
    stepped; torch.autograd.grad(loss, params) returns the gradients instead (torch refuses the
    question for a leaf there, which answers it)."""
    try:
        return bool(torch._C._will_engine_execute_node(torch.autograd.graph.get_gradient_edge(p).node))
    except RuntimeError:
        return False


def after_engine_backward(consumer, wrt_tensors: list[torch.Tensor]) -> None:
    """What the engine's steps leave for torch-side state (SGD's first momentum buffers)."""
    for index in consumer.indices():
        p = wrt_tensors[index]
        owner_of(p)._after_engine_step(consumer, index, p)
