// Vocabulary-wide float loops of the sampler, written so the compiler vectorizes them (fixed
// lane counts, no calls into libm). Each has a plain scalar specification in its comment and
// a randomized test against it (tests/sample/sample_math_test.cpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice {

// exp(x) for x <= 0, within 2e-7 relative of std::exp; exactly 0 for x < -87 (where expf
// leaves the normal range; such weights are below 1e-38 of the best token's) and for -inf.
// Range reduction x = n ln2 + r, |r| <= ln2/2, a degree-7 Taylor polynomial (truncation
// error < 6e-9 relative), and 2^n built from exponent bits. exp(0) == 1 exactly.
inline float exp_nonpos(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 355/512: n * kLn2Hi is exact for |n| < 2^15
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: (t + kRound) - kRound rounds t
  const float xc = x < -87.0f ? -87.0f : x;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto e = static_cast<int32_t>(n) + 127;  // in [1, 127]: a normal power of two
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}

// max(x[i]) over all i; -inf for an empty span. x must hold no NaN.
float max_of(std::span<const float> x);

// out[i] = exp_nonpos((x[i] - shift) * (1 / t)) for x[i] <= shift, t > 0 (division by t
// where 1 / t overflows). out.size() == x.size().
void exp_shifted(std::span<const float> x, float shift, float t, std::span<float> out);

// dst[i] = src[i] and *max = max_of(src); returns true when some src[i] is NaN or +inf
// (-inf is a valid, masked logit; *max is then unspecified). Sizes equal.
bool copy_check_finite(std::span<const float> src, std::span<float> dst, float* max);

// sum(x[i]) of non-negative values, accumulated in 8 float lanes per block of kSumBlock
// and in double across blocks. Relative error ~1e-6 at 128k entries; deterministic.
inline constexpr size_t kSumBlock = 256;
double sum_of(std::span<const float> x);

// block_sums[b] = sum_of(x[b * kSumBlock, (b + 1) * kSumBlock)) for every (last partial)
// block; returns their sum in block order, which equals sum_of(x).
// block_sums.size() must be (x.size() + kSumBlock - 1) / kSumBlock.
double block_sums(std::span<const float> x, std::span<double> block_sums);

}  // namespace sluice
