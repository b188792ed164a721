// The primitives are cached by (kind, problem). A primitive and its reorders run with user
// scratchpads and per-thread operand buffers (onednn_runtime.h), so one cached entry may run on
// several threads at once. Each thread binds the entries it runs to its own dnnl::memory objects
// (BoundConv) and runs them through onednn_execute, so a steady-state run allocates nothing of ours.
//
// Threads: each call runs single-threaded and the kernels split the batch into chunks on our
// ThreadPool, rather than giving oneDNN an OpenMP team of the pool's size. Measured on this 2-core
// machine with other sessions compiling (load average 5-11), ResNet 3x3 conv, batch 64, 64 -> 64
// channels, 32x32, forward + backward through RTModule (bench/conv/conv_step.py, medians of 5):
// batch chunks on the ThreadPool 100 and 152 ms, one oneDNN call with a 2-thread OpenMP team 236
// and 428 ms (torch eager in the same runs: 187-468 ms). OpenMP's spinning barriers stall whenever
// a partner thread is preempted (docs/gemm.md); independent chunks only wait for the last one.
// The cost: a batch of one image runs on one thread.
#include "trainrt/kernels/cpu/conv_primitives.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/onednn_runtime.h"

namespace trainrt {
namespace {

using dnnl::memory;
using Dims = memory::dims;

enum class ConvKind { kForward, kBackwardData, kBackwardWeights };

// One tensor argument of a primitive: our dense layout and the one the primitive chose, with the
// reorder between them when they differ (into the chosen layout for inputs, out of it for outputs).
struct Operand {
  memory::desc dense, chosen;
  std::optional<dnnl::reorder> reorder;
  int slot = 0;  // thread_scratch slot of the reordered copy
};

Operand make_operand(const memory::desc& dense, const memory::desc& chosen, bool is_input, int slot) {
  Operand o{dense, chosen, std::nullopt, slot};
  if (dense != chosen) {
    const dnnl::engine& e = onednn_engine();
    o.reorder = is_input ? dnnl::reorder(dnnl::reorder::primitive_desc(e, dense, e, chosen))
                         : dnnl::reorder(dnnl::reorder::primitive_desc(e, chosen, e, dense));
  }
  return o;
}

// The three operands and bias of one kind of primitive, in the order the kind names them:
// forward (src, weights, dst), backward-data (diff_dst, weights, diff_src), backward-weights
// (diff_dst, src, diff_weights). Inputs are operands 0 and 1, the output operand 2.
struct ConvPrimitive {
  dnnl::primitive primitive;
  int args[3];
  Operand operands[3];
  memory::desc bias, scratchpad;
};

Dims dense_strides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

using Type = memory::data_type;

Type onednn_type(DType t) { return t == DType::kBF16 ? Type::bf16 : Type::f32; }
memory::desc dense_desc(const Dims& dims, Type t) { return memory::desc(dims, t, dense_strides(dims)); }
memory::desc any_desc(const Dims& dims, Type t) { return memory::desc(dims, t, memory::format_tag::any); }

// W's dims as oneDNN wants them: (group, M / group, C / group, K...) when grouped.
Dims weight_dims(const ConvProblem& p) {
  if (p.group == 1) return p.w;
  Dims d{p.group, p.w[0] / p.group};
  d.insert(d.end(), p.w.begin() + 1, p.w.end());
  return d;
}

struct Geometry {
  Dims strides, dilates, pad_l, pad_r;  // dilates in oneDNN's convention: 0 = dense
};

Geometry geometry(const ConvProblem& p) {
  Geometry g{p.strides, {}, p.pad_begin, p.pad_end};
  for (int64_t d : p.dilations) g.dilates.push_back(d - 1);
  return g;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvProblem& p, const dnnl::primitive_attr& attr) {
  const Geometry g = geometry(p);
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto prop = dnnl::prop_kind::forward_training;
  const Type t = onednn_type(p.dtype);
  const memory::desc x = any_desc(p.x, t), w = any_desc(weight_dims(p), t), y = any_desc(p.y, t);
  using Desc = dnnl::convolution_forward::desc;
  const Desc d = p.bias ? Desc(prop, algo, x, w, dense_desc({p.w[0]}, t), y, g.strides, g.dilates, g.pad_l, g.pad_r)
                        : Desc(prop, algo, x, w, y, g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, onednn_engine());
}

std::shared_ptr<const ConvPrimitive> create(ConvKind kind, const ConvProblem& p) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const Type t = onednn_type(p.dtype);
  const memory::desc x = dense_desc(p.x, t), w = dense_desc(weight_dims(p), t), y = dense_desc(p.y, t);
  auto c = std::make_shared<ConvPrimitive>();
  const auto fwd = forward_pd(p, attr);
  const Geometry g = geometry(p);
  const auto algo = dnnl::algorithm::convolution_direct;
  if (kind == ConvKind::kForward) {
    c->primitive = dnnl::convolution_forward(fwd);
    c->args[0] = DNNL_ARG_SRC, c->args[1] = DNNL_ARG_WEIGHTS, c->args[2] = DNNL_ARG_DST;
    c->operands[0] = make_operand(x, fwd.src_desc(), true, 1);
    c->operands[1] = make_operand(w, fwd.weights_desc(), true, 2);
    c->operands[2] = make_operand(y, fwd.dst_desc(), false, 3);
    c->bias = fwd.bias_desc();
    c->scratchpad = fwd.scratchpad_desc();
  } else if (kind == ConvKind::kBackwardData) {
    const dnnl::convolution_backward_data::desc d(algo, any_desc(p.x, t), any_desc(weight_dims(p), t), any_desc(p.y, t),
                                                  g.strides, g.dilates, g.pad_l, g.pad_r);
    const dnnl::convolution_backward_data::primitive_desc pd(d, attr, onednn_engine(), fwd);
    c->primitive = dnnl::convolution_backward_data(pd);
    c->args[0] = DNNL_ARG_DIFF_DST, c->args[1] = DNNL_ARG_WEIGHTS, c->args[2] = DNNL_ARG_DIFF_SRC;
    c->operands[0] = make_operand(y, pd.diff_dst_desc(), true, 1);
    c->operands[1] = make_operand(w, pd.weights_desc(), true, 2);
    c->operands[2] = make_operand(x, pd.diff_src_desc(), false, 3);
    c->scratchpad = pd.scratchpad_desc();
  } else {
    // dW and dB in f32 whatever t (the header says why).
    using Desc = dnnl::convolution_backward_weights::desc;
    const memory::desc xa = any_desc(p.x, t), wa = any_desc(weight_dims(p), Type::f32), ya = any_desc(p.y, t);
    const Desc d = p.bias ? Desc(algo, xa, wa, dense_desc({p.w[0]}, Type::f32), ya, g.strides, g.dilates, g.pad_l, g.pad_r)
                          : Desc(algo, xa, wa, ya, g.strides, g.dilates, g.pad_l, g.pad_r);
    const dnnl::convolution_backward_weights::primitive_desc pd(d, attr, onednn_engine(), fwd);
    c->primitive = dnnl::convolution_backward_weights(pd);
    c->args[0] = DNNL_ARG_DIFF_DST, c->args[1] = DNNL_ARG_SRC, c->args[2] = DNNL_ARG_DIFF_WEIGHTS;
    c->operands[0] = make_operand(y, pd.diff_dst_desc(), true, 1);
    c->operands[1] = make_operand(x, pd.src_desc(), true, 2);
    c->operands[2] = make_operand(dense_desc(weight_dims(p), Type::f32), pd.diff_weights_desc(), false, 3);
    c->bias = pd.diff_bias_desc();
    c->scratchpad = pd.scratchpad_desc();
  }
  return c;
}

std::string describe(ConvKind kind, const ConvProblem& p) {
  const char* names[] = {"forward", "backward-data", "backward-weights"};
  return fmt(dtype_name(p.dtype), " convolution ", names[static_cast<int>(kind)], " X", to_string(p.x), " W", to_string(p.w), " Y",
             to_string(p.y), " strides ", to_string(p.strides), " dilations ", to_string(p.dilations), " pads ",
             to_string(p.pad_begin), " ", to_string(p.pad_end), " group ", p.group, p.bias ? " with bias" : "");
}

// A cache key looked up without copying the problem (its seven vectors).
struct ConvKeyRef {
  ConvKind kind;
  const ConvProblem& p;
};

auto key_tie(const ConvKind& kind, const ConvProblem& p) {  // references into the arguments: no copies
  return std::tie(kind, p.x, p.w, p.y, p.strides, p.dilations, p.pad_begin, p.pad_end, p.group, p.bias, p.dtype);
}

struct ConvKeyLess {
  using is_transparent = void;
  using Key = std::pair<ConvKind, ConvProblem>;
  bool operator()(const Key& a, const Key& b) const { return key_tie(a.first, a.second) < key_tie(b.first, b.second); }
  bool operator()(const Key& a, const ConvKeyRef& b) const { return key_tie(a.first, a.second) < key_tie(b.kind, b.p); }
  bool operator()(const ConvKeyRef& a, const Key& b) const { return key_tie(a.kind, a.p) < key_tie(b.first, b.second); }
};

// The cache, bounded like gemm.cc's (a workload with ever-changing shapes starts over) and never
// destroyed (no primitive outlives the engine or the OpenMP runtime at exit).
struct ConvCache {
  static constexpr size_t kMaxCached = 256;
  std::mutex mutex;
  std::map<std::pair<ConvKind, ConvProblem>, std::shared_ptr<const ConvPrimitive>, ConvKeyLess> entries;
};

std::shared_ptr<const ConvPrimitive> find(ConvKind kind, const ConvProblem& p) {
  static ConvCache& cache = *new ConvCache;
  std::lock_guard lock(cache.mutex);
  auto it = cache.entries.find(ConvKeyRef{kind, p});
  if (it != cache.entries.end()) return it->second;
  if (cache.entries.size() >= ConvCache::kMaxCached) cache.entries.clear();
  return cache.entries.emplace(std::make_pair(kind, p), create(kind, p)).first->second;
}

// A cached primitive bound for one thread: a dnnl::memory object per operand layout, for the
// bias and for the scratchpad, their data handles re-pointed on every run, so a steady-state run
// allocates nothing of ours (what oneDNN allocates inside each execute is out of our hands).
struct BoundConv {
  std::shared_ptr<const ConvPrimitive> c;  // keeps it alive if the shared cache starts over
  memory dense[3], chosen[3], bias, scratchpad;
};

// The calling thread's bound primitive; the shared cache is only locked on a miss. Bounded like
// the shared cache.
BoundConv& bound(ConvKind kind, const ConvProblem& p) {
  thread_local std::map<std::pair<ConvKind, ConvProblem>, BoundConv, ConvKeyLess> entries;
  auto it = entries.find(ConvKeyRef{kind, p});
  if (it != entries.end()) return it->second;
  if (entries.size() >= ConvCache::kMaxCached) entries.clear();
  BoundConv b;
  b.c = find(kind, p);
  const dnnl::engine& e = onednn_engine();
  for (int i = 0; i < 3; ++i) {
    b.dense[i] = memory(b.c->operands[i].dense, e, nullptr);
    b.chosen[i] = memory(b.c->operands[i].chosen, e, nullptr);
  }
  b.bias = memory(b.c->bias, e, nullptr);
  b.scratchpad = memory(b.c->scratchpad, e, nullptr);
  return entries.emplace(std::make_pair(kind, p), std::move(b)).first->second;
}

// Reorders `from` into `to` on the calling thread.
void reorder(const dnnl::reorder& r, const memory& from, const memory& to) {
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
  onednn_execute(r, args);
}

// One input of a primitive run: in our dense layout, or (`chosen`) already in the layout the
// primitive chose.
struct Input {
  const void* data = nullptr;
  bool chosen = false;
};

// Runs one primitive: inputs in0 and in1, output out in our dense layout, bias (may be null) as a
// dense (M) vector; element types as the primitive's operands say (conv_primitives.h).
void run(ConvKind kind, const ConvProblem& p, Input in0, Input in1, void* out, void* bias) {
  SingleThreadedOpenMp one_thread;
  try {
    BoundConv& b = bound(kind, p);
    const ConvPrimitive& c = *b.c;
    const Input data[3] = {in0, in1, {out, false}};
    std::shared_ptr<void> held[4];  // this run's scratch: reordered operands, the scratchpad
    dnnl_exec_arg_t args[5];
    int count = 0;
    for (int i = 0; i < 3; ++i) {
      const Operand& o = c.operands[i];
      void* given = const_cast<void*>(data[i].data);
      if (!o.reorder || data[i].chosen) {
        memory& m = data[i].chosen ? b.chosen[i] : b.dense[i];
        m.set_data_handle(given);
        args[count++] = {c.args[i], m.get()};
        continue;
      }
      held[i] = thread_scratch(o.slot, o.chosen.get_size());
      b.chosen[i].set_data_handle(held[i].get());
      b.dense[i].set_data_handle(given);
      if (i < 2) reorder(*o.reorder, b.dense[i], b.chosen[i]);
      args[count++] = {c.args[i], b.chosen[i].get()};
    }
    if (bias) {
      b.bias.set_data_handle(bias);
      args[count++] = {kind == ConvKind::kForward ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, b.bias.get()};
    }
    held[3] = thread_scratch(kScratchpadSlot, c.scratchpad.get_size());
    b.scratchpad.set_data_handle(held[3].get());
    args[count++] = {DNNL_ARG_SCRATCHPAD, b.scratchpad.get()};
    onednn_execute(c.primitive, std::span(args, static_cast<size_t>(count)));
    if (c.operands[2].reorder) reorder(*c.operands[2].reorder, b.chosen[2], b.dense[2]);
  } catch (const dnnl::error& err) {
    throw InternalError(fmt("oneDNN failed for ", describe(kind, p), ": ", err.what()));
  }
}

}  // namespace

ConvProblem conv_problem(const std::string& where, const ConvParams& params, const std::vector<int64_t>& x,
                         const std::vector<int64_t>& w, bool bias, DType dtype) {
  ConvProblem p{.x = x, .w = w, .y = conv_output_dims(where, params, x, w)};
  p.strides = params.strides;
  p.dilations = params.dilations;
  for (size_t i = 0; i < params.strides.size(); ++i) {
    const ConvAxis a = conv_axis(where, params, i, x[i + 2], w[i + 2]);
    p.pad_begin.push_back(a.pad_begin);
    p.pad_end.push_back(a.pad_end);
  }
  p.group = params.group;
  p.bias = bias;
  p.dtype = dtype;
  return p;
}

BatchChunks batch_chunks(int64_t n, int threads, int64_t image_outputs) {
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(n, int64_t{4} * threads));
  const int64_t least = (kMinChunkOutputs + image_outputs - 1) / std::max<int64_t>(image_outputs, 1);
  const int64_t size = std::min(std::max((n + count - 1) / count, least), std::max<int64_t>(n, 1));
  return {(n + size - 1) / size, size};
}

ConvProblem with_batch(ConvProblem p, int64_t n) {
  p.x[0] = n;
  p.y[0] = n;
  return p;
}

std::vector<ConvProblem> chunk_problems(const ConvProblem& p, const BatchChunks& chunks) {
  std::vector<ConvProblem> out{with_batch(p, chunks.size)};
  const int64_t last = p.x[0] - (chunks.count - 1) * chunks.size;
  if (last != chunks.size) out.push_back(with_batch(p, last));
  return out;
}

ConvWeights conv_weights(ConvWeightsUse use, const std::vector<ConvProblem>& chunks, const void* w) {
  const ConvKind kind = use == ConvWeightsUse::kForward ? ConvKind::kForward : ConvKind::kBackwardData;
  SingleThreadedOpenMp one_thread;
  try {
    const std::shared_ptr<const ConvPrimitive> first = bound(kind, chunks.at(0)).c;
    const Operand& o = first->operands[1];
    if (!o.reorder) return {w, false};
    for (const ConvProblem& p : chunks)
      if (bound(kind, p).c->operands[1].chosen != o.chosen) return {w, false};
    BoundConv& b = bound(kind, chunks.at(0));  // again: the lookups above may have started the cache over
    std::shared_ptr<void> out = thread_scratch(kSharedOperandSlot, o.chosen.get_size());
    b.dense[1].set_data_handle(const_cast<void*>(w));
    b.chosen[1].set_data_handle(out.get());
    reorder(*o.reorder, b.dense[1], b.chosen[1]);
    return {out.get(), true, std::move(out)};
  } catch (const dnnl::error& err) {
    throw InternalError(fmt("oneDNN failed reordering W for ", describe(kind, chunks.at(0)), ": ", err.what()));
  }
}

void conv_forward(const ConvProblem& p, const void* x, ConvWeights w, const void* b, void* y) {
  run(ConvKind::kForward, p, {x}, {w.data, w.reordered}, y, p.bias ? const_cast<void*>(b) : nullptr);
}

void conv_backward_data(const ConvProblem& p, const void* dy, ConvWeights w, void* dx) {
  run(ConvKind::kBackwardData, p, {dy}, {w.data, w.reordered}, dx, nullptr);
}

void conv_backward_weights(const ConvProblem& p, const void* dy, const void* x, float* dw, float* db) {
  run(ConvKind::kBackwardWeights, p, {dy}, {x}, dw, p.bias ? db : nullptr);
}

}  // namespace trainrt
