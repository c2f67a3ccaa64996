// AVX-512 paged attention over a block of query tokens (attention.h, paged_attention_block).
//
// Work of one item: query tokens [q0, q1) x the `group` query heads of one kv head = up to
// 16 * group query rows against key tiles of 16 positions. Per tile, K is converted once to
// f32 and transposed (KT [head_dim][16]) so each query row's 16 scores are head_dim
// broadcast-FMAs into one register; the online-softmax update and P.V are 16-wide. A row's
// arithmetic does not depend on the other rows of its item (a fully masked tile is skipped),
// so results do not depend on how a prompt is chunked.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/simd_math.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace {

constexpr int kKeys = 16;

// Cache row (t, kv_head) -> 16-float chunks of dst (head_dim % 16 == 0).
SLUICE_TARGET inline void load_row(const PagedAttentionParams& p, const void* cache, int t,
                                   int kv_head, float* dst) {
  const int64_t block = p.block_table[t / p.block_size];
  const int64_t off = ((block * p.block_size + t % p.block_size) * p.n_kv_head + kv_head) * p.head_dim;
  if (p.kv_type == KvType::kF32) {
    std::memcpy(dst, static_cast<const float*>(cache) + off, size_t(p.head_dim) * sizeof(float));
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(cache) + off;
  for (int d = 0; d < p.head_dim; d += 16) {
    _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + d))));
  }
}

// out[c * 16 + r] = in[r * ld + c] for a 16 x 16 block: unpack pairs of rows, then pairs of
// pairs, then 128-bit lanes twice (64 shuffles instead of 256 scalar stores).
SLUICE_TARGET inline void transpose16(const float* in, int64_t ld, float* out) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4q + s] holds, in each 128-bit lane L, column 4L + s of rows 4q .. 4q + 3.
  for (int q = 0; q < 4; q += 2) {
    for (int s = 0; s < 4; ++s) {
      t[4 * q + s] = _mm512_shuffle_f32x4(r[4 * q + s], r[4 * q + 4 + s], 0x88);      // lanes 0, 2
      t[4 * q + 4 + s] = _mm512_shuffle_f32x4(r[4 * q + s], r[4 * q + 4 + s], 0xdd);  // lanes 1, 3
    }
  }
  // t[s] = rows 0-7, lanes (0, 2); t[4 + s] = rows 0-7, lanes (1, 3); t[8 + s], t[12 + s]: rows 8-15.
  for (int s = 0; s < 4; ++s) {
    const __m512 l0 = _mm512_shuffle_f32x4(t[s], t[8 + s], 0x88);       // lane 0: rows 0-15
    const __m512 l2 = _mm512_shuffle_f32x4(t[s], t[8 + s], 0xdd);       // lane 2
    const __m512 l1 = _mm512_shuffle_f32x4(t[4 + s], t[12 + s], 0x88);  // lane 1
    const __m512 l3 = _mm512_shuffle_f32x4(t[4 + s], t[12 + s], 0xdd);  // lane 3
    _mm512_storeu_ps(out + (0 + s) * 16, l0);
    _mm512_storeu_ps(out + (4 + s) * 16, l1);
    _mm512_storeu_ps(out + (8 + s) * 16, l2);
    _mm512_storeu_ps(out + (12 + s) * 16, l3);
  }
}

float* scratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

SLUICE_TARGET void attention_block(const PagedAttentionParams& p, int q0, int q1, int kv_head) {
  const int group = p.n_head / p.n_kv_head;
  const int hd = p.head_dim, nd = hd / 16;
  const int nr = (q1 - q0) * group;
  float* mem = scratch(size_t(hd) * kKeys * 3 + size_t(nr) * (hd + 2) + kKeys);
  float* kt = mem;                  // [hd][16] the key tile, transposed
  float* vt = kt + hd * kKeys;      // [16][hd] the value tile
  float* row = vt + hd * kKeys;     // [16][hd] the key tile as rows
  float* acc = row + hd * kKeys;    // [nr][hd] running weighted sums of V
  float* m = acc + size_t(nr) * hd;  // [nr] running max
  float* l = m + nr;                // [nr] running sum of exp
  float* pw = l + nr;               // [16] one row's tile weights
  std::fill(acc, acc + size_t(nr) * hd, 0.0f);
  for (int r = 0; r < nr; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0;
  }
  const int first_pos = p.kv_len - p.n_q;  // cache position of query 0
  const int n_keys = first_pos + q1;       // keys the last query sees
  const __m512 scale = _mm512_set1_ps(p.scale);
  for (int t0 = 0; t0 < n_keys; t0 += kKeys) {
    const int nt = std::min(kKeys, n_keys - t0);
    // The next tile's K and V rows (scattered: one head's row every n_kv_head rows) are fetched
    // while this one is computed.
    const int next_end = std::min(n_keys, t0 + 2 * kKeys);
    for (int t = t0 + kKeys; t < next_end; ++t) {
      const int64_t block = p.block_table[t / p.block_size];
      const int64_t off = ((block * p.block_size + t % p.block_size) * p.n_kv_head + kv_head) * p.head_dim;
      const int64_t bytes = int64_t(p.head_dim) * kv_type_size(p.kv_type);
      const char* kr = static_cast<const char*>(p.k_cache) + off * kv_type_size(p.kv_type);
      const char* vr = static_cast<const char*>(p.v_cache) + off * kv_type_size(p.kv_type);
      for (int64_t b = 0; b < bytes; b += 64) {
        _mm_prefetch(kr + b, _MM_HINT_T0);
        _mm_prefetch(vr + b, _MM_HINT_T0);
      }
    }
    for (int j = 0; j < nt; ++j) {
      load_row(p, p.k_cache, t0 + j, kv_head, row + j * hd);
      load_row(p, p.v_cache, t0 + j, kv_head, vt + j * hd);
    }
    std::fill(row + nt * hd, row + kKeys * hd, 0.0f);
    for (int c = 0; c < hd; c += 16) transpose16(row + c, hd, kt + c * kKeys);
    for (int r = 0; r < nr; ++r) {
      const int qi = q0 + r / group;
      const int visible = std::min(nt, first_pos + qi + 1 - t0);  // keys of this tile it sees
      if (visible <= 0) continue;
      const __mmask16 mask = __mmask16((1u << visible) - 1);
      const float* q = p.q + (int64_t(qi) * p.n_head + int64_t(kv_head) * group + r % group) * hd;
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      int d = 0;
      for (; d + 2 <= hd; d += 2) {
        s0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(kt + d * kKeys), s0);
        s1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_loadu_ps(kt + (d + 1) * kKeys), s1);
      }
      const __m512 s = _mm512_mul_ps(_mm512_add_ps(s0, s1), scale);
      const float tile_max = _mm512_mask_reduce_max_ps(mask, s);
      const float mx = std::max(m[r], tile_max);
      const float corr = std::exp(m[r] - mx);  // 0 on the row's first tile
      const __m512 e = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(s, _mm512_set1_ps(mx))));
      l[r] = l[r] * corr + _mm512_reduce_add_ps(e);
      m[r] = mx;
      _mm512_storeu_ps(pw, e);
      float* a = acc + size_t(r) * hd;
      const __m512 c = _mm512_set1_ps(corr);
      for (int b = 0; b < nd; ++b) {
        __m512 av = _mm512_mul_ps(_mm512_loadu_ps(a + 16 * b), c);
        for (int j = 0; j < visible; ++j) {
          av = _mm512_fmadd_ps(_mm512_set1_ps(pw[j]), _mm512_loadu_ps(vt + j * hd + 16 * b), av);
        }
        _mm512_storeu_ps(a + 16 * b, av);
      }
    }
  }
  for (int r = 0; r < nr; ++r) {
    const int qi = q0 + r / group;
    float* out = p.out + (int64_t(qi) * p.n_head + int64_t(kv_head) * group + r % group) * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
    for (int b = 0; b < nd; ++b) {
      _mm512_storeu_ps(out + 16 * b, _mm512_mul_ps(_mm512_loadu_ps(acc + size_t(r) * hd + 16 * b), inv));
    }
  }
}

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
