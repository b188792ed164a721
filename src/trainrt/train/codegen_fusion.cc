#include "trainrt/train/codegen_fusion.h"

#include <filesystem>
#include <fstream>

#include "trainrt/ir/printer.h"
#include "trainrt/kernels/codegen/elementwise_source.h"
#include "trainrt/passes/elementwise_fusion.h"

namespace trainrt {
namespace {

// The generated function of each body (nullopt where the generator cannot write it).
std::vector<std::optional<GeneratedFunction>> functions_of(const std::vector<const Graph*>& bodies) {
  std::vector<std::optional<GeneratedFunction>> out;
  for (const Graph* body : bodies) {
    std::string why;
    out.push_back(elementwise_function(*body, &why));
  }
  return out;
}

}  // namespace

std::vector<PassOutcome> fuse_elementwise_with_codegen(const std::vector<CodegenProgram>& programs,
                                                       const CodegenOptions& options) {
  // First the groups of every program, fused nowhere yet: their functions compile as one unit.
  std::vector<GeneratedFunction> functions;
  const auto collect = [&](const std::vector<const Graph*>& bodies) {
    for (std::optional<GeneratedFunction>& f : functions_of(bodies))
      if (f) functions.push_back(std::move(*f));
    return std::vector<bool>(bodies.size(), false);
  };
  for (const CodegenProgram& p : programs) ElementwiseFusion(collect, p.leave_readers_of).apply(*p.graph);
  compile_kernels(functions, options);
  // Then the same groups again, each fused where its function was compiled.
  const auto accept = [&options](const std::vector<const Graph*>& bodies) {
    const std::vector<std::optional<GeneratedFunction>> fs = functions_of(bodies);
    std::vector<bool> accepted(bodies.size(), false);
    for (size_t i = 0; i < bodies.size(); ++i) {
      accepted[i] = fs[i] && find_kernel(fs[i]->symbol) != nullptr;
      if (accepted[i] && !options.debug_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(options.debug_dir, ec);
        std::ofstream(std::filesystem::path(options.debug_dir) / (fs[i]->symbol + ".txt"))
            << print_graph(*bodies[i]) << "\n" << fs[i]->source;
      }
    }
    return accepted;
  };
  std::vector<PassOutcome> report;
  for (const CodegenProgram& p : programs) {
    ElementwiseFusion pass(accept, p.leave_readers_of);
    const int64_t before = p.graph->num_nodes();
    const bool changed = pass.apply(*p.graph);
    report.push_back({std::string(pass.name()), changed, before - p.graph->num_nodes()});
  }
  return report;
}

}  // namespace trainrt
