#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace sluice {
namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
}

void set_log_level(LogLevel level) {
  g_level.store(int(level));
}
LogLevel log_level() {
  return LogLevel(g_level.load());
}

void log_message(LogLevel level, std::string_view msg) {
  static const char* const kNames[] = {"debug", "info", "warning", "error", ""};
  std::string line = std::string("sluice: ") + kNames[int(level)] + ": ";
  line.append(msg);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace sluice
