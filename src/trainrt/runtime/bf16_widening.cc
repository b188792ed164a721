#include "trainrt/runtime/bf16_widening.h"

#include "trainrt/autodiff/low_precision.h"
#include "trainrt/core/logging.h"

namespace trainrt {

std::vector<std::string> widen_bf16_without_kernel(Graph& graph, const KernelTable& kernels) {
  std::vector<Node*> targets;
  for (Node* n : graph.topological_order()) {
    const DType key = KernelTable::key_dtype(*n);
    if (is_low_precision(key) && kernels.find(n->domain(), n->op_type(), key) == nullptr) targets.push_back(n);
  }
  WidenedValues widened;  // one Cast per bf16 / f16 value, shared by the widened nodes reading it
  std::vector<std::string> names;
  for (Node* n : targets) {
    names.push_back(n->name());
    TRAINRT_LOG(kVerbose) << dtype_name(KernelTable::key_dtype(*n)) << ": " << n->describe()
                          << " has no kernel of that dtype; runs in f32 between casts";
    compute_in_f32(graph, n, KernelTable::key_dtype(*n), &widened);
  }
  return names;
}

}  // namespace trainrt
