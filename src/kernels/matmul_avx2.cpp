// The AVX2 + FMA + F16C build of matmul_simd.inc (no VNNI: u8 x s8 dots via vpmaddubsw, whose
// int16 pair sums cannot saturate here: |w| <= 128 and |x| <= 127 give at most 32512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gguf/quants.h"
#include "kernels/dequant.h"
#include "kernels/matmul_kernels.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))
#define SLUICE_DPBUSD(a, u, s) \
  _mm256_add_epi32((a), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "kernels/matmul_simd.inc"
#undef SLUICE_DPBUSD
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2

// ---- kernels that only the AVX2 build has (the AVX-512 ones live in matmul_avx512.cpp) --------

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))

SLUICE_TARGET void quantize_rows(const float* x, int64_t n, int64_t k, int8_t* qs, float* d_out,
                                 float* s_out, int32_t* bias_out, int32_t* bias16_out) {
  const int64_t nb = k / 32;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // packs_epi32 / packs_epi16 interleave the 128-bit lanes; this puts the 8 dwords back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * k;
    int8_t* q = qs + i * k;
    float* d = d_out + i * nb;
    float* s = s_out + i * nb;
    int32_t* bias = bias_out + i * nb;
    int32_t* bias16 = bias16_out + 2 * i * nb;
    for (int64_t b = 0; b < nb; ++b) {
      __m256 v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(xr + 32 * b + 8 * j);
      __m256 mx =
          _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                        _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i qi[4];
      for (int j = 0; j < 4; ++j) qi[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], vid));
      const __m256i s01 = _mm256_add_epi32(qi[0], qi[1]), s23 = _mm256_add_epi32(qi[2], qi[3]);
      const __m256i p16 =
          _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                          _mm256_permutevar8x32_epi32(p16, order));
      alignas(32) int32_t lanes[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s01);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), s23);
      int32_t h0 = 0, h1 = 0;
      for (int l = 0; l < 8; ++l) {
        h0 += lanes[l];
        h1 += lanes[8 + l];
      }
      finish_act_block(amax, h0, h1, b, d, s, bias, bias16);
    }
  }
}

// MXFP4 rows: per block the 32 codes looked up as the doubled E2M1 integers (vpshufb), the
// integer dot with the activations by the sign trick (|w| <= 12, |x| <= 127: vpmaddubsw's pair
// sums stay below 3100), then the scalar kernel's f32 step acc += d16 * 2^(e - 128) * sum: the
// same integers and the same f32 operations in the same order, so the same bits.
SLUICE_TARGET void gemm_mxfp4(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                              const QuantizedActs& a, const float* d16, float* y, int64_t m) {
  const int64_t nb = a.k / 32;
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + size_t(r) * row_bytes;
    for (int64_t i = 0; i < a.n; ++i) {
      const int8_t* q = a.qs + i * a.stride;
      const float* di = d16 + i * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * int64_t(sizeof(BlockMxfp4));
        const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
        const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(codes, 4), low4),
                                             _mm_and_si128(codes, low4));
        const __m256i wv = _mm256_shuffle_epi8(table, idx);  // weights 0..15 | 16..31
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32));
        const __m256i p16 =
            _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
        const __m256i p32 = _mm256_madd_epi16(p16, ones);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        acc += di[b] * mxfp4_half_scale(blk[0]) * float(_mm_cvtsi128_si32(s4));
      }
      y[i * m + r] = acc;
    }
  }
}

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
