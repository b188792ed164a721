// Compiles generated kernels (elementwise_source.h) with the C++ compiler the build used, loads
// them with dlopen, and caches the shared objects on disk so that a second process compiles
// nothing.
//
// One call compiles a whole set of functions as one translation unit (one compiler start for a
// model's kernels: train/codegen_fusion.h passes the forward's and the backward's together). The disk cache key is a hash of that unit's text, the compiler's identity
// (its --version line), the flags and this CPU's model and feature flags (-march=native): a
// change of any of them compiles again. The cache directory and each file in it must belong to
// this user and be writable by nobody else, or the cache is not read (a shared object is code
// that would run in this process); the kernels are then compiled into a private temporary
// directory instead.
//
// A failed compile (no compiler, an error) never fails the caller: compile() answers false for
// those functions and the caller keeps the unfused ops; the reason is logged once, at WARNING.
//
//   CodegenOptions options{.cache_dir = "/home/me/.cache/trainrt/codegen"};
//   std::vector<bool> ok = compile_kernels({f1, f2}, options);
//   ElementwiseRowFn fn = find_kernel(f1.symbol);   // null when f1 did not compile
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrt/kernels/codegen/elementwise_source.h"

namespace trainrt {

using ElementwiseRowFn = void (*)(const void* const* in, void* const* out, int64_t n);

struct CodegenOptions {
  // Where compiled kernels are kept between processes; empty: $XDG_CACHE_HOME/trainrt/codegen,
  // else $HOME/.cache/trainrt/codegen.
  std::string cache_dir;
  // When set, each compiled unit's source is written there (TRAINRT_CODEGEN_DEBUG), beside what
  // the caller writes (the subgraphs).
  std::string debug_dir;
  // The compiler to run; empty: the one the build used (codegen_compiler()).
  std::string compiler;
};

// Compiles the functions not compiled yet in this process (one unit); true for each function
// that can now be found.
std::vector<bool> compile_kernels(const std::vector<GeneratedFunction>& functions, const CodegenOptions& options);

// The loaded function named `symbol`, or null.
ElementwiseRowFn find_kernel(const std::string& symbol);

// The compiler generated kernels are built with (the build's own).
std::string codegen_compiler();

// What the last compile cost and whether it came from the disk cache (for the start-up report).
struct CodegenStats {
  int64_t units_compiled = 0;   // compiler runs
  int64_t units_from_cache = 0;  // shared objects loaded from the disk cache
  double compile_seconds = 0;
};
CodegenStats codegen_stats();

}  // namespace trainrt
