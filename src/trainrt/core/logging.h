// Leveled logging to stderr. The level is process-wide and set by the front end (DebugOptions,
// TRAINRT_LOG_LEVEL is read by the Python layer, not here: no environment globals in the engine).
//
//   TRAINRT_LOG(kInfo) << "planned " << bytes << " arena bytes";
#pragma once

#include <sstream>

namespace trainrt {

enum class LogLevel { kVerbose = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return level >= log_level(); }

// Collects one message and writes it (with a level prefix) when destroyed.
class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  std::ostream& stream() { return out_; }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

}  // namespace trainrt

#define TRAINRT_LOG(level)                                                  \
  if (!::trainrt::log_enabled(::trainrt::LogLevel::level)) {                \
  } else                                                                    \
    ::trainrt::LogMessage(::trainrt::LogLevel::level).stream()
