"""`trainrt.RTModule`: wrap a torch.nn.Module, keep the training loop, run forward and backward in the engine.

    model = trainrt.RTModule(model)
    loss = model(x, y)          # first call: capture (torch.export) -> translate -> engine programs
    loss.backward()             # the engine's backward program; gradients land in param.grad
    optimizer.step()            # any torch optimizer: parameters are read from torch every step

Parameters of a trainrt.optim optimizer made with step_in_backward=True get no gradient: the engine's
backward steps each one as soon as its gradient is final (trainrt/optim/step_in_backward.py).

Mixed precision: under `torch.autocast("cpu", dtype=torch.bfloat16)`, or with
`RTModule(model, mixed_precision="bf16")` (env TRAINRT_MIXED_PRECISION=bf16), every op computes in
the dtype eager autocast gives it: the matmul family (linear, matmul, bmm, addmm, baddbmm),
convolutions and attention in bf16 with f32 sums, the ops after them on their bf16 results (saved
activations in bf16), the losses in f32; parameters and their gradients stay f32
(capture/autocast.py says how this follows autocast).

The captured programs are cached per input schema (train/eval mode, autocast dtype, tree structure,
dtypes, ranks, non-tensor values, which inputs require grad). Input dims are symbolic where torch.export allows
(capture/export.py), so a new batch size or sequence length reuses the programs: a schema holds a
list of captures, and a call runs the first whose static dims and symbol ranges accept its shapes
(a model that specializes a dim gets one capture per value there). The engine plans memory per
concrete shape. Parameters and inputs cross zero-copy (DLPack); outputs come back as torch tensors
over engine memory.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import types

import torch
from torch.utils import _pytree as pytree

from trainrt import _C, fsdp, memory_budget, python_op, shared_captures, startup_report, threads, zero3
from trainrt.engine_arrays import capsules, engine_view, from_engine as _from_engine
from trainrt.gradient_handoff import GradientHandoff
from trainrt.input_density import InputDensityObserver, describe_skipped
from trainrt.options import FallbackPolicy
from trainrt.optim import step_in_backward

_log = logging.getLogger("trainrt")
if not _log.handlers:  # messages reach the user without logging configuration; levels set by DebugOptions
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    _log.addHandler(_handler)
    _log.propagate = False


def _draw_seed(engine) -> int:
    """Seeds the engine's random ops from torch's default generator, so torch.manual_seed reproduces
    runs. A graph without random ops draws nothing, as eager consumes no random numbers for it."""
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item()) if engine.draws_random else 0


def _names_read(graph) -> set[str]:
    """The value names the graph's nodes read, and those its control-flow bodies read from it by
    name (an If branch of a torch.cond reads the parameters it uses), bodies' outputs included."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                names |= _names_read(body) | {out.name for out in body.output}
    return names


class _Engine:
    """The engine programs of one captured input schema, plus how to feed and unpack them."""

    def __init__(self, captured, module: torch.nn.Module, input_requires_grad: list[bool], profile: bool = False,
                 optimize: bool = True, mem_efficient_grad_mgmt: bool | None = None, zero3_params=None,
                 num_threads: int | None = None, memory_opt_level: int = 0, label_sparsity: bool = True,
                 memory_opt_config: str = "", checkpoint_recompute: bool = True, padding_elimination: bool = False,
                 codegen: tuple[str, str] | None = None):
        self.captured = captured
        self.memory_opt_level = memory_opt_level
        self.num_threads = num_threads  # the engine's threads; None: torch's (threads.py)
        self.zero3_params = zero3_params or []  # gathered around the backward too (zero3.py)
        self.mem_efficient_grad_mgmt = mem_efficient_grad_mgmt  # gradient_handoff.py: None = when watched
        params = dict(module.named_parameters(remove_duplicate=False))
        self.param_names = [fqn for _, fqn in captured.param_inputs]
        self.buffer_names = [fqn for _, fqn in captured.buffer_inputs]
        # A parameter the forward never reads gets no gradient (grad None, as in eager), nor one the
        # loss does not depend on (`unreached` below: read through detach or integer paths only).
        read = _names_read(captured.model.graph)
        grad_params = [name for (name, fqn) in captured.param_inputs if params[fqn].requires_grad and name in read]
        grad_inputs = [name for name, rg in zip(captured.user_inputs, input_requires_grad) if rg]
        self.wrt = grad_params + grad_inputs
        self.num_wrt_params = len(grad_params)  # wrt entries [0, this) are parameters, the rest user inputs
        self.grad_outputs = [o for o, d in zip(captured.outputs, captured.differentiable_outputs) if d]
        graph_inputs = [n for n, _ in captured.param_inputs] + [n for n, _ in captured.buffer_inputs] + captured.user_inputs
        index = {name: i for i, name in enumerate(graph_inputs)}
        self.programs = _C.ModulePrograms(captured.model.SerializeToString(), self.grad_outputs, self.wrt, profile,
                                          optimize, captured.recompute_regions if checkpoint_recompute else {},
                                          captured.layers, memory_opt_level,
                                          label_sparsity, memory_opt_config, padding_elimination,
                                          codegen is not None, *(codegen or ("", "")))
        unreached = set(self.programs.unreached)
        self.wrt_index = [index[name] if name not in unreached else None for name in self.wrt]
        self.num_mutations = len(captured.buffer_mutations)
        # Engine outputs autograd is told are not differentiable: the buffer mutations, then the
        # integer and bool user outputs; and the user outputs whose gradients the backward takes.
        user = list(enumerate(captured.differentiable_outputs, start=self.num_mutations))
        self.non_differentiable = list(range(self.num_mutations)) + [i for i, d in user if not d]
        self.differentiable_user_outputs = [i - self.num_mutations for i, d in user if d]
        self.single_output = captured.out_spec.is_leaf()  # the module returns one tensor
        # The branch checks of a capture specialized on data branches: the last outputs, not the user's
        self.num_checks = len(captured.branch_checks)
        num_outputs = self.num_mutations + len(captured.differentiable_outputs)
        self.non_differentiable += list(range(num_outputs, num_outputs + self.num_checks))
        self.draws_random = self.programs.draws_random
        # User autograd.Functions run as PythonOp nodes: engine calls then go through a python_op.EngineCall.
        self.python_ops = any(n.op_type == "PythonOp" for n in captured.model.graph.node)
        # Forward inputs the backward reads in place, but the buffers RTModule writes new values into
        # after each forward (BatchNorm's running stats), whose version changes by design.
        mutated = {fqn for _, fqn in captured.buffer_mutations}
        names = self.param_names + self.buffer_names
        self.inputs_read = [i for i in self.programs.inputs_read_by_backward
                            if i >= len(names) or names[i] not in mutated]
        self.input_density = InputDensityObserver(captured.model, captured.user_inputs)
        self._homes = None  # per parameter / buffer input: (the dict holding it, its key, tensor, data_ptr)

    def call_scope(self, grad: bool, retain: bool = False):
        """What an engine call runs inside: a python_op.EngineCall when the graph has PythonOps
        (it keeps the Functions' records and re-raises their exceptions), else nothing."""
        return python_op.EngineCall(grad, retain) if self.python_ops else contextlib.nullcontext()

    def module_tensors(self, module: torch.nn.Module) -> tuple[list[torch.Tensor], str | None]:
        """The parameters and buffers the graph reads, in graph input order, and why the engine cannot
        take them (None when it can). Looked up by name only when one was replaced since the last call
        (assignment, load_state_dict(assign=True)) or given new storage (module.to(), .cuda(),
        .double(): checked again then); otherwise a few identity checks per tensor."""
        homes = self._homes
        if homes is not None and all(d.get(k) is t and t.data_ptr() == ptr for d, k, t, ptr in homes):
            return [t for _, _, t, _ in homes], None
        homes = []
        for names, kind in ((self.param_names, "_parameters"), (self.buffer_names, "_buffers")):
            for fqn in names:
                owner, _, key = fqn.rpartition(".")
                d = getattr(module.get_submodule(owner), kind)
                homes.append((d, key, d[key], d[key].data_ptr()))
        tensors = [t for _, _, t, _ in homes]
        reason = _unsupported(tensors)
        self._homes = None if reason else homes
        return tensors, reason


def _unsupported(tensors) -> str | None:
    """Why the engine cannot take one of `tensors` (device, dtype), or None."""
    for t in tensors:
        if t.device.type != "cpu":
            return f"a tensor on device {t.device} (the engine runs on the CPU)"
        if t.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool, torch.int8, torch.uint8):
            return f"a tensor of dtype {t.dtype}"
    return None


class _RTFunction(torch.autograd.Function):
    """forward/backward of one engine call; inputs are params, buffers and user tensors, flattened.

    Eager's autograd semantics: the inputs and outputs whose bytes the engine's backward reads are
    saved with ctx.save_for_backward, so an in-place change to one of them between forward and
    backward raises autograd's own error (version counters) instead of giving a gradient of the
    changed values, and a second backward without retain_graph raises autograd's error for a graph
    already freed. With retain_graph the engine keeps its state for the next backward."""

    @staticmethod
    def forward(ctx, engine: _Engine, handoff: GradientHandoff | None, *tensors):
        if handoff is not None:
            tensors = tensors[:-1]  # its sentinel (gradient_handoff.py) is not an engine input
        state = _C.ForwardState()
        views = [engine_view(t) for t in tensors]
        with engine.call_scope(grad=True) as call:
            outputs = engine.programs.forward(capsules(views), state, _draw_seed(engine))
        ctx.python_ops = call  # the Functions' records (None without PythonOps) live as long as this node
        ctx.engine, ctx.state, ctx.keep = engine, state, views  # the engine reads inputs in place at backward
        ctx.read_at = [views[i].data_ptr() for i in engine.inputs_read]  # ... at these addresses
        # What a step_in_backward optimizer may step (None: no gradient reaches it).
        ctx.wrt_tensors = [None if i is None else tensors[i] for i in engine.wrt_index]
        ctx.handoff = handoff
        ctx.num_inputs = len(tensors) + (handoff is not None)
        # No zeros for outputs the loss does not use (logits beside the loss): the engine's backward
        # then skips the work only their gradients feed, as eager does (passes/zero_input_elimination.h).
        ctx.set_materialize_grads(False)
        results = tuple(_from_engine(o) for o in outputs)
        ctx.save_for_backward(*[tensors[i] for i in engine.inputs_read], *[results[i] for i in state.outputs_read])
        if engine.non_differentiable:
            ctx.mark_non_differentiable(*[results[i] for i in engine.non_differentiable])
        return results

    @staticmethod
    def backward(ctx, *grads):
        ctx.saved_tensors  # noqa: B018  (autograd checks here that none was changed in place, or freed)
        if ctx.state is None:
            raise RuntimeError(_BACKWARD_TWICE)
        engine = ctx.engine
        _check_inputs_in_place(engine, ctx.keep, ctx.read_at)
        threads.follow(engine.num_threads)  # torch's setting may have changed since the forward
        retain = _keep_graph()
        user_grads = grads[engine.num_mutations:]
        fed = [None if user_grads[i] is None else engine_view(user_grads[i])  # held through the engine call (capsules)
               for i in engine.differentiable_user_outputs]
        consumer = step_in_backward.consumer_for(ctx.wrt_tensors)
        handoff = ctx.handoff
        handed = {} if handoff is None else {"handed_over": handoff.begin(), "deliver": handoff.deliver}
        with zero3.gathered(engine.zero3_params):  # gradients reach ZeRO's hooks with full-shape parameters
            try:
                with engine.call_scope(grad=False, retain=retain):
                    input_grads = engine.programs.backward(ctx.state, capsules(fed), consumer, retain, **handed)
            except _C.Error:
                if handoff is not None and handoff.error is not None:
                    raise handoff.error from None  # what a hook or DDP raised while taking a gradient
                raise
            if handoff is not None:
                handoff.finish()
        if consumer is not None:
            step_in_backward.after_engine_backward(consumer, ctx.wrt_tensors)
        result = [None] * ctx.num_inputs
        for i, g in zip(engine.wrt_index, input_grads):
            if i is not None:  # None: the loss does not depend on it, so its grad stays None
                # None: stepped in the backward, or handed to torch as it became final
                result[i] = None if g is None else _from_engine(g)
        if not retain:
            ctx.state = ctx.keep = ctx.wrt_tensors = ctx.python_ops = ctx.handoff = None
        return (None, None, *result)


def _check_inputs_in_place(engine: _Engine, views: list, read_at: list[int]) -> None:
    """Raises if an input the engine's backward reads lost the memory it had at the forward: its
    storage resized (freed) or given new memory, as FSDP2 does to a parameter it reshards (fsdp.py)."""
    for i, address in zip(engine.inputs_read, read_at):
        if views[i].data_ptr() != address:
            names = engine.param_names + engine.buffer_names
            what = names[i] if i < len(names) else f"user input {i - len(names)}"
            raise RuntimeError(f"trainrt: the engine's backward reads {what} in place, and its memory was freed or "
                               "moved since the forward (FSDP2 reshards a module's parameters after its backward and "
                               "all-gathers them into new memory: run each forward's backward before the next "
                               "forward of a sharded module)")


# Autograd's own words for a second backward through a freed graph.
_BACKWARD_TWICE = ("Trying to backward through the graph a second time (or directly access saved tensors after they "
                   "have already been freed). Saved intermediate values of the graph are freed when you call "
                   ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                   "graph a second time or if you need to access saved tensors after calling backward.")


_KEEP_GRAPH_QUERY = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)


def _keep_graph() -> bool:
    """Whether the running backward was asked to retain the graph (retain_graph=True, or
    create_graph). A torch without the query is answered True: the engine then keeps its state
    (a copy of the saved values per backward), which is always correct."""
    return True if _KEEP_GRAPH_QUERY is None else bool(_KEEP_GRAPH_QUERY())


def _new_instance(cls):
    return cls.__new__(cls)


class _OtherBranch(Exception):
    """An engine call whose inputs took another branch on tensor values than its capture traced
    (capture/branch_checks.py): args are (the engine, the condition that does not hold)."""


class _BuildFailed(Exception):
    """Capture or engine build failed: args are (reason, the FallbackPolicy name that covers it)."""


def _codegen_dirs(runtime) -> tuple[str, str] | None:
    """(cache dir, debug dir) for the engine's generated kernels, or None when code generation is off."""
    if not runtime.use_codegen:
        return None
    cache = os.path.join(runtime.cache_dir, "codegen") if runtime.cache_dir else ""
    return cache, os.path.abspath("codegen_debug") if runtime.codegen_debug else ""


class RTModule(torch.nn.Module):
    """Runs `module`'s forward and backward in the TrainRT engine; behaves as `module` otherwise.

    The first call captures the module (torch.export, then translation to the engine's IR) and
    builds its forward and backward programs; later calls with the same input schema reuse them
    (symbolic dims: a new batch size or sequence length needs no new capture). Parameters, buffers,
    `state_dict`, `train()` / `eval()`, `isinstance` and the wrapped class's attributes are the
    module's own. What the engine cannot run falls back to `module` as the fallback policy allows,
    announced once (`fallback_reason`). `debug_options` is a `DebugOptions`; `mixed_precision="bf16"`
    computes each op in the dtype `torch.autocast("cpu", dtype=torch.bfloat16)` gives it. The
    environment variables of docs/options.md override both.

    Example:

        >>> import torch, trainrt
        >>> model = trainrt.RTModule(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
        ...                                              torch.nn.Linear(16, 2)))
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 1, 0]))
        >>> loss.backward(); optimizer.step(); optimizer.zero_grad()
        >>> model.fallback_reason is None            # it ran in the engine
        True
    """

    def __init__(self, module: torch.nn.Module, debug_options=None, mixed_precision: str | None = None):
        super().__init__()
        from trainrt.options import DebugOptions, RuntimeOptions

        self._module = module
        self._debug = debug_options or DebugOptions()
        self._runtime = RuntimeOptions(mixed_precision=mixed_precision)
        self._engines: dict[tuple, list[_Engine]] = {}  # schema key -> captures, tried in order
        self._fallback_reason: str | None = None  # why the last call ran in PyTorch; None: it ran in the engine
        self._failed_builds: dict = {}  # schema key -> (reason, policy name) of a failed capture or build
        self._announced: set[str] = set()
        self._said_recapture = False  # a new capture for new shapes is announced loudly once
        self._last_call: tuple | None = None  # (call signature, engine) of the last all-tensor call: _fast_engine
        self._zero3: list | None = None  # ZeRO-3 partitioned parameters, gathered around engine calls; None: not looked yet
        self._fsdp: fsdp.FSDPScope | None = None  # FSDP2 modules whose hooks run around engine calls
        _log.setLevel(10 * (int(self._debug.log_level) + 1))  # VERBOSE -> DEBUG ... FATAL -> CRITICAL
        self._present_forward()

    # ---- behaving as the wrapped module ----
    @property
    def __class__(self):
        """The wrapped module's class, as `isinstance` and `model.__class__` see it; type(self) stays
        RTModule (the way unittest.mock's spec and wrapt's proxies present the object they stand for).
        transformers' Trainer reads label names and return_loss from `model.__class__.forward`, and saves
        with save_pretrained (config.json and all) only what passes isinstance(model, PreTrainedModel)."""
        module = self.__dict__.get("_modules", {}).get("_module")
        return RTModule if module is None else module.__class__

    @__class__.setter
    def __class__(self, cls):
        """fully_shard(rtmodule) (FSDP2) gives the module the class FSDP<C>(FSDPModule, C) made from the
        class C it presents, the wrapped one: the instance takes FSDP<RTModule>(FSDPModule, RTModule)
        instead (fsdp.sharded_class), an RTModule that is an FSDPModule."""
        object.__dict__["__class__"].__set__(self, fsdp.sharded_class(cls, type(self), self.__class__))

    def __reduce_ex__(self, protocol):
        """pickle and copy rebuild an RTModule (pickle refuses an object whose __class__ is not the
        class it rebuilds)."""
        return _new_instance, (type(self),), self.__getstate__()

    def __setstate__(self, state):
        super().__setstate__(state)
        self._present_forward()

    def _present_forward(self) -> None:
        """Gives this instance a forward whose signature is the wrapped module's: the Trainer keeps the
        dataset columns that inspect.signature(model.forward) names, and (*args, **kwargs) names none.
        A copy of the class's forward function bound to self: a call costs what it did."""
        try:
            signature = inspect.signature(self._module.forward)
        except (TypeError, ValueError):  # nothing to show (a builtin forward): keep (*args, **kwargs)
            return
        cls_forward = type(self).forward
        forward = types.FunctionType(cls_forward.__code__, cls_forward.__globals__, cls_forward.__name__,
                                     cls_forward.__defaults__, cls_forward.__closure__)
        forward.__kwdefaults__, forward.__qualname__ = cls_forward.__kwdefaults__, cls_forward.__qualname__
        forward.__doc__, forward.__module__ = cls_forward.__doc__, cls_forward.__module__
        receiver = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = signature.replace(parameters=[receiver, *signature.parameters.values()])
        self.__dict__["forward"] = types.MethodType(forward, self)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_module"], name)

    def gradient_checkpointing_enable(self, *args, **kwargs):
        """The wrapped Hugging Face model's, then its captures are dropped: checkpointed blocks are
        marked when the forward is captured (capture/checkpoint_regions.py), so the next call
        captures again with them (the Trainer calls this once, before training)."""
        result = self._module.gradient_checkpointing_enable(*args, **kwargs)
        self._forget_captures()
        return result

    def gradient_checkpointing_disable(self, *args, **kwargs):
        result = self._module.gradient_checkpointing_disable(*args, **kwargs)
        self._forget_captures()
        return result

    def _forget_captures(self) -> None:
        self._engines.clear()
        self._last_call = None

    def state_dict(self, *args, **kwargs):
        return self._module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self._module.load_state_dict(state_dict, strict=strict, assign=assign)

    def _load_from_state_dict(self, state_dict, prefix, *args):
        """An RTModule inside another module: the parent's load_state_dict walks _modules, so it looks
        for the wrapped module's keys under `<prefix>_module.`; they come named as state_dict() names
        them, `<prefix><name>`, and are renamed here, before the walk goes on to `_module`."""
        for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "_module.")]:
            state_dict[f"{prefix}_module.{key[len(prefix):]}"] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._module.named_buffers(prefix, recurse, remove_duplicate)

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        return self._module.named_modules(memo, prefix, remove_duplicate)

    def named_children(self):
        """The wrapped module's children, named as named_parameters names their parameters (the Trainer
        picks weight-decay parameters by walking named_children)."""
        return self._module.named_children()

    def children(self):
        """The wrapped module itself: train(), to() and apply() reach it through children()."""
        return iter(self._modules.values())

    @property
    def fallback_reason(self) -> str | None:
        """Why the last call ran the PyTorch module instead of the engine (each reason is announced once,
        when it first happens), or None when it ran in the engine."""
        return self._fallback_reason

    @property
    def engines(self) -> list[_Engine]:
        """The engine programs built so far, one per capture."""
        return [e for engines in self._engines.values() for e in engines]

    @property
    def num_captures(self) -> int:
        """How many times the module was captured (torch.export + translation + engine build)."""
        return len(self.engines)

    def profile_summary(self, top: int = 10) -> str:
        """Op types by total engine time, per program, over the steps run with TRAINRT_PROFILE=1."""
        return "\n".join(e.programs.profile_summary(top) for e in self.engines)

    def write_profile(self, prefix: str) -> None:
        """Chrome traces of the profiled steps: <prefix>[_N]_forward.json / _backward.json."""
        for i, e in enumerate(self.engines):
            e.programs.write_profile(prefix if i == 0 else f"{prefix}_{i}")

    def __getstate__(self):
        """torch.save(model) pickles the wrapped module and options; engines are rebuilt on first use."""
        state = self.__dict__.copy()
        state["_engines"] = {}
        state["_last_call"] = None
        state["_zero3"] = None
        state["_fsdp"] = None
        state.pop("forward", None)  # bound to this instance: presented again by __setstate__
        return state

    # ---- running ----
    def forward(self, *args, **kwargs):
        params = self._zero3
        if params is None:  # the first call: did ZeRO-3 partition the parameters (zero3.py), FSDP2 shard (fsdp.py)?
            params = self._zero3 = zero3.partitioned_parameters(self._module)
            self._fsdp = fsdp.FSDPScope.of(self)
        if self._fsdp is not None:  # FSDP's hooks of the modules the engine stands in for, around the call
            return self._fsdp.run(self._forward, self._fall_back_unsupported, args, kwargs)
        if not params:
            return self._forward(*args, **kwargs)
        with zero3.gathered(params):
            return self._forward(*args, **kwargs)

    def _forward(self, *args, **kwargs):
        if self._runtime.fallback_policy & FallbackPolicy.FALLBACK_FORCE_TORCH_FORWARD:
            return self._fall_back("forced by the fallback policy", "FALLBACK_FORCE_TORCH_FORWARD", args, kwargs)
        module = self._modules["_module"]  # self._module costs two __getattr__ calls (~1.4 us)
        signature = self._call_signature(args, kwargs, module)
        other_branches, why = [], None  # engines whose data branches this call did not take; the last one's check
        if signature is not None and self._last_call is not None and self._last_call[0] == signature:
            engine = self._last_call[1]
            module_tensors, reason = engine.module_tensors(module)
            if not reason:
                if self._fallback_reason is not None:  # nn.Module.__setattr__ costs ~1.5 us a call
                    self._fallback_reason = None
                try:
                    return self._run(engine, module_tensors, [*args, *kwargs.values()])
                except _OtherBranch as other:  # the engines of the other branches are found below
                    other_branches, why = [engine], self._said_other_branch(other)
        flat, spec = pytree.tree_flatten((args, kwargs))
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        reason = _unsupported(tensors)
        if reason:  # decided per call: other inputs may run in the engine
            return self._fall_back_unsupported(reason, args, kwargs)
        autocast = self._autocast_dtype()
        if autocast not in (None, torch.bfloat16):
            return self._fall_back(f"torch.autocast with dtype {autocast} (the engine's mixed precision is bf16)",
                                   "FALLBACK_UNSUPPORTED_DATA", args, kwargs)
        shapes = [tuple(t.shape) for t in tensors]
        key = self._schema_key_of(flat, spec)
        while True:
            engine = next((e for e in self._engines.get(key, []) if e.captured.accepts(shapes)
                           and e not in other_branches), None)
            try:
                return self._run_on(engine, key, shapes, tensors, signature, autocast, args, kwargs, other_branches, why)
            except _OtherBranch as other:
                other_branches.append(other.args[0])
                why = self._said_other_branch(other)

    def _said_other_branch(self, other: "_OtherBranch") -> str:
        """Logs that a call took other data branches than an engine's capture; returns the condition."""
        _log.info("trainrt: %s took another branch on tensor values than its capture traced (%s does not hold); "
                  "the call runs on the capture of its own branches", type(self._module).__name__, other.args[1])
        return other.args[1]

    def _run_on(self, engine, key, shapes, tensors, signature, autocast, args, kwargs, other_branches, why):
        """Runs the call on `engine`, or on a new capture when it is None (raises _OtherBranch when the
        call takes other data branches than engine's capture; `why`: the condition the last of
        `other_branches` broke)."""
        built = engine is None
        if built and self._engines.get(key):  # say why the captures of this structure do not serve
            level = logging.INFO if self._said_recapture else logging.WARNING  # the first time loud, then INFO
            self._said_recapture = True
            if other_branches:
                _log.log(level, "trainrt: %s is captured again: a branch on tensor values went the other way "
                         "(%s does not hold)", type(self._module).__name__, why)
            else:
                _log.log(level, "trainrt: %s is captured again for input shapes %s: %s", type(self._module).__name__,
                         shapes, self._engines[key][0].captured.mismatch(shapes))
        if built:
            reason = _unsupported(self._module.parameters())
            if reason:
                return self._fall_back_unsupported(reason, args, kwargs)
            failure = self._failed_builds.get(key)
            if failure and not self._runtime.fallback_retry:  # announced when it failed; not re-captured each step
                return self._fall_back(*failure, args, kwargs)
            try:
                engine = self._build(args, kwargs, [t.requires_grad for t in tensors], shapes, autocast,
                                     tuple(e.captured for e in other_branches))
            except _BuildFailed as failed:
                self._failed_builds[key] = failed.args
                return self._fall_back(*failed.args, args, kwargs)
            self._failed_builds.pop(key, None)
        module_tensors, reason = engine.module_tensors(self._module)
        if reason:
            return self._fall_back_unsupported(reason, args, kwargs)
        self._fallback_reason = None
        self._last_call = None if signature is None else (signature, engine)
        try:
            return self._run(engine, module_tensors, tensors)
        except _OtherBranch as other:
            if not built:
                raise
            # Made from this very call, it fails its own check: the traced decision was not the engine's
            # (export decided on values the engine computes otherwise), so the model is not run here.
            self._engines[key].remove(engine)
            self._last_call = None
            failure = (f"the capture made for this call fails its own branch check {other.args[1]} (a branch on "
                       "tensor values that export decided differently)", "FALLBACK_UNSUPPORTED_TORCH_MODEL")
            self._failed_builds[key] = failure
            return self._fall_back(*failure, args, kwargs)

    def _call_signature(self, args, kwargs, module: torch.nn.Module) -> tuple | None:
        """The steady state's fast path: when every argument is a tensor (positional, or keyword in the
        same order), the call's mode, autocast and each tensor's dtype, shape, requires_grad and device.
        A call equal to the last one runs the last one's engine without the general schema work
        (pytree flatten, schema key, symbolic-dim checks); None for other calls, which take that work."""
        leaves = (*args, *kwargs.values())
        if not all(isinstance(t, torch.Tensor) for t in leaves):
            return None
        return (module.training, torch.is_grad_enabled(), self._autocast_dtype(), tuple(kwargs),
                tuple((t.dtype, t.shape, t.requires_grad, t.device) for t in leaves))

    def _autocast_dtype(self) -> torch.dtype | None:
        """The low dtype of this call's matmuls: the CPU autocast dtype where autocast is on, else
        the mixed_precision option's; None for f32."""
        if torch.is_autocast_enabled("cpu"):
            return torch.get_autocast_dtype("cpu")
        return torch.bfloat16 if self._runtime.mixed_precision == "bf16" else None

    def _fall_back_unsupported(self, reason: str, args, kwargs):
        kind = "FALLBACK_UNSUPPORTED_DEVICE" if "device" in reason else "FALLBACK_UNSUPPORTED_DATA"
        return self._fall_back(reason, kind, args, kwargs)

    def _schema_key(self, args, kwargs, shapes: bool = False):
        """Everything that changes the captured graph but the sizes: mode, structure, dtypes, ranks,
        non-tensor values, which inputs require grad. With `shapes` the sizes too (the export
        cache's key: a capture on disk serves exactly the shapes it was made for)."""
        return self._schema_key_of(*pytree.tree_flatten((args, kwargs)), shapes)

    def _schema_key_of(self, flat, spec, shapes: bool = False):
        def leaf(x):
            if not isinstance(x, torch.Tensor):
                return ("const", repr(x))
            return (x.dtype, tuple(x.shape) if shapes else x.dim(), x.requires_grad)

        return (self._module.training, torch.is_grad_enabled(), self._autocast_dtype(), str(spec),
                tuple(leaf(x) for x in flat))

    def _build(self, args, kwargs, input_requires_grad, shapes, autocast: torch.dtype | None, other_branches=()):
        """A new engine for this call, appended to its schema's. `other_branches`: captures whose
        data branches this call did not take (capture/branch_checks.py), not to be reused."""
        from trainrt.capture import CaptureError, UnsupportedATenOp, capture
        from trainrt.capture.autograd_function import FunctionCapture

        import time

        start = time.perf_counter()
        functions = FunctionCapture(self._runtime.custom_autograd, self._runtime.skipped_autograd_functions)
        # Which Functions were traced changes the graph (a traced one ignores its custom backward).
        structure = shared_captures.key_of(self._module, None)  # the module's part of both keys
        shared_key = None if self._zero3 or self._fsdp or structure is None else \
            (*structure[:-1], (self._schema_key(args, kwargs), functions))
        cache, key = None, None
        if self._runtime.cache_dir:
            from trainrt.export_cache import ExportCache, cache_key

            cache = ExportCache(self._runtime.cache_dir, self._runtime.cache_allow_shared)
            key = cache_key(self._module, (self._schema_key(args, kwargs, shapes=True), functions), structure)
        try:
            captured = shared_captures.find(shared_key, shapes, exclude=other_branches)
            source = "shared with an earlier RTModule of this structure" if captured else None
            if captured is None:
                captured = cache.load(key) if cache and not other_branches else None
                source = "read from the export cache" if captured else None
                if captured is None:
                    with zero3.without_deepspeed_hooks(self._module):  # gathered by forward(): full shapes
                        captured = capture(self._module, args, kwargs, autocast=autocast, functions=functions)
                    if cache:
                        cache.store(key, captured)
                shared_captures.remember(shared_key, captured)
            elif cache and not cache.has(key):  # the next process finds these shapes on disk
                cache.store(key, captured)
        except UnsupportedATenOp as err:
            raise _BuildFailed(str(err), "FALLBACK_UNSUPPORTED_ONNX_MODEL") from err
        except CaptureError as err:
            raise _BuildFailed(str(err), "FALLBACK_UNSUPPORTED_TORCH_MODEL") from err
        captured_at = time.perf_counter()

        _C.set_tuning_options(self._runtime.enable_tuning, self._runtime.max_tuning_duration_ms,
                              self._runtime.tuning_results_path or "")

        def make(level: int, config: str) -> _Engine:
            return _Engine(captured, self._module, input_requires_grad, self._runtime.profile,
                           self._runtime.compute_optimizer, self._runtime.mem_efficient_grad_mgmt, self._zero3,
                           self._runtime.num_threads, level, label_sparsity=self._runtime.sparse_optimizer,
                           padding_elimination=self._runtime.embedding_sparse_optimizer,
                           memory_opt_config=config, checkpoint_recompute=self._runtime.allow_autograd_checkpoint,
                           codegen=_codegen_dirs(self._runtime))

        try:
            if self._runtime.memory_budget_mb is None:
                engine = make(self._runtime.memory_opt_level, self._runtime.memory_opt_config)
                self._memory_plan = None
            else:
                tensors = [x for x in pytree.tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]

                def trial(candidate: _Engine) -> int:
                    module_tensors, _ = candidate.module_tensors(self._module)
                    return memory_budget.trial_peak(candidate, module_tensors + tensors)

                engine, self._memory_plan = memory_budget.fit_budget(
                    make, self._runtime.memory_opt_level, self._runtime.memory_opt_config,
                    int(self._runtime.memory_budget_mb * 2**20), trial)
        except _C.Error as err:
            kind = "FALLBACK_UNSUPPORTED_ONNX_MODEL" if isinstance(err, _C.UnsupportedOp) else "FALLBACK_BAD_INITIALIZATION"
            raise _BuildFailed(f"{type(err).__name__}: {err}", kind) from err
        if self._debug.save_onnx:
            self._save_graphs(engine)
        self._engines.setdefault(self._schema_key(args, kwargs), []).append(engine)
        self._log_startup(engine, autocast, captured_at - start, time.perf_counter() - captured_at, source)
        return engine

    def _log_startup(self, engine: _Engine, autocast: torch.dtype | None, capture_s: float, build_s: float,
                     source: str | None) -> None:
        """At INFO: what was captured, what is on, and what it cost (`source`: where the capture came
        from when it was not captured now). Quiet on ranks other than 0."""
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
            return
        _log.info("%s", startup_report.table(self._module, engine, self._runtime, self._debug, self._memory_plan,
                                             autocast, capture_s, build_s, source))
        if engine.programs.recompute_patterns:
            _log.info("%s", startup_report.recompute_summary(engine.programs.recompute_patterns))

    def _fall_back(self, reason: str, policy_name: str, args, kwargs):
        """Runs the original module if the policy allows `policy_name`, announcing each reason once;
        otherwise raises naming what failed."""
        if not self._runtime.fallback_policy & FallbackPolicy[policy_name]:
            raise RuntimeError(f"trainrt: cannot run {type(self._module).__name__} in the engine and fallback "
                               f"({policy_name}) is disabled: {reason}")
        if reason not in self._announced:
            self._announced.add(reason)
            retry = " (will retry the engine on the next call)" if self._runtime.fallback_retry else ""
            _log.warning("trainrt: falling back to PyTorch for %s (%s)%s: %s",
                         type(self._module).__name__, policy_name, retry, reason)
        self._fallback_reason = reason
        return self._module(*args, **kwargs)

    def _save_graphs(self, engine: _Engine) -> None:
        import os

        os.makedirs(self._debug.save_path, exist_ok=True)
        base = os.path.join(self._debug.save_path, self._debug.onnx_prefix)
        if not self._module.training:
            base += "_eval"  # an evaluation's capture beside the training one, not over it
        with open(f"{base}_forward.onnx", "wb") as f:
            f.write(engine.captured.model.SerializeToString())
        with open(f"{base}_training.onnx", "wb") as f:
            f.write(engine.programs.training_graph_onnx())
        with open(f"{base}_optimized_forward.onnx", "wb") as f:
            f.write(engine.programs.forward_graph_onnx())
        with open(f"{base}_optimized_backward.onnx", "wb") as f:
            f.write(engine.programs.backward_graph_onnx())

    def _run(self, engine: _Engine, module_tensors, tensors):
        threads.follow(engine.num_threads)
        inputs = module_tensors + tensors
        if torch.is_grad_enabled() and engine.wrt:
            handoff = GradientHandoff.for_call(engine, module_tensors)
            results = _RTFunction.apply(engine, handoff, *(handoff.engine_inputs(inputs) if handoff else inputs))
        else:
            with engine.call_scope(grad=False):
                views = [engine_view(t) for t in inputs]
                results = tuple(_from_engine(o) for o in engine.programs.infer(capsules(views), _draw_seed(engine)))
        if engine.num_checks:
            results, checks = results[:-engine.num_checks], results[-engine.num_checks:]
            failed = next((i for i, c in enumerate(checks) if not bool(c)), None)
            if failed is not None:  # dropped before any buffer or caller sees them
                raise _OtherBranch(engine, engine.captured.branch_checks[failed][1])
        mutations, user = results[:engine.num_mutations], results[engine.num_mutations:]
        if mutations:
            named_buffers = dict(self._module.named_buffers(remove_duplicate=False))
            with torch.no_grad():
                for (_, fqn), value in zip(engine.captured.buffer_mutations, mutations):
                    named_buffers[fqn].copy_(value)
        if self._runtime.print_memory_stats:
            _log.warning("trainrt memory: %s", engine.programs.memory_stats())
        if self._runtime.print_input_density:
            for report in (engine.input_density.describe(tensors),
                           describe_skipped(engine.programs.last_row_counts, engine.programs.padding_row_flops)):
                if report:
                    _log.warning("%s", report)
        if engine.single_output:
            return user[0]
        return pytree.tree_unflatten(list(user), engine.captured.out_spec)
