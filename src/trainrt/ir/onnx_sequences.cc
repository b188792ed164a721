#include "trainrt/ir/onnx_sequences.h"

#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_tensor.h"

namespace trainrt {
namespace {

// Constant `name`: a Constant node's value / value_int (a scalar) / value_ints (1-D), or an
// initializer; undefined when it is neither.
Tensor constant_value(const std::string& name, const std::vector<onnx::NodeProto>& nodes, const onnx::GraphProto& graph,
                      const std::filesystem::path& dir) {
  for (const onnx::NodeProto& n : nodes) {
    if (n.op_type != "Constant" || n.output.empty() || n.output[0] != name) continue;
    for (const onnx::AttributeProto& a : n.attribute) {
      if (a.name == "value_int") return Tensor::scalar<int64_t>(a.i);
      if (a.name == "value_ints") return Tensor::from_i64(a.ints);
      if (a.name == "value") return tensor_from_onnx(a.t, dir);
    }
    return {};
  }
  for (const onnx::TensorProto& t : graph.initializer)
    if (t.name == name) return tensor_from_onnx(t, dir);
  return {};
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const onnx::AttributeProto& a : n.attribute)
    if (a.name == name) return a.i;
  return fallback;
}

onnx::AttributeProto ints_attr(const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto a;
  a.name = name;
  a.type = v.size() == 1 && name == "value_int" ? onnx::kAttrInt : onnx::kAttrInts;
  if (a.type == onnx::kAttrInt) a.i = v[0];
  else a.ints = std::move(v);
  return a;
}

onnx::NodeProto constant(const std::string& output, const std::string& attr, std::vector<int64_t> v) {
  onnx::NodeProto c;
  c.op_type = "Constant";
  c.name = output;
  c.output = {output};
  c.attribute.push_back(ints_attr(attr, std::move(v)));
  return c;
}

// Whether a computed split is the parts' sizes (1-D), not one size for equal parts (a scalar): the
// file declares it 1-D (value_info, a graph input), or a Concat makes it (never a scalar; the
// exporter concatenates the sizes it read with .tolist()).
bool computed_sizes(const std::string& name, const std::vector<onnx::NodeProto>& nodes, const onnx::GraphProto& graph) {
  for (const auto* infos : {&graph.value_info, &graph.input})
    for (const onnx::ValueInfoProto& v : *infos)
      if (v.name == name && v.type.kind == onnx::TypeProto::Kind::kTensor && v.type.has_shape)
        return v.type.dims.size() == 1;
  for (const onnx::NodeProto& n : nodes)
    if (!n.output.empty() && n.output[0] == name) return n.op_type == "Concat" && n.domain.empty();
  return false;
}

onnx::NodeProto node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                     const std::string& output) {
  onnx::NodeProto n;
  n.op_type = op;
  n.name = name;
  n.input = std::move(inputs);
  n.output = {output};
  return n;
}

// Part p of x along `axis` where the graph computes the 1-D sizes s (torch.split by sizes read
// from the data, as MoE experts split their tokens by per-expert counts):
//   begin = sum(s[:p]), end = begin + s[p]  (p < 0 counts from the end, as ONNX Slice does)
//   part  = Slice(x, begin, end, axis)
// all evaluated when the step runs.
void append_computed_part(std::vector<onnx::NodeProto>& out, const std::string& x, const std::string& sizes, int64_t p,
                          int64_t axis, const std::string& base, const std::string& part) {
  constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max();
  out.push_back(node("Cast", base + "/sizes", {sizes}, base + "/sizes"));
  onnx::AttributeProto to;
  to.name = "to", to.type = onnx::kAttrInt, to.i = 7;  // INT64
  out.back().attribute.push_back(to);
  out.push_back(constant(base + "/zero", "value_ints", {0}));
  out.push_back(constant(base + "/p", "value_ints", {p}));
  out.push_back(constant(base + "/p1", "value_ints", {p == -1 ? kToEnd : p + 1}));
  std::string begin = base + "/zero";
  if (p != 0) {
    out.push_back(node("Slice", base + "/before", {base + "/sizes", base + "/zero", base + "/p"}, base + "/before"));
    out.push_back(node("ReduceSum", base + "/begin", {base + "/before", base + "/zero"}, base + "/begin"));
    onnx::AttributeProto keep;
    keep.name = "keepdims", keep.type = onnx::kAttrInt, keep.i = 1;
    out.back().attribute.push_back(keep);
    begin = base + "/begin";
  }
  out.push_back(node("Slice", base + "/size", {base + "/sizes", base + "/p", base + "/p1"}, base + "/size"));
  out.push_back(node("Add", base + "/end", {begin, base + "/size"}, base + "/end"));
  out.push_back(constant(base + "/axes", "value_ints", {axis}));
  out.push_back(node("Slice", base, {x, begin, base + "/end", base + "/axes"}, part));
}

}  // namespace

void lower_split_sequences(std::vector<onnx::NodeProto>& nodes, const onnx::GraphProto& graph,
                           const std::filesystem::path& dir) {
  std::map<std::string, size_t> splits;  // sequence value -> its SplitToSequence node
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op_type == "SplitToSequence" && nodes[i].domain.empty() && nodes[i].output.size() == 1)
      splits[nodes[i].output[0]] = i;
  if (splits.empty()) return;
  // Only sequences that SequenceAt alone reads are lowered.
  std::set<std::string> other_readers;
  for (const onnx::NodeProto& n : nodes)
    for (size_t k = 0; k < n.input.size(); ++k)
      if (splits.count(n.input[k]) && !(n.op_type == "SequenceAt" && k == 0)) other_readers.insert(n.input[k]);

  std::vector<onnx::NodeProto> out;
  std::set<size_t> lowered;
  for (const onnx::NodeProto& n : nodes) {
    auto it = n.op_type == "SequenceAt" && !n.input.empty() ? splits.find(n.input[0]) : splits.end();
    if (it == splits.end() || other_readers.count(it->first)) {
      out.push_back(n);
      continue;
    }
    const onnx::NodeProto& split = nodes[it->second];
    const std::string where = fmt("node '", n.name, "' (SequenceAt of SplitToSequence '", split.name, "')");
    const Tensor position = n.input.size() > 1 ? constant_value(n.input[1], nodes, graph, dir) : Tensor();
    if (!position.defined() || position.numel() != 1)
      throw UnsupportedOp(fmt(where, ": the position is not a constant of the file"));
    const int64_t p = position.to_i64(0), axis = int_attr(split, "axis", 0);
    const bool keepdims = int_attr(split, "keepdims", 1) != 0;
    const bool sizes_given = split.input.size() > 1 && !split.input[1].empty();
    const std::string base = n.output[0] + "/part";
    const std::string x = split.input[0];
    if (!sizes_given) {  // unbind: parts of size 1
      out.push_back(constant(base + "/index", "value_int", {p}));
      onnx::NodeProto gather;
      gather.op_type = "Gather";
      gather.name = base;
      gather.input = {x, base + "/index"};
      gather.output = {keepdims ? base + "/rows" : n.output[0]};
      onnx::AttributeProto a;
      a.name = "axis", a.type = onnx::kAttrInt, a.i = axis;
      gather.attribute.push_back(a);
      out.push_back(gather);
      if (keepdims) {  // the part keeps the axis, of size 1
        out.push_back(constant(base + "/axes", "value_ints", {axis}));
        onnx::NodeProto unsqueeze;
        unsqueeze.op_type = "Unsqueeze", unsqueeze.name = base + "/keep";
        unsqueeze.input = {base + "/rows", base + "/axes"};
        unsqueeze.output = {n.output[0]};
        out.push_back(unsqueeze);
      }
      lowered.insert(it->second);
      continue;
    }
    const Tensor split_value = constant_value(split.input[1], nodes, graph, dir);
    if (!split_value.defined()) {  // computed by the graph: sizes known when the step runs
      if (!computed_sizes(split.input[1], nodes, graph))
        throw UnsupportedOp(fmt(where, ": the split is computed by the graph and not known to be 1-D (the parts' "
                                       "sizes); equal parts of a computed size are not supported"));
      append_computed_part(out, x, split.input[1], p, axis, base, n.output[0]);
      lowered.insert(it->second);
      continue;
    }
    if (split_value.numel() == 0) throw UnsupportedOp(fmt(where, ": the split is empty"));
    const std::vector<int64_t> sizes = split_value.to_i64_vector();
    int64_t begin = 0, end = 0;
    if (split_value.rank() == 0) {  // a scalar: equal parts of that size, the last may be shorter (Slice clamps)
      if (p < 0) throw UnsupportedOp(fmt(where, ": a negative position among parts of equal size"));
      begin = p * sizes[0], end = begin + sizes[0];
    } else {  // the parts' sizes
      const int64_t parts = static_cast<int64_t>(sizes.size());
      if (p < -parts || p >= parts) throw InvalidModel(fmt(where, ": position ", p, " is out of range for ", parts, " parts"));
      const int64_t q = p < 0 ? p + parts : p;
      begin = std::accumulate(sizes.begin(), sizes.begin() + q, int64_t{0});
      end = begin + sizes[static_cast<size_t>(q)];
    }
    out.push_back(constant(base + "/begin", "value_ints", {begin}));
    out.push_back(constant(base + "/end", "value_ints", {end}));
    out.push_back(constant(base + "/axes", "value_ints", {axis}));
    onnx::NodeProto slice;
    slice.op_type = "Slice", slice.name = base;
    slice.input = {x, base + "/begin", base + "/end", base + "/axes"};
    slice.output = {n.output[0]};  // keepdims is ignored when a split is given (ONNX)
    out.push_back(slice);
    lowered.insert(it->second);
  }
  // The lowered SplitToSequence nodes go (nothing reads them any more).
  std::vector<onnx::NodeProto> kept;
  for (onnx::NodeProto& n : out) {
    auto it = n.op_type == "SplitToSequence" && n.output.size() == 1 ? splits.find(n.output[0]) : splits.end();
    if (it != splits.end() && lowered.count(it->second)) continue;
    kept.push_back(std::move(n));
  }
  nodes = std::move(kept);
}

}  // namespace trainrt
