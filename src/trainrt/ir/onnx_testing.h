// Helpers for tests that build ONNX models with our own encoder (header-only, tests only).
//
//   onnx::GraphProto g;
//   g.input.push_back(tensor_info("x", kFloat, {"batch", "3"}));
//   g.node.push_back(make_node("Relu", {"x"}, {"y"}, "relu"));
//   g.output.push_back(tensor_info("y", kFloat, {"batch", "3"}));
//   std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/ir/onnx_messages.h"
#include "trainrt/ir/printer.h"

namespace trainrt::testing {

// TensorProto.DataType codes used in tests.
inline constexpr int32_t kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7,
                         kString = 8, kBool = 9, kFloat16 = 10, kDouble = 11, kUint64 = 13, kComplex64 = 14,
                         kBfloat16 = 16, kFloat8e4m3fn = 17, kInt4 = 22;

// A tensor type from dim strings: "3" is a static dim, "?" an unknown one, anything else a symbol.
inline onnx::TypeProto tensor_type(int32_t elem_type, const std::vector<std::string>& dims) {
  onnx::TypeProto t;
  t.kind = onnx::TypeProto::Kind::kTensor;
  t.elem_type = elem_type;
  t.has_shape = true;
  for (const std::string& d : dims) {
    onnx::DimensionProto& p = t.dims.emplace_back();
    if (d == "?") continue;
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) {
      p.has_value = true;
      p.value = std::stoll(d);
    } else {
      p.param = d;
    }
  }
  return t;
}

inline onnx::ValueInfoProto tensor_info(const std::string& name, int32_t elem_type,
                                        const std::vector<std::string>& dims) {
  return {name, tensor_type(elem_type, dims)};
}

// A tensor type without a shape field: unknown rank.
inline onnx::ValueInfoProto unranked_info(const std::string& name, int32_t elem_type) {
  onnx::ValueInfoProto v{name, tensor_type(elem_type, {})};
  v.type.has_shape = false;
  return v;
}

inline onnx::NodeProto make_node(const std::string& op, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs, const std::string& name = {},
                                 std::vector<onnx::AttributeProto> attrs = {},
                                 const std::string& domain = {}) {
  onnx::NodeProto n;
  n.op_type = op;
  n.input = std::move(inputs);
  n.output = std::move(outputs);
  n.name = name;
  n.attribute = std::move(attrs);
  n.domain = domain;
  return n;
}

inline onnx::AttributeProto attr_int(const std::string& name, int64_t v) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = onnx::kAttrInt;
  a.i = v;
  return a;
}
inline onnx::AttributeProto attr_float(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = onnx::kAttrFloat;
  a.f = v;
  return a;
}
inline onnx::AttributeProto attr_string(const std::string& name, const std::string& v) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = onnx::kAttrString;
  a.s = v;
  return a;
}
inline onnx::AttributeProto attr_ints(const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = onnx::kAttrInts;
  a.ints = std::move(v);
  return a;
}
inline onnx::AttributeProto attr_graph(const std::string& name, onnx::GraphProto g) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = onnx::kAttrGraph;
  a.g = std::make_shared<onnx::GraphProto>(std::move(g));
  return a;
}

// An attribute of a function body that takes the caller's attribute `ref`.
inline onnx::AttributeProto attr_ref(const std::string& name, int32_t type, const std::string& ref) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = type;
  a.ref_attr_name = ref;
  return a;
}

// A float tensor stored in float_data (owned by the proto).
inline onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims,
                                      std::vector<float> v) {
  onnx::TensorProto t;
  t.name = name;
  t.dims = std::move(dims);
  t.data_type = kFloat;
  t.float_data = std::move(v);
  return t;
}

inline onnx::ModelProto make_model(onnx::GraphProto g, int64_t opset = 17) {
  onnx::ModelProto m;
  m.ir_version = 8;
  m.opset_import.push_back({"", opset});
  m.has_graph = true;
  m.graph = std::move(g);
  return m;
}

inline std::string encode(const onnx::ModelProto& m) { return onnx::encode_model(m).to_string(); }

// A fresh empty directory under the test temp dir.
inline std::filesystem::path make_temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("trainrt_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Same text (names, types, nodes, attributes, order) and the same bytes in every tensor.
inline void expect_same_graph(const Graph& a, const Graph& b) {
  EXPECT_EQ(print_graph(a), print_graph(b));
  std::vector<Value*> ia = a.initializers(), ib = b.initializers();
  ASSERT_EQ(ia.size(), ib.size());
  for (size_t i = 0; i < ia.size(); ++i) {
    EXPECT_EQ(ia[i]->name, ib[i]->name);
    ASSERT_EQ(describe(ia[i]->data), describe(ib[i]->data)) << ia[i]->name;
    EXPECT_EQ(std::memcmp(ia[i]->data.raw(), ib[i]->data.raw(), ia[i]->data.nbytes()), 0) << ia[i]->name;
  }
  std::vector<Node*> na = a.nodes(), nb = b.nodes();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    for (const auto& [name, attr] : na[i]->attrs()) {
      if (attr.kind != Attribute::Kind::kTensor) continue;
      const Tensor* other = nb[i]->attr_tensor(name);
      ASSERT_NE(other, nullptr);
      ASSERT_EQ(describe(attr.t), describe(*other));
      EXPECT_EQ(std::memcmp(attr.t.raw(), other->raw(), attr.t.nbytes()), 0) << na[i]->describe();
    }
  }
}

}  // namespace trainrt::testing
