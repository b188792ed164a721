// `trainrt run MODEL.onnx [--dim NAME=VALUE] [--profile trace.json] [--repeat N]`: runs the model on
// random inputs of the declared shapes and prints output shapes, time and peak memory.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli_common.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/runtime/session.h"

namespace trainrt::cli {

int run_command(const Args& args) {
  if (args.positional.size() != 1)
    throw Error("usage: trainrt run MODEL.onnx [--dim NAME=VALUE]... [--profile trace.json] [--repeat N]");
  SessionOptions options;
  options.profile = args.has("--profile");
  Session session(import_onnx(args.positional[0]), options);

  auto dims = parse_dims(args);
  std::vector<Tensor> inputs;
  uint32_t seed = 0;
  for (const Value* in : session.graph().inputs()) inputs.push_back(random_input(*in, concrete_dims(*in, dims, false), seed++));
  int repeat = std::max(1, std::stoi(args.get("--repeat", "10")));

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::vector<Tensor> outputs = session.run(inputs);  // first run: plans and runs
  double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    auto t = Clock::now();
    outputs = session.run(inputs);
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  std::sort(times.begin(), times.end());

  auto names = session.output_names();
  for (size_t i = 0; i < outputs.size(); ++i) std::printf("output %s: %s\n", names[i].c_str(), describe(outputs[i]).c_str());
  std::printf("first run (plan + run): %.3f ms\n", first_ms);
  std::printf("run: median %.3f ms, min %.3f ms over %d runs\n", times[times.size() / 2], times.front(), repeat);
  MemoryStats m = session.memory_stats();
  std::printf("peak memory of intermediates: arena %s planned (lower bound %s), %s sized at run time\n",
              human_bytes(static_cast<double>(m.planned_arena_bytes)).c_str(),
              human_bytes(static_cast<double>(m.live_lower_bound)).c_str(),
              human_bytes(static_cast<double>(m.peak_dynamic_bytes)).c_str());
  if (options.profile) {
    std::string path = args.get("--profile", "trace.json");
    session.profiler().write_chrome_trace(path);
    std::printf("\nprofile (%zu events) written to %s\n%s", session.profiler().events().size(), path.c_str(),
                session.profiler().summary(15).c_str());
  }
  return 0;
}

}  // namespace trainrt::cli
