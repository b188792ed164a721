// ValidRows (com.trainrt), the row selection of label sparsity (passes/label_sparsity.h):
//   rows = ValidRows(labels)        labels: i64 or i32 (N); rows: i64 (R)
// holds, ascending, the positions of the labels that are not `ignore_index` and of as many ignored
// labels (the first ones) as make R a multiple of `multiple` (R at most N, at least min(N, multiple)).
// A loss over the gathered rows ignores the padding, so it equals the loss over all N rows; the
// padding keeps the number of distinct R small (a plan per R), and a batch with no valid label
// still gives rows, all ignored, as the full loss would see them. The rows are distinct and sorted,
// so R = N means every row in order: a selection of them is the identity (the planner shows the
// rows themselves, PlanOptions::row_selections). R depends on the labels' values: it is a symbolic
// dim until the labels are known (a run-time sized value).
#pragma once

#include <cstdint>

#include "trainrt/core/tensor.h"

namespace trainrt {

inline constexpr int64_t kValidRowsMultiple = 64;

// R for these labels: the count of valid ones rounded up as above.
int64_t valid_rows_count(const Tensor& labels, int64_t ignore_index, int64_t multiple);
// Writes the R rows into `rows` (i64, R elements).
void fill_valid_rows(const Tensor& labels, int64_t ignore_index, Tensor& rows);

}  // namespace trainrt
