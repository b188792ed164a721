// CPU kernel of LayerNormalizationGrad (TrainRT domain): the backward of ONNX LayerNormalization.
//
// LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) -> (dX, dScale, dBias), attributes axis
// and epsilon as on the forward node. X (d0, ..., dr-1) is rows = d0 * ... * d(axis-1) rows of
// cols = d(axis) * ... * d(r-1); with xhat = (x - mean) * inv_std and g = dy * scale per row
// (PyTorch native_layer_norm_backward; ONNX Runtime LayerNormalizationGrad):
//   dX     = inv_std * (g - mean(g) - xhat * mean(g * xhat))
//   dScale = sum over rows of dy * xhat,  dBias = sum over rows of dy     (both (cols))
// Mean and InvStdDev are read from inputs 3 and 4 when given (the forward node's outputs); else
// each row's are recomputed from X exactly as the forward kernel computes them, two passes over
// a row that is in cache anyway. Rows are split into blocks run in parallel; each block sums its
// rows' dScale and dBias into its own partial (cols) vectors, added up at the end (the result
// does not depend on which thread ran which block). scale broadcasts to X's trailing
// (normalized) dims; one that varies across rows is rejected. f32 and f64; f16 and bf16 compute in
// f32 and round each output once, as torch's kernels for them do.
#include <algorithm>
#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/broadcast.h"
#include "trainrt/kernels/cpu/reduce_grad_math.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/reduction_grad_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

struct LayerNormGradSpec {
  std::string node;  // node.describe(), for errors
  int64_t axis = -1;
  double epsilon = 1e-5;
};

// scale as one (cols) vector: its own memory when it has exactly the normalized dims, else
// expanded into thread-local scratch.
template <typename T>
const T* scale_as_row(const LayerNormGradSpec& s, const Tensor& scale, const std::vector<int64_t>& x_dims,
                      int64_t axis, int64_t cols) {
  // Its own memory when its dims are the normalized dims, after leading 1s (no vectors built: the
  // steady state allocates nothing).
  const auto& given = scale.dims();
  const size_t normalized = x_dims.size() - static_cast<size_t>(axis);
  if (given.size() >= normalized &&
      std::all_of(given.begin(), given.end() - static_cast<std::ptrdiff_t>(normalized), [](int64_t d) { return d == 1; }) &&
      std::equal(given.end() - static_cast<std::ptrdiff_t>(normalized), given.end(), x_dims.begin() + axis))
    return scale.data<T>();
  const std::vector<int64_t> norm(x_dims.begin() + axis, x_dims.end());
  std::vector<int64_t> sd = scale.dims();
  while (sd.size() > norm.size()) {
    if (sd.front() != 1)
      throw UnsupportedOp(fmt(s.node, ": scale of shape ", to_string(scale.dims()),
                              " varies across the rows of input 1 of shape ", to_string(x_dims),
                              "; its gradient is only supported for scales that broadcast to the normalized dims"));
    sd.erase(sd.begin());
  }
  if (sd == norm) return scale.data<T>();
  const BroadcastPlan plan({&sd}, norm);
  T* row = scratch<T>(2, cols);
  const T* src = scale.data<T>();
  plan.for_each_run(0, plan.numel(), [&](const int64_t* in, int64_t out, int64_t len) {
    for (int64_t i = 0; i < len; ++i) row[out + i] = src[in[0] + i * plan.inner_stride(0)];
  });
  return row;
}

// The rows [r0, r1) into dx (may be null) and the block's partial column sums ps, pb (pb null
// when dBias is not wanted), in the compute type C: f16 / bf16 rows are staged in float
// (reduce_util.h), dx rounded once on store.
template <typename T>
void layer_norm_grad_rows(const LayerNormGradSpec& s, KernelContext& ctx, const compute_t<T>* scale, int64_t cols,
                          int64_t r0, int64_t r1, compute_t<T>* ps, compute_t<T>* pb) {
  using C = compute_t<T>;
  const T* dy = ctx.in(0).data<T>();
  const T* x = ctx.in(1).data<T>();
  T* dx = ctx.has_out(0) ? ctx.out(0).data<T>() : nullptr;
  const bool stats = ctx.has_in(3) && ctx.has_in(4);
  for (int64_t r = r0; r < r1; ++r) {
    const C* dyr = stage_in(dy + r * cols, 1, cols, cols, 0).data;
    const C* xr = stage_in(x + r * cols, 1, cols, cols, 1).data;
    LayerNormRow row{.n = cols};
    if (stats) {
      row.mean = ctx.in(3).to_double(r);
      row.inv_std = ctx.in(4).to_double(r);
    } else {  // as the forward kernel: mean, then the sum of squared deviations from it
      const C mean = row_sum(xr, cols) / static_cast<C>(cols);
      const C var = row_sum_sq_dev(xr, cols, mean) / static_cast<C>(cols);
      row.mean = mean;
      row.inv_std = C(1) / std::sqrt(var + static_cast<C>(s.epsilon));
    }
    if (dx) {
      C sum_g, sum_g_xhat;
      layer_norm_grad_sums(dyr, xr, scale, cols, static_cast<C>(row.mean), static_cast<C>(row.inv_std), sum_g,
                           sum_g_xhat);
      row.mean_g = static_cast<double>(sum_g) / static_cast<double>(cols);
      row.mean_g_xhat = static_cast<double>(sum_g_xhat) / static_cast<double>(cols);
    }
    const Staged<T> dxr = stage_out(dx ? dx + r * cols : nullptr, 1, cols, cols, 2);
    layer_norm_grad_row(dyr, xr, scale, dx ? dxr.data : nullptr, ps, pb, row);
    if (dx) commit(dxr, dx + r * cols, 1, cols, cols);
  }
}

template <typename T>
void layer_norm_grad(const LayerNormGradSpec& s, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  if (dy.dims() != x.dims())
    throw ShapeError(fmt(s.node, ": input 0 (dY) has shape ", to_string(dy.dims()), ", input 1 (X) has shape ",
                         to_string(x.dims()), "; they must match"));
  if (s.axis < -x.rank() || s.axis >= x.rank())
    throw ShapeError(fmt(s.node, ": axis ", s.axis, " is out of range for input 1 of shape ", to_string(x.dims())));
  const int64_t axis = normalize_axis(s.axis, x.rank());
  const ReduceGeometry g = axis_geometry(x.dims(), axis);
  const int64_t rows = g.outer, cols = g.reduce * g.inner;
  for (int i = 3; i <= 4; ++i)
    if (ctx.has_in(i) && ctx.in(i).numel() != rows)
      throw ShapeError(fmt(s.node, ": input ", i, " is ", describe(ctx.in(i)), ", expected ", rows, " values"));
  using C = compute_t<T>;
  const T* scale_t = scale_as_row<T>(s, ctx.in(2), x.dims(), axis, cols);
  const bool want_bias = ctx.has_out(2);

  ThreadPool& pool = ctx.threads();
  const int64_t blocks =
      std::max<int64_t>(1, std::min({rows, rows * cols / kMinTaskElements, int64_t{4} * pool.num_threads()}));
  const int64_t per_block = (rows + blocks - 1) / blocks;
  // The scale row and the partial sums in C. f32 / f64: thread-local scratch (the steady state
  // allocates nothing); f16 / bf16: a vector of their own, since the float scratch slots stage rows.
  std::vector<C> own;
  const C* scale = nullptr;
  C* partial = nullptr;  // (block, {dScale, dBias}, cols)
  if constexpr (kIsFloat16<T>) {
    own.assign(static_cast<size_t>(cols + blocks * 2 * cols), C(0));
    for (int64_t i = 0; i < cols; ++i) own[static_cast<size_t>(i)] = to_compute(scale_t[i]);
    scale = own.data();
    partial = own.data() + cols;
  } else {
    scale = scale_t;
    partial = scratch<T>(3, blocks * 2 * cols);
    std::fill(partial, partial + blocks * 2 * cols, T(0));
  }
  pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      C* ps = partial + b * 2 * cols;
      layer_norm_grad_rows<T>(s, ctx, scale, cols, std::min(rows, b * per_block), std::min(rows, (b + 1) * per_block),
                              ps, want_bias ? ps + cols : nullptr);
    }
  });
  for (int o = 1; o <= 2; ++o) {
    if (!ctx.has_out(o)) continue;
    T* out = ctx.out(o).data<T>();
    if constexpr (kIsFloat16<T>) {
      std::vector<C> sum(static_cast<size_t>(cols), C(0));
      cols_add(sum.data(), partial + (o - 1) * cols, blocks, 2 * cols, cols);
      for (int64_t i = 0; i < cols; ++i) out[i] = from_compute<T>(sum[static_cast<size_t>(i)]);
    } else {
      std::fill(out, out + cols, T(0));
      cols_add(out, partial + (o - 1) * cols, blocks, 2 * cols, cols);
    }
  }
}

template <typename T>
KernelFn make_layer_norm_grad(const Node& node) {
  LayerNormGradSpec s;
  s.node = node.describe();
  s.axis = node.attr_int("axis", -1);
  s.epsilon = node.attr_float("epsilon", 1e-5f);
  return [s](KernelContext& ctx) { layer_norm_grad<T>(s, ctx); };
}

}  // namespace

void register_layer_norm_grad_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "LayerNormalizationGrad", DType::kF32, make_layer_norm_grad<float>);
  t.add(kTrainrtDomain, "LayerNormalizationGrad", DType::kF64, make_layer_norm_grad<double>);
  t.add(kTrainrtDomain, "LayerNormalizationGrad", DType::kBF16, make_layer_norm_grad<BFloat16>);
  t.add(kTrainrtDomain, "LayerNormalizationGrad", DType::kF16, make_layer_norm_grad<Half>);
}

}  // namespace trainrt
