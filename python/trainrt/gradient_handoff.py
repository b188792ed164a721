"""Gradients leave the engine's backward as they become final (ORTModule's memory-efficient
gradient management, TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT).

Without it the engine's backward returns every parameter's gradient at its end, so DDP's bucketed
all-reduce cannot start until the whole backward is done, and DeepSpeed's ZeRO hooks cannot
reduce-scatter and free a gradient early. With it, the engine hands each parameter's gradient over
right after the step that makes it final and after the backward's last read of that parameter
(a hook may write it: an optimizer in backward), in the gradient's own storage (zero-copy,
ConsumedOutput::keep in the engine). This module gives it to torch's AccumulateGrad through a
reentrant backward from a `_HandOver` node whose inputs are the parameters, which runs the
parameter's hooks, DDP's reducer and ZeRO's hooks, and accumulates into `param.grad` with eager's
semantics (stolen when `grad` is None, added otherwise). The node's backward returns the gradients
as their only reference, as the engine's Function returns its outputs: AccumulateGrad steals only a
tensor nobody else holds, so `torch.autograd.backward(params, grads)`, whose caller holds `grads`
throughout, made it copy every gradient handed over (measured: all of gpt2-mini's 20 MiB of
gradients allocated again by torch in each DDP backward).

    handoff = GradientHandoff.for_call(engine, module_tensors)     # at the forward; None: off
    inputs = handoff.engine_inputs(module_tensors + user_tensors)
    ...                                                            # at the backward:
    indices = handoff.begin()
    grads = programs.backward(state, output_grads, handed_over=indices, deliver=handoff.deliver)
    handoff.finish()              # the last gradients, and any exception raised while handing over

The parameters handed over enter the engine's autograd.Function detached, as ORTModule's did
(they were not inputs of its Function): an autograd edge from the Function to a parameter would
make autograd call its AccumulateGrad again at the end with no gradient, and DDP's reducer refuses
a parameter marked ready twice. A sentinel leaf that requires grad joins the inputs instead, so
that the outputs require grad when nothing else does. At the backward, all of them are handed over for
loss.backward(), none for torch.autograd.grad or backward(inputs=[...]) (which then name inputs or
other leaves: autograd runs the engine call only on a path to those).

The reentrant backward runs without the `contextvars` copy that `torch.autograd.backward` stashes
in the thread's state (for autograd's device threads; ours run on this one). Work that DDP or ZeRO
launches from the hooks carries a copy of that state, and gloo's thread that frees the finished work
would drop the copy's last reference and take the GIL; after the script's last step that could
happen while the interpreter shuts down, when taking the GIL ends the thread inside C++ and aborts
the process ("terminate called without an active exception", seen in 1 of ~20 two-rank runs).

Gradients are handed over in groups of at least `GROUP_BYTES` (and the rest at the end): one
reentrant backward costs ~11 us on this machine whatever it carries, and DDP's buckets are larger
than a group anyway (its first is 1 MiB).

Which parameters: those whose gradient the engine computes, but those a step_in_backward optimizer
steps inside the engine; by default (mode None) only when something watches gradients as they
come: torch.distributed is initialized (DDP, DeepSpeed, FSDP), or a parameter has a
post-accumulate-grad hook (an optimizer in backward); otherwise AccumulateGrad runs right after the
engine's backward anyway. Not under create_graph (double backward).

Under DistributedDataParallel(find_unused_parameters=True) (transformers' Trainer's default for a
PreTrainedModel) nothing is handed over: DDP looks for the parameters in the autograd graph at the
forward, finds the detached ones unused and marks them ready itself, so a gradient handed over would
mark one twice. Gradients then come at the end of the engine's backward; pass
find_unused_parameters=False (TrainingArguments(ddp_find_unused_parameters=False)) to overlap.

What differs from eager while it is on: torch.autograd.grad(loss, params) raises torch's error for
parameters not used in the graph (DDP does not support autograd.grad either), backward(inputs=
[param]) leaves a handed-over parameter's grad None (autograd sees no path to it), and a parameter also
used outside the RTModule gets two accumulations in one backward, so its hooks run twice (DDP
refuses that). Set TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT=0 for such a model.
"""

from __future__ import annotations

import torch

from trainrt.engine_arrays import from_engine
from trainrt.optim import step_in_backward

GROUP_BYTES = 1 << 20


# The last input of an engine call that hands over (its outputs require grad through it; it gets no
# gradient). A backward that accumulates into it accumulates into every leaf it reaches (a plain
# loss.backward(), not one with inputs=[...] nor torch.autograd.grad).
_SENTINEL = torch.zeros((), requires_grad=True)


class _HandOver(torch.autograd.Function):
    """forward(grads, *params) -> an empty tensor; its backward gives each parameter its gradient.

    `grads` is a list the backward empties: once it returns, the tuple it returned is the gradients'
    only reference, so AccumulateGrad can steal each (into `param.grad`) rather than copy it."""

    @staticmethod
    def forward(ctx, grads: list, *params):
        ctx.grads = grads
        return params[0].new_empty(0)

    @staticmethod
    def backward(ctx, _):
        grads, ctx.grads = ctx.grads, None
        handed = (None, *grads)
        grads.clear()
        return handed


def _watched(params) -> bool:
    """Whether anything looks at gradients as they come: a distributed run or an optimizer in backward."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return True
    return any(step_in_backward.awaits_gradient(p) for p in params)


def _maybe_watched(engine, module_tensors: list[torch.Tensor]) -> bool:
    """False when _watched is False for any choice of the engine's parameters: torch.distributed is
    not initialized and none has a post-accumulate-grad hook (a step_in_backward optimizer leaves one
    on each it owns). A few attribute reads per step, where choosing the parameters first (the
    optimizer lookups of _stepped_in_engine) costs ~17 us for a 3-layer MLP."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return True
    return any(i is not None and module_tensors[i]._post_accumulate_grad_hooks
               for i in engine.wrt_index[:engine.num_wrt_params])


def _ddp_finds_unused_parameters() -> bool:
    """Whether this engine call runs inside the forward of a DDP that searches for unused parameters."""
    ddp_class = torch.nn.parallel.DistributedDataParallel
    ddp = ddp_class._get_active_ddp_module() if hasattr(ddp_class, "_get_active_ddp_module") else None
    return bool(ddp is not None and getattr(ddp, "find_unused_parameters", False))


def _stepped_in_engine(p: torch.Tensor) -> bool:
    optimizer = step_in_backward.owner_of(p)
    return optimizer is not None and optimizer._engine_can_step(p)


def _backward_without_context_stash(root: torch.Tensor, grad: torch.Tensor) -> None:
    """torch.autograd.backward(root, grad), less the Python object it stashes in the thread's state
    (see the module's docstring); the caller's stash, if any, is put back after. Where torch lacks
    these entry points, the plain call."""
    C = torch._C
    run = getattr(getattr(torch.autograd.Variable, "_execution_engine", None), "run_backward", None)
    if run is None or not all(hasattr(C, f) for f in ("_is_key_in_tls", "_get_obj_in_tls", "_remove_obj_from_tls",
                                                      "_stash_obj_in_tls")):
        torch.autograd.backward(root, grad)
        return
    outer = C._get_obj_in_tls("context") if C._is_key_in_tls("context") else None
    if outer is not None:
        C._remove_obj_from_tls("context")
    try:
        # (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable, accumulate_grad)
        run((root,), (grad,), False, False, (), True, True)
    finally:
        if outer is not None:
            C._stash_obj_in_tls("context", outer)


class GradientHandoff:
    """The hand-over of one engine call's parameter gradients, from its forward to its backward."""

    def __init__(self, wrt_indices: list[int], input_positions: list[int], params: list[torch.Tensor]):
        self.wrt_indices = wrt_indices          # wrt entries handed over
        self.input_positions = input_positions  # their positions among the engine call's inputs
        self.params = params                    # the parameters themselves
        self._index = dict(zip(wrt_indices, params))
        self._params: list[torch.Tensor] = []
        self._grads: list[torch.Tensor] = []
        self._bytes = 0
        self.error: BaseException | None = None

    @classmethod
    def for_call(cls, engine, module_tensors: list[torch.Tensor]) -> "GradientHandoff | None":
        """The hand-over for an engine call with autograd recording (None when nothing is handed
        over): engine.wrt_index maps wrt entries to inputs, module tensors come first."""
        mode = engine.mem_efficient_grad_mgmt
        if mode is False or mode is None and not _maybe_watched(engine, module_tensors):
            return None
        chosen = [(w, i) for w, i in enumerate(engine.wrt_index[:engine.num_wrt_params])
                  if i is not None and module_tensors[i].requires_grad and module_tensors[i].is_leaf
                  and not _stepped_in_engine(module_tensors[i])]
        params = [module_tensors[i] for _, i in chosen]
        if not params or (mode is None and not _watched(params)):
            return None
        if _ddp_finds_unused_parameters():
            if mode:
                raise RuntimeError("trainrt: TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT=1 under DistributedDataParallel("
                                   "find_unused_parameters=True): DDP would find the handed-over parameters unused "
                                   "and mark them ready twice. Pass find_unused_parameters=False (transformers: "
                                   "ddp_find_unused_parameters=False), or leave the option unset")
            return None
        return cls([w for w, _ in chosen], [i for _, i in chosen], params)

    def engine_inputs(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The autograd.Function's inputs: the handed-over parameters detached, the sentinel last."""
        inputs = list(inputs)
        for i in self.input_positions:
            inputs[i] = inputs[i].detach()
        return [*inputs, _SENTINEL]

    def begin(self) -> list[int]:
        """At the backward: the wrt indices to hand over; none unless it is a loss.backward() (not
        under create_graph either, whose gradients must stay differentiable)."""
        if torch.is_grad_enabled() or not step_in_backward.accumulates(_SENTINEL):
            return []
        return self.wrt_indices

    def deliver(self, index: int, capsule) -> bool:
        """Called by the engine for each handed-over gradient as it becomes final (a DLPack capsule of
        the gradient's own storage). False when handing over raised: finish() re-raises that."""
        try:
            self._params.append(self._index[index])
            self._grads.append(from_engine(capsule))  # no other reference to it here: see _HandOver
            self._bytes += self._grads[-1].nbytes
            if self._bytes >= GROUP_BYTES:
                self._flush()
            return True
        except BaseException as err:  # a hook's exception, a DDP error: for the caller, after the engine call
            self.error = err
            return False

    def _flush(self) -> None:
        params, grads = self._params, self._grads
        self._params, self._grads, self._bytes = [], [], 0
        with torch.enable_grad():
            root = _HandOver.apply(grads, *params)
        del grads  # the node holds the only list of them now
        _backward_without_context_stash(root, root.new_empty(0))

    def finish(self) -> None:
        """After the engine call: hands over what is left; raises what handing over raised."""
        error, self.error = self.error, None
        if error is not None:
            self._params, self._grads, self._bytes = [], [], 0
            raise error
        if self._params:
            self._flush()
