#include "trainrt/ir/onnx_tensor.h"

#include <gtest/gtest.h>

#include <fstream>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;
namespace fs = std::filesystem;

onnx::TensorProto proto(int32_t type, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.name = "t";
  p.data_type = type;
  p.dims = std::move(dims);
  return p;
}

template <typename T>
onnx::TensorProto raw_proto(int32_t type, std::vector<int64_t> dims, const std::vector<T>& values,
                            std::string& storage) {
  onnx::TensorProto p = proto(type, std::move(dims));
  storage.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  p.has_raw_data = true;
  p.raw_data = storage;
  return p;
}

std::string error_of(const onnx::TensorProto& p, const fs::path& dir = {}) {
  try {
    tensor_from_onnx(p, dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(OnnxTensor, RawDataEveryDType) {
  std::string s;
  expect_close(tensor_from_onnx(raw_proto<float>(kFloat, {2}, {1.5f, -2}, s), {}),
               make_tensor<float>({2}, {1.5f, -2}));
  expect_close(tensor_from_onnx(raw_proto<double>(kDouble, {1}, {0.1}, s), {}),
               make_tensor<double>({1}, {0.1}));
  expect_close(tensor_from_onnx(raw_proto<int64_t>(kInt64, {2}, {-1, 1ll << 40}, s), {}),
               make_tensor<int64_t>({2}, {-1, 1ll << 40}));
  expect_close(tensor_from_onnx(raw_proto<int32_t>(kInt32, {1}, {-7}, s), {}),
               make_tensor<int32_t>({1}, {-7}));
  expect_close(tensor_from_onnx(raw_proto<int8_t>(kInt8, {2}, {-128, 127}, s), {}),
               make_tensor<int8_t>({2}, {-128, 127}));
  expect_close(tensor_from_onnx(raw_proto<uint8_t>(kUint8, {1}, {255}, s), {}),
               make_tensor<uint8_t>({1}, {255}));
  Tensor h = tensor_from_onnx(raw_proto<uint16_t>(kFloat16, {1}, {0x3c00}, s), {});  // 1.0
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.to_double(0), 1.0);
  Tensor b = tensor_from_onnx(raw_proto<uint16_t>(kBfloat16, {1}, {0xc000}, s), {});  // -2.0
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.to_double(0), -2.0);
  // Any non-zero byte is true; stored as 0/1 so reading a C++ bool is defined.
  Tensor flags = tensor_from_onnx(raw_proto<uint8_t>(kBool, {3}, {0, 1, 7}, s), {});
  EXPECT_EQ(flags.dtype(), DType::kBool);
  EXPECT_EQ(static_cast<const uint8_t*>(flags.raw())[2], 1);
}

TEST(OnnxTensor, TypedFields) {
  onnx::TensorProto f = proto(kFloat, {2, 1});
  f.float_data = {1, 2};
  expect_close(tensor_from_onnx(f, {}), make_tensor<float>({2, 1}, {1, 2}));
  onnx::TensorProto i64 = proto(kInt64, {3});
  i64.int64_data = {1, -2, 3};
  expect_close(tensor_from_onnx(i64, {}), make_tensor<int64_t>({3}, {1, -2, 3}));
  onnx::TensorProto d = proto(kDouble, {});
  d.double_data = {2.5};
  expect_close(tensor_from_onnx(d, {}), Tensor::scalar<double>(2.5));
  // int32_data carries int32, int8, uint8, bool values and f16 / bf16 bit patterns.
  onnx::TensorProto i32 = proto(kInt32, {2});
  i32.int32_data = {-5, 6};
  expect_close(tensor_from_onnx(i32, {}), make_tensor<int32_t>({2}, {-5, 6}));
  onnx::TensorProto i8 = proto(kInt8, {2});
  i8.int32_data = {-5, 6};
  expect_close(tensor_from_onnx(i8, {}), make_tensor<int8_t>({2}, {-5, 6}));
  onnx::TensorProto u8 = proto(kUint8, {1});
  u8.int32_data = {200};
  expect_close(tensor_from_onnx(u8, {}), make_tensor<uint8_t>({1}, {200}));
  onnx::TensorProto bo = proto(kBool, {2});
  bo.int32_data = {0, 1};
  expect_close(tensor_from_onnx(bo, {}), make_tensor<bool>({2}, {false, true}));
  onnx::TensorProto h = proto(kFloat16, {1});
  h.int32_data = {0x4000};  // 2.0
  EXPECT_EQ(tensor_from_onnx(h, {}).to_double(0), 2.0);
  onnx::TensorProto bf = proto(kBfloat16, {1});
  bf.int32_data = {0x3f80};  // 1.0
  EXPECT_EQ(tensor_from_onnx(bf, {}).to_double(0), 1.0);
  // No data is fine only for an empty tensor.
  EXPECT_EQ(tensor_from_onnx(proto(kFloat, {0, 3}), {}).numel(), 0);
}

TEST(OnnxTensor, SizeAndFieldErrors) {
  std::string s;
  EXPECT_NE(error_of(raw_proto<float>(kFloat, {3}, {1, 2}, s))
                .find("raw_data has 8 bytes, expected 12 for FLOAT(3)"),
            std::string::npos);
  onnx::TensorProto f = proto(kFloat, {3});
  f.float_data = {1};
  EXPECT_NE(error_of(f).find("float_data has 1 values, expected 3"), std::string::npos);
  onnx::TensorProto wrong = proto(kInt64, {1});
  wrong.float_data = {1};
  EXPECT_NE(error_of(wrong).find("float_data cannot hold the data of a INT64 tensor"), std::string::npos);
  onnx::TensorProto both = proto(kFloat, {1});
  both.float_data = {1};
  both.int32_data = {1};
  EXPECT_NE(error_of(both).find("more than one"), std::string::npos);
  onnx::TensorProto empty = proto(kFloat, {2});
  EXPECT_NE(error_of(empty).find("has no data"), std::string::npos);
  onnx::TensorProto neg = proto(kFloat, {-1});
  EXPECT_NE(error_of(neg).find("negative dimension"), std::string::npos);
  onnx::TensorProto huge = proto(kFloat, {1ll << 40, 1ll << 40});
  EXPECT_NE(error_of(huge).find("too large"), std::string::npos);
  onnx::TensorProto big = proto(kFloat, {1ll << 40});  // 4 TiB declared, nothing stored: no allocation
  EXPECT_NE(error_of(big).find("has no data"), std::string::npos);
  onnx::TensorProto seg = proto(kFloat, {1});
  seg.has_segment = true;
  EXPECT_THROW(tensor_from_onnx(seg, {}), UnsupportedOp);
  onnx::TensorProto loc = proto(kFloat, {1});
  loc.data_location = 5;
  EXPECT_NE(error_of(loc).find("unknown data_location 5"), std::string::npos);
}

TEST(OnnxTensor, ToOnnxViewsTheBytes) {
  Tensor t = make_tensor<float>({2}, {1, 2});
  onnx::TensorProto p = tensor_to_onnx(t, "w");
  EXPECT_EQ(p.name, "w");
  EXPECT_EQ(p.data_type, kFloat);
  EXPECT_EQ(p.raw_data.data(), t.raw());
  expect_close(tensor_from_onnx(onnx::decode_tensor(onnx::encode_tensor(p).to_string()), {}), t);
}

// ---- external data ----

onnx::TensorProto external_proto(const std::string& location, int64_t offset, int64_t length) {
  onnx::TensorProto p = proto(kFloat, {2});
  p.data_location = onnx::kLocationExternal;
  p.external_data.push_back({"location", location});
  if (offset >= 0) p.external_data.push_back({"offset", std::to_string(offset)});
  if (length >= 0) p.external_data.push_back({"length", std::to_string(length)});
  return p;
}

class OnnxExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("external");
    fs::create_directories(dir_ / "model" / "sub");
    std::vector<float> values = {0, 0, 1.5f, 2.5f};  // the tensor sits at offset 8
    std::ofstream(dir_ / "model" / "sub" / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()), 16);
    std::ofstream(dir_ / "outside.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()), 16);
  }
  fs::path model_dir() const { return dir_ / "model"; }
  fs::path dir_;
};

TEST_F(OnnxExternalData, ReadsOffsetAndLength) {
  expect_close(tensor_from_onnx(external_proto("sub/w.bin", 8, 8), model_dir()),
               make_tensor<float>({2}, {1.5f, 2.5f}));
  expect_close(tensor_from_onnx(external_proto("sub/./w.bin", 8, -1), model_dir()),
               make_tensor<float>({2}, {1.5f, 2.5f}));
  expect_close(tensor_from_onnx(external_proto("sub/w.bin", -1, -1), model_dir()),
               make_tensor<float>({2}, {0, 0}));
}

TEST_F(OnnxExternalData, RefusesBadPathsAndRanges) {
  fs::path d = model_dir();
  EXPECT_NE(error_of(external_proto("../outside.bin", 0, 8), d).find("leaves the model's directory"),
            std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/../../outside.bin", 0, 8), d).find("leaves"), std::string::npos);
  EXPECT_NE(error_of(external_proto((dir_ / "outside.bin").string(), 0, 8), d).find("is absolute"),
            std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/w.bin", 12, 8), d).find("runs past the end"), std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/w.bin", 100, -1), d).find("runs past the end"), std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/w.bin", 0, 4), d).find("length 4 does not match the 8 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/w.bin", 0, 0), d).find("does not match"), std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/none.bin", 0, 8), d).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of(external_proto("sub", 0, 8), d).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of(external_proto("", 0, 8), d).find("no location"), std::string::npos);
  onnx::TensorProto bad_offset = external_proto("sub/w.bin", -1, -1);
  bad_offset.external_data.push_back({"offset", "12abc"});
  EXPECT_NE(error_of(bad_offset, d).find("offset '12abc' is not a non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(external_proto("sub/w.bin", 0, 8), {}).find("without a directory"), std::string::npos);
  // A link inside the directory that points outside it is refused too.
  fs::create_symlink(dir_ / "outside.bin", d / "link.bin");
  EXPECT_NE(error_of(external_proto("link.bin", 0, 8), d).find("through a link"), std::string::npos);
}

TEST_F(OnnxExternalData, ModelFileFindsDataBesideIt) {
  onnx::GraphProto g;
  g.initializer.push_back(external_proto("sub/w.bin", 8, 8));
  g.initializer.back().name = "w";
  g.input.push_back(tensor_info("x", kFloat, {"2"}));
  g.node.push_back(make_node("Add", {"x", "w"}, {"y"}, "add"));
  g.output.push_back(tensor_info("y", kFloat, {"2"}));
  std::string path = (model_dir() / "m.onnx").string();
  std::ofstream(path, std::ios::binary) << encode(make_model(g));
  std::unique_ptr<Graph> graph = import_onnx(path);
  expect_close(graph->find_value("w")->data, make_tensor<float>({2}, {1.5f, 2.5f}));
  try {
    import_onnx_bytes(encode(make_model(g)));
    FAIL() << "no error";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("initializer 'w'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
