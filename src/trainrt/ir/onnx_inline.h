// Inlining of ONNX model-local functions (ModelProto.functions) at import.
//
// TrainRT's IR has no function calls: a node whose (domain, op_type, overload) names a local
// function is replaced by the function's body, recursively for nested calls. The body's values get
// fresh names that no graph name uses ("<call node>/<value>"), formal inputs and outputs are bound
// to the call site's names (an omitted optional input becomes an omitted input in the body, an
// omitted output a fresh unused value), and attribute references (ref_attr_name) take the call
// site's attribute, else the function's default, else are dropped (an unset optional attribute).
//
//   std::vector<onnx::NodeProto> nodes = inline_functions(model, opsets);
//   // `nodes` has no call to a local function; `opsets` gained the functions' opset imports.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrt/ir/onnx_messages.h"

namespace trainrt {

// Returns model.graph.node with every call to a function of model.functions inlined. Opset imports
// of the functions whose domain `opsets` lacks are added to it (keys are normalized domains: ""
// for ONNX). Throws InvalidModel naming the call node and function for a malformed call or body
// and for recursive functions.
std::vector<onnx::NodeProto> inline_functions(const onnx::ModelProto& model,
                                              std::map<std::string, int>& opsets);

// "ai.onnx" and "" both name the ONNX domain; TrainRT uses "".
std::string normalize_domain(const std::string& domain);

}  // namespace trainrt
