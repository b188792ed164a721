// Kernels that keep what they planned for their last run (MatMul and FusedMatMul their product
// plan, Transpose, Expand and Tile their strided walk, Reduce* their axes mask, the pools their
// windows), so that a steady-state run allocates nothing: one kernel run on a shape, then on another, then on the first again must give, bit for
// bit, what a fresh kernel gives on each (run_node makes a fresh one per call).
#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

using testing::random_tensor;

// One node over inputs of symbolic shape, its kernel made once; run() feeds it concrete tensors.
class KeptKernel {
 public:
  // Inputs of `like`'s dtypes.
  KeptKernel(const std::string& op, const std::string& domain, const std::vector<Tensor>& like,
             const std::map<std::string, Attribute>& attrs) {
    graph_.set_opset("", 23);
    if (!domain.empty()) graph_.set_opset(domain, 1);
    std::vector<Value*> inputs;
    for (size_t i = 0; i < like.size(); ++i)
      inputs.push_back(graph_.add_input("in" + std::to_string(i), like[i].dtype(), Shape::unknown_rank()));
    Node* node = graph_.add_node(op, inputs, {"out"}, domain, "node");
    for (const auto& [name, a] : attrs) node->set_attr(name, a);
    node->output(0)->dtype = DType::kF32;
    kernel_ = cpu_kernel_table().create(*node);
  }

  // The kernel's output on `inputs`, into an output allocated as `out_dims`.
  Tensor run(const std::vector<Tensor>& inputs, std::vector<int64_t> out_dims) {
    Tensor out = Tensor::empty(DType::kF32, std::move(out_dims));
    std::vector<const Tensor*> in;
    for (const Tensor& t : inputs) in.push_back(&t);
    Tensor* outs[] = {&out};
    KernelContext ctx;
    ctx.inputs = in;
    ctx.outputs = outs;
    kernel_(ctx);
    return out;
  }

 private:
  Graph graph_;
  KernelFn kernel_;
};

void expect_bitwise_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << what;
}

// Runs the kept kernel on each input list in turn, then on the first again, comparing each
// result with a fresh kernel's.
void check_kept(const std::string& op, const std::string& domain, const std::map<std::string, Attribute>& attrs,
                const std::vector<std::vector<Tensor>>& runs) {
  KeptKernel kept(op, domain, runs[0], attrs);
  NodeSpec spec{.op = op, .attrs = attrs, .domain = domain, .opset = domain.empty() ? 23 : 1};
  std::vector<size_t> order;
  for (size_t i = 0; i < runs.size(); ++i) order.push_back(i);
  order.push_back(0);
  for (size_t i : order) {
    const Tensor want = run_node(spec, runs[i], cpu_kernel_table())[0];
    expect_bitwise_equal(kept.run(runs[i], want.dims()), want, op + " run on input list " + std::to_string(i));
  }
}

TEST(KeptPlans, MatMulReplansWhenTheShapesChange) {
  check_kept("MatMul", "", {},
             {{random_tensor({2, 3, 5, 4}, 1), random_tensor({4, 6}, 2)},
              {random_tensor({7, 4}, 3), random_tensor({3, 4, 2}, 4)},
              {random_tensor({3, 1, 5, 4}, 5), random_tensor({2, 4, 6}, 6)}});
}

TEST(KeptPlans, FusedMatMulReplansWhenTheShapesChange) {
  const std::map<std::string, Attribute> attrs{{"transB", Attribute::of_int(1)}};
  check_kept("FusedMatMul", std::string(kTrainrtDomain), attrs,
             {{random_tensor({2, 5, 4}, 1), random_tensor({6, 4}, 2)},
              {random_tensor({3, 7, 8}, 3), random_tensor({3, 2, 8}, 4)}});
}

TEST(KeptPlans, TransposeExpandAndTileRemakeTheirWalkWhenTheShapesChange) {
  check_kept("Transpose", "", {{"perm", Attribute::of_ints({0, 2, 1})}},
             {{random_tensor({2, 3, 4}, 1)}, {random_tensor({3, 70, 65}, 2)}, {random_tensor({1, 1, 1}, 3)}});
  check_kept("Expand", "", {},
             {{random_tensor({3, 1}, 1), Tensor::from_i64({2, 3, 4})},
              {random_tensor({1, 5}, 2), Tensor::from_i64({5, 5})}});
  check_kept("Tile", "", {},
             {{random_tensor({2, 3}, 1), Tensor::from_i64({2, 1})}, {random_tensor({4, 1}, 2), Tensor::from_i64({1, 3})}});
}

TEST(KeptPlans, ReduceRemakesItsMaskWhenTheAxesOrTheRankChange) {
  check_kept("ReduceMean", "", {},
             {{random_tensor({3, 4, 5}, 1), Tensor::from_i64({1})},
              {random_tensor({3, 4, 5}, 2), Tensor::from_i64({0, 2})},
              {random_tensor({6, 7}, 3), Tensor::from_i64({1})}});
}

TEST(KeptPlans, PoolsRemakeTheirWindowsWhenTheShapesChange) {
  const std::map<std::string, Attribute> attrs{{"kernel_shape", Attribute::of_ints({3, 3})},
                                               {"strides", Attribute::of_ints({2, 2})},
                                               {"pads", Attribute::of_ints({1, 1, 1, 1})}};
  for (const char* op : {"MaxPool", "AveragePool"})
    check_kept(op, "", attrs,
               {{random_tensor({2, 3, 8, 8}, 1)}, {random_tensor({1, 2, 5, 9}, 2)}, {random_tensor({2, 3, 8, 7}, 3)}});
  check_kept("AveragePoolGrad", std::string(kTrainrtDomain), attrs,
             {{random_tensor({2, 3, 4, 4}, 1), Tensor::from_i64({2, 3, 8, 8})},
              {random_tensor({1, 2, 3, 5}, 2), Tensor::from_i64({1, 2, 5, 9})}});
}

}  // namespace
}  // namespace trainrt
