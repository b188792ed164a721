"""A Python `assert` on tensor values, while torch.export traces: a runtime assert, not an export failure.

    assert torch.all(shifted_input_ids >= 0).item(), "Verify that `shifted_input_ids` has only positive values"
    assert x_max.isnan().sum() == 0 and x_min.isnan().sum() == 0, ("NaN detected when computing min/max ...")

(ProphetNet's `_shift_right`, I-BERT's QuantAct) read a value the trace does not know, an unbacked
symbol, and torch.export fails to guard on it ("Could not guard on data-dependent expression
Eq(u0, 1)"). Non-strict export means to take such an assert as true and record it as a runtime
assert (ShapeEnv(trace_asserts=True), torch/_export/non_strict_utils.py), but its bytecode test
(ShapeEnv._is_python_assert, torch 2.13) knows only `assert cond` without a message whose condition
is one test: the user frame's next instructions must be exactly LOAD_ASSERTION_ERROR, RAISE_VARARGS.
With a message, the message's code comes between them; in `assert a and b`, the test of `a` jumps
to the raise when false instead of falling through to it.

`asserts_as_runtime_checks()` widens that test to what an assert is: the path the bytecode takes
when the value being tested is false goes straight to LOAD_ASSERTION_ERROR (the message is computed
only to raise). A test whose false path goes anywhere else (an `if`, `assert a or b`'s `a`) still
fails the export as before. The recorded assert is one of the graph's `_assert_scalar` nodes, which
the translator drops like every runtime assert (translator._CheckedOnly): the engine runs the model
as `python -O` does, and on inputs for which the assert holds it computes what eager computes.
"""

from __future__ import annotations

import bisect
import contextlib
import dis
import os
import sys

import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

# A conditional jump on the value under test, by where the bytecode goes when that value is false.
_FALSE_FALLS_THROUGH = {"POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE"}
_FALSE_JUMPS = {"POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"}
# Python 3.13 converts to bool in an instruction of its own, before the jump.
_TO_BOOL = {"TO_BOOL"}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def false_path_raises_assertion(code, lasti: int) -> bool:
    """Whether, in `code`, the conditional test at instruction offset `lasti` (the one calling
    bool() on the traced value) leads, when the value is false, straight to LOAD_ASSERTION_ERROR.
    An assert compiles its condition as jumps: `assert a and b, msg` tests `a` with a jump to the
    raise when false, `b` with a jump past it when true."""
    insts = list(dis.get_instructions(code))
    at = {inst.offset: k for k, inst in enumerate(insts)}
    cur = bisect.bisect_left([inst.offset for inst in insts], lasti)
    if cur < len(insts) and insts[cur].opname in _TO_BOOL:
        cur += 1
    if cur >= len(insts):
        return False
    if insts[cur].opname in _FALSE_FALLS_THROUGH:
        cur += 1
    elif insts[cur].opname in _FALSE_JUMPS and insts[cur].argval in at:
        cur = at[insts[cur].argval]
    else:
        return False
    return cur < len(insts) and insts[cur].opname == "LOAD_ASSERTION_ERROR"


def _is_python_assert(shape_env: ShapeEnv) -> bool:
    """ShapeEnv._is_python_assert: the test in the model's frame, the first one out of torch's
    package. ShapeEnv._get_user_frame skips a list of torch's files that lacks those of a tensor's
    bool() in non-strict export (non_strict_utils.py's __torch_function__), and would take this
    file for the user's."""
    frame = sys._getframe(1)
    try:
        while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                     or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        return frame is not None and false_path_raises_assertion(frame.f_code, frame.f_lasti)
    finally:
        del frame


@contextlib.contextmanager
def asserts_as_runtime_checks():
    """Inside: torch.export takes any Python `assert` on a traced value as a runtime assert."""
    original = ShapeEnv._is_python_assert
    ShapeEnv._is_python_assert = _is_python_assert
    try:
        yield
    finally:
        ShapeEnv._is_python_assert = original

