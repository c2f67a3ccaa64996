// AVX2 Gated DeltaNet, the chunked form (delta_net.h; the loops are delta_net_simd.inc's).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/delta_net.h"
#include "kernels/simd_math_avx2.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma")))

namespace {
struct V {
  using T = __m256;
  static constexpr int W = 8;
  static constexpr int J = 2;
  SLUICE_TARGET static T zero() { return _mm256_setzero_ps(); }
  SLUICE_TARGET static T set1(float x) { return _mm256_set1_ps(x); }
  SLUICE_TARGET static T load(const float* p) { return _mm256_loadu_ps(p); }
  SLUICE_TARGET static void store(float* p, T x) { _mm256_storeu_ps(p, x); }
  SLUICE_TARGET static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  SLUICE_TARGET static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  SLUICE_TARGET static T add(T a, T b) { return _mm256_add_ps(a, b); }
  SLUICE_TARGET static float sum(T x) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  SLUICE_TARGET static T silu(T x) {
    const T e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  }
};
}  // namespace

#include "kernels/delta_net_simd.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
