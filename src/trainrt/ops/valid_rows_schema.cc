#include <algorithm>

#include "trainrt/ops/tensor_schemas.h"
#include "trainrt/ops/valid_rows.h"

namespace trainrt {

int64_t valid_rows_count(const Tensor& labels, int64_t ignore_index, int64_t multiple) {
  const int64_t n = labels.numel();
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += labels.to_i64(i) != ignore_index;
  if (valid == n) return n;
  const int64_t m = std::max<int64_t>(multiple, 1);
  return std::min(n, std::max<int64_t>(1, (valid + m - 1) / m) * m);
}

void fill_valid_rows(const Tensor& labels, int64_t ignore_index, Tensor& rows) {
  int64_t* out = rows.data<int64_t>();
  const int64_t n = labels.numel(), r = rows.numel();
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += labels.to_i64(i) != ignore_index;
  int64_t padding = std::max<int64_t>(0, r - valid);  // ignored rows taken, the first ones
  for (int64_t i = 0, k = 0; i < n && k < r; ++i)
    if (labels.to_i64(i) != ignore_index || padding-- > 0) out[k++] = i;
}

namespace {

void infer_valid_rows(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kI64, DType::kI32});
  const Shape& in = ctx.input_shape(0);
  if (in.rank_known && in.rank() != 1) ctx.fail(fmt("labels must be 1-D, they are ", to_string(in)));
  const Tensor* labels = ctx.input_value(0);
  if (labels && labels->defined()) {
    const int64_t r = valid_rows_count(*labels, ctx.node().attr_int("ignore_index", -100),
                                       ctx.node().attr_int("multiple", kValidRowsMultiple));
    return ctx.set_output(0, DType::kI64, Shape({Dim(r)}));
  }
  // Named after the value, so that the dims it flows into agree with each other.
  ctx.set_output(0, DType::kI64, Shape({Dim::symbolic("rows_of(" + ctx.node().output(0)->name + ")")}));
}

}  // namespace

void register_valid_rows_schema(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "ValidRows", .min_inputs = 1, .max_inputs = 1,
         .infer = infer_valid_rows});
}

}  // namespace trainrt
