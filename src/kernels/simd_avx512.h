// 512-bit vectors for the kernels written once over a vector type (internal to kernels/):
// attention_simd.inc, delta_net_simd.inc and the element-wise math of simd_math.inc, which this
// header instantiates as kern_avx512::vexp, swiglu, geglu, ... (simd_avx2.h is the 256-bit
// twin.)
//
// Every function takes the ISA's whole target (AVX-512 F/BW/VL/DQ with AVX2, FMA and F16C,
// MatmulIsa::kAvx512), so it inlines into any kernel compiled for it.
#pragma once

#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <cstdint>

// The ISA's target, for the kernel files that include this header (their SLUICE_TARGET).
#define SLUICE_AVX512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define SLUICE_TARGET SLUICE_AVX512_TARGET

namespace sluice::kern_avx512 {

struct Vec {
  using T = __m512;
  static constexpr int W = 16;  // floats per vector
  using Mask = __mmask16;       // lanes of one vector

  SLUICE_TARGET static T zero() { return _mm512_setzero_ps(); }
  SLUICE_TARGET static T set1(float x) { return _mm512_set1_ps(x); }
  SLUICE_TARGET static T load(const float* p) { return _mm512_loadu_ps(p); }
  SLUICE_TARGET static void store(float* p, T x) { _mm512_storeu_ps(p, x); }
  // W halves (IEEE f16 bits) as f32.
  SLUICE_TARGET static T load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // The first n < W lanes from p, the others zero (masked loads), and the first n lanes of x
  // to p.
  SLUICE_TARGET static T load_part(const float* p, int n) {
    return _mm512_maskz_loadu_ps(first(n), p);
  }
  SLUICE_TARGET static T load_part_f16(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
  }
  SLUICE_TARGET static void store_part(float* p, T x, int n) {
    _mm512_mask_storeu_ps(p, first(n), x);
  }

  SLUICE_TARGET static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  SLUICE_TARGET static T fnma(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
  SLUICE_TARGET static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  SLUICE_TARGET static T div(T a, T b) { return _mm512_div_ps(a, b); }
  SLUICE_TARGET static T add(T a, T b) { return _mm512_add_ps(a, b); }
  SLUICE_TARGET static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  SLUICE_TARGET static T min(T a, T b) { return _mm512_min_ps(a, b); }
  SLUICE_TARGET static T max(T a, T b) { return _mm512_max_ps(a, b); }
  SLUICE_TARGET static T round(T x) {  // to nearest, ties to even
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  SLUICE_TARGET static T abs(T x) { return _mm512_abs_ps(x); }
  // |mag| with the sign of s, for mag >= +0.
  SLUICE_TARGET static T or_sign(T mag, T s) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
  }
  // p 2^n for integral n (vscalefps).
  SLUICE_TARGET static T scale_pow2(T p, T n) { return _mm512_scalef_ps(p, n); }
  SLUICE_TARGET static float sum(T x) { return _mm512_reduce_add_ps(x); }

  // Lanes [lo, hi) (0 <= lo, hi <= W; empty when hi <= lo).
  SLUICE_TARGET static Mask lanes(int lo, int hi) {
    return Mask(((1u << hi) - 1) & ~((1u << lo) - 1));
  }
  // x in the lanes of m, zero in the others.
  SLUICE_TARGET static T maskz(Mask m, T x) { return _mm512_maskz_mov_ps(m, x); }
  // The largest lane of x in m (-inf when m is empty).
  SLUICE_TARGET static float max_in(Mask m, T x) { return _mm512_mask_reduce_max_ps(m, x); }

 private:
  SLUICE_TARGET static Mask first(int n) { return Mask((1u << n) - 1); }
};

#include "kernels/simd_math.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
