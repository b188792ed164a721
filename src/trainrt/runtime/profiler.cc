#include "trainrt/runtime/profiler.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "trainrt/core/error.h"

namespace trainrt {

void Profiler::enable(bool on) {
  if (on && !enabled_) origin_ = std::chrono::steady_clock::now();
  enabled_ = on;
}

int64_t Profiler::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_)
      .count();
}

static std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string Profiler::chrome_trace_json() const {
  std::ostringstream out;
  out << "{\"traceEvents\":[";
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    out << (i ? ",\n" : "\n") << "{\"name\":\"" << json_escape(e.name) << "\",\"cat\":\""
        << json_escape(e.op_type) << "\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":" << e.start_us
        << ",\"dur\":" << e.duration_us << ",\"args\":{\"op\":\"" << json_escape(e.op_type)
        << "\",\"output\":\"" << json_escape(e.shapes) << "\"}}";
    out << ",\n{\"name\":\"engine storage MiB\",\"ph\":\"C\",\"pid\":0,\"ts\":" << e.start_us + e.duration_us
        << ",\"args\":{\"live\":" << static_cast<double>(e.live_bytes) / (1 << 20) << "}}";
  }
  out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out.str();
}

void Profiler::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw Error(fmt("cannot write profile trace to '", path, "'"));
  f << chrome_trace_json();
  if (!f) throw Error(fmt("failed writing profile trace to '", path, "'"));
}

std::string Profiler::summary(int top) const {
  struct Row {
    int64_t calls = 0;
    int64_t total_us = 0;
  };
  std::map<std::string, Row> rows;
  int64_t total = 0;
  for (const Event& e : events_) {
    rows[e.op_type].calls++;
    rows[e.op_type].total_us += e.duration_us;
    total += e.duration_us;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  if (top > 0 && static_cast<int>(sorted.size()) > top) sorted.resize(static_cast<size_t>(top));
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-28s %8s %12s %10s %7s\n", "op", "calls", "total ms", "mean us", "%");
  out << line;
  for (const auto& [op, r] : sorted) {
    std::snprintf(line, sizeof(line), "%-28s %8lld %12.3f %10.1f %6.1f%%\n", op.c_str(),
                  static_cast<long long>(r.calls), r.total_us / 1e3,
                  static_cast<double>(r.total_us) / static_cast<double>(r.calls),
                  total ? 100.0 * static_cast<double>(r.total_us) / static_cast<double>(total) : 0.0);
    out << line;
  }
  return out.str();
}

}  // namespace trainrt
