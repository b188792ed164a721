#include "trainrt/core/logging.h"

#include <atomic>
#include <cstdio>

namespace trainrt {

static std::atomic<LogLevel> g_level{LogLevel::kWarning};

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }

LogMessage::~LogMessage() {
  static constexpr const char* kPrefix[] = {"V", "I", "W", "E", "F"};
  std::string text = out_.str();
  std::fprintf(stderr, "[trainrt %s] %s\n", kPrefix[static_cast<int>(level_)], text.c_str());
}

}  // namespace trainrt
