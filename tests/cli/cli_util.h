// Runs the sluice binary as a user would and captures stdout, stderr and the exit code.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_util.h"

namespace sluice::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string sluice_binary() {
  return std::string(SLUICE_BINARY_DIR) + "/src/cli/sluice";
}

// `args` is passed through the shell: quote paths with spaces yourself.
inline CommandResult run_sluice(const std::string& args, const std::string& stdin_text = "") {
  TempDir dir;
  const std::string out = dir.path("out"), err = dir.path("err"), in = dir.path("in");
  {
    FILE* f = std::fopen(in.c_str(), "wb");
    std::fwrite(stdin_text.data(), 1, stdin_text.size(), f);
    std::fclose(f);
  }
  const std::string env =
      runs_mpi_ranks(args) ? "ASAN_OPTIONS='" + asan_options_for_mpi_ranks() + "' " : "";
  const std::string cmd = env + sluice_binary() + " " + args + " <" + in + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Writes a `sluice bench --roofline` cache (2 threads: 10 GB/s with 1, 20 GB/s with 2, the given
// int8 and f32 peaks; `simd`: the ISA whose peaks these are, none when empty) for commands that
// read one instead of measuring.
inline bool write_roofline_cache(const std::string& path, double peak_gops_int8,
                                 double peak_gflops_f32 = 100, const std::string& simd = "") {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  std::fprintf(f,
               "{\"cpu\": \"Test CPU\", \"threads\": 2, \"read_gbps_1t\": 10, \"read_gbps\": 20, "
               "\"peak_gflops_f32\": %g, \"peak_gflops_bf16\": 0, \"peak_gops_int8\": %g, "
               "\"measured_at\": \"2025-01-01T00:00:00Z\"%s}",
               peak_gflops_f32, peak_gops_int8,
               simd.empty() ? "" : (", \"simd\": \"" + simd + "\"").c_str());
  return std::fclose(f) == 0;
}

}  // namespace sluice::test
