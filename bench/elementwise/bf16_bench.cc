// Per-call time of the ops that follow the products in a bf16 transformer step, f32 next to bf16:
// Softmax, SoftmaxGrad, Gelu, GeluGrad, Relu, ReluGrad, Add, Mul and Cast on one (8, 4, 128, 128)
// tensor (attention scores of 8 sequences, 4 heads, 128 tokens). A bf16 kernel moves half the
// bytes of its f32 twin, so it should not be slower.
//
// Each kernel is made once from the CPU kernel table (as a session makes it) and run on the
// global thread pool; a figure is the median (and the fastest) of --reps timed calls after two
// untimed ones. On a shared machine compare medians, never single calls. One JSON object a line:
//
//   ninja -C build/dev bf16_bench && build/dev/bf16_bench --reps 101 [--op Gelu]
//   {"op": "Gelu", "dtype": "bf16", "x": [8, 4, 128, 128], "median_us": 120.0, "min_us": 110.0}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace {

using namespace trainrt;

// Uniform values in [-4, 4) stored as `dtype` (f32 or bf16).
Tensor random_tensor(DType dtype, const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor f = Tensor::empty(DType::kF32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = u(rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::empty(DType::kBF16, dims);
  convert_from_f32(f.data<float>(), t.data<BFloat16>(), f.numel());
  return t;
}

// The node's kernel over inputs of the given dtypes, made once; `to` is Cast's target type.
KernelFn make_kernel(Graph& g, const std::string& op, const std::string& domain, const std::vector<DType>& inputs,
                     DType out, DType to) {
  const std::string name = op + std::to_string(g.num_nodes());  // unique in g
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i)
    values.push_back(g.add_input(name + "_in" + std::to_string(i), inputs[i], Shape::unknown_rank()));
  Node* node = g.add_node(op, values, {name + "_out"}, domain, name);
  if (op == "Cast") node->set_attr("to", Attribute::of_int(dtype_to_onnx(to)));
  node->output(0)->dtype = out;
  return cpu_kernel_table().create(*node);
}

struct Timing {
  double median_us, min_us;
};

Timing time_calls(const KernelFn& kernel, const std::vector<const Tensor*>& in, Tensor& out, int reps) {
  Tensor* outs[] = {&out};
  KernelContext ctx;
  ctx.inputs = in;
  ctx.outputs = outs;
  std::vector<double> us;
  for (int r = 0; r < reps + 2; ++r) {
    const auto start = std::chrono::steady_clock::now();
    kernel(ctx);
    const auto end = std::chrono::steady_clock::now();
    if (r >= 2) us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 51;
  std::string only_op;  // --op: one op only
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--op") == 0) only_op = argv[i + 1];
    else return std::fprintf(stderr, "usage: %s [--reps N] [--op OP]\n", argv[0]), 2;
  }
  const std::vector<int64_t> dims{8, 4, 128, 128};
  Graph g;
  g.set_opset("", 20);
  g.set_opset(std::string(kTrainrtDomain), 1);
  const std::string trainrt(kTrainrtDomain);
  for (DType d : {DType::kF32, DType::kBF16}) {
    const Tensor a = random_tensor(d, dims, 1), b = random_tensor(d, dims, 2);
    const DType other = d == DType::kF32 ? DType::kBF16 : DType::kF32;
    Tensor y = Tensor::empty(d, dims), cast_y = Tensor::empty(other, dims);
    struct Run {
      const char* op;
      std::string domain;
      int inputs;
      Tensor* out;
    };
    const Run runs[] = {{"Softmax", "", 1, &y},      {"SoftmaxGrad", trainrt, 2, &y}, {"Gelu", "", 1, &y},
                        {"GeluGrad", trainrt, 2, &y}, {"Relu", "", 1, &y},             {"ReluGrad", trainrt, 2, &y},
                        {"Add", "", 2, &y},           {"Mul", "", 2, &y},              {"Cast", "", 1, &cast_y}};
    for (const Run& r : runs) {
      if (!only_op.empty() && only_op != r.op) continue;
      const std::vector<DType> types(static_cast<size_t>(r.inputs), d);
      std::vector<const Tensor*> in{&a};
      if (r.inputs == 2) in.push_back(&b);
      const KernelFn k = make_kernel(g, r.op, r.domain, types, r.out->dtype(), other);
      const Timing t = time_calls(k, in, *r.out, reps);
      std::printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"x\": [8, 4, 128, 128], \"median_us\": %.1f, \"min_us\": %.1f}\n",
                  r.op, std::string(dtype_name(d)).c_str(), t.median_us, t.min_us);
    }
  }
  return 0;
}
