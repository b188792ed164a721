// OptimizerInBackward as the consumer of ModulePrograms::backward: the same parameters, step after
// step, as a backward that returns every gradient followed by adam_step / sgd_step over them all;
// and a backward that never holds all gradients at once.
#include "trainrt/train/optimizer_in_backward.h"

#include <gtest/gtest.h>

#include <cstring>

#include "trainrt/core/testing.h"
#include "trainrt/train/module_programs.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

constexpr int64_t kBatch = 4, kWidth = 128;

// y = Relu(Relu(x W0) W1) W2, parameters as graph inputs (as RTModule passes them). The backward
// reads W1 and W2 (dH = dY W^T) as well as producing their gradients; whichever comes first in the
// schedule, the consumer steps W only after the last read (runtime/consumed_outputs_test.cc pins
// the order down).
std::shared_ptr<Graph> mlp_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w[3];
  for (int i = 0; i < 3; ++i) w[i] = g->add_input("w" + std::to_string(i), DType::kF32, Shape({kWidth, kWidth}));
  Value* h = g->add_input("x", DType::kF32, Shape({kBatch, kWidth}));
  for (int i = 0; i < 3; ++i) {
    h = g->add_node("MatMul", {h, w[i]}, {"mm" + std::to_string(i)})->output(0);  // (batch, width)
    if (i < 2) h = g->add_node("Relu", {h}, {"relu" + std::to_string(i)})->output(0);
  }
  g->add_output(h);
  return g;
}

struct Params {
  std::vector<Tensor> w, steps;
  std::vector<OptimizerState> states;
  explicit Params(uint32_t seed) : states(3) {
    for (int i = 0; i < 3; ++i) {
      w.push_back(random_tensor({kWidth, kWidth}, seed + i, -0.2f, 0.2f));
      steps.push_back(Tensor::scalar(0.f));
      states[i].exp_avg = Tensor::zeros(DType::kF32, {kWidth, kWidth});
      states[i].exp_avg_sq = Tensor::zeros(DType::kF32, {kWidth, kWidth});
    }
  }
};

AdamOptions adamw() {
  AdamOptions o = AdamOptions::adamw();
  o.lr = 1e-2;
  return o;
}

TEST(OptimizerInBackward, AdamStepsMatchAStepAfterTheBackward) {
  ModulePrograms reference(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  ModulePrograms fused(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  Params a(1), b(1);
  const std::vector<std::string> names = {"w0", "w1", "w2"};
  for (int step = 0; step < 5; ++step) {
    Tensor x = random_tensor({kBatch, kWidth}, 100 + step), dy = random_tensor({kBatch, kWidth}, 200 + step);
    ForwardState sa, sb;
    reference.forward({a.w[0], a.w[1], a.w[2], x}, sa, 0);
    std::vector<Tensor> grads = reference.backward(sa, {dy});
    std::vector<ParamSlot> slots;
    for (size_t i = 0; i < 3; ++i) slots.push_back({names[i], a.w[i], grads[i], a.states[i]});
    adam_step(slots, adamw());

    fused.forward({b.w[0], b.w[1], b.w[2], x}, sb, 0);
    OptimizerInBackward opt;
    for (size_t i = 0; i < 3; ++i) {
      OptimizerState views;  // the caller's buffers, updated in place
      views.exp_avg = b.states[i].exp_avg;
      views.exp_avg_sq = b.states[i].exp_avg_sq;
      opt.add_adam(i, names[i], b.w[i], b.steps[i], views, adamw());
    }
    std::vector<Tensor> none = fused.backward(sb, {dy}, {&opt, opt.indices()});
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_FALSE(none[i].defined());
      EXPECT_TRUE(opt.stepped(i));
      EXPECT_EQ(*b.steps[i].data<float>(), static_cast<float>(step + 1));
      expect_close(b.w[i], a.w[i], 1e-6, 1e-7);
      expect_close(b.states[i].exp_avg, a.states[i].exp_avg, 1e-6, 1e-9);
      expect_close(b.states[i].exp_avg_sq, a.states[i].exp_avg_sq, 1e-6, 1e-12);
    }
  }
}

// Only some gradients consumed (w2, read by the backward, and w0, not read): w1's comes back.
TEST(OptimizerInBackward, SgdWithMomentumOnASubsetMatchesAStepAfterTheBackward) {
  ModulePrograms reference(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  ModulePrograms fused(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  Params a(7), b(7);
  SgdOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  std::vector<Tensor> buffers(3);  // what the consumer created on the first step, kept by the caller
  for (int step = 0; step < 4; ++step) {
    Tensor x = random_tensor({kBatch, kWidth}, 300 + step), dy = random_tensor({kBatch, kWidth}, 400 + step);
    ForwardState sa, sb;
    reference.forward({a.w[0], a.w[1], a.w[2], x}, sa, 0);
    std::vector<Tensor> grads = reference.backward(sa, {dy});
    for (size_t i = 0; i < 3; ++i) {
      const ParamSlot slot{"w", a.w[i], grads[i], a.states[i]};
      sgd_step({&slot, 1}, sgd);
    }

    fused.forward({b.w[0], b.w[1], b.w[2], x}, sb, 0);
    OptimizerInBackward opt;
    for (size_t i : {0u, 2u}) {
      OptimizerState views;
      views.momentum_buffer = buffers[i];
      opt.add_sgd(i, "w" + std::to_string(i), b.w[i], b.steps[i], views, sgd);
    }
    std::vector<Tensor> out = fused.backward(sb, {dy}, {&opt, {0, 2}});
    ASSERT_TRUE(out[1].defined());
    const ParamSlot w1{"w1", b.w[1], out[1], b.states[1]};
    sgd_step({&w1, 1}, sgd);
    for (size_t i : {0u, 2u}) buffers[i] = opt.momentum_buffer(i);
    for (size_t i = 0; i < 3; ++i) expect_close(b.w[i], a.w[i], 1e-6, 1e-7);
  }
}

// Three (128, 128) f32 gradients (64 KiB each) and tiny activations: returned, they are all held
// at the end of the backward; consumed, at most two are alive at any step.
TEST(OptimizerInBackward, TheBackwardNeverHoldsAllGradients) {
  ModulePrograms p(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  Params params(3);
  const size_t grad_bytes = kWidth * kWidth * sizeof(float);
  Tensor x = random_tensor({kBatch, kWidth}, 5), dy = random_tensor({kBatch, kWidth}, 6);
  ForwardState s1, s2;
  p.forward({params.w[0], params.w[1], params.w[2], x}, s1, 0);
  std::vector<Tensor> returned = p.backward(s1, {dy});  // all three live at the end of the backward
  const MemoryStats plain = p.backward_memory();
  size_t returned_bytes = 0;
  for (const Tensor& g : returned) returned_bytes += g.nbytes();
  EXPECT_EQ(returned_bytes, 3 * grad_bytes);
  EXPECT_EQ(plain.output_bytes, 0u);  // the caller owns them: nothing kept for the next step

  p.forward({params.w[0], params.w[1], params.w[2], x}, s2, 0);
  OptimizerInBackward opt;
  for (size_t i = 0; i < 3; ++i)
    opt.add_adam(i, "w", params.w[i], params.steps[i], params.states[i], adamw());
  p.backward(s2, {dy}, {&opt, {0, 1, 2}});
  const MemoryStats consumed = p.backward_memory();
  EXPECT_EQ(consumed.output_bytes, 0u);
  EXPECT_LT(consumed.planned_arena_bytes, 2 * grad_bytes + grad_bytes / 2);
  EXPECT_LT(consumed.planned_arena_bytes + consumed.output_bytes, plain.planned_arena_bytes + returned_bytes);
}

// An OptimizerInBackward in 128 KiB row blocks that counts the blocks it takes.
struct CountingBlocks : OptimizerInBackward {
  CountingBlocks() : OptimizerInBackward(size_t{128} << 10) {}
  int blocks = 0;
  void consume_rows(size_t index, const Tensor& rows, int64_t row_begin) override {
    ++blocks;
    OptimizerInBackward::consume_rows(index, rows, row_begin);
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// y = (x W0) W1 with (wide, wide + 5) and (wide + 5, wide) weights of more than two
// 128 KiB blocks: W0's gradient (no later read of W0) comes in row blocks of 32 rows (3092-byte rows, blocks
// start 64-byte aligned). AdamW (amsgrad) and SGD with momentum (whole on the first step, which creates the
// buffer; blocks after): parameters and state bit for bit those of a step after the backward.
TEST(OptimizerInBackward, RowBlocksStepBitForBitAsTheWholeGradient) {
  constexpr int64_t kWide = 768;
  auto graph = [&] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* w0 = g->add_input("w0", DType::kF32, Shape({kWide, kWide + 5}));
    Value* w1 = g->add_input("w1", DType::kF32, Shape({kWide + 5, kWide}));
    Value* h = g->add_input("x", DType::kF32, Shape({kBatch, kWide}));
    h = g->add_node("MatMul", {h, w0}, {"h"})->output(0);           // (batch, wide + 5)
    g->add_output(g->add_node("MatMul", {h, w1}, {"y"})->output(0));  // (batch, wide)
    return g;
  };
  for (bool adam : {true, false}) {
    SCOPED_TRACE(adam ? "adamw, amsgrad" : "sgd, momentum");
    ModulePrograms reference(graph(), {"y"}, {"w0", "w1"});
    ModulePrograms fused(graph(), {"y"}, {"w0", "w1"});
    const std::vector<std::vector<int64_t>> dims = {{kWide, kWide + 5}, {kWide + 5, kWide}};
    std::vector<Tensor> wa, wb, steps;
    std::vector<OptimizerState> sa(2), sb(2);
    for (size_t i = 0; i < 2; ++i) {
      wa.push_back(random_tensor(dims[i], 20 + static_cast<uint32_t>(i), -0.2f, 0.2f));
      wb.push_back(wa.back().clone());
      steps.push_back(Tensor::scalar(0.f));
      for (OptimizerState* s : {&sa[i], &sb[i]})
        if (adam) {
          s->exp_avg = Tensor::zeros(DType::kF32, dims[i]);
          s->exp_avg_sq = Tensor::zeros(DType::kF32, dims[i]);
          s->max_exp_avg_sq = Tensor::zeros(DType::kF32, dims[i]);
        }
    }
    AdamOptions adam_options = adamw();
    adam_options.amsgrad = true;
    SgdOptions sgd;
    sgd.lr = 0.05;
    sgd.momentum = 0.9;
    int blocks = 0;
    for (int step = 0; step < 3; ++step) {
      Tensor x = random_tensor({kBatch, kWide}, 500 + step), dy = random_tensor({kBatch, kWide}, 600 + step);
      ForwardState ra, rb;
      reference.forward({wa[0], wa[1], x}, ra, 0);
      std::vector<Tensor> grads = reference.backward(ra, {dy});
      for (size_t i = 0; i < 2; ++i) {
        const ParamSlot slot{"w", wa[i], grads[i], sa[i]};
        if (adam) adam_step({&slot, 1}, adam_options);
        else sgd_step({&slot, 1}, sgd);
      }
      fused.forward({wb[0], wb[1], x}, rb, 0);
      CountingBlocks opt;
      for (size_t i = 0; i < 2; ++i) {
        if (adam) opt.add_adam(i, "w" + std::to_string(i), wb[i], steps[i], sb[i], adam_options);
        else opt.add_sgd(i, "w" + std::to_string(i), wb[i], steps[i], sb[i], sgd);
      }
      fused.backward(rb, {dy}, {&opt, opt.indices()});
      for (size_t i = 0; i < 2; ++i) {
        if (!adam) sb[i].momentum_buffer = opt.momentum_buffer(i);
        EXPECT_EQ(*steps[i].data<float>(), static_cast<float>(step + 1));
        EXPECT_TRUE(same_bits(wb[i], wa[i])) << "w" << i << " step " << step;
        for (auto buffer : {&OptimizerState::exp_avg, &OptimizerState::exp_avg_sq, &OptimizerState::max_exp_avg_sq,
                            &OptimizerState::momentum_buffer})
          if ((sa[i].*buffer).defined()) EXPECT_TRUE(same_bits(sb[i].*buffer, sa[i].*buffer)) << "w" << i;
      }
      if (adam || step > 0) EXPECT_GE(opt.blocks, 24) << "step " << step;  // W0's 768 rows, 32 a block
      blocks += opt.blocks;
    }
    EXPECT_GT(blocks, 0);
  }
}

TEST(OptimizerInBackward, RefusesWhatItCannotStep) {
  ModulePrograms p(mlp_graph(), {"mm2"}, {"w0", "w1", "w2"});
  Params params(4);
  OptimizerInBackward opt;
  OptimizerState empty;
  EXPECT_THROW(opt.add_adam(0, "w0", params.w[0], params.steps[0], empty, adamw()), InvalidModel);  // no moments
  opt.add_adam(0, "w0", params.w[0], params.steps[0], params.states[0], adamw());
  EXPECT_THROW(opt.add_adam(0, "w0", params.w[0], params.steps[0], params.states[0], adamw()), InvalidModel);
  AdamOptions bad = adamw();
  bad.lr = -1;
  EXPECT_THROW(opt.add_adam(1, "w1", params.w[1], params.steps[1], params.states[1], bad), InvalidModel);
  Tensor x = random_tensor({kBatch, kWidth}, 5), dy = random_tensor({kBatch, kWidth}, 6);
  ForwardState s;
  p.forward({params.w[0], params.w[1], params.w[2], x}, s, 0);
  EXPECT_THROW(p.backward(s, {dy}, {nullptr, {0}}), InvalidModel);
  EXPECT_THROW(p.backward(s, {dy}, {&opt, {0, 0}}), ShapeError);
  EXPECT_THROW(p.backward(s, {dy}, {&opt, {3}}), ShapeError);
  EXPECT_THROW(p.backward(s, {dy}, {&opt, {1}}), InternalError);  // no parameter under index 1
}

}  // namespace
}  // namespace trainrt
