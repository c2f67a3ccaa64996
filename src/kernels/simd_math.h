// Vector math shared by the AVX-512 kernels (internal to kernels/).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

namespace sluice::kern_avx512 {

// e^x, ~1 ulp for x in [-87, 88] (arguments are clamped to it): x = n ln2 + r, |r| <= ln2 / 2,
// degree-6 Taylor polynomial of e^r, times 2^n (vscalefps).
__attribute__((target("avx512f,fma"))) inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// cap * tanh(x / cap) (attention logit soft-capping), as softcap256 (simd_math_avx2.h).
__attribute__((target("avx512f,fma"))) inline __m512 softcap512(__m512 x, float cap) {
  const __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(1.0f / cap));
  const __m512 e = exp512(_mm512_mul_ps(_mm512_abs_ps(y), _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512i sign =
      _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign)),
                       _mm512_set1_ps(cap));
}

// out = silu(gate) * up = gate / (1 + e^-gate) * up, 16 at a time (n % 16 tail masked).
__attribute__((target("avx512f,fma"))) inline void swiglu(const float* gate, const float* up,
                                                          float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

// gelu(x) with the tanh approximation, 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)),
// u = sqrt(2 / pi) (x + 0.044715 x^3); exp512 clamps, so large |u| give x or 0.
__attribute__((target("avx512f,fma"))) inline __m512 gelu16(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u = _mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x);
  const __m512 e = exp512(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f * 0.7978845608028654f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// x = gelu(x), 16 at a time (n % 16 tail masked).
__attribute__((target("avx512f,fma"))) inline void gelu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// out = gelu(gate) * up, 16 at a time.
__attribute__((target("avx512f,fma"))) inline void geglu(const float* gate, const float* up,
                                                         float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 g = gelu16(_mm512_maskz_loadu_ps(m, gate + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace sluice::kern_avx512
