// `trainrt inspect MODEL.onnx [--dim NAME=VALUE]`: op histogram, parameters, shapes, planned memory.
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "cli_common.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/printer.h"
#include "trainrt/runtime/control_flow_kernels.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/plan/partition.h"
#include "trainrt/runtime/execution_plan.h"

namespace trainrt::cli {
namespace {

std::string op_name(const Node& n) { return n.domain().empty() ? n.op_type() : n.domain() + "::" + n.op_type(); }

// The nodes that neither are an op TrainRT lacks nor read what one makes, as a graph of their own
// whose outputs are what the rest reads: its shapes and memory can still be shown.
std::shared_ptr<Graph> supported_part(const Graph& graph) {
  std::set<const Value*> unknown_made;
  std::vector<const Node*> nodes;
  for (const Node* n : graph.topological_order()) {
    bool unknown = !OpRegistry::global().find(n->domain(), n->op_type());
    for (const Value* v : n->inputs()) unknown = unknown || unknown_made.count(v);
    if (unknown) unknown_made.insert(n->outputs().begin(), n->outputs().end());
    else nodes.push_back(n);
  }
  std::set<const Value*> made, outputs_set;
  for (const Node* n : nodes) made.insert(n->outputs().begin(), n->outputs().end());
  std::vector<const Value*> outputs;
  for (const Node* n : graph.topological_order())
    for (const Value* v : n->inputs())
      if (made.count(v) && unknown_made.count(n->output(0)) && outputs_set.insert(v).second) outputs.push_back(v);
  for (const Value* v : graph.outputs())
    if (made.count(v) && outputs_set.insert(v).second) outputs.push_back(v);
  std::vector<const Value*> inputs(graph.inputs().begin(), graph.inputs().end());
  return extract_subgraph(graph, nodes, inputs, outputs, graph.name + "_supported");
}

}  // namespace

int inspect_command(const Args& args) {
  if (args.positional.size() != 1) throw Error("usage: trainrt inspect MODEL.onnx [--dim NAME=VALUE]...");
  std::shared_ptr<Graph> graph = import_onnx(args.positional[0]);

  std::map<std::string, int> histogram;
  for (const Node* n : graph->nodes()) histogram[op_name(*n)]++;
  std::printf("model %s: %d nodes, %zu inputs, %zu outputs\n", args.positional[0].c_str(), graph->num_nodes(),
              graph->inputs().size(), graph->outputs().size());
  std::printf("\nop histogram:\n");
  for (const auto& [op, count] : histogram) std::printf("  %-32s %6d\n", op.c_str(), count);

  int64_t params = 0;
  size_t param_bytes = 0;
  for (const Value* v : graph->initializers())
    if (is_floating(v->dtype)) {
      params += v->data.numel();
      param_bytes += v->data.nbytes();
    }
  std::printf("\nparameters: %lld (%s in floating-point initializers)\n", static_cast<long long>(params),
              human_bytes(static_cast<double>(param_bytes)).c_str());

  std::map<std::string, int> unknown;
  for (const Node* n : graph->nodes())
    if (!OpRegistry::global().find(n->domain(), n->op_type())) unknown[op_name(*n)]++;
  if (!unknown.empty()) {
    std::printf("\nops TrainRT does not support (nodes):");
    for (const auto& [op, count] : unknown) std::printf(" %s %d", op.c_str(), count);
    std::printf("\nshapes and memory below are of the nodes before them (and not reading them)\n");
    graph = supported_part(*graph);
  }
  infer_graph_shapes(*graph);
  std::printf("\ninferred shapes:\n%s", print_graph(*graph).c_str());

  auto dims = parse_dims(args);
  std::vector<Tensor> inputs;
  bool defaulted = false;
  for (const Value* in : graph->inputs()) {
    for (const Dim& d : in->shape.dims)
      if (!d.is_static() && !dims.count(d.symbol)) defaulted = true;
    inputs.push_back(Tensor::zeros(in->dtype, concrete_dims(*in, dims, true)));
  }
  auto plan = build_execution_plan(*graph, inputs, runtime_kernel_table(), PlanOptions{});
  std::printf("\nplanned peak memory of intermediates: %s (arena; lower bound %s), %d steps, %d folded, %d in place%s\n",
              human_bytes(static_cast<double>(plan->stats.arena_bytes)).c_str(),
              human_bytes(static_cast<double>(plan->stats.live_lower_bound)).c_str(), plan->stats.num_steps,
              plan->stats.num_folded, plan->stats.num_inplace,
              defaulted ? " (dynamic dims without --dim taken as 1)" : "");
  return 0;
}

}  // namespace trainrt::cli
