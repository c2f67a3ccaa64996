// Paged attention (online softmax, GQA groups sharing K/V reads) against the f64 reference,
// with scattered block tables, odd sizes, and MHA / GQA / MQA head layouts, on every ISA this
// CPU runs (PagedAttentionParams::isa).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "kernels/attention.h"
#include "kernels/kernels_test_util.h"

namespace sluice {
namespace {

using test::cpu_isas;
using test::random_floats;
using test::rel_l2;

struct Case {
  int n_head, n_kv_head, head_dim, block_size, kv_len, n_q;
  KvType kv_type = KvType::kF32;
  int window = 0;
  float softcap = 0;
  bool sinks = false;  // one sink logit per query head (gpt-oss)
};

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_f16(x[i]);
  return h;
}

// A case's cache (with other sequences' blocks around, in a shuffled block table) and queries.
struct CaseData {
  Case c;
  std::vector<int32_t> table;
  std::vector<float> k, v, q;
  std::vector<float> sinks;  // [n_head]
  std::vector<uint16_t> k16, v16;

  CaseData(const Case& cs, std::mt19937& rng) : c(cs) {
    const int n_seq_blocks = (c.kv_len + c.block_size - 1) / c.block_size;
    const int n_blocks = n_seq_blocks + 5;
    std::vector<int32_t> all(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) all[size_t(i)] = i;
    std::shuffle(all.begin(), all.end(), rng);
    table.assign(all.begin(), all.begin() + n_seq_blocks);
    const int64_t cache_floats = int64_t(n_blocks) * c.block_size * c.n_kv_head * c.head_dim;
    k = random_floats(rng, cache_floats, -2, 2);
    v = random_floats(rng, cache_floats);
    q = random_floats(rng, int64_t(c.n_q) * c.n_head * c.head_dim, -2, 2);
    k16 = to_f16(k);
    v16 = to_f16(v);
    // Around the scores' range, and one far above it (the sink takes almost all the weight);
    // from a generator of their own, so the other draws stay as they were.
    std::mt19937 sink_rng(uint32_t(c.n_head * 7919 + c.kv_len));
    sinks = random_floats(sink_rng, c.n_head, -1, 3);
    sinks[0] = 40.0f;
  }

  PagedAttentionParams params(std::vector<float>& out) const {
    const bool f16 = c.kv_type == KvType::kF16;
    PagedAttentionParams p;
    p.kv_type = c.kv_type;
    p.q = q.data();
    p.out = out.data();
    p.n_q = c.n_q;
    p.kv_len = c.kv_len;
    p.k_cache = f16 ? static_cast<const void*>(k16.data()) : k.data();
    p.v_cache = f16 ? static_cast<const void*>(v16.data()) : v.data();
    p.block_table = table.data();
    p.block_size = c.block_size;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(float(c.head_dim));
    p.window = c.window;
    p.softcap = c.softcap;
    if (c.sinks) p.sinks = sinks.data();
    return p;
  }
};

void run_case(const Case& c, ThreadPool& pool, std::mt19937& rng) {
  const CaseData data(c, rng);
  std::vector<float> ref(data.q.size(), -7.0f);
  const bool f16 = c.kv_type == KvType::kF16;
  std::vector<float> out(data.q.size(), 7.0f);
  PagedAttentionParams pr = data.params(out);
  pr.out = ref.data();
  paged_attention_ref(pr);
  for (MatmulIsa isa : cpu_isas()) {
    std::fill(out.begin(), out.end(), 7.0f);
    PagedAttentionParams p = data.params(out);
    p.isa = isa;
    paged_attention(p, &pool);
    // f32 online softmax vs f64: ~sqrt(kv_len) roundings of 6e-8 each.
    EXPECT_LT(rel_l2(out.data(), ref.data(), int64_t(out.size())), 5e-6)
        << matmul_isa_name(isa) << " heads " << c.n_head << "/" << c.n_kv_head << " hd "
        << c.head_dim << " bs " << c.block_size << " kv " << c.kv_len << " q " << c.n_q << " f16 "
        << f16 << " window " << c.window << " softcap " << c.softcap << " sinks " << c.sinks;
  }
}

TEST(PagedAttention, MatchesReference) {
  ThreadPool pool(3);
  std::mt19937 rng(5);
  const int heads[][2] = {{1, 1}, {4, 4}, {8, 2}, {8, 1}, {6, 3}};
  for (auto [nh, nkv] : heads) {
    for (int hd : {1, 3, 8, 24, 31, 33, 16, 64}) {
      for (int bs : {1, 3, 16}) {
        for (int kv_len : {1, 3, 31, 33, 100}) {
          for (int n_q : {1, 3, kv_len}) {
            if (n_q > kv_len) continue;
            run_case({nh, nkv, hd, bs, kv_len, n_q, KvType::kF32}, pool, rng);
            run_case({nh, nkv, hd, bs, kv_len, n_q, KvType::kF16}, pool, rng);
          }
        }
      }
    }
  }
}

TEST(PagedAttention, LongContext) {
  ThreadPool pool(2);
  std::mt19937 rng(6);
  run_case({8, 2, 64, 16, 4097, 1}, pool, rng);
  run_case({4, 1, 32, 32, 4097, 33}, pool, rng);
  run_case({8, 2, 64, 16, 4097, 3, KvType::kF16}, pool, rng);
  run_case({32, 8, 64, 16, 600, 600, KvType::kF16}, pool, rng);  // a long prompt, 38 query blocks
  run_case({14, 2, 128, 16, 300, 17, KvType::kF16}, pool, rng);
}

// A head size that is a multiple of 8 but not of 16 (stories260K's 8) runs a SIMD kernel on
// every SIMD ISA (AVX-512 CPUs borrow AVX2's), split by key segments like the others; the
// portable items ran stories260K's decode 3.5x slower. Other sizes keep the portable items.
TEST(PagedAttention, HeadSizesOfEightRunASimdKernelOnEverySimdIsa) {
  std::mt19937 rng(13);
  int n_simd = 0;
  for (MatmulIsa isa : cpu_isas()) {
    if (isa == MatmulIsa::kScalar) continue;
    ++n_simd;
    for (int hd : {8, 24, 16, 33}) {
      const CaseData d({8, 4, hd, 16, 600, 1}, rng);
      std::vector<float> out(d.q.size());
      PagedAttentionParams p = d.params(out);
      p.isa = isa;
      EXPECT_EQ(paged_attention_splits(p), hd % 8 == 0) << matmul_isa_name(isa) << " hd " << hd;
    }
  }
  if (n_simd == 0) GTEST_SKIP() << "no SIMD ISA on this CPU";
}

// On an AVX-512 CPU those head sizes run the AVX2 kernels (the avx512 kernel table lists them
// after its own): bit for bit what the AVX2 ISA gives, decode (split by key segments) and prefill.
TEST(PagedAttention, HeadSizesOfEightOnAvx512AreAvx2sBitForBit) {
  if (!cpu_runs_isa(MatmulIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  SLUICE_FRESH_RNG(rng);
  ThreadPool pool(3);
  for (int hd : {8, 24, 40}) {
    for (auto [kv_len, n_q] : {std::pair{600, 1}, std::pair{100, 37}}) {
      for (KvType type : {KvType::kF32, KvType::kF16}) {
        const CaseData d({8, 2, hd, 16, kv_len, n_q, type}, rng);
        std::vector<float> avx2(d.q.size(), 7.0f), avx512(d.q.size(), -7.0f);
        PagedAttentionParams p = d.params(avx2);
        p.isa = MatmulIsa::kAvx2;
        paged_attention(p, &pool);
        p.out = avx512.data();
        p.isa = MatmulIsa::kAvx512;
        paged_attention(p, &pool);
        EXPECT_EQ(avx2, avx512) << "hd " << hd << " kv " << kv_len << " q " << n_q;
      }
    }
  }
}

// Sliding windows (Gemma 2, Phi-3, Mistral) and logit soft-capping (Gemma 2): windows shorter
// and longer than a key tile, than the chunk of queries and than the context, decodes over a
// long context (split by key segments, most of them outside the window), prefill chunks.
TEST(PagedAttention, SlidingWindowAndSoftcapMatchReference) {
  ThreadPool pool(3);
  std::mt19937 rng(12);
  for (int window : {1, 5, 16, 17, 40, 300}) {
    for (float cap : {0.0f, 1.5f, 50.0f}) {
      for (auto [hd, bs] : {std::pair{32, 16}, std::pair{16, 3}, std::pair{33, 16}}) {
        for (auto [kv_len, n_q] : {std::pair{1, 1}, std::pair{20, 20}, std::pair{70, 33},
                                   std::pair{100, 1}, std::pair{600, 3}, std::pair{1500, 1}}) {
          Case c{8, 2, hd, bs, kv_len, n_q, KvType::kF16, window, cap};
          run_case(c, pool, rng);
          c.kv_type = KvType::kF32;
          if (kv_len <= 100) run_case(c, pool, rng);
        }
      }
    }
  }
}

// Query i sees exactly positions (pos_i - window, pos_i]: changing K/V at pos_i - window leaves
// every query from i on unchanged, and changes the ones before it that see it.
TEST(PagedAttention, SlidingWindowHidesOlderPositions) {
  ThreadPool pool(2);
  std::mt19937 rng(13);
  for (MatmulIsa isa : cpu_isas()) {
    for (int window : {3, 16, 20}) {
      const Case c{4, 2, 16, 16, 60, 30, KvType::kF32, window};
      CaseData d(c, rng);
      std::vector<float> before(d.q.size()), after(d.q.size());
      PagedAttentionParams p = d.params(before);
      p.isa = isa;
      paged_attention(p, &pool);
      const int hidden = 40;  // a cache position; query i (position 30 + i) sees it iff
                              // 30 + i - window < 40 <= 30 + i
      const KvLayout l = p.layout();
      const int64_t block = d.table[size_t(hidden / c.block_size)];
      for (int h = 0; h < c.n_kv_head; ++h) {
        for (int i = 0; i < c.head_dim; ++i) {
          d.k[size_t(l.k(block, hidden % c.block_size, h, i))] += 1.0f;
          d.v[size_t(l.v(block, hidden % c.block_size, h, i))] += 1.0f;
        }
      }
      p.out = after.data();
      paged_attention(p, &pool);
      const int64_t row = int64_t(c.n_head) * c.head_dim;
      for (int qi = 0; qi < c.n_q; ++qi) {
        const int pos = c.kv_len - c.n_q + qi;
        const bool sees = pos >= hidden && pos - window < hidden;
        bool changed = false;
        for (int64_t i = qi * row; i < (qi + 1) * row; ++i) {
          changed |= before[size_t(i)] != after[size_t(i)];
        }
        EXPECT_EQ(changed, sees) << matmul_isa_name(isa) << " window " << window << " query " << qi;
      }
    }
  }
}

// Attention sinks (gpt-oss): per query head one more logit in the softmax denominator, folded
// into the kernels' final normalisation; prompts, decodes over long contexts (split by key
// segments and merged), windows, f16 and f32 caches. Head 0's sink (40) dwarfs every score.
TEST(PagedAttention, SinksMatchReference) {
  ThreadPool pool(3);
  std::mt19937 rng(17);
  for (int window : {0, 8}) {
    for (auto [hd, bs] : {std::pair{32, 16}, std::pair{16, 3}, std::pair{33, 16}}) {
      for (auto [kv_len, n_q] : {std::pair{1, 1}, std::pair{12, 12}, std::pair{70, 33},
                                 std::pair{600, 1}, std::pair{1500, 2}}) {
        Case c{4, 2, hd, bs, kv_len, n_q, KvType::kF16, window, 0.0f, true};
        run_case(c, pool, rng);
        c.kv_type = KvType::kF32;
        run_case(c, pool, rng);
      }
    }
  }
}

// With one key the output is v * p, p = exp(s) / (exp(s) + exp(sink)), by hand.
TEST(PagedAttention, SinkByHand) {
  std::mt19937 rng(3);
  const CaseData d({1, 1, 16, 16, 1, 1}, rng);
  std::vector<float> out(16);
  for (MatmulIsa isa : cpu_isas()) {
    PagedAttentionParams p = d.params(out);
    const float sink = 0.75f;
    p.sinks = &sink;
    p.isa = isa;
    paged_attention(p, nullptr);
    const KvLayout l = p.layout();
    double s = 0;
    for (int i = 0; i < 16; ++i)
      s += double(d.q[size_t(i)]) * d.k[size_t(l.k(d.table[0], 0, 0, i))];
    s *= double(p.scale);
    const double w = std::exp(s) / (std::exp(s) + std::exp(double(sink)));
    for (int i = 0; i < 16; ++i) {
      EXPECT_NEAR(out[size_t(i)], w * d.v[size_t(l.v(d.table[0], 0, 0, i))], 1e-6)
          << matmul_isa_name(isa) << " " << i;
    }
  }
}

// Flash-decoding: a long context split by key segments between threads, in any order and any
// grouping, then merged, gives bit for bit what one thread going through it gives; every tail
// of the segments and tiles, and block sizes that are not multiples of the 16-key tile.
TEST(PagedAttention, SegmentSplitIsBitExact) {
  const Case probe{8, 2, 64, 16, 1000, 1};
  std::mt19937 rng(11);
  ThreadPool pool(3);
  const Case cases[] = {
      {8, 2, 64, 16, 257, 1, KvType::kF16},
      {8, 2, 64, 16, 512, 1, KvType::kF16},
      {32, 8, 64, 16, 1000, 1, KvType::kF16},
      {4, 1, 128, 32, 700, 3},
      {8, 8, 16, 16, 513, 16, KvType::kF16},
      {6, 3, 32, 3, 600, 5},
      {8, 2, 64, 16, 4097, 2, KvType::kF16},
      {8, 2, 64, 16, 1000, 3, KvType::kF16, 300, 30.0f},  // window: segments outside it
      {4, 4, 32, 16, 700, 1, KvType::kF32, 17},
      {8, 4, 8, 16, 600, 1, KvType::kF16},  // stories260K: AVX-512 runs the AVX2 kernel
      {8, 2, 24, 16, 300, 3},
      {8, 2, 32, 16, 700, 2, KvType::kF16, 8, 0.0f, true},  // gpt-oss: sinks and a window
      // A window far from the context's start: the pool splits only its visible segments.
      {8, 2, 32, 16, 2000, 1, KvType::kF16, 600, 0.0f, true},
      {8, 4, 64, 16, 1800, 2, KvType::kF16, 700},
  };
  int n_isas = 0;
  for (MatmulIsa isa : cpu_isas()) {
    {
      const CaseData d(probe, rng);
      std::vector<float> out(d.q.size());
      PagedAttentionParams pp = d.params(out);
      pp.isa = isa;
      if (!paged_attention_splits(pp)) continue;  // the portable path never splits
    }
    ++n_isas;
    for (const Case& c : cases) {
      const CaseData d(c, rng);
      std::vector<float> one(d.q.size(), 1.0f), split(d.q.size(), 2.0f), pooled(d.q.size(), 3.0f);
      PagedAttentionParams p1 = d.params(one);
      p1.isa = isa;
      // Scratch full of NaNs: the kernels must not read what they did not write.
      std::vector<float> scratch(paged_attention_scratch_floats(p1),
                                 std::numeric_limits<float>::quiet_NaN());
      for (int h = 0; h < c.n_kv_head; ++h) paged_attention_block(p1, 0, c.n_q, h, scratch.data());

      PagedAttentionParams ps = d.params(split);
      ps.isa = isa;
      const int n_seg = paged_attention_n_segments(ps);
      ASSERT_GT(n_seg, 1);
      std::vector<float> partial(size_t(n_seg) * paged_attention_partial_floats(ps), 9.0f);
      // Last segment first, then the rest in uneven groups.
      std::fill(scratch.begin(), scratch.end(), std::numeric_limits<float>::quiet_NaN());
      paged_attention_segments(ps, n_seg - 1, n_seg, partial.data(), scratch.data());
      for (int s = 0; s < n_seg - 1; s += 2)
        paged_attention_segments(ps, s, std::min(n_seg - 1, s + 2), partial.data(), scratch.data());
      for (int h = c.n_kv_head - 1; h >= 0; --h) {
        paged_attention_merge(ps, h, partial.data(), scratch.data());
      }
      EXPECT_EQ(one, split) << matmul_isa_name(isa) << " heads " << c.n_head << "/" << c.n_kv_head
                            << " kv " << c.kv_len << " q " << c.n_q << " bs " << c.block_size;

      PagedAttentionParams pl = d.params(pooled);
      pl.isa = isa;
      paged_attention(pl, &pool);
      EXPECT_EQ(one, pooled) << matmul_isa_name(isa) << " kv " << c.kv_len;
    }
  }
  if (n_isas == 0) GTEST_SKIP() << "no SIMD ISA on this CPU";
}

// A cache whose blocks are wider than the layer's K/V (KvLayout::block_stride: gemma4's slots
// hold the widest layer's, a narrower layer uses the start of each block) gives bit for bit
// the dense cache's result, on every ISA, for prompts and for long decodes (segment splits).
TEST(PagedAttention, BlockStrideReadsTheStartOfWiderBlocks) {
  std::mt19937 rng(12);
  ThreadPool pool(3);
  const Case cases[] = {
      {4, 2, 32, 16, 40, 40},
      {4, 2, 32, 16, 700, 1, KvType::kF16},
      {4, 1, 64, 16, 300, 3},
      {8, 2, 24, 3, 100, 7, KvType::kF16, 8},
      {4, 2, 32, 16, 600, 1, KvType::kF32, 8},
  };
  for (const Case& c : cases) {
    const CaseData d(c, rng);
    const int64_t dense = int64_t(c.block_size) * c.n_kv_head * c.head_dim;
    const int64_t stride = dense + 3 * c.head_dim + 5;  // a wider block, not a multiple
    const int64_t n_blocks = int64_t(d.k.size()) / dense;
    // The strided copy: each block's dense elements first, NaN after them.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> k(size_t(n_blocks * stride), nan), v(k.size(), nan);
    std::vector<uint16_t> k16(k.size(), 0x7e00), v16(k.size(), 0x7e00);
    for (int64_t b = 0; b < n_blocks; ++b) {
      std::copy_n(d.k.begin() + b * dense, dense, k.begin() + b * stride);
      std::copy_n(d.v.begin() + b * dense, dense, v.begin() + b * stride);
      std::copy_n(d.k16.begin() + b * dense, dense, k16.begin() + b * stride);
      std::copy_n(d.v16.begin() + b * dense, dense, v16.begin() + b * stride);
    }
    const bool f16 = c.kv_type == KvType::kF16;
    for (MatmulIsa isa : cpu_isas()) {
      std::vector<float> want(d.q.size(), 1.0f), got(d.q.size(), 2.0f);
      PagedAttentionParams pd = d.params(want);
      pd.isa = isa;
      paged_attention(pd, &pool);
      PagedAttentionParams ps = d.params(got);
      ps.isa = isa;
      ps.k_cache = f16 ? static_cast<const void*>(k16.data()) : k.data();
      ps.v_cache = f16 ? static_cast<const void*>(v16.data()) : v.data();
      ps.kv_block_stride = stride;
      paged_attention(ps, &pool);
      EXPECT_EQ(want, got) << matmul_isa_name(isa) << " heads " << c.n_head << "/" << c.n_kv_head
                           << " hd " << c.head_dim << " kv " << c.kv_len << " q " << c.n_q;
    }
  }
}

// Several sequences in one call, as the executor runs a ragged batch: prefill chunks, decodes
// over long contexts (split by key segments) and short ones, each in its own blocks of one
// shared cache, give bit for bit what each gives alone, whatever the pool, and stay within
// the reference's bound.
TEST(PagedAttention, BatchOfSequencesGivesEachSequencesResult) {
  SLUICE_FRESH_RNG(rng);
  ThreadPool pool(3);
  const int nh = 8, nkv = 2, hd = 64, bs = 16;
  struct Seq {
    int kv_len, n_q;
  };
  const Seq seqs[] = {{700, 1}, {40, 40}, {3, 1}, {1100, 2}, {300, 17}, {257, 1}};
  int n_blocks = 0;
  for (const Seq& q : seqs) n_blocks += (q.kv_len + bs - 1) / bs;
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  for (int i = 0; i < n_blocks; ++i) order[size_t(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t cache = int64_t(n_blocks) * bs * nkv * hd;
  for (KvType kv_type : {KvType::kF32, KvType::kF16}) {
    const std::vector<float> k = random_floats(rng, cache, -2, 2), v = random_floats(rng, cache);
    const std::vector<uint16_t> k16 = to_f16(k), v16 = to_f16(v);
    const bool f16 = kv_type == KvType::kF16;
    std::vector<std::vector<float>> q, out, alone, ref;
    std::vector<PagedAttentionParams> ps;
    int next_block = 0;
    for (const Seq& s : seqs) {
      const int nb = (s.kv_len + bs - 1) / bs;
      q.push_back(random_floats(rng, int64_t(s.n_q) * nh * hd, -2, 2));
      out.emplace_back(q.back().size(), 5.0f);
      alone.emplace_back(q.back().size(), 6.0f);
      ref.emplace_back(q.back().size(), 7.0f);
      PagedAttentionParams p;
      p.q = q.back().data();
      p.n_q = s.n_q;
      p.kv_len = s.kv_len;
      p.kv_type = kv_type;
      p.k_cache = f16 ? static_cast<const void*>(k16.data()) : k.data();
      p.v_cache = f16 ? static_cast<const void*>(v16.data()) : v.data();
      p.block_table = order.data() + next_block;
      p.block_size = bs;
      p.n_head = nh;
      p.n_kv_head = nkv;
      p.head_dim = hd;
      p.scale = 0.125f;
      ps.push_back(p);
      next_block += nb;
    }
    for (MatmulIsa isa : cpu_isas()) {
      for (size_t i = 0; i < ps.size(); ++i) {
        ps[i].isa = isa;
        ps[i].out = out[i].data();
      }
      AttentionWorkspace ws;
      paged_attention_batch(ps, ws, &pool);
      for (size_t i = 0; i < ps.size(); ++i) {
        PagedAttentionParams p = ps[i];
        p.out = alone[i].data();
        paged_attention(p, nullptr);
        EXPECT_EQ(out[i], alone[i]) << matmul_isa_name(isa) << " sequence " << i;
        p.out = ref[i].data();
        paged_attention_ref(p);
        EXPECT_LT(rel_l2(out[i].data(), ref[i].data(), int64_t(out[i].size())), 5e-6)
            << matmul_isa_name(isa) << " sequence " << i;
      }
      paged_attention_batch(ps, ws, nullptr);  // the workspace reused, no pool
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_EQ(out[i], alone[i]) << matmul_isa_name(isa) << " sequence " << i << " serial";
      }
    }
  }
}

// f32 caches: `n_q` queries of `n_head` heads over `kv_len` positions through `table`.
PagedAttentionParams f32_params(const std::vector<float>& q, std::vector<float>& out, int n_q,
                                int kv_len, const std::vector<float>& k,
                                const std::vector<float>& v, const std::vector<int32_t>& table,
                                int block_size, int n_head, int n_kv_head, int head_dim,
                                float scale) {
  PagedAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.n_q = n_q;
  p.kv_len = kv_len;
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.block_table = table.data();
  p.block_size = block_size;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = head_dim;
  p.scale = scale;
  return p;
}

// A query's output is the same whether it is computed alone or in a block with others (chunked
// prefill must not change results).
TEST(PagedAttention, QueryBlocksDoNotChangeResults) {
  std::mt19937 rng(9);
  const int nh = 8, nkv = 2, hd = 64, bs = 16, kv_len = 70, n_q = 40;
  std::vector<int32_t> table = {4, 1, 3, 0, 2};
  const std::vector<float> k = random_floats(rng, 5 * bs * nkv * hd, -2, 2);
  const std::vector<float> v = random_floats(rng, 5 * bs * nkv * hd);
  const std::vector<float> q = random_floats(rng, n_q * nh * hd, -2, 2);
  std::vector<float> whole(q.size()), single(q.size());
  PagedAttentionParams p = f32_params(q, whole, n_q, kv_len, k, v, table, bs, nh, nkv, hd, 0.125f);
  paged_attention(p, nullptr);
  p.out = single.data();
  std::vector<float> scratch(paged_attention_scratch_floats(p),
                             std::numeric_limits<float>::quiet_NaN());
  for (int qi = 0; qi < n_q; ++qi) {
    for (int h = 0; h < nkv; ++h) paged_attention_block(p, qi, qi + 1, h, scratch.data());
  }
  EXPECT_EQ(whole, single);
  // With a sliding window and soft-capping too.
  p.window = 9;
  p.softcap = 2.0f;
  p.out = whole.data();
  paged_attention(p, nullptr);
  p.out = single.data();
  for (int qi = n_q - 1; qi >= 0; --qi) {
    for (int h = 0; h < nkv; ++h) paged_attention_block(p, qi, qi + 1, h, scratch.data());
  }
  EXPECT_EQ(whole, single);
}

// Query i must not see cache positions after its own: changing later K/V leaves it unchanged.
TEST(PagedAttention, CausalWithinChunk) {
  std::mt19937 rng(8);
  const int hd = 8, bs = 4, kv_len = 10, n_q = 4;
  std::vector<int32_t> table = {2, 0, 1};
  std::vector<float> k = random_floats(rng, 3 * bs * hd), v = random_floats(rng, 3 * bs * hd);
  const std::vector<float> q = random_floats(rng, n_q * hd);
  std::vector<float> out1(q.size()), out2(q.size());
  PagedAttentionParams p = f32_params(q, out1, n_q, kv_len, k, v, table, bs, 1, 1, hd, 0.3f);
  paged_attention(p, nullptr);
  // Cache position 9 (the last query's own token) lives in block table[2] = 1, row 1.
  const KvLayout layout = p.layout();
  for (int i = 0; i < hd; ++i) {
    k[size_t(layout.k(1, 1, 0, i))] += 1.0f;
    v[size_t(layout.v(1, 1, 0, i))] += 1.0f;
  }
  p.out = out2.data();
  paged_attention(p, nullptr);
  for (int i = 0; i < 3 * hd; ++i) EXPECT_EQ(out1[size_t(i)], out2[size_t(i)]) << i;
  bool changed = false;
  for (int i = 3 * hd; i < 4 * hd; ++i) changed |= out1[size_t(i)] != out2[size_t(i)];
  EXPECT_TRUE(changed);
}

}  // namespace
}  // namespace sluice
