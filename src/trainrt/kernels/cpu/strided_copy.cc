#include "trainrt/kernels/cpu/strided_copy.h"

#include <algorithm>
#include <cstring>

#include "trainrt/core/shape.h"

namespace trainrt {
namespace {

constexpr size_t kChunkBytes = 64 * 1024;

template <typename U>
void move_strided(const std::byte* src, int64_t src_stride, std::byte* dst, int64_t dst_stride, int64_t n) {
  const U* s = reinterpret_cast<const U*>(src);
  U* d = reinterpret_cast<U*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
}

// n elements read every `src_stride` and written every `dst_stride` elements; one of the two
// strides is 1 (a gather of a row, or a scatter of one).
void move_row(const std::byte* src, int64_t src_stride, std::byte* dst, int64_t dst_stride, int64_t n,
              size_t elem_size) {
  if (src_stride == 1 && dst_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * elem_size);
    return;
  }
  switch (elem_size) {
    case 1: return move_strided<uint8_t>(src, src_stride, dst, dst_stride, n);
    case 2: return move_strided<uint16_t>(src, src_stride, dst, dst_stride, n);
    case 4: return move_strided<uint32_t>(src, src_stride, dst, dst_stride, n);
    case 8: return move_strided<uint64_t>(src, src_stride, dst, dst_stride, n);
    default: {
      const int64_t e = static_cast<int64_t>(elem_size);
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_stride * e, src + i * src_stride * e, elem_size);
    }
  }
}

}  // namespace

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

void coalesce_dims(std::vector<int64_t>& dims, std::vector<int64_t>& strides) {
  size_t kept = 0;  // dims[0, kept) and strides[0, kept) are the merged dims so far
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (kept > 0 && strides[kept - 1] == strides[i] * dims[i]) {
      dims[kept - 1] *= dims[i];
      strides[kept - 1] = strides[i];
    } else {
      dims[kept] = dims[i];
      strides[kept] = strides[i];
      ++kept;
    }
  }
  dims.resize(kept);
  strides.resize(kept);
}

int64_t rows_per_chunk(size_t row_bytes) {
  return static_cast<int64_t>(kChunkBytes / (row_bytes ? row_bytes : 1)) + 1;
}

namespace {

// Walks coalesced (dims, strides) row by row, in parallel chunks of rows: calls
// row_fn(r, offset, inner, inner_stride) for each contiguous row r (of `inner` elements) with the
// strided side's element offset of the row's first element.
template <typename RowFn>
void for_each_row(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, size_t elem_size,
                  ThreadPool& pool, RowFn&& row_fn) {
  const int64_t inner = dims.back(), inner_stride = strides.back();
  const size_t outer_rank = dims.size() - 1;
  pool.parallel_for(numel_of(dims) / inner, rows_per_chunk(static_cast<size_t>(inner) * elem_size),
                    [&](int64_t begin, int64_t end) {
    // An odometer over the outer dims, started at row `begin`, tracks the strided offset (in
    // per-thread scratch: no allocation once a thread has seen the rank).
    thread_local std::vector<int64_t> index;
    index.assign(outer_rank, 0);
    int64_t offset = 0;
    for (size_t j = outer_rank, rest = static_cast<size_t>(begin); j-- > 0;) {
      index[j] = static_cast<int64_t>(rest % static_cast<size_t>(dims[j]));
      rest /= static_cast<size_t>(dims[j]);
      offset += index[j] * strides[j];
    }
    for (int64_t r = begin; r < end; ++r) {
      row_fn(r, offset, inner, inner_stride);
      for (size_t j = outer_rank; j-- > 0;) {
        offset += strides[j];
        if (++index[j] < dims[j]) break;
        offset -= strides[j] * dims[j];
        index[j] = 0;
      }
    }
  });
}

// Moves every element between the contiguous side and the strided side (gather: src strided;
// scatter: dst strided), one row of the coalesced dims at a time.
void strided_move(const void* src, void* dst, const std::vector<int64_t>& given_dims,
                  const std::vector<int64_t>& given_strides, size_t elem_size, ThreadPool& pool, bool scatter) {
  // The calling thread's scratch (the workers only read it during the loop below).
  thread_local std::vector<int64_t> dims, strides;
  dims.assign(given_dims.begin(), given_dims.end());
  strides.assign(given_strides.begin(), given_strides.end());
  if (numel_of(dims) == 0) return;
  coalesce_dims(dims, strides);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (dims.empty()) {
    std::memcpy(d, s, elem_size);
    return;
  }
  const int64_t esize = static_cast<int64_t>(elem_size);
  for_each_row(dims, strides, elem_size, pool, [&](int64_t r, int64_t offset, int64_t inner, int64_t stride) {
    if (scatter) move_row(s + r * inner * esize, 1, d + offset * esize, stride, inner, elem_size);
    else move_row(s + offset * esize, stride, d + r * inner * esize, 1, inner, elem_size);
  });
}

}  // namespace

void strided_copy(const void* src, void* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                  size_t elem_size, ThreadPool& pool) {
  strided_move(src, dst, dims, strides, elem_size, pool, /*scatter=*/false);
}

void strided_scatter(const void* src, void* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     size_t elem_size, ThreadPool& pool) {
  strided_move(src, dst, dims, strides, elem_size, pool, /*scatter=*/true);
}

void parallel_copy(void* dst, const void* src, size_t nbytes, ThreadPool& pool) {
  if (dst == src || nbytes == 0) return;
  constexpr size_t kBlock = kChunkBytes;
  const int64_t blocks = static_cast<int64_t>((nbytes + kBlock - 1) / kBlock);
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  pool.parallel_for(blocks, 4, [&](int64_t begin, int64_t end) {
    const size_t from = static_cast<size_t>(begin) * kBlock;
    const size_t to = std::min(nbytes, static_cast<size_t>(end) * kBlock);
    std::memcpy(d + from, s + from, to - from);
  });
}

void copy_rows(const void* src, size_t src_stride, void* dst, size_t dst_stride, int64_t rows,
               size_t row_bytes, ThreadPool& pool) {
  if (rows == 0 || row_bytes == 0) return;
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (rows == 1) return parallel_copy(d, s, row_bytes, pool);
  pool.parallel_for(rows, rows_per_chunk(row_bytes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      std::memcpy(d + static_cast<size_t>(r) * dst_stride, s + static_cast<size_t>(r) * src_stride,
                  row_bytes);
  });
}

}  // namespace trainrt
