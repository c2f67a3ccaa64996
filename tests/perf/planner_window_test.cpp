// Sliding-window models in the roofline, the planner and the step prediction: a sequence holds the
// global layers' K/V for its whole context and the windowed layers' for their window only (the
// engine's per-layer-kind formula, base/cache_layout.h), and a windowed layer reads and attends at
// most its window a query. Models without a window price exactly as before.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/cache_layout.h"
#include "model/presets.h"
#include "perf/hardware.h"
#include "perf/planner.h"
#include "perf/roofline.h"

namespace sluice {
namespace {

// The engine's bytes for a decoding sequence of `ctx` positions: the blocks its K/V groups hold
// (KvCacheLayout::blocks_held over the shape's layer windows) x one group-block's bytes.
double window_engine_bytes(const ModelShape& s, int64_t ctx, int bs, int kv_bits) {
  std::vector<int32_t> windows;
  for (int il = 0; il < s.n_layer; ++il) windows.push_back(s.layer_window(il));
  const KvCacheLayout l = KvCacheLayout::from_windows(windows);
  const double per_block =
      2.0 * l.layers_per_group * bs * double(s.n_kv_head) * s.head_dim * kv_bits / 8.0;
  return double(l.blocks_held(ctx, bs)) * per_block;
}

const ModelShape& synth_shape(const char* name) {
  const ModelPreset* p = find_preset(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

TEST(PlannerWindows, PresetShapesCarryTheirArchitecturesWindowPattern) {
  const ModelCost g = model_cost(synth_shape("gemma-3-4b"));
  EXPECT_EQ(g.n_kv_layers, 34);
  EXPECT_EQ(g.n_kv_layers_windowed, 29);  // all but il % 6 == 5
  EXPECT_EQ(g.kv_window, 1024);
  EXPECT_DOUBLE_EQ(g.kv_elems_per_token, 2.0 * 34 * 4 * 256);
  EXPECT_DOUBLE_EQ(g.kv_elems_per_token_windowed, 2.0 * 29 * 4 * 256);
  EXPECT_DOUBLE_EQ(g.attn_flops_per_pair_windowed, 4.0 * 29 * 8 * 256);
  const ModelCost o = model_cost(synth_shape("gpt-oss-20b"));
  EXPECT_EQ(o.n_kv_layers_windowed, 12);  // even layers
  EXPECT_EQ(o.kv_window, 128);
  const ModelCost phi = model_cost(synth_shape("phi-3-mini"));  // every layer windowed
  EXPECT_EQ(phi.n_kv_layers_windowed, 32);
  EXPECT_EQ(phi.kv_elems_per_token_windowed, phi.kv_elems_per_token);
  const ModelCost llama = model_cost(synth_shape("llama-3.1-8b"));
  EXPECT_EQ(llama.kv_window, 0);
  EXPECT_EQ(llama.kv_elems_per_token_windowed, 0);
}

// docs/perf.md: a 32k-token gemma-3-4b sequence holds 12,096 one-layer blocks, 792 MB; gpt-oss-20b
// 12 global layers x 32768 + 12 windowed x 128 positions of 2 KiB.
TEST(PlannerWindows, KvPerSequenceIsTheEnginesFormula) {
  const Precision f16;
  const ModelShape& g = synth_shape("gemma-3-4b");
  const ModelCost gc = model_cost(g);
  EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(gc, f16, 32768, 16), 12096.0 * 16 * 4 * 256 * 2 * 2);
  EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(gc, f16, 32768, 16), 792723456.0);
  const ModelShape& o = synth_shape("gpt-oss-20b");
  const ModelCost oc = model_cost(o);
  EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(oc, f16, 32768, 16), (12.0 * 32768 + 12 * 128) * 2048);
  // At every multiple of the block size, exactly the engine's blocks (and within one block per
  // windowed layer of them otherwise: the global part counts positions, not blocks).
  for (int bs : {1, 16, 32}) {
    for (int64_t ctx = bs; ctx <= 40000; ctx += 997 * bs) {
      EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(gc, f16, double(ctx), bs),
                       window_engine_bytes(g, ctx, bs, 16))
          << ctx << " " << bs;
      EXPECT_DOUBLE_EQ(kv_bytes_per_sequence(oc, f16, double(ctx), bs),
                       window_engine_bytes(o, ctx, bs, 16))
          << ctx << " " << bs;
    }
  }
  for (int64_t ctx : {1, 15, 17, 1000, 1023, 1024, 1025, 1039, 1041, 32767}) {
    EXPECT_LE(kv_bytes_per_sequence(gc, f16, double(ctx), 16), window_engine_bytes(g, ctx, 16, 16));
    EXPECT_GT(kv_bytes_per_sequence(gc, f16, double(ctx), 16) + 34 * 16 * 4096.0,
              window_engine_bytes(g, ctx, 16, 16))
        << ctx;
  }
  // A windowed layer holds min(context, window) or up to a block more.
  EXPECT_EQ(kv_window_positions_held(100, 1024, 16), 100);
  EXPECT_EQ(kv_window_positions_held(32768, 1024, 16), 1024);
  EXPECT_EQ(kv_window_positions_held(32770, 1024, 16), 1026);
  EXPECT_EQ(kv_window_positions_held(32768, 1024, 1), 1023);  // the next token's window, less it
  EXPECT_EQ(kv_window_positions_held(32768, 0, 16), 32768);
}

TEST(PlannerWindows, WithoutAWindowNothingChanges) {
  for (const char* name : {"llama-2-13b", "llama-3-70b", "qwen3.5-9b", "mixtral-8x7b"}) {
    const ModelCost m = model_cost(*find_planner_model(name));
    for (int bits : {16, 8, 4}) {
      Precision p;
      p.kv_bits = bits;
      for (double ctx : {1.0, 1000.0, 8192.0, 131072.0}) {
        EXPECT_EQ(kv_bytes_per_sequence(m, p, ctx, 16), kv_bytes_per_token(m, p) * ctx) << name;
        EXPECT_EQ(kv_bytes_read(m, p, ctx), ctx * kv_bytes_per_token(m, p)) << name;
      }
    }
  }
}

// A decode step reads every position of the global layers and the window of the windowed ones;
// a prefill chunk's windowed layers read back window - 1 positions before it; attention FLOPs
// count at most `window` keys a query in windowed layers.
TEST(PlannerWindows, StepsReadAndAttendTheWindowOnly) {
  const Precision f16;
  const ModelCost m = model_cost(synth_shape("gemma-3-4b"));
  const double token_layer = 2.0 * 4 * 256 * 2;  // bytes
  EXPECT_DOUBLE_EQ(kv_bytes_read(m, f16, 32768), (5.0 * 32768 + 29 * 1024) * token_layer);
  EXPECT_DOUBLE_EQ(kv_bytes_read(m, f16, 500), 34.0 * 500 * token_layer);
  EXPECT_DOUBLE_EQ(kv_bytes_read(m, f16, 8192, 512), (5.0 * 8192 + 29 * 1535) * token_layer);

  const SeqWork decode[] = {{1, 32768}};
  const StepShape d = make_step_shape(m, f16, decode);
  EXPECT_DOUBLE_EQ(d.kv_bytes, kv_bytes_read(m, f16, 32768));
  const double global_flops = m.attn_flops_per_pair - m.attn_flops_per_pair_windowed;
  EXPECT_DOUBLE_EQ(d.flops, 2 * m.n_params_active + global_flops * 32768 +
                                m.attn_flops_per_pair_windowed * 1024);
  // A 4-token chunk at positions 1022..1025: its windowed layers attend 1023, 1024, 1024, 1024.
  const SeqWork chunk[] = {{4, 1026}};
  const StepShape c = make_step_shape(m, f16, chunk);
  EXPECT_DOUBLE_EQ(c.flops, 2 * m.n_params_active * 4 + global_flops * (1023 + 1024 + 1025 + 1026) +
                                m.attn_flops_per_pair_windowed * (1023 + 3 * 1024));
  // generate_step prices the same reads.
  const HardwareSpec& h100 = *find_hardware("H100");
  EXPECT_DOUBLE_EQ(generate_step(m, f16, h100, 8, 32768).kv_bytes,
                   8 * kv_bytes_read(m, f16, 32768));
}

// `sluice plan` on gemma-3-4b: the sequence's K/V is the formula's, and 5.76x the sequences fit
// in the memory the weights leave than if every layer kept the whole context.
TEST(PlannerWindows, PlanFitsMoreWindowedSequences) {
  PlanParams p;
  p.model = model_cost(synth_shape("gemma-3-4b"));
  p.chip = *find_hardware("H100");
  p.context = 32768;
  p.batches = {1};
  const Result<Plan> plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_DOUBLE_EQ(plan->kv_bytes_per_sequence, 792723456.0);
  EXPECT_DOUBLE_EQ(plan->kv_bytes_per_token, 34.0 * 4096);
  EXPECT_DOUBLE_EQ(plan->rows[0].kv_bytes, 792723456.0);
  const double free_bytes = 80e9 - plan->weight_bytes;
  EXPECT_EQ(plan->max_batch, int64_t(std::floor(free_bytes / 792723456.0)));
  const int64_t all_global = int64_t(std::floor(free_bytes / (34.0 * 4096 * 32768)));
  EXPECT_GT(plan->max_batch, 5 * all_global);
  // The prompt's transfer moves every layer's K/V of its tokens (the blocks sluice transfers).
  p.kv_link_bytes_per_s = 12.5e9;
  p.prompt_len = 1000;
  EXPECT_DOUBLE_EQ(make_plan(p)->kv_transfer_bytes, 1000 * 34.0 * 4096);
  const auto j = plan_to_json(*plan);
  EXPECT_EQ(j["model"]["kv_window"], 1024);
  EXPECT_EQ(j["model"]["kv_windowed_layers"], 29);
  EXPECT_EQ(j["model"]["block_size"], 16);
  EXPECT_NE(plan_to_text(*plan).find("29 of 34 layers windowed: 1024 tokens"), std::string::npos)
      << plan_to_text(*plan);
  // No window: the JSON has none of the window's fields.
  p.model = model_cost(*find_planner_model("llama-3-8b"));
  EXPECT_FALSE(plan_to_json(*make_plan(p)).at("model").contains("kv_window"));
  p.block_size = 0;
  EXPECT_FALSE(make_plan(p).ok());
}

}  // namespace
}  // namespace sluice
