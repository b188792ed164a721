// Consumed outputs (PlanOptions::consumed_outputs): a session hands such an output to its
// OutputConsumer after the step that makes it final and after the last read of its hold input, the
// value lives in the arena until then (and no longer: the next value reuses its bytes), and run()
// returns an empty tensor in its place. Each schedule below is built so that a consumer called at
// the wrong step would see, or cause, wrong numbers.
#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

std::shared_ptr<Graph> new_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  return g;
}

// What an optimizer in the backward does to its parameter: records the gradient and then writes
// the hold input (here: zeroes it), as a parameter update would.
struct ZeroHold : OutputConsumer {
  Tensor hold;                    // the input the consumer writes
  std::vector<size_t> order;      // outputs, in the order they came
  std::vector<Tensor> seen;       // copies of what came (the value dies after the call)
  void consume(size_t output, const Tensor& value) override {
    order.push_back(output);
    seen.push_back(value.clone());
    if (hold.defined()) std::fill(hold.data<float>(), hold.data<float>() + hold.numel(), 0.f);
  }
};

// s0: g = Neg(x), consumed, hold w   s1: y = MatMul(x, w), returned.
// g is final after s0, but the consumer writes w, which s1 still reads: consumed after s1.
TEST(ConsumedOutputs, AreConsumedOnlyAfterTheLastReadOfTheirHoldInput) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3}));
  Value* w = g->add_input("w", DType::kF32, Shape({3, 4}));
  g->add_output(g->add_node("Neg", {x}, {"g"})->output(0));             // (2, 3)
  g->add_output(g->add_node("MatMul", {x, w}, {"y"})->output(0));       // (2, 4)
  SessionOptions options;
  options.consumed_outputs = {{"g", "w"}};
  Session session(g, options);
  Tensor xv = random_tensor({2, 3}, 1), wv = random_tensor({3, 4}, 2);
  Tensor expected_y = Session(g).run({xv, wv.clone()})[1];

  ZeroHold consumer;
  consumer.hold = wv;
  std::vector<Tensor> out = session.run({xv, wv}, &consumer);
  ASSERT_EQ(session.last_stats().num_steps, 2);
  EXPECT_FALSE(out[0].defined());  // handed over during the run
  expect_close(out[1], expected_y);  // MatMul read w before the consumer zeroed it
  ASSERT_EQ(consumer.order, std::vector<size_t>{0});
  Tensor neg_x = xv.clone();
  for (int64_t i = 0; i < neg_x.numel(); ++i) neg_x.data<float>()[i] = -neg_x.data<float>()[i];
  expect_close(consumer.seen[0], neg_x);
  EXPECT_EQ(wv.data<float>()[0], 0.f);  // the consumer did write the hold input
}

// The hold input is read only through a view (a Reshape of it): that read counts.
TEST(ConsumedOutputs, AReadOfAViewOfTheHoldInputIsAReadOfIt) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3}));
  Value* w = g->add_input("w", DType::kF32, Shape({12}));
  g->add_output(g->add_node("Neg", {x}, {"g"})->output(0));
  Value* shape = g->add_initializer("shape", Tensor::from_i64({3, 4}));
  Value* w2 = g->add_node("Reshape", {w, shape}, {"w2"})->output(0);  // (3, 4), a view of w
  g->add_output(g->add_node("MatMul", {x, w2}, {"y"})->output(0));
  SessionOptions options;
  options.consumed_outputs = {{"g", "w"}};
  Session session(g, options);
  Tensor xv = random_tensor({2, 3}, 3), wv = random_tensor({12}, 4);
  Tensor expected_y = Session(g).run({xv, wv.clone()})[1];
  ZeroHold consumer;
  consumer.hold = wv;
  expect_close(session.run({xv, wv}, &consumer)[1], expected_y);
}

// s0: g = Neg(x), consumed   s1: h = Relu(g)   s2: y = Exp(h). Relu may write in place over an
// input that dies at its step, and g's last reader is s1: the consumer must still get Neg's values.
TEST(ConsumedOutputs, NoOpWritesOverAConsumedValueInPlace) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({64}));
  Value* gv = g->add_node("Neg", {x}, {"g"})->output(0);
  g->add_output(gv);
  Value* h = g->add_node("Relu", {gv}, {"h"})->output(0);  // an arena value: may sit over g
  g->add_output(g->add_node("Exp", {h}, {"y"})->output(0));
  SessionOptions options;
  options.consumed_outputs = {{"g", ""}};
  Session session(g, options);
  Tensor xv = random_tensor({64}, 5);
  Tensor expected_g = Session(g).run({xv})[0];
  ZeroHold consumer;
  session.run({xv}, &consumer);
  ASSERT_EQ(consumer.seen.size(), 1u);
  expect_close(consumer.seen[0], expected_g);
}

// Three consumed (1024,) f32 values in a chain: each is consumed before the next is born, so they
// share one arena buffer, and the session keeps no output storage between runs.
TEST(ConsumedOutputs, LiveInTheArenaOnlyUntilConsumed) {
  auto g = new_graph();
  Value* v = g->add_input("x", DType::kF32, Shape({1024}));
  for (const char* name : {"g0", "g1", "g2"}) {
    v = g->add_node("Neg", {v}, {name})->output(0);
    g->add_output(v);
  }
  SessionOptions options;
  options.consumed_outputs = {{"g0", ""}, {"g1", ""}, {"g2", ""}};
  Session session(g, options);
  ZeroHold consumer;
  Tensor xv = random_tensor({1024}, 6);
  for (int run = 0; run < 2; ++run) session.run({xv}, &consumer);
  EXPECT_EQ(consumer.order, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  for (int64_t i = 0; i < 1024; ++i) {
    ASSERT_EQ(consumer.seen[1].data<float>()[i], xv.data<float>()[i]);   // Neg twice
    ASSERT_EQ(consumer.seen[2].data<float>()[i], -xv.data<float>()[i]);  // three times
  }
  // g1 is born while g0 is read (Neg cannot write over its input: its output is consumed), so two
  // buffers at most; returned outputs would have taken three of their own.
  EXPECT_EQ(session.memory_stats().planned_arena_bytes, 2 * 4096u);
  EXPECT_EQ(session.memory_stats().output_bytes, 0u);
  Session plain(g);
  plain.run({xv});
  EXPECT_EQ(plain.memory_stats().output_bytes, 3 * 4096u);
}

TEST(ConsumedOutputs, ErrorsNameTheOutputAndTheHoldInput) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4}));
  g->add_output(g->add_node("Neg", {x}, {"g"})->output(0));
  Tensor xv = random_tensor({4}, 7);
  // The InvalidModel message of a run with these options, or "" when it runs.
  auto error_of = [&](std::vector<ConsumedOutput> consumed, std::set<std::string> donated, bool with_consumer) {
    SessionOptions options;
    options.consumed_outputs = std::move(consumed);
    options.donated_inputs = std::move(donated);
    Session session(g, options);
    ZeroHold consumer;
    try {
      session.run({xv}, with_consumer ? &consumer : nullptr);
    } catch (const InvalidModel& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({{"g", ""}}, {}, false).find("run() got no consumer"), std::string::npos);
  EXPECT_NE(error_of({{"nope", ""}}, {}, true).find("consumed output 'nope' is not a graph output"), std::string::npos);
  EXPECT_NE(error_of({{"g", "w"}}, {}, true).find("hold input 'w' of consumed output 'g' is not a graph input"),
            std::string::npos);
  EXPECT_NE(error_of({{"g", "x"}}, {"x"}, true).find("hold input 'x' of consumed output 'g' is donated"),
            std::string::npos);
  EXPECT_EQ(error_of({{"g", "x"}}, {}, true), "");
}

// A returned output showing a hold input's bytes (here the input itself) would be copied after the
// run, once the consumer has written them: the plan refuses it.
TEST(ConsumedOutputs, NoReturnedOutputShowsTheBytesOfAHoldInput) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4}));
  g->add_output(g->add_node("Neg", {x}, {"g"})->output(0));
  g->add_output(x);
  SessionOptions options;
  options.consumed_outputs = {{"g", "x"}};
  Session session(g, options);
  ZeroHold consumer;
  try {
    session.run({random_tensor({4}, 7)}, &consumer);
    ADD_FAILURE() << "the plan took a returned output showing the hold input's bytes";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("output 'x' shows the bytes of 'x', which the consumer of 'g' writes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace trainrt
