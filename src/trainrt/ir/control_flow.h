// Control-flow ops (ONNX If, Loop, Scan): how their bodies read values of the enclosing graph.
//
// ONNX lets a body read any value of the graphs around it by name (outer scope). TrainRT makes each
// such read an edge: the import appends the values to the node's inputs and the matching inputs to
// every body, after the formal ones, and records how many in the node's `implicit_inputs`
// attribute. The export writes them back as outer-scope reads. In between, liveness, passes,
// autodiff and the kernel see ordinary inputs.
//
//   If(cond, x, w) implicit_inputs=2     then_branch(x, w) -> Add(x, w)     else_branch(x, w) -> x
#pragma once

#include <cstddef>
#include <string_view>

#include "trainrt/ir/graph.h"

namespace trainrt {

inline constexpr std::string_view kImplicitInputsAttr = "implicit_inputs";

// How many of the node's last inputs are values its bodies read from the enclosing graph.
inline size_t implicit_inputs(const Node& n) {
  return static_cast<size_t>(n.attr_int(std::string(kImplicitInputsAttr), 0));
}

}  // namespace trainrt
