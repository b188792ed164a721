// CPU kernels of the TrainRT-domain gradient ops of the shape and data movement family (schemas:
// ops/tensor_grad_schemas.cc):
//   SliceGrad    zero dX, then one strided write of dY over the sliced positions (any float type;
//                the slice arithmetic is Slice's own, tensor_op_args.h)
//   GatherGrad   a deterministic scatter-add (f32, f64; bf16 and f16 summed in f32, rounded once):
//                indices are bucketed by destination row (a counting sort that keeps their order),
//                then destination rows are summed in parallel, each from its own bucket in index
//                order, so results never depend on the thread count;
//                with padding_idx (Embedding's gradient) that row's bucket is emptied: it stays 0;
//                with an addend, each row is addend + (its bucket's sum), the sum taken first as
//                without one, so the result is Sum(addend, GatherGrad(...)) bit for bit
//   DropoutGrad  dX = mask ? dY / (1 - ratio) : 0 in training mode, else dY
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

// memset to 0, split across the pool when large. Zero bytes are 0 in every float type.
void parallel_zero(void* dst, size_t nbytes, ThreadPool& pool) {
  constexpr size_t kBlock = 64 * 1024;
  auto* d = static_cast<std::byte*>(dst);
  pool.parallel_for(static_cast<int64_t>((nbytes + kBlock - 1) / kBlock), 4, [&](int64_t begin, int64_t end) {
    const size_t from = static_cast<size_t>(begin) * kBlock;
    std::memset(d + from, 0, std::min(nbytes, static_cast<size_t>(end) * kBlock) - from);
  });
}

// ---- SliceGrad(dY, shape, starts, ends, [axes], [steps]) -> dX ----

// Slice read X[start + i * step] along each sliced axis; dX gets dY at exactly those positions:
// dX viewed from the first sliced element with each sliced axis' stride times its step (negative
// steps walk backwards) is dY's layout.
KernelFn make_slice_grad(const Node& node) {
  return [where = node.describe()](KernelContext& ctx) {
    const Tensor& dy = ctx.in(0);
    Tensor& dx = ctx.out(0);
    SliceArgs args{.starts = ctx.in(2).to_i64_vector(), .ends = ctx.in(3).to_i64_vector()};
    if (ctx.has_in(4)) args.axes = ctx.in(4).to_i64_vector();
    if (ctx.has_in(5)) args.steps = ctx.in(5).to_i64_vector();
    normalize_slice_args(where, args, dx.rank());
    std::vector<int64_t> dims = dx.dims();
    std::vector<int64_t> strides = contiguous_strides(dims);
    int64_t offset = 0;
    for (size_t i = 0; i < args.axes.size(); ++i) {
      const size_t a = static_cast<size_t>(args.axes[i]);
      const SliceAxis s = slice_axis(dims[a], args.starts[i], args.ends[i], args.steps[i]);
      offset += s.start * strides[a];
      strides[a] *= s.step;
      dims[a] = s.length;
    }
    if (dims != dy.dims())
      throw ShapeError(fmt(where, ": input 0 (dY) is ", describe(dy), " but the slice of ", to_string(dx.dims()),
                           " has dims ", to_string(dims)));
    const size_t es = dtype_size(dx.dtype());
    parallel_zero(dx.raw(), dx.nbytes(), ctx.threads());
    strided_scatter(dy.raw(), static_cast<std::byte*>(dx.raw()) + offset * static_cast<int64_t>(es), dims,
                    std::move(strides), es, ctx.threads());
  };
}

// ---- GatherGrad(shape, indices, dY) -> dX ----

// The positions j of the indices, grouped by the row they name: bucket v holds
// positions[begin[v] .. begin[v + 1]) in increasing j.
struct IndexBuckets {
  std::vector<int64_t> begin;      // (rows + 1)
  std::vector<int64_t> positions;  // (n), less the skipped row's
};

// Counting sort of n indices into `rows` buckets; negative indices count from the back (ONNX
// Gather). Positions naming `skip_row` (Embedding's padding_idx; -1: none) go in no bucket, so
// that row's gradient stays zero. Throws ShapeError naming the first index out of [-rows, rows).
template <typename I>
IndexBuckets bucket_indices(const I* indices, int64_t n, int64_t rows, int64_t skip_row, const std::string& where) {
  IndexBuckets b;
  b.begin.assign(static_cast<size_t>(rows) + 1, 0);
  std::vector<int64_t> row_of(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t v = static_cast<int64_t>(indices[j]);
    if (v < -rows || v >= rows)
      throw ShapeError(fmt(where, ": index ", v, " (position ", j, " of input 1) is out of range for an axis of ",
                           rows));
    v = v < 0 ? v + rows : v;
    row_of[static_cast<size_t>(j)] = v;
    if (v != skip_row) ++b.begin[static_cast<size_t>(v) + 1];
  }
  for (size_t v = 1; v < b.begin.size(); ++v) b.begin[v] += b.begin[v - 1];
  std::vector<int64_t> next(b.begin.begin(), b.begin.end() - 1);
  b.positions.resize(static_cast<size_t>(b.begin.back()));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t v = row_of[static_cast<size_t>(j)];
    if (v == skip_row) continue;
    b.positions[static_cast<size_t>(next[static_cast<size_t>(v)]++)] = j;
  }
  return b;
}

template <typename T>
TRAINRT_SIMD_CLONES void add_row(T* __restrict out, const T* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] += x[j];
}

// out = a + x; out may be a (in place), so no __restrict between them.
template <typename T>
TRAINRT_SIMD_CLONES void add_rows(T* out, const T* a, const T* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = a[j] + x[j];
}

// dX viewed as (outer, rows, inner) and dY as (outer, n, inner): dX[o, v, :] = sum over the
// positions j in bucket v of dY[o, j, :], plus addend[o, v, :] when there is one (nullptr: none;
// it may be dx itself). Tasks are (o, v, column block), so a few long rows (a small axis) still
// spread over the threads.
template <typename T>
void gather_grad(const IndexBuckets& b, const T* dy, const T* addend, T* dx, int64_t outer, int64_t rows, int64_t n,
                 int64_t inner, ThreadPool& pool) {
  constexpr int64_t kColumns = 4096;
  const int64_t block = std::min(inner, kColumns);
  const int64_t blocks = (inner + block - 1) / block;
  pool.parallel_for(outer * rows * blocks, rows_per_chunk(static_cast<size_t>(block) * sizeof(T)),
                    [&](int64_t begin, int64_t end) {
    std::vector<T> sum;  // a bucket's sum before the addend joins it
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = t / blocks, c0 = (t % blocks) * block, width = std::min(block, inner - c0);
      const int64_t o = row / rows, v = row % rows;
      T* out = dx + row * inner + c0;
      const T* add = addend ? addend + row * inner + c0 : nullptr;
      const int64_t k0 = b.begin[static_cast<size_t>(v)], k1 = b.begin[static_cast<size_t>(v) + 1];
      const size_t bytes = static_cast<size_t>(width) * sizeof(T);
      if (k0 == k1) {
        if (!add) std::memset(static_cast<void*>(out), 0, bytes);
        else if (add != out) std::memcpy(static_cast<void*>(out), add, bytes);
        continue;
      }
      const auto src = [&](int64_t k) { return dy + (o * n + b.positions[static_cast<size_t>(k)]) * inner + c0; };
      if (add && k1 - k0 == 1) {
        add_rows(out, add, src(k0), width);
        continue;
      }
      T* acc = out;
      if (add) {
        sum.resize(static_cast<size_t>(block));
        acc = sum.data();
      }
      std::memcpy(static_cast<void*>(acc), src(k0), bytes);
      for (int64_t k = k0 + 1; k < k1; ++k) add_row(acc, src(k), width);
      if (add) add_rows(out, add, acc, width);
    }
  });
}

// gather_grad for the 16-bit floats (a bf16 head's rows under autocast): each bucket summed in f32,
// with the addend, and rounded once.
template <typename T>
void gather_grad_16(const IndexBuckets& b, const T* dy, const T* addend, T* dx, int64_t outer, int64_t rows,
                    int64_t n, int64_t inner, ThreadPool& pool) {
  constexpr bool kHalf = std::is_same_v<T, Half>;
  const auto widen = [](T v) { return kHalf ? f16_to_f32(v.bits) : bf16_to_f32(v.bits); };
  const int64_t grain = rows_per_chunk(static_cast<size_t>(inner) * sizeof(T));
  pool.parallel_for(outer * rows, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> sum;  // keeps its largest size: no steady-state allocation
    sum.resize(static_cast<size_t>(inner));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / rows, v = row % rows;
      T* out = dx + row * inner;
      const T* add = addend ? addend + row * inner : nullptr;
      const int64_t k0 = b.begin[static_cast<size_t>(v)], k1 = b.begin[static_cast<size_t>(v) + 1];
      const size_t bytes = static_cast<size_t>(inner) * sizeof(T);
      if (k0 == k1 || (!add && k1 - k0 == 1)) {  // nothing to add: zeros, the addend or the one row
        const T* from = k0 == k1 ? add : dy + (o * n + b.positions[static_cast<size_t>(k0)]) * inner;
        if (!from) std::memset(static_cast<void*>(out), 0, bytes);
        else if (from != out) std::memcpy(static_cast<void*>(out), from, bytes);
        continue;
      }
      // As the f32 kernel sums: the bucket in order, then the addend plus that sum.
      const auto src = [&](int64_t k) { return dy + (o * n + b.positions[static_cast<size_t>(k)]) * inner; };
      for (int64_t j = 0; j < inner; ++j) sum[static_cast<size_t>(j)] = widen(src(k0)[j]);
      for (int64_t k = k0 + 1; k < k1; ++k)
        for (int64_t j = 0; j < inner; ++j) sum[static_cast<size_t>(j)] += widen(src(k)[j]);
      for (int64_t j = 0; j < inner; ++j) {
        const float f = add ? widen(add[j]) + sum[static_cast<size_t>(j)] : sum[static_cast<size_t>(j)];
        out[j] = T{kHalf ? f32_to_f16(f) : f32_to_bf16(f)};
      }
    }
  });
}

template <typename T>
void run_gather_grad(const Tensor& indices, const Tensor& dy, const Tensor* addend, Tensor& dx, int64_t axis,
                     std::optional<int64_t> padding_idx, ThreadPool& pool, const std::string& where) {
  const int64_t rank = dx.rank();
  if (axis < -rank || axis >= rank) throw ShapeError(fmt(where, ": axis ", axis, " is out of range for rank ", rank));
  const int64_t a = axis < 0 ? axis + rank : axis;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < a; ++i) outer *= dx.dim(i);
  for (int64_t i = a + 1; i < rank; ++i) inner *= dx.dim(i);
  const int64_t rows = dx.dim(a), n = indices.numel();
  if (dy.numel() != outer * n * inner)
    throw ShapeError(fmt(where, ": input 2 (dY) is ", describe(dy), ", expected ", outer * n * inner,
                         " elements for dX ", to_string(dx.dims()), " and ", n, " indices"));
  if (padding_idx && (*padding_idx < 0 || *padding_idx >= rows))
    throw ShapeError(fmt(where, ": padding_idx ", *padding_idx, " is out of range for ", to_string(dx.dims()),
                         " on axis ", a));
  const int64_t skip = padding_idx.value_or(-1);
  const IndexBuckets b = indices.dtype() == DType::kI64
                             ? bucket_indices(indices.data<int64_t>(), n, rows, skip, where)
                             : bucket_indices(indices.data<int32_t>(), n, rows, skip, where);
  if (addend && (addend->dims() != dx.dims() || addend->dtype() != dx.dtype()))
    throw ShapeError(fmt(where, ": input 3 (addend) is ", describe(*addend), ", expected dX's ", describe(dx)));
  if (dx.numel() == 0) return;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    gather_grad(b, dy.data<T>(), addend ? addend->data<T>() : nullptr, dx.data<T>(), outer, rows, n, inner, pool);
  else
    gather_grad_16(b, dy.data<T>(), addend ? addend->data<T>() : nullptr, dx.data<T>(), outer, rows, n, inner, pool);
}

KernelFn make_gather_grad(const Node& node) {
  const int64_t axis = node.attr_int("axis", 0);
  const std::optional<int64_t> padding_idx =
      node.has_attr("padding_idx") ? std::optional<int64_t>(node.attr_int("padding_idx", 0)) : std::nullopt;
  return [axis, padding_idx, where = node.describe()](KernelContext& ctx) {
    const Tensor &indices = ctx.in(1), &dy = ctx.in(2);
    const Tensor* addend = ctx.has_in(3) ? &ctx.in(3) : nullptr;
    Tensor& dx = ctx.out(0);
    ThreadPool& pool = ctx.threads();
    switch (dy.dtype()) {
      case DType::kF32: return run_gather_grad<float>(indices, dy, addend, dx, axis, padding_idx, pool, where);
      case DType::kF64: return run_gather_grad<double>(indices, dy, addend, dx, axis, padding_idx, pool, where);
      case DType::kBF16: return run_gather_grad<BFloat16>(indices, dy, addend, dx, axis, padding_idx, pool, where);
      case DType::kF16: return run_gather_grad<Half>(indices, dy, addend, dx, axis, padding_idx, pool, where);
      default: throw InvalidModel(fmt(where, ": input 2 (dY) is ", describe(dy), ", expected a float type"));
    }
  };
}

// ---- DropoutGrad(dY, mask, [ratio], [training_mode]) -> dX ----

// dX may be dY's buffer (in place), so no __restrict between them.
TRAINRT_SIMD_CLONES void masked_scale_f32(const float* dy, const bool* __restrict keep, float* dx, int64_t n,
                                          float scale) {
  for (int64_t i = 0; i < n; ++i) dx[i] = keep[i] ? dy[i] * scale : 0.f;
}

template <typename T>
void masked_scale(const T* dy, const bool* keep, T* dx, int64_t n, double scale) {
  if constexpr (std::is_same_v<T, float>) {
    masked_scale_f32(dy, keep, dx, n, static_cast<float>(scale));
  } else if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) dx[i] = keep[i] ? dy[i] * scale : 0.0;
  } else {  // the 16-bit floats, through f32 as the forward kernel does
    constexpr bool kHalf = std::is_same_v<T, Half>;
    const float s = static_cast<float>(scale);
    for (int64_t i = 0; i < n; ++i) {
      const float v = keep[i] ? (kHalf ? f16_to_f32(dy[i].bits) : bf16_to_f32(dy[i].bits)) * s : 0.f;
      dx[i] = T{kHalf ? f32_to_f16(v) : f32_to_bf16(v)};
    }
  }
}

template <typename T>
KernelFn make_dropout_grad(const Node& node) {
  return [where = node.describe()](KernelContext& ctx) {
    const Tensor &dy = ctx.in(0), &mask = ctx.in(1);
    Tensor& dx = ctx.out(0);
    const double ratio = ctx.has_in(2) ? ctx.in(2).to_double(0) : 0.5;
    const bool training = ctx.has_in(3) && ctx.in(3).data<bool>()[0];
    if (!training || ratio == 0) {
      parallel_copy(dx.raw(), dy.raw(), dy.nbytes(), ctx.threads());
      return;
    }
    if (!(ratio >= 0 && ratio <= 1)) throw InvalidModel(fmt(where, ": ratio ", ratio, " is outside [0, 1]"));
    if (mask.numel() != dy.numel())
      throw ShapeError(fmt(where, ": input 1 (mask) is ", describe(mask), ", dY is ", describe(dy)));
    const double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;  // as the forward: all dropped at 1
    const T* g = dy.data<T>();
    const bool* keep = mask.data<bool>();
    T* out = dx.data<T>();
    ctx.threads().parallel_for(dy.numel(), 16384, [&](int64_t begin, int64_t end) {
      masked_scale(g + begin, keep + begin, out + begin, end - begin, scale);
    });
  };
}

}  // namespace

// StopGradient copies (or, in place, leaves) its input: the op matters only to the autodiff.
KernelFn make_stop_gradient(const Node&) {
  return [](KernelContext& ctx) {
    if (ctx.out(0).raw() != ctx.in(0).raw()) std::memcpy(ctx.out(0).raw(), ctx.in(0).raw(), ctx.in(0).nbytes());
  };
}

void register_tensor_grad_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "StopGradient", DType::kUndefined, make_stop_gradient);
  t.add(kTrainrtDomain, "SliceGrad", DType::kUndefined, make_slice_grad);
  // GatherGrad is keyed on its first input, the i64 shape; the kernel dispatches on dY (f32, f64).
  t.add(kTrainrtDomain, "GatherGrad", DType::kI64, make_gather_grad);
  t.add(kTrainrtDomain, "DropoutGrad", DType::kF32, make_dropout_grad<float>);
  t.add(kTrainrtDomain, "DropoutGrad", DType::kF64, make_dropout_grad<double>);
  t.add(kTrainrtDomain, "DropoutGrad", DType::kF16, make_dropout_grad<Half>);
  t.add(kTrainrtDomain, "DropoutGrad", DType::kBF16, make_dropout_grad<BFloat16>);
}

}  // namespace trainrt
