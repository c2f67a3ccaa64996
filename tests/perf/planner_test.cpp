// The planner's plumbing: presets, validation, the sweep, the engine's per-step prediction, the
// JSON document, the SVG and `local` hardware.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "perf/hardware.h"
#include "perf/machine.h"
#include "perf/planner.h"
#include "perf/roofline.h"
#include "test_util.h"

namespace sluice {
namespace {

PlanParams llama70b_on_h100s() {
  PlanParams p;
  p.model = model_cost(*find_planner_model("llama-3-70b"));
  p.chip = *find_hardware("H100");
  p.n_chips = 4;
  p.context = 4096;
  return p;
}

TEST(Hardware, PresetsAndLookup) {
  for (const char* name : {"H100", "H200", "A100", "B200", "RTX 4090", "TPU v5e", "TPU v5p"}) {
    const HardwareSpec* hw = find_hardware(name);
    ASSERT_NE(hw, nullptr) << name;
    EXPECT_EQ(hw->name, name);
    EXPECT_GT(hw->hbm_bytes_per_s, 0);
    EXPECT_GT(hw->flops_bf16, 0);
    EXPECT_GE(hw->ops_int8, hw->flops_bf16);
    EXPECT_GT(hw->memory_bytes, 0);
    EXPECT_GT(hw->link_bytes_per_s, 0);
  }
  EXPECT_EQ(find_hardware("tpu-v5e")->name, "TPU v5e");
  EXPECT_EQ(find_hardware("TPUv5p")->name, "TPU v5p");
  EXPECT_EQ(find_hardware("rtx_4090")->name, "RTX 4090");
  EXPECT_EQ(find_hardware("4090")->name, "RTX 4090");
  EXPECT_EQ(find_hardware("v5e")->name, "TPU v5e");
  EXPECT_EQ(find_hardware("100"), nullptr);  // ambiguous: H100, A100
  EXPECT_EQ(find_hardware("tpu v9"), nullptr);
  EXPECT_NE(hardware_names().find("local"), std::string::npos);
}

TEST(Hardware, AggregateAndPeak) {
  const HardwareSpec& v5e = *find_hardware("TPU v5e");
  const HardwareSpec four = aggregate(v5e, 4);
  EXPECT_EQ(four.name, "4 x TPU v5e");
  EXPECT_DOUBLE_EQ(four.hbm_bytes_per_s, 4 * v5e.hbm_bytes_per_s);
  EXPECT_DOUBLE_EQ(four.memory_bytes, 4 * v5e.memory_bytes);
  EXPECT_DOUBLE_EQ(four.link_bytes_per_s, v5e.link_bytes_per_s);  // per chip
  EXPECT_DOUBLE_EQ(peak_flops(v5e, 16), 1.97e14);
  EXPECT_DOUBLE_EQ(peak_flops(v5e, 8), 3.94e14);
  HardwareSpec no_int8 = v5e;
  no_int8.ops_int8 = 0;
  EXPECT_DOUBLE_EQ(peak_flops(no_int8, 8), 1.97e14);
}

TEST(Hardware, LocalFromRooflineCache) {
  test::TempDir dir;
  const std::string path = dir.path("roofline.json");
  auto missing = load_local_hardware(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("sluice bench --roofline"), std::string::npos)
      << missing.message();

  MachineRoofline r;
  r.cpu = "Test CPU";
  r.threads = 2;
  r.read_gbps = 20;
  r.peak_gflops_f32 = 100;
  r.peak_gops_int8 = 400;
  r.measured_at = "2025-01-01T00:00:00Z";
  ASSERT_TRUE(save_roofline(r, path).ok());
  auto hw = load_local_hardware(path);
  ASSERT_TRUE(hw.ok()) << hw.message();
  EXPECT_DOUBLE_EQ(hw->hbm_bytes_per_s, 20e9);
  EXPECT_DOUBLE_EQ(hw->flops_bf16, 100e9);  // f32 peak stands in without bf16 dot products
  EXPECT_DOUBLE_EQ(hw->ops_int8, 400e9);
  EXPECT_GT(hw->memory_bytes, 0);
  EXPECT_NE(hw->name.find("Test CPU"), std::string::npos);
  // 100 GFLOP/s over 20 GB/s at bf16 weights.
  EXPECT_DOUBLE_EQ(critical_batch(*hw, 2.0, 16), 5.0);
}

TEST(Planner, PresetsByName) {
  for (const char* name : {"llama-2-13b", "llama-3-8b", "llama-3-70b", "llama-3-405b", "worked-18b",
                           "worked-18b-moe", "palm-62b", "palm-540b"}) {
    const ModelShape* s = find_planner_model(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_GT(model_cost(*s).n_params, 1e9) << name;
  }
  EXPECT_EQ(find_planner_model("LLaMA-3-70B")->name, "llama-3-70b");
  EXPECT_EQ(find_planner_model("gpt-5"), nullptr);
  EXPECT_NEAR(model_cost(*find_planner_model("llama-3-8b")).n_params, 8.03e9, 0.01e9);
  EXPECT_NEAR(model_cost(*find_planner_model("llama-3-405b")).n_params, 405.8e9, 0.1e9);
}

// Hybrids (Qwen3.5): parameters with the DeltaNet projections and gated attention (llama.cpp
// reports 8.95 B for the 9B's file), K/V for the 8 attention layers only, and the 24 recurrent
// layers' state per sequence: in the memory a sequence holds and in each step's traffic.
TEST(Planner, HybridCountsStateNotKvForRecurrentLayers) {
  const ModelShape* s = find_planner_model("qwen3.5-9b");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->n_recurrent_layers(), 24);
  const ModelCost m = model_cost(*s);
  EXPECT_NEAR(m.n_params, 8.95e9, 0.01e9);
  EXPECT_DOUBLE_EQ(m.kv_elems_per_token, 2.0 * 8 * 4 * 256);
  // Per recurrent layer: the conv's 3 x 8192 inputs and 32 heads of 128 x 128, f32.
  EXPECT_DOUBLE_EQ(m.state_bytes_per_sequence, 24.0 * (3 * 8192 + 32 * 128 * 128) * 4);
  PlanParams p;
  p.model = m;
  p.chip = *find_hardware("h100");
  p.context = 1000;
  p.batches = {4};
  const Result<Plan> plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_DOUBLE_EQ(plan->kv_bytes_per_sequence, 1000.0 * 32768 + m.state_bytes_per_sequence);
  ASSERT_EQ(plan->rows.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->rows[0].kv_bytes, 4 * plan->kv_bytes_per_sequence);
  EXPECT_DOUBLE_EQ(plan->rows[0].step.kv_bytes,
                   4 * (1000.0 * 32768 + 2 * m.state_bytes_per_sequence));
}

TEST(Planner, RejectsBadParameters) {
  PlanParams p = llama70b_on_h100s();
  p.precision.weight_bits = 3;
  EXPECT_NE(make_plan(p).message().find("weight bits must be 16, 8 or 4"), std::string::npos);
  p = llama70b_on_h100s();
  p.precision.weight_bits = 0;  // "as stored" needs stored bytes
  EXPECT_FALSE(make_plan(p).ok());
  p = llama70b_on_h100s();
  p.precision.kv_bits = 2;
  EXPECT_FALSE(make_plan(p).ok());
  p = llama70b_on_h100s();
  p.precision.act_bits = 4;
  EXPECT_FALSE(make_plan(p).ok());
  p = llama70b_on_h100s();
  p.n_chips = 0;
  EXPECT_FALSE(make_plan(p).ok());
  p = llama70b_on_h100s();
  p.mfu = 1.5;
  EXPECT_NE(make_plan(p).message().find("MFU"), std::string::npos);
  p = llama70b_on_h100s();
  p.batches = {8, 0};
  EXPECT_FALSE(make_plan(p).ok());
  p = llama70b_on_h100s();
  p.context = 0;
  EXPECT_FALSE(make_plan(p).ok());
}

TEST(Planner, SweepCoversCriticalAndLargestBatch) {
  EXPECT_EQ(sweep_batches(15, 240.2),
            (std::vector<int64_t>{1, 2, 4, 8, 15, 16, 32, 64, 128, 240, 256}));
  EXPECT_EQ(sweep_batches(0, 1.0), (std::vector<int64_t>{1}));
  const std::vector<int64_t> big = sweep_batches(100000, 300);
  EXPECT_EQ(big.back(), 4096);

  auto plan = make_plan(llama70b_on_h100s());
  ASSERT_TRUE(plan.ok()) << plan.message();
  // 4 x 80 GB - 141 GB of weights, 1.34 GB per 4096-token sequence.
  EXPECT_EQ(plan->max_batch, int64_t((320e9 - plan->weight_bytes) / (327680.0 * 4096)));
  bool saw_max = false;
  for (size_t i = 0; i < plan->rows.size(); ++i) {
    const PlanRow& r = plan->rows[i];
    saw_max |= r.batch == plan->max_batch;
    EXPECT_EQ(r.fits, r.batch <= plan->max_batch);
    if (i > 0) {  // step time and throughput both grow with batch (the frontier)
      EXPECT_GT(r.step_time_ms, plan->rows[i - 1].step_time_ms);
      EXPECT_GT(r.tokens_per_s, plan->rows[i - 1].tokens_per_s);
    }
  }
  EXPECT_TRUE(saw_max);
  ASSERT_TRUE(plan->serving_batch.has_value());
  EXPECT_EQ(*plan->serving_batch, std::min<int64_t>(plan->max_batch, 295));  // B_crit 295.2
  EXPECT_GT(plan->prefill_generate_ratio, 0);
}

TEST(Planner, KvTransferTimeIsThePromptsKvBytesOverTheLink) {
  PlanParams p = llama70b_on_h100s();
  p.prompt_len = 2048;
  auto none = make_plan(p);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kv_transfer_s, 0);
  EXPECT_EQ(plan_to_json(*none).count("kv_transfer"), 0u);
  p.kv_link_bytes_per_s = 12.5e9;  // 100 Gb/s
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok());
  // LLaMA 3 70B, bf16 KV: 2 * 80 layers * 8 KV heads * 128 dims * 2 bytes = 327,680 B/token.
  EXPECT_DOUBLE_EQ(plan->kv_transfer_bytes, 2048 * 327680.0);
  EXPECT_NEAR(plan->kv_transfer_s, 2048 * 327680.0 / 12.5e9, 1e-12);  // 53.7 ms
  EXPECT_NE(plan_to_text(*plan).find("K/V transfer"), std::string::npos);
  EXPECT_NEAR(plan_to_json(*plan)["kv_transfer"]["seconds"].get<double>(), plan->kv_transfer_s,
              1e-12);
}

TEST(Planner, NothingFits) {
  PlanParams p = llama70b_on_h100s();
  p.chip = *find_hardware("RTX 4090");
  p.n_chips = 1;
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_batch, 0);
  EXPECT_EQ(plan->min_chips_weights, 6);  // 141 GB over 24 GB cards
  EXPECT_FALSE(plan->serving_batch.has_value());
  for (const PlanRow& r : plan->rows) EXPECT_FALSE(r.fits);
  EXPECT_TRUE(plan_to_json(*plan)["serving"].is_null());
  EXPECT_NE(plan_to_text(*plan).find("none"), std::string::npos);
}

TEST(Planner, StoredWeightBytes) {
  PlanParams p = llama70b_on_h100s();
  p.model.stored_weight_bytes = 40e9;  // e.g. a 4.5-bit GGUF
  p.precision.weight_bits = 0;
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_DOUBLE_EQ(plan->weight_bytes, 40e9);
  p.precision.weight_bits = 8;  // an explicit precision wins
  EXPECT_DOUBLE_EQ(make_plan(p)->weight_bytes, p.model.n_params);
}

TEST(Planner, JsonDocument) {
  PlanParams p = llama70b_on_h100s();
  p.batches = {1, 16};
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok());
  const nlohmann::ordered_json j = plan_to_json(*plan);
  EXPECT_DOUBLE_EQ(j["model"]["params"].get<double>(), p.model.n_params);
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 327680.0);
  EXPECT_DOUBLE_EQ(j["hardware"]["critical_batch"].get<double>(), 9.89e14 / 3.35e12);
  EXPECT_EQ(j["hardware"]["chips"], 4);
  ASSERT_EQ(j["batches"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = j["batches"][i];
    EXPECT_EQ(row["batch"].get<int64_t>(), p.batches[i]);
    for (const char* key : {"kv_bytes", "total_bytes", "step_time_ms", "tokens_per_s"}) {
      EXPECT_TRUE(row[key].is_number()) << key;
    }
    EXPECT_DOUBLE_EQ(row["step_time_ms"].get<double>(), plan->rows[i].step_time_ms);
  }
  // Several batches given: serving figures are for min(largest batch, critical batch).
  EXPECT_EQ(j["serving"]["batch"].get<int64_t>(), plan->max_batch);
  EXPECT_EQ(j["limits"]["max_batch"].get<int64_t>(), plan->max_batch);
  p.batches = {16};  // one batch given: serving figures are for it
  EXPECT_EQ(plan_to_json(*make_plan(p))["serving"]["batch"], 16);
}

TEST(Planner, ParetoSvg) {
  auto plan = make_plan(llama70b_on_h100s());
  ASSERT_TRUE(plan.ok());
  const std::string svg = pareto_svg(*plan);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, plan->rows.size());
  EXPECT_NE(svg.find("fill=\"white\"><title>"), std::string::npos);  // a point that does not fit
  // Names are escaped.
  PlanParams p = llama70b_on_h100s();
  p.model.name = "a<b>&c";
  EXPECT_NE(pareto_svg(*make_plan(p)).find("a&lt;b&gt;&amp;c"), std::string::npos);
}

TEST(StepShape, DecodeMatchesTheSeedsMemoryBound) {
  // A decode step of 4 sequences at 8192 context is the pop quiz's memory-bound step.
  ModelCost m;
  m.n_params = m.n_params_active = 30e9;
  m.kv_elems_per_token = 100e3;
  const Precision int8{8, 8, 16};
  std::vector<SeqWork> seqs(4, SeqWork{1, 8192});
  const StepShape s = make_step_shape(m, int8, seqs);
  EXPECT_EQ(s.n_tokens, 4);
  EXPECT_EQ(s.n_seqs, 4);
  EXPECT_DOUBLE_EQ(s.weight_bytes, 30e9);
  EXPECT_DOUBLE_EQ(s.kv_bytes, 4 * 8192 * 100e3);
  const HardwareSpec slice = aggregate(*find_hardware("TPU v5e"), 16);
  EXPECT_DOUBLE_EQ(predicted_step_seconds(s, slice),
                   (30e9 + 4 * 8192 * 100e3) / slice.hbm_bytes_per_s);
  EXPECT_NEAR(predicted_step_seconds(s, slice), generate_step(m, int8, slice, 4, 8192).seconds,
              1e-12);
}

TEST(StepShape, RaggedBatchCountsCausalAttention) {
  const ModelCost m = model_cost(*find_planner_model("llama-3-8b"));
  // A 3-token chunk after 2 cached tokens (positions 2..4 attend to 3, 4, 5 tokens) and a
  // decode at context 10: 12 + 10 query-key pairs.
  const std::vector<SeqWork> seqs = {{3, 5}, {1, 10}};
  const StepShape s = make_step_shape(m, Precision{}, seqs);
  EXPECT_EQ(s.n_tokens, 4);
  EXPECT_DOUBLE_EQ(s.flops, 2 * m.n_params_active * 4 + m.attn_flops_per_pair * 22);
  EXPECT_DOUBLE_EQ(s.kv_bytes, 15 * kv_bytes_per_token(m, Precision{}));
  // A long prefill is compute-bound: the time is FLOPs over the peak.
  const std::vector<SeqWork> prefill = {{8192, 8192}};
  const StepShape big = make_step_shape(m, Precision{}, prefill);
  const HardwareSpec& h100 = *find_hardware("H100");
  EXPECT_DOUBLE_EQ(predicted_step_seconds(big, h100), big.flops / h100.flops_bf16);
  // int8 activations use the int8 peak.
  StepShape big8 = big;
  big8.act_bits = 8;
  EXPECT_DOUBLE_EQ(predicted_step_seconds(big8, h100), big.flops / h100.ops_int8);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The feed-forward layouts of the paper notes by hand: D = 1000, F = 4000, 16 chips, 1 GB/s
// link, bf16 activations and weights.
TEST(FfnLayouts, CommunicationByHandAndCrossovers) {
  TpMatmul mm;
  mm.d_model = 1000;
  mm.d_ff = 4000;
  mm.bytes_per_act = 2;
  mm.bytes_per_weight = 2;
  mm.batch = 100;
  HardwareSpec chip;
  chip.hbm_bytes_per_s = 1e12;
  chip.flops_bf16 = 1e15;
  chip.link_bytes_per_s = 1e9;
  const auto t1 = ffn_layout_times(FfnLayout::k1dWeightStationary, mm, 16, chip);
  const auto t2 = ffn_layout_times(FfnLayout::k2dWeightStationary, mm, 16, chip);
  const auto tw = ffn_layout_times(FfnLayout::kWeightGathered, mm, 16, chip);
  EXPECT_DOUBLE_EQ(t1.comm_s, 2.0 * 100 * 1000 * 2 / 1e9);
  EXPECT_DOUBLE_EQ(t2.comm_s, 2.0 * 100 * 5000 * 2 / 4 / 1e9);  // sqrt(16) = 4
  EXPECT_DOUBLE_EQ(tw.comm_s, 2.0 * 1000 * 4000 * 2 * 15 / 16 / 1e9);
  EXPECT_DOUBLE_EQ(t1.hbm_s, 2.0 * 1000 * 4000 * 2 / 16 / 1e12);
  EXPECT_DOUBLE_EQ(tw.hbm_s, 2.0 * 1000 * 4000 * 2 / 1e12);
  EXPECT_DOUBLE_EQ(t1.math_s, 4.0 * 100 * 1000 * 4000 / 16 / 1e15);
  EXPECT_DOUBLE_EQ(t1.math_s, tw.math_s);
  // 16 chips < (1 + 4)^2: 2D still communicates more than 1D; 36 chips: less.
  EXPECT_GT(t2.comm_s, t1.comm_s);
  EXPECT_LT(ffn_layout_times(FfnLayout::k2dWeightStationary, mm, 36, chip).comm_s,
            ffn_layout_times(FfnLayout::k1dWeightStationary, mm, 36, chip).comm_s);
  // Weight-gathering pays off once 2 T D a > 2 D F w (n - 1) / n: T > 3750 against 1D.
  EXPECT_DOUBLE_EQ(ffn_layout_crossover(FfnLayout::k1dWeightStationary, mm, 16), 3750);
  EXPECT_DOUBLE_EQ(ffn_layout_crossover(FfnLayout::k2dWeightStationary, mm, 16),
                   4000.0 * 2 * 15 / 16 * 1000 * 4 / (5000 * 2));

  // The plan: 64 chips of TPU v5p compare the layouts and say where each wins.
  PlanParams p;
  p.model = model_cost(*find_planner_model("palm-540b"));
  p.chip = *find_hardware("TPU v5p");
  p.n_chips = 64;
  p.batches = {512};
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  ASSERT_EQ(plan->layouts.size(), 2u);  // decode at 512, prefill of the context
  EXPECT_EQ(plan->layouts[0].best, FfnLayout::k2dWeightStationary);
  EXPECT_DOUBLE_EQ(plan->layout_2d_beats_1d_chips, 25);  // F = 4D
  const std::string text = plan_to_text(*plan);
  EXPECT_NE(text.find("feed-forward layouts over 64 chips"), std::string::npos) << text;
  EXPECT_NE(text.find("2D weight-stationary communicates less than 1D beyond 25 chips"),
            std::string::npos)
      << text;
  EXPECT_TRUE(plan_to_json(*plan).contains("ffn_layouts"));
  p.n_chips = 1;
  EXPECT_TRUE(make_plan(p)->layouts.empty());
}

}  // namespace
}  // namespace sluice
