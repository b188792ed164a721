// One schema per op: arity, type and shape inference, and which buffers may alias.
//
// Inference runs in two places with the same code: at plan time with shapes that may be symbolic
// and values known only for constants, and at run time (for nodes whose output shapes were not
// static at plan time) with concrete shapes and every input value available. An infer function
// therefore reads input values through `input_value(i)` when it needs them (Reshape's shape,
// Slice's starts, Range's limits) and falls back to dynamic dims when they are absent.
//
//   void infer_relu(InferenceContext& ctx) { ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0)); }
//   registry.add({.name = "Relu", .min_inputs = 1, .max_inputs = 1, .infer = infer_relu,
//                 .inplace = {{0, 0}}});
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// What inference sees of one node: input types, shapes and (when known) values.
class InferenceContext {
 public:
  struct Input {
    DType dtype = DType::kUndefined;
    const Shape* shape = nullptr;
    const Tensor* value = nullptr;  // known data, or null
  };
  struct Output {
    DType dtype = DType::kUndefined;
    Shape shape = Shape::unknown_rank();
    Tensor value;  // set by ops whose value follows from shapes alone (Shape, Size)
  };

  InferenceContext(const Node& node, std::vector<Input> inputs)
      : node_(node), inputs_(std::move(inputs)), outputs_(static_cast<size_t>(node.num_outputs())) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i].shape != nullptr; }
  DType input_dtype(int i) const { return require(i).dtype; }
  const Shape& input_shape(int i) const { return *require(i).shape; }
  const Tensor* input_value(int i) const { return has_input(i) ? inputs_[i].value : nullptr; }
  // Whether output i is wanted (ONNX allows omitting trailing or optional outputs).
  bool has_output(int i) const { return i < num_outputs() && node_.output(i) != nullptr; }

  void set_output(int i, DType dtype, Shape shape);
  void set_output_value(int i, Tensor value);  // also sets dtype and static shape
  const Output& output(int i) const { return outputs_[static_cast<size_t>(i)]; }
  std::vector<Output>& outputs() { return outputs_; }

  // Throws ShapeError prefixed with the node's description: ctx.fail("input 1 must be 1-D").
  [[noreturn]] void fail(const std::string& message) const;
  // Throws ShapeError unless input i has one of the given dtypes.
  void expect_dtype(int i, std::initializer_list<DType> allowed) const;

 private:
  const Input& require(int i) const;
  const Node& node_;
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
};

using InferFn = void (*)(InferenceContext&);

struct OpSchema {
  std::string domain;  // "" for ONNX, kTrainrtDomain for ours
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;  // kVariadic for no limit
  int min_outputs = 1;
  int max_outputs = 1;
  InferFn infer = nullptr;
  // (input, output) pairs whose buffers may alias: the kernel is correct when output o is written
  // over input i, element by element.
  std::vector<std::pair<int, int>> inplace;
  // Output 0 holds input 0's bytes unchanged, in another shape (Reshape, Flatten, Squeeze,
  // Unsqueeze, Identity): the plan may make it a view of input 0's memory instead of a copy.
  bool is_view = false;
  // Output 0 equals input 0 whenever their dims are equal (ReduceSumToShape to X's own shape,
  // Expand to X's dims): where a plan sees equal static dims it makes output 0 a view, as above.
  bool view_when_same_dims = false;
  // False for ops with random outputs (Dropout): never constant-folded or deduplicated.
  bool deterministic = true;
  // Output dims follow from running the op (a control-flow op's body), not from its inputs: where
  // the plan could not size an output, the session leaves it without storage and the kernel
  // allocates it (If, Loop, Scan).
  bool sizes_outputs_when_run = false;

  static constexpr int kVariadic = 1 << 20;
};

class OpRegistry {
 public:
  // Every op TrainRT knows, registered once by register_all_schemas().
  static const OpRegistry& global();

  void add(OpSchema schema);
  const OpSchema* find(const std::string& domain, const std::string& op) const;
  // Like find, but throws UnsupportedOp naming the node when the op is unknown.
  const OpSchema& require(const Node& node) const;
  std::vector<const OpSchema*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, OpSchema> schemas_;
};

// Runs the node's schema inference on the given inputs (also checks arity).
void infer_node(const OpSchema& schema, InferenceContext& ctx);

// The inputs of `node` as inference sees them from its input Values' stored dtypes, shapes and
// constant data; throws ShapeError naming the node when an input has no dtype yet.
std::vector<InferenceContext::Input> stored_inputs(const Node& node);
// Infers `node` from its inputs' stored types and stores the outputs' dtypes and shapes.
void infer_and_store(Node& node);

// Runs inference over the whole graph in topological order, storing dtypes and shapes in the
// values (values of constant-foldable nodes are the planner's job). Throws on the first bad node.
void infer_graph_shapes(Graph& graph);

}  // namespace trainrt
