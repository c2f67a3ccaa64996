#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/fp16.h"
#include "kernels/dequant.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"

namespace sluice {
namespace {

// Keys scored per online-softmax update: the rescale of the accumulators is paid once per tile.
constexpr int kTile = 32;

// Cache position t of kv head h as an f32 row (K gathered from its dim-major block, V in
// place when f32): in `buf` unless it can be returned in place.
inline const float* k_row(const PagedAttentionParams& p, int t, int kv_head, float* buf) {
  const KvLayout l = p.layout();
  const int64_t off = l.k(p.block_table[t / p.block_size], t % p.block_size, kv_head, 0);
  for (int i = 0; i < p.head_dim; ++i) {
    const int64_t e = off + int64_t(i) * p.block_size;
    buf[i] = p.kv_type == KvType::kF32
                 ? static_cast<const float*>(p.k_cache)[e]
                 : f16_to_f32_fast(static_cast<const uint16_t*>(p.k_cache)[e]);
  }
  return buf;
}

inline const float* v_row(const PagedAttentionParams& p, int t, int kv_head, float* buf) {
  const int64_t off = p.layout().v(p.block_table[t / p.block_size], t % p.block_size, kv_head, 0);
  if (p.kv_type == KvType::kF32) return static_cast<const float*>(p.v_cache) + off;
  const uint16_t* h = static_cast<const uint16_t*>(p.v_cache) + off;
  for (int i = 0; i < p.head_dim; ++i) buf[i] = f16_to_f32_fast(h[i]);
  return buf;
}

// The SIMD kernels that run p (the ISA's table lists them, another ISA's included); nullptr:
// the portable items.
const AttentionKernels* attention_kernels(const PagedAttentionParams& p) {
  return kernel_table(p.isa).attention_for(p);
}

// Scratch floats of paged_attention_item.
size_t item_scratch_floats(const PagedAttentionParams& p) {
  const int group = p.n_head / p.n_kv_head;
  return size_t(group) * (2 + p.head_dim + kTile) + size_t(p.head_dim);
}

}  // namespace

void store_kv_token(KvType type, const KvLayout& l, const float* k, const float* v, void* k_cache,
                    void* v_cache, int64_t block, int pos) {
  for (int h = 0; h < l.n_kv_head; ++h) {
    const float* kh = k + int64_t(h) * l.head_dim;
    const float* vh = v + int64_t(h) * l.head_dim;
    const int64_t ko = l.k(block, pos, h, 0), vo = l.v(block, pos, h, 0);
    if (type == KvType::kF32) {
      auto* kc = static_cast<float*>(k_cache);
      for (int d = 0; d < l.head_dim; ++d) kc[ko + int64_t(d) * l.block_size] = kh[d];
      std::copy(vh, vh + l.head_dim, static_cast<float*>(v_cache) + vo);
    } else {
      auto* kc = static_cast<uint16_t*>(k_cache);
      auto* vc = static_cast<uint16_t*>(v_cache) + vo;
      for (int d = 0; d < l.head_dim; ++d) {
        kc[ko + int64_t(d) * l.block_size] = f32_to_f16(kh[d]);
        vc[d] = f32_to_f16(vh[d]);
      }
    }
  }
}

size_t paged_attention_scratch_floats(const PagedAttentionParams& p) {
  const AttentionKernels* kt = attention_kernels(p);
  const size_t item = item_scratch_floats(p);
  return kt ? std::max(item, kt->scratch_floats(p)) : item;
}

void paged_attention_item(const PagedAttentionParams& p, int qi, int kv_head, float* scratch) {
  const int group = p.n_head / p.n_kv_head;
  const int hd = p.head_dim;
  const int n_visible = p.kv_len - p.n_q + qi + 1;
  float* mem = scratch;            // item_scratch_floats(p)
  float* m = mem;                  // [group] running max
  float* l = m + group;            // [group] running sum of exp
  float* acc = l + group;          // [group, hd] running weighted sum of V
  float* s = acc + group * hd;     // [group, kTile] scores, then weights, of the tile
  float* row = s + group * kTile;  // [hd] an f16 K or V row converted to f32
  const int64_t q_row = (int64_t(qi) * p.n_head + int64_t(kv_head) * group) * hd;
  const float* q = p.q + q_row;  // [group, hd]: the group's heads are adjacent
  for (int g = 0; g < group; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0;
  }
  std::fill(acc, acc + group * hd, 0.0f);

  for (int t0 = p.first_visible(qi); t0 < n_visible; t0 += kTile) {
    const int nt = std::min(kTile, n_visible - t0);
    for (int j = 0; j < nt; ++j) {
      const float* k = k_row(p, t0 + j, kv_head, row);
      for (int g = 0; g < group; ++g) {
        const float sc = dot_f32(q + g * hd, k, hd) * p.scale;
        s[g * kTile + j] = p.softcap > 0 ? p.softcap * std::tanh(sc / p.softcap) : sc;
      }
    }
    for (int g = 0; g < group; ++g) {
      float* sg = s + g * kTile;
      float mx = m[g];
      for (int j = 0; j < nt; ++j) mx = std::max(mx, sg[j]);
      const float corr = std::exp(m[g] - mx);  // exp(-inf) = 0 on the first tile
      float sum = 0;
      for (int j = 0; j < nt; ++j) {
        sg[j] = std::exp(sg[j] - mx);
        sum += sg[j];
      }
      l[g] = l[g] * corr + sum;
      m[g] = mx;
      if (corr != 1.0f) {
        float* ag = acc + g * hd;
        for (int d = 0; d < hd; ++d) ag[d] *= corr;
      }
    }
    for (int j = 0; j < nt; ++j) {
      const float* v = v_row(p, t0 + j, kv_head, row);
      for (int g = 0; g < group; ++g) {
        const float w = s[g * kTile + j];
        float* ag = acc + g * hd;
        for (int d = 0; d < hd; ++d) ag[d] += w * v[d];
      }
    }
  }
  float* out = p.out + q_row;
  for (int g = 0; g < group; ++g) {
    const float inv = attention_out_scale(p, kv_head * group + g, m[g], l[g]);
    for (int d = 0; d < hd; ++d) out[g * hd + d] = acc[g * hd + d] * inv;
  }
}

void paged_attention_block(const PagedAttentionParams& p, int q0, int q1, int kv_head,
                           float* scratch) {
  if (const AttentionKernels* kt = attention_kernels(p)) {
    kt->block(p, q0, q1, kv_head, scratch);
    return;
  }
  for (int qi = q0; qi < q1; ++qi) paged_attention_item(p, qi, kv_head, scratch);
}

bool paged_attention_splits(const PagedAttentionParams& p) {
  return attention_kernels(p) && p.n_q <= kAttentionQueryBlock;
}

size_t paged_attention_partial_floats(const PagedAttentionParams& p) {
  return attention_kernels(p)->partial_floats(p);
}

void paged_attention_segments(const PagedAttentionParams& p, int s0, int s1, float* partial,
                              float* scratch) {
  attention_kernels(p)->segments(p, s0, s1, partial, scratch);
}

void paged_attention_merge(const PagedAttentionParams& p, int kv_head, const float* partial,
                           float* scratch) {
  attention_kernels(p)->merge(p, kv_head, paged_attention_n_segments(p), partial, scratch);
}

void paged_attention_batch(std::span<const PagedAttentionParams> seqs, AttentionWorkspace& ws,
                           ThreadPool* pool) {
  // Below this many multiply-adds the whole batch runs on the calling thread: a pool wake-up
  // costs more than tiny models' and short contexts' attention.
  constexpr int64_t kMinParallelMacs = 1 << 16;
  const auto n_seqs = int64_t(seqs.size());
  ws.item_end.resize(size_t(n_seqs));
  ws.partial_at.resize(size_t(n_seqs));
  ws.split_seqs.clear();
  int64_t n_items = 0, macs = 0, partial_floats = 0;
  size_t scratch_floats = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const PagedAttentionParams& p = seqs[size_t(si)];
    scratch_floats = std::max(scratch_floats, paged_attention_scratch_floats(p));
    const int n_seg = paged_attention_n_segments(p);
    // Items: the visible segments only (a windowed layer's at any context: its window's few),
    // so that the pool spreads them over the threads instead of over empty segments.
    const int n_visible = n_seg - paged_attention_first_segment(p);
    if (n_visible > 1 && paged_attention_splits(p)) {
      ws.partial_at[size_t(si)] = partial_floats;
      partial_floats += int64_t(n_seg) * int64_t(paged_attention_partial_floats(p));
      n_items += n_visible;
      ws.split_seqs.push_back(int(si));
    } else {
      ws.partial_at[size_t(si)] = -1;
      n_items += int64_t((p.n_q + kAttentionQueryBlock - 1) / kAttentionQueryBlock) * p.n_kv_head;
    }
    ws.item_end[size_t(si)] = n_items;
    macs += 2 * int64_t(p.n_q) * p.kv_len * p.n_head * p.head_dim;  // QK^T and PV (upper bound)
  }
  if (int64_t(ws.partial.size()) < partial_floats) ws.partial.resize(size_t(partial_floats));
  // Per-thread scratch, each buffer on its own cache lines.
  ws.scratch_stride = (scratch_floats + 15) & ~size_t(15);
  const size_t n_threads = pool ? size_t(pool->n_threads()) : 1;
  if (ws.scratch.size() < n_threads * ws.scratch_stride) {
    ws.scratch.resize(n_threads * ws.scratch_stride);
  }
  const auto scratch = [&](int thread) { return ws.scratch.data() + thread * ws.scratch_stride; };
  const int64_t grain = !pool || macs < kMinParallelMacs ? n_items : 1;
  auto items = [&](int thread, int64_t i0, int64_t i1) {
    auto si = std::upper_bound(ws.item_end.begin(), ws.item_end.end(), i0) - ws.item_end.begin();
    for (int64_t it = i0; it < i1; ++it) {
      while (it >= ws.item_end[size_t(si)]) ++si;
      const PagedAttentionParams& p = seqs[size_t(si)];
      const int64_t local = it - (si > 0 ? ws.item_end[size_t(si) - 1] : 0);
      if (ws.partial_at[size_t(si)] >= 0) {
        const int seg = paged_attention_first_segment(p) + int(local);
        paged_attention_segments(p, seg, seg + 1, ws.partial.data() + ws.partial_at[size_t(si)],
                                 scratch(thread));
        continue;
      }
      const int q0 = int(local / p.n_kv_head) * kAttentionQueryBlock;
      paged_attention_block(p, q0, std::min(p.n_q, q0 + kAttentionQueryBlock),
                            int(local % p.n_kv_head), scratch(thread));
    }
  };
  if (pool) {
    pool->parallel_for_indexed(n_items, grain, items);
  } else {
    items(0, 0, n_items);
  }
  if (ws.split_seqs.empty()) return;
  // Merge items: (split sequence, kv head).
  const int n_kv = seqs[size_t(ws.split_seqs[0])].n_kv_head;
  const auto n_merges = int64_t(ws.split_seqs.size()) * n_kv;
  auto merges = [&](int thread, int64_t m0, int64_t m1) {
    for (int64_t it = m0; it < m1; ++it) {
      const int si = ws.split_seqs[size_t(it / n_kv)];
      paged_attention_merge(seqs[size_t(si)], int(it % n_kv),
                            ws.partial.data() + ws.partial_at[size_t(si)], scratch(thread));
    }
  };
  if (pool) {
    pool->parallel_for_indexed(n_merges, 1, merges);
  } else {
    merges(0, 0, n_merges);
  }
}

void paged_attention(const PagedAttentionParams& p, ThreadPool* pool) {
  AttentionWorkspace ws;
  paged_attention_batch({&p, 1}, ws, pool);
}

void paged_attention_ref(const PagedAttentionParams& p) {
  const int group = p.n_head / p.n_kv_head;
  const int hd = p.head_dim;
  std::vector<double> score;
  std::vector<double> acc(static_cast<size_t>(hd));
  std::vector<float> row(static_cast<size_t>(hd));
  for (int qi = 0; qi < p.n_q; ++qi) {
    const int n_visible = p.kv_len - p.n_q + qi + 1;
    const int first = p.first_visible(qi);
    score.assign(size_t(n_visible), 0.0);
    for (int h = 0; h < p.n_head; ++h) {
      const int kvh = h / group;
      const float* q = p.q + (int64_t(qi) * p.n_head + h) * hd;
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < n_visible; ++t) {
        const float* k = k_row(p, t, kvh, row.data());
        double d = 0;
        for (int i = 0; i < hd; ++i) d += double(q[i]) * double(k[i]);
        d *= double(p.scale);
        if (p.softcap > 0) d = double(p.softcap) * std::tanh(d / double(p.softcap));
        // Outside the window: weight 0.
        score[size_t(t)] = t < first ? -std::numeric_limits<double>::infinity() : d;
        mx = std::max(mx, score[size_t(t)]);
      }
      // A sink is one more logit in the denominator (and, when larger, the max).
      if (p.sinks) mx = std::max(mx, double(p.sinks[h]));
      double sum = p.sinks ? std::exp(double(p.sinks[h]) - mx) : 0.0;
      for (double& x : score) {
        x = std::exp(x - mx);
        sum += x;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int t = 0; t < n_visible; ++t) {
        const float* v = v_row(p, t, kvh, row.data());
        for (int i = 0; i < hd; ++i) acc[size_t(i)] += score[size_t(t)] * double(v[i]);
      }
      float* out = p.out + (int64_t(qi) * p.n_head + h) * hd;
      for (int i = 0; i < hd; ++i) out[i] = float(acc[size_t(i)] / sum);
    }
  }
}

}  // namespace sluice
