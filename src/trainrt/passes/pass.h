// Graph passes: one Pass interface and an ordered pipeline of them.
//
// A pass rewrites a graph in place and reports whether it changed anything. Pass::apply is the
// one entry point (non-virtual, as ONNX Runtime's GraphTransformer::Apply): it runs the pass's
// apply_impl and, in debug builds, verifies the IR afterwards, so a broken rewrite fails at the
// pass that made it and not in a later stage.
//
//   PassPipeline pipeline;
//   pipeline.add(std::make_unique<MatMulBiasFusion>());
//   pipeline.run(graph);   // each pass once, in order; true when any changed the graph
#pragma once

#include <memory>
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

class PassPipeline {
 public:
  void add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  bool run(Graph& graph) const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace trainrt
