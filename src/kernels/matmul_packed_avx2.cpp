// AVX2 kernels over PackedWeights (packed.h), the same packed layout as the AVX-512 VNNI ones:
// a 64-byte vector [16 rows][4 bytes] is two 256-bit halves, rows 0-7 and rows 8-15, so one
// vpmaddubsw + vpmaddwd against the broadcast 4 activation bytes gives lane r = row r's partial
// dot, with no horizontal sums.
//
// vpmaddubsw (u8 x s8, int16 pair sums that saturate past 32767) sets what each type may sum in
// 16 bits before widening:
//   Q4_0, Q4_K: q in [0, 15]: a pair sum <= 2 * 15 * 127 = 3810, so the int16 sums of 8 vectors
//     (one block / sub-block) fit and are widened once (one vpmaddwd per 8 vpmaddubsw);
//   Q6_K: q in [0, 63]: <= 16002, two vectors per 16-bit sum;
//   Q8_0: stored q + 128 for vpdpbusd; here q = stored ^ 0x80 is signed and the product goes
//     through the sign trick (|q| as u8 times sign(q) * x as s8, <= 2 * 128 * 127 = 32512): one
//     widening per vector, and no bias term.
// Integer sums are exact, and each output takes one f32 fused multiply-add per block in column
// order (Q4_K: per sub-block, then its minimum), whatever the tile: a row's result does not
// depend on the batch it was computed in or the thread count.
//
// Tiles: NH halves (8 rows each) x NX activation rows. Decode (few rows) takes both halves of a
// group at once, so every 64-byte line of the weight stream is read once, in order; prefill
// takes one half x 4 activation rows (16 ymm registers: 4 f32 + 4 int accumulators and the
// decoded weights).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_kernels.h"
#include "kernels/packed.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))

namespace {

enum Kind { kQ8_0, kQ4_0, kQ4_K, kQ6_K };

// Software prefetch distance on the weight stream (bytes).
constexpr int64_t kAhead = 4096;

SLUICE_TARGET inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

SLUICE_TARGET inline __m256i load32(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// 8 f16 scales -> f32.
SLUICE_TARGET inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

SLUICE_TARGET inline __m256 load_u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

SLUICE_TARGET inline __m256 load_s8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The activation row pointers, hidden from the optimizer: each half re-loads its broadcasts
// (a load-port uop each) instead of the compiler keeping the first half's in registers for the
// second, which spills them to the stack (measured: most of a Q4_0 tile's time in spill stores).
template <int NX>
inline void launder(const int8_t* (&xq)[NX], const int8_t* const (&src)[NX]) {
  for (int i = 0; i < NX; ++i) {
    xq[i] = src[i];
    asm("" : "+r"(xq[i]));
  }
}

// int16 pairs -> int32 lanes.
SLUICE_TARGET inline __m256i widen(__m256i v) {
  return _mm256_madd_epi16(v, _mm256_set1_epi16(1));
}

// Halves [h0, h0 + NH) of group g (rows 16 g + 8 h ..) x activation rows [i0, i0 + NX):
// y[(i0 + i) * m + row] for the rows below m.
template <int NH, int NX, Kind K>
SLUICE_TARGET void tile(const PackedWeights& w, int64_t g, int h0, const QuantizedActs& a,
                        int64_t i0, float* y, int64_t m, bool prefetch) {
  const ActRows<NX> x(a, i0);
  const uint8_t* wq = w.quants(g);
  const uint8_t* meta = w.meta(g);
  const int64_t nu = w.n_units();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 facc[NH][NX];
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < NX; ++i) facc[h][i] = _mm256_setzero_ps();

  // Per unit, the halves one after the other (integer accumulators for one half only: fewer
  // live registers); a unit's bytes are contiguous, so the second half reads lines already in L1.
  if constexpr (K == kQ8_0 || K == kQ4_0) {
    constexpr int64_t kQb = K == kQ4_0 ? 256 : 512;
    for (int64_t b = 0; b < nu; ++b) {
      const uint8_t* v = wq + b * kQb;
      if (prefetch) {
        for (int64_t l = 0; l < kQb; l += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(v + kAhead + l), _MM_HINT_T0);
        }
      }
      const int64_t col = 32 * b;
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h) {
        const int hh = h0 + h;
        const int8_t* xq[NX];
        launder(xq, x.q);
        __m256i iacc[NX];
        for (int i = 0; i < NX; ++i) iacc[i] = _mm256_setzero_si256();
        if constexpr (K == kQ4_0) {
#pragma GCC unroll 1
          for (int j = 0; j < 4; ++j) {
            const __m256i raw = load32(v + 64 * j + 32 * hh);
            const __m256i lo = _mm256_and_si256(raw, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            for (int i = 0; i < NX; ++i) {
              iacc[i] = _mm256_add_epi16(
                  iacc[i],
                  _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(xq[i] + col + 4 * j)),
                                   _mm256_maddubs_epi16(hi, bcast4(xq[i] + col + 16 + 4 * j))));
            }
          }
          for (int i = 0; i < NX; ++i) {
            iacc[i] = _mm256_add_epi32(widen(iacc[i]), _mm256_set1_epi32(x.bias[i][b] >> 4));
          }
        } else {
          const __m256i flip = _mm256_set1_epi8(char(0x80));
          // Not unrolled: unrolled, the compiler loads every vector of the block up front and
          // spills the broadcasts (perf annotate: ~130 stack accesses in the 1 x 4 tile).
#pragma GCC unroll 1
          for (int j = 0; j < 8; ++j) {
            const __m256i q = _mm256_xor_si256(load32(v + 64 * j + 32 * hh), flip);
            const __m256i aq = _mm256_sign_epi8(q, q);
            for (int i = 0; i < NX; ++i) {
              const __m256i xs = _mm256_sign_epi8(bcast4(xq[i] + col + 4 * j), q);
              iacc[i] = _mm256_add_epi32(iacc[i], widen(_mm256_maddubs_epi16(aq, xs)));
            }
          }
        }
        const __m256 dw = load_f16x8(meta + 32 * b + 16 * hh);
        for (int i = 0; i < NX; ++i) {
          facc[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[i]),
                                       _mm256_mul_ps(dw, _mm256_set1_ps(x.d[i][b])), facc[h][i]);
        }
      }
    }
  } else if constexpr (K == kQ4_K) {
    for (int64_t u = 0; u < nu; ++u) {
      const uint8_t* v = wq + u * 2048;
      const uint8_t* mt = meta + u * 320;
      for (int p = 0; p < 4; ++p) {
        if (prefetch) {
          for (int64_t l = 0; l < 512; l += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(v + 512 * p + kAhead + l), _MM_HINT_T0);
          }
        }
        const int64_t sb = 8 * u + 2 * p;  // activation block of the pair's low sub-block
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
          const int hh = h0 + h;
          const int8_t* xq[NX];
          launder(xq, x.q);
          const __m256 d = load_f16x8(mt + 16 * hh), dmin = load_f16x8(mt + 32 + 16 * hh);
          // The pair's two sub-blocks one after the other (low nibbles, then high ones): NX
          // integer accumulators live instead of 2 NX, so the 1 x 4 prefill tile keeps its f32
          // accumulators and the nibble mask in registers (with both at once it spilled one
          // accumulator per vector and the f32 ones per pair). The second pass re-reads the
          // pair's 512 bytes from L1; the weight pointer is hidden from the optimizer between
          // the passes so it does not keep the first pass's vectors for the second.
          const uint8_t* vp = v + 512 * p + 32 * hh;
#pragma GCC unroll 2
          for (int t = 0; t < 2; ++t) {
            asm("" : "+r"(vp));
            __m256i iacc[NX];
            for (int i = 0; i < NX; ++i) iacc[i] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int j = 0; j < 8; ++j) {
              const __m256i raw = load32(vp + 64 * j);
              const __m256i q = _mm256_and_si256(t == 0 ? raw : _mm256_srli_epi16(raw, 4), m4);
              for (int i = 0; i < NX; ++i) {
                iacc[i] = _mm256_add_epi16(
                    iacc[i], _mm256_maddubs_epi16(q, bcast4(xq[i] + 32 * (sb + t) + 4 * j)));
              }
            }
            const int s = 2 * p + t;
            const __m256 sc = _mm256_mul_ps(d, load_u8x8(mt + 64 + 16 * s + 8 * hh));
            const __m256 mn = _mm256_mul_ps(dmin, load_u8x8(mt + 192 + 16 * s + 8 * hh));
            for (int i = 0; i < NX; ++i) {
              const __m256 dots = _mm256_cvtepi32_ps(widen(iacc[i]));
              facc[h][i] = _mm256_fmadd_ps(dots, _mm256_mul_ps(sc, _mm256_set1_ps(x.d[i][sb + t])),
                                           facc[h][i]);
              facc[h][i] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(x.s[i][sb + t]), facc[h][i]);
            }
          }
        }
      }
    }
  } else {  // kQ6_K
    const __m256i m30 = _mm256_set1_epi8(0x30);
    for (int64_t u = 0; u < nu; ++u) {
      const uint8_t* v = wq + u * 3072;
      const uint8_t* mt = meta + u * 288;
      for (int g16 = 0; g16 < 16; ++g16) {
        const uint8_t* gv = v + 192 * g16;
        if (prefetch) {
          for (int64_t l = 0; l < 192; l += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(gv + kAhead + l), _MM_HINT_T0);
          }
        }
        const int64_t col = 256 * u + 16 * g16;
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
          const int hh = h0 + h;
          const int8_t* xq[NX];
          launder(xq, x.q);
          const __m256i v0 = load32(gv + 32 * hh), v1 = load32(gv + 64 + 32 * hh);
          const __m256i vh = load32(gv + 128 + 32 * hh);
          // q = low nibble | high bit pair << 4, in [0, 63].
          const __m256i q0 = _mm256_or_si256(_mm256_and_si256(v0, m4),
                                             _mm256_and_si256(_mm256_slli_epi16(vh, 4), m30));
          const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4),
                                             _mm256_and_si256(_mm256_slli_epi16(vh, 2), m30));
          const __m256i q2 = _mm256_or_si256(_mm256_and_si256(v1, m4), _mm256_and_si256(vh, m30));
          const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi16(vh, 2), m30));
          const __m256 dsc =
              _mm256_mul_ps(load_f16x8(mt + 16 * hh), load_s8x8(mt + 32 + 16 * g16 + 8 * hh));
          for (int i = 0; i < NX; ++i) {
            const int8_t* xc = xq[i] + col;
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4(xc)),
                                                 _mm256_maddubs_epi16(q1, bcast4(xc + 4)));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(q2, bcast4(xc + 8)),
                                                 _mm256_maddubs_epi16(q3, bcast4(xc + 12)));
            const __m256i acc = _mm256_add_epi32(_mm256_add_epi32(widen(p01), widen(p23)),
                                                 _mm256_set1_epi32(-32 * x.sum16[i][col / 16]));
            facc[h][i] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc),
                                _mm256_mul_ps(dsc, _mm256_set1_ps(x.d[i][col / 32])), facc[h][i]);
          }
        }
      }
    }
  }

  for (int h = 0; h < NH; ++h) {
    const int64_t r0 = g * PackedWeights::kRows + 8 * (h0 + h);
    const int64_t nv = std::min<int64_t>(8, m - r0);
    if (nv <= 0) continue;
    for (int i = 0; i < NX; ++i) {
      float* dst = y + (i0 + i) * m + r0;
      if (nv == 8) {
        _mm256_storeu_ps(dst, facc[h][i]);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, facc[h][i]);
        std::memcpy(dst, tmp, size_t(nv) * sizeof(float));
      }
    }
  }
}

template <Kind K>
SLUICE_TARGET void gemm_packed_t(const PackedWeights& w, int64_t g0, int64_t g1,
                                 const QuantizedActs& a, float* y, int64_t m) {
  const int64_t group_bytes = w.n_units() * (w.unit_quant_bytes() + w.unit_meta_bytes());
  // Cache blocking as the AVX-512 kernel: a chunk of activation rows (~256 KiB) stays in L2
  // while a chunk of weight groups (~128 KiB) is swept against it.
  const int64_t x_rows = std::max<int64_t>(4, ((256 << 10) / a.k) & ~int64_t(3));
  const int64_t w_groups = std::max<int64_t>(1, (128 << 10) / group_bytes);
  for (int64_t gw0 = g0; gw0 < g1; gw0 += w_groups) {
    const int64_t gw1 = std::min(g1, gw0 + w_groups);
    for (int64_t c0 = 0; c0 < a.n; c0 += x_rows) {
      const int64_t c1 = std::min(a.n, c0 + x_rows);
      for (int64_t g = gw0; g < gw1; ++g) {
        const bool second_half = g * PackedWeights::kRows + 8 < m;
        if (c1 - c0 <= 2) {  // decode: both halves, the weight stream read once in order
          if (c1 - c0 == 2) {
            tile<2, 2, K>(w, g, 0, a, c0, y, m, true);
          } else {
            tile<2, 1, K>(w, g, 0, a, c0, y, m, true);
          }
          continue;
        }
        for (int h = 0; h < (second_half ? 2 : 1); ++h) {
          int64_t i = c0;
          // The first tile over a group reads it from DRAM (the rest from L1/L2): it prefetches
          // the stream ahead, as decode does.
          const bool first = h == 0 && c0 == 0;
          for (; i + 4 <= c1; i += 4) tile<1, 4, K>(w, g, h, a, i, y, m, first && i == c0);
          if (i + 2 <= c1) {
            tile<1, 2, K>(w, g, h, a, i, y, m, first && i == c0);
            i += 2;
          }
          if (i < c1) tile<1, 1, K>(w, g, h, a, i, y, m, first && i == c0);
        }
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
    default:
      gemm_packed_t<kQ8_0>(w, g0, g1, a, y, m);
      return;
  }
}

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
