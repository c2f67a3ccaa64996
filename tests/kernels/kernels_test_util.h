// Random inputs and comparisons shared by the kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul_isa.h"

namespace sluice::test {

// Every kernel ISA this CPU runs, the portable one first: each kernel test runs all of them, so
// an AVX-512 host tests the AVX2 path too.
inline std::vector<MatmulIsa> cpu_isas() {
  std::vector<MatmulIsa> out;
  for (MatmulIsa isa : {MatmulIsa::kScalar, MatmulIsa::kAvx2, MatmulIsa::kAvx512}) {
    if (cpu_runs_isa(isa)) out.push_back(isa);
  }
  return out;
}

// A fresh seed every run (std::random_device), or SLUICE_TEST_SEED to replay one; the seed is
// attached to every failure message of the scope via SCOPED_TRACE.
inline uint32_t fresh_seed() {
  if (const char* s = std::getenv("SLUICE_TEST_SEED"); s && *s)
    return uint32_t(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}
#define SLUICE_FRESH_RNG(rng)                                                        \
  const uint32_t rng##_seed = ::sluice::test::fresh_seed();                          \
  SCOPED_TRACE("random seed " + std::to_string(rng##_seed) + " (SLUICE_TEST_SEED)"); \
  std::mt19937 rng(rng##_seed)

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// ||a - b|| / ||b|| (0 when both are zero).
inline double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace sluice::test
