#include "trainrt/kernels/cpu/elementwise.h"

#include <cstring>

namespace trainrt {

void copy_bytes(void* dst, const void* src, size_t nbytes, ThreadPool& pool) {
  if (dst == src || nbytes == 0) return;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Parallel in 64 KiB pieces: one core does not saturate memory bandwidth on its own.
  constexpr int64_t kPiece = 65536;
  const int64_t pieces = static_cast<int64_t>((nbytes + kPiece - 1) / kPiece);
  auto copy = [&](int64_t begin, int64_t end) {
    const size_t from = static_cast<size_t>(begin * kPiece);
    const size_t to = std::min(nbytes, static_cast<size_t>(end * kPiece));
    std::memcpy(d + from, s + from, to - from);
  };
  if (pieces < 4) copy(0, pieces);
  else pool.parallel_for(pieces, 2, copy);
}

}  // namespace trainrt
