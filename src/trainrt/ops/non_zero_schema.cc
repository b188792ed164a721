#include "trainrt/ops/non_zero.h"

#include <vector>

#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {

int64_t count_nonzero(const Tensor& x) {
  int64_t count = 0;
  for (int64_t i = 0; i < x.numel(); ++i) count += x.to_double(i) != 0.0;
  return count;
}

void fill_nonzero(const Tensor& x, Tensor& y) {
  const int64_t rank = x.rank(), count = y.rank() == 2 ? y.dim(1) : 0;
  int64_t* out = y.data<int64_t>();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t k = 0;
  for (int64_t i = 0; i < x.numel() && k < count; ++i) {
    if (x.to_double(i) != 0.0) {
      for (int64_t d = 0; d < rank; ++d) out[d * count + k] = index[static_cast<size_t>(d)];
      ++k;
    }
    for (int64_t d = rank; d-- > 0;) {
      if (++index[static_cast<size_t>(d)] < x.dim(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

namespace {

void infer_non_zero(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const Dim rank = in.rank_known ? Dim(in.rank()) : Dim();
  const Tensor* x = ctx.input_value(0);
  if (x && x->defined()) return ctx.set_output(0, DType::kI64, Shape({rank, Dim(count_nonzero(*x))}));
  // Named after the value, so that the dims it flows into agree with each other.
  ctx.set_output(0, DType::kI64, Shape({rank, Dim::symbolic("nonzero_of(" + ctx.node().output(0)->name + ")")}));
}

}  // namespace

void register_non_zero_schema(OpRegistry& r) {
  r.add({.domain = "", .name = "NonZero", .min_inputs = 1, .max_inputs = 1, .infer = infer_non_zero});
}

}  // namespace trainrt
