// bf16 and f16 values on ops the engine computes in f32 only: a model.bfloat16() trains as it is,
// and autocast's bf16 values reach ops with no bf16 kernel.
//
// torch's CPU kernels for bf16 and f16 compute in f32 inside and round once on store (opmath). The
// engine has such kernels for the ops that dominate a step (products, norms, softmax, attention,
// elementwise); an op without one runs on its inputs widened to f32 and its float outputs rounded
// back:
//
//   Y (bf16) = Op(X (bf16), W (bf16))                                                    before
//   Y (bf16) = Cast<bf16>(Op(Cast<f32>(X), Cast<f32>(W)))    Y is the same Value, readers kept  after
//
// the same computation torch does for that op, one rounding per output. Three callers:
//   - the gradient builder, for a gradient node whose schema refuses its bf16 / f16 inputs
//     (grad_context.cc);
//   - passes/low_precision_compute.h, for forward nodes whose schema refuses them (BatchNormalization);
//   - the session, for nodes with no kernel of that dtype (runtime/bf16_widening.h).
#pragma once

#include <map>
#include <vector>

#include "trainrt/core/dtype.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

inline bool is_low_precision(DType t) { return t == DType::kBF16 || t == DType::kF16; }

// The first bf16 / f16 dtype among the node's inputs (kUndefined: none).
DType low_precision_input(const Node& n);

// bf16 / f16 value -> its Cast to f32, shared by the nodes widened so far that read it.
using WidenedValues = std::map<Value*, Value*>;

// Replaces `n` (inputs set; outputs may be uninferred) with the same op, under the same node name,
// over its bf16 / f16 inputs cast to f32; each output comes from a Cast of the f32 result to `low`
// (its stored dtype when that is bf16 / f16), or an Identity where the result is not f32 or the
// stored dtype was f32, so that n's output Values, names and readers stay. The new nodes take n's
// place in insertion order (the schedule keeps it among ready nodes). Returns n's outputs. Throws
// what inference throws when the op does not take f32 either.
std::vector<Value*> compute_in_f32(Graph& g, Node* n, DType low, WidenedValues* widened = nullptr);

}  // namespace trainrt
