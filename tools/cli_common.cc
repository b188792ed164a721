#include "cli_common.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "trainrt/core/error.h"

namespace trainrt::cli {

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() || it->second.empty() ? fallback : it->second.back();
}

Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& flags) {
  Args args;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      args.positional.push_back(a);
      continue;
    }
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      args.options[a.substr(0, eq)].push_back(a.substr(eq + 1));
    } else if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
      args.options[a].push_back("1");
    } else {
      if (i + 1 >= argc) throw Error(fmt("option ", a, " needs a value"));
      args.options[a].push_back(argv[++i]);
    }
  }
  return args;
}

std::map<std::string, int64_t> parse_dims(const Args& args) {
  std::map<std::string, int64_t> dims;
  auto it = args.options.find("--dim");
  if (it == args.options.end()) return dims;
  for (const std::string& kv : it->second) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw Error(fmt("--dim expects NAME=VALUE, got '", kv, "'"));
    try {
      dims[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
    } catch (const std::exception&) {
      throw Error(fmt("--dim ", kv, ": value is not an integer"));
    }
  }
  return dims;
}

std::vector<int64_t> concrete_dims(const Value& input, const std::map<std::string, int64_t>& dims,
                                   bool default_to_one) {
  if (!input.shape.rank_known)
    throw ShapeError(fmt("input '", input.name, "' has unknown rank; cannot make an example input"));
  std::vector<int64_t> out;
  for (const Dim& d : input.shape.dims) {
    if (d.is_static()) {
      out.push_back(d.value);
      continue;
    }
    auto it = dims.find(d.symbol);
    if (it != dims.end()) {
      out.push_back(it->second);
    } else if (default_to_one) {
      out.push_back(1);
    } else {
      throw ShapeError(fmt("input '", input.name, "' has dynamic dim '", d.symbol.empty() ? "?" : d.symbol,
                           "': give it with --dim ", d.symbol.empty() ? "NAME" : d.symbol, "=VALUE"));
    }
  }
  return out;
}

Tensor random_input(const Value& input, const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = Tensor::empty(input.dtype, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  visit_dtype(input.dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) p[i] = static_cast<T>(uniform(rng));
      else if constexpr (std::is_same_v<T, Half>) p[i] = Half{f32_to_f16(uniform(rng))};
      else if constexpr (std::is_same_v<T, BFloat16>) p[i] = BFloat16{f32_to_bf16(uniform(rng))};
      else if constexpr (std::is_same_v<T, bool>) p[i] = (rng() & 1) != 0;
      else p[i] = static_cast<T>(rng() % 4);
    }
  });
  return t;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

}  // namespace trainrt::cli
