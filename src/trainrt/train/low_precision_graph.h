// The graph an inference or evaluation session runs, with its bf16 / f16 nodes that take f32 only
// computed between casts (passes/low_precision_compute.h): `graph` itself when none needs it (the
// common f32 model), else a rewritten copy (the caller's graph stays as captured or loaded).
//
//   eval_session_ = std::make_unique<Session>(low_precision_graph(graph_), options);
#pragma once

#include <memory>

#include "trainrt/ir/graph.h"

namespace trainrt {

std::shared_ptr<Graph> low_precision_graph(const std::shared_ptr<Graph>& graph);

}  // namespace trainrt
