// The fused gradient kernels of the data movement family on f32: SliceGrad against the forward
// Slice kernel (which position each dY element came from), GatherGrad against a serial scatter-add
// in index order (equal bit for bit, whatever the thread count), DropoutGrad against its formula.
// The f64 kernels are checked against finite differences by the gradient rules' tests.
#include <gtest/gtest.h>

#include <climits>
#include <random>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;

std::vector<Tensor> run_grad(const std::string& op, const std::vector<Tensor>& inputs,
                             std::map<std::string, Attribute> attrs = {}) {
  NodeSpec spec{.op = op, .attrs = std::move(attrs), .domain = std::string(kTrainrtDomain)};
  return run_node(spec, inputs, cpu_kernel_table());
}

// ---- SliceGrad ----

// SliceGrad(dY) for dims `x_dims` and the slice arguments (inputs 1-4 of Slice), checked against
// the forward: Slice of a tensor holding each element's flat position says where dY[j] belongs.
void check_slice_grad(const std::vector<int64_t>& x_dims, const std::vector<Tensor>& args) {
  SCOPED_TRACE("SliceGrad of " + to_string(x_dims));
  Tensor positions = Tensor::empty(DType::kF32, x_dims);
  for (int64_t i = 0; i < positions.numel(); ++i) positions.data<float>()[i] = static_cast<float>(i);
  std::vector<Tensor> slice_inputs{positions};
  slice_inputs.insert(slice_inputs.end(), args.begin(), args.end());
  const Tensor from = run_node("Slice", slice_inputs)[0];
  const Tensor dy = random_tensor(from.dims(), 3);
  std::vector<Tensor> grad_inputs{dy, Tensor::from_i64(x_dims)};
  grad_inputs.insert(grad_inputs.end(), args.begin(), args.end());
  const Tensor dx = run_grad("SliceGrad", grad_inputs)[0];
  Tensor expected = Tensor::zeros(DType::kF32, x_dims);
  for (int64_t j = 0; j < dy.numel(); ++j)
    expected.data<float>()[static_cast<int64_t>(from.data<float>()[j])] = dy.data<float>()[j];
  expect_close(dx, expected, 0, 0);
}

TEST(SliceGradKernel, WritesDyAtTheSlicedPositionsAndZerosElsewhere) {
  const auto i64 = [](std::vector<int64_t> v) { return Tensor::from_i64(v); };
  check_slice_grad({4, 5}, {i64({1, 0}), i64({3, 5})});                            // axes, steps omitted
  check_slice_grad({4, 5}, {i64({-1}), i64({INT64_MIN}), i64({1}), i64({-1})});    // reversed columns
  check_slice_grad({6, 7, 3}, {i64({5, 1}), i64({0, 100}), i64({0, -2}), i64({-2, 3})});  // clamped end
  check_slice_grad({3, 4}, {i64({-100}), i64({100}), i64({-1}), i64({2})});        // clamped start
  check_slice_grad({3, 4}, {i64({2}), i64({2}), i64({0}), i64({1})});              // empty slice
  Tensor i32 = Tensor::empty(DType::kI32, {1});
  i32.data<int32_t>()[0] = 1;
  check_slice_grad({5, 2}, {i32, i32});                                            // i32 bounds
  check_slice_grad({64, 1024}, {i64({1, 3}), i64({64, 1000}), i64({0, 1}), i64({2, 3})});  // parallel
}

TEST(SliceGradKernel, RejectsDyThatIsNotTheSlicesShape) {
  const Tensor dy = random_tensor({2, 2}, 1);
  EXPECT_THROW(run_grad("SliceGrad", {dy, Tensor::from_i64({4, 4}), Tensor::from_i64({0}), Tensor::from_i64({3})}),
               ShapeError);
}

// ---- GatherGrad ----

// dX (outer, rows, inner) = scatter-add of dY (outer, n, inner) into rows `indices`, serially in
// index order: the order the kernel promises, so f32 results match exactly.
Tensor gather_grad_reference(const std::vector<int64_t>& x_dims, int64_t axis, const std::vector<int64_t>& indices,
                             const Tensor& dy) {
  Tensor dx = Tensor::zeros(DType::kF32, x_dims);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x_dims[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < x_dims.size(); ++i) inner *= x_dims[i];
  const int64_t rows = x_dims[static_cast<size_t>(axis)], n = static_cast<int64_t>(indices.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = indices[static_cast<size_t>(j)] < 0 ? indices[static_cast<size_t>(j)] + rows
                                                             : indices[static_cast<size_t>(j)];
      for (int64_t c = 0; c < inner; ++c)
        dx.data<float>()[(o * rows + v) * inner + c] += dy.data<float>()[(o * n + j) * inner + c];
    }
  return dx;
}

// padding_idx >= 0: that row of the reference is zeroed (torch's embedding backward).
void check_gather_grad(const std::vector<int64_t>& x_dims, int64_t axis, const Tensor& indices,
                       int64_t padding_idx = -1) {
  SCOPED_TRACE("GatherGrad of " + to_string(x_dims) + " axis " + std::to_string(axis) + " padding_idx " +
               std::to_string(padding_idx));
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(x_dims.size()) : axis;
  std::vector<int64_t> dy_dims(x_dims.begin(), x_dims.begin() + a);
  dy_dims.insert(dy_dims.end(), indices.dims().begin(), indices.dims().end());
  dy_dims.insert(dy_dims.end(), x_dims.begin() + a + 1, x_dims.end());
  const Tensor dy = random_tensor(dy_dims, 5);
  std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(axis)}};
  if (padding_idx >= 0) attrs["padding_idx"] = Attribute::of_int(padding_idx);
  const Tensor dx = run_grad("GatherGrad", {Tensor::from_i64(x_dims), indices, dy}, attrs)[0];
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < indices.numel(); ++j) idx.push_back(indices.to_i64(j));
  Tensor expected = gather_grad_reference(x_dims, a, idx, dy);
  if (padding_idx >= 0) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x_dims[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(a) + 1; i < x_dims.size(); ++i) inner *= x_dims[i];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < inner; ++c)
        expected.data<float>()[(o * x_dims[static_cast<size_t>(a)] + padding_idx) * inner + c] = 0.f;
  }
  expect_close(dx, expected, 0, 0);
}

Tensor random_indices(std::vector<int64_t> dims, int64_t rows, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kI64, std::move(dims));
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)  // both signs: negative indices count from the back
    t.data<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<uint32_t>(2 * rows)) - rows;
  return t;
}

TEST(GatherGradKernel, ScatterAddsRepeatedAndNegativeIndicesInIndexOrder) {
  check_gather_grad({5, 3}, 0, make_tensor<int64_t>({4}, {1, -4, 4, 1}));          // 1 and -4 repeat
  check_gather_grad({2, 6, 3}, 1, make_tensor<int64_t>({2, 2}, {0, 5, -1, 0}));    // 2-D indices
  check_gather_grad({3, 4}, -1, make_tensor<int64_t>({}, {2}));                    // scalar index
  check_gather_grad({4, 3}, 0, make_tensor<int32_t>({3}, {3, 3, -1}));             // i32 indices
  check_gather_grad({4, 3}, 0, make_tensor<int64_t>({0}, {}));                     // no indices
  // An embedding table's gradient: many repeats, work spread over rows and column blocks.
  check_gather_grad({1000, 512}, 0, random_indices({8, 512}, 1000, 7));
  check_gather_grad({3, 6000}, 0, random_indices({400}, 3, 8));                   // few long rows
}

TEST(GatherGradKernel, PaddingIdxRowGetsNoGradient) {
  check_gather_grad({5, 3}, 0, make_tensor<int64_t>({6}, {0, 2, 0, 4, 2, 0}), 0);   // padding at the front
  check_gather_grad({5, 3}, 0, make_tensor<int64_t>({4}, {1, -1, 4, 2}), 4);        // -1 names row 4 too
  check_gather_grad({2, 6, 3}, 1, make_tensor<int64_t>({2, 2}, {0, 5, 5, 1}), 5);   // an inner axis
  check_gather_grad({4, 3}, 0, make_tensor<int32_t>({3}, {3, 3, 1}), 2);            // padding row unused
  check_gather_grad({1000, 512}, 0, random_indices({8, 512}, 1000, 9), 0);          // parallel path
}

TEST(GatherGradKernel, RejectsPaddingIdxOutOfRange) {
  const Tensor dy = random_tensor({1, 3}, 1);
  for (int64_t p : {4, -1})
    EXPECT_THROW(run_grad("GatherGrad", {Tensor::from_i64({4, 3}), make_tensor<int64_t>({1}, {0}), dy},
                          {{"padding_idx", Attribute::of_int(p)}}),
                 ShapeError);
}

// With an addend, dX is Sum(addend, GatherGrad(...)) bit for bit: each row's bucket is summed first,
// as without one; untouched rows and the padding row keep the addend's values.
void check_gather_grad_onto_addend(const std::vector<int64_t>& x_dims, const Tensor& indices,
                                   std::map<std::string, Attribute> attrs = {}) {
  SCOPED_TRACE("GatherGrad onto an addend of " + to_string(x_dims));
  std::vector<int64_t> dy_dims = indices.dims();
  dy_dims.insert(dy_dims.end(), x_dims.begin() + 1, x_dims.end());
  const Tensor dy = random_tensor(dy_dims, 11), addend = random_tensor(x_dims, 12);
  const Tensor scattered = run_grad("GatherGrad", {Tensor::from_i64(x_dims), indices, dy}, attrs)[0];
  const Tensor expected = run_node("Sum", {addend, scattered})[0];
  expect_close(run_grad("GatherGrad", {Tensor::from_i64(x_dims), indices, dy, addend}, attrs)[0], expected, 0, 0);
}

TEST(GatherGradKernel, AccumulatesOntoAnAddendAsSumWould) {
  check_gather_grad_onto_addend({5, 3}, make_tensor<int64_t>({4}, {1, -4, 4, 1}));  // repeats, rows 0 and 2 untouched
  check_gather_grad_onto_addend({5, 3}, make_tensor<int64_t>({6}, {0, 2, 0, 4, 2, 0}),
                                {{"padding_idx", Attribute::of_int(0)}});
  check_gather_grad_onto_addend({1000, 512}, random_indices({8, 512}, 1000, 10));  // parallel, column blocks
  check_gather_grad_onto_addend({3, 6000}, random_indices({400}, 3, 13));
}

TEST(GatherGradKernel, RejectsAnAddendOfOtherDims) {
  const Tensor dy = random_tensor({2, 3}, 1);
  EXPECT_THROW(run_grad("GatherGrad", {Tensor::from_i64({4, 3}), make_tensor<int64_t>({2}, {0, 1}), dy,
                                       random_tensor({3, 3}, 2)}),
               ShapeError);
}

TEST(EmbeddingKernel, GathersRowsAsGatherDoes) {
  const Tensor table = random_tensor({7, 5}, 4);
  const Tensor ids = make_tensor<int64_t>({2, 3}, {0, 6, 3, 3, 0, 1});
  const Tensor got = run_grad("Embedding", {table, ids}, {{"padding_idx", Attribute::of_int(0)}})[0];
  expect_close(got, run_node("Gather", {table, ids})[0], 0, 0);
}

TEST(GatherGradKernel, RejectsIndicesOutOfRange) {
  const Tensor dy = random_tensor({1, 3}, 1);
  EXPECT_THROW(run_grad("GatherGrad", {Tensor::from_i64({4, 3}), make_tensor<int64_t>({1}, {4}), dy}), ShapeError);
  EXPECT_THROW(run_grad("GatherGrad", {Tensor::from_i64({4, 3}), make_tensor<int64_t>({1}, {-5}), dy}), ShapeError);
}

// ---- DropoutGrad ----

Tensor random_mask(std::vector<int64_t> dims, uint32_t seed) {
  Tensor m = Tensor::empty(DType::kBool, std::move(dims));
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = rng() % 4 != 0;
  return m;
}

Tensor masked_reference(const Tensor& dy, const Tensor& mask, float scale) {
  Tensor dx = Tensor::empty(DType::kF32, dy.dims());
  for (int64_t i = 0; i < dy.numel(); ++i)
    dx.data<float>()[i] = mask.data<bool>()[i] ? dy.data<float>()[i] * scale : 0.f;
  return dx;
}

TEST(DropoutGradKernel, ScalesKeptElementsInTrainingAndPassesDyOtherwise) {
  const Tensor dy = random_tensor({70, 1000}, 2);  // large enough for the parallel path
  const Tensor mask = random_mask({70, 1000}, 3);
  const Tensor on = Tensor::scalar<bool>(true), off = Tensor::scalar<bool>(false);
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(0.25f), on})[0],
               masked_reference(dy, mask, 1.f / 0.75f), 1e-6, 0);
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor(), on})[0], masked_reference(dy, mask, 2.f), 1e-6, 0);
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(1.f), on})[0],
               masked_reference(dy, mask, 0.f), 0, 0);
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(0.25f), off})[0], dy, 0, 0);
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(0.25f)})[0], dy, 0, 0);  // no mode
  expect_close(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(0.f), on})[0], dy, 0, 0);
  EXPECT_THROW(run_grad("DropoutGrad", {dy, mask, Tensor::scalar<float>(1.5f), on}), InvalidModel);
}

}  // namespace
}  // namespace trainrt
