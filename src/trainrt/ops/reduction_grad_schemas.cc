// Schemas of the TrainRT-domain gradient ops of the reduction family.
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// ReduceSumToShape(X, shape) -> Y of dims `shape`: X summed over the axes along which a tensor of
// dims `shape` would be broadcast to X's dims (the gradient of a broadcast).
void infer_reduce_sum_to_shape(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  DType t = ctx.input_dtype(0);
  if (const Tensor* target = ctx.input_value(1)) {
    std::vector<int64_t> dims = target->to_i64_vector();
    const Shape& x = ctx.input_shape(0);
    if (x.rank_known && static_cast<int64_t>(dims.size()) > x.rank())
      ctx.fail(fmt("target shape ", to_string(dims), " has more axes than input ", to_string(x)));
    ctx.set_output(0, t, Shape::of(dims));
    return;
  }
  const Shape& s = ctx.input_shape(1);
  if (s.rank_known && s.rank() == 1 && s.dims[0].is_static())
    ctx.set_output(0, t, Shape(std::vector<Dim>(static_cast<size_t>(s.dims[0].value))));
  else
    ctx.set_output(0, t, Shape::unknown_rank());
}

}  // namespace

void register_reduction_grad_schemas(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "ReduceSumToShape", .min_inputs = 2, .max_inputs = 2,
         .infer = infer_reduce_sum_to_shape});
}

}  // namespace trainrt
