// Tensor-parallel shards of hybrid models (model/shard.h): which Gated DeltaNet heads a rank
// holds, what a shard of qwen35 keeps of each tensor, and the shapes check_shardable refuses.
// (The shards' logits against one process: tests/parallel, tests/executor.)
#include <gtest/gtest.h>

#include <cstring>

#include "model/model.h"
#include "model/shard.h"
#include "test_util.h"

namespace sluice {
namespace {

std::vector<std::pair<int64_t, int64_t>> runs(const DeltaNetSplit& d) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Range& r : d.v) out.push_back({r.begin, r.end});
  return out;
}

TEST(DeltaNetSplit, RanksTakeTheVHeadsThatReadTheirKHeads) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  // nk 2, nv 4 (V head h reads K head h % 2).
  const RecurrentShape s{4, 64, 2, 4};
  DeltaNetSplit d = delta_net_split(s, 0, 2);
  EXPECT_EQ(d.k.begin, 0);
  EXPECT_EQ(d.k.end, 1);
  EXPECT_EQ(runs(d), (Runs{{0, 1}, {2, 3}}));
  d = delta_net_split(s, 1, 2);
  EXPECT_EQ(d.k.begin, 1);
  EXPECT_EQ(runs(d), (Runs{{1, 2}, {3, 4}}));
  // --tp 4: each K head on two ranks, which split its two V heads.
  const Runs want4[] = {{{0, 1}}, {{2, 3}}, {{1, 2}}, {{3, 4}}};
  for (int r = 0; r < 4; ++r) {
    d = delta_net_split(s, r, 4);
    EXPECT_EQ(d.k.begin, r / 2) << r;
    EXPECT_EQ(d.k.size(), 1) << r;
    EXPECT_EQ(runs(d), want4[r]) << r;
  }
  // Qwen3.5-9B's 16 K / 32 V heads over 4 ranks: runs of 4 heads, in both halves.
  d = delta_net_split({4, 128, 16, 32}, 1, 4);
  EXPECT_EQ(d.k.begin, 4);
  EXPECT_EQ(d.k.end, 8);
  EXPECT_EQ(runs(d), (Runs{{4, 8}, {20, 24}}));
  // One K head (qwen35moe's tiny model): the V heads are contiguous.
  d = delta_net_split({4, 64, 1, 4}, 1, 2);
  EXPECT_EQ(d.k.begin, 0);
  EXPECT_EQ(runs(d), (Runs{{2, 4}}));
  // Every V head on exactly one rank, and every one reading the rank's K heads.
  for (const RecurrentShape& shape :
       {RecurrentShape{4, 8, 2, 4}, RecurrentShape{4, 8, 4, 8}, RecurrentShape{4, 8, 2, 8}}) {
    for (int n : {1, 2, 4}) {
      std::vector<int> seen(size_t(shape.n_v_heads), 0);
      for (int r = 0; r < n; ++r) {
        d = delta_net_split(shape, r, n);
        EXPECT_EQ(d.n_v(), shape.n_v_heads / n);
        int i = 0;  // the rank's V head i reads its K head i % d.k.size()
        for (const Range& v : d.v) {
          for (int64_t h = v.begin; h < v.end; ++h, ++i) {
            ++seen[size_t(h)];
            EXPECT_EQ(h % shape.n_k_heads, d.k.begin + i % d.k.size());
          }
        }
      }
      EXPECT_EQ(seen, std::vector<int>(size_t(shape.n_v_heads), 1));
    }
  }
}

// Rows [r0, r0 + n) of an f32 matrix.
std::vector<float> rows_of(const WeightMatrix& m, int64_t r0, int64_t n) {
  EXPECT_EQ(m.type, GgmlType::F32);
  const auto* p = static_cast<const float*>(m.data) + r0 * m.n_cols;
  return {p, p + n * m.n_cols};
}

TEST(TensorParallelShard, Qwen35RankHoldsItsDeltaNetAndAttentionHeads) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok()) << whole.message();
  ModelOptions mo;
  mo.tp_size = 2;
  mo.tp_rank = 1;
  auto m = Model::load(path, mo);
  ASSERT_TRUE(m.ok()) << m.message();
  // Whole: S 64, 2 K / 4 V heads, conv 4; attention 4 / 2 heads of 64 (q and gate rows).
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.recurrent.n_k_heads, 1);
  EXPECT_EQ(c.recurrent.n_v_heads, 2);
  EXPECT_EQ(c.recurrent.state_size, 64);
  EXPECT_EQ(c.recurrent.state_floats(), whole->config().recurrent.state_floats() / 2);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.n_kv_head, 1);

  // Rank 1: K head 1, V heads 1 and 3.
  const DeltaNetWeights& d = m->weights().layers[0].delta;
  const DeltaNetWeights& wd = whole->weights().layers[0].delta;
  ASSERT_EQ(d.qkv.n_rows, 4 * 64);
  std::vector<float> want;
  for (int64_t r0 : {64, 128 + 64, 256 + 64, 256 + 192}) {
    const std::vector<float> part = rows_of(wd.qkv, r0, 64);
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(rows_of(d.qkv, 0, 4 * 64), want);
  want.clear();
  for (int64_t r0 : {64, 192}) {
    const std::vector<float> part = rows_of(wd.z, r0, 64);
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(rows_of(d.z, 0, 128), want);
  EXPECT_EQ(rows_of(d.beta, 0, 1), rows_of(wd.beta, 1, 1));
  EXPECT_EQ(rows_of(d.alpha, 1, 1), rows_of(wd.alpha, 3, 1));
  EXPECT_EQ(d.dt_bias, (std::vector<float>{wd.dt_bias[1], wd.dt_bias[3]}));
  EXPECT_EQ(d.a, (std::vector<float>{wd.a[1], wd.a[3]}));
  EXPECT_EQ(d.norm, wd.norm);
  ASSERT_EQ(d.conv.size(), size_t(4 * 64 * 4));
  // Channel 64 of the shard (its first k channel) is channel 128 + 64 of the whole; 4 taps each.
  EXPECT_TRUE(std::equal(d.conv.begin() + 64 * 4, d.conv.begin() + 65 * 4,
                         wd.conv.begin() + (128 + 64) * 4));
  // The last channel (V head 3's last) is the whole's last.
  EXPECT_TRUE(std::equal(d.conv.end() - 4, d.conv.end(), wd.conv.end() - 4));
  // ssm_out: columns 64..128 and 192..256 of every row, a partial product.
  ASSERT_EQ(d.out.n_cols, 128);
  EXPECT_TRUE(d.out.partial);
  EXPECT_FALSE(d.qkv.partial);
  const auto* o = static_cast<const float*>(d.out.data);
  const auto* wo = static_cast<const float*>(wd.out.data);
  EXPECT_EQ(o[5 * 128 + 0], wo[5 * 256 + 64]);
  EXPECT_EQ(o[5 * 128 + 64], wo[5 * 256 + 192]);

  // Gated attention (layer 3): query heads 2 and 3, each its query rows then its gate rows.
  const LayerWeights& a = m->weights().layers[3];
  const LayerWeights& wa = whole->weights().layers[3];
  ASSERT_EQ(a.wq.n_rows, 2 * 2 * 64);
  EXPECT_EQ(rows_of(a.wq, 0, 256), rows_of(wa.wq, 256, 256));
  EXPECT_EQ(rows_of(a.wk, 0, 64), rows_of(wa.wk, 64, 64));
  EXPECT_EQ(a.wo.n_cols, 128);
  EXPECT_TRUE(a.wo.partial);
  EXPECT_EQ(a.q_norm, wa.q_norm);
}

TEST(TensorParallelShard, RefusesLinearHeadsThatDoNotSplit) {
  SLUICE_REQUIRE_SHARED(dir, "testdata/models/arch");
  auto m = Model::load(dir + "/qwen35.gguf");  // 2 K / 4 V heads
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = m->config();
  const ModelWeights& w = m->weights();
  EXPECT_TRUE(check_shardable(c, w, 2).ok());
  EXPECT_TRUE(check_shardable(c, w, 4).ok());  // each K head on two ranks
  Status st = check_shardable(c, w, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor parallel size 3 and the model's 2 linear-attention (Gated "
                              "DeltaNet) K heads: one must divide the other"),
            std::string::npos)
      << st.message();
  st = check_shardable(c, w, 8);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(
                "tensor parallel size 8 does not divide the model's 4 linear-attention (Gated "
                "DeltaNet) V heads"),
            std::string::npos)
      << st.message();
  // The same refusal from Model::load.
  ModelOptions mo;
  mo.tp_size = 3;
  auto shard = Model::load(dir + "/qwen35.gguf", mo);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.message().find("2 linear-attention (Gated DeltaNet) K heads"), std::string::npos)
      << shard.message();
  // ssm_out split into one V head (64 columns) a run: not whole Q4_K blocks (256).
  ModelWeights q4 = w;
  q4.layers[0].delta.out.type = GgmlType::Q4_K;
  st = check_shardable(c, q4, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor parallel size 2: blk.0.ssm_out.weight would split at columns "
                              "0..64 (V heads 0..0 of 4, 64 columns each), not a whole number of "
                              "q4_K blocks (256)"),
            std::string::npos)
      << st.message();
  // qwen35moe: 1 K / 2 V heads.
  auto moe = Model::load(dir + "/qwen35moe.gguf");
  ASSERT_TRUE(moe.ok()) << moe.message();
  EXPECT_TRUE(check_shardable(moe->config(), moe->weights(), 2).ok());
  st = check_shardable(moe->config(), moe->weights(), 4);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does not divide the model's 2 linear-attention"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace sluice
