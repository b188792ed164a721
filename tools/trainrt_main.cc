// The `trainrt` command-line tool: inspect and run ONNX models with the engine, no Python needed.
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli_common.h"
#include "trainrt/core/error.h"

namespace {

constexpr const char* kUsage =
    "usage: trainrt <command> [args]\n"
    "  inspect MODEL.onnx [--dim NAME=VALUE]...   op histogram, parameters, shapes, planned memory\n"
    "  run MODEL.onnx [--dim NAME=VALUE]... [--profile trace.json] [--repeat N]\n"
    "                                             run on random inputs: output shapes, time, memory\n"
    "  train MODEL.onnx --data DATA.safetensors --input NAME --label NAME --loss cross_entropy|mse\n"
    "        --optimizer sgd|adamw --lr LR --batch B --steps N [--weight-decay W] [--no-shuffle] [--save DIR] [--codegen]\n"
    "                                             train from C++ alone (see trainrt train --help)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  try {
    std::string command = argv[1];
    auto args = trainrt::cli::parse_args(argc, argv, 2, {"--no-shuffle", "--codegen"});
    if (command == "inspect") return trainrt::cli::inspect_command(args);
    if (command == "run") return trainrt::cli::run_command(args);
    if (command == "train") return trainrt::cli::train_command(args);
    std::fprintf(stderr, "trainrt: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const trainrt::Error& e) {
    std::fprintf(stderr, "trainrt: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrt: internal error: %s\n", e.what());
    return 1;
  }
}
