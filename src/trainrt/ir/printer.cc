#include "trainrt/ir/printer.h"

#include <sstream>
#include <unordered_set>

#include "trainrt/core/error.h"

namespace trainrt {

namespace {

// Tensors up to this many elements print their values; larger ones only dtype and shape.
constexpr int64_t kMaxPrintedElements = 8;

std::string tensor_values(const Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) out << ", ";
    if (is_floating(t.dtype()))
      out << t.to_double(i);
    else
      out << t.to_i64(i);
  }
  out << "]";
  return out.str();
}

std::string value_ref(const Value* v) { return v ? "%" + v->name : "_"; }

std::string attribute_text(const Attribute& a) {
  if (a.kind == Attribute::Kind::kTensor && a.t.defined() && a.t.numel() <= kMaxPrintedElements)
    return describe(a.t) + " " + tensor_values(a.t);
  return to_string(a);
}

std::string opsets_text(const Graph& g) {
  std::string out;
  for (const auto& [domain, version] : g.opsets()) {
    if (!out.empty()) out += ", ";
    out += fmt(domain.empty() ? "ai.onnx" : domain, " ", version);
  }
  return out;
}

// A graph with a cycle has no schedule; it prints in insertion order instead.
std::vector<Node*> print_order(const Graph& g) {
  try {
    return g.topological_order();
  } catch (const InvalidModel&) {
    return g.nodes();
  }
}

}  // namespace

std::string print_type(const Value& v) {
  std::string dtype = v.dtype == DType::kUndefined ? "?" : std::string(dtype_name(v.dtype));
  return dtype + to_string(v.shape);
}

std::string print_node(const Node& n) {
  std::ostringstream out;
  bool first = true;
  for (const Value* v : n.outputs()) {
    out << (first ? "" : ", ") << value_ref(v);
    if (v) out << ": " << print_type(*v);
    first = false;
  }
  out << (n.num_outputs() ? " = " : "");
  if (!n.domain().empty()) out << n.domain() << "::";
  out << n.op_type() << "(";
  for (int i = 0; i < n.num_inputs(); ++i) out << (i ? ", " : "") << value_ref(n.input(i));
  out << ")";
  if (!n.attrs().empty()) {
    out << " {";
    first = true;
    for (const auto& [name, a] : n.attrs()) {
      out << (first ? "" : ", ") << name << "=" << attribute_text(a);
      first = false;
    }
    out << "}";
  }
  out << "  # " << n.name();
  return out.str();
}

std::string print_graph(const Graph& g) {
  std::ostringstream out;
  out << "graph '" << g.name << "' (opsets: " << opsets_text(g) << ")\n";
  for (const Value* v : g.inputs()) {
    if (!v) continue;
    out << "  input %" << v->name << ": " << print_type(*v);
    if (v->is_initializer())
      out << " (default "
          << (v->data.numel() <= kMaxPrintedElements ? tensor_values(v->data) : describe(v->data)) << ")";
    out << "\n";
  }
  std::unordered_set<const Value*> inputs(g.inputs().begin(), g.inputs().end());
  for (const Value* v : g.initializers()) {
    if (inputs.count(v)) continue;  // printed above with its default
    out << "  initializer %" << v->name << ": " << print_type(*v);
    if (v->data.numel() <= kMaxPrintedElements) out << " = " << tensor_values(v->data);
    out << "\n";
  }
  for (const Node* n : print_order(g)) out << "  " << print_node(*n) << "\n";
  for (const Value* v : g.outputs()) out << "  output " << value_ref(v) << "\n";
  return out.str();
}

}  // namespace trainrt
