// ModulePrograms: parameters as inputs, forward then backward as two calls, gradients in wrt order.
#include "trainrt/train/module_programs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "trainrt/core/testing.h"
#include "trainrt/plan/partition.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;

// y = x @ w + b with w, b graph inputs (as RTModule passes parameters).
std::shared_ptr<Graph> linear_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w = g->add_input("w", DType::kF32, Shape({2, 3}));
  Value* b = g->add_input("b", DType::kF32, Shape({3}));
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 2}));
  Value* xw = g->add_node("MatMul", {x, w}, {"xw"})->output(0);
  g->add_output(g->add_node("Add", {xw, b}, {"y"})->output(0));
  return g;
}

TEST(ModulePrograms, ForwardThenBackwardGivesGradientsInWrtOrder) {
  ModulePrograms p(linear_graph(), {"y"}, {"x", "w", "b"});
  Tensor w = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor<float>({3}, {0.5f, 0, -0.5f});
  Tensor x = make_tensor<float>({2, 2}, {1, 0, 2, 1});
  ForwardState state;
  auto out = p.forward({w, b, x}, state, 1);
  ASSERT_EQ(out.size(), 1u);
  expect_close(out[0], make_tensor<float>({2, 3}, {1.5f, 2, 2.5f, 6.5f, 9, 11.5f}));
  Tensor dy = make_tensor<float>({2, 3}, {1, 1, 1, 1, 0, 2});
  auto grads = p.backward(state, {dy});
  ASSERT_EQ(grads.size(), 3u);
  expect_close(grads[0], make_tensor<float>({2, 2}, {6, 15, 7, 16}));             // dY w^T
  expect_close(grads[1], make_tensor<float>({2, 3}, {3, 1, 5, 1, 0, 2}));         // x^T dY
  expect_close(grads[2], make_tensor<float>({3}, {2, 1, 3}));                     // sum over rows
  EXPECT_THROW(p.backward(state, {dy}), InvalidModel);  // the state is spent
}

// Records what it is handed, and the order: gradients given away as they become final.
struct Keeper : OutputConsumer {
  std::vector<std::pair<size_t, Tensor>> kept;
  void consume(size_t output, const Tensor& value) override { kept.emplace_back(output, value); }
};

// Handed-over gradients are the returned ones, bit for bit, in their own storage: they stay
// intact after the run and after the next run, which gives fresh storage since they are kept.
TEST(ModulePrograms, HandedOverGradientsAreKeptZeroCopyAndMatchReturnedOnes) {
  ModulePrograms p(linear_graph(), {"y"}, {"x", "w", "b"});
  Tensor w = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor<float>({3}, {0.5f, 0, -0.5f});
  Tensor x = make_tensor<float>({2, 2}, {1, 0, 2, 1});
  Tensor dy = make_tensor<float>({2, 3}, {1, 1, 1, 1, 0, 2});
  ForwardState plain;
  p.forward({w, b, x}, plain, 1);
  std::vector<Tensor> reference = p.backward(plain, {dy});
  Keeper keeper;
  for (int step = 0; step < 2; ++step) {
    ForwardState state;
    p.forward({w, b, x}, state, 1);
    std::vector<Tensor> returned = p.backward(state, {dy}, {&keeper, {}, {1, 2}});
    EXPECT_TRUE(returned[0].defined());
    EXPECT_FALSE(returned[1].defined());
    EXPECT_FALSE(returned[2].defined());
  }
  ASSERT_EQ(keeper.kept.size(), 4u);
  for (const auto& [wrt, g] : keeper.kept) {
    ASSERT_TRUE(wrt == 1 || wrt == 2);
    ASSERT_EQ(g.nbytes(), reference[wrt].nbytes());
    EXPECT_EQ(std::memcmp(g.raw(), reference[wrt].raw(), g.nbytes()), 0);
  }
  EXPECT_NE(keeper.kept[0].second.raw(), keeper.kept[2].second.raw());  // the first step's are still held
  EXPECT_THROW(p.backward(*std::make_unique<ForwardState>(), {dy}, {&keeper, {1}, {1}}), ShapeError);
}

TEST(ModulePrograms, MissingOutputGradientIsZeroAndInferKeepsNothing) {
  ModulePrograms p(linear_graph(), {"y"}, {"w"});
  Tensor w = Tensor::zeros(DType::kF32, {2, 3}), b = Tensor::zeros(DType::kF32, {3});
  Tensor x = make_tensor<float>({1, 2}, {1, 1});
  ForwardState state;
  p.forward({w, b, x}, state, 0);
  auto grads = p.backward(state, {Tensor()});
  expect_close(grads[0], Tensor::zeros(DType::kF32, {2, 3}));
  EXPECT_EQ(p.infer({w, b, x}, 0)[0].dims(), (std::vector<int64_t>{1, 3}));
}

// The second step's forward writes its saved values and outputs over the first step's, once
// backward and the caller released them: one step's activations in memory, not two.
TEST(ModulePrograms, SecondForwardReusesTheFirstsOutputStorage) {
  auto g = linear_graph();  // relu = Relu(x @ w + b): the backward reads a saved value
  Value* y = g->mutable_outputs()[0];
  g->mutable_outputs()[0] = g->add_node("Relu", {y}, {"relu"})->output(0);
  ModulePrograms p(g, {"relu"}, {"w", "b"});
  Tensor w = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor<float>({3}, {0.5f, 0, -0.5f});
  Tensor x = make_tensor<float>({2, 2}, {1, 0, 2, 1});
  Tensor dy = make_tensor<float>({2, 3}, {1, 1, 1, 1, 0, 2});
  const void* first = nullptr;
  for (int step = 0; step < 3; ++step) {
    ForwardState state;
    auto out = p.forward({w, b, x}, state, 1);
    expect_close(out[0], make_tensor<float>({2, 3}, {1.5f, 2, 2.5f, 6.5f, 9, 11.5f}));  // all positive
    if (step == 0) first = out[0].raw();
    EXPECT_EQ(out[0].raw(), first) << "step " << step;
    out.clear();
    auto grads = p.backward(state, {dy});
    expect_close(grads[0], make_tensor<float>({2, 3}, {3, 1, 5, 1, 0, 2}));  // x^T dY (all relu > 0)
  }
}

// sq = row sums of ((ReduceSum(x @ w, axis 1) @ v) @ u)^2, (batch): the wide product x @ w
// (batch, 16) is the forward's largest intermediate and is dead before the narrow products (batch,
// 4), which the backward reads, are made: those saved values fit in the bytes it left.
std::shared_ptr<Graph> wide_then_narrow_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w = g->add_input("w", DType::kF32, Shape({2, 16}));
  Value* v = g->add_input("v", DType::kF32, Shape({1, 4}));
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 2}));
  Value* u = g->add_initializer("u", testing::random_tensor({4, 4}, 9));
  Value* axes = g->add_initializer("axes", Tensor::from_i64({1}));
  Value* t = g->add_node("MatMul", {x, w}, {"t"})->output(0);
  Value* s = g->add_node("ReduceSum", {t, axes}, {"s"})->output(0);  // keepdims: (batch, 1)
  Value* m = g->add_node("MatMul", {s, v}, {"m"})->output(0);
  Value* q = g->add_node("MatMul", {m, u}, {"q"})->output(0);
  Node* sum = g->add_node("ReduceSum", {g->add_node("Mul", {q, q}, {"squares"})->output(0), axes}, {"sq"});
  sum->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(sum->output(0));
  return g;
}

bool overlaps(const Tensor& t, const Arena& arena) {
  const auto* begin = static_cast<const std::byte*>(t.raw());
  const std::byte* base = const_cast<Arena&>(arena).base();
  return begin < base + arena.capacity() && base < begin + t.nbytes();
}

// Forward, backward and inference share one arena, and the forward leaves its saved values there
// for the backward to read in place; a call in between (a second forward, an inference) takes a
// fresh block rather than write over them. The backwards, run after such calls and in either
// order, give bit for bit the gradients of a backward run straight after its own forward.
TEST(ModulePrograms, SavedValuesLeftInTheSharedArenaOutliveCallsInBetween) {
  Tensor w = testing::random_tensor({2, 16}, 1);
  Tensor v = make_tensor<float>({1, 4}, {1, -2, 0.5f, 3});
  Tensor x1 = testing::random_tensor({32, 2}, 2);
  Tensor x2 = testing::random_tensor({64, 2}, 3);
  auto dy = [](const Tensor& x) { return testing::random_tensor({x.dim(0)}, static_cast<uint32_t>(x.dim(0))); };
  auto alone = [&](const Tensor& x) {  // a fresh engine, backward straight after forward
    ModulePrograms p(wide_then_narrow_graph(), {"sq"}, {"w", "v"});
    ForwardState state;
    p.forward({w, v, x}, state, 1);
    return p.backward(state, {dy(x)});
  };
  auto in_arena = [](const ForwardState& state, const Arena& arena) {
    int n = 0;
    for (const auto& [name, t] : state.values) n += overlaps(t, arena);
    return n;
  };
  ModulePrograms p(wide_then_narrow_graph(), {"sq"}, {"w", "v"});
  ForwardState s1, s2;
  p.forward({w, v, x1}, s1, 1);
  EXPECT_GT(in_arena(s1, p.arena()), 0);  // saved values: the model's output is storage of its own
  EXPECT_FALSE(overlaps(p.forward({w, v, x2}, s2, 1)[0], p.arena()));
  EXPECT_EQ(in_arena(s1, p.arena()), 0);  // the second forward moved to a fresh block
  EXPECT_GT(in_arena(s2, p.arena()), 0);
  p.infer({w, v, x2}, 0);
  EXPECT_EQ(in_arena(s2, p.arena()), 0);  // and so did the inference
  auto g2 = p.backward(s2, {dy(x2)});
  auto g1 = p.backward(s1, {dy(x1)});
  auto r1 = alone(x1), r2 = alone(x2);
  for (size_t i = 0; i < 2; ++i) {
    expect_close(g1[i], r1[i], 0, 0);
    expect_close(g2[i], r2[i], 0, 0);
  }
}

// A forward then its backward, step after step: one block holds the forward's intermediates and
// saved values and then the backward's values around the saved ones still live, as large as the
// larger plan, less than the two together; and it stays put.
TEST(ModulePrograms, ForwardAndBackwardShareOneBlockStepAfterStep) {
  Tensor w = testing::random_tensor({2, 16}, 1);
  Tensor v = make_tensor<float>({1, 4}, {1, -2, 0.5f, 3});
  Tensor x = testing::random_tensor({64, 2}, 3);
  ModulePrograms p(wide_then_narrow_graph(), {"sq"}, {"w", "v"});
  const std::byte* base = nullptr;
  for (int step = 0; step < 3; ++step) {
    ForwardState state;
    p.forward({w, v, x}, state, 1);
    p.backward(state, {testing::random_tensor({64}, 7)});
    if (step == 0) base = static_cast<const std::byte*>(p.arena().block().get());
    EXPECT_EQ(p.arena().block().get(), base) << "step " << step;
  }
  const size_t forward_bytes = p.forward_memory().planned_arena_bytes;
  const size_t backward_bytes = p.backward_memory().planned_arena_bytes;
  ASSERT_GT(forward_bytes, 0u);
  ASSERT_GT(backward_bytes, 0u);
  EXPECT_EQ(p.arena().capacity(), std::max(forward_bytes, backward_bytes));
  EXPECT_LT(p.arena().capacity(), forward_bytes + backward_bytes);
  EXPECT_EQ(p.forward_memory().output_bytes, 64u * 4u);  // the model's output alone: saved values are in the block
  EXPECT_TRUE(p.saved_values_in_arena());  // judged at the first backward: the arena did not grow for them
}

// The judgement on the figures this stop measured (MiB): the CNN's peak is the forward's end (saved
// values many, gradients few), so a 2.5 MiB larger arena for 6.5 MiB of saved values in it pays;
// GPT-2 small in bf16 peaks at the backward's end (474 MiB of gradients), where a 25 MiB larger
// arena is held for nothing; an arena that did not grow always pays.
TEST(SavedValuesInArena, PaysWhereTheStepPeaksBeforeTheGradientsExist) {
  constexpr size_t MiB = 1 << 20;
  const SavedValuesInArena cnn{22 * MiB, 6 * MiB, 1 * MiB, 8 * MiB, 10 * MiB};
  EXPECT_EQ(cnn.peak_with(), 26 * MiB);
  EXPECT_EQ(cnn.peak_without(), 30 * MiB);
  EXPECT_TRUE(cnn.pays());
  const SavedValuesInArena gpt2_small_bf16{131 * MiB, 49 * MiB, 474 * MiB, 98 * MiB, 123 * MiB};
  EXPECT_FALSE(gpt2_small_bf16.pays());
  const SavedValuesInArena no_growth{131 * MiB, 49 * MiB, 474 * MiB, 98 * MiB, 98 * MiB};
  EXPECT_FALSE(no_growth.pays());  // equal peaks: nothing gained, so not kept
  const SavedValuesInArena saved_many{100 * MiB, 1 * MiB, 10 * MiB, 8 * MiB, 8 * MiB};
  EXPECT_TRUE(saved_many.pays());
}

// The backward of `g` (one output "out", gradients of `wrt`) run on the forward's saved values,
// against a plain run of the same backward program on copies of them: the same bits (nothing was
// overwritten before its last reader). Returns whether the saved value `name` was written over.
bool backward_writes_over(std::shared_ptr<Graph> g, const std::vector<std::string>& wrt, const std::vector<Tensor>& in,
                          const std::string& name) {
  ModulePrograms p(std::move(g), {"out"}, wrt);
  ForwardState state;
  const Tensor out = p.forward(in, state, 1)[0];
  EXPECT_TRUE(state.values.count(name)) << name << " is not saved";
  const Tensor saved = state.values.at(name), saved_copy = saved.clone();
  const Tensor dy = testing::random_tensor(out.dims(), 5);
  std::vector<const Node*> nodes;
  for (const Node* n : p.backward_graph().topological_order()) nodes.push_back(n);
  std::vector<const Value*> ins(p.backward_graph().inputs().begin(), p.backward_graph().inputs().end());
  std::vector<const Value*> outs(p.backward_graph().outputs().begin(), p.backward_graph().outputs().end());
  Session reference(extract_subgraph(p.backward_graph(), nodes, ins, outs, "reference"));
  std::vector<Tensor> reference_inputs;
  for (const Value* v : ins)
    reference_inputs.push_back(v->name == "out_grad" || !state.values.count(v->name) ? dy : state.values.at(v->name).clone());
  std::vector<Tensor> expected = reference.run(reference_inputs);  // grad_of order: sorted by name
  auto grads = p.backward(state, {dy});
  std::vector<std::string> sorted = wrt;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < grads.size(); ++i) {
    const size_t at = static_cast<size_t>(std::find(sorted.begin(), sorted.end(), wrt[i]) - sorted.begin());
    expect_close(grads[i], expected[at], 0, 0);
  }
  EXPECT_THROW(p.backward(state, {dy}), InvalidModel);  // spent
  return std::memcmp(saved.raw(), saved_copy.raw(), saved.nbytes()) != 0;
}

// out = Gelu(x @ w + b): GeluGrad(dY, z) reads the saved z last, and dY is the caller's (no arena
// input dies there), so dX is written over z's bytes rather than into the arena.
TEST(ModulePrograms, BackwardWritesOverASavedValueAfterItsLastReader) {
  auto g = linear_graph();
  g->mutable_outputs()[0] = g->add_node("Gelu", {g->mutable_outputs()[0]}, {"out"})->output(0);
  const std::vector<Tensor> in = {testing::random_tensor({2, 3}, 1), testing::random_tensor({3}, 2),
                                  testing::random_tensor({5, 2}, 3)};
  const std::string z = g->find_value("out")->producer->input(0)->name;
  EXPECT_TRUE(backward_writes_over(g, {"w", "b"}, in, z));
}

// out = Relu(x @ w + b) @ w2: ReluGrad(dH, h) may write dX over the saved h or over dH, an arena
// intermediate that dies there too. Over h, h's bytes would be held to the end of the backward,
// beside every gradient; over dH they go at ReluGrad, and the arena is no larger: dH is taken.
TEST(ModulePrograms, BackwardLetsASavedValueGoWhenTheArenaHasRoomForWhatWouldOverwriteIt) {
  auto g = linear_graph();
  Value* h = g->add_node("Relu", {g->mutable_outputs()[0]}, {"h"})->output(0);
  Value* w2 = g->add_input("w2", DType::kF32, Shape({3, 2}));
  g->mutable_outputs()[0] = g->add_node("MatMul", {h, w2}, {"out"})->output(0);
  const std::vector<Tensor> in = {testing::random_tensor({2, 3}, 1), testing::random_tensor({3}, 2),
                                  testing::random_tensor({5, 2}, 3), testing::random_tensor({3, 2}, 4)};
  EXPECT_FALSE(backward_writes_over(g, {"w", "b", "w2"}, in, "h"));
}

}  // namespace
}  // namespace trainrt
