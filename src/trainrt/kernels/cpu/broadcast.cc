#include "trainrt/kernels/cpu/broadcast.h"

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

BroadcastPlan::BroadcastPlan(const std::vector<const std::vector<int64_t>*>& inputs,
                             const std::vector<int64_t>& out_dims)
    : num_inputs_(static_cast<int>(inputs.size())) {
  const size_t n = inputs.size();
  const size_t rank = out_dims.size();
  numel_ = numel_of(out_dims);
  // Per output dim (outermost first), each input's element stride: 0 where it broadcasts.
  std::vector<int64_t> strides(rank * n, 0);
  for (size_t k = 0; k < n; ++k) {
    const std::vector<int64_t>& in = *inputs[k];
    if (in.size() > rank)
      throw ShapeError(fmt("input ", k, " of shape ", to_string(in), " does not broadcast to ",
                           to_string(out_dims)));
    int64_t stride = 1;
    for (size_t j = in.size(); j-- > 0;) {
      const size_t d = j + (rank - in.size());
      if (in[j] != out_dims[d] && in[j] != 1)
        throw ShapeError(fmt("input ", k, " of shape ", to_string(in), " does not broadcast to ",
                             to_string(out_dims)));
      strides[d * n + k] = in[j] == 1 ? 0 : stride;
      stride *= in[j];
    }
  }
  // Collapse from the innermost dim out: merge dim d into the group beside it when every input
  // steps across d exactly as far as across the whole group (contiguous, or 0 when broadcast).
  std::vector<int64_t> dims;          // collapsed, innermost first
  std::vector<int64_t> group_stride;  // [group * n + k]
  for (size_t d = rank; d-- > 0;) {
    if (out_dims[d] == 1) continue;
    const int64_t* s = &strides[d * n];
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < n; ++k)
      merge = s[k] == group_stride[group_stride.size() - n + k] * dims.back();
    if (merge) {
      dims.back() *= out_dims[d];
    } else {
      dims.push_back(out_dims[d]);
      group_stride.insert(group_stride.end(), s, s + n);
    }
  }
  inner_strides_.assign(n, 0);
  if (dims.empty()) return;  // a single element (or none)
  inner_ = dims.front();
  for (size_t k = 0; k < n; ++k) inner_strides_[k] = group_stride[k];
  for (size_t g = dims.size(); g-- > 1;) {
    outer_dims_.push_back(dims[g]);
    outer_strides_.insert(outer_strides_.end(), group_stride.begin() + static_cast<int64_t>(g * n),
                          group_stride.begin() + static_cast<int64_t>((g + 1) * n));
  }
}

}  // namespace trainrt
