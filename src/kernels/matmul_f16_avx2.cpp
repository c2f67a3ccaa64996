// AVX2 + F16C GEMM/GEMV over F16 weights.
//
// GGUF rows (and F32 and BF16 ones: the same tiles with another conversion) in the design of the
// AVX-512 kernel (matmul_avx512.cpp) at 256 bits: register tiles of NW weight rows x NX
// activation rows (4 x 3 at most: 12 accumulators of 16 ymm registers), 1024-column k-blocks.
// Each output is the sum over k-blocks, in order, of one f32 dot per block, accumulated 8
// columns per fused multiply-add in column order whatever the tile: the result does not
// depend on the batch or the thread count.
//
// Packed F16 weights (packed.h's kColumns16, what the model runs) in the other form: 16 rows
// per column converted to two vectors of rows, times one broadcast activation, so an output
// row is a vector lane and each output one FMA chain over its columns in order (no horizontal
// sums, no k-block partial sums): 1 x 6 tiles of 16 rows in prefill, 2 conversions and 6
// broadcasts per 12 FMAs.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/matmul_kernels.h"
#include "kernels/packed.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))

namespace {

constexpr int kMaxNx = 3;

// The four horizontal sums of a0..a3 in one register: 9 shuffles/adds instead of four separate
// reductions of 5 (with 12 accumulators, the tile's epilogue cost as much as ~10% of a 1024-column
// k-block, and most of a small model's 64-column one). One tree for every lane:
// ((v0 + v2) + (v1 + v3)) + ((v4 + v6) + (v5 + v7)).
SLUICE_TARGET inline __m128 hsum4x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 a01 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 a23 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  const __m256 s = _mm256_add_ps(
      _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a01), _mm256_castps_pd(a23))),
      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a01), _mm256_castps_pd(a23))));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// The GGUF rows of F16 or (kBf16) BF16 weights: row a of the tile at w + a * rb. A bf16 is the
// high half of its f32, so BF16 converts exactly with a zero-extend and a shift.
template <bool kBf16>
struct Rows {
  static constexpr bool kTail = false;
  const uint8_t* w;
  size_t rb;
  const uint8_t* at(int a, int64_t j) const { return w + a * rb + 2 * j; }
  SLUICE_TARGET __m256 load(int a, int64_t j) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at(a, j)));
    if constexpr (kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
  template <int NW>
  SLUICE_TARGET void prefetch(int64_t j) const {  // the same line of the next tile's rows
    if (j % 32 != 0) return;
    for (int a = 0; a < NW; ++a)
      _mm_prefetch(reinterpret_cast<const char*>(at(a + NW, j)), _MM_HINT_T0);
  }
};

// F32 rows (any k): row a of the tile at w + a * rb; the last k % 8 columns are summed
// one by one after the vector part.
struct RowsF32 {
  static constexpr bool kTail = true;
  const uint8_t* w;
  size_t rb;
  const float* at(int a, int64_t j) const { return reinterpret_cast<const float*>(w + a * rb) + j; }
  SLUICE_TARGET __m256 load(int a, int64_t j) const { return _mm256_loadu_ps(at(a, j)); }
  template <int NW>
  SLUICE_TARGET void prefetch(int64_t j) const {
    for (int a = 0; a < NW; ++a)
      _mm_prefetch(reinterpret_cast<const char*>(at(a + NW, j)), _MM_HINT_T0);
  }
};

// NW rows x NX activation rows over `len` columns (a multiple of 16 unless Layout::kTail; x
// rows `ldx` apart).
template <int NW, int NX, class Layout>
SLUICE_TARGET void tile_f16(Layout w, const float* x, int64_t ldx, int64_t len, float* out) {
  __m256 acc[NW][NX];
  for (int a = 0; a < NW; ++a)
    for (int i = 0; i < NX; ++i) acc[a][i] = _mm256_setzero_ps();
  const int64_t len8 = len & ~int64_t(7);
  for (int64_t j = 0; j < len8; j += 8) {
    if (j % 16 == 0) w.template prefetch<NW>(j);
    __m256 xv[NX];
    for (int i = 0; i < NX; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + j);
    for (int a = 0; a < NW; ++a) {
      const __m256 wv = w.load(a, j);
      for (int i = 0; i < NX; ++i) acc[a][i] = _mm256_fmadd_ps(wv, xv[i], acc[a][i]);
    }
  }
  // One reduction tree for every tile shape (missing rows are zeros), so an output's value
  // does not depend on the tile that computed it.
  const __m256 zero = _mm256_setzero_ps();
  for (int i = 0; i < NX; ++i) {
    alignas(16) float s4[4];
    _mm_store_ps(s4, hsum4x8(acc[0][i], NW > 1 ? acc[NW > 1 ? 1 : 0][i] : zero,
                             NW > 2 ? acc[NW > 2 ? 2 : 0][i] : zero,
                             NW > 3 ? acc[NW > 3 ? 3 : 0][i] : zero));
    for (int a = 0; a < NW; ++a) out[a * NX + i] = s4[a];
  }
  if constexpr (Layout::kTail) {
    for (int64_t j = len8; j < len; ++j)
      for (int a = 0; a < NW; ++a)
        for (int i = 0; i < NX; ++i) out[a * NX + i] += *w.at(a, j) * x[i * ldx + j];
  }
}

template <int NW, class Layout>
SLUICE_TARGET void tile_nx(Layout w, const float* xb, int64_t k, int64_t len, int64_t nx,
                           float* out) {
  switch (nx) {
    case 3:
      tile_f16<NW, 3>(w, xb, k, len, out);
      break;
    case 2:
      tile_f16<NW, 2>(w, xb, k, len, out);
      break;
    default:
      tile_f16<NW, 1>(w, xb, k, len, out);
      break;
  }
}

// The nw-row tile at `w` (the first nv rows stored, from row r) x activation rows [i, i + nx)
// (nx <= kMaxNx) over the k-block [kb, kb + len): y = (kb == 0 ? 0 : y) + the block's dot.
template <class Layout>
SLUICE_TARGET void f16_block(Layout w, const float* x, int64_t k, float* y, int64_t m, int64_t r,
                             int nw, int nv, int64_t i, int64_t nx, int64_t kb, int64_t len) {
  float out[4 * kMaxNx];
  const float* xb = x + i * k + kb;
  switch (nw) {
    case 4:
      tile_nx<4>(w, xb, k, len, nx, out);
      break;
    case 2:
      tile_nx<2>(w, xb, k, len, nx, out);
      break;
    default:
      tile_nx<1>(w, xb, k, len, nx, out);
      break;
  }
  for (int a = 0; a < nv; ++a) {
    for (int64_t t = 0; t < nx; ++t) {
      float& dst = y[(i + t) * m + r + a];
      dst = kb == 0 ? out[a * nx + t] : dst + out[a * nx + t];
    }
  }
}

// Every output over rows [r0, r1) (tile(r, kb): the layout at row r, column kb; rows_at(r, end):
// the tile's {computed, stored} rows).
template <class TileAt, class RowsAt>
SLUICE_TARGET void f16_sweep(TileAt tile, RowsAt rows_at, int64_t r0, int64_t r1, const float* x,
                             int64_t n, int64_t k, float* y, int64_t m) {
  constexpr int64_t kKb = 1024;
  if (n <= kMaxNx) {  // decode: tiles outermost, the weights stream once, in order
    for (int64_t r = r0; r < r1;) {
      const auto [nw, nv] = rows_at(r, r1);
      for (int64_t kb = 0; kb < k; kb += kKb) {
        f16_block(tile(r, kb), x, k, y, m, r, nw, nv, 0, n, kb, std::min(kKb, k - kb));
      }
      r += nw;
    }
    return;
  }
  // Prefill: per chunk of rows (~128 KiB of a k-block, kept in L2) and k-block, every kMaxNx
  // activation rows are swept against the chunk.
  const int64_t w_chunk = std::max<int64_t>(4, ((128 << 10) / (2 * std::min(k, kKb))) & ~3);
  for (int64_t w0 = r0; w0 < r1; w0 += w_chunk) {
    const int64_t w1 = std::min(r1, w0 + w_chunk);
    for (int64_t kb = 0; kb < k; kb += kKb) {
      const int64_t len = std::min(kKb, k - kb);
      for (int64_t i = 0; i < n; i += kMaxNx) {
        const int64_t nx = std::min<int64_t>(kMaxNx, n - i);
        for (int64_t r = w0; r < w1;) {
          const auto [nw, nv] = rows_at(r, w1);
          f16_block(tile(r, kb), x, k, y, m, r, nw, nv, i, nx, kb, len);
          r += nw;
        }
      }
    }
  }
}

// F16 or BF16 GGUF rows [r0, r1) in the register tiles.
template <bool kBf16>
SLUICE_TARGET void half_rows_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                   int64_t n, int64_t k, float* y, int64_t m) {
  const size_t rb = size_t(k) * 2;
  auto tile = [&](int64_t r, int64_t kb) {
    return Rows<kBf16>{w + size_t(r) * rb + size_t(kb) * 2, rb};
  };
  auto rows_at = [](int64_t r, int64_t end) {
    const int nw = r + 4 <= end ? 4 : r + 2 <= end ? 2 : 1;
    return std::pair<int, int>(nw, nw);
  };
  f16_sweep(tile, rows_at, r0, r1, x, n, k, y, m);
}

}  // namespace

SLUICE_TARGET void gemm_f16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                  int64_t n, int64_t k, float* y, int64_t m) {
  half_rows_tiled<false>(w, r0, r1, x, n, k, y, m);
}

SLUICE_TARGET void gemm_bf16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                   int64_t n, int64_t k, float* y, int64_t m) {
  half_rows_tiled<true>(w, r0, r1, x, n, k, y, m);
}

SLUICE_TARGET void gemm_f32_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x,
                                  int64_t n, int64_t k, float* y, int64_t m) {
  const size_t rb = size_t(k) * 4;
  auto tile = [&](int64_t r, int64_t kb) {
    return RowsF32{w + size_t(r) * rb + size_t(kb) * 4, rb};
  };
  auto rows_at = [](int64_t r, int64_t end) {
    const int nw = r + 4 <= end ? 4 : r + 2 <= end ? 2 : 1;
    return std::pair<int, int>(nw, nw);
  };
  f16_sweep(tile, rows_at, r0, r1, x, n, k, y, m);
}

namespace {

// 256-bit vectors for matmul_cols16.inc: two per 16 rows. BF16 columns hold rows r and r + 8 in
// lane r, so a shift and a mask (bf16 is the high half of its f32) give the two row vectors.
struct Cols16Avx2 {
  using V = __m256;
  static constexpr int kVecs = 2;
  static constexpr int kMaxNx = 6;  // 12 accumulators of 16 registers
  static constexpr int64_t kKb = 1024;
  template <bool kBf16>
  SLUICE_TARGET static V load(const uint8_t* col, int h) {
    if constexpr (kBf16) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col));
      return h == 0 ? _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
                    : _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
    } else {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + 16 * h)));
    }
  }
  SLUICE_TARGET static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  SLUICE_TARGET static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  SLUICE_TARGET static V zero() { return _mm256_setzero_ps(); }
  SLUICE_TARGET static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  SLUICE_TARGET static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/matmul_cols16.inc"

}  // namespace

SLUICE_TARGET void gemm_f16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x,
                                   int64_t n, float* y, int64_t m) {
  cols16::gemm<Cols16Avx2, false>(w, g0, g1, x, n, y, m);
}

SLUICE_TARGET void gemm_bf16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x,
                                    int64_t n, float* y, int64_t m) {
  cols16::gemm<Cols16Avx2, true>(w, g0, g1, x, n, y, m);
}

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
