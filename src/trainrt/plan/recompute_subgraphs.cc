#include "trainrt/plan/recompute_subgraphs.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/plan/checkpoint_recompute.h"

namespace trainrt {
namespace {

// One pass over their operands each: the default recomputes subgraphs of these alone.
const std::unordered_set<std::string>& cheap_ops() {
  static const std::unordered_set<std::string> kOps = {
      "Abs", "Add", "And", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Cos", "Div", "Elu", "Equal",
      "Erf", "Exp", "Expand", "Flatten", "Gather", "Gelu", "Greater", "HardSigmoid", "HardSwish", "Identity",
      "LayerNormalization", "LeakyRelu", "Less", "Log", "Mul", "Neg", "Not", "Or", "Pow", "Range", "Reciprocal",
      "Relu", "Reshape", "Selu", "Shape", "Sigmoid", "Sin", "Size", "Slice", "Softplus", "Sqrt", "Squeeze", "Sub",
      "Tanh", "Transpose", "Unsqueeze", "Where"};
  return kOps;
}

// Recomputable when the config asks: products, reductions over a row and normalizations that
// cost more than a pass (ORTModule's "advanced" probe level).
const std::unordered_set<std::string>& costly_ops() {
  static const std::unordered_set<std::string> kOps = {"BatchNormalization", "FusedMatMul", "Gemm", "LogSoftmax",
                                                       "MatMul", "ReduceMean", "ReduceSum", "Softmax"};
  return kOps;
}

bool is_recomputable(const Node& n) {
  if (n.domain() != kOnnxDomain && !(n.domain() == kTrainrtDomain && n.op_type() == "FusedMatMul")) return false;
  const OpSchema* schema = OpRegistry::global().find(n.domain(), n.op_type());
  if (!schema || !schema->deterministic) return false;
  return cheap_ops().count(n.op_type()) || costly_ops().count(n.op_type());
}

// A tensor's byte count as a constant times symbolic dims ("1024 * s0 * s1"), to compare sizes
// whose dims are not known until run time. Unnamed dynamic dims count in `unnamed`; `unknown`: the
// rank is unknown.
struct SymbolicBytes {
  double factor = 1;
  std::vector<std::string> symbols;  // sorted
  int unnamed = 0;
  bool unknown = false;
};

SymbolicBytes bytes_of(const Value& v) {
  SymbolicBytes b;
  b.factor = static_cast<double>(dtype_size(v.dtype));
  if (!v.shape.rank_known) {
    b.unknown = true;
    return b;
  }
  for (const Dim& d : v.shape.dims) {
    if (d.is_static()) b.factor *= static_cast<double>(d.value);
    else if (!d.symbol.empty()) b.symbols.push_back(d.symbol);
    else b.unnamed++;
  }
  std::sort(b.symbols.begin(), b.symbols.end());
  return b;
}

bool is_static(const SymbolicBytes& b) { return !b.unknown && b.symbols.empty() && b.unnamed == 0; }

// Whether a and s have one layout: the same rank, equal static dims, and dynamic dims at the same
// places (an unnamed one taken for the other's): a pointwise op's input and output, a LayerNorm's.
bool same_layout(const Value& a, const Value& s) {
  if (!a.shape.rank_known || !s.shape.rank_known || a.shape.rank() != s.shape.rank()) return false;
  for (size_t i = 0; i < a.shape.dims.size(); ++i) {
    const Dim &x = a.shape.dims[i], &y = s.shape.dims[i];
    if (x.is_static() != y.is_static() || (x.is_static() && x.value != y.value)) return false;
    if (!x.is_static() && !x.symbol.empty() && !y.symbol.empty() && x.symbol != y.symbol) return false;
  }
  return true;
}

// a's bytes over s's: exact when both have the same named dims and no unnamed one; the dtypes'
// ratio when they have one layout; 0 when a's dims are a strict part of s's, or all static
// against s's dynamic ones (a parameter against an activation); infinity when not comparable.
double ratio(const Value& av, const Value& sv) {
  constexpr double kIncomparable = std::numeric_limits<double>::infinity();
  const SymbolicBytes a = bytes_of(av), s = bytes_of(sv);
  if (a.unknown || s.unknown) return kIncomparable;
  if (a.unnamed == 0 && s.unnamed == 0 && a.symbols == s.symbols) return s.factor > 0 ? a.factor / s.factor : kIncomparable;
  if (same_layout(av, sv)) return static_cast<double>(dtype_size(av.dtype)) / static_cast<double>(dtype_size(sv.dtype));
  if (is_static(a) && !is_static(s)) return 0;
  if (a.unnamed == 0 && s.unnamed == 0 && a.symbols.size() < s.symbols.size() &&
      std::includes(s.symbols.begin(), s.symbols.end(), a.symbols.begin(), a.symbols.end()))
    return 0;
  return kIncomparable;
}

std::string to_string(const SymbolicBytes& b) {
  if (b.unknown) return "unknown";
  std::ostringstream out;
  out << static_cast<int64_t>(b.factor);
  for (const std::string& s : b.symbols) out << "*" << s;
  for (int i = 0; i < b.unnamed; ++i) out << "*?";
  return out.str();
}

class SubgraphFinder {
 public:
  explicit SubgraphFinder(const GradientResult& gradients)
      : forward_(gradients.forward_nodes.begin(), gradients.forward_nodes.end()),
        graph_outputs_(gradients.forward_outputs.begin(), gradients.forward_outputs.end()),
        grad_inputs_(gradients.output_grad_inputs.begin(), gradients.output_grad_inputs.end()) {}

  // A forward value the backward reads, which the forward therefore saves (or the caller holds).
  bool is_saved(const Value* v) const {
    if (!v || !v->producer || !forward_.count(v->producer) || graph_outputs_.count(v->name)) return false;
    return read_by_backward(*v);
  }

  // The nodes that make `saved` again from values the backward reads anyway, producers first in
  // `order`; nullopt when there are none within the limits.
  std::optional<std::vector<const Node*>> find(const Value& saved, const std::vector<const Node*>& order) const {
    const Node* last = saved.producer;
    if (!is_recomputable(*last)) return std::nullopt;
    std::unordered_set<const Node*> taken = {last};
    std::vector<const Node*> pending = {last};
    while (!pending.empty()) {
      const Node* n = pending.back();
      pending.pop_back();
      for (const Value* in : n->inputs()) {
        if (!in || reaches_backward_free(*in)) continue;
        const Node* producer = in->producer;
        if (taken.count(producer)) continue;
        if (!forward_.count(producer) || !is_recomputable(*producer) ||
            static_cast<int>(taken.size()) >= kMaxRecomputeNodes)
          return std::nullopt;
        taken.insert(producer);
        pending.push_back(producer);
      }
    }
    std::vector<const Node*> nodes;
    for (const Node* n : order)
      if (taken.count(n)) nodes.push_back(n);
    return nodes;
  }

 private:
  bool read_by_backward(const Value& v) const {
    return std::any_of(v.uses.begin(), v.uses.end(), [&](const Use& u) { return !forward_.count(u.node); });
  }

  // Read by the backward at no cost: a forward input or initializer (the caller keeps it), a graph
  // output (the caller holds it), or a value the backward reads anyway.
  bool reaches_backward_free(const Value& v) const {
    if (!v.producer) return !grad_inputs_.count(v.name);
    return graph_outputs_.count(v.name) || is_saved(&v);
  }

  std::unordered_set<const Node*> forward_;
  std::unordered_set<std::string> graph_outputs_;
  std::unordered_set<std::string> grad_inputs_;
};

std::string pattern_of(const std::vector<const Node*>& nodes) {
  std::string pattern;
  for (const Node* n : nodes) pattern += n->op_type() + "+";
  return pattern;
}

// Within the default's bound: cheap ops only, and the bytes they read and write at most
// kCheapBytesPerFreed times `saved`'s.
bool is_cheap(const std::vector<const Node*>& nodes, const Value& saved) {
  double moved = 0;
  for (const Node* n : nodes) {
    if (!cheap_ops().count(n->op_type())) return false;
    for (const Value* v : n->inputs())
      if (v) moved += ratio(*v, saved);
    for (const Value* v : n->outputs())
      if (v) moved += ratio(*v, saved);
  }
  return moved <= kCheapBytesPerFreed;
}

// Too small to be worth a pattern: shapes, masks, statistics of a static size under kSmallBytes.
bool is_small(const Value& v) {
  const SymbolicBytes b = bytes_of(v);
  return is_static(b) && b.factor < static_cast<double>(kSmallBytes);
}

std::string describe(const Value& v) { return to_string(v.shape) + " " + std::string(dtype_name(v.dtype)); }

}  // namespace

RecomputeConfig parse_memory_opt_config(const std::string& text) {
  RecomputeConfig config;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    const auto second = item.rfind(':');
    const auto first = second == std::string::npos || second == 0 ? std::string::npos : item.rfind(':', second - 1);
    const auto bad = [&](const std::string& why) {
      return InvalidModel(fmt("memory optimizer config item '", item, "': ", why,
                              "; the format is <pattern>:<0|1>:<count>, e.g. LayerNormalization+:1:-1"));
    };
    if (first == std::string::npos || first == 0) throw bad("expected two ':'");
    const std::string pattern = item.substr(0, first), type = item.substr(first + 1, second - first - 1),
                      count = item.substr(second + 1);
    if (type == "2")
      throw bad("type 2 (compromised recompute) is not supported; TRAINRT_MEMORY_OPT_LEVEL=2 recomputes each layer "
                "with its products");
    if (type != "0" && type != "1") throw bad("the type must be 0 (keep saving) or 1 (recompute)");
    int n = 0;
    try {
      size_t used = 0;
      n = std::stoi(count, &used);
      if (used != count.size() || n < -1) throw std::invalid_argument(count);
    } catch (const std::exception&) {
      throw bad("the count must be -1 (all) or a number of occurrences");
    }
    config[pattern] = {.on = type == "1", .count = n};
  }
  return config;
}

std::vector<RecomputePattern> recompute_subgraphs(Graph& joint, GradientResult& gradients,
                                                  const RecomputeConfig& config, bool cheap_by_default) {
  // Found once, before any is applied, so that a pattern's string does not depend on which others
  // the config turns on.
  struct Occurrence {
    const Value* saved;
    std::string pattern;
    bool cheap;
  };
  const std::vector<const Node*> order = gradients.forward_nodes;  // the copies are backward nodes
  std::vector<Occurrence> occurrences;
  {
    const SubgraphFinder finder(gradients);
    for (const Node* n : order)
      for (const Value* saved : n->outputs()) {
        if (!finder.is_saved(saved) || is_small(*saved)) continue;
        const std::optional<std::vector<const Node*>> nodes = finder.find(*saved, order);
        if (!nodes) continue;
        occurrences.push_back({saved, pattern_of(*nodes), is_cheap(*nodes, *saved)});
        break;  // the node's other outputs belong to the same subgraph
      }
  }
  std::vector<RecomputePattern> rows;
  const auto row_for = [&](const std::string& pattern) -> RecomputePattern& {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const RecomputePattern& r) { return r.pattern == pattern; });
    if (it != rows.end()) return *it;
    RecomputePattern row{.pattern = pattern};
    if (auto c = config.find(pattern); c != config.end())
      row.config = fmt(c->second.on ? 1 : 0, ":", c->second.count);
    return rows.emplace_back(std::move(row));
  };
  for (const Occurrence& o : occurrences) {
    RecomputePattern& row = row_for(o.pattern);
    if (row.found++ == 0) {
      row.freed = describe(*o.saved);
      row.freed_bytes = to_string(bytes_of(*o.saved));
      row.cheap = o.cheap;
    }
    const auto c = config.find(o.pattern);
    const bool requested = c != config.end() && c->second.on && (c->second.count < 0 || row.applied < c->second.count);
    if (!requested && (c != config.end() || !o.cheap || !cheap_by_default)) continue;
    // Found again on the graph as the earlier copies left it: where one of them stopped saving a
    // value this subgraph read, the subgraph now reaches back through that value's producers.
    const SubgraphFinder finder(gradients);
    if (!finder.is_saved(o.saved)) continue;  // an earlier copy made it already
    const std::optional<std::vector<const Node*>> nodes = finder.find(*o.saved, order);
    if (!nodes || (!requested && !is_cheap(*nodes, *o.saved))) continue;
    recompute_subgraph(joint, gradients, *nodes);
    row.applied++;
  }
  for (const auto& [pattern, choice] : config) row_for(pattern);
  return rows;
}

}  // namespace trainrt
