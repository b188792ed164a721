"""trainrt::python_op (a user's autograd.Function, capture/autograd_function.py) -> PythonOp.

The node's outputs are the Function's ctx handle, then its tensors. Each output dim is written as
an int or as the input dim it equals ("i<k>.<d>"), so symbolic batch and sequence dims flow through
the node (ops/python_op_schemas.cc); an output dim that is neither is refused, naming the Function.
"""

from __future__ import annotations

from trainrt.capture.autograd_function import CALLS
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


@translates("trainrt.python_op.default")
def python_op(ctx: OpContext) -> list[str]:
    inputs, call_id = list(ctx["inputs"]), int(ctx["call_id"])
    record = CALLS[call_id]
    outs = list(ctx.out)
    names = ctx.b.add_node(
        "PythonOp", [x.name for x in inputs], 1 + len(outs), domain="com.trainrt", hint=f"{ctx.node.name}/PythonOp",
        function=record.name, call_id=call_id,
        input_requires_grad=[int(r) for r in record.input_requires_grad],
        output_dtypes=[onnx_type(o.dtype) for o in outs],
        output_shapes=[_dims(ctx, inputs, o.shape, record.name, j) for j, o in enumerate(outs)])
    return names[1:]
