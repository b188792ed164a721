#include "trainrt/train/codegen_fusion.h"

#include <filesystem>
#include <fstream>

#include "trainrt/ir/printer.h"
#include "trainrt/kernels/codegen/elementwise_source.h"
#include "trainrt/passes/elementwise_fusion.h"

namespace trainrt {

PassOutcome fuse_elementwise_with_codegen(Graph& program, const CodegenOptions& options,
                                          std::set<std::string> leave_readers_of) {
  const auto accept = [&options](const std::vector<const Graph*>& bodies) {
    std::vector<GeneratedFunction> functions;
    std::vector<int> function_of(bodies.size(), -1);
    for (size_t i = 0; i < bodies.size(); ++i) {
      std::string why;
      if (std::optional<GeneratedFunction> f = elementwise_function(*bodies[i], &why)) {
        function_of[i] = static_cast<int>(functions.size());
        functions.push_back(std::move(*f));
      }
    }
    const std::vector<bool> compiled = compile_kernels(functions, options);
    std::vector<bool> accepted(bodies.size(), false);
    for (size_t i = 0; i < bodies.size(); ++i) {
      if (function_of[i] < 0) continue;
      accepted[i] = compiled[static_cast<size_t>(function_of[i])];
      if (accepted[i] && !options.debug_dir.empty()) {
        const GeneratedFunction& f = functions[static_cast<size_t>(function_of[i])];
        std::error_code ec;
        std::filesystem::create_directories(options.debug_dir, ec);
        std::ofstream(std::filesystem::path(options.debug_dir) / (f.symbol + ".txt"))
            << print_graph(*bodies[i]) << "\n" << f.source;
      }
    }
    return accepted;
  };
  ElementwiseFusion pass(accept, std::move(leave_readers_of));
  const int64_t before = program.num_nodes();
  const bool changed = pass.apply(program);
  return {std::string(pass.name()), changed, before - program.num_nodes()};
}

}  // namespace trainrt
