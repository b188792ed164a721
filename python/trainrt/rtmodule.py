"""`trainrt.RTModule`: wrap a torch.nn.Module, keep the training loop, run forward and backward in the engine.

    model = trainrt.RTModule(model)
    loss = model(x, y)          # first call: capture (torch.export) -> translate -> engine programs
    loss.backward()             # the engine's backward program; gradients land in param.grad
    optimizer.step()            # any torch optimizer: parameters are read from torch every step

The captured programs are cached per input schema (train/eval mode, tree structure, dtypes, ranks,
non-tensor values, which inputs require grad). Input dims are symbolic where torch.export allows
(capture/export.py), so a new batch size or sequence length reuses the programs: a schema holds a
list of captures, and a call runs the first whose static dims and symbol ranges accept its shapes
(a model that specializes a dim gets one capture per value there). The engine plans memory per
concrete shape. Parameters and inputs cross zero-copy (DLPack); outputs come back as torch tensors
over engine memory.
"""

from __future__ import annotations

import logging

import torch
from torch.utils import _pytree as pytree

from trainrt import _C

_log = logging.getLogger("trainrt")
if not _log.handlers:  # messages reach the user without logging configuration; levels set by DebugOptions
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    _log.addHandler(_handler)
    _log.propagate = False


def _as_array(t: torch.Tensor):
    """A zero-copy view the engine can read: detached, contiguous CPU memory."""
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _draw_seed() -> int:
    """Seeds the engine's random ops from torch's default generator, so torch.manual_seed reproduces runs."""
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())


class _Engine:
    """The engine programs of one captured input schema, plus how to feed and unpack them."""

    def __init__(self, captured, module: torch.nn.Module, input_requires_grad: list[bool], profile: bool = False):
        self.captured = captured
        params = dict(module.named_parameters(remove_duplicate=False))
        self.param_names = [fqn for _, fqn in captured.param_inputs]
        self.buffer_names = [fqn for _, fqn in captured.buffer_inputs]
        grad_params = [name for (name, fqn) in captured.param_inputs if params[fqn].requires_grad]
        grad_inputs = [name for name, rg in zip(captured.user_inputs, input_requires_grad) if rg]
        self.wrt = grad_params + grad_inputs
        self.grad_outputs = [o for o, d in zip(captured.outputs, captured.differentiable_outputs) if d]
        graph_inputs = [n for n, _ in captured.param_inputs] + [n for n, _ in captured.buffer_inputs] + captured.user_inputs
        index = {name: i for i, name in enumerate(graph_inputs)}
        self.wrt_index = [index[name] for name in self.wrt]
        self.programs = _C.ModulePrograms(captured.model.SerializeToString(), self.grad_outputs, self.wrt, profile)
        self.num_mutations = len(captured.buffer_mutations)


class _RTFunction(torch.autograd.Function):
    """forward/backward of one engine call; inputs are params, buffers and user tensors, flattened."""

    @staticmethod
    def forward(ctx, engine: _Engine, *tensors):
        state = _C.ForwardState()
        arrays = [_as_array(t) for t in tensors]
        outputs = engine.programs.forward(arrays, state, _draw_seed())
        ctx.engine, ctx.state, ctx.keep = engine, state, arrays  # the engine reads inputs in place at backward
        ctx.num_inputs = len(tensors)
        results = tuple(torch.from_numpy(o) for o in outputs)
        user = results[engine.num_mutations:]
        ctx.mark_non_differentiable(*results[:engine.num_mutations],
                                    *[o for o, d in zip(user, engine.captured.differentiable_outputs) if not d])
        return results

    @staticmethod
    def backward(ctx, *grads):
        engine = ctx.engine
        user_grads = grads[engine.num_mutations:]
        fed = [None if g is None else _as_array(g)
               for g, d in zip(user_grads, engine.captured.differentiable_outputs) if d]
        input_grads = engine.programs.backward(ctx.state, fed)
        result = [None] * ctx.num_inputs
        for i, g in zip(engine.wrt_index, input_grads):
            result[i] = torch.from_numpy(g)
        ctx.state = ctx.keep = None
        return (None, *result)


def _describe_dims(captured) -> str:
    """The user inputs' dims as captured, symbolic ones by name: '(s0, s1) (s0, s1) (s0, 1000)'."""
    return " ".join("(" + ", ".join(str(d) for d in dims) + ")" for dims in captured.input_dims) or "none"


class RTModule(torch.nn.Module):
    """Runs `module`'s forward and backward in the TrainRT engine; behaves as `module` otherwise."""

    def __init__(self, module: torch.nn.Module, debug_options=None):
        super().__init__()
        from trainrt.options import DebugOptions, RuntimeOptions

        self._module = module
        self._debug = debug_options or DebugOptions()
        self._runtime = RuntimeOptions()
        self._engines: dict[tuple, list[_Engine]] = {}  # schema key -> captures, tried in order
        self._fallback_reason: str | None = None
        _log.setLevel(10 * (int(self._debug.log_level) + 1))  # VERBOSE -> DEBUG ... FATAL -> CRITICAL

    # ---- behaving as the wrapped module ----
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_module"], name)

    def state_dict(self, *args, **kwargs):
        return self._module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self._module.load_state_dict(state_dict, strict=strict, assign=assign)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._module.named_buffers(prefix, recurse, remove_duplicate)

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        return self._module.named_modules(memo, prefix, remove_duplicate)

    @property
    def fallback_reason(self) -> str | None:
        """Why forward runs the PyTorch module instead of the engine (announced once, when it happens), or
        None while the engine runs it."""
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
        return state

    # ---- running ----
    def forward(self, *args, **kwargs):
        if self._fallback_reason is not None:
            return self._module(*args, **kwargs)
        flat, _ = pytree.tree_flatten((args, kwargs))
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        reason = self._unsupported_input(tensors)
        if reason:
            return self._fall_back(reason, "FALLBACK_UNSUPPORTED_DEVICE" if "device" in reason else "FALLBACK_UNSUPPORTED_DATA")
        shapes = [tuple(t.shape) for t in tensors]
        key = self._schema_key(args, kwargs)
        engine = next((e for e in self._engines.get(key, []) if e.captured.accepts(shapes)), None)
        if engine is None:
            engine = self._build(args, kwargs, [t.requires_grad for t in tensors])
            if engine is None:
                return self._module(*args, **kwargs)
        return self._run(engine, tensors)

    def _unsupported_input(self, tensors) -> str | None:
        for t in list(tensors) + [p for p in self._module.parameters()]:
            if t.device.type != "cpu":
                return f"a tensor on device {t.device} (the engine runs on the CPU)"
            if t.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.int8, torch.uint8):
                return f"a tensor of dtype {t.dtype}"
        return None

    def _schema_key(self, args, kwargs, shapes: bool = False):
        """Everything that changes the captured graph but the sizes: mode, structure, dtypes, ranks,
        non-tensor values, which inputs require grad. With `shapes` the sizes too (the export
        cache's key: a capture on disk serves exactly the shapes it was made for)."""
        flat, spec = pytree.tree_flatten((args, kwargs))

        def leaf(x):
            if not isinstance(x, torch.Tensor):
                return ("const", repr(x))
            return (x.dtype, tuple(x.shape) if shapes else x.dim(), x.requires_grad)

        return (self._module.training, torch.is_grad_enabled(), str(spec), tuple(leaf(x) for x in flat))

    def _build(self, args, kwargs, input_requires_grad):
        from trainrt.capture import CaptureError, UnsupportedATenOp, capture

        import time

        start = time.perf_counter()
        cache, key = None, None
        if self._runtime.cache_dir:
            from trainrt.export_cache import ExportCache, cache_key

            cache, key = ExportCache(self._runtime.cache_dir), cache_key(self._module, self._schema_key(args, kwargs, shapes=True))
        try:
            captured = cache.load(key) if cache else None
            if captured is None:
                captured = capture(self._module, args, kwargs)
                if cache:
                    cache.store(key, captured)
        except UnsupportedATenOp as err:
            return self._fall_back(str(err), "FALLBACK_UNSUPPORTED_ONNX_MODEL", build=True)
        except CaptureError as err:
            return self._fall_back(str(err), "FALLBACK_UNSUPPORTED_TORCH_MODEL", build=True)
        captured_at = time.perf_counter()
        try:
            engine = _Engine(captured, self._module, input_requires_grad, self._runtime.profile)
        except _C.Error as err:
            kind = "FALLBACK_UNSUPPORTED_ONNX_MODEL" if isinstance(err, _C.UnsupportedOp) else "FALLBACK_BAD_INITIALIZATION"
            return self._fall_back(f"{type(err).__name__}: {err}", kind, build=True)
        if self._debug.save_onnx:
            self._save_graphs(engine)
        self._engines.setdefault(self._schema_key(args, kwargs), []).append(engine)
        self._log_startup(captured, captured_at - start, time.perf_counter() - captured_at)
        return engine

    def _log_startup(self, captured, capture_s: float, build_s: float) -> None:
        """At INFO: what was captured, what is on, and what it cost. Quiet on ranks other than 0."""
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
            return
        rows = [("model", type(self._module).__name__),
                ("mode", "training" if self._module.training else "eval"),
                ("parameters / inputs / outputs", f"{len(captured.param_inputs)} / {len(captured.user_inputs)} / {len(captured.outputs)}"),
                ("input dims", _describe_dims(captured)),
                ("memory planning, in-place reuse, constant folding", "on"),
                ("fallback policy", self._runtime.fallback_policy.name or str(self._runtime.fallback_policy)),
                ("save ONNX", self._debug.save_path if self._debug.save_onnx else "off"),
                ("capture (torch.export + translation)", f"{capture_s * 1e3:.0f} ms"),
                ("engine build (autodiff + partition)", f"{build_s * 1e3:.0f} ms")]
        width = max(len(k) for k, _ in rows)
        _log.info("trainrt RTModule start-up\n%s", "\n".join(f"  {k:<{width}}  {v}" for k, v in rows))

    def _fall_back(self, reason: str, policy_name: str, build: bool = False):
        from trainrt.options import FallbackPolicy

        if not self._runtime.fallback_policy & FallbackPolicy[policy_name]:
            raise RuntimeError(f"trainrt: cannot run {type(self._module).__name__} in the engine and fallback "
                               f"({policy_name}) is disabled: {reason}")
        if self._fallback_reason is None:
            _log.warning("trainrt: falling back to PyTorch for %s (%s): %s", type(self._module).__name__, policy_name, reason)
        self._fallback_reason = reason
        return None

    def _save_graphs(self, engine: _Engine) -> None:
        import os

        os.makedirs(self._debug.save_path, exist_ok=True)
        base = os.path.join(self._debug.save_path, self._debug.onnx_prefix)
        with open(f"{base}_forward.onnx", "wb") as f:
            f.write(engine.captured.model.SerializeToString())
        with open(f"{base}_training.onnx", "wb") as f:
            f.write(engine.programs.training_graph_onnx())
        with open(f"{base}_optimized_forward.onnx", "wb") as f:
            f.write(engine.programs.forward_graph_onnx())
        with open(f"{base}_optimized_backward.onnx", "wb") as f:
            f.write(engine.programs.backward_graph_onnx())

    def _run(self, engine: _Engine, tensors):
        named_params = dict(self._module.named_parameters(remove_duplicate=False))
        named_buffers = dict(self._module.named_buffers(remove_duplicate=False))
        inputs = [named_params[n] for n in engine.param_names] + [named_buffers[n] for n in engine.buffer_names] + tensors
        if torch.is_grad_enabled() and engine.wrt:
            results = _RTFunction.apply(engine, *inputs)
        else:
            results = tuple(torch.from_numpy(o) for o in engine.programs.infer([_as_array(t) for t in inputs], _draw_seed()))
        mutations, user = results[:engine.num_mutations], results[engine.num_mutations:]
        with torch.no_grad():
            for (_, fqn), value in zip(engine.captured.buffer_mutations, mutations):
                named_buffers[fqn].copy_(value)
        if self._runtime.print_memory_stats:
            _log.warning("trainrt memory: %s", engine.programs.memory_stats())
        return pytree.tree_unflatten(list(user), engine.captured.out_spec)
