// The IR printer: a graph as readable text, for debugging, logs and before/after pass tests.
//
// One line per node in schedule order, outputs first with their types, then the op, its inputs,
// its attributes and the node's name; graph inputs and initializers are summarized with dtype and
// shape (and the values of tiny tensors). A graph that fails verification still prints.
//
//   graph 'mlp' (opsets: ai.onnx 17)
//     input %x: f32(batch, 784)
//     initializer %w: f32(784, 10)
//     initializer %axes: i64(1) = [1]
//     %y: f32(batch, 10) = MatMul(%x, %w)  # mm1
//     %p: f32(batch, 10) = Softmax(%y) {axis=1}  # softmax
//     output %p
//
//   std::cout << print_graph(g);
#pragma once

#include <string>

#include "trainrt/ir/graph.h"

namespace trainrt {

std::string print_graph(const Graph& g);
// One node's line, without indentation: "%y: f32(2, 3) = Relu(%x)  # relu1".
std::string print_node(const Node& n);
// "f32(batch, 10)"; "?" for an unknown dtype, "(*)" for an unknown rank.
std::string print_type(const Value& v);

}  // namespace trainrt
