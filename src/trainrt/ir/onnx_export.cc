#include "trainrt/ir/onnx_export.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <unordered_set>

#include "trainrt/core/error.h"
#include "trainrt/ir/control_flow.h"
#include "trainrt/ir/onnx_messages.h"
#include "trainrt/ir/onnx_tensor.h"
#include "trainrt/ir/verifier.h"

namespace trainrt {

namespace fs = std::filesystem;

namespace {

// Protobuf refuses messages of 2 GiB or more; larger models need external data.
constexpr size_t kMaxModelBytes = 0x7fffffff;
// onnx.proto: external data offsets SHOULD be multiples of the page size, so runtimes can mmap.
constexpr uint64_t kExternalAlignment = 4096;

// The lowest IR version that allows opset `version` of `domain`: the IR version of the onnx release
// that introduced it (onnx.helper.VERSION_TABLE, OP_SET_ID_VERSION_MAP). Initializers that are not
// graph inputs need IR 4, so nothing lower is written; unknown domains ask for no more.
int64_t min_ir_version(const std::string& domain, int version) {
  static constexpr std::pair<int, int64_t> kOnnx[] = {
      {9, 4}, {10, 5}, {11, 6}, {12, 7}, {15, 8}, {19, 9}, {21, 10}, {23, 11}, {24, 12}, {25, 13}, {28, 14}};
  static constexpr std::pair<int, int64_t> kMl[] = {{2, 6}, {3, 8}, {4, 9}, {5, 10}};
  int64_t ir = 4;
  if (domain.empty()) {
    for (const auto& [first, ir_version] : kOnnx)
      if (version >= first) ir = ir_version;
  } else if (domain == "ai.onnx.ml") {
    for (const auto& [first, ir_version] : kMl)
      if (version >= first) ir = ir_version;
  } else if (domain == "ai.onnx.preview.training") {
    ir = 7;
  }
  return ir;
}

onnx::TypeProto type_to_onnx(const Value& v) {
  onnx::TypeProto t;
  if (v.dtype == DType::kUndefined) return t;
  t.kind = onnx::TypeProto::Kind::kTensor;
  t.elem_type = dtype_to_onnx(v.dtype);
  t.has_shape = v.shape.rank_known;
  for (const Dim& d : v.shape.dims) {
    onnx::DimensionProto& p = t.dims.emplace_back();
    if (d.is_static()) {
      p.has_value = true;
      p.value = d.value;
    } else {
      p.param = d.symbol;
    }
  }
  return t;
}

onnx::ValueInfoProto value_info(const Value& v) { return {v.name, type_to_onnx(v)}; }

class ExternalData;
// `implicit`: the graph is a control-flow body whose last `implicit` inputs stand for values of the
// enclosing graph (ir/onnx_import.cc): they are not written as inputs; the body names those values
// directly, as ONNX's outer scope does. A body's inputs may be untyped (the node's types apply).
onnx::GraphProto graph_to_onnx(const Graph& g, ExternalData* external, bool body = false, size_t implicit = 0);

// Renames every read of a name in `renames` in `g` and in the bodies nested in it.
void rename_reads(onnx::GraphProto& g, const std::map<std::string, std::string>& renames) {
  auto rename = [&](std::string& name) {
    auto it = renames.find(name);
    if (it != renames.end()) name = it->second;
  };
  for (onnx::NodeProto& n : g.node) {
    for (std::string& in : n.input) rename(in);
    for (onnx::AttributeProto& a : n.attribute)
      if (a.g) rename_reads(*a.g, renames);
  }
  for (onnx::ValueInfoProto& out : g.output) rename(out.name);
}

onnx::AttributeProto attribute_to_onnx(const Node& n, const std::string& name, const Attribute& a) {
  onnx::AttributeProto p;
  p.name = name;
  switch (a.kind) {
    case Attribute::Kind::kFloat:
      p.type = onnx::kAttrFloat;
      p.f = a.f;
      break;
    case Attribute::Kind::kInt:
      p.type = onnx::kAttrInt;
      p.i = a.i;
      break;
    case Attribute::Kind::kString:
      p.type = onnx::kAttrString;
      p.s = a.s;
      break;
    case Attribute::Kind::kFloats:
      p.type = onnx::kAttrFloats;
      p.floats = a.floats;
      break;
    case Attribute::Kind::kInts:
      p.type = onnx::kAttrInts;
      p.ints = a.ints;
      break;
    case Attribute::Kind::kStrings:
      p.type = onnx::kAttrStrings;
      p.strings = a.strings;
      break;
    case Attribute::Kind::kTensor:
      if (!a.t.defined())
        throw InvalidModel(fmt(n.describe(), ": tensor attribute '", name, "' holds no tensor"));
      p.type = onnx::kAttrTensor;
      p.t = tensor_to_onnx(a.t, "");
      break;
    case Attribute::Kind::kGraph:
      if (!a.g) throw InvalidModel(fmt(n.describe(), ": graph attribute '", name, "' holds no graph"));
      p.type = onnx::kAttrGraph;
      p.g = std::make_shared<onnx::GraphProto>(graph_to_onnx(*a.g, nullptr, true, implicit_inputs(n)));
      // The body's stand-ins for enclosing values read those values under their names there.
      std::map<std::string, std::string> renames;
      const size_t implicit = implicit_inputs(n), first = n.inputs().size() - implicit;
      for (size_t k = 0; k < implicit; ++k) {
        const std::string& inside = a.g->inputs()[a.g->inputs().size() - implicit + k]->name;
        const std::string& outside = n.inputs()[first + k]->name;
        if (inside != outside) renames[inside] = outside;
      }
      if (!renames.empty()) rename_reads(*p.g, renames);
  }
  return p;
}

onnx::NodeProto node_to_onnx(const Node& n) {
  onnx::NodeProto p;
  p.name = n.name();
  p.op_type = n.op_type();
  p.domain = n.domain();
  const size_t explicit_inputs = n.inputs().size() - implicit_inputs(n);
  for (size_t i = 0; i < explicit_inputs; ++i) p.input.push_back(n.inputs()[i] ? n.inputs()[i]->name : "");
  for (const Value* v : n.outputs()) p.output.push_back(v ? v->name : "");
  for (const auto& [name, a] : n.attrs())
    if (name != kImplicitInputsAttr) p.attribute.push_back(attribute_to_onnx(n, name, a));
  return p;
}

// Opset imports: the graph's, plus version 1 of any custom domain a node uses without importing.
std::vector<onnx::OperatorSetIdProto> opsets_to_onnx(const Graph& g) {
  std::map<std::string, int> opsets = g.opsets();
  for (const Node* n : g.nodes()) {
    if (opsets.count(n->domain())) continue;
    if (n->domain().empty())
      throw InvalidModel(fmt(n->describe(), ": graph '", g.name,
                             "' imports no ONNX opset; set one with Graph::set_opset(\"\", version)"));
    opsets.emplace(n->domain(), 1);
  }
  std::vector<onnx::OperatorSetIdProto> out;
  for (const auto& [domain, version] : opsets) out.push_back({domain, version});
  return out;
}

// Writes large tensors to the side file as they are met, keeping offsets page-aligned.
class ExternalData {
 public:
  ExternalData(fs::path file, std::string location, size_t threshold)
      : file_(std::move(file)), location_(std::move(location)), threshold_(threshold) {}

  void place(onnx::TensorProto& p) {
    if (p.raw_data.size() < threshold_ || p.raw_data.empty()) return;
    if (!out_.is_open()) {
      out_.open(file_, std::ios::binary | std::ios::trunc);
      if (!out_)
        throw InvalidModel(
            fmt("cannot write external data file '", file_.string(), "': ", std::strerror(errno)));
    }
    uint64_t offset = (size_ + kExternalAlignment - 1) / kExternalAlignment * kExternalAlignment;
    static const char kZeros[kExternalAlignment] = {};
    out_.write(kZeros, static_cast<std::streamsize>(offset - size_));
    out_.write(p.raw_data.data(), static_cast<std::streamsize>(p.raw_data.size()));
    size_ = offset + p.raw_data.size();
    p.external_data = {{"location", location_},
                       {"offset", std::to_string(offset)},
                       {"length", std::to_string(p.raw_data.size())}};
    p.data_location = onnx::kLocationExternal;
    p.has_raw_data = false;
    p.raw_data = {};
  }

  void finish() {
    if (!out_.is_open()) return;
    out_.close();
    if (!out_) throw InvalidModel(fmt("cannot write external data file '", file_.string(), "'"));
  }

 private:
  fs::path file_;
  std::string location_;
  size_t threshold_;
  std::ofstream out_;
  uint64_t size_ = 0;
};

onnx::GraphProto graph_to_onnx(const Graph& g, ExternalData* external, bool body, size_t implicit) {
  onnx::GraphProto p;
  p.name = g.name.empty() ? "trainrt" : g.name;  // onnx.checker wants a graph name
  p.doc_string = g.doc;
  for (size_t i = 0; i + implicit < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    if (v->dtype == DType::kUndefined && !body) throw InvalidModel(fmt("graph input '", v->name, "' has no dtype"));
    p.input.push_back(value_info(*v));
  }
  // Inputs with data are written as initializers too: ONNX's form of an input with a default.
  for (const Value* v : g.initializers()) {
    onnx::TensorProto& t = p.initializer.emplace_back(tensor_to_onnx(v->data, v->name));
    if (external) external->place(t);
  }
  std::vector<Node*> order = g.topological_order();
  for (const Node* n : order) p.node.push_back(node_to_onnx(*n));
  std::unordered_set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
  for (const Node* n : order)
    for (const Value* v : n->outputs())
      if (v && v->dtype != DType::kUndefined && !outputs.count(v)) p.value_info.push_back(value_info(*v));
  for (const Value* v : g.outputs()) p.output.push_back(value_info(*v));
  return p;
}

onnx::ModelProto model_to_onnx(const Graph& g, ExternalData* external) {
  verify(g);
  onnx::ModelProto m;
  m.opset_import = opsets_to_onnx(g);
  m.ir_version = 4;
  for (const onnx::OperatorSetIdProto& o : m.opset_import)
    m.ir_version = std::max(m.ir_version, min_ir_version(o.domain, static_cast<int>(o.version)));
  m.producer_name = "trainrt";
  m.has_graph = true;
  m.graph = graph_to_onnx(g, external);
  return m;
}

void check_size(const WireWriter& w) {
  if (w.size() > kMaxModelBytes)
    throw InvalidModel(fmt("the model is ", w.size(),
                           " bytes, over protobuf's 2 GiB limit; export with "
                           "OnnxExportOptions::external_data_threshold set"));
}

}  // namespace

std::string export_onnx_bytes(const Graph& g) {
  WireWriter w = onnx::encode_model(model_to_onnx(g, nullptr));
  check_size(w);
  return w.to_string();
}

void export_onnx(const Graph& g, const std::string& path, const OnnxExportOptions& options) {
  std::optional<ExternalData> external;
  if (options.external_data_threshold > 0) {
    std::string location = options.external_data_file.empty() ? fs::path(path).filename().string() + ".data"
                                                              : options.external_data_file;
    fs::path rel(location);
    if (rel.empty() || rel.is_absolute() || rel.lexically_normal().begin()->string() == "..")
      throw InvalidModel(
          fmt("external data file '", location, "' must be a path inside the model's directory"));
    external.emplace(fs::path(path).parent_path() / rel, location, options.external_data_threshold);
  }
  WireWriter w = onnx::encode_model(model_to_onnx(g, external ? &*external : nullptr));
  check_size(w);
  if (external) external->finish();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InvalidModel(fmt("cannot write ONNX model '", path, "': ", std::strerror(errno)));
  w.write_to(out);
  out.close();
  if (!out) throw InvalidModel(fmt("cannot write ONNX model '", path, "'"));
}

}  // namespace trainrt
