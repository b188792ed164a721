// Sequence ops at import: TrainRT's IR has tensors only, so the pattern the dynamo exporter writes
// for torch.split / chunk / unbind without its optimizer,
//   seq = SplitToSequence(x, [split], axis, keepdims);   part = SequenceAt(seq, p)
// becomes one op per part: Gather(x, p, axis) for unbind (no split, keepdims 0), else
// Slice(x, begin, end, axis) over the part's rows (then Squeeze when keepdims is 0 and no split is
// given), with p a constant of the file and split, where given, a constant (a Constant node or an
// initializer) or 1-D sizes the graph computes (a Concat of sizes read from the data, as MoE
// experts split their tokens: the part's bounds are summed from them when the model runs).
// A SplitToSequence something else reads (SequenceLength, ConcatFromSequence, a loop) stays, and
// its import fails as an unsupported op, named.
#pragma once

#include <filesystem>
#include <vector>

#include "trainrt/ir/onnx_messages.h"

namespace trainrt {

// Rewrites `nodes` (the graph's, functions inlined) in place; `graph` gives the initializers, `dir`
// their external data. Throws InvalidModel naming the node for a position or split out of range.
void lower_split_sequences(std::vector<onnx::NodeProto>& nodes, const onnx::GraphProto& graph,
                           const std::filesystem::path& dir);

}  // namespace trainrt
