// The batch dims of a batched matrix product (MatMul, FusedMatMul): numpy broadcasting of A's and
// B's leading dims, planned for strided batched GEMM calls.
//
// Size-1 dims are dropped, broadcast dims get stride 0, and runs of dims that are contiguous for
// A, B and C alike are merged, so that the innermost remaining dim can go to one batched GEMM.
//
//   std::vector<int64_t> batch_dims;
//   auto batch = plan_batch(where, a_dims, a_dims.size() - 2, b_dims, b_dims.size() - 2, m, n, k, batch_dims);
//   for_each_batch_run(batch, [&](int64_t oa, int64_t ob, int64_t oc, const BatchDim& inner) { ... });
//
// A product kernel keeps its last plan in a LastPlan, so a steady-state run (the shapes of the
// last one) neither replans nor allocates:
//
//   const Plan& p = last.get(a.dims(), b.dims(), y.dims(), [&] { return plan(...); });
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrt {

// One batch dim after broadcasting: its size and the element strides stepping A, B and C to the
// next matrix along it (0 where A or B is broadcast).
struct BatchDim {
  int64_t size, stride_a, stride_b, stride_c;
};

// A's first `batch_a` dims and B's first `batch_b` dims, broadcast; matrices are m x k, k x n and
// m x n. Fills `batch_dims` with the broadcast batch shape; throws ShapeError naming `where` and
// both shapes when they do not broadcast. Returns the planned dims, outermost first.
std::vector<BatchDim> plan_batch(const std::string& where, const std::vector<int64_t>& a, size_t batch_a,
                                 const std::vector<int64_t>& b, size_t batch_b, int64_t m, int64_t n, int64_t k,
                                 std::vector<int64_t>& batch_dims);

// The plan a kernel made for its last run and the dims of A, B and Y it was made for. A node's
// kernel runs one call at a time (a session runs its steps in order), so it needs no lock.
template <typename Plan>
class LastPlan {
 public:
  // The plan for these dims: the kept one when they are the last run's, else make()'s (kept only
  // when make returns; a make that throws leaves nothing kept).
  template <typename Make>
  const Plan& get(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& y,
                  Make&& make) {
    if (valid_ && a == a_ && b == b_ && y == y_) return plan_;
    valid_ = false;
    plan_ = make();
    a_ = a, b_ = b, y_ = y;
    valid_ = true;
    return plan_;
  }

 private:
  bool valid_ = false;
  std::vector<int64_t> a_, b_, y_;
  Plan plan_;
};

// Calls fn(offset_a, offset_b, offset_c, inner) for every index of the outer batch dims; inner is
// the innermost batch dim (size 1 when there is none), left for a batched product.
template <typename Fn>
void for_each_batch_run(const std::vector<BatchDim>& batch, Fn&& fn) {
  const BatchDim inner = batch.empty() ? BatchDim{1, 0, 0, 0} : batch.back();
  const size_t outer = batch.empty() ? 0 : batch.size() - 1;
  std::vector<int64_t> index(outer, 0);
  int64_t off_a = 0, off_b = 0, off_c = 0;
  for (;;) {
    fn(off_a, off_b, off_c, inner);
    size_t d = outer;
    for (; d > 0; --d) {
      const BatchDim& bd = batch[d - 1];
      off_a += bd.stride_a, off_b += bd.stride_b, off_c += bd.stride_c;
      if (++index[d - 1] < bd.size) break;
      off_a -= bd.stride_a * bd.size, off_b -= bd.stride_b * bd.size, off_c -= bd.stride_c * bd.size;
      index[d - 1] = 0;
    }
    if (d == 0) return;
  }
}

}  // namespace trainrt
