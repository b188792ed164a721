// ONNX import: a ModelProto (file or bytes) becomes a verified TrainRT Graph.
//
// Use it to train or inspect an ONNX model from C++. Model-local functions are inlined, opset
// imports go to Graph::set_opset, graph inputs keep their declared types (dim_value -> static Dim,
// dim_param -> symbolic Dim, neither -> unknown Dim, no shape -> unknown rank), initializers become
// values with data (an initializer that is also a graph input stays an input, with default data),
// Constant nodes stay nodes. The result passes verify() (ir/verifier.h).
//
// Bad input never crashes: malformed bytes, undefined or twice-produced names and wrong tensor
// sizes throw InvalidModel; element types, subgraphs and value kinds TrainRT does not run throw
// UnsupportedOp. Messages name the file, the node (name and op), the value and what was wrong.
//
//   std::unique_ptr<Graph> g = import_onnx("model.onnx");
//   std::unique_ptr<Graph> h = import_onnx_bytes(bytes);          // no external data
//   std::unique_ptr<Graph> k = import_onnx_bytes(bytes, "/models");  // external data in /models
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "trainrt/ir/graph.h"

namespace trainrt {

// Reads a model file; external data is found relative to the file's directory.
std::unique_ptr<Graph> import_onnx(const std::string& path);

// Imports serialized ModelProto bytes. External data locations are relative to
// `external_data_dir`; when it is empty, a model with external data is refused.
std::unique_ptr<Graph> import_onnx_bytes(std::string_view bytes, const std::string& external_data_dir = {});

}  // namespace trainrt
