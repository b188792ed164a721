"""Input density: how much of each step's token and label inputs is real data rather than padding.

As ORTModule's runtime inspector did (ORTMODULE_PRINT_INPUT_DENSITY): for every user input that
feeds an embedding with a padding index, the share of entries that are not that index, and for
every input that reaches a cross-entropy loss as its labels, the share that is not the ignore
index. A low density says a batch spends most of its compute on padding (sort or pack sequences).

After each step the report also says what the sparse optimizers skipped (describe_skipped): the rows
label sparsity's loss reads, the tokens padding elimination runs, and the FLOPs of the products the
dropped tokens no longer pass through.

The inputs to observe are found in the captured ONNX graph: the embedding's indices input (com.trainrt
Embedding, attribute padding_idx) and the labels of SoftmaxCrossEntropyLoss (attribute ignore_index),
followed back through ops that only move or select labels (Reshape, Slice, Concat with padding...).
"""

from __future__ import annotations

import onnx
import torch

# Ops a label tensor passes through on its way to the loss without changing what the values mean.
_LABEL_CARRIERS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Cast", "Transpose",
                   "Concat", "Expand", "Gather"}


def _attribute(node: onnx.NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def _sources(graph: onnx.GraphProto, value: str, inputs: set[str]) -> set[str]:
    """The graph inputs among `inputs` that `value` is built from through label-carrying ops."""
    producer = {out: n for n in graph.node for out in n.output}
    found, stack, seen = set(), [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in inputs:
            found.add(v)
        elif (node := producer.get(v)) is not None and node.op_type in _LABEL_CARRIERS:
            stack.extend(node.input[:1] if node.op_type != "Concat" else node.input)
    return found


class InputDensityObserver:
    """Finds the observed inputs of one captured graph; describe(tensors) reports a step's densities."""

    def __init__(self, model: onnx.ModelProto, user_inputs: list[str]):
        names = set(user_inputs)
        index = {name: i for i, name in enumerate(user_inputs)}
        self.observed: list[tuple[int, str, str, int]] = []  # (user input index, name, kind, padding value)
        for node in model.graph.node:
            if node.op_type == "Embedding" and node.domain == "com.trainrt" and node.input[1] in names:
                self.observed.append((index[node.input[1]], node.input[1], "embedding", int(_attribute(node, "padding_idx"))))
            elif node.op_type == "SoftmaxCrossEntropyLoss" and len(node.input) > 1:
                ignore = _attribute(node, "ignore_index")
                if ignore is not None:
                    for name in sorted(_sources(model.graph, node.input[1], names)):
                        self.observed.append((index[name], name, "label", int(ignore)))

    def describe(self, tensors: list[torch.Tensor]) -> str | None:
        """One line per observed input: 'input_ids (embedding, padding 0): density 87.5% of 1024', or None."""
        if not self.observed:
            return None
        lines = []
        for i, name, kind, pad in self.observed:
            t = tensors[i]
            density = (t != pad).sum().item() / max(t.numel(), 1)
            what = "padding" if kind == "embedding" else "ignore_index"
            lines.append(f"  {name} ({kind}, {what} {pad}): density {100 * density:.1f}% of {t.numel()}")
        return "trainrt input density\n" + "\n".join(lines)


def describe_skipped(row_counts, row_flops: int) -> str | None:
    """What the sparse optimizers skipped in the last forward: `row_counts` are the engine's
    (name, rows kept, rows selected from) per row selection (ModulePrograms.last_row_counts; kept is
    rounded up to a multiple of 64 as the engine plans it), `row_flops` the forward FLOPs of one token
    row in the products padding elimination moved (the backward's two products cost twice that)."""
    lines = []
    for name, kept, of in row_counts:
        if name.endswith("/kept_tokens/rows"):
            skipped = of - kept
            lines.append(f"  padding elimination: {kept} of {of} tokens computed, {skipped} skipped "
                         f"({3 * skipped * row_flops / 1e9:.2f} GFLOP of products, forward and backward)")
        else:
            lines.append(f"  label sparsity ({name.removesuffix('/valid_rows')}): the loss reads {kept} of {of} rows")
    return "trainrt sparsity\n" + "\n".join(lines) if lines else None
