#include "trainrt/train/loss_builder.h"

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/low_precision_compute.h"

namespace trainrt {

LossKind parse_loss_kind(std::string_view name) {
  if (name == "cross_entropy") return LossKind::kCrossEntropy;
  if (name == "mse") return LossKind::kMse;
  throw InvalidModel(fmt("unknown loss '", name, "'; choose cross_entropy or mse"));
}

std::string append_loss(Graph& graph, LossKind kind, const std::string& output, const std::string& label) {
  LowPrecisionCompute().apply(graph);  // a bf16 / f16 model infers once its f32-only nodes are between casts
  infer_graph_shapes(graph);
  Value* out = graph.find_value(output);
  if (!out) throw InvalidModel(fmt("loss: '", output, "' is not a value of the model"));
  if (!is_floating(out->dtype))
    throw InvalidModel(fmt("loss: output '", output, "' has dtype ", dtype_name(out->dtype), ", expected floating point"));
  if (graph.find_value(label)) throw InvalidModel(fmt("loss: label name '", label, "' is already used in the model"));
  std::string loss = graph.unique_name("loss");
  if (kind == LossKind::kCrossEntropy) {
    if (out->shape.rank_known && out->shape.rank() < 2)
      throw InvalidModel(fmt("loss: cross_entropy needs (N, C, ...) scores; '", output, "' is ", to_string(out->shape)));
    Shape label_shape = Shape::unknown_rank();
    if (out->shape.rank_known) {
      label_shape = out->shape;
      label_shape.dims.erase(label_shape.dims.begin() + 1);  // (N, C, d...) -> (N, d...)
    }
    Value* y = graph.add_input(label, DType::kI64, label_shape);
    Node* n = graph.add_node("SoftmaxCrossEntropyLoss", {out, y}, {loss}, kOnnxDomain, "loss");
    n->set_attr("reduction", Attribute::of_string("mean"));
  } else {
    Value* y = graph.add_input(label, out->dtype, out->shape);
    Value* diff = graph.add_node("Sub", {out, y}, {graph.unique_name("loss_diff")})->output(0);
    Value* sq = graph.add_node("Mul", {diff, diff}, {graph.unique_name("loss_sq")})->output(0);
    Node* mean = graph.add_node("ReduceMean", {sq}, {loss}, kOnnxDomain, "loss");
    mean->set_attr("keepdims", Attribute::of_int(0));
  }
  graph.add_output(graph.find_value(loss));
  infer_graph_shapes(graph);
  return loss;
}

}  // namespace trainrt
