// AVX-512 paged attention over a block of query tokens (attention.h, paged_attention_block).
//
// Work of one item: query tokens [q0, q1) x the `group` query heads of one kv head = up to
// 16 * group query rows against key tiles of 16 positions. Per tile, K is converted once to
// f32 as KT [head_dim][16] (the cache keeps K dim-major, so that is one load per dimension)
// and each query row's 16 scores are head_dim broadcast-FMAs into one register; the
// online-softmax update and P.V are 16-wide. Rows go in passes of 4 that share each K-column
// and V-block load. A row's arithmetic does not depend on the other rows of its item or pass
// (a fully masked tile is skipped), so results do not depend on how a prompt is chunked.
//
// Keys are folded per segment of kAttentionSegment positions and the segments' states merged
// in order (attention.h), so a long context can be split between threads (attention_segments
// + attention_merge: every kv head of a block in turn, one contiguous run of the cache) with
// the results of one thread going through it (attention_block).
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/dequant.h"
#include "kernels/simd_avx512.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace {

constexpr int kKeys = 16;
constexpr int kRowsPerPass = 4;  // query rows sharing each K column / V block load

// Column d of a key tile (16 positions, zero past the tile's keys): from the converted tile KT,
struct TileColumns {
  const float* kt;
  SLUICE_TARGET __m512 operator()(int d) const { return _mm512_loadu_ps(kt + d * kKeys); }
};
// or straight from the cache (block_size % 16 == 0: the tile lies in one block whose K is
// dim-major, attention.h, so column d is 16 contiguous positions at k + d * block_size),
// converted on the fly. Full tiles take plain loads: masked loads that miss the cache stall
// (measured on Zen 4, docs/perf-log.md), and decode's K comes from DRAM.
template <bool kF16>
struct CacheColumns {
  const void* k;   // the tile's first position, dimension 0
  int64_t stride;  // block_size
  __mmask16 mask;  // the tile's keys
  SLUICE_TARGET __m512 operator()(int d) const {
    if constexpr (kF16) {
      const uint16_t* src = static_cast<const uint16_t*>(k) + d * stride;
      return _mm512_cvtph_ps(mask == 0xffff
                                 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))
                                 : _mm256_maskz_loadu_epi16(mask, src));
    } else {
      const float* src = static_cast<const float*>(k) + d * stride;
      return mask == 0xffff ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(mask, src);
    }
  }
};

// The columns of key tile [t0, t0 + nt) of kv head h in the cache (block_size % 16 == 0).
template <bool kF16>
CacheColumns<kF16> cache_columns(const PagedAttentionParams& p, int t0, int nt, int h) {
  const int bs = p.block_size;
  const int64_t off = p.layout().k(p.block_table[t0 / bs], t0 % bs, h, 0);
  const __mmask16 mask = nt == kKeys ? __mmask16(0xffff) : __mmask16((1u << nt) - 1);
  return {static_cast<const uint8_t*>(p.k_cache) + off * (kF16 ? 2 : 4), bs, mask};
}

// Key tile [t0, t0 + nt) of kv head h as KT [head_dim][16] f32, columns past nt zero: with
// block_size % 16 == 0 a column load each (CacheColumns), otherwise gathered position by
// position.
SLUICE_TARGET inline void load_k_tile(const PagedAttentionParams& p, int t0, int nt, int h,
                                      float* kt) {
  const KvLayout l = p.layout();
  const int hd = p.head_dim, bs = p.block_size;
  const bool f16 = p.kv_type == KvType::kF16;
  if (bs % kKeys == 0) {
    if (f16) {
      const CacheColumns<true> col = cache_columns<true>(p, t0, nt, h);
      for (int d = 0; d < hd; ++d) _mm512_storeu_ps(kt + d * kKeys, col(d));
    } else {
      const CacheColumns<false> col = cache_columns<false>(p, t0, nt, h);
      for (int d = 0; d < hd; ++d) _mm512_storeu_ps(kt + d * kKeys, col(d));
    }
    return;
  }
  for (int j = 0; j < kKeys; ++j) {
    const int t = t0 + j;
    const int64_t off = j < nt ? l.k(p.block_table[t / bs], t % bs, h, 0) : 0;
    for (int d = 0; d < hd; ++d) {
      const int64_t e = off + int64_t(d) * bs;
      kt[d * kKeys + j] = j >= nt ? 0.0f
                          : f16   ? f16_to_f32_fast(static_cast<const uint16_t*>(p.k_cache)[e])
                                  : static_cast<const float*>(p.k_cache)[e];
    }
  }
}

// Value rows [t0, t0 + nt) of kv head h as f32 rows [nt][head_dim].
SLUICE_TARGET inline void load_v_tile(const PagedAttentionParams& p, int t0, int nt, int h,
                                      float* vt) {
  const KvLayout l = p.layout();
  const int hd = p.head_dim, bs = p.block_size;
  for (int j = 0; j < nt; ++j) {
    const int t = t0 + j;
    const int64_t off = l.v(p.block_table[t / bs], t % bs, h, 0);
    float* dst = vt + j * hd;
    if (p.kv_type == KvType::kF32) {
      std::memcpy(dst, static_cast<const float*>(p.v_cache) + off, size_t(hd) * sizeof(float));
      continue;
    }
    const uint16_t* src = static_cast<const uint16_t*>(p.v_cache) + off;
    for (int d = 0; d < hd; d += 16) {
      _mm512_storeu_ps(
          dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d))));
    }
  }
}

#include "kernels/attention_state.inc"

// The 16 scaled scores of RN query rows against a key tile's columns: per row two FMA
// chains (even and odd dimensions), each K column loaded once for all rows.
template <int RN, class Columns>
SLUICE_TARGET inline void scores(Columns col, const float* const* q, int hd, __m512 scale,
                                 __m512* sc) {
  __m512 s0[RN], s1[RN];
  for (int i = 0; i < RN; ++i) s0[i] = s1[i] = _mm512_setzero_ps();
  for (int d = 0; d + 2 <= hd; d += 2) {
    const __m512 k0 = col(d), k1 = col(d + 1);
    for (int i = 0; i < RN; ++i) {
      s0[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d]), k0, s0[i]);
      s1[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d + 1]), k1, s1[i]);
    }
  }
  for (int i = 0; i < RN; ++i) sc[i] = _mm512_mul_ps(_mm512_add_ps(s0[i], s1[i]), scale);
}

template <class Columns>
SLUICE_TARGET inline void scores_rows(int rn, Columns col, const float* const* q, int hd,
                                      __m512 scale, __m512* sc) {
  switch (rn) {
    case 1:
      scores<1>(col, q, hd, scale, sc);
      return;
    case 2:
      scores<2>(col, q, hd, scale, sc);
      return;
    case 3:
      scores<3>(col, q, hd, scale, sc);
      return;
    default:
      scores<4>(col, q, hd, scale, sc);
      return;
  }
}

// P.V of RN rows over value rows [0, jmax) of a tile (row j at v + j * ld, f16 or f32):
// acc[i] = acc[i] * corr[i] + sum over j < vis[i] of pw[i][j] * V[j], one 16-dim block at a
// time, the V block loaded once for all rows. Rows with vis <= 0 are untouched. kAll: every
// row sees all jmax rows (decode, and every tile of a prefill but the diagonal), no per-row test.
template <bool kF16, int RN, bool kAll>
SLUICE_TARGET inline void pv_rows(const void* v, int64_t ld, int hd, int jmax, const int* vis,
                                  const float* corr, const float* pw, float* const* acc) {
  for (int b = 0; b < hd; b += 16) {
    __m512 a[RN];
    for (int i = 0; i < RN; ++i) {
      a[i] = _mm512_loadu_ps(acc[i] + b);
      if (kAll || vis[i] > 0) a[i] = _mm512_mul_ps(a[i], _mm512_set1_ps(corr[i]));
    }
    for (int j = 0; j < jmax; ++j) {
      const __m512 vv = kF16 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                   static_cast<const uint16_t*>(v) + j * ld + b)))
                             : _mm512_loadu_ps(static_cast<const float*>(v) + j * ld + b);
      for (int i = 0; i < RN; ++i) {
        if (kAll || j < vis[i]) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(pw[i * kKeys + j]), vv, a[i]);
      }
    }
    for (int i = 0; i < RN; ++i) {
      if (kAll || vis[i] > 0) _mm512_storeu_ps(acc[i] + b, a[i]);
    }
  }
}

template <bool kF16, int RN>
SLUICE_TARGET inline void pv_dispatch_all(const void* v, int64_t ld, int hd, int jmax,
                                          const int* vis, const float* corr, const float* pw,
                                          float* const* acc) {
  bool all = true;
  for (int i = 0; i < RN; ++i) all = all && vis[i] == jmax;
  if (all) {
    pv_rows<kF16, RN, true>(v, ld, hd, jmax, vis, corr, pw, acc);
  } else {
    pv_rows<kF16, RN, false>(v, ld, hd, jmax, vis, corr, pw, acc);
  }
}

template <bool kF16>
SLUICE_TARGET void pv(int rn, const void* v, int64_t ld, int hd, int jmax, const int* vis,
                      const float* corr, const float* pw, float* const* acc) {
  switch (rn) {
    case 1:
      pv_dispatch_all<kF16, 1>(v, ld, hd, jmax, vis, corr, pw, acc);
      return;
    case 2:
      pv_dispatch_all<kF16, 2>(v, ld, hd, jmax, vis, corr, pw, acc);
      return;
    case 3:
      pv_dispatch_all<kF16, 3>(v, ld, hd, jmax, vis, corr, pw, acc);
      return;
    default:
      pv_dispatch_all<kF16, 4>(v, ld, hd, jmax, vis, corr, pw, acc);
      return;
  }
}

// Folds key tile [t0, t0 + nt) of kv head `kv_head` into the state of its nr query rows (row r:
// query q0 + r / group, head kv_head * group + r % group), each row over the keys it sees.
SLUICE_TARGET void fold_tile(const PagedAttentionParams& p, int q0, int nr, int kv_head, int t0,
                             int nt, const TileBuffers& b, RowState st) {
  const int group = p.n_head / p.n_kv_head;
  const int hd = p.head_dim, bs = p.block_size;
  const bool f16 = p.kv_type == KvType::kF16;
  const int first_pos = p.kv_len - p.n_q;  // cache position of query 0
  const __m512 scale = _mm512_set1_ps(p.scale);
  // One pass over the tile (decode) reads K columns straight from the cache; several convert
  // the tile once into KT.
  const bool direct = bs % kKeys == 0 && nr <= kRowsPerPass;
  if (!direct) load_k_tile(p, t0, nt, kv_head, b.kt);
  // The tile's value rows: in place (one block, rows hd apart) or gathered into vt as f32.
  const void* v = b.vt;
  bool v_f16 = false;
  if (bs % kKeys == 0) {
    const int64_t off = p.layout().v(p.block_table[t0 / bs], t0 % bs, kv_head, 0);
    v = f16 ? static_cast<const void*>(static_cast<const uint16_t*>(p.v_cache) + off)
            : static_cast<const void*>(static_cast<const float*>(p.v_cache) + off);
    v_f16 = f16;
  } else {
    load_v_tile(p, t0, nt, kv_head, b.vt);
  }
  // Rows in passes of kRowsPerPass: each K column and V block loaded once per pass, and
  // independent FMA chains per row. A row's arithmetic is the same in any pass.
  for (int r0 = 0; r0 < nr; r0 += kRowsPerPass) {
    const int rn = std::min(kRowsPerPass, nr - r0);
    int from[kRowsPerPass], vis[kRowsPerPass];
    const float* q[kRowsPerPass];
    float corr[kRowsPerPass];
    float* a[kRowsPerPass];
    int jmax = 0;
    for (int i = 0; i < rn; ++i) {
      const int r = r0 + i, qi = q0 + r / group;
      // Keys [from, vis) of this tile row r sees (none: vis = 0).
      from[i] = std::max(0, p.first_visible(qi) - t0);
      vis[i] = std::min(nt, first_pos + qi + 1 - t0);
      if (from[i] >= vis[i]) vis[i] = 0;
      jmax = std::max(jmax, vis[i]);
      q[i] = p.q + (int64_t(qi) * p.n_head + int64_t(kv_head) * group + r % group) * hd;
      a[i] = st.acc + size_t(r) * hd;
    }
    if (jmax <= 0) continue;
    __m512 sc[kRowsPerPass];
    if (!direct) {
      scores_rows(rn, TileColumns{b.kt}, q, hd, scale, sc);
    } else if (f16) {
      scores_rows(rn, cache_columns<true>(p, t0, nt, kv_head), q, hd, scale, sc);
    } else {
      scores_rows(rn, cache_columns<false>(p, t0, nt, kv_head), q, hd, scale, sc);
    }
    for (int i = 0; i < rn; ++i) {
      if (vis[i] <= 0) continue;
      const int r = r0 + i;
      const __mmask16 mask = __mmask16(((1u << vis[i]) - 1) & ~((1u << from[i]) - 1));
      if (p.softcap > 0) sc[i] = vsoftcap(sc[i], p.softcap);
      const float mx = std::max(st.m[r], _mm512_mask_reduce_max_ps(mask, sc[i]));
      corr[i] = std::exp(st.m[r] - mx);  // 0 on the row's first tile
      const __m512 e = _mm512_maskz_mov_ps(mask, vexp(_mm512_sub_ps(sc[i], _mm512_set1_ps(mx))));
      st.l[r] = st.l[r] * corr[i] + _mm512_reduce_add_ps(e);
      st.m[r] = mx;
      _mm512_storeu_ps(b.pw + i * kKeys, e);
    }
    if (v_f16) {
      pv<true>(rn, v, hd, hd, jmax, vis, corr, b.pw, a);
    } else {
      pv<false>(rn, v, hd, hd, jmax, vis, corr, b.pw, a);
    }
  }
}

// into = merge(into, seg) per row: the state of both key ranges. A row that saw no key of seg
// is unchanged; into's first segment is copied exactly.
SLUICE_TARGET void merge_rows(RowState into, RowState seg, int nr, int hd) {
  for (int r = 0; r < nr; ++r) {
    if (seg.m[r] == -std::numeric_limits<float>::infinity()) continue;
    float* a = into.acc + size_t(r) * hd;
    const float* b = seg.acc + size_t(r) * hd;
    if (into.m[r] == -std::numeric_limits<float>::infinity()) {
      std::copy(b, b + hd, a);
      into.m[r] = seg.m[r];
      into.l[r] = seg.l[r];
      continue;
    }
    const float mx = std::max(into.m[r], seg.m[r]);
    const float ca = std::exp(into.m[r] - mx), cb = std::exp(seg.m[r] - mx);
    into.l[r] = into.l[r] * ca + seg.l[r] * cb;
    into.m[r] = mx;
    const __m512 va = _mm512_set1_ps(ca), vb = _mm512_set1_ps(cb);
    for (int d = 0; d < hd; d += 16) {
      _mm512_storeu_ps(a + d, _mm512_fmadd_ps(_mm512_loadu_ps(b + d), vb,
                                              _mm512_mul_ps(_mm512_loadu_ps(a + d), va)));
    }
  }
}

// out = acc / (l + the sink's share) for the nr rows of kv head `kv_head` from query q0.
SLUICE_TARGET void write_rows(const PagedAttentionParams& p, int q0, int nr, int kv_head,
                              RowState st) {
  const int group = p.n_head / p.n_kv_head, hd = p.head_dim;
  for (int r = 0; r < nr; ++r) {
    const int qi = q0 + r / group;
    const int head = kv_head * group + r % group;
    float* out = p.out + (int64_t(qi) * p.n_head + head) * hd;
    const __m512 inv = _mm512_set1_ps(attention_out_scale(p, head, st.m[r], st.l[r]));
    for (int d = 0; d < hd; d += 16) {
      _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_loadu_ps(st.acc + size_t(r) * hd + d), inv));
    }
  }
}

#include "kernels/attention_drivers.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
