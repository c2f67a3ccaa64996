// The vectorized loops of sample_math.h against their scalar specifications, on fresh random
// inputs at odd sizes (vector bodies, remainders, and lengths below one vector).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sample/rng.h"
#include "sample/sample_math.h"

namespace sluice {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const size_t kSizes[] = {0, 1, 3, 4, 7, 8, 31, 33, 255, 256, 257, 4097};

std::vector<float> random_logits(size_t n, uint64_t seed, float lo, float hi) {
  Xoshiro256 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + static_cast<float>(rng.uniform()) * (hi - lo);
  return v;
}

TEST(SampleMath, ExpNonposMatchesStdExp) {
  Xoshiro256 rng(1);
  double worst = 0.0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = -87.0f * static_cast<float>(rng.uniform());
    const double want = std::exp(static_cast<double>(x));
    const double got = exp_nonpos(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 2e-7);  // float ulp / value is 6e-8 .. 1.2e-7
  EXPECT_EQ(exp_nonpos(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpos(-0.0f), 1.0f);
  EXPECT_EQ(exp_nonpos(-87.5f), 0.0f);
  EXPECT_EQ(exp_nonpos(-1e30f), 0.0f);
  EXPECT_EQ(exp_nonpos(-kInf), 0.0f);
  const double e = std::exp(static_cast<double>(-86.9f));
  EXPECT_NEAR(exp_nonpos(-86.9f), e, e * 2e-7);
}

TEST(SampleMath, ExpShiftedMatchesScalar) {
  for (size_t n : kSizes) {
    for (float t : {1.0f, 0.7f, 3.0f}) {
      std::vector<float> x = random_logits(n, n + 7, -40.0f, 10.0f);
      if (n > 2) x[n / 2] = -kInf;
      const float shift = 10.0f;
      std::vector<float> got(n);
      exp_shifted(x, shift, t, got);
      for (size_t i = 0; i < n; ++i) {
        const float want = exp_nonpos((x[i] - shift) * (1.0f / t));
        ASSERT_NEAR(got[i], want, want * 2e-7f) << "n " << n << " i " << i;
      }
    }
  }
  // A temperature whose inverse overflows: the best token keeps weight 1, others 0.
  const std::vector<float> x = {1.0f, 0.5f, 1.0f, -2.0f, 0.999f};
  std::vector<float> w(x.size());
  exp_shifted(x, 1.0f, 1e-40f, w);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(SampleMath, MaxAndCopyCheckMatchScalar) {
  for (size_t n : kSizes) {
    std::vector<float> x = random_logits(n, n + 1, -5.0f, 5.0f);
    if (n > 0) x[n - 1] = 6.0f;  // max in the remainder
    float want = -kInf;
    for (float v : x) want = std::max(want, v);
    EXPECT_EQ(max_of(x), want) << n;
    std::vector<float> copy(n);
    float m = 0.0f;
    EXPECT_FALSE(copy_check_finite(x, copy, &m)) << n;
    EXPECT_EQ(copy, x);
    EXPECT_EQ(m, want) << n;
    for (size_t bad = 0; bad < n; bad += std::max<size_t>(1, n / 5)) {
      for (float v : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        std::vector<float> y = x;
        y[bad] = v;
        EXPECT_TRUE(copy_check_finite(y, copy, &m)) << n << " at " << bad;
      }
      std::vector<float> y = x;
      y[bad] = -kInf;  // allowed
      EXPECT_FALSE(copy_check_finite(y, copy, &m));
    }
  }
  EXPECT_EQ(max_of({}), -kInf);
}

TEST(SampleMath, SumsMatchScalar) {
  for (size_t n : kSizes) {
    const std::vector<float> x = random_logits(n, n + 3, 0.0f, 1.0f);
    double want = 0.0;
    for (float v : x) want += v;
    const double got = sum_of(x);
    EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, want)) << n;
    std::vector<double> blocks((n + kSumBlock - 1) / kSumBlock);
    EXPECT_EQ(block_sums(x, blocks), got) << n;  // same order, same value
    for (size_t b = 0; b < blocks.size(); ++b) {
      double bw = 0.0;
      for (size_t i = b * kSumBlock; i < std::min(n, (b + 1) * kSumBlock); ++i) bw += x[i];
      EXPECT_NEAR(blocks[b], bw, 1e-6 * std::max(1.0, bw));
    }
  }
}

}  // namespace
}  // namespace sluice
