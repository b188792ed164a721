// The TrainRT IR: a Graph of Nodes connected by Values, with ONNX op semantics.
//
// A Graph owns its Nodes and Values. A Value is produced by at most one node output (or is a graph
// input or an initializer) and consumed by any number of node inputs. Nodes are kept in insertion
// order; topological_order() gives a valid schedule whatever the insertion order was.
// An initializer is a Value with constant data (`Value::data`); a graph input may also have data
// (an ONNX input with a default initializer).
//
//   Graph g;
//   Value* x = g.add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), 784}});
//   Value* w = g.add_initializer("w", Tensor::zeros(DType::kF32, {784, 10}));
//   Node* mm = g.add_node("MatMul", {x, w}, {"logits"});
//   g.add_output(mm->output(0));
#pragma once

#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/core/dtype.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/tensor.h"
#include "trainrt/ir/attribute.h"

namespace trainrt {

class Graph;
class Node;

inline constexpr std::string_view kOnnxDomain = "";
inline constexpr std::string_view kTrainrtDomain = "com.trainrt";

struct Use {
  Node* node;
  int input_index;
};

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape = Shape::unknown_rank();
  // The shape the file declared for a node output (value_info: capture writes export's symbolic
  // dims there, "batch*s53" for the flattened tokens). Inference never writes it: it keeps the
  // dims inference loses after a Reshape to a computed shape, for the passes that follow a dim
  // through the model (passes/padding_elimination.h). Unknown rank when nothing was declared.
  Shape declared = Shape::unknown_rank();
  Node* producer = nullptr;  // null for graph inputs and initializers
  int producer_output = 0;
  std::vector<Use> uses;
  Tensor data;  // defined for initializers (constant data)

  bool is_initializer() const { return data.defined(); }
};

class Node {
 public:
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  Graph& graph() const { return *graph_; }

  // Inputs may be null where an optional input is omitted (ONNX empty name).
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  Value* input(int i) const { return i < num_inputs() ? inputs_[i] : nullptr; }
  Value* output(int i) const { return i < num_outputs() ? outputs_[i] : nullptr; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  void replace_input(int i, Value* v);

  const std::map<std::string, Attribute>& attrs() const { return attrs_; }
  void set_attr(const std::string& name, Attribute a) { attrs_[name] = std::move(a); }
  const Attribute* attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return attr(name) != nullptr; }
  // Typed getters; a present attribute of the wrong kind throws InvalidModel naming the node.
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& fallback) const;
  std::vector<float> attr_floats(const std::string& name, const std::vector<float>& fallback) const;
  const Tensor* attr_tensor(const std::string& name) const;

  // "node 'mm1' (MatMul)": the prefix of every error about this node.
  std::string describe() const;
  // The opset version the graph imports for this node's domain.
  int opset() const;

 private:
  friend class Graph;
  Graph* graph_ = nullptr;
  std::string op_type_, domain_, name_;
  std::vector<Value*> inputs_, outputs_;
  std::map<std::string, Attribute> attrs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_input(const std::string& name, DType dtype, Shape shape);
  Value* add_initializer(const std::string& name, Tensor data);
  void add_output(Value* v) { outputs_.push_back(v); }
  // Creates a value with no producer yet (used while building or importing).
  Value* add_value(const std::string& name);
  // Adds a node. Outputs are new values with the given names (a name already taken throws
  // InvalidModel). Null inputs stand for omitted optional inputs.
  Node* add_node(const std::string& op_type, const std::vector<Value*>& inputs,
                 const std::vector<std::string>& output_names, std::string_view domain = kOnnxDomain,
                 std::string node_name = {});
  // Adds a node whose outputs are existing producer-less values.
  Node* add_node_with_outputs(const std::string& op_type, const std::vector<Value*>& inputs,
                              const std::vector<Value*>& outputs, std::string_view domain = kOnnxDomain,
                              std::string node_name = {});
  void remove_node(Node* n);  // detaches it from its inputs; its outputs lose their producer
  // Moves `n` just before `anchor` in insertion order, which topological_order() keeps where it
  // can: a node added late (a recompute) then runs where it is needed, not at the end.
  void move_before(const Node* n, const Node* anchor);

  Value* find_value(const std::string& name) const;
  // Gives a value a new, unused name (throws InvalidModel when the name is taken).
  void rename_value(Value* v, const std::string& name);
  std::string unique_name(const std::string& base) const;  // "base", "base_1", ...

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_inputs() { return inputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  std::vector<Value*> initializers() const;  // values with data, in creation order
  std::vector<Node*> nodes() const;          // insertion order
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // A schedule where every node comes after the producers of its inputs; throws InvalidModel
  // naming a node on the cycle when there is one.
  std::vector<Node*> topological_order() const;

  // Opset imports: domain -> version ("" is the ONNX domain).
  const std::map<std::string, int>& opsets() const { return opsets_; }
  void set_opset(const std::string& domain, int version) { opsets_[domain] = version; }
  int opset(const std::string& domain) const;

  std::string name;
  std::string doc;

 private:
  std::string unique_node_name(const std::string& op_type);
  int next_node_id_ = 0;
  std::multiset<std::string> node_names_;  // generated names avoid every name ever given
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_, outputs_;
  std::map<std::string, int> opsets_;
};

}  // namespace trainrt
