#include "trainrt/testing/gradient_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/runtime/session.h"

namespace trainrt::testing {
namespace {

// graph(inputs) -> loss = sum_o ReduceSum(Mul(out_o, W_o)); the node's float outputs only.
std::shared_ptr<Graph> loss_graph(const NodeSpec& spec, const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& weights) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", spec.opset);
  if (!spec.domain.empty()) g->set_opset(spec.domain, 1);
  std::vector<Value*> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(inputs[i].defined()
                     ? g->add_input("in" + std::to_string(i), inputs[i].dtype(), Shape::of(inputs[i].dims()))
                     : nullptr);
  std::vector<std::string> names;
  for (int o = 0; o < spec.num_outputs; ++o) names.push_back("out" + std::to_string(o));
  Node* node = g->add_node(spec.op, in, names, spec.domain, "checked");
  for (const auto& [k, a] : spec.attrs) node->set_attr(k, a);
  Value* loss = nullptr;
  for (int o = 0; o < spec.num_outputs; ++o) {
    if (!weights[static_cast<size_t>(o)].defined()) continue;
    std::string s = std::to_string(o);
    Value* w = g->add_initializer("w" + s, weights[static_cast<size_t>(o)]);
    Value* prod = g->add_node("Mul", {node->output(o), w}, {"prod" + s})->output(0);
    Node* red = g->add_node("ReduceSum", {prod}, {"red" + s});
    red->set_attr("keepdims", Attribute::of_int(0));
    loss = loss ? g->add_node("Add", {loss, red->output(0)}, {"acc" + s})->output(0) : red->output(0);
  }
  g->add_output(loss);
  return g;
}

double loss_value(Session& s, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> fed;
  for (const Tensor& t : inputs)
    if (t.defined()) fed.push_back(t);
  return s.run(fed)[0].to_double(0);
}

// The dtype a check runs in: f64 when any input is f64 (then f32 outputs, such as a stash type,
// stay out of the loss), else f32 for ops with f32 kernels only.
DType checked_dtype(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.dtype() == DType::kF64) return DType::kF64;
  return DType::kF32;
}

Tensor as_dtype(const Tensor& f64, DType t) {
  if (t == DType::kF64) return f64;
  Tensor out = Tensor::empty(DType::kF32, f64.dims());
  for (int64_t i = 0; i < f64.numel(); ++i) out.data<float>()[i] = static_cast<float>(f64.data<double>()[i]);
  return out;
}

void set_element(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF64) t.data<double>()[i] = v;
  else t.data<float>()[i] = static_cast<float>(v);
}

}  // namespace

Tensor random_f64(std::vector<int64_t> dims, uint32_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(DType::kF64, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = dist(rng);
  return t;
}

double expect_gradients_match(const NodeSpec& spec, const std::vector<Tensor>& inputs,
                              const GradCheckOptions& options) {
  // Output shapes come from one forward run; weights are random and fixed.
  std::vector<Tensor> outputs = run_node(spec, inputs, cpu_kernel_table());
  const DType checked = checked_dtype(inputs);
  std::vector<Tensor> weights;
  for (size_t o = 0; o < outputs.size(); ++o)
    weights.push_back(outputs[o].dtype() == checked
                          ? as_dtype(random_f64(outputs[o].dims(), options.seed + static_cast<uint32_t>(o)),
                                     outputs[o].dtype())
                          : Tensor());

  std::vector<int> wrt = options.wrt;
  if (wrt.empty())
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && inputs[i].dtype() == checked) wrt.push_back(static_cast<int>(i));

  auto forward = loss_graph(spec, inputs, weights);
  auto joint = loss_graph(spec, inputs, weights);
  GradientRequest request;
  request.loss = joint->outputs()[0]->name;
  for (int i : wrt) request.wrt.push_back("in" + std::to_string(i));
  GradientResult result = build_gradients(*joint, request);

  Session forward_session(forward);
  Session joint_session(joint);
  std::vector<Tensor> fed;
  for (const Tensor& t : inputs)
    if (t.defined()) fed.push_back(t);
  std::vector<Tensor> joint_out = joint_session.run(fed);

  double worst = 0;
  std::vector<Tensor> probe;
  for (const Tensor& t : inputs) probe.push_back(t.defined() ? t.clone() : Tensor());
  for (size_t k = 0; k < wrt.size(); ++k) {
    int i = wrt[k];
    const Tensor& analytic = joint_out[1 + k];
    EXPECT_EQ(analytic.dims(), inputs[static_cast<size_t>(i)].dims()) << spec.op << " gradient of input " << i;
    if (analytic.dims() != inputs[static_cast<size_t>(i)].dims()) continue;
    Tensor& x = probe[static_cast<size_t>(i)];
    int failures = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      double saved = x.to_double(e);
      set_element(x, e, saved + options.eps);
      double up = loss_value(forward_session, probe);
      set_element(x, e, saved - options.eps);
      double down = loss_value(forward_session, probe);
      set_element(x, e, saved);
      double numeric = (up - down) / (2 * options.eps);
      double got = analytic.to_double(e);
      double err = std::abs(got - numeric);
      worst = std::max(worst, err / std::max(1e-12, std::abs(numeric)));
      if (err > options.atol + options.rtol * std::abs(numeric) && failures++ < 3)
        ADD_FAILURE() << spec.op << ": d loss / d input " << i << "[" << e << "] = " << got
                      << " (autodiff) vs " << numeric << " (finite difference)";
    }
  }
  return worst;
}

double expect_graph_gradients_match(const std::function<std::shared_ptr<Graph>()>& make, std::vector<Tensor> inputs,
                                    const std::vector<int>& wrt, double rtol, double atol) {
  auto forward = make();
  auto joint = make();
  GradientRequest request{.loss = joint->outputs()[0]->name};
  for (int i : wrt) request.wrt.push_back(joint->inputs()[static_cast<size_t>(i)]->name);
  build_gradients(*joint, request);
  Session forward_session(forward);
  Session joint_session(joint);
  const std::vector<Tensor> analytic = joint_session.run(inputs);
  // The gradients are the joint graph's last outputs, in the order of `wrt`.
  const size_t first_grad = joint->outputs().size() - wrt.size();
  const double eps = 1e-6;
  double worst = 0;
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor& x = inputs[static_cast<size_t>(wrt[k])];
    const Tensor& grad = analytic[first_grad + k];
    EXPECT_EQ(grad.dims(), x.dims()) << "gradient of " << request.wrt[k];
    if (grad.dims() != x.dims()) continue;
    int failures = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      const double saved = x.data<double>()[e];
      x.data<double>()[e] = saved + eps;
      const double up = forward_session.run(inputs)[0].to_double(0);
      x.data<double>()[e] = saved - eps;
      const double down = forward_session.run(inputs)[0].to_double(0);
      x.data<double>()[e] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double err = std::abs(grad.to_double(e) - numeric);
      worst = std::max(worst, err / std::max(1e-12, std::abs(numeric)));
      if (err > atol + rtol * std::abs(numeric) && failures++ < 3)
        ADD_FAILURE() << "d loss / d " << request.wrt[k] << "[" << e << "] = " << grad.to_double(e)
                      << " (autodiff) vs " << numeric << " (finite difference)";
    }
  }
  return worst;
}

WorstErrors::~WorstErrors() {
  std::cout << "  worst relative error:";
  for (const auto& [what, e] : worst_) std::cout << " " << what << " " << e;
  std::cout << "\n";
}

void WorstErrors::check(const NodeSpec& spec, const std::vector<Tensor>& inputs, const GradCheckOptions& options) {
  std::string shapes;
  for (const Tensor& t : inputs) {
    shapes += ' ';
    shapes += t.defined() ? describe(t) : "none";
  }
  SCOPED_TRACE(spec.op + " at opset " + std::to_string(spec.opset) + " on" + shapes);
  record(spec.op, expect_gradients_match(spec, inputs, options));
}

void WorstErrors::record(const std::string& what, double error) { worst_[what] = std::max(worst_[what], error); }

}  // namespace trainrt::testing
