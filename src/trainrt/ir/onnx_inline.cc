// Function semantics: onnx.proto FunctionProto and docs/IR.md "Functions" (ONNX 1.23).
#include "trainrt/ir/onnx_inline.h"

#include <climits>
#include <set>

#include "trainrt/core/error.h"

namespace trainrt {

std::string normalize_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

namespace {

// Nested calls deeper than this are refused; recursion is refused at any depth.
constexpr size_t kMaxCallDepth = 64;
// A few bytes of nested calls can expand exponentially; past this many nodes we refuse the model.
constexpr size_t kMaxInlinedNodes = size_t{1} << 20;

std::string function_key(const std::string& domain, const std::string& name, const std::string& overload) {
  return normalize_domain(domain) + '\n' + name + '\n' + overload;
}

std::string describe_call(const onnx::NodeProto& n) {
  return fmt("node '", n.name, "' (", n.domain.empty() ? "" : n.domain + "::", n.op_type, ")");
}

class Inliner {
 public:
  explicit Inliner(const onnx::ModelProto& model) {
    for (const onnx::FunctionProto& f : model.functions) {
      if (!functions_.emplace(function_key(f.domain, f.name, f.overload), &f).second)
        throw InvalidModel(fmt("function '", f.domain, "::", f.name, "' is defined twice"));
    }
    collect_names(model.graph);
  }

  std::vector<onnx::NodeProto> run(const std::vector<onnx::NodeProto>& nodes) {
    for (const onnx::NodeProto& n : nodes) expand(n);
    return std::move(out_);
  }

 private:
  void collect_names(const onnx::GraphProto& g) {
    for (const auto& v : g.input) taken_.insert(v.name);
    for (const auto& v : g.output) taken_.insert(v.name);
    for (const auto& v : g.value_info) taken_.insert(v.name);
    for (const auto& t : g.initializer) taken_.insert(t.name);
    for (const auto& n : g.node) {
      taken_.insert(n.input.begin(), n.input.end());
      taken_.insert(n.output.begin(), n.output.end());
    }
  }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; taken_.count(name); ++i) name = base + "_" + std::to_string(i);
    taken_.insert(name);
    return name;
  }

  void expand(const onnx::NodeProto& node) {
    auto it = functions_.find(function_key(node.domain, node.op_type, node.overload));
    if (it == functions_.end()) {
      if (out_.size() >= kMaxInlinedNodes)
        throw InvalidModel(fmt("inlining functions gives more than ", kMaxInlinedNodes, " nodes"));
      out_.push_back(node);
      return;
    }
    const onnx::FunctionProto& f = *it->second;
    for (const onnx::FunctionProto* active : stack_)
      if (active == &f)
        throw InvalidModel(fmt(describe_call(node), ": function '", f.name, "' calls itself"));
    if (stack_.size() >= kMaxCallDepth)
      throw InvalidModel(fmt(describe_call(node), ": function calls nest deeper than ", kMaxCallDepth));
    stack_.push_back(&f);
    std::vector<onnx::NodeProto> body = instantiate(node, f);
    for (const onnx::NodeProto& n : body) expand(n);
    stack_.pop_back();
  }

  // Binds formal names to the call site's; every value made inside the body gets a fresh name.
  std::map<std::string, std::string> bind_names(const onnx::NodeProto& call, const onnx::FunctionProto& f,
                                                const std::string& prefix) {
    if (call.input.size() > f.input.size() || call.output.size() > f.output.size())
      throw InvalidModel(fmt(describe_call(call), ": has ", call.input.size(), " inputs and ",
                             call.output.size(), " outputs, but function '", f.name, "' declares ",
                             f.input.size(), " and ", f.output.size()));
    std::map<std::string, std::string> rename;
    for (size_t i = 0; i < f.input.size(); ++i)
      rename[f.input[i]] = i < call.input.size() ? call.input[i] : "";
    std::set<std::string> produced;
    for (const onnx::NodeProto& n : f.node)
      for (const std::string& o : n.output)
        if (!o.empty()) produced.insert(o);
    for (size_t i = 0; i < f.output.size(); ++i) {
      if (!produced.count(f.output[i]))
        throw InvalidModel(
            fmt("function '", f.name, "': output '", f.output[i], "' is not produced by its body"));
      bool bound = i < call.output.size() && !call.output[i].empty();
      rename[f.output[i]] = bound ? call.output[i] : fresh(prefix + "/" + f.output[i]);
    }
    for (const std::string& o : produced)
      if (!rename.count(o)) rename[o] = fresh(prefix + "/" + o);
    return rename;
  }

  // Resolves ref_attr_name: the caller's attribute, else the function's default, else dropped.
  static std::vector<onnx::AttributeProto> bind_attributes(const onnx::NodeProto& body_node,
                                                           const onnx::NodeProto& call,
                                                           const onnx::FunctionProto& f) {
    std::vector<onnx::AttributeProto> out;
    for (const onnx::AttributeProto& a : body_node.attribute) {
      if (a.ref_attr_name.empty()) {
        out.push_back(a);
        continue;
      }
      const onnx::AttributeProto* value = nullptr;
      for (const onnx::AttributeProto& c : call.attribute)
        if (c.name == a.ref_attr_name) value = &c;
      if (!value)
        for (const onnx::AttributeProto& d : f.attribute_proto)
          if (d.name == a.ref_attr_name) value = &d;
      if (!value) continue;
      onnx::AttributeProto bound = *value;
      bound.name = a.name;
      out.push_back(std::move(bound));
    }
    return out;
  }

  std::vector<onnx::NodeProto> instantiate(const onnx::NodeProto& call, const onnx::FunctionProto& f) {
    std::string prefix = call.name.empty() ? f.name : call.name;
    std::map<std::string, std::string> rename = bind_names(call, f, prefix);
    std::vector<onnx::NodeProto> body;
    body.reserve(f.node.size());
    for (const onnx::NodeProto& n : f.node) {
      onnx::NodeProto c;
      c.op_type = n.op_type;
      c.domain = n.domain;
      c.overload = n.overload;
      c.name = prefix + "/" + (n.name.empty() ? n.op_type : n.name);
      for (const std::string& in : n.input) {
        if (in.empty()) {
          c.input.push_back("");
          continue;
        }
        auto r = rename.find(in);
        if (r == rename.end())
          throw InvalidModel(fmt("function '", f.name, "': node '", n.name, "' (", n.op_type, "): input '",
                                 in, "' is neither a function input nor produced in the body"));
        c.input.push_back(r->second);
      }
      for (const std::string& o : n.output) c.output.push_back(o.empty() ? "" : rename.at(o));
      c.attribute = bind_attributes(n, call, f);
      body.push_back(std::move(c));
    }
    return body;
  }

  std::map<std::string, const onnx::FunctionProto*> functions_;
  std::set<std::string> taken_;
  std::vector<const onnx::FunctionProto*> stack_;
  std::vector<onnx::NodeProto> out_;
};

}  // namespace

std::vector<onnx::NodeProto> inline_functions(const onnx::ModelProto& model,
                                              std::map<std::string, int>& opsets) {
  if (model.functions.empty()) return model.graph.node;
  for (const onnx::FunctionProto& f : model.functions) {
    for (const onnx::OperatorSetIdProto& o : f.opset_import) {
      if (o.version <= 0 || o.version > INT32_MAX)
        throw InvalidModel(
            fmt("function '", f.name, "': opset import of domain '", o.domain, "' has version ", o.version));
      opsets.emplace(normalize_domain(o.domain), static_cast<int>(o.version));
    }
  }
  return Inliner(model).run(model.graph.node);
}

}  // namespace trainrt
