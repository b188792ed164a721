// NonZero (ONNX opset 13): Y = NonZero(X), Y i64 (rank(X), count) holding, column by column in
// row-major order, the coordinates of X's elements that are not zero (NaN counts as not zero, -0
// as zero). The count depends on X's values: it is a symbolic dim until X is known (a run-time
// sized value, as ValidRows's rows), and the schema sizes Y from X when the plan runs.
#pragma once

#include <cstdint>

#include "trainrt/core/tensor.h"

namespace trainrt {

int64_t count_nonzero(const Tensor& x);
// Writes the coordinates into `y` (i64, (rank, count_nonzero(x))).
void fill_nonzero(const Tensor& x, Tensor& y);

}  // namespace trainrt
