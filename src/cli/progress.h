// A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal
// (logs and tests stay clean).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sluice::cli {

std::string human_bytes(double bytes);  // "1.25 GiB" (defined in cmd_info.cpp)

class ProgressBar {
 public:
  // `unit`: what is counted, shown after the counts ("windows"); empty: bytes (human_bytes).
  explicit ProgressBar(std::string label, std::string unit = {})
      : label_(std::move(label)),
        unit_(std::move(unit)),
        tty_(::isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  // `note`: shown after the time (e.g. a running estimate).
  void update(uint64_t done, uint64_t total, const std::string& note = {}) {
    if (!tty_ || total == 0) return;
    const double frac = double(done) / double(total);
    const int width = 30, filled = int(frac * width);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    const std::string counts =
        unit_.empty() ? human_bytes(double(done)) + " / " + human_bytes(double(total))
                      : std::to_string(done) + " / " + std::to_string(total) + " " + unit_;
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %s  %.1f s%s%s", label_.c_str(), bar.c_str(),
                 frac * 100, counts.c_str(), secs, note.empty() ? "" : "  ", note.c_str());
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  std::string unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice::cli
