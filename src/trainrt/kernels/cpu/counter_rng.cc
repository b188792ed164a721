#include "trainrt/kernels/cpu/counter_rng.h"

#include <cmath>

namespace trainrt {
namespace {

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// splitmix64's finalizer.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

// The hash needs 64-bit vector multiplies (vpmullq, AVX-512 DQ), which TRAINRT_SIMD_CLONES'
// "avx512f" clone may not use; the x86-64-v4 clone can, and draws about 5x faster on Zen 5.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINRT_HASH_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TRAINRT_HASH_CLONES
#endif

uint64_t stream_key(uint64_t seed) { return mix64(seed); }

uint64_t keep_threshold(double ratio) {
  const double two_pow_53 = 9007199254740992.0;
  return static_cast<uint64_t>(std::ceil(ratio * two_pow_53));
}

TRAINRT_HASH_CLONES void draw_keep(uint64_t key, int64_t begin, int64_t end, uint64_t threshold, bool* keep) {
  for (int64_t i = begin; i < end; ++i)
    keep[i - begin] = (mix64(key + static_cast<uint64_t>(i + 1) * kGoldenGamma) >> 11) >= threshold;
}

TRAINRT_HASH_CLONES void draw_uniform(uint64_t key, int64_t begin, int64_t end, double* u) {
  constexpr double kScale = 1.0 / 9007199254740992.0;  // 2^-53
  for (int64_t i = begin; i < end; ++i)
    u[i - begin] = static_cast<double>(mix64(key + static_cast<uint64_t>(i + 1) * kGoldenGamma) >> 11) * kScale;
}

}  // namespace trainrt
