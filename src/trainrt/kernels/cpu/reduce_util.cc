#include "trainrt/kernels/cpu/reduce_util.h"

#include <algorithm>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

// Copies x into y where output axis k walks input axis perm[k]: an odometer over y's index
// that keeps the matching input offset.
template <typename E>
void permute_copy(const E* x, E* y, const std::vector<int64_t>& out_dims, const std::vector<int64_t>& src_stride,
                  int64_t numel) {
  const size_t rank = out_dims.size();
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < numel; ++i) {
    y[i] = x[offset];
    for (size_t k = rank; k-- > 0;) {
      if (++index[k] < out_dims[k]) {
        offset += src_stride[k];
        break;
      }
      offset -= src_stride[k] * (out_dims[k] - 1);
      index[k] = 0;
    }
  }
}

}  // namespace

std::optional<ReduceGeometry> reduce_geometry(const std::vector<int64_t>& dims, const std::vector<bool>& mask) {
  TRAINRT_CHECK(dims.size() == mask.size());
  ReduceGeometry g;
  enum { kLeading, kReduced, kTrailing } phase = kLeading;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;  // any layout: it neither adds elements nor separates groups
    if (mask[i]) {
      if (phase == kTrailing) return std::nullopt;  // a second group of reduced axes
      phase = kReduced;
      g.reduce *= dims[i];
    } else if (phase == kLeading) {
      g.outer *= dims[i];
    } else {
      phase = kTrailing;
      g.inner *= dims[i];
    }
  }
  return g;
}

ReduceGeometry axis_geometry(const std::vector<int64_t>& dims, int64_t axis) {
  ReduceGeometry g;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t a = static_cast<int64_t>(i);
    (a < axis ? g.outer : a == axis ? g.reduce : g.inner) *= dims[i];
  }
  return g;
}

Tensor move_reduced_axes_last(const Tensor& x, const std::vector<bool>& mask) {
  const size_t rank = x.dims().size();
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t k = rank; k-- > 1;) in_stride[k - 1] = in_stride[k] * x.dims()[k];
  std::vector<int64_t> out_dims, src_stride;
  for (bool reduced : {false, true}) {
    for (size_t k = 0; k < rank; ++k) {
      if (mask[k] != reduced) continue;
      out_dims.push_back(x.dims()[k]);
      src_stride.push_back(in_stride[k]);
    }
  }
  Tensor y = Tensor::empty(x.dtype(), out_dims);
  const auto copy = [&]<typename E>() { permute_copy(x.data<E>(), y.data<E>(), out_dims, src_stride, x.numel()); };
  switch (dtype_size(x.dtype())) {
    case 1: copy.operator()<uint8_t>(); break;
    case 2: copy.operator()<uint16_t>(); break;
    case 4: copy.operator()<uint32_t>(); break;
    case 8: copy.operator()<uint64_t>(); break;
    default: TRAINRT_CHECK(false, "no element size ", dtype_size(x.dtype()));
  }
  return y;
}

}  // namespace trainrt
