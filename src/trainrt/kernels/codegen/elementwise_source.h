// C++ source for the body of a FusedElementwise node (ops/fused_elementwise_schema.cc): one
// function that computes a run of n elements of every body output from n elements of every body
// input, each value of the body a register, never memory.
//
//   extern "C" void trainrt_ew_<hash>(const void* const* in, void* const* out, int64_t n);
//   // in[i]: n elements of body input i (f32, bf16 bits, or bool as bytes); out[j]: n of output j
//
// The caller positions the pointers (runs of a row, a broadcast input's repeated row, or a
// buffer holding a broadcast scalar: fused_elementwise_kernel.cc). Each op is written with the
// same expression as its interpreted kernel, over the same vector_math.h functions, so the
// generated kernel gives the same bits when compiled without FP contraction
// (compiler.cc: -ffp-contract=off). bf16 values are computed in f32 and rounded to bf16 where each
// op stores its output, as the interpreted bf16 kernels do; a Cast between f32 and bf16 is that
// rounding alone. The symbol names a hash of the function's text: equal
// bodies share one compiled function, in this process and in the disk cache.
//
//   std::string why;
//   std::optional<GeneratedFunction> f = elementwise_function(body, &why);  // nullopt: why says
#pragma once

#include <optional>
#include <string>

#include "trainrt/ir/graph.h"

namespace trainrt {

struct GeneratedFunction {
  std::string symbol;  // trainrt_ew_<16 hex digits>
  std::string source;  // the function's definition (needs kernel_prelude() before it)
};

// The function for `body`, or nullopt with the reason in *why (an op or dtype it cannot write).
std::optional<GeneratedFunction> elementwise_function(const Graph& body, std::string* why);

// What every generated unit starts with: includes, and vector_math.h's functions.
const std::string& kernel_prelude();

// FNV-1a, 64 bits, as 16 hex digits: a hash that is the same in every process (disk cache keys).
std::string stable_hash(const std::string& text);

}  // namespace trainrt
