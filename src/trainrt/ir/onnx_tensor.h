// Converting between ONNX TensorProto and Tensor: every storage form on import, raw_data on export.
//
// Import reads raw_data (little-endian), the typed fields (float_data, int32_data, which also carries
// f16/bf16 bit patterns, int8/uint8 and bool, int64_data, double_data) and external data files.
// External data paths are relative to the model file's directory; a path that leaves that
// directory, or a range past the file's end, is refused.
//
//   Tensor w = tensor_from_onnx(proto, "/models/resnet");   // owned copy of the data
//   onnx::TensorProto p = tensor_to_onnx(w, "w");            // views w's bytes
#pragma once

#include <filesystem>
#include <string>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/onnx_messages.h"

namespace trainrt {

// Decodes the tensor's data into owned storage. `external_data_dir` is the directory external data
// is relative to; empty refuses external data. Throws InvalidModel (sizes, fields, paths) or
// UnsupportedOp (element type); the caller puts the tensor's role ("initializer 'w'") in front.
Tensor tensor_from_onnx(const onnx::TensorProto& proto, const std::filesystem::path& external_data_dir);

// A TensorProto whose raw_data views `t`'s bytes: `t` must outlive it.
onnx::TensorProto tensor_to_onnx(const Tensor& t, const std::string& name);

}  // namespace trainrt
