// Gradient rules of the shape and data movement family against f64 finite differences: single
// nodes over attribute and opset variants, graphs with symbolic dims (the rules' run-time shape
// paths), Split with an unused output, Dropout's mask reuse, and a small GPT-style block.
#include <gtest/gtest.h>

#include <climits>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/runtime/session.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::expect_graph_gradients_match;
using testing::GradCheckOptions;
using testing::make_tensor;
using testing::random_f64;
using testing::WorstErrors;

Attribute int_attr(int64_t v) { return Attribute::of_int(v); }
Attribute ints_attr(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }
Tensor i64(std::vector<int64_t> v) { return Tensor::from_i64(v); }

// Builds test graphs node by node: b.op("Transpose", {x}, {{"perm", ints_attr({1, 0})}}).
class GraphBuilder {
 public:
  explicit GraphBuilder(int opset = 18) : g_(std::make_shared<Graph>()) { g_->set_opset("", opset); }
  Value* input(const std::string& name, Shape shape, DType t = DType::kF64) {
    return g_->add_input(name, t, std::move(shape));
  }
  Value* constant(Tensor t) { return g_->add_initializer(g_->unique_name("const"), std::move(t)); }
  std::vector<Value*> ops(const std::string& op, const std::vector<Value*>& inputs, int outputs,
                          const std::map<std::string, Attribute>& attrs = {}) {
    std::vector<std::string> names;
    for (int o = 0; o < outputs; ++o) names.push_back(g_->unique_name(op + "_out" + std::to_string(o)));
    Node* n = g_->add_node(op, inputs, names);
    for (const auto& [k, a] : attrs) n->set_attr(k, a);
    return n->outputs();
  }
  Value* op(const std::string& op, const std::vector<Value*>& inputs,
            const std::map<std::string, Attribute>& attrs = {}) {
    return ops(op, inputs, 1, attrs)[0];
  }
  // sum(v * v): a loss whose gradient tells every element apart.
  Value* sum_of_squares(Value* v) { return op("ReduceSum", {op("Mul", {v, v})}, {{"keepdims", int_attr(0)}}); }
  std::shared_ptr<Graph> finish(Value* loss) {
    g_->add_output(loss);
    return g_;
  }

 private:
  std::shared_ptr<Graph> g_;
};

// ---- single nodes ----

TEST(TensorGradients, ReshapeFlattenSqueezeUnsqueezeMatchFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 1);
  worst.check({.op = "Reshape"}, {x, i64({4, -1})});
  worst.check({.op = "Reshape"}, {x, i64({0, -1, 2})});
  for (int64_t axis : {0, 2, -1}) worst.check({.op = "Flatten", .attrs = {{"axis", int_attr(axis)}}}, {x});
  const Tensor ones = random_f64({2, 1, 3, 1}, 2);
  worst.check({.op = "Squeeze"}, {ones, i64({-1})});
  worst.check({.op = "Squeeze"}, {ones});  // every size-1 dim
  worst.check({.op = "Squeeze", .attrs = {{"axes", ints_attr({1})}}, .opset = 11}, {ones});
  worst.check({.op = "Unsqueeze"}, {random_f64({2, 3}, 3), i64({0, -1})});
  worst.check({.op = "Unsqueeze", .attrs = {{"axes", ints_attr({1})}}, .opset = 11}, {random_f64({2, 3}, 3)});
}

TEST(TensorGradients, TransposeMatchesFiniteDifferences) {
  WorstErrors worst;
  worst.check({.op = "Transpose"}, {random_f64({2, 3, 4}, 4)});  // default: reversed axes
  worst.check({.op = "Transpose", .attrs = {{"perm", ints_attr({1, 2, 0})}}}, {random_f64({2, 3, 4}, 5)});
  worst.check({.op = "Transpose", .attrs = {{"perm", ints_attr({0, 2, 1, 3})}}}, {random_f64({2, 3, 2, 2}, 6)});
}

TEST(TensorGradients, ConcatAndSplitMatchFiniteDifferences) {
  WorstErrors worst;
  worst.check({.op = "Concat", .attrs = {{"axis", int_attr(1)}}},
              {random_f64({2, 1, 3}, 7), random_f64({2, 4, 3}, 8), random_f64({2, 2, 3}, 9)});
  worst.check({.op = "Concat", .attrs = {{"axis", int_attr(-1)}}},
              {random_f64({2, 2}, 10), random_f64({2, 3}, 11), random_f64({2, 1}, 12)});
  worst.check({.op = "Concat", .attrs = {{"axis", int_attr(0)}}}, {random_f64({1, 3}, 13), random_f64({2, 3}, 14)});
  const Tensor x = random_f64({2, 6}, 15);
  worst.check({.op = "Split", .attrs = {{"axis", int_attr(1)}}, .num_outputs = 3}, {x, i64({1, 3, 2})});
  worst.check({.op = "Split", .attrs = {{"axis", int_attr(-1)}, {"split", ints_attr({2, 4})}}, .num_outputs = 2,
               .opset = 11},
              {x});
  worst.check({.op = "Split", .num_outputs = 2}, {random_f64({4, 3}, 16)});  // equal parts along axis 0
  worst.check({.op = "Split", .attrs = {{"axis", int_attr(1)}, {"num_outputs", int_attr(3)}}, .num_outputs = 3},
              {random_f64({2, 7}, 17)});  // Split-18: parts of 3, 3, 1
}

TEST(TensorGradients, SliceMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({4, 5}, 18);
  worst.check({.op = "Slice"}, {x, i64({-1}), i64({INT64_MIN}), i64({1}), i64({-1})});    // reversed columns
  worst.check({.op = "Slice"}, {x, i64({1, 0}), i64({100, -1}), i64({-2, 1}), i64({2, 1})});  // clamped end
  worst.check({.op = "Slice"}, {random_f64({3, 4, 5}, 19), i64({4, -100}), i64({-100, 100}), i64({2, 0}),
                                i64({-2, 1})});
  worst.check({.op = "Slice"}, {x, i64({1}), i64({3})});  // no axes, no steps
  worst.check({.op = "Slice",
               .attrs = {{"starts", ints_attr({1, -3})}, {"ends", ints_attr({3, 100})}, {"axes", ints_attr({0, -1})}},
               .opset = 9},
              {x});
}

TEST(TensorGradients, GatherMatchesFiniteDifferences) {
  WorstErrors worst;
  worst.check({.op = "Gather"}, {random_f64({5, 3}, 20), make_tensor<int64_t>({4}, {1, -4, 4, 1})});  // repeats
  worst.check({.op = "Gather", .attrs = {{"axis", int_attr(1)}}},
              {random_f64({2, 6, 3}, 21), make_tensor<int64_t>({2, 2}, {0, 5, -1, 0})});
  worst.check({.op = "Gather", .attrs = {{"axis", int_attr(-1)}}},
              {random_f64({3, 4}, 22), make_tensor<int64_t>({}, {2})});  // a scalar index drops the axis
  worst.check({.op = "Gather"}, {random_f64({4, 3}, 23), make_tensor<int32_t>({3}, {3, 3, -1})});
}

// GatherGrad read as a forward op (passes/padding_elimination.h scatters the kept rows back with
// it): the rows' gradient, repeats included, is the output gradient gathered at their indices.
TEST(TensorGradients, GatherGradAsAForwardOpMatchesFiniteDifferences) {
  WorstErrors worst;
  const std::string ours(kTrainrtDomain);
  worst.check({.op = "GatherGrad", .domain = ours},
              {i64({5, 3}), make_tensor<int64_t>({4}, {1, 4, 4, 0}), random_f64({4, 3}, 24)}, {.wrt = {2}});
  worst.check({.op = "GatherGrad", .attrs = {{"axis", int_attr(1)}}, .domain = ours},
              {i64({2, 6}), make_tensor<int64_t>({3}, {5, 0, 2}), random_f64({2, 3}, 25)}, {.wrt = {2}});
  // With an addend (a tied embedding's gradient accumulated onto another): both take the output's.
  worst.check({.op = "GatherGrad", .domain = ours},
              {i64({5, 3}), make_tensor<int64_t>({4}, {1, 4, 4, 0}), random_f64({4, 3}, 26), random_f64({5, 3}, 27)},
              {.wrt = {2, 3}});
}

TEST(TensorGradients, GatherNDMatchesFiniteDifferences) {
  WorstErrors worst;
  // (3, 4, 2) by (row, col) pairs: slices of 2, one pair repeated, one negative.
  worst.check({.op = "GatherND"},
              {random_f64({3, 4, 2}, 30), make_tensor<int64_t>({4, 2}, {0, 1, 2, 3, 0, 1, -1, -4})});
  // Whole rows (k = 1), and batch_dims = 1: x[b, idx[b]] as the exporters write pooled logits.
  worst.check({.op = "GatherND"}, {random_f64({3, 4}, 31), make_tensor<int64_t>({2, 1}, {2, 0})});
  worst.check({.op = "GatherND", .attrs = {{"batch_dims", int_attr(1)}}},
              {random_f64({2, 5, 3}, 32), make_tensor<int64_t>({2, 1}, {4, 1})});
}

TEST(TensorGradients, ScatterNDMatchesFiniteDifferences) {
  WorstErrors worst;
  // Rows 2 and 0 of a (3, 4) written (data's gradient there is 0) or added.
  const Tensor rows = make_tensor<int64_t>({2, 1}, {2, 0});
  worst.check({.op = "ScatterND"}, {random_f64({3, 4}, 40), rows, random_f64({2, 4}, 41)});
  worst.check({.op = "ScatterND", .attrs = {{"reduction", Attribute::of_string("add")}}},
              {random_f64({3, 4}, 42), make_tensor<int64_t>({3, 2}, {0, 1, 2, 3, 0, 1}), random_f64({3}, 43)});
}

TEST(TensorGradients, PadMatchesFiniteDifferencesInEveryMode) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 50);
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    SCOPED_TRACE(mode);
    worst.check({.op = "Pad", .attrs = {{"mode", Attribute::of_string(mode)}}},
                {x, make_tensor<int64_t>({6}, {0, 2, 1, 0, 1, 2})});
    // Axes given, one pad negative (a crop).
    worst.check({.op = "Pad", .attrs = {{"mode", Attribute::of_string(mode)}}},
                {x, make_tensor<int64_t>({4}, {1, -1, 2, 1}), make_tensor<double>({}, {0.5}),
                 make_tensor<int64_t>({2}, {1, -1})});
  }
}

TEST(TensorGradients, ScatterElementsMatchesFiniteDifferences) {
  WorstErrors worst;
  // Distinct positions for none (a repeated one is written twice: ONNX leaves that undefined);
  // repeats for add.
  worst.check({.op = "ScatterElements", .attrs = {{"axis", Attribute::of_int(1)}}},
              {random_f64({2, 4}, 70), make_tensor<int64_t>({2, 2}, {3, 0, 1, 2}), random_f64({2, 2}, 71)});
  worst.check({.op = "ScatterElements", .attrs = {{"reduction", Attribute::of_string("add")}}},
              {random_f64({3, 2}, 72), make_tensor<int64_t>({2, 2}, {0, 2, 0, -1}), random_f64({2, 2}, 73)});
}

TEST(TensorGradients, TopKValuesMatchFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({3, 5}, 60);  // distinct values: no tie flips under the FD step
  for (int64_t largest : {1, 0}) {
    worst.check({.op = "TopK", .attrs = {{"largest", Attribute::of_int(largest)}}, .num_outputs = 2},
                {x, make_tensor<int64_t>({1}, {2})});
    worst.check({.op = "TopK", .attrs = {{"axis", Attribute::of_int(0)}, {"largest", Attribute::of_int(largest)}},
                 .num_outputs = 2},
                {x, make_tensor<int64_t>({1}, {3})});
  }
}

TEST(TensorGradients, GatherElementsMatchesFiniteDifferences) {
  WorstErrors worst;
  worst.check({.op = "GatherElements"},
              {random_f64({3, 4}, 24), make_tensor<int64_t>({2, 4}, {2, 0, -1, 1, 2, 2, 0, 1})});  // repeats
  worst.check({.op = "GatherElements", .attrs = {{"axis", int_attr(-1)}}},
              {random_f64({2, 3, 5}, 25), make_tensor<int32_t>({2, 2, 3}, {4, 0, 4, 1, 1, -5, 2, 3, 0, 4, 4, 4})});
  // The indices cover only part of the other dims: the rest of dX stays 0.
  worst.check({.op = "GatherElements", .attrs = {{"axis", int_attr(1)}}},
              {random_f64({3, 4}, 26), make_tensor<int64_t>({2, 2}, {3, 3, 0, 1})});
}

// Embedding(padding_idx=p) differentiates as Gather on rows except row p, which gets no gradient
// (torch's semantics: not the finite difference of row p, so the indices here avoid p; the zero
// row is checked by the GatherGrad kernel tests and against torch in tests/python).
TEST(TensorGradients, EmbeddingMatchesFiniteDifferencesOffThePaddingRow) {
  WorstErrors worst;
  worst.check({.op = "Embedding", .attrs = {{"padding_idx", int_attr(0)}}, .domain = std::string(kTrainrtDomain)},
              {random_f64({5, 3}, 26), make_tensor<int64_t>({2, 3}, {1, 4, 4, 2, 1, 3})});
}

TEST(TensorGradients, ExpandTileTriluMatchFiniteDifferences) {
  WorstErrors worst;
  worst.check({.op = "Expand"}, {random_f64({3, 1}, 24), i64({2, 3, 4})});
  worst.check({.op = "Expand"}, {random_f64({1}, 25), i64({3})});
  worst.check({.op = "Expand"}, {random_f64({2, 1, 4}, 26), i64({1, 3, 1})});
  worst.check({.op = "Tile"}, {random_f64({2, 3, 2}, 27), i64({2, 1, 3})});
  worst.check({.op = "Tile"}, {random_f64({3}, 28), i64({2})});
  worst.check({.op = "Tile"}, {random_f64({2, 2}, 29), i64({1, 1})});
  worst.check({.op = "Trilu"}, {random_f64({3, 4}, 30)});
  worst.check({.op = "Trilu", .attrs = {{"upper", int_attr(0)}}},
              {random_f64({3, 4}, 31), Tensor::scalar<int64_t>(-1)});
  worst.check({.op = "Trilu"}, {random_f64({2, 3, 3}, 32), Tensor::scalar<int64_t>(1)});
}

TEST(TensorGradients, CumSumMatchesFiniteDifferencesInEveryDirection) {
  WorstErrors worst;
  for (int64_t exclusive : {0, 1}) {
    for (int64_t reverse : {0, 1}) {
      const std::map<std::string, Attribute> attrs{{"exclusive", int_attr(exclusive)}, {"reverse", int_attr(reverse)}};
      worst.check({.op = "CumSum", .attrs = attrs}, {random_f64({2, 3, 4}, 40), Tensor::scalar<int64_t>(1)});
      worst.check({.op = "CumSum", .attrs = attrs}, {random_f64({5}, 41), Tensor::scalar<int32_t>(-1)});
      worst.check({.op = "CumSum", .attrs = attrs}, {random_f64({3, 2}, 42), Tensor::scalar<int64_t>(0)});
    }
  }
}

// Finite differences need a fixed mask: here Dropout drops nothing (inference, ratio 0, old
// opsets); the training formula is DropoutGrad's kernel test and the mask test below.
TEST(TensorGradients, DropoutThatDropsNothingPassesTheGradient) {
  WorstErrors worst;
  const Tensor x = random_f64({3, 4}, 33);
  const GradCheckOptions data_only{.wrt = {0}};
  worst.check({.op = "Dropout", .num_outputs = 2}, {x, Tensor::scalar<double>(0.3), Tensor::scalar<bool>(false)},
              data_only);
  worst.check({.op = "Dropout", .num_outputs = 2}, {x, Tensor::scalar<double>(0.0), Tensor::scalar<bool>(true)},
              data_only);
  worst.check({.op = "Dropout"}, {x});  // no training_mode: inference
  worst.check({.op = "Dropout", .attrs = {{"ratio", Attribute::of_float(0.4f)}}, .num_outputs = 2, .opset = 11}, {x});
}

// ---- graphs ----

// loss = sum(y0^2) + sum(y2^3); y1 unused, so its part of dX comes from zeros of y1's shape, here
// (batch, 3) with a symbolic batch: the zeros' dims are read at run time.
TEST(TensorGradients, SplitWithAnUnusedOutputGetsZerosForIt) {
  const auto make = [] {
    GraphBuilder b;
    Value* x = b.input("x", Shape({Dim::symbolic("batch"), 6}));
    std::vector<Value*> y = b.ops("Split", {x, b.constant(i64({1, 3, 2}))}, 3, {{"axis", int_attr(1)}});
    Value* cube = b.op("Mul", {b.op("Mul", {y[2], y[2]}), y[2]});
    Value* loss = b.op("Add", {b.sum_of_squares(y[0]), b.op("ReduceSum", {cube}, {{"keepdims", int_attr(0)}})});
    return b.finish(loss);
  };
  WorstErrors worst;
  worst.record("Split", expect_graph_gradients_match(make, {random_f64({2, 6}, 34)}, {0}));
  // The unused part's gradient is exactly zero.
  auto g = make();
  build_gradients(*g, {.loss = g->outputs()[0]->name, .wrt = {"x"}});
  const Tensor x = random_f64({3, 6}, 35);
  const Tensor dx = Session(g).run({x})[1];
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 1; c < 4; ++c) EXPECT_EQ(dx.data<double>()[r * 6 + c], 0.0) << r << ", " << c;
}

// Every rule of the family on symbolic dims, where sizes, shapes and pair dims are computed at
// run time: x (batch, 4) through Transpose, Unsqueeze, Tile, Slice, Concat along the symbolic axis,
// Gather, Split, Squeeze, Expand to a Shape, Trilu, Flatten and Reshape.
std::shared_ptr<Graph> symbolic_chain() {
  GraphBuilder b;
  Value* x = b.input("x", Shape({Dim::symbolic("batch"), 4}));
  Value* a = b.op("Transpose", {x}, {{"perm", ints_attr({1, 0})}});                         // (4, batch)
  Value* c = b.op("Tile", {b.op("Unsqueeze", {a, b.constant(i64({0}))}), b.constant(i64({2, 1, 1}))});  // (2, 4, batch)
  Value* d = b.op("Slice", {c, b.constant(i64({1})), b.constant(i64({INT64_MAX})),
                            b.constant(i64({1}))});                                        // (2, 3, batch)
  Value* e = b.op("Concat", {d, b.op("Mul", {d, d})}, {{"axis", int_attr(-1)}});            // (2, 3, 2 batch)
  Value* f = b.op("Gather", {e, b.constant(i64({2, 0, -1}))}, {{"axis", int_attr(1)}});     // (2, 3, 2 batch)
  std::vector<Value*> s = b.ops("Split", {f}, 2, {{"axis", int_attr(-1)}, {"num_outputs", int_attr(2)}});
  Value* m = b.op("Mul", {s[0], s[1]});                                                      // (2, 3, batch)
  Value* p = b.op("Squeeze", {b.op("ReduceSum", {m, b.constant(i64({0}))}), b.constant(i64({0}))});  // (3, batch)
  Value* q = b.op("Expand", {p, b.op("Shape", {m})});                                        // (2, 3, batch)
  Value* t = b.op("Trilu", {q});
  Value* flat = b.op("Reshape", {b.op("Flatten", {t}), b.constant(i64({-1}))});
  return b.finish(b.sum_of_squares(flat));
}

TEST(TensorGradients, SymbolicDimsChainMatchesFiniteDifferences) {
  WorstErrors worst;
  worst.record("symbolic chain", expect_graph_gradients_match(symbolic_chain, {random_f64({3, 4}, 36)}, {0}));
  auto g = symbolic_chain();
  build_gradients(*g, {.loss = g->outputs()[0]->name, .wrt = {"x"}});
  EXPECT_EQ(g->find_value("x_grad")->shape, Shape({Dim::symbolic("batch"), 4}));
  // One graph, several batch sizes.
  Session session(g);
  for (int64_t batch : {1, 5})
    EXPECT_EQ(session.run({random_f64({batch, 4}, 37)})[1].dims(), (std::vector<int64_t>{batch, 4}));
}

// y, mask = Dropout(x, 0.5, training); loss = sum(y): d loss / d x = 2 * mask, and y = 2 x * mask,
// with the mask of the same run.
TEST(TensorGradients, DropoutBackwardUsesTheForwardsMask) {
  GraphBuilder b;
  Value* x = b.input("x", Shape({256}));
  Value* ratio = b.constant(Tensor::scalar<double>(0.5));
  std::vector<Value*> y = b.ops("Dropout", {x, ratio, b.constant(Tensor::scalar<bool>(true))}, 2);
  auto g = b.finish(b.op("ReduceSum", {y[0]}, {{"keepdims", int_attr(0)}}));
  g->add_output(y[0]);
  g->add_output(y[1]);
  build_gradients(*g, {.loss = g->outputs()[0]->name, .wrt = {"x"}});
  Session session(g);
  const Tensor xs = random_f64({256}, 38, 0.5, 1.5);
  for (int run = 0; run < 2; ++run) {  // a fresh mask each run, always the forward's
    const std::vector<Tensor> out = session.run({xs});  // loss, y, mask, x_grad
    int64_t kept = 0;
    for (int64_t i = 0; i < 256; ++i) {
      const bool keep = out[2].data<bool>()[i];
      kept += keep;
      EXPECT_EQ(out[1].data<double>()[i], keep ? 2 * xs.data<double>()[i] : 0.0) << i;
      EXPECT_EQ(out[3].data<double>()[i], keep ? 2.0 : 0.0) << i;
    }
    EXPECT_GT(kept, 64);
    EXPECT_LT(kept, 192);
  }
}

TEST(TensorGradients, TrainingDropoutWithoutMaskOutputNamesTheNode) {
  GraphBuilder b;
  Value* x = b.input("x", Shape({4}));
  Value* mode = b.input("training", Shape::of({}), DType::kBool);
  Value* y = b.op("Dropout", {x, b.constant(Tensor::scalar<double>(0.5)), mode});
  auto g = b.finish(b.op("ReduceSum", {y}, {{"keepdims", int_attr(0)}}));
  try {
    build_gradients(*g, {.loss = g->outputs()[0]->name, .wrt = {"x"}});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find(y->producer->name()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mask"), std::string::npos) << e.what();
  }
}

// A GPT-style attention block, batch and sequence symbolic:
//   emb = Gather(wte, tokens)                                  (B, T, C)
//   h = LayerNormalization(emb, scale, bias)                   (B, T, C)
//   q, k, v = h @ wq, h @ wk, h @ wv -> heads                  (B, H, T, D), k as (B, H, D, T)
//   att = Softmax(q @ k / sqrt(D)) @ v -> (B, T, H, D) -> (B, T, C)
//   out = emb + att @ wo;  loss = ReduceSum(out * probe)
std::shared_ptr<Graph> attention_block() {
  constexpr int64_t kC = 8, kH = 2, kD = 4;
  GraphBuilder b;
  const Dim batch = Dim::symbolic("B"), seq = Dim::symbolic("T");
  Value* tokens = b.input("tokens", Shape({batch, seq}), DType::kI64);
  Value* wte = b.input("wte", Shape({7, kC}));
  Value* scale = b.input("ln_scale", Shape({kC}));
  Value* bias = b.input("ln_bias", Shape({kC}));
  Value* wq = b.input("wq", Shape({kC, kC}));
  Value* wk = b.input("wk", Shape({kC, kC}));
  Value* wv = b.input("wv", Shape({kC, kC}));
  Value* wo = b.input("wo", Shape({kC, kC}));
  Value* emb = b.op("Gather", {wte, tokens});
  Value* h = b.op("LayerNormalization", {emb, scale, bias}, {{"axis", int_attr(-1)}});
  Value* heads_dims = b.constant(i64({0, 0, kH, kD}));
  const auto heads = [&](Value* w, std::vector<int64_t> perm) {
    return b.op("Transpose", {b.op("Reshape", {b.op("MatMul", {h, w}), heads_dims})}, {{"perm", ints_attr(perm)}});
  };
  Value* q = heads(wq, {0, 2, 1, 3});
  Value* k = heads(wk, {0, 2, 3, 1});
  Value* v = heads(wv, {0, 2, 1, 3});
  Value* logits = b.op("Mul", {b.op("MatMul", {q, k}), b.constant(Tensor::scalar<double>(0.5))});  // 1 / sqrt(D)
  Value* att = b.op("MatMul", {b.op("Softmax", {logits}, {{"axis", int_attr(-1)}}), v});
  Value* merged = b.op("Reshape", {b.op("Transpose", {att}, {{"perm", ints_attr({0, 2, 1, 3})}}),
                                   b.constant(i64({0, 0, kC}))});
  Value* out = b.op("Add", {emb, b.op("MatMul", {merged, wo})});
  Value* probe = b.constant(random_f64({kC}, 40));
  return b.finish(b.op("ReduceSum", {b.op("Mul", {out, probe})}, {{"keepdims", int_attr(0)}}));
}

TEST(TensorGradients, GptStyleBlockMatchesFiniteDifferences) {
  std::vector<Tensor> inputs{make_tensor<int64_t>({2, 3}, {1, 6, 1, -2, 0, 3}), random_f64({7, 8}, 41),
                             random_f64({8}, 42, 0.5, 1.5), random_f64({8}, 43)};
  for (uint32_t seed : {44, 45, 46, 47}) inputs.push_back(random_f64({8, 8}, seed));
  WorstErrors worst;
  worst.record("GPT block", expect_graph_gradients_match(attention_block, inputs, {1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace trainrt
