// AVX-512 VNNI kernels over PackedWeights (packed.h): 16 weight rows per 512-bit register, one
// embedded-broadcast vpdpbusd per 4 activation bytes, NX activation rows per weight tile.
//
// For every output the f32 accumulation is the same sequence whatever NX is (one fused
// multiply-add per block, in column order), so a row's result does not depend on which tile it
// lands in, i.e. on the batch it was computed in.
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_kernels.h"
#include "kernels/packed.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace {

enum Kind { kQ8_0, kQ4_0, kQ4_K, kQ6_K, kMxfp4 };

// The 4-bit code types: Q4_0's nibbles are the values + 8; MXFP4's are looked up.
constexpr bool nibbles(Kind k) {
  return k == kQ4_0 || k == kMxfp4;
}

// The bias (-128 x the block's activation sum) scaled to a type's offset: Q4_0 stores q + 8,
// MXFP4's lookup gives the doubled E2M1 value + 12 (both exact: the bias is a multiple of 128).
template <Kind K>
inline int32_t block_bias(int32_t bias) {
  if constexpr (K == kQ4_0) return bias >> 4;
  if constexpr (K == kMxfp4) return bias / 32 * 3;
  return bias;
}

// MXFP4 codes -> the doubled E2M1 values + 12 (unsigned bytes for vpdpbusd), per 128-bit lane.
SLUICE_TARGET inline __m512i mxfp4_lut() {
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Lut)));
}

// 16 rows' MXFP4 block scales 2^(e - 128) from their exponent bytes (vscalefps: exact, the
// subnormal 2^-128 and 2^-127 included).
SLUICE_TARGET inline __m512 mxfp4_scales(const uint8_t* e) {
  const __m512i ei = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
  return _mm512_scalef_ps(_mm512_set1_ps(1.0f),
                          _mm512_cvtepi32_ps(_mm512_sub_epi32(ei, _mm512_set1_epi32(128))));
}

// A 4-bit code vector -> the u8 operand: Q4_0 as it is, MXFP4 through the table.
template <Kind K>
SLUICE_TARGET inline __m512i codes_u8(__m512i nib, __m512i lut) {
  if constexpr (K == kMxfp4) return _mm512_shuffle_epi8(lut, nib);
  (void)lut;
  return nib;
}

SLUICE_TARGET inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

SLUICE_TARGET inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

SLUICE_TARGET inline __m512 load_s8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

SLUICE_TARGET inline __m512 load_u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Q8_0 / Q4_0 block b (columns 32b ..): acc[i] lane r = exact dot of row r with activation row i.
template <int NX, Kind K>
SLUICE_TARGET inline void block_dots(const uint8_t* v, const ActRows<NX>& x, int64_t b,
                                     __m512i* acc) {
  const int64_t col = 32 * b;
  if constexpr (NX == 1) {
    // Two chains so the vpdpbusd latency overlaps (integer sums: the order is free).
    __m512i s0 = _mm512_set1_epi32(block_bias<K>(x.bias[0][b]));
    __m512i s1 = _mm512_setzero_si512();
    if constexpr (nibbles(K)) {
      const __m512i m4 = _mm512_set1_epi8(0x0f);
      const __m512i lut = K == kMxfp4 ? mxfp4_lut() : m4;
      for (int j = 0; j < 4; ++j) {
        const __m512i raw = _mm512_load_si512(v + 64 * j);
        s0 = _mm512_dpbusd_epi32(s0, codes_u8<K>(_mm512_and_si512(raw, m4), lut),
                                 bcast4(x.q[0] + col + 4 * j));
        s1 = _mm512_dpbusd_epi32(s1,
                                 codes_u8<K>(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), lut),
                                 bcast4(x.q[0] + col + 16 + 4 * j));
      }
    } else {
      for (int j = 0; j < 8; j += 2) {
        s0 = _mm512_dpbusd_epi32(s0, _mm512_load_si512(v + 64 * j), bcast4(x.q[0] + col + 4 * j));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_load_si512(v + 64 * j + 64),
                                 bcast4(x.q[0] + col + 4 * j + 4));
      }
    }
    acc[0] = _mm512_add_epi32(s0, s1);
  } else {
    for (int i = 0; i < NX; ++i) acc[i] = _mm512_set1_epi32(block_bias<K>(x.bias[i][b]));
    if constexpr (nibbles(K)) {
      const __m512i m4 = _mm512_set1_epi8(0x0f);
      const __m512i lut = K == kMxfp4 ? mxfp4_lut() : m4;
      for (int j = 0; j < 4; ++j) {
        const __m512i raw = _mm512_load_si512(v + 64 * j);
        const __m512i lo = codes_u8<K>(_mm512_and_si512(raw, m4), lut);
        const __m512i hi = codes_u8<K>(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), lut);
        for (int i = 0; i < NX; ++i)
          acc[i] = _mm512_dpbusd_epi32(acc[i], lo, bcast4(x.q[i] + col + 4 * j));
        for (int i = 0; i < NX; ++i)
          acc[i] = _mm512_dpbusd_epi32(acc[i], hi, bcast4(x.q[i] + col + 16 + 4 * j));
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i raw = _mm512_load_si512(v + 64 * j);
        for (int i = 0; i < NX; ++i)
          acc[i] = _mm512_dpbusd_epi32(acc[i], raw, bcast4(x.q[i] + col + 4 * j));
      }
    }
  }
}

// y[(i0 + i) * m + r0 + r] for the group's 16 rows (masked past m) and NX activation rows.
template <int NX, Kind K>
SLUICE_TARGET void tile(const PackedWeights& w, int64_t g, const QuantizedActs& a, int64_t i0,
                        float* y, int64_t m, __mmask16 mask) {
  const ActRows<NX> x(a, i0);
  const uint8_t* wq = w.quants(g);
  const uint8_t* meta = w.meta(g);
  const int64_t nu = w.n_units();
  __m512 facc[NX];
  for (int i = 0; i < NX; ++i) facc[i] = _mm512_setzero_ps();
  if constexpr (K == kQ4_K) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t u = 0; u < nu; ++u) {
      const uint8_t* v = wq + u * 2048;
      const uint8_t* mt = meta + u * 320;
      const __m512 d = load_f16x16(mt), dmin = load_f16x16(mt + 32);
      for (int p = 0; p < 4; ++p) {
        for (int64_t l = 0; l < 512; l += 64) {
          prefetch_weights<NX>(v + 512 * p + l);
        }
        const int64_t sb = 8 * u + 2 * p;  // activation block of the pair's low sub-block
        __m512i lo_acc[NX], hi_acc[NX];
        for (int i = 0; i < NX; ++i) lo_acc[i] = hi_acc[i] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
          const __m512i raw = _mm512_load_si512(v + (8 * p + j) * 64);
          const __m512i lo = _mm512_and_si512(raw, m4);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
          for (int i = 0; i < NX; ++i) {
            lo_acc[i] = _mm512_dpbusd_epi32(lo_acc[i], lo, bcast4(x.q[i] + 32 * sb + 4 * j));
            hi_acc[i] = _mm512_dpbusd_epi32(hi_acc[i], hi, bcast4(x.q[i] + 32 * (sb + 1) + 4 * j));
          }
        }
        for (int t = 0; t < 2; ++t) {
          const int s = 2 * p + t;
          const __m512 sc = _mm512_mul_ps(d, load_u8x16(mt + 64 + 16 * s));
          const __m512 mn = _mm512_mul_ps(dmin, load_u8x16(mt + 192 + 16 * s));
          for (int i = 0; i < NX; ++i) {
            const __m512 dots = _mm512_cvtepi32_ps(t == 0 ? lo_acc[i] : hi_acc[i]);
            facc[i] =
                _mm512_fmadd_ps(dots, _mm512_mul_ps(sc, _mm512_set1_ps(x.d[i][sb + t])), facc[i]);
            facc[i] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(x.s[i][sb + t]), facc[i]);
          }
        }
      }
    }
  } else if constexpr (K == kQ6_K) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    for (int64_t u = 0; u < nu; ++u) {
      const uint8_t* v = wq + u * 3072;
      const uint8_t* mt = meta + u * 288;
      const __m512 d = load_f16x16(mt);
      for (int g = 0; g < 16; ++g) {
        const uint8_t* gv = v + 192 * g;
        for (int64_t l = 0; l < 192; l += 64) {
          prefetch_weights<NX>(gv + l);
        }
        const __m512i v0 = _mm512_load_si512(gv), v1 = _mm512_load_si512(gv + 64);
        const __m512i vh = _mm512_load_si512(gv + 128);
        // q = low nibble | high pair << 4 (ternary logic 0xF8: a | (b & c)).
        const __m512i q0 = _mm512_ternarylogic_epi32(_mm512_and_si512(v0, m4),
                                                     _mm512_slli_epi16(vh, 4), m30, 0xF8);
        const __m512i q1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m4),
                                                     _mm512_slli_epi16(vh, 2), m30, 0xF8);
        const __m512i q2 = _mm512_ternarylogic_epi32(_mm512_and_si512(v1, m4), vh, m30, 0xF8);
        const __m512i q3 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m4),
                                                     _mm512_srli_epi16(vh, 2), m30, 0xF8);
        const __m512 dsc = _mm512_mul_ps(d, load_s8x16(mt + 32 + 16 * g));
        const int64_t col = 256 * u + 16 * g;
        for (int i = 0; i < NX; ++i) {
          __m512i acc = _mm512_set1_epi32(x.bias16[i][col / 16]);
          acc = _mm512_dpbusd_epi32(acc, q0, bcast4(x.q[i] + col));
          acc = _mm512_dpbusd_epi32(acc, q1, bcast4(x.q[i] + col + 4));
          acc = _mm512_dpbusd_epi32(acc, q2, bcast4(x.q[i] + col + 8));
          acc = _mm512_dpbusd_epi32(acc, q3, bcast4(x.q[i] + col + 12));
          facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc),
                                    _mm512_mul_ps(dsc, _mm512_set1_ps(x.d[i][col / 32])), facc[i]);
        }
      }
    }
  } else {
    constexpr int64_t kQb = nibbles(K) ? 256 : 512;
    for (int64_t b = 0; b < nu; ++b) {
      // Weights stream from memory while the block is computed: fetch ahead (past the group's
      // end that is the next group, which is contiguous).
      for (int64_t l = 0; l < kQb; l += 64) prefetch_weights<NX>(wq + b * kQb + l);
      __m512i acc[NX];
      block_dots<NX, K>(wq + b * kQb, x, b, acc);
      if constexpr (K == kMxfp4) {
        // (d16 x 2^(e - 128)) x dot, then added: the scalar kernel's operations, bit for bit.
        const __m512 dw = mxfp4_scales(meta + 16 * b);
        for (int i = 0; i < NX; ++i) {
          facc[i] =
              _mm512_add_ps(facc[i], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(x.d[i][b]), dw),
                                                   _mm512_cvtepi32_ps(acc[i])));
        }
      } else {
        const __m512 dw = load_f16x16(meta + 32 * b);
        for (int i = 0; i < NX; ++i) {
          facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]),
                                    _mm512_mul_ps(dw, _mm512_set1_ps(x.d[i][b])), facc[i]);
        }
      }
    }
  }
  const int64_t r0 = g * PackedWeights::kRows;
  for (int i = 0; i < NX; ++i) _mm512_mask_storeu_ps(y + (i0 + i) * m + r0, mask, facc[i]);
}

// Two full-or-last groups g, g + 1 (32 weight rows) x NX activation rows, Q8_0 / Q4_0: each
// activation broadcast feeds two vpdpbusd. Per output the same operations as tile().
template <int NX, Kind K>
SLUICE_TARGET void tile2(const PackedWeights& w, int64_t g, const QuantizedActs& a, int64_t i0,
                         float* y, int64_t m, __mmask16 mask1) {
  constexpr int64_t kQb = K == kQ4_0 ? 256 : 512;
  const ActRows<NX> x(a, i0);
  const uint8_t* wq0 = w.quants(g);
  const uint8_t* wq1 = w.quants(g + 1);
  const uint8_t* meta0 = w.meta(g);
  const uint8_t* meta1 = w.meta(g + 1);
  const int64_t nu = w.n_units();
  __m512 f0[NX], f1[NX];
  for (int i = 0; i < NX; ++i) f0[i] = f1[i] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nu; ++b) {
    const uint8_t* v0 = wq0 + b * kQb;
    const uint8_t* v1 = wq1 + b * kQb;
    for (int64_t l = 0; l < kQb; l += 64) {  // both weight streams
      prefetch_weights<NX>(v0 + l);
      prefetch_weights<NX>(v1 + l);
    }
    __m512i a0[NX], a1[NX];
    for (int i = 0; i < NX; ++i)
      a0[i] = a1[i] = _mm512_set1_epi32(K == kQ4_0 ? x.bias[i][b] >> 4 : x.bias[i][b]);
    const int64_t col = 32 * b;
    if constexpr (K == kQ4_0) {
      for (int j = 0; j < 4; ++j) {
        const __m512i r0 = _mm512_load_si512(v0 + 64 * j), r1 = _mm512_load_si512(v1 + 64 * j);
        const __m512i lo0 = _mm512_and_si512(r0, m4), lo1 = _mm512_and_si512(r1, m4);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(r0, 4), m4);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(r1, 4), m4);
        for (int i = 0; i < NX; ++i) {
          const __m512i xl = bcast4(x.q[i] + col + 4 * j);
          a0[i] = _mm512_dpbusd_epi32(a0[i], lo0, xl);
          a1[i] = _mm512_dpbusd_epi32(a1[i], lo1, xl);
        }
        for (int i = 0; i < NX; ++i) {
          const __m512i xh = bcast4(x.q[i] + col + 16 + 4 * j);
          a0[i] = _mm512_dpbusd_epi32(a0[i], hi0, xh);
          a1[i] = _mm512_dpbusd_epi32(a1[i], hi1, xh);
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i r0 = _mm512_load_si512(v0 + 64 * j), r1 = _mm512_load_si512(v1 + 64 * j);
        for (int i = 0; i < NX; ++i) {
          const __m512i xv = bcast4(x.q[i] + col + 4 * j);
          a0[i] = _mm512_dpbusd_epi32(a0[i], r0, xv);
          a1[i] = _mm512_dpbusd_epi32(a1[i], r1, xv);
        }
      }
    }
    const __m512 dw0 = load_f16x16(meta0 + 32 * b), dw1 = load_f16x16(meta1 + 32 * b);
    for (int i = 0; i < NX; ++i) {
      const __m512 xd = _mm512_set1_ps(x.d[i][b]);
      f0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[i]), _mm512_mul_ps(dw0, xd), f0[i]);
      f1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[i]), _mm512_mul_ps(dw1, xd), f1[i]);
    }
  }
  const int64_t r0 = g * PackedWeights::kRows;
  for (int i = 0; i < NX; ++i) {
    _mm512_storeu_ps(y + (i0 + i) * m + r0, f0[i]);
    _mm512_mask_storeu_ps(y + (i0 + i) * m + r0 + 16, mask1, f1[i]);
  }
}

template <Kind K>
SLUICE_TARGET void gemm_packed_t(const PackedWeights& w, int64_t g0, int64_t g1,
                                 const QuantizedActs& a, float* y, int64_t m) {
  const int64_t group_bytes = w.n_units() * (w.unit_quant_bytes() + w.unit_meta_bytes());
  // Cache blocking: a chunk of activation rows (~384 KiB) stays in L2 while a chunk of weight
  // groups (~256 KiB, read from memory once per activation chunk) is swept against it.
  const int64_t x_rows = std::max<int64_t>(8, ((384 << 10) / a.k) & ~int64_t(7));
  const int64_t w_groups = std::max<int64_t>(1, (256 << 10) / group_bytes);
  constexpr bool kWide = K != kQ4_K;  // Q4_K: 2 accumulators per row, at most 4 rows
  for (int64_t gw0 = g0; gw0 < g1; gw0 += w_groups) {
    const int64_t gw1 = std::min(g1, gw0 + w_groups);
    for (int64_t c0 = 0; c0 < a.n; c0 += x_rows) {
      const int64_t c1 = std::min(a.n, c0 + x_rows);
      for (int64_t g = gw0; g < gw1; ++g) {
        const int64_t r0 = g * PackedWeights::kRows;
        const __mmask16 mask = m - r0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (m - r0)) - 1);
        int64_t i = c0;
        if constexpr (K == kQ8_0 || K == kQ4_0) {
          // Pairs of groups share the activation broadcasts (4 rows at a time); what is left of
          // the rows goes through the one-group tiles of both groups below. From 8 to 15 rows
          // (batched decode) one group x 8 rows reads each weight vector once instead of twice,
          // which measured faster; for 16 and more, pairs (there the 8-row tile measured slower;
          // Zen 4, docs/perf-log.md).
          if (g + 1 < gw1 && c1 - c0 >= 4 && (c1 - c0 < 8 || c1 - c0 >= 16)) {
            const int64_t r1 = r0 + PackedWeights::kRows;
            const __mmask16 mask1 =
                m - r1 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (m - r1)) - 1);
            for (; i + 4 <= c1; i += 4) tile2<4, K>(w, g, a, i, y, m, mask1);
            for (int64_t gg = g; gg <= g + 1; ++gg) {
              const __mmask16 mk = gg == g ? mask : mask1;
              int64_t t = i;
              if (t + 2 <= c1) {
                tile<2, K>(w, gg, a, t, y, m, mk);
                t += 2;
              }
              if (t < c1) tile<1, K>(w, gg, a, t, y, m, mk);
            }
            ++g;  // both groups done
            continue;
          }
        }
        if constexpr (kWide) {
          for (; i + 8 <= c1; i += 8) tile<8, K>(w, g, a, i, y, m, mask);
        }
        for (; i + 4 <= c1; i += 4) tile<4, K>(w, g, a, i, y, m, mask);
        if (i + 2 <= c1) {
          tile<2, K>(w, g, a, i, y, m, mask);
          i += 2;
        }
        if (i < c1) tile<1, K>(w, g, a, i, y, m, mask);
      }
    }
  }
}

}  // namespace

SLUICE_TARGET void gemm_packed(const PackedWeights& w, int64_t g0, int64_t g1,
                               const QuantizedActs& a, float* y, int64_t m) {
  switch (w.type()) {
    case GgmlType::Q4_0:
      gemm_packed_t<kQ4_0>(w, g0, g1, a, y, m);
      return;
    case GgmlType::Q4_K:
      gemm_packed_t<kQ4_K>(w, g0, g1, a, y, m);
      return;
    case GgmlType::Q6_K:
      gemm_packed_t<kQ6_K>(w, g0, g1, a, y, m);
      return;
    case GgmlType::MXFP4:  // a.d: the f16-rounded block scales (matmul.cpp)
      gemm_packed_t<kMxfp4>(w, g0, g1, a, y, m);
      return;
    default:
      gemm_packed_t<kQ8_0>(w, g0, g1, a, y, m);
      return;
  }
}

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
