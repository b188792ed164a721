// CPU kernel of LayerNormalization (ONNX opset 17).
//
// X (d0, ..., dr-1) is seen as rows = d0 * ... * d(axis-1) rows of cols = d(axis) * ... * d(r-1)
// elements. Per row (two passes, so no cancellation between E[x^2] and E[x]^2):
//   mean = sum x / cols,  var = sum (x - mean)^2 / cols,  inv_std = 1 / sqrt(var + epsilon)
//   y = (x - mean) * inv_std * scale + bias
// Mean and InvStdDev, when wanted, are (rows) values of the stash type (f32 or bf16). f16 and
// bf16 inputs compute in float (stash_type 1), f64 in double. Scale and bias broadcast
// unidirectionally to X; the usual (cols) shapes are used in place, others are expanded once.
#include <cmath>

#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Scale or bias as compute-type values: row r uses data + r * row_stride (row_stride is 0 when
// all rows share one (cols) vector, cols when the tensor varies across rows too).
template <typename T>
struct Param {
  const compute_t<T>* data = nullptr;
  int64_t row_stride = 0;
  std::vector<compute_t<T>> storage;  // the expanded copy, when one was needed
};

template <typename T>
void broadcast_param(const Tensor& p, const std::vector<int64_t>& x_dims, int64_t axis, int64_t cols,
                     Param<T>& out) {
  const size_t rank = x_dims.size(), pr = p.dims().size();
  // p's dims right-aligned to X's rank.
  auto pd = [&](size_t i) { return i + pr < rank ? int64_t{1} : p.dims()[i + pr - rank]; };
  bool per_row = false, exact = true;
  for (size_t i = 0; i < rank; ++i) {
    if (static_cast<int64_t>(i) < axis) per_row = per_row || pd(i) != 1;
    else exact = exact && pd(i) == x_dims[i];
  }
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    if (!per_row && exact) {
      out.data = p.data<T>();
      return;
    }
  }
  // Expand over X's dims [first, rank): an odometer over them, p's strides 0 where it broadcasts.
  const size_t first = per_row ? 0 : static_cast<size_t>(axis);
  std::vector<int64_t> stride(rank, 0);
  for (size_t i = rank, s = 1; i-- > first;) {
    stride[i] = pd(i) == 1 ? 0 : static_cast<int64_t>(s);
    s *= static_cast<size_t>(pd(i));
  }
  int64_t count = 1;
  for (size_t i = first; i < rank; ++i) count *= x_dims[i];
  out.storage.resize(static_cast<size_t>(count));
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t k = 0; k < count; ++k) {
    out.storage[static_cast<size_t>(k)] = to_compute(p.data<T>()[offset]);
    for (size_t i = rank; i-- > first;) {
      if (++index[i] < x_dims[i]) {
        offset += stride[i];
        break;
      }
      offset -= stride[i] * (x_dims[i] - 1);
      index[i] = 0;
    }
  }
  out.data = out.storage.data();
  out.row_stride = per_row ? cols : 0;
}

void store_stat(Tensor* t, int64_t row, double v) {
  if (!t) return;
  if (t->dtype() == DType::kBF16) t->data<BFloat16>()[row].bits = f32_to_bf16(static_cast<float>(v));
  else t->data<float>()[row] = static_cast<float>(v);
}

template <typename T>
KernelFn make_layer_norm(const Node& node) {
  const int64_t axis_attr = node.attr_int("axis", -1);
  const float epsilon = node.attr_float("epsilon", 1e-5f);
  return [axis_attr, epsilon](KernelContext& ctx) {
    using C = compute_t<T>;
    const Tensor& x = ctx.in(0);
    const int64_t axis = normalize_axis(axis_attr, x.rank());
    const ReduceGeometry g = axis_geometry(x.dims(), axis);
    const int64_t rows = g.outer, cols = g.reduce * g.inner;
    Param<T> scale, bias;
    broadcast_param<T>(ctx.in(1), x.dims(), axis, cols, scale);
    if (ctx.has_in(2)) broadcast_param<T>(ctx.in(2), x.dims(), axis, cols, bias);
    Tensor* mean_out = ctx.has_out(1) ? &ctx.out(1) : nullptr;
    Tensor* inv_std_out = ctx.has_out(2) ? &ctx.out(2) : nullptr;
    const T* xd = x.data<T>();
    T* yd = ctx.out(0).data<T>();
    ctx.threads().parallel_for(rows, rows_per_task(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Staged<T> in = stage_in(xd + r * cols, 1, cols, cols, 0);
        const Staged<T> out = stage_out(yd + r * cols, 1, cols, cols, 1);
        const C mean = row_sum(in.data, cols) / static_cast<C>(cols);
        const C var = row_sum_sq_dev(in.data, cols, mean) / static_cast<C>(cols);
        const C inv_std = C(1) / std::sqrt(var + static_cast<C>(epsilon));
        normalize_row(in.data, out.data, cols, mean, inv_std, scale.data + r * scale.row_stride,
                      bias.data ? bias.data + r * bias.row_stride : nullptr);
        commit(out, yd + r * cols, 1, cols, cols);
        store_stat(mean_out, r, mean);
        store_stat(inv_std_out, r, inv_std);
      }
    });
  };
}

}  // namespace

void register_layer_norm_kernels(KernelTable& t) {
  t.add("", "LayerNormalization", DType::kF32, make_layer_norm<float>);
  t.add("", "LayerNormalization", DType::kF64, make_layer_norm<double>);
  t.add("", "LayerNormalization", DType::kF16, make_layer_norm<Half>);
  t.add("", "LayerNormalization", DType::kBF16, make_layer_norm<BFloat16>);
}

}  // namespace trainrt
