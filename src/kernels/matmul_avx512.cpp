// The AVX-512 (F/BW/VL/DQ + VNNI) build of matmul_simd.inc, plus kernels that only exist here:
// activation quantization, 512-bit f16 GEMM tiles and the AVX512-BF16 GEMM.
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/quants.h"
#include "kernels/dequant.h"
#include "kernels/matmul_kernels.h"
#include "kernels/packed.h"

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
                                 float* s_out, int32_t* bias_out, int32_t* bias16_out) {
  const int64_t nb = k / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * k;
    int8_t* q = qs + i * k;
    float* d = d_out + i * nb;
    float* s = s_out + i * nb;
    int32_t* bias = bias_out + i * nb;
    int32_t* bias16 = bias16_out + 2 * i * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 x0 = _mm512_loadu_ps(xr + 32 * b);
      const __m512 x1 = _mm512_loadu_ps(xr + 32 * b + 16);
      const float amax =
          hmax512(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
      alignas(64) int32_t lanes[32];
      _mm512_store_si512(lanes, q0);
      _mm512_store_si512(lanes + 16, q1);
      int32_t h0 = 0, h1 = 0;
      for (int l = 0; l < 16; ++l) {
        h0 += lanes[l];
        h1 += lanes[16 + l];
      }
      finish_act_block(amax, h0, h1, b, d, s, bias, bias16);
    }
  }
}

// The four horizontal sums of a0..a3 in one register, with 4 + 2 + 4 shuffles/adds instead of
// four separate reductions.
SLUICE_TARGET inline __m128 hsum4x512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Per 128-bit lane: [a0 + a0', a1 + a1', a0 .., a1 ..] -> [s0, s1, s2, s3] partials.
  const __m512 s = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a01), _mm512_castps_pd(a23))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a01), _mm512_castps_pd(a23))));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Where an F16 register tile's weights are, from its first row and column block on.
// The GGUF rows: row a of the tile at w + a * rb.
struct F16Rows {
  const uint8_t* w;
  size_t rb;
  const uint8_t* at(int a, int64_t j) const { return w + a * rb + 2 * j; }
  // The same line of the next tile's rows (tiles go down the rows), once per 64 bytes.
  template <int NW>
  SLUICE_TARGET void prefetch(int64_t j) const {
    if (j % 32 != 0) return;
    for (int a = 0; a < NW; ++a)
      _mm_prefetch(reinterpret_cast<const char*>(at(a + NW, j)), _MM_HINT_T0);
  }
};
// NW weight rows x NX activation rows per register tile over `len` columns (x rows `ldx`
// apart): per 16 columns NW conversions, NX loads, NW * NX FMAs into as many accumulators.
template <int NW, int NX, class Layout>
SLUICE_TARGET void tile_f16(Layout w, const float* x, int64_t ldx, int64_t len,
                            float* out /* [NW][NX] */) {
  __m512 acc[NW][NX];
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) acc[a][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    __m512 wv[NW];
    w.template prefetch<NW>(j);
    for (int a = 0; a < NW; ++a) {
      wv[a] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.at(a, j))));
    }
    for (int i = 0; i < NX; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + j);
      for (int a = 0; a < NW; ++a) acc[a][i] = _mm512_fmadd_ps(wv[a], xv, acc[a][i]);
    }
  }
  // One reduction tree for every tile shape (missing rows are zeros), so an output's value
  // does not depend on the tile that computed it.
  const __m512 zero = _mm512_setzero_ps();
  for (int i = 0; i < NX; ++i) {
    alignas(16) float s4[4];
    _mm_store_ps(s4, hsum4x512(acc[0][i], NW > 1 ? acc[NW > 1 ? 1 : 0][i] : zero,
                               NW > 2 ? acc[NW > 2 ? 2 : 0][i] : zero,
                               NW > 3 ? acc[NW > 3 ? 3 : 0][i] : zero));
    for (int a = 0; a < NW; ++a) out[a * NX + i] = s4[a];
  }
}

// Weight rows [r, r + nw) (`w` positioned at row r, column kb; the first nv of them are
// stored) x activation rows [i, i + nx_max) (nx_max <= 6) over the k-block [kb, kb + len):
// y = (kb == 0 ? 0 : y) + one f32 dot per output, whichever tile computes it.
template <class Layout>
SLUICE_TARGET void f16_block(Layout w, const float* x, int64_t k, float* y, int64_t m, int64_t r,
                             int nw, int nv, int64_t i, int64_t nx_max, int64_t kb, int64_t len) {
  float out[24];
  auto put = [&](int64_t t0, int nx) {
    for (int a = 0; a < nv; ++a) {
      for (int t = 0; t < nx; ++t) {
        float& dst = y[(i + t0 + t) * m + r + a];
        dst = kb == 0 ? out[a * nx + t] : dst + out[a * nx + t];
      }
    }
  };
  const float* xb = x + i * k + kb;
  int64_t t = 0;
  if (nw == 4 && nx_max == 6) {
    tile_f16<4, 6>(w, xb, k, len, out);
    put(0, 6);
    return;
  }
  if (nw == 4 && nx_max >= 4) {
    tile_f16<4, 4>(w, xb, k, len, out);
    put(0, 4);
    t = 4;
  } else if (nw == 2 && nx_max >= 4) {
    tile_f16<2, 4>(w, xb, k, len, out);
    put(0, 4);
    t = 4;
  } else if (nw == 1 && nx_max >= 4) {
    tile_f16<1, 4>(w, xb, k, len, out);
    put(0, 4);
    t = 4;
  }
  for (; t < nx_max; ++t) {
    const float* xt = xb + t * k;
    if (nw == 4)
      tile_f16<4, 1>(w, xt, k, len, out);
    else if (nw == 2)
      tile_f16<2, 1>(w, xt, k, len, out);
    else
      tile_f16<1, 1>(w, xt, k, len, out);
    put(t, 1);
  }
}

// F16 GEMM/GEMV over GGUF rows (packed F16 weights: matmul_cols16.inc, below) in 1024-column
// k-blocks with register tiles of 4 weight rows x 6 activation rows (24 accumulators:
// FMA-bound). Each output is the sum over k-blocks, in order, of one f32 dot per block, whatever
// the tile and loop order: the same arithmetic whatever the batch.
//   n > 6 (prefill): per chunk of weight rows (~256 KiB of a k-block, kept in L2) and k-block,
//     every 6 activation rows (24 KiB of the block: L1) are swept against the chunk.
//   n <= 6 (decode): row tiles outermost, k-blocks inside, so weights stream sequentially.
// tile(r, kb) is the layout at row r (a tile's first row), column kb; rows_at(r, end) the rows
// of the tile starting at r: {computed, stored}.
template <class TileAt, class RowsAt>
SLUICE_TARGET void f16_sweep(TileAt tile, RowsAt rows_at, int64_t r0, int64_t r1, const float* x,
                             int64_t n, int64_t k, float* y, int64_t m) {
  constexpr int64_t kKb = 1024;
  if (n <= 6) {
    for (int64_t r = r0; r < r1;) {
      const auto [nw, nv] = rows_at(r, r1);
      for (int64_t kb = 0; kb < k; kb += kKb) {
        f16_block(tile(r, kb), x, k, y, m, r, nw, nv, 0, n, kb, std::min(kKb, k - kb));
      }
      r += nw;
    }
    return;
  }
  const int64_t w_chunk = std::max<int64_t>(4, ((256 << 10) / (2 * std::min(k, kKb))) & ~3);
  for (int64_t w0 = r0; w0 < r1; w0 += w_chunk) {
    const int64_t w1 = std::min(r1, w0 + w_chunk);
    for (int64_t kb = 0; kb < k; kb += kKb) {
      const int64_t len = std::min(kKb, k - kb);
      for (int64_t i = 0; i < n; i += 6) {
        for (int64_t r = w0; r < w1;) {
          const auto [nw, nv] = rows_at(r, w1);
          f16_block(tile(r, kb), x, k, y, m, r, nw, nv, i, std::min<int64_t>(6, n - i), kb, len);
          r += nw;
        }
      }
    }
  }
}

SLUICE_TARGET void gemm_f16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                  int64_t n, int64_t k, float* y, int64_t m) {
  const size_t rb = size_t(k) * 2;
  auto tile = [&](int64_t r, int64_t kb) {
    return F16Rows{w + size_t(r) * rb + size_t(kb) * 2, rb};
  };
  auto rows_at = [](int64_t r, int64_t end) {
    const int nw = r + 4 <= end ? 4 : r + 2 <= end ? 2 : 1;
    return std::pair<int, int>(nw, nw);
  };
  f16_sweep(tile, rows_at, r0, r1, x, n, k, y, m);
}

namespace {

// 512-bit vectors for matmul_cols16.inc: a column's 16 F16 rows are one conversion. (BF16 stays
// a copy of the rows on this ISA: gemm_bf16_dp.)
struct Cols16Avx512 {
  using V = __m512;
  static constexpr int kVecs = 1;
  // 8 accumulators: enough chains for two 512-bit FMA pipes (Zen 5, Intel); 512 columns keep
  // the 8 activation rows' block (16 KiB) in L1 (measured on Zen 4: 6 x 1024 the same within
  // the noise, 12 x 512 slower).
  static constexpr int kMaxNx = 8;
  static constexpr int64_t kKb = 512;
  template <bool kBf16>
  SLUICE_TARGET static V load(const uint8_t* col, int) {
    static_assert(!kBf16, "AVX-512 reads BF16 from its rows");
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
  }
  SLUICE_TARGET static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  SLUICE_TARGET static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  SLUICE_TARGET static V zero() { return _mm512_setzero_ps(); }
  SLUICE_TARGET static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  SLUICE_TARGET static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/matmul_cols16.inc"

}  // namespace

SLUICE_TARGET void gemm_f16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x,
                                   int64_t n, float* y, int64_t m) {
  cols16::gemm<Cols16Avx512, false>(w, g0, g1, x, n, y, m);
}

#define SLUICE_TARGET_BF16 \
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
SLUICE_TARGET_BF16 void tile_bf16(const uint8_t* w, size_t row_bytes, const uint16_t* x, int64_t k,
                                  float* out) {
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
    for (int i = 0; i < NX; ++i) out[a * NX + i] = hsum512(acc[a][i]);
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
          if (nw == 2 && nx == 4)
            tile_bf16<2, 4>(wr, rb, xr, k, out);
          else if (nw == 2)
            tile_bf16<2, 1>(wr, rb, xr, k, out);
          else if (nx == 4)
            tile_bf16<1, 4>(wr, rb, xr, k, out);
          else
            tile_bf16<1, 1>(wr, rb, xr, k, out);
          for (int a = 0; a < nw; ++a)
            for (int t = 0; t < nx; ++t) y[(i + t) * m + r + a] = out[a * nx + t];
          i += nx;
        }
      }
    }
  }
}

namespace {

// Blocks of one MXFP4 row the AVX-512 kernel takes (rows of up to 65536 columns).
constexpr int64_t kMxfp4MaxBlocks = 2048;

// MXFP4 by groups of 4 blocks (128 weights). The activations are laid out again once per call,
// per group: the 4 blocks' first 16 bytes (the weights' low nibbles), then their last 16 (the
// high nibbles), so that the 4 blocks' codes side by side split into two vectors that meet their
// activations lane for lane:
//   codes  [c0 | c1 | c2 | c3]             (16 bytes each, 17 bytes apart in the row)
//   lo     [c0 & 15 | c1 & 15 | ...]  x  [x0[0:16] | x1[0:16] | x2[0:16] | x3[0:16]]
//   hi     [c0 >> 4 | c1 >> 4 | ...]  x  [x0[16:32] | ...]
// |w| comes from a table of the E2M1 magnitudes (doubled), its sign from the code's bit 3 (x is
// negated there: vpdpbusd multiplies unsigned by signed); both halves go into one vpdpbusd
// chain whose 16 lanes hold 4 lanes a block, scaled by d16 * 2^(e - 128) into f32 lanes.
constexpr int64_t kMxfp4Group = 4;

// A row's block scales 2^(e - 128) (mxfp4_half_scale, 16 blocks per gather of their first
// bytes; e < 2: the subnormals 2^-127, 2^-126) into hs [nb rounded up to 16], zeros past nb.
SLUICE_TARGET inline void mxfp4_row_scales(const uint8_t* row, int64_t nb, float* hs) {
  const __m512i stride =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(int(sizeof(BlockMxfp4))));
  for (int64_t b = 0; b < nb; b += 16) {
    const __mmask16 live = nb - b >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - b)) - 1);
    const __m512i raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, stride,
                                                    row + b * int64_t(sizeof(BlockMxfp4)), 1);
    const __m512i e = _mm512_and_si512(raw, _mm512_set1_epi32(0xff));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    _mm512_store_si512(hs + b,
                       _mm512_maskz_mov_epi32(live, _mm512_mask_blend_epi32(tiny, normal, sub)));
  }
}

// One row (codes at `row`, block scales `hs`) against NA activation rows from i0: `xr`
// [n][groups][128] the activations laid out as above (a last group of fewer blocks padded with
// zeros), `ds` [n][groups][16] their block scales, 4 lanes a block.
template <int NA>
SLUICE_TARGET inline void mxfp4_row(const uint8_t* row, int64_t nb, const float* hs,
                                    const int8_t* xr, const float* ds, int64_t i0, float* y,
                                    int64_t m) {
  const int64_t n_groups = (nb + kMxfp4Group - 1) / kMxfp4Group;
  // The E2M1 magnitudes (doubled): kMxfp4Values without their signs.
  const __m512i mags = _mm512_broadcast_i32x4(
      _mm_abs_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values))));
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i bit3 = _mm512_set1_epi8(0x08);
  const __m512i spread4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc[NA];
  for (int k = 0; k < NA; ++k) acc[k] = _mm512_setzero_ps();
  const __m128i zero16 = _mm_setzero_si128();
  for (int64_t g = 0; g < n_groups; ++g) {
    const int64_t b = g * kMxfp4Group;
    const uint8_t* blk = row + b * int64_t(sizeof(BlockMxfp4));
    const auto codes = [&](int64_t j) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + j * sizeof(BlockMxfp4) + 1));
    };
    __m512i c;
    if (b + kMxfp4Group <= nb) {  // a whole group: no test per block
      c = _mm512_castsi128_si512(codes(0));
      c = _mm512_inserti32x4(c, codes(1), 1);
      c = _mm512_inserti32x4(c, codes(2), 2);
      c = _mm512_inserti32x4(c, codes(3), 3);
    } else {  // the last 1-3 blocks; the lanes past them zero (their activations are too)
      c = _mm512_zextsi128_si512(codes(0));
      c = _mm512_inserti32x4(c, b + 1 < nb ? codes(1) : zero16, 1);
      c = _mm512_inserti32x4(c, b + 2 < nb ? codes(2) : zero16, 2);
    }
    const __m512i lo = _mm512_and_si512(c, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
    const __m512i alo = _mm512_shuffle_epi8(mags, lo);
    const __m512i ahi = _mm512_shuffle_epi8(mags, hi);
    const __mmask64 nlo = _mm512_test_epi8_mask(lo, bit3);
    const __mmask64 nhi = _mm512_test_epi8_mask(hi, bit3);
    const __m512 ws = _mm512_permutexvar_ps(spread4, _mm512_castps128_ps512(_mm_load_ps(hs + b)));
    for (int k = 0; k < NA; ++k) {
      const int8_t* x = xr + ((i0 + k) * n_groups + g) * 128;
      __m512i xlo = _mm512_loadu_si512(x);
      __m512i xhi = _mm512_loadu_si512(x + 64);
      xlo = _mm512_mask_sub_epi8(xlo, nlo, _mm512_setzero_si512(), xlo);
      xhi = _mm512_mask_sub_epi8(xhi, nhi, _mm512_setzero_si512(), xhi);
      const __m512i dot =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), alo, xlo), ahi, xhi);
      const __m512 dsv = _mm512_loadu_ps(ds + ((i0 + k) * n_groups + g) * 16);
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dsv, ws), acc[k]);
    }
  }
  for (int k = 0; k < NA; ++k) y[k * m] = hsum512(acc[k]);
}

}  // namespace

SLUICE_TARGET void gemm_mxfp4(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                              const QuantizedActs& a, const float* d16, float* y, int64_t m) {
  const int64_t nb = a.k / 32, n_groups = (nb + kMxfp4Group - 1) / kMxfp4Group;
  if (nb > kMxfp4MaxBlocks) {  // rows longer than any model's: the AVX2 kernel
    kern_avx2::gemm_mxfp4(w, row_bytes, r0, r1, a, d16, y, m);
    return;
  }
  // The activations and their scales laid out by groups once per call (this thread's rows all
  // read them): 128 bytes and 16 floats a group of 4 blocks.
  thread_local std::vector<int8_t> xr;
  thread_local std::vector<float> ds;
  xr.assign(size_t(a.n * n_groups * 128), 0);
  ds.assign(size_t(a.n * n_groups * 16), 0.0f);
  for (int64_t i = 0; i < a.n; ++i) {
    const int8_t* q = a.qs + i * a.stride;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t g = b / kMxfp4Group, j = b % kMxfp4Group;
      int8_t* dst = xr.data() + (i * n_groups + g) * 128 + j * 16;
      std::memcpy(dst, q + b * 32, 16);
      std::memcpy(dst + 64, q + b * 32 + 16, 16);
      float* dd = ds.data() + (i * n_groups + g) * 16 + j * 4;
      dd[0] = dd[1] = dd[2] = dd[3] = d16[i * nb + b];
    }
  }
  alignas(64) float hs[kMxfp4MaxBlocks + 16];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + size_t(r) * row_bytes;
    mxfp4_row_scales(row, nb, hs);  // once a row, for all its activation tiles
    int64_t i = 0;
    for (; i + 4 <= a.n; i += 4) {
      mxfp4_row<4>(row, nb, hs, xr.data(), ds.data(), i, y + i * m + r, m);
    }
    for (; i < a.n; ++i) mxfp4_row<1>(row, nb, hs, xr.data(), ds.data(), i, y + i * m + r, m);
  }
}

#undef SLUICE_TARGET_BF16
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
