// The ONNX protobuf messages TrainRT reads and writes, as plain structs, with their wire codec.
//
// The structs mirror onnx.proto (same message and field names, field numbers in onnx_messages.cc),
// keeping only the fields import and export use. Decoding checks the wire format only; the meaning
// (types, names, data sizes) is checked where the Graph is built (onnx_import.cc). Fields that are
// not modelled are skipped, except kinds the importer must refuse by name (graph attributes,
// sparse initializers, ...), which are recorded.
//
// Tensor bytes are never copied here: a decoded TensorProto's raw_data views the input bytes, and
// one to encode views the caller's memory. Keep those bytes alive while the message is used.
//
//   onnx::ModelProto m = onnx::decode_model(bytes);        // throws InvalidModel on bad bytes
//   for (const onnx::NodeProto& n : m.graph.node) ...
//   WireWriter w = onnx::encode_model(m);
//   std::string out = w.to_string();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/ir/proto_wire.h"

namespace trainrt::onnx {

// TensorProto.DataLocation
inline constexpr int32_t kLocationExternal = 1;

// AttributeProto.AttributeType codes.
enum AttributeType : int32_t {
  kAttrUndefined = 0,
  kAttrFloat = 1,
  kAttrInt = 2,
  kAttrString = 3,
  kAttrTensor = 4,
  kAttrGraph = 5,
  kAttrFloats = 6,
  kAttrInts = 7,
  kAttrStrings = 8,
  kAttrTensors = 9,
  kAttrGraphs = 10,
  kAttrSparseTensor = 11,
  kAttrSparseTensors = 12,
  kAttrTypeProto = 13,
  kAttrTypeProtos = 14,
};

struct StringStringEntryProto {
  std::string key, value;
};

struct OperatorSetIdProto {
  std::string domain;
  int64_t version = 0;
};

struct TensorProto {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = 0;
  bool has_segment = false;  // a chunk of a larger tensor (not supported)
  bool has_raw_data = false;
  std::string_view raw_data;
  std::vector<float> float_data;
  std::vector<int32_t> int32_data;
  std::vector<int64_t> int64_data;
  std::vector<double> double_data;
  int32_t data_location = 0;
  std::vector<StringStringEntryProto> external_data;
};

// TensorShapeProto.Dimension: a value, a symbol (dim_param) or neither (unknown).
struct DimensionProto {
  bool has_value = false;
  int64_t value = 0;
  std::string param;
};

struct TypeProto {
  // Which member of TypeProto's `value` oneof is set. Only tensors are modelled.
  enum class Kind { kNone, kTensor, kSequence, kMap, kOptional, kSparseTensor, kOpaque };
  Kind kind = Kind::kNone;
  int32_t elem_type = 0;
  bool has_shape = false;
  std::vector<DimensionProto> dims;
};

struct ValueInfoProto {
  std::string name;
  TypeProto type;
};

struct GraphProto;

struct AttributeProto {
  std::string name;
  std::string ref_attr_name;      // set in a function body: take the value of the caller's attribute
  int32_t type = kAttrUndefined;  // from the `type` field, or from the value field seen
  float f = 0;
  int64_t i = 0;
  std::string s;
  TensorProto t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<GraphProto> g;  // kAttrGraph (a body: FusedElementwise's, If's branches)
};

struct NodeProto {
  std::vector<std::string> input, output;
  std::string name, op_type, domain, overload;
  std::vector<AttributeProto> attribute;
};

struct GraphProto {
  std::string name, doc_string;
  std::vector<NodeProto> node;
  std::vector<TensorProto> initializer;
  int sparse_initializer_count = 0;  // sparse initializers are not supported
  std::vector<ValueInfoProto> input, output, value_info;
};

struct FunctionProto {
  std::string name, domain, overload;
  std::vector<std::string> input, output;
  std::vector<std::string> attribute;           // attribute names without a default
  std::vector<AttributeProto> attribute_proto;  // attributes with a default value
  std::vector<NodeProto> node;
  std::vector<OperatorSetIdProto> opset_import;
  std::vector<ValueInfoProto> value_info;
};

struct ModelProto {
  int64_t ir_version = 0;
  std::vector<OperatorSetIdProto> opset_import;
  std::string producer_name;
  bool has_graph = false;
  GraphProto graph;
  std::vector<FunctionProto> functions;
};

// Throws InvalidModel naming the byte offset and the message path ("graph: node #3 'mm' (MatMul):
// attribute 'perm': ...") when the bytes are not a well-formed ModelProto.
ModelProto decode_model(std::string_view bytes);
WireWriter encode_model(const ModelProto& model);

// Single messages, for tests and for encoding tensors on their own.
TensorProto decode_tensor(std::string_view bytes);
WireWriter encode_tensor(const TensorProto& tensor);

// Runs fn(); an InvalidModel or UnsupportedOp from it is rethrown, same type, with context() and
// ": " in front. context is only called on failure, so building it costs nothing otherwise.
template <typename Context, typename Fn>
decltype(auto) with_context(Context&& context, Fn&& fn) {
  try {
    return fn();
  } catch (const InvalidModel& e) {
    throw InvalidModel(fmt(context(), ": ", e.what()));
  } catch (const UnsupportedOp& e) {
    throw UnsupportedOp(fmt(context(), ": ", e.what()));
  }
}

}  // namespace trainrt::onnx
