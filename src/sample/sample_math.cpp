#include "sample/sample_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sluice {
namespace {

constexpr size_t kLanes = 8;

// GCC/Clang vector extensions: plain arithmetic on 4 floats, lowered to the target's SIMD
// (SSE on baseline x86-64, NEON on arm64), so these loops vectorize for certain. 16 bytes:
// wider types passed by value change the ABI without AVX (-Wpsabi).
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, v4f v) {
  std::memcpy(p, &v, sizeof v);
}
inline v4f splat4(float x) {
  return v4f{x, x, x, x};
}

// exp_nonpos on 4 lanes, the same operations in the same order.
inline v4f exp_nonpos4(v4f x) {
  const v4f lo = splat4(-87.0f);
  const v4f xc = x < lo ? lo : x;
  const v4f round = splat4(12582912.0f);
  const v4f n = (xc * 1.44269504088896341f + round) - round;
  const v4f r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  v4f p = splat4(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const v4i e = __builtin_convertvector(n, v4i) + 127;
  const v4f scale = reinterpret_cast<v4f>(e << 23);
  return x < lo ? splat4(0.0f) : p * scale;
}

// Sum of one block (at most kSumBlock values) in kLanes float lanes.
double block_sum(const float* x, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += x[i];
  double s = 0.0;
  for (const float a : acc) s += a;
  return s;
}

}  // namespace

bool copy_check_finite(std::span<const float> src, std::span<float> dst, float* max) {
  const float kInf = std::numeric_limits<float>::infinity();
  const v4f inf = splat4(kInf);
  v4i bad = {0, 0, 0, 0};
  v4f m = splat4(-kInf);
  const size_t n = src.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const v4f v = load4(src.data() + i);
    store4(dst.data() + i, v);
    bad |= !(v < inf);  // NaN compares false
    m = v > m ? v : m;
  }
  bool any = bad[0] | bad[1] | bad[2] | bad[3];
  float best = std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
  for (; i < n; ++i) {
    dst[i] = src[i];
    any |= !(src[i] < kInf);
    best = std::max(best, src[i]);
  }
  *max = best;
  return any;
}

float max_of(std::span<const float> x) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  v4f m0 = splat4(kNegInf);
  v4f m1 = m0;
  const size_t n = x.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const v4f a = load4(x.data() + i);
    const v4f b = load4(x.data() + i + 4);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
  }
  float best = kNegInf;
  for (int j = 0; j < 4; ++j) best = std::max(best, std::max(m0[j], m1[j]));
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

void exp_shifted(std::span<const float> x, float shift, float t, std::span<float> out) {
  const size_t n = x.size();
  const float* in = x.data();
  float* o = out.data();
  const v4f s4 = splat4(shift);
  const float inv_t = 1.0f / t;
  size_t i = 0;
  if (std::isinf(inv_t)) {  // t below ~3e-39: divide, so that (0 / t) stays 0
    for (; i < n; ++i) o[i] = exp_nonpos((in[i] - shift) / t);
    return;
  }
  const v4f it4 = splat4(inv_t);
  for (; i + kLanes <= n; i += kLanes) {
    store4(o + i, exp_nonpos4((load4(in + i) - s4) * it4));
    store4(o + i + 4, exp_nonpos4((load4(in + i + 4) - s4) * it4));
  }
  for (; i < n; ++i) o[i] = exp_nonpos((in[i] - shift) * inv_t);
}

double sum_of(std::span<const float> x) {
  double s = 0.0;
  for (size_t b = 0; b < x.size(); b += kSumBlock) {
    s += block_sum(x.data() + b, std::min(kSumBlock, x.size() - b));
  }
  return s;
}

double block_sums(std::span<const float> x, std::span<double> sums) {
  double s = 0.0;
  for (size_t b = 0, k = 0; b < x.size(); b += kSumBlock, ++k) {
    sums[k] = block_sum(x.data() + b, std::min(kSumBlock, x.size() - b));
    s += sums[k];
  }
  return s;
}

}  // namespace sluice
