#include "trainrt/passes/low_precision_compute.h"

#include "trainrt/autodiff/low_precision.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {

bool LowPrecisionCompute::apply_impl(Graph& graph) const {
  bool changed = false;
  WidenedValues widened;
  for (Node* n : graph.topological_order()) {
    try {
      infer_and_store(*n);
      continue;
    } catch (const ShapeError&) {
      // refused: widened below when it reads bf16 / f16; else infer_graph_shapes reports it
    } catch (const Error&) {
      continue;  // not this pass's (an unknown op): infer_graph_shapes reports it
    }
    const DType low = low_precision_input(*n);
    if (low == DType::kUndefined || n->op_type() == "Cast") continue;
    compute_in_f32(graph, n, low, &widened);
    changed = true;
  }
  return changed;
}

}  // namespace trainrt
