// Gradient rules of the elementwise family against f64 finite differences: every differentiable
// op over attribute variants and broadcasting shapes ((2,3,4) op (4), (2,1,4) op (3,1), scalars),
// plus the cases differences cannot show: ties, boundaries, constant exponents, casts, symbolic
// dims and the ops that carry no gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/testing.h"
#include "trainrt/runtime/session.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::GradCheckOptions;
using testing::make_tensor;
using testing::random_f64;
using testing::WorstErrors;

Attribute float_attr(float v) { return Attribute::of_float(v); }

// The broadcasting shape pairs every binary op is checked on.
const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> kBroadcastPairs = {
    {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{4}, {2, 3, 4}}, {{}, {2, 3}}, {{2, 3}, {}}, {{2, 3}, {2, 3}}};

TEST(ElementwiseGradients, BinaryArithmeticBroadcasts) {
  WorstErrors worst;
  uint32_t seed = 1;
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (const auto& [a, b] : kBroadcastPairs) {
      const bool div = std::string(op) == "Div";
      worst.check({.op = op}, {random_f64(a, seed++), div ? random_f64(b, seed++, 0.5, 1.5) : random_f64(b, seed++)});
    }
  // One value on both sides: the two contributions are summed.
  const Tensor x = random_f64({3, 2}, seed++, 0.5, 1.5);
  for (const char* op : {"Mul", "Div", "Sub"}) worst.check({.op = op}, {x, x.clone()});
  // Mod away from its jumps (a / b not near an integer): both signs of the divisor, both modes.
  const Tensor a = make_tensor<double>({4}, {2.3, -2.3, 5.6, -0.7});
  const Tensor b = make_tensor<double>({4}, {1.1, 1.1, -1.5, 0.4});
  worst.check({.op = "Mod", .attrs = {{"fmod", Attribute::of_int(1)}}}, {a, b});
  worst.check({.op = "Mod"}, {a, b});
}

TEST(ElementwiseGradients, PowOfBaseAndExponent) {
  WorstErrors worst;
  uint32_t seed = 20;
  for (const auto& [a, b] : kBroadcastPairs)
    worst.check({.op = "Pow"}, {random_f64(a, seed++, 0.5, 1.5), random_f64(b, seed++, -1.5, 2.5)});
  // Negative bases with integral exponents, given as f64 (0 among them: no gradient) or as i64.
  const Tensor negative = random_f64({2, 3, 4}, seed++, -2.0, -0.5);
  const GradCheckOptions base_only{.wrt = {0}};
  worst.check({.op = "Pow"}, {negative, make_tensor<double>({4}, {0, 1, 2, 3})}, base_only);
  worst.check({.op = "Pow"}, {negative, make_tensor<int64_t>({4}, {2, 3, -1, 0})});
  worst.check({.op = "Pow"}, {negative, make_tensor<int64_t>({}, {3})});
  // An f32 exponent of an f64 base (Pow-12+ mixes types).
  worst.check({.op = "Pow"}, {random_f64({3, 2}, seed++, 0.5, 1.5), make_tensor<float>({2}, {0.5f, -1.5f})},
              base_only);
  // Zero bases: d/dE 0^E = 0 for E > 0 (torch's mask; Y log X would be 0 * -inf).
  const GradCheckOptions exponent_only{.wrt = {1}};
  worst.check({.op = "Pow"}, {make_tensor<double>({4}, {0, 0.5, 0, 1.5}), random_f64({4}, seed++, 0.5, 2.0)},
              exponent_only);
}

// loss = ReduceSum(Pow(x, e)) with e an initializer: the rule's constant-exponent forms.
TEST(ElementwiseGradients, PowWithAConstantExponentTakesTheCheapForm) {
  const Tensor x = random_f64({2, 3}, 30, 0.5, 1.5);
  for (double e : {0.0, 1.0, 2.0, 3.0, 0.5, -1.0, 2.5}) {
    SCOPED_TRACE("exponent " + std::to_string(e));
    for (DType et : {DType::kF64, DType::kI64}) {
      if (et == DType::kI64 && e != std::floor(e)) continue;
      auto g = std::make_shared<Graph>();
      g->set_opset("", 18);
      Value* in = g->add_input("x", DType::kF64, Shape({2, 3}));
      Value* ev = g->add_initializer(
          "e", et == DType::kF64 ? Tensor::scalar<double>(e) : Tensor::scalar<int64_t>(static_cast<int64_t>(e)));
      Value* y = g->add_node("Pow", {in, ev}, {"y"})->output(0);
      Node* loss = g->add_node("ReduceSum", {y}, {"loss"});
      loss->set_attr("keepdims", Attribute::of_int(0));
      g->add_output(loss->output(0));
      GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
      for (const Node* n : g->nodes()) EXPECT_NE(n->op_type(), "Where") << "the general form was used";
      EXPECT_TRUE(r.unreached.empty());  // x ** 0 still reads x: a zero gradient, as eager's, not None
      Tensor want = Tensor::empty(DType::kF64, {2, 3});
      for (int64_t i = 0; i < 6; ++i) want.data<double>()[i] = e * std::pow(x.data<double>()[i], e - 1);
      expect_close(Session(g).run({x})[1], want, 1e-12, 1e-12);
    }
  }
}

TEST(ElementwiseGradients, UnaryMath) {
  WorstErrors worst;
  uint32_t seed = 40;
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{}}) {
    for (const char* op : {"Neg", "Abs", "Exp", "Erf", "Identity", "Sin", "Cos"})
      worst.check({.op = op}, {random_f64(dims, seed++, -2, 2)});
    for (const char* op : {"Log", "Sqrt"}) worst.check({.op = op}, {random_f64(dims, seed++, 0.2, 2)});
    worst.check({.op = "Reciprocal"}, {random_f64(dims, seed++, 0.5, 2)});
    worst.check({.op = "Reciprocal"}, {random_f64(dims, seed++, -2, -0.5)});
    for (const char* op : {"Tan", "Asin", "Acos", "Atanh"}) worst.check({.op = op}, {random_f64(dims, seed++, -0.8, 0.8)});
    for (const char* op : {"Atan", "Sinh", "Cosh", "Asinh"}) worst.check({.op = op}, {random_f64(dims, seed++, -2, 2)});
    worst.check({.op = "Acosh"}, {random_f64(dims, seed++, 1.2, 3)});
  }
}

TEST(ElementwiseGradients, Activations) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 50, -4, 4);
  const Tensor scalar = random_f64({}, 51, -1, 1);
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Softplus", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Gelu"}) {
    worst.check({.op = op}, {x});
    worst.check({.op = op}, {scalar});
  }
  const Tensor wide = random_f64({4, 5}, 52, -6, 6);
  worst.check({.op = "Gelu", .attrs = {{"approximate", Attribute::of_string("tanh")}}}, {x});
  worst.check({.op = "Gelu", .attrs = {{"approximate", Attribute::of_string("tanh")}}}, {wide});
  worst.check({.op = "Gelu", .attrs = {{"approximate", Attribute::of_string("none")}}}, {wide});
  // Negative slopes and scales: the rules read X where Y's sign is not X's.
  for (float alpha : {0.3f, -0.5f, 0.f}) {
    worst.check({.op = "LeakyRelu", .attrs = {{"alpha", float_attr(alpha)}}}, {x});
    worst.check({.op = "Elu", .attrs = {{"alpha", float_attr(alpha)}}}, {x});
  }
  worst.check({.op = "Selu", .attrs = {{"alpha", float_attr(1.2f)}, {"gamma", float_attr(0.9f)}}}, {x});
  worst.check({.op = "Selu", .attrs = {{"alpha", float_attr(0.7f)}, {"gamma", float_attr(-1.5f)}}}, {x});
  worst.check({.op = "HardSigmoid", .attrs = {{"alpha", float_attr(0.5f)}, {"beta", float_attr(0.3f)}}}, {x});
}

TEST(ElementwiseGradients, VariadicSumMeanMaxMin) {
  WorstErrors worst;
  const std::vector<std::vector<std::vector<int64_t>>> shape_sets = {
      {{2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}, {}}, {{3}, {3}, {3}, {2, 3}}};
  uint32_t seed = 60;
  for (const char* op : {"Sum", "Mean", "Max", "Min"})
    for (const auto& shapes : shape_sets) {
      std::vector<Tensor> inputs;
      for (const auto& dims : shapes) inputs.push_back(random_f64(dims, seed++));
      worst.check({.op = op}, inputs);
    }
  // Two-way ties: each side takes dY / 2, which is also what central differences see.
  const Tensor a = random_f64({2, 3}, seed++);
  for (const char* op : {"Max", "Min"}) worst.check({.op = op}, {a, a.clone()});
}

// loss = ReduceSum(op(a, b, c)) for three equal inputs: dY / 3 to each (as torch.amax).
TEST(ElementwiseGradients, MaxAndMinShareTiesEvenly) {
  for (const char* op : {"Max", "Min"}) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    std::vector<Value*> in;
    for (const char* name : {"a", "b", "c"}) in.push_back(g->add_input(name, DType::kF64, Shape({3})));
    Node* loss = g->add_node("ReduceSum", {g->add_node(op, in, {"y"})->output(0)}, {"loss"});
    loss->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(loss->output(0));
    build_gradients(*g, {.loss = "loss", .wrt = {"a", "b", "c"}});
    // Element 0: a three-way tie; 1: b alone is selected; 2: a and c tie.
    const double big = std::string(op) == "Max" ? 5 : -5;
    auto out = Session(g).run({make_tensor<double>({3}, {1, 0, big}), make_tensor<double>({3}, {1, big, 0}),
                               make_tensor<double>({3}, {1, 0, big})});
    const double third = 1.0 / 3;
    expect_close(out[1], make_tensor<double>({3}, {third, 0, 0.5}), 1e-12, 0);
    expect_close(out[2], make_tensor<double>({3}, {third, 1, 0}), 1e-12, 0);
    expect_close(out[3], make_tensor<double>({3}, {third, 0, 0.5}), 1e-12, 0);
  }
}

TEST(ElementwiseGradients, WhereSendsTheGradientToTheSelectedBranch) {
  WorstErrors worst;
  Tensor c = Tensor::empty(DType::kBool, {2, 1, 4});
  for (int64_t i = 0; i < c.numel(); ++i) c.data<bool>()[i] = (i * 5) % 3 == 0;
  worst.check({.op = "Where"}, {c, random_f64({3, 1}, 70), random_f64({2, 3, 4}, 71)});
  worst.check({.op = "Where"}, {c, random_f64({}, 72), random_f64({4}, 73)});
  worst.check({.op = "Where"}, {make_tensor<bool>({}, {true}), random_f64({2, 3}, 74), random_f64({3}, 75)});
}

TEST(ElementwiseGradients, ClipAndItsBounds) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 80, -2, 2);
  const Tensor lo = Tensor::scalar<double>(-0.5), hi = make_tensor<double>({1}, {0.7});
  worst.check({.op = "Clip", .opset = 13}, {x, lo, hi});
  worst.check({.op = "Clip", .opset = 13}, {x, lo});
  worst.check({.op = "Clip", .opset = 13}, {x, Tensor(), hi});
  worst.check({.op = "Clip", .opset = 13}, {x});
  // min > max: Y = max everywhere, so only max gets a gradient.
  worst.check({.op = "Clip", .opset = 13}, {x, Tensor::scalar<double>(0.8), Tensor::scalar<double>(-0.3)});
  // Clip-6: attribute bounds.
  worst.check({.op = "Clip", .attrs = {{"min", float_attr(-0.25f)}, {"max", float_attr(1.5f)}}, .opset = 6}, {x});
  worst.check({.op = "Clip", .attrs = {{"max", float_attr(0.5f)}}, .opset = 6}, {x});
}

// At a bound the gradient passes to X (torch's clamp_backward), where central differences
// would see half of it.
TEST(ElementwiseGradients, ClipPassesTheGradientAtItsBounds) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 13);
  Value* x = g->add_input("x", DType::kF64, Shape({5}));
  Value* lo = g->add_input("lo", DType::kF64, Shape::of({}));
  Value* hi = g->add_input("hi", DType::kF64, Shape::of({}));
  Node* loss = g->add_node("ReduceSum", {g->add_node("Clip", {x, lo, hi}, {"y"})->output(0)}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  build_gradients(*g, {.loss = "loss", .wrt = {"x", "lo", "hi"}});
  auto out = Session(g).run({make_tensor<double>({5}, {-1, -0.5, 0, 0.7, 1}), Tensor::scalar<double>(-0.5),
                             Tensor::scalar<double>(0.7)});
  expect_close(out[1], make_tensor<double>({5}, {0, 1, 1, 1, 0}));
  expect_close(out[2], Tensor::scalar<double>(1));
  expect_close(out[3], Tensor::scalar<double>(1));
}

TEST(ElementwiseGradients, CastsSendTheGradientBackInTheInputsDtype) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3}, 90);
  worst.check({.op = "Cast", .attrs = {{"to", Attribute::of_int(11)}}}, {x});  // f64 -> f64
  worst.check({.op = "CastLike"}, {x, random_f64({1}, 91)});  // the target's values do not matter

  // x (f32) -> Cast to f64 -> * w -> ReduceSum: dx = w as f32. x (f64) -> Cast to i64 stops it.
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* xf = g->add_input("xf", DType::kF32, Shape({3}));
  Value* xd = g->add_input("xd", DType::kF64, Shape({3}));
  Node* up = g->add_node("Cast", {xf}, {"up"});
  up->set_attr("to", Attribute::of_int(11));
  Node* like = g->add_node("CastLike", {xf, xd}, {"like"});
  Node* to_int = g->add_node("Cast", {xd}, {"to_int"});
  to_int->set_attr("to", Attribute::of_int(7));
  Node* back = g->add_node("Cast", {to_int->output(0)}, {"back"});
  back->set_attr("to", Attribute::of_int(11));
  Value* w = g->add_initializer("w", make_tensor<double>({3}, {1.5, -2, 0.25}));
  Value* sum = g->add_node("Sum", {g->add_node("Mul", {up->output(0), w}, {"p"})->output(0), like->output(0),
                                   back->output(0)}, {"s"})->output(0);
  Node* loss = g->add_node("ReduceSum", {sum}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"xf", "xd"}});
  EXPECT_EQ(r.unreached, std::vector<std::string>{"xd"});
  auto out = Session(g).run({make_tensor<float>({3}, {1, 2, 3}), make_tensor<double>({3}, {0.5, 1.5, 2.5})});
  expect_close(out[1], make_tensor<float>({3}, {2.5f, -1.f, 1.25f}));  // w + 1 (through CastLike)
  expect_close(out[2], Tensor::zeros(DType::kF64, {3}));
}

// Floor, Ceil and Sign on the path contribute nothing (torch: zero gradients); a value reached
// only through them gets a zero gradient and is not unreached (eager gives zeros, not None).
TEST(ElementwiseGradients, PiecewiseConstantOpsCarryNoGradient) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF64, Shape({4}));
  Value* z = g->add_input("z", DType::kF64, Shape({4}));
  Value* two = g->add_initializer("two", Tensor::scalar<double>(2));
  std::vector<Value*> terms{g->add_node("Mul", {x, two}, {"x2"})->output(0)};
  for (const char* op : {"Floor", "Ceil", "Sign"}) {
    terms.push_back(g->add_node(op, {x}, {std::string(op) + "_x"})->output(0));
    terms.push_back(g->add_node(op, {z}, {std::string(op) + "_z"})->output(0));
  }
  // A comparison feeding Where: the mask carries nothing, the selected branch does.
  Value* mask = g->add_node("Less", {x, z}, {"mask"})->output(0);
  terms.push_back(g->add_node("Where", {mask, x, g->add_node("Floor", {z}, {"fz"})->output(0)}, {"w"})->output(0));
  Node* loss = g->add_node("ReduceSum", {g->add_node("Sum", terms, {"s"})->output(0)}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"x", "z"}});
  EXPECT_TRUE(r.unreached.empty());
  auto out = Session(g).run({make_tensor<double>({4}, {-1.5, 0.5, 2.5, 3}), make_tensor<double>({4}, {0, 0, 3, 1})});
  expect_close(out[1], make_tensor<double>({4}, {3, 2, 3, 2}));  // 2 + [x < z]
  expect_close(out[2], Tensor::zeros(DType::kF64, {4}));
}

// x (batch, 4), b (4), s (batch, 1): loss = sum(x * b + x / s). Gradients of broadcast inputs are
// summed over symbolic dims: dx = b + 1 / s, db = sum_rows(x), ds = -sum_cols(x) / s^2.
TEST(ElementwiseGradients, BroadcastGradientsOverSymbolicDims) {
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    const Dim n = Dim::symbolic("batch");
    Value* x = g->add_input("x", DType::kF64, Shape({n, 4}));
    Value* b = g->add_input("b", DType::kF64, Shape({4}));
    Value* s = g->add_input("s", DType::kF64, Shape({n, 1}));
    Value* xb = g->add_node("Mul", {x, b}, {"xb"})->output(0);
    Value* xs = g->add_node("Div", {x, s}, {"xs"})->output(0);
    Node* loss = g->add_node("ReduceSum", {g->add_node("Add", {xb, xs}, {"y"})->output(0)}, {"loss"});
    loss->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(loss->output(0));
    build_gradients(*g, {.loss = "loss", .wrt = {"x", "b", "s"}});
    const Tensor xv = random_f64({batch, 4}, 100), bv = random_f64({4}, 101);
    const Tensor sv = random_f64({batch, 1}, 102, 0.5, 1.5);
    auto out = Session(g).run({xv, bv, sv});
    Tensor dx = Tensor::empty(DType::kF64, {batch, 4}), db = Tensor::zeros(DType::kF64, {4});
    Tensor ds = Tensor::zeros(DType::kF64, {batch, 1});
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const double xij = xv.data<double>()[i * 4 + j], si = sv.data<double>()[i];
        dx.data<double>()[i * 4 + j] = bv.data<double>()[j] + 1 / si;
        db.data<double>()[j] += xij;
        ds.data<double>()[i] -= xij / (si * si);
      }
    expect_close(out[1], dx, 1e-12, 1e-12);
    expect_close(out[2], db, 1e-12, 1e-12);
    expect_close(out[3], ds, 1e-12, 1e-12);
  }
}

}  // namespace
}  // namespace trainrt
