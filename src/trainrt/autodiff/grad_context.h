// What a gradient rule sees and uses: the forward node, the gradients of its outputs, and a small
// emitter for the backward nodes it adds to the joint graph.
//
// A rule reads dY for each output (null when no gradient flows there), emits nodes computing dX
// for the inputs that need one, and hands them back with set_input_grad. Emitted nodes get their
// types and shapes inferred at once, so a rule may look at shapes (possibly symbolic) to pick a
// cheaper form, e.g. skip reducing a gradient that was not broadcast.
//
//   void relu_grad(GradContext& ctx) {   // dX = ReluGrad(dY, Y)
//     ctx.set_input_grad(0, ctx.emit("ReluGrad", {ctx.output_grad(0), ctx.output(0)}, {}, kTrainrtDomain));
//   }
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

class GradContext {
 public:
  GradContext(Graph& graph, const Node& node, std::vector<Value*> output_grads, std::vector<bool> needs_input_grad);

  const Node& node() const { return node_; }
  Graph& graph() { return graph_; }
  Value* input(int i) const { return node_.input(i); }
  Value* output(int i) const { return node_.output(i); }
  Value* output_grad(int i) const;
  bool needs_input_grad(int i) const;
  void set_input_grad(int i, Value* grad);
  const std::vector<Value*>& input_grads() const { return input_grads_; }

  // Emits one node (named after the forward node) and returns its first output.
  Value* emit(const std::string& op, const std::vector<Value*>& inputs,
              const std::map<std::string, Attribute>& attrs = {}, std::string_view domain = kOnnxDomain);
  // Emits one node with `num_outputs` outputs (null entries for outputs not wanted).
  std::vector<Value*> emit_multi(const std::string& op, const std::vector<Value*>& inputs, int num_outputs,
                                 const std::map<std::string, Attribute>& attrs = {},
                                 std::string_view domain = kOnnxDomain, const std::vector<bool>& wanted = {});

  // Constants as initializers: a scalar of `like`'s dtype, or a 1-D i64 tensor.
  Value* scalar_like(Value* like, double value);
  Value* const_i64(const std::vector<int64_t>& values);
  Value* shape_of(Value* v);  // Shape(v); the planner folds it when v's shape is static
  // Sums `grad` over the axes along which `like` was broadcast to grad's shape and reshapes the
  // result to like's shape: the gradient of an implicit broadcast (ONNX "multidirectional").
  Value* reduce_to_shape_of(Value* grad, Value* like);

 private:
  std::string fresh_name(const std::string& hint);

  Graph& graph_;
  const Node& node_;
  std::vector<Value*> output_grads_;
  std::vector<bool> needs_input_grad_;
  std::vector<Value*> input_grads_;
  int counter_ = 0;
};

// A gradient rule per differentiable op.
using GradFn = void (*)(GradContext&);

class GradientRegistry {
 public:
  static const GradientRegistry& global();
  void add(std::string_view domain, std::string_view op, GradFn fn);
  // Ops whose outputs carry no gradient (Shape, comparisons, ...): rules are not needed.
  void add_non_differentiable(std::string_view domain, std::string_view op);
  const GradFn* find(const std::string& domain, const std::string& op) const;
  bool is_non_differentiable(const std::string& domain, const std::string& op) const;

 private:
  std::map<std::pair<std::string, std::string>, GradFn> rules_;
  std::map<std::pair<std::string, std::string>, bool> non_differentiable_;
};

}  // namespace trainrt
