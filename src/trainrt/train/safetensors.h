// Reads tensors from a .safetensors file (the Hugging Face format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw little-endian data).
// The JSON is parsed with nlohmann/json; data is checked against the file size before use.
//
//   std::map<std::string, Tensor> data = read_safetensors("digits.safetensors");
//   const Tensor& x = data.at("x");   // f32 (1797, 64)
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "trainrt/core/tensor.h"

namespace trainrt {

// Throws InvalidModel naming the file (and tensor) when the file is malformed, and UnsupportedOp
// for element types TrainRT has no dtype for.
std::map<std::string, Tensor> read_safetensors(const std::filesystem::path& path);

}  // namespace trainrt
