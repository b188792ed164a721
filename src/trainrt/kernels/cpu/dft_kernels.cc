// DFT and DFTGrad (ops/dft_args.h): a direct transform along one axis, O(n * m) per line. X is
// viewed as (outer, n, inner, c) around the axis and Y as (outer, m, inner, 2); one task computes
// output row k of one slab for all `inner` lines at once, so the innermost loop is contiguous.
// The twiddles come from one table of N angles (index j * k mod N, exact for any length), and
// sums are kept in double for f32 data, which is then rounded once. The gradient is the same
// transform with the opposite sign, from dY's m rows to dX's n rows (rows past N get 0). The
// inverse real FFT weighs each half-spectrum row by its count in the full spectrum (1 for rows 0
// and N / 2, whose imaginary parts count 0; 2 for the others); its gradient weighs dX's rows alike.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/dft_args.h"

namespace trainrt {
namespace {

// One transform: rows `src_rows` of (inner, src_c) to rows `dst_rows` of (inner, dst_c), each
// slab of `outer`; source rows past src_used are not read and destination rows past dst_used
// are 0. dst_c 1 keeps the real part. weight_re / weight_im (empty: 1) scale the real and
// imaginary parts of the source rows (weight_source) or of the destination rows.
struct LineTransform {
  int64_t outer = 1, inner = 1, src_rows = 0, dst_rows = 0, n_fft = 1, src_used = 0, dst_used = 0;
  int src_c = 2, dst_c = 2;
  double sign = -1, scale = 1;
  std::vector<double> weight_re, weight_im;
  bool weight_source = false;
};

// The inverse real FFT's weights over `rows` half-spectrum rows of a length-n transform.
void hermitian_weights(LineTransform& t, int64_t rows, int64_t n, bool on_source) {
  t.weight_re.assign(static_cast<size_t>(rows), 2.0);
  t.weight_im.assign(static_cast<size_t>(rows), 2.0);
  for (int64_t k = 0; k < rows; ++k)
    if (k == 0 || 2 * k == n) t.weight_re[static_cast<size_t>(k)] = 1.0, t.weight_im[static_cast<size_t>(k)] = 0.0;
  t.weight_source = on_source;
}

template <typename T>
void transform(const T* src, T* dst, const LineTransform& t, ThreadPool& threads) {
  std::vector<double> cosines(static_cast<size_t>(t.n_fft)), sines(static_cast<size_t>(t.n_fft));
  for (int64_t r = 0; r < t.n_fft; ++r) {
    const double angle = 2.0 * std::numbers::pi * static_cast<double>(r) / static_cast<double>(t.n_fft);
    cosines[static_cast<size_t>(r)] = std::cos(angle);
    sines[static_cast<size_t>(r)] = t.sign * std::sin(angle);
  }
  const int64_t used = t.src_used;
  const int64_t work = std::max<int64_t>(1, used * t.inner);
  const bool weigh_src = t.weight_source && !t.weight_re.empty(), weigh_dst = !t.weight_source && !t.weight_re.empty();
  threads.parallel_for(t.outer * t.dst_rows, std::max<int64_t>(1, 16384 / work), [&](int64_t begin, int64_t end) {
    std::vector<double> re(static_cast<size_t>(t.inner)), im(static_cast<size_t>(t.inner));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / t.dst_rows, k = task % t.dst_rows;
      std::fill(re.begin(), re.end(), 0.0);
      std::fill(im.begin(), im.end(), 0.0);
      if (k < t.dst_used) {
        for (int64_t j = 0; j < used; ++j) {
          const size_t r = static_cast<size_t>((j * k) % t.n_fft);
          const double wr = weigh_src ? t.weight_re[static_cast<size_t>(j)] : 1.0;
          const double wi = weigh_src ? t.weight_im[static_cast<size_t>(j)] : 1.0;
          const double c = cosines[r], s = sines[r];
          const T* x = src + ((o * t.src_rows + j) * t.inner) * t.src_c;
          if (t.src_c == 1) {
            for (int64_t i = 0; i < t.inner; ++i) {
              const double xr = wr * static_cast<double>(x[i]);
              re[static_cast<size_t>(i)] += c * xr;
              im[static_cast<size_t>(i)] += s * xr;
            }
          } else {
            for (int64_t i = 0; i < t.inner; ++i) {
              const double xr = wr * static_cast<double>(x[2 * i]), xi = wi * static_cast<double>(x[2 * i + 1]);
              re[static_cast<size_t>(i)] += c * xr - s * xi;
              im[static_cast<size_t>(i)] += s * xr + c * xi;
            }
          }
        }
      }
      const bool weighed = weigh_dst && k < static_cast<int64_t>(t.weight_re.size());
      const double scale_re = t.scale * (weighed ? t.weight_re[static_cast<size_t>(k)] : 1.0);
      const double scale_im = t.scale * (weighed ? t.weight_im[static_cast<size_t>(k)] : 1.0);
      T* y = dst + ((o * t.dst_rows + k) * t.inner) * t.dst_c;
      for (int64_t i = 0; i < t.inner; ++i) {
        y[i * t.dst_c] = static_cast<T>(re[static_cast<size_t>(i)] * scale_re);
        if (t.dst_c == 2) y[i * 2 + 1] = static_cast<T>(im[static_cast<size_t>(i)] * scale_im);
      }
    }
  });
}

template <typename T>
void run(const Tensor& src, Tensor& dst, const LineTransform& t, ThreadPool& threads) {
  if (dst.numel() == 0) return;
  transform(src.data<T>(), dst.data<T>(), t, threads);
}

int64_t n_fft_of(const KernelContext& ctx, const Node& node, int64_t signal_length) {
  const int input = dft_length_input(node);
  if (!ctx.has_in(input)) return signal_length;
  const int64_t n = ctx.in(input).to_i64(0);
  if (n < 1) throw ShapeError(fmt(node.describe(), ": dft_length is ", n, ", expected at least 1"));
  return n;
}

// x: the transform's signal-side tensor (X for DFT; the dims of X for DFTGrad), axis normalized.
LineTransform geometry(const std::vector<int64_t>& x_dims, int64_t axis) {
  LineTransform t;
  for (int64_t d = 0; d < axis; ++d) t.outer *= x_dims[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d + 1 < static_cast<int64_t>(x_dims.size()); ++d) t.inner *= x_dims[static_cast<size_t>(d)];
  return t;
}

void dispatch(const Node& node, const Tensor& src, Tensor& dst, const LineTransform& t, ThreadPool& threads) {
  switch (src.dtype()) {
    case DType::kF32: return run<float>(src, dst, t, threads);
    case DType::kF64: return run<double>(src, dst, t, threads);
    default:
      throw UnsupportedOp(fmt(node.describe(), ": input 0 has dtype ", dtype_name(src.dtype()), ", expected f32 or f64"));
  }
}

KernelFn make_dft(const Node& node) {
  return [&node](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int axis_input = dft_axis_input(node);
    const DftArgs a = dft_args(node, x.rank(), axis_input >= 0 && ctx.has_in(axis_input) ? &ctx.in(axis_input) : nullptr);
    const int64_t c = x.dim(x.rank() - 1);
    if (c != 1 && c != 2)
      throw ShapeError(fmt(node.describe(), ": input 0 has shape ", to_string(x.dims()),
                           ": its last dim must be 1 (real) or 2 (real, imaginary)"));
    LineTransform t = geometry(x.dims(), a.axis);
    t.src_rows = x.dim(a.axis);
    t.n_fft = n_fft_of(ctx, node, dft_default_length(a, t.src_rows));
    t.dst_rows = t.dst_used = dft_output_length(a, t.n_fft);
    t.src_used = std::min(t.src_rows, is_inverse_real(a) ? t.n_fft / 2 + 1 : t.n_fft);
    t.src_c = static_cast<int>(c);
    t.dst_c = static_cast<int>(dft_output_parts(a));
    t.sign = a.inverse ? 1.0 : -1.0;
    t.scale = a.inverse ? 1.0 / static_cast<double>(t.n_fft) : 1.0;
    if (is_inverse_real(a)) hermitian_weights(t, t.src_used, t.n_fft, /*on_source=*/true);
    dispatch(node, x, ctx.out(0), t, ctx.threads());
  };
}

KernelFn make_dft_grad(const Node& node) {
  return [&node](KernelContext& ctx) {
    const Tensor& dy = ctx.in(0);
    const std::vector<int64_t> x_dims = ctx.in(1).to_i64_vector();
    const DftArgs a = dft_args(node, static_cast<int64_t>(x_dims.size()), ctx.has_in(3) ? &ctx.in(3) : nullptr);
    LineTransform t = geometry(x_dims, a.axis);
    t.src_rows = dy.dim(a.axis);
    t.dst_rows = x_dims[static_cast<size_t>(a.axis)];
    t.n_fft = n_fft_of(ctx, node, dft_default_length(a, t.dst_rows));
    if (t.src_rows != dft_output_length(a, t.n_fft) || dy.dim(dy.rank() - 1) != dft_output_parts(a))
      throw ShapeError(fmt(node.describe(), ": the gradient has shape ", to_string(dy.dims()), ", expected ",
                           dft_output_length(a, t.n_fft), " along axis ", a.axis, " and ", dft_output_parts(a), " last"));
    t.src_used = t.src_rows;
    t.dst_used = std::min(t.dst_rows, is_inverse_real(a) ? t.n_fft / 2 + 1 : t.n_fft);
    t.src_c = static_cast<int>(dft_output_parts(a));
    t.dst_c = static_cast<int>(x_dims.back());
    t.sign = a.inverse ? -1.0 : 1.0;
    t.scale = a.inverse ? 1.0 / static_cast<double>(t.n_fft) : 1.0;
    if (is_inverse_real(a)) hermitian_weights(t, t.dst_used, t.n_fft, /*on_source=*/false);
    dispatch(node, dy, ctx.out(0), t, ctx.threads());
  };
}

}  // namespace

void register_dft_kernels(KernelTable& t) {
  const DTypeSet types = dtype_bit(DType::kF32) | dtype_bit(DType::kF64);  // bf16 / f16 run widened
  t.add("", "DFT", types, make_dft);
  t.add(kTrainrtDomain, "DFTGrad", types, make_dft_grad);
}

}  // namespace trainrt
