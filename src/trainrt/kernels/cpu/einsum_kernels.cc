// Einsum (ops/einsum_schema.cc, ops/einsum_equation.h). Each operand is first gathered into a
// dense copy over the labels still needed: a label repeated within the operand reads its diagonal
// (the axes' strides added), a label no other operand or the output has is summed out. The operands
// are then contracted left to right, each pair as a batched matrix product
//   A (batch, m, k) x B (batch, k, n) -> (batch, m, n)
// with batch the labels both have and the result keeps, k those both have and nothing later needs,
// m and n the rest of each (an ellipsis dim of size 1 broadcasts with stride 0). The last result is
// gathered into the output's label order. f32 and the 16-bit floats compute in f32 on the GEMM
// (16-bit results rounded once), f64 and the integers in their own type with plain loops.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "trainrt/core/error.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/gemm.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/einsum_equation.h"

namespace trainrt {
namespace {

// A strided view over a dense buffer, one entry per distinct label.
template <typename W>
struct Operand {
  std::vector<int> labels;
  std::vector<int64_t> sizes, strides;
  const W* data = nullptr;
  std::vector<W> storage;  // owns `data` for gathered operands
};

template <typename W>
int64_t find(const Operand<W>& o, int label) {
  auto it = std::find(o.labels.begin(), o.labels.end(), label);
  return it == o.labels.end() ? -1 : it - o.labels.begin();
}

// out[keep...] = sum over `sum` labels of in[...], keep and sum given as (size, stride) lists.
template <typename W>
std::vector<W> gather_sum(const W* in, const std::vector<int64_t>& keep_sizes, const std::vector<int64_t>& keep_strides,
                          const std::vector<int64_t>& sum_sizes, const std::vector<int64_t>& sum_strides) {
  const int64_t count = std::accumulate(keep_sizes.begin(), keep_sizes.end(), int64_t{1}, std::multiplies<>());
  const int64_t summed = std::accumulate(sum_sizes.begin(), sum_sizes.end(), int64_t{1}, std::multiplies<>());
  std::vector<W> out(static_cast<size_t>(count));
  const size_t kr = keep_sizes.size(), sr = sum_sizes.size();
  ThreadPool::global().parallel_for(count, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, summed)),
                                    [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(kr), sum_index(sr);
    for (int64_t r = begin; r < end; ++r) {
      int64_t rest = r, offset = 0;
      for (size_t d = kr; d-- > 0;) {
        offset += (rest % keep_sizes[d]) * keep_strides[d];
        rest /= keep_sizes[d];
      }
      W acc = W(0);
      std::fill(sum_index.begin(), sum_index.end(), 0);
      int64_t inner = 0;
      for (int64_t s = 0; s < summed; ++s) {
        acc += in[offset + inner];
        for (size_t d = sr; d-- > 0;) {
          inner += sum_strides[d];
          if (++sum_index[d] < sum_sizes[d]) break;
          inner -= sum_strides[d] * sum_sizes[d];
          sum_index[d] = 0;
        }
      }
      out[static_cast<size_t>(r)] = acc;
    }
  });
  return out;
}

// The operand over `keep` labels (in that order, sizes from `size`, broadcasting its size-1 ones),
// every other label of it summed: a dense copy.
template <typename W>
Operand<W> gathered(const Operand<W>& o, const std::vector<int>& keep, const std::vector<int64_t>& size) {
  std::vector<int64_t> ks, kst, ss, sst;
  for (int l : keep) {
    const int64_t i = find(o, l);
    ks.push_back(size[static_cast<size_t>(l)]);
    kst.push_back(i < 0 || o.sizes[static_cast<size_t>(i)] == 1 ? 0 : o.strides[static_cast<size_t>(i)]);
  }
  for (size_t i = 0; i < o.labels.size(); ++i)
    if (std::find(keep.begin(), keep.end(), o.labels[i]) == keep.end())
      ss.push_back(o.sizes[i]), sst.push_back(o.strides[i]);
  Operand<W> g;
  g.labels = keep;
  g.sizes = ks;
  g.strides.assign(keep.size(), 1);
  for (size_t d = keep.size(); d-- > 1;) g.strides[d - 1] = g.strides[d] * ks[d];
  g.storage = gather_sum<W>(o.data, ks, kst, ss, sst);
  g.data = g.storage.data();
  return g;
}

int64_t product(const std::vector<int>& labels, const std::vector<int64_t>& size) {
  int64_t p = 1;
  for (int l : labels) p *= size[static_cast<size_t>(l)];
  return p;
}

template <typename W>
void batched_product(int64_t batch, int64_t m, int64_t n, int64_t k, const W* a, const W* b, W* c) {
  if constexpr (std::is_same_v<W, float>) {
    if (k == 0) return std::fill(c, c + batch * m * n, 0.f);
    gemm_f32_batched(batch, false, false, m, n, k, 1.f, a, k, m * k, b, n, k * n, 0.f, c, n, m * n);
  } else {
    ThreadPool::global().parallel_for(batch * m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)),
                                      [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t bi = r / m, i = r % m;
        const W* arow = a + (bi * m + i) * k;
        W* crow = c + (bi * m + i) * n;
        std::fill(crow, crow + n, W(0));
        for (int64_t kk = 0; kk < k; ++kk) {
          const W av = arow[kk];
          const W* brow = b + (bi * k + kk) * n;
          for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
        }
      }
    });
  }
}

template <typename W>
Operand<W> contract(const Operand<W>& a, const Operand<W>& b, const std::vector<bool>& needed_after,
                    const std::vector<int64_t>& size) {
  std::vector<int> batch, m, n, k;
  for (int l : a.labels) {
    if (find(b, l) < 0) m.push_back(l);
    else (needed_after[static_cast<size_t>(l)] ? batch : k).push_back(l);
  }
  for (int l : b.labels)
    if (find(a, l) < 0) n.push_back(l);
  auto cat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const Operand<W> ga = gathered(a, cat(batch, m, k), size), gb = gathered(b, cat(batch, k, n), size);
  Operand<W> c;
  c.labels = cat(batch, m, n);
  for (int l : c.labels) c.sizes.push_back(size[static_cast<size_t>(l)]);
  c.strides.assign(c.labels.size(), 1);
  for (size_t d = c.labels.size(); d-- > 1;) c.strides[d - 1] = c.strides[d] * c.sizes[d];
  const int64_t nb = product(batch, size), nm = product(m, size), nn = product(n, size), nk = product(k, size);
  c.storage.resize(static_cast<size_t>(nb * nm * nn));
  if (!c.storage.empty()) batched_product<W>(nb, nm, nn, nk, ga.data, gb.data, c.storage.data());
  c.data = c.storage.data();
  return c;
}

// An element as the working type W and back: integers directly (exact past 2^53), the floats
// through element_as_double / element_from_double.
template <typename W, typename T>
W widen(T v) {
  if constexpr (std::is_integral_v<T>) return static_cast<W>(v);
  else return static_cast<W>(element_as_double(v));
}
template <typename T, typename W>
T narrow(W v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
  else return element_from_double<T>(static_cast<double>(v));
}

template <typename T>
void run_einsum(const Node& node, KernelContext& ctx) {
  using W = std::conditional_t<std::is_same_v<T, double>, double,
                               std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
  const int n = static_cast<int>(ctx.inputs.size());
  std::vector<int64_t> ranks;
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < n; ++i) ranks.push_back(ctx.in(i).rank()), dims.push_back(ctx.in(i).dims());
  const EinsumEquation e = parse_einsum(node.describe(), node.attr_string("equation", ""), ranks);
  const std::vector<int64_t> size = label_sizes(node.describe(), e, dims);
  // Each input as W (read in place when it is W already), over its distinct labels (a repeated
  // label: the diagonal, strides added).
  std::vector<std::vector<W>> widened(static_cast<size_t>(n));
  std::vector<Operand<W>> ops(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.in(i);
    Operand<W>& o = ops[static_cast<size_t>(i)];
    if constexpr (std::is_same_v<T, W>) {
      o.data = x.data<T>();
    } else {
      auto& w = widened[static_cast<size_t>(i)];
      w.resize(static_cast<size_t>(x.numel()));
      const T* src = x.data<T>();
      for (int64_t j = 0; j < x.numel(); ++j) w[static_cast<size_t>(j)] = widen<W>(src[j]);
      o.data = w.data();
    }
    int64_t stride = 1;
    std::vector<int64_t> axis_stride(static_cast<size_t>(x.rank()));
    for (int64_t a = x.rank(); a-- > 0;) axis_stride[static_cast<size_t>(a)] = stride, stride *= x.dim(a);
    for (int64_t a = 0; a < x.rank(); ++a) {
      const int l = e.operands[static_cast<size_t>(i)][static_cast<size_t>(a)];
      const int64_t at = find(o, l);
      if (at < 0) {
        o.labels.push_back(l), o.sizes.push_back(x.dim(a)), o.strides.push_back(axis_stride[static_cast<size_t>(a)]);
      } else {
        if (o.sizes[static_cast<size_t>(at)] != x.dim(a))
          throw ShapeError(fmt(node.describe(), ": the repeated label of input ", i, " spans axes of ",
                               o.sizes[static_cast<size_t>(at)], " and ", x.dim(a), " elements"));
        o.strides[static_cast<size_t>(at)] += axis_stride[static_cast<size_t>(a)];
      }
    }
  }
  // needed_from[j][l]: label l is in the output or in an operand j or later.
  std::vector<std::vector<bool>> needed_from(static_cast<size_t>(n) + 1,
                                             std::vector<bool>(static_cast<size_t>(e.num_labels), false));
  for (int l : e.output) needed_from[static_cast<size_t>(n)][static_cast<size_t>(l)] = true;
  for (int j = n; j-- > 0;) {
    needed_from[static_cast<size_t>(j)] = needed_from[static_cast<size_t>(j) + 1];
    for (int l : ops[static_cast<size_t>(j)].labels) needed_from[static_cast<size_t>(j)][static_cast<size_t>(l)] = true;
  }
  // Labels of operand j that nothing else reads are summed out before contracting.
  auto own_only = [&](int j, const std::vector<bool>& others) {
    std::vector<int> keep;
    for (int l : ops[static_cast<size_t>(j)].labels)
      if (others[static_cast<size_t>(l)]) keep.push_back(l);
    return gathered(ops[static_cast<size_t>(j)], keep, size);
  };
  std::vector<bool> beyond0 = needed_from[1];
  Operand<W> acc = own_only(0, beyond0);
  for (int j = 1; j < n; ++j) {
    std::vector<bool> others = needed_from[static_cast<size_t>(j) + 1];
    for (int l : acc.labels) others[static_cast<size_t>(l)] = true;
    const Operand<W> next = own_only(j, others);
    acc = contract(acc, next, needed_from[static_cast<size_t>(j) + 1], size);
  }
  const Operand<W> out = gathered(acc, e.output, size);
  Tensor& y = ctx.out(0);
  T* dst = y.data<T>();
  for (int64_t j = 0; j < y.numel(); ++j) dst[j] = narrow<T>(out.data[j]);
}

KernelFn make_einsum(const Node& node) {
  return [&node](KernelContext& ctx) {
    visit_dtype(ctx.in(0).dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>)
        throw UnsupportedOp(fmt(node.describe(), ": Einsum takes numbers, not bool"));
      else
        run_einsum<T>(node, ctx);
    });
  };
}

}  // namespace

void register_einsum_kernels(KernelTable& t) { t.add("", "Einsum", kNumericTypes, make_einsum); }

}  // namespace trainrt
