// Session::run_releasing: a donated input is let go of right after the last step that touches its
// bytes (ExecutionPlan::input_releases), as eager autograd frees a saved tensor after its last use;
// other inputs, and plain run(), keep theirs.
#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/runtime/execution_plan.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

// Looks at the caller's inputs whenever an output is handed over mid-run.
struct Watch : OutputConsumer {
  const std::vector<Tensor>* inputs = nullptr;
  std::vector<bool> x_held;  // per consume: whether input 0 was still held
  void consume(size_t, const Tensor&) override { x_held.push_back((*inputs)[0].defined()); }
};

// s0: t = MatMul(x, w)   s1: g = Neg(t), consumed. x (donated) is read at s0 only: released after
// s0, so gone when g is handed over after s1; w is not donated and stays.
std::shared_ptr<Graph> matmul_then_neg() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3}));
  Value* w = g->add_input("w", DType::kF32, Shape({3, 4}));
  Value* t = g->add_node("MatMul", {x, w}, {"t"})->output(0);
  g->add_output(g->add_node("Neg", {t}, {"g"})->output(0));
  g->add_output(g->add_node("Relu", {t}, {"r"})->output(0));
  return g;
}

TEST(InputReleases, ADonatedInputGoesAfterItsLastReaderAndOthersStay) {
  SessionOptions options;
  options.donated_inputs = {"x"};
  options.consumed_outputs = {{"g", ""}};
  Session session(matmul_then_neg(), options);
  Tensor xv = random_tensor({2, 3}, 1), wv = random_tensor({3, 4}, 2);
  std::vector<Tensor> expected = Session(matmul_then_neg()).run({xv.clone(), wv});
  std::vector<Tensor> inputs = {xv.clone(), wv};
  Watch watch;
  watch.inputs = &inputs;
  std::vector<Tensor> out = session.run_releasing(inputs, &watch);
  EXPECT_EQ(watch.x_held, std::vector<bool>{false});  // released after MatMul, before g came
  EXPECT_FALSE(inputs[0].defined());
  EXPECT_TRUE(inputs[1].defined());
  expect_close(out[1], expected[1]);

  std::vector<Tensor> kept = {xv.clone(), wv};
  watch.inputs = &kept;
  session.run(kept, &watch);  // run() releases nothing
  EXPECT_TRUE(kept[0].defined());
  EXPECT_EQ(watch.x_held.back(), true);
}

// y = Mul(d, scale) with d donated and read there last (a parameter's gradient the forward made,
// scaled by the loss gradient): y is written over d's bytes, which the caller gets as y (returned,
// or handed to a consumer that keeps it), and d is never released from under it.
// Also when the output is a view of the product (a Reshape): its storage is still d's.
TEST(InputReleases, AnOutputWrittenOverADonatedInputTakesItsStorage) {
  for (bool through_view : {false, true})
  for (bool consumed : {false, true}) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* d = g->add_input("d", DType::kF32, Shape({4, 6}));
    Value* scale = g->add_input("scale", DType::kF32, Shape(std::vector<Dim>{}));
    Value* y = g->add_node("Mul", {d, scale}, {through_view ? "m" : "y"})->output(0);
    if (through_view) y = g->add_node("Reshape", {y, g->add_initializer("dims", Tensor::from_i64({24}))}, {"y"})->output(0);
    g->add_output(y);
    SCOPED_TRACE(fmt("through a view ", through_view, ", consumed ", consumed));
    SessionOptions options;
    options.donated_inputs = {"d"};
    if (consumed) options.consumed_outputs = {{"y", "", /*kept=*/true}};
    Session session(g, options);
    std::vector<Tensor> inputs = {random_tensor({4, 6}, 3), Tensor::scalar<float>(0.5f)};
    Tensor expected = inputs[0].clone();
    for (int64_t i = 0; i < 24; ++i) expected.data<float>()[i] *= 0.5f;
    const void* bytes = inputs[0].raw();
    struct Keep : OutputConsumer {
      Tensor y;
      void consume(size_t, const Tensor& value) override { y = value; }
    } keep;
    std::vector<Tensor> out = session.run_releasing(inputs, consumed ? &keep : nullptr);
    Tensor result = consumed ? keep.y : out[0];
    EXPECT_EQ(session.last_stats().num_over_outputs, 1) << consumed;
    EXPECT_EQ(session.last_stats().arena_bytes, 0u) << consumed;
    EXPECT_EQ(result.raw(), bytes) << consumed;
    keep.y = Tensor();
    out.clear();
    inputs.clear();  // the caller lets go of its inputs: the result alone holds the bytes now
    EXPECT_TRUE(result.sole_owner()) << consumed;
    expect_close(result.reshaped({4, 6}), expected, 0, 0);
  }
}

// s0: a = MatMul(x, w)   s1: b = MatMul(a, w)   s2: c = MatMul(b, w)   s3: y = ReduceSum(b); outputs c, y.
// x and w are (64, 64).
std::shared_ptr<Graph> three_products() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({64, 64}));
  Value* w = g->add_input("w", DType::kF32, Shape({64, 64}));
  Value* a = g->add_node("MatMul", {x, w}, {"a"})->output(0);
  Value* b = g->add_node("MatMul", {a, w}, {"b"})->output(0);
  g->add_output(g->add_node("MatMul", {b, w}, {"c"})->output(0));
  g->add_output(g->add_node("ReduceSum", {b}, {"y"})->output(0));
  return g;
}

// three_products with c consumed: x (donated) is dead after s0, so b (s1-s3) is written into its
// bytes: the arena holds one product (a, then c over it) instead of two, and x is let go after s3,
// not after s0.
TEST(InputReleases, ALaterIntermediateIsPlacedInADeadDonatedInputsBytes) {
  auto g = three_products();
  SessionOptions options;
  options.donated_inputs = {"x"};
  options.consumed_outputs = {{"c", ""}};
  Session session(g, options);
  Tensor xv = random_tensor({64, 64}, 5, -0.2f, 0.2f), wv = random_tensor({64, 64}, 6, -0.2f, 0.2f);
  std::vector<Tensor> expected = Session(g).run({xv.clone(), wv});
  std::vector<Tensor> inputs = {xv.clone(), wv};
  Watch watch;
  watch.inputs = &inputs;
  std::vector<Tensor> out = session.run_releasing(inputs, &watch);
  expect_close(out[1], expected[1], 0, 0);
  EXPECT_EQ(watch.x_held, std::vector<bool>{true}) << "x holds b until b's last reader (s3) has run";
  EXPECT_FALSE(inputs[0].defined());
  EXPECT_EQ(session.last_stats().num_over_inputs, 1);
  EXPECT_EQ(session.last_stats().arena_bytes, 64u * 64u * sizeof(float));
}

// The same program planned for an arena block already two products large (a backward sharing its
// forward's block: PlanOptions::arena_floor_bytes): moving b into x's bytes would shrink only a
// plan the block holds anyway, and hold x until s3, so b stays in the arena and x goes after s0.
TEST(InputReleases, NoIntermediateMovesIntoADeadInputWhereTheArenaBlockHasRoomAnyway) {
  auto g = three_products();
  const size_t product = 64 * 64 * sizeof(float);
  for (size_t floor : {size_t{0}, 2 * product}) {
    PlanOptions options;
    options.donated_inputs = {"x"};
    options.consumed_outputs = {{"c", ""}};
    options.arena_floor_bytes = floor;
    auto plan = build_execution_plan(*g, {random_tensor({64, 64}, 5), random_tensor({64, 64}, 6)}, cpu_kernel_table(),
                                     options);
    EXPECT_EQ(plan->stats.num_over_inputs, floor ? 0 : 1) << floor;
    EXPECT_EQ(plan->stats.arena_bytes, floor ? 2 * product : product) << floor;
    ASSERT_EQ(plan->input_releases.size(), 1u) << floor;
    EXPECT_EQ(plan->input_releases[0].first, floor ? 0 : 3) << "the step after which x is let go";
    // Without the floor: one product in the arena, x until s3, and y's 4 bytes; with it: the block's
    // two products and x at s0.
    EXPECT_EQ(plan->stats.run_peak_bytes, floor ? 3 * product : 2 * product + sizeof(float)) << floor;
  }
}

// A chain a -> b -> c -> d of (64, 64) products after x (donated, (64, 128): room for two) is read
// at s0: two products are live at every step from s1 to s3, so moving one of them into x's bytes
// lowers no peak by itself (another step holds two); moving b, then c, leaves one in the arena.
TEST(InputReleases, MovesThatLowerThePeakOnlyTogetherAreMade) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({64, 128}));
  Value* w2 = g->add_input("w2", DType::kF32, Shape({128, 64}));
  Value* w = g->add_input("w", DType::kF32, Shape({64, 64}));
  Value* v = g->add_node("MatMul", {x, w2}, {"a"})->output(0);
  for (const char* name : {"b", "c", "d"}) v = g->add_node("MatMul", {v, w}, {name})->output(0);
  g->add_output(g->add_node("ReduceSum", {v}, {"y"})->output(0));
  SessionOptions options;
  options.donated_inputs = {"x"};
  Session session(g, options);
  Tensor xv = random_tensor({64, 128}, 7, -0.2f, 0.2f), w2v = random_tensor({128, 64}, 8, -0.2f, 0.2f),
         wv = random_tensor({64, 64}, 9, -0.2f, 0.2f);
  Session plain(g);  // nothing donated: two products in the arena
  const std::vector<Tensor> expected = plain.run({xv.clone(), w2v, wv});
  EXPECT_EQ(plain.last_stats().arena_bytes, 2u * 64u * 64u * sizeof(float));
  std::vector<Tensor> inputs = {xv.clone(), w2v, wv};
  const std::vector<Tensor> out = session.run_releasing(inputs, nullptr);
  expect_close(out[0], expected[0], 0, 0);
  EXPECT_EQ(session.last_stats().num_over_inputs, 2);
  EXPECT_EQ(session.last_stats().arena_bytes, 64u * 64u * sizeof(float));
}

}  // namespace
}  // namespace trainrt
