// The AVX-512 (F/BW/VL/DQ + VNNI) build of matmul_simd.inc, plus kernels that only exist here:
// activation quantization, 512-bit f16 GEMM tiles and the AVX512-BF16 GEMM.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*()
// pass-through operands (GCC PR105593), at every extract/convert intrinsic.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dequant.h"
#include "kernels/matmul_kernels.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define SLUICE_DPBUSD(a, u, s) _mm256_dpbusd_epi32((a), (u), (s))
#include "kernels/matmul_simd.inc"
#undef SLUICE_DPBUSD

namespace {

SLUICE_TARGET inline float hmax512(__m512 v) {
  __m256 m = _mm256_max_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

SLUICE_TARGET inline float hsum512(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return hsum256(h);
}

}  // namespace

SLUICE_TARGET void quantize_rows(const float* x, int64_t n, int64_t k, int8_t* qs, float* d_out,
                                 float* s_out) {
  const int64_t nb = k / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * k;
    int8_t* q = qs + i * k;
    float* d = d_out + i * nb;
    float* s = s_out + i * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 x0 = _mm512_loadu_ps(xr + 32 * b);
      const __m512 x1 = _mm512_loadu_ps(xr + 32 * b + 16);
      const float amax = hmax512(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
      alignas(64) int32_t lanes[16];
      _mm512_store_si512(lanes, _mm512_add_epi32(q0, q1));
      int32_t sum = 0;
      for (int32_t l : lanes) sum += l;
      d[b] = amax / 127.0f;
      s[b] = d[b] * float(sum);
    }
  }
}

// 2 weight rows x 4 activation rows per register tile: per 16 elements 2 conversions, 4 loads,
// 8 FMAs into 8 accumulators.
template <int NW, int NX>
SLUICE_TARGET void tile_f16(const uint8_t* w, size_t row_bytes, const float* x, int64_t k,
                            float* out /* [NW][NX] */) {
  __m512 acc[NW][NX];
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) acc[a][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < k; j += 16) {
    __m512 wv[NW];
    for (int a = 0; a < NW; ++a) {
      wv[a] = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + a * row_bytes + 2 * j)));
    }
    for (int i = 0; i < NX; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + j);
      for (int a = 0; a < NW; ++a) acc[a][i] = _mm512_fmadd_ps(wv[a], xv, acc[a][i]);
    }
  }
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) out[a * NX + i] = hsum512(acc[a][i]);
}

SLUICE_TARGET void gemm_f16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                  int64_t n, int64_t k, float* y, int64_t m) {
  const size_t rb = size_t(k) * 2;
  const int64_t x_chunk = std::max<int64_t>(4, ((512 << 10) / (4 * k)) & ~3);
  const int64_t w_chunk = std::max<int64_t>(2, ((512 << 10) / int64_t(rb)) & ~1);
  float out[8];
  for (int64_t w0 = r0; w0 < r1; w0 += w_chunk) {
    const int64_t w1 = std::min(r1, w0 + w_chunk);
    for (int64_t c0 = 0; c0 < n; c0 += x_chunk) {
      const int64_t c1 = std::min(n, c0 + x_chunk);
      for (int64_t r = w0; r < w1; r += 2) {
        const int nw = r + 2 <= w1 ? 2 : 1;
        for (int64_t i = c0; i < c1;) {
          const int nx = i + 4 <= c1 ? 4 : 1;
          const uint8_t* wr = w + size_t(r) * rb;
          const float* xr = x + i * k;
          if (nw == 2 && nx == 4) tile_f16<2, 4>(wr, rb, xr, k, out);
          else if (nw == 2) tile_f16<2, 1>(wr, rb, xr, k, out);
          else if (nx == 4) tile_f16<1, 4>(wr, rb, xr, k, out);
          else tile_f16<1, 1>(wr, rb, xr, k, out);
          for (int a = 0; a < nw; ++a)
            for (int t = 0; t < nx; ++t) y[(i + t) * m + r + a] = out[a * nx + t];
          i += nx;
        }
      }
    }
  }
}

#define SLUICE_TARGET_BF16                                                                    \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

SLUICE_TARGET_BF16 void to_bf16(const float* x, int64_t count, uint16_t* out) {
  int64_t j = 0;
  for (; j + 32 <= count; j += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + j + 16), _mm512_loadu_ps(x + j));
    _mm512_storeu_si512(out + j, reinterpret_cast<const __m512i&>(v));
  }
  for (; j < count; ++j) {  // round to nearest even (inputs are finite)
    uint32_t u;
    std::memcpy(&u, x + j, 4);
    out[j] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

template <int NW, int NX>
SLUICE_TARGET_BF16 void tile_bf16(const uint8_t* w, size_t row_bytes, const uint16_t* x,
                                  int64_t k, float* out) {
  __m512 acc[NW][NX];
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) acc[a][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < k; j += 32) {
    __m512i wv[NW];
    for (int a = 0; a < NW; ++a) wv[a] = _mm512_loadu_si512(w + a * row_bytes + 2 * j);
    for (int i = 0; i < NX; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + i * k + j);
      for (int a = 0; a < NW; ++a) {
        acc[a][i] = _mm512_dpbf16_ps(acc[a][i], reinterpret_cast<const __m512bh&>(wv[a]),
                                     reinterpret_cast<const __m512bh&>(xv));
      }
    }
  }
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) {
      const __m512 v = acc[a][i];
      const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      out[a * NX + i] = _mm_cvtss_f32(s);
    }
}

SLUICE_TARGET_BF16 void gemm_bf16_dp(const uint8_t* w, int64_t r0, int64_t r1, const uint16_t* xb,
                                     int64_t n, int64_t k, float* y, int64_t m) {
  const size_t rb = size_t(k) * 2;
  const int64_t x_chunk = std::max<int64_t>(4, ((256 << 10) / (2 * k)) & ~3);
  const int64_t w_chunk = std::max<int64_t>(2, ((512 << 10) / int64_t(rb)) & ~1);
  float out[8];
  for (int64_t w0 = r0; w0 < r1; w0 += w_chunk) {
    const int64_t w1 = std::min(r1, w0 + w_chunk);
    for (int64_t c0 = 0; c0 < n; c0 += x_chunk) {
      const int64_t c1 = std::min(n, c0 + x_chunk);
      for (int64_t r = w0; r < w1; r += 2) {
        const int nw = r + 2 <= w1 ? 2 : 1;
        for (int64_t i = c0; i < c1;) {
          const int nx = i + 4 <= c1 ? 4 : 1;
          const uint8_t* wr = w + size_t(r) * rb;
          const uint16_t* xr = xb + i * k;
          if (nw == 2 && nx == 4) tile_bf16<2, 4>(wr, rb, xr, k, out);
          else if (nw == 2) tile_bf16<2, 1>(wr, rb, xr, k, out);
          else if (nx == 4) tile_bf16<1, 4>(wr, rb, xr, k, out);
          else tile_bf16<1, 1>(wr, rb, xr, k, out);
          for (int a = 0; a < nw; ++a)
            for (int t = 0; t < nx; ++t) y[(i + t) * m + r + a] = out[a * nx + t];
          i += nx;
        }
      }
    }
  }
}

#undef SLUICE_TARGET_BF16
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
