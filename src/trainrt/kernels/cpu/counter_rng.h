// Counter-based random numbers shared by the ops that drop elements (Dropout, and the dropout
// inside ScaledDotProductAttention) and the random ops (RandomUniformLike, Bernoulli, ...).
//
// Element i of the stream keyed by a seed draws its 53-bit uniform from splitmix64's output for
// index i (Steele, Lea, Flood: "Fast splittable pseudorandom number generators"). Any element can
// be drawn alone: parallel chunks draw exactly what a serial loop would, whatever the thread count,
// and a backward pass regenerates the forward's mask from the seed instead of storing it.
//
//   const uint64_t key = stream_key(seed);
//   bool keep[64];
//   draw_keep(key, 1000, 1064, keep_threshold(0.1), keep);   // flags of elements 1000..1063
#pragma once

#include <cstdint>

namespace trainrt {

// The stream of a seed.
uint64_t stream_key(uint64_t seed);
// The integer threshold of a drop probability: element i is kept when its 53-bit uniform is at
// or above ceil(ratio * 2^53).
uint64_t keep_threshold(double ratio);
// keep[i - begin] = whether element i of the stream is kept, for i in [begin, end).
void draw_keep(uint64_t key, int64_t begin, int64_t end, uint64_t threshold, bool* keep);
// u[i - begin] = element i's uniform in [0, 1) (53 bits), for i in [begin, end).
void draw_uniform(uint64_t key, int64_t begin, int64_t end, double* u);

}  // namespace trainrt
