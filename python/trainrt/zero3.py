"""DeepSpeed ZeRO stage 3 around RTModule's engine calls.

ZeRO-3 partitions each parameter across ranks: between uses `p.data` is an empty placeholder (its
full shape is `p.ds_shape`), and DeepSpeed gathers it in forward pre-hooks on the module that owns
it, then partitions it again. The engine runs the whole wrapped module as one graph, so those
per-submodule hooks never run; instead RTModule gathers the wrapped module's partitioned parameters
around each engine call with DeepSpeed's own public context, `deepspeed.zero.GatheredParameters`
(all-gather on entry, partition on exit):

- the capture, with full shapes, and with DeepSpeed's module hooks set aside while torch.export
  traces (they would run on fake tensors: "'FakeTensor' object has no attribute 'ds_status'");
- the engine's forward;
- the engine's backward, so that each gradient reaches DeepSpeed's reduce-scatter hook
  (register_post_accumulate_grad_hook) while its parameter has its full shape: gradients are handed
  over as they become final (gradient_handoff.py), and ZeRO frees each once reduced.

    model = trainrt.RTModule(model)                       # made under deepspeed.zero.Init, or not
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)   # stage 3
    loss = engine(batch); engine.backward(loss); engine.step()

Cost: the whole module's parameters are gathered for each engine call (what eager ZeRO-3 holds at
its peak is one submodule's). Wrapping each transformer block in its own RTModule bounds that to a
block.
"""

from __future__ import annotations

import contextlib

import torch

from trainrt.module_hooks import forward_hooks_set_aside


def partitioned_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters of `module` that ZeRO-3 partitioned ([] without DeepSpeed ZeRO-3)."""
    return [p for p in module.parameters() if hasattr(p, "ds_id")]


def gathered(params: list[torch.nn.Parameter]):
    """A context in which `params` (ZeRO-3 parameters) have their full data; partitioned again at its
    end. A null context for no parameters."""
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def _is_deepspeed_hook(hook) -> bool:
    fn = getattr(hook, "__func__", hook)
    return (getattr(fn, "__module__", None) or "").startswith("deepspeed")


def without_deepspeed_hooks(module: torch.nn.Module):
    """Sets DeepSpeed's forward hooks on `module` and its submodules aside while torch.export traces
    it (the parameters are gathered already); the user's own hooks stay and are captured."""
    return forward_hooks_set_aside(module.modules(), _is_deepspeed_hook)
