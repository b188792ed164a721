// Elementwise fusion with generated kernels over a program the engine will run: the fusion pass
// (passes/elementwise_fusion.h) forms the groups, codegen (kernels/codegen/) compiles every
// group's function in one unit, and only the groups that compiled are fused; with no compiler
// the program keeps its unfused ops (announced once by the compiler, at WARNING).
//
// With options.debug_dir set, each fused subgraph is written there as <symbol>.txt (the ops it
// replaced, as the printer shows them) beside the unit's source (<unit>.cc, compiler.h).
//
//   auto outcomes = fuse_elementwise_with_codegen({{forward.get()}, {backward.get(), {"dlogits"}}}, options);
#pragma once

#include <set>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/passes/pass.h"

namespace trainrt {

struct CodegenProgram {
  Graph* graph;
  std::set<std::string> leave_readers_of;  // nodes reading these stay unfused (ElementwiseFusion)
};

// Fuses each program's groups whose functions compiled: the functions of all the programs are
// compiled as one unit (one compiler run). One outcome per program, in order.
std::vector<PassOutcome> fuse_elementwise_with_codegen(const std::vector<CodegenProgram>& programs,
                                                       const CodegenOptions& options);

}  // namespace trainrt
