// Leveled logging to stderr. The level is process-wide configuration set once at start-up by
// the front end (not per-step state).
#pragma once

#include <string_view>

namespace sluice {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, std::string_view msg);

}  // namespace sluice

#define SLUICE_LOG(level, msg)                                 \
  do {                                                         \
    if (::sluice::LogLevel::level >= ::sluice::log_level())    \
      ::sluice::log_message(::sluice::LogLevel::level, (msg)); \
  } while (0)
