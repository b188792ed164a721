// Shared pieces of the `trainrt` command-line tool: argument parsing and random inputs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt::cli {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // "--dim" -> {"batch=4", ...}
  bool has(const std::string& name) const { return options.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
};

// Parses `--name value` and `--name=value`; flags listed in `flags` take no value.
Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& flags);

// NAME=VALUE pairs from --dim, applied to symbolic input dims (unnamed or unlisted dims are 1).
std::map<std::string, int64_t> parse_dims(const Args& args);

// Concrete dims for a graph input; throws ShapeError naming the input when a symbol has no value.
std::vector<int64_t> concrete_dims(const Value& input, const std::map<std::string, int64_t>& dims,
                                   bool default_to_one);

// Deterministic random data of the input's dtype (floats in [-1, 1), integers in [0, 4), bools).
Tensor random_input(const Value& input, const std::vector<int64_t>& dims, uint32_t seed);

std::string human_bytes(double bytes);

int inspect_command(const Args& args);
int run_command(const Args& args);
int train_command(const Args& args);

}  // namespace trainrt::cli
