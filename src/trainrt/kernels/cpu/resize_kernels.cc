// Resize / Upsample and ResizeGrad (ops/resize_schema.cc, ops/resize_args.h), one axis at a time:
// resizing is separable, so an (outer, n, inner) view of the data becomes (outer, m, inner) with
// output row o the weighted sum of the input rows its taps name. The taps of an axis follow the ONNX
// reference (onnx/reference/ops/op_resize.py): the coordinate o maps to, x, then
//   nearest: one tap, x rounded as nearest_mode says;
//   linear, cubic: the 2 (4) pixels around x weighted by the triangle (Keys cubic, coefficient A)
//   kernel of their distance to x; with antialias and a scale s < 1 the kernel is stretched by 1 / s
//   and the weights normalized; exclude_outside drops taps outside the input and renormalizes.
// Taps outside the input read its edge pixel. tf_crop_and_resize's positions mapping outside the
// input are extrapolation_value.
//
// Nearest moves bytes (any dtype); linear and cubic compute in f32 (f64 for f64 data), 16-bit
// floats widened once. ResizeGrad runs the passes in reverse, each the transpose of its forward pass
// (every dY row added into the dX rows its taps name, with the same weights), in a fixed order per
// row: the sums do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/resize_args.h"

namespace trainrt {
namespace {

// The taps of one resized axis: output position o reads input rows index[o * width + t] with
// weight[o * width + t]; extrapolated[o] (when not empty) marks positions that read none.
struct AxisTaps {
  int64_t axis = 0, in = 0, out = 0;
  int width = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<bool> extrapolated;
};

// Where output position o of the axis lands in input coordinates (the ONNX formulas).
double source_coordinate(const ResizeArgs& args, const ResizeAxis& a, int64_t o, bool& outside) {
  const double n = static_cast<double>(a.in), s = a.scale, y = static_cast<double>(o);
  const double scaled = s * n;  // the output length before flooring, as the formulas use it
  switch (args.coordinates) {
    case ResizeCoordinates::kAlignCorners: return scaled == 1.0 ? 0.0 : y * (n - 1) / (scaled - 1);
    case ResizeCoordinates::kAsymmetric: return y / s;
    case ResizeCoordinates::kPytorchHalfPixel: return scaled == 1.0 ? -0.5 : (y + 0.5) / s - 0.5;
    case ResizeCoordinates::kHalfPixel: return (y + 0.5) / s - 0.5;
    case ResizeCoordinates::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(a.out) / scaled, center = n / 2;
      return center * (1 - adjustment) + (y + 0.5) / s - 0.5;
    }
    case ResizeCoordinates::kTfCropAndResize: {
      const double span = a.roi_end - a.roi_start;
      double x = scaled == 1.0 ? span * (n - 1) / 2 : y * span * (n - 1) / (scaled - 1);
      x += a.roi_start * (n - 1);
      outside = x < 0 || x > n - 1;
      return x;
    }
  }
  return 0.0;
}

int64_t nearest_index(NearestRounding mode, double x) {
  switch (mode) {
    case NearestRounding::kRoundPreferFloor: return static_cast<int64_t>(std::ceil(x - 0.5));
    case NearestRounding::kRoundPreferCeil: return static_cast<int64_t>(std::floor(x + 0.5));
    case NearestRounding::kFloor: return static_cast<int64_t>(std::floor(x));
    case NearestRounding::kCeil: return static_cast<int64_t>(std::ceil(x));
  }
  return 0;
}

double cubic_weight(double d, double A) {
  d = std::abs(d);
  if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0.0;
}

AxisTaps axis_taps(const ResizeArgs& args, const ResizeAxis& a, int64_t axis) {
  AxisTaps t{.axis = axis, .in = a.in, .out = a.out};
  const bool nearest = args.mode == ResizeMode::kNearest;
  // Kernel radius 1 (linear) or 2 (cubic), stretched by 1 / scale when antialiasing a downscale.
  const double stretch = args.antialias && a.scale < 1.0 ? a.scale : 1.0;
  const double radius = args.mode == ResizeMode::kCubic ? 2.0 : 1.0;
  const int64_t half = nearest ? 0 : static_cast<int64_t>(std::ceil(radius / stretch - 1e-9));
  t.width = nearest ? 1 : static_cast<int>(2 * half);
  t.index.resize(static_cast<size_t>(a.out * t.width));
  t.weight.resize(t.index.size());
  const bool crop = args.coordinates == ResizeCoordinates::kTfCropAndResize;
  if (crop) t.extrapolated.assign(static_cast<size_t>(a.out), false);
  for (int64_t o = 0; o < a.out; ++o) {
    bool outside = false;
    const double x = source_coordinate(args, a, o, outside);
    if (crop) t.extrapolated[static_cast<size_t>(o)] = outside;
    int64_t* index = t.index.data() + o * t.width;
    double* weight = t.weight.data() + o * t.width;
    if (nearest) {
      index[0] = std::clamp<int64_t>(nearest_index(args.nearest, x), 0, a.in - 1);
      weight[0] = 1.0;
      continue;
    }
    const int64_t first = static_cast<int64_t>(std::floor(x)) - half + 1;
    double sum = 0.0, kept = 0.0;
    for (int k = 0; k < t.width; ++k) {
      const int64_t i = first + k;
      const double d = (static_cast<double>(i) - x) * stretch;
      double w = args.mode == ResizeMode::kCubic ? cubic_weight(d, args.cubic_a) : std::max(0.0, 1.0 - std::abs(d));
      sum += w;
      if (args.exclude_outside && (i < 0 || i >= a.in)) w = 0.0;
      kept += w;
      index[k] = std::clamp<int64_t>(i, 0, a.in - 1);
      weight[k] = w;
    }
    // Antialiased weights are normalized; excluded taps hand their weight to the others.
    const double norm = args.exclude_outside ? kept : stretch < 1.0 ? sum : 1.0;
    if (norm != 1.0 && norm != 0.0)
      for (int k = 0; k < t.width; ++k) weight[k] /= norm;
  }
  return t;
}

// The passes of a node over input dims `in`: one per resized axis, in axis order.
std::vector<AxisTaps> plan_passes(const Node& node, const ResizeArgs& args, const std::vector<int64_t>& in,
                                  KernelContext& ctx) {
  auto value = [&](int i) -> const Tensor* { return i >= 0 && ctx.has_in(i) ? &ctx.in(i) : nullptr; };
  const Tensor* roi = args.coordinates == ResizeCoordinates::kTfCropAndResize ? value(args.roi_input) : nullptr;
  const auto axes = resize_axes(node.describe(), args, in, roi, value(args.scales_input), value(args.sizes_input));
  std::vector<AxisTaps> passes;
  for (size_t d = 0; d < axes.size(); ++d) {
    if (!axes[d].resized) continue;
    if (axes[d].in == 0 && axes[d].out > 0)
      throw ShapeError(fmt(node.describe(), ": axis ", d, " of size 0 cannot be resized to ", axes[d].out));
    passes.push_back(axis_taps(args, axes[d], static_cast<int64_t>(d)));
  }
  return passes;
}

// (outer, inner) of dims around `axis`.
std::pair<int64_t, int64_t> around(const std::vector<int64_t>& dims, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  return {outer, inner};
}

int64_t rows_per_task(int64_t row_work) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_work)); }

// y (outer, m, inner) from x (outer, n, inner), the taps' weighted sums.
template <typename W>
void forward_pass(const W* x, W* y, int64_t outer, int64_t inner, const AxisTaps& t, W fill, ThreadPool& pool) {
  const int64_t n = t.in, m = t.out;
  pool.parallel_for(outer * m, rows_per_task(inner * t.width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t a = r / m, o = r % m;
      W* row = y + r * inner;
      if (!t.extrapolated.empty() && t.extrapolated[static_cast<size_t>(o)]) {
        std::fill(row, row + inner, fill);
        continue;
      }
      const W* plane = x + a * n * inner;
      const int64_t* index = t.index.data() + o * t.width;
      const double* weight = t.weight.data() + o * t.width;
      const W w0 = static_cast<W>(weight[0]);
      const W* src0 = plane + index[0] * inner;
      for (int64_t j = 0; j < inner; ++j) row[j] = w0 * src0[j];
      for (int k = 1; k < t.width; ++k) {
        const W w = static_cast<W>(weight[k]);
        if (w == W(0)) continue;
        const W* src = plane + index[k] * inner;
        for (int64_t j = 0; j < inner; ++j) row[j] += w * src[j];
      }
    }
  });
}

// dx (outer, n, inner) from dy (outer, m, inner): forward_pass's transpose.
template <typename W>
void backward_pass(const W* dy, W* dx, int64_t outer, int64_t inner, const AxisTaps& t, ThreadPool& pool) {
  const int64_t n = t.in, m = t.out;
  pool.parallel_for(outer, rows_per_task(m * inner * t.width), [&](int64_t begin, int64_t end) {
    for (int64_t a = begin; a < end; ++a) {
      W* plane = dx + a * n * inner;
      std::fill(plane, plane + n * inner, W(0));
      for (int64_t o = 0; o < m; ++o) {
        if (!t.extrapolated.empty() && t.extrapolated[static_cast<size_t>(o)]) continue;
        const W* g = dy + (a * m + o) * inner;
        for (int k = 0; k < t.width; ++k) {
          const W w = static_cast<W>(t.weight[static_cast<size_t>(o * t.width + k)]);
          if (w == W(0)) continue;
          W* dst = plane + t.index[static_cast<size_t>(o * t.width + k)] * inner;
          for (int64_t j = 0; j < inner; ++j) dst[j] += w * g[j];
        }
      }
    }
  });
}

// Nearest on bytes: row o of each plane copied from row index[o] (extrapolated rows from `fill`).
void nearest_pass(const std::byte* x, std::byte* y, int64_t outer, int64_t inner, size_t elem, const AxisTaps& t,
                  const std::vector<std::byte>& fill, ThreadPool& pool) {
  const int64_t n = t.in, m = t.out;
  const size_t row_bytes = static_cast<size_t>(inner) * elem;
  pool.parallel_for(outer * m, rows_per_task(inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t a = r / m, o = r % m;
      std::byte* row = y + static_cast<size_t>(r) * row_bytes;
      if (!t.extrapolated.empty() && t.extrapolated[static_cast<size_t>(o)]) {
        for (int64_t j = 0; j < inner; ++j) std::memcpy(row + static_cast<size_t>(j) * elem, fill.data(), elem);
        continue;
      }
      std::memcpy(row, x + static_cast<size_t>(a * n + t.index[static_cast<size_t>(o)]) * row_bytes, row_bytes);
    }
  });
}

// Runs `passes` over `dims`, ping-ponging between two scratch buffers; pass(in, out, outer, inner, taps).
template <typename E, typename Pass>
std::vector<E> run_passes(const E* first, std::vector<int64_t> dims, const std::vector<AxisTaps>& passes, bool reverse,
                          size_t elems_per_item, Pass pass) {
  std::vector<E> current, next;
  const E* in = first;
  for (size_t p = 0; p < passes.size(); ++p) {
    const AxisTaps& t = passes[reverse ? passes.size() - 1 - p : p];
    const auto [outer, inner] = around(dims, t.axis);
    dims[static_cast<size_t>(t.axis)] = reverse ? t.in : t.out;
    next.resize(static_cast<size_t>(outer * (reverse ? t.in : t.out) * inner) * elems_per_item);
    pass(in, next.data(), outer, inner, t);
    current.swap(next);
    in = current.data();
  }
  return current;
}

// Interpolating passes in W over a T tensor x into y (forward) or dY into dX (reverse).
template <typename T>
void interpolate(const Tensor& from, Tensor& to, const std::vector<AxisTaps>& passes, bool reverse, double fill,
                 ThreadPool& pool) {
  using W = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (passes.empty()) {
    std::memcpy(to.raw(), from.raw(), from.nbytes());
    return;
  }
  std::vector<W> widened;
  const W* start;
  if constexpr (std::is_same_v<T, W>) {
    start = from.data<T>();
  } else {
    widened.resize(static_cast<size_t>(from.numel()));
    const T* x = from.data<T>();
    for (int64_t i = 0; i < from.numel(); ++i) widened[static_cast<size_t>(i)] = static_cast<W>(element_as_double(x[i]));
    start = widened.data();
  }
  auto result = run_passes<W>(start, from.dims(), passes, reverse, 1,
                              [&](const W* in, W* out, int64_t outer, int64_t inner, const AxisTaps& t) {
                                if (reverse) backward_pass<W>(in, out, outer, inner, t, pool);
                                else forward_pass<W>(in, out, outer, inner, t, static_cast<W>(fill), pool);
                              });
  T* y = to.data<T>();
  for (int64_t i = 0; i < to.numel(); ++i) y[i] = element_from_double<T>(result[static_cast<size_t>(i)]);
}

std::vector<std::byte> fill_bytes(DType dtype, double value) {
  std::vector<std::byte> out(dtype_size(dtype));
  visit_dtype(dtype, [&]<typename T>() {
    const T v = element_from_double<T>(value);
    std::memcpy(out.data(), &v, sizeof(T));
  });
  return out;
}

KernelFn make_resize(const Node& node) {
  const ResizeArgs args = resize_args(node);
  return [&node, args](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    const auto passes = plan_passes(node, args, x.dims(), ctx);
    if (args.mode == ResizeMode::kNearest) {
      const size_t elem = dtype_size(x.dtype());
      const auto fill = fill_bytes(x.dtype(), args.extrapolation_value);
      if (passes.empty()) return void(std::memcpy(y.raw(), x.raw(), x.nbytes()));
      auto result = run_passes<std::byte>(static_cast<const std::byte*>(x.raw()), x.dims(), passes, false, elem,
                                          [&](const std::byte* in, std::byte* out, int64_t outer, int64_t inner,
                                              const AxisTaps& t) { nearest_pass(in, out, outer, inner, elem, t, fill, ctx.threads()); });
      std::memcpy(y.raw(), result.data(), y.nbytes());
      return;
    }
    visit_dtype(x.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                    std::is_same_v<T, BFloat16>)
        interpolate<T>(x, y, passes, false, args.extrapolation_value, ctx.threads());
      else
        throw UnsupportedOp(fmt(node.describe(), ": linear and cubic resize take float data, not ", dtype_name(x.dtype())));
    });
  };
}

KernelFn make_resize_grad(const Node& node) {
  const ResizeArgs args = resize_args(node);
  return [&node, args](KernelContext& ctx) {
    const Tensor& dy = ctx.in(0);
    Tensor& dx = ctx.out(0);
    const auto passes = plan_passes(node, args, dx.dims(), ctx);
    std::vector<int64_t> resized = dx.dims();
    for (const AxisTaps& t : passes) resized[static_cast<size_t>(t.axis)] = t.out;
    if (resized != dy.dims())
      throw ShapeError(fmt(node.describe(), ": dY is ", to_string(dy.dims()), ", the resize of ", to_string(dx.dims()),
                           " makes ", to_string(resized)));
    visit_dtype(dy.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                    std::is_same_v<T, BFloat16>)
        interpolate<T>(dy, dx, passes, true, 0.0, ctx.threads());
      else
        throw UnsupportedOp(fmt(node.describe(), ": no gradient for dY of dtype ", dtype_name(dy.dtype())));
    });
  };
}

}  // namespace

void register_resize_kernels(KernelTable& t) {
  // nearest copies any element; linear and cubic refuse integer data when they run.
  t.add("", "Resize", kAllTypes, make_resize);
  t.add("", "Upsample", kAllTypes, make_resize);
  t.add(kTrainrtDomain, "ResizeGrad", kFloatTypes, make_resize_grad);
}

}  // namespace trainrt
