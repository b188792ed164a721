// DFT's kernel against numbers worked by hand and against its own inverse; one thread against the
// pool; errors that name the node. The ONNX node tests (conformance) check it against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/core/thread_budget.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;

// Deterministic values in (-1, 1) of the given dims, f64.
Tensor values_f64(std::vector<int64_t> dims, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(0.7 * static_cast<double>(i + seed) + seed);
  return make_tensor<double>(std::move(dims), v);
}

Tensor dft(const std::vector<Tensor>& inputs, std::map<std::string, Attribute> attrs = {}, int opset = 20) {
  return run_node({.op = "DFT", .attrs = std::move(attrs), .opset = opset}, inputs, cpu_kernel_table())[0];
}

TEST(DftKernels, AnImpulseAndAConstantTransformAsWorkedByHand) {
  // (1, 4, 1): x = [1, 0, 0, 0] -> all ones; [1, 1, 1, 1] -> [4, 0, 0, 0].
  const Tensor impulse = make_tensor<float>({1, 4, 1}, {1, 0, 0, 0});
  const Tensor ones = make_tensor<float>({1, 4, 1}, {1, 1, 1, 1});
  testing::expect_close(dft({impulse}), make_tensor<float>({1, 4, 2}, {1, 0, 1, 0, 1, 0, 1, 0}), 1e-6, 1e-6);
  testing::expect_close(dft({ones}), make_tensor<float>({1, 4, 2}, {4, 0, 0, 0, 0, 0, 0, 0}), 1e-6, 1e-6);
  // x = [0, 1, 0, 0]: X[k] = exp(-2 pi i k / 4) = 1, -i, -1, i; onesided keeps k = 0, 1, 2.
  const Tensor shifted = make_tensor<float>({1, 4, 1}, {0, 1, 0, 0});
  testing::expect_close(dft({shifted}, {{"onesided", Attribute::of_int(1)}}),
                        make_tensor<float>({1, 3, 2}, {1, 0, 0, -1, -1, 0}), 1e-6, 1e-6);
}

TEST(DftKernels, TheInverseRealTransformRebuildsTheSignalFromItsHalfSpectrum) {
  // rfft([1, 2, 3, 4]) = [10, -2 + 2i, -2]; the imaginary parts of rows 0 and N / 2 are ignored
  // (numpy.fft.irfft), so the 5i and 7i below change nothing.
  const Tensor half = make_tensor<double>({1, 3, 2}, {10, 5, -2, 2, -2, 7});
  const Attribute on = Attribute::of_int(1);
  testing::expect_close(dft({half}, {{"inverse", on}, {"onesided", on}}), make_tensor<double>({1, 4, 1}, {1, 2, 3, 4}),
                        1e-12, 1e-12);
  // An odd length (5): rows 0 .. 2 count, row 2 twice.
  const Tensor x = make_tensor<double>({1, 5, 1}, {0.5, -1, 2, 0.25, 3});
  const Tensor spectrum = dft({x}, {{"onesided", on}});
  ASSERT_EQ(spectrum.dims(), (std::vector<int64_t>{1, 3, 2}));
  testing::expect_close(dft({spectrum, Tensor::from_i64({5})}, {{"inverse", on}, {"onesided", on}}), x, 1e-12, 1e-12);
}

TEST(DftKernels, TheInverseUndoesTheTransformAlongEveryAxis) {
  const Tensor x = values_f64({3, 5, 4, 2}, 92);
  for (int64_t axis : {0, 1, 2, -2, -3}) {
    SCOPED_TRACE(axis);
    const Tensor a = Tensor::from_i64({axis});
    const Tensor back = dft({dft({x, Tensor(), a}), Tensor(), a}, {{"inverse", Attribute::of_int(1)}});
    testing::expect_close(back, x, 1e-12, 1e-12);
  }
}

TEST(DftKernels, OneThreadGivesThePoolsBits) {
  const Tensor x = make_tensor<float>({8, 33, 1}, std::vector<float>(8 * 33, 0.25f));
  set_thread_budget(1);
  const Tensor serial = dft({x});
  set_thread_budget(0);
  const Tensor pooled = dft({x});
  ASSERT_EQ(serial.dims(), pooled.dims());
  EXPECT_EQ(std::memcmp(serial.raw(), pooled.raw(), serial.nbytes()), 0);
}

TEST(DftKernels, BadInputsNameTheNode) {
  const Tensor x = values_f64({2, 4, 3}, 93);  // last dim 3: neither real nor complex
  EXPECT_THROW(dft({x}), ShapeError);
  const Tensor good = values_f64({2, 4, 1}, 94);
  try {
    dft({good, Tensor(), Tensor::from_i64({2})});  // the last dim is not a signal axis
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("DFT"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("axis 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dft({good, Tensor::from_i64({0})}), ShapeError);
}

}  // namespace
}  // namespace trainrt
