// Byte movers for the data movement kernels, independent of the element type.
//
// Every Transpose, Slice, Expand and Tile is one strided_copy: the output is walked contiguously
// and each element is read from `src + sum(index[j] * strides[j])`, strides in elements and possibly
// 0 (broadcast) or negative (reversed slices). The copy first merges dims it can walk as one, then
// copies whole rows with memcpy when the innermost source stride is 1. Reshape-like kernels, Concat
// and Split use parallel_copy for their contiguous blocks. The copies keep their working dims in
// per-thread scratch, so a steady-state call allocates nothing.
//
//   // Transpose an f32 (M, N) matrix: out (N, M), out[j, i] = in[i, j].
//   strided_copy(in.raw(), out.raw(), {N, M}, {1, N}, sizeof(float), ctx.threads());
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainrt/core/thread_pool.h"

namespace trainrt {

// Row-major strides (in elements) of contiguous dims: (2, 3, 4) -> (12, 4, 1).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

// Drops size-1 dims and joins neighbours j, j+1 where strides[j] == strides[j+1] * dims[j+1]. The
// result addresses the same elements in the same order with the fewest dims (none for one element).
// In place: the vectors only shrink.
void coalesce_dims(std::vector<int64_t>& dims, std::vector<int64_t>& strides);

// dst, contiguous with `dims`, gets dst[i0, .., ik] = src[i0 * strides[0] + .. + ik * strides[k]].
void strided_copy(const void* src, void* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                  size_t elem_size, ThreadPool& pool);

// The inverse walk: src, contiguous with `dims`, is written to dst[i0 * strides[0] + .. + ik *
// strides[k]] (SliceGrad writes dY into the sliced positions of dX this way). The strides must
// address distinct elements.
void strided_scatter(const void* src, void* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     size_t elem_size, ThreadPool& pool);

// memcpy, split across the pool when large; does nothing when dst == src (in-place views).
void parallel_copy(void* dst, const void* src, size_t nbytes, ThreadPool& pool);

// Copies `rows` blocks of `row_bytes` bytes from src + r * src_stride to dst + r * dst_stride
// (strides in bytes), split across the pool when large. Concat and Split are made of these.
void copy_rows(const void* src, size_t src_stride, void* dst, size_t dst_stride, int64_t rows,
               size_t row_bytes, ThreadPool& pool);

// Rows per parallel chunk so that a chunk moves at least ~64 KiB.
int64_t rows_per_chunk(size_t row_bytes);

}  // namespace trainrt
