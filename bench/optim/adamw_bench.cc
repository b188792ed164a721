// AdamW step throughput against the machine's copy bandwidth, on GPT-2 small's 124M f32 parameters.
//
// The optimizer step is bandwidth-bound: per element it reads p, g, m, v and writes p, m, v
// (28 bytes), so its speed is judged in GB/s next to what a memcpy reaches on the same machine,
// in one thread and spread over the thread pool, and next to "stream_4r3w": the same reads and
// writes with one add per array instead of Adam's math, the ceiling for this access pattern.
// Also times grad_norm (reads g: 4 bytes/element).
// Every figure is the best of --reps timed runs after one untimed run (page faults, lazy state),
// the runs of all measurements interleaved.
// Prints one JSON object per measurement:
//
//   ninja -C build/optim adamw_bench && build/optim/adamw_bench --reps 10
//   {"what": "adamw_step", "tensors": 148, "elements": 124439808, "ms": 58.81, "gb_per_s": 59.25}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trainrt/core/simd.h"
#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/optim/adam.h"
#include "trainrt/optim/grad_ops.h"
#include "trainrt/optim/multi_tensor.h"

namespace {

using trainrt::DType;
using trainrt::Tensor;

// GPT-2 small (124M): token and position embeddings, 12 blocks, final layer norm; weights tied.
std::vector<std::vector<int64_t>> gpt2_small_shapes() {
  constexpr int64_t kVocab = 50257, kContext = 1024, kC = 768, kLayers = 12;
  std::vector<std::vector<int64_t>> shapes{{kVocab, kC}, {kContext, kC}};
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::vector<std::vector<int64_t>> block{{kC}, {kC},                      // ln_1
                                                  {kC, 3 * kC}, {3 * kC},          // attn.c_attn
                                                  {kC, kC}, {kC},                  // attn.c_proj
                                                  {kC}, {kC},                      // ln_2
                                                  {kC, 4 * kC}, {4 * kC},          // mlp.c_fc
                                                  {4 * kC, kC}, {kC}};             // mlp.c_proj
    shapes.insert(shapes.end(), block.begin(), block.end());
  }
  shapes.push_back({kC});  // ln_f
  shapes.push_back({kC});
  return shapes;
}

// Adam's memory traffic without its math: reads p, g, m, v, writes p, m, v. `zero` is 0 at run
// time, so the values stay put but the compiler cannot drop the loads or stores.
TRAINRT_SIMD_CLONES void stream_4r3w(float* __restrict p, const float* __restrict g, float* __restrict m,
                                     float* __restrict v, int64_t n, float zero) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * zero;
    p[i] += gi;
    m[i] += gi;
    v[i] += gi;
  }
}

// One timed operation and the bytes it moves.
struct Measurement {
  const char* what;
  int64_t tensors;
  double bytes;
  std::function<void()> run;
  double best_ms = 1e300;
};

// Runs every measurement once untimed, then `reps` rounds of all of them in turn, keeping each
// one's best time: interleaving gives the copy and the step the same share of a busy machine.
void time_all(std::vector<Measurement>& ms, int reps) {
  for (Measurement& m : ms) m.run();
  for (int r = 0; r < reps; ++r)
    for (Measurement& m : ms) {
      const auto start = std::chrono::steady_clock::now();
      m.run();
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      m.best_ms = std::min(m.best_ms, t);
    }
}

void report(const char* what, int64_t tensors, int64_t elements, double bytes, double ms) {
  std::printf("{\"what\": \"%s\", \"tensors\": %lld, \"elements\": %lld, \"ms\": %.2f, \"gb_per_s\": %.2f}\n", what,
              static_cast<long long>(tensors), static_cast<long long>(elements), ms, bytes / ms / 1e6);
}

// Fills a tensor with small values without touching the allocator's fast paths twice.
void fill(Tensor& t, float base) {
  float* p = t.data<float>();
  trainrt::ThreadPool::global().parallel_for(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = base + 1e-3f * static_cast<float>(i % 1000);
  });
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);

  const std::vector<std::vector<int64_t>> shapes = gpt2_small_shapes();
  std::vector<std::string> names;
  std::vector<Tensor> params, grads;
  std::vector<trainrt::OptimizerState> states(shapes.size());
  int64_t elements = 0;
  std::vector<int64_t> numels;
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back("param" + std::to_string(i));
    params.push_back(Tensor::empty(DType::kF32, shapes[i]));
    grads.push_back(Tensor::empty(DType::kF32, shapes[i]));
    fill(params.back(), 0.5f);
    fill(grads.back(), -0.25f);
    elements += params.back().numel();
    numels.push_back(params.back().numel());
  }
  std::vector<trainrt::ParamSlot> slots;
  for (size_t i = 0; i < shapes.size(); ++i) slots.push_back({names[i], params[i], grads[i], states[i]});
  const auto tensors = static_cast<int64_t>(slots.size());

  // memcpy of a buffer as large as one parameter array: 4 bytes read + 4 written per element.
  const auto bytes = static_cast<size_t>(elements) * sizeof(float);
  Tensor src = Tensor::empty(DType::kF32, {elements}), dst = Tensor::empty(DType::kF32, {elements});
  fill(src, 1.f);
  fill(dst, 2.f);
  trainrt::AdamOptions options = trainrt::AdamOptions::adamw();
  options.lr = 1e-6;  // keeps the parameters in range over the repetitions
  std::vector<Measurement> ms;
  ms.push_back({"memcpy_1_thread", 1, 2.0 * bytes, [&] { std::memcpy(dst.raw(), src.raw(), bytes); }});
  ms.push_back({"memcpy_pool", 1, 2.0 * bytes, [&] {
                  trainrt::ThreadPool::global().parallel_for(
                      static_cast<int64_t>(bytes), 1 << 20, [&](int64_t b, int64_t e) {
                        std::memcpy(static_cast<char*>(dst.raw()) + b, static_cast<const char*>(src.raw()) + b,
                                    static_cast<size_t>(e - b));
                      });
                }});
  ms.push_back({"adamw_step", tensors, 7.0 * bytes, [&] { trainrt::adam_step(slots, options); }});
  const float zero = static_cast<float>(argc) * 0.f;
  // Runs on the state buffers that adam_step's untimed first run creates.
  ms.push_back({"stream_4r3w", tensors, 7.0 * bytes, [&] {
                  trainrt::MultiTensorPlan(numels).run([&](int64_t, const trainrt::TensorSegment& s) {
                    const auto t = static_cast<size_t>(s.tensor);
                    const int64_t b = s.begin;
                    stream_4r3w(params[t].data<float>() + b, grads[t].data<float>() + b,
                                states[t].exp_avg.data<float>() + b, states[t].exp_avg_sq.data<float>() + b,
                                s.end - b, zero);
                  });
                }});
  ms.push_back({"grad_norm", tensors, 1.0 * bytes, [&] { trainrt::grad_norm(slots); }});
  time_all(ms, reps);
  for (const Measurement& m : ms) report(m.what, m.tensors, elements, m.bytes, m.best_ms);
  std::printf("{\"threads\": %d, \"adamw_vs_pool_copy\": %.2f, \"adamw_vs_stream_4r3w\": %.2f}\n",
              trainrt::ThreadPool::global().num_threads(), ms[1].best_ms / ms[2].best_ms * 3.5,
              ms[3].best_ms / ms[2].best_ms);
  return 0;
}
