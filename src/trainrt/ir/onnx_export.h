// ONNX export: a TrainRT Graph becomes a ModelProto that onnx.checker accepts.
//
// Use it to save a captured or trained graph for debugging, caching or inference in any ONNX
// runtime. The model gets the graph's opset imports (a custom domain a node uses but the graph does
// not import gets version 1) and the lowest IR version those opsets allow; inputs, outputs and
// typed intermediate values carry their types, symbolic dims as dim_param; nodes are written in
// schedule order; tensors as little-endian raw_data, or, past a size threshold, in a side file
// (external data) next to the model.
//
//   export_onnx(g, "out/model.onnx");                               // everything inline
//   OnnxExportOptions options;
//   options.external_data_threshold = 1024;                         // + out/model.onnx.data
//   export_onnx(g, "out/model.onnx", options);
//   std::string bytes = export_onnx_bytes(g);
//
// Throws InvalidModel when the graph cannot be written as ONNX (ONNX-domain nodes but no ONNX
// opset import, a graph that fails verify(), a graph input without dtype, a file that cannot be
// written, a model over protobuf's 2 GiB limit) and UnsupportedOp for graph attributes.
#pragma once

#include <cstddef>
#include <string>

#include "trainrt/ir/graph.h"

namespace trainrt {

struct OnnxExportOptions {
  // Initializers of at least this many bytes go to the side file; 0 keeps every tensor inline.
  size_t external_data_threshold = 0;
  // The side file's name, in the model's directory; empty means "<model file name>.data".
  std::string external_data_file;
};

void export_onnx(const Graph& g, const std::string& path, const OnnxExportOptions& options = {});
std::string export_onnx_bytes(const Graph& g);

}  // namespace trainrt
