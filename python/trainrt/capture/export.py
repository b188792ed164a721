"""torch.export of a module in its current train/eval mode, with symbolic input dims where possible.

Symbolic dims come in three levels, tried in this order by capture (api.py):
- "all": every dim of every tensor input is torch.export.Dim.AUTO (of an image-like float input, of
  rank 4 or more, only the batch dim: see _auto_dynamic_shapes). Export keeps a dim symbolic
  unless the model specializes it (a view to a literal size, a size 0 or 1, a guard that pins it)
  and infers which input dims are equal (the batch of the ids and of the labels, the sequence length
  of the ids and of the mask) as one symbol. A new batch size or sequence length then reuses the
  capture; the symbols become shape arithmetic in the translated graph (symbolic.py).
- "batch": dim 0 of every tensor input whose size there equals the first tensor input's is one
  shared Dim("batch"), the rest static: for graphs whose translation needs a size that "all" left
  symbolic (capture retries at this level when translating "all" fails).
- "none": static shapes.
A dynamic export that fails (a constraint violation, a model that only traces with known sizes) is
retried with static shapes. BatchNorms with momentum=None run a traceable forward while exporting
(cumulative_batch_norm.py); a submodule converted in forward to the dtype it already has is left as
it is (module_conversions.py). The exported training IR keeps in-place ops (BatchNorm's running stats,
`add_` on buffers); those that write a tensor the forward just made, and BatchNorm's writes of its
buffers, become functional in place (inplace.py); for graphs with others, functionalization (`run_decompositions({})`, which decomposes
nothing else) turns them into values the graph signature lists as buffer mutations. The same retrace
runs where the training IR keeps a torch.func transform (torch.vmap in forward: calls into functorch's
interpreter) and leaves the batched ATen ops it stands for.

Hugging Face causal LMs return a `DynamicCache` of past keys and values (use_cache defaults on, in
training too). torch.export can only return pytree-flattenable outputs; transformers ships the
flattening of DynamicCache (`register_dynamic_cache_export_support`), which capture registers when
transformers is loaded, and capture adds EncoderDecoderCache (the pair of a decoder's self- and
cross-attention caches). The cache then leaves the engine as its key/value tensors and comes back
as the same cache in the ModelOutput, as in eager mode, so the user need not pass use_cache=False.
DynamicCaches of other layer kinds (linear-attention and hybrid models' state layers) and caches of
a model's own (MiniMaxCache) have no flattening in transformers: for those capture says so and
exports again with use_cache=False (when forward takes it, by name or through **kwargs, and the
caller did not pass it), so the engine's outputs hold no past_key_values; the training computation
is the same.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import sys
import warnings

import torch
from torch.export import Dim, ExportedProgram
from torch.utils import _pytree as pytree

from trainrt.capture.autograd_function import FunctionCapture, keep_functions_opaque
from trainrt.capture.branch_checks import is_data_dependent, is_specialized, mark_specialized, specializing_branches
from trainrt.capture.checkpoint_regions import capture_checkpoints
from trainrt.capture.cumulative_batch_norm import traceable_cumulative_batch_norms, untraceable_batch_norms
from trainrt.capture.errors import CaptureError
from trainrt.capture.inplace import functionalize_buffer_writes, functionalize_fresh_writes
from trainrt.capture.module_conversions import unchanged_conversions_skipped
from trainrt.capture.python_asserts import asserts_as_runtime_checks

SYMBOLIC_LEVELS = ("all", "batch", "none")
_log = logging.getLogger("trainrt")


def export_program(module: torch.nn.Module, args: tuple, kwargs: dict, symbolic: str,
                   functions: FunctionCapture = FunctionCapture()) -> ExportedProgram:
    """The functional ExportedProgram of module(*args, **kwargs) with the symbolic dims of
    `symbolic` (one of SYMBOLIC_LEVELS), or static shapes when export refuses them; the
    placeholders' shapes say which dims are symbolic."""
    _refuse_untraceable_batch_norms(module)
    register_hf_cache_pytree()
    retry_without_cache = "use_cache" not in kwargs and _takes_use_cache(module)
    with traceable_cumulative_batch_norms(module):
        try:
            with _unflattenable_caches_fail_early(retry_without_cache):
                ep = _export_at_level(module, args, kwargs, symbolic, functions)
        except _UnflattenableCache as e:
            if not retry_without_cache:
                raise CaptureError(f"torch.export failed for {type(module).__name__}: {e}") from e
            _log.warning("trainrt: %s returns a cache that torch.export cannot flatten (%s); captured with "
                         "use_cache=False, so the engine's outputs hold no past_key_values (pass use_cache=False "
                         "to the model to say so)", type(module).__name__, _first_line(e))
            kwargs = {**kwargs, "use_cache": False}
            ep = _export_at_level(module, args, kwargs, symbolic, functions)
    # inplace.py: what torch's retrace would do, locally (both run: no short-circuit); also inside the
    # subgraphs of higher-order ops (a torch.no_grad() block is a wrap_with_set_grad_enabled subgraph)
    for sub in _subgraph_modules(ep):
        if functionalize_fresh_writes(sub.graph):
            sub.recompile()
    if functionalize_fresh_writes(ep.graph) | functionalize_buffer_writes(ep):
        ep.graph_module.recompile()
    if not _mutates(ep) and not _has_functorch_transforms(ep):
        return ep
    with warnings.catch_warnings():  # torch 2.13 warns about its own LeafSpec use while retracing
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        try:
            functional = ep.run_decompositions({})
            return mark_specialized(functional) if is_specialized(ep) else functional
        except Exception as e:  # noqa: BLE001  (torch's retrace fails in its own ways, e.g. Falcon's lifted constants)
            raise CaptureError(f"torch.export failed for {type(module).__name__} while functionalizing its "
                               f"in-place ops: {e}") from e


def _takes_use_cache(module: torch.nn.Module) -> bool:
    """Whether forward takes use_cache: by name, or through **kwargs that transformers' task heads
    hand on to their base model (Qwen3.5's sequence classifier)."""
    parameters = inspect.signature(module.forward).parameters.values()
    return any(p.name == "use_cache" or p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


@contextlib.contextmanager
def _unflattenable_caches_fail_early(enabled: bool):
    """A DynamicCache of layers that transformers' flattening refuses (linear-attention state
    layers) fails export only when the outputs are flattened, after the whole trace (half of
    Qwen3.5's capture). While this is on, making one fails at once with the flattening's own error,
    and the retry with use_cache=False follows without the wasted trace. On only where that retry is
    taken (`enabled`); a model that makes such a cache but would not return it is then captured with
    use_cache=False too, the same training computation."""
    if not enabled or "transformers" not in sys.modules:
        yield
        return
    try:
        from transformers.cache_utils import DynamicCache
        from transformers.integrations.executorch import _get_cache_dict
    except ImportError:  # a transformers without them: the failure comes at the end of the trace
        yield
        return
    init = DynamicCache.__init__

    def checked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if type(self) is DynamicCache:  # a subclass flattens in its own way, or not at all
            _get_cache_dict(self)

    DynamicCache.__init__ = checked_init
    try:
        yield
    finally:
        DynamicCache.__init__ = init


class _UnflattenableCache(CaptureError):
    """The model returns a cache object that has no pytree flattening."""


def _unflattenable_cache(e: Exception) -> bool:
    """A DynamicCache of other layers than transformers' flattening takes (linear-attention and
    hybrid models' state layers), or a cache class of a model's own (MiniMaxCache), in the outputs."""
    text = str(e)
    return ("pytree flattening function should be applied to DynamicCache" in text
            or re.search(r"Found <class '[\w.]*Cache'> in output, which is not a known type", text) is not None)


def _export_at_level(module, args, kwargs, symbolic: str, functions: FunctionCapture) -> ExportedProgram:
    """torch.export with the symbolic dims of `symbolic`, retried with static shapes when that
    fails (the static export's error is the one raised). A cache that cannot be flattened fails
    both alike, so it is raised at once as _UnflattenableCache."""
    shapes = {"all": _auto_dynamic_shapes, "batch": _batch_dynamic_shapes, "none": lambda *_: None}[symbolic](
        module, args, kwargs)
    if shapes is not None:
        try:
            return _export(module, args, kwargs, shapes, functions)
        except Exception as e:  # noqa: BLE001  (retried with static shapes)
            if _unflattenable_cache(e):
                raise _UnflattenableCache(_first_line(e)) from e
    try:
        return _export(module, args, kwargs, None, functions)
    except Exception as e:  # noqa: BLE001
        error = _UnflattenableCache if _unflattenable_cache(e) else CaptureError
        raise error(f"torch.export failed for {type(module).__name__}: {e}") from e


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def register_hf_cache_pytree() -> None:
    """Makes transformers' DynamicCache and EncoderDecoderCache pytree nodes (idempotent; a no-op
    without transformers). The export cache calls it too, before it reads an output spec that holds
    a cache."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.cache_utils import EncoderDecoderCache
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # a transformers without them: a model returning a cache fails at export
        return
    register_dynamic_cache_export_support()
    if EncoderDecoderCache not in pytree.SUPPORTED_NODES:
        _register_encoder_decoder_cache(EncoderDecoderCache)


def _register_encoder_decoder_cache(cls) -> None:
    """An EncoderDecoderCache (Whisper, M2M100, mT5 decoders return one) is its two DynamicCaches,
    self-attention then cross-attention; rebuilt from them, it recomputes its per-layer flags."""
    def children(cache):
        return [cache.self_attention_cache, cache.cross_attention_cache]

    pytree.register_pytree_node(
        cls, lambda cache: (children(cache), None), lambda caches, _: cls(*caches),
        serialized_type_name=f"{cls.__module__}.{cls.__name__}",
        flatten_with_keys_fn=lambda cache: ([(pytree.GetAttrKey(name), c) for name, c in
                                             zip(("self_attention_cache", "cross_attention_cache"), children(cache))],
                                            None))


def _refuse_untraceable_batch_norms(module: torch.nn.Module) -> None:
    """A momentum=None BatchNorm in training reads its batch count as a Python float, on which
    torch.export fails; cumulative_batch_norm.py stands in for torch's own forward, not for a
    subclass's (SyncBatchNorm): say so plainly for those."""
    names = untraceable_batch_norms(module)
    if names:
        raise CaptureError(f"'{names[0]}' is a BatchNorm subclass with its own forward and momentum=None (a "
                           "cumulative moving average), which torch.export cannot trace; give it a momentum "
                           "(e.g. 0.1) or capture it in eval mode")


def _subgraph_modules(ep: ExportedProgram) -> list[torch.fx.GraphModule]:
    """The GraphModules of the program's higher-order ops' bodies, nested ones included."""
    return [m for name, m in ep.graph_module.named_modules() if name and isinstance(m, torch.fx.GraphModule)]


def _has_functorch_transforms(ep: ExportedProgram) -> bool:
    """True when the training IR keeps a torch.func transform as calls into its interpreter
    (torch._functorch.predispatch: vmap's _vmap_increment_nesting / _add_batch_dim, jvp's dual
    levels), as T5Gemma2's vmapped mask functions leave it. Retracing to ATen
    (`run_decompositions({})`, taken with functionalization) runs the transform's batching rules
    and leaves the batched ATen ops it stands for."""
    return any(n.op == "call_function" and getattr(n.target, "__module__", "") == "torch._functorch.predispatch"
               for g in [ep.graph, *(m.graph for m in _subgraph_modules(ep))] for n in g.nodes)


def _mutates(ep: ExportedProgram) -> bool:
    """True when the graph has in-place ops; only then is functionalization (a second trace, slower
    than the export itself) needed. aten.batch_norm in training updates its running stats without
    a mutable schema. `detach_` changes autograd metadata, not values: the translator takes it as
    detach (HF's DynamicCache detaches its fresh empty tensors in place; functionalizing that graph
    fails in torch 2.13 on the lifted constants of submodules)."""
    for n in [n for g in [ep.graph, *(m.graph for m in _subgraph_modules(ep))] for n in g.nodes]:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target._schema.is_mutable and n.target != torch.ops.aten.detach_.default:
            return True
        if n.target == torch.ops.aten.batch_norm.default and n.args[5] and n.args[3] is not None:
            return True
    return False


def _export(module, args, kwargs, dynamic_shapes, functions: FunctionCapture) -> ExportedProgram:
    """torch.export, non-strict. nn.LSTM / GRU / RNN keep a list of their weights (`_flat_weights`)
    that they rebuild when export swaps the parameters for its fakes, and export warns that tensor
    attributes were assigned; it puts the real ones back, so that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The tensor attributes (\S+\._flat_weights\[\d+\](, )?)+ were "
                                "assigned during export", category=UserWarning)
        # A user autograd.Function stays one node (autograd_function.py); a checkpointed block's
        # nodes are marked for recompute (checkpoint_regions.py); a Python assert on a traced value
        # is a runtime assert (python_asserts.py); a submodule converted in forward to what it already
        # is stays as it is (module_conversions.py).
        with keep_functions_opaque(functions), capture_checkpoints(), asserts_as_runtime_checks(), \
                unchanged_conversions_skipped():
            def export() -> ExportedProgram:
                return torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic_shapes,
                                           strict=False)

            try:
                return export()
            except Exception as e:  # noqa: BLE001  (a branch on data: the example's branch, checked per call)
                if not is_data_dependent(e):
                    raise
                failure = e
            try:
                with specializing_branches():
                    ep = export()
            except Exception as e:  # noqa: BLE001  (both failures are said: the first is what the model does)
                raise CaptureError(f"{_first_line(failure)}; exported on this batch's branches, it failed with "
                                   f"{type(e).__name__}: {_first_line(e)}") from e
            _log.info("trainrt: %s branches on tensor values (%s); captured on the branches this batch takes, "
                      "checked on every call", type(module).__name__, _first_line(failure))
            return mark_specialized(ep)


def _by_parameter(module: torch.nn.Module, args: tuple, kwargs: dict, spec) -> dict:
    """dynamic_shapes keyed by forward's parameter names, `spec(leaf)` for each pytree leaf."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise CaptureError(f"the inputs do not match {type(module).__name__}.forward: {e}") from e
    return {name: pytree.tree_map(spec, value) for name, value in bound.arguments.items()}


def _auto_dynamic_shapes(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict:
    """Dim.AUTO on every dim of every tensor, None for other leaves; but a float tensor of rank 4 or
    more (images, videos) has its batch dim alone dynamic. Vision models cut H and W into windows
    and patches with floor divisions, and torch.export's symbolic reasoning over them is slow (Swin's
    capture: 355 s with H and W symbolic); a training run keeps its resolution, and a new one is
    captured again, saying why."""
    def dims(x):
        if not isinstance(x, torch.Tensor) or not x.dim():
            return None
        if x.is_floating_point() and x.dim() >= 4:
            return {0: Dim.AUTO}
        return {d: Dim.AUTO for d in range(x.dim())}

    return _by_parameter(module, args, kwargs, dims)


def _batch_dynamic_shapes(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict | None:
    """{0: batch} on each tensor whose dim 0 has the batch size, None elsewhere. None when no input
    has a batch of 2 or more (export specializes sizes 0 and 1)."""
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors or tensors[0].shape[0] < 2:
        return None
    size, batch = tensors[0].shape[0], Dim("batch")
    return _by_parameter(module, args, kwargs, lambda x: {0: batch} if isinstance(x, torch.Tensor)
                         and x.dim() >= 1 and x.shape[0] == size else None)
