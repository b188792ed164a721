// Session: planned execution against references, plan caching, in-place and folding, errors, and
// the steady-state promise that intermediates cost no heap allocation.
#include "trainrt/runtime/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "trainrt/core/testing.h"
#include "trainrt/core/thread_scratch.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Counts every heap allocation in this test binary.
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;

// y = Relu(x @ w + b): x (batch, 4), w (4, 3), b (3)
std::shared_ptr<Graph> linear_relu_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 4}));
  Value* w = g->add_initializer("w", random_tensor({4, 3}, 1));
  Value* b = g->add_initializer("b", random_tensor({3}, 2));
  Node* mm = g->add_node("MatMul", {x, w}, {"xw"});
  Node* add = g->add_node("Add", {mm->output(0), b}, {"z"});
  Node* relu = g->add_node("Relu", {add->output(0)}, {"y"});
  g->add_output(relu->output(0));
  return g;
}

Tensor linear_relu_reference(const Graph& g, const Tensor& x) {
  const Tensor& w = g.find_value("w")->data;
  const Tensor& b = g.find_value("b")->data;
  int64_t batch = x.dim(0);
  Tensor y = Tensor::empty(DType::kF32, {batch, 3});
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double acc = b.data<float>()[j];
      for (int64_t k = 0; k < 4; ++k) acc += double(x.data<float>()[i * 4 + k]) * w.data<float>()[k * 3 + j];
      y.data<float>()[i * 3 + j] = static_cast<float>(std::max(acc, 0.0));
    }
  return y;
}

TEST(Session, RunsAGraphAndCachesOnePlanPerShape) {
  auto g = linear_relu_graph();
  Session session(g);
  for (int64_t batch : {2, 7, 2}) {
    Tensor x = random_tensor({batch, 4}, static_cast<uint32_t>(batch));
    auto out = session.run({x});
    ASSERT_EQ(out.size(), 1u);
    expect_close(out[0], linear_relu_reference(*g, x), 1e-5, 1e-6);
  }
  EXPECT_EQ(session.num_cached_plans(), 2);
}

TEST(Session, ChainsOfElementwiseOpsRunInPlaceAndReuseMemory) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* v = g->add_input("x", DType::kF32, Shape({64}));
  Value* x = v;
  v = g->add_node("Neg", {v}, {"n0"})->output(0);
  for (int i = 0; i < 6; ++i) v = g->add_node("Relu", {v}, {"r" + std::to_string(i)})->output(0);
  v = g->add_node("Add", {v, x}, {"y"})->output(0);
  g->add_output(v);
  Session session(g);
  Tensor in = random_tensor({64}, 3);
  Tensor out = session.run({in})[0];
  for (int i = 0; i < 64; ++i) {
    float e = std::max(-in.data<float>()[i], 0.f) + in.data<float>()[i];
    EXPECT_FLOAT_EQ(out.data<float>()[i], e);
  }
  // Each op writes over the value before it, which dies there; the last one is a graph output, so
  // the whole chain is written in the output's own storage and the arena holds nothing.
  EXPECT_EQ(session.last_stats().num_over_outputs, 7);
  EXPECT_EQ(session.last_stats().arena_bytes, 0u);
}

// y = Add(a, c), a = x w1 and c = x w2 (3, 5): a dies at the Add, so y is written over it and a is
// made in output storage; c stays in the arena. Outputs a caller keeps are left as they were.
TEST(Session, GraphOutputsAreWrittenOverIntermediatesThatDieThere) {
  auto build = [](bool a_is_output) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF32, Shape({3, 4}));
    Value* a = g->add_node("MatMul", {x, g->add_initializer("w1", random_tensor({4, 5}, 1))}, {"a"})->output(0);
    Value* c = g->add_node("MatMul", {x, g->add_initializer("w2", random_tensor({4, 5}, 2))}, {"c"})->output(0);
    g->add_output(g->add_node("Add", {a, c}, {"y"})->output(0));
    if (a_is_output) g->add_output(a);
    return g;
  };
  const Tensor w1 = build(false)->find_value("w1")->data, w2 = build(false)->find_value("w2")->data;
  auto expected = [&](const Tensor& x) {
    Tensor y = Tensor::empty(DType::kF32, {3, 5});
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        float a = 0, c = 0;
        for (int64_t k = 0; k < 4; ++k) {
          a += x.data<float>()[i * 4 + k] * w1.data<float>()[k * 5 + j];
          c += x.data<float>()[i * 4 + k] * w2.data<float>()[k * 5 + j];
        }
        y.data<float>()[i * 5 + j] = a + c;
      }
    return y;
  };
  Session session(build(false));
  const Tensor x1 = random_tensor({3, 4}, 3), x2 = random_tensor({3, 4}, 4), x3 = random_tensor({3, 4}, 5);
  Tensor y1 = session.run({x1})[0];
  EXPECT_EQ(session.last_stats().num_over_outputs, 1);
  EXPECT_EQ(session.last_stats().arena_bytes, 60u);  // c alone
  EXPECT_EQ(session.memory_stats().output_bytes, y1.nbytes());
  expect_close(y1, expected(x1), 1e-5, 1e-6);
  Tensor y2 = session.run({x2})[0];  // y1 is held: y2 lands elsewhere, y1 is unchanged
  EXPECT_NE(y2.raw(), y1.raw());
  expect_close(y1, expected(x1), 1e-5, 1e-6);
  expect_close(y2, expected(x2), 1e-5, 1e-6);
  const void* second = y2.raw();
  y2 = Tensor();
  EXPECT_EQ(session.run({x3})[0].raw(), second);  // released: written again
  // a handed to the caller too does not die at the Add: y is written over c instead.
  Session kept(build(true));
  auto out = kept.run({x1});
  EXPECT_EQ(kept.last_stats().num_over_outputs, 1);
  EXPECT_EQ(kept.last_stats().arena_bytes, 0u);
  EXPECT_NE(out[0].raw(), out[1].raw());
  expect_close(out[0], expected(x1), 1e-5, 1e-6);
}

TEST(Session, FoldsShapeArithmeticAtPlanTime) {
  // y = Reshape(x, Concat(Shape(x)[0:1], [-1])): (batch, 2, 3) -> (batch, 6)
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 2, 3}));
  Value* shape = g->add_node("Shape", {x}, {"s"})->output(0);
  Value* starts = g->add_initializer("starts", Tensor::from_i64({0}));
  Value* ends = g->add_initializer("ends", Tensor::from_i64({1}));
  Value* lead = g->add_node("Slice", {shape, starts, ends}, {"lead"})->output(0);
  Value* minus1 = g->add_initializer("minus1", Tensor::from_i64({-1}));
  Node* cat = g->add_node("Concat", {lead, minus1}, {"target"});
  cat->set_attr("axis", Attribute::of_int(0));
  Value* y = g->add_node("Reshape", {x, cat->output(0)}, {"y"})->output(0);
  g->add_output(y);
  Session session(g);
  Tensor in = random_tensor({5, 2, 3}, 4);
  Tensor out = session.run({in})[0];
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(session.last_stats().num_folded, 3);  // Shape, Slice, Concat
  EXPECT_EQ(session.last_stats().num_steps, 1);   // only the Reshape runs
}

TEST(Session, ShapesKnownOnlyAtRunTimeAreInferredThen) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({6}));
  Value* s = g->add_input("s", DType::kI64, Shape({2}));
  Value* r = g->add_node("Reshape", {x, s}, {"r"})->output(0);
  Value* y = g->add_node("Relu", {r}, {"y"})->output(0);
  g->add_output(y);
  Session session(g);
  Tensor in = make_tensor<float>({6}, {-1, 2, -3, 4, -5, 6});
  Tensor out = session.run({in, Tensor::from_i64({3, 2})})[0];
  expect_close(out, make_tensor<float>({3, 2}, {0, 2, 0, 4, 0, 6}));
  out = session.run({in, Tensor::from_i64({2, 3})})[0];
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 3}));
}

// y = Relu(Reshape(Neg(x), s)): with s a value input, each value of s gets its own plan in which
// the Reshape has static dims (a view); otherwise its output is sized at run time.
TEST(Session, ValueInputsArePlannedForLikeConstants) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({4, 6}));
  Value* s = g->add_input("s", DType::kI64, Shape({2}));
  Value* n = g->add_node("Neg", {x}, {"n"})->output(0);
  Value* r = g->add_node("Reshape", {n, s}, {"r"})->output(0);
  g->add_output(g->add_node("Relu", {r}, {"y"})->output(0));
  Tensor in = random_tensor({4, 6}, 9);
  SessionOptions options;
  options.value_inputs = {"s"};
  Session planned(g, options);
  for (auto dims : {std::vector<int64_t>{6, 4}, {3, 8}, {6, 4}}) {
    Tensor out = planned.run({in, Tensor::from_i64(dims)})[0];
    EXPECT_EQ(out.dims(), dims);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out.data<float>()[i], std::max(-in.data<float>()[i], 0.f));
    EXPECT_EQ(planned.last_stats().num_views, 1);
    EXPECT_EQ(planned.last_stats().num_dynamic, 0);
  }
  EXPECT_EQ(planned.num_cached_plans(), 2);
  Session sized_at_run_time(g);
  sized_at_run_time.run({in, Tensor::from_i64({6, 4})});
  EXPECT_EQ(sized_at_run_time.last_stats().num_views, 0);
  EXPECT_EQ(sized_at_run_time.last_stats().num_dynamic, 2);  // Reshape and Relu
  options.value_inputs = {"x"};
  EXPECT_THROW(Session(g, options), InvalidModel);  // not i64
}

TEST(Session, BadInputsGiveTypedErrorsNamingTheInput) {
  Session session(linear_relu_graph());
  EXPECT_THROW(session.run({}), ShapeError);
  try {
    session.run({random_tensor({2, 5}, 1)});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'x' has shape (2, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(session.run({Tensor::zeros(DType::kF64, {2, 4})}), ShapeError);
  // The session still works after errors.
  EXPECT_EQ(session.run({random_tensor({2, 4}, 1)})[0].dims(), (std::vector<int64_t>{2, 3}));
}

TEST(Session, MutableInitializersAreReadEveryRun) {
  auto g = linear_relu_graph();
  SessionOptions options;
  options.mutable_initializers = {"b"};
  Session session(g, options);
  Tensor x = random_tensor({3, 4}, 5);
  Tensor bias = make_tensor<float>({3}, {100, 100, 100});
  session.set_initializer("b", bias);
  Tensor out = session.run({x})[0];
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_GT(out.data<float>()[i], 90.f);
  EXPECT_THROW(session.set_initializer("w", bias), InvalidModel);
  EXPECT_THROW(session.set_initializer("b", random_tensor({4}, 1)), ShapeError);
}

// Allocations per run must not grow with the number of intermediates: they are all planned.
TEST(Session, SteadyStateRunsDoNotAllocateIntermediates) {
  auto chain = [](int length) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* v = g->add_input("x", DType::kF32, Shape({256}));
    Value* x = v;
    for (int i = 0; i < length; ++i) v = g->add_node(i % 2 ? "Relu" : "Add", i % 2 ? std::vector<Value*>{v} : std::vector<Value*>{v, x}, {"v" + std::to_string(i)})->output(0);
    g->add_output(v);
    return g;
  };
  auto allocations_per_run = [](std::shared_ptr<Graph> g) {
    Session session(g);
    Tensor x = random_tensor({256}, 1);
    session.run({x});
    session.run({x});
    int64_t before = g_allocations.load();
    for (int i = 0; i < 10; ++i) session.run({x});
    return (g_allocations.load() - before) / 10;
  };
  EXPECT_EQ(allocations_per_run(chain(4)), allocations_per_run(chain(64)));
}

// An output the caller has let go of is written again next run (same memory, new values); one
// the caller keeps is left as it was, and the next run's output lands elsewhere. A run of another
// plan lets the kept storage go, so a plan switch never reuses memory of another shape.
TEST(Session, OutputStorageIsReusedOnlyOnceTheCallerReleasedIt) {
  auto g = linear_relu_graph();
  Session session(g);
  Tensor x1 = random_tensor({3, 4}, 11), x2 = random_tensor({3, 4}, 12), x3 = random_tensor({3, 4}, 13);
  const void* first = session.run({x1})[0].raw();  // released at once
  Tensor second = session.run({x2})[0];
  EXPECT_EQ(second.raw(), first);
  expect_close(second, linear_relu_reference(*g, x2), 1e-5, 1e-6);
  Tensor third = session.run({x3})[0];  // `second` is still held
  EXPECT_NE(third.raw(), second.raw());
  expect_close(second, linear_relu_reference(*g, x2), 1e-5, 1e-6);
  expect_close(third, linear_relu_reference(*g, x3), 1e-5, 1e-6);
  third = Tensor();
  Tensor other_shape = session.run({random_tensor({5, 4}, 14)})[0];
  EXPECT_EQ(other_shape.dims(), (std::vector<int64_t>{5, 3}));
}

// memory_stats().output_bytes counts the output storage the session keeps to write again: the last
// run's outputs, whether or not the caller still holds them, and only the current plan's.
TEST(Session, OutputBytesCountTheOutputsKeptForTheNextRun) {
  auto g = linear_relu_graph();
  Session session(g);
  EXPECT_EQ(session.memory_stats().output_bytes, 0u);
  Tensor y = session.run({random_tensor({3, 4}, 41)})[0];  // (3, 3) f32
  EXPECT_EQ(session.memory_stats().output_bytes, y.nbytes());
  y = Tensor();  // let go: the session still holds the storage, to write it next run
  EXPECT_EQ(session.memory_stats().output_bytes, 3u * 3u * sizeof(float));
  session.run({random_tensor({5, 4}, 42)});  // another plan: the first one's outputs are let go
  EXPECT_EQ(session.memory_stats().output_bytes, 5u * 3u * sizeof(float));
}

// The caller's inputs are read in place and not retained: once run() returns, storage the caller
// drops is freed. (A plan that kept the input it was built with pinned the first forward's saved
// values for as long as the backward program lived, and the second forward, unable to reuse them,
// took a second set.)
TEST(Session, RunDoesNotKeepTheCallersInputsAlive) {
  auto g = linear_relu_graph();
  Session session(g);
  for (int64_t batch : {3, 3, 5}) {  // the run that builds the plan, a cached run, another plan
    Tensor x = random_tensor({batch, 4}, 21);
    session.run({x});
    EXPECT_TRUE(x.sole_owner()) << "batch " << batch;
  }
}

// A kernel's large per-thread scratch (a oneDNN scratchpad, a reordered operand) is not held past
// the run that used it: a forward's is not live through the backward's peak, nor between steps.
TEST(Session, RunDropsTheKernelsLargeScratch) {
  Session session(linear_relu_graph());
  Tensor x = random_tensor({3, 4}, 22);
  session.run({x});
  thread_scratch(0, kThreadScratchKeptBytes + 1);  // as a product's kernel leaves it
  const size_t before = storage_bytes().live;
  session.run({x});
  EXPECT_LE(storage_bytes().live + kThreadScratchKeptBytes, before);
}

}  // namespace
}  // namespace trainrt

namespace trainrt {
namespace {

// Two sessions sharing one arena (a forward and a backward program): the arena is as large as the
// larger plan, not the sum, and a session whose arena another one moved (grew) re-points its
// intermediates before it runs. Every result is checked against the reference after each move.
TEST(Session, SessionsSharingAnArenaReserveTheLargerPlanAndFollowItWhenItMoves) {
  // Relu(x w + b) summed over its columns: the (batch, 3) activations are arena intermediates.
  auto g = linear_relu_graph();
  Value* y = g->outputs()[0];
  Node* sum = g->add_node("ReduceSum", {y, g->add_initializer("axes", Tensor::from_i64({1}))}, {"row_sums"});
  sum->set_attr("keepdims", Attribute::of_int(0));
  g->mutable_outputs() = {sum->output(0)};
  const auto reference = [&](const Tensor& x) {
    const Tensor act = linear_relu_reference(*g, x);
    Tensor sums = Tensor::zeros(DType::kF32, {x.dim(0)});
    for (int64_t i = 0; i < x.dim(0); ++i)
      for (int64_t j = 0; j < 3; ++j) sums.data<float>()[i] += act.data<float>()[i * 3 + j];
    return sums;
  };
  SessionOptions options;
  options.arena = std::make_shared<Arena>();
  Session small(g, options), large(g, options);
  Tensor x_small = random_tensor({3, 4}, 31);
  expect_close(small.run({x_small})[0], reference(x_small), 1e-5, 1e-6);
  const size_t small_bytes = small.last_stats().arena_bytes;
  for (int64_t batch : {64, 256}) {  // each grows the shared block: it moves
    Tensor x = random_tensor({batch, 4}, 32);
    expect_close(large.run({x})[0], reference(x), 1e-5, 1e-6);
    expect_close(small.run({x_small})[0], reference(x_small), 1e-5, 1e-6);
  }
  EXPECT_GT(large.last_stats().arena_bytes, small_bytes);
  EXPECT_EQ(options.arena->capacity(), large.last_stats().arena_bytes);
  EXPECT_EQ(small.memory_stats().arena_capacity, large.memory_stats().arena_capacity);
  EXPECT_EQ(&small.arena(), &large.arena());
}

// A result handed over in the arena's bytes (SessionOptions::arena_outputs): placed where the run's
// wide intermediate left the arena idle, it keeps the block; a session sharing the arena that reads
// it plans around it until its last reader, and a run that does not read it takes a fresh block.
TEST(Session, ArenaOutputsStayInIdleBytesAndAreNeverWrittenOverWhileHeld) {
  // narrow = ReduceSum(x @ w16, axis 1) * c: (batch, 4), made once the (batch, 16) product is dead.
  auto producer = std::make_shared<Graph>();
  producer->set_opset("", 18);
  Value* x = producer->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 4}));
  Value* wide = producer->add_node("MatMul", {x, producer->add_initializer("w16", random_tensor({4, 16}, 3))},
                                   {"wide"})->output(0);
  Value* s = producer->add_node("ReduceSum", {wide, producer->add_initializer("axes", Tensor::from_i64({1}))},
                                {"s"})->output(0);
  producer->add_output(producer->add_node("Mul", {s, producer->add_initializer("c", random_tensor({1, 4}, 4))},
                                          {"narrow"})->output(0));
  // consumer: sum over columns of (n * n + n), n donated: the squares may be written over it.
  auto consumer = std::make_shared<Graph>();
  consumer->set_opset("", 18);
  Value* n = consumer->add_input("n", DType::kF32, Shape({Dim::symbolic("batch"), 4}));
  Value* sq = consumer->add_node("Mul", {n, n}, {"sq"})->output(0);
  Value* sum = consumer->add_node("Add", {sq, n}, {"sum"})->output(0);
  Node* rows = consumer->add_node("ReduceSum", {sum, consumer->add_initializer("axes", Tensor::from_i64({1}))}, {"rows"});
  rows->set_attr("keepdims", Attribute::of_int(0));
  consumer->add_output(rows->output(0));

  Tensor x1 = random_tensor({64, 4}, 5), x2 = random_tensor({64, 4}, 6);
  Session plain_producer(producer), plain_consumer(consumer);
  const Tensor expected1 = plain_producer.run({x1})[0].clone(), expected2 = plain_producer.run({x2})[0].clone();
  const Tensor expected_rows = plain_consumer.run({expected1.clone()})[0].clone();

  SessionOptions options;
  options.arena = std::make_shared<Arena>();
  SessionOptions producer_options = options;
  producer_options.arena_outputs = {"narrow"};
  options.donated_inputs = {"n"};
  Session make(producer, producer_options), use(consumer, options);
  std::vector<Tensor> first = make.run({x1});
  EXPECT_GE(options.arena->offset_of(first[0].raw()), 0);  // in the arena, no storage of its own
  EXPECT_EQ(make.memory_stats().output_bytes, 0u);
  EXPECT_LE(options.arena->capacity(), make.last_stats().arena_bytes);  // and it grew nothing
  EXPECT_TRUE(options.arena->in_use_elsewhere());
  expect_close(first[0], expected1, 0, 0);

  const void* first_block = options.arena->block().get();
  std::vector<Tensor> second = make.run({x2});  // first[0] is held: a fresh block, first untouched
  EXPECT_NE(options.arena->block().get(), first_block);
  expect_close(first[0], expected1, 0, 0);
  expect_close(second[0], expected2, 0, 0);

  std::vector<Tensor> in = {second[0]};
  second.clear();
  expect_close(use.run_releasing(in)[0], plain_consumer.run({expected2.clone()})[0], 0, 0);
  EXPECT_FALSE(in[0].defined());  // let go of after its last reader
  std::vector<Tensor> again = {first[0]};
  first.clear();
  expect_close(use.run_releasing(again)[0], expected_rows, 0, 0);  // an old block's: read where it is
}

}  // namespace
}  // namespace trainrt
