#include "trainrt/ir/onnx_tensor.h"

#include <charconv>
#include <cstring>
#include <fstream>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

namespace fs = std::filesystem;

namespace {

// Largest tensor we accept: keeps numel * element size far from overflowing size_t.
constexpr int64_t kMaxBytes = int64_t{1} << 48;

// Element count of `dims`, checked: no negative dims, no overflow past kMaxBytes.
int64_t checked_numel(const std::vector<int64_t>& dims, DType dtype) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw InvalidModel(fmt("negative dimension in dims ", to_string(dims)));
    if (d != 0 && n > kMaxBytes / d) throw InvalidModel(fmt("dims ", to_string(dims), " are too large"));
    n *= d;
  }
  if (n > kMaxBytes / static_cast<int64_t>(dtype_size(dtype)))
    throw InvalidModel(fmt("dims ", to_string(dims), " are too large"));
  return n;
}

std::string describe_proto(const onnx::TensorProto& p) {
  return fmt(onnx_dtype_name(p.data_type), to_string(p.dims));
}

// A bool byte other than 0 or 1 is undefined behaviour once read as a C++ bool.
void normalize_bools(Tensor& t) {
  if (t.dtype() != DType::kBool) return;
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
}

// Parses a non-negative decimal integer from an external_data value.
int64_t parse_offset(const std::string& key, const std::string& text) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    throw InvalidModel(fmt("external data ", key, " '", text, "' is not a non-negative integer"));
  return v;
}

// The file a location names, refusing anything outside `dir` (absolute paths, "..", symlinks).
fs::path resolve_location(const std::string& location, const fs::path& dir) {
  fs::path rel(location);
  if (location.empty()) throw InvalidModel("external data has no location");
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    throw InvalidModel(fmt("external data location '", location,
                           "' is absolute; it must be relative to the model's directory"));
  fs::path normal = rel.lexically_normal();
  if (normal.empty() || *normal.begin() == "..")
    throw InvalidModel(fmt("external data location '", location, "' leaves the model's directory"));
  std::error_code ec;
  fs::path root = fs::weakly_canonical(dir, ec);
  fs::path full = ec ? fs::path() : fs::weakly_canonical(dir / normal, ec);
  if (ec) throw InvalidModel(fmt("external data location '", location, "': ", ec.message()));
  auto mismatch = std::mismatch(root.begin(), root.end(), full.begin(), full.end());
  if (mismatch.first != root.end())
    throw InvalidModel(
        fmt("external data location '", location, "' leaves the model's directory (through a link)"));
  return full;
}

// Reads external data; sizes are checked before anything is allocated.
Tensor read_external(const onnx::TensorProto& p, DType dtype, int64_t numel, const fs::path& dir) {
  if (dir.empty())
    throw InvalidModel(
        "the tensor's data is external, but the model was given as bytes without a directory for its data "
        "files");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : p.external_data) {
    if (e.key == "location")
      location = e.value;
    else if (e.key == "offset")
      offset = parse_offset(e.key, e.value);
    else if (e.key == "length")
      length = parse_offset(e.key, e.value);
  }
  fs::path file = resolve_location(location, dir);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw InvalidModel(fmt("external data file '", location, "' does not exist or is not a regular file"));
  auto file_size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec) throw InvalidModel(fmt("external data file '", location, "': ", ec.message()));
  int64_t nbytes = numel * static_cast<int64_t>(dtype_size(dtype));
  if (length >= 0 && length != nbytes)
    throw InvalidModel(fmt("external data length ", length, " does not match the ", nbytes, " bytes of ",
                           describe_proto(p)));
  if (offset > file_size || file_size - offset < nbytes)
    throw InvalidModel(fmt("external data range [", offset, ", ", offset + nbytes, ") runs past the end of '",
                           location, "' (", file_size, " bytes)"));
  Tensor t = Tensor::empty(dtype, p.dims);
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset);
  if (nbytes) in.read(static_cast<char*>(t.raw()), nbytes);
  if (!in)
    throw InvalidModel(fmt("could not read ", nbytes, " bytes at offset ", offset, " of '", location, "'"));
  normalize_bools(t);
  return t;
}

void check_count(size_t count, int64_t numel, const char* field, const onnx::TensorProto& p) {
  if (count != static_cast<size_t>(numel))
    throw InvalidModel(fmt(field, " has ", count, " values, expected ", numel, " for ", describe_proto(p)));
}

// int32_data holds one element per entry: the value for integers and bool, the bit pattern for
// f16 and bf16 (onnx.proto, TensorProto.int32_data).
void read_int32_data(Tensor& t, const std::vector<int32_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::kI32: t.data<int32_t>()[i] = v[i]; break;
      case DType::kI8: t.data<int8_t>()[i] = static_cast<int8_t>(v[i]); break;
      case DType::kU8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]); break;
      case DType::kBool: t.data<bool>()[i] = v[i] != 0; break;
      case DType::kF16:
      case DType::kBF16: t.data<uint16_t>()[i] = static_cast<uint16_t>(v[i]); break;
      default: throw InternalError("read_int32_data: unexpected dtype");
    }
  }
}

bool int32_data_allowed(DType d) {
  return d == DType::kI32 || d == DType::kI8 || d == DType::kU8 || d == DType::kBool || d == DType::kF16 ||
         d == DType::kBF16;
}

// Copies the one typed field that holds the data; throws when none or a wrong one is set.
// Counts are checked before anything is allocated.
Tensor read_typed_fields(const onnx::TensorProto& p, DType dtype, int64_t numel) {
  int present =
      !p.float_data.empty() + !p.int32_data.empty() + !p.int64_data.empty() + !p.double_data.empty();
  if (present > 1)
    throw InvalidModel(fmt("more than one of the *_data fields is set for ", describe_proto(p)));
  auto check = [&](const char* field, size_t count, bool allowed) {
    if (!allowed)
      throw InvalidModel(fmt(field, " cannot hold the data of a ", onnx_dtype_name(p.data_type), " tensor"));
    check_count(count, numel, field, p);
    return Tensor::empty(dtype, p.dims);
  };
  if (!p.float_data.empty()) {
    Tensor t = check("float_data", p.float_data.size(), dtype == DType::kF32);
    std::memcpy(t.raw(), p.float_data.data(), t.nbytes());
    return t;
  }
  if (!p.int32_data.empty()) {
    Tensor t = check("int32_data", p.int32_data.size(), int32_data_allowed(dtype));
    read_int32_data(t, p.int32_data);
    return t;
  }
  if (!p.int64_data.empty()) {
    Tensor t = check("int64_data", p.int64_data.size(), dtype == DType::kI64);
    std::memcpy(t.raw(), p.int64_data.data(), t.nbytes());
    return t;
  }
  if (!p.double_data.empty()) {
    Tensor t = check("double_data", p.double_data.size(), dtype == DType::kF64);
    std::memcpy(t.raw(), p.double_data.data(), t.nbytes());
    return t;
  }
  if (numel != 0) throw InvalidModel(fmt(describe_proto(p), " has no data"));
  return Tensor::empty(dtype, p.dims);
}

}  // namespace

Tensor tensor_from_onnx(const onnx::TensorProto& p, const fs::path& external_data_dir) {
  if (p.has_segment) throw UnsupportedOp("tensors stored in segments are not supported");
  DType dtype = dtype_from_onnx(p.data_type);
  int64_t numel = checked_numel(p.dims, dtype);
  if (p.data_location == onnx::kLocationExternal) return read_external(p, dtype, numel, external_data_dir);
  if (p.data_location != 0) throw InvalidModel(fmt("unknown data_location ", p.data_location));
  if (!p.has_raw_data) return read_typed_fields(p, dtype, numel);
  bool typed =
      !p.float_data.empty() || !p.int32_data.empty() || !p.int64_data.empty() || !p.double_data.empty();
  if (typed) throw InvalidModel(fmt("both raw_data and a *_data field are set for ", describe_proto(p)));
  size_t nbytes = static_cast<size_t>(numel) * dtype_size(dtype);
  if (p.raw_data.size() != nbytes)
    throw InvalidModel(
        fmt("raw_data has ", p.raw_data.size(), " bytes, expected ", nbytes, " for ", describe_proto(p)));
  Tensor t = Tensor::empty(dtype, p.dims);
  if (nbytes) std::memcpy(t.raw(), p.raw_data.data(), nbytes);
  normalize_bools(t);
  return t;
}

onnx::TensorProto tensor_to_onnx(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.name = name;
  p.dims = t.dims();
  p.data_type = dtype_to_onnx(t.dtype());
  p.has_raw_data = true;
  p.raw_data = std::string_view(static_cast<const char*>(t.raw()), t.nbytes());
  return p;
}

}  // namespace trainrt
