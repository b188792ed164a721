// The row selections of the sparse optimizers (ValidRows: label sparsity's counted labels, padding
// elimination's kept tokens), lifted out of the training graph into a prologue of their own.
//
// A ValidRows output's length R depends on the data, so inside the forward every value sized by
// it would be sized at run time: its own heap allocation each step, a Reshape of it a copy, shape
// inference per run (runtime/execution_plan.h). Computed before the forward instead, the rows are a
// forward input like any other, and the forward and backward are planned per R (R is a multiple
// of 64: at most N / 64 plans), with arena buffers and views:
//
//   prologue = hoist_row_selections(joint);   // joint: ValidRows nodes -> graph inputs of that name
//   rows = prologue.session->run(pick(inputs, prologue.inputs));
//   forward_->run(inputs + rows);
//
// Only selections computed from graph inputs alone (labels, the attention mask) are lifted.
#pragma once

#include <memory>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

struct RowSelectionPrologue {
  // Null when the graph selects no rows. Outputs: each selection's rows (R), then for each the count
  // of rows it selects from (N, an i64 scalar): what the density inspector reports as skipped.
  std::shared_ptr<Graph> graph;
  std::vector<size_t> inputs;  // the joint graph inputs (indices) the prologue reads, in its order
  size_t num_selections = 0;
};

// Moves every ValidRows computed from graph inputs alone, with the nodes before it, into the
// prologue; each one's output becomes a joint graph input (appended, the same name), read by the
// nodes that read it. Nodes only the selections read leave the joint graph.
RowSelectionPrologue hoist_row_selections(Graph& joint);

}  // namespace trainrt
