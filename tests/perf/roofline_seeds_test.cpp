// The seeds' worked numbers, reproduced by the roofline model (shared/seeds/). Each test names
// the passage it checks; docs/planner.md tabulates expected vs. computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "perf/hardware.h"
#include "perf/planner.h"
#include "perf/roofline.h"

namespace sluice {
namespace {

// |got - want| <= rel * |want|, with a readable failure.
#define EXPECT_WITHIN(got, want, rel)                                             \
  EXPECT_LE(std::fabs(double(got) - double(want)), (rel)*std::fabs(double(want))) \
      << #got << " = " << (got) << ", seeds say " << (want)

const HardwareSpec& v5e() {
  return *find_hardware("TPU v5e");
}

ModelCost preset(const char* name) {
  return model_cost(*find_planner_model(name));
}

// all-about-transformer-inference.md "Modeling throughput and latency for LLaMA 2-13B": the
// seeds' tables as rows of {batch, KV GiB, total GiB, step ms, tokens/s}. (The seeds label the
// memory columns GiB but compute them in decimal GB: 6.7 = 8192 * 819200 bytes / 1e9.)
struct SeedRow {
  int64_t batch;
  double kv_gb, total_gb, step_ms, tokens_per_s;
};

Plan plan_llama2_13b(const ModelCost& model) {
  PlanParams p;
  p.model = model;
  p.chip = v5e();
  p.n_chips = 8;
  p.context = 8192;
  p.batches = {1, 8, 16, 32, 64, 240};
  auto plan = make_plan(p);
  EXPECT_TRUE(plan.ok()) << plan.message();
  return *plan;
}

void expect_table(const Plan& plan, const std::vector<SeedRow>& want) {
  ASSERT_EQ(plan.rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(want[i].batch));
    const PlanRow& r = plan.rows[i];
    EXPECT_EQ(r.batch, want[i].batch);
    EXPECT_WITHIN(r.kv_bytes / 1e9, want[i].kv_gb, 0.01);
    EXPECT_WITHIN(r.total_bytes / 1e9, want[i].total_gb, 0.01);
    EXPECT_WITHIN(r.step_time_ms, want[i].step_ms, 0.01);
    EXPECT_WITHIN(r.tokens_per_s, want[i].tokens_per_s, 0.01);
  }
}

TEST(SeedsLlama2_13B, ParamsAndKvPerSequence) {
  const ModelCost m = preset("llama-2-13b");
  EXPECT_WITHIN(m.n_params, 13e9, 0.01);                                  // "13e9 total parameters"
  EXPECT_EQ(kv_bytes_per_token(m, Precision{}), 819200.0);                // 2 * 2 * 128 * 40 * 40
  EXPECT_WITHIN(kv_bytes_per_token(m, Precision{}) * 8192, 6.7e9, 0.01);  // "= 6.7GB"
  // "8x TPU v5es gives us 128GiB of HBM, 6.5TiB/s of HBM bandwidth (0.82TiB/s each)"
  const HardwareSpec total = aggregate(v5e(), 8);
  EXPECT_WITHIN(total.memory_bytes, 128e9, 1e-9);
  EXPECT_WITHIN(total.hbm_bytes_per_s, 6.56e12, 1e-9);
  EXPECT_WITHIN(total.flops_bf16, 1600e12, 0.02);  // "1600TF/s"
}

TEST(SeedsLlama2_13B, TableWith40KvHeads) {
  const Plan plan = plan_llama2_13b(preset("llama-2-13b"));
  expect_table(plan, {{1, 6.7, 32.7, 4.98, 200.61},
                      {8, 53.6, 79.6, 12.13, 659.30},
                      {16, 107.2, 133.2, 20.30, 787.99},
                      {32, 214.4, 240.4, 36.65, 873.21},
                      {64, 428.8, 454.8, 69.33, 923.13},
                      {240, 1608, 1634, 249.09, 963.53}});
  // "We OOM beyond batch size 16": 16 sequences need 133 GB of the 128 GB.
  EXPECT_EQ(plan.max_batch, 15);
  EXPECT_FALSE(plan.rows[2].fits);
  EXPECT_TRUE(plan.rows[1].fits);
}

TEST(SeedsLlama2_13B, TableWith8KvHeads) {
  // "keep the total number of params the same, but ... 8 KV heads": only the KV shrinks.
  ModelCost m = preset("llama-2-13b");
  m.kv_elems_per_token = 2.0 * 40 * 8 * 128;
  const Plan plan = plan_llama2_13b(m);
  expect_table(plan, {{1, 1.34, 27.34, 4.17, 239.94},
                      {8, 10.72, 36.72, 5.60, 1429.19},
                      {16, 21.44, 47.44, 7.23, 2212.48},
                      {32, 42.88, 68.88, 10.50, 3047.62},
                      {64, 85.76, 111.76, 17.04, 3756.62},
                      {240, 321.6, 347.6, 52.99, 4529.34}});
  EXPECT_GE(plan.max_batch, 64);  // "We can fit a much bigger batch of 64"
}

TEST(SeedsCriticalBatch, Precisions) {
  // "For bf16 activations on TPU v5e, this is 240 tokens"
  EXPECT_WITHIN(critical_batch(v5e(), 2.0, 16), 240, 0.01);
  // "if we have int8 parameters but do our computation in bf16, the critical batch size drops
  // to 120. With int8 activations and int8 params, it jumps back up to 240"
  EXPECT_WITHIN(critical_batch(v5e(), 1.0, 16), 120, 0.01);
  EXPECT_WITHIN(critical_batch(v5e(), 1.0, 8), 240, 0.01);
  // H100: "B_crit is 1e15 / 3.35e12 = 298" (with the 9.89e14 bf16 peak: 295).
  EXPECT_WITHIN(critical_batch(*find_hardware("H100"), 2.0, 16), 298, 0.015);
  // Guide: "the A100's compute/bandwidth threshold of 156 ops/byte" (312e12 / 2.0e12).
  EXPECT_WITHIN(critical_batch(*find_hardware("A100"), 2.0, 16), 156, 0.03);
}

TEST(SeedsPopQuiz, ThirtyBillionOnV5e4x4) {
  // "a generate step with a batch size of 4 tokens from a 30B parameter dense model on TPU v5e
  // 4x4 slice in int8 with bf16 FLOPs, 8192 context and 100 kB / token KV caches"
  ModelCost m;
  m.name = "30B";
  m.n_params = m.n_params_active = 30e9;
  m.kv_elems_per_token = 100e3;
  const Precision int8{8, 8, 16};
  const HardwareSpec slice = aggregate(v5e(), 16);
  // "(4 * 819e6 + 30e9) / (16 * 8.1e11) = 2.5 ms": 2.54 ms at 8.2e11, 2.57 ms at 8.1e11.
  const GenerateStep small = generate_step(m, int8, slice, 4, 8192);
  EXPECT_WITHIN(small.kv_bytes / 4, 819e6, 0.001);
  EXPECT_WITHIN(small.seconds * 1e3, 2.5, 0.03);
  EXPECT_FALSE(small.compute_bound);
  // "(256 * 819e6) / (16 * 8.1e11) + (2 * 256 * 30e9) / (16 * 1.97e14) = 21ms"
  const GenerateStep big = generate_step(m, int8, slice, 256, 8192);
  EXPECT_WITHIN(big.seconds * 1e3, 21, 0.01);
  EXPECT_TRUE(big.compute_bound);
  // With the quiz's own 8.1e11 bandwidth.
  HardwareSpec v5e_81 = v5e();
  v5e_81.hbm_bytes_per_s = 8.1e11;
  EXPECT_WITHIN(generate_step(m, int8, aggregate(v5e_81, 16), 4, 8192).seconds * 1e3, 2.568, 0.001);
  EXPECT_WITHIN(generate_step(m, int8, aggregate(v5e_81, 16), 256, 8192).seconds * 1e3, 21, 0.01);
}

TEST(SeedsLlama3_70B, KvCacheAndParams) {
  const ModelCost m = preset("llama-3-70b");
  // "56.3e9 + 2.1e9 + 12e9 = 70.4e9" (exactly 70.55e9: the seeds round each term).
  EXPECT_WITHIN(m.n_params, 70.4e9, 0.005);
  // "2 * K * H * L = 2 * 8 * 128 * 80 = 160kB" in int8 (163,840 bytes = 160 KiB).
  EXPECT_EQ(kv_bytes_per_token(m, Precision{8, 8, 16}), 163840.0);
  // The min-topology table's "KV size / token": bf16 324kB, int8 162kB, int4 81kB.
  EXPECT_WITHIN(kv_bytes_per_token(m, Precision{16, 16, 16}), 324e3, 0.015);
  EXPECT_WITHIN(kv_bytes_per_token(m, Precision{8, 8, 16}), 162e3, 0.015);
  EXPECT_WITHIN(kv_bytes_per_token(m, Precision{4, 4, 16}), 81e3, 0.015);
  // "160e3 * 8192 * 32 = 41.9e9 ... total memory usage is 41.9e9 + 70e9 = 112GB"
  const GenerateStep s = generate_step(m, Precision{8, 8, 16}, aggregate(v5e(), 8), 32, 8192);
  EXPECT_WITHIN(s.kv_bytes, 41.9e9, 0.03);  // 42.9e9: 163,840 B/token, not the rounded 160e3
  EXPECT_WITHIN(s.kv_bytes + s.weight_bytes, 112e9, 0.015);
}

TEST(SeedsLlama3_70B, DecodeStep17msAnd1882TokensPerSecond) {
  // Batch 32, 8192 context, int8 params and KV, bf16 FLOPs, TPU v5e 4x2:
  // "112e9 / (8 * 8.1e11) = 17ms ... 32 / .017 = 1882 tokens / sec ... 235 tokens/sec/chip"
  PlanParams p;
  p.model = preset("llama-3-70b");
  p.chip = v5e();
  p.n_chips = 8;
  p.precision = Precision{8, 8, 16};
  p.context = 8192;
  p.batches = {32};
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  const PlanRow& r = plan->rows[0];
  EXPECT_FALSE(r.step.compute_bound);              // "well into the memory-bound regime"
  EXPECT_WITHIN(plan->critical_batch, 120, 0.01);  // "our critical batch size will be about 120"
  EXPECT_WITHIN(r.step_time_ms, 17, 0.02);         // 17.30 ms (seeds round 17.28 down to 17)
  EXPECT_WITHIN(r.tokens_per_s, 1882, 0.02);       // 1849
  EXPECT_WITHIN(r.tokens_per_s_per_chip, 235, 0.02);
  // The seeds' own inputs (70e9 params, 160e3 B/token, 8.1e11 B/s) give 17.27 ms.
  ModelCost rounded;
  rounded.n_params = rounded.n_params_active = 70e9;
  rounded.kv_elems_per_token = 160e3;
  HardwareSpec v5e_81 = v5e();
  v5e_81.hbm_bytes_per_s = 8.1e11;
  const GenerateStep s =
      generate_step(rounded, Precision{8, 8, 16}, aggregate(v5e_81, 8), 32, 8192);
  EXPECT_WITHIN(s.seconds * 1e3, 111.9e9 / 6.48e12 * 1e3, 0.001);
  // "If we were to run on a 4x4 ... our latency would drop to 17 / 2 = 8.5ms"
  p.n_chips = 16;
  auto plan16 = make_plan(p);
  ASSERT_TRUE(plan16.ok());
  EXPECT_WITHIN(plan16->rows[0].step_time_ms, 8.5, 0.02);
  EXPECT_WITHIN(plan16->rows[0].tokens_per_s_per_chip, r.tokens_per_s_per_chip, 1e-9);
}

TEST(SeedsLlama3_70B, ParetoFrontierOnV5e4x4) {
  // "Latency-throughput Pareto frontier for LLAMA 3-70B on TPU v5e 4x4 in int8" (8192 context):
  // "our latency can range anywhere from 5.5ms with low batch size to 20 ms with very large
  // batches"; int8 weights with bf16 FLOPs put the roofline at "BS 120".
  PlanParams p;
  p.model = preset("llama-3-70b");
  p.chip = v5e();
  p.n_chips = 16;
  p.precision = Precision{8, 8, 16};
  p.context = 8192;
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->rows.front().batch, 1);
  EXPECT_WITHIN(plan->rows.front().step_time_ms, 5.5, 0.01);
  const GenerateStep largest =
      generate_step(p.model, p.precision, plan->total, plan->max_batch, p.context);
  EXPECT_WITHIN(largest.seconds * 1e3, 20, 0.03);
  EXPECT_WITHIN(plan->critical_batch, 120, 0.01);
}

TEST(SeedsLlama3_70B, PrefillOf8192TokensTakes0_91s) {
  // "2 * 70e9 * 8192 / (16 * 1.97e14 * 0.4) = 0.91s"
  const double s = prefill_seconds(preset("llama-3-70b"), 8192, aggregate(v5e(), 16), 0.4, 16);
  EXPECT_WITHIN(s, 0.91, 0.01);
}

TEST(SeedsLlama3_70B, LargestBatchAndItsStepOnV5e4x4) {
  // bf16 on a 4x4: "remaining HBM for KV caches 116 [GB] ... num KV caches @ 8k 43" and
  // "16GB / 8.2e11 = 19ms" per step when HBM is full.
  PlanParams p;
  p.model = preset("llama-3-70b");
  p.chip = v5e();
  p.n_chips = 16;
  p.context = 8192;
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_NEAR(double(plan->max_batch), 43, 1);  // 42: the exact params leave 114.9 GB
  EXPECT_WITHIN(generate_step(p.model, p.precision, plan->total, plan->max_batch, 8192).seconds,
                0.019, 0.03);
  // Minimum chips for the weights alone: bf16 8.75 -> 9, int8 4.38 -> 5.
  EXPECT_EQ(plan->min_chips_weights, 9);
}

TEST(SeedsLlama3_70B, PrefillToGenerateRatioIsThree) {
  // "P / 0.91 = 32 * G / (0.019 * 512) or P = 3G"
  EXPECT_WITHIN(prefill_to_generate_ratio(0.91, 0.019, 32, 512), 3, 0.01);
  // The same from the model's own numbers: prefill 0.917 s; 19.35 ms per full-HBM step.
  const ModelCost m = preset("llama-3-70b");
  const HardwareSpec slice = aggregate(v5e(), 16);
  const double prefill = prefill_seconds(m, 8192, slice, 0.4, 16);
  const double step = generate_step(m, Precision{}, slice, 42, 8192).seconds;
  EXPECT_WITHIN(prefill_to_generate_ratio(prefill, step, 32, 512), 3, 0.02);
}

TEST(SeedsLlama3_70B, EvictionPerStep) {
  // "32 * (8192 + 4096) / 4096 = 96 tokens evicted per step"; "32 / 4096 sequences evicted"
  EXPECT_DOUBLE_EQ(kv_tokens_evicted_per_step(32, 8192, 4096), 96);
  EXPECT_DOUBLE_EQ(sequences_finished_per_step(32, 4096), 32.0 / 4096);
}

TEST(SeedsLlama3_70B, TensorParallelBounds) {
  TpMatmul mm;
  mm.d_model = 8192;
  mm.d_ff = 28672;
  mm.axes = 2;
  // "Y > F * n_axes / 2550 ... Y = 28672 * 2 / 2550 = 22" (2550 = C / W_ici of TPU v5p).
  EXPECT_WITHIN(tp_compute_bound_shards(mm, *find_hardware("TPU v5p")), 22.5, 0.01);
  // On v5e itself C / W_ici = 1.97e14 / 9e10 = 2189, so 26 ways.
  EXPECT_WITHIN(tp_compute_bound_shards(mm, v5e()), 2 * 28672 / (1.97e14 / 9e10), 1e-9);
  // "Y = F / (8 * B) ... batch size 64 ... Y = 28,672 / (8 * 64) = 56" with beta = W_hbm/W_ici = 8.
  HardwareSpec beta8 = v5e();
  beta8.hbm_bytes_per_s = 8 * beta8.link_bytes_per_s;
  mm.axes = 1;
  mm.batch = 64;
  EXPECT_WITHIN(tp_comm_bound_shards(mm, beta8), 56, 0.001);
  // "T_ici = (2 * 64 * 8192) / 9e10 = 11us, T_hbm = (2 * 8192 * 28,672) / (32 * 8.1e11) = 18us,
  // T_math = (2 * 64 * 8192 * 28,672) / (32 * 1.97e14) = 4us" (the expressions evaluate to
  // 11.6, 18.1 and 4.8 us), "so in theory we're still HBM bandwidth bound".
  HardwareSpec v5e_81 = v5e();
  v5e_81.hbm_bytes_per_s = 8.1e11;
  mm.shards = 32;
  const TpTimes t = tp_matmul_times(mm, v5e_81);
  EXPECT_WITHIN(t.ici_s, 2.0 * 64 * 8192 / 9e10, 1e-9);
  EXPECT_WITHIN(t.hbm_s, 2.0 * 8192 * 28672 / (32 * 8.1e11), 1e-9);
  EXPECT_WITHIN(t.math_s, 2.0 * 64 * 8192 * 28672 / (32 * 1.97e14), 1e-9);
  EXPECT_NEAR(t.ici_s * 1e6, 11, 1);
  EXPECT_NEAR(t.hbm_s * 1e6, 18, 1);
  EXPECT_NEAR(t.math_s * 1e6, 4, 1);
  EXPECT_FALSE(t.comm_bound);
}

TEST(SeedsWorkedProblems, EighteenBillionModel) {
  const ModelCost m = preset("worked-18b");
  // Q1: "64 * 4096 * (3*16384 + 2 * 256 * (32 + 8)) + 4096 * 32128 = 18.4e9"
  EXPECT_WITHIN(m.n_params, 18.4e9, 0.005);
  // Q1 KV per token in int8. The seeds' answer "L * K * H = 64 * 8 * 256 = 131kB" leaves out
  // the factor 2 for K and V that their own formula (2 * bytes * H * K * L) has: 262 kB.
  EXPECT_EQ(kv_bytes_per_token(m, Precision{8, 8, 8}), 2.0 * 64 * 8 * 256);
  // Q2: largest batch on a 4x4 at 128k context, int8: "(16 * 16e9 - 18.4e9) / 16.8e9 = 14"
  // with the seeds' halved KV; with both K and V it is 7 (and 56, not 112, for K = 1).
  PlanParams p;
  p.model = m;
  p.chip = v5e();
  p.n_chips = 16;
  p.precision = Precision{8, 8, 8};
  p.context = 128000;
  auto plan = make_plan(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->max_batch, 7);
  EXPECT_EQ(int64_t((16 * 16e9 - 18.4e9) / (131e3 * 128e3)), 14);
  // Q3: "18e9 / (8.1e11 * 16) = 1.3ms" (the expression is 1.39 ms; 1.40 ms at 8.2e11).
  EXPECT_WITHIN(plan->min_step_ms, 18e9 / (8.1e11 * 16) * 1e3, 0.025);
}

TEST(SeedsWorkedProblems, MoEVariant) {
  // Q5: E = 16, k = 2: "212e9 total parameters", "31.2e9" activated, and
  // "240 * (16 / 2) = 1920 tokens" to be FLOPs-bound on TPU v5e.
  const ModelCost m = preset("worked-18b-moe");
  EXPECT_WITHIN(m.n_params, 212e9, 0.005);
  EXPECT_WITHIN(m.n_params_active, 31.2e9, 0.005);
  EXPECT_WITHIN(critical_batch(m, Precision{}, v5e()), 1920, 0.01);
  // KV is unchanged by the MoE (Q5.3).
  EXPECT_EQ(m.kv_elems_per_token, preset("worked-18b").kv_elems_per_token);
  // Step time at batch 1 reads the shared weights plus k of E experts, not all 212B.
  const double one = weight_bytes_read(m, Precision{}, 1);
  EXPECT_WITHIN(one, 2 * m.n_params_active, 1e-9);
  EXPECT_WITHIN(weight_bytes_read(m, Precision{}, 1e6), 2 * m.n_params, 1e-9);
}

TEST(SeedsPalm, ParameterCounts) {
  EXPECT_WITHIN(preset("palm-62b").n_params, 62e9, 0.01);
  EXPECT_WITHIN(preset("palm-540b").n_params, 540e9, 0.01);
  // Multi-query attention: one KV head of 256 per layer.
  EXPECT_EQ(preset("palm-540b").kv_elems_per_token, 2.0 * 118 * 256);
}

TEST(SeedsGuide, KvCacheSizeGbExamples) {
  // llm-inference-complete-guide.md kv_cache_size_gb(n_layers, n_kv_head, d_head, seq_len)
  // = 2 * L * K * H * seq * 2 bytes / 1024^3. Its printed comments disagree with the function
  // for four of the five calls (they match L = 64 and / 1e9 for the 70B lines); we reproduce
  // what the function computes: 0.50, 1.25, 40.00, 60.00 and 10.00 GiB.
  struct Case {
    int64_t layers, kv_heads, d_head, seq;
    double gib;
  };
  for (const Case& c :
       {Case{32, 8, 128, 4096, 0.50}, Case{80, 8, 128, 4096, 1.25}, Case{80, 8, 128, 131072, 40.00},
        Case{120, 128, 128, 8192, 60.00}, Case{80, 64, 128, 4096, 10.00}}) {
    ModelShape s;
    s.n_layer = int(c.layers);
    s.n_kv_head = int(c.kv_heads);
    s.head_dim = int(c.d_head);
    const ModelCost m = model_cost(s);
    const double gib = kv_bytes_per_token(m, Precision{}) * double(c.seq) / (1024.0 * 1024 * 1024);
    EXPECT_DOUBLE_EQ(gib, c.gib) << c.layers << " layers, " << c.kv_heads << " KV heads";
  }
  // The preset agrees with the guide's call for Llama 3 8B.
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-8b"), Precision{}), 2.0 * 32 * 8 * 128 * 2);
}

TEST(SeedsGuide, EstimateThroughputExamples) {
  // estimate_throughput(70, 2.0, 2.0): "Time per token (batch=1): 70.0 ms ... 14.3" tok/s;
  // (70, 0.5, 3.35): "10.4 ms ... 95.7"; batch 32: "3062.9". Weights only (no KV).
  ModelCost m;
  m.n_params = m.n_params_active = 70e9;
  HardwareSpec a100 = *find_hardware("A100");
  a100.hbm_bytes_per_s = 2.0e12;  // the function's A100 default
  GenerateStep s = generate_step(m, Precision{16, 16, 16}, a100, 1, 4096);
  EXPECT_WITHIN(s.seconds * 1e3, 70.0, 0.001);
  EXPECT_WITHIN(1 / s.seconds, 14.3, 0.005);
  const HardwareSpec& h100 = *find_hardware("H100");
  s = generate_step(m, Precision{4, 16, 16}, h100, 1, 4096);
  EXPECT_WITHIN(s.seconds * 1e3, 10.4, 0.005);
  EXPECT_WITHIN(1 / s.seconds, 95.7, 0.001);
  s = generate_step(m, Precision{4, 16, 16}, h100, 32, 4096);
  EXPECT_WITHIN(32 / s.seconds, 3062.9, 0.001);
}

}  // namespace
}  // namespace sluice
