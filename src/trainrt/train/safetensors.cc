#include "trainrt/train/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

DType dtype_of_name(const std::string& file, const std::string& tensor, const std::string& name) {
  static const std::map<std::string, DType> kTypes = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I8", DType::kI8},     {"U8", DType::kU8},
      {"BOOL", DType::kBool}};
  auto it = kTypes.find(name);
  if (it == kTypes.end())
    throw UnsupportedOp(fmt(file, ": tensor '", tensor, "' has element type ", name, ", which TrainRT does not support"));
  return it->second;
}

}  // namespace

std::map<std::string, Tensor> read_safetensors(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidModel(fmt("cannot open data file '", file, "'"));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw InvalidModel(fmt(file, ": too short for a safetensors file"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) throw InvalidModel(fmt(file, ": header length ", header_len, " exceeds the file"));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidModel(fmt(file, ": malformed JSON header: ", e.what()));
  }
  if (!header.is_object()) throw InvalidModel(fmt(file, ": the header is not a JSON object"));
  const size_t data_start = 8 + header_len;
  const size_t data_size = bytes.size() - data_start;
  auto storage = aligned_storage(data_size);
  std::memcpy(storage.get(), bytes.data() + data_start, data_size);
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      DType t = dtype_of_name(file, name, entry.at("dtype").get<std::string>());
      std::vector<int64_t> dims = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        throw InvalidModel(fmt(file, ": tensor '", name, "' has data offsets outside the file"));
      Tensor view = Tensor::view(t, dims, static_cast<std::byte*>(storage.get()) + offsets[0], storage);
      if (view.nbytes() != offsets[1] - offsets[0])
        throw InvalidModel(fmt(file, ": tensor '", name, "' is ", describe(view), " but has ",
                               offsets[1] - offsets[0], " bytes of data"));
      out[name] = view;
    } catch (const nlohmann::json::exception& e) {
      throw InvalidModel(fmt(file, ": tensor '", name, "': malformed entry: ", e.what()));
    }
  }
  return out;
}

}  // namespace trainrt
