// 256-bit vectors for the kernels written once over a vector type (internal to kernels/):
// attention_simd.inc, delta_net_simd.inc and the element-wise math of simd_math.inc, which this
// header instantiates as kern_avx2::vexp, swiglu, geglu, ...
//
// Every function takes the ISA's whole target (AVX2 + FMA + F16C, MatmulIsa::kAvx2), so it
// inlines into any kernel compiled for it.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

// The ISA's target, for the kernel files that include this header (their SLUICE_TARGET).
#define SLUICE_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define SLUICE_TARGET SLUICE_AVX2_TARGET

namespace sluice::kern_avx2 {

struct Vec {
  using T = __m256;
  static constexpr int W = 8;  // floats per vector
  // Lanes of one vector, all ones where set (and_ps clears the others).
  using Mask = __m256;

  SLUICE_TARGET static T zero() { return _mm256_setzero_ps(); }
  SLUICE_TARGET static T set1(float x) { return _mm256_set1_ps(x); }
  SLUICE_TARGET static T load(const float* p) { return _mm256_loadu_ps(p); }
  SLUICE_TARGET static void store(float* p, T x) { _mm256_storeu_ps(p, x); }
  // W halves (IEEE f16 bits) as f32.
  SLUICE_TARGET static T load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // The first n < W lanes from p, the others zero (through a zero-padded copy: AVX2's masked
  // loads take no 16-bit elements), and the first n lanes of x to p.
  SLUICE_TARGET static T load_part(const float* p, int n) {
    alignas(32) float buf[W] = {};
    std::memcpy(buf, p, size_t(n) * sizeof(float));
    return _mm256_load_ps(buf);
  }
  SLUICE_TARGET static T load_part_f16(const uint16_t* p, int n) {
    alignas(16) uint16_t buf[W] = {};
    std::memcpy(buf, p, size_t(n) * sizeof(uint16_t));
    return load_f16(buf);
  }
  SLUICE_TARGET static void store_part(float* p, T x, int n) {
    alignas(32) float buf[W];
    _mm256_store_ps(buf, x);
    std::memcpy(p, buf, size_t(n) * sizeof(float));
  }

  SLUICE_TARGET static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  SLUICE_TARGET static T fnma(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
  SLUICE_TARGET static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  SLUICE_TARGET static T div(T a, T b) { return _mm256_div_ps(a, b); }
  SLUICE_TARGET static T add(T a, T b) { return _mm256_add_ps(a, b); }
  SLUICE_TARGET static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  SLUICE_TARGET static T min(T a, T b) { return _mm256_min_ps(a, b); }
  SLUICE_TARGET static T max(T a, T b) { return _mm256_max_ps(a, b); }
  SLUICE_TARGET static T round(T x) {  // to nearest, ties to even
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  SLUICE_TARGET static T abs(T x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  // |mag| with the sign of s, for mag >= +0.
  SLUICE_TARGET static T or_sign(T mag, T s) {
    return _mm256_or_ps(mag, _mm256_and_ps(_mm256_set1_ps(-0.0f), s));
  }
  // p 2^n for integral n in [-126, 127]: 2^n built in the exponent bits.
  SLUICE_TARGET static T scale_pow2(T p, T n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  // The sum of the lanes: halves added pairwise down to one.
  SLUICE_TARGET static float sum(T x) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }

  // Lanes [lo, hi) (0 <= lo, hi <= W; empty when hi <= lo).
  SLUICE_TARGET static Mask lanes(int lo, int hi) {
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i ge_lo = _mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1));
    const __m256i lt_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i);
    return _mm256_castsi256_ps(_mm256_and_si256(ge_lo, lt_hi));
  }
  // x in the lanes of m, zero in the others.
  SLUICE_TARGET static T maskz(Mask m, T x) { return _mm256_and_ps(m, x); }
  // The largest lane of x in m (-inf when m is empty).
  SLUICE_TARGET static float max_in(Mask m, T x) {
    x = _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), x, m);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
};

#include "kernels/simd_math.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
