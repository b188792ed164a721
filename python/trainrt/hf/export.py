"""The trained model's eval graph as a self-contained ONNX file: what `RTTrainer.export_onnx` writes.

    model = inference_onnx(module, dict(input_ids=ids, attention_mask=mask))   # onnx.ModelProto
    (logits,) = trainrt.Session(model.SerializeToString()).run([ids, mask])
    onnxruntime.InferenceSession(model.SerializeToString()).run(["logits"], dict(input_ids=ids, attention_mask=mask))

The module is captured in eval mode under no_grad (the translation RTModule's eval engine runs), its
parameters and buffers become initializers with their current values, and the outputs are named as
the model's output fields (`logits`). TrainRT's own ops in the capture (com.trainrt FusedMatMul,
Embedding, ScaledDotProductAttention, StopGradient) are then rewritten as standard ONNX ops
(onnx_lowering.py), so that onnxruntime, or any ONNX runtime, runs the file; standard_ops=False keeps
them (trainrt.Session and the C++ engine run either).
"""

from __future__ import annotations

import onnx
import torch
from onnx import helper, numpy_helper

from trainrt.capture import capture
from trainrt.hf.onnx_lowering import lower_to_standard_onnx


def inference_onnx(module: torch.nn.Module, inputs: dict[str, torch.Tensor], standard_ops: bool = True) -> onnx.ModelProto:
    """`module`'s eval-mode forward on keyword `inputs` (their dims symbolic where export allows); in
    standard ONNX ops unless standard_ops=False."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            captured = capture(module, (), dict(inputs))
    finally:
        module.train(was_training)
    model = onnx.ModelProto()
    model.CopyFrom(captured.model)
    graph = model.graph
    tensors = {**dict(module.named_parameters(remove_duplicate=False)),
               **dict(module.named_buffers(remove_duplicate=False))}
    frozen = dict(captured.param_inputs + captured.buffer_inputs)  # graph input -> fqn
    user = [i for i in graph.input if i.name not in frozen]
    del graph.input[:]
    graph.input.extend(user)
    graph.initializer.extend(numpy_helper.from_array(tensors[fqn].detach().float().numpy()
                                                     if tensors[fqn].dtype == torch.bfloat16 else
                                                     tensors[fqn].detach().numpy(), name)
                             for name, fqn in frozen.items())
    _name_outputs(graph, captured)
    return lower_to_standard_onnx(model) if standard_ops else model


def _name_outputs(graph: onnx.GraphProto, captured) -> None:
    """Graph outputs named by the output structure's keys (a ModelOutput's fields), through Identity."""
    names = [str(k) for k in (captured.out_spec.context or [])]
    user = [o for o in graph.output if o.name in captured.outputs]
    if len(names) != len(user) or len(set(names)) != len(names):
        return  # not a flat mapping (a tuple, nested outputs): the capture's names stay
    renamed = []
    for name, out in zip(names, user):
        graph.node.append(helper.make_node("Identity", [out.name], [name]))
        value = onnx.ValueInfoProto()
        value.CopyFrom(out)
        value.name = name
        renamed.append(value)
    del graph.output[:]
    graph.output.extend(renamed)
