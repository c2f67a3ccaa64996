// Causal attention of one sequence's new tokens over its paged K/V cache.
//
// K and V live in fixed-size blocks shared by all sequences; a sequence's block table lists
// the blocks holding its positions in order. Cache position t of the sequence is
//
//   block_table[t / block_size], row t % block_size
//
//   k_cache: [n_blocks, n_kv_head, head_dim, block_size]   a head's keys dim-major: column d of
//                                                          a key tile is contiguous positions
//   v_cache: [n_blocks, n_kv_head, block_size, head_dim]   a head's value rows contiguous
//
// (KvLayout has the offsets.) Both keep one kv head's K or V of a block in one contiguous run,
// so a decode step streams it; K needs no transpose before the score FMAs.
//
// The n_q queries are the sequence's newest tokens, cache positions kv_len - n_q .. kv_len - 1,
// and their K/V are already in the cache. Query i sees positions [0, kv_len - n_q + i]:
//
//   kv position  0 1 2 3 4 5 6        (kv_len = 7, n_q = 3)
//   query 0      x x x x x . .
//   query 1      x x x x x x .
//   query 2      x x x x x x x
//
// With a sliding window W (window > 0) query i sees only the W newest of those positions,
// [max(0, pos_i - W + 1), pos_i] with pos_i = kv_len - n_q + i; the kernels skip key tiles no
// query of a work item sees, so a decode reads only the window of a long context. (A 16-key
// tile straddling the window's start may read, and mask, a few older positions: their block
// table entries must be valid block ids, whatever those blocks now hold.)
//
// Scores are q.k * scale, then (softcap > 0) softcap * tanh(score / softcap) (Gemma 2), then
// the softmax. Attention sinks (gpt-oss): query head h's softmax has one more logit, sinks[h]
// (unscaled), in its denominator and no value: p_t = exp(s_t) / (sum_u exp(s_u) + exp(sinks[h])).
// The kernels fold it into the final normalisation of the online softmax (running max m, sum
// l): out = acc / (l + exp(sinks[h] - m)) (attention_out_scale).
//
// GQA: query head h reads kv head h / (n_head / n_kv_head); the whole group of query heads
// sharing a kv head is processed together so each K/V row is read once per query token.
//
// K/V elements are f32 or f16 (IEEE half bits, as llama.cpp's default cache); q, out and all
// arithmetic are f32 (the reference: f64).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/matmul_isa.h"

namespace sluice {

enum class KvType { kF32, kF16 };

inline int kv_type_size(KvType t) {
  return t == KvType::kF16 ? 2 : 4;
}

// Element offsets of (cache block, row `pos` < block_size, kv head h, dimension d).
struct KvLayout {
  int block_size = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  // Elements from one block to the next; 0: n_kv_head * head_dim * block_size (dense). A cache
  // whose slots are shared by layers of different head shapes (gemma4) sizes each block for
  // the widest and a narrower layer uses the first elements of each block.
  int64_t block_stride = 0;
  int64_t block_elems() const {
    return block_stride > 0 ? block_stride : int64_t(n_kv_head) * head_dim * block_size;
  }
  int64_t k(int64_t block, int pos, int h, int d) const {
    return block * block_elems() + (int64_t(h) * head_dim + d) * block_size + pos;
  }
  int64_t v(int64_t block, int pos, int h, int d) const {
    return block * block_elems() + (int64_t(h) * block_size + pos) * head_dim + d;
  }
};

// Writes one token's K and V ([n_kv_head * head_dim] f32 each) into row `pos` of `block`,
// converting to the cache type.
void store_kv_token(KvType type, const KvLayout& layout, const float* k, const float* v,
                    void* k_cache, void* v_cache, int64_t block, int pos);

struct PagedAttentionParams {
  const float* q = nullptr;  // [n_q, n_head, head_dim]
  float* out = nullptr;      // [n_q, n_head, head_dim]
  int n_q = 0;               // new tokens (queries)
  int kv_len = 0;            // cache positions of the sequence after this step, >= n_q
  KvType kv_type = KvType::kF32;
  const void* k_cache = nullptr;         // [n_blocks, n_kv_head, head_dim, block_size]
  const void* v_cache = nullptr;         // [n_blocks, n_kv_head, block_size, head_dim]
  const int32_t* block_table = nullptr;  // [ceil(kv_len / block_size)]
  int block_size = 0;
  int n_head = 0;
  int n_kv_head = 0;  // divides n_head
  int head_dim = 0;
  int64_t kv_block_stride = 0;   // KvLayout::block_stride (0: dense blocks)
  float scale = 1.0f;            // usually 1 / sqrt(head_dim)
  int window = 0;                // sliding window in positions (0: the whole causal prefix)
  float softcap = 0;             // attention logit soft-capping (0: none)
  const float* sinks = nullptr;  // [n_head] one sink logit per query head (nullptr: none)
  // The kernels to run (kAuto: the process's ISA); tests force each one this CPU runs. kScalar
  // is the portable item-by-item path.
  MatmulIsa isa = MatmulIsa::kAuto;

  KvLayout layout() const { return {block_size, n_kv_head, head_dim, kv_block_stride}; }
  // Query i sees cache positions [first_visible(i), kv_len - n_q + i].
  int first_visible(int qi) const {
    const int pos = kv_len - n_q + qi;
    return window > 0 && pos >= window ? pos - window + 1 : 0;
  }
};

// The factor that turns a query head's weighted sum of V into its output, after an online
// softmax that ended at max m and sum l (relative to m): 1 / l, or with a sink the sink joins
// max and sum, m' = max(m, sink): exp(m - m') / (l exp(m - m') + exp(sink - m')), which cannot
// overflow whatever the sink.
inline float attention_out_scale(const PagedAttentionParams& p, int head, float m, float l) {
  if (!p.sinks) return 1.0f / l;
  const float sink = p.sinks[head];
  const float mx = std::max(m, sink);
  const float c = std::exp(m - mx);
  return c / (l * c + std::exp(sink - mx));
}

// Floats of scratch memory each call below needs for p (one buffer per thread running them:
// the kernels keep no per-thread state of their own).
size_t paged_attention_scratch_floats(const PagedAttentionParams& p);

// One work item: query token `qi`, every query head of kv head `kv_head`. Online softmax in
// f32 over tiles of keys. Items are independent (disjoint outputs): run them on any threads.
void paged_attention_item(const PagedAttentionParams& p, int qi, int kv_head, float* scratch);

// Query tokens [q0, q1) (at most kAttentionQueryBlock), every query head of kv head `kv_head`:
// each key tile is converted and read once for all of them. The SIMD kernel where one runs p
// (AVX-512: head_dim % 16 == 0, else AVX2's; AVX2: head_dim % 8 == 0), else
// paged_attention_item per token. A query's result does not depend on q0, q1.
constexpr int kAttentionQueryBlock = 16;
void paged_attention_block(const PagedAttentionParams& p, int q0, int q1, int kv_head,
                           float* scratch);

// The SIMD kernels' arithmetic, whatever the split of the work: per query row, keys in
// segments of kAttentionSegment positions from 0; within a segment the online softmax over
// 16-key tiles in order; the segments' states (max, sum of exponentials, weighted sum of V)
// merged in order. (The portable fallback folds every key in one pass and is never split.)
constexpr int kAttentionSegment = 256;

// Flash-decoding: few queries (n_q <= kAttentionQueryBlock) over a long context split by key
// segments between threads, then merged per kv head. Whether a SIMD kernel does it for p
// (the ones paged_attention_block runs), and into how many segments.
bool paged_attention_splits(const PagedAttentionParams& p);
inline int paged_attention_n_segments(const PagedAttentionParams& p) {
  return (p.kv_len + kAttentionSegment - 1) / kAttentionSegment;
}
// The first segment any query of p sees: those before it (a sliding window's past) hold no
// visible key, so they are neither computed nor merged (their state would be the empty one).
inline int paged_attention_first_segment(const PagedAttentionParams& p) {
  return p.first_visible(0) / kAttentionSegment;
}
// Floats of one segment's partial state: n_q * n_head rows of (max, sum, head_dim weighted V).
size_t paged_attention_partial_floats(const PagedAttentionParams& p);
// Segments [s0, s1) of every kv head into partial[s * paged_attention_partial_floats(p) ...].
// This and the merge below only for p with paged_attention_splits(p) (scratch is sized for it).
void paged_attention_segments(const PagedAttentionParams& p, int s0, int s1, float* partial,
                              float* scratch);
// Merges the n_segments(p) partial states of kv head `kv_head` into p.out: bit for bit what
// paged_attention_block gives.
void paged_attention_merge(const PagedAttentionParams& p, int kv_head, const float* partial,
                           float* scratch);

// The scratch of paged_attention_batch: its work list, the flash-decoding partial states and
// one kernel scratch buffer per pool thread. Grows to the largest batch seen, then never
// allocates; holds nothing between calls.
struct AttentionWorkspace {
  std::vector<int64_t> item_end;    // [n_seqs] cumulative work items
  std::vector<int64_t> partial_at;  // [n_seqs] offset in `partial` of a split sequence, or -1
  std::vector<int> split_seqs;      // the sequences split by key segments
  std::vector<float> partial;       // split sequences' per-segment states
  std::vector<float> scratch;       // [threads][scratch_stride]
  size_t scratch_stride = 0;
};

// Every sequence of a batch (its own queries, output, kv_len and block table; one cache and
// shape), over `pool` (may be null). Work items, numbered sequence by sequence:
//   (sequence, block of up to kAttentionQueryBlock query tokens, kv head), or
//   (sequence, key segment) over every kv head when paged_attention_splits(p) and the context
//   has several segments (decode: flash-decoding), whose partial states are merged after, per
//   (sequence, kv head).
// Either way the same arithmetic (see kAttentionSegment): a sequence's result does not depend
// on the others in the batch or on the thread count. Small batches run on the calling thread.
void paged_attention_batch(std::span<const PagedAttentionParams> seqs, AttentionWorkspace& ws,
                           ThreadPool* pool);

// One sequence: paged_attention_batch of {p} with a workspace of its own.
void paged_attention(const PagedAttentionParams& p, ThreadPool* pool);

// The specification: per query head, full softmax in f64 over the visible positions.
void paged_attention_ref(const PagedAttentionParams& p);

}  // namespace sluice
