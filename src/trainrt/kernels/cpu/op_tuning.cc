#include "trainrt/kernels/cpu/op_tuning.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <sstream>

#include "trainrt/core/error.h"
#include "trainrt/core/logging.h"

#ifndef TRAINRT_VERSION
#define TRAINRT_VERSION "unknown"
#endif

namespace trainrt {
namespace {

constexpr const char* kFormat = "trainrt-tuning 1";

struct Choice {
  std::string choice;
  double micros = 0;
};

struct TuningState {
  std::mutex mutex;
  TuningOptions options;
  std::map<std::string, Choice> loaded;    // from the results file
  std::map<std::string, Choice> measured;  // in this process
};

TuningState& state() {
  static TuningState& s = *new TuningState;
  return s;
}

std::atomic<bool> g_in_use{false};
std::atomic<uint64_t> g_generation{0};

void update_in_use(const TuningState& s) {
  g_in_use.store(s.options.enabled || !s.loaded.empty() || !s.measured.empty(), std::memory_order_release);
}

// The choices of the file at `path`, or none (and a warning) when it is not ours to trust.
std::map<std::string, Choice> load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};  // not written yet: tuning will write it
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TRAINRT_LOG(kWarning) << "tuning results " << path << " are not valid JSON (" << e.what() << "): ignored";
    return {};
  }
  const auto field = [&](const char* name) { return j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : ""; };
  if (!j.is_object() || field("format") != kFormat) {
    TRAINRT_LOG(kWarning) << "tuning results " << path << " are not a " << kFormat << " file: ignored";
    return {};
  }
  if (field("cpu") != tuning_cpu() || field("onednn") + " " + field("trainrt") != tuning_library_versions()) {
    TRAINRT_LOG(kWarning) << "tuning results " << path << " were measured on '" << field("cpu") << "' with oneDNN "
                          << field("onednn") << ", TrainRT " << field("trainrt") << "; this is '" << tuning_cpu()
                          << "' with " << tuning_library_versions() << ": ignored";
    return {};
  }
  std::map<std::string, Choice> choices;
  if (j.contains("choices") && j["choices"].is_object())
    for (const auto& [key, value] : j["choices"].items())
      if (value.is_object() && value.contains("choice") && value["choice"].is_string())
        choices[key] = {value["choice"].get<std::string>(), value.value("us", 0.0)};
  return choices;
}

void save(const TuningState& s) {
  const std::string& path = s.options.results_path;
  nlohmann::json j;
  j["format"] = kFormat;
  j["cpu"] = tuning_cpu();
  const std::string versions = tuning_library_versions();
  j["onednn"] = versions.substr(0, versions.find(' '));
  j["trainrt"] = versions.substr(versions.find(' ') + 1);
  nlohmann::json choices = nlohmann::json::object();
  for (const auto* from : {&s.loaded, &s.measured})
    for (const auto& [key, c] : *from) choices[key] = {{"choice", c.choice}, {"us", c.micros}};
  j["choices"] = choices;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) {
      TRAINRT_LOG(kWarning) << "cannot write tuning results to " << path;
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) TRAINRT_LOG(kWarning) << "cannot write tuning results to " << path;
}

}  // namespace

std::string tuning_cpu() {
  static const std::string cpu = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return std::string("unknown");
  }();
  return cpu;
}

std::string tuning_library_versions() {
  const dnnl_version_t* v = dnnl_version();
  return fmt(v->major, ".", v->minor, ".", v->patch, " ", TRAINRT_VERSION);
}

void set_tuning_options(const TuningOptions& options) {
  std::map<std::string, Choice> loaded = options.results_path.empty() ? std::map<std::string, Choice>{}
                                                                       : load(options.results_path);
  TuningState& s = state();
  std::lock_guard lock(s.mutex);
  s.options = options;
  s.loaded = std::move(loaded);
  update_in_use(s);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

bool tuning_in_use() { return g_in_use.load(std::memory_order_acquire); }
uint64_t tuning_generation() { return g_generation.load(std::memory_order_acquire); }

TuningOptions tuning_options() {
  TuningState& s = state();
  std::lock_guard lock(s.mutex);
  return s.options;
}

std::optional<std::string> tuned_choice(const std::string& key) {
  TuningState& s = state();
  std::lock_guard lock(s.mutex);
  for (const auto* from : {&s.measured, &s.loaded})
    if (auto it = from->find(key); it != from->end()) return it->second.choice;
  return std::nullopt;
}

void record_choice(const std::string& key, const std::string& choice, double micros) {
  TuningState& s = state();
  std::lock_guard lock(s.mutex);
  s.measured[key] = {choice, micros};
  update_in_use(s);
  if (!s.options.results_path.empty()) save(s);
}

}  // namespace trainrt
