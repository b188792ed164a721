// Builds a Graph from decoded ONNX messages (onnx_messages.h). Decoding checked the wire format;
// this file checks meaning: names, types, tensor data, opset imports.
#include "trainrt/ir/onnx_import.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "trainrt/core/error.h"
#include "trainrt/ir/control_flow.h"
#include "trainrt/ir/onnx_inline.h"
#include "trainrt/ir/onnx_sequences.h"
#include "trainrt/ir/onnx_messages.h"
#include "trainrt/ir/onnx_tensor.h"
#include "trainrt/ir/verifier.h"

namespace trainrt {

namespace fs = std::filesystem;

namespace {

std::string_view attribute_type_name(int32_t type) {
  static constexpr std::string_view kNames[] = {
      "UNDEFINED", "FLOAT",   "INT",    "STRING",        "TENSOR",         "GRAPH",      "FLOATS",     "INTS",
      "STRINGS",   "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};
  if (type < 0 || type >= static_cast<int32_t>(std::size(kNames))) return "UNKNOWN";
  return kNames[type];
}

std::string_view type_kind_name(onnx::TypeProto::Kind k) {
  switch (k) {
    case onnx::TypeProto::Kind::kNone: return "untyped";
    case onnx::TypeProto::Kind::kTensor: return "tensor";
    case onnx::TypeProto::Kind::kSequence: return "sequence";
    case onnx::TypeProto::Kind::kMap: return "map";
    case onnx::TypeProto::Kind::kOptional: return "optional";
    case onnx::TypeProto::Kind::kSparseTensor: return "sparse tensor";
    case onnx::TypeProto::Kind::kOpaque: return "opaque value";
  }
  return "?";
}

// Same form as Node::describe(), for nodes not created yet.
std::string describe_node(const std::string& name, const std::string& op_type, const std::string& domain) {
  return fmt("node '", name, "' (", domain.empty() ? "" : domain + "::", op_type, ")");
}

Shape shape_from_onnx(const onnx::TypeProto& t) {
  if (!t.has_shape) return Shape::unknown_rank();
  std::vector<Dim> dims;
  dims.reserve(t.dims.size());
  for (const onnx::DimensionProto& d : t.dims) {
    if (d.has_value) {
      if (d.value < 0) throw InvalidModel(fmt("dimension ", dims.size(), " is negative (", d.value, ")"));
      dims.emplace_back(d.value);
    } else if (!d.param.empty()) {
      dims.push_back(Dim::symbolic(d.param));
    } else {
      dims.emplace_back();
    }
  }
  return Shape(std::move(dims));
}

void set_type(const onnx::TypeProto& t, Value& v) {
  if (t.kind == onnx::TypeProto::Kind::kNone) return;
  if (t.kind != onnx::TypeProto::Kind::kTensor)
    throw UnsupportedOp(fmt(type_kind_name(t.kind), " values are not supported, only tensors"));
  if (t.elem_type != 0) v.dtype = dtype_from_onnx(t.elem_type);
  v.shape = shape_from_onnx(t);
}

// Sets v's dtype and shape from a declared type. `role` ("graph input") names v in errors.
void apply_type(const onnx::TypeProto& t, Value& v, std::string_view role) {
  onnx::with_context([&] { return fmt(role, " '", v.name, "'"); }, [&] { set_type(t, v); });
}

// The ops whose bodies may read values of the enclosing graph (ONNX's outer scope). Such a read
// becomes an input of the body and of the node (an implicit input: the body's last inputs, the
// node's last inputs, as many as its `implicit_inputs` attribute says), so that every later stage
// (liveness, passes, autodiff, the kernel's Session) sees the dependency as an ordinary edge.
bool reads_outer_scope(const std::string& op_type, const std::string& domain) {
  return domain.empty() && (op_type == "If" || op_type == "Loop" || op_type == "Scan");
}

// Per graph attribute of a node (by name, in the node's order): the names its body read outside.
using BodyReads = std::vector<std::pair<std::string, std::vector<std::string>>>;

class Importer {
 public:
  // `outer`: the importer of the enclosing graph, for a body that may read its values.
  Importer(const onnx::ModelProto& model, fs::path dir, Importer* outer = nullptr)
      : model_(model), dir_(std::move(dir)), outer_(outer) {}

  // Names this graph read from enclosing graphs, in the order first read (its last inputs).
  const std::vector<std::string>& implicit_inputs() const { return implicit_; }

  std::unique_ptr<Graph> run() {
    if (!model_.has_graph) throw InvalidModel("the model has no graph");
    const onnx::GraphProto& gp = model_.graph;
    if (gp.sparse_initializer_count)
      throw UnsupportedOp(fmt("the graph has ", gp.sparse_initializer_count,
                              " sparse initializers; sparse tensors are not supported"));
    g_ = std::make_unique<Graph>();
    g_->name = gp.name;
    g_->doc = gp.doc_string;
    std::map<std::string, int> opsets = read_opsets();
    std::vector<onnx::NodeProto> nodes = inline_functions(model_, opsets);
    lower_split_sequences(nodes, gp, dir_);
    for (const auto& [domain, version] : opsets) g_->set_opset(domain, version);
    add_inputs_and_initializers();
    std::vector<std::string> names = unique_node_names(nodes);
    create_node_outputs(nodes, names);
    for (size_t i = 0; i < nodes.size(); ++i) add_node(nodes[i], names[i]);
    apply_value_info();
    add_outputs();
    verify(*g_);
    return std::move(g_);
  }

 private:
  std::map<std::string, int> read_opsets() {
    std::map<std::string, int> opsets;
    for (const onnx::OperatorSetIdProto& o : model_.opset_import) {
      if (o.version <= 0 || o.version > INT32_MAX)
        throw InvalidModel(fmt("opset import of domain '", o.domain, "' has version ", o.version));
      opsets[normalize_domain(o.domain)] = static_cast<int>(o.version);
    }
    if (opsets.empty())
      throw InvalidModel(fmt("the model imports no opset (ir_version ", model_.ir_version, ")"));
    return opsets;
  }

  void add_inputs_and_initializers() {
    const onnx::GraphProto& gp = model_.graph;
    std::map<std::string, Tensor> data;
    for (size_t i = 0; i < gp.initializer.size(); ++i) {
      const onnx::TensorProto& t = gp.initializer[i];
      if (t.name.empty()) throw InvalidModel(fmt("initializer #", i, " has no name"));
      Tensor tensor = onnx::with_context([&] { return fmt("initializer '", t.name, "'"); },
                                         [&] { return tensor_from_onnx(t, dir_); });
      if (!data.emplace(t.name, std::move(tensor)).second)
        throw InvalidModel(fmt("initializer '", t.name, "' is defined twice"));
    }
    for (const onnx::ValueInfoProto& in : gp.input) {
      if (in.name.empty()) throw InvalidModel("a graph input has no name");
      if (g_->find_value(in.name)) throw InvalidModel(fmt("graph input '", in.name, "' is declared twice"));
      Value* v = g_->add_input(in.name, DType::kUndefined, Shape::unknown_rank());
      apply_type(in.type, *v, "graph input");
      auto it = data.find(in.name);
      if (it != data.end()) {
        // An input with an initializer: its data is the default when the caller feeds nothing.
        if (v->dtype == DType::kUndefined) v->dtype = it->second.dtype();
        if (!v->shape.rank_known) v->shape = Shape::of(it->second.dims());
        if (v->dtype != it->second.dtype())
          throw InvalidModel(fmt("graph input '", in.name, "' is declared ", dtype_name(v->dtype),
                                 " but its initializer is ", describe(it->second)));
        v->data = std::move(it->second);
        data.erase(it);
      } else if (v->dtype == DType::kUndefined && !outer_) {  // a control-flow body's: the node's types
        throw InvalidModel(fmt("graph input '", in.name, "' has no element type"));
      }
    }
    for (const onnx::TensorProto& t : gp.initializer) {
      auto it = data.find(t.name);
      if (it != data.end()) g_->add_initializer(t.name, std::move(it->second));
    }
  }

  // Node names must be unique for errors to be unambiguous: unnamed nodes get "<op>_<k>" and a
  // repeated name "<name>_<k>", skipping names in use.
  static std::vector<std::string> unique_node_names(const std::vector<onnx::NodeProto>& nodes) {
    std::set<std::string> given;
    for (const onnx::NodeProto& n : nodes)
      if (!n.name.empty()) given.insert(n.name);
    std::set<std::string> assigned;
    std::map<std::string, int> next_index;
    std::vector<std::string> names;
    names.reserve(nodes.size());
    for (const onnx::NodeProto& n : nodes) {
      std::string name = n.name;
      if (name.empty() || assigned.count(name)) {
        const std::string& base = n.name.empty() ? n.op_type : n.name;
        int& k = next_index[base];
        do name = base + "_" + std::to_string(k++);
        while (given.count(name) || assigned.count(name));
      }
      assigned.insert(name);
      names.push_back(std::move(name));
    }
    return names;
  }

  // Creates every node output first, so nodes may come in any order (cycles are caught by verify).
  void create_node_outputs(const std::vector<onnx::NodeProto>& nodes, const std::vector<std::string>& names) {
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const onnx::NodeProto& n = nodes[i];
      for (const std::string& out : n.output) {
        if (out.empty()) continue;
        auto [it, fresh] = producer.emplace(out, i);
        if (!fresh) {
          const onnx::NodeProto& first = nodes[it->second];
          throw InvalidModel(
              fmt("value '", out, "' is produced by ",
                  describe_node(names[it->second], first.op_type, normalize_domain(first.domain)), " and by ",
                  describe_node(names[i], n.op_type, normalize_domain(n.domain))));
        }
        if (g_->find_value(out))
          throw InvalidModel(fmt(describe_node(names[i], n.op_type, normalize_domain(n.domain)), ": output '",
                                 out, "' is also a graph input or initializer"));
        g_->add_value(out);
      }
    }
  }

  void add_node(const onnx::NodeProto& n, const std::string& name) {
    std::string domain = normalize_domain(n.domain);
    onnx::with_context([&] { return describe_node(name, n.op_type, domain); },
                       [&] { build_node(n, name, domain); });
  }

  void build_node(const onnx::NodeProto& n, const std::string& name, const std::string& domain) {
    if (n.op_type.empty()) throw InvalidModel("op_type is empty");
    if (!g_->opsets().count(domain))
      throw InvalidModel(fmt("domain '", domain, "' is not imported by the model (opset_import)"));
    std::vector<Value*> inputs, outputs;
    for (size_t i = 0; i < n.input.size(); ++i) {
      if (n.input[i].empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      Value* v = find_or_capture(n.input[i]);
      if (!v)
        throw InvalidModel(
            fmt("input ", i, " '", n.input[i],
                "' is not defined (no graph input, initializer or node output has that name)"));
      inputs.push_back(v);
    }
    for (const std::string& out : n.output) outputs.push_back(out.empty() ? nullptr : g_->find_value(out));
    std::map<std::string, Attribute> attrs;
    BodyReads body_reads;  // per graph attribute, in the node's order: the names its body read outside
    const bool outer_scope = reads_outer_scope(n.op_type, domain);
    for (const onnx::AttributeProto& a : n.attribute) {
      if (a.name.empty()) throw InvalidModel("an attribute has no name");
      Attribute value = onnx::with_context([&] { return fmt("attribute '", a.name, "'"); },
                                           [&] { return convert_attribute(a, outer_scope, body_reads); });
      if (!attrs.emplace(a.name, std::move(value)).second)
        throw InvalidModel(fmt("attribute '", a.name, "' is set twice"));
    }
    if (outer_scope) {
      const std::vector<std::string> reads = join_implicit_inputs(attrs, body_reads);
      for (const std::string& r : reads) inputs.push_back(find_or_capture(r));
      if (!reads.empty()) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(reads.size()));
    }
    Node* node = g_->add_node_with_outputs(n.op_type, inputs, outputs, domain, name);
    for (auto& [key, value] : attrs) node->set_attr(key, std::move(value));
  }

  // A value of this graph by name; else one of an enclosing graph (for a body that may read them),
  // which then becomes an input of this graph, named as there.
  Value* find_or_capture(const std::string& name) {
    if (Value* v = g_->find_value(name)) return v;
    if (!outer_) return nullptr;
    const Value* outside = outer_->find_or_capture(name);
    if (!outside) return nullptr;
    implicit_.push_back(name);
    return g_->add_input(name, outside->dtype, outside->shape);
  }

  // The node's implicit inputs: every name one of its bodies reads from outside, in order of first
  // read. Each body's inputs become its formal ones followed by all of those (a branch that reads
  // fewer gets unread inputs), so that every body takes the node's inputs in the same order.
  std::vector<std::string> join_implicit_inputs(std::map<std::string, Attribute>& attrs, const BodyReads& body_reads) {
    std::vector<std::string> all;
    for (const auto& [attr, reads] : body_reads)
      for (const std::string& r : reads)
        if (std::find(all.begin(), all.end(), r) == all.end()) all.push_back(r);
    for (const auto& [attr, reads] : body_reads) {
      Graph& body = *attrs.at(attr).g;
      const auto formal_end = body.inputs().end() - static_cast<long>(reads.size());
      std::vector<Value*> ordered(body.inputs().begin(), formal_end);
      for (const std::string& r : all) {
        Value* v = body.find_value(r);
        if (std::find(reads.begin(), reads.end(), r) == reads.end()) {
          if (v)
            throw InvalidModel(fmt("attribute '", attr, "': value '", r,
                                   "' of the body has the name of a value the node's other bodies read "
                                   "from the enclosing graph (ONNX forbids shadowing)"));
          const Value* outside = find_or_capture(r);
          v = body.add_input(r, outside->dtype, outside->shape);
        }
        ordered.push_back(v);
      }
      body.mutable_inputs() = std::move(ordered);
    }
    return all;
  }

  // `outer_scope`: a graph attribute may read this graph's values (If's, Loop's, Scan's bodies);
  // the names it reads are appended to `body_reads`. Otherwise a body names its own inputs
  // (FusedElementwise's) and one reading an enclosing value is refused, naming the value.
  Attribute convert_attribute(const onnx::AttributeProto& a, bool outer_scope, BodyReads& body_reads) {
    if (!a.ref_attr_name.empty())
      throw InvalidModel(fmt("ref_attr_name '", a.ref_attr_name, "' is only allowed in a function body"));
    switch (a.type) {
      case onnx::kAttrFloat: return Attribute::of_float(a.f);
      case onnx::kAttrInt: return Attribute::of_int(a.i);
      case onnx::kAttrString: return Attribute::of_string(a.s);
      case onnx::kAttrTensor: return Attribute::of_tensor(tensor_from_onnx(a.t, dir_));
      case onnx::kAttrFloats: return Attribute::of_floats(a.floats);
      case onnx::kAttrInts: return Attribute::of_ints(a.ints);
      case onnx::kAttrStrings: return Attribute::of_strings(a.strings);
      case onnx::kAttrGraph: {
        if (!a.g) throw InvalidModel("graph attribute holds no graph");
        onnx::ModelProto body;
        body.ir_version = model_.ir_version;
        body.opset_import = model_.opset_import;
        body.functions = model_.functions;
        body.has_graph = true;
        body.graph = *a.g;
        Attribute out;
        out.kind = Attribute::Kind::kGraph;
        Importer inner(body, dir_, outer_scope ? this : nullptr);
        out.g = inner.run();
        if (outer_scope) body_reads.emplace_back(a.name, inner.implicit_inputs());
        return out;
      }
      case onnx::kAttrGraphs:
        throw UnsupportedOp("lists of graph attributes are not supported");
      case onnx::kAttrUndefined: throw InvalidModel("no value is set");
      default:
        if (a.type < 0 || a.type > onnx::kAttrTypeProtos)
          throw InvalidModel(fmt("unknown attribute type ", a.type));
        throw UnsupportedOp(fmt(attribute_type_name(a.type), " attributes are not supported"));
    }
  }

  // value_info only fills in a type nothing else declared; its shape is kept as the declared one.
  void apply_value_info() {
    for (const onnx::ValueInfoProto& info : model_.graph.value_info) {
      Value* v = g_->find_value(info.name);
      if (!v || !v->producer) continue;
      if (v->dtype == DType::kUndefined) apply_type(info.type, *v, "value_info");
      if (info.type.kind == onnx::TypeProto::Kind::kTensor)
        onnx::with_context([&] { return fmt("value_info '", v->name, "'"); },
                           [&] { v->declared = shape_from_onnx(info.type); });
    }
  }

  void add_outputs() {
    for (const onnx::ValueInfoProto& out : model_.graph.output) {
      Value* v = find_or_capture(out.name);
      if (!v)
        throw InvalidModel(
            fmt("graph output '", out.name, "' is not a graph input, initializer or node output"));
      if (v->producer && v->dtype == DType::kUndefined) apply_type(out.type, *v, "graph output");
      g_->add_output(v);
    }
  }

  const onnx::ModelProto& model_;
  fs::path dir_;
  Importer* outer_ = nullptr;
  std::vector<std::string> implicit_;
  std::unique_ptr<Graph> g_;
};

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InvalidModel("is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidModel(fmt("cannot open: ", std::strerror(errno)));
  std::string bytes;
  // The size is known for regular files; others (pipes, /proc) are read to their end all the same.
  if (fs::is_regular_file(path, ec)) {
    uintmax_t size = fs::file_size(path, ec);
    if (!ec) bytes.reserve(size);
  }
  char chunk[1 << 14];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0)
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw InvalidModel("read error");
  return bytes;
}

}  // namespace

std::unique_ptr<Graph> import_onnx_bytes(std::string_view bytes, const std::string& external_data_dir) {
  onnx::ModelProto model = onnx::decode_model(bytes);
  return Importer(model, external_data_dir).run();
}

std::unique_ptr<Graph> import_onnx(const std::string& path) {
  auto import_file = [&] {
    std::string bytes = read_file(path);
    fs::path dir = fs::path(path).parent_path();
    return import_onnx_bytes(bytes, dir.empty() ? std::string(".") : dir.string());
  };
  return onnx::with_context([&] { return fmt("ONNX model '", path, "'"); }, import_file);
}

}  // namespace trainrt
