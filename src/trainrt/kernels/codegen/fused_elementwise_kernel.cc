#include "trainrt/kernels/codegen/fused_elementwise_kernel.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "trainrt/core/error.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/host_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

// Elements per call of the generated function (and per broadcast buffer): a run's inputs and
// outputs stay in L1 / L2.
constexpr int64_t kRun = 4096;
// Elements per parallel task at least.
constexpr int64_t kTaskElements = 16384;
// Inputs, outputs and output rank the generated walk takes; more run the body's ops.
constexpr size_t kMaxArgs = 64;
constexpr size_t kMaxRank = 12;

// How the output's elements map to one input's, for one input dims signature.
struct InputWalk {
  bool varies = true;                  // along the cols (read in place) or broadcast (repeated)
  std::vector<int64_t> outer_strides;  // per outer (row) dim of the output; 0 where broadcast
  size_t element_size = 4;
};

// The walk for the current input dims (recomputed when they change).
struct Walk {
  std::vector<std::vector<int64_t>> input_dims;  // the signature it was made for
  std::vector<int64_t> outer_dims;              // the output's row dims
  int64_t rows = 0, cols = 0;
  std::vector<InputWalk> inputs;
  bool generated = false;  // the body's dims all match the output: the generated function may run
};

// Dims of `x` right-aligned to rank r, padded with leading 1s.
std::vector<int64_t> aligned(const std::vector<int64_t>& x, size_t r) {
  std::vector<int64_t> d(r - std::min(r, x.size()), 1);
  d.insert(d.end(), x.begin(), x.end());
  return d;
}

// Whether every body node's output has the output's dims for these input dims (dims broadcast
// through the body, as its elementwise ops do): only then is one walk right for the whole body.
bool body_keeps_dims(const Graph& body, const std::vector<std::vector<int64_t>>& in_dims,
                     const std::vector<int64_t>& y) {
  std::map<const Value*, std::vector<int64_t>> dims;
  for (size_t i = 0; i < body.inputs().size(); ++i) dims[body.inputs()[i]] = in_dims[i];
  for (const Value* v : body.initializers()) dims[v] = v->data.dims();
  for (const Node* n : body.topological_order()) {
    std::vector<int64_t> d;
    for (const Value* in : n->inputs()) {
      if (n->op_type() == "Pow" && in == n->input(1)) continue;  // the constant exponent
      d = broadcast_dims(d, dims.at(in));  // () against any dims gives those dims
    }
    if (d != y) return false;
    dims[n->output(0)] = d;
  }
  return true;
}

Walk make_walk(const Graph& body, const std::vector<std::vector<int64_t>>& in_dims, const std::vector<int64_t>& y,
               const std::vector<DType>& dtypes) {
  Walk w;
  w.input_dims = in_dims;
  const size_t r = y.size();
  std::vector<std::vector<int64_t>> x;
  for (const auto& d : in_dims) x.push_back(aligned(d, r));
  // The longest suffix of dims along which every input varies on all (has the output's dims) or
  // on none (1s); `varies` says which, per input.
  size_t suffix = r;
  std::vector<bool> varies(x.size(), true);
  for (; suffix > 0; --suffix) {
    bool ok = true;
    for (size_t i = 0; i < x.size(); ++i) {
      bool all = true, none = true;
      for (size_t k = r - suffix; k < r; ++k) {
        all = all && x[i][k] == y[k];
        none = none && x[i][k] == 1;
      }
      ok = ok && (all || none);
      varies[i] = all;
    }
    if (ok) break;
  }
  w.cols = 1;
  for (size_t k = r - suffix; k < r; ++k) w.cols *= y[k];
  w.outer_dims.assign(y.begin(), y.end() - static_cast<std::ptrdiff_t>(suffix));
  w.rows = 1;
  for (int64_t d : w.outer_dims) w.rows *= d;
  for (size_t i = 0; i < x.size(); ++i) {
    InputWalk in;
    in.element_size = dtype_size(dtypes[i]);
    in.varies = varies[i];
    std::vector<int64_t> strides(r, 0);
    int64_t s = 1;
    for (size_t k = r; k-- > 0;) {
      strides[k] = x[i][k] == 1 ? 0 : s;
      s *= x[i][k];
    }
    in.outer_strides.assign(strides.begin(), strides.begin() + static_cast<std::ptrdiff_t>(r - suffix));
    w.inputs.push_back(std::move(in));
  }
  w.generated = body_keeps_dims(body, in_dims, y);
  return w;
}

// The body's ops one after another through the CPU kernels: the path where no generated function
// can run (no compiler, dims the generated walk does not cover).
void run_unfused(const Graph& body, const std::string& node, KernelContext& ctx) {
  std::map<const Value*, Tensor> values;
  for (size_t i = 0; i < body.inputs().size(); ++i) values[body.inputs()[i]] = ctx.in(static_cast<int>(i));
  for (const Value* v : body.initializers()) values[v] = v->data;
  for (const Node* n : body.topological_order()) {
    NodeSpec spec;
    spec.op = n->op_type();
    spec.domain = n->domain();
    spec.attrs = n->attrs();
    spec.opset = n->opset();
    std::vector<Tensor> in;
    for (const Value* v : n->inputs()) in.push_back(values.at(v));
    values[n->output(0)] = run_node(spec, in, cpu_kernel_table())[0];
  }
  for (size_t j = 0; j < body.outputs().size(); ++j) {
    const Tensor& v = values.at(body.outputs()[j]);
    Tensor& y = ctx.out(static_cast<int>(j));
    if (v.dims() != y.dims())
      throw ShapeError(fmt(node, ": body output ", j, " has dims ", to_string(v.dims()), ", expected ",
                           to_string(y.dims())));
    std::memcpy(y.raw(), v.raw(), y.nbytes());
  }
}

// Runs fn over run `item` of the walk: row item / runs_per_row, columns from (item % runs_per_row) * kRun.
void run_item(ElementwiseRowFn fn, const Walk& w, KernelContext& ctx, int64_t item, int64_t runs_per_row) {
  thread_local std::vector<float> buffers;  // keeps its largest size: no steady-state allocation
  const size_t n_in = w.inputs.size(), n_out = static_cast<size_t>(ctx.outputs.size());
  if (buffers.size() < n_in * kRun) buffers.resize(n_in * kRun);
  const void* in[kMaxArgs];
  void* out[kMaxArgs];
  const int64_t row = item / runs_per_row, c0 = (item % runs_per_row) * kRun, n = std::min(kRun, w.cols - c0);
  // The row's offset into each input (its index over the outer dims, from the last).
  std::array<int64_t, kMaxRank> index;
  int64_t rest = row;
  const size_t outer = w.outer_dims.size();
  for (size_t k = outer; k-- > 0;) {
    index[k] = rest % w.outer_dims[k];
    rest /= w.outer_dims[k];
  }
  for (size_t i = 0; i < n_in; ++i) {
    const InputWalk& iw = w.inputs[i];
    int64_t offset = 0;
    for (size_t k = 0; k < outer; ++k) offset += index[k] * iw.outer_strides[k];
    const auto* base = static_cast<const unsigned char*>(ctx.in(static_cast<int>(i)).raw());
    if (iw.varies) {
      in[i] = base + static_cast<size_t>(offset + c0) * iw.element_size;
    } else {
      float* buffer = buffers.data() + i * kRun;
      if (iw.element_size == 4) {
        std::fill(buffer, buffer + n, reinterpret_cast<const float*>(base)[offset]);
      } else if (iw.element_size == 2) {
        auto* half = reinterpret_cast<uint16_t*>(buffer);
        std::fill(half, half + n, reinterpret_cast<const uint16_t*>(base)[offset]);
      } else {
        std::memset(buffer, base[offset], static_cast<size_t>(n));
      }
      in[i] = buffer;
    }
  }
  for (size_t j = 0; j < n_out; ++j) {
    Tensor& y = ctx.out(static_cast<int>(j));
    out[j] = static_cast<unsigned char*>(y.raw()) + static_cast<size_t>(row * w.cols + c0) * dtype_size(y.dtype());
  }
  fn(in, out, n);
}

struct FusedKernel {
  std::shared_ptr<const Graph> body;
  ElementwiseRowFn fn = nullptr;
  std::vector<DType> dtypes;
  std::string node;  // node.describe(), for errors
  std::mutex mutex;  // guards walk (a plan's kernels may run in two sessions' threads)
  std::shared_ptr<const Walk> walk;

  std::shared_ptr<const Walk> walk_for(const KernelContext& ctx) {
    std::lock_guard lock(mutex);
    bool same = walk && walk->input_dims.size() == ctx.inputs.size();
    for (size_t i = 0; same && i < ctx.inputs.size(); ++i) same = walk->input_dims[i] == ctx.in(static_cast<int>(i)).dims();
    if (!same) {
      std::vector<std::vector<int64_t>> dims;
      for (size_t i = 0; i < ctx.inputs.size(); ++i) dims.push_back(ctx.in(static_cast<int>(i)).dims());
      walk = std::make_shared<const Walk>(make_walk(*body, dims, ctx.out(0).dims(), dtypes));
    }
    return walk;
  }

  void operator()(KernelContext& ctx) {
    if (!fn || ctx.inputs.size() > kMaxArgs || ctx.outputs.size() > kMaxArgs || ctx.out(0).rank() > static_cast<int64_t>(kMaxRank))
      return run_unfused(*body, node, ctx);
    const std::shared_ptr<const Walk> w = walk_for(ctx);
    if (!w->generated) return run_unfused(*body, node, ctx);
    if (w->rows == 0 || w->cols == 0) return;
    const int64_t runs_per_row = (w->cols + kRun - 1) / kRun, items = w->rows * runs_per_row;
    const int64_t per_item = std::min(w->cols, kRun);
    const int64_t grain = std::max<int64_t>(1, kTaskElements / per_item);
    if (items <= grain) {
      for (int64_t i = 0; i < items; ++i) run_item(fn, *w, ctx, i, runs_per_row);
      return;
    }
    ctx.threads().parallel_for(items, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) run_item(fn, *w, ctx, i, runs_per_row);
    });
  }
};

KernelFn make_fused_elementwise(const Node& node) {
  const Attribute* body = node.attr("body");
  if (!body || body->kind != Attribute::Kind::kGraph || !body->g)
    throw InvalidModel(fmt(node.describe(), ": has no graph attribute 'body'"));
  auto kernel = std::make_shared<FusedKernel>();
  kernel->body = body->g;
  kernel->node = node.describe();
  for (const Value* v : body->g->inputs()) kernel->dtypes.push_back(v->dtype);
  std::string why;
  if (std::optional<GeneratedFunction> f = elementwise_function(*body->g, &why)) {
    kernel->fn = find_kernel(f->symbol);
    if (!kernel->fn && compile_kernels({*f}, CodegenOptions{})[0]) kernel->fn = find_kernel(f->symbol);
  }
  return [kernel](KernelContext& ctx) { (*kernel)(ctx); };
}

}  // namespace

void register_codegen_kernels(KernelTable& table) {
  table.add(kTrainrtDomain, "FusedElementwise", dtype_bit(DType::kF32) | dtype_bit(DType::kBF16) | dtype_bit(DType::kBool),
            make_fused_elementwise);
}

const KernelTable& engine_kernel_table() {
  // Added to the CPU table itself (as the binding layer adds PythonOp): one table, whoever asks.
  static const bool added = [] {
    add_host_kernel(kTrainrtDomain, "FusedElementwise", DType::kF32, make_fused_elementwise);
    add_host_kernel(kTrainrtDomain, "FusedElementwise", DType::kBool, make_fused_elementwise);
    add_host_kernel(kTrainrtDomain, "FusedElementwise", DType::kBF16, make_fused_elementwise);
    return true;
  }();
  (void)added;
  return cpu_kernel_table();
}

}  // namespace trainrt
