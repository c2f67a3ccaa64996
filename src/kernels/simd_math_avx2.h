// Vector math shared by the AVX2 kernels (internal to kernels/): the AVX-512 versions'
// (simd_math.h) arithmetic at 256 bits.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sluice::kern_avx2 {

// e^x, ~1 ulp for x in [-87, 88] (arguments are clamped to it): x = n ln2 + r, |r| <= ln2 / 2,
// degree-6 Taylor polynomial of e^r, times 2^n (built in the exponent bits: n in [-126, 127]).
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// cap * tanh(x / cap) (attention logit soft-capping), tanh(y) = sign(y) (1 - e) / (1 + e) with
// e = e^(-2|y|): within a few ulp of cap, absolute error ~1e-7 cap near 0.
__attribute__((target("avx2,fma"))) inline __m256 softcap256(__m256 x, float cap) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 y = _mm256_mul_ps(x, _mm256_set1_ps(1.0f / cap));
  const __m256 e = exp256(_mm256_mul_ps(_mm256_andnot_ps(sign, y), _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_mul_ps(_mm256_or_ps(t, _mm256_and_ps(sign, y)), _mm256_set1_ps(cap));
}

__attribute__((target("avx2,fma"))) inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// out = silu(gate) * up = gate / (1 + e^-gate) * up, 8 at a time (the n % 8 tail through a
// zero-padded buffer).
__attribute__((target("avx2,fma"))) inline void swiglu(const float* gate, const float* up,
                                                       float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i == n) return;
  alignas(32) float g[8] = {}, u[8] = {}, o[8];
  for (int64_t j = i; j < n; ++j) {
    g[j - i] = gate[j];
    u[j - i] = up[j];
  }
  _mm256_store_ps(o, swiglu8(_mm256_load_ps(g), _mm256_load_ps(u)));
  for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
}

// gelu(x) = x / (1 + e^(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3) (as gelu16, simd_math.h).
__attribute__((target("avx2,fma"))) inline __m256 gelu8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x);
  const __m256 e = exp256(_mm256_mul_ps(u, _mm256_set1_ps(-2.0f * 0.7978845608028654f)));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// out = gelu(gate) * up (up null: out = gelu(gate)), 8 at a time, the tail through a buffer.
__attribute__((target("avx2,fma"))) inline void geglu(const float* gate, const float* up,
                                                      float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = gelu8(_mm256_loadu_ps(gate + i));
    if (up) g = _mm256_mul_ps(g, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(out + i, g);
  }
  if (i == n) return;
  alignas(32) float g[8] = {}, u[8] = {}, o[8];
  for (int64_t j = i; j < n; ++j) {
    g[j - i] = gate[j];
    u[j - i] = up ? up[j] : 1.0f;
  }
  _mm256_store_ps(o, _mm256_mul_ps(gelu8(_mm256_load_ps(g)), _mm256_load_ps(u)));
  for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
}

}  // namespace sluice::kern_avx2
