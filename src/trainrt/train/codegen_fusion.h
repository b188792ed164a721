// Elementwise fusion with generated kernels over a program the engine will run: the fusion pass
// (passes/elementwise_fusion.h) forms the groups, codegen (kernels/codegen/) compiles every
// group's function in one unit, and only the groups that compiled are fused; with no compiler
// the program keeps its unfused ops (announced once by the compiler, at WARNING).
//
// With options.debug_dir set, each fused subgraph is written there as <symbol>.txt (the ops it
// replaced, as the printer shows them) beside the unit's source (<unit>.cc, compiler.h).
//
//   PassOutcome outcome = fuse_elementwise_with_codegen(*programs.backward, options);
#pragma once

#include <set>
#include <string>

#include "trainrt/ir/graph.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/passes/pass.h"

namespace trainrt {

// Nodes reading a value named in `leave_readers_of` stay unfused (ElementwiseFusion).
PassOutcome fuse_elementwise_with_codegen(Graph& program, const CodegenOptions& options,
                                          std::set<std::string> leave_readers_of = {});

}  // namespace trainrt
