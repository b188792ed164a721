// Per-node timing of session runs: a Chrome trace (chrome://tracing, Perfetto) and an op-type summary.
// The trace also carries an "engine storage MiB" counter: the engine's tensor storage live after each
// node (storage_bytes: arenas, saved values, gradients), so a step's memory peak shows its node.
//
//   Profiler& p = session.profiler();
//   p.enable(true);
//   session.run(inputs);
//   p.write_chrome_trace("trace.json");
//   std::cout << p.summary();            // op type, calls, total ms, share of time
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trainrt {

class Profiler {
 public:
  struct Event {
    std::string name;     // node name
    std::string op_type;  // node op
    int64_t start_us;     // since the profiler was enabled
    int64_t duration_us;
    std::string shapes;   // output dtype and dims, for the trace's args
    size_t live_bytes = 0;  // engine storage live when the node ended (storage_bytes().live)
  };

  void enable(bool on);
  bool enabled() const { return enabled_; }
  void clear() { events_.clear(); }
  int64_t now_us() const;
  void record(Event e) { events_.push_back(std::move(e)); }
  const std::vector<Event>& events() const { return events_; }

  // Chrome trace event format ("X" complete events); throws Error naming the path on I/O failure.
  void write_chrome_trace(const std::string& path) const;
  std::string chrome_trace_json() const;
  // Table of op types sorted by total time: calls, total ms, mean us, percent.
  std::string summary(int top = 0) const;

 private:
  bool enabled_ = false;
  std::chrono::steady_clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace trainrt
