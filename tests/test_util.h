// Shared helpers for tests: locating ../shared test data (skip cleanly when absent),
// temporary files, and a made-up `sluice bench --roofline` cache.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace sluice::test {

// The one polling function of the tests: polls `pred()` every 2 ms until it holds or `timeout`
// passed; returns pred(). Tests wait on observable state with it, never on a bare sleep.
template <class F>
bool eventually(F pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// ../shared (or $SLUICE_SHARED); empty when absent.
inline std::string shared_dir() {
  if (const char* env = std::getenv("SLUICE_SHARED"); env && *env) {
    return std::filesystem::is_directory(env) ? std::string(env) : std::string();
  }
  std::string d = SLUICE_SHARED_DIR;
  return std::filesystem::is_directory(d) ? d : std::string();
}

// Full path of a file under ../shared, or "" when ../shared or the file is missing.
inline std::string shared_path(const std::string& rel) {
  std::string d = shared_dir();
  if (d.empty()) return {};
  std::string p = d + "/" + rel;
  return std::filesystem::exists(p) ? p : std::string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh temporary directory per test, removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

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

// Built with ASan or TSan (GCC defines __SANITIZE_*__; clang answers __has_feature): their
// runtimes keep freed memory (shadow, quarantine) and run many times slower, so bounds on memory
// and wall time hold in plain builds only.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
inline constexpr bool kSanitizedBuild =
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// ASAN_OPTIONS for a sluice process that runs MPI ranks (`--tp`, `--pp`): the caller's, plus
// detect_leaks=0. Open MPI allocates at MPI_Init what it never frees, partly from plugins it
// unloads before exit, whose frames LeakSanitizer can neither symbolize nor suppress by name;
// the ranks' memory errors are still caught. Harmless in a build without ASan.
inline std::string asan_options_for_mpi_ranks() {
  const char* cur = std::getenv("ASAN_OPTIONS");
  return (cur && *cur ? std::string(cur) + ":" : std::string()) + "detect_leaks=0";
}

// Whether a sluice command line starts MPI ranks.
inline bool runs_mpi_ranks(const std::string& args) {
  return args.find("--tp") != std::string::npos || args.find("--pp") != std::string::npos;
}

// True under CI (CI=true), where missing ../shared data must fail a test instead of skipping
// it: a suite that silently tested nothing would pass.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

}  // namespace sluice::test

// Skips the test when ../shared data is missing on a developer's machine; fails it under CI.
// (One return statement, like GTEST_SKIP() and FAIL(): usable after an unbraced `if`.)
#define SLUICE_SHARED_MISSING(what)                                                              \
  return ::testing::internal::AssertHelper(                                                      \
             ::sluice::test::in_ci() ? ::testing::TestPartResult::kFatalFailure                  \
                                     : ::testing::TestPartResult::kSkip,                         \
             __FILE__, __LINE__,                                                                 \
             "") = ::testing::Message()                                                          \
                   << what                                                                       \
                   << (::sluice::test::in_ci() ? " is missing (CI=true: tests may not skip for " \
                                                 "missing data)"                                 \
                                               : " not present")

// Binds the path of a ../shared file to `var`; without it: SLUICE_SHARED_MISSING.
#define SLUICE_REQUIRE_SHARED(var, rel)                     \
  const std::string var = ::sluice::test::shared_path(rel); \
  if (var.empty()) SLUICE_SHARED_MISSING("../shared/" << (rel))
