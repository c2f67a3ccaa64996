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

// `args` is passed through the shell: quote paths with spaces yourself. `env`: NAME=VALUE
// assignments (shell words) for the child alone, e.g. "SLUICE_CACHE=/tmp/x".
inline CommandResult run_sluice(const std::string& args, const std::string& stdin_text = "",
                                const std::string& env = "") {
  TempDir dir;
  const std::string out = dir.path("out"), err = dir.path("err"), in = dir.path("in");
  {
    FILE* f = std::fopen(in.c_str(), "wb");
    std::fwrite(stdin_text.data(), 1, stdin_text.size(), f);
    std::fclose(f);
  }
  const std::string asan =
      runs_mpi_ranks(args) ? "ASAN_OPTIONS='" + asan_options_for_mpi_ranks() + "' " : "";
  const std::string cmd = asan + (env.empty() ? "" : env + " ") + sluice_binary() + " " + args +
                          " <" + in + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Writes `text` to `path` (a fatal test failure when it cannot).
inline void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  ASSERT_EQ(std::fclose(f), 0) << path;
}

}  // namespace sluice::test
