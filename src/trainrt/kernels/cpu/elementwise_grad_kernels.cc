// CPU kernels of the elementwise family's TrainRT-domain gradient ops (schemas in
// ops/elementwise_grad_schemas.cc), and the registration of FusedMatMul (fused_matmul_kernels.h).
//
// Each op maps (dY, V) -> dX element by element, V being the forward's output Y or input X:
//   ReluGrad(dY, Y)       dX = dY where Y > 0, else 0       (PyTorch threshold_backward(dY, Y, 0))
//   LeakyReluGrad(dY, V)  dX = dY where V > 0, else alpha dY (PyTorch leaky_relu_backward). V may
//                         be X, or Y when alpha >= 0: then Y > 0 exactly where X > 0
//   SigmoidGrad(dY, Y)    dX = dY Y (1 - Y)                  (PyTorch sigmoid_backward)
//   TanhGrad(dY, Y)       dX = dY (1 - Y^2)                  (PyTorch tanh_backward)
//   GeluGrad(dY, X)       dX = dY (Phi(X) + X phi(X)), or for approximate="tanh"
//                         dY (s + 0.5 X sech^2(u) u'), u = sqrt(2/pi) (X + 0.044715 X^3),
//                         s = (1 + tanh u) / 2 = sigmoid(2u)   (PyTorch GeluBackward kernels)
// f32 (and f16 / bf16, computed in f32) is vectorized with vector_math.h and split over threads
// above 2 * kElementwiseGrain elements; f64 uses std:: math (the gradient checks run in f64).
// dX may be written over dY (each element is read before it is written).
#include <cmath>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise.h"
#include "trainrt/kernels/cpu/elementwise_kernels.h"
#include "trainrt/kernels/cpu/fused_matmul_kernels.h"
#include "trainrt/kernels/cpu/vector_math.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

struct ReluGradOp {
  // As threshold_backward: zero where Y <= 0, so a NaN Y passes dY on.
  float operator()(float dy, float y) const { return select_f32(y <= 0.f, 0.f, dy); }
  double operator()(double dy, double y) const { return y <= 0 ? 0.0 : dy; }
};

struct LeakyReluGradOp {
  float alpha;
  float operator()(float dy, float v) const { return select_f32(v > 0.f, dy, dy * alpha); }
  double operator()(double dy, double v) const { return v > 0 ? dy : dy * static_cast<double>(alpha); }
};

struct SigmoidGradOp {
  template <typename T>
  T operator()(T dy, T y) const { return dy * (T(1) - y) * y; }
};

struct TanhGradOp {
  template <typename T>
  T operator()(T dy, T y) const { return dy * (T(1) - y * y); }
};

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

// d/dx x Phi(x) = Phi(x) + x phi(x) (vector_math.h).
struct GeluGradOp {
  float operator()(float dy, float x) const { return gelu_grad_f32(dy, x); }
  double operator()(double dy, double x) const {
    return dy * (0.5 * std::erfc(-x * kInvSqrt2) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x));
  }
};

// d/dx 0.5 x (1 + tanh u) (vector_math.h; the double form below follows the same steps).
struct GeluTanhGradOp {
  float operator()(float dy, float x) const { return gelu_tanh_grad_f32(dy, x); }
  double operator()(double dy, double x) const {
    constexpr double kFlat = 40;
    if (std::abs(x) > kFlat) return x > 0 ? dy : 0.0;
    const double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const double du = kSqrt2OverPi * (1 + 3 * kGeluCubic * x * x);
    const double e = std::exp(-2 * std::abs(u));
    const double r = 1 / (1 + e);
    return dy * ((u < 0 ? e * r : r) + 0.5 * x * (4 * e * r * r) * du);
  }
};

// y = op(a, b) over equally shaped a, b, y (y may alias a).
template <typename T, typename Op>
void map_same_dims(const Op& op, const Tensor& a, const Tensor& b, Tensor& y, ThreadPool& pool) {
  const T* as = a.data<T>();
  const T* bs = b.data<T>();
  T* ys = y.data<T>();
  parallel_elements(pool, y.numel(), [&](int64_t begin, int64_t end) {
    binary_span(op, as + begin, true, bs + begin, true, ys + begin, end - begin);
  });
}

template <typename Op>
KernelFn grad_kernel(const Node& node, const Op& op) {
  const DType t = input_dtype(node, 0);
  if (input_dtype(node, 1) != t)
    throw InvalidModel(fmt(node.describe(), ": input 1 has dtype ", dtype_name(input_dtype(node, 1)),
                           ", expected ", dtype_name(t), " like input 0 (dY)"));
  return visit_dtype(t, [&]<typename T>() -> KernelFn {
    if constexpr (dtype_in<T>(kFloatTypes)) {
      return [op, where = node.describe()](KernelContext& ctx) {
        const Tensor& dy = ctx.in(0);
        const Tensor& v = ctx.in(1);
        if (dy.dims() != v.dims())
          throw ShapeError(fmt(where, ": input 0 (dY) has shape ", to_string(dy.dims()), ", input 1 has shape ",
                               to_string(v.dims()), "; they must match"));
        map_same_dims<T>(op, dy, v, ctx.out(0), ctx.threads());
      };
    } else {
      throw_unsupported_dtype(node, "input 0", t);
    }
  });
}

template <typename Op>
KernelFn make_grad(const Node& node) {
  return grad_kernel(node, Op{});
}

KernelFn make_leaky_relu_grad(const Node& node) {
  return grad_kernel(node, LeakyReluGradOp{node.attr_float("alpha", 0.01f)});
}

KernelFn make_gelu_grad(const Node& node) {
  const std::string approximate = node.attr_string("approximate", "none");
  if (approximate == "none") return grad_kernel(node, GeluGradOp{});
  if (approximate == "tanh") return grad_kernel(node, GeluTanhGradOp{});
  throw InvalidModel(fmt(node.describe(), ": attribute approximate is '", approximate,
                         "', expected 'none' or 'tanh'"));
}

}  // namespace

void register_elementwise_grad_kernels(KernelTable& t) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    t.add(kTrainrtDomain, "ReluGrad", d, make_grad<ReluGradOp>);
    t.add(kTrainrtDomain, "LeakyReluGrad", d, make_leaky_relu_grad);
    t.add(kTrainrtDomain, "SigmoidGrad", d, make_grad<SigmoidGradOp>);
    t.add(kTrainrtDomain, "TanhGrad", d, make_grad<TanhGradOp>);
    t.add(kTrainrtDomain, "GeluGrad", d, make_gelu_grad);
  }
  register_fused_matmul_kernels(t);
}

}  // namespace trainrt
