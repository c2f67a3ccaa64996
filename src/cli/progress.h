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
  explicit ProgressBar(std::string label)
      : label_(std::move(label)),
        tty_(::isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  void update(uint64_t done, uint64_t total) {
    if (!tty_ || total == 0) return;
    const double frac = double(done) / double(total);
    const int width = 30, filled = int(frac * width);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %s / %s  %.1f s", label_.c_str(), bar.c_str(),
                 frac * 100, human_bytes(double(done)).c_str(), human_bytes(double(total)).c_str(),
                 secs);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice::cli
