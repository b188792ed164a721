"""Branches on data: a capture specialized on the branch its example takes, checked every call.

A model that branches on tensor values (`if label_index.size(0) > 0` in DeBERTa's classifier,
`if mask.sum().item() < n` in Reformer, `if is_global_attn` in Longformer) cannot be traced for
every input: torch.export stops with "Could not guard on data-dependent expression". Capture then
exports again with torch's real-tensor propagation, which takes the branch the example's real values
take and records each decision as a runtime assert (`u0 >= 1`, `u0 < 3`). In such a capture the
translator turns every such decision into a graph output, a [1] bool tensor computed from the same
values (CapturedGraph.branch_checks), and RTModule reads them after each forward: all true, the call took the traced
branches and its results stand; one false, the results are dropped before anything sees them (no
buffer update, no autograd edge kept) and the call runs on a capture of the other branch (one that
exists, or a new one). So each branch is captured once, and a batch that flips a branch costs one
forward more, never a wrong answer.

In a capture without data branches the runtime asserts stay dropped (python -O semantics,
python_asserts.py): only a specialized capture needs them to be sound.

    with specializing_branches():       # export again after a data-dependent failure
        ep = torch.export.export(...)
    mark_specialized(ep); is_specialized(ep)   # True: the translator emits the checks
"""

from __future__ import annotations

import contextlib
import logging

import sympy
import torch._functorch.config as functorch_config
from torch.export import ExportedProgram
from torch.export.exported_program import _get_shape_env
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, free_unbacked_symbols

_KEY = "trainrt_branches_specialized"


def is_data_dependent(error: BaseException) -> bool:
    """Whether export failed on a branch over tensor values (anywhere in the exception chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, GuardOnDataDependentSymNode) or "data-dependent expression" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def specializing_branches():
    """While on, export decides a branch on data by the example's real values, recording the
    decision as a runtime assert. torch logs each decision at WARNING; capture says it once."""
    shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = shapes_log.level
    shapes_log.setLevel(logging.ERROR)
    try:
        with functorch_config.patch(fake_tensor_propagate_real_tensors=True):
            yield
    finally:
        shapes_log.setLevel(level)


def mark_specialized(ep: ExportedProgram) -> ExportedProgram:
    ep.graph_module.meta[_KEY] = True
    return ep


def is_specialized(ep: ExportedProgram) -> bool:
    return bool(ep.graph_module.meta.get(_KEY))


def branch_conditions(ep: ExportedProgram) -> list:
    """The decisions the trace made on tensor values, as sympy conditions over size symbols (`0 <
    u0`). They are the shape env's deferred runtime asserts, not the graph's `_assert_scalar` nodes:
    those are what export inserted from value ranges, and for a branch taken on an empty selection
    they say `u0 <= 2` where the decision was `u0 <= 0`."""
    shape_env = _get_shape_env(ep.graph_module)
    if shape_env is None:
        return []
    # Input-size symbols export unified (s72 == s43) by the one a graph input dim gives; an unbacked
    # symbol is kept even where the decision itself replaced it (u0 := 1 after `Eq(u0, 1)`), or
    # the condition would read true.
    sizes = {k: v for k, v in shape_env.replacements.items() if not free_unbacked_symbols(k)}
    conditions = []
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            expr = ra.expr.xreplace(sizes)
            if expr is not sympy.true and expr not in conditions:
                conditions.append(expr)
    return conditions
