// AVX-512 Gated DeltaNet, the chunked form (delta_net.h; the loops are delta_net_simd.inc's).
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/delta_net.h"
#include "kernels/simd_math.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET __attribute__((target("avx512f,avx512dq,avx2,fma")))

namespace {
struct V {
  using T = __m512;
  static constexpr int W = 16;
  static constexpr int J = 4;
  SLUICE_TARGET static T zero() { return _mm512_setzero_ps(); }
  SLUICE_TARGET static T set1(float x) { return _mm512_set1_ps(x); }
  SLUICE_TARGET static T load(const float* p) { return _mm512_loadu_ps(p); }
  SLUICE_TARGET static void store(float* p, T x) { _mm512_storeu_ps(p, x); }
  SLUICE_TARGET static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  SLUICE_TARGET static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  SLUICE_TARGET static T add(T a, T b) { return _mm512_add_ps(a, b); }
  SLUICE_TARGET static float sum(T x) { return _mm512_reduce_add_ps(x); }
  SLUICE_TARGET static T silu(T x) {
    const T e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  }
};
}  // namespace

#include "kernels/delta_net_simd.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
