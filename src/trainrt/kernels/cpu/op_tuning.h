// Op tuning: an op with several implementations measures them online on its real shapes, within a
// time budget, and keeps the fastest; the choices can be saved to a JSON file and read back by
// later runs, which then measure nothing (ORTModule's ENABLE_TUNING, MAX_TUNING_DURATION_MS and
// TUNING_RESULTS_PATH; the front end sets the options, process-wide, as it sets the log level).
//
// A choice is keyed by the op's problem in words (op, dtypes, shapes, threads). The file also
// records what the timings depend on: this CPU's model, the oneDNN version and TrainRT's; a file
// made elsewhere (another CPU, another library) or malformed is ignored with a warning, never
// trusted.
//
//   set_tuning_options({.enabled = true, .max_ms = 30, .results_path = "tuning.json"});
//   std::string key = "gemm f32 NN m=1024 n=768 k=256 ...";
//   if (auto choice = tuned_choice(key)) use(*choice);
//   else if (tuning_options().enabled) record_choice(key, measure_candidates(...), micros);  // saves the file
//
//   {
//     "format": "trainrt-tuning 1", "cpu": "AMD ...", "onednn": "2.7.3", "trainrt": "0.2.0",
//     "choices": {"gemm f32 NN m=1024 ...": {"choice": "columns 128", "us": 812.5}}
//   }
#pragma once

#include <optional>
#include <string>

namespace trainrt {

struct TuningOptions {
  bool enabled = false;      // measure the implementations of problems met for the first time
  double max_ms = 30;        // measuring budget per problem
  std::string results_path;  // read when set (tuning or not); written after each new choice when tuning
};

// Sets the options and, when results_path names a file, loads its choices (a foreign or malformed
// file is ignored, with a warning). Safe to call again: the options and the loaded choices are
// replaced; choices measured in this process are kept.
void set_tuning_options(const TuningOptions& options);
TuningOptions tuning_options();
// Whether any choice can exist (tuning on, or choices loaded or measured): when not, an op takes
// its default at once. Lock-free, for hot paths.
bool tuning_in_use();
// Changes whenever set_tuning_options runs: a cache of choices made under an older value is stale.
uint64_t tuning_generation();

// The choice for `key` (loaded or measured), if any.
std::optional<std::string> tuned_choice(const std::string& key);
// Records a measured choice and, with a results path, rewrites the file (through a temporary file
// and a rename: a reader never sees half of it).
void record_choice(const std::string& key, const std::string& choice, double micros);

// What the file must match: this CPU's model, the oneDNN and TrainRT versions.
std::string tuning_cpu();
std::string tuning_library_versions();

}  // namespace trainrt
