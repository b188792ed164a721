#include "trainrt/ops/control_flow_args.h"

#include "trainrt/core/error.h"
#include "trainrt/ir/control_flow.h"

namespace trainrt {

const Graph& body_of(const Node& node, const char* name) {
  const Attribute* a = node.attr(name);
  if (!a || a->kind != Attribute::Kind::kGraph || !a->g)
    throw InvalidModel(fmt(node.describe(), ": has no graph attribute '", name, "'"));
  return *a->g;
}

namespace {

size_t implicit_of(const Node& node, size_t explicit_min) {
  const size_t implicit = implicit_inputs(node);
  if (implicit + explicit_min > node.inputs().size())
    throw InvalidModel(fmt(node.describe(), ": ", kImplicitInputsAttr, " = ", implicit, " but the node has ",
                           node.inputs().size(), " inputs"));
  return implicit;
}

std::vector<bool> directions(const Node& node, const char* name, size_t count) {
  std::vector<int64_t> given = node.attr_ints(name, std::vector<int64_t>(count, 0));
  if (given.size() != count)
    throw ShapeError(fmt(node.describe(), ": attribute '", name, "' has ", given.size(), " entries, expected ", count));
  std::vector<bool> reverse;
  for (int64_t d : given) {
    if (d != 0 && d != 1) throw ShapeError(fmt(node.describe(), ": attribute '", name, "' holds ", d, ", expected 0 or 1"));
    reverse.push_back(d == 1);
  }
  return reverse;
}

std::vector<int64_t> axes(const Node& node, const char* name, size_t count) {
  std::vector<int64_t> given = node.attr_ints(name, std::vector<int64_t>(count, 0));
  if (given.size() != count)
    throw ShapeError(fmt(node.describe(), ": attribute '", name, "' has ", given.size(), " entries, expected ", count));
  return given;
}

}  // namespace

LoopSignature loop_signature(const Node& node) {
  LoopSignature s;
  s.implicit = implicit_of(node, 2);
  s.carried = node.inputs().size() - 2 - s.implicit;
  const Graph& body = body_of(node, "body");
  if (body.inputs().size() != 2 + s.carried + s.implicit)
    throw ShapeError(fmt(node.describe(), ": its body takes ", body.inputs().size(), " inputs, expected ",
                         2 + s.carried, " (iteration number, condition, ", s.carried, " loop-carried values)",
                         s.implicit ? fmt(" and ", s.implicit, " enclosing values") : ""));
  if (body.outputs().size() < 1 + s.carried)
    throw ShapeError(fmt(node.describe(), ": its body gives ", body.outputs().size(), " outputs, expected at least ",
                         1 + s.carried, " (condition and ", s.carried, " loop-carried values)"));
  s.scan_outputs = body.outputs().size() - 1 - s.carried;
  if (static_cast<size_t>(node.num_outputs()) != s.carried + s.scan_outputs)
    throw ShapeError(fmt(node.describe(), ": has ", node.num_outputs(), " outputs, its body gives ",
                         s.carried + s.scan_outputs, " after the condition"));
  return s;
}

ScanSignature scan_signature(const Node& node) {
  ScanSignature s;
  s.batched = node.opset() < 9;
  s.first_state = s.batched ? 1 : 0;
  const int64_t m = node.attr_int("num_scan_inputs", -1);
  if (m < 1) throw ShapeError(fmt(node.describe(), ": attribute 'num_scan_inputs' must be at least 1, got ", m));
  s.scan_inputs = static_cast<size_t>(m);
  s.implicit = implicit_of(node, s.first_state + s.scan_inputs);
  s.states = node.inputs().size() - s.first_state - s.scan_inputs - s.implicit;
  const Graph& body = body_of(node, "body");
  if (body.inputs().size() != s.states + s.scan_inputs + s.implicit)
    throw ShapeError(fmt(node.describe(), ": its body takes ", body.inputs().size(), " inputs, expected ",
                         s.states + s.scan_inputs, " (", s.states, " states and ", s.scan_inputs, " scan inputs)",
                         s.implicit ? fmt(" and ", s.implicit, " enclosing values") : ""));
  if (body.outputs().size() < s.states || static_cast<size_t>(node.num_outputs()) != body.outputs().size())
    throw ShapeError(fmt(node.describe(), ": has ", node.num_outputs(), " outputs and its body ",
                         body.outputs().size(), ", expected the same number, at least ", s.states, " (the states)"));
  s.scan_outputs = body.outputs().size() - s.states;
  if (s.batched) {
    s.input_reverse = directions(node, "directions", s.scan_inputs);
    s.input_axes.assign(s.scan_inputs, 0);
    s.output_reverse.assign(s.scan_outputs, false);
    s.output_axes.assign(s.scan_outputs, 0);
  } else {
    s.input_reverse = directions(node, "scan_input_directions", s.scan_inputs);
    s.output_reverse = directions(node, "scan_output_directions", s.scan_outputs);
    s.input_axes = axes(node, "scan_input_axes", s.scan_inputs);
    s.output_axes = axes(node, "scan_output_axes", s.scan_outputs);
  }
  return s;
}

}  // namespace trainrt
