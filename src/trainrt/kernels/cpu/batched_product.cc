#include "trainrt/kernels/cpu/batched_product.h"

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

std::vector<BatchDim> plan_batch(const std::string& where, const std::vector<int64_t>& a, size_t batch_a,
                                 const std::vector<int64_t>& b, size_t batch_b, int64_t m, int64_t n, int64_t k,
                                 std::vector<int64_t>& batch_dims) {
  const size_t rank = std::max(batch_a, batch_b);
  std::vector<BatchDim> dims(rank);
  batch_dims.assign(rank, 1);
  int64_t stride_a = m * k, stride_b = k * n, stride_c = m * n;
  for (size_t i = rank; i-- > 0;) {
    const int64_t da = i + batch_a >= rank ? a[i + batch_a - rank] : 1;
    const int64_t db = i + batch_b >= rank ? b[i + batch_b - rank] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt(where, ": batch dims of input 0 ", to_string(a), " and input 1 ", to_string(b),
                           " do not broadcast"));
    const int64_t size = da == 1 ? db : da;
    dims[i] = {size, da == 1 ? 0 : stride_a, db == 1 ? 0 : stride_b, stride_c};
    batch_dims[i] = size;
    stride_a *= da, stride_b *= db, stride_c *= size;
  }
  std::vector<BatchDim> merged;
  for (const BatchDim& d : dims) {
    if (d.size == 1) continue;
    BatchDim* outer = merged.empty() ? nullptr : &merged.back();
    if (outer && outer->stride_a == d.stride_a * d.size && outer->stride_b == d.stride_b * d.size &&
        outer->stride_c == d.stride_c * d.size)
      *outer = {outer->size * d.size, d.stride_a, d.stride_b, d.stride_c};
    else
      merged.push_back(d);
  }
  return merged;
}

}  // namespace trainrt
