// Graph passes: one Pass interface and an ordered pipeline of them.
//
// A pass rewrites a graph in place and reports whether it changed anything. Pass::apply is the
// one entry point (non-virtual, as ONNX Runtime's GraphTransformer::Apply): it runs the pass's
// apply_impl and, in debug builds, verifies the IR afterwards, so a broken rewrite fails at the
// pass that made it and not in a later stage.
//
//   PassPipeline pipeline;
//   pipeline.add(std::make_unique<MatMulBiasFusion>());
//   std::vector<PassOutcome> report;
//   pipeline.run(graph, &report);   // each pass once, in order; true when any changed the graph
//
// The report gives each pass of the pipeline and the nodes it took from the graph (a fusion or an
// elimination removes nodes; a rewrite that keeps the count only "changed"); it is logged at INFO.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // True when the graph changed.
  bool apply(Graph& graph) const;

 protected:
  virtual bool apply_impl(Graph& graph) const = 0;
};

// Whether `v` is one of the graph's outputs (a pass keeps those values, whoever else reads them).
bool is_graph_output(const Graph& graph, const Value* v);
// Whether some node or the graph's outputs read one of `n`'s outputs (else a pass may remove it).
bool is_read(const Graph& graph, const Node& n);

// What one pass of a pipeline did to a graph.
struct PassOutcome {
  std::string pass;
  bool changed = false;
  int64_t nodes_removed = 0;  // negative when the pass added nodes
};

// "CommonSubexpressionElimination 6 nodes removed, MatMulBiasFusion no change"; "off" for none.
std::string describe(const std::vector<PassOutcome>& report);

class PassPipeline {
 public:
  void add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  // `report`, when given, becomes one PassOutcome per pass, in order.
  bool run(Graph& graph, std::vector<PassOutcome>* report = nullptr) const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace trainrt
