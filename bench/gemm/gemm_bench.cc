// GEMM microbenchmark: times one candidate library on the shapes bench/gemm/run.py passes in.
//
// One process measures one backend, so libraries that export the same symbols (two oneDNN builds,
// three OpenBLAS builds) never meet in one address space; run.py keeps one process per candidate
// and interleaves them shape by shape.
// Backends:
//   cblas       any CBLAS loaded with dlopen (--lib PATH, --prefix for scipy-openblas's "scipy_"),
//               threads set through --threads-fn (openblas_set_num_threads, ...) when given.
//   dnnl        oneDNN matmul primitive, created once per shape and reused (compiled only with
//               -DGEMM_BENCH_DNNL against a oneDNN's headers); also bf16 x bf16 -> f32.
//   dnnl_sgemm  oneDNN's BLAS-like dnnl_sgemm (no primitive), same build.
//   trainrt     TrainRT's own gemm_f32_batched (kernels/cpu/gemm.h: oneDNN run one thread per
//               piece on TrainRT's ThreadPool), and gemm_bf16_f32 with --dtype bf16, compiled only
//               with -DGEMM_BENCH_TRAINRT.
// A shape is "TRANS,M,N,K,BATCH" with TRANS one of NN, NT, TN: C(MxN) = op(A) op(B), row-major,
// A stored KxM when transposed, B stored NxK when transposed. Shapes come from --shape arguments
// or, without any, from stdin one per line (run.py keeps one such worker per candidate). Prints one
// JSON object per shape with the median and best time over the repeats:
//
//   gemm_bench --backend cblas --lib /usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4
//       --threads-fn bli_thread_set_num_threads --threads 2 --shape NT,256,2048,784,1
//   {"shape": "NT,256,2048,784,1", "dtype": "f32", "ms": 1.78, "gflops": 462.7,
//    "best_gflops": 470.1, "max_rel_err": 6.9e-08}
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef GEMM_BENCH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef GEMM_BENCH_TRAINRT
#include "trainrt/kernels/cpu/gemm.h"
#endif

namespace {

struct GemmShape {
  std::string text;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
};

GemmShape parse_shape(const std::string& text) {
  GemmShape s;
  s.text = text;
  char trans[3] = {};
  long long m, n, k, batch;
  if (std::sscanf(text.c_str(), "%2c,%lld,%lld,%lld,%lld", trans, &m, &n, &k, &batch) != 5)
    throw std::runtime_error("bad shape '" + text + "', expected TRANS,M,N,K,BATCH");
  s.trans_a = trans[0] == 'T';
  s.trans_b = trans[1] == 'T';
  s.m = m, s.n = n, s.k = k, s.batch = batch;
  return s;
}

// Runs one GEMM (all batch entries) on buffers the runner owns.
using GemmRun = std::function<void()>;

struct Buffers {
  std::vector<float> a, b, c;  // (batch, M, K) or (batch, K, M); (batch, K, N) or (batch, N, K)
};

Buffers make_buffers(const GemmShape& s) {
  Buffers buf;
  buf.a.resize(static_cast<size_t>(s.batch * s.m * s.k));
  buf.b.resize(static_cast<size_t>(s.batch * s.k * s.n));
  buf.c.assign(static_cast<size_t>(s.batch * s.m * s.n), 0.f);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& x : buf.a) x = dist(rng);
  for (float& x : buf.b) x = dist(rng);
  return buf;
}

// Worst relative error over a sample of C entries against a double-precision dot product,
// relative to sum |a_i b_i| so cancellation does not inflate it. `tolerance_bits` is how many
// mantissa bits the inputs were rounded to (24 for f32, 8 for bf16).
double sample_error(const GemmShape& s, const Buffers& buf, int tolerance_bits) {
  auto round_to = [&](float x) {
    if (tolerance_bits >= 24) return static_cast<double>(x);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return static_cast<double>(r);
  };
  std::mt19937 rng(7);
  double worst = 0;
  for (int t = 0; t < 64; ++t) {
    int64_t p = static_cast<int64_t>(rng() % static_cast<uint32_t>(s.batch));
    int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(s.m));
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint32_t>(s.n));
    const float* a = buf.a.data() + p * s.m * s.k;
    const float* b = buf.b.data() + p * s.k * s.n;
    double dot = 0, mag = 0;
    for (int64_t l = 0; l < s.k; ++l) {
      double x = round_to(s.trans_a ? a[l * s.m + i] : a[i * s.k + l]);
      double y = round_to(s.trans_b ? b[j * s.k + l] : b[l * s.n + j]);
      dot += x * y;
      mag += std::abs(x * y);
    }
    double got = buf.c[static_cast<size_t>(p * s.m * s.n + i * s.n + j)];
    worst = std::max(worst, std::abs(got - dot) / std::max(mag, 1e-30));
  }
  return worst;
}

// ---- CBLAS through dlopen ----

enum CblasOrder { kRowMajor = 101 };
enum CblasTranspose { kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);

struct Cblas {
  SgemmFn sgemm = nullptr;
};

Cblas load_cblas(const std::string& lib, const std::string& prefix, const std::string& threads_fn,
                 int threads) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
  Cblas c;
  c.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, (prefix + "cblas_sgemm").c_str()));
  if (!c.sgemm) throw std::runtime_error("no " + prefix + "cblas_sgemm in " + lib);
  // OpenBLAS says which kernels it picked (OPENBLAS_CORETYPE or its own CPU detection).
  if (auto core =
          reinterpret_cast<char* (*)()>(dlsym(h, (prefix + "openblas_get_corename").c_str())))
    std::fprintf(stderr, "openblas core: %s\n", core());
  if (!threads_fn.empty()) {
    auto set = reinterpret_cast<void (*)(int)>(dlsym(h, threads_fn.c_str()));
    if (!set) throw std::runtime_error("no " + threads_fn + " in " + lib);
    set(threads);
  }
  return c;
}

GemmRun cblas_runner(const Cblas& lib, const GemmShape& s, Buffers& buf) {
  return [&lib, s, &buf] {
    int lda = static_cast<int>(s.trans_a ? s.m : s.k),
        ldb = static_cast<int>(s.trans_b ? s.k : s.n);
    for (int64_t p = 0; p < s.batch; ++p)
      lib.sgemm(kRowMajor, s.trans_a ? kTrans : kNoTrans, s.trans_b ? kTrans : kNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f,
                buf.a.data() + p * s.m * s.k, lda, buf.b.data() + p * s.k * s.n, ldb, 0.f,
                buf.c.data() + p * s.m * s.n, static_cast<int>(s.n));
  };
}

#ifdef GEMM_BENCH_DNNL
// ---- oneDNN ----

using dnnl::memory;

// Dims and strides of a (batch, rows, cols) operand stored transposed or not.
memory::desc operand_desc(const GemmShape& s, int64_t rows, int64_t cols, bool trans,
                          memory::data_type dt) {
  memory::dims strides2 = trans ? memory::dims{1, rows} : memory::dims{cols, 1};
  if (s.batch == 1) return memory::desc({rows, cols}, dt, strides2);
  return memory::desc({s.batch, rows, cols}, dt, {rows * cols, strides2[0], strides2[1]});
}

struct DnnlMatmul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<uint16_t> a16, b16;  // bf16 copies of the inputs
};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

GemmRun dnnl_runner(DnnlMatmul& d, const GemmShape& s, Buffers& buf, bool bf16) {
  auto in_dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto a_md = operand_desc(s, s.m, s.k, s.trans_a, in_dt);
  auto b_md = operand_desc(s, s.k, s.n, s.trans_b, in_dt);
  auto c_md = operand_desc(s, s.m, s.n, false, memory::data_type::f32);
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(d.engine, a_md, b_md, c_md);
#else
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), d.engine);
#endif
  void* a_ptr = buf.a.data();
  void* b_ptr = buf.b.data();
  if (bf16) {
    d.a16.resize(buf.a.size());
    d.b16.resize(buf.b.size());
    std::transform(buf.a.begin(), buf.a.end(), d.a16.begin(), to_bf16);
    std::transform(buf.b.begin(), buf.b.end(), d.b16.begin(), to_bf16);
    a_ptr = d.a16.data();
    b_ptr = d.b16.data();
  }
  auto prim = std::make_shared<dnnl::matmul>(pd);
  auto a = std::make_shared<memory>(a_md, d.engine, a_ptr);
  auto b = std::make_shared<memory>(b_md, d.engine, b_ptr);
  auto c = std::make_shared<memory>(c_md, d.engine, buf.c.data());
  std::fprintf(stderr, "%s %s: %s\n", s.text.c_str(), bf16 ? "bf16" : "f32", pd.impl_info_str());
  return [&d, prim, a, b, c] {
    prim->execute(d.stream, {{DNNL_ARG_SRC, *a}, {DNNL_ARG_WEIGHTS, *b}, {DNNL_ARG_DST, *c}});
    d.stream.wait();
  };
}

GemmRun dnnl_sgemm_runner(const GemmShape& s, Buffers& buf) {
  return [s, &buf] {
    for (int64_t p = 0; p < s.batch; ++p)
      dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, 1.f,
                 buf.a.data() + p * s.m * s.k, s.trans_a ? s.m : s.k, buf.b.data() + p * s.k * s.n,
                 s.trans_b ? s.k : s.n, 0.f, buf.c.data() + p * s.m * s.n, s.n);
  };
}
#endif

struct Timing {
  double median_ms, best_ms;
};

#ifdef GEMM_BENCH_TRAINRT
// bf16: gemm_bf16_f32 (bf16 operands, f32 C) on batch 1, as the dnnl backend's bf16 measures it.
GemmRun trainrt_runner(const GemmShape& s, Buffers& buf, bool bf16) {
  if (bf16) {
    if (s.batch != 1) throw std::runtime_error("trainrt bf16 is measured on batch 1");
    auto a16 = std::make_shared<std::vector<trainrt::BFloat16>>(buf.a.size());
    auto b16 = std::make_shared<std::vector<trainrt::BFloat16>>(buf.b.size());
    for (size_t i = 0; i < buf.a.size(); ++i) (*a16)[i].bits = trainrt::f32_to_bf16(buf.a[i]);
    for (size_t i = 0; i < buf.b.size(); ++i) (*b16)[i].bits = trainrt::f32_to_bf16(buf.b[i]);
    return [s, &buf, a16, b16] {
      trainrt::gemm_bf16_f32(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.f, a16->data(), s.trans_a ? s.m : s.k,
                             b16->data(), s.trans_b ? s.k : s.n, 0.f, buf.c.data(), s.n);
    };
  }
  return [s, &buf] {
    trainrt::gemm_f32_batched(s.batch, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.f, buf.a.data(),
                              s.trans_a ? s.m : s.k, s.m * s.k, buf.b.data(), s.trans_b ? s.k : s.n,
                              s.k * s.n, 0.f, buf.c.data(), s.n, s.m * s.n);
  };
}
#endif

// Median and best milliseconds of one run after warm-up; repeats until min_time seconds (at
// least 5 runs, at most 200).
Timing time_runs(const GemmRun& run, double min_time) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 2; ++i) run();
  std::vector<double> ms;
  auto start = Clock::now();
  while (ms.size() < 5 || (std::chrono::duration<double>(Clock::now() - start).count() < min_time &&
                           ms.size() < 200)) {
    auto t0 = Clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[0]};
}

std::string arg_value(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string backend = arg_value(argc, argv, "--backend", "cblas");
    int threads = std::atoi(arg_value(argc, argv, "--threads", "2").c_str());
    double min_time = std::atof(arg_value(argc, argv, "--min-time", "0.2").c_str());
    bool bf16 = arg_value(argc, argv, "--dtype", "f32") == "bf16";

    Cblas cblas;
    if (backend == "cblas")
      cblas = load_cblas(arg_value(argc, argv, "--lib", ""), arg_value(argc, argv, "--prefix", ""),
                         arg_value(argc, argv, "--threads-fn", ""), threads);
#ifdef GEMM_BENCH_DNNL
    std::unique_ptr<DnnlMatmul> dnnl_state;  // engine created only for the primitive backend
    if (backend == "dnnl") dnnl_state = std::make_unique<DnnlMatmul>();
#endif
    if (bf16 && backend != "dnnl" && backend != "trainrt")
      throw std::runtime_error("bf16 is measured for --backend dnnl and trainrt only");

    auto measure = [&](const GemmShape& s) {
      Buffers buf = make_buffers(s);
      GemmRun run = [&]() -> GemmRun {
        if (backend == "cblas") return cblas_runner(cblas, s, buf);
#ifdef GEMM_BENCH_DNNL
        if (backend == "dnnl") return dnnl_runner(*dnnl_state, s, buf, bf16);
        if (backend == "dnnl_sgemm") return dnnl_sgemm_runner(s, buf);
#endif
#ifdef GEMM_BENCH_TRAINRT
        if (backend == "trainrt") return trainrt_runner(s, buf, bf16);
#endif
        throw std::runtime_error("unknown or not compiled-in backend '" + backend + "'");
      }();
      Timing t = time_runs(run, min_time);
      double err = sample_error(s, buf, bf16 ? 8 : 24);
      double flop = 2.0 * static_cast<double>(s.batch * s.m * s.n * s.k);
      std::printf(
          "{\"shape\": \"%s\", \"dtype\": \"%s\", \"ms\": %.4f, \"gflops\": %.2f, "
          "\"best_gflops\": %.2f, \"max_rel_err\": %.3g}\n",
          s.text.c_str(), bf16 ? "bf16" : "f32", t.median_ms, flop / (t.median_ms * 1e6),
          flop / (t.best_ms * 1e6), err);
      std::fflush(stdout);
    };
    bool any_shape_arg = false;
    for (int i = 1; i + 1 < argc; ++i)
      if (std::string(argv[i]) == "--shape") {
        measure(parse_shape(argv[i + 1]));
        any_shape_arg = true;
      }
    // Without --shape: a worker that measures each shape read from stdin, one per line.
    if (!any_shape_arg)
      for (std::string line; std::getline(std::cin, line);)
        if (!line.empty()) measure(parse_shape(line));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
