"""trainrt::python_op (a user's autograd.Function, capture/autograd_function.py) -> PythonOp.

The node's outputs are the Function's ctx handle, then its tensors. Each output dim is written as
an int or as the input dim it equals ("i<k>.<d>"), so symbolic batch and sequence dims flow through
the node (ops/python_op_schemas.cc); an output dim that is neither is refused, naming the Function.

The positional arguments are the node's `arguments` attribute, JSON: a tensor is {"tensor": k}
(node input k), None, bools, ints, floats and strings are themselves (a float that JSON cannot hold
as {"float": "inf"}), a list is a list, a tuple {"tuple": [...]}, a dict {"dict": [[key, value],
...]}, and any other object {"object": its type's full name}. The saved graph says what each call
was given; the run calls the Function with the capture's own objects (`call_id`).
"""

from __future__ import annotations

import json
import math

from trainrt.capture.autograd_function import CALLS, _Slot
from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.onnx_builder import onnx_type
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static, sym_expr


def _dims(ctx: OpContext, inputs: list[TensorValue], shape, name: str, j: int) -> str:
    dims = []
    for d, size in enumerate(shape):
        if is_static(size):
            dims.append(str(int(size)))
            continue
        expr = sym_expr(size)
        ref = next((f"i{k}.{a}" for k, x in enumerate(inputs) for a, s in enumerate(x.shape) if sym_expr(s) == expr),
                   None)
        if ref is None:
            raise ctx.unsupported(f"output {j} of autograd.Function {name} has dim {d} of size {expr}, which is no "
                                  "input's dim (register_shape_inference cannot express it either)")
        dims.append(ref)
    return ",".join(dims)


def _argument_json(a):
    if isinstance(a, _Slot):
        return {"tensor": a.index}
    if isinstance(a, float) and not math.isfinite(a):
        return {"float": repr(a)}
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    if isinstance(a, tuple):
        return {"tuple": [_argument_json(x) for x in a]}
    if isinstance(a, list):
        return [_argument_json(x) for x in a]
    if isinstance(a, dict):
        return {"dict": [[_argument_json(k), _argument_json(v)] for k, v in a.items()]}
    return {"object": f"{type(a).__module__}.{type(a).__qualname__}"}


@translates("trainrt.python_op.default")
def python_op(ctx: OpContext) -> list[str]:
    inputs, call_id = list(ctx["inputs"]), int(ctx["call_id"])
    record = CALLS[call_id]
    outs = list(ctx.out)
    names = ctx.b.add_node(
        "PythonOp", [x.name for x in inputs], 1 + len(outs), domain="com.trainrt", hint=f"{ctx.node.name}/PythonOp",
        function=record.name, call_id=call_id, arguments=json.dumps([_argument_json(a) for a in record.template]),
        input_requires_grad=[int(r) for r in record.input_requires_grad],
        output_dtypes=[onnx_type(o.dtype) for o in outs],
        output_shapes=[_dims(ctx, inputs, o.shape, record.name, j) for j, o in enumerate(outs)])
    return names[1:]
