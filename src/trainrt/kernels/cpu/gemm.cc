// gemm_f32, gemm_bf16 and gemm_bf16_f32 on oneDNN 2.x (Debian 12's libdnnl-dev): one matmul primitive per
// problem, cached, run one thread per piece on our ThreadPool. All share every line but the
// oneDNN data types of the operands and the result (a bf16 primitive accumulates in f32: oneDNN's
// avx512_core_bf16 brgemm kernels on this CPU).
//
// A primitive bakes in dims, strides, alpha (output scale) and beta (sum post-op), so the cache key
// is all of them. Primitives run with a user scratchpad taken from a per-thread buffer
// (thread_scratch), so one cached primitive may run on several threads at once without sharing
// scratch memory.
//
// Steady state: each thread also keeps, per problem it has run, the primitive bound to four
// dnnl::memory objects and the execute arguments over them; a call re-points their data handles
// and runs the primitive through the C API (onednn_execute), so it allocates nothing of ours.
// What oneDNN allocates inside each execute (its argument map and bookkeeping: 6 per call with
// Debian's oneDNN 2.6) is out of our hands.
//
// Threads: Debian's oneDNN threads with OpenMP, whose two-thread barriers spin and stall for a
// whole scheduler time slice whenever the partner thread is preempted (docs/gemm.md: the
// end-to-end demo up to 5x slower on a busy 2-core machine). So oneDNN runs single-threaded here (the
// calling thread's OpenMP team size is set to 1 around each call, onednn_runtime.h) and the ThreadPool splits a large
// product into pieces: over the batch, else over column blocks of C (each piece then packs only its
// own part of B) or row blocks, as op tuning measured fastest for the problem (choose_split). The pool hands out pieces dynamically and its caller takes
// part, so a preempted worker delays only the piece it holds.
#include "trainrt/kernels/cpu/gemm.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "trainrt/core/error.h"
#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_budget.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/kernels/cpu/onednn_runtime.h"
#include "trainrt/kernels/cpu/op_tuning.h"

namespace trainrt {
namespace {

using dnnl::memory;

struct GemmKey {
  int64_t batch, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c;
  bool trans_a, trans_b;
  uint32_t alpha_bits, beta_bits;
  memory::data_type type;    // of A and B
  memory::data_type c_type;  // of C: type, or f32 for gemm_bf16_f32
  bool operator==(const GemmKey&) const = default;
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    for (int64_t v : {key.batch, key.m, key.n, key.k, key.lda, key.ldb, key.ldc, key.stride_a,
                      key.stride_b, key.stride_c})
      mix(static_cast<uint64_t>(v));
    mix((uint64_t{key.alpha_bits} << 32) | key.beta_bits);
    mix(uint64_t{key.trans_a} * 2 + key.trans_b);
    mix(static_cast<uint64_t>(key.type) * 64 + static_cast<uint64_t>(key.c_type));
    return h;
  }
};

struct GemmPrimitive {
  dnnl::matmul matmul;
  memory::desc a_md, b_md, c_md, scratch_md;
};

std::string describe_problem(const GemmKey& key) {
  const bool bf16 = key.type == memory::data_type::bf16;
  return fmt("gemm ", bf16 ? (key.c_type == memory::data_type::f32 ? "bf16>f32 " : "bf16 ") : "f32 ", key.trans_a ? "T" : "N", key.trans_b ? "T" : "N", " batch=", key.batch,
             " m=", key.m, " n=", key.n, " k=", key.k, " lda=", key.lda, " ldb=", key.ldb,
             " ldc=", key.ldc, " strides=(", key.stride_a, ", ", key.stride_b, ", ", key.stride_c,
             ")");
}

// The primitive cache. Bounded: a workload with ever-changing shapes (a new
// sequence length every step) starts over rather than growing without limit. Never destroyed, so
// no primitive outlives its engine or the OpenMP runtime at process exit (abseil's NoDestructor).
struct GemmState {
  static constexpr size_t kMaxCached = 1024;
  std::mutex mutex;
  std::unordered_map<GemmKey, std::shared_ptr<const GemmPrimitive>, GemmKeyHash> cache;
};

GemmState& state() {
  static GemmState& s = *new GemmState;
  return s;
}

// A (rows, cols) operand, stored transposed or not, with leading dim `ld`; batched when
// batch > 1 (a batch stride of 0 becomes a batch dim of 1, which oneDNN broadcasts).
memory::desc operand_desc(memory::data_type type, int64_t batch, int64_t rows, int64_t cols, bool trans,
                          int64_t ld, int64_t batch_stride) {
  memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  if (batch == 1) return memory::desc({rows, cols}, type, strides);
  int64_t span = trans ? cols * ld : rows * ld;
  return memory::desc({batch_stride == 0 ? 1 : batch, rows, cols}, type,
                      {batch_stride == 0 ? span : batch_stride, strides[0], strides[1]});
}

std::shared_ptr<const GemmPrimitive> create_primitive(const GemmKey& key,
                                                      const dnnl::engine& engine) {
  auto p = std::make_shared<GemmPrimitive>();
  p->a_md = operand_desc(key.type, key.batch, key.m, key.k, key.trans_a, key.lda, key.stride_a);
  p->b_md = operand_desc(key.type, key.batch, key.k, key.n, key.trans_b, key.ldb, key.stride_b);
  p->c_md = operand_desc(key.c_type, key.batch, key.m, key.n, false, key.ldc, key.stride_c);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  float alpha = std::bit_cast<float>(key.alpha_bits), beta = std::bit_cast<float>(key.beta_bits);
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a_md, p->b_md, p->c_md), attr, engine);
  p->scratch_md = pd.scratchpad_desc();
  p->matmul = dnnl::matmul(pd);
  return p;
}

std::shared_ptr<const GemmPrimitive> find_primitive(const GemmKey& key) {
  GemmState& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.cache.find(key);
  if (it != s.cache.end()) return it->second;
  if (s.cache.size() >= GemmState::kMaxCached) s.cache.clear();
  return s.cache.emplace(key, create_primitive(key, onednn_engine())).first->second;
}

template <typename T>
constexpr memory::data_type onednn_type() {
  return std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
}

// C_i = beta * C_i for the products with nothing to add (k == 0 or alpha == 0).
template <typename T>
void scale_c(int64_t batch, int64_t m, int64_t n, float beta, T* c, int64_t ldc, int64_t stride_c) {
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + p * stride_c + i * ldc;
      if (beta == 0.f) {
        std::memset(row, 0, static_cast<size_t>(n) * sizeof(T));
      } else if constexpr (std::is_same_v<T, float>) {
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
      } else {
        for (int64_t j = 0; j < n; ++j) row[j].bits = f32_to_bf16(bf16_to_f32(row[j].bits) * beta);
      }
    }
}

// A cached primitive bound for one thread: memory objects for A, B, C and the scratchpad (their
// data handles re-pointed on every call) and the execute arguments over them.
struct BoundGemm {
  std::shared_ptr<const GemmPrimitive> primitive;  // keeps it alive if the shared cache starts over
  memory a, b, c, scratch;
  dnnl_exec_arg_t args[4];
};

// The calling thread's bound primitive for `key`; the shared cache is only locked on a miss.
// Bounded like the shared cache.
BoundGemm& bound_primitive(const GemmKey& key) {
  thread_local std::unordered_map<GemmKey, BoundGemm, GemmKeyHash> bound;
  auto it = bound.find(key);
  if (it != bound.end()) return it->second;
  if (bound.size() >= GemmState::kMaxCached) bound.clear();
  auto p = find_primitive(key);
  const dnnl::engine& engine = onednn_engine();
  BoundGemm& g = bound[key];
  g.primitive = p;
  g.a = memory(p->a_md, engine, nullptr);
  g.b = memory(p->b_md, engine, nullptr);
  g.c = memory(p->c_md, engine, nullptr);
  g.scratch = memory(p->scratch_md, engine, nullptr);
  g.args[0] = {DNNL_ARG_SRC, g.a.get()};
  g.args[1] = {DNNL_ARG_WEIGHTS, g.b.get()};
  g.args[2] = {DNNL_ARG_DST, g.c.get()};
  g.args[3] = {DNNL_ARG_SCRATCHPAD, g.scratch.get()};
  return g;
}

// Writes a zero byte into each 4 KiB page of [begin, begin + bytes): storage a product overwrites
// (beta == 0). A bf16 product runs on AMX tiles, and a page fault inside it (fresh output storage:
// a gradient handed to torch) saves and restores the tile state: 1.2 ms a piece against 0.45 ms on
// this machine for a 2 MiB piece of fresh f32 output. Faulting the pages in first, outside the
// tiles, costs what the faults cost. (A write, not a read and write: reading a fresh page maps the
// zero page, and the write then faults a second time.)
void zero_a_byte_per_page(void* begin, size_t bytes) {
  constexpr size_t kPage = 4096;
  auto* p = static_cast<volatile unsigned char*>(begin);
  for (size_t at = 0; at < bytes; at += kPage) p[at] = 0;
  if (bytes > 0) p[bytes - 1] = 0;
}

// Runs one product on the calling thread.
void run(const GemmKey& key, const void* a, const void* b, void* c) {
  SingleThreadedOpenMp one_thread;
  try {
    BoundGemm& g = bound_primitive(key);
    g.a.set_data_handle(const_cast<void*>(a));
    g.b.set_data_handle(const_cast<void*>(b));
    g.c.set_data_handle(c);
    const std::shared_ptr<void> scratch = thread_scratch(kScratchpadSlot, g.primitive->scratch_md.get_size());
    g.scratch.set_data_handle(scratch.get());
    onednn_execute(g.primitive->matmul, g.args);
  } catch (const dnnl::error& e) {
    throw InternalError(fmt("oneDNN matmul failed for ", describe_problem(key), ": ", e.what()));
  }
}

void check_args(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, int64_t lda,
                int64_t ldb, int64_t ldc) {
  TRAINRT_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm dims m=", m, " n=", n, " k=", k);
  TRAINRT_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k), "gemm lda=", lda, " too small");
  TRAINRT_CHECK(ldb >= std::max<int64_t>(1, trans_b ? k : n), "gemm ldb=", ldb, " too small");
  TRAINRT_CHECK(ldc >= std::max<int64_t>(1, n), "gemm ldc=", ldc, " too small");
}

// Pieces of at least kMinPieceMacs multiply-adds (about 10 us on one core): smaller ones cost
// more in wake-ups and per-call overhead than a second core gives back.
constexpr int64_t kMinPieceMacs = int64_t{1} << 21;
int64_t grain(int64_t unit_macs) { return (kMinPieceMacs + unit_macs - 1) / unit_macs; }

// How one product is split over the pool's threads: C's column blocks (each piece packs only its
// part of B), row blocks, or whole on the calling thread. Op tuning (op_tuning.h) names it
// "columns 64", "rows 128", "whole".
struct Split {
  enum Kind { kWhole, kColumns, kRows } kind = kWhole;
  int64_t block = 0;
  std::string name() const {
    return kind == kWhole ? "whole" : fmt(kind == kColumns ? "columns " : "rows ", block);
  }
  static std::optional<Split> parse(const std::string& text) {
    if (text == "whole") return Split{};
    for (auto [prefix, kind] : {std::pair{"columns ", kColumns}, std::pair{"rows ", kRows}}) {
      if (text.rfind(prefix, 0) != 0) continue;
      const int64_t block = std::atoll(text.c_str() + std::strlen(prefix));
      if (block > 0) return Split{kind, block};
    }
    return std::nullopt;
  }
};

// The split of a (m, n) product without tuning: 64-column blocks, else 64-row blocks, else whole.
// bf16 products split the longer side of C into blocks of 128 (64, 256 and 512 measured within the
// noise of it): oneDNN runs its AMX / bf16 brgemm kernels only on dense operands (docs/gemm.md: up
// to 3x its jit gemm), so a piece's A, B block or C block is made dense where it is not.
template <typename T>
Split default_split(int64_t m, int64_t n, int64_t ldc) {
  if (!std::is_same_v<T, float>) {
    constexpr int64_t block = 128;
    // Each row piece packs all of B, each column piece reads all of A: split the longer side.
    if (n > m && n >= 2 * block) return {Split::kColumns, block};
    if (ldc == n && m >= 2 * block) return {Split::kRows, block};
    if (ldc == n) return m >= 64 ? Split{Split::kRows, (m + 1) / 2} : Split{};
  }
  constexpr int64_t kBlock = 64;
  if (n >= 2 * kBlock) return {Split::kColumns, kBlock};
  if (m >= 2 * kBlock) return {Split::kRows, kBlock};
  return {};
}

// The splits worth measuring for a (m, n) product on `threads` threads: the default first (so that
// a budget too small to measure the rest keeps it), then blocks of 64, 128, 256 along columns and
// rows (two pieces a thread at least), and whole last.
template <typename T>
std::vector<Split> candidate_splits(int64_t m, int64_t n, int64_t ldc, int threads) {
  std::vector<Split> out = {default_split<T>(m, n, ldc)};
  const auto add = [&](Split split) {
    if (std::none_of(out.begin(), out.end(), [&](const Split& s) { return s.kind == split.kind && s.block == split.block; }))
      out.push_back(split);
  };
  // No block per thread: with exactly one piece per thread, a worker that wakes late leaves the
  // caller both pieces (twice the time), which a quick measurement may not see.
  for (auto [kind, extent] : {std::pair{Split::kColumns, n}, std::pair{Split::kRows, m}})
    for (int64_t block : {int64_t{64}, int64_t{128}, int64_t{256}})
      if (extent >= 2 * block * threads) add({kind, block});
  add(Split{});
  return out;
}

// The tuned choice for this product when there is one; with tuning on (and not inside a parallel
// loop, where products run serially), each candidate timed on `measure` into a scratch C until the
// budget is spent, the fastest recorded; else default_split.
// A product as op tuning keys it, without building its text: each thread remembers the splits of
// the products it ran (no allocation per call once a product was seen).
struct SplitKey {
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alpha_bits, beta_bits;
  int threads;
  bool trans_a, trans_b, bf16, f32_out;
  bool operator==(const SplitKey&) const = default;
};
struct SplitKeyHash {
  size_t operator()(const SplitKey& key) const {
    size_t h = 0;
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, int64_t{key.alpha_bits}, int64_t{key.beta_bits},
                      int64_t{key.threads}, int64_t{key.trans_a} * 8 + key.trans_b * 4 + key.bf16 * 2 + key.f32_out})
      h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

template <typename T, typename C, typename Measure>
Split tuned_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                  float alpha, float beta, int threads, Measure&& measure);

// The split for this product: default_split unless op tuning is in use (tuning_in_use), then the
// thread's remembered choice, else tuned_split's.
template <typename T, typename C, typename Measure>
Split choose_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                   float alpha, float beta, Measure&& measure) {
  if (!tuning_in_use()) return default_split<T>(m, n, ldc);
  thread_local std::unordered_map<SplitKey, Split, SplitKeyHash> known;
  thread_local uint64_t generation = 0;
  if (generation != tuning_generation()) {
    known.clear();
    generation = tuning_generation();
  }
  const int threads = thread_budget();
  const SplitKey key{m, n, k, lda, ldb, ldc, std::bit_cast<uint32_t>(alpha), std::bit_cast<uint32_t>(beta), threads,
                     trans_a, trans_b, !std::is_same_v<T, float>, !std::is_same_v<T, C>};
  if (auto it = known.find(key); it != known.end()) return it->second;
  const Split split = tuned_split<T, C>(trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, threads, measure);
  known.emplace(key, split);
  return split;
}

template <typename T, typename C, typename Measure>
Split tuned_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                  float alpha, float beta, int threads, Measure&& measure) {
  const char* types = std::is_same_v<T, float> ? "f32 " : std::is_same_v<C, float> ? "bf16>f32 " : "bf16 ";
  const std::string key = fmt("gemm ", types, trans_a ? "T" : "N",
                              trans_b ? "T" : "N", " m=", m, " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldc=",
                              ldc, " alpha=", alpha, " beta=", beta, " threads=", threads);
  if (std::optional<std::string> choice = tuned_choice(key))
    if (std::optional<Split> split = Split::parse(*choice)) return *split;
  const TuningOptions options = tuning_options();
  if (!options.enabled || inside_thread_pool_loop()) return default_split<T>(m, n, ldc);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(options.max_ms);
  std::vector<C> scratch(static_cast<size_t>((m - 1) * ldc + n));
  Split best = default_split<T>(m, n, ldc);
  double best_us = std::numeric_limits<double>::infinity();
  for (const Split& split : candidate_splits<T>(m, n, ldc, threads)) {
    measure(split, scratch.data());  // warm: primitives made, B packed
    double fastest = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 5 && (rep == 0 || Clock::now() < deadline); ++rep) {  // timed once at least
      const auto start = Clock::now();
      measure(split, scratch.data());
      fastest = std::min(fastest, std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    if (fastest < best_us) {
      best = split;
      best_us = fastest;
    }
    if (Clock::now() >= deadline) break;
  }
  record_choice(key, best.name(), best_us);
  return best;
}

// C = alpha op(A) op(B) + beta C on operands of T and a result of C (T, or f32 for bf16 operands).
template <typename T, typename C = T>
void product_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b,
                  float beta, C* c, int64_t ldc, int64_t stride_c) {
  check_args(m, n, k, trans_a, trans_b, lda, ldb, ldc);
  TRAINRT_CHECK(batch >= 0 && stride_a >= 0 && stride_b >= 0 && (batch <= 1 || stride_c > 0),
                "gemm batch=", batch, " strides ", stride_a, ", ", stride_b, ", ", stride_c);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) return scale_c(batch, m, n, beta, c, ldc, stride_c);
  if (batch > 1 && stride_a == 0 && stride_b == 0) {
    // oneDNN wants the batch from A or B; with neither batched every product is the same one.
    for (int64_t p = 0; p < batch; ++p)
      product_batched<T, C>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c + p * stride_c, ldc, 0);
    return;
  }
  constexpr bool kBf16 = !std::is_same_v<T, float>;
  // One piece: `count` products of (rows, cols) at pa, pb, pc with those leading dims.
  auto piece = [&](int64_t count, int64_t rows, int64_t cols, const T* pa, int64_t piece_lda, const T* pb,
                   int64_t piece_ldb, C* pc, int64_t piece_ldc) {
    bool batched = count > 1;
    if (kBf16 && beta == 0.f && !batched && piece_ldc == cols)  // C's rows of this piece, contiguous
      zero_a_byte_per_page(pc, static_cast<size_t>(rows * cols) * sizeof(C));
    GemmKey key{count, rows, cols, k, piece_lda, piece_ldb, piece_ldc, batched ? stride_a : 0,
                batched ? stride_b : 0, batched ? stride_c : 0, trans_a, trans_b,
                std::bit_cast<uint32_t>(alpha), std::bit_cast<uint32_t>(beta), onednn_type<T>(), onednn_type<C>()};
    run(key, pa, pb, pc);
  };
  ThreadPool& pool = ThreadPool::global();
  if (batch > 1) {
    pool.parallel_for(batch, grain(m * n * k), [&](int64_t begin, int64_t end) {
      piece(end - begin, m, n, a + begin * stride_a, lda, b + begin * stride_b, ldb, c + begin * stride_c, ldc);
    });
    return;
  }
  // bf16: B packed dense when it is not (once, shared by the pieces), and each row piece's A.
  std::vector<T> dense_b;
  if (kBf16 && ldb != (trans_b ? k : n)) {
    const int64_t rows = trans_b ? n : k, cols = trans_b ? k : n;
    dense_b.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&dense_b[static_cast<size_t>(r * cols)], b + r * ldb, cols * sizeof(T));
    b = dense_b.data();
    ldb = cols;
  }
  // Rows [i0, i1) of op(A): where they lie, or a dense copy in the calling thread's buffer.
  auto rows_of_a = [&](int64_t i0, int64_t i1, int64_t& piece_lda) -> const T* {
    const int64_t rows = i1 - i0;
    piece_lda = lda;
    if (!kBf16 || (trans_a ? lda == rows : lda == k)) return trans_a ? a + i0 : a + i0 * lda;
    thread_local std::vector<T> packed;
    packed.resize(static_cast<size_t>(rows * k));
    if (trans_a) {  // stored (k, m): columns [i0, i1) of each of the k rows
      for (int64_t l = 0; l < k; ++l)
        std::memcpy(&packed[static_cast<size_t>(l * rows)], a + l * lda + i0, rows * sizeof(T));
      piece_lda = rows;
    } else {
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(&packed[static_cast<size_t>(i * k)], a + (i0 + i) * lda, k * sizeof(T));
      piece_lda = k;
    }
    return packed.data();
  };
  // C (m, n) split into column or row blocks of C, or run whole on the calling thread.
  auto run_split = [&](Split split, C* out) {
    const int64_t blocks = split.kind == Split::kColumns ? (n + split.block - 1) / split.block
                           : split.kind == Split::kRows  ? (m + split.block - 1) / split.block
                                                         : 1;
    if (split.kind == Split::kColumns) {
      pool.parallel_for(blocks, grain(m * split.block * k), [&](int64_t begin, int64_t end) {
        int64_t j0 = begin * split.block, j1 = std::min(n, end * split.block), cols = j1 - j0;
        const T* pb = trans_b ? b + j0 * ldb : b + j0;
        int64_t piece_ldb = ldb;
        if (kBf16 && !trans_b && cols != ldb) {  // B's column block, dense in the thread's buffer
          thread_local std::vector<T> dense_b_block;
          dense_b_block.resize(static_cast<size_t>(k * cols));
          for (int64_t l = 0; l < k; ++l)
            std::memcpy(&dense_b_block[static_cast<size_t>(l * cols)], pb + l * ldb, cols * sizeof(T));
          pb = dense_b_block.data();
          piece_ldb = cols;
        }
        if (!kBf16 || cols == ldc) return piece(1, m, cols, a, lda, pb, piece_ldb, out + j0, ldc);
        // bf16: the piece's C dense in the thread's buffer (beta reads C's block in), then copied out.
        thread_local std::vector<C> dense_c;
        dense_c.resize(static_cast<size_t>(m * cols));
        const size_t row_bytes = static_cast<size_t>(cols) * sizeof(C);
        if (beta != 0.f)
          for (int64_t i = 0; i < m; ++i)
            std::memcpy(&dense_c[static_cast<size_t>(i * cols)], out + i * ldc + j0, row_bytes);
        piece(1, m, cols, a, lda, pb, piece_ldb, dense_c.data(), cols);
        for (int64_t i = 0; i < m; ++i)
          std::memcpy(out + i * ldc + j0, &dense_c[static_cast<size_t>(i * cols)], row_bytes);
      });
    } else if (split.kind == Split::kRows) {
      pool.parallel_for(blocks, grain(split.block * n * k), [&](int64_t begin, int64_t end) {
        int64_t i0 = begin * split.block, i1 = std::min(m, end * split.block), piece_lda = lda;
        const T* pa = rows_of_a(i0, i1, piece_lda);
        piece(1, i1 - i0, n, pa, piece_lda, b, ldb, out + i0 * ldc, ldc);
      });
    } else {
      int64_t piece_lda = lda;
      const T* pa = rows_of_a(0, m, piece_lda);
      piece(1, m, n, pa, piece_lda, b, ldb, out, ldc);
    }
  };
  run_split(choose_split<T, C>(trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta,
                               [&](Split split, C* scratch) { run_split(split, scratch); }),
            c);
}

}  // namespace

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  product_batched<float>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0);
}

void gemm_f32_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                      int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                      int64_t stride_c) {
  product_batched<float>(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                      stride_c);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c,
               int64_t ldc) {
  product_batched<BFloat16>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0);
}

void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                   int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  product_batched<BFloat16, float>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0);
}

void gemm_bf16_f32_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const BFloat16* a, int64_t lda, int64_t stride_a, const BFloat16* b, int64_t ldb,
                           int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c) {
  product_batched<BFloat16, float>(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                                   c, ldc, stride_c);
}

void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const BFloat16* a, int64_t lda, int64_t stride_a, const BFloat16* b,
                       int64_t ldb, int64_t stride_b, float beta, BFloat16* c, int64_t ldc,
                       int64_t stride_c) {
  product_batched<BFloat16>(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                         ldc, stride_c);
}

}  // namespace trainrt
