"""FSDP2 (`torch.distributed.fsdp.fully_shard`) around RTModule's engine calls.

FSDP2 shards each parameter on dim 0 across ranks (between uses a module holds `DTensor` shards) and
drives itself from module hooks: a forward pre-hook all-gathers the module's parameters (`unshard`)
and registers its post-backward hook on the module's inputs that require grad; a forward hook
reshards them and registers a pre-backward hook on the outputs; the post-backward hook
reduce-scatters the gradients of the module's parameters (which autograd accumulated into the
unsharded parameters) into `param.grad`, a sharded DTensor, and reshards. The root's pre-backward
hook queues a final callback that runs the post-backward of every module it did not reach.

The engine runs the wrapped module as one graph, so the hooks of the FSDP modules inside it never
run by themselves. RTModule runs FSDP's registered hooks in their place, around each engine call:

- the pre-forward hooks, in module order: the wrapped module's own (if it is sharded) on the call's
  arguments, as torch would; each sharded submodule's on a one-element *anchor* tensor, so that FSDP
  registers its post-backward hook there (a submodule's real inputs exist only inside the engine);
- the capture (torch.export, with full shapes) and the engine call, with FSDP's hooks set aside;
- the forward hooks, children before parents (as modules return), the wrapped module's on the outputs.

In the backward, the engine hands each gradient to torch's AccumulateGrad as it becomes final
(gradient_handoff.py), into the unsharded parameter; when the last gradient of a sharded submodule's
parameters has been accumulated (a post-accumulate-grad hook counts them), a backward from its
anchor runs FSDP's post-backward hook: that submodule's gradients are reduce-scattered and its
parameters resharded while the engine's backward goes on with the blocks before it. The wrapped
module's own gradients are reduce-scattered by FSDP's final callback, as in eager FSDP2.

The engine's backward reads the forward's inputs in place (the parameters among them: a Linear's
weight for its input gradient), at the addresses they had at the forward. FSDP2 frees an unsharded
parameter by resizing its storage to 0 and all-gathers into new memory, so a reshard between the
engine's forward and backward would have the engine read freed memory (rtmodule.py checks the
addresses and raises instead). RTModule therefore sets `reshard_after_forward=False`
(FSDPModule.set_reshard_after_forward) on the FSDP modules its engine calls cover, and on itself when
sharded, for calls with grad: their parameters stay unsharded from the forward to their post-backward,
as the root's do in eager FSDP2, and the backward needs no second all-gather. Under no_grad nothing
is saved for a backward, and they are resharded after the call. Parameters, gradients and optimizer
state are sharded between steps; during a step the full parameters are held (more than eager FSDP2,
which holds one block's at a time).

A submodule's gradient count tells this call's gradients from another's only while one engine call
is open: when a forward comes before the previous call's backward has reduce-scattered every
submodule (two micro-batches' forwards, then one backward; or a forward whose backward never runs),
that call takes no anchors, and FSDP's final callback reduce-scatters everything after the whole
backward, which is correct in every case. Wrap-then-shard has no such fallback: FSDP's own
post-backward of the second call reshards the block before the first call's engine backward, which
then raises (run each forward's backward before the next forward of a sharded RTModule).

Both orders work:

    for block in model.blocks:                  # shard, then wrap (recommended)
        fully_shard(block)
    fully_shard(model)
    model = trainrt.RTModule(model)             # one engine graph; blocks reduce-scattered as they finish

    for i, block in enumerate(model.blocks):    # wrap blocks, then shard
        model.blocks[i] = trainrt.RTModule(block)
        fully_shard(model.blocks[i])            # FSDP's hooks run around the RTModule, as around any module
    fully_shard(model)

Shard-then-wrap is recommended. Measured on 2 gloo ranks of this 2-core machine (one thread each,
the machine shared: times within ~10%), GPT 8 x 512, vocab 16384 (34M parameters), AdamW, per rank
(`python -m trainrt.bench.fsdp`): parameters, gradients and optimizer state 257 MiB against DDP's 514
with either order; the most tensor memory live in a step 687 MiB (shard-then-wrap) and 716 MiB
(wrap-then-shard) against DDP's 918 and plain FSDP2's 479; a step 0.94x and 0.96x of plain FSDP2's
time (shard-then-wrap; two runs), 1.08x and 0.98x (wrap-then-shard). Shard-then-wrap runs the whole
model as one engine graph (one crossing into the engine per step, the engine's planning and fusions
across blocks), reduce-scatters each block inside the engine's backward as its last gradient is
handed over, and stays correct with several forwards before a backward. Wrap-then-shard runs the
embedding, final norm and head in eager PyTorch and crosses into the engine twice per block.

FSDP's `fully_shard(rtmodule)` assigns the RTModule a class made from the one it presents (the
wrapped module's); RTModule's `__class__` setter takes FSDP<RTModule>(FSDPModule, RTModule) instead
(`sharded_class`), whose named_modules() lists the RTModule itself, so that FSDP's root finds its
state (without it the block would lazily initialize as a root of its own and fail in its all-gather:
"'FSDPCommContext' object has no attribute 'all_gather_copy_in_stream'", RTModule's own named_modules
showing only the wrapped module's). Plain FSDP2 with the same structure has no such failure on
CPU/gloo: it is not a limitation of FSDP2 there.

MixedPrecisionPolicy(param_dtype=torch.bfloat16) is refused (RTModule falls back to PyTorch, or raises
with FALLBACK_DISABLE): FSDP would all-gather bf16 parameters for autograd to compute in bf16 end to
end, and the engine takes f32 parameters. Its mixed precision is `RTModule(model, mixed_precision="bf16")`
with f32 all-gathers: matmuls in bf16, parameters and gradients in f32. `reduce_dtype` alone is fine.
"""

from __future__ import annotations

import torch

from trainrt.module_hooks import forward_hooks_set_aside


def _fsdp_module_class():
    """FSDPModule, or None where torch has no FSDP2."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return None
    return FSDPModule


_SHARDED_CLASSES: dict[tuple[type, type], type] = {}


def sharded_class(cls: type, own: type, presented: type) -> type:
    """The class an RTModule (of class `own`, presenting the wrapped module's class `presented`) takes
    when given `cls`: fully_shard assigns FSDP<presented>(FSDPModule, presented), which becomes
    FSDP<own>(FSDPModule, own). A subclass of `own` is taken as it is."""
    if issubclass(cls, own):
        return cls
    if presented not in cls.__bases__:
        raise TypeError(f"an RTModule presents the class of the module it wraps ({presented.__name__}) and can "
                        f"take a class made from it as fully_shard makes one, not {cls.__name__}")
    if (cls, own) not in _SHARDED_CLASSES:
        bases = tuple(own if b is presented else b for b in cls.__bases__)
        body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__", "__module__", "__doc__")}
        body["named_modules"] = _named_modules_with_self(own)
        name = cls.__name__.removesuffix(presented.__name__) + own.__name__
        _SHARDED_CLASSES[cls, own] = type(name, bases, body)
    return _SHARDED_CLASSES[cls, own]


def _named_modules_with_self(own: type):
    """A sharded RTModule's named_modules(): itself, then the wrapped module's (`own`'s, RTModule's, shows
    only the latter). FSDP's root finds the states of the modules it manages by walking these: without
    the RTModule there, its state would initialize as a root of its own and leave its parameter group
    uninitialized ("'FSDPCommContext' object has no attribute 'all_gather_copy_in_stream'")."""

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        if self not in memo:
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
        yield from own.named_modules(self, memo, prefix, remove_duplicate)

    return named_modules


def _is_fsdp_hook(hook) -> bool:
    fn = getattr(hook, "__func__", hook)
    return (getattr(fn, "__module__", None) or "").startswith("torch.distributed.fsdp")


def _post_order(module: torch.nn.Module, seen: set):
    """module's submodules, children before parents (each once)."""
    for child in module.children():
        if child not in seen:
            seen.add(child)
            yield from _post_order(child, seen)
    yield module


class FSDPScope:
    """The FSDP modules one RTModule's engine calls stand in for, and how to run their hooks.

    `sharded` are the FSDP modules in the wrapped module's tree (the wrapped module first if it is
    one), in pre-order; `returning` the same children before parents."""

    def __init__(self, rtmodule: torch.nn.Module, sharded: list, returning: list):
        self.wrapped = rtmodule._module
        self.sharded = sharded
        self.returning = returning
        # An RTModule that fully_shard was applied to runs inside FSDP's own hooks, which torch calls.
        # (type(), not isinstance: that sees the class RTModule presents, the wrapped module's.)
        self.outer = rtmodule if issubclass(type(rtmodule), _fsdp_module_class()) else None
        for m in sharded:
            m.set_reshard_after_forward(False, recurse=False)
        self._last_call: _Call | None = None

    @classmethod
    def of(cls, rtmodule: torch.nn.Module) -> "FSDPScope | None":
        """The scope of an RTModule whose wrapped module holds FSDP2 modules, or that fully_shard was
        applied to; None otherwise (and where torch has no FSDP2)."""
        fsdp_module = _fsdp_module_class()
        if fsdp_module is None:
            return None
        wrapped = rtmodule._module
        sharded = [m for m in wrapped.modules() if isinstance(m, fsdp_module)]
        if not sharded and not issubclass(type(rtmodule), fsdp_module):
            return None
        returning = [m for m in _post_order(wrapped, {wrapped}) if isinstance(m, fsdp_module)]
        return cls(rtmodule, sharded, returning)

    def run(self, forward, fall_back, args: tuple, kwargs: dict):
        """forward(*args, **kwargs) (RTModule's engine call) inside FSDP's forward hooks of the
        sharded modules, with those hooks set aside while it runs; fall_back(reason, args, kwargs)
        instead where the engine cannot take the unsharded parameters."""
        last = self._last_call
        # The counts of a call tell its gradients from another's only while one call is open: after a
        # forward whose submodules were not all reduce-scattered (its backward is yet to run, or never
        # will), this call leaves every post-backward to FSDP's final callback, after all backwards.
        anchored = last is None or last.closed
        if self.outer is not None:  # FSDP's forward hook around the RTModule: reshard after a no-grad call only
            self.outer.set_reshard_after_forward(not torch.is_grad_enabled(), recurse=False)
        if last is not None:
            last.release()
        call = self._last_call = _Call(self, anchored and torch.is_grad_enabled())
        args, kwargs = call.pre_forward(args, kwargs)
        reason = _low_precision_parameters(self.wrapped)
        with self.hooks_set_aside():
            output = fall_back(reason, args, kwargs) if reason else forward(*args, **kwargs)
        return call.post_forward(args, kwargs, output)

    def hooks_set_aside(self):
        """FSDP's forward hooks on the sharded modules removed while the engine stands in for them:
        torch.export would trace them on fake tensors, and a fallback to the module would run them twice."""
        return forward_hooks_set_aside(self.sharded, _is_fsdp_hook)


class _Call:
    """FSDP's hooks of one engine call: the anchors, and the count of gradients each submodule awaits."""

    def __init__(self, scope: FSDPScope, anchored: bool):
        self.scope = scope
        self.anchored = anchored  # whether submodules get anchors (else FSDP's final callback reduce-scatters them)
        self.anchors: dict[torch.nn.Module, torch.Tensor] = {}  # submodule -> its anchor, after FSDP's hook
        self.waiting: dict[torch.nn.Module, int] = {}  # submodule -> gradients not yet accumulated
        self.handles = []

    def pre_forward(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        for m in self.scope.sharded:
            if m is self.scope.wrapped:
                args, kwargs = _run_pre_hooks(m, args, kwargs)
            elif self.anchored:
                (self.anchors[m],), _ = _run_pre_hooks(m, (torch.zeros((), requires_grad=True),), {})
            else:
                _run_pre_hooks(m, (), {})
        if self.anchored:
            self._count_gradients()
        return args, kwargs

    def post_forward(self, args: tuple, kwargs: dict, output):
        for m in self.scope.returning:
            if m is self.scope.wrapped:
                output = _run_post_hooks(m, args, kwargs, output)
            else:
                anchor = self.anchors.get(m)
                _run_post_hooks(m, () if anchor is None else (anchor,), {}, None)
        if not torch.is_grad_enabled():  # no backward will read them
            for m in self.scope.sharded:
                m.reshard()
        return output

    def _count_gradients(self) -> None:
        """A post-accumulate-grad hook on each unsharded parameter of each anchored submodule (not of
        FSDP modules nested in it): the last one runs the submodule's post-backward."""
        fsdp_module = _fsdp_module_class()
        for m in self.anchors:
            nested = {id(p) for sub in m.modules() if sub is not m and isinstance(sub, fsdp_module)
                      for p in sub.parameters()}
            own = [p for p in m.parameters() if p.requires_grad and id(p) not in nested]
            self.waiting[m] = len(own)
            for p in own:
                self.handles.append(p.register_post_accumulate_grad_hook(
                    lambda _, m=m: self._accumulated(m)))

    def _accumulated(self, m: torch.nn.Module) -> None:
        self.waiting[m] -= 1
        if self.waiting[m] == 0:
            # FSDP's post-backward hook (RegisterPostBackwardFunction) sits on the anchor: this backward
            # reduce-scatters m's gradients and reshards its parameters, now that the engine is done with them.
            torch.autograd.backward(self.anchors.pop(m), torch.zeros(()))

    @property
    def closed(self) -> bool:
        """Whether every anchored submodule was reduce-scattered (its backward ran to the end)."""
        return not self.anchors

    def release(self) -> None:
        """Removes the hooks; a submodule not reached is left to FSDP's final callback."""
        for h in self.handles:
            h.remove()
        self.handles = []


def _low_precision_parameters(module: torch.nn.Module) -> str | None:
    """Why the engine cannot take module's unsharded parameters: FSDP all-gathered them in a 16-bit
    dtype (MixedPrecisionPolicy(param_dtype=...)); None when it can."""
    dtype = next((p.dtype for p in module.parameters() if p.dtype in (torch.bfloat16, torch.float16)), None)
    if dtype is None:
        return None
    return (f"the parameters are {dtype} as FSDP all-gathers them (MixedPrecisionPolicy(param_dtype={dtype}) has "
            f"autograd compute the module in {dtype} end to end); the engine takes float32 parameters, and "
            "RTModule(model, mixed_precision='bf16') computes matmuls in bf16 with f32 parameters and gradients: "
            "use that with MixedPrecisionPolicy(param_dtype=None) (reduce_dtype may stay)")


def _run_pre_hooks(m: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """m's FSDP forward pre-hooks, called as torch's Module.__call__ calls them."""
    for key, hook in list(m._forward_pre_hooks.items()):
        if not _is_fsdp_hook(hook):
            continue
        if key in m._forward_pre_hooks_with_kwargs:
            result = hook(m, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(m, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


def _run_post_hooks(m: torch.nn.Module, args: tuple, kwargs: dict, output):
    """m's FSDP forward hooks, called as torch's Module.__call__ calls them."""
    for key, hook in list(m._forward_hooks.items()):
        if not _is_fsdp_hook(hook):
            continue
        if key in m._forward_hooks_with_kwargs:
            result = hook(m, args, kwargs, output)
        else:
            result = hook(m, args, output)
        if result is not None:
            output = result
    return output
