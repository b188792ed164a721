#include "trainrt/passes/padding_elimination.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/valid_rows.h"
#include "trainrt/passes/graph_edit.h"

namespace trainrt {
namespace {

bool is_onnx(const Node& n, std::string_view op) { return n.domain() == kOnnxDomain && n.op_type() == op; }
bool is_ours(const Node& n, std::string_view op) { return n.domain() == kTrainrtDomain && n.op_type() == op; }

const std::set<std::string_view>& unary_ops() {
  static const std::set<std::string_view> ops = {
      "Relu", "Gelu", "Tanh", "Sigmoid", "Cast", "Neg", "Exp", "Log", "Abs", "Sqrt", "Erf", "Softplus", "LeakyRelu",
      "Elu", "HardSigmoid", "HardSwish", "Reciprocal", "FastGelu", "Identity", "Sin", "Cos", "Not", "Dropout",
      "Softsign", "Selu", "Celu", "Mish", "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf", "StopGradient"};
  return ops;
}
const std::set<std::string_view>& binary_ops() {
  static const std::set<std::string_view> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where",
                                                 "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                                 "And", "Or", "Xor", "Mod", "PRelu"};
  return ops;
}
bool is_elementwise(const Node& n) {
  return (n.domain() == kOnnxDomain || n.op_type() == "StopGradient") &&
         (unary_ops().count(n.op_type()) || binary_ops().count(n.op_type()));
}
bool is_view(const Node& n) {
  static const std::set<std::string_view> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  return n.domain() == kOnnxDomain && views.count(n.op_type());
}
bool is_loss(const Node& n) { return is_onnx(n, "SoftmaxCrossEntropyLoss") || is_onnx(n, "NegativeLogLikelihoodLoss"); }

std::string symbol(const Dim& d) { return d.is_static() ? std::string() : d.symbol; }

// The token dims: (b, s) of the ids, "b*s" (capture's name for their product, sorted).
struct Tokens {
  std::string b, s, flat;
};

// The i64 values of a constant input (an initializer), or nothing.
std::optional<std::vector<int64_t>> constant_ints(const Value* v) {
  if (!v || !v->is_initializer()) return std::nullopt;
  const Tensor& t = v->data;
  std::vector<int64_t> out;
  if (t.dtype() == DType::kI64) {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<int64_t>()[i]);
  } else if (t.dtype() == DType::kI32) {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<int32_t>()[i]);
  } else {
    return std::nullopt;
  }
  return out;
}

// The analysis: which nodes run on the kept rows, over the dims capture declared.
class Region {
 public:
  explicit Region(Graph& g) : g_(g) {}

  // Empty when the rewrite may run; else why not.
  std::string analyse() {
    for (Node* n : g_.topological_order()) {
      set_dims(*n);
      if (!tokens_ && is_seed_candidate(*n)) {
        const Shape& ids = dims(n->input(1));
        const std::string b = symbol(ids.dims[0]), s = symbol(ids.dims[1]);
        std::vector<std::string> sorted = {b, s};
        std::sort(sorted.begin(), sorted.end());
        tokens_ = Tokens{b, s, sorted[0] + "*" + sorted[1]};
      }
      if (!tokens_) continue;
      if (is_seed(*n)) {
        seeds_.insert(n);
        join(*n);
        continue;
      }
      bool reads_region = false, reads_tainted = false, token_taint = false;
      for (const Value* v : n->inputs()) {
        reads_region |= region_.count(v) > 0;
        reads_tainted |= tainted_.count(v) > 0;
        token_taint |= tainted_.count(v) > 0 && lead(v) > 0;
      }
      if ((reads_region || token_taint) && row_wise(*n)) {
        join(*n);
      } else if (reads_region || reads_tainted) {
        const bool exact = is_loss(*n) && is_region_loss(*n);  // counts the kept rows alone: eager's value
        for (const Value* o : n->outputs())
          if (o && !exact) tainted_.insert(o);
        outside_.push_back(n);
      }
    }
    if (!tokens_) return "no embedding of token ids (B, S) with symbolic dims";
    if (nodes_.empty()) return "no row-wise op reads the embeddings";
    for (Node* n : outside_)
      if (std::string why = check_outside(*n); !why.empty()) return why;
    for (const auto& [v, l] : region_)
      if ((exits(v) || is_graph_output(g_, v)) && !is_floating(v->dtype))
        return "'" + v->name + "' leaves the kept rows as " + std::string(dtype_name(v->dtype)) +
               " (the scatter back takes floating-point values)";
    return find_mask();
  }

  Graph& g_;
  std::optional<Tokens> tokens_;
  std::map<const Value*, Shape> dims_;
  std::map<const Value*, int> region_;  // region value -> its lead (token dims: 2 for (B, S), 1 for (B*S))
  std::set<const Value*> tainted_;      // computed from region values outside the region
  std::vector<Node*> nodes_;            // region nodes, in topological order
  std::set<const Node*> in_region_;
  std::vector<Node*> outside_;          // nodes outside the region reading region or tainted values
  std::vector<Node*> losses_;           // token-row losses reading a region value
  std::vector<Node*> attentions_;
  std::set<const Node*> seeds_;         // the embeddings of token ids
  Value* mask_ = nullptr;

  const Shape& dims(const Value* v) const {
    static const Shape unknown = Shape::unknown_rank();
    auto it = dims_.find(v);
    return it != dims_.end() ? it->second : v ? v->shape : unknown;
  }

  int lead(const Value* v) const {
    const Shape& s = dims(v);
    if (!v || !s.rank_known || !tokens_) return 0;
    if (s.rank() >= 2 && symbol(s.dims[0]) == tokens_->b && symbol(s.dims[1]) == tokens_->s) return 2;
    if (s.rank() >= 1 && symbol(s.dims[0]) == tokens_->flat) return 1;
    return 0;
  }

  bool exits(const Value* v) const {
    for (const Use& u : v->uses)
      if (!in_region_.count(u.node) && !(is_loss(*u.node) && u.input_index == 0 && is_region_loss(*u.node))) return true;
    return false;
  }

  // A value's dims: what capture declared, else for an elementwise op its inputs' broadcast
  // (capture declares the FX node's value, not a translation's intermediates: Sqrt of rsqrt).
  void set_dims(const Node& n) {
    for (int o = 0; o < n.num_outputs(); ++o) {
      const Value* v = n.output(o);
      if (!v) continue;
      if (v->declared.rank_known) {
        dims_[v] = v->declared;
        continue;
      }
      if (!is_elementwise(n)) continue;
      std::optional<Shape> s;
      for (const Value* in : n.inputs()) {
        if (!in) continue;
        if (n.op_type() == "Dropout" && in != n.input(0)) break;
        try {
          s = s ? broadcast_shapes(*s, dims(in)) : dims(in);
        } catch (const Error&) {
          s.reset();
          break;
        }
      }
      if (s) dims_[v] = *s;
    }
  }

  bool is_seed_candidate(const Node& n) const {
    if (!(is_onnx(n, "Gather") && n.attr_int("axis", 0) == 0) && !is_ours(n, "Embedding")) return false;
    const Shape& ids = dims(n.input(1));
    const Shape& table = dims(n.input(0));
    return ids.rank_known && ids.rank() == 2 && !ids.dims[0].is_static() && !ids.dims[1].is_static() &&
           !ids.dims[0].symbol.empty() && !ids.dims[1].symbol.empty() && ids.dims[0].symbol != ids.dims[1].symbol &&
           table.rank_known && table.rank() == 2 && !tainted_.count(n.input(0)) &&
           (n.input(1)->dtype == DType::kI64 || n.input(1)->dtype == DType::kI32);
  }
  bool is_seed(const Node& n) const {
    return is_seed_candidate(n) && lead(n.input(1)) == 2 && !region_.count(n.input(1)) && !tainted_.count(n.input(1));
  }

  void join(Node& n) {
    nodes_.push_back(&n);
    in_region_.insert(&n);
    for (const Value* o : n.outputs())
      if (o) region_[o] = lead(o);
  }

  // How operand `v` of an elementwise node with token-major output `out` reads per row: 0 per-row
  // constant, 1 token-major, -1 neither.
  int operand_kind(const Value* v, const Value* out) const {
    if (!v) return 0;
    const Shape& s = dims(v);
    const Shape& o = dims(out);
    const int lo = lead(out);
    if (!s.rank_known) return -1;
    if (const int l = lead(v); l > 0) return s.rank() - l == o.rank() - lo ? 1 : -1;
    const int64_t k = s.rank() - (o.rank() - lo);  // dims of v aligned with the token dims
    bool ones = true, tokens = true;
    for (int64_t i = 0; i < k; ++i) {
      const Dim& d = s.dims[static_cast<size_t>(i)];
      const int64_t pos = lo - k + i;  // which token dim it meets
      ones &= d == Dim(1);
      const std::string& want = lo == 1 ? tokens_->flat : pos == 0 ? tokens_->b : tokens_->s;
      tokens &= d == Dim(1) || symbol(d) == want;
    }
    if (k <= 0 || ones) return 0;
    return tokens && k <= lo ? 1 : -1;
  }

  static int64_t axis_of(const Node& n, int64_t fallback, int64_t rank) {
    int64_t a = n.attr_int("axis", fallback);
    return a < 0 ? a + rank : a;
  }

  // Whether n works on each token row alone, reading a token-major value.
  bool row_wise(const Node& n) const {
    const Value* out = n.output(0);
    if (!out || lead(out) == 0) return false;
    const int lo = lead(out);
    const int64_t rank = dims(out).rank();
    for (const Value* o : n.outputs())
      if (o && lead(o) == 0 && (!o->uses.empty() || is_graph_output(g_, o))) return false;
    const std::string& op = n.op_type();
    if (is_elementwise(n)) {
      if (op == "Dropout") return operand_kind(n.input(0), out) == 1;
      for (const Value* in : n.inputs())
        if (operand_kind(in, out) < 0) return false;
      return true;
    }
    if ((is_onnx(n, "Softmax") || is_onnx(n, "LogSoftmax")) && operand_kind(n.input(0), out) == 1)
      return axis_of(n, -1, rank) >= lo;
    if (op.ends_with("LayerNormalization") && operand_kind(n.input(0), out) == 1) {
      for (int o = 1; o < n.num_outputs(); ++o)
        if (n.output(o) && (!n.output(o)->uses.empty() || is_graph_output(g_, n.output(o)))) return false;
      for (int i = 1; i < n.num_inputs(); ++i)
        if (operand_kind(n.input(i), out) != 0) return false;
      return axis_of(n, -1, rank) >= lo;
    }
    if (n.domain() == kOnnxDomain && op.starts_with("Reduce") && operand_kind(n.input(0), out) >= 0 &&
        lead(n.input(0)) == lo) {
      const int64_t in_rank = dims(n.input(0)).rank();
      std::optional<std::vector<int64_t>> axes =
          n.has_attr("axes") ? std::optional(n.attr_ints("axes", {})) : constant_ints(n.input(1));
      if (!axes || axes->empty()) return false;
      for (int64_t a : *axes)
        if ((a < 0 ? a + in_rank : a) < lo) return false;
      return true;
    }
    const bool product = is_ours(n, "FusedMatMul") || is_onnx(n, "MatMul") || is_onnx(n, "Gemm");
    if (product) {
      const Value *a = n.input(0), *w = n.input(1);
      if (lead(a) == 0 || region_.count(w) || tainted_.count(w) || lead(w) > 0) return false;
      if (n.attr_int("transA", 0) != 0 || n.attr_int("transBatchA", 0) != 0 || n.attr_int("transBatchB", 0) != 0)
        return false;
      if (!dims(w).rank_known || dims(w).rank() != 2 || dims(a).rank() - lead(a) < 1) return false;
      return !n.input(2) || operand_kind(n.input(2), out) == 0;
    }
    if (is_view(n) && lead(n.input(0)) > 0) {
      for (size_t d = static_cast<size_t>(lo); d < dims(out).dims.size(); ++d)
        if (!dims(out).dims[d].is_static()) return false;
      return true;
    }
    if (is_onnx(n, "Split") && lead(n.input(0)) == lo) return axis_of(n, 0, rank) >= lo;
    if (is_onnx(n, "Transpose") && lead(n.input(0)) == lo) {
      const std::vector<int64_t> perm = n.attr_ints("perm", {});
      for (int64_t i = 0; i < lo; ++i)
        if (static_cast<int64_t>(perm.size()) <= i || perm[static_cast<size_t>(i)] != i) return false;
      return true;
    }
    return false;
  }

  bool is_region_loss(const Node& n) const {
    const Value *x = n.input(0), *labels = n.input(1);
    const std::string reduction = n.attr_string("reduction", "mean");
    if (!region_.count(x) || lead(x) != 1 || dims(x).rank() != 2 || !n.has_attr("ignore_index")) return false;
    if ((reduction != "mean" && reduction != "sum") || !labels || !labels->shape.rank_known || labels->shape.rank() != 1)
      return false;
    for (int o = 1; o < n.num_outputs(); ++o)
      if (n.output(o) && (!n.output(o)->uses.empty() || is_graph_output(g_, n.output(o)))) return false;
    return !tainted_.count(labels) && !region_.count(labels) && (!n.input(2) || !tainted_.count(n.input(2)));
  }

  // Whether an axis of v is a static feature dim (never the tokens, which are symbolic).
  bool static_axis(const Value* v, int64_t axis) const {
    const Shape& s = dims(v);
    if (!s.rank_known) return false;
    if (axis < 0) axis += s.rank();
    return axis >= 0 && axis < s.rank() && s.dims[static_cast<size_t>(axis)].is_static();
  }

  // Why a node outside the region that reads what the region computed may see dropped rows
  // reach a kept one; empty when it works position by position (or is a token-row loss or the
  // attention, checked with the mask).
  std::string check_outside(Node& n) {
    if (is_loss(n) && is_region_loss(n)) {
      losses_.push_back(&n);
      return {};
    }
    const Value* x = n.input(0);
    if (is_elementwise(n) || is_view(n) || is_onnx(n, "Transpose") || is_onnx(n, "Expand")) return {};
    if (is_ours(n, "ScaledDotProductAttention")) {
      if (!n.input(3)) return "attention '" + n.name() + "' has no mask: it may attend dropped tokens";
      attentions_.push_back(&n);
      return {};
    }
    if ((is_onnx(n, "Softmax") || is_onnx(n, "LogSoftmax")) && static_axis(x, n.attr_int("axis", -1))) return {};
    if (is_onnx(n, "Concat") && n.num_inputs() == 1) return {};  // a copy (an attention cache with no past)
    if ((is_onnx(n, "Split") && static_axis(x, n.attr_int("axis", 0))) ||
        (is_onnx(n, "Concat") && std::all_of(n.inputs().begin(), n.inputs().end(), [&](const Value* v) {
           return static_axis(v, n.attr_int("axis", 0));
         })))
      return {};
    if (is_onnx(n, "Gather") && !tainted_.count(n.input(1)) && !region_.count(n.input(1)) &&
        static_axis(x, n.attr_int("axis", 0)))
      return {};
    if (n.domain() == kOnnxDomain && n.op_type().starts_with("Reduce")) {
      std::optional<std::vector<int64_t>> axes =
          n.has_attr("axes") ? std::optional(n.attr_ints("axes", {})) : constant_ints(n.input(1));
      if (axes && !axes->empty() && std::all_of(axes->begin(), axes->end(), [&](int64_t a) { return static_axis(x, a); }))
        return {};
    }
    if (is_onnx(n, "Slice")) {
      std::optional<std::vector<int64_t>> axes = constant_ints(n.input(3));
      if (axes && std::all_of(axes->begin(), axes->end(), [&](int64_t a) { return static_axis(x, a); })) return {};
    }
    return "'" + n.name() + "' (" + n.op_type() + ") reads the embeddings' values across tokens";
  }

  bool depends_on(const Value* v, const Value* target, std::map<const Value*, bool>& memo) const {
    if (!v) return false;
    if (v == target) return true;
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    memo[v] = false;
    bool found = false;
    if (v->producer)
      for (const Value* in : v->producer->inputs()) found = found || depends_on(in, target, memo);
    return memo[v] = found;
  }

  // The attention mask: the one rank-2 graph input every attention's mask is computed from.
  std::string find_mask() {
    if (attentions_.empty()) return "no attention over the embeddings (nothing needs the padding kept)";
    std::vector<Value*> candidates;
    for (Value* in : g_.inputs()) {
      if (in->is_initializer() || !in->shape.rank_known || in->shape.rank() != 2) continue;
      bool feeds_all = true;
      std::map<const Value*, bool> memo;
      for (const Node* a : attentions_) feeds_all = feeds_all && depends_on(a->input(3), in, memo);
      bool is_ids = false;
      for (const Node* n : nodes_)
        if (is_seed(*n)) is_ids = is_ids || depends_on(n->input(1), in, memo);
      if (feeds_all && !is_ids) candidates.push_back(in);
    }
    if (candidates.size() != 1)
      return candidates.empty() ? "no attention mask input feeds every attention's mask"
                                : "more than one input feeds the attention masks";
    mask_ = candidates[0];
    return {};
  }
};

// The rewrite of an analysed region onto R kept rows.
class Rewrite {
 public:
  explicit Rewrite(Region& r) : r_(r), g_(r.g_) {}

  void run() {
    build_rows();
    for (Node* n : r_.nodes_) rebuild(*n);
    for (Node* loss : r_.losses_) {
      loss->replace_input(0, mapped_.at(loss->input(0)));
      loss->replace_input(1, gather_rows(loss->input(1), "/kept"));
      infer_and_store(*loss);
    }
    // Values read outside the region, or model outputs, get the full rows back.
    std::vector<std::pair<Value*, Value*>> outputs;  // (old output, padded)
    for (Node* n : r_.nodes_)
      for (Value* v : n->outputs()) {
        if (!v) continue;
        const std::vector<Use> uses = v->uses;
        for (const Use& u : uses)
          if (!r_.in_region_.count(u.node)) u.node->replace_input(u.input_index, pad_back(v, false));
        if (is_graph_output(g_, v)) outputs.emplace_back(v, pad_back(v, true));
      }
    std::vector<Node*> old = r_.nodes_;
    std::reverse(old.begin(), old.end());
    for (Node* n : old) g_.remove_node(n);  // a model output's value loses its producer: given back below
    for (const auto& [out, padded] : outputs) become(g_, padded, out);
  }

 private:
  Region& r_;
  Graph& g_;
  std::map<const Value*, Value*> mapped_;    // region value -> its R-row value
  std::map<const Value*, Value*> entered_;   // outside value -> its R rows
  std::map<std::pair<const Value*, bool>, Value*> padded_;  // (region value, zeroed) -> full rows again
  std::map<int64_t, Value*> keep_columns_;   // rank -> keep (N, 1, ...) as bool
  Value* rows_ = nullptr;                    // (R) i64, the kept positions
  Value* keep_ = nullptr;                    // (N) bool
  Value* token_shape_ = nullptr;             // (2) i64: B, S
  Value* n_ = nullptr;                       // (1) i64: N = B * S

  std::string base(const Value* v) const { return v->name + "/kept"; }

  Value* shape_tail(Value* v, int64_t from, const std::string& name) {
    Value* shape = add_op(g_, "Shape", {v}, name + "/shape");
    return add_op(g_, "Slice", {shape, i64_constant(g_, name + "/from", {from}),
                                i64_constant(g_, name + "/to", {std::numeric_limits<int64_t>::max()})},
                  name + "/tail");
  }

  void build_rows() {
    Value* mask = r_.mask_;
    const std::string name = mask->name + "/kept_tokens";
    token_shape_ = add_op(g_, "Shape", {mask}, name + "/shape");
    n_ = add_op(g_, "ReduceProd", {token_shape_}, name + "/count", kOnnxDomain, {{"keepdims", Attribute::of_int(1)}});
    Value* flat = add_op(g_, "Reshape", {mask, i64_constant(g_, name + "/flat_shape", {-1})}, name + "/flat");
    keep_ = add_op(g_, "Cast", {flat}, name + "/keep", kOnnxDomain,
                   {{"to", Attribute::of_int(static_cast<int64_t>(dtype_to_onnx(DType::kBool)))}});
    for (Node* loss : r_.losses_) {  // a row some loss counts is kept, whatever the mask says
      Value* labels = loss->input(1);
      Tensor ignore = labels->dtype == DType::kI32 ? Tensor::scalar<int32_t>(static_cast<int32_t>(loss->attr_int("ignore_index", -100)))
                                                   : Tensor::scalar<int64_t>(loss->attr_int("ignore_index", -100));
      Value* ignored = add_op(g_, "Equal", {labels, g_.add_initializer(g_.unique_name(name + "/ignore"), ignore)},
                              name + "/ignored");
      Value* counted = add_op(g_, "Not", {ignored}, name + "/counted");
      keep_ = add_op(g_, "Or", {keep_, counted}, name + "/keep_or_counted");
    }
    Value* keep_i64 = add_op(g_, "Cast", {keep_}, name + "/keep_i64", kOnnxDomain,
                             {{"to", Attribute::of_int(static_cast<int64_t>(dtype_to_onnx(DType::kI64)))}});
    rows_ = add_op(g_, "ValidRows", {keep_i64}, name + "/rows", kTrainrtDomain,
                   {{"ignore_index", Attribute::of_int(0)}, {"multiple", Attribute::of_int(kValidRowsMultiple)}});
  }

  // v's rows (leading dims B, S or B*S) at the kept positions: (R, rest).
  Value* gather_rows(Value* v, std::string_view suffix) {
    const int l = std::max(r_.lead(v), 1);
    const int64_t rank = r_.dims(v).rank_known ? r_.dims(v).rank() : v->shape.rank();
    Value* flat = v;
    if (l == 2 || rank != 1) {
      Value* target = rank == l ? i64_constant(g_, v->name + "/rows_shape", {-1})
                                : add_op(g_, "Concat", {i64_constant(g_, v->name + "/rows_lead", {-1}),
                                                        shape_tail(v, l, v->name + "/rows")},
                                         v->name + "/rows_shape", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
      flat = add_op(g_, "Reshape", {v, target}, v->name + "/rows_flat");
    }
    return add_op(g_, "Gather", {flat, rows_}, v->name + std::string(suffix), kOnnxDomain,
                  {{"axis", Attribute::of_int(0)}});
  }

  // A token-major value from outside (an operand broadcast over the tokens is expanded to them).
  Value* enter(Value* v, const Value* out) {
    if (auto it = entered_.find(v); it != entered_.end()) return it->second;
    Value* x = v;
    const int lo = r_.lead(out);
    if (r_.lead(v) == 0) {  // (1, S, H), (S, H), (B, 1, H): to (B, S, H) first
      const Shape& s = r_.dims(v);
      const int64_t rest = r_.dims(out).rank() - lo;
      const int64_t k = s.rank() - rest;
      if (k < lo) {
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < lo - k; ++i) axes.push_back(i);
        x = add_op(g_, "Unsqueeze", {x, i64_constant(g_, v->name + "/token_axes", axes)}, v->name + "/token_dims");
      }
      Value* lead_dims = lo == 2 ? token_shape_ : n_;
      std::vector<int64_t> ones(static_cast<size_t>(rest), 1);
      Value* target = rest == 0 ? lead_dims
                                : add_op(g_, "Concat", {lead_dims, i64_constant(g_, v->name + "/ones", ones)},
                                         v->name + "/expand_shape", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
      x = add_op(g_, "Expand", {x, target}, v->name + "/per_token");
      Shape expanded = r_.dims(out);  // (B, S, rest) or (N, rest): gather_rows reads its lead
      for (size_t d = static_cast<size_t>(lo); d < expanded.dims.size(); ++d)
        expanded.dims[d] = s.dims[static_cast<size_t>(static_cast<int64_t>(d) - lo + k)];
      r_.dims_[x] = expanded;
    }
    return entered_[v] = gather_rows(x, "/kept");
  }

  // Input i of a rebuilt node: mapped, entered, or a per-row constant made to broadcast against
  // (R, rest) (its leading ones past one dropped). A weight, split sizes or axes stay as they are.
  Value* operand(Value* v, const Node& n, int i) {
    if (!v) return nullptr;
    if (auto it = mapped_.find(v); it != mapped_.end()) return it->second;
    const bool product = is_ours(n, "FusedMatMul") || is_onnx(n, "MatMul") || is_onnx(n, "Gemm");
    const bool rows_input = i == 0 || (product && i == 2) || (is_elementwise(n) && n.op_type() != "Dropout") ||
                            n.op_type().ends_with("LayerNormalization");
    if (!rows_input) return v;
    const Value* out = n.output(0);
    if (r_.lead(v) > 0 || r_.operand_kind(v, out) == 1) return enter(v, out);
    const Shape& s = r_.dims(v);
    const int64_t extra = s.rank_known ? s.rank() - (r_.dims(out).rank() - r_.lead(out)) - 1 : 0;
    if (extra <= 0) return v;
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < extra; ++a) axes.push_back(a);
    return add_op(g_, "Squeeze", {v, i64_constant(g_, v->name + "/token_ones", axes)}, v->name + "/per_row");
  }

  // The node's copy over R rows; its axes move by the token dims it lost.
  void rebuild(Node& n) {
    const std::string suffix = "/kept";
    std::vector<Value*> inputs;
    Node* copy = nullptr;
    const int lo = r_.lead(n.output(0));
    const int64_t shift = lo - 1;  // (B, S) -> (R): axes past the tokens move down by one
    if (r_.seeds_.count(&n)) {
      Value* ids = gather_rows(n.input(1), "/kept");
      copy = add_like(g_, n, {n.input(0), ids}, suffix);
    } else if (is_view(n)) {
      std::vector<int64_t> target = {-1};
      const Shape& out = r_.dims(n.output(0));
      for (size_t d = static_cast<size_t>(lo); d < out.dims.size(); ++d) target.push_back(out.dims[d].value);
      Value* x = operand(n.input(0), n, 0);
      copy = g_.add_node("Reshape", {x, i64_constant(g_, n.output(0)->name + "/rows_shape", target)},
                         {g_.unique_name(base(n.output(0)))});
      infer_and_store(*copy);
    } else {
      for (int i = 0; i < n.num_inputs(); ++i) inputs.push_back(operand(n.input(i), n, i));
      std::vector<std::pair<std::string, Attribute>> attrs;
      if (n.has_attr("axis")) {
        const int64_t a = n.attr_int("axis", 0);
        attrs.emplace_back("axis", Attribute::of_int(a < 0 ? a : a - shift));
      }
      if (is_onnx(n, "Transpose")) {
        std::vector<int64_t> perm = {0};
        const std::vector<int64_t> old = n.attr_ints("perm", {});
        for (size_t i = static_cast<size_t>(lo); i < old.size(); ++i) perm.push_back(old[i] - shift);
        attrs.emplace_back("perm", Attribute::of_ints(perm));
      }
      if (n.domain() == kOnnxDomain && n.op_type().starts_with("Reduce")) {
        const int64_t in_rank = r_.dims(n.input(0)).rank();
        std::vector<int64_t> axes = n.has_attr("axes") ? n.attr_ints("axes", {}) : *constant_ints(n.input(1));
        for (int64_t& a : axes) a = (a < 0 ? a + in_rank : a) - shift;
        if (n.has_attr("axes")) attrs.emplace_back("axes", Attribute::of_ints(axes));
        else inputs[1] = i64_constant(g_, n.name() + "/kept_axes", axes);
      }
      copy = add_like(g_, n, inputs, suffix, std::move(attrs));
    }
    for (int o = 0; o < n.num_outputs() && o < copy->num_outputs(); ++o)
      if (n.output(o) && copy->output(o)) mapped_[n.output(o)] = copy->output(o);
  }

  // (R, rest) back to the region value's own shape. The selection's padding rows (ops/valid_rows.h:
  // the first dropped tokens) come back to their own rows: finite values no kept row reads
  // (attention masks them; what comes back in is gathered by the kept rows) and no gradient
  // reaches (theirs are zero). A model output gets zeros there (`zeroed`), as documented.
  Value* pad_back(Value* v, bool zeroed) {
    if (auto it = padded_.find({v, zeroed}); it != padded_.end()) return it->second;
    Value* x = mapped_.at(v);
    const std::string name = v->name + "/padded";
    const int64_t rank = x->shape.rank();
    Value* tail = shape_tail(x, 1, name);
    const DType dtype = x->dtype;  // bf16 / f16 (autocast) are scattered in f32, which GatherGrad sums in
    const auto cast = [&](Value* t, DType to, const std::string& what) {
      return add_op(g_, "Cast", {t}, name + what, kOnnxDomain, {{"to", Attribute::of_int(dtype_to_onnx(to))}});
    };
    if (dtype != DType::kF32 && dtype != DType::kF64) x = cast(x, DType::kF32, "/f32");
    Value* full_shape = add_op(g_, "Concat", {n_, tail}, name + "/full_shape", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
    Value* full = add_op(g_, "GatherGrad", {full_shape, rows_, x}, name + "/scatter", kTrainrtDomain,
                         {{"axis", Attribute::of_int(0)}});
    Value* y = full;
    if (zeroed) {
      Value*& column = keep_columns_[rank];
      if (!column) {
        std::vector<int64_t> dims = {-1};
        dims.resize(static_cast<size_t>(rank), 1);
        column = add_op(g_, "Reshape", {keep_, i64_constant(g_, name + "/keep_dims", dims)}, keep_->name + "/column");
      }
      Tensor zero = x->dtype == DType::kF64 ? Tensor::scalar<double>(0.0) : Tensor::scalar<float>(0.0f);
      y = add_op(g_, "Where", {column, full, g_.add_initializer(g_.unique_name(name + "/zero"), zero)},
                 name + "/zeroed");
    }
    if (y->dtype != dtype) y = cast(y, dtype, "/narrowed");
    if (r_.region_.at(v) == 2) {
      Value* dims = add_op(g_, "Concat", {token_shape_, tail}, name + "/token_shape", kOnnxDomain,
                           {{"axis", Attribute::of_int(0)}});
      y = add_op(g_, "Reshape", {y, dims}, name);
    }
    return padded_[{v, zeroed}] = y;
  }
};

}  // namespace

bool PaddingElimination::apply_impl(Graph& graph) const {
  Region region(graph);
  reason_ = region.analyse();
  row_flops_ = 0;
  if (!reason_.empty()) return false;
  for (const Node* n : region.nodes_) {
    if (!is_ours(*n, "FusedMatMul") && !is_onnx(*n, "MatMul") && !is_onnx(*n, "Gemm")) continue;
    const Shape& w = n->input(1)->shape;
    if (w.rank_known && w.is_static()) row_flops_ += 2 * w.dims[0].value * w.dims[1].value;
  }
  Rewrite(region).run();
  reason_ = std::to_string(region.nodes_.size()) + " ops on the kept tokens";
  return true;
}

}  // namespace trainrt
