// CPU kernels of Transpose, Expand and Tile: each is one strided read of the input into the
// contiguous output (strided_copy.h), with a tiled fast path for transposes that swap the two
// innermost (merged) axes: 2-D, batched (0, 2, 1), NCHW <-> NHWC.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// out (batch, rows, cols) with out[b, i, j] = src[offset(b) + j * rows + i]: each batch is the
// transpose of a contiguous (cols, rows) source matrix. The work is split into bands of kTile
// output rows. A full kTile x kTile tile is read row by row from the source into a buffer on the
// stack and written out row by row, so both sides stream whole cache lines and each tile touches
// only kTile source and kTile output rows (power-of-two strides otherwise thrash cache sets and
// the TLB); measured 1.5-3x faster than a direct tiled loop on 768 x 3072 and 4096 x 4096 f32.
template <typename U>
void tiled_transpose(const U* src, U* dst, std::span<const int64_t> batch_dims,
                     std::span<const int64_t> batch_strides, int64_t rows, int64_t cols, ThreadPool& pool) {
  constexpr int64_t kTile = sizeof(U) <= 4 ? 64 : 32;  // a buffer of at most 16 KiB
  const int64_t bands = (rows + kTile - 1) / kTile;
  int64_t batches = 1;
  for (int64_t d : batch_dims) batches *= d;
  pool.parallel_for(batches * bands, 1 + 16384 / (kTile * cols), [&](int64_t begin, int64_t end) {
    alignas(64) U tile[kTile][kTile];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / bands, i0 = (task % bands) * kTile, i1 = std::min(rows, i0 + kTile);
      int64_t offset = 0;
      for (size_t k = batch_dims.size(), rest = static_cast<size_t>(b); k-- > 0;) {
        offset += static_cast<int64_t>(rest % static_cast<size_t>(batch_dims[k])) * batch_strides[k];
        rest /= static_cast<size_t>(batch_dims[k]);
      }
      const U* s = src + offset;
      U* d = dst + b * rows * cols;
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        if (i1 - i0 < kTile || j1 - j0 < kTile) {  // edge tile: direct
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) d[i * cols + j] = s[j * rows + i];
          continue;
        }
        for (int64_t j = 0; j < kTile; ++j)
          for (int64_t i = 0; i < kTile; ++i) tile[i][j] = s[(j0 + j) * rows + i0 + i];
        for (int64_t i = 0; i < kTile; ++i)
          std::memcpy(d + (i0 + i) * cols + j0, tile[i], sizeof(tile[i]));
      }
    }
  });
}

// Runs the tiled path when the merged copy swaps the two innermost axes of a contiguous block.
bool try_tiled_transpose(const void* src, void* dst, std::span<const int64_t> dims,
                         std::span<const int64_t> strides, size_t elem_size, ThreadPool& pool) {
  const size_t r = dims.size();
  if (r < 2 || strides[r - 2] != 1 || strides[r - 1] != dims[r - 2]) return false;
  const auto batch_dims = dims.first(r - 2), batch_strides = strides.first(r - 2);
  const int64_t rows = dims[r - 2], cols = dims[r - 1];
  const auto run = [&]<typename U>() {
    tiled_transpose(static_cast<const U*>(src), static_cast<U*>(dst), batch_dims, batch_strides, rows, cols,
                    pool);
    return true;
  };
  switch (elem_size) {
    case 1: return run.operator()<uint8_t>();
    case 2: return run.operator()<uint16_t>();
    case 4: return run.operator()<uint32_t>();
    case 8: return run.operator()<uint64_t>();
    default: return false;
  }
}

// A node's strided read (strided_copy.h) for one input and output shape: the output dims walked
// and the source strides. Kept for the next run (a node's kernel runs one call at a time), so a
// run with the last run's shapes allocates nothing.
struct StridedWalk {
  bool made = false;
  std::vector<int64_t> in_dims, out_dims;  // the shapes it was made for
  std::vector<int64_t> dims, strides;

  // Remakes the walk with make(in_strides, dims, strides) (dims and strides cleared, in_strides
  // the input's contiguous strides) when the shapes are not the last run's.
  template <typename Make>
  void update(const Tensor& in, const Tensor& out, Make&& make) {
    if (made && in_dims == in.dims() && out_dims == out.dims()) return;
    made = false;
    dims.clear(), strides.clear();
    make(contiguous_strides(in.dims()), dims, strides);
    in_dims = in.dims(), out_dims = out.dims();
    made = true;
  }
};

// Output axis j walks input axis perm[j] (default: reversed axes), so its source stride is the
// input stride of perm[j]. Permutations whose innermost axis stays innermost, like attention's
// (0, 2, 1, 3) on (batch, seq, heads, head_dim), copy whole head_dim rows with memcpy.
KernelFn make_transpose(const Node& node) {
  const std::vector<int64_t> perm_attr = node.attr_ints("perm", {});
  return [perm_attr, walk = StridedWalk()](KernelContext& ctx) mutable {
    const Tensor& in = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.numel() == 0) return;
    walk.update(in, out, [&](const std::vector<int64_t>& in_strides, std::vector<int64_t>& dims,
                             std::vector<int64_t>& strides) {
      dims = out.dims();
      for (size_t j = 0; j < dims.size(); ++j) {
        const int64_t p = perm_attr.empty() ? static_cast<int64_t>(dims.size() - 1 - j) : perm_attr[j];
        strides.push_back(in_strides[static_cast<size_t>(p)]);
      }
      coalesce_dims(dims, strides);
    });
    const size_t es = dtype_size(in.dtype());
    if (!try_tiled_transpose(in.raw(), out.raw(), walk.dims, walk.strides, es, ctx.threads()))
      strided_copy(in.raw(), out.raw(), walk.dims, walk.strides, es, ctx.threads());
  };
}

// Expand: numpy broadcast of the input to the output dims; broadcast axes read with stride 0.
KernelFn make_expand(const Node&) {
  return [walk = StridedWalk()](KernelContext& ctx) mutable {
    const Tensor& in = ctx.in(0);
    Tensor& out = ctx.out(0);
    walk.update(in, out, [&](const std::vector<int64_t>& in_strides, std::vector<int64_t>& dims,
                             std::vector<int64_t>& strides) {
      dims = out.dims();
      strides.assign(static_cast<size_t>(out.rank()), 0);
      const int64_t lead = out.rank() - in.rank();
      for (int64_t k = 0; k < in.rank(); ++k)
        if (in.dim(k) != 1) strides[static_cast<size_t>(lead + k)] = in_strides[static_cast<size_t>(k)];
    });
    strided_copy(in.raw(), out.raw(), walk.dims, walk.strides, dtype_size(in.dtype()), ctx.threads());
  };
}

// Tile: output axis k of size rep_k * d_k is walked as (rep_k, d_k), reading the input axis with
// stride 0 for the repeat and its own stride inside.
KernelFn make_tile(const Node&) {
  return [walk = StridedWalk()](KernelContext& ctx) mutable {
    const Tensor& in = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.numel() == 0) return;
    walk.update(in, out, [&](const std::vector<int64_t>& in_strides, std::vector<int64_t>& dims,
                             std::vector<int64_t>& strides) {
      for (int64_t k = 0; k < in.rank(); ++k) {
        dims.insert(dims.end(), {out.dim(k) / in.dim(k), in.dim(k)});
        strides.insert(strides.end(), {0, in_strides[static_cast<size_t>(k)]});
      }
    });
    strided_copy(in.raw(), out.raw(), walk.dims, walk.strides, dtype_size(in.dtype()), ctx.threads());
  };
}

}  // namespace

void register_transpose_kernels(KernelTable& t) {
  t.add("", "Transpose", DType::kUndefined, make_transpose);
  t.add("", "Expand", DType::kUndefined, make_expand);
  t.add("", "Tile", DType::kUndefined, make_tile);
}

}  // namespace trainrt
