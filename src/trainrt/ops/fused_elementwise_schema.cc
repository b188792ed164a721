// FusedElementwise (com.trainrt): a subgraph of elementwise ops run as one kernel
// (passes/elementwise_fusion.h makes it; kernels/codegen/ runs it).
//
// FusedElementwise(x_0 .. x_{N-1}) -> (y_0 .. y_{M-1})
//   body     graph attribute: N inputs (x_i's dtype and shape) and M outputs, elementwise ops only;
//            every body node's output has the dims of the inputs broadcast together, so each y_j
//            has those dims (numpy broadcasting of x_0 .. x_{N-1}) and body output j's dtype.
//   Deterministic and never in place: an input may be read after an output element is written.
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

void infer_fused_elementwise(InferenceContext& ctx) {
  const Attribute* body = ctx.node().attr("body");
  if (!body || body->kind != Attribute::Kind::kGraph || !body->g)
    ctx.fail("has no graph attribute 'body'");
  const Graph& g = *body->g;
  if (static_cast<int>(g.inputs().size()) != ctx.num_inputs() || static_cast<int>(g.outputs().size()) != ctx.num_outputs())
    ctx.fail(fmt("has ", ctx.num_inputs(), " inputs and ", ctx.num_outputs(), " outputs, but its body has ",
                 g.inputs().size(), " and ", g.outputs().size()));
  Shape dims = ctx.input_shape(0);
  for (int i = 1; i < ctx.num_inputs(); ++i) dims = broadcast_shapes(dims, ctx.input_shape(i));
  for (int o = 0; o < ctx.num_outputs(); ++o) ctx.set_output(o, g.outputs()[static_cast<size_t>(o)]->dtype, dims);
}

}  // namespace

void register_fused_elementwise_schema(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "FusedElementwise", .min_inputs = 1,
         .max_inputs = OpSchema::kVariadic, .min_outputs = 1, .max_outputs = OpSchema::kVariadic,
         .infer = infer_fused_elementwise});
}

}  // namespace trainrt
