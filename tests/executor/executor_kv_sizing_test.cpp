// K/V memory per layer kind (base/cache_layout.h, executor/kv_sizing.h): what a sequence holds
// equals the per-layer-kind formula, and windowed models fit more long sequences.
#include <gtest/gtest.h>

#include <string>

#include "executor/kv_sizing.h"
#include "executor/step_roofline.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "perf/planner.h"
#include "test_util.h"

namespace sluice {
namespace {

// google/gemma-3-4b's attention shape: 34 layers, the global ones at il % 6 == 5 (5, 11, 17,
// 23, 29: five), a window of 1024 on the other 29, 4 KV heads of 256.
ModelConfig gemma3_4b(int n_ctx) {
  ModelConfig c;
  c.arch = Arch::kGemma3;
  c.n_layer = 34;
  c.n_head = 8;
  c.n_kv_head = 4;
  c.head_dim = 256;
  c.n_ctx = n_ctx;
  c.sliding_window = 1024;
  c.swa_period = 6;
  return c;
}

TEST(KvSizing, GroupsOfEveryLayerKindAndTheirBytes) {
  const ModelConfig c = gemma3_4b(32768);
  const KvCacheLayout l = c.kv_cache_layout();
  ASSERT_EQ(l.layers_per_group, 1);  // gcd(29, 5): no padding slot
  ASSERT_EQ(l.n_groups(), 34);
  int n_global = 0;
  for (int g = 0; g < l.n_groups(); ++g) n_global += l.group_window[size_t(g)] == 0;
  EXPECT_EQ(n_global, 5);
  // A block is one layer's K and V for 16 positions: 2 x 16 x 4 x 256 x 2 bytes.
  const size_t per_block = kv_bytes_per_block(c, 16, KvType::kF16);
  EXPECT_EQ(per_block, 65536u);
  // The formula: (global layers x C + windowed layers x what the window keeps) x bytes per
  // token-layer, where a decoding sequence's window keeps the blocks from the one holding
  // position C - 1 - 1024 + 1 on.
  const size_t token_layer = 2 * 4 * 256 * 2;
  for (int64_t ctx : {1, 15, 16, 17, 1000, 1024, 1025, 1040, 4096, 32768}) {
    const int64_t all = (ctx + 15) / 16;
    const int64_t kept = all - std::max<int64_t>(0, ctx - 1 - 1024 + 1) / 16;
    const size_t formula = size_t(5 * all * 16 + 29 * kept * 16) * token_layer;
    EXPECT_EQ(size_t(l.blocks_held(ctx, 16)) * per_block, formula) << ctx;
    // At most window + one block of positions in a windowed layer.
    EXPECT_LE(kept * 16, 1024 + 16) << ctx;
  }
  // Every layer global (one group of 34): the old layout, for comparison.
  ModelConfig flat = c;
  flat.sliding_window = 0;
  const KvCacheLayout f = flat.kv_cache_layout();
  ASSERT_EQ(f.n_groups(), 1);
  ASSERT_EQ(f.layers_per_group, 34);
  const double ratio = double(f.blocks_held(32768, 16)) *
                       double(kv_bytes_per_block(flat, 16, KvType::kF16)) /
                       (double(l.blocks_held(32768, 16)) * double(per_block));
  // 34 x 32768 token-layers against 5 x 32768 + 29 x 1024: 5.76x the sequences in one budget.
  EXPECT_GT(ratio, 5.7);
  EXPECT_LT(ratio, 5.8);
}

TEST(KvSizing, PlanCountsWhatAFullContextHoldsPerLayerKind) {
  const ModelConfig c = gemma3_4b(32768);
  // 4 GiB hold 65536 one-layer blocks; a 32768-token sequence holds 5 x 2048 + 29 x 64.
  auto plan = plan_kv_cache(c, 16, KvType::kF16, 4.0, 8);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->n_blocks, 65536);
  EXPECT_EQ(c.kv_cache_layout().blocks_held(32768, 16), 5 * 2048 + 29 * 64);
  EXPECT_NE(plan->description.find("34 K/V groups"), std::string::npos) << plan->description;
  // Too small for one full context: the error says so in blocks.
  auto small = plan_kv_cache(c, 16, KvType::kF16, 0.5, 8);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("less than the 12096"), std::string::npos) << small.message();
}

// gemma4's shape with kinds of different K/V widths (windowed 2 heads x 32, global 1 x 128)
// and the last five layers reading layers 3 and 4's K/V: only the five layers that store K/V
// have slots, and a slot is as wide as the widest of them.
TEST(KvSizing, SharedKvLayersOwnNoSlotAndSlotsFitTheWidestLayer) {
  ModelConfig c;
  c.arch = Arch::kGemma4;
  c.n_layer = 10;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 128;
  c.head_dim_swa = 32;
  c.layer_n_kv_heads = {2, 2, 2, 2, 1, 2, 2, 2, 2, 1};
  c.sliding_window = 8;
  c.layer_swa = {1, 1, 1, 1, 0, 1, 1, 1, 1, 0};
  c.layer_kv_source = {0, 1, 2, 3, 4, 3, 3, 3, 3, 4};
  c.n_ctx = 256;
  EXPECT_EQ(c.kv_slot_width(), 128);
  const KvCacheLayout l = c.kv_cache_layout();
  EXPECT_EQ(l.layers_per_group, 1);
  EXPECT_EQ(l.group_window, (std::vector<int32_t>{8, 8, 8, 8, 0}));
  EXPECT_EQ(l.layer_group[7], l.layer_group[3]);
  EXPECT_EQ(l.layer_group[9], 4);
  // A block: one slot's K and V for 16 positions of the widest layer, 2 x 16 x 128 x 2 bytes.
  EXPECT_EQ(kv_bytes_per_block(c, 16, KvType::kF16), 8192u);
  // A 256-token sequence: the global group every block, each windowed one its window's.
  EXPECT_EQ(l.blocks_held(256, 16), 16 + 4 * 1);
  EXPECT_EQ(l.blocks_held(1, 16), 5);
}

// The cost model's K/V per token (model_cost over the config: what sluice plan, info and the
// step roofline price) is the memory the cache lays out for a token: on gemma-3-4b every group's
// slot; on a gemma4 shape with shared layers only the layers that own K/V, each at its own
// width (the cache pads each slot to the widest layer, so it holds at least that much).
TEST(KvSizing, CostModelKvIsTheCachesBytesPerToken) {
  const ModelConfig g3 = gemma3_4b(32768);
  const KvCacheLayout l3 = g3.kv_cache_layout();
  EXPECT_EQ(model_cost(g3).kv_elems_per_token * 2 * 16,
            double(l3.n_groups()) * double(kv_bytes_per_block(g3, 16, KvType::kF16)));
  ModelConfig g4;
  g4.arch = Arch::kGemma4;
  g4.n_layer = 4;
  g4.n_head = 4;
  g4.n_kv_head = 2;
  g4.head_dim = 128;
  g4.head_dim_swa = 32;
  g4.layer_n_kv_heads = {2, 1, 2, 1};
  g4.sliding_window = 8;
  g4.layer_swa = {1, 0, 1, 0};
  g4.layer_kv_source = {0, 1, 0, 1};
  g4.n_ctx = 256;
  // Layers 0 (windowed: 2 heads of 32) and 1 (global: 1 head of 128) own K/V; 2 and 3 read theirs.
  EXPECT_EQ(model_cost(g4).kv_elems_per_token, 2.0 * (2 * 32 + 1 * 128));
  // Attention FLOPs: all four layers attend, each at its own head size.
  EXPECT_EQ(model_cost(g4).attn_flops_per_pair, 4.0 * 4 * (32 + 128 + 32 + 128));
  const KvCacheLayout l4 = g4.kv_cache_layout();
  EXPECT_LE(model_cost(g4).kv_elems_per_token * 2 * 16,
            double(l4.n_groups()) * double(kv_bytes_per_block(g4, 16, KvType::kF16)));
}

// The cost model of a config (a loaded model: sluice plan/info on a file, the step roofline, sim)
// and of the same shape (the planner's model_cost over ModelShape: presets) split K/V by layer
// kind alike, through the one rule ModelShape::layer_window; and what they say a sequence holds
// (kv_bytes_per_sequence) is the cache's blocks at every multiple of the block size.
void expect_cost_of_config_is_cost_of_shape(const ModelConfig& c) {
  const ModelCost a = model_cost(c);
  const ModelCost b = model_cost(static_cast<const ModelShape&>(c));
  EXPECT_GT(a.kv_window, 0) << c.arch_name;
  EXPECT_EQ(a.kv_window, b.kv_window);
  EXPECT_EQ(a.n_kv_layers, b.n_kv_layers);
  EXPECT_EQ(a.n_kv_layers_windowed, b.n_kv_layers_windowed);
  EXPECT_DOUBLE_EQ(a.kv_elems_per_token, b.kv_elems_per_token);
  EXPECT_DOUBLE_EQ(a.kv_elems_per_token_windowed, b.kv_elems_per_token_windowed);
  EXPECT_DOUBLE_EQ(a.attn_flops_per_pair, b.attn_flops_per_pair);
  EXPECT_DOUBLE_EQ(a.attn_flops_per_pair_windowed, b.attn_flops_per_pair_windowed);
  const KvCacheLayout l = c.kv_cache_layout();
  Precision f16;
  for (int64_t ctx = 16; ctx <= 40000; ctx += 16 * 37) {
    const double blocks = double(l.blocks_held(ctx, 16));
    EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(a, f16, double(ctx), 16),
                     blocks * double(kv_bytes_per_block(c, 16, KvType::kF16)))
        << c.arch_name << " " << ctx;
  }
}

TEST(KvSizing, CostModelSplitsKvByLayerKindAsTheCache) {
  const ModelConfig g3 = gemma3_4b(32768);
  expect_cost_of_config_is_cost_of_shape(g3);
  // docs/perf.md: 12,096 one-layer blocks, 792 MB, at 32k.
  EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(model_cost(g3), Precision{}, 32768, 16), 792723456.0);
  for (const char* name : {"gemma2", "gemma3", "gpt-oss", "phi3"}) {
    SLUICE_REQUIRE_SHARED(path, std::string("testdata/models/arch/") + name + ".gguf");
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    auto c = read_model_config(*f, {});
    ASSERT_TRUE(c.ok()) << c.message();
    expect_cost_of_config_is_cost_of_shape(*c);
  }
}

TEST(KvSizing, PipelineStagesStoreTheSlotsTheirLayersUse) {
  // gemma2-like: 26 layers, even ones windowed: two groups of 13; a stage of layers [13, 26)
  // uses windowed slots 7..12 and global slots 6..12.
  ModelConfig c;
  c.arch = Arch::kGemma2;
  c.n_layer = 26;
  c.n_kv_head = 2;
  c.head_dim = 32;
  c.sliding_window = 16;
  c.swa_period = 2;
  c.layer_begin = 13;
  c.layer_end = 26;
  const KvStageSlots s = kv_stage_slots(c);
  EXPECT_EQ(s.base, 6);
  EXPECT_EQ(s.n, 7);
  c.layer_begin = 0;
  c.layer_end = 0;
  EXPECT_EQ(kv_stage_slots(c).n, 13);
}

}  // namespace
}  // namespace sluice
