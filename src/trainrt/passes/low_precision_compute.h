// LowPrecisionCompute: each node with a bf16 / f16 input whose schema refuses that dtype (ops
// written for f32 and f64 only, e.g. BatchNormalization) computes in f32 between casts
// (autodiff/low_precision.h), as torch's CPU kernels compute such ops inside. Nodes with no kernel
// of the dtype are the session's to widen (runtime/bf16_widening.h).
//
// It runs inference as it walks, so it takes a graph straight from capture, whose values past the
// inputs have no dtype yet, and goes before infer_graph_shapes, which would throw at such a node:
//
//   LowPrecisionCompute().apply(graph);
//   infer_graph_shapes(graph);
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class LowPrecisionCompute : public Pass {
 public:
  std::string_view name() const override { return "LowPrecisionCompute"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
