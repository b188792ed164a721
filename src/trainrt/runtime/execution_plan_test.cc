// ExecutionPlan views: outputs of Reshape / Flatten / Squeeze / Unsqueeze / Identity (and of
// ReduceSumToShape / Expand that change no dims) take no buffer
// and copy nothing, the buffer they view lives as long as they do, and no in-place write clobbers a
// value (or a caller's tensor) that a view still shows. The last test checks both promises on
// random programs: results against a plain reference, and a replay of the plan that tracks which
// value owns each arena word.
#include "trainrt/runtime/execution_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
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

Value* reshape(Graph& g, Value* x, const std::vector<int64_t>& dims) {
  Value* shape = g.add_initializer(g.unique_name("shape"), Tensor::from_i64(dims));
  return g.add_node("Reshape", {x, shape}, {g.unique_name("reshaped")})->output(0);
}

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

std::unique_ptr<ExecutionPlan> plan_for(Graph& g, const std::vector<Tensor>& inputs) {
  return build_execution_plan(g, inputs, cpu_kernel_table(), PlanOptions{});
}

// y = Relu(Identity(Squeeze(Unsqueeze(Flatten(Reshape(Neg(x))))))): x (4, 6) -> y (4, 6)
TEST(ExecutionPlan, AChainOfViewsTakesNoBufferAndCopiesNothing) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* v = g->add_node("Neg", {x}, {"n"})->output(0);       // (4, 6), the only buffer
  v = reshape(*g, v, {2, 3, 4});                               // (2, 3, 4)
  v = g->add_node("Flatten", {v}, {"f"})->output(0);           // (2, 12)
  Value* axes = g->add_initializer("axes", Tensor::from_i64({0}));
  v = g->add_node("Unsqueeze", {v, axes}, {"u"})->output(0);   // (1, 2, 12)
  v = g->add_node("Squeeze", {v, axes}, {"s"})->output(0);     // (2, 12)
  v = g->add_node("Identity", {v}, {"i"})->output(0);          // (2, 12)
  v = g->add_node("Relu", {v}, {"y"})->output(0);              // (2, 12), graph output
  g->add_output(v);
  Tensor in = random_tensor({4, 6}, 1);

  auto plan = plan_for(*g, {in});
  EXPECT_EQ(plan->stats.num_views, 5);
  // Neg's (4, 6) output is the only buffer, and Relu writes the graph output over it through the
  // views: it is made in the output's storage, and the arena holds nothing.
  EXPECT_EQ(plan->stats.num_over_outputs, 1);
  EXPECT_EQ(plan->stats.arena_bytes, 0u);
  int views = 0;
  for (const Slot& s : plan->slots) views += s.kind == SlotKind::kView;
  EXPECT_EQ(views, 5);

  Session session(g);
  for (int run = 0; run < 2; ++run) {  // the second run goes through rebinding, not planning
    Tensor out = session.run({in})[0];
    ASSERT_EQ(out.dims(), (std::vector<int64_t>{2, 12}));
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out.data<float>()[i], std::max(-in.data<float>()[i], 0.f));
  }
}

// ReduceSumToShape and Expand are views when the plan sees that their output has input 0's dims (the
// gradient of a product of two same-shaped tensors, an Expand to x's own dims), and compute when
// they do not: d (4, 6) summed to (1, 6) and x expanded to (2, 4, 6).
TEST(ExecutionPlan, SumToItsOwnShapeAndExpandToItsOwnDimsAreViews) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* d = g->add_node("Neg", {x}, {"d"})->output(0);                                  // (4, 6)
  Value* same = g->add_initializer("same", Tensor::from_i64({4, 6}));
  Value* row = g->add_initializer("row", Tensor::from_i64({1, 6}));
  Value* wide = g->add_initializer("wide", Tensor::from_i64({2, 4, 6}));
  Value* s = g->add_node("ReduceSumToShape", {d, same}, {"s"}, kTrainrtDomain)->output(0);  // view of d
  Value* e = g->add_node("Expand", {s, same}, {"e"})->output(0);                            // view of d
  Value* r = g->add_node("ReduceSumToShape", {e, row}, {"r"}, kTrainrtDomain)->output(0);   // (1, 6)
  Value* w = g->add_node("Expand", {e, wide}, {"w"})->output(0);                            // (2, 4, 6)
  g->add_output(g->add_node("Relu", {e}, {"y"})->output(0));
  g->add_output(g->add_node("Relu", {r}, {"yr"})->output(0));
  g->add_output(g->add_node("Relu", {w}, {"yw"})->output(0));
  Tensor in = random_tensor({4, 6}, 3);

  auto plan = plan_for(*g, {in});
  EXPECT_EQ(plan->stats.num_views, 2);
  Session session(g);
  std::vector<Tensor> out = session.run({in});
  ASSERT_EQ(out[1].dims(), (std::vector<int64_t>{1, 6}));
  ASSERT_EQ(out[2].dims(), (std::vector<int64_t>{2, 4, 6}));
  for (int64_t j = 0; j < 6; ++j) {
    float sum = 0;
    for (int64_t i = 0; i < 4; ++i) {
      const float v = -in.data<float>()[i * 6 + j];
      EXPECT_EQ(out[0].data<float>()[i * 6 + j], std::max(v, 0.f));
      EXPECT_EQ(out[2].data<float>()[24 + i * 6 + j], std::max(v, 0.f));
      sum += v;
    }
    EXPECT_FLOAT_EQ(out[1].data<float>()[j], std::max(sum, 0.f));
  }
}

// a = Neg(x); v = Reshape(a); b = Relu(a); y = Add(Reshape(b), v). Relu is a's last direct reader,
// but v still shows a's bytes: Relu must not write over a.
TEST(ExecutionPlan, AViewKeepsTheBufferItShowsAliveAcrossInPlaceOps) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* a = g->add_node("Neg", {x}, {"a"})->output(0);
  Value* v = reshape(*g, a, {6, 4});
  Value* b = g->add_node("Relu", {a}, {"b"})->output(0);
  Value* y = g->add_node("Add", {reshape(*g, b, {6, 4}), v}, {"y"})->output(0);
  g->add_output(y);
  Session session(g);
  Tensor in = random_tensor({4, 6}, 2);
  Tensor out = session.run({in})[0];
  for (int64_t i = 0; i < 24; ++i) {
    const float neg = -in.data<float>()[i];
    EXPECT_EQ(out.data<float>()[i], std::max(neg, 0.f) + neg) << "element " << i;
  }
}

// b = Relu(Reshape(Neg(x))): the view is the last reader of Neg's buffer, so Relu may take it.
// (y = Add(b, b) reads b twice, so y is not written over b: b stays in the arena.)
TEST(ExecutionPlan, AnOpMayWriteInPlaceOverAViewWhoseBufferDies) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* a = g->add_node("Neg", {x}, {"a"})->output(0);
  Value* b = g->add_node("Relu", {reshape(*g, a, {24})}, {"b"})->output(0);
  Value* y = g->add_node("Add", {b, b}, {"y"})->output(0);
  g->add_output(y);
  Tensor in = random_tensor({4, 6}, 3);
  auto plan = plan_for(*g, {in});
  EXPECT_EQ(plan->stats.num_views, 1);
  EXPECT_EQ(plan->stats.num_inplace, 1);
  EXPECT_EQ(plan->stats.num_over_outputs, 0);
  EXPECT_EQ(plan->stats.arena_bytes, 96u);  // Relu's output sits over Neg's
  Session session(g);
  Tensor out = session.run({in})[0];
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out.data<float>()[i], 2 * std::max(-in.data<float>()[i], 0.f));
}

// y = Neg(Relu(Neg(x))): each op's input dies where it is read and the last one is a graph output,
// so the chain is made in the output's storage (kOutput, then kOverOutput) and the arena is empty.
TEST(ExecutionPlan, AChainEndingInAGraphOutputIsWrittenInTheOutputsStorage) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* a = g->add_node("Neg", {x}, {"a"})->output(0);
  Value* b = g->add_node("Relu", {a}, {"b"})->output(0);
  g->add_output(g->add_node("Neg", {b}, {"y"})->output(0));
  Tensor in = random_tensor({4, 6}, 3);
  auto plan = plan_for(*g, {in});
  EXPECT_EQ(plan->stats.num_over_outputs, 2);
  EXPECT_EQ(plan->stats.arena_bytes, 0u);
  EXPECT_EQ(plan->slots[static_cast<size_t>(plan->output_slots[0])].kind, SlotKind::kOverOutput);
  Session session(g);
  Tensor out = session.run({in})[0];
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out.data<float>()[i], -std::max(-in.data<float>()[i], 0.f));
}

// SoftmaxCrossEntropyLoss(scores) with scores = Neg(x) an arena value read by the loss alone (or a
// view of it: the logits' Reshape to (tokens, vocabulary)): its log_prob output, a graph output (a
// saved value for the backward), is written over the scores, which are made in output storage, so
// the arena holds neither. Loss and log_prob are those of a plain run on a copy of the scores.
TEST(ExecutionPlan, TheLossWritesLogProbOverTheScoresThatDieThere) {
  for (bool through_view : {false, true}) {
    SCOPED_TRACE(through_view ? "scores read through a Reshape" : "scores read directly");
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kF32, Shape({2, 3, 50}));
    Value* labels = g->add_input("labels", DType::kI64, Shape({6}));
    // Neg(Reshape(x)) (the Reshape views the caller's x), or Reshape(Neg(x)).
    Value* scores = through_view ? reshape(*g, g->add_node("Neg", {x}, {"neg"})->output(0), {6, 50})
                                 : g->add_node("Neg", {reshape(*g, x, {6, 50})}, {"neg"})->output(0);
    Node* loss = g->add_node("SoftmaxCrossEntropyLoss", {scores, labels}, {"loss", "log_prob"});
    loss->set_attr("ignore_index", Attribute::of_int(-100));
    g->add_output(loss->output(0));
    g->add_output(loss->output(1));
    const Tensor in = random_tensor({2, 3, 50}, 7);
    const Tensor ids = testing::make_tensor<int64_t>({6}, {3, 49, -100, 0, 3, 17});
    auto plan = plan_for(*g, {in, ids});
    EXPECT_EQ(plan->stats.num_over_outputs, 1);
    EXPECT_EQ(plan->stats.arena_bytes, 0u);
    const std::vector<Tensor> out = Session(g).run({in, ids});
    const Tensor expected_scores = run_node("Neg", {in})[0].reshaped({6, 50});
    const std::vector<Tensor> expected = run_node(
        NodeSpec{.op = "SoftmaxCrossEntropyLoss", .attrs = {{"ignore_index", Attribute::of_int(-100)}}, .num_outputs = 2},
        {expected_scores, ids}, cpu_kernel_table());
    expect_close(out[0], expected[0], 0, 0);
    expect_close(out[1], expected[1], 0, 0);
  }
}

// mask = Equal(x (4, 8) f32, m (1, 8) f32, donated): the bool mask has m's 32 bytes but not its
// elements (m is broadcast over 4 rows), so it must not be written over m while Equal reads it (the
// backward of amax over an axis of 4 gave NaN gradients that way).
TEST(ExecutionPlan, NoOpWritesInPlaceOverAnInputOfOtherElementsWithTheSameBytes) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 8}));
  Value* m = g->add_input("m", DType::kF32, Shape({1, 8}));
  Value* mask = g->add_node("Equal", {x, m}, {"mask"})->output(0);
  Value* back = g->add_node("Cast", {mask}, {"back"})->output(0);
  back->producer->set_attr("to", Attribute::of_int(1));
  g->add_output(g->add_node("ReduceSum", {back}, {"count"})->output(0));
  Tensor xs = random_tensor({4, 8}, 5);
  Tensor ms = Tensor::empty(DType::kF32, {1, 8});
  for (int64_t j = 0; j < 8; ++j) ms.data<float>()[j] = xs.data<float>()[8 * (j % 4) + j];  // one match per column
  PlanOptions options;
  options.donated_inputs = {"m"};
  auto plan = build_execution_plan(*g, {xs, ms}, cpu_kernel_table(), options);
  for (const PlanStep& step : plan->steps)
    if (step.node->op_type() == "Equal")
      EXPECT_NE(plan->slots[static_cast<size_t>(step.outputs[0])].kind, SlotKind::kOverInput);
  Session session(g, {.donated_inputs = {"m"}});
  std::vector<Tensor> inputs = {xs, ms.clone()};
  EXPECT_EQ(session.run_releasing(inputs)[0].data<float>()[0], 8.f);
}

// Donated input a: Add, its last reader, writes t over a's bytes and Relu writes over t (a chain
// over the input); nothing takes the arena. When a is read again later (by Mul) it stays intact.
TEST(ExecutionPlan, AnOpWritesOverADonatedInputOnlyAfterItsLastReader) {
  for (bool read_again : {false, true}) {
    auto g = new_graph();
    Value* a = g->add_input("a", DType::kF32, Shape({4, 6}));
    Value* b = g->add_input("b", DType::kF32, Shape({4, 6}));
    Value* t = g->add_node("Add", {a, b}, {"t"})->output(0);
    Value* r = g->add_node("Relu", {t}, {"r"})->output(0);
    // (Add(r, r) reads r twice: y is not written over r, which keeps the chain over a.)
    g->add_output(read_again ? g->add_node("Mul", {r, a}, {"y"})->output(0) : g->add_node("Add", {r, r}, {"y"})->output(0));
    Tensor in_a = random_tensor({4, 6}, 1), in_b = random_tensor({4, 6}, 2);
    const std::vector<float> a_before = values_of(in_a);
    PlanOptions options;
    options.donated_inputs = {"a"};
    auto plan = build_execution_plan(*g, {in_a, in_b}, cpu_kernel_table(), options);
    EXPECT_EQ(plan->stats.num_over_inputs, read_again ? 0 : 2) << read_again;
    // Read again, a stays intact; Mul writes y, a graph output, over r, and r over t: t is made in
    // the output's storage, and the arena is empty either way.
    EXPECT_EQ(plan->stats.num_over_outputs, read_again ? 2 : 0) << read_again;
    EXPECT_EQ(plan->stats.arena_bytes, 0u) << read_again;
    Session session(g, {.donated_inputs = {"a"}});
    Tensor out = session.run({in_a, in_b})[0];
    for (int64_t i = 0; i < 24; ++i) {
      const float relu = std::max(a_before[i] + in_b.data<float>()[i], 0.f);
      EXPECT_EQ(out.data<float>()[i], read_again ? relu * a_before[i] : 2 * relu) << i;
      EXPECT_EQ(in_a.data<float>()[i], read_again ? a_before[i] : relu) << i;  // a's bytes hold r
    }
  }
}

// A donated input that an output is written over is the caller's output: its bytes are held to
// the run's end, beside what later steps make (the planner's choices weigh the run's peak).
TEST(ExecutionPlan, TheRunPeakHoldsADonatedInputAnOutputShowsToTheEnd) {
  auto g = new_graph();
  Value* a = g->add_input("a", DType::kF32, Shape({4, 6}));
  Value* b = g->add_input("b", DType::kF32, Shape({4, 6}));
  Value* two = g->add_initializer("two", Tensor::scalar(2.f));
  g->add_output(g->add_node("Mul", {a, two}, {"y"})->output(0));  // step 0: over a, which dies there
  g->add_output(g->add_node("Relu", {b}, {"z"})->output(0));      // step 1: storage of its own
  PlanOptions options;
  options.donated_inputs = {"a"};
  auto plan = build_execution_plan(*g, {random_tensor({4, 6}, 1), random_tensor({4, 6}, 2)}, cpu_kernel_table(),
                                   options);
  ASSERT_EQ(plan->inputs_under_outputs, std::vector<size_t>{0});
  EXPECT_EQ(plan->stats.arena_bytes, 0u);
  EXPECT_EQ(plan->stats.run_peak_bytes, 2 * 24 * sizeof(float));  // y in a's bytes, and z
}

// Views of a graph input and of a parameter show the caller's memory: nothing may write there,
// and a rebound parameter is seen by its view on the next run.
TEST(ExecutionPlan, ViewsOfCallerMemoryAreReadOnlyAndFollowRebinding) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* w = g->add_initializer("w", random_tensor({24}, 4));
  Value* vx = g->add_node("Relu", {reshape(*g, x, {24})}, {"rx"})->output(0);  // x dies here
  Value* y = g->add_node("Add", {vx, g->add_node("Identity", {w}, {"iw"})->output(0)}, {"y"})->output(0);
  g->add_output(y);
  SessionOptions options;
  options.mutable_initializers = {"w"};
  Session session(g, options);
  Tensor in = random_tensor({4, 6}, 5);
  const std::vector<float> in_before = values_of(in);
  for (uint32_t seed : {6u, 7u}) {
    Tensor weight = random_tensor({24}, seed);
    session.set_initializer("w", weight);
    const std::vector<float> weight_before = values_of(weight);
    Tensor out = session.run({in})[0];
    for (int64_t i = 0; i < 24; ++i)
      EXPECT_EQ(out.data<float>()[i], std::max(in_before[i], 0.f) + weight_before[i]) << "element " << i;
    EXPECT_EQ(values_of(weight), weight_before);
  }
  EXPECT_EQ(values_of(in), in_before);
  EXPECT_EQ(session.last_stats().num_views, 2);
  EXPECT_EQ(session.last_stats().num_inplace, 0);
}

// A view handed to the caller shows storage of this run that the caller then owns: the arena
// value it views gets fresh storage, shared by both outputs. A view of the caller's input is a copy.
TEST(ExecutionPlan, AViewThatIsAGraphOutputSharesFreshStorageOrCopiesCallerMemory) {
  auto g = new_graph();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* a = g->add_node("Neg", {x}, {"a"})->output(0);
  g->add_output(reshape(*g, a, {24}));                                 // shares a's fresh storage
  g->add_output(g->add_node("Relu", {a}, {"b"})->output(0));           // not in place: a is handed over
  g->add_output(g->add_node("Flatten", {x}, {"fx"})->output(0));       // a copy of x
  Session session(g);
  Tensor in = random_tensor({4, 6}, 8);
  std::vector<Tensor> first = session.run({in});
  EXPECT_EQ(session.last_stats().num_views, 1);
  EXPECT_EQ(session.last_stats().num_inplace, 0);
  EXPECT_NE(first[2].raw(), in.raw());
  auto expect_outputs = [&](const std::vector<Tensor>& out) {
    EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{24}));
    EXPECT_EQ(out[2].dims(), (std::vector<int64_t>{4, 6}));
    for (int64_t i = 0; i < 24; ++i) {
      EXPECT_EQ(out[0].data<float>()[i], -in.data<float>()[i]);
      EXPECT_EQ(out[1].data<float>()[i], std::max(-in.data<float>()[i], 0.f));
      EXPECT_EQ(out[2].data<float>()[i], in.data<float>()[i]);
    }
  };
  expect_outputs(first);
  std::vector<Tensor> second = session.run({in});
  EXPECT_NE(second[0].raw(), first[0].raw());  // the first run's outputs still belong to the caller
  first[0].data<float>()[0] = 1000.f;          // ... who may write them
  expect_outputs(second);
}

// ---- random programs of views and in-place elementwise ops ----

// Every value has 24 f32 elements; a program is the graph plus each value's reference data.
struct RandomProgram {
  std::shared_ptr<Graph> graph = new_graph();
  std::map<const Value*, std::vector<float>> reference;
};

const std::vector<std::vector<int64_t>> kShapes = {{24}, {4, 6}, {2, 3, 4}, {6, 4}, {1, 24}, {2, 1, 12}};

RandomProgram random_program(uint32_t seed, const std::vector<Tensor>& inputs) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(std::uniform_int_distribution<size_t>(0, n - 1)(rng)); };
  RandomProgram p;
  Graph& g = *p.graph;
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value* v = g.add_input("x" + std::to_string(i), DType::kF32, Shape::of(inputs[i].dims()));
    values.push_back(v);
    p.reference[v] = values_of(inputs[i]);
  }
  auto shape_of = [](const Value* v) { return v->shape.concrete(); };
  auto add = [&](const std::string& op, std::vector<Value*> in, std::vector<float> data,
                 const std::vector<int64_t>& dims) {
    Node* n = g.add_node(op, in, {g.unique_name("v")});
    Value* out = n->output(0);
    out->dtype = DType::kF32;
    out->shape = Shape::of(dims);
    p.reference[out] = std::move(data);
    values.push_back(out);
    return out;
  };
  const int num_nodes = 4 + static_cast<int>(pick(12));
  for (int k = 0; k < num_nodes; ++k) {
    Value* a = values[pick(values.size())];
    const std::vector<float>& ra = p.reference[a];
    switch (pick(7)) {
      case 0: {  // Reshape to another shape
        const std::vector<int64_t>& dims = kShapes[pick(kShapes.size())];
        Value* shape = g.add_initializer(g.unique_name("shape"), Tensor::from_i64(dims));
        add("Reshape", {a, shape}, ra, dims);
        break;
      }
      case 1: {  // Flatten at axis 1: (d0, rest)
        const std::vector<int64_t> dims = shape_of(a);
        add("Flatten", {a}, ra, {dims[0], 24 / dims[0]});
        break;
      }
      case 2: {  // Unsqueeze a leading 1, or Squeeze every 1
        std::vector<int64_t> dims = shape_of(a);
        if (std::find(dims.begin(), dims.end(), 1) != dims.end()) {
          std::erase(dims, 1);
          add("Squeeze", {a}, ra, dims);
        } else {
          Value* axes = g.add_initializer(g.unique_name("axes"), Tensor::from_i64({0}));
          dims.insert(dims.begin(), 1);
          add("Unsqueeze", {a, axes}, ra, dims);
        }
        break;
      }
      case 3:
        add("Identity", {a}, ra, shape_of(a));
        break;
      case 4: {
        std::vector<float> r = ra;
        for (float& x : r) x = -x;
        add("Neg", {a}, r, shape_of(a));
        break;
      }
      default: {  // Add or Mul of two values; the second is reshaped (a view) to the first's dims
        Value* b = values[pick(values.size())];
        if (shape_of(b) != shape_of(a)) {
          Value* shape = g.add_initializer(g.unique_name("shape"), Tensor::from_i64(shape_of(a)));
          b = add("Reshape", {b, shape}, p.reference[b], shape_of(a));
        }
        const bool is_add = pick(2) == 0;
        std::vector<float> r = p.reference[a];
        const std::vector<float>& rb = p.reference[b];
        for (size_t i = 0; i < r.size(); ++i) r[i] = is_add ? r[i] + rb[i] : r[i] * rb[i];
        add(is_add ? "Add" : "Mul", {a, b}, r, shape_of(a));
      }
    }
  }
  // Outputs: the last value and up to two others produced by nodes.
  std::vector<Value*> outputs = {values.back()};
  for (int k = 0; k < 2; ++k) {
    Value* v = values[inputs.size() + pick(values.size() - inputs.size())];
    if (std::find(outputs.begin(), outputs.end(), v) == outputs.end()) outputs.push_back(v);
  }
  for (Value* v : outputs) g.add_output(v);
  return p;
}

// Replays the plan's steps and tracks, per 4-byte arena word, the slot whose value it holds.
// Each input read must find its (viewed) arena slot's words still held by that slot: nothing
// overwrote the value before its last use. Counts the reads checked in `reads`.
void check_no_live_value_is_overwritten(const ExecutionPlan& plan, uint32_t seed, int& reads) {
  auto viewed = [&](int s) {
    while (s >= 0 && plan.slots[static_cast<size_t>(s)].kind == SlotKind::kView) s = plan.slots[static_cast<size_t>(s)].view_of;
    return s;
  };
  std::vector<int> holder(plan.stats.arena_bytes / 4, -1);
  auto words = [](const Slot& s) { return std::pair{s.arena_offset / 4, (s.arena_offset + s.tensor.nbytes()) / 4}; };
  for (size_t t = 0; t < plan.steps.size(); ++t) {
    const PlanStep& step = plan.steps[t];
    for (int in : step.inputs) {
      const int s = viewed(in);
      if (s < 0 || plan.slots[static_cast<size_t>(s)].kind != SlotKind::kArena) continue;
      auto [begin, end] = words(plan.slots[static_cast<size_t>(s)]);
      for (size_t w = begin; w < end; ++w)
        ASSERT_EQ(holder[w], s) << "seed " << seed << ", step " << t << " (" << step.node->describe()
                                << ") reads '" << plan.slots[static_cast<size_t>(s)].value->name
                                << "', whose arena word " << w << " was overwritten";
      ++reads;
    }
    for (int out : step.outputs) {
      if (out < 0 || plan.slots[static_cast<size_t>(out)].kind != SlotKind::kArena) continue;
      auto [begin, end] = words(plan.slots[static_cast<size_t>(out)]);
      for (size_t w = begin; w < end; ++w) holder[w] = out;
    }
  }
}

TEST(ExecutionPlan, RandomProgramsOfViewsMatchTheReferenceAndOverwriteNoLiveValue) {
  int views = 0, inplace = 0, reads = 0, over_outputs = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    std::vector<Tensor> inputs = {random_tensor({4, 6}, seed), random_tensor({2, 3, 4}, seed + 1000)};
    RandomProgram p = random_program(seed, inputs);
    const std::vector<std::vector<float>> inputs_before = {values_of(inputs[0]), values_of(inputs[1])};

    auto plan = plan_for(*p.graph, inputs);
    check_no_live_value_is_overwritten(*plan, seed, reads);
    views += plan->stats.num_views;
    inplace += plan->stats.num_inplace;
    over_outputs += plan->stats.num_over_outputs;

    Session session(p.graph);
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> out = session.run(inputs);
      for (size_t o = 0; o < out.size(); ++o) {
        const Value* v = p.graph->outputs()[o];
        ASSERT_EQ(out[o].dims(), v->shape.concrete()) << "seed " << seed;
        EXPECT_EQ(values_of(out[o]), p.reference[v]) << "seed " << seed << ", output '" << v->name << "'";
      }
    }
    EXPECT_EQ(values_of(inputs[0]), inputs_before[0]) << "seed " << seed << ": input x0 was written";
    EXPECT_EQ(values_of(inputs[1]), inputs_before[1]) << "seed " << seed << ": input x1 was written";
    if (::testing::Test::HasFailure()) return;
  }
  // The programs exercise what they are meant to.
  EXPECT_GT(views, 300);
  EXPECT_GT(inplace, 100);
  EXPECT_GT(over_outputs, 50);
  EXPECT_GT(reads, 400);
}

}  // namespace
}  // namespace trainrt
