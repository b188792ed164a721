// Per-call time of the f32 pooling kernels on ResNet-like shapes: MaxPool, MaxPoolWithArgmax (the
// training forward), AveragePool and their gradients, 3x3 stride 2 pad 1 (ResNet's stem pool) next to 2x2 stride 2, on X (64, 32, 32, 32).
//
// Each kernel is made once from the CPU kernel table (as a session makes it) and run on the
// global thread pool; a figure is the median (and the fastest) of --reps timed calls after two
// untimed ones. On a shared machine compare medians or minima, never single calls. Prints one
// JSON object per measurement:
//
//   ninja -C build/dev pool_bench && build/dev/pool_bench --reps 41 [--op MaxPool] [--kernel 3]
//   {"op": "MaxPool", "kernel": 3, "stride": 2, "pad": 1, "x": [64, 32, 32, 32], "median_ms": 0.87, "min_ms": 0.80}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace {

using namespace trainrt;

struct Pool {
  int64_t kernel, stride, pad;
};

// Uniform values in [-1, 1).
Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kF32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// The node's kernel over inputs of the given dtypes, made once.
KernelFn make_kernel(Graph& g, const std::string& op, const std::string& domain, const std::vector<DType>& inputs,
                     const Pool& p) {
  const std::string name = op + std::to_string(g.num_nodes());  // unique in g
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i)
    values.push_back(g.add_input(name + "_in" + std::to_string(i), inputs[i], Shape::unknown_rank()));
  std::vector<std::string> outputs = {name + "_out"};
  if (op == "MaxPoolWithArgmax") outputs.push_back(name + "_argmax");
  Node* node = g.add_node(op, values, outputs, domain, name);
  node->set_attr("kernel_shape", Attribute::of_ints({p.kernel, p.kernel}));
  node->set_attr("strides", Attribute::of_ints({p.stride, p.stride}));
  node->set_attr("pads", Attribute::of_ints({p.pad, p.pad, p.pad, p.pad}));
  node->output(0)->dtype = DType::kF32;
  return cpu_kernel_table().create(*node);
}

struct Timing {
  double median_ms, min_ms;
};

Timing time_calls(const KernelFn& kernel, const std::vector<const Tensor*>& in, const std::vector<Tensor*>& outs,
                  int reps) {
  KernelContext ctx;
  ctx.inputs = in;
  ctx.outputs = outs;
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    const auto start = std::chrono::steady_clock::now();
    kernel(ctx);
    const auto end = std::chrono::steady_clock::now();
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  std::string only_op;   // --op: one op only
  int64_t only_kernel = 0;  // --kernel: one pool only (3: 3x3 s2 p1, 2: 2x2 s2)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--op") == 0) only_op = argv[i + 1];
    else if (std::strcmp(argv[i], "--kernel") == 0) only_kernel = std::atoi(argv[i + 1]);
    else return std::fprintf(stderr, "usage: %s [--reps N] [--op OP] [--kernel 2|3]\n", argv[0]), 2;
  }
  const std::vector<int64_t> x_dims{64, 32, 32, 32};
  const Tensor x = random_tensor(x_dims, 1);
  const Tensor x_shape = Tensor::from_i64(x_dims);
  Graph g;
  g.set_opset("", 18);
  g.set_opset(std::string(kTrainrtDomain), 1);
  const std::string domain(kTrainrtDomain);
  for (const Pool& p : {Pool{3, 2, 1}, Pool{2, 2, 0}}) {
    if (only_kernel != 0 && only_kernel != p.kernel) continue;
    const int64_t o = (32 + 2 * p.pad - p.kernel) / p.stride + 1;
    Tensor dx = Tensor::empty(DType::kF32, x_dims), y = Tensor::empty(DType::kF32, {64, 32, o, o});
    Tensor argmax = Tensor::empty(DType::kU8, {64, 32, o, o});
    const Tensor dy = random_tensor({64, 32, o, o}, 2);
    struct Run {
      const char* op;
      std::string domain;
      std::vector<DType> types;
      std::vector<const Tensor*> in;
      std::vector<Tensor*> out;
    };
    const Run runs[] = {{"MaxPool", "", {DType::kF32}, {&x}, {&y}},
                        {"MaxPoolWithArgmax", domain, {DType::kF32}, {&x}, {&y, &argmax}},
                        {"AveragePool", "", {DType::kF32}, {&x}, {&y}},
                        {"MaxPoolGrad", domain, {DType::kF32, DType::kF32}, {&dy, &x}, {&dx}},
                        {"AveragePoolGrad", domain, {DType::kF32, DType::kI64}, {&dy, &x_shape}, {&dx}}};
    for (const Run& r : runs) {
      if (!only_op.empty() && only_op != r.op) continue;
      const Timing t = time_calls(make_kernel(g, r.op, r.domain, r.types, p), r.in, r.out, reps);
      std::printf("{\"op\": \"%s\", \"kernel\": %lld, \"stride\": %lld, \"pad\": %lld, "
                  "\"x\": [64, 32, 32, 32], \"median_ms\": %.3f, \"min_ms\": %.3f}\n",
                  r.op, static_cast<long long>(p.kernel), static_cast<long long>(p.stride),
                  static_cast<long long>(p.pad), t.median_ms, t.min_ms);
    }
  }
  return 0;
}
