// Runs one node on concrete tensors: schema inference sizes the outputs, the kernel table's kernel
// computes them. For kernel tests, constant folding and the conformance of single ops; sessions
// run whole graphs through the planned executor instead.
//
//   std::vector<Tensor> out = run_node("Add", {a, b});
//   std::vector<Tensor> sm = run_node("Softmax", {x}, {{"axis", Attribute::of_int(-1)}});
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/attribute.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

struct NodeSpec {
  std::string op;
  std::map<std::string, Attribute> attrs;
  int num_outputs = 1;
  std::string domain;   // "" for ONNX
  int opset = 23;       // ONNX opset the node is interpreted under
  uint64_t random_seed = 0;
};

// Undefined tensors in `inputs` stand for omitted optional inputs.
std::vector<Tensor> run_node(const NodeSpec& spec, const std::vector<Tensor>& inputs,
                             const KernelTable& table);
std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::map<std::string, Attribute>& attrs = {}, int num_outputs = 1);

}  // namespace trainrt
